//! `ferroce compliance` against real targets over real sockets, each in network namespaces of
//! its own (addresses from 198.19.0.0/16, a block per process):
//! - ferroce's DPDK engine (`workload.role = "compliance"`, net_af_packet on a veth) with the
//!   suite's kernel UDP socket in the other namespace: every case passes; and the same engine
//!   on the kernel UDP backend (`port.backend = "udp"`): every case passes;
//! - the transport's endpoint on a kernel UDP socket: every case passes, and with each of seven
//!   wire misbehaviours switched on, the case that covers it fails naming its requirement.

mod common;

use common::broken_peer::{Broken, BrokenPeer};
use common::{addr, need_root, run_limited, LoNs, Proc};
use ferroce_dataplane::netns::VethPair;
use serde_json::Value;
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_ferroce");
/// One target at a time: the machine is small and the suite's "no answer" windows are timed.
static SERIAL: Mutex<()> = Mutex::new(());

/// Run the suite in `ns`; its JSON report (and the raw output for messages).
fn suite(
    ns: &str,
    target: &str,
    bind: &str,
    keys: &str,
    cases: &[&str],
    extra: &[&str],
) -> (Value, String) {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns, BIN, "compliance", "--json"])
        .args(std::env::var_os("FERROCE_COMPLIANCE_TRACE").map(|_| "--trace"))
        .args(["--target", target, "--bind", bind, "--rkeys", keys]);
    for c in cases {
        cmd.args(["--case", c]);
    }
    cmd.args(extra);
    let (code, out, err) = run_limited(&mut cmd, Duration::from_secs(90));
    let v: Value = serde_json::from_str(&out).unwrap_or(Value::Null);
    assert!(
        code.is_some() && v.is_object(),
        "suite exit {code:?}, no report:\n{out}\n{err}"
    );
    (v, format!("{out}\n{err}"))
}

