//! `bench incast`: N senders → 1 receiver on the reference fabric (the UEC simulator's
//! 128-host fat tree), N ∈ {8, 32, 64, 127}, with the receiver's fair-share rate hints on and
//! off; [`IncastConfig::k`] picks a larger fat tree for fan-ins past 127 (k = 16: 1,024
//! hosts). Each configuration is two runs: all N flows starting together (settle time, queue,
//! drops, fairness, completion spread), and N − 1 flows with one more joining later.
//!
//! Connections are opened before the start (ferroce's handshake takes one RTT; the UEC
//! simulator's flows open in zero RTT), so time 0 is the moment every sender posts its first
//! WRITE.

use crate::fabric::{self, BDP_BYTES, LINK_BPS, MTU};
use crate::progress::Progress;
use crate::rates::{self, first_stable, window, DeliveryLog, Sampler};
use crate::{native_host, Opts, Rng};
use ferroce_harness::multi::{self, Flow, FlowHandle};
use ferroce_harness::{NodeHost, WorkloadSpec};
use ferroce_sim::{HostId, Sim};
use ferroce_transport::EndpointConfig;
use std::time::Instant;

pub const SENDERS: [usize; 4] = [8, 32, 64, 127];

/// Settings of the incast benchmark.
#[derive(Clone, Debug)]
pub struct IncastConfig {
    pub opts: Opts,
    /// Arity of the fat tree (k³/4 hosts): 8, the reference fabric, unless set (`--k 16`:
    /// 1,024 hosts, for fan-ins past 127).
    pub k: usize,
    pub senders: Vec<usize>,
    pub hints: Vec<bool>,
    /// Bytes all senders together send in the synchronised run (split evenly, whole messages).
    pub total_bytes: u64,
    pub msg_size: u32,
    /// WRITEs in flight per sender (never the limit: 16 × 64 KiB ≫ a BDP).
    pub depth: u32,
    /// The late joiner starts this many base RTTs after the others.
    pub join_after_rtts: u64,
    /// The other flows keep running at least this many base RTTs after the join.
    pub join_run_rtts: u64,
    /// Sampling period of the receiver's delivered bytes (ns).
    pub sample_ns: u64,
    /// Settled = aggregate ≥ this fraction of the bottleneck ...
    pub agg_target: f64,
    /// ... and every sender within ± this fraction of its fair share ...
    pub share_tol: f64,
    /// ... for this many base RTTs in a row (window ends `hold` apart all pass).
    pub hold_rtts: u64,
    /// Late joiner within ± this fraction of its fair share.
    pub join_tol: f64,
    /// The pictures (`plot`) show the synchronised run's first this many base RTTs ...
    pub plot_rtts: u64,
    /// ... one point every this many samples.
    pub plot_step: usize,
}

impl IncastConfig {
    pub fn new(opts: Opts) -> Self {
        IncastConfig {
            opts,
            k: fabric::FAT_TREE_K,
            senders: SENDERS.to_vec(),
            hints: vec![true, false],
            // The incast runs are cheap (a few seconds in all): quick mode keeps their full size,
            // since shorter flows measure start-up more than fairness.
            total_bytes: 64 << 20,
            msg_size: 65_536,
            depth: 16,
            join_after_rtts: 30,
            join_run_rtts: if opts.quick { 40 } else { 80 },
            sample_ns: 250,
            agg_target: 0.90,
            share_tol: 0.20,
            hold_rtts: 1,
            join_tol: 0.25,
            plot_rtts: 40,
            plot_step: 4,
        }
    }
}

