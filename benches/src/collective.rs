//! `bench collective`: the collectives of an AI training job on the reference fabric (128
//! hosts): all-to-all (every host WRITEs S bytes to every other host, all posted at once, one
//! connection per ordered host pair) and ring all-reduce (2(N−1) steps; in step k host i
//! WRITEs S/N bytes with immediate to host i+1, and starts step k+1 only when step k's chunk
//! from host i−1 has arrived). Job completion time against the ideal, for native (default
//! paths), native with 1 path and RoCEv2 go-back-N, lossless, at 1 % random loss and with one
//! core link down. Beside them a storage / KV-cache pattern ([`storage`]): many clients
//! reading objects of mixed sizes from a few servers at once.

use crate::fabric::{self, LINK_BPS, MTU};
use crate::progress::Progress;
use crate::roce::{self, AckTimeout};
use crate::{engine_host, native_host, Opts};
use ferroce_harness::multi::{self, Flow, FlowHandle};
use ferroce_harness::OpKind;
use ferroce_harness::{NodeHost, WorkloadSpec};
use ferroce_sim::topology::SwitchRole;
use ferroce_sim::{FaultConfig, HostId, Sim};
use ferroce_transport::EndpointConfig;
use std::time::Instant;

pub mod storage;

/// Which collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    AllToAll,
    Ring,
    /// Clients READ objects of mixed sizes from a few servers ([`storage`]); runs once,
    /// whatever the sizes S.
    Storage,
}

impl Pattern {
    pub fn name(self) -> &'static str {
        match self {
            Pattern::AllToAll => "all-to-all",
            Pattern::Ring => "ring-allreduce",
            Pattern::Storage => "storage-kv",
        }
    }

    /// The pattern named `s` (its `name`).
    pub fn parse(s: &str) -> Result<Self, String> {
        [Pattern::AllToAll, Pattern::Ring, Pattern::Storage]
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                format!("unknown pattern {s:?} (all-to-all, ring-allreduce, storage-kv)")
            })
    }

    /// Payload bytes each host must send for per-host size `s` on `n` hosts (the storage
    /// pattern's depend on the drawn object sizes: see [`storage::ideal_ns`]).
    pub fn bytes_per_host(self, s: u64, n: u64) -> u64 {
        match self {
            Pattern::AllToAll => (n - 1) * s,
            Pattern::Ring => 2 * (n - 1) * ring_chunk(s, n),
            Pattern::Storage => 0,
        }
    }
}

/// Bytes of one ring step: S/N (at least 1).
pub fn ring_chunk(s: u64, n: u64) -> u64 {
    (s / n).max(1)
}

/// Which transport every host runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// Native, the transport's default path count and controller.
    Native,
    /// Native, one path per connection (plain per-flow ECMP).
    NativeOnePath,
    /// RoCEv2 RC go-back-N, one QP per ordered host pair, its best local ACK timeout.
    Roce,
}

impl Engine {
    pub const ALL: [Engine; 3] = [Engine::Native, Engine::NativeOnePath, Engine::Roce];

    pub fn name(self) -> &'static str {
        match self {
            Engine::Native => "native",
            Engine::NativeOnePath => "native-1path",
            Engine::Roce => "rocev2",
        }
    }

    /// The engine named `s` (its `name`).
    pub fn parse(s: &str) -> Result<Self, String> {
        Engine::ALL
            .into_iter()
            .find(|e| e.name() == s)
            .ok_or_else(|| format!("unknown engine {s:?} (native, native-1path, rocev2)"))
    }
}

/// Fabric condition of a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Condition {
    Lossless,
    /// Independent random loss with this probability on every host's uplink (every data
    /// packet and every ACK crosses exactly one lossy hop).
    Loss(f64),
    /// One core–aggregation link down from the start (routing has converged around it: ECMP
    /// no longer uses it, so it is lost capacity, not a black hole).
    CoreLinkDown,
}

