//! `bench permutation`: on the reference fabric every host sends 16 MiB to a distinct host (a
//! seeded random permutation without fixed points), all starting together; per-flow rate as a
//! fraction of line rate, with 1 path per connection (plain per-flow ECMP) and with the
//! default path count (spraying over that many ECMP paths).

use crate::fabric::{self, LINK_BPS, MTU};
use crate::progress::Progress;
use crate::{native_host, Opts, Rng};
use ferroce_harness::multi::{self, Flow};
use ferroce_harness::WorkloadSpec;
use ferroce_sim::HostId;
use ferroce_transport::EndpointConfig;
use std::time::Instant;

/// Settings of the permutation benchmark.
#[derive(Clone, Debug)]
pub struct PermutationConfig {
    pub opts: Opts,
    /// Path counts to compare (0 = the transport's default).
    pub paths: Vec<u8>,
    pub bytes_per_flow: u64,
    pub msg_size: u32,
    pub depth: u32,
    /// Fat-tree arity (k³/4 hosts, one flow each); the reference fabric's 8 unless asked.
    pub k: usize,
    /// Diagnostic: write per-flow, per-path and per-queue traces of the default-paths row
    /// into this directory (see [`trace`]). Off (None) costs nothing.
    pub trace: Option<std::path::PathBuf>,
}

impl PermutationConfig {
    pub fn new(opts: Opts) -> Self {
        PermutationConfig {
            opts,
            paths: vec![1, 0],
            // Quick mode keeps the full 16 MiB: the run takes seconds, and shorter flows
            // measure their start more than the steady spraying the threshold is about.
            bytes_per_flow: 16 << 20,
            msg_size: 65_536,
            depth: 16,
            k: fabric::FAT_TREE_K,
            trace: None,
        }
    }

    /// Hosts of the fabric, one flow each.
    pub fn hosts(&self) -> usize {
        fabric::fat_tree_hosts(self.k)
    }

    /// The WRITE size and count of one flow: a flow smaller than one WRITE is one WRITE.
    pub fn writes(&self) -> (u32, u32) {
        let msg = self.bytes_per_flow.clamp(1, self.msg_size as u64);
        (msg as u32, self.bytes_per_flow.div_ceil(msg) as u32)
    }

    /// The flow size as the setup line and the threshold name say it: MiB when whole.
    pub fn flow_size_name(&self) -> String {
        let b = self.bytes_per_flow;
        if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
            format!("{} MiB", b >> 20)
        } else if b.is_multiple_of(1024) {
            format!("{} KiB", b >> 10)
        } else {
            format!("{b} B")
        }
    }
}

/// One path setting's figures.
#[derive(Clone, Debug)]
pub struct PermutationRow {
    pub paths: u8,
    pub default_paths: bool,
    /// Mean and worst per-flow rate, fractions of line rate.
    pub mean_rate: f64,
    pub worst_rate: f64,
    /// Best flow, 10th percentile.
    pub best_rate: f64,
    pub p10_rate: f64,
    /// Every flow's rate (fraction of line rate), ascending: the CDF's points.
    pub rates: Vec<f64>,
    pub retransmits: u64,
    pub timeouts: u64,
    pub drops: u64,
    pub max_queue_bdp: f64,
    pub completed: bool,
    pub errors: Vec<String>,
    pub events: u64,
    pub wall_s: f64,
}

/// Result of the permutation benchmark.
#[derive(Clone, Debug)]
pub struct PermutationReport {
    pub config: PermutationConfig,
    pub rows: Vec<PermutationRow>,
    pub setup: Vec<String>,
    pub definitions: Vec<String>,
    pub wall_s: f64,
}

impl PermutationReport {
    /// The row with the transport's default path count.
    pub fn spraying(&self) -> Option<&PermutationRow> {
        self.rows.iter().find(|r| r.default_paths)
    }
    pub fn single_path(&self) -> Option<&PermutationRow> {
        self.rows.iter().find(|r| r.paths == 1 && !r.default_paths)
    }
}

