//! A long-running simulator soak: many hosts, several connections per host and several streams
//! per connection run the self-verifying workload round after round on the same connections
//! (every verbs operation, sizes from 0 B to MiBs), while the fault mix on the fabric is drawn
//! anew from the seed every epoch: random and bursty loss, reordering, duplication, corruption
//! and ECN marks on every host uplink, a flapping link, a failed plane. Every completion,
//! received message, READ, atomic original and, at the end of each round, every server write
//! slot is checked (see [`crate::host`]); the driver only schedules rounds and faults.
//!
//! Rounds are per server: when every client of a server has finished its round, the server's
//! write slots are checked and zeroed, its receives re-posted, and its clients start the next
//! round (the round number is part of every work request id, so a stale completion is caught).

use crate::host::NodeHost;
use crate::multi::{self, Flow, FlowHandle};
use crate::workload::{OpKind, WorkloadSpec};
use ferroce_sim::topology::{self, PlaneShape, TopologyConfig};
use ferroce_sim::Rng;
use ferroce_sim::{FaultConfig, GilbertElliott, HostId, LinkId, Sim};
use ferroce_transport::EndpointConfig;
use std::fmt;

/// What the soak runs on.
#[derive(Clone, Debug)]
pub struct SoakConfig {
    pub seed: u64,
    pub hosts: usize,
    /// Each host is the client of the next `conns_per_host` hosts (so also the server of as
    /// many): `hosts * conns_per_host` connections.
    pub conns_per_host: usize,
    pub streams: u32,
    /// Work requests per stream per round.
    pub messages: u32,
    pub sizes: Vec<u32>,
    /// Parallel planes (each host has one NIC port per plane; each plane a leaf-spine).
    pub planes: usize,
    /// The fault mix is drawn anew every this many simulated ns.
    pub epoch_ns: u64,
    /// Whether epochs draw faults at all (false: a clean fabric, for comparisons).
    pub faults: bool,
}

impl Default for SoakConfig {
    fn default() -> Self {
        SoakConfig {
            seed: 1,
            hosts: 8,
            conns_per_host: 2,
            streams: 3,
            messages: 16,
            // Eight sizes (not a multiple of the seven operations, so every stream sees every
            // size with every operation over a few rounds' worth of streams).
            sizes: vec![0, 1, 100, 4096, 4097, 65_536, 300_000, 2 << 20],
            planes: 2,
            epoch_ns: 5_000_000,
            faults: true,
        }
    }
}

/// The faults of one epoch.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FaultMix {
    pub epoch: u64,
    /// Applied to every host uplink (each packet crosses one faulty hop).
    pub link: FaultConfig,
    /// A fabric link that is down from the epoch's start for `flap_ns`.
    pub flap: Option<(LinkId, u64)>,
    /// A plane whose every link is down from the epoch's start for `plane_ns`.
    pub plane_down: Option<(usize, u64)>,
}

impl fmt::Display for FaultMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let l = &self.link;
        let mut parts = Vec::new();
        let pct = |p: f64| format!("{:.2}%", p * 100.0);
        if l.loss > 0.0 {
            parts.push(format!("loss {}", pct(l.loss)));
        }
        if let Some(ge) = l.burst {
            parts.push(format!(
                "bursts {} (len {:.0})",
                pct(ge.mean_loss()),
                1.0 / ge.p_bad_to_good
            ));
        }
        if l.reorder > 0.0 {
            parts.push(format!(
                "reorder {} +{}us",
                pct(l.reorder),
                l.reorder_delay / 1000
            ));
        }
        if l.duplicate > 0.0 {
            parts.push(format!("dup {}", pct(l.duplicate)));
        }
        if l.corrupt > 0.0 {
            parts.push(format!("corrupt {}", pct(l.corrupt)));
        }
        if l.ecn_mark > 0.0 {
            parts.push(format!("ecn {}", pct(l.ecn_mark)));
        }
        if let Some((link, ns)) = self.flap {
            parts.push(format!("flap link {} {}us", link.0, ns / 1000));
        }
        if let Some((p, ns)) = self.plane_down {
            parts.push(format!("plane {p} down {}us", ns / 1000));
        }
        if parts.is_empty() {
            parts.push("clean".into());
        }
        write!(f, "{}", parts.join(", "))
    }
}

