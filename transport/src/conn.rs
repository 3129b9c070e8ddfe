//! A connection to one peer: many ordered streams above, N paths below (spec/transport.md).

use crate::api::*;
use crate::bits::Bits;
use crate::config::ConnConfig;
use crate::counters::ConnCounters;
use crate::mem::{access, AtomicOp, MemError, Memory};
use crate::path::{ChunkRef, PathState, RxPath, RxVerdict, TxPath};
use crate::wire::{
    self, flags, AckRepr, Body, CloseRepr, DataOp, DataRepr, MsgHeader, NackReason, NackRepr,
    OpenRepr, Packet, ProbeRepr, SeqHeader,
};
use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnState {
    /// OPEN sent, waiting for OPEN_ACK.
    Opening,
    Open,
    /// Close requested: waiting for outstanding work, then CLOSE until CLOSE_ACK.
    Closing,
    Closed,
    Failed,
}

/// A requester work request in flight.
#[derive(Debug)]
struct ReqWr {
    wr: SendWr,
    rsn: u32,
    len: u32,
    /// Request chunks (packets) this WR sends.
    chunks: u32,
    acked: Bits,
    /// Response chunks expected (READ, ATOMIC), and those placed.
    resp_chunks: u32,
    resp_got: Bits,
    status: Option<Status>,
    rnr_count: u8,
    /// Its target overlaps an earlier request not completed when it was posted: its packets
    /// carry ORDERED (spec/transport.md §7.2).
    ordered: bool,
    /// It modifies memory an earlier READ not completed when it was posted reads: it starts
    /// only after every earlier READ has completed, as if fenced (§5.5 rule 2).
    read_fence: bool,
}

