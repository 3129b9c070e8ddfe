//! Unmodified Debian verbs programs (ibverbs-utils, perftest) over the shim: two processes in
//! two network namespaces joined by a veth pair, each with its own DPDK engine on
//! `net_af_packet` (kernel addresses 198.18.0.1/.2 for the programs' own TCP exchange on
//! port 18515, engine addresses 198.18.0.11/.12 the kernel does not have). Native mode
//! (`-d ferroce0`) and RoCEv2 mode (`-d ferroce0_rocev2`), without and with 1 % injected
//! loss on every transmit. Every run is bounded in time; exit status and output are checked.
//! The namespaces are removed when the guard drops (also on panic).
//!
//! Needs root, ibverbs-utils, perftest and DPDK's af_packet PMD; skips otherwise.
//! `FERROCE_VERBS_APPS=name,name` limits the programs; `FERROCE_VERBS_MODES=native|roce`.

use ferroce_dataplane::netns::{is_root, VethPair};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "verbs_abi.rs"]
#[allow(dead_code)]
mod abi;

#[derive(Clone, Copy)]
struct Prog {
    name: &'static str,
    args: &'static str,
    kind: Kind,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    PingPong,
    /// Prints "success" at the end (ibv_xsrq_pingpong).
    Success,
    Bw,
    Lat,
}

const PROGS: &[Prog] = &[
    Prog {
        name: "ibv_rc_pingpong",
        args: "-g 1 -c -n 500",
        kind: Kind::PingPong,
    },
    Prog {
        name: "ibv_srq_pingpong",
        args: "-g 1 -c -n 100",
        kind: Kind::PingPong,
    },
    Prog {
        name: "ibv_uc_pingpong",
        args: "-g 1 -c -n 500",
        kind: Kind::PingPong,
    },
    Prog {
        name: "ibv_xsrq_pingpong",
        args: "-g 1 -n 200 -s 16384",
        kind: Kind::Success,
    },
    Prog {
        name: "ibv_ud_pingpong",
        args: "-g 1 -c -s 1024 -n 500",
        kind: Kind::PingPong,
    },
    Prog {
        name: "ib_write_bw",
        args: "-x 1 -F -n 1000",
        kind: Kind::Bw,
    },
    Prog {
        name: "ib_send_bw",
        args: "-x 1 -F -n 1000",
        kind: Kind::Bw,
    },
    Prog {
        name: "ib_read_bw",
        args: "-x 1 -F -n 1000",
        kind: Kind::Bw,
    },
    Prog {
        name: "ib_atomic_bw",
        args: "-x 1 -F -n 1000",
        kind: Kind::Bw,
    },
    Prog {
        name: "ib_write_lat",
        args: "-x 1 -F -n 1000",
        kind: Kind::Lat,
    },
    Prog {
        name: "ib_send_lat",
        args: "-x 1 -F -n 1000",
        kind: Kind::Lat,
    },
    Prog {
        name: "ib_read_lat",
        args: "-x 1 -F -n 1000",
        kind: Kind::Lat,
    },
    Prog {
        name: "ib_atomic_lat",
        args: "-x 1 -F -n 1000",
        kind: Kind::Lat,
    },
];

/// What carries an engine's packets: a DPDK af_packet port, or kernel UDP sockets.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Backend {
    AfPacket,
    Udp,
}

struct RunResult {
    ok: bool,
    figure: String,
    detail: String,
}

