//! `bench loss`: goodput against packet loss, native multipath vs. RoCEv2 go-back-N, on the
//! reference fabric, same link rate, RTT, MTU and messages for every mode.
//!
//! One client (host 0, pod 0) sends bulk WRITEs to one server (host 127, pod 7): 6 hops each
//! way, base RTT 14.1 µs. Loss is applied on both hosts' uplinks (host → edge switch), so every
//! data packet crosses exactly one lossy hop with probability p and so does every ACK.

use crate::fabric::{self, MTU};
use crate::latency;
use crate::progress::Progress;
use crate::roce::{self, AckTimeout};
use crate::{engine_host, native_host, Opts};
use ferroce_harness::multi::{self, Flow};
use ferroce_harness::WorkloadSpec;
use ferroce_sim::{FaultConfig, GilbertElliott, HostId};
use ferroce_transport::EndpointConfig;
use std::time::Instant;

/// Loss rates of the sweep (fractions).
pub const LOSS_RATES: [f64; 8] = [0.0, 0.001, 0.005, 0.01, 0.02, 0.05, 0.10, 0.20];
/// Path counts of the native rows.
pub const NATIVE_PATHS: [u8; 4] = [1, 4, 8, 32];

/// What runs the transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Native { paths: u8 },
    Roce(AckTimeout),
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Native { .. } => "native",
            Mode::Roce(t) => t.mode(),
        }
    }

    pub fn paths(self) -> u32 {
        match self {
            Mode::Native { paths } => paths as u32,
            // One UDP source port per QP: each QP is one ECMP path.
            Mode::Roce(_) => 1,
        }
    }

    /// Label for tables and plots.
    pub fn label(self) -> String {
        match self {
            Mode::Native { paths } => {
                format!("native, {paths} path{}", if paths == 1 { "" } else { "s" })
            }
            Mode::Roce(AckTimeout::RxeDefault) => "RoCEv2, rxe default timeout".into(),
            Mode::Roce(AckTimeout::Aggressive) => "RoCEv2, aggressive timeout".into(),
        }
    }
}

/// Loss model of one row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LossModel {
    Random(f64),
    Bursty(GilbertElliott),
}

impl LossModel {
    pub fn mean(self) -> f64 {
        match self {
            LossModel::Random(p) => p,
            LossModel::Bursty(ge) => ge.mean_loss(),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            LossModel::Random(_) => "random",
            LossModel::Bursty(_) => "gilbert-elliott",
        }
    }

    pub fn faults(self) -> FaultConfig {
        match self {
            LossModel::Random(p) => FaultConfig::loss(p),
            LossModel::Bursty(ge) => FaultConfig {
                burst: Some(ge),
                ..FaultConfig::NONE
            },
        }
    }
}

/// The bursty model: Gilbert–Elliott with everything lost in the bad state, a mean burst of
/// `burst` packets and a long-run loss rate of `mean`.
pub fn gilbert_elliott(mean: f64, burst: f64) -> GilbertElliott {
    let p_bg = 1.0 / burst.max(1.0);
    GilbertElliott::bursts(mean * p_bg / (1.0 - mean), p_bg)
}

/// Settings of the loss benchmark.
#[derive(Clone, Debug)]
pub struct LossConfig {
    pub opts: Opts,
    pub rates: Vec<f64>,
    pub native_paths: Vec<u8>,
    /// Include the RoCEv2 rows (when the build has the engine).
    pub roce: bool,
    /// Mean loss and mean burst length (packets) of the Gilbert–Elliott rows.
    pub burst_mean: f64,
    pub burst_len: f64,
    /// Streams (QPs), work requests in flight per stream, message size.
    pub streams: u32,
    pub depth: u32,
    pub msg_size: u32,
    /// Payload bytes per run.
    pub bytes: u64,
}

impl LossConfig {
    pub fn new(opts: Opts) -> Self {
        LossConfig {
            opts,
            rates: LOSS_RATES.to_vec(),
            native_paths: NATIVE_PATHS.to_vec(),
            roce: true,
            burst_mean: 0.01,
            burst_len: 8.0,
            streams: 8,
            depth: 4,
            msg_size: 65_536,
            bytes: if opts.quick { 32 << 20 } else { 64 << 20 },
        }
    }

