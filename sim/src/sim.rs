//! The event engine: hosts, NIC ports, links, switch ports, the event queue.

use std::collections::VecDeque;
use std::io;
use std::path::Path;

use crate::calendar::{Calendar, Entry};
use crate::fault::FaultConfig;
use crate::pcap::PcapWriter;
use crate::rng::{mix64, Rng};
use crate::stats::FabricStats;
use crate::topology::{End, SimConfig, SwitchInfo, Topology};
use crate::{
    flow_hash, flow_hash_tuple, hash_to_index, host_index_of_ip, host_ip, nic_port_for, Datagram,
    Dir, Ecn, Host, HostId, LinkId, Nanos, Node, SwitchId, PREAMBLE_IFG,
};

#[derive(Debug)]
enum Event {
    /// The last bit of `d` reached the far end of `link` travelling in direction `dir`.
    Arrive {
        link: u32,
        dir: u8,
        epoch: u32,
        d: Datagram,
    },
    /// A host NIC port finished serialising its current packet.
    TxDone { host: u32, port: u16, epoch: u32 },
    /// A host's timer may be due.
    Timer { host: u32 },
    /// Poll a host (used once per host at start).
    Wake { host: u32 },
}

/// Pending events: `(time, insertion sequence number)` keys in a calendar queue, earliest first
/// and FIFO among equal times (which is what makes runs deterministic), pointing into a slab that
/// holds the events themselves so the keys stay small. (The calendar measured ~10 % faster
/// overall than `std`'s binary heap on a busy 128-host fat tree.)
#[derive(Debug, Default)]
struct EventQueue {
    keys: Calendar,
    slab: Vec<Option<Event>>,
    free: Vec<u32>,
    seq: u64,
}

impl EventQueue {
    #[inline]
    fn push(&mut self, time: Nanos, ev: Event) {
        let slot = match self.free.pop() {
            Some(s) => {
                self.slab[s as usize] = Some(ev);
                s
            }
            None => {
                self.slab.push(Some(ev));
                (self.slab.len() - 1) as u32
            }
        };
        self.keys.push(Entry {
            time,
            seq: self.seq,
            slot,
        });
        self.seq += 1;
    }

    #[inline]
    fn peek_time(&self) -> Option<Nanos> {
        self.keys.peek_time()
    }

    #[inline]
    fn pop(&mut self) -> Option<(Nanos, Event)> {
        loop {
            let k = self.keys.pop()?;
            let ev = self.slab.get_mut(k.slot as usize).and_then(Option::take);
            self.free.push(k.slot);
            if let Some(ev) = ev {
                return Some((k.time, ev));
            }
        }
    }
}

/// Serialisation clock of one transmitter. Keeps the sub-nanosecond remainder of back-to-back
/// frames so a long burst runs at exactly the line rate instead of drifting by rounding.
#[derive(Clone, Copy, Debug, Default)]
struct TxClock {
    /// Integer part of the time the last frame's final bit leaves.
    busy_until: Nanos,
    /// Fractional part of that time, in units of 1/rate ns.
    carry: u64,
}

impl TxClock {
    /// Serialises `bytes` (frame + preamble/IFG) starting as soon as the transmitter is free at
    /// or after `now`; returns the time the last bit leaves.
    #[inline]
    fn serialise(&mut self, now: Nanos, bytes: usize, rate_bps: u64) -> Nanos {
        let start = if self.busy_until >= now {
            self.busy_until
        } else {
            self.carry = 0;
            now
        };
        let rate = rate_bps.max(1);
        let bits = (bytes as u64).saturating_mul(8);
        let (mut ser, mut carry) = match bits
            .checked_mul(1_000_000_000)
            .and_then(|x| x.checked_add(self.carry))
        {
            Some(num) => (num / rate, num % rate),
            None => {
                let num = u128::from(bits) * 1_000_000_000 + u128::from(self.carry);
                let r = u128::from(rate);
                (u64::try_from(num / r).unwrap_or(u64::MAX), (num % r) as u64)
            }
        };
        if ser == 0 {
            // Absurdly fast link: still take 1 ns so simulated time always advances.
            ser = 1;
            carry = 0;
        }
        self.carry = carry;
        self.busy_until = start.saturating_add(ser);
        self.busy_until
    }
}

#[derive(Debug)]
struct LinkDirState {
    fault: FaultConfig,
    clean: bool,
    rng: Rng,
    ge_bad: bool,
}

#[derive(Debug)]
struct Link {
    ends: [End; 2],
    rate_bps: u64,
    prop: Nanos,
    up: bool,
    /// Bumped on every up/down transition; packets scheduled under an older epoch are lost.
    epoch: u32,
    plane: Option<usize>,
    dirs: [LinkDirState; 2],
}

#[derive(Debug)]
struct NicPort {
    link: Option<u32>,
    side: u8,
    clock: TxClock,
    busy: bool,
    /// Bumped when a link flap aborts the current transmission, so its TxDone is ignored.
    tx_epoch: u32,
    queue: VecDeque<Datagram>,
}