impl Condition {
    pub fn name(self) -> String {
        match self {
            Condition::Lossless => "lossless".into(),
            Condition::Loss(p) => format!("loss-{}%", p * 100.0),
            Condition::CoreLinkDown => "core-link-down".into(),
        }
    }

    /// `lossless`, `core-link-down`, or `loss-P%` / `loss-P` (P in percent).
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "lossless" => Ok(Condition::Lossless),
            "core-link-down" => Ok(Condition::CoreLinkDown),
            _ => s
                .strip_prefix("loss-")
                .map(|p| p.trim_end_matches('%'))
                .and_then(|p| p.parse::<f64>().ok())
                .filter(|p| (0.0..100.0).contains(p))
                .map(|p| Condition::Loss(p / 100.0))
                .ok_or_else(|| {
                    format!("unknown condition {s:?} (lossless, loss-1%, core-link-down)")
                }),
        }
    }
}

/// Settings of the collective benchmark.
#[derive(Clone, Debug)]
pub struct CollectiveConfig {
    pub opts: Opts,
    pub patterns: Vec<Pattern>,
    pub engines: Vec<Engine>,
    pub conditions: Vec<Condition>,
    /// S: bytes per host pair (all-to-all) or the reduced vector per host (ring).
    pub sizes: Vec<u64>,
    /// Largest WRITE of an all-to-all transfer (a pair's S is split into WRITEs of this).
    pub msg_size: u32,
    /// WRITEs in flight per connection.
    pub depth: u32,
    /// Fat-tree arity (k³/4 hosts); the reference fabric's 8 unless asked. The storage
    /// pattern is laid out for k = 8 (one server per pod of 16 hosts) and runs only there.
    pub k: usize,
}

impl CollectiveConfig {
    pub fn new(opts: Opts) -> Self {
        CollectiveConfig {
            opts,
            patterns: vec![Pattern::AllToAll, Pattern::Ring, Pattern::Storage],
            engines: Engine::ALL.to_vec(),
            conditions: vec![
                Condition::Lossless,
                Condition::Loss(0.01),
                Condition::CoreLinkDown,
            ],
            sizes: if opts.quick {
                vec![64 << 10]
            } else {
                vec![64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20]
            },
            msg_size: 65_536,
            depth: 2,
            k: fabric::FAT_TREE_K,
        }
    }

    /// Hosts of the fabric.
    pub fn hosts(&self) -> usize {
        fabric::fat_tree_hosts(self.k)
    }
}

/// One run's figures.
#[derive(Clone, Debug)]
pub struct CollectiveRow {
    pub pattern: Pattern,
    pub engine: Engine,
    pub condition: Condition,
    pub size: u64,
    /// Job completion time: from the common start to the last transfer's completion (ns);
    /// None if the job did not complete within the time limit.
    pub jct_ns: Option<u64>,
    /// The bytes each host must send, at line rate (ns).
    pub ideal_ns: u64,
    /// ideal / completion time.
    pub fraction: Option<f64>,
    pub retransmits: u64,
    pub timeouts: u64,
    /// Native only: why packets were declared lost, summed over every path of every host.
    pub causes: LossCauses,
    pub drops: u64,
    pub errors: Vec<String>,
    pub events: u64,
    pub wall_s: f64,
    /// Storage pattern only: per-read figures and the servers' egress utilisation.
    pub storage: Option<storage::StorageStats>,
}

/// What made native senders resend, summed over every path of every connection of every
/// host (zero for RoCEv2, whose go-back-N has no per-cause counters), and the copies the
/// receivers got twice (a resend whose original had arrived: spurious).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LossCauses {
    /// Holes below a higher selectively acknowledged PSN.
    pub sack_holes: u64,
    /// Declared lost by time (RACK).
    pub time_losses: u64,
    pub tlps: u64,
    pub rtos: u64,
    pub rx_duplicates: u64,
    /// Chunks acknowledged twice: spurious resends (both copies arrived).
    pub redundant: u64,
    /// ACK blocks whose hold exceeded the configured ACK delay, and the longest (ns).
    pub long_holds: u64,
    pub max_hold_ns: u64,
}