    pub fn workload(&self) -> WorkloadSpec {
        let per_stream = self.bytes / self.streams as u64 / self.msg_size as u64;
        WorkloadSpec {
            depth: self.depth,
            ..WorkloadSpec::bulk_write(self.streams, per_stream.max(1) as u32, self.msg_size)
        }
    }

    /// Every mode of the run (RoCEv2 only when asked for and available).
    pub fn modes(&self) -> Vec<Mode> {
        let mut m: Vec<Mode> = self
            .native_paths
            .iter()
            .map(|&paths| Mode::Native { paths })
            .collect();
        if self.roce && roce::AVAILABLE {
            m.extend(AckTimeout::ALL.iter().map(|&t| Mode::Roce(t)));
        }
        m
    }

    /// Simulated-time limit of one run: a lossless run takes ~bytes / 97 Gb/s; a run that has
    /// not finished after 20 times that (and after 3 of its own ACK timeouts) is stopped and
    /// its goodput is what it completed by then.
    pub fn limit_ns(&self, mode: Mode) -> u64 {
        let lossless = self.bytes * 8 * 1_000_000_000 / fabric::LINK_BPS;
        let base = 20 * lossless;
        match mode {
            Mode::Native { .. } => 2_000_000_000,
            Mode::Roce(t) => base.max(3 * t.ns()),
        }
    }
}

/// One row of the loss table.
#[derive(Clone, Debug)]
pub struct LossRow {
    pub mode: Mode,
    pub model: LossModel,
    /// Long-run loss rate, percent.
    pub loss_pct: f64,
    pub goodput_gbps: f64,
    pub ratio_to_lossless: f64,
    /// Packets that carried data sent before (both hosts).
    pub retransmits: u64,
    pub timeouts: u64,
    pub msg_p50_us: f64,
    pub msg_p99_us: f64,
    pub completed: bool,
    /// Simulated time from the first work request to the last completion (or the limit).
    pub sim_time_us: f64,
    pub fabric_drops: u64,
    pub errors: Vec<String>,
    pub events: u64,
    pub wall_s: f64,
}

/// Result of the loss benchmark.
#[derive(Clone, Debug)]
pub struct LossReport {
    pub config: LossConfig,
    pub rtt_ns: u64,
    pub rows: Vec<LossRow>,
    /// Setup lines (topology, rate, RTT, MTU, messages, loss placement).
    pub setup: Vec<String>,
    pub notes: Vec<String>,
    pub wall_s: f64,
}

impl LossReport {
    /// The row of `mode` at random loss `p` (fraction).
    pub fn row(&self, mode: Mode, p: f64) -> Option<&LossRow> {
        self.rows.iter().find(|r| {
            r.mode == mode && matches!(r.model, LossModel::Random(q) if (q - p).abs() < 1e-12)
        })
    }

    /// Lossless goodput of native with 8 paths over the best RoCEv2 one in the same run
    /// (issue 17: a lone flow on a clean fabric pays nothing for ferroce's congestion control).
    pub fn native_over_roce_lossless(&self) -> Option<f64> {
        let n = self.row(Mode::Native { paths: 8 }, 0.0)?;
        let r = self.best_roce(0.0)?;
        Some(n.goodput_gbps / r.goodput_gbps)
    }

    /// What per-packet headers alone allow native over RoCEv2 with full packets: the wire
    /// bytes of a RoCEv2 WRITE packet (BTH + ICRC, a RETH per message) over a native one (its
    /// 52-byte WRITE header with every packet's placement). Both carry the same framing.
    pub fn header_ceiling(&self) -> f64 {
        let packets = self.config.msg_size.div_ceil(MTU as u32);
        fabric::roce_frame_bytes(MTU as u32, packets) / fabric::data_frame_bytes(MTU as u32) as f64
    }

    /// Best RoCEv2 row at random loss `p`.
    pub fn best_roce(&self, p: f64) -> Option<&LossRow> {
        AckTimeout::ALL
            .iter()
            .filter_map(|&t| self.row(Mode::Roce(t), p))
            .max_by(|a, b| a.goodput_gbps.total_cmp(&b.goodput_gbps))
    }
}

