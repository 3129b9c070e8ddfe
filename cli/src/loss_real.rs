//! `ferroce bench loss --real`: the loss curve on real packets. Unmodified `ib_write_bw`
//! between two processes over the verbs shim, each with its DPDK engine, joined by a PMD
//! (af_packet on a veth pair, or memif), with every party's transmit losing p, for native and
//! RoCEv2 side by side; beside each point the simulator's share for the same loss rate (the
//! `bench loss` runs of the same modes, in this process). Shares are of the same mode's
//! lossless goodput measured in the same sweep, so they compare across machines where the
//! absolute rates do not.
//!
//! With `--peer HOST:PORT` the two processes are on two hosts: this one runs the clients,
//! `ferroce bench loss-peer` on the other the servers, told each point over a control
//! channel ([`crate::loss_peer`]), and its engine's counters join the table.

use crate::args::BenchArgs;
use crate::loss_peer::{EngineFigures, Remote, Timeouts};
use ferroce_benches::csv::{num, Csv};
use ferroce_benches::loss::{self, LossConfig, LossModel, Mode};
use ferroce_benches::plot::{self, Axes, Series};
use ferroce_benches::progress::Progress;
use ferroce_benches::roce::AckTimeout;
use ferroce_benches::Opts;
use std::path::Path;
use std::time::Instant;

/// The sweep's loss rates: the simulator's curve, up to 5 % (beyond it go-back-N moves too
/// little to measure in seconds).
const RATES: [f64; 6] = [0.0, 0.001, 0.005, 0.01, 0.02, 0.05];
const QUICK_RATES: [f64; 2] = [0.0, 0.01];
/// (mode, verbs device, simulator mode).
const MODES: [(&str, &str, Mode); 2] = [
    ("native", "ferroce0", Mode::Native { paths: 16 }),
    (
        "rocev2",
        "ferroce0_rocev2",
        Mode::Roce(AckTimeout::RxeDefault),
    ),
];

struct Point {
    mode: &'static str,
    loss: f64,
    gbps: Option<f64>,
    error: Option<String>,
    share: Option<f64>,
    sim_share: Option<f64>,
    /// Two hosts: this host's engine and the peer's, as their counters tell.
    local: Option<EngineFigures>,
    peer: Option<EngineFigures>,
}

/// Where the two ib_write_bw processes run.
enum Runner {
    /// Both here, in a namespace over veth or memif.
    Local(ibverbs::bench::WriteBw),
    /// The server on a peer host.
    Remote(Box<Remote>),
}