impl ReqWr {
    fn done(&self) -> bool {
        self.status.is_some()
            || (self.acked.count() == self.chunks && self.resp_got.count() == self.resp_chunks)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RxKind {
    Send { imm: Option<u32> },
    Write,
    WriteImm { imm: u32 },
    Read { rkey: u32, raddr: u64 },
    Atomic { rkey: u32, raddr: u64, op: AtomicOp },
}

/// A message being received (responder side).
#[derive(Debug)]
struct RxMsg {
    kind: RxKind,
    length: u32,
    chunks: u32,
    got: Bits,
    /// What every packet of the message must repeat: WRITE's rkey and base address
    /// (`raddr - offset`), SEND's and WRITE_IMM's RSN.
    rkey: u32,
    base: u64,
    rsn: u32,
    /// ORDERED chunks received before the message was the stream's oldest incomplete one:
    /// (address, payload), placed when it becomes the oldest (spec/transport.md §7.2).
    held: Vec<(u64, Vec<u8>)>,
}

#[derive(Clone, Copy, Debug)]
enum RespKind {
    Read { rkey: u32, raddr: u64 },
    Atomic { orig: u64 },
}

/// An outgoing response (READ data, ATOMIC result), reliable like a request.
#[derive(Debug)]
struct Resp {
    kind: RespKind,
    length: u32,
    chunks: u32,
    acked: Bits,
}

#[derive(Debug)]
struct Stream {
    remote: u32,
    pd: u32,
    /// MSN of the first failed work request: the stream is in the error state from there on
    /// (later WRs are flushed, earlier ones still complete on their own ACK or NACK).
    err_msn: Option<u32>,
    in_active: bool,
    // requester
    next_msn: u32,
    next_rsn: u32,
    base_msn: u32,
    wrs: VecDeque<ReqWr>,
    cursor_msn: u32,
    cursor_chunk: u32,
    // responder
    rx_base_msn: u32,
    rx_msgs: HashMap<u32, RxMsg>,
    posted: VecDeque<RecvWr>,
    /// Receives consumed so far: the RSN of `posted[0]`.
    consumed_rsn: u32,
    responses: HashMap<u32, Resp>,
}

impl Stream {
    fn in_error(&self) -> bool {
        self.err_msn.is_some()
    }

    /// Work request `msn` failed with `st`. A WR that already finished (or is gone) is not
    /// touched: a stale NACK must not put a healthy stream into error.
    fn fail_wr(&mut self, msn: u32, st: Status) {
        match self.wr_mut(msn) {
            Some(w) if !w.done() => w.status = Some(st),
            _ => return,
        }
        let base = self.base_msn;
        let rel = |m: u32| m.wrapping_sub(base);
        self.err_msn = Some(match self.err_msn {
            Some(e) if rel(e) <= rel(msn) => e,
            _ => msn,
        });
    }

    /// New chunks of `msn` may still be sent (it precedes any failure).
    fn sendable(&self, msn: u32) -> bool {
        let base = self.base_msn;
        self.err_msn
            .is_none_or(|e| msn.wrapping_sub(base) < e.wrapping_sub(base))
    }

    fn wr_mut(&mut self, msn: u32) -> Option<&mut ReqWr> {
        let d = msn.wrapping_sub(self.base_msn) as usize;
        self.wrs.get_mut(d)
    }
}

enum Verdict {
    Accept,
    Refuse(NackReason, u8),
    /// Not recorded and not answered: the requester resends it (hold buffer full).
    Drop,
}

#[derive(Clone, Copy, Debug)]
enum Ctrl {
    Open,
    OpenAck,
    Close,
    CloseAck,
    Probe(u8),
    /// Cold start: a PROBE with the BACKLOG flag asks the receiver for its fair-share hint.
    HintRequest(u8),
    /// A path living away from its home plane checks whether the home plane works again.
    HomeProbe(u8),
    /// Answer to a probe on path .0, sent back with the probe's UDP source port .2 on the
    /// plane it arrived on .3.
    ProbeAck(u8, ProbeRepr, u16, u8),
}

/// One connection: the sans-IO state machine for a peer host.
#[derive(Debug)]
pub struct Connection {
    pub id: ConnId,
    pub peer: Ipv4Addr,
    /// The peer's connection id (0 until known).
    pub peer_conn: u32,
    pub state: ConnState,
    cfg: ConnConfig,
    mtu: u32,
    line_rate_mbps: u32,
    seed: u64,
    paths: Vec<TxPath>,
    rx_paths: Vec<RxPath>,
    streams: HashMap<u32, Stream>,
    active: VecDeque<u32>,
    resp_queue: VecDeque<ChunkRef>,
    retx: VecDeque<(ChunkRef, u8)>,
    /// A tail-loss probe due on path `.1`: sent past every window (the window is full of the
    /// very packets whose fate it asks about) and with ACK_REQ.
    tlp: Option<(ChunkRef, u8)>,
    rnr_wait: Vec<(u64, ChunkRef)>,
    ack_queue: VecDeque<u8>,
    ack_queued: Vec<bool>,
    nack_queue: VecDeque<(u8, NackRepr)>,
    ctrl_queue: VecDeque<Ctrl>,
    ctrl_at: Option<u64>,
    ctrl_tries: u32,
    rr: usize,
    /// NIC ports (planes) of this host; ports with room for the packet being built; the port
    /// the last packet was built for; a path had room but its plane had none.
    nic_ports: u8,
    tx_ready: u64,
    last_tx_port: u8,
    pub(crate) port_blocked: bool,
    /// Fair-share rate the peer's receiver hinted to us (Mbit/s), sender side.
    pub peer_hint_mbps: u32,
    /// Fair-share rate we hint to the peer in our ACKs (set by the endpoint).
    pub hint_for_peer_mbps: u32,
    /// Bytes received and BACKLOG seen since the endpoint last looked (fair share input).
    pub(crate) rx_bytes_window: u64,
    /// Last time data arrived, and last time it carried the BACKLOG flag.
    pub(crate) last_rx_at: u64,
    pub(crate) backlog_at: u64,
    /// Bookkeeping of the endpoint's ready queue, timer heap and fair-share list.
    pub(crate) in_ready: bool,
    pub(crate) timer_at: Option<u64>,
    pub(crate) in_rx_active: bool,
    no_progress_rtos: u32,
    /// Send time of the most recently sent packet acknowledged on any path (RACK).
    rack_time: u64,
    /// Earliest time the next data packet may leave under the hint's pacing, and whether
    /// that is still ahead (then `poll_timeout` reports it).
    pace_next: u64,
    pace_armed: bool,
    /// When the last ACK arrived (0: never), for the cold-start rule.
    last_ack_at: u64,
    /// Outstanding cold-start hint request, and how many were sent without an answer.
    hint_req_at: Option<u64>,
    hint_tries: u32,
    /// Cold start: when the pilot may go (None: sent, or none this cold period), its path,
    /// and when it went.
    pilot_at: Option<u64>,
    pilot_path: u8,
    pilot_sent_at: Option<u64>,
    /// Payload bytes of ORDERED packets held for their turn (§7.2), all streams.
    held_bytes: u64,
    pub counters: ConnCounters,
    pub(crate) completions: VecDeque<Completion>,
    pub(crate) events: VecDeque<Event>,
}

/// splitmix64: the entropy and id generator the spec names.
pub(crate) fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// UDP source port of path `i` in generation `g` (spec/transport.md, "Paths").
pub fn path_entropy(seed: u64, i: u8, g: u32) -> u16 {
    49152 + (splitmix64(seed ^ ((i as u64) << 32) ^ g as u64) % 16384) as u16
}

/// Ethernet + IPv4 + UDP headers, FCS, preamble and inter-frame gap: what a packet costs on
/// the wire beyond its UDP payload (pacing counts wire bytes, like the receiver's capacity).
const WIRE_OVERHEAD: usize = 14 + 20 + 8 + 4 + 20;
/// Packets a paced connection may send back to back after being idle: none, so a fair share
/// is a steady stream from the first packet.
const PACE_BURST: u64 = 1;
/// Smallest window the hint allows, in packets.
const HINT_WINDOW_MIN: f64 = 4.0;
/// Store-and-forward hops a pilot's queueing estimate allows for (a 3-tier Clos).
const PILOT_HOPS: u64 = 6;
/// The first home probe of a path that left its plane goes `probe_interval` / 2^this after
/// it left; each further one waits twice as long, up to `probe_interval`.
const HOME_PROBE_STEPS: u8 = 5;
/// Unanswered cold-start hint requests before data goes out without a hint.
const HINT_TRIES: u32 = 3;

/// Path index of a NACK that names a request rather than a packet (paths are 0..=254).
pub const NO_PATH: u8 = 255;

fn nack_index(r: NackReason) -> usize {
    r as usize
}

/// Copy `buf.len()` bytes at message offset `off` out of an SG list.
fn sgl_read(
    mem: &mut dyn Memory,
    sgl: &SgList,
    mut off: u64,
    buf: &mut [u8],
) -> Result<(), MemError> {
    let mut done = 0;
    for s in sgl {
        if done == buf.len() {
            break;
        }
        if off >= s.len as u64 {
            off -= s.len as u64;
            continue;
        }
        let n = ((s.len as u64 - off) as usize).min(buf.len() - done);
        mem.read_local(s.lkey, s.addr + off, &mut buf[done..done + n])?;
        done += n;
        off = 0;
    }
    if done == buf.len() {
        Ok(())
    } else {
        Err(MemError::OutOfBounds)
    }
}

/// Copy `data` to message offset `off` of an SG list.
fn sgl_write(
    mem: &mut dyn Memory,
    sgl: &SgList,
    mut off: u64,
    data: &[u8],
) -> Result<(), MemError> {
    let mut done = 0;
    for s in sgl {
        if done == data.len() {
            break;
        }
        if off >= s.len as u64 {
            off -= s.len as u64;
            continue;
        }
        let n = ((s.len as u64 - off) as usize).min(data.len() - done);
        mem.write_local(s.lkey, s.addr + off, &data[done..done + n])?;
        done += n;
        off = 0;
    }
    if done == data.len() {
        Ok(())
    } else {
        Err(MemError::OutOfBounds)
    }
}

fn sgl_len(sgl: &SgList) -> u64 {
    sgl.iter().map(|s| s.len as u64).sum()
}

impl Connection {
    pub(crate) fn new(
        id: ConnId,
        peer: Ipv4Addr,
        peer_conn: u32,
        cfg: ConnConfig,
        line_rate_mbps: u32,
        seed: u64,
    ) -> Self {
        let state = if peer_conn == 0 {
            ConnState::Opening
        } else {
            ConnState::Open
        };
        let mut c = Connection {
            id,
            peer,
            peer_conn,
            state,
            mtu: cfg.mtu as u32,
            cfg,
            line_rate_mbps,
            seed,
            paths: Vec::new(),
            rx_paths: Vec::new(),
            streams: HashMap::new(),
            active: VecDeque::new(),
            resp_queue: VecDeque::new(),
            retx: VecDeque::new(),
            tlp: None,
            rnr_wait: Vec::new(),
            ack_queue: VecDeque::new(),
            ack_queued: Vec::new(),
            nack_queue: VecDeque::new(),
            ctrl_queue: VecDeque::new(),
            ctrl_at: None,
            ctrl_tries: 0,
            rr: 0,
            nic_ports: 1,
            tx_ready: 1,
            last_tx_port: 0,
            port_blocked: false,
            peer_hint_mbps: 0,
            hint_for_peer_mbps: 0,
            rx_bytes_window: 0,
            last_rx_at: 0,
            backlog_at: 0,
            in_ready: false,
            timer_at: None,
            in_rx_active: false,
            no_progress_rtos: 0,
            held_bytes: 0,
            rack_time: 0,
            pace_next: 0,
            pace_armed: false,
            last_ack_at: 0,
            hint_req_at: None,
            hint_tries: 0,
            pilot_at: None,
            pilot_path: 0,
            pilot_sent_at: None,
            counters: ConnCounters::default(),
            completions: VecDeque::new(),
            events: VecDeque::new(),
        };
        if state == ConnState::Opening {
            c.ctrl_queue.push_back(Ctrl::Open);
        }
        c
    }

    pub(crate) fn set_nic_ports(&mut self, n: u8) {
        self.nic_ports = n.max(1);
    }

    /// Port for our own probes and control on `path`: that path's plane when it has room,
    /// else the lowest port that has.
    fn own_port(&self, path: u8) -> u8 {
        let plane = self.paths.get(path as usize).map(|p| p.plane).unwrap_or(0);
        if plane < 64 && self.tx_ready >> plane & 1 == 1 {
            plane
        } else {
            self.tx_ready
                .trailing_zeros()
                .min(self.nic_ports as u32 - 1) as u8
        }
    }

    /// Port for an answer (ACK, NACK) about the peer's `path`: the plane the peer's packets of
    /// that path arrive on when it has room, else the lowest port that has.
    fn ctrl_port(&self, path: u8) -> u8 {
        // The plane the peer's packets of this path arrive on (reflection), else our own.
        let plane = match self.rx_paths.get(path as usize) {
            Some(r) if r.reply_port != 0 => r.reply_plane,
            _ => self.paths.get(path as usize).map(|p| p.plane).unwrap_or(0),
        };
        if plane < 64 && self.tx_ready >> plane & 1 == 1 {
            plane
        } else {
            self.tx_ready
                .trailing_zeros()
                .min(self.nic_ports as u32 - 1) as u8
        }
    }

    /// Apply the parameters both sides agreed on and build the paths.
    pub(crate) fn establish(&mut self, peer: &OpenRepr) {
        let n = self.cfg.paths.min(peer.paths).max(1);
        self.mtu = (self.cfg.mtu.min(peer.mtu) as u32).max(64);
        if peer.line_rate_mbps > 0 {
            self.line_rate_mbps = self.line_rate_mbps.min(peer.line_rate_mbps);
        }
        let bytes_per_ns = self.line_rate_mbps as f64 / 8000.0;
        let init_window =
            (bytes_per_ns * self.cfg.initial_rtt_ns as f64).max(self.mtu as f64 * 2.0);
        self.paths = (0..n)
            .map(|i| {
                TxPath::new(
                    i,
                    path_entropy(self.seed, i, 0),
                    &self.cfg,
                    (init_window / n as f64).max(self.mtu as f64),
                    init_window,
                )
            })
            .collect();
        let planes = self.nic_ports;
        for p in &mut self.paths {
            p.planes = planes;
            p.plane = p.index % planes;
            p.home_plane = p.plane;
        }
        self.rx_paths = (0..n).map(|_| RxPath::default()).collect();
        self.ack_queued = vec![false; n as usize];
        self.peer_conn = peer.src_conn;
        self.state = ConnState::Open;
    }

    pub(crate) fn open_repr(&self) -> OpenRepr {
        OpenRepr {
            src_conn: self.id.0,
            paths: self.cfg.paths,
            mtu: self.cfg.mtu,
            line_rate_mbps: self.line_rate_mbps,
        }
    }

    pub(crate) fn queue_open_ack(&mut self) {
        self.ctrl_queue.push_back(Ctrl::OpenAck);
    }

    pub fn mtu(&self) -> u32 {
        self.mtu
    }
    pub fn num_paths(&self) -> usize {
        self.paths.len()
    }
    pub fn path(&self, i: usize) -> Option<&TxPath> {
        self.paths.get(i)
    }
    pub fn paths(&self) -> &[TxPath] {
        &self.paths
    }

    /// Force a path into the failed state (operator action, tests).
    pub fn fail_path(&mut self, i: usize, now: u64) {
        if let Some(p) = self.paths.get_mut(i) {
            for c in p.on_rto(now, &self.cfg) {
                self.retx.push_back((c, i as u8));
            }
            p.fail(now);
        }
    }

    // ---- streams and work requests ----------------------------------------------------

    pub(crate) fn create_stream(
        &mut self,
        local: u32,
        remote: u32,
        pd: u32,
    ) -> Result<(), PostError> {
        if self.streams.contains_key(&local) {
            return Err(PostError::StreamExists);
        }
        self.streams.insert(
            local,
            Stream {
                remote,
                pd,
                err_msn: None,
                in_active: false,
                next_msn: 0,
                next_rsn: 0,
                base_msn: 0,
                wrs: VecDeque::new(),
                cursor_msn: 0,
                cursor_chunk: 0,
                rx_base_msn: 0,
                rx_msgs: HashMap::new(),
                posted: VecDeque::new(),
                consumed_rsn: 0,
                responses: HashMap::new(),
            },
        );
        Ok(())
    }

    /// Remove a stream, flushing whatever it still holds.
    pub(crate) fn destroy_stream(&mut self, local: u32) -> Result<(), PostError> {
        self.flush_stream(local);
        let s = self
            .streams
            .remove(&local)
            .ok_or(PostError::UnknownStream)?;
        let held: usize = s
            .rx_msgs
            .values()
            .flat_map(|m| m.held.iter().map(|(_, d)| d.len()))
            .sum();
        self.held_bytes -= held as u64;
        Ok(())
    }

    pub(crate) fn post_send(&mut self, local: u32, wr: SendWr) -> Result<(), PostError> {
        if matches!(
            self.state,
            ConnState::Closing | ConnState::Closed | ConnState::Failed
        ) {
            return Err(PostError::ConnectionClosed);
        }
        let mtu = self.mtu;
        let s = self
            .streams
            .get_mut(&local)
            .ok_or(PostError::UnknownStream)?;
        if s.in_error() {
            return Err(PostError::StreamInError);
        }
        let len = wr.len();
        if len > u32::MAX as u64 {
            return Err(PostError::InvalidLength);
        }
        let len = len as u32;
        let data_chunks = len.div_ceil(mtu).max(1);
        let (chunks, resp_chunks, rsn) = match &wr.op {
            SendOp::Send { .. } => {
                s.next_rsn = s.next_rsn.wrapping_add(1);
                (data_chunks, 0, s.next_rsn.wrapping_sub(1))
            }
            SendOp::Write { imm: Some(_), .. } => {
                s.next_rsn = s.next_rsn.wrapping_add(1);
                (data_chunks, 0, s.next_rsn.wrapping_sub(1))
            }
            SendOp::Write { imm: None, .. } => (data_chunks, 0, 0),
            SendOp::Read { .. } => (1, data_chunks, 0),
            SendOp::FetchAdd { .. } | SendOp::CmpSwap { .. } => {
                if len != 8 {
                    return Err(PostError::InvalidLength);
                }
                (1, 1, 0)
            }
        };
        // Overlap with earlier requests not completed yet (§7.2): a WRITE over the target of
        // an earlier WRITE or atomic is ORDERED; a WRITE or atomic over an earlier READ's
        // source waits for that READ (its response is read from memory when sent).
        let (mut ordered, mut read_fence) = (false, false);
        if let Some((lo, hi)) = wr.remote_range() {
            let is_write = matches!(wr.op, SendOp::Write { .. });
            // Every WR still queued counts, acknowledged or not: an acknowledged chunk may be
            // held at the responder until the WRs before it complete. A READ whose response
            // is all in is no longer read for this requester.
            for x in s.wrs.iter() {
                let Some(xr) = x.wr.remote_range() else {
                    continue;
                };
                if matches!(x.wr.op, SendOp::Read { .. }) {
                    read_fence |= !x.done() && wr.overwrites_read(xr);
                } else {
                    ordered |= is_write && xr.0 < hi && lo < xr.1;
                }
            }
        }
        let msn = s.next_msn;
        s.next_msn = msn.wrapping_add(1);
        s.wrs.push_back(ReqWr {
            wr,
            rsn,
            len,
            chunks,
            acked: Bits::new(chunks),
            resp_chunks,
            resp_got: Bits::new(resp_chunks),
            status: None,
            rnr_count: 0,
            ordered,
            read_fence,
        });
        if !s.in_active {
            s.in_active = true;
            self.active.push_back(local);
        }
        Ok(())
    }

    pub(crate) fn post_recv(&mut self, local: u32, wr: RecvWr) -> Result<(), PostError> {
        let s = self
            .streams
            .get_mut(&local)
            .ok_or(PostError::UnknownStream)?;
        if s.in_error() {
            return Err(PostError::StreamInError);
        }
        s.posted.push_back(wr);
        Ok(())
    }

    /// Work requests not yet completed, across all streams (send side).
    pub fn outstanding(&self) -> usize {
        self.streams.values().map(|s| s.wrs.len()).sum()
    }

    fn has_unsent(&self) -> bool {
        self.tlp.is_some()
            || !self.retx.is_empty()
            || !self.resp_queue.is_empty()
            || !self.active.is_empty()
    }

    // ---- receive path -----------------------------------------------------------------

    pub(crate) fn handle_packet(
        &mut self,
        now: u64,
        pkt: &Packet<'_>,
        src_port: u16,
        nic_port: u8,
        ce: bool,
        mem: &mut dyn Memory,
    ) {
        // Plane reflection: answers on this path leave on the plane the peer's path arrives
        // on. Only the peer's own packets of that path count (data, probes), not ACKs about
        // our path of the same index.
        if matches!(pkt.body, Body::Data(_) | Body::Probe(_)) {
            if let Some(rx) = self.rx_paths.get_mut(pkt.path as usize) {
                rx.reply_plane = nic_port;
            }
        }
        match &pkt.body {
            Body::Data(d) => self.on_data(now, pkt.path, pkt.flags, d, src_port, ce, mem),
            Body::Ack(a) => self.on_ack(now, pkt.path, a),
            Body::Nack(n) => self.on_nack(now, pkt.path, n),
            Body::OpenAck(o) => {
                if self.state == ConnState::Opening {
                    self.establish(o);
                    self.ctrl_at = None;
                    self.ctrl_tries = 0; // CLOSE gets its own tries
                    self.ctrl_queue.retain(|c| !matches!(c, Ctrl::Open));
                    self.events.push_back(Event::Connected {
                        conn: self.id,
                        peer: self.peer,
                    });
                }
            }
            Body::Open(_) => self.ctrl_queue.push_back(Ctrl::OpenAck),
            Body::Close(_) => {
                if !matches!(self.state, ConnState::Closed | ConnState::Failed) {
                    self.fail_all(Status::Flushed);
                    self.state = ConnState::Closed;
                    self.events.push_back(Event::Closed { conn: self.id });
                }
                self.ctrl_queue.push_back(Ctrl::CloseAck);
            }
            Body::CloseAck(_) => {
                if self.state == ConnState::Closing {
                    self.state = ConnState::Closed;
                    self.ctrl_at = None;
                    self.events.push_back(Event::Closed { conn: self.id });
                }
            }
            Body::Probe(p) => {
                let i = pkt.path as usize;
                if i >= self.paths.len() {
                    self.counters.rx_bad_path += 1;
                } else if pkt.flags & flags::BACKLOG != 0 {
                    // A hint request: count the sender as active now and answer with an ACK
                    // on that path after `hint_hold`, so requests arriving together all see
                    // the share that includes each other.
                    self.last_rx_at = now;
                    self.backlog_at = now.max(1);
                    let rx = &mut self.rx_paths[i];
                    rx.reply_port = src_port;
                    rx.ts_echo = p.ts;
                    rx.ts_arrival = now;
                    if rx.hint_ack_at.is_none() {
                        rx.hint_ack_at = Some(now + self.cfg.hint_hold_ns);
                    }
                } else {
                    self.ctrl_queue
                        .push_back(Ctrl::ProbeAck(pkt.path, *p, src_port, nic_port));
                }
            }
            Body::ProbeAck(p) => self.on_probe_ack(pkt.path, p),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_data(
        &mut self,
        now: u64,
        path: u8,
        fl: u8,
        d: &DataRepr<'_>,
        src_port: u16,
        ce: bool,
        mem: &mut dyn Memory,
    ) {
        let p = path as usize;
        if !matches!(self.state, ConnState::Open | ConnState::Closing) {
            self.counters.rx_not_open += 1;
            return;
        }
        if p >= self.rx_paths.len() {
            self.counters.rx_bad_path += 1;
            return;
        }
        // Entropy reflection: answers on this path take the sender's current source port, so
        // when the sender re-routes a path, its ACKs are re-routed with it.
        self.rx_paths[p].reply_port = src_port;
        self.counters.rx_pkts += 1;
        if ce {
            self.rx_paths[p].ce_count = self.rx_paths[p].ce_count.wrapping_add(1);
            self.counters.ecn_ce_received += 1;
        }
        if fl & flags::BACKLOG != 0 {
            self.backlog_at = now.max(1);
        }
        // A sender's floor is never above its PSN nor more than the SACK span below it; a
        // floor that breaks this is ignored rather than allowed to jump the window.
        let below = crate::wire::psn_diff(d.seq.psn, d.seq.floor);
        if (0..=crate::path::SACK_SPAN as i32).contains(&below) {
            self.rx_paths[p].apply_floor(d.seq.floor);
        }
        match self.rx_paths[p].classify(d.seq.psn) {
            RxVerdict::OutOfWindow => {
                self.counters.rx_out_of_window += 1;
                self.queue_nack(path, d, NackReason::Sequence, 0);
            }
            RxVerdict::Duplicate => {
                self.counters.rx_duplicates += 1;
                let rx = &mut self.rx_paths[p];
                rx.ts_echo = d.seq.tsval;
                rx.ts_arrival = now;
                rx.ack_now = true;
                self.queue_ack(path);
            }
            RxVerdict::New { in_order } => match self.process(now, fl, d, mem) {
                Verdict::Accept => {
                    self.rx_bytes_window += d.payload.len() as u64;
                    self.last_rx_at = now;
                    self.counters.rx_payload_bytes += d.payload.len() as u64;
                    let every = self.cfg.ack_every;
                    let rx = &mut self.rx_paths[p];
                    rx.record(d.seq.psn);
                    rx.unacked += 1;
                    rx.ts_echo = d.seq.tsval;
                    rx.ts_arrival = now;
                    if rx.first_unacked_at.is_none() {
                        rx.first_unacked_at = Some(now);
                    }
                    if !in_order || fl & (flags::ACK_REQ | flags::LAST) != 0 || rx.unacked >= every
                    {
                        rx.ack_now = true;
                        self.queue_ack(path);
                    }
                }
                Verdict::Refuse(reason, delay) => self.queue_nack(path, d, reason, delay),
                Verdict::Drop => {}
            },
        }
    }

    fn queue_ack(&mut self, path: u8) {
        let p = path as usize;
        if !self.ack_queued[p] {
            self.ack_queued[p] = true;
            self.ack_queue.push_back(path);
        }
    }

    fn queue_nack(&mut self, path: u8, d: &DataRepr<'_>, reason: NackReason, rnr_delay: u8) {
        self.counters.nacks_sent[nack_index(reason)] += 1;
        let stream = self
            .streams
            .get(&d.msg.stream)
            .map(|s| s.remote)
            .unwrap_or(d.msg.stream);
        self.nack_queue.push_back((
            path,
            NackRepr {
                psn: d.seq.psn,
                stream,
                msn: d.msg.msn,
                reason,
                rnr_delay,
            },
        ));
    }

    /// Semantics of one new reliable packet: place it, or refuse it (it is then not acked).
    fn process(&mut self, now: u64, fl: u8, d: &DataRepr<'_>, mem: &mut dyn Memory) -> Verdict {
        let mtu = self.mtu;
        let window = self.cfg.stream_window;
        let hold_limit = self.cfg.order_hold_bytes;
        let Some(s) = self.streams.get_mut(&d.msg.stream) else {
            return Verdict::Refuse(NackReason::InvalidRequest, 0);
        };
        let m = d.msg;
        // Responses to our own requests.
        match d.op {
            DataOp::ReadResp => {
                let mut bad = false;
                if let Some(w) = s.wr_mut(m.msn) {
                    if w.status.is_none() && matches!(w.wr.op, SendOp::Read { .. }) {
                        // A chunk is exactly its share of the READ (§5.1): anything else would
                        // be counted as placed while leaving a hole.
                        let ci = m.offset / mtu;
                        let fits = m.offset.is_multiple_of(mtu)
                            && m.length == w.len
                            && ci < w.resp_chunks
                            && d.payload.len() as u32 == w.len.saturating_sub(m.offset).min(mtu);
                        if !fits {
                            bad = true;
                        } else if !w.resp_got.get(ci) {
                            if sgl_write(mem, &w.wr.sgl, m.offset as u64, d.payload).is_err() {
                                s.fail_wr(m.msn, Status::LocalProtection);
                            } else {
                                w.resp_got.set(ci);
                            }
                        }
                    }
                }
                if bad {
                    self.counters.rx_bad_responses += 1;
                    s.fail_wr(m.msn, Status::BadResponse);
                }
                self.complete_requests(d.msg.stream);
                return Verdict::Accept;
            }
            DataOp::AtomicResp { orig } => {
                if let Some(w) = s.wr_mut(m.msn) {
                    if w.status.is_none()
                        && matches!(w.wr.op, SendOp::FetchAdd { .. } | SendOp::CmpSwap { .. })
                        && !w.resp_got.get(0)
                    {
                        if sgl_write(mem, &w.wr.sgl, 0, &orig.to_ne_bytes()).is_err() {
                            s.fail_wr(m.msn, Status::LocalProtection);
                        } else {
                            w.resp_got.set(0);
                        }
                    }
                }
                self.complete_requests(d.msg.stream);
                return Verdict::Accept;
            }
            _ => {}
        }
        // Requests from the peer.
        let rel = m.msn.wrapping_sub(s.rx_base_msn) as i32;
        if rel < 0 {
            return Verdict::Accept; // a copy of a message already complete
        }
        if rel as u32 >= window {
            return Verdict::Refuse(NackReason::Sequence, 0);
        }
        if !m.offset.is_multiple_of(mtu) {
            return Verdict::Refuse(NackReason::InvalidRequest, 0);
        }
        let ci = m.offset / mtu;
        let (kind, rkey, base, rsn) = match d.op {
            DataOp::Send { rsn } => (RxKind::Send { imm: None }, 0, 0, rsn),
            DataOp::SendImm { rsn, imm } => (RxKind::Send { imm: Some(imm) }, 0, 0, rsn),
            DataOp::Write { rkey, raddr } => {
                (RxKind::Write, rkey, raddr.wrapping_sub(m.offset as u64), 0)
            }
            DataOp::WriteImm {
                rkey,
                raddr,
                rsn,
                imm,
            } => (
                RxKind::WriteImm { imm },
                rkey,
                raddr.wrapping_sub(m.offset as u64),
                rsn,
            ),
            DataOp::ReadReq { rkey, raddr } => (RxKind::Read { rkey, raddr }, 0, 0, 0),
            DataOp::FetchAdd { rkey, raddr, add } => (
                RxKind::Atomic {
                    rkey,
                    raddr,
                    op: AtomicOp::FetchAdd { add },
                },
                0,
                0,
                0,
            ),
            DataOp::CmpSwap {
                rkey,
                raddr,
                compare,
                swap,
            } => (
                RxKind::Atomic {
                    rkey,
                    raddr,
                    op: AtomicOp::CmpSwap { compare, swap },
                },
                0,
                0,
                0,
            ),
            // Handled above; a response never reaches request processing.
            DataOp::ReadResp | DataOp::AtomicResp { .. } => return Verdict::Accept,
        };
        let chunks = match kind {
            RxKind::Read { .. } | RxKind::Atomic { .. } => 1,
            _ => m.length.div_ceil(mtu).max(1),
        };
        // A data chunk carries exactly its share of the message (§5.1): a longer one would
        // write into its neighbour's bytes, a shorter one would count as placed with a hole.
        let data = matches!(
            kind,
            RxKind::Send { .. } | RxKind::Write | RxKind::WriteImm { .. }
        );
        if ci >= chunks
            || (data && d.payload.len() as u32 != m.length.saturating_sub(m.offset).min(mtu))
        {
            return Verdict::Refuse(NackReason::InvalidRequest, 0);
        }
        if let Some(msg) = s.rx_msgs.get(&m.msn) {
            // Every packet of a message names the same message: operation, length, key,
            // base address, receive.
            if msg.length != m.length
                || msg.kind != kind
                || msg.rkey != rkey
                || msg.base != base
                || msg.rsn != rsn
            {
                return Verdict::Refuse(NackReason::InvalidRequest, 0);
            }
            if msg.got.get(ci) {
                return Verdict::Accept; // this chunk arrived before under another PSN
            }
        }
        let pd = s.pd;
        // A receive is needed for SEND and WRITE with immediate.
        let recv_index = |s: &Stream, rsn: u32| -> Option<usize> {
            let base = s.rx_base_rsn();
            let i = rsn.wrapping_sub(base) as usize;
            (i < s.posted.len()).then_some(i)
        };
        // An ORDERED chunk of a message that is not the stream's oldest incomplete one waits
        // (§7.2): its payload is held until then.
        let mut held = None;
        match kind {
            RxKind::Send { .. } => {
                let Some(i) = recv_index(s, rsn) else {
                    self.counters.rnr_waits += 1;
                    return Verdict::Refuse(NackReason::ReceiverNotReady, 0);
                };
                let recv = &s.posted[i];
                if m.length as u64 > sgl_len(&recv.sgl) {
                    return Verdict::Refuse(NackReason::InvalidRequest, 0);
                }
                if sgl_write(mem, &recv.sgl, m.offset as u64, d.payload).is_err() {
                    return Verdict::Refuse(NackReason::InvalidRequest, 0);
                }
            }
            RxKind::Write | RxKind::WriteImm { .. } => {
                if matches!(kind, RxKind::WriteImm { .. }) && recv_index(s, rsn).is_none() {
                    self.counters.rnr_waits += 1;
                    return Verdict::Refuse(NackReason::ReceiverNotReady, 0);
                }
                // A zero-length WRITE touches no memory, so no key is checked (IBTA).
                if m.length > 0 {
                    let raddr = base.wrapping_add(m.offset as u64);
                    // Check the whole message, not only this packet's bytes: a WRITE that
                    // runs past its region is refused at whichever packet arrives first, so
                    // no part of it is ever placed.
                    let whole_ok = raddr.checked_sub(m.offset as u64).is_some_and(|st| {
                        mem.check_remote(pd, rkey, st, m.length as u64, access::REMOTE_WRITE)
                            .is_ok()
                    }) && mem
                        .check_remote(
                            pd,
                            rkey,
                            raddr,
                            d.payload.len() as u64,
                            access::REMOTE_WRITE,
                        )
                        .is_ok();
                    if !whole_ok {
                        self.counters.remote_access_refused += 1;
                        return Verdict::Refuse(NackReason::RemoteAccess, 0);
                    }
                    if fl & flags::ORDERED != 0 && rel > 0 {
                        let n = d.payload.len() as u64;
                        if self.held_bytes + n > hold_limit {
                            self.counters.rx_ordered_dropped += 1;
                            return Verdict::Drop;
                        }
                        self.held_bytes += n;
                        self.counters.rx_ordered_held += 1;
                        held = Some((raddr, d.payload.to_vec()));
                    } else if mem.write_remote(pd, rkey, raddr, d.payload).is_err() {
                        self.counters.remote_access_refused += 1;
                        return Verdict::Refuse(NackReason::RemoteAccess, 0);
                    }
                }
            }
            RxKind::Read { rkey, raddr } => {
                // A zero-length READ reads nothing: no key is checked (IBTA).
                if m.length > 0
                    && mem
                        .check_remote(pd, rkey, raddr, m.length as u64, access::REMOTE_READ)
                        .is_err()
                {
                    self.counters.remote_access_refused += 1;
                    return Verdict::Refuse(NackReason::RemoteAccess, 0);
                }
            }
            RxKind::Atomic { rkey, raddr, .. } => {
                if let Err(v) = Self::check_atomic(mem, pd, rkey, raddr) {
                    self.counters.remote_access_refused += 1;
                    return v;
                }
            }
        }
        let msg = s.rx_msgs.entry(m.msn).or_insert_with(|| RxMsg {
            kind,
            length: m.length,
            chunks,
            got: Bits::new(chunks),
            rkey,
            base,
            rsn,
            held: Vec::new(),
        });
        msg.got.set(ci);
        if let Some(h) = held {
            msg.held.push(h);
        }
        if msg.got.count() == msg.chunks {
            let st = d.msg.stream;
            self.deliver_requests(now, st, mem);
        }
        Verdict::Accept
    }

    fn check_atomic(mem: &mut dyn Memory, pd: u32, rkey: u32, raddr: u64) -> Result<(), Verdict> {
        if !raddr.is_multiple_of(8) {
            return Err(Verdict::Refuse(NackReason::InvalidRequest, 0));
        }
        mem.check_remote(pd, rkey, raddr, 8, access::REMOTE_ATOMIC)
            .map_err(|_| Verdict::Refuse(NackReason::RemoteAccess, 0))
    }

    /// Responder: retire complete messages in MSN order (RC ordering), executing READs and
    /// ATOMICs only once every earlier message of the stream is complete.
    fn deliver_requests(&mut self, _now: u64, local: u32, mem: &mut dyn Memory) {
        let conn = self.id;
        let mtu = self.mtu;
        let Some(s) = self.streams.get_mut(&local) else {
            return;
        };
        loop {
            let base = s.rx_base_msn;
            let Some(msg) = s.rx_msgs.get_mut(&base) else {
                break;
            };
            // The oldest incomplete message: its held ORDERED chunks may be placed now.
            if !msg.held.is_empty() {
                let mut failed = false;
                for (addr, data) in std::mem::take(&mut msg.held) {
                    self.held_bytes -= data.len() as u64;
                    failed |= mem.write_remote(s.pd, msg.rkey, addr, &data).is_err();
                }
                if failed {
                    // Checked on arrival; the region went away since (as for atomics).
                    self.counters.remote_access_refused += 1;
                    self.nack_queue.push_back((
                        NO_PATH,
                        NackRepr {
                            psn: 0,
                            stream: s.remote,
                            msn: base,
                            reason: NackReason::RemoteAccess,
                            rnr_delay: 0,
                        },
                    ));
                }
            }
            if msg.got.count() != msg.chunks {
                break;
            }
            let msg = match s.rx_msgs.remove(&base) {
                Some(m) => m,
                None => break,
            };
            s.rx_base_msn = base.wrapping_add(1);
            self.counters.messages_completed_rx += 1;
            let recv_op = match msg.kind {
                RxKind::Send { imm, .. } => Some((CompletionOp::Recv, imm)),
                RxKind::WriteImm { imm, .. } => Some((CompletionOp::RecvWriteImm, Some(imm))),
                _ => None,
            };
            if let Some((op, imm)) = recv_op {
                if let Some(r) = s.posted.pop_front() {
                    s.consumed_rsn = s.consumed_rsn.wrapping_add(1);
                    self.completions.push_back(Completion {
                        conn,
                        stream: local,
                        wr_id: r.wr_id,
                        status: Status::Success,
                        op,
                        byte_len: msg.length,
                        imm,
                    });
                }
            }
            match msg.kind {
                RxKind::Send { .. } | RxKind::WriteImm { .. } => {}
                RxKind::Write => {}
                RxKind::Read { rkey, raddr } => {
                    let chunks = msg.length.div_ceil(mtu).max(1);
                    s.responses.insert(
                        base,
                        Resp {
                            kind: RespKind::Read { rkey, raddr },
                            length: msg.length,
                            chunks,
                            acked: Bits::new(chunks),
                        },
                    );
                    for c in 0..chunks {
                        self.resp_queue.push_back(ChunkRef::Resp {
                            stream: local,
                            msn: base,
                            chunk: c,
                        });
                    }
                }
                RxKind::Atomic { rkey, raddr, op } => {
                    // Validated on arrival; a region deregistered since then yields a NACK.
                    match mem.atomic_remote(s.pd, rkey, raddr, op) {
                        Ok(orig) => {
                            s.responses.insert(
                                base,
                                Resp {
                                    kind: RespKind::Atomic { orig },
                                    length: 8,
                                    chunks: 1,
                                    acked: Bits::new(1),
                                },
                            );
                            self.resp_queue.push_back(ChunkRef::Resp {
                                stream: local,
                                msn: base,
                                chunk: 0,
                            });
                        }
                        Err(_) => {
                            self.counters.remote_access_refused += 1;
                            self.nack_queue.push_back((
                                NO_PATH,
                                NackRepr {
                                    psn: 0,
                                    stream: s.remote,
                                    msn: base,
                                    reason: NackReason::RemoteAccess,
                                    rnr_delay: 0,
                                },
                            ));
                        }
                    }
                }
            }
        }
    }

    fn on_ack(&mut self, now: u64, path: u8, a: &AckRepr) {
        let p = path as usize;
        if p >= self.paths.len() {
            self.counters.rx_bad_path += 1;
            return;
        }
        self.counters.acks_received += 1;
        self.last_ack_at = now;
        let was_cold = self.hint_req_at.take().is_some();
        self.hint_tries = 0;
        if a.rate_hint_mbps != 0 {
            self.apply_hint(a.rate_hint_mbps);
            if was_cold && self.pilot_sent_at.is_none() {
                // No pilot went (the pacing after one is set below): data starts at the
                // pilot's (random) time if that is still ahead; otherwise senders released by
                // the same fair-share decision would all send at once, so start at a
                // deterministic pseudo-random point of one gap.
                self.pace_next = match self.pilot_at {
                    Some(t) if t > now => t,
                    _ => now + splitmix64(self.seed ^ now) % self.hint_gap().max(1),
                };
                self.pace_armed = self.pace_next > now;
            }
        }
        self.pilot_at = None;
        let now32 = now as u32;
        let rtt = now32.wrapping_sub(a.ts_echo).wrapping_sub(a.ack_delay_ns);
        let rtt_sample = (a.ts_echo != 0 && rtt < 1 << 31).then_some(rtt.max(1) as u64);
        if let Some(t) = self.pilot_sent_at {
            if self.peer_hint_mbps != 0 {
                // The pilot's own round trip says how long it queued: the next packet goes one
                // fair-share gap after the pilot *arrived*, so senders whose pilots left
                // together (and queued one behind another) keep the spacing the bottleneck gave
                // them instead of arriving together again one gap later. Until the pilot's ACK
                // is in, wait (at most two base RTTs past the gap: it may be lost), unless the
                // gap is shorter than an RTT.
                let gap = self.hint_gap();
                let echo = a.ts_echo == (t as u32).max(1);
                self.pace_next = match (rtt_sample, self.pilot_wait_until()) {
                    (Some(r), _) if echo => {
                        self.pilot_sent_at = None;
                        // The base RTT was measured with the small request, which the pilot
                        // exceeds by one MTU's serialisation on every store-and-forward hop:
                        // take that off for up to PILOT_HOPS hops, erring early (an early
                        // packet queues briefly; a late one leaves the bottleneck idle).
                        let ser =
                            self.full_packet_wire() * 8000 / self.line_rate_mbps.max(1) as u64;
                        t + r.saturating_sub(self.base_rtt() + PILOT_HOPS * ser) + gap
                    }
                    (_, Some(w)) => w,
                    // Its ACK could not be back before the next packet is due anyway (more
                    // than one packet per RTT: few senders, so little queue to learn about).
                    // It keeps the pilot's (random) phase: released together, senders would
                    // otherwise all start together.
                    _ => t + gap * (now.saturating_sub(t) / gap.max(1) + 1),
                };
                self.pace_armed = self.pace_next > now;
            }
        }
        let out = self.paths[p].on_ack(now, a.cum_psn, &a.sack, a.ecn_ce, rtt_sample, &self.cfg);
        if out.progress {
            self.no_progress_rtos = 0;
        }
        self.counters.sack_holes += out.lost.len() as u64;
        for c in out.lost {
            self.retx.push_back((c, path));
        }
        if let Some(t) = out.newest_acked_sent_at {
            if t > self.rack_time {
                self.rack_time = t;
            }
            self.detect_time_losses(now);
        }
        let mut touched: Vec<u32> = Vec::new();
        for c in out.acked {
            match c {
                ChunkRef::Req { stream, msn, chunk } => {
                    if let Some(s) = self.streams.get_mut(&stream) {
                        if let Some(w) = s.wr_mut(msn) {
                            w.acked.set(chunk);
                        }
                        if !touched.contains(&stream) {
                            touched.push(stream);
                        }
                    }
                }
                ChunkRef::Resp { stream, msn, chunk } => {
                    if let Some(s) = self.streams.get_mut(&stream) {
                        let done = s.responses.get_mut(&msn).map(|r| {
                            r.acked.set(chunk);
                            r.acked.count() == r.chunks
                        });
                        if done == Some(true) {
                            s.responses.remove(&msn);
                        }
                    }
                }
            }
        }
        for s in touched {
            self.complete_requests(s);
        }
    }

    /// Packets older than their path's loss delay, with a later packet acknowledged on any
    /// path, are lost: resend them now rather than at the RTO.
    fn detect_time_losses(&mut self, now: u64) {
        let base = self.base_rtt();
        let ack_delay = self.cfg.ack_delay_ns;
        for i in 0..self.paths.len() {
            let d = self.paths[i].loss_delay(base, ack_delay);
            let lost = self.paths[i].detect_time_losses(now, self.rack_time, d);
            self.counters.time_losses += lost.len() as u64;
            for c in lost {
                self.retx.push_back((c, i as u8));
            }
        }
    }

    /// The receiver's fair-share rate: jump to it (scale path windows), never probe.
    fn apply_hint(&mut self, mbps: u32) {
        self.peer_hint_mbps = mbps;
        let target = self.hint_window();
        let sum: f64 = self.paths.iter().map(|p| p.cwnd).sum();
        if sum > 0.0 && target > sum {
            let k = target / sum;
            for p in &mut self.paths {
                p.cwnd = (p.cwnd * k).min(p.max_cwnd);
            }
        }
    }

    fn base_rtt(&self) -> u64 {
        self.paths
            .iter()
            .map(|p| p.min_rtt_ns)
            .min()
            .filter(|r| *r != u64::MAX)
            .unwrap_or(self.cfg.initial_rtt_ns)
    }

    /// Bytes the hint allows in flight: rate × (base RTT × 1.25 + the receiver's ACK delay),
    /// since with N paths an ACK can be held up to `ack_delay` and the window must cover it.
    fn hint_window(&self) -> f64 {
        // Pacing sets the rate; the window is only a safety bound, so it gets headroom: an RTT
        // and a half plus the ACK delay, and never less than HINT_WINDOW_MIN packets (a fair
        // share below a packet per RTT must not stall on a one-packet window).
        // The RTT it covers is the larger of 1.5 × the base RTT and the smoothed RTT: in a
        // fabric they are close, but where the hosts' own scheduling adds most of the RTT (busy
        // cores, sleeping poll loops) a base-RTT window would cap the rate far below the hint.
        let srtt = self
            .paths
            .iter()
            .filter_map(|p| p.srtt_ns)
            .fold(f64::INFINITY, f64::min);
        let srtt = if srtt.is_finite() { srtt } else { 0.0 };
        let rtt = (self.base_rtt() as f64 * 1.5).max(srtt) + self.cfg.ack_delay_ns as f64;
        (self.peer_hint_mbps as f64 / 8000.0 * rtt).max(HINT_WINDOW_MIN * self.mtu as f64)
    }

    fn on_nack(&mut self, now: u64, path: u8, n: &NackRepr) {
        self.counters.nacks_received[nack_index(n.reason)] += 1;
        // A NACK on path NO_PATH is about a request, not a packet (a deferred failure): it is
        // found by (stream, msn). Otherwise the PSN names the refused packet, and it must have
        // carried the MSN the NACK names.
        let chunk = if path == NO_PATH {
            None
        } else {
            self.paths.get_mut(path as usize).and_then(|p| {
                let msn_ok = p.peek(n.psn).is_some_and(|c| match c {
                    ChunkRef::Req { msn, .. } | ChunkRef::Resp { msn, .. } => msn == n.msn,
                });
                if msn_ok {
                    p.forget(n.psn)
                } else {
                    None
                }
            })
        };
        let (stream, msn, chunk) = match chunk {
            Some(ChunkRef::Req { stream, msn, chunk }) => {
                (stream, msn, Some(ChunkRef::Req { stream, msn, chunk }))
            }
            Some(c @ ChunkRef::Resp { stream, msn, .. }) => {
                if n.reason == NackReason::Sequence {
                    // Outside the requester's window: resend later like a loss.
                    self.retx.push_back((c, path));
                } else if let Some(s) = self.streams.get_mut(&stream) {
                    // Our response was refused (the requester's stream vanished): stop.
                    s.responses.remove(&msn);
                }
                return;
            }
            None => {
                if path == NO_PATH
                    && matches!(
                        n.reason,
                        NackReason::RemoteAccess | NackReason::InvalidRequest
                    )
                {
                    (n.stream, n.msn, None)
                } else {
                    return; // stale NACK for a packet already dealt with
                }
            }
        };
        match n.reason {
            NackReason::RemoteAccess | NackReason::InvalidRequest => {
                let st = if n.reason == NackReason::RemoteAccess {
                    Status::RemoteAccess
                } else {
                    Status::RemoteInvalidRequest
                };
                if let Some(s) = self.streams.get_mut(&stream) {
                    s.fail_wr(msn, st);
                }
                self.complete_requests(stream);
            }
            NackReason::ReceiverNotReady => {
                let limit = self.cfg.rnr_retry;
                let Some(c) = chunk else { return };
                let mut fail = false;
                if let Some(s) = self.streams.get_mut(&stream) {
                    if let Some(w) = s.wr_mut(msn) {
                        w.rnr_count = w.rnr_count.saturating_add(1);
                        if limit != 7 && w.rnr_count > limit {
                            fail = true;
                        }
                    }
                    if fail {
                        s.fail_wr(msn, Status::RnrRetryExceeded);
                    }
                }
                if fail {
                    self.complete_requests(stream);
                } else {
                    let delay = if n.rnr_delay == 0 {
                        self.cfg.default_rnr_delay_ns
                    } else {
                        n.rnr_delay as u64 * 10_000
                    };
                    self.rnr_wait.push((now + delay, c));
                }
            }
            NackReason::Sequence => {
                if let Some(c) = chunk {
                    self.retx.push_back((c, path));
                }
            }
        }
    }

    fn on_probe_ack(&mut self, path: u8, pr: &ProbeRepr) {
        if let Some(tp) = self.paths.get_mut(path as usize) {
            if tp.home_probe_seq == Some(pr.probe_seq) {
                // The home plane answers again: go back, so every plane carries its share.
                tp.plane = tp.home_plane;
                tp.home_probe_seq = None;
                tp.home_probe_at = None;
                return;
            }
            // Only the latest probe vouches for the current route: an older one may have
            // travelled on a port the path has since left.
            if tp.state != PathState::Good && pr.probe_seq == tp.probe_seq {
                self.no_progress_rtos = 0;
                tp.state = PathState::Good;
                tp.probe_at = None;
                tp.rto_count = 0;
                tp.rto_ns = tp
                    .srtt_ns
                    .map(|s| (s as u64 * 2).max(self.cfg.min_rto_ns))
                    .unwrap_or(self.cfg.initial_rto_ns);
            }
        }
    }

    /// Requester: report finished work requests in MSN order.
    fn complete_requests(&mut self, local: u32) {
        let conn = self.id;
        let Some(s) = self.streams.get_mut(&local) else {
            return;
        };
        if let Some(e) = s.err_msn {
            let first = e.wrapping_sub(s.base_msn) as usize;
            for w in s.wrs.iter_mut().skip(first + 1) {
                if !w.done() {
                    w.status = Some(Status::Flushed);
                }
            }
        }
        while let Some(w) = s.wrs.front() {
            if !w.done() {
                break;
            }
            let w = match s.wrs.pop_front() {
                Some(w) => w,
                None => break,
            };
            s.base_msn = s.base_msn.wrapping_add(1);
            if (s.cursor_msn.wrapping_sub(s.base_msn) as i32) < 0 {
                s.cursor_msn = s.base_msn;
                s.cursor_chunk = 0;
            }
            let status = w.status.unwrap_or(Status::Success);
            self.counters.messages_completed_tx += 1;
            if status != Status::Success || w.wr.signaled {
                let op = match w.wr.op {
                    SendOp::Send { .. } => CompletionOp::Send,
                    SendOp::Write { .. } => CompletionOp::Write,
                    SendOp::Read { .. } => CompletionOp::Read,
                    SendOp::FetchAdd { .. } => CompletionOp::FetchAdd,
                    SendOp::CmpSwap { .. } => CompletionOp::CmpSwap,
                };
                self.completions.push_back(Completion {
                    conn,
                    stream: local,
                    wr_id: w.wr.wr_id,
                    status,
                    op,
                    byte_len: w.len,
                    imm: None,
                });
            }
        }
        // Completions may have lifted a window or fence block: make the stream active again.
        if !s.in_active && s.cursor_msn != s.next_msn && s.sendable(s.cursor_msn) {
            s.in_active = true;
            self.active.push_back(local);
        }
        if s.in_error() {
            // RC semantics: the error state flushes the receive queue too.
            while let Some(r) = s.posted.pop_front() {
                self.completions.push_back(Completion {
                    conn,
                    stream: local,
                    wr_id: r.wr_id,
                    status: Status::Flushed,
                    op: CompletionOp::Recv,
                    byte_len: 0,
                    imm: None,
                });
            }
        }
    }

    fn flush_stream(&mut self, local: u32) {
        if let Some(s) = self.streams.get_mut(&local) {
            for w in s.wrs.iter_mut() {
                if !w.done() {
                    w.status = Some(Status::Flushed);
                }
            }
            s.err_msn = Some(s.base_msn);
        }
        self.complete_requests(local);
    }

    /// Fail every stream: the first unfinished WR of each gets `first`, the rest are flushed.
    fn fail_all(&mut self, first: Status) {
        let ids: Vec<u32> = self.streams.keys().copied().collect();
        for id in ids {
            if let Some(s) = self.streams.get_mut(&id) {
                let base = s.base_msn;
                let msn = s
                    .wrs
                    .iter()
                    .position(|w| !w.done())
                    .map(|i| base.wrapping_add(i as u32));
                if let Some(m) = msn {
                    s.fail_wr(m, first);
                }
                for w in s.wrs.iter_mut() {
                    if !w.done() {
                        w.status = Some(Status::Flushed);
                    }
                }
                if s.err_msn.is_none() {
                    s.err_msn = Some(base);
                }
            }
            self.complete_requests(id);
        }
        self.retx.clear();
        self.tlp = None;
        self.resp_queue.clear();
        self.active.clear();
        self.rnr_wait.clear();
    }

    // ---- timers -------------------------------------------------------------------------

    pub fn poll_timeout(&self) -> Option<u64> {
        let mut t: Option<u64> = self.ctrl_at;
        let mut min = |x: Option<u64>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        for p in &self.paths {
            min(p.rto_deadline());
            min(p.probe_at);
        }
        for r in &self.rx_paths {
            min(r.first_unacked_at.map(|f| f + self.cfg.ack_delay_ns));
        }
        for (at, _) in &self.rnr_wait {
            min(Some(*at));
        }
        let base = self.base_rtt();
        for p in &self.paths {
            min(p.time_loss_deadline(self.rack_time, p.loss_delay(base, self.cfg.ack_delay_ns)));
        }
        // Only future deadlines that `handle_timeout` clears, or the embedder would spin.
        if self.pace_armed
            && self.has_unsent()
            && matches!(self.state, ConnState::Open | ConnState::Closing)
        {
            min(Some(self.pace_next));
        }
        if let Some(at) = self.hint_req_at {
            if self.state == ConnState::Open {
                min(Some(at + self.cfg.initial_rto_ns));
                // A pilot held only by a full NIC port needs no timer: the endpoint keeps
                // the connection in its ready queue until the port drains.
                if !self.port_blocked {
                    min(self.pilot_at.map(|p| p.max(at)));
                }
            }
        }
        for r in &self.rx_paths {
            min(r.hint_ack_at);
        }
        for p in &self.paths {
            min(p.home_probe_at);
        }
        for i in 0..self.paths.len() {
            min(self.tlp_deadline(i, base));
        }
        t
    }

    /// A path's tail-loss probe deadline. While the pilot is unanswered, not before the time
    /// its ACK is waited for: the pilot may sit behind every other sender's pilot in the
    /// receiver's queue (about one fair-share gap), and a probe then is a spurious resend.
    fn tlp_deadline(&self, i: usize, base: u64) -> Option<u64> {
        let at =
            self.paths[i].tlp_deadline(base, self.cfg.ack_delay_ns, self.cfg.initial_rtt_ns)?;
        Some(match self.pilot_wait_until() {
            Some(w) => at.max(w),
            None => at,
        })
    }

    /// While the pilot's ACK is out: until when the next packet waits for it.
    fn pilot_wait_until(&self) -> Option<u64> {
        let t = self.pilot_sent_at?;
        if self.peer_hint_mbps == 0 {
            return None;
        }
        let gap = self.hint_gap();
        let base = self.base_rtt();
        (gap >= base).then_some(t + gap + 2 * base)
    }

    /// One MTU-sized packet's spacing at the hinted rate (ns).
    fn hint_gap(&self) -> u64 {
        (self.full_packet_wire() as f64 * 8000.0 / self.peer_hint_mbps.max(1) as f64) as u64
    }

    /// Wire bytes of a full-sized WRITE packet: payload, native headers and trailer, framing.
    fn full_packet_wire(&self) -> u64 {
        (self.mtu as usize
            + wire::BASE_LEN
            + wire::Opcode::Write.header_len()
            + wire::TRAILER_LEN
            + WIRE_OVERHEAD) as u64
    }

    pub(crate) fn handle_timeout(&mut self, now: u64) {
        if let Some(at) = self.ctrl_at {
            if at <= now {
                self.ctrl_at = None;
                match self.state {
                    ConnState::Opening => self.ctrl_queue.push_back(Ctrl::Open),
                    ConnState::Closing => self.ctrl_queue.push_back(Ctrl::Close),
                    _ => {}
                }
            }
        }
        let base = self.base_rtt();
        for i in 0..self.paths.len() {
            if self.tlp_deadline(i, base).is_some_and(|t| t <= now) {
                if let Some(ch) = self.paths[i].take_tlp() {
                    self.tlp = Some((ch, i as u8));
                }
            }
        }
        for i in 0..self.paths.len() {
            if let Some(d) = self.paths[i].rto_deadline() {
                if d <= now {
                    let lost = self.paths[i].on_rto(now, &self.cfg);
                    self.counters.rtos += 1;
                    if self.paths[i].state == PathState::Probing {
                        self.counters.path_failures += 1;
                    }
                    for c in lost {
                        self.retx.push_back((c, i as u8));
                    }
                    // The connection is stuck only while no path is Good: a dying path whose
                    // siblings still work (or are being re-routed to working routes) is the
                    // path layer's business, not a reason to give up.
                    if !self.paths.iter().any(|p| p.state == PathState::Good) {
                        self.no_progress_rtos += 1;
                    }
                    if self.no_progress_rtos >= self.cfg.retry_limit {
                        self.fail_connection();
                        return;
                    }
                }
            }
            if let Some(at) = self.paths[i].probe_at {
                if at <= now {
                    let p = &mut self.paths[i];
                    let next = match p.state {
                        PathState::Suspect
                            if p.probe_seq != 0 && p.rto_count + 1 >= self.cfg.fail_after_rtos =>
                        {
                            // Probes went unanswered for too long: fail and re-route.
                            p.fail(now);
                            self.counters.path_failures += 1;
                            0
                        }
                        PathState::Suspect => {
                            p.rto_count += 1;
                            p.rto_ns
                        }
                        _ => {
                            // Probing: every probe tries a new route.
                            p.generation = p.generation.wrapping_add(1);
                            p.entropy = path_entropy(self.seed, i as u8, p.generation);
                            p.move_plane();
                            p.counters.reroutes += 1;
                            self.cfg.probe_interval_ns
                        }
                    };
                    p.probe_at = if p.state == PathState::Good {
                        None
                    } else {
                        Some(now + next)
                    };
                    if p.state != PathState::Good {
                        self.ctrl_queue.push_back(Ctrl::Probe(i as u8));
                    }
                }
            }
        }
        self.detect_time_losses(now);
        if self.pace_armed && self.pace_next <= now {
            self.pace_armed = false; // the next packet may go: the endpoint polls us again
        }
        if self
            .hint_req_at
            .is_some_and(|t| t + self.cfg.initial_rto_ns <= now)
            && self.hint_tries >= HINT_TRIES
        {
            self.hint_req_at = None; // give up on the hint: data goes out without it
        }
        for i in 0..self.paths.len() {
            let p = &mut self.paths[i];
            // Away from home, probe the home plane soon, then less and less often: a plane
            // back after a short outage is taken up again within tens of microseconds, and a
            // long outage costs one probe per path per `probe_interval`.
            let interval = (self.cfg.probe_interval_ns
                >> HOME_PROBE_STEPS.saturating_sub(p.home_probes))
            .max(1);
            if p.plane == p.home_plane {
                p.home_probe_at = None;
                p.home_probes = 0;
            } else if p.home_probe_at.is_none() {
                p.home_probe_at = Some(now + interval);
            } else if p.home_probe_at.is_some_and(|t| t <= now) {
                p.home_probe_at = Some(now + interval);
                if p.state == PathState::Good {
                    p.home_probes = p.home_probes.saturating_add(1);
                    self.ctrl_queue.push_back(Ctrl::HomeProbe(i as u8));
                }
            }
        }
        for i in 0..self.rx_paths.len() {
            if self.rx_paths[i].hint_ack_at.is_some_and(|t| t <= now) {
                self.rx_paths[i].hint_ack_at = None;
                self.rx_paths[i].ack_now = true;
                self.queue_ack(i as u8);
            }
            if let Some(f) = self.rx_paths[i].first_unacked_at {
                if f + self.cfg.ack_delay_ns <= now {
                    self.rx_paths[i].ack_now = true;
                    self.queue_ack(i as u8);
                }
            }
        }
        let mut i = 0;
        while i < self.rnr_wait.len() {
            if self.rnr_wait[i].0 <= now {
                let (_, c) = self.rnr_wait.swap_remove(i);
                self.retx.push_back((c, u8::MAX));
            } else {
                i += 1;
            }
        }
    }

    fn fail_connection(&mut self) {
        self.fail_all(Status::RetryExceeded);
        self.state = ConnState::Failed;
        for p in &mut self.paths {
            p.abandon_all();
            p.probe_at = None;
        }
        self.events.push_back(Event::Failed { conn: self.id });
    }

    /// Start a graceful close: CLOSE once nothing is outstanding.
    pub(crate) fn close(&mut self) {
        if self.state == ConnState::Open {
            self.state = ConnState::Closing;
        }
    }

    // ---- transmit -----------------------------------------------------------------------

    /// Next datagram to send, written into `buf`; returns (length, UDP source port).
    /// Next datagram for one of the NIC ports in `ready`, written into `buf`; returns
    /// (length, UDP source port, NIC port).
    pub(crate) fn poll_transmit(
        &mut self,
        now: u64,
        buf: &mut [u8],
        mem: &mut dyn Memory,
        ready: u64,
    ) -> Option<(usize, u16, u8)> {
        let mask = if self.nic_ports >= 64 {
            u64::MAX
        } else {
            (1u64 << self.nic_ports) - 1
        };
        self.tx_ready = ready & mask;
        self.port_blocked = false;
        if self.tx_ready == 0 {
            self.port_blocked = true;
            return None;
        }
        self.last_tx_port = 0;
        let out = self.poll_transmit_inner(now, buf, mem)?;
        Some((out.0, out.1, self.last_tx_port))
    }

    fn poll_transmit_inner(
        &mut self,
        now: u64,
        buf: &mut [u8],
        mem: &mut dyn Memory,
    ) -> Option<(usize, u16)> {
        // Control and acknowledgements first: they unblock the peer.
        if let Some(x) = self.emit_ctrl(now, buf) {
            return Some(x);
        }
        while let Some(p) = self.ack_queue.pop_front() {
            self.ack_queued[p as usize] = false;
            if let Some(x) = self.emit_ack(now, p, buf) {
                return Some(x);
            }
        }
        if let Some((path, n)) = self.nack_queue.pop_front() {
            let pkt = Packet {
                flags: 0,
                path,
                dst_conn: self.peer_conn,
                body: Body::Nack(n),
            };
            self.last_tx_port = self.ctrl_port(path);
            // Reflect the refused packet's source port, like an ACK.
            let port = self
                .rx_paths
                .get(path as usize)
                .map(|r| r.reply_port)
                .filter(|p| *p != 0)
                .unwrap_or_else(|| path_entropy(self.seed, 0, 0));
            return pkt.emit(buf).ok().map(|l| (l, port));
        }
        if self.state == ConnState::Closing && self.outstanding() == 0 && self.ctrl_at.is_none() {
            self.ctrl_queue.push_back(Ctrl::Close);
            return self.emit_ctrl(now, buf);
        }
        if !matches!(self.state, ConnState::Open | ConnState::Closing) {
            return None;
        }
        self.emit_data(now, buf, mem)
    }

    fn emit_ctrl(&mut self, now: u64, buf: &mut [u8]) -> Option<(usize, u16)> {
        let c = self.ctrl_queue.pop_front()?;
        let port0 = path_entropy(self.seed, 0, 0);
        let (body, path, port, dst) = match c {
            Ctrl::Open | Ctrl::Close => {
                self.ctrl_tries += 1;
                if self.ctrl_tries > self.cfg.open_tries {
                    self.fail_connection();
                    return None;
                }
                self.ctrl_at = Some(now + (self.cfg.open_rto_ns << (self.ctrl_tries - 1).min(3)));
                if matches!(c, Ctrl::Open) {
                    (Body::Open(self.open_repr()), 0, port0, 0)
                } else {
                    (
                        Body::Close(CloseRepr {
                            src_conn: self.id.0,
                            reason: 0,
                        }),
                        0,
                        port0,
                        self.peer_conn,
                    )
                }
            }
            Ctrl::OpenAck => (Body::OpenAck(self.open_repr()), 0, port0, self.peer_conn),
            Ctrl::CloseAck => (
                Body::CloseAck(CloseRepr {
                    src_conn: self.id.0,
                    reason: 0,
                }),
                0,
                port0,
                self.peer_conn,
            ),
            Ctrl::Probe(i) => {
                let p = &mut self.paths[i as usize];
                p.probe_seq = p.probe_seq.wrapping_add(1);
                p.counters.probes_sent += 1;
                (
                    Body::Probe(ProbeRepr {
                        probe_seq: p.probe_seq,
                        ts: now as u32,
                    }),
                    i,
                    p.entropy,
                    self.peer_conn,
                )
            }
            Ctrl::HomeProbe(i) => {
                let p = &mut self.paths[i as usize];
                p.probe_seq = p.probe_seq.wrapping_add(1);
                p.home_probe_seq = Some(p.probe_seq);
                p.counters.probes_sent += 1;
                let (seq, port, home) = (p.probe_seq, p.entropy, p.home_plane);
                let pkt = Packet {
                    flags: 0,
                    path: i,
                    dst_conn: self.peer_conn,
                    body: Body::Probe(ProbeRepr {
                        probe_seq: seq,
                        ts: now as u32,
                    }),
                };
                self.last_tx_port = home;
                return pkt.emit(buf).ok().map(|l| (l, port));
            }
            Ctrl::HintRequest(i) => {
                let p = &mut self.paths[i as usize];
                p.counters.probes_sent += 1;
                (
                    Body::Probe(ProbeRepr {
                        probe_seq: p.probe_seq,
                        ts: (now as u32).max(1),
                    }),
                    i,
                    p.entropy,
                    self.peer_conn,
                )
            }
            Ctrl::ProbeAck(i, pr, reply_port, _) => (
                Body::ProbeAck(ProbeRepr {
                    probe_seq: pr.probe_seq,
                    ts: pr.ts,
                }),
                i,
                reply_port,
                self.peer_conn,
            ),
        };
        self.last_tx_port = match c {
            // An answer goes back on the plane its probe came in on.
            Ctrl::ProbeAck(_, _, _, arrived) if self.tx_ready >> arrived & 1 == 1 => arrived,
            Ctrl::ProbeAck(..) => self.ctrl_port(path),
            // Our own probes test our path's plane.
            _ => self.own_port(path),
        };
        let pkt = Packet {
            flags: if matches!(c, Ctrl::HintRequest(_)) {
                flags::BACKLOG
            } else {
                0
            },
            path,
            dst_conn: dst,
            body,
        };
        pkt.emit(buf).ok().map(|l| (l, port))
    }

    fn emit_ack(&mut self, now: u64, p: u8, buf: &mut [u8]) -> Option<(usize, u16)> {
        let hint = self.hint_for_peer_mbps;
        let rx = &mut self.rx_paths[p as usize];
        // An answer to a hint request is being held: this ACK goes out with it (a cold
        // sender's pilot must not fetch a hint that does not yet count its fellow senders).
        if !rx.ack_now || rx.hint_ack_at.is_some() {
            return None;
        }
        rx.ack_now = false;
        rx.unacked = 0;
        rx.first_unacked_at = None;
        let a = AckRepr {
            cum_psn: rx.cum,
            sack: rx.sack,
            ecn_ce: rx.ce_count,
            rate_hint_mbps: hint,
            ts_echo: rx.ts_echo,
            ack_delay_ns: now.saturating_sub(rx.ts_arrival).min(u32::MAX as u64) as u32,
        };
        self.counters.acks_sent += 1;
        self.last_tx_port = self.ctrl_port(p);
        let pkt = Packet {
            flags: 0,
            path: p,
            dst_conn: self.peer_conn,
            body: Body::Ack(a),
        };
        let port = match self.rx_paths[p as usize].reply_port {
            0 => self.paths[p as usize].entropy,
            r => r,
        };
        pkt.emit(buf).ok().map(|l| (l, port))
    }

    /// Connection-level window: sum of path windows, capped by the receiver's hint.
    fn conn_window(&self) -> f64 {
        let sum: f64 = self.paths.iter().map(|p| p.cwnd).sum();
        if self.peer_hint_mbps != 0 {
            sum.min(self.hint_window().max(self.mtu as f64))
        } else {
            sum
        }
    }

    /// Where a tail-loss probe for silent path `silent` goes: the least-loaded other Good
    /// path with room in the SACK span and a ready NIC port (a black-holed route is then
    /// still probed around), else the silent path itself.
    fn tlp_path(&self, silent: usize) -> usize {
        self.paths
            .iter()
            .enumerate()
            .filter(|(i, p)| {
                *i != silent
                    && p.state == PathState::Good
                    && p.in_span()
                    && p.plane < 64
                    && self.tx_ready >> p.plane & 1 == 1
            })
            .min_by(|a, b| a.1.load().total_cmp(&b.1.load()))
            .map_or(silent, |(i, _)| i)
    }

    /// Pick the path for the next packet: the least-loaded usable path with room, avoiding
    /// `avoid` (the path that just lost this chunk) when another will do.
    fn pick_path(&mut self, bytes: u32, avoid: u8) -> Option<usize> {
        let n = self.paths.len();
        let any_good = self.paths.iter().any(|p| p.state == PathState::Good);
        let mut best: Option<(usize, f64)> = None;
        let mut fallback: Option<(usize, f64)> = None;
        for k in 0..n {
            let i = (self.rr + k) % n;
            let p = &self.paths[i];
            let usable = if any_good {
                p.state == PathState::Good
            } else {
                // Every path is in trouble: keep the least recently failed one going.
                let newest = self.paths.iter().map(|q| q.failed_at).min().unwrap_or(0);
                p.failed_at == newest
            };
            if !usable || !p.has_room(bytes) {
                continue;
            }
            if p.plane >= 64 || self.tx_ready >> p.plane & 1 == 0 {
                self.port_blocked = true; // would go, but its NIC port is full
                continue;
            }
            let l = p.load();
            let slot = if i as u8 == avoid {
                &mut fallback
            } else {
                &mut best
            };
            if slot.is_none_or(|(_, bl)| l < bl) {
                *slot = Some((i, l));
            }
        }
        let pick = best.or(fallback).map(|(i, _)| i)?;
        self.rr = (pick + 1) % n;
        Some(pick)
    }

    fn chunk_needed(&self, c: &ChunkRef) -> bool {
        match *c {
            ChunkRef::Req { stream, msn, chunk } => self.streams.get(&stream).is_some_and(|s| {
                let d = msn.wrapping_sub(s.base_msn) as usize;
                s.wrs
                    .get(d)
                    .is_some_and(|w| w.status.is_none() && !w.acked.get(chunk))
            }),
            ChunkRef::Resp { stream, msn, chunk } => self
                .streams
                .get(&stream)
                .and_then(|s| s.responses.get(&msn))
                .is_some_and(|r| !r.acked.get(chunk)),
        }
    }

    /// Next new request chunk from the active streams (round robin by packet).
    /// WR at index `d` may not start yet: it is beyond the receiver's stream window, or it
    /// is fenced behind an unfinished READ or ATOMIC (verbs `IBV_SEND_FENCE`).
    fn blocked(s: &Stream, d: usize, window: u32) -> bool {
        if d as u32 >= window {
            return true;
        }
        let Some(w) = s.wrs.get(d) else {
            return false;
        };
        if !w.wr.fence && !w.read_fence {
            return false;
        }
        s.wrs.iter().take(d).any(|x| {
            !x.done()
                && match x.wr.op {
                    SendOp::Read { .. } => true,
                    SendOp::FetchAdd { .. } | SendOp::CmpSwap { .. } => w.wr.fence,
                    _ => false,
                }
        })
    }

    fn next_new_chunk(&mut self) -> Option<ChunkRef> {
        let window = self.cfg.stream_window;
        while let Some(id) = self.active.pop_front() {
            let Some(s) = self.streams.get_mut(&id) else {
                continue;
            };
            let mut found = None;
            while s.cursor_msn != s.next_msn && s.sendable(s.cursor_msn) {
                let d = s.cursor_msn.wrapping_sub(s.base_msn) as usize;
                let Some(w) = s.wrs.get(d) else { break };
                if w.status.is_some() || s.cursor_chunk >= w.chunks {
                    s.cursor_msn = s.cursor_msn.wrapping_add(1);
                    s.cursor_chunk = 0;
                    continue;
                }
                if s.cursor_chunk == 0 && Self::blocked(s, d, window) {
                    break; // re-activated by complete_requests when the block clears
                }
                found = Some(ChunkRef::Req {
                    stream: id,
                    msn: s.cursor_msn,
                    chunk: s.cursor_chunk,
                });
                s.cursor_chunk += 1;
                break;
            }
            let d = s.cursor_msn.wrapping_sub(s.base_msn) as usize;
            let more = s.cursor_msn != s.next_msn
                && s.sendable(s.cursor_msn)
                && !(s.cursor_chunk == 0 && Self::blocked(s, d, window));
            if more {
                self.active.push_back(id);
            } else {
                s.in_active = false;
            }
            if found.is_some() {
                return found;
            }
        }
        None
    }

    fn emit_data(
        &mut self,
        now: u64,
        buf: &mut [u8],
        mem: &mut dyn Memory,
    ) -> Option<(usize, u16)> {
        // A tail-loss probe goes first and past the windows and the pacer: the flight it asks
        // about is what fills them, and a probe held back until the RTO is no probe at all.
        if let Some((c, p)) = self.tlp.take() {
            if self.pilot_sent_at.is_some() {
                // The pilot sent again: its copy's ACK tells the queueing now.
                self.pilot_sent_at = Some(now);
            }
            if self.chunk_needed(&c) {
                let via = self.tlp_path(p as usize);
                match self.build_packet(now, c, p, true, Some(via), buf, mem) {
                    Ok(Some(x)) => return Some(x),
                    // Its NIC port is full: next time (the endpoint polls again when it
                    // drains); other paths' ports may still take data meanwhile.
                    Ok(None) if self.port_blocked => self.tlp = Some((c, p)),
                    // The SACK span is full (the RTO covers that flight) or the WR failed.
                    Ok(None) | Err(()) => {}
                }
            }
        }
        let inflight: u64 = self.paths.iter().map(|p| p.inflight_bytes).sum();
        if inflight > 0 && inflight as f64 + self.mtu as f64 > self.conn_window() {
            return None;
        }
        // Cold start: with no ACK heard (or none for `cold_after`), ask the receiver for its
        // fair-share hint with a small PROBE and send data once its ACK arrives. N senders
        // starting together then put N tiny probes, not N windows, into the receiver's queue.
        let cold =
            self.last_ack_at == 0 || now.saturating_sub(self.last_ack_at) > self.cfg.cold_after_ns;
        let waiting = self
            .hint_req_at
            .is_some_and(|t| now < t + self.cfg.initial_rto_ns);
        if waiting {
            // Only the pilot goes before the answer: one data packet, on the request's path
            // (behind the request, so the receiver holds its ACK with the answer's).
            if inflight > 0 || self.pilot_at.is_none_or(|t| t > now) {
                return None;
            }
            self.pilot_at = None;
            let path = (self.pilot_path as usize).min(self.paths.len() - 1);
            while let Some((chunk, _, retx)) = self.next_chunk() {
                match self.build_packet(now, chunk, u8::MAX, retx, Some(path), buf, mem) {
                    Ok(Some(x)) => {
                        self.pilot_sent_at = Some(now);
                        return Some(x);
                    }
                    Ok(None) => {
                        self.retx.push_front((chunk, u8::MAX));
                        self.pilot_at = Some(now); // its NIC port is busy: next time
                        return None;
                    }
                    Err(()) => continue,
                }
            }
            return None;
        }
        // A request goes out when the connection is cold and has data, or again while the
        // pilot is all that went out (the request or its answer was lost).
        if cold
            && self.has_unsent()
            && self.hint_tries < HINT_TRIES
            && (inflight == 0 || self.hint_tries > 0)
        {
            let p = self
                .paths
                .iter()
                .position(|p| p.state == PathState::Good)
                .unwrap_or(0) as u8;
            if self.hint_tries == 0 {
                self.pilot_path = p;
                self.pilot_sent_at = None;
                self.pilot_at = Some(
                    now + splitmix64(self.seed ^ now ^ 0x9170) % self.cfg.pilot_spread_ns.max(1),
                );
            }
            self.hint_req_at = Some(now);
            self.hint_tries += 1;
            self.ctrl_queue.push_back(Ctrl::HintRequest(p));
            return self.emit_ctrl(now, buf);
        }
        // Paced at the receiver's hint: the rate is what the receiver allots, whatever the
        // RTT (a window of one packet per RTT would favour near senders).
        if self.peer_hint_mbps != 0 && now < self.pace_next {
            return None;
        }
        // Nothing goes out unless some path has room for a full packet.
        self.pick_path(self.mtu, u8::MAX)?;
        loop {
            let (chunk, avoid, retx) = self.next_chunk()?;
            match self.build_packet(now, chunk, avoid, retx, None, buf, mem) {
                Ok(Some(x)) => {
                    self.pilot_sent_at = None;
                    return Some(x);
                }
                Ok(None) => {
                    // No path has room after all: put the chunk back at the front.
                    self.retx.push_front((chunk, avoid));
                    return None;
                }
                Err(()) => continue, // the chunk's WR failed locally; try the next one
            }
        }
    }

    /// The next chunk to send: resends first, then responses, then new request chunks;
    /// returns (chunk, path to avoid, is a resend).
    fn next_chunk(&mut self) -> Option<(ChunkRef, u8, bool)> {
        loop {
            if let Some((c, a)) = self.retx.pop_front() {
                if self.chunk_needed(&c) {
                    return Some((c, a, true));
                }
            } else if let Some(c) = self.resp_queue.pop_front() {
                if self.chunk_needed(&c) {
                    return Some((c, u8::MAX, false));
                }
            } else {
                return self.next_new_chunk().map(|c| (c, u8::MAX, false));
            }
        }
    }

    /// Build the packet of one chunk into `buf`. Ok(None): no path has room. Err: the WR
    /// failed (local memory), already completed with an error. `forced`: this path, past its
    /// window (a tail-loss probe).
    #[allow(clippy::too_many_arguments)]
    fn build_packet(
        &mut self,
        now: u64,
        chunk: ChunkRef,
        avoid: u8,
        retx: bool,
        forced: Option<usize>,
        buf: &mut [u8],
        mem: &mut dyn Memory,
    ) -> Result<Option<(usize, u16)>, ()> {
        let mtu = self.mtu;
        // Work out the headers and where the payload comes from.
        enum Src {
            None,
            Local(SgList, u64),
            Remote(u32, u32, u64),
        }
        let (stream_id, msg, op, plen, src, solicited, ordered) = match chunk {
            ChunkRef::Req {
                stream,
                msn,
                chunk: ci,
            } => {
                let s = self.streams.get(&stream).ok_or(())?;
                let d = msn.wrapping_sub(s.base_msn) as usize;
                let w = s.wrs.get(d).ok_or(())?;
                let off = ci * mtu;
                let plen = match w.wr.op {
                    SendOp::Send { .. } | SendOp::Write { .. } => {
                        w.len.saturating_sub(off).min(mtu)
                    }
                    _ => 0,
                };
                let msg = MsgHeader {
                    stream: s.remote,
                    msn,
                    offset: if plen > 0 { off } else { 0 },
                    length: w.len,
                };
                let op = match w.wr.op {
                    SendOp::Send { imm: None } => DataOp::Send { rsn: w.rsn },
                    SendOp::Send { imm: Some(imm) } => DataOp::SendImm { rsn: w.rsn, imm },
                    SendOp::Write { rkey, raddr, imm } => match imm {
                        None => DataOp::Write {
                            rkey,
                            raddr: raddr.wrapping_add(off as u64),
                        },
                        Some(imm) => DataOp::WriteImm {
                            rkey,
                            raddr: raddr.wrapping_add(off as u64),
                            rsn: w.rsn,
                            imm,
                        },
                    },
                    SendOp::Read { rkey, raddr } => DataOp::ReadReq { rkey, raddr },
                    SendOp::FetchAdd { rkey, raddr, add } => DataOp::FetchAdd { rkey, raddr, add },
                    SendOp::CmpSwap {
                        rkey,
                        raddr,
                        compare,
                        swap,
                    } => DataOp::CmpSwap {
                        rkey,
                        raddr,
                        compare,
                        swap,
                    },
                };
                let msg = match op {
                    DataOp::FetchAdd { .. } | DataOp::CmpSwap { .. } => MsgHeader {
                        length: 8,
                        offset: 0,
                        ..msg
                    },
                    _ => msg,
                };
                let src = if plen > 0 {
                    Src::Local(w.wr.sgl.clone(), off as u64)
                } else {
                    Src::None
                };
                (stream, msg, op, plen, src, w.wr.solicited, w.ordered)
            }
            ChunkRef::Resp {
                stream,
                msn,
                chunk: ci,
            } => {
                let s = self.streams.get(&stream).ok_or(())?;
                let r = s.responses.get(&msn).ok_or(())?;
                let off = ci * mtu;
                let (op, plen, src) = match r.kind {
                    // A zero-length READ reads nothing (and was never checked against a key).
                    RespKind::Read { .. } if r.length == 0 => (DataOp::ReadResp, 0, Src::None),
                    RespKind::Read { rkey, raddr } => {
                        let plen = r.length.saturating_sub(off).min(mtu);
                        (
                            DataOp::ReadResp,
                            plen,
                            Src::Remote(rkey, s.pd, raddr + off as u64),
                        )
                    }
                    RespKind::Atomic { orig } => (DataOp::AtomicResp { orig }, 0, Src::None),
                };
                let msg = MsgHeader {
                    stream: s.remote,
                    msn,
                    offset: if plen > 0 { off } else { 0 },
                    length: r.length,
                };
                (stream, msg, op, plen, src, false, false)
            }
        };
        let pi = match forced {
            // A probe of this path: only the SACK span and the NIC port's room bound it.
            Some(pi) => {
                let p = &self.paths[pi];
                if !p.in_span() {
                    return Ok(None);
                }
                if p.plane >= 64 || self.tx_ready >> p.plane & 1 == 0 {
                    self.port_blocked = true;
                    return Ok(None);
                }
                pi
            }
            None => match self.pick_path(plen.max(1), avoid) {
                Some(pi) => pi,
                None => return Ok(None),
            },
        };
        let last = msg.offset + plen >= msg.length;
        let mut fl = 0;
        if last {
            fl |= flags::LAST;
        }
        if retx {
            fl |= flags::RETX;
        }
        if solicited && last {
            fl |= flags::SOLICITED;
        }
        if ordered {
            fl |= flags::ORDERED;
        }
        if self.has_unsent() {
            fl |= flags::BACKLOG;
        }
        // This packet fills the window: ask for an ACK at once rather than after the
        // receiver's delayed-ACK timer, or a small window idles for that long every round.
        let inflight: u64 = self.paths.iter().map(|p| p.inflight_bytes).sum();
        if forced.is_some() || (inflight + 2 * mtu as u64) as f64 > self.conn_window() {
            fl |= flags::ACK_REQ;
        }
        let path = &self.paths[pi];
        let pkt = Packet {
            flags: fl,
            path: pi as u8,
            dst_conn: self.peer_conn,
            body: Body::Data(DataRepr {
                seq: SeqHeader {
                    psn: path.next_psn,
                    floor: path.floor(),
                    tsval: (now as u32).max(1),
                },
                msg,
                op,
                payload: &[],
            }),
        };
        let h = pkt.emit_headers(buf).map_err(|_| ())?;
        if buf.len() < h + plen as usize + wire::TRAILER_LEN {
            return Err(());
        }
        // Payload straight from registered memory into the packet buffer.
        let dst = &mut buf[h..h + plen as usize];
        let read = match src {
            Src::None => Ok(()),
            Src::Local(sgl, off) => sgl_read(mem, &sgl, off, dst),
            Src::Remote(rkey, pd, addr) => mem.read_remote(pd, rkey, addr, dst),
        };
        if read.is_err() {
            self.local_failure(chunk, stream_id);
            return Err(());
        }
        let len = wire::seal(buf, h + plen as usize);
        if self.peer_hint_mbps != 0 {
            // Token bucket: the hinted rate on wire bytes, a burst of at most PACE_BURST packets.
            let wire = (len + WIRE_OVERHEAD) as f64;
            let gap = (wire * 8000.0 / self.peer_hint_mbps as f64) as u64;
            let burst = gap * (PACE_BURST - 1);
            self.pace_next = self.pace_next.max(now.saturating_sub(burst)) + gap;
            self.pace_armed = self.pace_next > now;
        }
        let entropy = self.paths[pi].entropy;
        self.last_tx_port = self.paths[pi].plane;
        self.paths[pi].on_send(chunk, plen, now, retx);
        self.counters.tx_pkts += 1;
        self.counters.tx_payload_bytes += plen as u64;
        if retx {
            self.counters.retx_pkts += 1;
        }
        Ok(Some((len, entropy)))
    }

    fn local_failure(&mut self, chunk: ChunkRef, stream: u32) {
        match chunk {
            ChunkRef::Req { msn, .. } => {
                if let Some(s) = self.streams.get_mut(&stream) {
                    s.fail_wr(msn, Status::LocalProtection);
                }
                self.complete_requests(stream);
            }
            ChunkRef::Resp { msn, .. } => {
                // The region behind a READ went away after the request was accepted.
                if let Some(s) = self.streams.get_mut(&stream) {
                    s.responses.remove(&msn);
                    let remote = s.remote;
                    self.counters.remote_access_refused += 1;
                    self.nack_queue.push_back((
                        NO_PATH,
                        NackRepr {
                            psn: 0,
                            stream: remote,
                            msn,
                            reason: NackReason::RemoteAccess,
                            rnr_delay: 0,
                        },
                    ));
                }
            }
        }
    }
}

impl Stream {
    /// RSN of the oldest posted receive.
    fn rx_base_rsn(&self) -> u32 {
        self.consumed_rsn
    }
}
