//! `ferroce soak`: short runs of the simulator soak and the real-packet soak (two DPDK engines
//! in two namespaces; root only), each checked for 0 errors, verified messages and bytes, and
//! the summary's fields; and, for each, a run with a deliberate fault (`--tamper`) that must be
//! reported as errors with a failing exit status, so the checks are shown to bite.

use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_ferroce");

/// One soak at a time: a real-packet soak runs two busy-polling DPDK engine processes and a
/// simulator soak keeps a core busy, and all five at once on this suite's two cores starved
/// the 4,000-connection run (its idle connections' READs failed with RetryExceeded, its
/// workload posted nothing in 50 s).
static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE.lock().unwrap_or_else(|p| p.into_inner())
}

struct TmpDir(PathBuf);

impl Drop for TmpDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tmp(tag: &str) -> TmpDir {
    let d = std::env::temp_dir().join(format!("ferroce-soak-test-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    TmpDir(d)
}

/// Run `ferroce soak ...` with a hard time limit (killed past it); (exit code, stdout, JSON).
fn soak(args: &[&str], json: &std::path::Path, limit: Duration) -> (Option<i32>, String, Value) {
    let mut c = Command::new(BIN)
        .arg("soak")
        .args(args)
        .arg("--json")
        .arg(json)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn ferroce");
    let t0 = Instant::now();
    let status = loop {
        if let Ok(Some(s)) = c.try_wait() {
            break Some(s);
        }
        if t0.elapsed() > limit {
            let _ = c.kill();
            let _ = c.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut out = String::new();
    if let Some(mut o) = c.stdout.take() {
        use std::io::Read;
        let _ = o.read_to_string(&mut out);
    }
    assert!(
        status.is_some(),
        "ferroce soak {args:?} ran past {limit:?}\n{out}"
    );
    let v = std::fs::read_to_string(json)
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null);
    (status.and_then(|s| s.code()), out, v)
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("summary field {k} missing or not a count: {v}"))
}

fn assert_memory_fields(m: &Value) {
    let samples = m["samples"].as_array().expect("memory.samples");
    assert!(samples.len() >= 3, "memory samples: {m}");
    assert!(samples
        .iter()
        .all(|s| s["t_s"].is_f64() && s["rss_bytes"].is_u64()));
    for k in ["warmup_s", "rss_slope_bytes_per_min"] {
        assert!(m[k].is_f64(), "memory.{k}: {m}");
    }
    assert!(m["rss_flat"].is_boolean(), "memory.rss_flat: {m}");
}

fn is_root() -> bool {
    ferroce_dataplane::netns::is_root()
}

#[test]
fn soak_sim_short_run_verifies_every_operation_under_changing_faults() {
    let _one = one_at_a_time();
    let d = tmp("sim");
    let json = d.0.join("sim.json");
    let (code, out, v) = soak(
        &["sim", "--minutes", "0.4", "--every", "2", "--seed", "5"],
        &json,
        Duration::from_secs(150),
    );
    println!("{out}");
    assert_eq!(code, Some(0), "exit status; summary {v}");
    assert_eq!(v["kind"], "sim");
    assert_eq!(v["ok"], true);
    assert_eq!(u(&v, "errors"), 0, "{}", v["error_samples"]);
    assert!(u(&v, "messages_verified") > 1000);
    assert!(u(&v, "bytes_verified") > 100 << 20);
    assert!(u(&v, "receives_verified") > 0 && u(&v, "write_slots_verified") > 0);
    assert!(
        u(&v, "rounds") > u(&v, "connections"),
        "several rounds per server"
    );
    assert_eq!(u(&v, "connections"), 16);
    for op in [
        "send",
        "send_imm",
        "write",
        "write_imm",
        "read",
        "fetch_add",
        "cmp_swap",
    ] {
        assert!(
            v["ops"][op].as_u64().unwrap_or(0) > 0,
            "no {op}: {}",
            v["ops"]
        );
    }
    assert_eq!(v["sizes"][0], 0, "zero-length messages are in the mix");
    // The mix changed and the faults fired.
    assert!(u(&v, "fault_epochs") >= 2);
    assert!(v["fault_mixes"].as_array().is_some_and(|m| m.len() >= 2));
    for k in [
        "fabric_drops",
        "retransmits",
        "corrupted",
        "duplicated",
        "reordered",
        "ecn_marked",
    ] {
        assert!(u(&v, k) > 0, "{k} is 0: the faults did not fire");
    }
    assert_memory_fields(&v["memory"]);
    assert!(
        v["memory"]["live_slope_bytes_per_min"].is_f64(),
        "heap slope"
    );
}

#[test]
fn soak_sim_reports_data_that_is_wrong() {
    let _one = one_at_a_time();
    let d = tmp("simbad");
    let json = d.0.join("sim.json");
    let (code, out, v) = soak(
        &["sim", "--minutes", "0.1", "--every", "1", "--tamper"],
        &json,
        Duration::from_secs(90),
    );
    println!("{out}");
    assert_eq!(
        code,
        Some(1),
        "a run with wrong data must fail; summary {v}"
    );
    assert_eq!(v["ok"], false);
    assert!(u(&v, "errors") > 0);
    let samples = v["error_samples"].to_string();
    assert!(
        samples.contains("read"),
        "the changed READ source: {samples}"
    );
}

#[test]
fn soak_real_short_run_two_engines_under_changing_faults() {
    if !is_root() {
        eprintln!("SKIPPED soak_real_short_run_two_engines_under_changing_faults: needs root");
        return;
    }
    let _one = one_at_a_time();
    let d = tmp("real");
    let json = d.0.join("real.json");
    let (code, out, v) = soak(
        &[
            "real",
            "--minutes",
            "0.75",
            "--epoch-s",
            "5",
            "--every",
            "5",
            "--seed",
            "3",
        ],
        &json,
        Duration::from_secs(240),
    );
    println!("{out}");
    assert_eq!(code, Some(0), "exit status; summary {v}");
    assert_eq!(v["kind"], "real");
    assert_eq!(v["mode"], "native");
    assert_eq!(v["ok"], true);
    assert_eq!(u(&v, "errors"), 0, "{}", v["error_samples"]);
    assert!(u(&v, "messages_verified") > 1000);
    assert!(u(&v, "bytes_verified") > 10 << 20);
    assert!(u(&v, "receives_verified") > 0);
    let phases = v["phases"].as_array().expect("phases");
    assert!(phases.len() >= 2, "the fault mix changes between phases");
    for p in phases {
        for side in ["client", "server"] {
            assert_eq!(p[side]["ok"], true, "{p}");
            assert!(p[side]["rss_samples"]
                .as_array()
                .is_some_and(|s| !s.is_empty()));
        }
    }
    // The injector's mix changed while the engines ran (the schedule's steps came into force).
    assert!(
        phases
            .iter()
            .any(|p| p["client"]["fault_tx"]["changes"].as_u64().unwrap_or(0) > 0),
        "no fault schedule step applied"
    );
    assert_memory_fields(&v["client_rss"]);
    assert_memory_fields(&v["server_rss"]);
}

#[test]
fn soak_real_reports_a_mismatched_workload() {
    if !is_root() {
        eprintln!("SKIPPED soak_real_reports_a_mismatched_workload: needs root");
        return;
    }
    let _one = one_at_a_time();
    let d = tmp("realbad");
    let json = d.0.join("real.json");
    let (code, out, v) = soak(
        &["real", "--minutes", "0.1", "--epoch-s", "5", "--tamper"],
        &json,
        Duration::from_secs(200),
    );
    println!("{out}");
    assert_eq!(
        code,
        Some(1),
        "a mismatched workload must fail; summary {v}"
    );
    assert_eq!(v["ok"], false);
    assert!(u(&v, "errors") > 0, "{v}");
}

/// Issue 18 item 4 on real packets: 4,000 connections between two DPDK engine processes
/// beside the workload, each READing 4 KiB once (verified) and then idle until the end, when
/// all close; each engine states its process's heap per idle connection, sampled after the
/// engine compacted them. The bound is on memory (deterministic), not on time.
#[test]
fn soak_real_holds_4000_idle_connections_beside_the_workload() {
    if !is_root() {
        eprintln!("SKIPPED soak_real_holds_4000_idle_connections_beside_the_workload: needs root");
        return;
    }
    let _one = one_at_a_time();
    let d = tmp("fleet");
    let json = d.0.join("fleet.json");
    let (code, out, v) = soak(
        &[
            "real",
            "--minutes",
            "0.1",
            "--no-faults",
            "--idle-connections",
            "4000",
        ],
        &json,
        Duration::from_secs(240),
    );
    println!("{out}");
    assert_eq!(code, Some(0), "exit status; summary {v}");
    assert_eq!(u(&v, "errors"), 0, "{}", v["error_samples"]);
    let phases = v["phases"].as_array().expect("phases");
    assert!(!phases.is_empty());
    for p in phases {
        for side in ["client", "server"] {
            let f = &p[side]["fleet"];
            println!("{side}: {f}");
            assert_eq!(u(f, "connections"), 4000, "{f}");
            assert_eq!(u(f, "opened"), 4000, "{f}");
            assert_eq!(u(f, "closed"), 4000, "{f}");
            assert!(f["errors"].as_array().is_some_and(|e| e.is_empty()), "{f}");
            // The transport's own share is ~0.6-1 KiB (bench scale); the rest is the engine's
            // tables, the server's three streams per connection and the counters snapshot's
            // listed connections (a fixed ~1 MB, ~260 B per connection at 4,000). Measured
            // 1,384 B (client) and 1,769 B (server).
            let per = f["heap_per_conn"].as_f64().expect("heap measured");
            assert!(
                per > 0.0 && per <= 2_560.0,
                "{side}: {per} B per idle connection"
            );
        }
        assert_eq!(u(&p["client"]["fleet"], "reads_ok"), 4000);
    }
}
