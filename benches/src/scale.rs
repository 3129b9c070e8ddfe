//! `bench scale`: many connections that have gone idle. In the simulator, 64,000 connections
//! between distinct host pairs of a 256-host fabric, each opened, moving one WRITE, then idle
//! (0 lost, wall time, events, the process heap); and the transport's heap per idle
//! connection, measured with the counting allocator around the calls into two endpoints that
//! pass datagrams directly: opened only, and after one WRITE each.

use crate::multipath::{planes_sim, MultipathConfig};
use crate::progress::Progress;
use crate::Opts;
use ferroce_harness::multi::{self, Flow};
use ferroce_harness::WorkloadSpec;
use ferroce_sim::HostId;
use ferroce_transport::mem::{access, Regions, Sge};
use ferroce_transport::{ConnId, Endpoint, EndpointConfig, Event, SendOp, SendWr};
use std::net::Ipv4Addr;
use std::time::Instant;

/// Settings of the scale benchmark.
#[derive(Clone, Debug)]
pub struct ScaleConfig {
    pub opts: Opts,
    /// Connections in the simulator run, and its hosts (each connection a distinct ordered
    /// host pair, so hosts · (hosts − 1) ≥ connections).
    pub connections: usize,
    pub hosts: usize,
    /// Planes (NIC ports) per host.
    pub planes: usize,
    /// Size of each connection's one WRITE.
    pub msg_size: u32,
    /// Connections of the direct (allocator) measurement.
    pub mem_connections: usize,
}

impl ScaleConfig {
    pub fn new(opts: Opts) -> Self {
        ScaleConfig {
            opts,
            connections: if opts.quick { 8_000 } else { 64_000 },
            hosts: if opts.quick { 128 } else { 256 },
            planes: 1,
            msg_size: 4_096,
            mem_connections: if opts.quick { 4_000 } else { 64_000 },
        }
    }

    fn multipath(&self) -> MultipathConfig {
        MultipathConfig::new(self.opts)
    }

    /// The endpoint settings: the multipath benchmark's (16 paths by default).
    pub fn endpoint(&self) -> EndpointConfig {
        self.multipath().endpoint(self.planes)
    }
}

/// Transport heap per idle connection, one row per state.
#[derive(Clone, Debug)]
pub struct MemRow {
    /// "opened" or "one WRITE".
    pub state: &'static str,
    pub connections: usize,
    pub paths: u8,
    /// Bytes per connection at the client end and the server end; None: not measured (no
    /// counting allocator) or not every connection got there.
    pub per_conn: Option<(f64, f64)>,
}

#[derive(Clone, Debug)]
pub struct ScaleReport {
    pub config: ScaleConfig,
    pub setup: Vec<String>,
    /// Simulator run.
    pub connections: usize,
    pub paths: u8,
    pub completed: bool,
    pub lost_msgs: u64,
    pub errors: Vec<String>,
    pub events: u64,
    pub sim_wall_s: f64,
    /// Process heap (counting allocator) grown by the simulator run from before its flows
    /// were started to the end, per connection: transport and simulator/harness state both.
    pub sim_heap_per_conn: Option<f64>,
    /// Peak resident set of the process after the run (VmHWM, bytes).
    pub peak_rss: Option<u64>,
    pub mem: Vec<MemRow>,
    pub definitions: Vec<String>,
    pub wall_s: f64,
}