struct HostSlot<H> {
    host: H,
    ip: [u8; 4],
    ports: Vec<NicPort>,
    /// Ports whose waiting queue is at capacity; the host is polled only when this is 0.
    full_ports: u32,
    /// False after `poll_transmit` returned None, until the host gets new input.
    wants_poll: bool,
    /// The host chooses NIC ports itself (it answered `poll_transmit_ports` with a port).
    port_aware: bool,
    /// Ports that had room when a port-aware host last said it had nothing: a port outside
    /// this set gaining room is worth asking again.
    idle_ready: u64,
    /// Last answer of `poll_timeout`.
    deadline: Option<Nanos>,
    /// Earliest Timer event of this host still in the queue, if known.
    pending_timer: Option<Nanos>,
    pcap: Option<PcapWriter>,
}

#[derive(Debug)]
struct SwPort {
    link: u32,
    side: u8,
    clock: TxClock,
    /// Packets not yet fully transmitted: (time their last bit leaves, wire bytes).
    queue: VecDeque<(Nanos, u32)>,
    queue_bytes: u64,
    capacity: u64,
    ecn_threshold: u64,
}

#[derive(Debug)]
struct Switch {
    info: SwitchInfo,
    ports: Vec<SwPort>,
    salt: u64,
    /// Forwarding table in CSR form: candidates for destination host `h` are
    /// `route_ports[route_off[h]..route_off[h + 1]]`.
    route_off: Vec<u32>,
    route_ports: Vec<u16>,
}

/// A running simulation: hosts of type `H`, links, switches, an event queue and counters.
/// Build one with a [`Topology`](crate::Topology) (see [`crate::topology`]).
pub struct Sim<H: Host> {
    now: Nanos,
    queue: EventQueue,
    hosts: Vec<HostSlot<H>>,
    switches: Vec<Switch>,
    links: Vec<Link>,
    stats: FabricStats,
    cfg: SimConfig,
    nic_cap: usize,
    events: u64,
    /// See [`Sim::set_timer_waits_for_nic`].
    timer_waits_for_nic: bool,
}

impl<H: Host> std::fmt::Debug for Sim<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("now", &self.now)
            .field("hosts", &self.hosts.len())
            .field("switches", &self.switches.len())
            .field("links", &self.links.len())
            .field("events", &self.events)
            .finish()
    }
}

impl<H: Host> Sim<H> {
    pub(crate) fn from_topology(topo: Topology, hosts: Vec<H>) -> Self {
        let cfg = topo.cfg;
        let links: Vec<Link> = topo
            .links
            .iter()
            .enumerate()
            .map(|(i, ld)| {
                let dir = |d: u64| LinkDirState {
                    fault: FaultConfig::NONE,
                    clean: true,
                    rng: Rng::derive(cfg.seed, (i as u64) * 2 + d),
                    ge_bad: false,
                };
                Link {
                    ends: ld.ends,
                    rate_bps: ld.spec.rate_bps,
                    prop: ld.spec.delay,
                    up: true,
                    epoch: 0,
                    plane: ld.plane,
                    dirs: [dir(0), dir(1)],
                }
            })
            .collect();
        let hosts: Vec<HostSlot<H>> = hosts
            .into_iter()
            .zip(topo.hosts.iter())
            .enumerate()
            .map(|(i, (host, hd))| HostSlot {
                host,
                ip: host_ip(HostId(i as u32)),
                ports: hd
                    .ports
                    .iter()
                    .map(|p| NicPort {
                        link: p.map(|(l, _)| l),
                        side: p.map_or(0, |(_, s)| s),
                        clock: TxClock::default(),
                        busy: false,
                        tx_epoch: 0,
                        queue: VecDeque::new(),
                    })
                    .collect(),
                full_ports: 0,
                port_aware: false,
                idle_ready: 0,
                wants_poll: true,
                deadline: None,
                pending_timer: None,
                pcap: None,
            })
            .collect();
        let switches: Vec<Switch> = topo
            .switches
            .iter()
            .enumerate()
            .map(|(i, sd)| Switch {
                info: sd.info,
                ports: sd
                    .ports
                    .iter()
                    .map(|&(link, side)| SwPort {
                        link,
                        side,
                        clock: TxClock::default(),
                        queue: VecDeque::new(),
                        queue_bytes: 0,
                        capacity: sd.buffer_bytes,
                        ecn_threshold: sd.ecn_threshold_bytes,
                    })
                    .collect(),
                salt: mix64(cfg.ecmp_salt ^ mix64((i as u64).wrapping_add(0x5eed))),
                route_off: Vec::new(),
                route_ports: Vec::new(),
            })
            .collect();
        let stats = FabricStats {
            links: vec![Default::default(); links.len()],
            switch_ports: switches
                .iter()
                .map(|s| vec![Default::default(); s.ports.len()])
                .collect(),
            ..FabricStats::default()
        };
        let mut sim = Sim {
            now: 0,
            queue: EventQueue::default(),
            nic_cap: cfg.nic_queue_packets.max(1),
            cfg,
            hosts,
            switches,
            links,
            stats,
            events: 0,
            timer_waits_for_nic: false,
        };
        sim.compute_routes();
        // Give every host a first chance to send and to arm its timer, in id order.
        for h in 0..sim.hosts.len() as u32 {
            sim.queue.push(0, Event::Wake { host: h });
        }
        sim
    }

    // ------------------------------------------------------------------------------------------
    // Public API

