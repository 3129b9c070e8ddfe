//! `bench multipath`: goodput over 1, 2, 4 and 8 parallel planes; one plane failing in the
//! middle of a transfer and coming back (the application only posts WRITEs and never reacts);
//! and 4,000 / 16,000 concurrent connections on the 8-plane fabric with the transport's memory
//! per connection.

use crate::fabric::{self, LINK_BPS, MTU, PLANE_HOPS};
use crate::progress::Progress;
use crate::rates::{stays_from, window, Sampler};
use crate::{native_host, Opts, Rng};
use ferroce_harness::multi::{self, Flow, FlowHandle};
use ferroce_harness::{NodeHost, WorkloadSpec};
use ferroce_sim::topology::{self, TopologyConfig};
use ferroce_sim::{HostId, Sim};
use ferroce_transport::EndpointConfig;
use std::net::Ipv4Addr;
use std::time::Instant;

pub const PLANES: [usize; 4] = [1, 2, 4, 8];
pub const CONNECTIONS: [usize; 2] = [4_000, 16_000];

/// Settings of the multipath benchmark.
#[derive(Clone, Debug)]
pub struct MultipathConfig {
    pub opts: Opts,
    pub planes: Vec<usize>,
    /// Plane counts whose plane-failure run is done.
    pub fail_planes: Vec<usize>,
    /// Bytes per plane of the scaling runs.
    pub bytes_per_plane: u64,
    /// The plane fails this many base RTTs after the start ...
    pub fail_after_rtts: u64,
    /// ... stays down this long (ns) ...
    pub down_ns: u64,
    /// ... and the transfer goes on this long (ns) after it is back.
    pub after_ns: u64,
    pub sample_ns: u64,
    /// Concurrent connections of the connection-scaling runs, and their hosts.
    pub connections: Vec<usize>,
    pub conn_hosts: usize,
    pub conn_planes: usize,
    /// WRITEs per connection, their size, in flight per connection.
    pub conn_msgs: u32,
    pub conn_msg_size: u32,
    pub conn_depth: u32,
}

impl MultipathConfig {
    pub fn new(opts: Opts) -> Self {
        let q = opts.quick;
        MultipathConfig {
            opts,
            planes: PLANES.to_vec(),
            fail_planes: vec![2, 4, 8],
            bytes_per_plane: if q { 8 << 20 } else { 32 << 20 },
            fail_after_rtts: 40,
            down_ns: if q { 1_200_000 } else { 2_500_000 },
            after_ns: if q { 1_500_000 } else { 2_500_000 },
            sample_ns: 500,
            connections: CONNECTIONS.to_vec(),
            conn_hosts: 128,
            conn_planes: 8,
            conn_msgs: if q { 2 } else { 8 },
            conn_msg_size: 16_384,
            conn_depth: 2,
        }
    }

    /// The endpoint settings for a host with `planes` NIC ports of 100 Gb/s: the endpoint
    /// knows its ports (it spreads its paths over them and moves a failed path to another)
    /// and its inbound capacity; at least one path per plane.
    pub fn endpoint(&self, planes: usize) -> EndpointConfig {
        let mut ep = EndpointConfig {
            line_rate_mbps: (LINK_BPS / 1_000_000) as u32 * planes as u32,
            nic_ports: planes as u8,
            ..EndpointConfig::default()
        };
        ep.conn.paths = ep.conn.paths.max(planes.min(255) as u8);
        ep.conn.mtu = MTU;
        ep.conn.cc = self.opts.cc;
        ep
    }
}

