//! The interop matrix: `ferroce interop rxe`'s options, the runner, its table and CSV.

use crate::apps::{
    link_mtu_for, loss_side, prerequisites, program, Program, Role, RunResult, Session, PROGRAMS,
};
use crate::image;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// RoCEv2 packets on the wire per MB moved, when both were measured.
pub fn pkts_per_mb(r: &RunResult) -> Option<f64> {
    let (w, b) = (r.wire?, r.bytes?);
    (b > 0).then(|| w.packets as f64 / (b as f64 / 1e6))
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

/// The table: program × ferroce role × MTU → pass/fail, figure.
pub fn table(rows: &[RunResult]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| {:<16} | {:<14} | {:>4} | {:>5} | {:<7} | {:<6} | {:<16} | {:>8} | {:>6} | {:>6} |",
        "program",
        "ferroce",
        "mtu",
        "loss",
        "lost by",
        "result",
        "figure",
        "pkts",
        "pkt/MB",
        "time"
    );
    let _ = writeln!(
        s,
        "|{:-<18}|{:-<16}|{:-<6}|{:-<7}|{:-<9}|{:-<8}|{:-<18}|{:-<10}|{:-<8}|{:-<8}|",
        "", "", "", "", "", "", "", "", "", ""
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {:<16} | {:<14} | {:>4} | {:>4.1}% | {:<7} | {:<6} | {:<16} | {:>8} | {:>6} | {:>5.1}s |",
            r.program,
            r.role,
            r.mtu,
            r.loss_pct,
            r.loss_side,
            if r.ok { "pass" } else { "FAIL" },
            r.figure,
            opt(r.wire.map(|w| w.packets)),
            opt(pkts_per_mb(r).map(|v| format!("{v:.0}"))),
            r.secs
        );
    }
    s
}

/// `program,ferroce_role,mtu,loss_pct,loss_side,result,figure,wire_pkts,rxe_dropped,pkts_per_mb`.
pub fn csv(rows: &[RunResult]) -> String {
    let mut s = String::from(
        "program,ferroce_role,mtu,loss_pct,loss_side,result,figure,wire_pkts,rxe_dropped,pkts_per_mb\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{}",
            r.program,
            r.role,
            r.mtu,
            r.loss_pct,
            r.loss_side,
            if r.ok { "pass" } else { "fail" },
            r.figure.replace(',', ";"),
            opt(r.wire.map(|w| w.packets)),
            opt(r.wire.map(|w| w.dropped)),
            opt(pkts_per_mb(r).map(|v| format!("{v:.0}"))),
        );
    }
    s
}

const USAGE: &str = "usage: ferroce interop rxe [--programs a,b] [--mtu 1024,4096] [--roles server,client] [--loss PCT | --rxe-loss PCT] [--rxe-rxe] [--csv FILE] [--timeout SECS] [--verbose]
  Runs unmodified verbs programs with ferroce (RoCEv2 device, verbs shim, DPDK engine) against
  Linux soft-RoCE (rdma_rxe) in a qemu VM, each program with ferroce as server and as client.
  Needs root; installs qemu-system-x86, busybox-static, perftest, ... from Debian when missing.
  Programs: ibv_rc_pingpong ibv_ud_pingpong ib_send_bw ib_write_bw ib_read_bw ib_atomic_bw
  ib_write_lat rping ib_write_bw-R udaddy (default: all; the last three connect through the
  CMs: ferroce's IBTA CM on QP1, udaddy by SIDR).
  --loss drops ferroce's packets (its injector); --rxe-loss drops rxe's own transmissions (an
  nftables rule on the lab's bridge, on packets from the VM to UDP 4791). --rxe-rxe runs rxe in
  a second VM in ferroce's place (two VMs: the baseline for the same loss).";

/// Matrix options.
#[derive(Clone, Debug)]
pub struct Options {
    pub programs: Vec<Program>,
    pub mtus: Vec<u32>,
    pub roles: Vec<Role>,
    pub loss_pct: f64,
    /// Loss on rxe's transmissions (vm0's), in %: each level in turn in one session.
    pub rxe_loss_pcts: Vec<f64>,
    /// rxe in a second VM plays ferroce's part.
    pub rxe_rxe: bool,
    pub csv: Option<PathBuf>,
    pub limit: Duration,
    pub verbose: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            programs: PROGRAMS.to_vec(),
            mtus: vec![1024, 4096],
            roles: vec![Role::Server, Role::Client],
            loss_pct: 0.0,
            rxe_loss_pcts: vec![0.0],
            rxe_rxe: false,
            csv: None,
            limit: Duration::from_secs(120),
            verbose: false,
        }
    }
}

