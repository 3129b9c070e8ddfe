//! The responder half of an RC QP: PSN checking, placement of SENDs and WRITEs, READ and
//! atomic resources, duplicates, and the ACKs and NAKs it owes.

use super::*;

impl Qp {
    /// Responder-detected error (class C/J): NAK `code` for `p`, then the QP goes to error.
    pub(super) fn responder_fatal(&mut self, ctx: &mut Ctx, code: NakCode, p: u32) {
        self.enter_error(ctx, None, Status::Flushed);
        ctx.counters.fatal_naks_sent += 1;
        self.resp.out.push_back(RespItem::Ack {
            psn: p,
            syndrome: Syndrome::Nak(code),
            msn: self.resp.msn,
        });
    }

    // ------------------------------------------------------------------ timers

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

    pub(super) fn on_request(&mut self, ctx: &mut Ctx, pkt: &Packet) {
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
    pub(super) fn write_state(
        &self,
        pos: Position,
        reth: Option<Reth>,
    ) -> Option<(u32, u64, u32, u32)> {
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
    pub(super) fn length_ok(&self, pos: Position, len: usize) -> bool {
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
    pub(super) fn send_chunk_placed(&mut self, ctx: &mut Ctx, pkt: &Packet, last: bool) {
        ctx.counters.rx_payload_bytes += pkt.payload.len() as u64;
        if !last {
            return;
        }
        if let InMsg::Send { wqe, offset } = std::mem::replace(&mut self.resp.in_msg, InMsg::None) {
            self.recv_completion_with(
                ctx,
                wqe.wr_id,
                Status::Success,
                CompletionOp::Recv,
                offset,
                pkt.ext.imm,
            );
        }
        self.resp.msn = psn::add(self.resp.msn, 1);
    }

    /// A WRITE chunk is placed at `va`: count it; on the last packet consume a receive for
    /// the immediate and move to the next message, else remember where the next chunk goes
    /// (RC and UC).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn write_chunk_placed(
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
                self.recv_completion_with(
                    ctx,
                    wqe.wr_id,
                    Status::Success,
                    CompletionOp::RecvWriteImm,
                    total,
                    Some(imm),
                );
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

    pub(super) fn next_response(&mut self, ctx: &mut Ctx, buf: &mut [u8]) -> Option<usize> {
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
}
