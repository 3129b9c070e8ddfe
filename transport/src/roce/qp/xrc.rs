//! XRC queue pairs (IBTA vol. 1 §9.2 transport prefix 101, §9.3.9; spec/rocev2.md §6.10):
//! the RC machinery with the XRC opcodes, an initiator that only sends requests and a
//! target that only answers them.
//!
//! - Initiator: every request packet (first, resent or not) carries the XRCETH with the
//!   target SRQ number its work request named ([`Qp::post_xrc_send`]); it accepts only XRC
//!   responses.
//! - Target: it accepts only XRC requests and answers with the XRC response opcodes (no
//!   XRCETH). A SEND is placed in the next receive of the target QP (the embedder's: the
//!   verbs shim keeps virtual receives there and binds each to the SRQ the message names) as
//!   the 4-byte XRC SRQ number of its first packet's XRCETH, big-endian, then the payload; its
//!   completion's `byte_len` counts those 4 bytes. WRITE, READ and atomics go to memory
//!   under the QP's `pd` as on RC.
//!
//! A packet whose transport is not the QP's (an RC opcode to an XRC QP, an XRC one to an RC
//! QP, a request to an initiator, a response to a target) is dropped and counted
//! (`rx_wrong_transport`).

use super::*;
use crate::roce::wire::{Xrceth, XRCETH_LEN};

/// Which end of an XRC pair a QP is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XrcRole {
    /// XRC_SEND (verbs `IBV_QPT_XRC_SEND`): sends requests, no receive queue.
    Initiator,
    /// XRC_RECV (verbs `IBV_QPT_XRC_RECV`): answers requests, no send queue.
    Target,
}

/// Length of the XRC SRQ number a target places before a SEND's payload.
pub const XRC_HDR_LEN: u32 = 4;

impl Qp {
    /// Make this QP an XRC QP (before it has sent or received anything).
    pub(crate) fn set_xrc(&mut self, role: XrcRole) {
        self.xrc = Some(role);
    }

    pub(crate) fn xrc_role(&self) -> Option<XrcRole> {
        self.xrc
    }

    /// Queue a request of an XRC initiator for target SRQ `srqn`.
    pub fn post_xrc_send(&mut self, wr: SendWr, srqn: u32) -> Result<(), PostError> {
        if self.xrc != Some(XrcRole::Initiator) {
            return Err(PostError::Unsupported);
        }
        self.queue_send(wr, srqn & wire::QPN_MASK)
    }

    /// Whether `pkt`'s transport is this QP's (counted when not).
    pub(super) fn xrc_accepts(&self, ctx: &mut Ctx, pkt: &Packet) -> bool {
        let op = pkt.bth.opcode;
        let ok = match self.xrc {
            _ if op == Opcode::Cnp => true,
            None => !pkt.bth.xrc,
            Some(XrcRole::Initiator) => pkt.bth.xrc && op.is_response(),
            Some(XrcRole::Target) => pkt.bth.xrc && !op.is_response(),
        };
        if !ok {
            ctx.counters.rx_wrong_transport += 1;
        }
        ok
    }

    /// An XRC initiator's XRCETH for its request `w`, written at `buf[h..]`: the new `h`.
    pub(super) fn xrc_emit_xrceth(&self, srqn: u32, buf: &mut [u8], h: usize) -> Option<usize> {
        if self.xrc != Some(XrcRole::Initiator) {
            return Some(h);
        }
        Xrceth::new(srqn).emit(&mut buf[h..]).ok()?;
        Some(h + XRCETH_LEN)
    }

    /// A target's SEND starts in receive `wqe`: place the XRC SRQ number first. `false` when
    /// the receive cannot take it (the caller has then failed the message).
    pub(super) fn xrc_place_srqn(&mut self, ctx: &mut Ctx, pkt: &Packet) -> bool {
        if self.xrc != Some(XrcRole::Target) {
            return true;
        }
        let srqn = pkt.ext.xrceth.map_or(0, |x| x.srqn);
        let InMsg::Send { wqe, offset } = &mut self.resp.in_msg else {
            return true;
        };
        if sgl_write(ctx.mem, self.pd, &wqe.sgl, 0, &srqn.to_be_bytes()).is_err() {
            // The SRQ it names is not one of the target's domain, or it has no entry.
            let id = wqe.wr_id;
            self.resp.in_msg = InMsg::None;
            self.recv_completion(ctx, id, Status::LocalProtection, CompletionOp::Recv);
            self.responder_fatal(ctx, NakCode::RemoteOperationalError, pkt.bth.psn);
            return false;
        }
        *offset = XRC_HDR_LEN;
        true
    }
}