/// One configuration's figures.
#[derive(Clone, Debug)]
pub struct IncastRow {
    pub senders: usize,
    pub hints: bool,
    /// Settle time in base RTTs (None: never settled while all flows ran).
    pub settle_rtts: Option<f64>,
    /// The two halves of the settle condition on their own: the aggregate alone, and every
    /// sender within its share alone (same windows and hold), in base RTTs.
    pub agg_rtts: Option<f64>,
    pub fair_rtts: Option<f64>,
    pub max_queue_bdp: f64,
    pub drops: u64,
    pub jain: f64,
    pub fct_max_min: f64,
    /// Late joiner: base RTTs from its start until within ±25 % of its fair share.
    pub join_rtts: Option<f64>,
    pub bytes_per_sender: u64,
    /// Aggregate goodput over the synchronised run / line rate.
    pub utilisation: f64,
    pub retransmits: u64,
    pub timeouts: u64,
    pub join_max_queue_bdp: f64,
    pub join_drops: u64,
    pub completed: bool,
    pub errors: Vec<String>,
    pub events: u64,
    pub wall_s: f64,
    /// The synchronised run over time, for the pictures.
    pub trace: IncastTrace,
}

/// The synchronised run over time (time in base RTTs from 0): the aggregate and every
/// sender's rate in the 1-RTT window ending there (raw and fluid, as the settle metric reads
/// them), and the bottleneck queue (the receiver's ToR port) at that moment.
#[derive(Clone, Debug, Default)]
pub struct IncastTrace {
    pub t_rtts: Vec<f64>,
    pub agg_gbps: Vec<f64>,
    pub sender_gbps: Vec<Vec<f64>>,
    pub queue_bytes: Vec<u64>,
}

/// Result of the incast benchmark.
#[derive(Clone, Debug)]
pub struct IncastReport {
    pub config: IncastConfig,
    pub rtt_ns: u64,
    pub rows: Vec<IncastRow>,
    pub setup: Vec<String>,
    pub definitions: Vec<String>,
    pub wall_s: f64,
}

impl IncastReport {
    pub fn row(&self, senders: usize, hints: bool) -> Option<&IncastRow> {
        self.rows
            .iter()
            .find(|r| r.senders == senders && r.hints == hints)
    }
}

const RECEIVER: HostId = HostId(0);
/// When every sender posts its first WRITE (connections are up long before).
const T0: u64 = 100_000;

/// Sample indices (window ends) at which the settle conditions first hold for a whole hold
/// period: both together, the aggregate alone, every sender's share alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settle {
    pub both: Option<usize>,
    pub aggregate: Option<usize>,
    pub fair: Option<usize>,
}

/// Finds the settle points in a synchronised run: windows of `w` samples ending at `w..end`,
/// aggregate (raw cumulative `agg`) at least `agg_target` of `cap_w` bytes per window, every
/// sender's fluid bytes (`fluid`) within `share_tol` of `cap_w / N`, held for
/// `hold_rtts` windows' length.
pub fn settle(
    _log: &DeliveryLog,
    agg: &[f64],
    fluid: &[Vec<f64>],
    cfg: &IncastConfig,
    w: usize,
    cap_w: f64,
    end: usize,
) -> Settle {
    let n = fluid.len().max(1);
    let fair = cap_w / n as f64;
    let hold = w * cfg.hold_rtts as usize;
    let agg_ok = |g: usize| window(agg, g, w) >= cfg.agg_target * cap_w;
    let fair_ok = |g: usize| {
        fluid
            .iter()
            .all(|f| (window(f, g, w) - fair).abs() <= cfg.share_tol * fair)
    };
    Settle {
        both: first_stable(w, end, hold, |g| agg_ok(g) && fair_ok(g)),
        aggregate: first_stable(w, end, hold, agg_ok),
        fair: first_stable(w, end, hold, fair_ok),
    }
}

/// The senders of an N-sender incast: a seeded random choice among hosts 1..`hosts`.
pub fn pick_senders(n: usize, seed: u64, hosts: usize) -> Vec<HostId> {
    let mut all: Vec<HostId> = (1..hosts as u32).map(HostId).collect();
    Rng::new(seed ^ 0x1ca57).shuffle(&mut all);
    all.truncate(n.min(all.len()));
    all
}

