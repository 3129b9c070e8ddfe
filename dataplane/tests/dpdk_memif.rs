//! Two `ferroce-dp` processes joined by one net_memif interface (shared memory over a unix
//! socket; no kernel interface, so nothing leaves this machine), started in the order that
//! used to leave the memif link down for good: the memif *client* first, its server a second
//! later. DPDK's memif client connects only when its port starts and never retries (and a
//! server whose port is not started yet refuses it), so the engine restarts a down memif port
//! until its link comes up; the verified transfer must then complete.

mod common;

use common::{last_json, need_root, Dir, Proc};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_ferroce-dp");
const ENGINE: [&str; 2] = ["198.18.5.11", "198.18.5.12"];

fn config(dir: &Path, side: usize, socket: &Path) -> std::path::PathBuf {
    let role = if side == 0 { "client" } else { "server" };
    let text = format!(
        r#"
[port]
vdev = "net_memif{side},role={role},socket={socket},id=0,rsize=10,bsize=2048"
mtu = 1500

[net]
address = "{addr}"

[transport]
paths = 4
seed = {seed}

[workload]
role = "{role}"
peer = "{peer}"
streams = 2
messages = 200
sizes = [1, 1408, 5000, 65536]
ops = ["send", "write", "read"]
depth = 8
recv_depth = 32
timeout_s = 30
"#,
        socket = socket.display(),
        addr = ENGINE[side],
        seed = 300 + side,
        peer = ENGINE[1],
    );
    let p = dir.join(format!("{role}.toml"));
    std::fs::write(&p, text).expect("write config");
    p
}

fn spawn(cfg: &Path) -> Proc {
    let c = Command::new(BIN)
        .args(["run", "--json", "--config"])
        .arg(cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ferroce-dp");
    Proc(Some(c))
}

#[test]
fn memif_client_started_before_its_server_connects_and_transfers() {
    if !need_root("memif_client_started_before_its_server_connects_and_transfers") {
        return;
    }
    let dir = Dir(std::env::temp_dir().join(format!("ferroce-memif-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).expect("temp dir");
    let socket = dir.0.join("memif.sock");
    let ccfg = config(&dir.0, 0, &socket);
    let scfg = config(&dir.0, 1, &socket);
    let client = spawn(&ccfg);
    // The client's port starts with nobody listening (its connect fails); the server comes
    // while the client's OPEN is still being resent (2.3 s of tries).
    std::thread::sleep(Duration::from_millis(1000));
    let server = spawn(&scfg);
    let (cok, cout, cerr, _) = client.wait(Duration::from_secs(60));
    let (sok, sout, serr, _) = server.wait(Duration::from_secs(20));
    let c = last_json(&cout);
    let s = last_json(&sout);
    let tail = |e: &str| e.lines().rev().take(15).collect::<Vec<_>>().join("\n");
    assert!(
        cok && sok,
        "client ok {cok}, server ok {sok}\nclient: {}\nserver: {}\nclient stderr:\n{}\nserver stderr:\n{}",
        c,
        s,
        tail(&cerr),
        tail(&serr)
    );
    let w = &c["workload"];
    assert_eq!(w["ok"].as_bool(), Some(true), "{w}");
    assert_eq!(w["errors"].as_array().map(|e| e.len()), Some(0), "{w}");
    assert_eq!(w["completed"].as_u64(), Some(400), "{w}");
    // The client's port was restarted at least once to connect.
    let restarts = c["counters"]["driver"]["restarts"].as_u64().unwrap_or(0);
    assert!(restarts >= 1, "no restart of the memif client: {c}");
}