impl LossCauses {
    pub fn of(sim: &Sim<NodeHost>) -> Self {
        let mut c = LossCauses::default();
        for h in sim.hosts() {
            let Some(ep) = h.native() else { continue };
            for conn in ep.connections() {
                c.rx_duplicates += conn.counters().rx_duplicates;
                c.redundant += conn.counters().acks_redundant;
                c.long_holds += conn.counters().rx_ack_holds_long;
                c.max_hold_ns = c.max_hold_ns.max(conn.counters().rx_ack_hold_max_ns);
                for p in conn.paths() {
                    c.sack_holes += p.counters().sack_holes;
                    c.time_losses += p.counters().time_losses;
                    c.tlps += p.counters().tlps;
                    c.rtos += p.counters().rtos;
                }
            }
        }
        c
    }
}

/// Result of the collective benchmark.
#[derive(Clone, Debug)]
pub struct CollectiveReport {
    pub config: CollectiveConfig,
    pub rows: Vec<CollectiveRow>,
    pub setup: Vec<String>,
    pub definitions: Vec<String>,
    pub wall_s: f64,
}

impl CollectiveReport {
    pub fn row(
        &self,
        pattern: Pattern,
        engine: Engine,
        condition: Condition,
        size: u64,
    ) -> Option<&CollectiveRow> {
        self.rows.iter().find(|r| {
            r.pattern == pattern && r.engine == engine && r.condition == condition && r.size == size
        })
    }
}

/// When every host posts its first WRITEs: connections are opened at 0.
const T0: u64 = 200_000;

/// RoCEv2 all-to-all: the server role's QPs are numbered from here (the client role's are
/// 1, 2, ...), so a host's two QPs towards one peer stay apart (see
/// [`NodeHost::set_server_streams_from`]).
const ROCE_SERVER_QPN: u32 = 0x100;

fn host_for(engine: Engine, id: HostId, ip: [u8; 4], opts: Opts) -> NodeHost {
    let seed = opts.seed;
    let mut cfg = EndpointConfig::default();
    cfg.conn.cc = opts.cc;
    cfg.conn.mtu = MTU;
    match engine {
        Engine::Native => native_host(id, ip, &cfg, seed),
        Engine::NativeOnePath => {
            cfg.conn.paths = 1;
            native_host(id, ip, &cfg, seed)
        }
        Engine::Roce => match roce::engine(AckTimeout::Aggressive, MTU, ip) {
            Some(ep) => engine_host(ip, ep),
            // No RoCEv2 engine in this build: the caller reports the row as not run.
            None => native_host(id, ip, &cfg, seed),
        },
    }
}

/// The core–aggregation link taken down by [`Condition::CoreLinkDown`]: the first link of
/// the first core switch.
fn take_core_link_down(sim: &mut Sim<NodeHost>) -> bool {
    let core = sim.switch_ids().find(|&s| {
        sim.switch_info(s)
            .is_some_and(|i| i.role == SwitchRole::Core)
    });
    let Some(link) = core.and_then(|c| sim.switch_links(c).first().copied()) else {
        return false;
    };
    sim.set_link_up(link, false);
    true
}