fn results(v: &Value) -> Vec<(String, String, String)> {
    v["cases"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    (
                        c["name"].as_str().unwrap_or("").to_string(),
                        c["result"].as_str().unwrap_or("").to_string(),
                        c["failure"]["requirement"]
                            .as_str()
                            .unwrap_or("")
                            .to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn assert_all_pass(v: &Value, out: &str, what: &str) {
    let r = results(v);
    let want = if std::env::var_os("FERROCE_COMPLIANCE_CASES").is_some() {
        1
    } else {
        15
    };
    assert!(r.len() >= want, "{what}: only {} cases: {out}", r.len());
    let bad: Vec<String> = v["cases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["result"] == "fail")
        .map(|c| format!("{}: {}", c["name"], c["failure"]))
        .collect();
    assert!(bad.is_empty(), "{what}: failed\n{}\n{out}", bad.join("\n"));
    for c in v["cases"].as_array().into_iter().flatten() {
        println!(
            "  {:<14} {:<5} {:>7.1} ms  {}",
            c["name"].as_str().unwrap_or(""),
            c["result"].as_str().unwrap_or(""),
            c["elapsed_ms"].as_f64().unwrap_or(0.0),
            c["notes"]
        );
    }
    println!(
        "{what}: {} passed, {} n/a of {}",
        v["passed"],
        v["not_applicable"],
        r.len()
    );
}

#[test]
fn compliance_suite_passes_against_the_dpdk_engine_over_veth() {
    if !need_root("compliance_suite_passes_against_the_dpdk_engine_over_veth") {
        return;
    }
    against_engine(false);
}

/// The same engine on the kernel UDP backend (`port.backend = "udp"`, bound to the kernel's
/// own address in its namespace): every case passes too.
#[test]
fn compliance_suite_passes_against_the_engine_on_the_udp_backend() {
    if !need_root("compliance_suite_passes_against_the_engine_on_the_udp_backend") {
        return;
    }
    against_engine(true);
}

/// `ferroce dataplane run` as a compliance target in one namespace of a veth pair (on
/// net_af_packet, or with `udp` on the kernel UDP backend), the suite in the other.
fn against_engine(udp: bool) {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (k0, k1) = (addr(1), addr(2));
    // af_packet: an address the namespace's kernel does not have; UDP: the kernel's own.
    let engine = if udp { k1.clone() } else { addr(12) };
    let veth = VethPair::create(if udp { "cu" } else { "cp" }, [&k0, &k1], 24).expect("veth pair");
    let dir = TmpDir(std::env::temp_dir().join(format!(
        "ferroce-compliance-{}-{}",
        std::process::id(),
        if udp { "udp" } else { "dpdk" }
    )));
    std::fs::create_dir_all(&dir.0).unwrap();
    let cfg = dir.0.join("target.toml");
    let port = if udp {
        "backend = \"udp\"".to_string()
    } else {
        format!(
            "vdev = \"net_af_packet1,iface={},framecnt=4096\"",
            veth.ifname[1]
        )
    };
    std::fs::write(
        &cfg,
        format!(
            r#"
[port]
{port}
mtu = 1500

[net]
address = "{engine}"

[transport]
paths = 1
line_rate_mbps = 10000
min_rto_us = 10000
initial_rto_us = 10000

[workload]
role = "compliance"
timeout_s = 120
"#
        ),
    )
    .unwrap();
    let child = Command::new("ip")
        .args([
            "netns",
            "exec",
            &veth.ns[1],
            BIN,
            "dataplane",
            "run",
            "--config",
        ])
        .arg(&cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the engine");
    let mut engine_proc = Proc(Some(child));
    let stdout = engine_proc.0.as_mut().unwrap().stdout.take().unwrap();
    let stderr = engine_proc.0.as_mut().unwrap().stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    // Drained, so the engine never blocks on a full pipe; kept for a failure's message.
    let err_log = std::sync::Arc::new(Mutex::new(String::new()));
    let el = err_log.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if let Ok(mut e) = el.lock() {
                e.push_str(&line);
                e.push('\n');
            }
        }
    });
    let ready = ferroce_dataplane::compliance_target::READY;
    let keys = loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(l) if l.starts_with(ready) => break l[ready.len()..].trim().to_string(),
            Ok(_) => continue,
            Err(_) => panic!(
                "the engine never printed {ready:?}; its stderr:\n{}",
                err_log.lock().map(|e| e.clone()).unwrap_or_default()
            ),
        }
    };
    // FERROCE_COMPLIANCE_CASES="a b" runs only those (for debugging).
    let only = std::env::var("FERROCE_COMPLIANCE_CASES").unwrap_or_default();
    let only: Vec<&str> = only.split_whitespace().collect();
    let vdir = vectors_dir();
    let (v, out) = suite(
        &veth.ns[0],
        &engine,
        &k0,
        &keys,
        &only,
        &["--vectors", &vdir],
    );
    // SIGTERM first: the engine stops, prints its summary and lets DPDK clean up after
    // itself; SIGKILL (the guard) only if it does not end in time.
    let pid = engine_proc.0.as_ref().map(|c| c.id()).unwrap_or(0);
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let c = engine_proc.0.as_mut().unwrap();
    let t0 = std::time::Instant::now();
    while c.try_wait().ok().flatten().is_none() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(engine_proc);
    let engine_log = err_log.lock().map(|e| e.clone()).unwrap_or_default();
    println!(
        "engine pid {pid}: {}",
        engine_log.lines().last().unwrap_or("")
    );
    assert_all_pass(
        &v,
        &out,
        if udp {
            "engine on the UDP backend"
        } else {
            "DPDK engine"
        },
    );
    assert_vectors_replayed(&v, &out);
}

/// The behavioural vectors, replayed by `--vectors`.
fn vectors_dir() -> String {
    format!("{}/../spec/vectors/behaviour", env!("CARGO_MANIFEST_DIR"))
}

/// Every vector was reported; those that need no set-up of their own (9 of the 14 today)
/// passed, the others are n/a with a reason, none failed (assert_all_pass).
fn assert_vectors_replayed(v: &Value, out: &str) {
    let r = results(v);
    let vec: Vec<&(String, String, String)> =
        r.iter().filter(|c| c.0.starts_with("vector:")).collect();
    assert!(
        vec.len() >= 14,
        "only {} vectors reported: {out}",
        vec.len()
    );
    let passed: Vec<&str> = vec
        .iter()
        .filter(|c| c.1 == "pass")
        .map(|c| c.0.as_str())
        .collect();
    println!("vectors replayed and passed: {passed:?}");
    assert!(passed.len() >= 9, "vectors passed: {passed:?}: {out}");
}

