//! rdma-core's own test suite (v44.0, python, through Debian's `python3-pyverbs`) over the
//! shim (issue 14): the modules below, over both devices (`ferroce0` native,
//! `ferroce0_rocev2`), each module one `run_tests.py` process bounded in time, inside a
//! network namespace with the engine on `net_af_packet` (198.18.0.11). The veth's other
//! end, in a second namespace, reflects every frame (a hairpin), so the suite's traffic
//! between two QPs of its one process reaches the engine again.
//!
//! The test fails on any failure, error or timeout (a hang), and on any skip whose reason
//! is not one of [`SKIPS`]: each names a feature the shim reports as absent (or, for
//! dmabuf, the host's missing GPU allocator). Left out: the [`KNOWN`] failures (or, when no
//! hairpin can be made, every [`RC_LOOPBACK`] test).
//!
//! Needs root, DPDK's af_packet PMD, `/usr/bin/python3` with pyverbs (`python3-pyverbs`;
//! scripts/setup.sh installs it) and the suite at `/work/shared/rdma-core-tests`
//! (`FERROCE_RDMA_CORE_TESTS` overrides); prints SKIPPED and passes otherwise.
//! `FERROCE_VERBS_MODES=native|roce` limits the devices.

use ferroce_dataplane::netns::{is_root, VethPair};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "verbs_abi.rs"]
#[allow(dead_code)]
mod abi;

const PYTHON: &str = "/usr/bin/python3";
const SUITE: &str = "/work/shared/rdma-core-tests";

const MODULES: &[&str] = &[
    "test_device",
    "test_pd",
    "test_mr",
    "test_cq",
    "test_cq_events",
    "test_qp",
    "test_qpex",
    "test_cqex",
    "test_atomic",
    "test_addr",
];

/// Tests whose traffic is RC between two QPs of this process (UD loopback the shim does
/// itself, see ud.rs). They run when the veth's far end reflects every frame (a hairpin:
/// `tc mirred` on its ingress), so the engine's packets to its own address come back to it
/// as a NIC's loopback would give them; left out when no hairpin can be made.
const RC_LOOPBACK: &[&str] = &[
    "tests.test_mr.MRTest.test_mr_rereg_access",
    "tests.test_mr.MRTest.test_mr_rereg_access_bad_flow",
    "tests.test_mr.MRTest.test_mr_rereg_pd",
    "tests.test_mr.MRTest.test_mr_rereg_addr",
    "tests.test_cq_events.CqEventsTestCase.test_cq_events_rc",
    "tests.test_atomic.AtomicTest.test_atomic_cmp_and_swap",
    "tests.test_atomic.AtomicTest.test_atomic_fetch_and_add",
    "tests.test_atomic.AtomicTest.test_atomic_invalid_qp_access",
    "tests.test_atomic.AtomicTest.test_atomic_invalid_mr_access",
    "tests.test_atomic.AtomicTest.test_atomic_non_aligned_addr",
    "tests.test_atomic.AtomicTest.test_atomic_invalid_lkey",
    "tests.test_atomic.AtomicTest.test_atomic_invalid_rkey",
];

/// RC-loopback tests that fail over both devices (with the hairpin) for reasons in the
/// transport crate, left out with the reason.
const KNOWN: &[(&str, &str)] = &[];

/// Accepted skip reasons (a prefix of the suite's message) and what the shim reports absent.
const SKIPS: &[(&str, &str)] = &[
    ("Device memory is not supported", "ibv_alloc_dm: EOPNOTSUPP"),
    ("Create MW is not supported", "ibv_alloc_mw: EOPNOTSUPP"),
    ("Create memory window of type", "ibv_alloc_mw: EOPNOTSUPP"),
    (
        "Extended QP is not supported",
        "ibv_create_qp_ex with the ATOMIC_WRITE, BIND_MW, LOCAL_INV, SEND_WITH_INV or TSO send \
         op (or RDMA_WRITE_WITH_IMM on an XRC QP): EOPNOTSUPP",
    ),
    ("Create Raw Packet QP", "raw packet QPs: EOPNOTSUPP"),
    (
        "To Create RAW QP must be done by root",
        "raw packet QPs (not reached)",
    ),
    (
        "Allocating dmabuf is not supported",
        "the host has no GPU dmabuf allocator (ibv_reg_dmabuf_mr: EOPNOTSUPP)",
    ),
];