/// The flows of a pattern on `n` hosts with per-host size `s`.
pub fn flows(cfg: &CollectiveConfig, pattern: Pattern, n: usize, s: u64) -> Vec<Flow> {
    match pattern {
        Pattern::AllToAll => {
            let msg = s.min(cfg.msg_size as u64);
            let msgs = s.div_ceil(msg) as u32;
            let w = WorkloadSpec {
                depth: cfg.depth.min(msgs),
                max_write_slots: 4,
                ..WorkloadSpec::bulk_write(1, msgs, msg as u32)
            };
            multi::all_to_all_flows(n, &w, T0)
        }
        Pattern::Ring => {
            let chunk = ring_chunk(s, n as u64) as u32;
            let w = WorkloadSpec {
                streams: 1,
                messages: 2 * (n as u32 - 1),
                sizes: vec![chunk],
                ops: vec![OpKind::WriteImm],
                // Never the limit: a host runs a few steps ahead of its completions.
                depth: 16,
                recv_depth: 16,
                seed: 1,
                max_write_slots: 4,
            };
            (0..n)
                .map(|i| Flow {
                    client: HostId(i as u32),
                    server: HostId(((i + 1) % n) as u32),
                    workload: w.clone(),
                    start_at: T0,
                })
                .collect()
        }
        Pattern::Storage => storage::flows(cfg, n),
    }
}

fn run_one(
    cfg: &CollectiveConfig,
    pattern: Pattern,
    engine: Engine,
    cond: Condition,
    size: u64,
) -> CollectiveRow {
    let t_wall = Instant::now();
    let topo = fabric::reference_config(cfg.opts.seed);
    let opts = cfg.opts;
    let mut sim = fabric::fat_tree_k(&topo, cfg.k, |id, ip| host_for(engine, id, ip, opts));
    // 127 busy connections per host keep its NIC full: without this the simulator spins
    // 1 ns at a time behind it (see the method).
    sim.set_timer_waits_for_nic(true);
    let n = cfg.hosts();
    let all: Vec<HostId> = (0..n as u32).map(HostId).collect();
    let mut errors = Vec::new();
    if pattern == Pattern::Storage && cfg.k != fabric::FAT_TREE_K {
        errors.push(format!(
            "storage-kv is laid out for k = {} only",
            fabric::FAT_TREE_K
        ));
    }
    if cond == Condition::CoreLinkDown && !take_core_link_down(&mut sim) {
        errors.push("no core link to take down".to_string());
    }
    if engine == Engine::Roce && pattern == Pattern::AllToAll {
        for &x in &all {
            sim.host_mut(x).set_server_streams_from(ROCE_SERVER_QPN);
        }
    }
    let fl = flows(cfg, pattern, n, size);
    let h: Vec<FlowHandle> = multi::start_flows(&mut sim, &fl);
    // A job opens its connections at start-up, not inside the collective: the loss starts
    // at T0, with every connection open (a lost OPEN waits out the 1 ms open timeout, and
    // a few of 16,256 handshakes would decide the job's time).
    sim.run_until(T0);
    let not_open = h.len() - open_connections(&sim, &h);
    if not_open > 0 {
        errors.push(format!("{not_open} connections not open at T0"));
    }
    if let Condition::Loss(p) = cond {
        multi::set_uplink_faults(&mut sim, &all, FaultConfig::loss(p));
    }
    if pattern == Pattern::Ring {
        for f in &h {
            sim.host_mut(f.client).chain_client(f.index);
        }
    }
    let ideal_ns = match pattern {
        Pattern::Storage => storage::ideal_ns(&fl),
        _ => pattern.bytes_per_host(size, n as u64) * 8 * 1_000_000_000 / LINK_BPS,
    };
    // Generous: 40 times the ideal plus 20 ms (RoCEv2 at 1 % loss is slow, not stuck).
    let limit = T0 + 40 * ideal_ns + 20_000_000;
    let trace = std::env::var_os("FERROCE_COLL_TRACE").is_some();
    let mut completed = false;
    while sim.now() < limit {
        let t = (sim.now() + 100_000).min(limit);
        completed = multi::run_flows(&mut sim, &h, t, 10_000);
        if trace {
            let done = h.iter().filter(|f| f.state(&sim).done()).count();
            eprintln!(
                "t {} us events {} done {done}/{} wall {:.1}s",
                sim.now() / 1000,
                sim.events_processed(),
                h.len(),
                t_wall.elapsed().as_secs_f64()
            );
        }
        if completed || sim.next_event_time().is_none() {
            break;
        }
    }
    let end = h.iter().filter_map(|f| f.state(&sim).finished_at).max();
    let t = sim.now() + 50_000;
    sim.run_until(t);
    let jct_ns = if completed { end.map(|e| e - T0) } else { None };
    let tot = multi::totals(&sim);
    errors.extend(multi::all_errors(&sim));
    CollectiveRow {
        pattern,
        engine,
        condition: cond,
        size,
        jct_ns,
        ideal_ns,
        fraction: jct_ns.map(|j| ideal_ns as f64 / j.max(1) as f64),
        retransmits: tot.retx_pkts,
        timeouts: tot.timeouts,
        causes: LossCauses::of(&sim),
        drops: sim.stats().totals().dropped(),
        errors,
        events: sim.events_processed(),
        wall_s: t_wall.elapsed().as_secs_f64(),
        storage: (pattern == Pattern::Storage).then(|| storage::stats(&sim, &h, &fl, jct_ns)),
    }
}

