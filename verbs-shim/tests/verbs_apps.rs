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

struct RunResult {
    ok: bool,
    figure: String,
    detail: String,
}

fn run_pair(
    pair: &VethPair,
    libs: &Path,
    prog: &Prog,
    dev: &str,
    loss: f64,
    limit: Duration,
) -> RunResult {
    let bin = PathBuf::from("/usr/bin").join(prog.name);
    let mk = |k: usize, server_ip: Option<&str>| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &pair.ns[k], "timeout", "-k", "5"])
            .arg(format!("{}", limit.as_secs()))
            .arg(&bin)
            .args(["-d", dev])
            .args(prog.args.split_whitespace());
        if let Some(ip) = server_ip {
            c.arg(ip);
        }
        c.env("LD_LIBRARY_PATH", libs)
            .env("FERROCE_IP", format!("198.18.0.{}", 11 + k))
            .env(
                "FERROCE_PMD",
                format!("net_af_packet0,iface={},framecnt=8192", pair.ifname[k]),
            )
            .env("FERROCE_LOSS", format!("{loss}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    let server = mk(1, None).spawn().expect("spawn server");
    std::thread::sleep(Duration::from_millis(700));
    let client = mk(0, Some("198.18.0.2")).spawn().expect("spawn client");
    let co = client.wait_with_output().unwrap();
    let so = server.wait_with_output().unwrap();
    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let (ct, st) = (text(&co), text(&so));
    let mut ok = co.status.success() && so.status.success();
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
        detail: format!(
            "client (exit {:?}):\n{ct}\nserver (exit {:?}):\n{st}",
            co.status.code(),
            so.status.code()
        ),
    }
}

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
    let libs = abi::lib_dir("apps");
    let pair = VethPair::create("v", ["198.18.0.1", "198.18.0.2"], 24).expect("veth pair");
    let mut table = Vec::new();
    let mut failures = Vec::new();
    for prog in PROGS {
        if only
            .as_ref()
            .is_some_and(|o| !o.iter().any(|n| n == prog.name))
        {
            continue;
        }
        for (mode, dev) in &modes {
            for &loss in &losses {
                let t0 = Instant::now();
                let r = run_pair(&pair, &libs, prog, dev, loss, Duration::from_secs(90));
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
    eprintln!(
        "| program | mode | loss | result | figure\n{}",
        table.join("\n")
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