/// One row of the multipath table.
#[derive(Clone, Debug)]
pub struct MultipathRow {
    pub planes: usize,
    /// "steady", "plane-down", "plane-back", "connections".
    pub event: &'static str,
    pub paths: u8,
    pub goodput_gbps: f64,
    /// Goodput / one plane's steady goodput.
    pub scaling: Option<f64>,
    /// Base RTTs until goodput is back to 95 % of the surviving (or full) capacity and stays.
    pub recover_rtts: Option<f64>,
    /// Work requests that failed or never completed.
    pub lost_msgs: u64,
    pub connections: usize,
    /// Transport heap bytes per idle connection, each end (client, server); None: not measured.
    pub mem_per_conn: Option<(f64, f64)>,
    /// Lowest 1-RTT goodput after the event / the goodput before it.
    pub dip: Option<f64>,
    pub retransmits: u64,
    pub timeouts: u64,
    pub errors: Vec<String>,
    pub events: u64,
    pub wall_s: f64,
}

impl MultipathRow {
    fn new(planes: usize, event: &'static str, paths: u8) -> Self {
        MultipathRow {
            planes,
            event,
            paths,
            goodput_gbps: 0.0,
            scaling: None,
            recover_rtts: None,
            lost_msgs: 0,
            connections: 1,
            mem_per_conn: None,
            dip: None,
            retransmits: 0,
            timeouts: 0,
            errors: Vec::new(),
            events: 0,
            wall_s: 0.0,
        }
    }
}

/// A goodput-over-time trace (for the plot): (time µs from start, Gb/s per 1-RTT window).
#[derive(Clone, Debug)]
pub struct Trace {
    pub planes: usize,
    pub fail_at_us: f64,
    pub back_at_us: f64,
    pub points: Vec<(f64, f64)>,
}

/// Result of the multipath benchmark.
#[derive(Clone, Debug)]
pub struct MultipathReport {
    pub config: MultipathConfig,
    pub rtt_ns: u64,
    pub rows: Vec<MultipathRow>,
    pub traces: Vec<Trace>,
    pub setup: Vec<String>,
    pub definitions: Vec<String>,
    pub wall_s: f64,
}

impl MultipathReport {
    pub fn row(&self, planes: usize, event: &str) -> Option<&MultipathRow> {
        self.rows
            .iter()
            .find(|r| r.planes == planes && r.event == event)
    }
    pub fn connections_row(&self, n: usize) -> Option<&MultipathRow> {
        self.rows
            .iter()
            .find(|r| r.event == "connections" && r.connections == n)
    }
}

const T0: u64 = 100_000;

pub(crate) fn planes_sim(cfg: &MultipathConfig, k: usize, hosts: usize) -> Sim<NodeHost> {
    let seed = cfg.opts.seed;
    let topo = TopologyConfig::default().with_seed(seed);
    let ep = cfg.endpoint(k);
    topology::planes(&topo, k, hosts, fabric::plane_shape(hosts))
        .build_with(|id, ip| native_host(id, ip, &ep, seed))
}

fn bulk(streams: u32, bytes: u64) -> WorkloadSpec {
    let msg = 65_536u64;
    let per = bytes.div_ceil(msg * streams as u64).max(1) as u32;
    WorkloadSpec {
        depth: 16,
        max_write_slots: 64,
        ..WorkloadSpec::bulk_write(streams, per, msg as u32)
    }
}

fn lost(sim: &Sim<NodeHost>, h: &[FlowHandle]) -> u64 {
    h.iter()
        .map(|f| {
            let c = f.state(sim);
            c.failures.len() as u64 + (c.total_wrs() - c.latencies.len() as u64)
        })
        .sum()
}