/// What one module's run gave.
#[derive(Debug, Default)]
struct Counts {
    ran: usize,
    failures: usize,
    errors: usize,
    skipped: usize,
}

impl Counts {
    fn ok(&self) -> usize {
        self.ran - self.failures - self.errors - self.skipped
    }
}

/// unittest's closing line: "OK", "OK (skipped=3)", "FAILED (failures=1, errors=2, skipped=3)".
fn parse(out: &str) -> Option<Counts> {
    let ran = out.lines().find_map(|l| {
        l.strip_prefix("Ran ")?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    })?;
    let last = out
        .lines()
        .rev()
        .find(|l| l.starts_with("OK") || l.starts_with("FAILED"))?;
    let mut c = Counts {
        ran,
        ..Default::default()
    };
    if let Some(inner) = last.split_once('(').and_then(|(_, r)| r.strip_suffix(')')) {
        for kv in inner.split(", ") {
            let (k, v) = kv.split_once('=')?;
            let v: usize = v.parse().ok()?;
            match k {
                "failures" => c.failures = v,
                "errors" => c.errors = v,
                "skipped" => c.skipped = v,
                _ => {}
            }
        }
    }
    Some(c)
}

/// Every "skipped '<reason>'" of unittest's verbose output.
fn skip_reasons(out: &str) -> Vec<String> {
    out.split("skipped '")
        .skip(1)
        .filter_map(|s| s.split_once('\'').map(|(r, _)| r.to_string()))
        .collect()
}

/// Runs `c` until it ends or `limit` passes (then kills it, and `None`): its stdout and
/// stderr, through files (the suite's output may be long).
fn run(mut c: Command, limit: Duration, tag: &str) -> Option<String> {
    let dir = std::env::temp_dir();
    let (o, e) = (
        dir.join(format!("pv-{}-{tag}.out", std::process::id())),
        dir.join(format!("pv-{}-{tag}.err", std::process::id())),
    );
    c.stdin(Stdio::null())
        .stdout(std::fs::File::create(&o).expect("temp file"))
        .stderr(std::fs::File::create(&e).expect("temp file"));
    let mut child = c.spawn().expect("spawn");
    let t0 = Instant::now();
    let done = loop {
        if child.try_wait().expect("wait").is_some() {
            break true;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = format!(
        "{}{}",
        std::fs::read_to_string(&o).unwrap_or_default(),
        std::fs::read_to_string(&e).unwrap_or_default()
    );
    let _ = std::fs::remove_file(&o);
    let _ = std::fs::remove_file(&e);
    if done {
        Some(out)
    } else {
        eprintln!("{tag}: killed after {limit:?}; its output:\n{out}");
        None
    }
}

fn suite_dir() -> PathBuf {
    std::env::var_os("FERROCE_RDMA_CORE_TESTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(SUITE))
}

/// Root, the PMD, python3 with pyverbs and the suite, or why the test skips.
fn prerequisites() -> Result<(), String> {
    if !is_root() {
        return Err("needs root (network namespaces)".into());
    }
    if ferroce_dataplane::config::pmd_dir().is_none() {
        return Err("DPDK PMDs not installed".into());
    }
    let py = Command::new(PYTHON)
        .args(["-c", "import pyverbs.device"])
        .output();
    if !py.is_ok_and(|o| o.status.success()) {
        return Err(format!(
            "{PYTHON} cannot import pyverbs (apt-get install python3-pyverbs; scripts/setup.sh does)"
        ));
    }
    let runner = suite_dir().join("tests/run_tests.py");
    if !runner.exists() {
        return Err(format!(
            "no {} (rdma-core v44.0 tests/; FERROCE_RDMA_CORE_TESTS names another copy)",
            runner.display()
        ));
    }
    Ok(())
}

/// `run_tests.py` with the shim in namespace `ns`, engine on interface `ifname`.
fn suite_cmd(ns: &str, ifname: &str, libs: &Path, args: &[String]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns, PYTHON, "tests/run_tests.py"])
        .args(args)
        .current_dir(suite_dir())
        .env("LD_LIBRARY_PATH", libs)
        .env("FERROCE_IP", "198.18.0.11")
        .env(
            "FERROCE_PMD",
            format!("net_af_packet0,iface={ifname},framecnt=8192"),
        )
        .env_remove("FERROCE_CONFIG")
        .env_remove("FERROCE_LOSS");
    c
}

/// The two tests share the machine's two cores and the namespaces' address: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn modes() -> Vec<(&'static str, &'static str)> {
    match std::env::var("FERROCE_VERBS_MODES").as_deref() {
        Ok("native") => vec![("native", "ferroce0")],
        Ok("roce") => vec![("rocev2", "ferroce0_rocev2")],
        _ => vec![("native", "ferroce0"), ("rocev2", "ferroce0_rocev2")],
    }
}

