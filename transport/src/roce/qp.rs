//! One RC queue pair: the requester (send queue, go-back-N, timers) and the responder
//! (PSN checking, placement, receive queue, READ/ATOMIC resources, ACK generation).
//! This file holds the QP's state, its verbs-facing calls and the dispatch of packets and
//! timeouts; the two halves' logic is in `qp/requester.rs` and `qp/responder.rs`, the UC and
//! XRC variants in `qp/uc.rs` and `qp/xrc.rs`.

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

mod requester;
mod responder;
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
    /// Give back the queues' spare capacity (what they kept from their longest moment);
    /// whatever they hold stays.
    pub fn compact(&mut self) {
        self.req.sq.shrink_to_fit();
        self.resp.rq.shrink_to_fit();
        self.resp.out.shrink_to_fit();
        self.resp.resources.shrink_to_fit();
    }

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
        self.recv_completion_with(ctx, wr_id, status, op, 0, None);
    }

    /// A receive completion that carries the bytes placed and an immediate.
    fn recv_completion_with(
        &self,
        ctx: &mut Ctx,
        wr_id: u64,
        status: Status,
        op: CompletionOp,
        byte_len: u32,
        imm: Option<u32>,
    ) {
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
            byte_len,
            imm,
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
}

/// `max` in PSN order.
fn psn_max(a: u32, b: u32) -> u32 {
    if psn::lt(a, b) {
        b
    } else {
        a
    }
}
