//! `bench across` (scale-across, issue 18 item 3): two k = 4 fat trees joined core to core by
//! long-haul links (one-way delay 0.5 ms and 5 ms, 100 Gb/s, loss 0 / 0.01 % / 0.1 %).
//!
//! - **single**: one long flow, host 0 (site 0) → the last host (site 1), alone: its goodput
//!   against line rate, native with the default configuration, native configured for the
//!   RTT (`ConnConfig::cover_rtt`, spec/transport.md §4.7) and RoCEv2 beside them.
//! - **shared**: a long flow (site 0 → the server) and a short one (the server's own site,
//!   another pod → the server) at once: both share the server's downlink; each flow's
//!   goodput and Jain's index of the two.
//!
//! Goodput is measured over a window in steady state (from 3 long RTTs after the start to
//! the end of the run), from the bytes of completed WRITEs, so neither the first RTT nor the
//! last completions' RTT is counted against a 10 ms-RTT flow.

use crate::fabric::{self, LINK_BPS, MTU};
use crate::progress::Progress;
use crate::roce::{self, AckTimeout};
use crate::{engine_host, native_host, Opts};
use ferroce_harness::multi::{self, Flow, FlowHandle};
use ferroce_harness::{NodeHost, WorkloadSpec};
use ferroce_sim::topology::{self, LinkSpec, TopologyConfig};
use ferroce_sim::{Dir, FaultConfig, HostId, Node, Sim};
use ferroce_transport::EndpointConfig;
use std::time::Instant;

/// One-way delays of the long-haul links (ns).
pub const DELAYS_NS: [u64; 2] = [500_000, 5_000_000];
/// Loss rates of the long-haul links (fractions, each direction).
pub const LOSSES: [f64; 3] = [0.0, 0.0001, 0.001];
/// Fat-tree arity of each site.
pub const K: usize = 4;
/// Hosts per site.
pub const SITE_HOSTS: u32 = (K * K * K / 4) as u32;

/// What runs the long flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `EndpointConfig::default()` (16 paths, data-centre timers).
    NativeDefault,
    /// The default configured for the long haul's RTT (`ConnConfig::cover_rtt`).
    NativeCovered,
    /// IBTA RC go-back-N, rxe's defaults (128 unacked PSNs per QP, 67 ms ACK timeout).
    Roce,
    /// What each part of `cover_rtt` buys (lone flow, lossless only): its timers alone (16
    /// paths, per-path window ceiling `W0` = line rate × 20 µs) ...
    AblateTimers,
    /// ... its timers and `initial_rtt` (ceiling `W0` = the BDP), still 16 paths of 256 PSNs.
    AblatePaths16,
}

impl Mode {
    pub const ALL: [Mode; 5] = [
        Mode::NativeDefault,
        Mode::NativeCovered,
        Mode::Roce,
        Mode::AblateTimers,
        Mode::AblatePaths16,
    ];

    /// Modes that only run the lone lossless flow.
    pub fn ablation(self) -> bool {
        matches!(self, Mode::AblateTimers | Mode::AblatePaths16)
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::NativeDefault => "native-default",
            Mode::NativeCovered => "native-cover-rtt",
            Mode::Roce => "rocev2",
            Mode::AblateTimers => "cover-rtt-timers-only",
            Mode::AblatePaths16 => "cover-rtt-16-paths",
        }
    }
}

/// Settings of the scale-across benchmark.
#[derive(Clone, Debug)]
pub struct AcrossConfig {
    pub opts: Opts,
    pub delays_ns: Vec<u64>,
    pub losses: Vec<f64>,
    pub modes: Vec<Mode>,
    /// Measurement window after the warm-up of 3 long RTTs (ns).
    pub window_ns: u64,
    /// Streams (QPs) per flow, WRITE size, WRITEs in flight per stream.
    pub streams: u32,
    pub msg_size: u32,
    pub depth: u32,
}

impl AcrossConfig {
    pub fn new(opts: Opts) -> Self {
        AcrossConfig {
            opts,
            delays_ns: DELAYS_NS.to_vec(),
            losses: LOSSES.to_vec(),
            modes: Mode::ALL
                .into_iter()
                .filter(|&m| m != Mode::Roce || roce::AVAILABLE)
                .collect(),
            window_ns: if opts.quick { 30_000_000 } else { 100_000_000 },
            streams: 8,
            msg_size: 1 << 20,
            depth: 32,
        }
    }