fn steady(cfg: &MultipathConfig, k: usize) -> MultipathRow {
    let t = Instant::now();
    let mut sim = planes_sim(cfg, k, 2);
    let w = bulk(8, cfg.bytes_per_plane * k as u64);
    let h = multi::start_flows(
        &mut sim,
        &[Flow {
            client: HostId(0),
            server: HostId(1),
            workload: w,
            start_at: T0,
        }],
    );
    multi::run_flows(&mut sim, &h, T0 + 2_000_000_000, 10_000);
    let t_end = sim.now() + 50_000;
    sim.run_until(t_end);
    let c = h[0].state(&sim);
    let start = c.first_post_at.unwrap_or(T0);
    let end = c.finished_at.unwrap_or(sim.now());
    let mut r = MultipathRow::new(k, "steady", cfg.endpoint(k).conn.paths);
    r.goodput_gbps = c.bytes_done as f64 * 8.0 / (end - start).max(1) as f64;
    r.lost_msgs = lost(&sim, &h);
    let tot = multi::totals(&sim);
    r.retransmits = tot.retx_pkts;
    r.timeouts = tot.timeouts;
    r.errors = multi::all_errors(&sim);
    r.events = sim.events_processed();
    r.wall_s = t.elapsed().as_secs_f64();
    r
}

fn plane_failure(
    cfg: &MultipathConfig,
    k: usize,
    steady_gbps: f64,
    rtt: u64,
) -> (MultipathRow, MultipathRow, Trace) {
    let t = Instant::now();
    let mut sim = planes_sim(cfg, k, 2);
    let fail_at = T0 + cfg.fail_after_rtts * rtt;
    let back_at = fail_at + cfg.down_ns;
    let run_ns = (fail_at - T0) as f64
        + cfg.down_ns as f64 * (k - 1) as f64 / k as f64
        + cfg.after_ns as f64;
    let bytes = (steady_gbps / 8.0 * run_ns) as u64;
    let w = bulk(8, bytes);
    let h = multi::start_flows(
        &mut sim,
        &[Flow {
            client: HostId(0),
            server: HostId(1),
            workload: w.clone(),
            start_at: T0,
        }],
    );
    let ip = Ipv4Addr::from(sim.host_ip(HostId(0)));
    let mut sampler = Sampler::new(HostId(1), &[ip], T0, cfg.sample_ns);
    sim.run_until(T0);
    sampler.run_until(&mut sim, fail_at);
    // Plane k-1 fails: every link of it, both directions, at once.
    let plane = k - 1;
    let links = sim.plane_links(plane);
    for &l in &links {
        sim.set_link_up(l, false);
    }
    sampler.run_until(&mut sim, back_at);
    for &l in &links {
        sim.set_link_up(l, true);
    }
    let done = sampler.run_while(&mut sim, back_at + 2_000_000_000, |s| {
        multi::all_done(s, &h)
    });
    let t_end = sim.now() + 50_000;
    sim.run_until(t_end);

    let log = &sampler.log;
    let raw = log.raw_cumulative(0);
    let ws = ((rtt as f64 / cfg.sample_ns as f64).round() as usize).max(1);
    let win_ns = (ws as u64 * cfg.sample_ns) as f64;
    let gbps = |g: usize| window(&raw, g, ws) * 8.0 / win_ns;
    let g_fail = log.index_of(fail_at);
    let g_back = log.index_of(back_at).min(log.samples - 1);
    // Goodput before the failure: the 20 RTTs before it.
    let pre_w = (20 * ws).min(g_fail);
    let pre = window(&raw, g_fail, pre_w) * 8.0 / (pre_w as u64 * cfg.sample_ns) as f64;
    let target_down = 0.95 * pre * (k - 1) as f64 / k as f64;
    let rec_down = stays_from(g_fail + ws, g_back + 1, |g| gbps(g) >= target_down);
    // The end of steady state after the return: when 90 % of the bytes had arrived.
    let total = raw[log.samples - 1];
    let g_end = raw
        .iter()
        .position(|&b| b >= 0.9 * total)
        .unwrap_or(log.samples - 1)
        .max(g_back + ws + 1);
    let target_back = 0.95 * pre;
    let rec_back = stays_from(g_back + ws, g_end.min(log.samples), |g| {
        gbps(g) >= target_back
    });
    let min_down = (g_fail + ws..=g_back)
        .map(gbps)
        .fold(f64::INFINITY, f64::min);
    let down_avg = window(&raw, g_back, g_back - g_fail) * 8.0 / (back_at - fail_at) as f64;
    let back_w = g_end.saturating_sub(g_back).max(1);
    let back_avg = window(&raw, g_end.min(log.samples - 1), back_w) * 8.0
        / (back_w as u64 * cfg.sample_ns) as f64;
    let lost_msgs = lost(&sim, &h);
    let tot = multi::totals(&sim);
    let mut errors = multi::all_errors(&sim);
    if !done {
        errors.push("the transfer did not complete".into());
    }
    let paths = cfg.endpoint(k).conn.paths;
    let rtts = |g: Option<usize>, from: usize| {
        g.map(|g| ((g - from) as u64 * cfg.sample_ns) as f64 / rtt as f64)
    };
    let mut down = MultipathRow::new(k, "plane-down", paths);
    down.goodput_gbps = down_avg;
    down.recover_rtts = rtts(rec_down, g_fail);
    down.lost_msgs = lost_msgs;
    down.dip = Some(min_down / pre);
    down.retransmits = tot.retx_pkts;
    down.timeouts = tot.timeouts;
    down.errors = errors.clone();
    down.events = sim.events_processed();
    down.wall_s = t.elapsed().as_secs_f64();
    let mut back = MultipathRow::new(k, "plane-back", paths);
    back.goodput_gbps = back_avg;
    back.recover_rtts = rtts(rec_back, g_back);
    back.lost_msgs = lost_msgs;
    back.errors = errors;
    back.events = down.events;
    back.wall_s = down.wall_s;
    // Trace, thinned to at most ~600 points.
    let step = (log.samples / 600).max(1);
    let points = (ws..log.samples)
        .step_by(step)
        .map(|g| ((g as u64 * cfg.sample_ns) as f64 / 1e3, gbps(g)))
        .collect();
    let trace = Trace {
        planes: k,
        fail_at_us: (fail_at - T0) as f64 / 1e3,
        back_at_us: (back_at - T0) as f64 / 1e3,
        points,
    };
    (down, back, trace)
}