/// A seeded random permutation of `0..n` without fixed points (Sattolo's algorithm: a single
/// cycle, so every host sends to another and receives from another).
pub fn derangement(n: usize, seed: u64) -> Vec<usize> {
    let mut p: Vec<usize> = (0..n).collect();
    let mut rng = Rng::new(seed ^ 0x9e57);
    for i in (1..n).rev() {
        let j = rng.below(i);
        p.swap(i, j);
    }
    p
}

const T0: u64 = 100_000;

fn run_one(cfg: &PermutationConfig, paths: u8) -> PermutationRow {
    let t_wall = Instant::now();
    let seed = cfg.opts.seed;
    let topo = fabric::reference_config(seed);
    let mut ep = EndpointConfig::default();
    let default_paths = paths == 0;
    if !default_paths {
        ep.conn.paths = paths;
    }
    ep.conn.mtu = MTU;
    ep.conn.cc = cfg.opts.cc;
    let paths_used = ep.conn.paths;
    let mut sim = fabric::fat_tree_k(&topo, cfg.k, |id, ip| native_host(id, ip, &ep, seed));
    let n = cfg.hosts();
    let perm = derangement(n, seed);
    let (msg, msgs) = cfg.writes();
    let w = WorkloadSpec {
        depth: cfg.depth.min(msgs),
        max_write_slots: 16,
        ..WorkloadSpec::bulk_write(1, msgs, msg)
    };
    let flows: Vec<Flow> = (0..n)
        .map(|i| Flow {
            client: HostId(i as u32),
            server: HostId(perm[i] as u32),
            workload: w.clone(),
            start_at: T0,
        })
        .collect();
    let h = multi::start_flows(&mut sim, &flows);
    let limit = T0 + 2_000_000_000;
    let completed = match cfg.trace.as_deref().filter(|_| default_paths) {
        Some(dir) => trace::run(&mut sim, &h, limit, dir),
        None => multi::run_flows(&mut sim, &h, limit, 5_000),
    };
    let t = sim.now() + 50_000;
    sim.run_until(t);
    let line = LINK_BPS as f64 / 1e9;
    let mut rates: Vec<f64> = h
        .iter()
        .map(|f| {
            let c = f.state(&sim);
            match c.finished_at {
                Some(end) => c.bytes_done as f64 * 8.0 / (end - T0) as f64 / line,
                None => 0.0,
            }
        })
        .collect();
    rates.sort_by(f64::total_cmp);
    let tot = multi::totals(&sim);
    let st = sim.stats();
    PermutationRow {
        paths: paths_used,
        default_paths,
        mean_rate: rates.iter().sum::<f64>() / rates.len() as f64,
        worst_rate: rates[0],
        best_rate: rates[rates.len() - 1],
        p10_rate: rates[rates.len() / 10],
        rates: rates.clone(),
        retransmits: tot.retx_pkts,
        timeouts: tot.timeouts,
        drops: st.totals().dropped(),
        max_queue_bdp: st.max_queue_bytes() as f64 / fabric::BDP_BYTES as f64,
        completed,
        errors: multi::all_errors(&sim),
        events: sim.events_processed(),
        wall_s: t_wall.elapsed().as_secs_f64(),
    }
}

/// The diagnostic trace of one run (`PermutationConfig::trace`): what holds the slowest
/// flows back. Files, all CSV:
/// - `series.csv`: every 10 µs, every flow's bytes done and each path's window, bytes in
///   flight, packets acknowledged and CE marks echoed so far;
/// - `queues_series.csv`: every 10 µs, the occupancy of every switch output port that held
///   more than the ECN threshold at least once in the run;
/// - `paths.csv`: per flow and path, its source port, the switch ports its packets cross
///   (edge uplink, aggregation uplink, core downlink, aggregation downlink), its totals;
/// - `ports.csv`: per switch output port, its totals and how many paths and flows cross it;
/// - `flows.csv`: per flow, its rate and totals.
pub mod trace {
    use super::*;
    use crate::csv::{num, Csv};
    use ferroce_harness::multi::FlowHandle;
    use ferroce_harness::NodeHost;
    use ferroce_sim::{Sim, SwitchId};
    use ferroce_transport::wire::NATIVE_UDP_PORT;
    use std::collections::BTreeMap;
    use std::path::Path;