/// Client roles of `h` whose native connection is open (every one for engines without a
/// handshake).
fn open_connections(sim: &Sim<NodeHost>, h: &[FlowHandle]) -> usize {
    h.iter()
        .filter(|f| {
            let host = sim.host(f.client);
            match (host.native(), f.state(sim).conn) {
                (Some(ep), Some(c)) => ep
                    .connection(c)
                    .is_some_and(|x| x.state == ferroce_transport::ConnState::Open),
                _ => true,
            }
        })
        .count()
}

/// The sizes a pattern runs at: the storage pattern once (its object sizes are its own).
fn sizes_of(cfg: &CollectiveConfig, p: Pattern) -> Vec<u64> {
    match p {
        Pattern::Storage => vec![storage::MAX_OBJECT as u64],
        _ => cfg.sizes.clone(),
    }
}

/// Runs the benchmark: every pattern × size × engine × condition.
pub fn run(cfg: &CollectiveConfig, progress: &dyn Progress) -> CollectiveReport {
    let t_all = Instant::now();
    let engines: Vec<Engine> = cfg
        .engines
        .iter()
        .copied()
        .filter(|&e| e != Engine::Roce || roce::AVAILABLE)
        .collect();
    let total: usize = cfg
        .patterns
        .iter()
        .map(|&p| engines.len() * sizes_of(cfg, p).len() * cfg.conditions.len())
        .sum();
    progress.begin("collective", total as u64);
    let mut rows = Vec::new();
    for &p in &cfg.patterns {
        for s in sizes_of(cfg, p) {
            for &e in &engines {
                for &c in &cfg.conditions {
                    progress.step(&format!(
                        "{} {} KiB, {}, {}",
                        p.name(),
                        s >> 10,
                        e.name(),
                        c.name()
                    ));
                    rows.push(run_one(cfg, p, e, c, s));
                }
            }
        }
    }
    progress.end();
    let rtt = fabric::reference_rtt_ns();
    let n = cfg.hosts();
    let mut setup = vec![
        format!("fabric: {}", fabric::describe_fat_tree(cfg.k, rtt)),
        format!(
            "all-to-all: every host WRITEs S bytes to each of the other {}, all posted at {} µs on {} connections per host \
             (one connection / QP per ordered host pair, WRITEs of min(S, {} B), {} in flight per connection; RoCEv2: \
             a host's requester QPs are numbered 1, its responder QPs {:#x}, so each ordered pair has its own QP pair)",
            n - 1,
            T0 / 1000,
            n - 1,
            cfg.msg_size,
            cfg.depth,
            ROCE_SERVER_QPN
        ),
        format!(
            "ring all-reduce: host i WRITEs_WITH_IMM S/{n} bytes to host i+1, {} steps; step k+1 is posted only when \
             host i's receive of step k's chunk from host i-1 has completed (the data dependency, no global barrier; \
             reduction compute takes no time)",
            2 * (n - 1)
        ),
        "engines: native (default paths and controller), native with 1 path per connection, RoCEv2 RC go-back-N \
         (local ACK timeout 65.5 µs, its best case on this fabric; retry forever)"
            .into(),
    ];
    // The storage layout is k = 8's (one server per pod); other fabrics do not run it.
    if cfg.k == fabric::FAT_TREE_K || cfg.patterns.contains(&Pattern::Storage) {
        setup.push(format!(
            "storage-kv: {} servers (one per pod), the other {} hosts clients, client j READs {} objects from server \
             j mod {}, {} in flight, sizes from a fixed table of {} seeded log-uniform draws over the powers of two \
             {} KiB - {} KiB (each client starts at its own place in it); all clients at {} µs",
            storage::SERVERS,
            n - storage::SERVERS,
            storage::objects(cfg),
            storage::SERVERS,
            storage::DEPTH,
            storage::object_sizes(cfg.opts.seed).len(),
            storage::MIN_OBJECT >> 10,
            storage::MAX_OBJECT >> 10,
            T0 / 1000
        ));
    }
    setup.push(
        "conditions: lossless; 1 % random loss on every host's uplink (data and ACKs) from the start of the \
         collective, the connections having opened before (as a job opens its QPs at start-up); one \
         core-aggregation link down from the start, routing converged around it (ECMP no longer uses it)"
            .into(),
    );
    CollectiveReport {
        config: cfg.clone(),
        rows,
        setup,
        definitions: vec![
            "jct: job completion time, from the common start to the completion of the last WRITE of any host (the sender's \
             completion, i.e. acknowledged)".into(),
            "ideal: the payload bytes each host must send ((N-1) S for all-to-all, 2 (N-1) S/N for the ring, the busiest \
             server's READ responses for storage-kv) at the 100 Gb/s line rate, no headers, no RTT; fraction = ideal / jct \
             (packet headers alone cap it at 0.972)".into(),
            "storage-kv: read time = a READ's post to its completion (behind the client's other READ in flight); alone = \
             the object at line rate plus one base RTT; egress = the servers' READ response bytes / (servers x line rate x jct)"
                .into(),
            "retransmits: packets that carried data sent before, all hosts; drops: packets the fabric dropped (random loss, \
             full queues, the down link)".into(),
            "holes / time-lost / TLPs / RTOs (native): why senders resent, summed over every path: SACK holes, the \
             time rule (RACK), tail-loss probes, RTO expiries; redundant: chunks acknowledged twice (a resend whose \
             original arrived too: spurious); long holds: ACK blocks whose reported hold exceeded the configured 5 µs \
             ACK delay, max hold the longest".into(),
        ],
        wall_s: t_all.elapsed().as_secs_f64(),
    }
}