/// What the suite checks only through loopback traffic, checked without it
/// (`tests/c/local_semantics.c`: completions made by flushing a QP): the completion
/// channel's fd polls readable once per arm and `ibv_get_cq_event` answers EAGAIN on a
/// non-blocking fd without an event, `ibv_resize_cq` below the unpolled completions is
/// EINVAL, `ibv_rereg_mr` changes translation/PD/access (and refuses bad input with
/// `IBV_REREG_MR_ERR_INPUT`/EINVAL), and the bad-input answers of the known failures.
#[test]
fn local_semantics_without_loopback() {
    if !is_root() || ferroce_dataplane::config::pmd_dir().is_none() {
        eprintln!("SKIPPED: needs root and DPDK's PMDs");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let libs = abi::lib_dir("pvlocal");
    let bin = abi::build_c(&libs, "local_semantics");
    let pair = VethPair::create("l", ["198.18.0.1", "198.18.0.2"], 24).expect("veth pair");
    let mut failures = Vec::new();
    for (mode, dev) in modes() {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &pair.ns[0]])
            .arg(&bin)
            .args(["-d", dev])
            .env("LD_LIBRARY_PATH", &libs)
            .env("FERROCE_IP", "198.18.0.11")
            .env(
                "FERROCE_PMD",
                format!("net_af_packet0,iface={},framecnt=8192", pair.ifname[0]),
            );
        let out = run(c, Duration::from_secs(30), &format!("local-{mode}"));
        match out {
            Some(o) if o.contains("RESULT ok") && !o.contains(": FAIL") => {
                let n = o.lines().filter(|l| l.ends_with(": ok")).count();
                eprintln!("local semantics over {dev}: {n} checks ok");
            }
            Some(o) => failures.push(format!("over {dev}:\n{o}")),
            None => failures.push(format!("over {dev}: timed out")),
        }
    }
    drop(pair);
    std::fs::remove_dir_all(&libs).ok();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn rdma_core_tests_over_both_devices() {
    if let Err(why) = prerequisites() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let t_all = Instant::now();
    let libs = abi::lib_dir("pyverbs");
    let pair = VethPair::create("p", ["198.18.0.1", "198.18.0.2"], 24).expect("veth pair");
    let (ns, ifname) = (pair.ns[0].clone(), pair.ifname[0].clone());
    let hairpin = abi::hairpin(&pair.ns[1], &pair.ifname[1]);

    // The suite's own list of test names (loads every module through the shim).
    let list = run(
        suite_cmd(&ns, &ifname, &libs, &["--list-tests".into()]),
        Duration::from_secs(60),
        "list",
    )
    .expect("run_tests.py --list-tests timed out");
    let all: Vec<&str> = list.lines().filter(|l| l.starts_with("tests.")).collect();
    for l in RC_LOOPBACK.iter().chain(KNOWN.iter().map(|(t, _)| t)) {
        assert!(all.contains(l), "{l} is not a test of the suite:\n{list}");
    }

    let modes = modes();
    let mut table = Vec::new();
    let mut failures = Vec::new();
    for (mode, dev) in &modes {
        // What is left out over this device.
        let left: Vec<&str> = if hairpin {
            KNOWN.iter().map(|(t, _)| *t).collect()
        } else {
            RC_LOOPBACK.to_vec()
        };
        for m in MODULES {
            let prefix = format!("tests.{m}.");
            let ids: Vec<String> = all
                .iter()
                .filter(|t| t.starts_with(&prefix) && !left.contains(t))
                .map(|t| t.to_string())
                .collect();
            let left_out = all
                .iter()
                .filter(|t| t.starts_with(&prefix) && left.contains(t))
                .count();
            assert!(
                !ids.is_empty() || left_out > 0,
                "no tests of {m} in the list:\n{list}"
            );
            if ids.is_empty() {
                table.push(format!(
                    "| {m:<14} | {mode:<6} |   - |   - |   - |   - | {left_out:>2} left out (all)"
                ));
                continue;
            }
            let mut args: Vec<String> = ["--dev", dev, "--gid", "1", "-v"]
                .iter()
                .map(|s| s.to_string())
                .collect();
            args.extend(ids.iter().cloned());
            let t0 = Instant::now();
            let out = run(
                suite_cmd(&ns, &ifname, &libs, &args),
                Duration::from_secs(45),
                &format!("{mode}-{m}"),
            );
            let secs = t0.elapsed().as_secs_f64();
            let Some(out) = out else {
                table.push(format!(
                    "| {m:<14} | {mode:<6} | HANG (killed after {secs:.0} s)"
                ));
                failures.push(format!("{m} over {dev}: hung (timed out)"));
                continue;
            };
            let Some(c) = parse(&out) else {
                table.push(format!("| {m:<14} | {mode:<6} | no unittest summary"));
                failures.push(format!("{m} over {dev}: no unittest summary:\n{out}"));
                continue;
            };
            let bad_skips: Vec<String> = skip_reasons(&out)
                .into_iter()
                .filter(|r| !SKIPS.iter().any(|(p, _)| r.starts_with(p)))
                .collect();
            table.push(format!(
                "| {m:<14} | {mode:<6} | {:>3} | {:>3} | {:>3} | {:>3} | {left_out:>2} left out | {secs:.1} s",
                c.ok(),
                c.failures,
                c.errors,
                c.skipped
            ));
            if c.failures + c.errors > 0 || c.ran != ids.len() || !bad_skips.is_empty() {
                failures.push(format!(
                    "{m} over {dev}: {} of {} ran, {} failed, {} errors, skips without an absent \
                     capability: {bad_skips:?}\n{out}",
                    c.ran,
                    ids.len(),
                    c.failures,
                    c.errors
                ));
            }
        }
    }
    drop(pair);
    std::fs::remove_dir_all(&libs).ok();
    let known: Vec<String> = KNOWN
        .iter()
        .map(|(t, why)| format!("  {t}: {why}"))
        .collect();
    if hairpin {
        eprintln!("left out over both devices:\n{}", known.join("\n"));
    } else {
        eprintln!(
            "left out: the {} RC-loopback tests (no hairpin)",
            RC_LOOPBACK.len()
        );
    }
    eprintln!(
        "| module | device | ok | fail | error | skip | left out | time\n{}\n({:.1} s in all)",
        table.join("\n"),
        t_all.elapsed().as_secs_f64()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
