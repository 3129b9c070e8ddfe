//! A connection to one peer: many ordered streams above, N paths below (spec/transport.md).

use crate::api::*;
use crate::at::At;
use crate::bits::Bits;
use crate::config::ConnConfig;
use crate::counters::{ConnCounters, CounterStore};
use crate::mem::{access, sgl_len, sgl_read, sgl_write, AtomicOp, Memory};
use crate::path::{AckOutcome, ChunkRef, PathState, RxPath, RxVerdict, TxPath};
use crate::wire::{
    self, flags, AckBlock, AckMultiRepr, AckMultiWriter, AckRepr, Body, CloseRepr, DataOp,
    DataRepr, MsgHeader, NackReason, NackRepr, OpenRepr, Packet, ProbeRepr, SeqHeader,
};
use smallvec::SmallVec;
use std::net::Ipv4Addr;

mod ack;
mod cold_start;
mod control;
mod lazy;
mod msn_ring;
pub(crate) mod pick;
mod planes;
pub use planes::NoSuchPlane;
mod recovery;
mod requester;
mod responder;
mod scheduler;
pub(crate) mod slim;
mod streams;
mod timers;
use slim::SlimDeque;
mod uc;

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
    /// `wr.remote_range()`, kept for the overlap scans of later posts.
    target: Option<(u64, u64)>,
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

/// The first request (in MSN order) a responder stream failed to carry out.
#[derive(Clone, Copy, Debug)]
struct RxErr {
    msn: u32,
    /// What the failed request's receive completes with.
    status: Status,
    /// What that request, and any resend of it, is NACKed with.
    reason: NackReason,
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
    wrs: SlimDeque<ReqWr>,
    cursor_msn: u32,
    cursor_chunk: u32,
    // responder
    /// A request this stream accepted could not be carried out in its own memory (its
    /// receive is too short or names memory the stream may not write): the responder side
    /// is in Error from that message on (spec/transport.md §7.1).
    rx_err: Option<RxErr>,
    rx_base_msn: u32,
    rx_msgs: msn_ring::MsnRing<RxMsg>,
    posted: SlimDeque<RecvWr>,
    /// Receives consumed so far: the RSN of `posted[0]`.
    consumed_rsn: u32,
    /// READ / atomic responses executed and not yet acknowledged, by MSN: at most a stream
    /// window of them (spec/transport.md RES-2).
    responses: msn_ring::MsnRing<Resp>,
    /// The next response chunk to send for the first time: (MSN, chunk); responses go out
    /// in MSN order, and one retired before its turn is skipped.
    resp_cursor: (u32, u32),
    /// In `resp_active`.
    in_resp_active: bool,
    /// An unreliable stream (verbs UC): its receive state (`uc.rs`).
    uc: Option<Box<uc::UcRx>>,
}