    /// Bulk WRITEs, more than the run can complete (the run ends at its time limit).
    pub fn workload(&self, run_ns: u64) -> WorkloadSpec {
        let bytes = LINK_BPS / 8 * run_ns / 1_000_000_000 * 2;
        let per = bytes.div_ceil(self.msg_size as u64 * self.streams as u64);
        WorkloadSpec {
            depth: self.depth,
            ..WorkloadSpec::bulk_write(self.streams, per.max(1) as u32, self.msg_size)
        }
    }
}

/// Base RTT between the sites over the long haul: 6 fabric links and the long one, each
/// way, with one data packet's and one ACK's serialisation per link.
pub fn long_rtt_ns(one_way_ns: u64) -> u64 {
    let topo = TopologyConfig::default();
    fabric::base_rtt_ns(&topo, 7, MTU) - 2 * topo.prop_delay + 2 * one_way_ns
}

/// One row: a flow of a run.
#[derive(Clone, Debug)]
pub struct AcrossRow {
    /// "single" or "shared".
    pub scenario: &'static str,
    pub mode: Mode,
    /// "long" or "short".
    pub flow: &'static str,
    pub one_way_ms: f64,
    pub loss_pct: f64,
    pub paths: u8,
    pub goodput_gbps: f64,
    /// Goodput / line rate (100 Gb/s).
    pub of_line: f64,
    /// Jain's index of the two flows (shared rows only).
    pub jain: Option<f64>,
    pub retransmits: u64,
    pub timeouts: u64,
    /// Wire bytes the receiver sent (ACKs) per payload byte it received in the window.
    pub ack_overhead: Option<f64>,
    pub errors: Vec<String>,
    pub events: u64,
    pub wall_s: f64,
}

/// Result of the benchmark.
#[derive(Clone, Debug)]
pub struct AcrossReport {
    pub config: AcrossConfig,
    pub rows: Vec<AcrossRow>,
    pub setup: Vec<String>,
    pub definitions: Vec<String>,
    pub wall_s: f64,
}

impl AcrossReport {
    pub fn row(
        &self,
        scenario: &str,
        mode: Mode,
        flow: &str,
        one_way_ns: u64,
        loss: f64,
    ) -> Option<&AcrossRow> {
        self.rows.iter().find(|r| {
            r.scenario == scenario
                && r.mode == mode
                && r.flow == flow
                && (r.one_way_ms - one_way_ns as f64 / 1e6).abs() < 1e-9
                && (r.loss_pct - loss * 100.0).abs() < 1e-9
        })
    }
}

/// The endpoint configuration of a host in `mode` whose flows see `rtt_ns`.
pub fn endpoint(mode: Mode, opts: Opts, rtt_ns: u64) -> EndpointConfig {
    let mut ep = EndpointConfig::default();
    ep.conn.mtu = MTU;
    ep.conn.cc = opts.cc;
    let dflt = ep.conn.clone();
    match mode {
        Mode::NativeCovered => ep.conn = dflt.cover_rtt(rtt_ns, ep.line_rate_mbps),
        Mode::AblateTimers => {
            ep.conn = dflt.clone().cover_rtt(rtt_ns, ep.line_rate_mbps);
            ep.conn.paths = dflt.paths;
            ep.conn.initial_rtt_ns = dflt.initial_rtt_ns;
        }
        Mode::AblatePaths16 => {
            ep.conn = dflt.clone().cover_rtt(rtt_ns, ep.line_rate_mbps);
            ep.conn.paths = dflt.paths;
        }
        Mode::NativeDefault | Mode::Roce => {}
    }
    ep
}

fn host_for(mode: Mode, id: HostId, ip: [u8; 4], ep: &EndpointConfig, seed: u64) -> NodeHost {
    match mode {
        Mode::Roce => match roce::engine(AckTimeout::RxeDefault, MTU, ip) {
            Some(e) => engine_host(ip, e),
            None => native_host(id, ip, ep, seed),
        },
        _ => native_host(id, ip, ep, seed),
    }
}