pub fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut o = Options::default();
    let mut it = args.iter();
    let list = |v: Option<&String>, what: &str| -> Result<Vec<String>, String> {
        Ok(v.ok_or(format!("{what} needs a value"))?
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect())
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "rxe" => {}
            "--programs" | "-p" => {
                o.programs = list(it.next(), a)?
                    .iter()
                    .map(|n| program(n).ok_or(format!("unknown program {n}")))
                    .collect::<Result<_, _>>()?
            }
            "--mtu" => {
                o.mtus = list(it.next(), a)?
                    .iter()
                    .map(|m| match m.as_str() {
                        "1024" => Ok(1024),
                        "4096" => Ok(4096),
                        _ => Err(format!("--mtu: {m}: expected 1024 or 4096")),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--roles" => {
                o.roles = list(it.next(), a)?
                    .iter()
                    .map(|r| match r.as_str() {
                        "server" => Ok(Role::Server),
                        "client" => Ok(Role::Client),
                        _ => Err(format!("--roles: {r}: expected server or client")),
                    })
                    .collect::<Result<_, _>>()?
            }
            "--loss" => {
                o.loss_pct = it
                    .next()
                    .and_then(|v| v.trim_end_matches('%').parse().ok())
                    .filter(|v: &f64| (0.0..100.0).contains(v))
                    .ok_or("--loss needs a percentage in [0, 100)")?
            }
            "--rxe-loss" => {
                o.rxe_loss_pcts = list(it.next(), a)?
                    .iter()
                    .map(|v| {
                        v.trim_end_matches('%')
                            .parse()
                            .ok()
                            .filter(|v: &f64| (0.0..100.0).contains(v))
                            .ok_or(format!("--rxe-loss: {v}: expected percentages in [0, 100)"))
                    })
                    .collect::<Result<_, _>>()?
            }
            "--rxe-rxe" => o.rxe_rxe = true,
            "--csv" => o.csv = Some(PathBuf::from(it.next().ok_or("--csv needs a file")?)),
            "--timeout" => {
                o.limit = Duration::from_secs(
                    it.next()
                        .and_then(|v| v.parse().ok())
                        .ok_or("--timeout needs seconds")?,
                )
            }
            "--verbose" | "-v" => o.verbose = true,
            "-h" | "--help" => return Err(String::new()),
            x => return Err(format!("unknown argument {x}")),
        }
    }
    if o.loss_pct > 0.0 && o.rxe_loss_pcts.iter().any(|&v| v > 0.0) {
        return Err("--loss and --rxe-loss: one side at a time (the CSV's loss_side)".into());
    }
    if o.rxe_rxe && o.loss_pct > 0.0 {
        return Err("--rxe-rxe: no ferroce to inject loss; use --rxe-loss".into());
    }
    Ok(o)
}

/// A session of `o`'s shape, with the bridge's counters (and rxe-side loss) installed.
fn session(o: &Options, img: &image::Image, mtu: u32, tag: &str) -> Result<Session, String> {
    let n = if o.rxe_rxe { 2 } else { 1 };
    let mut s = Session::start_with(img, n, link_mtu_for(mtu), tag, true)?;
    match s.set_rxe_loss(0.0) {
        Ok(()) => {}
        Err(e) if o.rxe_loss_pcts.iter().any(|&v| v > 0.0) => return Err(e),
        // Counting only: the runs go on without the packet counts.
        Err(e) => crate::util::log(&format!("no wire counters: {e}")),
    }
    Ok(s)
}