/// Outcome of one transfer.
struct Outcome {
    goodput_gbps: f64,
    completed: bool,
    elapsed_ns: u64,
    retransmits: u64,
    timeouts: u64,
    latencies: Vec<u64>,
    fabric_drops: u64,
    errors: Vec<String>,
    events: u64,
}

fn engine_for(mode: Mode, id: HostId, ip: [u8; 4], opts: Opts) -> ferroce_harness::NodeHost {
    let seed = opts.seed;
    match mode {
        Mode::Native { paths } => {
            let mut cfg = EndpointConfig::default();
            cfg.conn.cc = opts.cc;
            cfg.conn.paths = paths;
            cfg.conn.mtu = MTU;
            native_host(id, ip, &cfg, seed)
        }
        Mode::Roce(t) => match roce::engine(t, MTU, ip) {
            Some(ep) => engine_host(ip, ep),
            None => native_host(id, ip, &EndpointConfig::default(), seed),
        },
    }
}

/// Time the client's first work requests go out: connections are opened first, so the
/// handshake of the native protocol is not part of the goodput.
const START_AT: u64 = 50_000;

fn run_one(cfg: &LossConfig, mode: Mode, model: LossModel) -> Outcome {
    let seed = cfg.opts.seed;
    let topo = fabric::reference_config(seed);
    let mut sim = fabric::fat_tree(&topo, |id, ip| engine_for(mode, id, ip, cfg.opts));
    let (c, s) = (HostId(0), HostId(fabric::FAT_TREE_HOSTS as u32 - 1));
    multi::set_uplink_faults(&mut sim, &[c, s], model.faults());
    let flows = [Flow {
        client: c,
        server: s,
        workload: cfg.workload(),
        start_at: START_AT,
    }];
    let h = multi::start_flows(&mut sim, &flows);
    let limit = START_AT + cfg.limit_ns(mode);
    let completed = multi::run_flows(&mut sim, &h, limit, 10_000);
    // Let the last ACKs drain so the counters settle.
    let t = sim.now() + 100_000;
    sim.run_until(t);
    let cl = h[0].state(&sim);
    let start = cl.first_post_at.unwrap_or(START_AT);
    let end = cl.finished_at.unwrap_or(limit);
    let elapsed = end.saturating_sub(start);
    let tot = [c, s].map(|x| sim.host(x).ep.totals());
    let ft = sim.stats().totals();
    // A run stopped at the time limit has write slots not written yet: check server memory
    // only after complete runs.
    let errors = if completed {
        multi::all_errors(&sim)
    } else {
        multi::host_errors(&sim)
    };
    Outcome {
        goodput_gbps: if elapsed > 0 {
            cl.bytes_done as f64 * 8.0 / elapsed as f64
        } else {
            0.0
        },
        completed,
        elapsed_ns: elapsed,
        retransmits: tot.iter().map(|t| t.retx_pkts).sum(),
        timeouts: tot.iter().map(|t| t.timeouts).sum(),
        latencies: cl.latencies.clone(),
        fabric_drops: ft.dropped(),
        errors,
        events: sim.events_processed(),
    }
}