impl FaultMix {
    /// Draw epoch `epoch`'s mix: each fault is on with some chance, at a random strength.
    pub fn draw(
        rng: &mut Rng,
        epoch: u64,
        fabric_links: &[LinkId],
        planes: usize,
        epoch_ns: u64,
    ) -> Self {
        let (loss_on, burst_on, reo_on, dup_on, cor_on, ecn_on) = (
            rng.chance(0.6),
            rng.chance(0.4),
            rng.chance(0.5),
            rng.chance(0.4),
            rng.chance(0.4),
            rng.chance(0.5),
        );
        let flap_on = rng.chance(0.4);
        let plane_on = planes > 1 && rng.chance(0.25);
        let u = |rng: &mut Rng, lo: f64, hi: f64| lo + (hi - lo) * rng.next_f64();
        let loss = if loss_on { u(rng, 0.0005, 0.03) } else { 0.0 };
        let burst = burst_on.then(|| {
            let len = u(rng, 2.0, 16.0);
            let mean = u(rng, 0.001, 0.01);
            // Stationary loss = enter / (enter + exit), everything lost while bad.
            let exit = 1.0 / len;
            GilbertElliott::bursts(mean * exit / (1.0 - mean), exit)
        });
        let link = FaultConfig {
            loss,
            burst,
            reorder: if reo_on { u(rng, 0.001, 0.05) } else { 0.0 },
            reorder_delay: u(rng, 1_000.0, 30_000.0) as u64,
            duplicate: if dup_on { u(rng, 0.0005, 0.02) } else { 0.0 },
            corrupt: if cor_on { u(rng, 0.0005, 0.01) } else { 0.0 },
            ecn_mark: if ecn_on { u(rng, 0.001, 0.1) } else { 0.0 },
        };
        let plane_down = plane_on.then(|| {
            let p = rng.below(planes as u64) as usize;
            (p, (u(rng, 0.1, 0.6) * epoch_ns as f64) as u64)
        });
        let flap = (flap_on && !fabric_links.is_empty()).then(|| {
            let l = fabric_links[rng.below(fabric_links.len() as u64) as usize];
            (l, (u(rng, 0.05, 0.5) * epoch_ns as f64) as u64)
        });
        FaultMix {
            epoch,
            link,
            flap,
            plane_down,
        }
    }
}

/// Counts so far.
#[derive(Clone, Debug, Default)]
pub struct SoakStats {
    /// Work requests completed successfully and checked.
    pub messages_verified: u64,
    /// Their payload bytes (SEND, WRITE, READ; atomics carry 8 bytes each, not counted).
    pub bytes_verified: u64,
    /// Receive completions checked at the servers.
    pub receives_verified: u64,
    /// Server write slots checked at the end of rounds.
    pub write_slots_verified: u64,
    /// Rounds finished, summed over servers.
    pub rounds: u64,
    pub epochs: u64,
    /// Work requests completed per operation (SEND, SEND_IMM, WRITE, WRITE_IMM, READ,
    /// FETCH_ADD, CMP_SWAP), from the workload's own schedule.
    pub ops: [u64; 7],
    pub sim_ns: u64,
    pub events: u64,
    pub errors: u64,
    pub retransmits: u64,
    pub timeouts: u64,
    pub fabric_drops: u64,
    pub corrupted: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub ecn_marked: u64,
}