    const EVERY: u64 = 10_000;

    fn conn<'a>(
        sim: &'a Sim<NodeHost>,
        f: &FlowHandle,
    ) -> Option<&'a ferroce_transport::Connection> {
        let id = f.state(sim).conn?;
        sim.host(f.client).native()?.connection(id)
    }

    /// `multi::run_flows` with samples; returns whether every flow finished.
    pub fn run(sim: &mut Sim<NodeHost>, h: &[FlowHandle], limit: u64, dir: &Path) -> bool {
        let _ = std::fs::create_dir_all(dir);
        let mut series = Csv::new(&[
            "t_us",
            "flow",
            "path",
            "bytes_done",
            "cwnd",
            "inflight",
            "acked",
            "ecn",
            "tx",
            "entropy",
        ]);
        let mut qs: Vec<(u64, u32, u16, u64)> = Vec::new();
        let nsw = sim.num_switches();
        let completed = loop {
            let t = sim.now();
            if t.is_multiple_of(EVERY) {
                for (fi, f) in h.iter().enumerate() {
                    let done = f.state(sim).bytes_done;
                    let Some(c) = conn(sim, f) else { continue };
                    for (pi, p) in c.paths().iter().enumerate() {
                        let k = p.counters();
                        series.push(vec![
                            format!("{:.0}", t as f64 / 1e3),
                            fi.to_string(),
                            pi.to_string(),
                            done.to_string(),
                            format!("{:.0}", p.cwnd()),
                            p.inflight_bytes.to_string(),
                            k.acked_pkts.to_string(),
                            k.ecn_echoed.to_string(),
                            k.tx_pkts.to_string(),
                            p.entropy.to_string(),
                        ]);
                    }
                }
                for sw in 0..nsw {
                    let id = SwitchId(sw as u32);
                    for port in 0..sim.switch_links(id).len() {
                        let b = sim.switch_queue_bytes(id, port);
                        if b > 0 {
                            qs.push((t, sw as u32, port as u16, b));
                        }
                    }
                }
            }
            if multi::all_done(sim, h) {
                break true;
            }
            if sim.now() >= limit || sim.next_event_time().is_none() {
                break multi::all_done(sim, h);
            }
            let next = ((sim.now() / 5_000) + 1) * 5_000;
            sim.run_until(next.min(limit));
        };
        let _ = series.write(&dir.join("series.csv"));
        write_static(sim, h, &qs, dir);
        completed
    }

    fn role(sim: &Sim<NodeHost>, sw: SwitchId) -> String {
        sim.switch_info(sw)
            .map(|i| format!("{:?}{}", i.role, i.index))
            .unwrap_or_default()
    }

    /// Name of the far end of switch `sw`'s port `port`.
    fn far(sim: &Sim<NodeHost>, sw: SwitchId, port: usize) -> String {
        use ferroce_sim::Node;
        let Some(l) = sim.switch_port_link(sw, port) else {
            return String::new();
        };
        let Some((a, b)) = sim.link_ends(l) else {
            return String::new();
        };
        let other = if a == Node::Switch(sw) { b } else { a };
        match other {
            Node::Host(hh) => format!("host{}", hh.0),
            Node::Switch(s) => role(sim, s),
        }
    }

    fn write_static(
        sim: &Sim<NodeHost>,
        h: &[FlowHandle],
        qs: &[(u64, u32, u16, u64)],
        dir: &Path,
    ) {
        let st = sim.stats();
        let line = LINK_BPS as f64 / 1e9;
        // Who crosses which switch port: (flow, path) pairs.
        let mut users: BTreeMap<(u32, usize), Vec<(usize, usize)>> = BTreeMap::new();
        let mut paths = Csv::new(&[
            "flow",
            "client",
            "server",
            "path",
            "entropy",
            "generation",
            "hops",
            "tx",
            "acked",
            "ecn",
            "mark_frac",
            "cwnd_decreases",
            "retx",
            "cwnd_end",
        ]);
        let mut flows = Csv::new(&[
            "flow",
            "client",
            "server",
            "rate",
            "finish_us",
            "tx",
            "ecn",
            "mark_frac",
            "retx",
            "distinct_routes",
            "routes_max_share",
        ]);
        for (fi, f) in h.iter().enumerate() {
            let cs = f.state(sim);
            let rate = cs
                .finished_at
                .map(|e| cs.bytes_done as f64 * 8.0 / (e - T0) as f64 / line);
            let Some(c) = conn(sim, f) else { continue };
            let dst = sim.host_ip(f.server);
            let (mut tx, mut ecn, mut retx) = (0, 0, 0);
            let mut routes: BTreeMap<Vec<(SwitchId, usize)>, u32> = BTreeMap::new();
            for (pi, p) in c.paths().iter().enumerate() {
                let k = p.counters();
                let hops =
                    sim.route_of(f.client, p.plane as usize, dst, p.entropy, NATIVE_UDP_PORT);
                for &(sw, port) in &hops {
                    users.entry((sw.0, port)).or_default().push((fi, pi));
                }
                *routes.entry(hops.clone()).or_default() += 1;
                let names: Vec<String> = hops
                    .iter()
                    .map(|&(sw, port)| format!("{}>{}", role(sim, sw), far(sim, sw, port)))
                    .collect();
                tx += k.tx_pkts;
                ecn += k.ecn_echoed;
                retx += k.retx_pkts;
                paths.push(vec![
                    fi.to_string(),
                    f.client.0.to_string(),
                    f.server.0.to_string(),
                    pi.to_string(),
                    p.entropy.to_string(),
                    p.generation.to_string(),
                    names.join(" "),
                    k.tx_pkts.to_string(),
                    k.acked_pkts.to_string(),
                    k.ecn_echoed.to_string(),
                    num(Some(k.ecn_echoed as f64 / k.acked_pkts.max(1) as f64), 4),
                    k.cwnd_decreases.to_string(),
                    k.retx_pkts.to_string(),
                    format!("{:.0}", p.cwnd()),
                ]);
            }
            flows.push(vec![
                fi.to_string(),
                f.client.0.to_string(),
                f.server.0.to_string(),
                num(rate, 4),
                num(cs.finished_at.map(|e| (e - T0) as f64 / 1e3), 1),
                tx.to_string(),
                ecn.to_string(),
                num(Some(ecn as f64 / tx.max(1) as f64), 4),
                retx.to_string(),
                routes.len().to_string(),
                routes.values().max().copied().unwrap_or(0).to_string(),
            ]);
        }
        let mut ports = Csv::new(&[
            "switch",
            "port",
            "to",
            "enqueued",
            "marked",
            "mark_frac",
            "drops",
            "max_queue",
            "paths",
            "flows",
        ]);
        let mut hot = std::collections::BTreeSet::new();
        for (sw, ps) in st.switch_ports.iter().enumerate() {
            let id = SwitchId(sw as u32);
            for (port, x) in ps.iter().enumerate() {
                if x.enqueued == 0 {
                    continue;
                }
                let u = users.get(&(sw as u32, port));
                let mut fl: Vec<usize> = u
                    .map(|v| v.iter().map(|x| x.0).collect())
                    .unwrap_or_default();
                fl.dedup();
                if x.ecn_marked > 0 {
                    hot.insert((sw as u32, port as u16));
                }
                ports.push(vec![
                    role(sim, id),
                    port.to_string(),
                    far(sim, id, port),
                    x.enqueued.to_string(),
                    x.ecn_marked.to_string(),
                    num(Some(x.ecn_marked as f64 / x.enqueued as f64), 4),
                    x.dropped_queue_full.to_string(),
                    x.max_queue_bytes.to_string(),
                    u.map_or(0, |v| v.len()).to_string(),
                    fl.len().to_string(),
                ]);
            }
        }
        let mut q = Csv::new(&["t_us", "switch", "port", "to", "bytes"]);
        for &(t, sw, port, b) in qs {
            if hot.contains(&(sw, port)) {
                let id = SwitchId(sw);
                q.push(vec![
                    format!("{:.0}", t as f64 / 1e3),
                    role(sim, id),
                    port.to_string(),
                    far(sim, id, port as usize),
                    b.to_string(),
                ]);
            }
        }
        let _ = paths.write(&dir.join("paths.csv"));
        let _ = flows.write(&dir.join("flows.csv"));
        let _ = ports.write(&dir.join("ports.csv"));
        let _ = q.write(&dir.join("queues_series.csv"));
    }
}