/// A directory removed however the test ends.
struct TmpDir(std::path::PathBuf);

impl Drop for TmpDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A peer on a kernel socket in a fresh namespace; the suite's report against it.
fn against_peer(tag: &str, broken: Broken, cases: &[&str], extra: &[&str]) -> (Value, String) {
    let (me, them) = (addr(101), addr(102));
    let ns = LoNs::create(tag, &[&me, &them]);
    let peer = BrokenPeer::start(&ns.0, them.parse().unwrap(), broken);
    let r = suite(&ns.0, &them, &me, &peer.keys.to_arg(), cases, extra);
    drop(peer);
    r
}

#[test]
fn compliance_suite_passes_against_the_transport_endpoint_on_kernel_udp() {
    if !need_root("compliance_suite_passes_against_the_transport_endpoint_on_kernel_udp") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let vdir = vectors_dir();
    let (v, out) = against_peer("ck", Broken::None, &[], &["--vectors", &vdir]);
    assert_all_pass(&v, &out, "transport endpoint on kernel UDP");
    assert_vectors_replayed(&v, &out);
}

#[test]
fn compliance_suite_names_the_requirement_a_broken_peer_breaks() {
    if !need_root("compliance_suite_names_the_requirement_a_broken_peer_breaks") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // (misbehaviour, the case that must catch it, the requirement it must name)
    let table = [
        (Broken::CloseAckReason, "close", "WIRE-28"),
        (Broken::NoCrcCheck, "malformed", "VAL-6"),
        (Broken::ProbeAckOwnPort, "probe", "PATH-8"),
        (Broken::NoTsEcho, "duplicate", "ACK-4"),
        (Broken::NoSack, "sack", "ACK-1"),
        (Broken::WrongNackReason, "remote_access", "SEC-2"),
        (Broken::NoSequenceNack, "window", "RECV-4"),
    ];
    let mut wrong = Vec::new();
    for (i, (b, case, req)) in table.iter().enumerate() {
        let (v, out) = against_peer(&format!("cb{i}"), *b, &[case], &[]);
        let r = results(&v);
        let got = r.first().cloned().unwrap_or_default();
        println!("{b:?}: case {} {} [{}]", got.0, got.1, got.2);
        if got.1 != "fail" || got.2 != *req {
            wrong.push(format!(
                "{b:?}: want {case} to fail on {req}, got {got:?}\n{out}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The replayed vectors catch a broken peer too, naming the vector's requirements: four
/// misbehaviours, four vectors, four requirements.
#[test]
fn replayed_vectors_name_the_requirement_a_broken_peer_breaks() {
    if !need_root("replayed_vectors_name_the_requirement_a_broken_peer_breaks") {
        return;
    }
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let vdir = vectors_dir();
    let table = [
        (Broken::ProbeAckOwnPort, "vector:reflection", "PATH-8"),
        (Broken::CloseAckReason, "vector:close", "WIRE-28"),
        (Broken::NoTsEcho, "vector:write_ack_duplicate", "ACK-4"),
        (Broken::NoSequenceNack, "vector:out_of_window", "RECV-4"),
    ];
    let mut wrong = Vec::new();
    for (i, (b, vector, req)) in table.iter().enumerate() {
        let (v, out) = against_peer(
            &format!("cv{i}"),
            *b,
            &[],
            &["--vectors", &vdir, "--vectors-only"],
        );
        let r = results(&v);
        assert!(
            r.iter().all(|c| c.0.starts_with("vector:")),
            "--vectors-only ran cases: {out}"
        );
        let got = r
            .iter()
            .find(|c| c.0 == *vector)
            .cloned()
            .unwrap_or_default();
        println!("{b:?}: {} {} [{}]", got.0, got.1, got.2);
        if got.1 != "fail" || !got.2.split(' ').any(|x| x == *req) {
            wrong.push(format!(
                "{b:?}: want {vector} to fail on {req}, got {got:?}\n{out}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