/// The running soak.
pub struct SimSoak {
    pub cfg: SoakConfig,
    pub sim: Sim<NodeHost>,
    pub flows: Vec<FlowHandle>,
    pub spec: WorkloadSpec,
    /// Servers and the flows (indices into `flows`) each serves.
    servers: Vec<(HostId, Vec<usize>)>,
    rng: Rng,
    pub mix: FaultMix,
    epoch_end: u64,
    /// Links down now and when they come back.
    down: Vec<(LinkId, u64)>,
    fabric_links: Vec<LinkId>,
    /// Every error seen, in order (the first ones are kept in full).
    pub errors: Vec<String>,
    error_count: u64,
    /// Stop starting rounds (the soak is ending): clients finish the round they are in.
    draining: bool,
    stats: SoakStats,
    /// Per flow, whether its current round is counted in `stats.ops` already.
    counted: Vec<bool>,
    /// Work requests per operation in one round of one flow.
    round_ops: [u64; 7],
}

/// Errors kept in full (the count goes on).
const MAX_KEPT_ERRORS: usize = 100;

/// Simulated time between two looks at the rounds and the fault schedule.
const TICK_NS: u64 = 20_000;

impl SimSoak {
    pub fn new(cfg: SoakConfig) -> Self {
        let topo = TopologyConfig::default().with_seed(cfg.seed);
        let planes = cfg.planes.max(1);
        let hosts = cfg.hosts.max(2);
        let shape = PlaneShape::LeafSpine {
            leaves: 2,
            spines: 2,
        };
        let mut ep = EndpointConfig {
            line_rate_mbps: (topo.link_rate_bps / 1_000_000) as u32 * planes as u32,
            nic_ports: planes as u8,
            ..EndpointConfig::default()
        };
        ep.conn.paths = ep.conn.paths.max(planes as u8);
        let seed = cfg.seed;
        let mut sim = topology::planes(&topo, planes, hosts, shape).build_with(|id, ip| {
            let mut e = ep.clone();
            e.seed = seed ^ (id.0 as u64 + 1).wrapping_mul(0x9e37_79b9);
            let mut h = NodeHost::new(ip, e);
            h.record_events = false;
            h
        });
        let spec = WorkloadSpec {
            streams: cfg.streams.max(1),
            messages: cfg.messages.max(1),
            sizes: cfg.sizes.clone(),
            ops: OpKind::ALL.to_vec(),
            depth: 4,
            recv_depth: 4,
            seed: cfg.seed,
            max_write_slots: 0,
        };
        let per = cfg.conns_per_host.clamp(1, hosts - 1);
        let mut flow_list = Vec::new();
        for c in 0..hosts {
            for k in 1..=per {
                flow_list.push(Flow {
                    client: HostId(c as u32),
                    server: HostId(((c + k) % hosts) as u32),
                    workload: spec.clone(),
                    start_at: 0,
                });
            }
        }
        let flows = multi::start_flows(&mut sim, &flow_list);
        let mut servers: Vec<(HostId, Vec<usize>)> = Vec::new();
        for (i, f) in flows.iter().enumerate() {
            match servers.iter_mut().find(|(s, _)| *s == f.server) {
                Some((_, v)) => v.push(i),
                None => servers.push((f.server, vec![i])),
            }
        }
        for (s, idxs) in &servers {
            // Each client of a server gets its own atomic words (lane = its place here).
            for (lane, &i) in idxs.iter().enumerate() {
                let f = flows[i];
                let cl = &mut sim.host_mut(f.client).clients[f.index];
                cl.atomic_lane = lane as u32;
                cl.record_latencies = false;
            }
            if let Some(sv) = sim.host_mut(*s).server_role.as_deref_mut() {
                sv.scrub_receives = true;
            }
        }
        let host_links: Vec<LinkId> = (0..sim.num_hosts())
            .flat_map(|h| sim.host_links(HostId(h as u32)))
            .collect();
        let fabric_links: Vec<LinkId> = (0..sim.num_links())
            .map(|l| LinkId(l as u32))
            .filter(|l| !host_links.contains(l))
            .collect();
        let n = flows.len();
        let mut round_ops = [0u64; 7];
        for s in 0..spec.streams {
            for m in 0..spec.messages {
                let (op, _) = spec.op_at(s, m);
                round_ops[OpKind::ALL.iter().position(|&o| o == op).unwrap_or(0)] += 1;
            }
        }
        SimSoak {
            rng: Rng::derive(cfg.seed, 0x50a4),
            cfg,
            sim,
            flows,
            spec,
            servers,
            mix: FaultMix::default(),
            epoch_end: 0,
            down: Vec::new(),
            fabric_links,
            errors: Vec::new(),
            error_count: 0,
            draining: false,
            stats: SoakStats::default(),
            counted: vec![false; n],
            round_ops,
        }
    }