/// Runs the benchmark.
pub fn run(cfg: &PermutationConfig, progress: &dyn Progress) -> PermutationReport {
    let t_all = Instant::now();
    progress.begin("permutation", cfg.paths.len() as u64);
    let mut rows = Vec::new();
    let n = cfg.hosts();
    for &p in &cfg.paths {
        progress.step(&if p == 0 {
            format!("{n} hosts, default paths (spraying)")
        } else {
            format!("{n} hosts, {p} path(s) per connection")
        });
        rows.push(run_one(cfg, p));
    }
    progress.end();
    let rtt = fabric::reference_rtt_ns();
    PermutationReport {
        config: cfg.clone(),
        rows,
        setup: vec![
            format!("fabric: {}", fabric::describe_fat_tree(cfg.k, rtt)),
            format!(
                "traffic: every host sends {} to another (seeded random permutation, no host to itself, every host receives one flow), \
                 1 stream, WRITEs of {} B, {} in flight; all start together after the connections are open",
                cfg.flow_size_name(),
                cfg.writes().0,
                cfg.depth.min(cfg.writes().1)
            ),
            "paths: 1 = every packet of a connection on one ECMP path (one UDP source port); default = the transport's default path count, \
             packets sprayed over that many source ports".into(),
        ],
        definitions: vec![
            "rate of a flow: its bytes / its completion time (from the common start), as a fraction of the 100 Gb/s line rate".into(),
            format!("mean_rate, worst_rate: mean and minimum over the {n} flows"),
            "retransmits: packets that carried data sent before, all hosts".into(),
        ],
        wall_s: t_all.elapsed().as_secs_f64(),
    }
}