fn connections(cfg: &MultipathConfig, n: usize) -> MultipathRow {
    let t = Instant::now();
    let k = cfg.conn_planes;
    let ep = cfg.endpoint(k);
    let mem = crate::scale::idle_connection_memory(n, &ep, None);
    let mut sim = planes_sim(cfg, k, cfg.conn_hosts);
    let hosts = cfg.conn_hosts;
    let mut pairs: Vec<(usize, usize)> = (0..hosts)
        .flat_map(|a| (0..hosts).filter(move |&b| b != a).map(move |b| (a, b)))
        .collect();
    Rng::new(cfg.opts.seed ^ 0xc0).shuffle(&mut pairs);
    pairs.truncate(n);
    let w = WorkloadSpec {
        depth: cfg.conn_depth,
        max_write_slots: 4,
        ..WorkloadSpec::bulk_write(1, cfg.conn_msgs, cfg.conn_msg_size)
    };
    let start = T0 * 3;
    let flows: Vec<Flow> = pairs
        .iter()
        .map(|&(a, b)| Flow {
            client: HostId(a as u32),
            server: HostId(b as u32),
            workload: w.clone(),
            start_at: start,
        })
        .collect();
    let h = multi::start_flows(&mut sim, &flows);
    let done = multi::run_flows(&mut sim, &h, start + 2_000_000_000, 20_000);
    let t_end = sim.now() + 50_000;
    sim.run_until(t_end);
    let bytes: u64 = h.iter().map(|f| f.state(&sim).bytes_done).sum();
    let last = h
        .iter()
        .filter_map(|f| f.state(&sim).finished_at)
        .max()
        .unwrap_or(sim.now());
    let mut r = MultipathRow::new(k, "connections", ep.conn.paths);
    r.connections = n;
    r.mem_per_conn = mem;
    r.goodput_gbps = bytes as f64 * 8.0 / (last.saturating_sub(start)).max(1) as f64;
    r.lost_msgs = lost(&sim, &h);
    let tot = multi::totals(&sim);
    r.retransmits = tot.retx_pkts;
    r.timeouts = tot.timeouts;
    r.errors = multi::all_errors(&sim);
    if !done {
        r.errors.push("not every connection completed".into());
    }
    r.events = sim.events_processed();
    r.wall_s = t.elapsed().as_secs_f64();
    r
}

