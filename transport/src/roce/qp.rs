//! One RC queue pair: the requester (send queue, go-back-N, timers) and the responder
//! (PSN checking, placement, receive queue, READ/ATOMIC resources, ACK generation).

use super::wire::{
    self, psn, Aeth, AtomicEth, Bth, Flow, NakCode, OpKind, Opcode, Packet, Position, Reth,
    Syndrome, AETH_LEN, ATOMIC_ACK_ETH_LEN, ATOMIC_ETH_LEN, BTH_LEN, ICRC_LEN, IMM_LEN,
    IPV4_HEADER_LEN, RETH_LEN,
};
use super::{RoceConfig, RoceCounters};
use crate::api::*;
use crate::mem::{access, sgl_len, sgl_read, sgl_write, AtomicOp, MemError, Memory};
use std::collections::VecDeque;
use std::net::Ipv4Addr;

mod uc;
mod xrc;
pub use xrc::{XrcRole, XRC_HDR_LEN};

/// What a QP method needs from its endpoint.
pub(crate) struct Ctx<'a> {
    pub cfg: &'a RoceConfig,
    pub mem: &'a mut dyn Memory,
    pub completions: &'a mut VecDeque<Completion>,
    pub counters: &'a mut RoceCounters,
    pub now: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    /// Ready to send (and receive).
    Rts,
    /// Error: work requests were flushed; packets are dropped.
    Error,
}

/// A posted send work request.
#[derive(Debug)]
struct Wqe {
    wr: SendWr,
    len: u32,
    /// PSNs the request consumes: packets of a SEND/WRITE, response packets of a READ, 1 for
    /// an atomic.
    npkts: u32,
    first_psn: u32,
    /// Its first packet went out once (READ/ATOMIC: counted against max_rd_atomic).
    sent_once: bool,
    /// READ response packets received in order (1 for an answered atomic).
    resp_pkts: u32,
    /// It modifies memory an earlier READ still outstanding at posting reads: it starts only
    /// once no earlier READ is outstanding.
    read_fence: bool,
    /// XRC initiator: the target SRQ number its packets' XRCETH carries.
    srqn: u32,
}

impl Wqe {
    fn is_rd_atomic(&self) -> bool {
        matches!(
            self.wr.op,
            SendOp::Read { .. } | SendOp::FetchAdd { .. } | SendOp::CmpSwap { .. }
        )
    }
    fn is_read(&self) -> bool {
        matches!(self.wr.op, SendOp::Read { .. })
    }
    fn is_atomic(&self) -> bool {
        matches!(self.wr.op, SendOp::FetchAdd { .. } | SendOp::CmpSwap { .. })
    }
    fn end_psn(&self) -> u32 {
        psn::add(self.first_psn, self.npkts)
    }
    fn last_psn(&self) -> u32 {
        psn::add(self.first_psn, self.npkts - 1)
    }
    fn contains(&self, p: u32) -> bool {
        let d = psn::diff(p, self.first_psn);
        d >= 0 && (d as u32) < self.npkts
    }
    fn completion_op(&self) -> CompletionOp {
        match self.wr.op {
            SendOp::Send { .. } => CompletionOp::Send,
            SendOp::Write { .. } => CompletionOp::Write,
            SendOp::Read { .. } => CompletionOp::Read,
            SendOp::FetchAdd { .. } => CompletionOp::FetchAdd,
            SendOp::CmpSwap { .. } => CompletionOp::CmpSwap,
        }
    }
}

/// Packets a message of `len` bytes takes at `mtu` (at least 1).
pub(crate) fn npkts(len: u32, mtu: u32) -> u32 {
    len.div_ceil(mtu).max(1)
}

#[derive(Debug)]
struct Requester {
    sq: VecDeque<Wqe>,
    /// A request was ever queued: the send PSN is fixed from then on (`set_sq_psn`).
    used: bool,
    /// Index in `sq` of the request the next packet belongs to (== sq.len() when done).
    cur: usize,
    /// PSN of the next packet to send.
    snd_psn: u32,
    /// PSN the next posted request starts at.
    next_alloc: u32,
    /// One past the highest PSN sent: packets below it are retransmissions.
    hw_psn: u32,
    /// Oldest PSN not yet acknowledged.
    una: u32,
    retry_left: u8,
    rnr_left: u8,
    /// Local ACK timer deadline.
    timer: Option<u64>,
    /// RNR wait: nothing is sent before this.
    rnr_until: Option<u64>,
    rd_atomic_inflight: u32,
    since_ack_req: u32,
    /// After a re-issue for a missing READ response: how many more out-of-order responses
    /// to discard before another gap may re-issue again. The responses the responder sent
    /// before it saw the re-issue (at most the PSNs then in flight) arrive first and are no
    /// news; once that many passed, a gap is in the re-issue's own responses. Cleared on
    /// progress.
    gap_skip: Option<u32>,
}

/// The message being received.
#[derive(Debug)]
enum InMsg {
    None,
    Send {
        wqe: RecvWr,
        offset: u32,
    },
    Write {
        rkey: u32,
        va: u64,
        remaining: u32,
        total: u32,
    },
}

/// A remembered READ or ATOMIC, for duplicates (IBTA responder resources).
#[derive(Clone, Copy, Debug)]
enum Resource {
    Read {
        first: u32,
        n: u32,
        va: u64,
        rkey: u32,
        len: u32,
        msn: u32,
    },
    Atomic {
        psn: u32,
        orig: u64,
        msn: u32,
    },
}

/// READ responses being sent.
#[derive(Clone, Copy, Debug)]
struct ReadOut {
    /// PSN of the READ request: response `k` has PSN first + k.
    first: u32,
    n: u32,
    next: u32,
    /// One past the highest response PSN sent (lower ones are resends).
    hw: u32,
    va: u64,
    rkey: u32,
    len: u32,
    msn: u32,
    /// Started by a duplicate request: every packet is a resend.
    replay: bool,
}

/// A queued responder packet.
#[derive(Clone, Copy, Debug)]
enum RespItem {
    Ack {
        psn: u32,
        syndrome: Syndrome,
        msn: u32,
    },
    AtomicAck {
        psn: u32,
        msn: u32,
        orig: u64,
        replay: bool,
    },
    Read(ReadOut),
}

#[derive(Debug)]
struct Responder {
    /// Expected PSN.
    epsn: u32,
    /// Messages completed (24 bits).
    msn: u32,
    rq: VecDeque<RecvWr>,
    in_msg: InMsg,
    /// A PSN sequence error NAK (or an RNR NAK) was sent for the current gap.
    nak_sent: bool,
    /// In-order packets since the last ACK.
    unacked: u32,
    out: VecDeque<RespItem>,
    resources: VecDeque<Resource>,
    /// UC: the message in progress lost a packet; packets are dropped until the next FIRST
    /// or ONLY.
    uc_drop: bool,
}

