//! The endpoint: every connection of one host, demultiplexing, and the receiver's fair-share
//! allocation across its senders. This is the object an embedder drives:
//! `handle_datagram`, `poll_transmit`, `poll_timeout`/`handle_timeout`, `poll_completion`.

use crate::api::*;
use crate::at::At;
use crate::config::{ConnConfig, EndpointConfig};
use crate::conn::{splitmix64, ConnState, Connection};
use crate::counters::EndpointCounters;
use crate::mem::Memory;
use crate::wire::{Body, Packet, WireError, NATIVE_UDP_PORT};
use rustc_hash::FxHashMap as HashMap;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::net::Ipv4Addr;
use std::sync::Arc;

mod shares;
mod table;

use table::ConnTable;

/// Dirty connections beyond which `touch` settles their deadlines at once.
const DIRTY_FLUSH: usize = 8;

/// All native connections of one host.
#[derive(Debug)]
pub struct Endpoint {
    cfg: EndpointConfig,
    /// `cfg.conn`, shared by the connections that use it (one copy, not one per connection).
    conn_cfg: Arc<ConnConfig>,
    /// By id, index-based (`table.rs`); embedders see them in id order.
    conns: ConnTable,
    by_peer: HashMap<(Ipv4Addr, u32), u32>,
    /// Accepted connections (those in `by_peer`) per peer address: the OPEN bounds.
    accepted_from: HashMap<Ipv4Addr, u32>,
    id_state: u64,
    /// The crowd level this endpoint's connections advertise (COLD-6): moved up when the
    /// connection count passes it, down when the count's level has halved.
    crowd_adv: u8,
    /// Connections that may have something to send, in round-robin order. Work per packet is
    /// independent of the number of connections.
    ready: VecDeque<u32>,
    /// Timer deadlines (lazy deletion: an entry is live while it equals the connection's
    /// `timer_at`).
    timers: BinaryHeap<Reverse<(u64, u32)>>,
    /// Connections whose deadline may have moved since it was last computed: recomputed once
    /// per batch (end of a transmit pass, before timers fire), not after every datagram,
    /// post and send.
    dirty: Vec<u32>,
    /// Connections that received data in the current fair-share interval.
    rx_active: Vec<u32>,
    /// Scratch space of the fair-share computation and of the timer sweep, kept so that
    /// neither allocates in steady state.
    rx_active_spare: Vec<u32>,
    demands: Vec<(f64, u32)>,
    due: Vec<u32>,
    /// Last demands (Mbit/s, infinity for backlogged) seen by the fair-share computation.
    last_level_mbps: f64,
    /// Joins of new senders so far, and the share the last one gave every active sender
    /// (applied to each lazily, `settle_hint`).
    join_epoch: u64,
    join_cap_mbps: u32,
    /// When the receiver last saw a reason for the headroom of `share_target`: a CE-marked
    /// datagram (a queue on the way in), a join, a computation with two or more senders.
    contested_at: Option<u64>,
    next_share_at: u64,
    pub counters: EndpointCounters,
    completions: VecDeque<Completion>,
    events: VecDeque<Event>,
}

impl Endpoint {
    pub fn new(cfg: EndpointConfig) -> Self {
        Endpoint {
            // Ids of another incarnation (same seed, other run) are unrelated: §2.6.
            id_state: cfg.seed ^ cfg.incarnation,
            crowd_adv: 0,
            conn_cfg: Arc::new(cfg.conn.clone()),
            cfg,
            conns: ConnTable::default(),
            by_peer: HashMap::default(),
            accepted_from: HashMap::default(),
            ready: VecDeque::new(),
            timers: BinaryHeap::new(),
            dirty: Vec::new(),
            rx_active: Vec::new(),
            rx_active_spare: Vec::new(),
            demands: Vec::new(),
            due: Vec::new(),
            last_level_mbps: 0.0,
            join_epoch: 0,
            join_cap_mbps: 0,
            contested_at: None,
            next_share_at: 0,
            counters: EndpointCounters::default(),
            completions: VecDeque::new(),
            events: VecDeque::new(),
        }
    }