/// The CDF of per-flow rates, one curve per run (`runs`: a label, e.g. the controller, and its
/// report) and path count: the fraction of flows at or below each rate, as a step curve.
pub fn plot(runs: &[(String, &PermutationReport)], path: &std::path::Path) -> Result<(), String> {
    use crate::plot::{self, Axes, Series};
    let mut series = Vec::new();
    let mut lo = 1.0f64;
    let hosts = runs
        .first()
        .map_or(fabric::FAT_TREE_HOSTS, |(_, r)| r.config.hosts());
    for (k, (label, r)) in runs.iter().enumerate() {
        for (j, x) in r.rows.iter().enumerate() {
            let n = x.rates.len().max(1) as f64;
            let mut pts = Vec::with_capacity(2 * x.rates.len());
            for (i, &v) in x.rates.iter().enumerate() {
                pts.push((v, i as f64 / n));
                pts.push((v, (i + 1) as f64 / n));
            }
            lo = lo.min(x.rates.first().copied().unwrap_or(1.0));
            let palette: &[plotters::style::RGBColor] = if k % 2 == 0 {
                &plot::NATIVE_COLORS
            } else {
                &plot::ROCE_COLORS
            };
            let paths = if x.default_paths {
                format!("{} paths (default)", x.paths)
            } else {
                format!("{} path{}", x.paths, if x.paths == 1 { "" } else { "s" })
            };
            let name = if label.is_empty() {
                paths
            } else {
                format!("{label}, {paths}")
            };
            series.push(Series {
                dashed: !x.default_paths,
                ..Series::line(
                    format!("{name}: worst {:.3}, mean {:.3}", x.worst_rate, x.mean_rate),
                    palette[(j + 1).min(palette.len() - 1)],
                    pts,
                )
            });
        }
    }
    let axes = Axes {
        title: format!("permutation, {hosts} hosts: CDF of per-flow rates"),
        x_desc: "flow rate (fraction of line rate: bytes / completion time)".into(),
        y_desc: "fraction of flows at or below".into(),
        x: ((lo - 0.02).clamp(0.0, 0.98), 1.0),
        y: (0.0, 1.0),
        log_x: false,
    };
    plot::chart(path, &axes, &series)
}