fn build(cfg: &IncastConfig, hints: bool) -> Sim<NodeHost> {
    let seed = cfg.opts.seed;
    let topo = fabric::reference_config(seed);
    let ep = EndpointConfig {
        rate_hints: hints,
        ..EndpointConfig::default()
    };
    let mut ep = ep;
    ep.conn.mtu = MTU;
    ep.conn.cc = cfg.opts.cc;
    fabric::fat_tree_k(&topo, cfg.k, |id, ip| native_host(id, ip, &ep, seed))
}

fn workload(cfg: &IncastConfig, bytes: u64) -> WorkloadSpec {
    let msgs = bytes.div_ceil(cfg.msg_size as u64).max(1) as u32;
    WorkloadSpec {
        depth: cfg.depth,
        max_write_slots: 16,
        ..WorkloadSpec::bulk_write(1, msgs, cfg.msg_size)
    }
}

struct RunOut {
    log: DeliveryLog,
    queue: Vec<u64>,
    handles: Vec<FlowHandle>,
    sim: Sim<NodeHost>,
    completed: bool,
}

fn run_flows(
    cfg: &IncastConfig,
    hints: bool,
    senders: &[HostId],
    bytes: u64,
    starts: &[u64],
) -> RunOut {
    let mut sim = build(cfg, hints);
    let w = workload(cfg, bytes);
    let flows: Vec<Flow> = senders
        .iter()
        .zip(starts)
        .map(|(&c, &at)| Flow {
            client: c,
            server: RECEIVER,
            workload: w.clone(),
            start_at: at,
        })
        .collect();
    let handles = multi::start_flows(&mut sim, &flows);
    let ips: Vec<_> = senders
        .iter()
        .map(|&h| std::net::Ipv4Addr::from(sim.host_ip(h)))
        .collect();
    let mut sampler = Sampler::new(RECEIVER, &ips, T0, cfg.sample_ns);
    sampler.watch_queue_to(&sim, RECEIVER);
    for (i, &at) in starts.iter().enumerate() {
        sampler.log.set_origin(i, at);
    }
    sim.run_until(T0);
    let limit = T0 + 2_000_000_000;
    let mut n = 0u64;
    let completed = sampler.run_while(&mut sim, limit, |s| {
        n += 1;
        // Checking every flow costs O(N): do it every 16 samples (4 µs).
        n.is_multiple_of(16) && multi::all_done(s, &handles)
    });
    let t = sim.now() + 50_000;
    sim.run_until(t);
    RunOut {
        log: sampler.log,
        queue: sampler.queue,
        handles,
        sim,
        completed,
    }
}