    pub fn config(&self) -> &EndpointConfig {
        &self.cfg
    }

    fn new_conn_id(&mut self) -> u32 {
        let shards = self.cfg.id_shards.max(1);
        let shard = self.cfg.id_shard % shards;
        loop {
            self.id_state = splitmix64(self.id_state);
            let id = self.id_state as u32;
            if id != 0 && id % shards == shard && !self.conns.contains_key(&id) {
                return id;
            }
        }
    }

    /// Open a connection to `peer` with the endpoint's default connection settings.
    pub fn connect(&mut self, peer: Ipv4Addr) -> ConnId {
        let cc = self.conn_cfg.clone();
        self.open_conn(peer, cc)
    }

    pub fn connect_with(&mut self, peer: Ipv4Addr, cc: ConnConfig) -> ConnId {
        self.open_conn(peer, Arc::new(cc))
    }

    fn open_conn(&mut self, peer: Ipv4Addr, cc: Arc<ConnConfig>) -> ConnId {
        let id = self.new_conn_id();
        let seed = splitmix64(self.cfg.seed ^ id as u64);
        let mut c = Connection::new(ConnId(id), peer, 0, cc, self.cfg.line_rate_mbps, seed);
        c.set_nic_ports(self.cfg.nic_ports);
        c.sole_here = self.note_new_conn();
        c.crowd_here = self.note_crowd(self.conns.len() + 1);
        self.conns.insert(id, c);
        self.touch(id);
        ConnId(id)
    }