/// Run the matrix: one session (lab + one VM) per MTU, every program × role in it.
pub fn run_matrix(o: &Options, mut each: impl FnMut(&RunResult)) -> Result<Vec<RunResult>, String> {
    prerequisites()?;
    let _g = crate::VM_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let img = image::prepare()?;
    let mut rows = Vec::new();
    for &mtu in &o.mtus {
        let first_row = rows.len();
        let mut s = session(o, &img, mtu, &format!("m{mtu}"))?;
        for &rxe in &o.rxe_loss_pcts {
            if rxe > 0.0 || s.wire.is_some() {
                s.set_rxe_loss(rxe)?;
            }
            for p in &o.programs {
                if o.rxe_rxe && p.cm {
                    crate::util::log(&format!("{}: no rxe-rxe run for rdma_cm programs", p.name));
                    continue;
                }
                for &role in &o.roles {
                    let r = if o.rxe_rxe {
                        s.rxe_vs_rxe_as(p, role, mtu, o.limit)
                    } else {
                        s.ferroce_vs_rxe(p, role, mtu, o.loss_pct / 100.0, o.limit)
                    };
                    let r = match r {
                        Ok(r) => r,
                        Err(e) => {
                            // The VM's command channel may be out of step: start over.
                            let r = RunResult {
                                program: p.name,
                                role: role.as_str(),
                                mtu,
                                loss_pct: o.loss_pct + rxe,
                                loss_side: loss_side(o.loss_pct, rxe),
                                wire: None,
                                bytes: None,
                                ok: false,
                                figure: "-".into(),
                                secs: 0.0,
                                detail: e,
                            };
                            drop(s);
                            s = session(o, &img, mtu, &format!("m{mtu}r"))?;
                            if rxe > 0.0 {
                                s.set_rxe_loss(rxe)?;
                            }
                            r
                        }
                    };
                    each(&r);
                    rows.push(r);
                }
            }
        }
        // Every run of this MTU was captured on the VM's NIC (both directions): ferroce's
        // RoCEv2 codec and tshark must agree on every packet and every ICRC must be valid.
        let t0 = Instant::now();
        s.vms[0].shutdown();
        // rping disconnects from both ends (the active side's DREQ, the passive side's
        // DREP, whichever is ferroce): with a passing run in each role, the capture must
        // hold DREQ and DREP sent by ferroce and by rxe.
        let rping_ran = |role: &str| {
            rows[first_row..]
                .iter()
                .any(|r| r.program == "rping" && r.role == role && r.ok)
        };
        let want_both_ways = rping_ran("server") && rping_ran("client") && !o.rxe_rxe;
        let r = match crate::wirecheck::check(&s.pcap(0)) {
            Ok(w) => RunResult {
                program: "wire-check",
                role: "both",
                mtu,
                loss_pct: o.loss_pct + o.rxe_loss_pcts.iter().fold(0.0, |a: f64, &b| a.max(b)),
                loss_side: loss_side(
                    o.loss_pct,
                    o.rxe_loss_pcts.iter().fold(0.0, |a: f64, &b| a.max(b)),
                ),
                wire: None,
                bytes: None,
                ok: w.ok() && (!want_both_ways || disconnects_both_ways(&w)),
                figure: format!(
                    "{} pkts, {} bad ICRC, {} UD, {} CM MADs ({})",
                    w.packets,
                    w.icrc_bad,
                    w.ud_deth_checked,
                    w.cm_mads.iter().map(|(_, n)| n).sum::<usize>(),
                    disconnect_counts(&w)
                ),
                secs: t0.elapsed().as_secs_f64(),
                detail: format!("{w:?}"),
            },
            Err(e) => RunResult {
                program: "wire-check",
                role: "both",
                mtu,
                loss_pct: o.loss_pct + o.rxe_loss_pcts.iter().fold(0.0, |a: f64, &b| a.max(b)),
                loss_side: loss_side(
                    o.loss_pct,
                    o.rxe_loss_pcts.iter().fold(0.0, |a: f64, &b| a.max(b)),
                ),
                wire: None,
                bytes: None,
                ok: false,
                figure: "-".into(),
                secs: t0.elapsed().as_secs_f64(),
                detail: e,
            },
        };
        each(&r);
        rows.push(r);
    }
    Ok(rows)
}

