//! A peer dies and comes back, on real packets (spec/transport.md §2.6): two `ferroce-dp`
//! processes in two namespaces (veth, net_af_packet, addresses 198.18.7.0/24), a long
//! verified WRITE/SEND transfer, and the server SIGKILLed in the middle of it. The client
//! (the survivor) must fail its outstanding work with RetryExceeded within its retry time,
//! never hang and never count a WR it did not get acknowledged; then a restarted server (same
//! configuration and seed: a new incarnation) and a new client complete a fresh transfer,
//! every byte verified.

mod common;

use common::{last_json, need_root, serial, Dir, Proc};
use ferroce_dataplane::netns::VethPair;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_ferroce-dp");
const KERNEL: [&str; 2] = ["198.18.7.1", "198.18.7.2"];
const ENGINE: [&str; 2] = ["198.18.7.11", "198.18.7.12"];
/// The transport's retry settings here: RTOs from `MIN_RTO_MS` doubling to `MAX_RTO_MS`,
/// failure after `RETRY_LIMIT` (the default) expiries without progress.
const MIN_RTO_MS: u64 = 10;
const MAX_RTO_MS: u64 = 100;
const RETRY_LIMIT: u64 = 16;

/// `ferroce-dp run --config cfg` in namespace `ns`. `ip netns exec` execs the program: the
/// child's PID is ferroce-dp's, so a kill reaches it.
fn spawn(ns: &str, cfg: &Path) -> Proc {
    let c = Command::new("ip")
        .args(["netns", "exec", ns, BIN, "run", "--json", "--config"])
        .arg(cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ferroce-dp");
    Proc(Some(c))
}

fn config(dir: &Path, name: &str, side: usize, veth: &VethPair, messages: u32) -> PathBuf {
    let role = if side == 0 { "client" } else { "server" };
    let text = format!(
        r#"
[port]
vdev = "net_af_packet{side},iface={iface},framecnt=8192"
mtu = 1500

[net]
address = "{addr}"

[transport]
paths = 1
seed = {seed}
line_rate_mbps = 2000
min_rto_us = {min_rto}
initial_rto_us = {min_rto}
max_rto_us = {max_rto}

[counters]
json = "{counters}"
interval_ms = 20

[workload]
role = "{role}"
peer = "{peer}"
streams = 2
messages = {messages}
sizes = [1000, 16384, 65536]
ops = ["write", "send", "write_imm"]
depth = 8
recv_depth = 32
timeout_s = 30
"#,
        iface = veth.ifname[side],
        addr = ENGINE[side],
        seed = 300 + side,
        min_rto = MIN_RTO_MS * 1000,
        max_rto = MAX_RTO_MS * 1000,
        counters = dir.join(format!("{name}-{role}-counters.json")).display(),
        peer = ENGINE[1],
    );
    let p = dir.join(format!("{name}-{role}.toml"));
    std::fs::write(&p, text).expect("write config");
    p
}

/// The client's transmitted packets so far, from its counters file (0 until it exists).
fn client_tx_pkts(path: &Path) -> u64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v["transport"]["tx_pkts"].as_u64())
        .unwrap_or(0)
}

/// Whether the client's counters file shows its connection Failed.
fn client_conn_failed(path: &Path) -> bool {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| {
            v["connections"]
                .as_array()
                .map(|a| a.iter().any(|c| c["state"].as_str() == Some("failed")))
        })
        .unwrap_or(false)
}

/// Start the server and wait until its engine runs (it writes its counters file), so the
/// client's OPENs (16 tries over 111 ms) find it.
fn start_server(ns: &str, cfg: &Path, counters: &Path) -> Proc {
    let p = spawn(ns, cfg);
    let t = Instant::now();
    while !counters.exists() && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(10));
    }
    p
}

/// The longest the survivor may take from the death to its error completion: the RTO
/// schedule to the retry limit (10, 20, 40, 80 ms, then 100 ms each: 1.35 s), plus the
/// RTO already running at the kill and the engine's and the process's exit (generous: the
/// machine's two cores are shared).
fn retry_bound() -> Duration {
    let mut rto = MIN_RTO_MS;
    let mut total = 0;
    for _ in 0..RETRY_LIMIT {
        total += rto;
        rto = (rto * 2).min(MAX_RTO_MS);
    }
    Duration::from_millis(total + MAX_RTO_MS + 3_000)
}

