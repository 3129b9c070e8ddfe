//! The kernel UDP backend (`port.backend = "udp"`) on real packets: two network namespaces
//! joined by a veth pair, `ferroce-dp run` in each, a mixed verified workload.
//!
//! - UDP backend ↔ UDP backend, lossless and with 1 % injected loss each way, the engines
//!   running as `nobody` (no root, no hugepages, no DPDK device);
//! - UDP backend ↔ DPDK backend (net_af_packet on the other end of the veth), both ways
//!   round, with 1 % loss.
//!
//! Addresses: 198.19.X.0/24 with X = 60 + this process's id % 40 (the kernel has .1/.2; the DPDK
//! engine .12, an address its namespace's kernel does not have). Root is needed only to make
//! the namespaces (the test skips without it).

mod common;

use common::{last_json, need_root, serial, Dir, Proc};
use ferroce_dataplane::netns::VethPair;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_ferroce-dp");

/// The third octet of this process's addresses.
fn net() -> u32 {
    60 + std::process::id() % 40
}

fn kernel_ip(side: usize) -> String {
    format!("198.19.{}.{}", net(), side + 1)
}

#[derive(Clone, Copy, PartialEq)]
enum Backend {
    Udp,
    Dpdk,
}

struct Side {
    backend: Backend,
    loss: f64,
}

impl Side {
    /// The engine's own address: the kernel's with the UDP backend (it binds to it), one the
    /// kernel does not have with af_packet (the kernel sees every frame too).
    fn addr(&self, side: usize) -> String {
        match self.backend {
            Backend::Udp => kernel_ip(side),
            Backend::Dpdk => format!("198.19.{}.{}", net(), side + 11),
        }
    }
}

fn config(dir: &Path, name: &str, side: usize, sides: &[Side; 2], veth: &VethPair) -> PathBuf {
    let me = &sides[side];
    let role = if side == 0 { "client" } else { "server" };
    let port = match me.backend {
        Backend::Udp => "backend = \"udp\"".to_string(),
        Backend::Dpdk => format!(
            "vdev = \"net_af_packet{side},iface={},framecnt=8192\"",
            veth.ifname[side]
        ),
    };
    let text = format!(
        r#"
[port]
{port}
mtu = 1500

[net]
address = "{addr}"

[transport]
paths = 4
seed = {seed}
line_rate_mbps = 2000
min_rto_us = 10000
initial_rto_us = 10000

[fault.tx]
loss = {loss}
seed = {fseed}

[workload]
role = "{role}"
peer = "{peer}"
streams = 3
messages = 120
sizes = [1, 64, 1000, 1408, 1409, 4097, 20000, 65536]
ops = ["send", "send_imm", "write", "write_imm", "read", "fetch_add", "cmp_swap"]
depth = 8
recv_depth = 32
timeout_s = 45
result_json = "{result}"
"#,
        addr = me.addr(side),
        seed = 300 + side,
        loss = me.loss,
        fseed = 17 + side,
        peer = sides[1].addr(1),
        result = dir.join(format!("{name}-{role}.json")).display(),
    );
    let p = dir.join(format!("{name}-{role}.toml"));
    std::fs::write(&p, text).expect("write config");
    p
}

/// `ferroce-dp run --json` in `ns`; a UDP-backend engine as `nobody` when `unprivileged`.
fn spawn(ns: &str, cfg: &Path, unprivileged: bool) -> Proc {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]);
    if unprivileged {
        c.args([
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "--inh-caps=-all",
        ]);
    }
    if unprivileged {
        // DPDK keeps its runtime directory under $XDG_RUNTIME_DIR when not root (else in
        // /tmp/dpdk, owned by nobody and left behind): the test's own directory instead.
        c.env("XDG_RUNTIME_DIR", nobody_dir(&cfg.with_extension("rt")));
    }
    let c = c
        .args([BIN, "run", "--json", "--config"])
        .arg(cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ferroce-dp");
    Proc(Some(c))
}

/// `d`, created and owned by nobody (uid and gid 65534).
fn nobody_dir(d: &Path) -> &Path {
    std::fs::create_dir_all(d).expect("create the runtime dir");
    std::os::unix::fs::chown(d, Some(65534), Some(65534)).expect("chown the runtime dir");
    d
}