/// One side of a two-namespace run: `bin args... [server_ip]` in namespace `k` with the shim
/// on LD_LIBRARY_PATH and engine k's environment (address 198.18.0.11 + k, af_packet on the
/// namespace's veth end, injected loss), bounded by `timeout`.
#[allow(clippy::too_many_arguments)]
fn side(
    pair: &VethPair,
    libs: &Path,
    k: usize,
    bin: &Path,
    args: &[&str],
    loss: f64,
    limit: Duration,
    backend: Backend,
) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &pair.ns[k]]);
    if backend == Backend::Udp {
        // No root needed by an engine on kernel sockets: the program runs as nobody.
        c.args([
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            "--inh-caps=-all",
        ]);
        // DPDK keeps its runtime directory under $XDG_RUNTIME_DIR when not root (else in
        // /tmp/dpdk, owned by nobody and left behind): one in the test's own directory.
        let rt = libs.join(format!("rt{k}"));
        std::fs::create_dir_all(&rt).expect("create the runtime dir");
        std::os::unix::fs::chown(&rt, Some(65534), Some(65534)).expect("chown the runtime dir");
        c.env("XDG_RUNTIME_DIR", rt);
    }
    c.args(["timeout", "-k", "5"])
        .arg(format!("{}", limit.as_secs()))
        .arg(bin)
        .args(args);
    c.env("LD_LIBRARY_PATH", libs);
    match backend {
        Backend::AfPacket => c.env("FERROCE_IP", format!("198.18.0.{}", 11 + k)).env(
            "FERROCE_PMD",
            format!("net_af_packet0,iface={},framecnt=8192", pair.ifname[k]),
        ),
        // The kernel's own address: the engine's sockets bind to it.
        Backend::Udp => c
            .env("FERROCE_IP", format!("198.18.0.{}", 1 + k))
            .env("FERROCE_PMD", "udp"),
    };
    c.env("FERROCE_LOSS", format!("{loss}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Server in namespace 1, then (after a moment) the client in namespace 0 naming the server's
/// kernel address; both outputs (stdout + stderr) and exit statuses.
fn run_two(
    pair: &VethPair,
    libs: &Path,
    bin: &Path,
    args: &[&str],
    loss: f64,
    limit: Duration,
    backend: Backend,
) -> ((String, Option<i32>), (String, Option<i32>)) {
    let server = side(pair, libs, 1, bin, args, loss, limit, backend)
        .spawn()
        .expect("spawn server");
    std::thread::sleep(Duration::from_millis(700));
    let mut cargs = args.to_vec();
    cargs.push("198.18.0.2");
    let client = side(pair, libs, 0, bin, &cargs, loss, limit, backend)
        .spawn()
        .expect("spawn client");
    let co = client.wait_with_output().unwrap();
    let so = server.wait_with_output().unwrap();
    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    ((text(&co), co.status.code()), (text(&so), so.status.code()))
}

/// The namespaces, the veth pair and the engines' cores are shared: one test at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run_pair(
    pair: &VethPair,
    libs: &Path,
    prog: &Prog,
    dev: &str,
    loss: f64,
    limit: Duration,
    backend: Backend,
) -> RunResult {
    let bin = PathBuf::from("/usr/bin").join(prog.name);
    let mut args = vec!["-d", dev];
    args.extend(prog.args.split_whitespace());
    let ((ct, cc), (st, sc)) = run_two(pair, libs, &bin, &args, loss, limit, backend);
    let mut ok = cc == Some(0) && sc == Some(0);
    let mut figure = String::from("-");
    for t in [&ct, &st] {
        if t.contains("invalid data") || t.contains("symbol lookup") || t.contains("Failed status")
        {
            ok = false;
        }
    }
    match prog.kind {
        Kind::PingPong => {
            ok &= ct.contains("iters in") && st.contains("iters in");
            if let Some(l) = ct.lines().find(|l| l.contains("usec/iter")) {
                let us = l.split('=').nth(1).unwrap_or("").trim().to_string();
                figure = us;
            }
        }
        Kind::Success => {
            ok &= ct.lines().any(|l| l == "success") && st.lines().any(|l| l == "success");
        }
        Kind::Bw | Kind::Lat => {
            // The result row: "#bytes #iterations ..." numbers.
            let row = ct
                .lines()
                .map(str::split_whitespace)
                .map(|f| f.collect::<Vec<_>>())
                .find(|f| {
                    f.len() >= 5 && f[0].parse::<u64>().is_ok() && f[1].parse::<u64>().is_ok()
                });
            match row {
                Some(f) if prog.kind == Kind::Bw => {
                    let mbps: f64 = f[3].parse().unwrap_or(0.0);
                    figure = format!("{:.1} MB/s ({:.0} Mbit/s)", mbps, mbps * 8.0 * 1.048576);
                }
                Some(f) => {
                    figure = format!("{} us typical, {} us avg", f[4], f.get(5).unwrap_or(&"?"))
                }
                None => ok = false,
            }
        }
    }
    RunResult {
        ok,
        figure,
        detail: format!("client (exit {cc:?}):\n{ct}\nserver (exit {sc:?}):\n{st}"),
    }
}

/// Root, the Debian programs and DPDK's PMDs, or why the test skips.
fn prerequisites() -> Result<(), &'static str> {
    if !is_root() {
        return Err("needs root (network namespaces)");
    }
    if !Path::new("/usr/bin/ibv_rc_pingpong").exists()
        || !Path::new("/usr/bin/ib_write_bw").exists()
    {
        return Err("install ibverbs-utils and perftest (scripts/setup.sh does)");
    }
    if ferroce_dataplane::config::pmd_dir().is_none() {
        return Err("DPDK PMDs not installed");
    }
    Ok(())
}