fn run_config(cfg: &IncastConfig, n: usize, hints: bool, rtt: u64) -> IncastRow {
    let t_wall = Instant::now();
    let senders = pick_senders(n, cfg.opts.seed, fabric::fat_tree_hosts(cfg.k));
    let n = senders.len();
    let w_samples = ((rtt as f64 / cfg.sample_ns as f64).round() as usize).max(1);
    let hold = w_samples * cfg.hold_rtts as usize;
    let cap_w = LINK_BPS as f64 / 8.0 * (w_samples as u64 * cfg.sample_ns) as f64 * 1e-9;
    let msg = cfg.msg_size as u64;

    // 1. All N together.
    let per = (cfg.total_bytes / n as u64).div_ceil(msg).max(1) * msg;
    let out = run_flows(cfg, hints, &senders, per, &vec![T0; n]);
    let log = &out.log;
    let agg = log.aggregate_cumulative();
    let fluid: Vec<Vec<f64>> = (0..n).map(|i| log.fluid_cumulative(i)).collect();
    let finishes: Vec<Option<u64>> = out
        .handles
        .iter()
        .map(|h| h.state(&out.sim).finished_at)
        .collect();
    let first_finish = finishes
        .iter()
        .flatten()
        .min()
        .copied()
        .unwrap_or(out.sim.now());
    let end = log.index_of(first_finish).min(log.samples);
    let st = settle(log, &agg, &fluid, cfg, w_samples, cap_w, end);
    let settle = st.both;
    let to_rtts = |g: Option<usize>| g.map(|g| (g as u64 * cfg.sample_ns) as f64 / rtt as f64);
    let settle_rtts = to_rtts(settle);
    let agg_rtts = to_rtts(st.aggregate);
    let fair_rtts = to_rtts(st.fair);
    let trace = trace(cfg, log, &agg, &fluid, &out.queue, w_samples, rtt);
    let g_ff = log.index_of(first_finish).min(log.samples - 1);
    let shares: Vec<f64> = (0..n).map(|i| log.raw_cumulative(i)[g_ff]).collect();
    let jain = rates::jain(&shares);
    let fcts: Vec<f64> = finishes
        .iter()
        .map(|f| f.map_or(f64::INFINITY, |t| (t - T0) as f64))
        .collect();
    let fmax = fcts.iter().cloned().fold(0.0, f64::max);
    let fmin = fcts.iter().cloned().fold(f64::INFINITY, f64::min);
    let last = finishes
        .iter()
        .flatten()
        .max()
        .copied()
        .unwrap_or(out.sim.now());
    let total: u64 = out
        .handles
        .iter()
        .map(|h| h.state(&out.sim).bytes_done)
        .sum();
    let utilisation =
        total as f64 * 8.0 / (last.saturating_sub(T0).max(1)) as f64 / (LINK_BPS as f64 / 1e9);
    let st = out.sim.stats();
    let tot = multi::totals(&out.sim);
    let mut errors = multi::all_errors(&out.sim);
    let max_queue_bdp = st.max_queue_bytes() as f64 / BDP_BYTES as f64;
    let drops = st.totals().dropped();
    let mut events = out.sim.events_processed();
    let completed = out.completed;
    drop(out);

    // 2. N - 1 together, one more joins later.
    let join_at = T0 + cfg.join_after_rtts * rtt;
    let run_for = (cfg.join_after_rtts + cfg.join_run_rtts) * rtt;
    let others = (n.max(2) - 1) as u64;
    let per_j = ((LINK_BPS / 8) as f64 * run_for as f64 * 1e-9 / others as f64 / msg as f64).ceil()
        as u64
        * msg;
    let mut starts = vec![T0; n];
    starts[n - 1] = join_at;
    let out = run_flows(cfg, hints, &senders, per_j.max(msg), &starts);
    let log = &out.log;
    let fair_j = cap_w / n as f64;
    let newcomer = log.fluid_cumulative(n - 1);
    let g_join = log.index_of(join_at);
    let join = first_stable(g_join + 1, log.samples, hold, |g| {
        (window(&newcomer, g, w_samples) - fair_j).abs() <= cfg.join_tol * fair_j
    });
    let join_rtts = join.map(|g| ((g - g_join) as u64 * cfg.sample_ns) as f64 / rtt as f64);
    let jst = out.sim.stats();
    let join_max_queue_bdp = jst.max_queue_bytes() as f64 / BDP_BYTES as f64;
    let join_drops = jst.totals().dropped();
    events += out.sim.events_processed();
    errors.extend(multi::all_errors(&out.sim));
    let completed = completed && out.completed;

    IncastRow {
        senders: n,
        hints,
        settle_rtts,
        agg_rtts,
        fair_rtts,
        max_queue_bdp,
        drops,
        jain,
        fct_max_min: if fmin > 0.0 { fmax / fmin } else { f64::NAN },
        join_rtts,
        bytes_per_sender: per,
        utilisation,
        retransmits: tot.retx_pkts,
        timeouts: tot.timeouts,
        join_max_queue_bdp,
        join_drops,
        completed,
        errors,
        events,
        wall_s: t_wall.elapsed().as_secs_f64(),
        trace,
    }
}