impl Stream {
    /// The next response chunk to send for the first time, (MSN, chunk), if any, and
    /// whether more may follow it.
    fn next_resp_chunk(&mut self) -> Option<(u32, u32, bool)> {
        let (mut msn, mut chunk) = self.resp_cursor;
        if msn.wrapping_sub(self.responses.base()) >= 1 << 31 {
            // Everything before the ring's base was retired, sent or not.
            (msn, chunk) = (self.responses.base(), 0);
        }
        let found = loop {
            if msn.wrapping_sub(self.responses.base()) as usize >= self.responses.span() {
                break None;
            }
            match self.responses.get(msn) {
                Some(r) if chunk < r.chunks => break Some((msn, chunk, r.chunks)),
                _ => (msn, chunk) = (msn.wrapping_add(1), 0),
            }
        };
        let Some((m, c, chunks)) = found else {
            self.resp_cursor = (msn, chunk);
            return None;
        };
        self.resp_cursor = (m, c + 1);
        let later = (m.wrapping_sub(self.responses.base()) as usize) + 1 < self.responses.span();
        Some((m, c, c + 1 < chunks || later))
    }

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

/// One row of the timer table: a path's own next deadline (RTO, tail-loss probe, probes;
/// `u64::MAX`: none), and what its time-loss deadline needs (the send time of its oldest
/// packet in flight, and the deadline once a later packet has been acknowledged).
#[derive(Clone, Copy, Debug)]
struct PathTimes {
    own: u64,
    oldest: u64,
    time_loss: u64,
}

impl PathTimes {
    const NONE: PathTimes = PathTimes {
        own: u64::MAX,
        oldest: u64::MAX,
        time_loss: u64::MAX,
    };
}

/// One connection: the sans-IO state machine for a peer host.
#[derive(Debug)]
pub struct Connection {
    pub id: ConnId,
    pub peer: Ipv4Addr,
    /// The peer's connection id (0 until known).
    pub peer_conn: u32,
    pub state: ConnState,
    /// Shared by the endpoint's connections that use its default settings.
    cfg: std::sync::Arc<ConnConfig>,
    mtu: u32,
    line_rate_mbps: u32,
    seed: u64,
    /// Paths agreed at the open (0 before), and the built prefix of them (`lazy.rs`): a
    /// path's state is built when it is first used.
    n_paths: u8,
    paths: pick::PathVec,
    rx_paths: Vec<RxPath>,
    /// The window a path not yet built starts with, and every path's largest.
    fresh_cwnd: f64,
    max_cwnd: f64,
    /// The receive side's timer table: per receive path, its hint-answer time, else its
    /// delayed-ACK deadline (`u64::MAX`: none), kept where those change
    /// (`rx_timer`), so a deadline query reads one word per path, not each `RxPath`.
    rx_due: Vec<u64>,
    /// Inline while there is one (`streams.rs`); boxed in a table: its spare buckets then
    /// cost a pointer each, not a stream.
    streams: streams::StreamMap,
    active: SlimDeque<u32>,
    /// Streams with responses still to be sent for the first time (round robin by packet).
    resp_active: SlimDeque<u32>,
    retx: SlimDeque<(ChunkRef, u8)>,
    /// A tail-loss probe due on path `.1`: sent past every window (the window is full of the
    /// very packets whose fate it asks about) and with ACK_REQ.
    tlp: Option<(ChunkRef, u8)>,
    rnr_wait: Vec<(u64, ChunkRef)>,
    ack_queue: SlimDeque<u8>,
    ack_queued: Vec<bool>,
    nack_queue: SlimDeque<(u8, NackRepr)>,
    ctrl_queue: SlimDeque<Ctrl>,
    ctrl_at: At,
    ctrl_tries: u16,
    rr: u8,
    /// NIC ports (planes) of this host; ports with room for the packet being built; the port
    /// the last packet was built for; a path had room but its plane had none.
    nic_ports: u8,
    /// Planes this connection may send on (`set_plane_mask`), all by default.
    plane_mask: u64,
    tx_ready: u64,
    last_tx_port: u8,
    pub(crate) port_blocked: bool,
    /// Fair-share rate the peer's receiver hinted to us (Mbit/s), sender side.
    pub peer_hint_mbps: u32,
    /// Fair-share rate we hint to the peer in our ACKs (set by the endpoint; a join's cap
    /// reaches it before its next transmit, see `Endpoint::settle_hint`).
    pub hint_for_peer_mbps: u32,
    /// The endpoint's join count when `hint_for_peer_mbps` was last settled.
    pub(crate) hint_epoch: u64,
    /// Bytes received and BACKLOG seen since the endpoint last looked (fair share input).
    pub(crate) rx_bytes_window: u64,
    /// Last time data arrived, and last time it carried the BACKLOG flag.
    pub(crate) last_rx_at: u64,
    pub(crate) backlog_at: u64,
    /// Bookkeeping of the endpoint's ready queue, timer heap and fair-share list.
    pub(crate) in_ready: bool,
    pub(crate) timer_at: At,
    /// The next deadline other than the pacer's, as of `timer_at` (`deadlines().1`): a
    /// timeout before it is the pacer's alone.
    pub(crate) work_at: At,
    /// A send deadline (the pilot's, a delayed ACK's, a hint answer's) came due at or before
    /// this time and only waits for a transmit, the connection being in the endpoint's ready
    /// queue: such deadlines are left out until it leaves that queue, so a full NIC (no
    /// transmits asked for) does not fire them again on every event.
    pub(crate) send_due_at: At,
    /// Something happened since `timer_at` was computed (the endpoint recomputes it once per
    /// batch of events, not once per event).
    pub(crate) timer_dirty: bool,
    pub(crate) in_rx_active: bool,
    no_progress_rtos: u16,
    /// Send time of the most recently sent packet acknowledged on any path (RACK).
    rack_time: u64,
    /// Earliest time the next data packet may leave under the hint's pacing, and whether
    /// that is still ahead (then `poll_timeout` reports it).
    pace_next: u64,
    pace_armed: bool,
    /// A released batch of `pace_burst` packets is being sent (more are due now), and the
    /// gap of the last paced packet, which spaces the next release (§2.1).
    pace_batch: bool,
    pace_gap: u64,
    /// How long past `pace_next` a batch is held: `n - 1` gaps (`pace_release_at`), kept
    /// with `pace_gap`.
    pace_hold: u64,
    /// The next packet starts a new paced run (after idling or being held by a window or a
    /// NIC port): it gets no catch-up credit.
    pace_fresh: bool,
    /// When the last ACK arrived (0: never), or a SOLE peer's line-rate start, for the
    /// cold-start rule.
    last_ack_at: u64,
    /// Outstanding cold-start hint request, and how many were sent without an answer.
    hint_req_at: At,
    hint_tries: u8,
    /// Cold start: when the pilot may go (None: sent, or none this cold period), its path,
    /// and when it went.
    pilot_at: At,
    pilot_path: u8,
    pilot_sent_at: At,
    /// This end has no other connection open, so only this connection's peer can send to it:
    /// its OPEN / OPEN_ACK carry SOLE (spec/transport.md §5.8, COLD-4). Set by the endpoint.
    pub(crate) sole_here: bool,
    /// An OPEN or OPEN_ACK with SOLE went out since the last withdrawal.
    sole_sent: bool,
    /// The peer said SOLE and has not withdrawn it: a cold start goes at line rate at once,
    /// without hint request or pilot (no other sender can share the peer's inbound link).
    peer_sole: bool,
    /// The crowd this end's OPEN / OPEN_ACK carry (its endpoint's connection count as a
    /// `wire::crowd_level`; set by the endpoint), the one the last of them carried, and the
    /// peer's (0: unknown): a cold start spreads its pilot by it (§5.8, COLD-6, COLD-7).
    pub(crate) crowd_here: u8,
    crowd_sent: u8,
    peer_crowd: u8,
    /// `peer_crowd` as `handle_packet` last saw it, and since when (µs, wrapping; 0: not
    /// yet): how long the crowd has held, for a crowd start (COLD-8). 32 bits keep the
    /// connection's size; a crowd held past a wrap (71 min) may look fresh for a moment,
    /// which only means a pilot.
    crowd_seen: u8,
    crowd_seen_us: u32,
    /// This cold period started at line rate ÷ crowd (COLD-8): data goes before the hint.
    crowd_started: bool,
    /// A packet from the peer has arrived since the open (an accepting connection learns
    /// it so; an initiator by the OPEN_ACK): only then does a crowd refresh go, so that a
    /// spoofed OPEN gets one OPEN_ACK and no more (spec/security.md §3).
    peer_heard: bool,
    /// Payload bytes of ORDERED packets held for their turn (§7.2), all streams.
    held_bytes: u64,
    /// Bytes in flight on all paths: the sum of their `inflight_bytes`, kept in step by
    /// every call that changes one (`path_changed`), so a packet's window check does not
    /// read every path.
    inflight: u32,
    /// An ACK_REQ went out and no ACK has come back since.
    ack_req_out: bool,
    /// What the last ACK told a path, kept so that an ACK allocates nothing (boxed and
    /// dropped by `compact`: an idle connection holds a pointer, not two vectors).
    ack_scratch: Option<Box<AckOutcome>>,
    /// `conn_window()` as last computed; None once a path's window or RTT, the hint or the
    /// base RTT changed (it is read on every transmit poll, and changes only with ACKs).
    win_cache: std::cell::Cell<Option<f64>>,
    /// The timer table (`timers.rs`): boxed, made on first use and dropped by `compact`
    /// (a cache: rebuilt whole when next needed); `pt_all`: every row must be recomputed.
    timers: Option<Box<timers::TimerTable>>,
    pt_all: bool,
    /// Smallest RTT sample of any path (`u64::MAX`: none yet); per-path minima only fall.
    min_rtt_all: u64,
    /// The peer's ACK hold: a decaying maximum of the holds its ACKs report (ns).
    peer_hold_ns: u64,
    /// Smoothed RTT over every path's samples (ns, 0: none yet).
    srtt_all: f64,
    /// Read with [`Connection::counters`]; folded to its nonzero words by `compact`.
    counters: CounterStore<ConnCounters>,
    pub(crate) completions: SlimDeque<Completion>,
    pub(crate) events: SlimDeque<Event>,
}

/// The inputs of a connection's loss and probe deadlines ([`Connection::timer_basis`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct TimerBasis {
    /// The connection's base RTT.
    base: u64,
    /// Its smoothed RTT over all paths, the floor of a path's own (0: none).
    conn_srtt: u64,
    /// The ACK hold the timers allow for: the configured delay or the peer's longer hold
    /// (never less than the configured one).
    ack_allowance: u64,
    /// A cold sender waits for its pilot's answer until then.
    pilot_wait: Option<u64>,
}