// checks: [CONN-5] [LOSS-3]
#[test]
fn dpdk_peer_killed_mid_transfer_fails_cleanly_and_a_restarted_peer_serves_again() {
    if !need_root("dpdk_peer_killed_mid_transfer_fails_cleanly_and_a_restarted_peer_serves_again") {
        return;
    }
    let _g = serial();
    let veth = VethPair::create("k", KERNEL, 24).expect("veth pair in two namespaces");
    let dir = Dir(std::env::temp_dir().join(format!("ferroce-death-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();

    // 1. A long transfer; the server is killed once the client has sent a few thousand
    //    packets.
    let scfg = config(&dir.0, "kill", 1, &veth, 1_000_000);
    let ccfg = config(&dir.0, "kill", 0, &veth, 1_000_000);
    let ccounters = dir.0.join("kill-client-counters.json");
    let mut server = start_server(&veth.ns[1], &scfg, &dir.0.join("kill-server-counters.json"));
    let client = spawn(&veth.ns[0], &ccfg);
    let t = Instant::now();
    while client_tx_pkts(&ccounters) < 3_000 && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let sent_before = client_tx_pkts(&ccounters);
    if sent_before < 3_000 {
        let (_, cout, cerr, _) = client.wait(Duration::ZERO);
        panic!("the transfer never got going ({sent_before} packets)\nclient: {cout}\n{cerr}");
    }
    server.kill();
    let killed = Instant::now();
    // When the client's connection fails (its counters file, written every 20 ms): the
    // moment its outstanding WRs complete in error.
    let mut failed_after = None;
    while killed.elapsed() < 2 * retry_bound() {
        if client_conn_failed(&ccounters) {
            failed_after = Some(killed.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let (cok, cout, cerr, in_time) = client.wait(Duration::from_secs(30));
    let took = killed.elapsed();
    let c = last_json(&cout);
    let w = &c["workload"];
    let errors: Vec<String> = w["errors"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| e.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    println!(
        "PEER DEATH native: connection Failed (error completions) {:.0} ms after the server's \
         SIGKILL, client exited after {:.0} ms (bound {:.0} ms); {} WRs completed before, {} \
         errors, first two: {:?}; transport timeouts {}",
        failed_after.map_or(f64::NAN, |d| d.as_secs_f64() * 1e3),
        took.as_secs_f64() * 1e3,
        retry_bound().as_secs_f64() * 1e3,
        w["completed"],
        errors.len(),
        &errors[..errors.len().min(2)],
        c["counters"]["transport"]["timeouts"],
    );
    assert!(
        in_time,
        "the client hung after its peer died\nstderr: {cerr}"
    );
    assert!(!cok && w["ok"] == false, "the client claimed success: {w}");
    assert!(
        errors.iter().any(|e| e.contains("RetryExceeded")),
        "no RetryExceeded completion: {errors:?}\nstderr: {cerr}"
    );
    // Nothing but the death's consequences: no unexpected, duplicate or out-of-order
    // completion, no wrong data.
    assert!(
        errors.iter().all(|e| e.contains("RetryExceeded")
            || e.contains("Flushed")
            || e.contains("connection failed")
            || e.contains("refused")),
        "{errors:?}"
    );
    assert!(
        failed_after.is_some_and(|d| d <= retry_bound()),
        "the connection did not fail within the retry time {:?}: {failed_after:?}",
        retry_bound()
    );
    assert!(
        took <= retry_bound() + Duration::from_secs(1),
        "the client exited {took:?} after the death"
    );

    // 2. The server restarts with the same configuration (a new incarnation); a new client's
    //    fresh transfer succeeds, every byte verified on both sides.
    let scfg = config(&dir.0, "again", 1, &veth, 100);
    let ccfg = config(&dir.0, "again", 0, &veth, 100);
    let server = start_server(
        &veth.ns[1],
        &scfg,
        &dir.0.join("again-server-counters.json"),
    );
    let client = spawn(&veth.ns[0], &ccfg);
    let (cok, cout, cerr, _) = client.wait(Duration::from_secs(60));
    let (sok, sout, serr, _) = server.wait(Duration::from_secs(20));
    let (c, s) = (last_json(&cout), last_json(&sout));
    println!(
        "PEER DEATH native, after restart: client ok {} ({} WRs, {} B), server ok {}",
        c["workload"]["ok"],
        c["workload"]["completed"],
        c["workload"]["bytes"],
        s["workload"]["ok"]
    );
    assert!(
        cok && c["workload"]["ok"] == true,
        "client after restart: {}\nstderr: {cerr}",
        c["workload"]
    );
    assert!(
        sok && s["workload"]["ok"] == true,
        "server after restart: {}\nstderr: {serr}",
        s["workload"]
    );
}