fn trace(
    cfg: &IncastConfig,
    log: &DeliveryLog,
    agg: &[f64],
    fluid: &[Vec<f64>],
    queue: &[u64],
    w: usize,
    rtt: u64,
) -> IncastTrace {
    let end = ((cfg.plot_rtts * rtt / cfg.sample_ns) as usize).min(log.samples);
    let gbps = |bytes: f64| bytes * 8.0 / (w as u64 * cfg.sample_ns) as f64;
    let gs: Vec<usize> = (w..end).step_by(cfg.plot_step.max(1)).collect();
    IncastTrace {
        t_rtts: gs
            .iter()
            .map(|&g| (g as u64 * cfg.sample_ns) as f64 / rtt as f64)
            .collect(),
        agg_gbps: gs.iter().map(|&g| gbps(window(agg, g, w))).collect(),
        sender_gbps: fluid
            .iter()
            .map(|f| gs.iter().map(|&g| gbps(window(f, g, w))).collect())
            .collect(),
        // Sample g's queue was read at the end of sample g (the log's first sample is 1).
        queue_bytes: gs
            .iter()
            .map(|&g| queue.get(g.wrapping_sub(1)).copied().unwrap_or(0))
            .collect(),
    }
}

/// Draws one configuration's synchronised run: the aggregate, every sender's (fluid) rate and
/// the bottleneck queue over time, three panels sharing the time axis.
pub fn plot(r: &IncastReport, row: &IncastRow, path: &std::path::Path) -> Result<(), String> {
    use crate::plot::{self, Axes, Series};
    let t = &row.trace;
    let x = (0.0, r.config.plot_rtts as f64);
    let n = row.senders.max(1);
    let line = LINK_BPS as f64 / 1e9;
    let fair = line / n as f64;
    let hints = if row.hints { "on" } else { "off" };
    let pts = |ys: &[f64]| -> Vec<(f64, f64)> {
        t.t_rtts.iter().cloned().zip(ys.iter().cloned()).collect()
    };
    let flat = |y: f64| vec![(x.0, y), (x.1, y)];
    let settle = match row.settle_rtts {
        Some(s) => format!("settles at {s:.2} RTTs"),
        None => "never settles".into(),
    };
    let agg = vec![
        Series {
            dashed: true,
            ..Series::line(
                format!(
                    "{:.0} % of line rate (settle bound)",
                    r.config.agg_target * 100.0
                ),
                plot::GREY,
                flat(line * r.config.agg_target),
            )
        },
        Series::line("aggregate", plot::NATIVE_COLORS[2], pts(&t.agg_gbps)),
    ];
    let top = t
        .sender_gbps
        .iter()
        .flat_map(|s| s.iter().cloned())
        .fold(fair * 2.0, f64::max)
        .min(line);
    let mut senders: Vec<Series> = t
        .sender_gbps
        .iter()
        .map(|s| Series {
            width: 1,
            ..Series::line("", plot::NATIVE_COLORS[0], pts(s))
        })
        .collect();
    for (k, label) in [
        (1.0 - r.config.share_tol, "fair share +- tolerance"),
        (1.0 + r.config.share_tol, ""),
    ] {
        senders.push(Series {
            dashed: true,
            ..Series::line(label, plot::ROCE_COLORS[0], flat(fair * k))
        });
    }
    let q: Vec<f64> = t.queue_bytes.iter().map(|&b| b as f64 / 1e3).collect();
    let cap = BDP_BYTES as f64 / 1e3;
    let queue = vec![
        Series {
            dashed: true,
            ..Series::line("capacity (1 BDP)", plot::ROCE_COLORS[0], flat(cap))
        },
        Series::line("receiver's ToR port", plot::NATIVE_COLORS[2], pts(&q)),
    ];
    let x_desc = "time since every sender's first WRITE (base RTTs)".to_string();
    plot::panels(
        path,
        (960, 1200),
        &[
            (
                Axes {
                    title: format!(
                        "incast {n}:1, hints {hints}: aggregate goodput ({settle}, {} drops)",
                        row.drops
                    ),
                    x_desc: x_desc.clone(),
                    y_desc: "Gb/s (1-RTT window)".into(),
                    x,
                    y: (0.0, line * 1.05),
                    log_x: false,
                },
                agg,
            ),
            (
                Axes {
                    title: format!(
                        "every sender's rate (fluid, 1-RTT window), fair share {fair:.2} Gb/s"
                    ),
                    x_desc: x_desc.clone(),
                    y_desc: "Gb/s".into(),
                    x,
                    y: (0.0, top * 1.05),
                    log_x: false,
                },
                senders,
            ),
            (
                Axes {
                    title: "bottleneck queue (the receiver's ToR output port)".into(),
                    x_desc,
                    y_desc: "kB".into(),
                    x,
                    y: (0.0, cap * 1.1),
                    log_x: false,
                },
                queue,
            ),
        ],
    )
}