/// Runs the benchmark.
pub fn run(cfg: &LossConfig, progress: &dyn Progress) -> LossReport {
    let t_all = Instant::now();
    let modes = cfg.modes();
    let mut models: Vec<LossModel> = cfg.rates.iter().map(|&p| LossModel::Random(p)).collect();
    let ge = gilbert_elliott(cfg.burst_mean, cfg.burst_len);
    models.push(LossModel::Bursty(ge));
    progress.begin("loss", (modes.len() * models.len()) as u64);
    let mut rows = Vec::new();
    for &mode in &modes {
        let mut lossless = None;
        for &model in &models {
            progress.step(&format!(
                "{}, {} loss {:.1} %",
                mode.label(),
                model.name(),
                model.mean() * 100.0
            ));
            let t = Instant::now();
            let o = run_one(cfg, mode, model);
            let wall = t.elapsed().as_secs_f64();
            if model == LossModel::Random(0.0) {
                lossless = Some(o.goodput_gbps);
            }
            let lat = latency::summarise(o.latencies.iter().copied());
            rows.push(LossRow {
                mode,
                model,
                loss_pct: model.mean() * 100.0,
                goodput_gbps: o.goodput_gbps,
                ratio_to_lossless: match lossless {
                    Some(l) if l > 0.0 => o.goodput_gbps / l,
                    _ => f64::NAN,
                },
                retransmits: o.retransmits,
                timeouts: o.timeouts,
                msg_p50_us: lat.p50_us,
                msg_p99_us: lat.p99_us,
                completed: o.completed,
                sim_time_us: o.elapsed_ns as f64 / 1e3,
                fabric_drops: o.fabric_drops,
                errors: o.errors,
                events: o.events,
                wall_s: wall,
            });
        }
    }
    progress.end();
    let rtt = fabric::reference_rtt_ns();
    let w = cfg.workload();
    let mut setup = vec![
        format!("fabric: {}", fabric::describe_reference(rtt)),
        format!(
            "transfer: host 0 (pod 0) -> host {} (pod 7), 6 hops each way; {} streams (QPs) x {} WRITEs of {} B, {} in flight per stream; {} MiB per run",
            fabric::FAT_TREE_HOSTS - 1,
            w.streams,
            w.messages,
            cfg.msg_size,
            w.depth,
            cfg.bytes >> 20
        ),
        "loss: on both hosts' uplinks (host -> edge switch): every data packet and every ACK crosses exactly one lossy hop".into(),
        format!(
            "bursty loss: Gilbert-Elliott, all lost while bad, mean burst {} packets, long-run loss {:.1} % (p_gb {:.5}, p_bg {:.3})",
            cfg.burst_len,
            ge.mean_loss() * 100.0,
            ge.p_good_to_bad,
            ge.p_bad_to_good
        ),
        format!(
            "RoCEv2: IBTA RC go-back-N, one UDP source port per QP, retry count 7 (forever); local ACK timeout 4.096 µs x 2^14 = {:.1} ms (rxe/perftest default) and 4.096 µs x 2^4 = {:.1} µs (aggressive)",
            AckTimeout::RxeDefault.ns() as f64 / 1e6,
            AckTimeout::Aggressive.ns() as f64 / 1e3
        ),
    ];
    if !(cfg.roce && roce::AVAILABLE) {
        setup.push(
            "RoCEv2 rows: NOT RUN - this build has no RoCEv2 engine (ferroce-benches built without its `roce` feature)".into(),
        );
    }
    let notes = vec![
        "goodput: payload bytes of completed WRITEs / simulated time from the first work request to the last completion (connections opened beforehand)".into(),
        "ratio_to_lossless: goodput / goodput of the same mode without loss; the ceiling is 1 - p".into(),
        "retransmits: packets that carried data sent before, both hosts (selective resends, or go-back-N replays)".into(),
        "msg latency: post to completion of each WRITE (HDR histogram), including the time it waits behind earlier WRITEs of its stream".into(),
        format!(
            "a run not done after 20x the lossless transfer time (and 3 of its ACK timeouts) is stopped: its goodput counts what completed by then (completed = no)"
        ),
    ];
    LossReport {
        config: cfg.clone(),
        rtt_ns: rtt,
        rows,
        setup,
        notes,
        wall_s: t_all.elapsed().as_secs_f64(),
    }
}

/// CSV of the report (header row first).
pub fn csv(r: &LossReport) -> crate::csv::Csv {
    use crate::csv::num;
    let mut c = crate::csv::Csv::new(&[
        "mode",
        "paths",
        "loss_model",
        "loss_pct",
        "goodput_gbps",
        "ratio_to_lossless",
        "retransmits",
        "msg_p50_us",
        "msg_p99_us",
        "timeouts",
        "completed",
        "sim_time_us",
        "fabric_drops",
        "errors",
    ]);
    for x in &r.rows {
        c.push(vec![
            x.mode.name().into(),
            x.mode.paths().to_string(),
            x.model.name().into(),
            num(Some(x.loss_pct), 3),
            num(Some(x.goodput_gbps), 3),
            num(Some(x.ratio_to_lossless), 4),
            x.retransmits.to_string(),
            num(Some(x.msg_p50_us), 1),
            num(Some(x.msg_p99_us), 1),
            x.timeouts.to_string(),
            (if x.completed { "yes" } else { "no" }).into(),
            num(Some(x.sim_time_us), 1),
            x.fabric_drops.to_string(),
            x.errors.len().to_string(),
        ]);
    }
    c
}