/// CSV of the report (header row first).
pub fn csv(r: &CollectiveReport) -> crate::csv::Csv {
    use crate::csv::num;
    let mut c = crate::csv::Csv::new(&[
        "pattern",
        "size_bytes",
        "engine",
        "condition",
        "jct_us",
        "ideal_us",
        "fraction_of_ideal",
        "retransmits",
        "timeouts",
        "sack_holes",
        "time_losses",
        "tlps",
        "rtos",
        "rx_duplicates",
        "redundant_credits",
        "long_ack_holds",
        "max_ack_hold_us",
        "drops",
        "errors",
        "events",
        "wall_s",
        "egress_utilisation",
    ]);
    for x in &r.rows {
        c.push(vec![
            x.pattern.name().into(),
            x.size.to_string(),
            x.engine.name().into(),
            x.condition.name(),
            num(x.jct_ns.map(|j| j as f64 / 1e3), 1),
            num(Some(x.ideal_ns as f64 / 1e3), 1),
            num(x.fraction, 4),
            x.retransmits.to_string(),
            x.timeouts.to_string(),
            x.causes.sack_holes.to_string(),
            x.causes.time_losses.to_string(),
            x.causes.tlps.to_string(),
            x.causes.rtos.to_string(),
            x.causes.rx_duplicates.to_string(),
            x.causes.redundant.to_string(),
            x.causes.long_holds.to_string(),
            num(Some(x.causes.max_hold_ns as f64 / 1e3), 1),
            x.drops.to_string(),
            x.errors.len().to_string(),
            x.events.to_string(),
            num(Some(x.wall_s), 2),
            num(x.storage.as_ref().map(|st| st.egress_util), 4),
        ]);
    }
    c
}