/// Runs the benchmark.
pub fn run(cfg: &MultipathConfig, progress: &dyn Progress) -> MultipathReport {
    let t_all = Instant::now();
    let rtt = fabric::base_rtt_ns(&TopologyConfig::default(), PLANE_HOPS, MTU);
    let steps = cfg.planes.len() + cfg.fail_planes.len() + cfg.connections.len();
    progress.begin("multipath", steps as u64);
    let mut rows = Vec::new();
    let mut traces = Vec::new();
    let mut steady_of = std::collections::HashMap::new();
    for &k in &cfg.planes {
        progress.step(&format!("{k} plane(s), steady transfer"));
        let r = steady(cfg, k);
        steady_of.insert(k, r.goodput_gbps);
        rows.push(r);
    }
    let one = steady_of.get(&1).copied();
    for r in rows.iter_mut() {
        r.scaling = one.filter(|g| *g > 0.0).map(|g| r.goodput_gbps / g);
    }
    for &k in &cfg.fail_planes {
        progress.step(&format!("{k} planes, one fails and returns"));
        let g = match steady_of.get(&k) {
            Some(g) => *g,
            None => steady(cfg, k).goodput_gbps,
        };
        let (mut down, mut back, trace) = plane_failure(cfg, k, g, rtt);
        down.scaling = one.map(|o| down.goodput_gbps / o);
        back.scaling = one.map(|o| back.goodput_gbps / o);
        rows.push(down);
        rows.push(back);
        traces.push(trace);
    }
    for &n in &cfg.connections {
        progress.step(&format!(
            "{n} connections, {} hosts, {} planes",
            cfg.conn_hosts, cfg.conn_planes
        ));
        let mut r = connections(cfg, n);
        r.scaling = one.map(|o| r.goodput_gbps / o);
        rows.push(r);
    }
    progress.end();
    let shape = fabric::plane_shape(2);
    let shape_n = fabric::plane_shape(cfg.conn_hosts);
    MultipathReport {
        config: cfg.clone(),
        rtt_ns: rtt,
        rows,
        traces,
        setup: vec![
            format!(
                "fabric: k parallel planes, each a leaf-spine ({shape:?} for 2 hosts); every host has one 100 Gb/s NIC port per plane \
                 and the endpoint knows them (EndpointConfig::nic_ports = k: it puts its paths on the planes and picks each packet's port); \
                 1 µs per hop, queues of 1 BDP (178 450 B); base RTT {:.2} µs (4 hops)",
                rtt as f64 / 1e3
            ),
            format!(
                "scaling: host 0 -> host 1, 8 streams x 64 KiB WRITEs, 16 in flight per stream, {} MiB per plane; endpoint: line rate \
                 k x 100 Gb/s, k NIC ports (paths spread over the planes), paths per connection max(default, k)",
                cfg.bytes_per_plane >> 20
            ),
            format!(
                "plane failure: all links of the last plane go down {} base RTTs into the transfer, come back {:.2} ms later; \
                 the transfer goes on {:.2} ms after that; the application only posts WRITEs and checks completions, it never reacts",
                cfg.fail_after_rtts,
                cfg.down_ns as f64 / 1e6,
                cfg.after_ns as f64 / 1e6
            ),
            format!(
                "connections: {} hosts on {} planes ({shape_n:?} per plane), each connection a distinct (client, server) host pair \
                 (seeded random choice), 1 stream, {} WRITEs of {} B, {} in flight, all starting together after every connection is open",
                cfg.conn_hosts, cfg.conn_planes, cfg.conn_msgs, cfg.conn_msg_size, cfg.conn_depth
            ),
        ],
        definitions: vec![
            "goodput: payload bytes of completed WRITEs / time from the first WRITE to the last completion; for plane-down the \
             average while the plane is down, for plane-back the average from its return until 90 % of the bytes had arrived; \
             for connections the aggregate of all connections"
                .into(),
            "scaling: goodput / the one-plane steady goodput".into(),
            "recover_rtts (plane-down): base RTTs from the failure until the goodput in every 1-RTT window is >= 95 % of the \
             surviving capacity (the pre-failure goodput x (k-1)/k) and stays so until the plane returns (earliest possible: 1, \
             the first window wholly after the failure); (plane-back): same, from the return, against 95 % of the pre-failure \
             goodput, until 90 % of the bytes had arrived"
                .into(),
            "lost_msgs: WRITEs that completed with an error or never completed".into(),
            "dip: lowest 1-RTT-window goodput while the plane is down / the pre-failure goodput".into(),
            "mem_per_conn: transport heap bytes per idle, established connection, measured with a counting global allocator \
             around the calls into each endpoint while N connections are opened directly between two endpoints (no simulator): \
             client end / server end"
                .into(),
        ],
        wall_s: t_all.elapsed().as_secs_f64(),
    }
}