    /// Connections (client → server flows) of the soak.
    pub fn connections(&self) -> usize {
        self.flows.len()
    }

    fn error(&mut self, e: String) {
        self.error_count += 1;
        if self.errors.len() < MAX_KEPT_ERRORS {
            self.errors.push(e);
        }
    }

    /// Move every host's new verification errors into the soak's list.
    fn collect_host_errors(&mut self) {
        let mut new = Vec::new();
        for h in 0..self.sim.num_hosts() {
            let host = self.sim.host_mut(HostId(h as u32));
            for e in host.errors.drain(..) {
                new.push(format!("host {h}: {e}"));
            }
        }
        for e in new {
            self.error(e);
        }
    }

    fn set_link(&mut self, l: LinkId, up: bool) {
        self.sim.set_link_up(l, up);
    }

    /// Start the next epoch: restore what the last one took down, draw and apply a new mix.
    fn next_epoch(&mut self) {
        let now = self.sim.now();
        for (l, _) in std::mem::take(&mut self.down) {
            self.set_link(l, true);
        }
        let epoch = self.stats.epochs;
        self.stats.epochs += 1;
        self.epoch_end = now + self.cfg.epoch_ns.max(TICK_NS);
        self.mix = if self.cfg.faults && !self.draining {
            FaultMix::draw(
                &mut self.rng,
                epoch,
                &self.fabric_links,
                self.cfg.planes,
                self.cfg.epoch_ns,
            )
        } else {
            FaultMix {
                epoch,
                ..FaultMix::default()
            }
        };
        let hosts: Vec<HostId> = (0..self.sim.num_hosts())
            .map(|h| HostId(h as u32))
            .collect();
        multi::set_uplink_faults(&mut self.sim, &hosts, self.mix.link);
        if let Some((p, ns)) = self.mix.plane_down {
            for l in self.sim.plane_links(p) {
                self.set_link(l, false);
                self.down.push((l, now + ns));
            }
        }
        if let Some((l, ns)) = self.mix.flap {
            // Never the last plane standing: a flap on the failed plane's links changes nothing.
            if self.sim.link_is_up(l) {
                self.set_link(l, false);
                self.down.push((l, now + ns));
            }
        }
    }

    /// Bring back links whose time has come.
    fn restore_due(&mut self) {
        let now = self.sim.now();
        let mut back = Vec::new();
        self.down.retain(|&(l, t)| {
            if t <= now {
                back.push(l);
                false
            } else {
                true
            }
        });
        for l in back {
            self.set_link(l, true);
        }
    }

    /// Servers whose clients have all finished: check and scrub, then the next round.
    fn advance_rounds(&mut self) {
        let now = self.sim.now();
        for si in 0..self.servers.len() {
            let (server, ref idxs) = self.servers[si];
            let idxs = idxs.clone();
            if !idxs.iter().all(|&i| self.flows[i].state(&self.sim).done()) {
                continue;
            }
            // Count the operations of this round (once per flow and round).
            for &i in &idxs {
                if !std::mem::replace(&mut self.counted[i], true) {
                    for (k, n) in self.round_ops.iter().enumerate() {
                        self.stats.ops[k] += n;
                    }
                }
            }
            if self.draining {
                continue;
            }
            let slots = self.spec.streams as u64 * self.spec.write_slots() as u64;
            let errs = self.sim.host_mut(server).verify_and_scrub_server_writes();
            self.stats.write_slots_verified += slots;
            for e in errs {
                self.error(format!("host {}: {e}", server.0));
            }
            self.stats.rounds += 1;
            self.sim.host_mut(server).rearm_server();
            self.sim.wake(server);
            for &i in &idxs {
                let f = self.flows[i];
                self.counted[i] = false;
                self.sim.host_mut(f.client).restart_client(f.index, now);
                self.sim.wake(f.client);
            }
        }
    }