/// CSV of the report (header row first).
pub fn csv(r: &PermutationReport) -> crate::csv::Csv {
    use crate::csv::num;
    let mut c = crate::csv::Csv::new(&[
        "paths",
        "mean_rate",
        "worst_rate",
        "retransmits",
        "p10_rate",
        "best_rate",
        "timeouts",
        "drops",
        "max_queue_bdp",
        "completed",
        "errors",
    ]);
    for x in &r.rows {
        c.push(vec![
            x.paths.to_string(),
            num(Some(x.mean_rate), 4),
            num(Some(x.worst_rate), 4),
            x.retransmits.to_string(),
            num(Some(x.p10_rate), 4),
            num(Some(x.best_rate), 4),
            x.timeouts.to_string(),
            x.drops.to_string(),
            num(Some(x.max_queue_bdp), 3),
            (if x.completed { "yes" } else { "no" }).into(),
            x.errors.len().to_string(),
        ]);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 1,024-host fabric carries the native transport: a few verified flows between
    /// pods (one to the pod next door, one half the fabric away, one to the last host)
    /// complete, their bytes checked, nothing dropped.
    #[test]
    fn flows_across_pods_of_the_1024_host_fat_tree_complete() {
        for seed in 1..=3 {
            flows_across_pods(seed);
        }
    }

    fn flows_across_pods(seed: u64) {
        let k = 16;
        let mut ep = EndpointConfig::default();
        ep.conn.mtu = MTU;
        let mut sim = fabric::fat_tree_k(&fabric::reference_config(seed), k, |id, ip| {
            native_host(id, ip, &ep, seed)
        });
        assert_eq!(sim.num_hosts(), fabric::fat_tree_hosts(k));
        assert_eq!(sim.num_switches(), fabric::fat_tree_switches(k));
        let w = WorkloadSpec {
            depth: 4,
            max_write_slots: 16,
            ..WorkloadSpec::bulk_write(1, 4, 65_536)
        };
        // Host i is in pod i / 64.
        let pairs = [(0u32, 64u32), (5, 517), (1000, 3), (300, 1023)];
        let flows: Vec<Flow> = pairs
            .iter()
            .map(|&(c, s)| Flow {
                client: HostId(c),
                server: HostId(s),
                workload: w.clone(),
                start_at: T0,
            })
            .collect();
        let h = multi::start_flows(&mut sim, &flows);
        assert!(multi::run_flows(&mut sim, &h, T0 + 20_000_000, 5_000));
        assert_eq!(multi::all_errors(&sim), Vec::<String>::new());
        for f in &h {
            assert_eq!(f.state(&sim).bytes_done, 4 * 65_536, "seed {seed}: {f:?}");
        }
        assert_eq!(sim.stats().totals().dropped(), 0);
    }
}