/// CSV of the report (header row first).
pub fn csv(r: &MultipathReport) -> crate::csv::Csv {
    use crate::csv::num;
    let mut c = crate::csv::Csv::new(&[
        "planes",
        "event",
        "goodput_gbps",
        "scaling",
        "recover_rtts",
        "lost_msgs",
        "paths",
        "connections",
        "mem_per_conn_client_bytes",
        "mem_per_conn_server_bytes",
        "dip",
        "retransmits",
        "timeouts",
        "errors",
    ]);
    for x in &r.rows {
        c.push(vec![
            x.planes.to_string(),
            x.event.into(),
            num(Some(x.goodput_gbps), 3),
            num(x.scaling, 3),
            num(x.recover_rtts, 2),
            x.lost_msgs.to_string(),
            x.paths.to_string(),
            x.connections.to_string(),
            num(x.mem_per_conn.map(|m| m.0), 0),
            num(x.mem_per_conn.map(|m| m.1), 0),
            num(x.dip, 3),
            x.retransmits.to_string(),
            x.timeouts.to_string(),
            x.errors.len().to_string(),
        ]);
    }
    c
}

/// Goodput over time around the plane failure, one curve per plane count.
pub fn plot(r: &MultipathReport, path: &std::path::Path) -> Result<(), String> {
    use crate::plot::{self, Axes, Series};
    let colors = [
        plot::NATIVE_COLORS[1],
        plot::NATIVE_COLORS[2],
        plot::NATIVE_COLORS[3],
        plot::ROCE_COLORS[0],
    ];
    let mut series = Vec::new();
    let mut xmax: f64 = 1.0;
    let mut ymax: f64 = 100.0;
    for (i, t) in r.traces.iter().enumerate() {
        xmax = xmax.max(t.points.last().map_or(0.0, |p| p.0));
        ymax = ymax.max(t.points.iter().map(|p| p.1).fold(0.0, f64::max));
        series.push(Series::line(
            format!(
                "{} planes (one down {:.0}-{:.0} us)",
                t.planes, t.fail_at_us, t.back_at_us
            ),
            colors[i % colors.len()],
            t.points.clone(),
        ));
    }
    let axes = Axes {
        title: format!(
            "Goodput per base RTT ({:.1} us) while one plane fails and returns",
            r.rtt_ns as f64 / 1e3
        ),
        x_desc: "time since the start (us)".into(),
        y_desc: "goodput (Gb/s)".into(),
        x: (0.0, xmax),
        y: (0.0, ymax * 1.1),
        log_x: false,
    };
    plot::chart(path, &axes, &series)
}