fn have_setpriv() -> bool {
    Command::new("setpriv")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Run a client (side 0) and a server (side 1); returns their reports.
fn run_pair(dir: &Path, name: &str, veth: &VethPair, sides: [Side; 2]) -> (Value, Value) {
    let unpriv = |s: &Side| s.backend == Backend::Udp && have_setpriv();
    let scfg = config(dir, name, 1, &sides, veth);
    let ccfg = config(dir, name, 0, &sides, veth);
    let server = spawn(&veth.ns[1], &scfg, unpriv(&sides[1]));
    std::thread::sleep(Duration::from_millis(300));
    let client = spawn(&veth.ns[0], &ccfg, unpriv(&sides[0]));
    let (cok, cout, cerr, _) = client.wait(Duration::from_secs(60));
    let (sok, sout, serr, _) = server.wait(Duration::from_secs(20));
    let (c, s) = (last_json(&cout), last_json(&sout));
    let w = &c["workload"];
    println!(
        "udp_backend {name:<16}: client ok {cok} ({} WRs, {} B verified, {:.3} Gbit/s), server \
         ok {sok}; retx {} rto {}; faults client {} server {}\n    client udp {}\n    server \
         udp {}",
        w["completed"],
        w["bytes"],
        w["goodput_gbps"].as_f64().unwrap_or(0.0),
        c["counters"]["transport"]["retx_pkts"],
        c["counters"]["transport"]["timeouts"],
        c["counters"]["fault_tx"]["dropped_random"],
        s["counters"]["fault_tx"]["dropped_random"],
        c["counters"]["udp"],
        s["counters"]["udp"],
    );
    assert!(
        cok && w["ok"] == true,
        "{name}: client failed: {}\nstderr: {cerr}\nserver stderr: {serr}",
        serde_json::to_string(&w["errors"]).unwrap_or_default()
    );
    assert!(
        sok && s["workload"]["ok"] == true,
        "{name}: server failed: {}\nstderr: {serr}",
        serde_json::to_string(&s["workload"]["errors"]).unwrap_or_default()
    );
    // Every message of every stream completed and was verified.
    assert_eq!(w["completed"], 360, "{name}: client completions");
    assert!(
        w["bytes"].as_u64().unwrap_or(0) > 1_000_000,
        "{name}: bytes"
    );
    for (side, r) in [(0, &c), (1, &s)] {
        let udp = &r["counters"]["udp"];
        if sides[side].backend == Backend::Udp {
            assert!(
                udp["tx_datagrams"].as_u64().unwrap_or(0) > 0
                    && udp["rx_datagrams"].as_u64().unwrap_or(0) > 0,
                "{name}: side {side} did not use its sockets: {udp}"
            );
            assert_eq!(udp["tx_errors"], 0, "{name}: side {side}: {udp}");
            assert_eq!(udp["tx_not_udp"], 0, "{name}: side {side}: {udp}");
            // The paths' entropy: the client's 4 paths left from 4 source ports of their
            // own, each through a socket of its own.
            assert_eq!(udp["src_port_fallback"], 0, "{name}: side {side}: {udp}");
            if side == 0 {
                assert!(
                    udp["sockets_opened"].as_u64().unwrap_or(0) >= 4,
                    "{name}: client opened too few source-port sockets: {udp}"
                );
            }
            assert_eq!(
                r["counters"]["engine"]["arp_queued"], 0,
                "{name}: side {side}: the UDP backend needs no ARP"
            );
        } else {
            assert!(udp.is_null(), "{name}: side {side} is DPDK: {udp}");
        }
        if sides[side].loss > 0.0 {
            assert!(
                r["counters"]["fault_tx"]["dropped_random"]
                    .as_u64()
                    .unwrap_or(0)
                    > 0,
                "{name}: side {side}: no loss injected"
            );
        }
    }
    (c, s)
}

#[test]
fn udp_backend_to_udp_backend_two_namespaces() {
    if !need_root("udp_backend_to_udp_backend_two_namespaces") {
        return;
    }
    let _g = serial();
    let dir = Dir(std::env::temp_dir().join(format!("ferroce-udp-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).expect("temp dir");
    // The unprivileged engines read their configs and write their reports here.
    let _ = Command::new("chmod").arg("777").arg(&dir.0).status();
    let veth = VethPair::create("u", [&kernel_ip(0), &kernel_ip(1)], 24).expect("veth pair");
    let udp = |loss| Side {
        backend: Backend::Udp,
        loss,
    };
    run_pair(&dir.0, "udp-udp", &veth, [udp(0.0), udp(0.0)]);
    run_pair(&dir.0, "udp-udp-loss1", &veth, [udp(0.01), udp(0.01)]);
}

#[test]
fn udp_backend_to_dpdk_backend_two_namespaces() {
    if !need_root("udp_backend_to_dpdk_backend_two_namespaces") {
        return;
    }
    let _g = serial();
    let dir = Dir(std::env::temp_dir().join(format!("ferroce-udpd-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).expect("temp dir");
    let _ = Command::new("chmod").arg("777").arg(&dir.0).status();
    let veth = VethPair::create("v", [&kernel_ip(0), &kernel_ip(1)], 24).expect("veth pair");
    let side = |backend, loss| Side { backend, loss };
    // The UDP-backend client against a DPDK server, 1 % loss each way.
    run_pair(
        &dir.0,
        "udp-dpdk-loss1",
        &veth,
        [side(Backend::Udp, 0.01), side(Backend::Dpdk, 0.01)],
    );
    // And round: a DPDK client against a UDP-backend server.
    run_pair(
        &dir.0,
        "dpdk-udp",
        &veth,
        [side(Backend::Dpdk, 0.0), side(Backend::Udp, 0.01)],
    );
}

/// `ferroce-dp bench --pmd udp`: the backend's raw rate and the transport's over it, short,
/// every row verified (the benchmark makes and removes its own namespace).
#[test]
fn udp_backend_bench_rows() {
    if !need_root("udp_backend_bench_rows") {
        return;
    }
    let _g = serial();
    let out = Command::new("timeout")
        .args(["-k", "5", "120", BIN, "bench", "--pmd", "udp", "--no-huge"])
        .args(["--seconds", "0.2", "--payloads", "64,1408", "--csv", "-"])
        .stdin(Stdio::null())
        .output()
        .expect("run ferroce-dp bench");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    println!("{text}");
    assert!(out.status.success(), "bench failed: {text}\n{err}");
    let rows: Vec<Vec<&str>> = text
        .lines()
        .filter(|l| l.starts_with("kernel_udp,"))
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
    for r in rows {
        let raw: f64 = r[2].parse().unwrap_or(0.0);
        let fer: f64 = r[3].parse().unwrap_or(0.0);
        assert!(raw > 0.0 && fer > 0.0, "a rate of zero: {r:?}");
    }
}