/// The two sites with the long haul's delay and loss; every host in `mode`, except
/// `default_hosts`, which run the default native configuration (a same-site flow's client).
fn sim(
    cfg: &AcrossConfig,
    mode: Mode,
    one_way_ns: u64,
    loss: f64,
    default_hosts: &[HostId],
) -> Sim<NodeHost> {
    let seed = cfg.opts.seed;
    let topo = fabric::reference_config(seed);
    let long = LinkSpec {
        rate_bps: LINK_BPS,
        delay: one_way_ns,
    };
    let ep = endpoint(mode, cfg.opts, long_rtt_ns(one_way_ns));
    let dflt = endpoint(Mode::NativeDefault, cfg.opts, 0);
    let mut sim = topology::across(&topo, K, long).build_with(|id, ip| {
        if default_hosts.contains(&id) && mode != Mode::Roce {
            native_host(id, ip, &dflt, seed)
        } else {
            host_for(mode, id, ip, &ep, seed)
        }
    });
    if loss > 0.0 {
        for l in topology::across_long_haul_links(K) {
            sim.set_link_faults(l, Dir::AtoB, FaultConfig::loss(loss));
            sim.set_link_faults(l, Dir::BtoA, FaultConfig::loss(loss));
        }
    }
    sim
}

/// Connections are opened at 0; work is posted here (after the longest handshake).
const START_AT: u64 = 12_000_000;

struct Measured {
    goodput_gbps: Vec<f64>,
    ack_overhead: Option<f64>,
    retransmits: u64,
    timeouts: u64,
    errors: Vec<String>,
    events: u64,
}

/// Runs `flows` (all to one server), warm-up then the window; each flow's goodput over the
/// window from its completed bytes.
fn measure(sim: &mut Sim<NodeHost>, flows: &[Flow], warmup_ns: u64, window_ns: u64) -> Measured {
    let h: Vec<FlowHandle> = multi::start_flows(sim, flows);
    let t1 = START_AT + warmup_ns;
    let _ = multi::run_flows(sim, &h, t1, 100_000);
    let server = flows[0].server;
    let up = sim.host_links(server)[0];
    let up_dir = sim
        .link_dir_from(up, Node::Host(server))
        .unwrap_or(Dir::AtoB);
    let b0: Vec<u64> = h.iter().map(|f| f.state(sim).bytes_done).collect();
    let ack0 = sim.stats().link(up, up_dir).tx_bytes;
    let _ = multi::run_flows(sim, &h, t1 + window_ns, 100_000);
    let b1: Vec<u64> = h.iter().map(|f| f.state(sim).bytes_done).collect();
    let ack1 = sim.stats().link(up, up_dir).tx_bytes;
    let payload: u64 = b1.iter().zip(&b0).map(|(a, b)| a - b).sum();
    let tot = multi::totals(sim);
    Measured {
        goodput_gbps: b1
            .iter()
            .zip(&b0)
            .map(|(a, b)| (a - b) as f64 * 8.0 / window_ns as f64)
            .collect(),
        // Nothing completed: no ratio (the ACKs of a stalled flow acknowledge nothing).
        ack_overhead: (payload > 0).then(|| (ack1 - ack0) as f64 / payload as f64),
        retransmits: tot.retx_pkts,
        timeouts: tot.timeouts,
        // The run stops mid-transfer: completions and received data are checked, the
        // server's final memory is not.
        errors: multi::host_errors(sim),
        events: sim.events_processed(),
    }
}

/// Jain's fairness index of `x`.
pub fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let q: f64 = x.iter().map(|v| v * v).sum();
    if q <= 0.0 {
        return f64::NAN;
    }
    s * s / (x.len() as f64 * q)
}

fn paths_of(mode: Mode, opts: Opts, rtt: u64) -> u8 {
    match mode {
        Mode::Roce => 1,
        _ => endpoint(mode, opts, rtt).conn.paths,
    }
}

#[allow(clippy::too_many_arguments)]
fn row(
    scenario: &'static str,
    mode: Mode,
    flow: &'static str,
    one_way_ns: u64,
    loss: f64,
    paths: u8,
    gbps: f64,
    m: &Measured,
    wall_s: f64,
) -> AcrossRow {
    AcrossRow {
        scenario,
        mode,
        flow,
        one_way_ms: one_way_ns as f64 / 1e6,
        loss_pct: loss * 100.0,
        paths,
        goodput_gbps: gbps,
        of_line: gbps * 1e9 / LINK_BPS as f64,
        jain: None,
        retransmits: m.retransmits,
        timeouts: m.timeouts,
        ack_overhead: m.ack_overhead,
        errors: m.errors.clone(),
        events: m.events,
        wall_s,
    }
}