impl TimerBasis {
    /// How far the allowed ACK hold exceeds the configured `ack_delay` (added to the RTO,
    /// whose RTT samples leave the hold out). Kept out of the struct: it is in every
    /// connection's timer table key.
    fn rto_extra(&self, ack_delay: u64) -> u64 {
        self.ack_allowance.saturating_sub(ack_delay)
    }
}

/// `x` rounded up to a quarter octave (four steps per power of two; 0 stays 0).
fn quarter_octave(x: u64) -> u64 {
    if x == 0 {
        return 0;
    }
    let k = 63 - x.leading_zeros();
    // `x.div_ceil(step) * step` with `step` a power of two, without a division (this runs
    // at every timer-table check).
    let s = k.saturating_sub(2);
    (((x - 1) >> s) + 1) << s
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
/// Smallest window the hint allows, in packets.
const HINT_WINDOW_MIN: f64 = 4.0;
/// Store-and-forward hops a pilot's queueing estimate allows for (a 3-tier Clos).
const PILOT_HOPS: u64 = 6;
/// PROBEs a failed path sends `probe_interval` apart, each on a new route, before (or until an
/// answer comes back late) the waits start doubling (PATH-12): enough that a route search
/// where 1 route in 16 works fails with odds of (15/16)^128 ≈ 3e-4.
pub(crate) const PROBE_SEARCH: u8 = 128;

/// The first home probe of a path that left its plane goes `probe_interval` / 2^this after
/// it left; each further one waits twice as long, up to `probe_interval`.
const HOME_PROBE_STEPS: u8 = 5;
/// While the connection has data to send or in flight, a home probe waits at most this many
/// base RTTs (the back-off above is capped), so a repaired plane is back within a few RTTs.
const HOME_PROBE_RTTS: u64 = 4;
/// Unanswered cold-start hint requests before data goes out without a hint.
const HINT_TRIES: u8 = 3;

/// Path index of a NACK that names a request rather than a packet (paths are 0..=254).
pub const NO_PATH: u8 = 255;

/// A late NACK RemoteAccess (spec/transport.md §7): a request accepted earlier could not be
/// carried out after all; it names the request by the requester's stream id and MSN.
fn late_nack(stream: u32, msn: u32) -> (u8, NackRepr) {
    (
        NO_PATH,
        NackRepr {
            psn: 0,
            stream,
            msn,
            reason: NackReason::RemoteAccess,
            rnr_delay: 0,
        },
    )
}

fn nack_index(r: NackReason) -> usize {
    r as usize
}

impl Connection {
    pub(crate) fn new(
        id: ConnId,
        peer: Ipv4Addr,
        peer_conn: u32,
        cfg: std::sync::Arc<ConnConfig>,
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
            n_paths: 0,
            paths: pick::PathVec::default(),
            rx_paths: Vec::new(),
            fresh_cwnd: 0.0,
            max_cwnd: 0.0,
            rx_due: Vec::new(),
            streams: streams::StreamMap::Empty,
            active: SlimDeque::new(),
            resp_active: SlimDeque::new(),
            retx: SlimDeque::new(),
            tlp: None,
            rnr_wait: Vec::new(),
            ack_queue: SlimDeque::new(),
            ack_queued: Vec::new(),
            nack_queue: SlimDeque::new(),
            ctrl_queue: SlimDeque::new(),
            ctrl_at: At::NONE,
            ctrl_tries: 0,
            rr: 0,
            nic_ports: 1,
            plane_mask: u64::MAX,
            tx_ready: 1,
            last_tx_port: 0,
            port_blocked: false,
            peer_hint_mbps: 0,
            hint_for_peer_mbps: 0,
            hint_epoch: 0,
            rx_bytes_window: 0,
            last_rx_at: 0,
            backlog_at: 0,
            in_ready: false,
            timer_at: At::NONE,
            work_at: At::NONE,
            send_due_at: At::NONE,
            timer_dirty: false,
            in_rx_active: false,
            no_progress_rtos: 0,
            held_bytes: 0,
            inflight: 0,
            ack_req_out: false,
            ack_scratch: None,
            win_cache: std::cell::Cell::new(None),
            timers: None,
            pt_all: true,
            min_rtt_all: u64::MAX,
            peer_hold_ns: 0,
            srtt_all: 0.0,
            rack_time: 0,
            pace_next: 0,
            pace_armed: false,
            pace_batch: false,
            pace_gap: 0,
            pace_hold: 0,
            pace_fresh: true,
            last_ack_at: 0,
            hint_req_at: At::NONE,
            hint_tries: 0,
            pilot_at: At::NONE,
            pilot_path: 0,
            pilot_sent_at: At::NONE,
            sole_here: false,
            sole_sent: false,
            peer_sole: false,
            crowd_here: 0,
            crowd_sent: 0,
            peer_crowd: 0,
            crowd_seen: 0,
            crowd_seen_us: 0,
            crowd_started: false,
            peer_heard: false,
            counters: CounterStore::default(),
            completions: SlimDeque::new(),
            events: SlimDeque::new(),
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
        let plane = self.tx_plane(path as usize).unwrap_or(0);
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
            _ => self.tx_plane(path as usize).unwrap_or(0),
        };
        if plane < 64 && self.tx_ready >> plane & 1 == 1 {
            plane
        } else {
            self.tx_ready
                .trailing_zeros()
                .min(self.nic_ports as u32 - 1) as u8
        }
    }

    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// Paths agreed with the peer (some may not be built yet: [`Connection::with_path`]).
    pub fn num_paths(&self) -> usize {
        self.n_paths as usize
    }

    /// Send path `i` if it has been built (used).
    pub fn path(&self, i: usize) -> Option<&TxPath> {
        self.paths.get(i)
    }

    /// The send paths built so far, in index order (a path is built when first used; those
    /// after them are fresh).
    pub fn paths(&self) -> &[TxPath] {
        &self.paths
    }

    /// Force a path into the failed state (operator action, tests).
    pub fn fail_path(&mut self, i: usize, now: u64) {
        self.grow_tx(i);
        if let Some(p) = self.paths.get_mut(i) {
            let before = p.inflight_bytes;
            for c in p.on_rto(now, &self.cfg) {
                self.retx.push_back((c, i as u8));
            }
            p.fail(now);
            self.path_changed(i, before);
        }
        self.pt_all = true;
    }

    /// How long the sender's timers allow the peer to hold an ACK: `ack_delay_ns`, or the
    /// hold its ACKs report when longer, rounded up to a quarter octave so that the timer
    /// table is rebuilt only when it moves by a step, not on every ACK.
    pub(super) fn ack_allowance(&self) -> u64 {
        let d = self.cfg.ack_delay_ns;
        if !self.cfg.peer_hold_timers || self.peer_hold_ns <= d {
            return d;
        }
        quarter_octave(self.peer_hold_ns)
    }

    /// The connection's smoothed RTT over all paths, as the loss timers use it (0: none or
    /// `peer_hold_timers` off), rounded up to a quarter octave like `ack_allowance`.
    pub(super) fn conn_srtt(&self) -> u64 {
        if !self.cfg.peer_hold_timers {
            return 0;
        }
        quarter_octave(self.srtt_all as u64)
    }

    /// What every loss, probe and RTO deadline is computed from, taken once per pass; it is
    /// also the timer table's key (the table is rebuilt when it changes).
    pub(super) fn timer_basis(&self) -> TimerBasis {
        TimerBasis {
            base: self.base_rtt(),
            conn_srtt: self.conn_srtt(),
            ack_allowance: self.ack_allowance(),
            pilot_wait: self.pilot_wait_until(),
        }
    }

    /// The peer's ACK hold as the timers see it (ns): a decaying maximum of reported holds.
    pub fn peer_ack_hold_ns(&self) -> u64 {
        self.peer_hold_ns
    }

    /// Receive path `i`'s delayed-ACK or hint-answer time changed: update its row.
    pub(super) fn rx_timer(&mut self, i: usize) {
        if let (Some(r), Some(d)) = (self.rx_paths.get(i), self.rx_due.get_mut(i)) {
            // An ACK held for a hint answer goes with it (`emit_acks`), not at its delay: a
            // deadline before the answer would fire to no effect.
            *d = match r.hint_ack_at {
                Some(h) => h,
                None => r
                    .first_unacked_at
                    .map_or(u64::MAX, |f| f.saturating_add(self.cfg.ack_delay_ns)),
            };
        }
    }

    /// READ / atomic responses this end holds for its peer: executed, not yet acknowledged
    /// (at most a stream window per stream, spec/transport.md RES-2).
    pub fn responses_held(&self) -> usize {
        self.streams
            .values()
            .map(|s| s.responses.values().count())
            .sum()
    }

    /// Work requests not yet completed, across all streams (send side).
    pub fn outstanding(&self) -> usize {
        self.streams.values().map(|s| s.wrs.len()).sum()
    }

    fn has_unsent(&self) -> bool {
        self.tlp.is_some()
            || !self.retx.is_empty()
            || !self.resp_active.is_empty()
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
        self.note_crowd(now); // one the endpoint set from an OPEN
        if !self.peer_heard {
            // The peer is live at its address: a crowd refresh held back till now goes.
            self.peer_heard = true;
            if self.state != ConnState::Opening {
                self.set_crowd(self.crowd_here);
            }
        }
        // Plane reflection: answers on this path leave on the plane the peer's path arrives
        // on. Only the peer's own packets of that path count (data, probes), not ACKs about
        // our path of the same index.
        if matches!(pkt.body, Body::Data(_) | Body::Probe(_)) {
            self.grow_rx(pkt.path as usize);
            if let Some(rx) = self.rx_paths.get_mut(pkt.path as usize) {
                rx.reply_plane = nic_port;
            }
        }
        match &pkt.body {
            Body::Data(d) => self.on_data(now, pkt.path, pkt.flags, d, src_port, ce, mem),
            Body::Ack(a) => self.on_ack(now, pkt.path, a),
            Body::AckMulti(m) => self.on_ack_multi(now, m),
            Body::Nack(n) => self.on_nack(now, pkt.path, n),
            Body::OpenAck(o) => {
                // After establishment an OPEN_ACK can only withdraw SOLE (a late duplicate
                // must not restore a grant its sender has since taken back).
                if pkt.flags & flags::SOLE == 0 {
                    if self.peer_sole && self.state != ConnState::Opening {
                        // SOLE withdrawn: the peer now has a crowd to refresh, and a sole peer
                        // got no confirmation (OPEN-3): send it now, once.
                        self.queue_open_ack_once();
                    }
                    self.peer_sole = false;
                }
                // A repeated OPEN_ACK also updates the peer's crowd (COLD-6).
                self.peer_crowd = o.crowd;
                self.note_crowd(now);
                if self.state == ConnState::Opening {
                    self.establish(o);
                    self.peer_sole = pkt.flags & flags::SOLE != 0;
                    // The confirmation (OPEN-3): it tells the responder that this end heard its
                    // OPEN_ACK, which lets it send crowd refreshes (COLD-6), and carries this
                    // end's SOLE and crowd as they are now (either may have moved while the
                    // OPEN was out). A SOLE responder has no crowd to refresh: it gets one
                    // only if something moved.
                    let withdraw = self.sole_sent && !self.sole_here;
                    if !self.peer_sole || withdraw || self.crowd_sent != self.crowd_here {
                        self.sole_sent &= !withdraw;
                        self.ctrl_queue.push_back(Ctrl::OpenAck);
                    }
                    self.ctrl_at = At::from(None);
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
                    self.ctrl_at = At::from(None);
                    self.events.push_back(Event::Closed { conn: self.id });
                }
            }
            Body::Probe(p) => {
                let i = pkt.path as usize;
                if i >= self.n_paths as usize {
                    self.counters.live().rx_bad_path += 1;
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
                        self.rx_timer(i);
                    }
                } else {
                    self.ctrl_queue
                        .push_back(Ctrl::ProbeAck(pkt.path, *p, src_port, nic_port));
                }
            }
            Body::ProbeAck(p) => self.on_probe_ack(pkt.path, p),
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
        self.tx_ready = ready & mask & self.plane_mask;
        self.port_blocked = false;
        if self.tx_ready == 0 {
            self.port_blocked = true;
            self.pace_fresh = true;
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
        // Control and acknowledgements first: they unblock the peer. (An empty control
        // queue, nearly every poll, is `emit_ctrl`'s `None` without the call.)
        if !self.ctrl_queue.is_empty() {
            if let Some(x) = self.emit_ctrl(now, buf) {
                return Some(x);
            }
        }
        if let Some(x) = self.emit_acks(now, buf) {
            return Some(x);
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
        if self.state == ConnState::Closing
            && self.outstanding() == 0
            && !self.owes_responses()
            && self.ctrl_at.get().is_none()
        {
            self.ctrl_queue.push_back(Ctrl::Close);
            return self.emit_ctrl(now, buf);
        }
        if !matches!(self.state, ConnState::Open | ConnState::Closing) {
            return None;
        }
        self.emit_data(now, buf, mem)
    }
}

impl Stream {
    /// RSN of the oldest posted receive.
    fn rx_base_rsn(&self) -> u32 {
        self.consumed_rsn
    }
}