/// Runs the sweep; Ok(false) when a run failed.
pub fn run(a: &BenchArgs, opts: Opts, bar: &dyn Progress) -> Result<bool, String> {
    let t0 = Instant::now();
    let rates: Vec<f64> = if !a.rates.is_empty() {
        let mut r: Vec<f64> = a.rates.iter().map(|p| p / 100.0).collect();
        if !r.contains(&0.0) {
            r.insert(0, 0.0); // every share needs its lossless run
        }
        r
    } else if a.quick {
        QUICK_RATES.to_vec()
    } else {
        RATES.to_vec()
    };
    let secs = a.seconds.unwrap_or(if a.quick { 2 } else { 5 });
    let size = 65_536;
    let mut runner = match &a.peer {
        Some(peer) => Runner::Remote(Box::new(Remote::new(a, peer, Timeouts::default())?)),
        None => Runner::Local(ibverbs::bench::WriteBw::new(&a.pmd, a.lib.as_deref())?),
    };
    let joined = match &runner {
        Runner::Local(bw) => format!(
            "two processes and their engines joined by {}",
            bw.pmd_name()
        ),
        Runner::Remote(r) => format!(
            "the client here and the server on a second host: {}",
            r.describe()
        ),
    };
    println!(
        "ferroce bench loss --real: ib_write_bw -s {size} -D {secs} over the verbs shim, \
         {joined}, every transmit of both losing p; native (16 paths, the shim's default) and \
         RoCEv2 (go-back-N, local ACK timeout exponent 14 as perftest asks); the simulator's \
         share for the same mode and loss beside"
    );
    let mut points = Vec::new();
    bar.begin("loss --real", (MODES.len() * rates.len()) as u64);
    for (mode, dev, _) in MODES {
        let mut lossless = None;
        for &p in &rates {
            bar.step(&format!("{mode}, loss {:.1} %", p * 100.0));
            let (r, local, peer) = match &mut runner {
                Runner::Local(bw) => (bw.run(dev, size, secs, p), None, None),
                Runner::Remote(rm) => {
                    let x = rm.run(mode, dev, size, secs, p);
                    (x.gbps, x.local, x.peer)
                }
            };
            let (gbps, error) = match r {
                Ok(g) => (Some(g), None),
                Err(e) => (None, Some(e)),
            };
            if p == 0.0 {
                lossless = gbps;
            }
            let share = match (gbps, lossless) {
                (Some(g), Some(l)) if l > 0.0 => Some(g / l),
                _ => None,
            };
            points.push(Point {
                mode,
                loss: p,
                gbps,
                error,
                share,
                sim_share: None,
                local,
                peer,
            });
        }
    }
    bar.end();
    // Ends the control session (the peer waits for the next sweep) before the simulator runs.
    drop(runner);
    // The simulator's figures for the same rates and modes.
    let mut cfg = LossConfig::new(opts);
    cfg.rates = rates.clone();
    cfg.native_paths = vec![16];
    let sim = loss::run(&cfg, bar);
    for pt in &mut points {
        let mode = MODES.iter().find(|m| m.0 == pt.mode).map(|m| m.2);
        pt.sim_share = mode
            .and_then(|m| sim.row(m, pt.loss))
            .filter(|r| matches!(r.model, LossModel::Random(_)))
            .map(|r| r.ratio_to_lossless);
    }
    print!("{}", table(&points));
    let csv_path = a.out.join("loss_real.csv");
    let svg_path = a.out.join("loss_real.svg");
    std::fs::create_dir_all(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    csv(&points)
        .write(&csv_path)
        .map_err(|e| format!("{}: {e}", csv_path.display()))?;
    chart(&points, &svg_path)?;
    let failed: Vec<&Point> = points.iter().filter(|p| p.error.is_some()).collect();
    for p in &failed {
        eprintln!(
            "{} at {:.1} % loss failed: {}",
            p.mode,
            p.loss * 100.0,
            p.error.as_deref().unwrap_or("")
        );
    }
    if let Some(s) = points
        .iter()
        .find(|p| p.mode == "native" && (p.loss - 0.01).abs() < 1e-9)
        .and_then(|p| p.share)
    {
        println!(
            "\nnative at 1 % loss keeps {s:.3} of its lossless goodput on real packets \
             (issue target >= 0.9: {})",
            if s >= 0.9 { "met" } else { "NOT met" }
        );
    }
    println!(
        "written: {}, {}\nwall time: {:.1} s",
        csv_path.display(),
        svg_path.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok(failed.is_empty())
}

fn table(points: &[Point]) -> String {
    let two = points.iter().any(|p| p.peer.is_some() || p.local.is_some());
    let mut s = format!(
        "\n{:<8} {:>7} {:>11} {:>7} {:>10}",
        "mode", "loss", "Gbit/s", "share", "sim share"
    );
    if two {
        s.push_str(&format!(
            " {:>9} {:>10} {:>9} {:>10} {:>9}",
            "A retx", "A lost", "B rx", "B lost", "B retx"
        ));
    }
    s.push_str(&format!("\n{}\n", "-".repeat(if two { 100 } else { 47 })));
    let f = |v: Option<f64>, d: usize| v.map_or("-".to_string(), |x| format!("{x:.d$}"));
    let n = |e: Option<EngineFigures>, g: &dyn Fn(&EngineFigures) -> u64| {
        e.map_or("-".to_string(), |e| g(&e).to_string())
    };
    for p in points {
        s.push_str(&format!(
            "{:<8} {:>6.1}% {:>11} {:>7} {:>10}",
            p.mode,
            p.loss * 100.0,
            f(p.gbps, 3),
            f(p.share, 3),
            f(p.sim_share, 3),
        ));
        if two {
            s.push_str(&format!(
                " {:>9} {:>10} {:>9} {:>10} {:>9}",
                n(p.local, &|e| e.retx_pkts),
                n(p.local, &|e| e.fault_dropped),
                n(p.peer, &|e| e.rx_datagrams),
                n(p.peer, &|e| e.fault_dropped),
                n(p.peer, &|e| e.retx_pkts),
            ));
        }
        s.push_str(if p.error.is_some() {
            "  failed\n"
        } else {
            "\n"
        });
    }
    s.push_str(
        "  share: goodput / the same mode's lossless goodput in this sweep; sim share: the \
         simulator's (bench loss, reference fabric) for the same mode and loss\n  \
         RoCEv2's share here can sit above the simulator's at low loss: at a few Gbit/s over \
         a local veth the bandwidth-delay product is a few packets, so going back N resends \
         little; the 67 ms ACK timeout that dominates at higher loss is the same in both\n",
    );
    if two {
        s.push_str(
            "  A: this host's engine (clients), B: the peer's (servers), from their counters: \
             packets resent, frames its loss injector dropped, datagrams received\n",
        );
    }
    s
}

fn csv(points: &[Point]) -> Csv {
    let mut c = Csv::new(&[
        "mode",
        "loss",
        "goodput_gbps",
        "share",
        "sim_share",
        "ok",
        "local_retx",
        "local_fault_dropped",
        "peer_rx_datagrams",
        "peer_tx_datagrams",
        "peer_fault_frames",
        "peer_fault_dropped",
        "peer_retx",
    ]);
    let n = |e: Option<EngineFigures>, g: &dyn Fn(&EngineFigures) -> u64| {
        e.map_or(String::new(), |e| g(&e).to_string())
    };
    for p in points {
        c.push(vec![
            p.mode.into(),
            format!("{}", p.loss),
            num(p.gbps, 4),
            num(p.share, 4),
            num(p.sim_share, 4),
            if p.error.is_none() { "1" } else { "0" }.into(),
            n(p.local, &|e| e.retx_pkts),
            n(p.local, &|e| e.fault_dropped),
            n(p.peer, &|e| e.rx_datagrams),
            n(p.peer, &|e| e.tx_datagrams),
            n(p.peer, &|e| e.fault_frames),
            n(p.peer, &|e| e.fault_dropped),
            n(p.peer, &|e| e.retx_pkts),
        ]);
    }
    c
}

fn chart(points: &[Point], path: &Path) -> Result<(), String> {
    let mut series = Vec::new();
    let max_p = points.iter().map(|p| p.loss * 100.0).fold(0.1, f64::max);
    let min_p = points
        .iter()
        .map(|p| p.loss * 100.0)
        .filter(|p| *p > 0.0)
        .fold(f64::MAX, f64::min)
        .min(max_p / 2.0);
    for (i, (mode, _, _)) in MODES.iter().enumerate() {
        let color = if i == 0 {
            plot::NATIVE_COLORS[1]
        } else {
            plot::ROCE_COLORS[0]
        };
        let pick = |f: &dyn Fn(&Point) -> Option<f64>| -> Vec<(f64, f64)> {
            points
                .iter()
                .filter(|p| p.mode == *mode && p.loss > 0.0)
                .filter_map(|p| f(p).map(|v| (p.loss * 100.0, v.clamp(0.0, 1.05))))
                .collect()
        };
        series.push(Series::line(
            format!("{mode}, real packets"),
            color,
            pick(&|p| p.share),
        ));
        series.push(Series {
            dashed: true,
            ..Series::line(format!("{mode}, simulator"), color, pick(&|p| p.sim_share))
        });
    }
    let axes = Axes {
        title: "ib_write_bw on real packets: share of lossless goodput against loss".into(),
        x_desc: "random loss on every transmit (%)".into(),
        y_desc: "goodput / lossless goodput".into(),
        x: (min_p * 0.8, max_p * 1.25),
        y: (0.0, 1.05),
        log_x: true,
    };
    plot::chart(path, &axes, &series)
}
