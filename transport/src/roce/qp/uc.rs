//! Unreliable connected (UC) queue pairs: the same QP with the UC opcodes (IBTA vol. 1
//! §9.2, transport prefix 001), SEND and RDMA WRITE only, and no acknowledgement in either
//! direction (spec/rocev2.md §6.8).
//!
//! - Requester: every packet is sent once, without AckReq; a work request completes
//!   successfully as soon as its last packet has left (there is nothing to wait for), and no
//!   timer runs.
//! - Responder (IBTA §9.7.7 / rxe's UC rules): a packet whose PSN is not the expected one, or
//!   any packet while the message in progress is being dropped, ends that message: its
//!   partial data stays where it was placed, its receive WQE is reused for the next message
//!   (no completion), and packets are dropped until the next FIRST or ONLY, which starts a
//!   new message whatever its PSN. Errors the RC responder NAKs (no receive posted, a bad
//!   R_Key, a bad length) drop the message silently instead; an overlong SEND completes its
//!   receive with a local length error and a receive buffer that cannot be written with a
//!   local protection error, as for RC, and the rest of that message is dropped.

use super::*;

impl Qp {
    /// Make this QP a UC QP (before it has sent or received anything).
    pub(crate) fn set_uc(&mut self) {
        self.uc = true;
    }

    pub(crate) fn is_uc(&self) -> bool {
        self.uc
    }

    /// A packet `e` bytes long was built for the request at the cursor (`whole`: it was its
    /// last): UC commits it without waiting for anything.
    pub(super) fn uc_sent(
        &mut self,
        ctx: &mut Ctx,
        buf: &mut [u8],
        e: usize,
        whole: bool,
    ) -> usize {
        let r = &mut self.req;
        // Nothing is ever outstanding: the window never closes.
        r.una = r.snd_psn;
        if whole {
            self.complete_front(ctx, Status::Success);
        }
        self.finish(ctx, buf, e)
    }

    /// Abandon the message in progress: its receive WQE goes back to the head of the
    /// receive queue for the next message.
    fn uc_abandon(&mut self, ctx: &mut Ctx) {
        match std::mem::replace(&mut self.resp.in_msg, InMsg::None) {
            InMsg::Send { wqe, .. } => {
                ctx.counters.uc_msgs_dropped += 1;
                self.resp.rq.push_front(wqe);
            }
            InMsg::Write { .. } => ctx.counters.uc_msgs_dropped += 1,
            InMsg::None => {}
        }
    }

    /// Drop the message `pkt` belongs to (and the rest of it).
    fn uc_drop(&mut self, ctx: &mut Ctx) {
        self.uc_abandon(ctx);
        self.resp.uc_drop = true;
    }

    pub(super) fn on_uc_packet(&mut self, ctx: &mut Ctx, pkt: &Packet) {
        let kind = pkt.bth.opcode.kind();
        if !self.uc || !pkt.bth.uc || !matches!(kind, OpKind::Send | OpKind::Write) {
            // An RC packet to a UC QP or a UC packet to an RC QP: the wrong transport.
            ctx.counters.rx_bad_bth += 1;
            return;
        }
        let p = pkt.bth.psn;
        let pos = pkt.bth.opcode.position();
        if p != self.resp.epsn || self.resp.uc_drop {
            if p != self.resp.epsn {
                ctx.counters.rx_out_of_sequence += 1;
            }
            self.uc_abandon(ctx);
            if !pos.is_first() {
                self.resp.uc_drop = true;
                ctx.counters.uc_pkts_dropped += 1;
                return;
            }
            // Resynchronise on the first packet of a message.
            self.resp.uc_drop = false;
        }
        self.resp.epsn = psn::add(p, 1);
        if !self.length_ok(pos, pkt.payload.len()) {
            ctx.counters.rx_malformed += 1;
            self.uc_drop(ctx);
            return;
        }
        match kind {
            OpKind::Send => self.on_uc_send(ctx, pkt),
            _ => self.on_uc_write(ctx, pkt),
        }
    }

    fn on_uc_send(&mut self, ctx: &mut Ctx, pkt: &Packet) {
        let pos = pkt.bth.opcode.position();
        let in_send = matches!(self.resp.in_msg, InMsg::Send { .. });
        if pos.is_first() {
            // A FIRST or ONLY while a message is in progress: that one lost its end.
            self.uc_abandon(ctx);
            let Some(wqe) = self.resp.rq.pop_front() else {
                // No receive posted: UC drops the message (no RNR NAK).
                ctx.counters.uc_no_recv += 1;
                self.uc_drop(ctx);
                return;
            };
            self.resp.in_msg = InMsg::Send { wqe, offset: 0 };
        } else if !in_send {
            self.uc_drop(ctx);
            return;
        }
        let InMsg::Send { wqe, offset } = &mut self.resp.in_msg else {
            return;
        };
        let plen = pkt.payload.len() as u32;
        let fail = if *offset as u64 + plen as u64 > sgl_len(&wqe.sgl).min(1 << 31) {
            Some(Status::LocalLength)
        } else if sgl_write(ctx.mem, self.pd, &wqe.sgl, *offset as u64, pkt.payload).is_err() {
            Some(Status::LocalProtection)
        } else {
            None
        };
        if let Some(status) = fail {
            let id = wqe.wr_id;
            self.resp.in_msg = InMsg::None;
            self.recv_completion(ctx, id, status, CompletionOp::Recv);
            self.resp.uc_drop = !pos.is_last();
            return;
        }
        *offset += plen;
        self.send_chunk_placed(ctx, pkt, pos.is_last());
    }

    fn on_uc_write(&mut self, ctx: &mut Ctx, pkt: &Packet) {
        let pos = pkt.bth.opcode.position();
        let plen = pkt.payload.len() as u32;
        if pos.is_first() {
            self.uc_abandon(ctx);
        }
        let Some((rkey, va, remaining, total)) = self.write_state(pos, pkt.ext.reth) else {
            self.uc_drop(ctx);
            return;
        };
        let len_ok = if pos.is_last() {
            plen == remaining
        } else {
            plen < remaining
        };
        let imm = pkt.ext.imm;
        let refused = !len_ok
            || (pos.is_first()
                && total > 0
                && ctx
                    .mem
                    .check_remote(self.pd, rkey, va, total as u64, access::REMOTE_WRITE)
                    .is_err())
            || (imm.is_some() && self.resp.rq.is_empty())
            || (plen > 0
                && ctx
                    .mem
                    .write_remote(self.pd, rkey, va, pkt.payload)
                    .is_err());
        if refused {
            // A bad length, R_Key or access, or no receive for the immediate: UC drops the
            // message silently (no NAK).
            ctx.counters.uc_refused += 1;
            self.resp.in_msg = InMsg::None;
            self.resp.uc_drop = !pos.is_last();
            return;
        }
        self.write_chunk_placed(ctx, pos.is_last(), imm, rkey, va, plen, remaining, total);
    }
}