/// Runs the benchmark.
pub fn run(cfg: &IncastConfig, progress: &dyn Progress) -> IncastReport {
    let t_all = Instant::now();
    let rtt = fabric::reference_rtt_ns();
    progress.begin("incast", (cfg.senders.len() * cfg.hints.len()) as u64);
    let mut rows = Vec::new();
    for &n in &cfg.senders {
        for &h in &cfg.hints {
            progress.step(&format!(
                "{n} senders -> 1, hints {}",
                if h { "on" } else { "off" }
            ));
            rows.push(run_config(cfg, n, h, rtt));
        }
    }
    progress.end();
    let setup = vec![
        format!("fabric: {}", fabric::describe_fat_tree(cfg.k, rtt)),
        format!(
            "receiver: host 0; senders: a seeded random choice among hosts 1-{}; one connection each, \
             1 stream, WRITEs of {} B, {} in flight; synchronised run: {} MiB in all, split evenly; \
             late-joiner run: N-1 flows start at 0, one more at {} base RTTs, the others send enough \
             to run {} RTTs past that",
            fabric::fat_tree_hosts(cfg.k) - 1,
            cfg.msg_size,
            cfg.depth,
            cfg.total_bytes >> 20,
            cfg.join_after_rtts,
            cfg.join_run_rtts
        ),
        "connections are opened before time 0; at time 0 every sender posts its first WRITE".into(),
        "hints: the receiver's fair-share rate hint in every ACK (EndpointConfig::rate_hints) on the receiver and the senders".into(),
    ];
    let definitions = vec![
        format!(
            "rates over time: the receiver's per-connection count of new payload bytes is read every {} ns; \
             a sender's rate in a window is its fluid delivered bytes there: each delivery's bytes spread evenly \
             over the time since that sender's previous delivery (since its start for the first), so shares below \
             one packet per RTT are measured exactly; windows are 1 base RTT ({:.2} µs) long and slide by {} ns",
            cfg.sample_ns,
            rtt as f64 / 1e3,
            cfg.sample_ns
        ),
        format!(
            "settle_rtts: time from 0 to the end of the first window in which the aggregate (raw bytes delivered) \
             is >= {:.0} % of the 100 Gb/s bottleneck AND every sender is within +-{:.0} % of its fair share \
             (100 Gb/s / N), and both keep holding for every window ending in the following {} base RTT; \
             in base RTTs; '-' if that never happens while all flows run",
            cfg.agg_target * 100.0,
            cfg.share_tol * 100.0,
            cfg.hold_rtts
        ),
        "agg_rtts, fair_rtts: the same, for each half of the condition on its own (aggregate >= 90 %; every sender within +-20 %)".into(),
        format!(
            "max_queue_bdp: largest occupancy of any switch output queue, in BDPs of {BDP_BYTES} B (queue capacity is 1 BDP)"
        ),
        "drops: packets the fabric dropped (tail drops at full queues)".into(),
        "jain: Jain's index of the bytes each sender delivered from 0 until the first flow completed".into(),
        "fct_max_min: slowest / fastest flow completion time (from 0, all flows the same size)".into(),
        format!(
            "join_rtts: late joiner, base RTTs from its first WRITE until its fluid rate is within +-{:.0} % of \
             100 Gb/s / N and stays so for {} base RTT",
            cfg.join_tol * 100.0,
            cfg.hold_rtts
        ),
    ];
    IncastReport {
        config: cfg.clone(),
        rtt_ns: rtt,
        rows,
        setup,
        definitions,
        wall_s: t_all.elapsed().as_secs_f64(),
    }
}