/// Peak resident set size of this process (Linux `VmHWM`), bytes.
fn peak_rss() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let l = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = l.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Transport heap per idle connection, measured with the counting allocator: `n`
/// connections from one endpoint to another, opened by passing datagrams between the two
/// endpoints directly (no simulator), bytes allocated inside each endpoint's calls counted
/// separately; with `write`, each connection then moves one WRITE of that many bytes and its
/// timers run out (the connection idles). `None` when the counting allocator is not
/// installed or not every connection got there.
pub fn idle_connection_memory(
    n: usize,
    ep: &EndpointConfig,
    write: Option<u32>,
) -> Option<(f64, f64)> {
    crate::alloc::live_bytes()?;
    let live = || crate::alloc::live_bytes().unwrap_or(0);
    let ip_a = Ipv4Addr::new(198, 18, 0, 1);
    let ip_b = Ipv4Addr::new(198, 18, 0, 2);
    let mut a = Endpoint::new(EndpointConfig {
        seed: 1,
        ..ep.clone()
    });
    let mut b = Endpoint::new(EndpointConfig {
        seed: 2,
        ..ep.clone()
    });
    // Embedder memory (registered regions, the packet buffer) is not the transport's: it
    // is allocated outside the counted calls.
    let (mut ma, mut mb) = (Regions::new(), Regions::new());
    let len = write.unwrap_or(0).max(1);
    let lkey = ma.register(1, 0x1000, len as usize, access::LOCAL_WRITE);
    let rkey = mb.register(1, 0x10_0000, len as usize, access::REMOTE_WRITE);
    let mut buf = vec![0u8; 65_536 + 256];
    let mut evs: Vec<Event> = Vec::with_capacity(1024);
    let mut conns_a: Vec<ConnId> = Vec::with_capacity(n);
    let mut conns_b: Vec<ConnId> = Vec::with_capacity(n);
    let (mut da, mut db) = (0i64, 0i64);
    let x = live();
    for _ in 0..n {
        let c = a.connect(ip_b);
        conns_a.push(c);
    }
    da += live() - x;
    let mut now = 1_000u64;
    let mut connected = 0usize;
    let mut completions = 0usize;
    let mut posted = false;
    // Open, then (with `write`) one WRITE each, then until every timer has run out: a
    // bounded number of steps whatever happens.
    for _round in 0..200_000 {
        let mut moved = false;
        if connected == n && !posted {
            if let Some(bytes) = write {
                let x = live();
                for &c in &conns_a {
                    a.create_stream(c, 1, 1, 1).ok()?;
                }
                da += live() - x;
                let x = live();
                for &c in &conns_b {
                    b.create_stream(c, 1, 1, 1).ok()?;
                }
                db += live() - x;
                for (i, &c) in conns_a.iter().enumerate() {
                    let wr = SendWr {
                        wr_id: i as u64,
                        op: SendOp::Write {
                            rkey,
                            raddr: 0x10_0000,
                            imm: None,
                        },
                        sgl: [Sge {
                            lkey,
                            addr: 0x1000,
                            len: bytes,
                        }]
                        .into_iter()
                        .collect(),
                        signaled: true,
                        solicited: false,
                        fence: false,
                    };
                    let x = live();
                    a.post_send(c, 1, wr).ok()?;
                    da += live() - x;
                }
            }
            posted = true;
            moved = true;
        }
        for (from_a, ip_from) in [(true, ip_a), (false, ip_b)] {
            loop {
                let (src, dst, ms, md, ds, dd) = if from_a {
                    (&mut a, &mut b, &mut ma, &mut mb, &mut da, &mut db)
                } else {
                    (&mut b, &mut a, &mut mb, &mut ma, &mut db, &mut da)
                };
                let x = live();
                let t = src.poll_transmit(now, &mut buf, ms);
                *ds += live() - x;
                let Some(t) = t else { break };
                // The datagram's copy is the embedder's, not counted.
                let pkt = buf[..t.len].to_vec();
                let x = live();
                dst.handle_datagram(now, ip_from, t.src_port, false, &pkt, md);
                // The events' vector is the embedder's: allocated outside the counted calls
                // (one made here would be counted as the transport's, 48 B per connection).
                evs.clear();
                while let Some(e) = dst.poll_event() {
                    evs.push(e);
                }
                let mut comps = 0;
                while dst.poll_completion().is_some() {
                    comps += 1;
                }
                *dd += live() - x;
                for e in evs.drain(..) {
                    match e {
                        Event::Connected { .. } => connected += 1,
                        Event::Accepted { conn, .. } => conns_b.push(conn),
                        _ => {}
                    }
                }
                completions += comps;
                moved = true;
            }
        }
        // Completions of WRITEs surface at A once their ACK is in.
        let x = live();
        while a.poll_completion().is_some() {
            completions += 1;
        }
        da += live() - x;
        let done = posted && (write.is_none() || completions >= n);
        let next = [a.poll_timeout(), b.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        if done && next.is_none() && !moved {
            break;
        }
        now = match next {
            Some(t) if !moved && t > now => t,
            _ => now + 1_000,
        };
        for (e, d) in [(&mut a, &mut da), (&mut b, &mut db)] {
            if e.poll_timeout().is_some_and(|t| t <= now) {
                let x = live();
                e.handle_timeout(now);
                *d += live() - x;
            }
        }
    }
    // Idle: each endpoint gives back its connections' spare buffers (counted too).
    for (e, d) in [(&mut a, &mut da), (&mut b, &mut db)] {
        let x = live();
        e.compact_idle();
        *d += live() - x;
    }
    if connected != n || conns_b.len() != n || (write.is_some() && completions < n) {
        return None;
    }
    let r = Some((da as f64 / n as f64, db as f64 / n as f64));
    drop(a);
    drop(b);
    r
}

fn sim_run(cfg: &ScaleConfig, r: &mut ScaleReport) {
    let t = Instant::now();
    let mp = cfg.multipath();
    let mut sim = planes_sim(&mp, cfg.planes, cfg.hosts);
    // Hundreds of connections per host start together and keep its NIC full: without this a
    // host whose pilots and ACKs wait for the NIC is retried every ns (see the method), which
    // made 16,000 connections take 47 times as long as 8,000.
    sim.set_timer_waits_for_nic(true);
    let hosts = cfg.hosts;
    let mut pairs: Vec<(usize, usize)> = (0..hosts)
        .flat_map(|a| (0..hosts).filter(move |&b| b != a).map(move |b| (a, b)))
        .collect();
    crate::Rng::new(cfg.opts.seed ^ 0x5ca1e).shuffle(&mut pairs);
    if pairs.len() < cfg.connections {
        r.errors.push(format!(
            "{} hosts have only {} ordered pairs for {} connections",
            hosts,
            pairs.len(),
            cfg.connections
        ));
        return;
    }
    pairs.truncate(cfg.connections);
    let w = WorkloadSpec {
        depth: 1,
        max_write_slots: 1,
        ..WorkloadSpec::bulk_write(1, 1, cfg.msg_size)
    };
    let start = 1_000_000;
    let flows: Vec<Flow> = pairs
        .iter()
        .map(|&(a, b)| Flow {
            client: HostId(a as u32),
            server: HostId(b as u32),
            workload: w.clone(),
            start_at: start,
        })
        .collect();
    let before = crate::alloc::live_bytes();
    let h = multi::start_flows(&mut sim, &flows);
    let done = multi::run_flows(&mut sim, &h, start + 2_000_000_000, 20_000);
    // Past every delayed ACK and hint timer: the connections idle.
    let t_end = sim.now() + 1_000_000;
    sim.run_until(t_end);
    r.sim_heap_per_conn = match (before, crate::alloc::live_bytes()) {
        (Some(b), Some(a)) => Some((a - b) as f64 / cfg.connections as f64),
        _ => None,
    };
    r.lost_msgs = h
        .iter()
        .map(|f| {
            let c = f.state(&sim);
            c.failures.len() as u64 + (c.total_wrs() - c.latencies.len() as u64)
        })
        .sum();
    r.completed = done;
    r.errors.extend(multi::all_errors(&sim));
    if !done {
        r.errors.push("not every connection completed".into());
    }
    r.events = sim.events_processed();
    r.sim_wall_s = t.elapsed().as_secs_f64();
    r.peak_rss = peak_rss();
}

/// Runs the benchmark.
pub fn run(cfg: &ScaleConfig, progress: &dyn Progress) -> ScaleReport {
    let t_all = Instant::now();
    let ep = cfg.endpoint();
    let mut r = ScaleReport {
        config: cfg.clone(),
        setup: vec![
            format!(
                "simulator: {} connections, each a distinct (client, server) pair of {} hosts (seeded random choice), \
                 {} plane(s), {} paths per connection, 1 stream, one WRITE of {} B each, all starting together",
                cfg.connections, cfg.hosts, cfg.planes, ep.conn.paths, cfg.msg_size
            ),
            format!(
                "memory: {} connections between two endpoints passing datagrams directly, the counting allocator around \
                 every call into each endpoint",
                cfg.mem_connections
            ),
        ],
        connections: cfg.connections,
        paths: ep.conn.paths,
        completed: false,
        lost_msgs: 0,
        errors: Vec::new(),
        events: 0,
        sim_wall_s: 0.0,
        sim_heap_per_conn: None,
        peak_rss: None,
        mem: Vec::new(),
        definitions: vec![
            "transport heap per idle connection: live heap bytes allocated inside the calls into each endpoint (connect, \
             post, poll_transmit, handle_datagram, handle_timeout, poll_*, compact_idle at the end) from before the first connect until every timer \
             has run out, over the connections: client end / server end; embedder memory (regions, packet buffers) is \
             not counted"
                .into(),
            "opened: the connections were only opened (OPEN / OPEN_ACK); one WRITE: each then moved one WRITE and idled"
                .into(),
            "sim heap per connection: process heap grown from just before the simulator's flows started to the end of \
             the run, over the connections: the transport's state of both ends plus the harness's per-flow records"
                .into(),
            "lost: WRITEs that completed with an error or never completed".into(),
        ],
        wall_s: 0.0,
    };
    progress.begin("scale", 3);
    for (state, write) in [("opened", None), ("one WRITE", Some(cfg.msg_size))] {
        progress.step(&format!("scale: memory, {state}"));
        r.mem.push(MemRow {
            state,
            connections: cfg.mem_connections,
            paths: ep.conn.paths,
            per_conn: idle_connection_memory(cfg.mem_connections, &ep, write),
        });
    }
    progress.step(&format!(
        "scale: {} connections in the simulator",
        cfg.connections
    ));
    sim_run(cfg, &mut r);
    progress.end();
    r.wall_s = t_all.elapsed().as_secs_f64();
    r
}

/// CSV of the report (header row first): one row per memory state, then the simulator run.
pub fn csv(r: &ScaleReport) -> crate::csv::Csv {
    use crate::csv::num;
    let mut c = crate::csv::Csv::new(&[
        "run",
        "connections",
        "paths",
        "client_bytes_per_conn",
        "server_bytes_per_conn",
        "sim_heap_bytes_per_conn",
        "lost_msgs",
        "completed",
        "events",
        "errors",
    ]);
    for m in &r.mem {
        c.push(vec![
            format!("memory {}", m.state),
            m.connections.to_string(),
            m.paths.to_string(),
            num(m.per_conn.map(|x| x.0), 0),
            num(m.per_conn.map(|x| x.1), 0),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
        ]);
    }
    c.push(vec![
        "simulator one WRITE".into(),
        r.connections.to_string(),
        r.paths.to_string(),
        String::new(),
        String::new(),
        num(r.sim_heap_per_conn, 0),
        r.lost_msgs.to_string(),
        r.completed.to_string(),
        r.events.to_string(),
        r.errors.len().to_string(),
    ]);
    c
}