    /// After anything happened to connection `id`: collect its completions and events, put
    /// it in the ready queue and re-arm its timer.
    fn touch(&mut self, id: u32) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        if !c.completions.is_empty() {
            self.completions.extend(c.completions.drain(..));
        }
        if !c.events.is_empty() {
            self.events.extend(c.events.drain(..));
        }
        if !c.in_ready {
            c.in_ready = true;
            self.ready.push_back(id);
        }
        Self::mark_dirty(c, &mut self.dirty);
        // `poll_timeout` reads every dirty connection's deadline; an embedder that receives
        // and posts without a transmit pass (its NIC full) would have it scan hundreds at each
        // event (all-to-all on 1,024 hosts). Settling them early is the same settling: a
        // connection changed later is dirtied again.
        if self.dirty.len() >= DIRTY_FLUSH {
            self.flush_timers();
        }
    }

    fn mark_dirty(c: &mut Connection, dirty: &mut Vec<u32>) {
        if !c.timer_dirty {
            c.timer_dirty = true;
            dirty.push(c.id.0);
        }
    }

    /// Recompute the deadlines of the connections something happened to.
    fn flush_timers(&mut self) {
        // Most calls (the end of every transmit pass) find nothing dirty.
        if self.dirty.is_empty() {
            return;
        }
        let mut dirty = std::mem::take(&mut self.dirty);
        for id in dirty.drain(..) {
            self.rearm(id);
        }
        self.dirty = dirty;
    }

    /// Re-read connection `id`'s next deadline and keep the timer heap in step with it.
    fn rearm(&mut self, id: u32) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        c.timer_dirty = false;
        let (d, work) = c.refreshed_deadlines();
        c.work_at = At::from(work);
        if d != c.timer_at.get() {
            c.timer_at = At::from(d);
            if let Some(t) = d {
                self.timers.push(Reverse((t, id)));
            }
        }
        self.clean_timers();
    }

    #[inline]
    fn timer_live(&self, t: u64, id: u32) -> bool {
        self.conns
            .get(&id)
            .is_some_and(|c| c.timer_at.get() == Some(t))
    }

    /// Drop dead entries from the top of the timer heap, so `poll_timeout` can peek.
    fn clean_timers(&mut self) {
        while let Some(Reverse((t, id))) = self.timers.peek().copied() {
            if self.timer_live(t, id) {
                break;
            }
            self.timers.pop();
        }
    }

    /// Give back the spare buffer capacity of every connection that has gone idle (no
    /// deadline, nothing to send, outstanding or owed), and the endpoint's own spare
    /// queue capacity. For embedders to call now and then
    /// (not per packet): doing it whenever a connection's last deadline passes reallocated
    /// a receiver's queues after every ACK (0.23 allocations per packet in `bench core`).
    pub fn compact_idle(&mut self) {
        self.flush_timers();
        for c in self.conns.values_mut() {
            if c.timer_at.get().is_none() && c.is_idle() {
                c.compact();
            }
        }
        // The endpoint's own queues and scratch space keep the capacity of their busiest
        // moment (a timer heap of every connection's stale entries, a ready queue of every
        // connection): give it back too. The heap's order is by value, so rebuilding it
        // from its live entries pops them in the same order.
        let live: Vec<Reverse<(u64, u32)>> = std::mem::take(&mut self.timers)
            .into_vec()
            .into_iter()
            .filter(|Reverse((t, id))| self.timer_live(*t, *id))
            .collect();
        self.timers = BinaryHeap::from(live);
        self.timers.shrink_to_fit();
        self.ready.shrink_to_fit();
        self.dirty.shrink_to_fit();
        self.due.shrink_to_fit();
        self.rx_active.shrink_to_fit();
        self.rx_active_spare.shrink_to_fit();
        self.demands.shrink_to_fit();
        self.completions.shrink_to_fit();
        self.events.shrink_to_fit();
    }

    /// Re-read a connection's state after changing it through `connection_mut`.
    pub fn refresh(&mut self, c: ConnId) {
        self.touch(c.0);
    }

    pub fn connection(&self, c: ConnId) -> Option<&Connection> {
        self.conns.get(&c.0)
    }

    pub fn connection_mut(&mut self, c: ConnId) -> Option<&mut Connection> {
        self.conns.get_mut(&c.0)
    }

    pub fn connections(&self) -> impl Iterator<Item = &Connection> {
        self.conns.values_by_id()
    }

    fn conn(&mut self, c: ConnId) -> Result<&mut Connection, PostError> {
        self.conns.get_mut(&c.0).ok_or(PostError::UnknownConnection)
    }

    /// Create a stream (one per verbs QP): `local` is the id the peer puts in its packets,
    /// `remote` the id we put in ours; `pd` is the protection domain remote access is checked
    /// against.
    pub fn create_stream(
        &mut self,
        c: ConnId,
        local: u32,
        remote: u32,
        pd: u32,
    ) -> Result<(), PostError> {
        self.conn(c)?.create_stream(local, remote, pd)
    }

    /// Create an unreliable stream (a verbs UC QP: SEND and WRITE, never resent; a message
    /// that loses a packet is lost), with the same ids as [`Endpoint::create_stream`]. Both
    /// ends must create it unreliable (spec/transport.md §3.5).
    pub fn create_uc_stream(
        &mut self,
        c: ConnId,
        local: u32,
        remote: u32,
        pd: u32,
    ) -> Result<(), PostError> {
        self.conn(c)?.create_uc_stream(local, remote, pd)
    }

    pub fn destroy_stream(&mut self, c: ConnId, local: u32) -> Result<(), PostError> {
        let conn = self
            .conns
            .get_mut(&c.0)
            .ok_or(PostError::UnknownConnection)?;
        let r = conn.destroy_stream(local);
        self.completions.extend(conn.completions.drain(..));
        r
    }

    pub fn post_send(&mut self, c: ConnId, stream: u32, wr: SendWr) -> Result<(), PostError> {
        let r = self.conn(c)?.post_send(stream, wr);
        self.touch(c.0);
        r
    }

    pub fn post_recv(&mut self, c: ConnId, stream: u32, wr: RecvWr) -> Result<(), PostError> {
        let r = self.conn(c)?.post_recv(stream, wr);
        self.touch(c.0);
        r
    }

    /// Graceful close: CLOSE goes out once the connection's work is done.
    pub fn close(&mut self, c: ConnId) -> Result<(), PostError> {
        self.conn(c)?.close();
        self.touch(c.0);
        Ok(())
    }

    /// A UDP datagram for the native port arrived from `src`, UDP source port `src_port`
    /// (answers on that path reflect it). `ce`: its IP ECN field was CE.
    /// Bad input is counted and dropped; nothing here panics on any bytes.
    pub fn handle_datagram(
        &mut self,
        now: u64,
        src: Ipv4Addr,
        src_port: u16,
        ce: bool,
        data: &[u8],
        mem: &mut dyn Memory,
    ) {
        self.handle_datagram_port(now, src, src_port, ce, data, mem, 0)
    }

    /// As `handle_datagram`, for a datagram that arrived on NIC port (plane) `nic_port`.
    #[allow(clippy::too_many_arguments)]
    pub fn handle_datagram_port(
        &mut self,
        now: u64,
        src: Ipv4Addr,
        src_port: u16,
        ce: bool,
        data: &[u8],
        mem: &mut dyn Memory,
        nic_port: u8,
    ) {
        self.counters.rx_datagrams += 1;
        let pkt = match Packet::parse(data) {
            Ok(p) => p,
            Err(e) => {
                match e {
                    WireError::Truncated => self.counters.drop_truncated += 1,
                    WireError::BadVersion(_) => self.counters.drop_bad_version += 1,
                    WireError::BadOpcode(_) => self.counters.drop_bad_opcode += 1,
                    WireError::BadCrc => self.counters.drop_bad_crc += 1,
                    WireError::Malformed(_) | WireError::BufferTooSmall => {
                        self.counters.drop_malformed += 1
                    }
                }
                return;
            }
        };
        if ce {
            self.contested_at = Some(now);
        }
        if now >= self.next_share_at {
            self.update_shares(now);
        }
        if pkt.dst_conn == 0 {
            if let Body::Open(o) = pkt.body {
                self.on_open(src, &o, pkt.flags);
            } else {
                self.counters.drop_unknown_conn += 1;
            }
            return;
        }
        let Some(conn) = self.conns.get_mut(&pkt.dst_conn) else {
            self.counters.drop_unknown_conn += 1;
            return;
        };
        if conn.peer != src {
            self.counters.drop_unknown_conn += 1;
            return;
        }
        let before = conn.last_rx_at;
        conn.handle_packet(now, &pkt, src_port, nic_port, ce, mem);
        let id = pkt.dst_conn;
        if conn.last_rx_at != before && !conn.in_rx_active {
            conn.in_rx_active = true;
            self.rx_active.push(id);
            self.on_new_sender(now, id);
        }
        self.touch(id);
    }

    /// A connection is about to be added: whether it will be the only one (its OPEN or
    /// OPEN_ACK then says SOLE, spec/transport.md §5.8); a second one withdraws the first's
    /// SOLE. Only with rate hints on: SOLE is the line-rate hint given before any data.
    fn note_new_conn(&mut self) -> bool {
        if self.conns.len() == 1 {
            let first = self.conns.values_mut().next().map(|c| {
                c.withdraw_sole();
                c.id.0
            });
            if let Some(id) = first {
                self.touch(id);
            }
        }
        // Endpoints sharing a host (one per lcore) do not see each other's connections.
        self.conns.is_empty()
            && self.cfg.rate_hints
            && self.cfg.sole_grant
            && self.cfg.id_shards <= 1
    }

    /// The endpoint will have `count` connections: the crowd level they advertise, moved
    /// (and sent on every open connection whose peer heard another, COLD-6) when the count
    /// passes it or its level has halved. Hysteresis keeps the passes over all connections
    /// to a few per doubling or halving of the count, whatever the churn.
    fn note_crowd(&mut self, count: usize) -> u8 {
        let level = crate::wire::crowd_level(count);
        if level > self.crowd_adv || (level as u32) * 2 <= self.crowd_adv as u32 {
            self.crowd_adv = level;
            let mut moved = Vec::new();
            for c in self.conns.values_mut() {
                if c.set_crowd(level) {
                    moved.push(c.id.0);
                }
            }
            for id in moved {
                self.touch(id);
            }
        }
        self.crowd_adv
    }

    fn on_open(&mut self, src: Ipv4Addr, o: &crate::wire::OpenRepr, flags: u8) {
        if let Some(&id) = self.by_peer.get(&(src, o.src_conn)) {
            if let Some(c) = self.conns.get_mut(&id) {
                c.set_peer_crowd(o.crowd);
                c.queue_open_ack();
            }
            self.touch(id);
            return;
        }
        // Bounded state: an OPEN flood (from spoofed sources too) costs at most these many
        // connections; the rest are dropped unanswered.
        let from = self.accepted_from.get(&src).copied().unwrap_or(0);
        if self.by_peer.len() >= self.cfg.max_accepted as usize
            || from >= self.cfg.max_accepted_per_peer
        {
            self.counters.drop_open_limit += 1;
            return;
        }
        *self.accepted_from.entry(src).or_insert(0) += 1;
        let id = self.new_conn_id();
        let seed = splitmix64(self.cfg.seed ^ id as u64);
        let mut c = Connection::new(
            ConnId(id),
            src,
            o.src_conn,
            self.conn_cfg.clone(),
            self.cfg.line_rate_mbps,
            seed,
        );
        c.set_nic_ports(self.cfg.nic_ports);
        c.establish(o);
        c.set_peer_sole(flags & crate::wire::flags::SOLE != 0);
        c.set_peer_crowd(o.crowd);
        c.sole_here = self.note_new_conn();
        c.crowd_here = self.note_crowd(self.conns.len() + 1);
        c.queue_open_ack();
        self.conns.insert(id, c);
        self.by_peer.insert((src, o.src_conn), id);
        self.touch(id);
        self.events.push_back(Event::Accepted {
            conn: ConnId(id),
            peer: src,
        });
    }

    /// The next datagram to send, written into `buf` (at least MTU + 128 bytes).
    #[inline]
    pub fn poll_transmit(
        &mut self,
        now: u64,
        buf: &mut [u8],
        mem: &mut dyn Memory,
    ) -> Option<Transmit> {
        self.poll_transmit_ports(now, buf, mem, u64::MAX)
    }

    /// The next datagram for one of the NIC ports whose bit is set in `ready`.
    #[inline]
    pub fn poll_transmit_ports(
        &mut self,
        now: u64,
        buf: &mut [u8],
        mem: &mut dyn Memory,
        ready: u64,
    ) -> Option<Transmit> {
        // The poll that ends a transmit pass (most polls) finds no connection ready and no
        // deadline to settle: answered here, without the round robin's call.
        if self.ready.is_empty() && self.dirty.is_empty() {
            return None;
        }
        self.poll_ready(now, buf, mem, ready)
    }

    fn poll_ready(
        &mut self,
        now: u64,
        buf: &mut [u8],
        mem: &mut dyn Memory,
        ready: u64,
    ) -> Option<Transmit> {
        // Round robin over the connections that may have something to send, so one busy peer
        // cannot starve the others; a connection with nothing to send leaves the queue until
        // something happens to it.
        let mut tries = self.ready.len();
        while tries > 0 {
            tries -= 1;
            let Some(id) = self.ready.pop_front() else {
                break;
            };
            let Some(conn) = self.conns.get_mut(&id) else {
                continue;
            };
            conn.in_ready = false;
            Self::settle_hint(self.join_epoch, self.join_cap_mbps, conn);
            let out = conn.poll_transmit(now, buf, mem, ready);
            let peer = conn.peer;
            if out.is_none() && conn.port_blocked {
                // It has something, only not for the ports offered now: keep it queued.
                conn.in_ready = true;
                self.ready.push_back(id);
            } else if out.is_none() {
                // It leaves the queue: a send deadline still past fires again.
                conn.send_due_at = At::from(None);
            }
            if let Some((len, port, nic)) = out {
                self.touch(id); // back in the queue, at the tail
                self.counters.tx_datagrams += 1;
                return Some(Transmit {
                    dst: peer,
                    src_port: port,
                    dst_port: NATIVE_UDP_PORT,
                    len,
                    port: nic,
                });
            }
            // Idle: keep it out of the ready queue, but collect its output and timer.
            if let Some(c) = self.conns.get_mut(&id) {
                if !c.completions.is_empty() {
                    self.completions.extend(c.completions.drain(..));
                }
                if !c.events.is_empty() {
                    self.events.extend(c.events.drain(..));
                }
                Self::mark_dirty(c, &mut self.dirty);
            }
        }
        // The end of a transmit pass: the deadlines of this batch settle.
        self.flush_timers();
        None
    }

    /// Earliest time `handle_timeout` must be called. Connections whose deadline has not
    /// been recomputed since they changed are asked directly; their older heap entries can
    /// only make the answer early (a `handle_timeout` with nothing due), never late.
    #[inline]
    pub fn poll_timeout(&self) -> Option<u64> {
        // Most calls (after every transmit pass, which settles the dirty connections) find
        // nothing dirty and a live top: answered here, inlined into the embedder's loop.
        if self.dirty.is_empty() {
            match self.timers.peek() {
                None => return None,
                Some(Reverse((t, id))) if self.timer_live(*t, *id) => return Some(*t),
                Some(_) => {}
            }
        }
        self.poll_timeout_slow()
    }

    /// `poll_timeout` with dirty connections or a stale top.
    fn poll_timeout_slow(&self) -> Option<u64> {
        let fresh = self
            .dirty
            .iter()
            .filter_map(|id| self.conns.get(id).and_then(|c| c.poll_timeout()))
            .min();
        let heap = match self.timers.peek() {
            Some(Reverse((t, id))) if self.timer_live(*t, *id) => Some(*t),
            // The top went stale without a clean-up (only through `connection_mut`): look
            // at every live entry.
            Some(_) => self
                .timers
                .iter()
                .filter(|Reverse((t, id))| self.timer_live(*t, *id))
                .map(|Reverse((t, _))| *t)
                .min(),
            None => None,
        };
        match (fresh, heap) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn handle_timeout(&mut self, now: u64) {
        self.flush_timers();
        let mut due = std::mem::take(&mut self.due);
        due.clear();
        while let Some(Reverse((t, id))) = self.timers.peek().copied() {
            if t > now {
                break;
            }
            self.timers.pop();
            // Clearing `timer_at` here makes a duplicate entry dead: no search of `due`.
            if let Some(c) = self
                .conns
                .get_mut(&id)
                .filter(|c| c.timer_at.get() == Some(t))
            {
                c.timer_at = At::from(None);
                due.push(id);
            }
        }
        for &id in &due {
            if let Some(c) = self.conns.get_mut(&id) {
                self.counters.conn_timeouts += 1;
                c.handle_timeout(now);
            }
            self.touch(id);
        }
        self.due = due;
        self.clean_timers();
    }

    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Drop connections that are closed or failed (their completions were delivered).
    pub fn reap(&mut self) {
        let mut dead: Vec<u32> = self
            .conns
            .values()
            .filter(|c| matches!(c.state, ConnState::Closed | ConnState::Failed))
            .map(|c| c.id.0)
            .collect();
        dead.sort_unstable();
        for k in dead {
            let Some(c) = self.conns.remove(&k) else {
                continue;
            };
            // An accepted connection is keyed by its OPEN's (source, src_conn), which are its
            // peer and peer id (set once, from that OPEN): one removal, not a pass over every
            // accepted connection per dead one (quadratic when many close together).
            let key = (c.peer, c.peer_conn);
            if self.by_peer.get(&key) == Some(&k) {
                self.by_peer.remove(&key);
                self.release_accepted(c.peer);
            }
            debug_assert!(
                self.by_peer.values().all(|&v| v != k),
                "connection {k} left in by_peer"
            );
        }
        if !self.conns.is_empty() {
            self.note_crowd(self.conns.len());
        }
    }

    /// One accepted connection from `peer` is gone: it no longer counts toward the bounds.
    fn release_accepted(&mut self, peer: Ipv4Addr) {
        if let Some(n) = self.accepted_from.get_mut(&peer) {
            *n -= 1;
            if *n == 0 {
                self.accepted_from.remove(&peer);
            }
        }
    }
}