/// Linux soft-RoCE (rxe) under `ib_write_bw`, measured on this machine with nftables loss
/// (design notes §1): (loss %, fraction of lossless throughput kept).
pub const RXE_MEASURED: [(f64, f64); 4] = [(0.1, 0.90), (1.0, 0.25), (5.0, 0.029), (10.0, 0.01)];

/// Draws goodput/lossless against loss (log axis) for every mode, the 1 - p ceiling, the
/// Gilbert-Elliott points and the rxe measurements.
pub fn plot(r: &LossReport, path: &std::path::Path) -> Result<(), String> {
    use crate::plot::{self, Axes, Series};
    use plotters::style::RGBColor;
    let mut series = Vec::new();
    let max_p = r.config.rates.iter().cloned().fold(0.0, f64::max) * 100.0;
    let min_p = r
        .config
        .rates
        .iter()
        .cloned()
        .filter(|p| *p > 0.0)
        .fold(f64::MAX, f64::min)
        * 100.0;
    let ceiling: Vec<(f64, f64)> = r
        .config
        .rates
        .iter()
        .filter(|p| **p > 0.0)
        .map(|p| (p * 100.0, 1.0 - p))
        .collect();
    series.push(Series {
        dashed: true,
        ..Series::line("ceiling 1 - p", plot::GREY, ceiling)
    });
    let (mut ni, mut ri) = (0, 0);
    for mode in r.config.modes() {
        let color = match mode {
            Mode::Native { .. } => {
                ni += 1;
                plot::NATIVE_COLORS[(ni - 1).min(3)]
            }
            Mode::Roce(_) => {
                ri += 1;
                plot::ROCE_COLORS[(ri - 1).min(1)]
            }
        };
        let pts: Vec<(f64, f64)> = r
            .rows
            .iter()
            .filter(|x| x.mode == mode && matches!(x.model, LossModel::Random(p) if p > 0.0))
            .map(|x| (x.loss_pct, x.ratio_to_lossless.clamp(0.0, 1.05)))
            .collect();
        series.push(Series::line(mode.label(), color, pts));
        let ge: Vec<(f64, f64)> = r
            .rows
            .iter()
            .filter(|x| x.mode == mode && matches!(x.model, LossModel::Bursty(_)))
            .map(|x| (x.loss_pct, x.ratio_to_lossless.clamp(0.0, 1.05)))
            .collect();
        if !ge.is_empty() {
            series.push(Series {
                markers_only: true,
                ..Series::line("", color, ge)
            });
        }
    }
    series.push(Series {
        markers_only: true,
        ..Series::line(
            format!(
                "x in a mode's colour: bursty loss (Gilbert-Elliott, {} packet bursts)",
                r.config.burst_len
            ),
            plot::GREY,
            Vec::new(),
        )
    });
    series.push(Series {
        markers_only: true,
        ..Series::line(
            "Linux rxe under ib_write_bw, measured (design notes)",
            RGBColor(0, 0, 0),
            RXE_MEASURED.to_vec(),
        )
    });
    let axes = Axes {
        title: format!(
            "Goodput under loss: 128-host fat tree, 100 Gb/s, base RTT {:.1} us, MTU {} B",
            r.rtt_ns as f64 / 1e3,
            MTU
        ),
        x_desc: "packet loss on each host uplink (%, log scale)".into(),
        y_desc: "goodput / lossless goodput".into(),
        x: (min_p.min(0.1) * 0.8, max_p.max(20.0) * 1.25),
        y: (0.0, 1.05),
        log_x: true,
    };
    plot::chart(path, &axes, &series)
}