fn modes() -> Vec<(&'static str, &'static str)> {
    match std::env::var("FERROCE_VERBS_MODES").as_deref() {
        Ok("native") => vec![("native", "ferroce0")],
        Ok("roce") => vec![("rocev2", "ferroce0_rocev2")],
        _ => vec![("native", "ferroce0"), ("rocev2", "ferroce0_rocev2")],
    }
}

/// A C program built against the system `infiniband/verbs.h`, linked with `-libverbs` (the
/// system library at link time; the shim through LD_LIBRARY_PATH at run time), posts RDMA
/// WRITEs with a wrong rkey, past the end of an MR and to an MR without REMOTE_WRITE (one RC
/// QP each) and a valid one: each bad one must complete with IBV_WC_REM_ACCESS_ERR and leave
/// the peer's buffers byte-for-byte unchanged (the peer checksums them), the valid one must
/// land exactly. Both modes, without and with 1 % loss.
#[test]
fn wrong_rkey_program_gets_remote_access_error() {
    if let Err(why) = prerequisites() {
        eprintln!("SKIP: {why}");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let libs = abi::lib_dir("rkey");
    let bin = abi::build_c(&libs, "wrong_rkey");
    let pair = VethPair::create("v", ["198.18.0.1", "198.18.0.2"], 24).expect("veth pair");
    let mut failures = Vec::new();
    for (mode, dev) in modes() {
        for loss in [0.0, 0.01] {
            let t0 = Instant::now();
            let ((ct, cc), (st, sc)) = run_two(
                &pair,
                &libs,
                &bin,
                &["-d", dev],
                loss,
                Duration::from_secs(60),
                Backend::AfPacket,
            );
            let rem_access = ct
                .lines()
                .filter(|l| l.contains("(remote access error), want 10") && l.ends_with(": ok"))
                .count();
            let ok = cc == Some(0)
                && sc == Some(0)
                && rem_access == 3
                && ct.contains("(control (valid rkey)): status 0 (success)")
                && ct.contains("RESULT ok")
                && st.contains("RESULT ok")
                && st.contains("checksum after");
            eprintln!(
                "| wrong_rkey       | {mode:<7} | {:>4.1} % | {:<4} | {rem_access}/3 REM_ACCESS_ERR, peer buffers {} ({:.1} s)",
                loss * 100.0,
                if ok { "pass" } else { "FAIL" },
                if st.contains("RESULT ok") { "unchanged" } else { "CHANGED or unchecked" },
                t0.elapsed().as_secs_f64()
            );
            if !ok {
                failures.push(format!(
                    "wrong_rkey {mode} loss {loss}:\nclient (exit {cc:?}):\n{ct}\nserver (exit {sc:?}):\n{st}"
                ));
            }
        }
    }
    drop(pair);
    std::fs::remove_dir_all(&libs).ok();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// `ferroce bench verbs` (the `ferroce-verbs-bench` program, a process of its own: it sets
/// up EAL and enters a namespace), short: every row of its CSV is there, measured and ok.
#[test]
fn bench_verbs_writes_csv_with_ratios() {
    if let Err(why) = prerequisites() {
        eprintln!("SKIP: {why}");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let libs = abi::lib_dir("bench");
    let csv = libs.join("bench.csv");
    let out = Command::new(env!("CARGO_BIN_EXE_ferroce-verbs-bench"))
        .args([
            "--iters",
            "300",
            "--lat-iters",
            "300",
            "--seconds",
            "0.3",
            "--lib",
        ])
        .arg(&libs)
        .arg("--csv")
        .arg(&csv)
        .output()
        .expect("run ferroce-verbs-bench");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    assert!(out.status.success(), "ferroce-verbs-bench failed:\n{text}");
    let body = std::fs::read_to_string(&csv).expect("the CSV");
    std::fs::remove_dir_all(&libs).ok();
    let mut lines = body.lines();
    assert_eq!(
        lines.next(),
        Some("metric,mode,size,verbs,engine,unit,ratio,ok")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    // write_bw, write_lat_rtt and lat_vs_raw_rtt (next to a raw DPDK ping-pong), native and
    // rocev2.
    assert_eq!(rows.len(), 6, "rows:\n{body}");
    for m in ["write_bw", "write_lat_rtt", "lat_vs_raw_rtt"] {
        assert_eq!(rows.iter().filter(|r| r[0] == m).count(), 2, "{m}:\n{body}");
    }
    for r in &rows {
        let v = |i: usize| r[i].parse::<f64>().unwrap_or(0.0);
        assert!(
            v(3) > 0.0 && v(4) > 0.0 && v(6) > 0.0 && r[7] == "true",
            "row {r:?} not measured:\n{body}"
        );
    }
}

// checks: [XRC-1] [XRC-2] [ROCE-11] (ibv_xsrq_pingpong: SENDs to the peer's XRC SRQ, received on its CQ, over both devices)
#[test]
fn unmodified_programs_in_two_namespaces() {
    if !is_root() {
        eprintln!("SKIP: needs root (network namespaces)");
        return;
    }
    if !Path::new("/usr/bin/ibv_rc_pingpong").exists()
        || !Path::new("/usr/bin/ib_write_bw").exists()
    {
        eprintln!("SKIP: install ibverbs-utils and perftest (scripts/setup.sh does)");
        return;
    }
    if ferroce_dataplane::config::pmd_dir().is_none() {
        eprintln!("SKIP: DPDK PMDs not installed");
        return;
    }
    let only: Option<Vec<String>> = std::env::var("FERROCE_VERBS_APPS")
        .ok()
        .map(|v| v.split(',').map(str::to_string).collect());
    let modes: Vec<(&str, &str)> = match std::env::var("FERROCE_VERBS_MODES").as_deref() {
        Ok("native") => vec![("native", "ferroce0")],
        Ok("roce") => vec![("rocev2", "ferroce0_rocev2")],
        _ => vec![("native", "ferroce0"), ("rocev2", "ferroce0_rocev2")],
    };
    let losses: Vec<f64> = match std::env::var("FERROCE_VERBS_LOSS").as_deref() {
        Ok(v) => v.split(',').filter_map(|x| x.parse().ok()).collect(),
        Err(_) => vec![0.0, 0.01],
    };
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let libs = abi::lib_dir("apps");
    let pair = VethPair::create("v", ["198.18.0.1", "198.18.0.2"], 24).expect("veth pair");
    let mut table = Vec::new();
    let mut failures = Vec::new();
    // ibv_xsrq_pingpong opens (creates) this file for its XRC domain and leaves it: remove it
    // afterwards unless it was there before.
    let xrc_file = Path::new("/tmp/xrc_domain");
    let xrc_file_was_there = xrc_file.exists();
    for prog in PROGS {
        if only
            .as_ref()
            .is_some_and(|o| !o.iter().any(|n| n == prog.name))
        {
            continue;
        }
        for (mode, dev) in &modes {
            for &loss in &losses {
                let unreliable = prog.name == "ibv_uc_pingpong"
                    || (prog.name == "ibv_ud_pingpong" && *mode == "rocev2");
                if loss > 0.0 && unreliable {
                    // UC loses a message with its packet, by definition, and RoCEv2 UD (IBTA
                    // UD) a datagram: the pingpong then waits for it forever (as it would on
                    // any NIC). Native UD rides a reliable stream and runs with loss.
                    continue;
                }
                let t0 = Instant::now();
                let r = run_pair(
                    &pair,
                    &libs,
                    prog,
                    dev,
                    loss,
                    Duration::from_secs(90),
                    Backend::AfPacket,
                );
                let line = format!(
                    "| {:<16} | {:<7} | {:>4.1} % | {:<4} | {} ({:.1} s)",
                    prog.name,
                    mode,
                    loss * 100.0,
                    if r.ok { "pass" } else { "FAIL" },
                    r.figure,
                    t0.elapsed().as_secs_f64()
                );
                eprintln!("{line}");
                table.push(line);
                if !r.ok {
                    failures.push(format!("{} {mode} loss {loss}:\n{}", prog.name, r.detail));
                }
            }
        }
    }
    drop(pair);
    std::fs::remove_dir_all(&libs).ok();
    if !xrc_file_was_there {
        std::fs::remove_file(xrc_file).ok();
    }
    eprintln!(
        "| program | mode | loss | result | figure\n{}",
        table.join("\n")
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// Debian's qperf, unmodified: `uc_bw`, `uc_lat`, `ud_bw`, `ud_lat` (2 s each) between the
/// two namespaces, both modes, lossless, `-mt 1024` (the RoCEv2 port's active MTU: qperf's
/// default 2048 is refused at RTR) and, for RoCEv2 UD, `-m 1024` (messages of one packet). qperf without `-cm1` (its UC and UD tests never use the
/// CM) exchanges LIDs, not GIDs: the shim's ports have LIDs (lid.rs). One client process per
/// test, 1 s apart: the qperf server forks a new process for each test, and a client engine that
/// outlives its peer's engine keeps stale state for it (native: the connection and its UD
/// stream). The server runs for the mode and is ended by its PID (SIGTERM to
/// `timeout`, which passes it on).
#[test]
fn qperf_uc_and_ud_in_two_namespaces() {
    if let Err(why) = prerequisites() {
        eprintln!("SKIP: {why}");
        return;
    }
    let qperf = Path::new("/usr/bin/qperf");
    if !qperf.exists() {
        eprintln!("SKIP: install qperf (scripts/setup.sh does)");
        return;
    }
    // FERROCE_QPERF_TESTS=name,name runs those qperf tests instead.
    let only = std::env::var("FERROCE_QPERF_TESTS").unwrap_or_default();
    let tests: Vec<&str> = if only.is_empty() {
        vec!["uc_bw", "uc_lat", "ud_bw", "ud_lat"]
    } else {
        only.split(',').collect()
    };
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let libs = abi::lib_dir("qperf");
    let pair = VethPair::create("q", ["198.18.0.1", "198.18.0.2"], 24).expect("veth pair");
    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let mut table = Vec::new();
    let mut failures = Vec::new();
    for (mode, dev) in modes() {
        let id = format!("{dev}:1");
        let mut server = side(
            &pair,
            &libs,
            1,
            qperf,
            &[],
            0.0,
            Duration::from_secs(120),
            Backend::AfPacket,
        )
        .spawn()
        .expect("spawn qperf server");
        std::thread::sleep(Duration::from_millis(500));
        for &t in &tests {
            // The server's process for the previous test must be gone: two engines with one
            // address on the link both take its frames.
            std::thread::sleep(Duration::from_millis(1000));
            let mut args = vec!["198.18.0.2", "-i", &id, "-mt", "1024", "-t", "2", "-v"];
            if mode == "rocev2" && t.starts_with("ud_") {
                // qperf's UD messages are 2048 bytes by default; IBTA UD carries at most the
                // port's MTU (1024 here) and sends a longer message as nothing (C10-93.1.1,
                // as rxe does), so qperf must be told, as on any RoCE port at this MTU.
                args.extend(["-m", "1024"]);
            }
            args.push(t);
            let t0 = Instant::now();
            let co = side(
                &pair,
                &libs,
                0,
                qperf,
                &args,
                0.0,
                Duration::from_secs(30),
                Backend::AfPacket,
            )
            .output()
            .expect("run qperf client");
            let ct = text(&co);
            // The test's section reports a non-zero figure.
            let key = if t.ends_with("bw") {
                "recv_bw"
            } else {
                "latency"
            };
            let figure = ct
                .find(&format!("{t}:"))
                .and_then(|at| {
                    ct[at..]
                        .lines()
                        .find(|l| l.trim_start().starts_with(key))
                        .and_then(|l| l.split('=').nth(1))
                })
                .map(|v| v.trim().to_string());
            let ok = co.status.code() == Some(0)
                && !ct.contains("failed")
                && figure.as_deref().is_some_and(|f| {
                    f.split_whitespace()
                        .next()
                        .and_then(|v| v.parse::<f64>().ok())
                        .is_some_and(|v| v > 0.0)
                });
            let line = format!(
                "| qperf {t:<7} | {mode:<7} | {:<4} | {key} {} ({:.1} s)",
                if ok { "pass" } else { "FAIL" },
                figure.as_deref().unwrap_or("-"),
                t0.elapsed().as_secs_f64()
            );
            eprintln!("{line}");
            table.push(line);
            if !ok {
                failures.push(format!(
                    "qperf {t} {mode}: client (exit {:?}):\n{ct}",
                    co.status.code()
                ));
            }
        }
        let _ = Command::new("kill")
            .args(["-TERM", &server.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while server.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = server.kill();
        let so = server.wait_with_output().unwrap();
        if !failures.is_empty() {
            failures.push(format!("qperf server ({mode}):\n{}", text(&so)));
        }
    }
    drop(pair);
    std::fs::remove_dir_all(&libs).ok();
    eprintln!("{}", table.join("\n"));
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The kernel UDP backend (`FERROCE_PMD=udp`): `ibv_rc_pingpong` and perftest, unmodified and
/// run as `nobody`, with each engine on kernel UDP sockets bound to its namespace's kernel
/// address (no DPDK device, no hugepages, no root), native device, without and with 1 %
/// loss; and the RoCEv2 device, refused over it with an error that says why.
#[test]
fn udp_backend_programs_in_two_namespaces() {
    if let Err(why) = prerequisites() {
        eprintln!("SKIP: {why}");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let libs = abi::lib_dir("udp");
    // The unprivileged programs load the shim from here.
    let _ = Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(&libs)
        .status();
    let pair = VethPair::create("w", ["198.18.0.1", "198.18.0.2"], 24).expect("veth pair");
    let mut table = Vec::new();
    let mut failures = Vec::new();
    let progs = [
        "ibv_rc_pingpong",
        "ib_write_bw",
        "ib_send_bw",
        "ib_read_lat",
    ];
    for prog in PROGS.iter().filter(|p| progs.contains(&p.name)) {
        for loss in [0.0, 0.01] {
            let t0 = Instant::now();
            let r = run_pair(
                &pair,
                &libs,
                prog,
                "ferroce0",
                loss,
                Duration::from_secs(90),
                Backend::Udp,
            );
            let line = format!(
                "| {:<16} | udp     | {:>4.1} % | {:<4} | {} ({:.1} s)",
                prog.name,
                loss * 100.0,
                if r.ok { "pass" } else { "FAIL" },
                r.figure,
                t0.elapsed().as_secs_f64()
            );
            eprintln!("{line}");
            table.push(line);
            if !r.ok {
                failures.push(format!("{} udp loss {loss}:\n{}", prog.name, r.detail));
            }
        }
    }
    // RoCEv2 over kernel sockets: refused, and the program is told why.
    let bin = PathBuf::from("/usr/bin/ibv_rc_pingpong");
    let args = ["-d", "ferroce0_rocev2", "-g", "1", "-n", "10"];
    let ((ct, cc), (st, sc)) = run_two(
        &pair,
        &libs,
        &bin,
        &args,
        0.0,
        Duration::from_secs(20),
        Backend::Udp,
    );
    let why = "RoCEv2 cannot run over the kernel UDP backend";
    if cc == Some(0) || sc == Some(0) || !(ct.contains(why) || st.contains(why)) {
        failures.push(format!(
            "rocev2 over udp was not refused with {why:?}:\nclient ({cc:?}):\n{ct}\nserver \
             ({sc:?}):\n{st}"
        ));
    }
    drop(pair);
    std::fs::remove_dir_all(&libs).ok();
    eprintln!(
        "| program | backend | loss | result | figure\n{}",
        table.join("\n")
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