impl crate::api::Transport for Endpoint {
    fn connect(&mut self, peer: Ipv4Addr) -> ConnId {
        Endpoint::connect(self, peer)
    }
    fn create_stream(
        &mut self,
        c: ConnId,
        local: u32,
        remote: u32,
        pd: u32,
    ) -> Result<(), PostError> {
        Endpoint::create_stream(self, c, local, remote, pd)
    }
    fn destroy_stream(&mut self, c: ConnId, local: u32) -> Result<(), PostError> {
        Endpoint::destroy_stream(self, c, local)
    }
    fn post_send(&mut self, c: ConnId, stream: u32, wr: SendWr) -> Result<(), PostError> {
        Endpoint::post_send(self, c, stream, wr)
    }
    fn post_recv(&mut self, c: ConnId, stream: u32, wr: RecvWr) -> Result<(), PostError> {
        Endpoint::post_recv(self, c, stream, wr)
    }
    fn receive(&mut self, now: u64, d: &RxDatagram<'_>, mem: &mut dyn Memory) {
        // The native protocol's CRC-32 covers only the UDP payload: the headers are not needed.
        Endpoint::handle_datagram_port(
            self, now, d.src, d.src_port, d.ce, d.payload, mem, d.nic_port,
        )
    }
    fn transmit(
        &mut self,
        now: u64,
        buf: &mut [u8],
        mem: &mut dyn Memory,
        ready: u64,
    ) -> Option<Transmit> {
        Endpoint::poll_transmit_ports(self, now, buf, mem, ready)
    }
    fn close(&mut self, c: ConnId) -> Result<(), PostError> {
        Endpoint::close(self, c)
    }
    fn poll_timeout(&self) -> Option<u64> {
        Endpoint::poll_timeout(self)
    }
    fn handle_timeout(&mut self, now: u64) {
        Endpoint::handle_timeout(self, now)
    }
    fn poll_completion(&mut self) -> Option<Completion> {
        Endpoint::poll_completion(self)
    }
    fn poll_event(&mut self) -> Option<Event> {
        Endpoint::poll_event(self)
    }
    fn compact_idle(&mut self) {
        Endpoint::compact_idle(self)
    }
    fn totals(&self) -> TransportTotals {
        let mut t = TransportTotals::default();
        for c in self.conns.values() {
            let k = c.counters();
            t.tx_pkts += k.tx_pkts;
            t.tx_payload_bytes += k.tx_payload_bytes;
            t.retx_pkts += k.retx_pkts;
            t.rx_pkts += k.rx_pkts;
            t.rx_duplicates += k.rx_duplicates;
            t.timeouts += k.rtos;
            t.nacks_sent += k.nacks_sent.iter().sum::<u64>();
            t.nacks_received += k.nacks_received.iter().sum::<u64>();
        }
        t
    }
    fn udp_port(&self) -> u16 {
        NATIVE_UDP_PORT
    }
    fn accepts_connections(&self) -> bool {
        true
    }
    fn engine(&self) -> crate::api::EngineRef<'_> {
        crate::api::EngineRef::Native(self)
    }
    fn engine_mut(&mut self) -> crate::api::EngineMut<'_> {
        crate::api::EngineMut::Native(self)
    }
}

#[cfg(test)]
mod tests;