/// CSV of the report (header row first).
pub fn csv(r: &IncastReport) -> crate::csv::Csv {
    use crate::csv::num;
    let mut c = crate::csv::Csv::new(&[
        "senders",
        "hints",
        "settle_rtts",
        "max_queue_bdp",
        "drops",
        "jain",
        "fct_max_min",
        "join_rtts",
        "agg_rtts",
        "fair_rtts",
        "bytes_per_sender",
        "utilisation",
        "retransmits",
        "timeouts",
        "join_max_queue_bdp",
        "join_drops",
        "completed",
        "errors",
    ]);
    for x in &r.rows {
        c.push(vec![
            x.senders.to_string(),
            (if x.hints { "on" } else { "off" }).into(),
            num(x.settle_rtts, 2),
            num(Some(x.max_queue_bdp), 3),
            x.drops.to_string(),
            num(Some(x.jain), 4),
            num(Some(x.fct_max_min), 4),
            num(x.join_rtts, 2),
            num(x.agg_rtts, 2),
            num(x.fair_rtts, 2),
            x.bytes_per_sender.to_string(),
            num(Some(x.utilisation), 4),
            x.retransmits.to_string(),
            x.timeouts.to_string(),
            num(Some(x.join_max_queue_bdp), 3),
            x.join_drops.to_string(),
            (if x.completed { "yes" } else { "no" }).into(),
            x.errors.len().to_string(),
        ]);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ideal fair incast: N senders, each delivering one 4 KiB packet per N packet-times in
    /// round robin from the first packet's arrival (7 µs) on. The metric must call it settled
    /// one window after the link fills, and an unfair mix must never settle.
    #[test]
    fn settle_metric_on_ideal_and_unfair_traffic() {
        let cfg = IncastConfig::new(Opts::default());
        let dt = cfg.sample_ns;
        let rtt = 14_085u64;
        let w = (rtt as f64 / dt as f64).round() as usize;
        let cap_w = LINK_BPS as f64 / 8.0 * (w as u64 * dt) as f64 * 1e-9;
        let pkt_ns = 4214 * 8 * 1_000_000_000 / LINK_BPS; // one frame at 100 Gb/s
        for n in [8usize, 64, 127] {
            for unfair in [false, true] {
                let mut log = DeliveryLog::new(n, 0, dt);
                let horizon = 200_000u64;
                log.samples = (horizon / dt) as usize + 1;
                let mut t = 7_000u64;
                let mut k = 0usize;
                while t < horizon {
                    // Unfair: sender 0 gets every other packet.
                    let s = if unfair && k.is_multiple_of(2) {
                        0
                    } else {
                        k % n
                    };
                    let g = log.index_of(t) as u32;
                    match log.arrivals[s].last_mut() {
                        Some(last) if last.0 == g => last.1 += 4096,
                        _ => log.arrivals[s].push((g, 4096)),
                    }
                    t += pkt_ns;
                    k += 1;
                }
                let agg = log.aggregate_cumulative();
                let fluid: Vec<Vec<f64>> = (0..n).map(|i| log.fluid_cumulative(i)).collect();
                let st = settle(&log, &agg, &fluid, &cfg, w, cap_w, log.samples);
                let rtts = |g: Option<usize>| g.map(|g| (g as u64 * dt) as f64 / rtt as f64);
                if unfair {
                    assert_eq!(st.both, None, "n {n}: unfair traffic settled");
                    assert!(st.aggregate.is_some());
                } else {
                    // The first full window ends ~7 µs + 1 RTT in; a sender's first packet
                    // arrives up to one round (n packet-times) after the start.
                    let round = (7_000 + n as u64 * pkt_ns + rtt) as f64 / rtt as f64;
                    let got = rtts(st.both).expect("ideal traffic settles");
                    eprintln!("ideal incast, {n} senders: settles at {got:.2} base RTTs");
                    assert!(
                        got <= round + 0.1,
                        "n {n}: settled at {got} RTTs, bound {round}"
                    );
                }
            }
        }
    }
}