/// Runs the benchmark.
pub fn run(cfg: &AcrossConfig, progress: &dyn Progress) -> AcrossReport {
    let t_all = Instant::now();
    let full = cfg.modes.iter().filter(|m| !m.ablation()).count();
    let ablate = cfg.modes.len() - full;
    let n_single = (full * cfg.losses.len() + ablate) * cfg.delays_ns.len();
    let n_shared = full * cfg.delays_ns.len();
    progress.begin("across", (n_single + n_shared) as u64);
    let client = HostId(0);
    let server = HostId(2 * SITE_HOSTS - 1);
    // The short flow's client: the server's site, another pod.
    let near = HostId(SITE_HOSTS);
    let mut rows = Vec::new();
    for &d in &cfg.delays_ns {
        let rtt = long_rtt_ns(d);
        let warmup = 3 * rtt;
        let w = cfg.workload(warmup + cfg.window_ns);
        for &mode in &cfg.modes {
            for &loss in &cfg.losses {
                if mode.ablation() && loss > 0.0 {
                    continue;
                }
                progress.step(&format!(
                    "single, {}, {} ms, loss {} %",
                    mode.name(),
                    d as f64 / 1e6,
                    loss * 100.0
                ));
                let t = Instant::now();
                let mut s = sim(cfg, mode, d, loss, &[]);
                let flows = [Flow {
                    client,
                    server,
                    workload: w.clone(),
                    start_at: START_AT,
                }];
                let m = measure(&mut s, &flows, warmup, cfg.window_ns);
                let paths = paths_of(mode, cfg.opts, rtt);
                let g = m.goodput_gbps[0];
                rows.push(row(
                    "single",
                    mode,
                    "long",
                    d,
                    loss,
                    paths,
                    g,
                    &m,
                    t.elapsed().as_secs_f64(),
                ));
            }
            if mode.ablation() {
                continue;
            }
            progress.step(&format!("shared, {}, {} ms", mode.name(), d as f64 / 1e6));
            let t = Instant::now();
            let mut s = sim(cfg, mode, d, 0.0, &[near]);
            let flows = [
                Flow {
                    client,
                    server,
                    workload: w.clone(),
                    start_at: START_AT,
                },
                Flow {
                    client: near,
                    server,
                    workload: w.clone(),
                    start_at: START_AT,
                },
            ];
            let m = measure(&mut s, &flows, warmup, cfg.window_ns);
            let j = jain(&m.goodput_gbps);
            let wall = t.elapsed().as_secs_f64();
            let near_paths = match mode {
                Mode::Roce => 1,
                _ => paths_of(mode, cfg.opts, rtt).min(paths_of(Mode::NativeDefault, cfg.opts, 0)),
            };
            for (i, (flow, p)) in [
                ("long", paths_of(mode, cfg.opts, rtt)),
                ("short", near_paths),
            ]
            .into_iter()
            .enumerate()
            {
                let mut r = row("shared", mode, flow, d, 0.0, p, m.goodput_gbps[i], &m, wall);
                r.jain = Some(j);
                rows.push(r);
            }
        }
    }
    progress.end();
    let setup = vec![
        format!(
            "fabric: two k = {K} fat trees ({SITE_HOSTS} hosts each, 100 Gb/s links, 1 µs per hop, queues of 43 x 4150 B, ECN above 20 %), core i of site 0 joined to core i of site 1 by a 100 Gb/s long-haul link ({} links); loss on the long-haul links, both directions",
            (K / 2) * (K / 2)
        ),
        format!(
            "base RTT across: {}",
            cfg.delays_ns
                .iter()
                .map(|&d| format!("{:.3} ms at {} ms one-way", long_rtt_ns(d) as f64 / 1e6, d as f64 / 1e6))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        format!(
            "single: host {} (site 0) -> host {} (site 1), alone. shared: the same long flow and a short one from host {} (site 1, another pod) to host {}, started together",
            client.0, server.0, near.0, server.0
        ),
        format!(
            "each flow: {} streams x WRITEs of {} KiB, {} in flight per stream ({} MiB); goodput over {} ms after a warm-up of 3 long RTTs",
            cfg.streams,
            cfg.msg_size >> 10,
            cfg.depth,
            (cfg.streams as u64 * cfg.depth as u64 * cfg.msg_size as u64) >> 20,
            cfg.window_ns / 1_000_000
        ),
        "native-default: EndpointConfig::default(); native-cover-rtt: ConnConfig::cover_rtt(long RTT) on every host but the short flow's client (spec/transport.md §4.7); cover-rtt-timers-only: its RTOs but 16 paths and initial_rtt 20 µs; cover-rtt-16-paths: its RTOs and initial_rtt but 16 paths; rocev2: IBTA RC go-back-N, rxe defaults (128 unacked PSNs per QP, ACK timeout 67.1 ms, retry forever)".into(),
    ];
    let definitions = vec![
        "goodput: payload bytes of WRITEs completed within the window / the window".into(),
        "of line: goodput / 100 Gb/s (the full-packet ceiling is 4096 B of payload per 4174 B on the wire, 0.981)".into(),
        "jain: (a + b)^2 / (2 (a^2 + b^2)) of the two flows' goodputs".into(),
        "ack B/B: wire bytes the server sent (its ACKs) per payload byte completed in the window".into(),
        "retx, RTOs: whole run, every host".into(),
    ];
    AcrossReport {
        config: cfg.clone(),
        rows,
        setup,
        definitions,
        wall_s: t_all.elapsed().as_secs_f64(),
    }
}

/// CSV of the report.
pub fn csv(r: &AcrossReport) -> crate::csv::Csv {
    use crate::csv::num;
    let mut c = crate::csv::Csv::new(&[
        "scenario",
        "mode",
        "flow",
        "one_way_ms",
        "loss_pct",
        "paths",
        "goodput_gbps",
        "of_line",
        "jain",
        "retransmits",
        "timeouts",
        "ack_bytes_per_payload_byte",
        "errors",
        "events",
    ]);
    for x in &r.rows {
        c.push(vec![
            x.scenario.into(),
            x.mode.name().into(),
            x.flow.into(),
            format!("{}", x.one_way_ms),
            format!("{}", x.loss_pct),
            x.paths.to_string(),
            num(Some(x.goodput_gbps), 3),
            num(Some(x.of_line), 4),
            num(x.jain, 4),
            x.retransmits.to_string(),
            x.timeouts.to_string(),
            num(x.ack_overhead, 5),
            x.errors.len().to_string(),
            x.events.to_string(),
        ]);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jain_of_equal_and_lopsided_shares() {
        assert!((jain(&[40.0, 40.0]) - 1.0).abs() < 1e-12);
        assert!((jain(&[1.0, 0.0]) - 0.5).abs() < 1e-12);
        assert!(jain(&[0.0, 0.0]).is_nan());
    }

    /// The 0.5 ms long haul, shortened: configured for its RTT a lone flow fills the line
    /// with and without loss, and a long and a short flow split the server's downlink.
    #[test]
    fn a_connection_configured_for_the_rtt_fills_a_long_haul() {
        let opts = Opts {
            quick: true,
            ..Opts::default()
        };
        let mut cfg = AcrossConfig::new(opts);
        cfg.delays_ns = vec![500_000];
        cfg.losses = vec![0.0, 0.001];
        cfg.modes = vec![Mode::NativeCovered];
        cfg.window_ns = 8_000_000;
        let r = run(&cfg, &crate::progress::Silent);
        let d = 500_000;
        for loss in [0.0, 0.001] {
            let x = r
                .row("single", Mode::NativeCovered, "long", d, loss)
                .unwrap();
            assert!(x.errors.is_empty(), "{:?}", x.errors);
            assert!(x.of_line >= 0.9, "loss {loss}: {x:?}");
            assert_eq!(x.paths, 19);
        }
        let long = r
            .row("shared", Mode::NativeCovered, "long", d, 0.0)
            .unwrap();
        let short = r
            .row("shared", Mode::NativeCovered, "short", d, 0.0)
            .unwrap();
        assert!(long.jain.unwrap() >= 0.95, "{long:?} {short:?}");
        assert!(long.goodput_gbps + short.goodput_gbps >= 90.0);
    }
}