    /// The host with this id. Panics if `id` is not a host of this simulation.
    pub fn host(&self, id: HostId) -> &H {
        &self.hosts[id.index()].host
    }

    /// Mutable access to a host (e.g. to post work). Call [`Sim::wake`] afterwards so the NIC
    /// re-polls it. Panics if `id` is not a host of this simulation.
    pub fn host_mut(&mut self, id: HostId) -> &mut H {
        &mut self.hosts[id.index()].host
    }

    /// The host with this id, if it exists.
    pub fn get_host(&self, id: HostId) -> Option<&H> {
        self.hosts.get(id.index()).map(|s| &s.host)
    }

    /// All hosts in id order.
    pub fn hosts(&self) -> impl Iterator<Item = &H> + '_ {
        self.hosts.iter().map(|s| &s.host)
    }

    /// All host ids.
    pub fn host_ids(&self) -> impl Iterator<Item = HostId> {
        (0..self.hosts.len() as u32).map(HostId)
    }

    /// Re-poll transmit and timeout of that host now (after mutating it through `host_mut`).
    /// Unknown ids are ignored.
    pub fn wake(&mut self, id: HostId) {
        if let Some(slot) = self.hosts.get_mut(id.index()) {
            slot.wants_poll = true;
            self.service_host(id.index(), false);
        }
    }

    /// Current simulated time.
    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Processes all events with time `<= t`, then sets the clock to `t` (never backwards).
    pub fn run_until(&mut self, t: Nanos) {
        while let Some(next) = self.queue.peek_time() {
            if next > t {
                break;
            }
            self.step();
        }
        if t > self.now {
            self.now = t;
        }
    }

    /// Runs for `dt` more nanoseconds of simulated time (see [`Sim::run_until`]).
    pub fn run_for(&mut self, dt: Nanos) {
        self.run_until(self.now.saturating_add(dt));
    }

    /// Processes events one at a time while `cond` holds and the next event is not later than
    /// `limit`. Returns true if `cond` became false (checked before each event and after the
    /// last). If it returns false, the clock is at `limit` (or later if it already was).
    pub fn run_while(&mut self, limit: Nanos, mut cond: impl FnMut(&Self) -> bool) -> bool {
        loop {
            if !cond(self) {
                return true;
            }
            match self.queue.peek_time() {
                Some(next) if next <= limit => {
                    self.step();
                }
                _ => {
                    if limit > self.now {
                        self.now = limit;
                    }
                    return !cond(self);
                }
            }
        }
    }

    /// Processes the single next event, if any. Returns false when the queue is empty.
    pub fn step(&mut self) -> bool {
        let Some((time, ev)) = self.queue.pop() else {
            return false;
        };
        if time > self.now {
            self.now = time;
        }
        self.events += 1;
        match ev {
            Event::Arrive {
                link,
                dir,
                epoch,
                d,
            } => self.on_arrive(link as usize, dir as usize, epoch, d),
            Event::TxDone { host, port, epoch } => {
                self.on_tx_done(host as usize, port as usize, epoch)
            }
            Event::Timer { host } => self.on_timer(host as usize),
            Event::Wake { host } => {
                self.hosts[host as usize].wants_poll = true;
                self.service_host(host as usize, false);
            }
        }
        true
    }

    /// Time of the next pending event (possibly a stale timer), if any.
    pub fn next_event_time(&self) -> Option<Nanos> {
        self.queue.peek_time()
    }

    /// A host whose deadline is still past after `handle_timeout` (work it cannot send) is
    /// retried 1 ns later. With this on, a host that cannot send because its NIC queue is
    /// full is instead retried when the NIC frees room (its TxDone), with timers that came
    /// due meanwhile handled then: a host with many busy connections otherwise spins once
    /// per ns through every packet time (100x slower all-to-all). Off by default: it
    /// shifts timer handling behind a full NIC by up to one packet time, which changes some
    /// existing benchmarks' figures slightly (loss, 32 paths at 10 % and 20 %).
    pub fn set_timer_waits_for_nic(&mut self, on: bool) {
        self.timer_waits_for_nic = on;
    }

    /// Events processed so far.
    pub fn events_processed(&self) -> u64 {
        self.events
    }

    /// Events currently pending in the queue (stale timer entries included).
    pub fn pending_events(&self) -> usize {
        self.queue.keys.len()
    }

    /// IPv4 address of a host (see [`crate::host_ip`]).
    pub fn host_ip(&self, id: HostId) -> [u8; 4] {
        host_ip(id)
    }

    /// The host owning an address, if it is one of this simulation's hosts.
    pub fn host_by_ip(&self, ip: [u8; 4]) -> Option<HostId> {
        self.host_index(ip).map(|i| HostId(i as u32))
    }

    /// All counters.
    pub fn stats(&self) -> &FabricStats {
        &self.stats
    }

    /// The settings this simulation runs with.
    pub fn config(&self) -> &SimConfig {
        &self.cfg
    }

    /// Number of hosts.
    pub fn num_hosts(&self) -> usize {
        self.hosts.len()
    }

    /// Number of switches.
    pub fn num_switches(&self) -> usize {
        self.switches.len()
    }

    /// Number of links.
    pub fn num_links(&self) -> usize {
        self.links.len()
    }

    /// Number of NIC ports of a host (0 for an unknown host).
    pub fn host_num_ports(&self, id: HostId) -> usize {
        self.hosts.get(id.index()).map_or(0, |s| s.ports.len())
    }

    /// Role, index, pod and plane of a switch.
    pub fn switch_info(&self, sw: SwitchId) -> Option<SwitchInfo> {
        self.switches.get(sw.index()).map(|s| s.info)
    }

    /// All switch ids.
    pub fn switch_ids(&self) -> impl Iterator<Item = SwitchId> {
        (0..self.switches.len() as u32).map(SwitchId)
    }

    /// The link on NIC port `port` of host `id`, if connected.
    pub fn host_port_link(&self, id: HostId, port: usize) -> Option<LinkId> {
        self.hosts
            .get(id.index())
            .and_then(|s| s.ports.get(port))
            .and_then(|p| p.link)
            .map(LinkId)
    }

    /// The links of a host, in NIC port order (unconnected ports skipped).
    pub fn host_links(&self, id: HostId) -> Vec<LinkId> {
        self.hosts
            .get(id.index())
            .map(|s| s.ports.iter().filter_map(|p| p.link.map(LinkId)).collect())
            .unwrap_or_default()
    }

    /// The link on port `port` of switch `sw`.
    pub fn switch_port_link(&self, sw: SwitchId, port: usize) -> Option<LinkId> {
        self.switches
            .get(sw.index())
            .and_then(|s| s.ports.get(port))
            .map(|p| LinkId(p.link))
    }

    /// The links of a switch, in port order.
    pub fn switch_links(&self, sw: SwitchId) -> Vec<LinkId> {
        self.switches
            .get(sw.index())
            .map(|s| s.ports.iter().map(|p| LinkId(p.link)).collect())
            .unwrap_or_default()
    }

    fn node_of(end: End) -> Node {
        match end {
            End::Host { host, .. } => Node::Host(HostId(host)),
            End::Switch { sw, .. } => Node::Switch(SwitchId(sw)),
        }
    }

    /// The two ends of a link (A, B).
    pub fn link_ends(&self, link: LinkId) -> Option<(Node, Node)> {
        self.links
            .get(link.index())
            .map(|l| (Self::node_of(l.ends[0]), Self::node_of(l.ends[1])))
    }

    /// The direction in which traffic sent by `from` travels on `link`, if `from` is an end of it.
    pub fn link_dir_from(&self, link: LinkId, from: Node) -> Option<Dir> {
        let (a, b) = self.link_ends(link)?;
        if a == from {
            Some(Dir::AtoB)
        } else if b == from {
            Some(Dir::BtoA)
        } else {
            None
        }
    }

    /// The first link joining `a` and `b` (in either orientation).
    pub fn link_between(&self, a: Node, b: Node) -> Option<LinkId> {
        self.links
            .iter()
            .position(|l| {
                let (x, y) = (Self::node_of(l.ends[0]), Self::node_of(l.ends[1]));
                (x == a && y == b) || (x == b && y == a)
            })
            .map(|i| LinkId(i as u32))
    }

    /// Every link tagged with plane `plane` (host links and links inside the plane).
    pub fn plane_links(&self, plane: usize) -> Vec<LinkId> {
        (0..self.links.len())
            .filter(|&i| self.links[i].plane == Some(plane))
            .map(|i| LinkId(i as u32))
            .collect()
    }

    /// Whether a link is up (false for an unknown link).
    pub fn link_is_up(&self, link: LinkId) -> bool {
        self.links.get(link.index()).is_some_and(|l| l.up)
    }

    /// The fault settings of one link direction.
    pub fn link_faults(&self, link: LinkId, dir: Dir) -> Option<FaultConfig> {
        self.links
            .get(link.index())
            .map(|l| l.dirs[dir.index()].fault)
    }

    /// Current occupancy of a switch output port, in wire bytes.
    pub fn switch_queue_bytes(&self, sw: SwitchId, port: usize) -> u64 {
        self.switches
            .get(sw.index())
            .and_then(|s| s.ports.get(port))
            .map_or(0, |p| {
                p.queue
                    .iter()
                    .filter(|&&(fin, _)| fin > self.now)
                    .map(|&(_, b)| u64::from(b))
                    .sum()
            })
    }

    /// Changes queue capacity and ECN threshold of every port of one switch (from now on;
    /// packets already queued stay).
    pub fn set_switch_queue(
        &mut self,
        sw: SwitchId,
        capacity_bytes: u64,
        ecn_threshold_bytes: u64,
    ) {
        if let Some(s) = self.switches.get_mut(sw.index()) {
            for p in &mut s.ports {
                p.capacity = capacity_bytes;
                p.ecn_threshold = ecn_threshold_bytes;
            }
        }
    }

    /// [`Sim::set_switch_queue`] for every switch.
    pub fn set_all_switch_queues(&mut self, capacity_bytes: u64, ecn_threshold_bytes: u64) {
        for i in 0..self.switches.len() as u32 {
            self.set_switch_queue(SwitchId(i), capacity_bytes, ecn_threshold_bytes);
        }
    }

    /// Brings a link up or down. Going down drops every packet queued for or in flight on it
    /// (counted as link-down drops); while down nothing crosses it. With
    /// `reroute_around_down_links` the forwarding tables are recomputed at once.
    pub fn set_link_up(&mut self, link: LinkId, up: bool) {
        let li = link.index();
        let Some(l) = self.links.get_mut(li) else {
            return;
        };
        if l.up == up {
            return;
        }
        l.up = up;
        l.epoch = l.epoch.wrapping_add(1);
        let ends = l.ends;
        let mut touched_hosts = Vec::new();
        for (side, end) in ends.iter().enumerate() {
            match *end {
                End::Switch { sw, port } => {
                    if let Some(p) = self.switches[sw as usize].ports.get_mut(port as usize) {
                        // The packets themselves are counted when their (now stale) arrival
                        // events fire.
                        p.queue.clear();
                        p.queue_bytes = 0;
                        p.clock = TxClock::default();
                    }
                }
                End::Host { host, port } => {
                    let cap = self.nic_cap;
                    let slot = &mut self.hosts[host as usize];
                    if let Some(p) = slot.ports.get_mut(port as usize) {
                        let n = p.queue.len();
                        if n >= cap {
                            slot.full_ports = slot.full_ports.saturating_sub(1);
                        }
                        p.queue.clear();
                        p.busy = false;
                        p.tx_epoch = p.tx_epoch.wrapping_add(1);
                        p.clock = TxClock::default();
                        self.stats.links[li][side].dropped_link_down += n as u64;
                    }
                    touched_hosts.push(host as usize);
                }
            }
        }
        if self.cfg.reroute_around_down_links {
            self.compute_routes();
        }
        for h in touched_hosts {
            self.service_host(h, false);
        }
    }

    /// Sets the faults of one direction of a link (unknown links are ignored).
    pub fn set_link_faults(&mut self, link: LinkId, dir: Dir, f: FaultConfig) {
        if let Some(l) = self.links.get_mut(link.index()) {
            let d = &mut l.dirs[dir.index()];
            d.clean = f.is_clean();
            if f.burst.is_none() {
                d.ge_bad = false;
            }
            d.fault = f;
        }
    }

    /// Sets the same faults on every link, both directions.
    pub fn set_all_link_faults(&mut self, f: FaultConfig) {
        for i in 0..self.links.len() as u32 {
            for dir in Dir::BOTH {
                self.set_link_faults(LinkId(i), dir, f);
            }
        }
    }

    /// Turns instant rerouting around down links on or off (see
    /// [`SimConfig::reroute_around_down_links`]); recomputes the forwarding tables.
    pub fn set_reroute_around_down_links(&mut self, on: bool) {
        self.cfg.reroute_around_down_links = on;
        self.compute_routes();
    }

    /// Candidate egress ports of switch `sw` towards host `dst` (its ECMP group).
    pub fn routes(&self, sw: SwitchId, dst: HostId) -> Vec<usize> {
        let Some(s) = self.switches.get(sw.index()) else {
            return Vec::new();
        };
        let h = dst.index();
        match (s.route_off.get(h), s.route_off.get(h + 1)) {
            (Some(&a), Some(&b)) => s.route_ports[a as usize..b as usize]
                .iter()
                .map(|&p| p as usize)
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The switch output ports (switch, port) a datagram with this 5-tuple crosses from host
    /// `src`'s NIC port `nic_port` to the host it is addressed to, as the forwarding tables
    /// stand now: the same ECMP choices `forward` makes, without queueing anything. For
    /// diagnostics (which fabric links a source port lands on); empty without a route.
    pub fn route_of(
        &self,
        src: HostId,
        nic_port: usize,
        dst_ip: [u8; 4],
        src_port: u16,
        dst_port: u16,
    ) -> Vec<(SwitchId, usize)> {
        let mut hops = Vec::new();
        let (Some(slot), Some(dst)) = (self.hosts.get(src.index()), self.host_index(dst_ip)) else {
            return hops;
        };
        let Some(mut li) = slot.ports.get(nic_port).and_then(|p| p.link) else {
            return hops;
        };
        let mut from = End::Host {
            host: src.0,
            port: nic_port as u16,
        };
        // A shortest-path route is at most as long as the switch count (a guard, not a bound
        // any topology reaches).
        for _ in 0..=self.switches.len() {
            let l = &self.links[li as usize];
            let to = if l.ends[0] == from {
                l.ends[1]
            } else {
                l.ends[0]
            };
            let End::Switch { sw, .. } = to else {
                break;
            };
            let s = &self.switches[sw as usize];
            let (a, b) = match (s.route_off.get(dst), s.route_off.get(dst + 1)) {
                (Some(&a), Some(&b)) => (a as usize, b as usize),
                _ => break,
            };
            let port = match b.saturating_sub(a) {
                0 => break,
                1 => s.route_ports[a],
                n => {
                    let h = flow_hash_tuple(slot.ip, dst_ip, src_port, dst_port, s.salt);
                    s.route_ports[a + hash_to_index(h, n)]
                }
            };
            hops.push((SwitchId(sw), port as usize));
            let p = &s.ports[port as usize];
            li = p.link;
            from = self.links[li as usize].ends[p.side as usize];
        }
        hops
    }

    /// Starts writing a pcap (nanosecond timestamps, LINKTYPE_ETHERNET) of everything host `id`'s
    /// NIC sends (when serialisation starts) and receives (on delivery), with synthesised
    /// Ethernet/IPv4/UDP headers (valid IPv4 checksum, UDP checksum 0). Replaces an earlier
    /// capture of that host.
    pub fn enable_pcap(&mut self, id: HostId, path: impl AsRef<Path>) -> io::Result<()> {
        let Some(slot) = self.hosts.get_mut(id.index()) else {
            return Err(io::Error::new(io::ErrorKind::NotFound, "no such host"));
        };
        if let Some(mut old) = slot.pcap.take() {
            old.flush()?;
        }
        slot.pcap = Some(PcapWriter::create(path.as_ref())?);
        Ok(())
    }

    /// Stops the capture of a host, flushing it.
    pub fn disable_pcap(&mut self, id: HostId) -> io::Result<()> {
        match self.hosts.get_mut(id.index()).and_then(|s| s.pcap.take()) {
            Some(mut w) => w.flush(),
            None => Ok(()),
        }
    }

    /// Flushes every capture; reports the first write error since the last flush.
    pub fn flush_pcaps(&mut self) -> io::Result<()> {
        let mut res = Ok(());
        for s in &mut self.hosts {
            if let Some(w) = &mut s.pcap {
                let r = w.flush();
                if res.is_ok() {
                    res = r;
                }
            }
        }
        res
    }

    // ------------------------------------------------------------------------------------------
    // Engine

    #[inline]
    fn host_index(&self, ip: [u8; 4]) -> Option<usize> {
        host_index_of_ip(ip)
            .map(HostId::index)
            .filter(|&i| i < self.hosts.len())
    }

    /// Shortest-path ECMP tables for every switch and destination host. Hosts are never transit
    /// nodes. With rerouting on, only live links count; otherwise all links do (static tables).
    fn compute_routes(&mut self) {
        let nh = self.hosts.len();
        let nn = nh + self.switches.len();
        let reroute = self.cfg.reroute_around_down_links;
        let usable = |l: &Link| !reroute || l.up;
        let node = |e: End| match e {
            End::Host { host, .. } => host as usize,
            End::Switch { sw, .. } => nh + sw as usize,
        };
        let mut adj: Vec<Vec<usize>> = vec![Vec::new(); nn];
        for l in &self.links {
            if usable(l) {
                let (a, b) = (node(l.ends[0]), node(l.ends[1]));
                adj[a].push(b);
                adj[b].push(a);
            }
        }
        for s in &mut self.switches {
            s.route_off.clear();
            s.route_off.push(0);
            s.route_ports.clear();
        }
        let mut dist = vec![u32::MAX; nn];
        let mut bfs = VecDeque::new();
        for h in 0..nh {
            dist.fill(u32::MAX);
            dist[h] = 0;
            bfs.push_back(h);
            while let Some(u) = bfs.pop_front() {
                if u < nh && u != h {
                    continue; // hosts do not forward
                }
                for &v in &adj[u] {
                    if dist[v] == u32::MAX {
                        dist[v] = dist[u] + 1;
                        bfs.push_back(v);
                    }
                }
            }
            for (si, s) in self.switches.iter_mut().enumerate() {
                let ds = dist[nh + si];
                if ds != u32::MAX {
                    for (pi, p) in s.ports.iter().enumerate() {
                        let l = &self.links[p.link as usize];
                        if !usable(l) {
                            continue;
                        }
                        let v = node(l.ends[1 - p.side as usize]);
                        if (v >= nh || v == h) && dist[v] != u32::MAX && dist[v] + 1 == ds {
                            s.route_ports.push(pi as u16);
                        }
                    }
                }
                s.route_off.push(s.route_ports.len() as u32);
            }
        }
    }

    /// Polls a host for packets while its NIC has room, then (re)arms its timer. `fired` says
    /// whether `handle_timeout` already ran in this event step: a host whose deadline stays in
    /// the past is then retried 1 ns later instead of spinning at the same instant.
    fn service_host(&mut self, h: usize, mut fired: bool) {
        let now = self.now;
        loop {
            let nports = self.hosts[h].ports.len();
            let cap = self.nic_cap;
            // Whether polling stopped because the NIC had no room while the host still had
            // packets: its TxDone services the host again.
            let mut blocked = false;
            while nports > 0 && self.hosts[h].wants_poll {
                let slot = &mut self.hosts[h];
                let ready = slot
                    .ports
                    .iter()
                    .take(64)
                    .enumerate()
                    .filter(|(_, p)| p.queue.len() < cap)
                    .fold(0u64, |m, (i, _)| m | 1 << i);
                // A hashing host may land on any port, so it waits for every port to have
                // room; a port-aware host only needs one.
                if ready == 0 || (!slot.port_aware && slot.full_ports != 0) {
                    blocked = true;
                    break;
                }
                match slot.host.poll_transmit_ports(now, ready) {
                    None => {
                        slot.wants_poll = false;
                        slot.idle_ready = ready;
                    }
                    Some((d, Some(port))) if port < nports => {
                        slot.port_aware = true;
                        self.nic_send(h, port, d);
                    }
                    Some((d, _)) => {
                        let port = nic_port_for(d.src_ip, d.dst_ip, d.src_port, d.dst_port, nports);
                        self.nic_send(h, port, d);
                    }
                }
            }
            let slot = &mut self.hosts[h];
            let dl = slot.host.poll_timeout();
            slot.deadline = dl;
            match dl {
                Some(d) if d <= now => {
                    if fired {
                        // Retry 1 ns later (never at the end of time, or it would spin there),
                        // or behind a full NIC at its TxDone (`set_timer_waits_for_nic`).
                        if !(blocked && self.timer_waits_for_nic) && now < Nanos::MAX {
                            self.arm_timer(h, now + 1);
                        }
                    } else {
                        fired = true;
                        slot.host.handle_timeout(now);
                        slot.wants_poll = true;
                        continue;
                    }
                }
                Some(d) => self.arm_timer(h, d),
                None => {}
            }
            return;
        }
    }

    /// Makes sure a Timer event fires for host `h` no later than `at`. Later deadlines do not
    /// push new events: the earlier event re-arms when it fires, which keeps the heap free of
    /// one stale entry per timer update.
    #[inline]
    fn arm_timer(&mut self, h: usize, at: Nanos) {
        let slot = &mut self.hosts[h];
        if slot.pending_timer.is_some_and(|p| p <= at) {
            return;
        }
        slot.pending_timer = Some(at);
        self.queue.push(at, Event::Timer { host: h as u32 });
    }

    fn on_timer(&mut self, h: usize) {
        let now = self.now;
        let slot = &mut self.hosts[h];
        if slot.pending_timer == Some(now) {
            slot.pending_timer = None;
        }
        match slot.deadline {
            Some(d) if d <= now => {
                slot.host.handle_timeout(now);
                slot.wants_poll = true;
                self.service_host(h, true);
            }
            Some(d) => self.arm_timer(h, d),
            None => {}
        }
    }

    /// Hands a datagram from the host to NIC port `port`.
    #[inline]
    fn nic_send(&mut self, h: usize, port: usize, d: Datagram) {
        let cap = self.nic_cap;
        let slot = &mut self.hosts[h];
        let p = &mut slot.ports[port];
        if p.busy {
            p.queue.push_back(d);
            if p.queue.len() == cap {
                slot.full_ports += 1;
            }
        } else {
            self.nic_start_tx(h, port, d);
        }
    }

    /// Starts serialising `d` on a host NIC port (which must be idle).
    fn nic_start_tx(&mut self, h: usize, port: usize, d: Datagram) {
        let now = self.now;
        let slot = &mut self.hosts[h];
        if let Some(w) = &mut slot.pcap {
            w.record(now, &d);
        }
        let p = &mut slot.ports[port];
        p.busy = true;
        let epoch = p.tx_epoch;
        let bytes = d.wire_len().saturating_add(PREAMBLE_IFG);
        match p.link {
            Some(li) => {
                let side = p.side as usize;
                let l = &self.links[li as usize];
                let finish = p.clock.serialise(now, bytes, l.rate_bps);
                if l.up {
                    self.launch(li as usize, side, d, finish);
                } else {
                    // Transmitting into a dead link: the frame is lost, but the transmitter is
                    // still occupied, which also keeps a host with endless data from spinning.
                    self.stats.links[li as usize][side].dropped_link_down += 1;
                }
                self.queue.push(
                    finish,
                    Event::TxDone {
                        host: h as u32,
                        port: port as u16,
                        epoch,
                    },
                );
            }
            None => {
                self.stats.dropped_unconnected += 1;
                let finish = now.saturating_add(1);
                p.clock.busy_until = finish;
                self.queue.push(
                    finish,
                    Event::TxDone {
                        host: h as u32,
                        port: port as u16,
                        epoch,
                    },
                );
            }
        }
    }

    fn on_tx_done(&mut self, h: usize, port: usize, epoch: u32) {
        let cap = self.nic_cap;
        let slot = &mut self.hosts[h];
        let Some(p) = slot.ports.get_mut(port) else {
            return;
        };
        if p.tx_epoch != epoch {
            return; // transmission aborted by a link flap
        }
        p.busy = false;
        if let Some(d) = p.queue.pop_front() {
            if p.queue.len() + 1 == cap {
                slot.full_ports = slot.full_ports.saturating_sub(1);
            }
            self.nic_start_tx(h, port, d);
        }
        let slot = &mut self.hosts[h];
        if slot.port_aware && !slot.wants_poll && port < 64 && slot.idle_ready >> port & 1 == 0 {
            // This port was full when the host last had nothing for the others.
            slot.wants_poll = true;
        }
        if slot.wants_poll && (slot.full_ports == 0 || slot.port_aware) {
            self.service_host(h, false);
        }
    }

    /// Commits `d` to direction `dir` of `link`; its last bit leaves at `finish`. Applies the
    /// direction's faults and schedules the arrival(s).
    #[inline]
    fn launch(&mut self, li: usize, dir: usize, mut d: Datagram, finish: Nanos) {
        let l = &mut self.links[li];
        let st = &mut self.stats.links[li][dir];
        st.tx_packets += 1;
        st.tx_bytes += d.wire_len() as u64;
        let mut at = finish.saturating_add(l.prop);
        let epoch = l.epoch;
        let ld = &mut l.dirs[dir];
        let mut dup = false;
        if !ld.clean {
            let f = ld.fault;
            if let Some(ge) = f.burst {
                let flip = if ld.ge_bad {
                    ge.p_bad_to_good
                } else {
                    ge.p_good_to_bad
                };
                if ld.rng.chance(flip) {
                    ld.ge_bad = !ld.ge_bad;
                }
                let p = if ld.ge_bad {
                    ge.loss_in_bad
                } else {
                    ge.loss_in_good
                };
                if ld.rng.chance(p) {
                    st.dropped_burst_loss += 1;
                    return;
                }
            }
            if ld.rng.chance(f.loss) {
                st.dropped_random_loss += 1;
                return;
            }
            if ld.rng.chance(f.corrupt) && !d.payload.is_empty() {
                let bit = ld.rng.below(d.payload.len() as u64 * 8);
                if let Some(b) = d.payload.get_mut((bit / 8) as usize) {
                    *b ^= 1 << (bit % 8);
                }
                st.corrupted += 1;
            }
            if d.ecn.is_ect() && ld.rng.chance(f.ecn_mark) {
                d.ecn = Ecn::Ce;
                st.ecn_marked += 1;
            }
            if ld.rng.chance(f.reorder) {
                at = at.saturating_add(f.reorder_delay);
                st.reordered += 1;
            }
            if ld.rng.chance(f.duplicate) {
                st.duplicated += 1;
                dup = true;
            }
        }
        let dir8 = dir as u8;
        let li32 = li as u32;
        if dup {
            self.queue.push(
                at,
                Event::Arrive {
                    link: li32,
                    dir: dir8,
                    epoch,
                    d: d.clone(),
                },
            );
        }
        self.queue.push(
            at,
            Event::Arrive {
                link: li32,
                dir: dir8,
                epoch,
                d,
            },
        );
    }

    fn on_arrive(&mut self, li: usize, dir: usize, epoch: u32, d: Datagram) {
        let l = &self.links[li];
        if l.epoch != epoch {
            self.stats.links[li][dir].dropped_link_down += 1;
            return;
        }
        self.stats.links[li][dir].delivered += 1;
        match l.ends[1 - dir] {
            End::Host { host, port } => self.deliver(host as usize, port as usize, d),
            End::Switch { sw, .. } => self.forward(sw as usize, d),
        }
    }

    fn deliver(&mut self, h: usize, port: usize, d: Datagram) {
        let now = self.now;
        let slot = &mut self.hosts[h];
        if d.dst_ip != slot.ip {
            self.stats.dropped_misaddressed += 1;
            return;
        }
        if let Some(w) = &mut slot.pcap {
            w.record(now, &d);
        }
        self.stats.delivered_to_hosts += 1;
        slot.host.handle_datagram(now, port, d);
        slot.wants_poll = true;
        self.service_host(h, false);
    }

    #[inline]
    fn forward(&mut self, sw: usize, d: Datagram) {
        let Some(dst) = self.host_index(d.dst_ip) else {
            self.stats.dropped_no_route += 1;
            return;
        };
        let s = &self.switches[sw];
        let (a, b) = match (s.route_off.get(dst), s.route_off.get(dst + 1)) {
            (Some(&a), Some(&b)) => (a as usize, b as usize),
            _ => (0, 0),
        };
        let port = match b.saturating_sub(a) {
            0 => {
                self.stats.dropped_no_route += 1;
                return;
            }
            1 => s.route_ports[a],
            n => s.route_ports[a + hash_to_index(flow_hash(&d, s.salt), n)],
        };
        self.switch_enqueue(sw, port as usize, d);
    }

    /// Output-queues `d` at port `port` of switch `sw`: tail drop, ECN marking above the
    /// threshold, then commit to the link at the time the port's FIFO reaches it.
    #[inline]
    fn switch_enqueue(&mut self, sw: usize, port: usize, mut d: Datagram) {
        let now = self.now;
        let p = &mut self.switches[sw].ports[port];
        // Forget packets whose last bit has already left.
        while let Some(&(fin, b)) = p.queue.front() {
            if fin > now {
                break;
            }
            p.queue.pop_front();
            p.queue_bytes -= u64::from(b);
        }
        let li = p.link as usize;
        let side = p.side as usize;
        let l = &self.links[li];
        if !l.up {
            // Only reachable with static routing: a blackhole.
            self.stats.links[li][side].dropped_link_down += 1;
            return;
        }
        let ps = &mut self.stats.switch_ports[sw][port];
        let len = d.wire_len() as u64;
        if p.queue_bytes.saturating_add(len) > p.capacity {
            ps.dropped_queue_full += 1;
            return;
        }
        if d.ecn.is_ect() && p.queue_bytes > p.ecn_threshold {
            d.ecn = Ecn::Ce;
            ps.ecn_marked += 1;
        }
        let finish =
            p.clock
                .serialise(now, (len as usize).saturating_add(PREAMBLE_IFG), l.rate_bps);
        p.queue
            .push_back((finish, u32::try_from(len).unwrap_or(u32::MAX)));
        p.queue_bytes += u64::from(u32::try_from(len).unwrap_or(u32::MAX));
        ps.enqueued += 1;
        ps.enqueued_bytes += len;
        if p.queue_bytes > ps.max_queue_bytes {
            ps.max_queue_bytes = p.queue_bytes;
        }
        self.launch(li, side, d, finish);
    }
}