/// One RC queue pair in RTS (or Error).
#[derive(Debug)]
pub(crate) struct Qp {
    pub conn: ConnId,
    pub peer: Ipv4Addr,
    pub local_qpn: u32,
    pub remote_qpn: u32,
    pub pd: u32,
    pub src_port: u16,
    pub state: QpState,
    mtu: u32,
    req: Requester,
    resp: Responder,
    /// Alternates READ responses and requests when both have packets.
    prefer_req: bool,
    /// An unreliable connected QP (UC opcodes, no ACKs, no retransmission: `uc.rs`).
    uc: bool,
    /// An XRC QP (XRC opcodes: `xrc.rs`).
    xrc: Option<XrcRole>,
    /// The connection manager saw this QP's connection end (the peer's DREQ, its DREP, or
    /// our DREQ's retries running out): "retry_cnt 7 = forever" no longer applies, since
    /// nobody will answer a retry once the peer's process is gone (spec/rocev2.md §10).
    peer_gone: bool,
}

impl Qp {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cfg: &RoceConfig,
        conn: ConnId,
        peer: Ipv4Addr,
        local_qpn: u32,
        remote_qpn: u32,
        pd: u32,
        sq_psn: u32,
        rq_psn: u32,
        src_port: u16,
    ) -> Qp {
        let sq_psn = sq_psn & wire::PSN_MASK;
        Qp {
            conn,
            peer,
            local_qpn,
            remote_qpn,
            pd,
            src_port,
            state: QpState::Rts,
            mtu: cfg.effective_mtu(),
            req: Requester {
                sq: VecDeque::new(),
                used: false,
                cur: 0,
                snd_psn: sq_psn,
                next_alloc: sq_psn,
                hw_psn: sq_psn,
                una: sq_psn,
                retry_left: cfg.retry_cnt,
                rnr_left: cfg.rnr_retry,
                timer: None,
                rnr_until: None,
                rd_atomic_inflight: 0,
                since_ack_req: 0,
                gap_skip: None,
            },
            resp: Responder {
                epsn: rq_psn & wire::PSN_MASK,
                msn: 0,
                rq: VecDeque::new(),
                in_msg: InMsg::None,
                nak_sent: false,
                unacked: 0,
                out: VecDeque::new(),
                resources: VecDeque::new(),
                uc_drop: false,
            },
            prefer_req: false,
            uc: false,
            xrc: None,
            peer_gone: false,
        }
    }

    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// Use path MTU `mtu` (rounded down to a power of two in 256..=4096), as verbs'
    /// `path_mtu` sets it; only before the QP has sent or received anything.
    pub(crate) fn set_mtu(&mut self, mtu: u32) {
        let m = mtu.clamp(256, 4096);
        self.mtu = 1 << (31 - m.leading_zeros());
    }

    /// Requests posted and not yet completed.
    pub fn outstanding_wrs(&self) -> usize {
        self.req.sq.len()
    }

    /// (next PSN to send, oldest unacknowledged PSN, expected PSN of the responder).
    pub fn psns(&self) -> (u32, u32, u32) {
        (self.req.snd_psn, self.req.una, self.resp.epsn)
    }

    /// Start the send queue at `psn` (verbs RTS's `sq_psn` for a QP created before it knew
    /// it, as a responder only). Only while it has never queued a request (`Unsupported`
    /// after): a PSN already on the wire cannot move.
    pub fn set_sq_psn(&mut self, psn: u32) -> Result<(), PostError> {
        if self.req.used {
            return Err(PostError::Unsupported);
        }
        let psn = psn & wire::PSN_MASK;
        let r = &mut self.req;
        r.snd_psn = psn;
        r.next_alloc = psn;
        r.hw_psn = psn;
        r.una = psn;
        Ok(())
    }

    // ------------------------------------------------------------------ posting

    pub fn post_send(&mut self, wr: SendWr) -> Result<(), PostError> {
        if self.xrc.is_some() {
            // An initiator's requests name their SRQ (post_xrc_send); a target sends none.
            return Err(PostError::Unsupported);
        }
        self.queue_send(wr, 0)
    }

    fn queue_send(&mut self, wr: SendWr, srqn: u32) -> Result<(), PostError> {
        if self.state != QpState::Rts {
            return Err(PostError::StreamInError);
        }
        self.req.used = true;
        let len = wr.len();
        if self.uc && !matches!(wr.op, SendOp::Send { .. } | SendOp::Write { .. }) {
            return Err(PostError::Unsupported);
        }
        let atomic = matches!(wr.op, SendOp::FetchAdd { .. } | SendOp::CmpSwap { .. });
        if len > (1u64 << 31) || (atomic && len != 8) {
            return Err(PostError::InvalidLength);
        }
        let len = len as u32;
        let n = if atomic { 1 } else { npkts(len, self.mtu) };
        let first_psn = self.req.next_alloc;
        self.req.next_alloc = psn::add(first_psn, n);
        // A WRITE or atomic over the source of an earlier READ still outstanding waits for
        // it, as if fenced: a responder re-executes a READ it receives again after a loss
        // (IBTA), which would then read this request's data.
        let read_fence = self
            .req
            .sq
            .iter()
            .any(|x| x.is_read() && x.wr.remote_range().is_some_and(|r| wr.overwrites_read(r)));
        self.req.sq.push_back(Wqe {
            wr,
            len,
            npkts: n,
            first_psn,
            sent_once: false,
            resp_pkts: 0,
            read_fence,
            srqn,
        });
        Ok(())
    }

    pub fn post_recv(&mut self, wr: RecvWr) -> Result<(), PostError> {
        if self.xrc == Some(XrcRole::Initiator) {
            return Err(PostError::Unsupported);
        }
        if self.state != QpState::Rts {
            return Err(PostError::StreamInError);
        }
        self.resp.rq.push_back(wr);
        Ok(())
    }

    // ------------------------------------------------------------------ errors

    fn complete(&self, ctx: &mut Ctx, w: &Wqe, status: Status) {
        if status == Status::Success {
            ctx.counters.completions_ok += 1;
            if !w.wr.signaled {
                return;
            }
        } else {
            ctx.counters.completions_err += 1;
        }
        ctx.completions.push_back(Completion {
            conn: self.conn,
            stream: self.local_qpn,
            wr_id: w.wr.wr_id,
            status,
            op: w.completion_op(),
            byte_len: if status == Status::Success { w.len } else { 0 },
            imm: None,
            ud_src: None,
        });
    }

    fn recv_completion(&self, ctx: &mut Ctx, wr_id: u64, status: Status, op: CompletionOp) {
        if status == Status::Success {
            ctx.counters.completions_ok += 1;
        } else {
            ctx.counters.completions_err += 1;
        }
        ctx.completions.push_back(Completion {
            conn: self.conn,
            stream: self.local_qpn,
            wr_id,
            status,
            op,
            byte_len: 0,
            imm: None,
            ud_src: None,
        });
    }

    /// Move to the error state: request `idx` completes with `status`, every other posted
    /// work request (send and receive, in order) with Flushed. Queued responder packets are
    /// dropped (the caller queues a NAK afterwards when the error is the responder's).
    fn enter_error(&mut self, ctx: &mut Ctx, idx: Option<usize>, status: Status) {
        if self.state == QpState::Error {
            return;
        }
        self.state = QpState::Error;
        let sq = std::mem::take(&mut self.req.sq);
        for (i, w) in sq.iter().enumerate() {
            let st = if Some(i) == idx {
                status
            } else {
                Status::Flushed
            };
            self.complete(ctx, w, st);
        }
        self.req.cur = 0;
        self.req.timer = None;
        self.req.rnr_until = None;
        self.req.rd_atomic_inflight = 0;
        if let InMsg::Send { wqe, .. } = std::mem::replace(&mut self.resp.in_msg, InMsg::None) {
            self.recv_completion(ctx, wqe.wr_id, Status::Flushed, CompletionOp::Recv);
        }
        let rq = std::mem::take(&mut self.resp.rq);
        for r in rq {
            self.recv_completion(ctx, r.wr_id, Status::Flushed, CompletionOp::Recv);
        }
        self.resp.out.clear();
        self.resp.resources.clear();
    }

    /// Responder-detected error (class C/J): NAK `code` for `p`, then the QP goes to error.
    fn responder_fatal(&mut self, ctx: &mut Ctx, code: NakCode, p: u32) {
        self.enter_error(ctx, None, Status::Flushed);
        ctx.counters.fatal_naks_sent += 1;
        self.resp.out.push_back(RespItem::Ack {
            psn: p,
            syndrome: Syndrome::Nak(code),
            msn: self.resp.msn,
        });
    }

    // ------------------------------------------------------------------ timers

    pub fn next_deadline(&self) -> Option<u64> {
        if self.state != QpState::Rts {
            return None;
        }
        match (self.req.timer, self.req.rnr_until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn on_timeout(&mut self, ctx: &mut Ctx) {
        if self.state != QpState::Rts {
            return;
        }
        if self.req.rnr_until.is_some_and(|t| t <= ctx.now) {
            self.req.rnr_until = None;
            ctx.counters.rnr_waits += 1;
        }
        if self.req.timer.is_some_and(|t| t <= ctx.now) {
            self.req.timer = None;
            if self.req.rnr_until.is_none() && psn::lt(self.req.una, self.req.hw_psn) {
                ctx.counters.timeouts += 1;
                self.retry(ctx);
            }
        }
    }

    fn timeout_ns(cfg: &RoceConfig) -> Option<u64> {
        wire::local_ack_timeout_ns(cfg.timeout)
    }

    // ------------------------------------------------------------------ requester: acks

    /// Go back to the oldest unacknowledged PSN, consuming one transport retry.
    fn retry(&mut self, ctx: &mut Ctx) {
        if self.state != QpState::Rts {
            return;
        }
        if self.req.retry_left == 0 {
            self.enter_error(ctx, Some(0), Status::RetryExceeded);
            return;
        }
        if ctx.cfg.retry_cnt != 7 || !ctx.cfg.retry_forever_at_7 || self.peer_gone {
            self.req.retry_left -= 1;
        }
        ctx.counters.go_back_n += 1;
        let una = self.req.una;
        self.relocate(una);
        self.req.timer = None;
    }

    /// The connection manager says this QP's connection ended: from now on every retry
    /// counts, so work the departed peer never acknowledges fails with RETRY_EXC_ERR after
    /// `retry_cnt` retries instead of being retried forever.
    pub(crate) fn peer_gone(&mut self, retry_cnt: u8) {
        if !self.peer_gone {
            self.peer_gone = true;
            self.req.retry_left = retry_cnt;
        }
    }

    /// Point the send cursor at PSN `t` (or the first request after it).
    fn relocate(&mut self, t: u32) {
        let r = &mut self.req;
        r.cur = 0;
        loop {
            let Some(w) = r.sq.get(r.cur) else {
                r.snd_psn = r.next_alloc;
                return;
            };
            if psn::lt(t, w.end_psn()) {
                r.snd_psn = if psn::lt(t, w.first_psn) {
                    w.first_psn
                } else {
                    t
                };
                return;
            }
            r.cur += 1;
        }
    }

    /// Pop the oldest request, completed with `status`.
    fn complete_front(&mut self, ctx: &mut Ctx, status: Status) {
        let Some(w) = self.req.sq.pop_front() else {
            return;
        };
        if w.is_rd_atomic() && w.sent_once {
            self.req.rd_atomic_inflight = self.req.rd_atomic_inflight.saturating_sub(1);
        }
        if self.req.cur > 0 {
            self.req.cur -= 1;
        } else {
            // The cursor was inside the popped request: move it to the next one.
            let next = self
                .req
                .sq
                .front()
                .map_or(self.req.next_alloc, |x| x.first_psn);
            self.req.snd_psn = psn_max(next, self.req.snd_psn);
        }
        self.complete(ctx, &w, status);
        // Everything of the popped request is acknowledged.
        let end = w.end_psn();
        if psn::lt(self.req.una, end) {
            self.req.una = end;
        }
    }

    /// Acknowledge every PSN up to and including `p`. Returns (progress, implicit NAK): the
    /// latter when a READ/ATOMIC at or before `p` still lacks its response.
    fn ack_through(&mut self, ctx: &mut Ctx, p: u32) -> (bool, bool) {
        let mut progress = false;
        while let Some(w) = self.req.sq.front() {
            if psn::lt(p, w.first_psn) {
                break;
            }
            if w.is_rd_atomic() {
                let lower = psn::add(w.first_psn, w.resp_pkts);
                if psn::lt(self.req.una, lower) {
                    self.req.una = lower;
                }
                return (progress, true);
            }
            if psn::le(w.last_psn(), p) {
                self.complete_front(ctx, Status::Success);
                progress = true;
                continue;
            }
            break;
        }
        let new_una = psn::add(p, 1);
        if psn::lt(self.req.una, new_una) {
            self.req.una = new_una;
            progress = true;
        }
        (progress, false)
    }

    fn on_progress(&mut self, ctx: &mut Ctx) {
        let r = &mut self.req;
        r.retry_left = ctx.cfg.retry_cnt;
        r.rnr_left = ctx.cfg.rnr_retry;
        r.gap_skip = None;
        r.timer = if psn::lt(r.una, r.hw_psn) {
            Self::timeout_ns(ctx.cfg).map(|t| ctx.now + t)
        } else {
            None
        };
    }

    /// After acknowledgements: the cursor never points below the oldest unacked PSN.
    fn fix_cursor(&mut self) {
        if psn::lt(self.req.snd_psn, self.req.una) {
            let una = self.req.una;
            self.relocate(una);
        }
    }

    /// `p` lies in [una, hw] (`inclusive_end`) or [una - 1, hw) (ACK range).
    fn in_range(&self, p: u32, lo_minus_one: bool, inclusive_end: bool) -> bool {
        let lo = psn::diff(p, self.req.una);
        let hi = psn::diff(p, self.req.hw_psn);
        (lo >= 0 || (lo_minus_one && lo == -1)) && (hi < 0 || (inclusive_end && hi == 0))
    }

    fn on_response(&mut self, ctx: &mut Ctx, pkt: &Packet) {
        let p = pkt.bth.psn;
        match pkt.bth.opcode.kind() {
            OpKind::Acknowledge => {
                let Some(aeth) = pkt.ext.aeth else { return };
                match aeth.syndrome {
                    Syndrome::Ack { .. } => {
                        ctx.counters.acks_received += 1;
                        self.on_ack(ctx, p);
                    }
                    Syndrome::RnrNak { timer } => {
                        ctx.counters.rnr_naks_received += 1;
                        self.on_rnr(ctx, p, timer);
                    }
                    Syndrome::Nak(NakCode::PsnSequenceError) => {
                        ctx.counters.seq_naks_received += 1;
                        self.on_seq_nak(ctx, p);
                    }
                    Syndrome::Nak(code) => {
                        ctx.counters.fatal_naks_received += 1;
                        self.on_fatal_nak(ctx, p, code);
                    }
                    Syndrome::Reserved(_) => ctx.counters.rx_malformed += 1,
                }
            }
            OpKind::ReadResponse => self.on_read_response(ctx, pkt),
            OpKind::AtomicAcknowledge => self.on_atomic_ack(ctx, pkt),
            _ => {}
        }
    }

    fn on_ack(&mut self, ctx: &mut Ctx, p: u32) {
        if !self.in_range(p, true, false) {
            ctx.counters.rx_stale_responses += 1;
            return;
        }
        let (progress, implicit) = self.ack_through(ctx, p);
        if progress {
            self.on_progress(ctx);
        }
        if implicit && self.state == QpState::Rts {
            ctx.counters.implicit_naks += 1;
            self.on_response_gap(ctx);
        }
        self.fix_cursor();
    }

    fn on_seq_nak(&mut self, ctx: &mut Ctx, p: u32) {
        if self.req.rnr_until.is_some() || !self.in_range(p, false, true) {
            ctx.counters.rx_stale_responses += 1;
            return;
        }
        if p != self.req.una {
            let (progress, implicit) = self.ack_through(ctx, psn::add(p, wire::PSN_MASK));
            if progress {
                self.on_progress(ctx);
            }
            if implicit {
                ctx.counters.implicit_naks += 1;
            }
        }
        if self.state == QpState::Rts && psn::lt(self.req.una, self.req.hw_psn) {
            self.retry(ctx);
        }
        self.fix_cursor();
    }

    fn on_rnr(&mut self, ctx: &mut Ctx, p: u32, timer: u8) {
        if !self.in_range(p, false, false) {
            ctx.counters.rx_stale_responses += 1;
            return;
        }
        if p != self.req.una {
            let (progress, implicit) = self.ack_through(ctx, psn::add(p, wire::PSN_MASK));
            if progress {
                self.on_progress(ctx);
            }
            if implicit {
                ctx.counters.implicit_naks += 1;
                self.retry(ctx);
                self.fix_cursor();
                return;
            }
        }
        if self.req.rnr_left == 0 {
            let idx = self.req.sq.iter().position(|w| w.contains(p));
            self.enter_error(ctx, idx.or(Some(0)), Status::RnrRetryExceeded);
            return;
        }
        if ctx.cfg.rnr_retry != 7 {
            self.req.rnr_left -= 1;
        }
        self.req.rnr_until = Some(ctx.now + wire::rnr_delay_ns(timer));
        self.req.timer = None;
        ctx.counters.go_back_n += 1;
        let una = self.req.una;
        self.relocate(una);
    }

    fn on_fatal_nak(&mut self, ctx: &mut Ctx, p: u32, code: NakCode) {
        if !self.in_range(p, false, false) {
            ctx.counters.rx_stale_responses += 1;
            return;
        }
        if p != self.req.una {
            self.ack_through(ctx, psn::add(p, wire::PSN_MASK));
        }
        let status = match code {
            NakCode::RemoteAccessError => Status::RemoteAccess,
            NakCode::RemoteOperationalError => Status::RemoteOperation,
            _ => Status::RemoteInvalidRequest,
        };
        let idx = self.req.sq.iter().position(|w| w.contains(p));
        self.enter_error(ctx, idx.or(Some(0)), status);
    }

    /// Locate the request holding response PSN `p` and acknowledge everything before it.
    /// Returns false when the packet must be dropped.
    fn prepare_response(&mut self, ctx: &mut Ctx, p: u32) -> bool {
        if !self.in_range(p, false, false) {
            ctx.counters.rx_duplicates += 1;
            return false;
        }
        let Some(i) = self.req.sq.iter().position(|w| w.contains(p)) else {
            ctx.counters.rx_stale_responses += 1;
            return false;
        };
        if i > 0 {
            let before = psn::add(self.req.sq[i].first_psn, wire::PSN_MASK);
            let (progress, implicit) = self.ack_through(ctx, before);
            if progress {
                self.on_progress(ctx);
            }
            if implicit {
                // An earlier READ/ATOMIC lost its response: go back to it, once per gap (the
                // responses of later requests already on their way are not news).
                ctx.counters.implicit_naks += 1;
                self.on_response_gap(ctx);
                return false;
            }
        }
        true
    }

    fn on_read_response(&mut self, ctx: &mut Ctx, pkt: &Packet) {
        let p = pkt.bth.psn;
        if !self.prepare_response(ctx, p) {
            return;
        }
        let Some(w) = self.req.sq.front() else { return };
        if !w.is_read() {
            ctx.counters.rx_stale_responses += 1;
            return;
        }
        let expected = psn::add(w.first_psn, w.resp_pkts);
        let d = psn::diff(p, expected);
        if d < 0 {
            ctx.counters.rx_duplicates += 1;
            return;
        }
        if d > 0 {
            // A response was lost: re-issue the READ from the first missing PSN at once
            // (IBTA lets the requester retry; rxe waits for its timer instead).
            self.on_response_gap(ctx);
            return;
        }
        let k = psn::diff(p, w.first_psn) as u32;
        let pos = Position::of(k, w.npkts);
        let off = k * self.mtu;
        let want = w.len.saturating_sub(off).min(self.mtu) as usize;
        if pos.is_last() != pkt.bth.opcode.position().is_last() || pkt.payload.len() != want {
            ctx.counters.rx_malformed += 1;
            return;
        }
        if sgl_write(ctx.mem, self.pd, &w.wr.sgl, off as u64, pkt.payload).is_err() {
            self.enter_error(ctx, Some(0), Status::LocalProtection);
            return;
        }
        let r = &mut self.req;
        if let Some(w) = r.sq.front_mut() {
            w.resp_pkts += 1;
        }
        r.una = psn::add(p, 1);
        self.on_progress(ctx);
        if pos.is_last() {
            self.complete_front(ctx, Status::Success);
            self.on_progress(ctx);
        }
        self.fix_cursor();
    }

    /// A response beyond the next expected one (its predecessor was lost): re-issue from the
    /// oldest unacknowledged PSN (a READ for the rest of the message, then the requests after
    /// it, whose responses this requester discards out of order), unless a re-issue is
    /// already under way and this may be one of the responses sent before it was seen.
    fn on_response_gap(&mut self, ctx: &mut Ctx) {
        match self.req.gap_skip {
            Some(n) if n > 0 => {
                self.req.gap_skip = Some(n - 1);
                ctx.counters.rx_out_of_order_responses += 1;
            }
            _ => {
                let in_flight = psn::diff(self.req.hw_psn, self.req.una).max(0) as u32;
                ctx.counters.read_gap_retries += 1;
                self.retry(ctx);
                self.fix_cursor();
                self.req.gap_skip = Some(in_flight);
            }
        }
    }

    fn on_atomic_ack(&mut self, ctx: &mut Ctx, pkt: &Packet) {
        let p = pkt.bth.psn;
        if !self.prepare_response(ctx, p) {
            return;
        }
        let Some(w) = self.req.sq.front() else { return };
        if !w.is_atomic() || w.first_psn != p {
            ctx.counters.rx_stale_responses += 1;
            return;
        }
        let Some(orig) = pkt.ext.atomic_ack else {
            return;
        };
        if sgl_write(ctx.mem, self.pd, &w.wr.sgl, 0, &orig.to_ne_bytes()).is_err() {
            self.enter_error(ctx, Some(0), Status::LocalProtection);
            return;
        }
        if let Some(w) = self.req.sq.front_mut() {
            w.resp_pkts = 1;
        }
        self.complete_front(ctx, Status::Success);
        self.on_progress(ctx);
        self.fix_cursor();
    }

    // ------------------------------------------------------------------ responder

    pub fn on_packet(&mut self, ctx: &mut Ctx, pkt: &Packet) {
        if self.state != QpState::Rts {
            ctx.counters.rx_qp_in_error += 1;
            return;
        }
        let op = pkt.bth.opcode;
        if (self.xrc.is_some() || pkt.bth.xrc) && !self.xrc_accepts(ctx, pkt) {
            return;
        }
        if self.uc || pkt.bth.uc {
            self.on_uc_packet(ctx, pkt);
            return;
        }
        if op == Opcode::Cnp {
            ctx.counters.rx_cnp += 1;
        } else if op.is_response() {
            self.on_response(ctx, pkt);
        } else {
            self.on_request(ctx, pkt);
        }
    }

    fn queue_ack(&mut self) {
        let r = &mut self.resp;
        let p = psn::add(r.epsn, wire::PSN_MASK);
        r.unacked = 0;
        if let Some(RespItem::Ack {
            psn,
            syndrome: Syndrome::Ack { .. },
            msn,
        }) = r.out.back_mut()
        {
            // Coalesce with an ACK not sent yet.
            *psn = p;
            *msn = r.msn;
            return;
        }
        r.out.push_back(RespItem::Ack {
            psn: p,
            syndrome: Syndrome::ACK,
            msn: r.msn,
        });
    }

    fn rnr_nak(&mut self, ctx: &mut Ctx, p: u32) {
        ctx.counters.rnr_naks_sent += 1;
        self.resp.nak_sent = true;
        self.resp.out.push_back(RespItem::Ack {
            psn: p,
            syndrome: Syndrome::RnrNak {
                timer: ctx.cfg.min_rnr_timer & 0x1f,
            },
            msn: self.resp.msn,
        });
    }

    fn push_resource(&mut self, ctx: &Ctx, r: Resource) {
        let cap = ctx.cfg.max_dest_rd_atomic.max(1) as usize;
        while self.resp.resources.len() >= cap {
            self.resp.resources.pop_front();
        }
        self.resp.resources.push_back(r);
    }

    fn on_request(&mut self, ctx: &mut Ctx, pkt: &Packet) {
        let p = pkt.bth.psn;
        let d = psn::diff(p, self.resp.epsn);
        if d > 0 {
            ctx.counters.rx_out_of_sequence += 1;
            if !self.resp.nak_sent {
                self.resp.nak_sent = true;
                ctx.counters.seq_naks_sent += 1;
                let epsn = self.resp.epsn;
                self.resp.out.push_back(RespItem::Ack {
                    psn: epsn,
                    syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                    msn: self.resp.msn,
                });
            }
            return;
        }
        if d < 0 {
            ctx.counters.rx_duplicates += 1;
            self.on_duplicate(ctx, pkt);
            return;
        }
        self.resp.nak_sent = false;
        match pkt.bth.opcode.kind() {
            OpKind::Send => self.on_send(ctx, pkt),
            OpKind::Write => self.on_write(ctx, pkt),
            OpKind::ReadRequest => self.on_read_request(ctx, pkt),
            OpKind::CompareSwap | OpKind::FetchAdd => self.on_atomic(ctx, pkt),
            _ => {}
        }
    }

    /// The WRITE a packet at `pos` belongs to, (rkey, next address, bytes left, total): from
    /// its RETH on FIRST/ONLY (with no message in progress), else the one in progress (and no
    /// RETH); `None` for any other combination.
    fn write_state(&self, pos: Position, reth: Option<Reth>) -> Option<(u32, u64, u32, u32)> {
        match (&self.resp.in_msg, reth) {
            (InMsg::None, Some(r)) if pos.is_first() => Some((r.rkey, r.va, r.dma_len, r.dma_len)),
            (
                InMsg::Write {
                    rkey,
                    va,
                    remaining,
                    total,
                },
                None,
            ) if !pos.is_first() => Some((*rkey, *va, *remaining, *total)),
            _ => None,
        }
    }

    /// Payload length rule for packet position `pos` (IBTA vol. 1 §9.7: FIRST and MIDDLE carry
    /// exactly one MTU, LAST 1..=MTU, ONLY 0..=MTU).
    fn length_ok(&self, pos: Position, len: usize) -> bool {
        let mtu = self.mtu as usize;
        match pos {
            Position::First | Position::Middle => len == mtu,
            Position::Last => (1..=mtu).contains(&len),
            Position::Only => len <= mtu,
        }
    }

    fn after_in_order(&mut self, ctx: &mut Ctx, ack_req: bool) {
        self.resp.epsn = psn::add(self.resp.epsn, 1);
        self.resp.unacked += 1;
        let every = ctx.cfg.ack_every;
        if ack_req || (every > 0 && self.resp.unacked >= every) {
            self.queue_ack();
        }
    }

    fn on_send(&mut self, ctx: &mut Ctx, pkt: &Packet) {
        let p = pkt.bth.psn;
        let op = pkt.bth.opcode;
        let pos = op.position();
        let busy = !matches!(self.resp.in_msg, InMsg::None);
        let in_send = matches!(self.resp.in_msg, InMsg::Send { .. });
        if pkt.ext.ieth.is_some()
            || (pos.is_first() && busy)
            || (!pos.is_first() && !in_send)
            || !self.length_ok(pos, pkt.payload.len())
        {
            // Unsupported invalidate, missing FIRST/LAST, or a bad length.
            self.responder_fatal(ctx, NakCode::InvalidRequest, p);
            return;
        }
        if pos.is_first() {
            let Some(wqe) = self.resp.rq.pop_front() else {
                self.rnr_nak(ctx, p);
                return;
            };
            self.resp.in_msg = InMsg::Send { wqe, offset: 0 };
            if !self.xrc_place_srqn(ctx, pkt) {
                return;
            }
        }
        let InMsg::Send { wqe, offset } = &mut self.resp.in_msg else {
            return;
        };
        let plen = pkt.payload.len() as u32;
        // Messages are at most 2^31 bytes (IBTA), so `offset` never overflows.
        if *offset as u64 + plen as u64 > sgl_len(&wqe.sgl).min(1 << 31) {
            let id = wqe.wr_id;
            self.resp.in_msg = InMsg::None;
            self.recv_completion(ctx, id, Status::LocalLength, CompletionOp::Recv);
            self.responder_fatal(ctx, NakCode::InvalidRequest, p);
            return;
        }
        if sgl_write(ctx.mem, self.pd, &wqe.sgl, *offset as u64, pkt.payload).is_err() {
            let id = wqe.wr_id;
            self.resp.in_msg = InMsg::None;
            self.recv_completion(ctx, id, Status::LocalProtection, CompletionOp::Recv);
            self.responder_fatal(ctx, NakCode::RemoteOperationalError, p);
            return;
        }
        *offset += plen;
        self.send_chunk_placed(ctx, pkt, pos.is_last());
        self.after_in_order(ctx, pkt.bth.ack_req);
    }

    /// A SEND chunk is in its receive (the offset already advanced): count it, and on the
    /// message's last packet complete the receive and move to the next message (RC and UC).
    fn send_chunk_placed(&mut self, ctx: &mut Ctx, pkt: &Packet, last: bool) {
        ctx.counters.rx_payload_bytes += pkt.payload.len() as u64;
        if !last {
            return;
        }
        if let InMsg::Send { wqe, offset } = std::mem::replace(&mut self.resp.in_msg, InMsg::None) {
            ctx.counters.completions_ok += 1;
            ctx.completions.push_back(Completion {
                conn: self.conn,
                stream: self.local_qpn,
                wr_id: wqe.wr_id,
                status: Status::Success,
                op: CompletionOp::Recv,
                byte_len: offset,
                imm: pkt.ext.imm,
                ud_src: None,
            });
        }
        self.resp.msn = psn::add(self.resp.msn, 1);
    }

    /// A WRITE chunk is placed at `va`: count it; on the last packet consume a receive for
    /// the immediate and move to the next message, else remember where the next chunk goes
    /// (RC and UC).
    #[allow(clippy::too_many_arguments)]
    fn write_chunk_placed(
        &mut self,
        ctx: &mut Ctx,
        last: bool,
        imm: Option<u32>,
        rkey: u32,
        va: u64,
        plen: u32,
        remaining: u32,
        total: u32,
    ) {
        ctx.counters.rx_payload_bytes += plen as u64;
        if !last {
            self.resp.in_msg = InMsg::Write {
                rkey,
                va: va.wrapping_add(plen as u64),
                remaining: remaining - plen,
                total,
            };
            return;
        }
        self.resp.in_msg = InMsg::None;
        if let Some(imm) = imm {
            if let Some(wqe) = self.resp.rq.pop_front() {
                ctx.counters.completions_ok += 1;
                ctx.completions.push_back(Completion {
                    conn: self.conn,
                    stream: self.local_qpn,
                    wr_id: wqe.wr_id,
                    status: Status::Success,
                    op: CompletionOp::RecvWriteImm,
                    byte_len: total,
                    imm: Some(imm),
                    ud_src: None,
                });
            }
        }
        self.resp.msn = psn::add(self.resp.msn, 1);
    }

    fn on_write(&mut self, ctx: &mut Ctx, pkt: &Packet) {
        let p = pkt.bth.psn;
        let pos = pkt.bth.opcode.position();
        let plen = pkt.payload.len() as u32;
        let busy = !matches!(self.resp.in_msg, InMsg::None);
        if (pos.is_first() && busy) || !self.length_ok(pos, pkt.payload.len()) {
            self.responder_fatal(ctx, NakCode::InvalidRequest, p);
            return;
        }
        let Some((rkey, va, remaining, total)) = self.write_state(pos, pkt.ext.reth) else {
            self.responder_fatal(ctx, NakCode::InvalidRequest, p);
            return;
        };
        let len_ok = if pos.is_last() {
            plen == remaining
        } else {
            plen < remaining
        };
        if !len_ok {
            self.responder_fatal(ctx, NakCode::InvalidRequest, p);
            return;
        }
        if pos.is_first()
            && total > 0
            && ctx
                .mem
                .check_remote(self.pd, rkey, va, total as u64, access::REMOTE_WRITE)
                .is_err()
        {
            self.responder_fatal(ctx, NakCode::RemoteAccessError, p);
            return;
        }
        let imm = pkt.ext.imm;
        if imm.is_some() && self.resp.rq.is_empty() {
            self.rnr_nak(ctx, p);
            return;
        }
        if plen > 0
            && ctx
                .mem
                .write_remote(self.pd, rkey, va, pkt.payload)
                .is_err()
        {
            self.responder_fatal(ctx, NakCode::RemoteAccessError, p);
            return;
        }
        self.write_chunk_placed(ctx, pos.is_last(), imm, rkey, va, plen, remaining, total);
        self.after_in_order(ctx, pkt.bth.ack_req);
    }

    fn rd_atomic_queued(&self) -> usize {
        self.resp
            .out
            .iter()
            .filter(|i| {
                matches!(
                    i,
                    RespItem::Read(ReadOut { replay: false, .. })
                        | RespItem::AtomicAck { replay: false, .. }
                )
            })
            .count()
    }

    fn on_read_request(&mut self, ctx: &mut Ctx, pkt: &Packet) {
        let p = pkt.bth.psn;
        let Some(reth) = pkt.ext.reth else { return };
        if !matches!(self.resp.in_msg, InMsg::None)
            || self.rd_atomic_queued() >= ctx.cfg.max_dest_rd_atomic.max(1) as usize
            || reth.dma_len > (1 << 31)
        {
            self.responder_fatal(ctx, NakCode::InvalidRequest, p);
            return;
        }
        if reth.dma_len > 0
            && ctx
                .mem
                .check_remote(
                    self.pd,
                    reth.rkey,
                    reth.va,
                    reth.dma_len as u64,
                    access::REMOTE_READ,
                )
                .is_err()
        {
            self.responder_fatal(ctx, NakCode::RemoteAccessError, p);
            return;
        }
        let n = npkts(reth.dma_len, self.mtu);
        self.resp.msn = psn::add(self.resp.msn, 1);
        let msn = self.resp.msn;
        self.push_resource(
            ctx,
            Resource::Read {
                first: p,
                n,
                va: reth.va,
                rkey: reth.rkey,
                len: reth.dma_len,
                msn,
            },
        );
        self.resp.out.push_back(RespItem::Read(ReadOut {
            first: p,
            n,
            next: p,
            hw: p,
            va: reth.va,
            rkey: reth.rkey,
            len: reth.dma_len,
            msn,
            replay: false,
        }));
        self.resp.epsn = psn::add(p, n);
        self.resp.unacked = 0;
    }

    fn on_atomic(&mut self, ctx: &mut Ctx, pkt: &Packet) {
        let p = pkt.bth.psn;
        let Some(a) = pkt.ext.atomic else { return };
        if !matches!(self.resp.in_msg, InMsg::None)
            || !a.va.is_multiple_of(8)
            || self.rd_atomic_queued() >= ctx.cfg.max_dest_rd_atomic.max(1) as usize
        {
            self.responder_fatal(ctx, NakCode::InvalidRequest, p);
            return;
        }
        let op = if pkt.bth.opcode == Opcode::FetchAdd {
            AtomicOp::FetchAdd { add: a.swap_add }
        } else {
            AtomicOp::CmpSwap {
                compare: a.compare,
                swap: a.swap_add,
            }
        };
        let orig = match ctx.mem.atomic_remote(self.pd, a.rkey, a.va, op) {
            Ok(v) => v,
            Err(MemError::Misaligned) => {
                self.responder_fatal(ctx, NakCode::InvalidRequest, p);
                return;
            }
            Err(_) => {
                self.responder_fatal(ctx, NakCode::RemoteAccessError, p);
                return;
            }
        };
        self.resp.msn = psn::add(self.resp.msn, 1);
        let msn = self.resp.msn;
        self.push_resource(ctx, Resource::Atomic { psn: p, orig, msn });
        self.resp.out.push_back(RespItem::AtomicAck {
            psn: p,
            msn,
            orig,
            replay: false,
        });
        self.resp.epsn = psn::add(p, 1);
        self.resp.unacked = 0;
    }

    fn on_duplicate(&mut self, ctx: &mut Ctx, pkt: &Packet) {
        let p = pkt.bth.psn;
        // Bound the work a stream of duplicates can queue.
        let cap = 2 * ctx.cfg.max_dest_rd_atomic.max(1) as usize + 8;
        match pkt.bth.opcode.kind() {
            // IBTA C9-105 (as rxe cites it): acknowledge again (when asked), with the latest PSN and MSN.
            OpKind::Send | OpKind::Write if pkt.bth.ack_req => self.queue_ack(),
            OpKind::Send | OpKind::Write => {}
            OpKind::ReadRequest => {
                let Some(reth) = pkt.ext.reth else { return };
                let res = self.resp.resources.iter().find_map(|r| match *r {
                    Resource::Read {
                        first,
                        n,
                        va,
                        rkey,
                        len,
                        msn,
                    } if {
                        let d = psn::diff(p, first);
                        d >= 0 && (d as u32) < n
                    } =>
                    {
                        Some((first, n, va, rkey, len, msn))
                    }
                    _ => None,
                });
                let Some((first, n, va, rkey, len, msn)) = res else {
                    return;
                };
                // The re-issued request must name the rest of the original one.
                let off = psn::diff(p, first) as u64 * self.mtu as u64;
                if reth.rkey != rkey
                    || reth.va != va.wrapping_add(off)
                    || reth.dma_len as u64 != (len as u64).saturating_sub(off)
                {
                    return;
                }
                for item in self.resp.out.iter_mut() {
                    if let RespItem::Read(r) = item {
                        if r.first == first {
                            if psn::lt(p, r.next) {
                                r.next = p;
                            }
                            return;
                        }
                    }
                }
                if self.resp.out.len() < cap {
                    self.resp.out.push_back(RespItem::Read(ReadOut {
                        first,
                        n,
                        next: p,
                        hw: p,
                        va,
                        rkey,
                        len,
                        msn,
                        replay: true,
                    }));
                }
            }
            OpKind::CompareSwap | OpKind::FetchAdd => {
                let res = self.resp.resources.iter().find_map(|r| match *r {
                    Resource::Atomic { psn, orig, msn } if psn == p => Some((orig, msn)),
                    _ => None,
                });
                if let Some((orig, msn)) = res {
                    if self.resp.out.len() < cap {
                        self.resp.out.push_back(RespItem::AtomicAck {
                            psn: p,
                            msn,
                            orig,
                            replay: true,
                        });
                    }
                }
            }
            _ => {}
        }
    }

    // ------------------------------------------------------------------ transmit

    /// Write the ICRC for the canonical headers after `n` bytes; returns the length.
    fn finish(&self, ctx: &Ctx, buf: &mut [u8], n: usize) -> usize {
        let flow = Flow {
            src: ctx.cfg.local_ip,
            dst: self.peer,
            src_port: self.src_port,
            dst_port: wire::UDP_PORT,
        };
        let h = flow.headers(n + ICRC_LEN);
        let c = wire::icrc(&h[..IPV4_HEADER_LEN], &h[IPV4_HEADER_LEN..], &buf[..n]);
        buf[n..n + ICRC_LEN].copy_from_slice(&c.to_le_bytes());
        n + ICRC_LEN
    }

    fn bth(&self, ctx: &Ctx, op: Opcode, p: u32) -> Bth {
        let mut b = Bth::new(op, self.remote_qpn, p);
        b.pkey = ctx.cfg.pkey;
        b.xrc = self.xrc.is_some();
        b
    }

    /// The next packet of this QP, written into `buf`; returns its length.
    pub fn poll_transmit(&mut self, ctx: &mut Ctx, buf: &mut [u8]) -> Option<usize> {
        // ACKs, NAKs and atomic responses first: they are small and unblock the peer.
        if matches!(
            self.resp.out.front(),
            Some(RespItem::Ack { .. } | RespItem::AtomicAck { .. })
        ) {
            return self.next_response(ctx, buf);
        }
        if self.prefer_req {
            if let Some(n) = self.next_request(ctx, buf) {
                self.prefer_req = false;
                return Some(n);
            }
            self.next_response(ctx, buf)
        } else {
            if let Some(n) = self.next_response(ctx, buf) {
                self.prefer_req = true;
                return Some(n);
            }
            self.next_request(ctx, buf)
        }
    }

    fn next_response(&mut self, ctx: &mut Ctx, buf: &mut [u8]) -> Option<usize> {
        let item = *self.resp.out.front()?;
        let mtu = self.mtu as usize;
        if buf.len() < BTH_LEN + AETH_LEN + ATOMIC_ACK_ETH_LEN + mtu + 3 + ICRC_LEN {
            ctx.counters.tx_buffer_too_small += 1;
            return None;
        }
        let n = match item {
            RespItem::Ack { psn, syndrome, msn } => {
                self.resp.out.pop_front();
                if syndrome.is_ack() {
                    ctx.counters.acks_sent += 1;
                }
                let bth = self.bth(ctx, Opcode::Acknowledge, psn);
                bth.emit(buf).ok()?;
                Aeth { syndrome, msn }.emit(&mut buf[BTH_LEN..]).ok()?;
                BTH_LEN + AETH_LEN
            }
            RespItem::AtomicAck {
                psn,
                msn,
                orig,
                replay,
            } => {
                self.resp.out.pop_front();
                ctx.counters.atomic_acks_sent += 1;
                if replay {
                    ctx.counters.retx_pkts += 1;
                }
                let bth = self.bth(ctx, Opcode::AtomicAcknowledge, psn);
                bth.emit(buf).ok()?;
                Aeth {
                    syndrome: Syndrome::ACK,
                    msn,
                }
                .emit(&mut buf[BTH_LEN..])
                .ok()?;
                buf[BTH_LEN + AETH_LEN..BTH_LEN + AETH_LEN + 8]
                    .copy_from_slice(&orig.to_be_bytes());
                BTH_LEN + AETH_LEN + ATOMIC_ACK_ETH_LEN
            }
            RespItem::Read(r) => {
                let k = psn::diff(r.next, r.first) as u32;
                let pos = Position::of(k, r.n);
                let off = k as u64 * self.mtu as u64;
                let plen = (r.len as u64).saturating_sub(off).min(self.mtu as u64) as usize;
                let op = Opcode::read_response(pos);
                let mut bth = self.bth(ctx, op, r.next);
                bth.pad = wire::pad_for(plen);
                bth.emit(buf).ok()?;
                let mut h = BTH_LEN;
                if op.has_aeth() {
                    Aeth {
                        syndrome: Syndrome::ACK,
                        msn: r.msn,
                    }
                    .emit(&mut buf[h..])
                    .ok()?;
                    h += AETH_LEN;
                }
                if plen > 0
                    && ctx
                        .mem
                        .read_remote(
                            self.pd,
                            r.rkey,
                            r.va.wrapping_add(off),
                            &mut buf[h..h + plen],
                        )
                        .is_err()
                {
                    // The region changed since the request was checked.
                    let p = r.next;
                    self.responder_fatal(ctx, NakCode::RemoteAccessError, p);
                    return self.next_response(ctx, buf);
                }
                let e = h + plen + bth.pad as usize;
                buf[h + plen..e].fill(0);
                if r.replay || psn::lt(r.next, r.hw) {
                    ctx.counters.retx_pkts += 1;
                }
                ctx.counters.read_responses_sent += 1;
                ctx.counters.tx_payload_bytes += plen as u64;
                if let Some(RespItem::Read(x)) = self.resp.out.front_mut() {
                    x.next = psn::add(x.next, 1);
                    if psn::lt(x.hw, x.next) {
                        x.hw = x.next;
                    }
                    if psn::diff(x.next, x.first) as u32 >= x.n {
                        self.resp.out.pop_front();
                    }
                }
                e
            }
        };
        Some(self.finish(ctx, buf, n))
    }

    fn next_request(&mut self, ctx: &mut Ctx, buf: &mut [u8]) -> Option<usize> {
        if self.state != QpState::Rts || self.req.rnr_until.is_some() {
            return None;
        }
        let cfg = ctx.cfg;
        let mtu = self.mtu;
        if buf.len()
            < BTH_LEN
                + wire::XRCETH_LEN
                + RETH_LEN
                + IMM_LEN
                + ATOMIC_ETH_LEN
                + mtu as usize
                + 3
                + ICRC_LEN
        {
            ctx.counters.tx_buffer_too_small += 1;
            return None;
        }
        let r = &self.req;
        let w = r.sq.get(r.cur)?;
        let p = r.snd_psn;
        let k = psn::diff(p, w.first_psn).max(0) as u32;
        let is_new = !psn::lt(p, r.hw_psn);
        let op = w.wr.op.clone();
        let (wlen, wn, rd_atomic, solicited) = (w.len, w.npkts, w.is_rd_atomic(), w.wr.solicited);
        let srqn = w.srqn;
        if is_new {
            if psn::diff(p, r.una) >= cfg.max_unacked_psns.max(1) as i32 {
                return None;
            }
            if k == 0 && w.wr.fence && r.sq.iter().take(r.cur).any(|x| x.is_rd_atomic()) {
                return None;
            }
            if k == 0 && w.read_fence && r.sq.iter().take(r.cur).any(|x| x.is_read()) {
                return None;
            }
            if k == 0 && rd_atomic && r.rd_atomic_inflight >= cfg.max_rd_atomic.max(1) {
                return None;
            }
        }
        let fills_window = psn::diff(psn::add(p, 1), r.una) >= cfg.max_unacked_psns.max(1) as i32;
        let periodic = r.since_ack_req.saturating_add(1) >= cfg.ack_req_every.max(1);
        let pos = Position::of(k, wn);
        let mut bth = self.bth(ctx, Opcode::Acknowledge, p);
        let mut h = self.xrc_emit_xrceth(srqn, buf, BTH_LEN)?;
        let mut plen = 0usize;
        // PSNs this packet consumes.
        let mut consumed = 1u32;
        match op {
            SendOp::Send { imm } | SendOp::Write { imm, .. } => {
                let off = k * mtu;
                plen = wlen.saturating_sub(off).min(mtu) as usize;
                let last = pos.is_last();
                let imm = if last { imm } else { None };
                if let SendOp::Write { rkey, raddr, .. } = op {
                    bth.opcode = Opcode::write(pos, imm.is_some());
                    if pos.is_first() {
                        Reth {
                            va: raddr,
                            rkey,
                            dma_len: wlen,
                        }
                        .emit(&mut buf[h..])
                        .ok()?;
                        h += RETH_LEN;
                    }
                } else {
                    bth.opcode = Opcode::send(pos, imm.is_some());
                    bth.solicited = last && solicited;
                }
                if let Some(v) = imm {
                    buf[h..h + IMM_LEN].copy_from_slice(&v.to_be_bytes());
                    h += IMM_LEN;
                }
                // UC asks for no ACK: it has none (IBTA vol. 1 §9.7.2).
                bth.ack_req = !self.uc && (last || periodic || fills_window);
                bth.uc = self.uc;
                let cur = self.req.cur;
                if plen > 0 {
                    let sgl = &self.req.sq[cur].wr.sgl;
                    if sgl_read(ctx.mem, self.pd, sgl, off as u64, &mut buf[h..h + plen]).is_err() {
                        self.enter_error(ctx, Some(cur), Status::LocalProtection);
                        return None;
                    }
                }
            }
            SendOp::Read { rkey, raddr } => {
                let off = k as u64 * mtu as u64;
                bth.opcode = Opcode::ReadRequest;
                bth.ack_req = true;
                Reth {
                    va: raddr.wrapping_add(off),
                    rkey,
                    dma_len: (wlen as u64).saturating_sub(off) as u32,
                }
                .emit(&mut buf[h..])
                .ok()?;
                h += RETH_LEN;
                consumed = wn.saturating_sub(k).max(1);
            }
            SendOp::FetchAdd { rkey, raddr, add } => {
                bth.opcode = Opcode::FetchAdd;
                bth.ack_req = true;
                AtomicEth {
                    va: raddr,
                    rkey,
                    swap_add: add,
                    compare: 0,
                }
                .emit(&mut buf[h..])
                .ok()?;
                h += ATOMIC_ETH_LEN;
            }
            SendOp::CmpSwap {
                rkey,
                raddr,
                compare,
                swap,
            } => {
                bth.opcode = Opcode::CompareSwap;
                bth.ack_req = true;
                AtomicEth {
                    va: raddr,
                    rkey,
                    swap_add: swap,
                    compare,
                }
                .emit(&mut buf[h..])
                .ok()?;
                h += ATOMIC_ETH_LEN;
            }
        }
        bth.pad = wire::pad_for(plen);
        bth.emit(buf).ok()?;
        let e = h + plen + bth.pad as usize;
        buf[h + plen..e].fill(0);

        // Commit: advance the cursor.
        let r = &mut self.req;
        let whole = k + consumed >= wn;
        if let Some(w) = r.sq.get_mut(r.cur) {
            if k == 0 && rd_atomic && !w.sent_once {
                w.sent_once = true;
                r.rd_atomic_inflight += 1;
            }
        }
        r.snd_psn = psn::add(p, consumed);
        if whole {
            r.cur += 1;
        }
        if psn::lt(r.hw_psn, r.snd_psn) {
            r.hw_psn = r.snd_psn;
        }
        if self.uc {
            return Some(self.uc_sent(ctx, buf, e, whole));
        }
        let r = &mut self.req;
        r.since_ack_req = if bth.ack_req {
            0
        } else {
            r.since_ack_req.saturating_add(1)
        };
        if r.timer.is_none() {
            r.timer = Self::timeout_ns(cfg).map(|t| ctx.now + t);
        }
        if !is_new {
            ctx.counters.retx_pkts += 1;
        }
        ctx.counters.tx_payload_bytes += plen as u64;
        Some(self.finish(ctx, buf, e))
    }
}

/// `max` in PSN order.
fn psn_max(a: u32, b: u32) -> u32 {
    if psn::lt(a, b) {
        b
    } else {
        a
    }
}