    /// Run `dt` simulated ns more.
    pub fn run_for(&mut self, dt: u64) {
        let end = self.sim.now() + dt;
        while self.sim.now() < end {
            if self.sim.now() >= self.epoch_end {
                self.next_epoch();
            }
            let t = (self.sim.now() + TICK_NS)
                .min(end)
                .min(self.epoch_end.max(self.sim.now() + 1));
            self.sim.run_until(t);
            self.restore_due();
            self.advance_rounds();
            self.collect_host_errors();
        }
    }

    /// Stop drawing faults and starting rounds, heal the fabric, and run until every client
    /// has finished its round (or `limit_ns` simulated ns pass); then the final checks.
    /// Returns whether everything finished.
    pub fn finish(&mut self, limit_ns: u64) -> bool {
        self.draining = true;
        for (l, _) in std::mem::take(&mut self.down) {
            self.set_link(l, true);
        }
        let hosts: Vec<HostId> = (0..self.sim.num_hosts())
            .map(|h| HostId(h as u32))
            .collect();
        multi::set_uplink_faults(&mut self.sim, &hosts, FaultConfig::NONE);
        self.mix = FaultMix {
            epoch: self.stats.epochs,
            ..FaultMix::default()
        };
        self.epoch_end = u64::MAX;
        let limit = self.sim.now() + limit_ns;
        let done = multi::run_flows(&mut self.sim, &self.flows, limit, TICK_NS);
        let settle = self.sim.now() + 200_000;
        self.sim.run_until(settle);
        self.advance_rounds();
        self.collect_host_errors();
        if !done {
            let n = self
                .flows
                .iter()
                .filter(|f| !f.state(&self.sim).done())
                .count();
            self.error(format!(
                "{n} of {} clients did not finish their last round within {limit_ns} ns",
                self.flows.len()
            ));
        }
        for (server, _) in self.servers.clone() {
            let errs = self.sim.host(server).verify_server_writes();
            self.stats.write_slots_verified +=
                self.spec.streams as u64 * self.spec.write_slots() as u64;
            for e in errs {
                self.error(format!("host {}: {e}", server.0));
            }
        }
        done
    }

    /// Counts so far.
    pub fn stats(&self) -> SoakStats {
        let mut st = self.stats.clone();
        st.messages_verified = 0;
        st.bytes_verified = 0;
        st.receives_verified = 0;
        for f in &self.flows {
            let c = f.state(&self.sim);
            st.messages_verified += c.completed_ok();
            st.bytes_verified += c.bytes_done;
        }
        for h in self.sim.hosts() {
            if let Some(sv) = h.server() {
                st.receives_verified += sv.recvs_done;
            }
        }
        st.sim_ns = self.sim.now();
        st.events = self.sim.events_processed();
        st.errors = self.error_count;
        let t = multi::totals(&self.sim);
        st.retransmits = t.retx_pkts;
        st.timeouts = t.timeouts;
        let f = self.sim.stats().totals();
        st.fabric_drops = f.dropped_random_loss
            + f.dropped_burst_loss
            + f.dropped_link_down
            + f.dropped_queue_full
            + f.dropped_no_route;
        st.corrupted = f.corrupted;
        st.duplicated = f.duplicated;
        st.reordered = f.reordered;
        st.ecn_marked = f.ecn_marked_random + f.ecn_marked_queue;
        st
    }
}