/// DREQ and DREP each sent by ferroce and by rxe (vm0).
pub fn disconnects_both_ways(w: &crate::wirecheck::WireReport) -> bool {
    let (f, r) = (crate::lab::FERROCE_IP, crate::lab::vm_ip(0));
    ["DREQ", "DREP"]
        .iter()
        .all(|a| w.cm_mads_sent(a, f) > 0 && w.cm_mads_sent(a, r) > 0)
}

/// "DREQ f3 r2, DREP f2 r1": each sent by ferroce (f) and by rxe (r).
pub fn disconnect_counts(w: &crate::wirecheck::WireReport) -> String {
    let (f, r) = (crate::lab::FERROCE_IP, crate::lab::vm_ip(0));
    ["DREQ", "DREP"]
        .iter()
        .map(|a| format!("{a} f{} r{}", w.cm_mads_sent(a, f), w.cm_mads_sent(a, r)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `ferroce interop rxe [...]`: prints the matrix table, writes `--csv`; 0 when all pass.
pub fn main_interop(args: &[String]) -> i32 {
    let o = match parse_args(args) {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("ferroce interop: {e}");
            }
            eprintln!("{USAGE}");
            return if e.is_empty() { 0 } else { 2 };
        }
    };
    let t0 = Instant::now();
    let verbose = o.verbose;
    let rows = match run_matrix(&o, |r| {
        eprintln!(
            "ferroce interop: {} ferroce={} mtu={} {} {} ({:.1} s)",
            r.program,
            r.role,
            r.mtu,
            if r.ok { "pass" } else { "FAIL" },
            r.figure,
            r.secs
        );
        if verbose || !r.ok {
            eprintln!("{}", r.detail);
        }
    }) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ferroce interop: {e}");
            return 2;
        }
    };
    print!("{}", table(&rows));
    println!(
        "{} of {} passed in {:.0} s",
        rows.iter().filter(|r| r.ok).count(),
        rows.len(),
        t0.elapsed().as_secs_f64()
    );
    if let Some(p) = &o.csv {
        if let Err(e) = std::fs::write(p, csv(&rows)) {
            eprintln!("ferroce interop: {}: {e}", p.display());
            return 2;
        }
    }
    if rows.iter().all(|r| r.ok) {
        0
    } else {
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wireloss::WireCounts;

    #[test]
    fn parses_arguments_and_writes_csv() {
        let a: Vec<String> = [
            "rxe",
            "--programs",
            "ib_write_bw",
            "--mtu",
            "1024",
            "--roles",
            "client",
            "--loss",
            "1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let o = parse_args(&a).unwrap();
        assert_eq!(o.programs.len(), 1);
        assert_eq!(o.mtus, vec![1024]);
        assert_eq!(o.roles, vec![Role::Client]);
        assert_eq!(o.loss_pct, 1.0);
        assert!(parse_args(&["--mtu".to_string(), "2048".to_string()]).is_err());
        let r = RunResult {
            program: "ib_write_bw",
            role: "client",
            mtu: 1024,
            loss_pct: 1.0,
            loss_side: "rxe",
            wire: Some(WireCounts {
                packets: 2000,
                from_src: 1000,
                dropped: 10,
            }),
            bytes: Some(1_000_000),
            ok: true,
            figure: "1.00 MB/s".into(),
            secs: 1.0,
            detail: String::new(),
        };
        assert_eq!(csv(std::slice::from_ref(&r)), "program,ferroce_role,mtu,loss_pct,loss_side,result,figure,wire_pkts,rxe_dropped,pkts_per_mb\nib_write_bw,client,1024,1,rxe,pass,1.00 MB/s,2000,10,2000\n");
        assert!(
            table(&[r]).contains("| ib_write_bw      | client         | 1024 |  1.0% | rxe     |")
        );
        let a: Vec<String> = ["--rxe-loss", "5"].iter().map(|s| s.to_string()).collect();
        let o = parse_args(&a).unwrap();
        assert_eq!((o.rxe_loss_pcts.clone(), o.loss_pct), (vec![5.0], 0.0));
        let both: Vec<String> = ["--rxe-loss", "5", "--loss", "1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert!(parse_args(&both).is_err());
        assert!(parse_args(&["--rxe-loss".to_string(), "100".to_string()]).is_err());
    }
}