/// SVG chart: fraction of ideal against S, one curve per pattern × engine × condition.
pub fn plot(r: &CollectiveReport, path: &std::path::Path) -> Result<(), String> {
    use crate::plot::{self, Axes, Series, NATIVE_COLORS, ROCE_COLORS};
    let mut series = Vec::new();
    let conds = &r.config.conditions;
    // The storage pattern has its own chart (storage::plot).
    for &p in r.config.patterns.iter().filter(|&&p| p != Pattern::Storage) {
        for &e in &r.config.engines {
            for (ci, &c) in conds.iter().enumerate() {
                let points: Vec<(f64, f64)> = r
                    .rows
                    .iter()
                    .filter(|x| x.pattern == p && x.engine == e && x.condition == c)
                    .filter_map(|x| x.fraction.map(|f| (x.size as f64 / 1024.0, f)))
                    .collect();
                if points.is_empty() {
                    continue;
                }
                let color = match e {
                    Engine::Native => NATIVE_COLORS[2 - ci.min(2)],
                    Engine::NativeOnePath => NATIVE_COLORS[3],
                    Engine::Roce => ROCE_COLORS[ci.min(1)],
                };
                let mut s = Series::line(
                    format!("{} {} {}", p.name(), e.name(), c.name()),
                    color,
                    points,
                );
                s.dashed = p == Pattern::Ring;
                s.markers_only = c == Condition::CoreLinkDown;
                series.push(s);
            }
        }
    }
    let xs: Vec<f64> = r.config.sizes.iter().map(|&s| s as f64 / 1024.0).collect();
    let lo = xs.iter().cloned().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().cloned().fold(0.0, f64::max);
    let axes = Axes {
        title: format!(
            "collectives on {} hosts: fraction of ideal completion time",
            r.config.hosts()
        ),
        x_desc: "S (KiB per pair for all-to-all, per host for the ring)".into(),
        y_desc: "ideal / job completion time".into(),
        x: (lo / 1.5, hi * 1.5),
        y: (0.0, 1.0),
        log_x: true,
    };
    plot::chart(path, &axes, &series)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ring's steps wait for their data: 254 dependent steps, each at least one hop
    /// there and one back to the neighbour's edge switch (2 × 1 µs of propagation), so the
    /// job takes at least 508 µs; posting the steps as fast as completions allow (16 in
    /// flight, no dependency) finishes in about 16 round trips (~200 µs; 72 µs at 64 in
    /// flight, measured).
    #[test]
    fn ring_steps_wait_for_the_previous_chunk() {
        let mut cfg = CollectiveConfig::new(Opts {
            quick: true,
            ..Opts::default()
        });
        cfg.sizes = vec![64 << 10];
        let row = run_one(
            &cfg,
            Pattern::Ring,
            Engine::Native,
            Condition::Lossless,
            64 << 10,
        );
        assert!(row.errors.is_empty(), "{:?}", row.errors);
        let jct = row.jct_ns.expect("ring completes");
        let n = fabric::FAT_TREE_HOSTS as u64;
        let min_step = 2 * fabric::reference_config(1).prop_delay;
        eprintln!("ring 64 KiB: jct {jct} ns, ideal {} ns", row.ideal_ns);
        assert!(
            jct >= 2 * (n - 1) * min_step,
            "ring finished in {jct} ns: its steps did not wait for the data"
        );
    }
}
