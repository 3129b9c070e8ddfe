//! The requester half of an RC QP: work requests queued and sent, go-back-N retries on
//! timeouts and sequence NAKs, ACKs and READ/atomic responses retiring the send queue.

use super::*;

impl Qp {
    pub(super) fn queue_send(&mut self, wr: SendWr, srqn: u32) -> Result<(), PostError> {
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

    fn timeout_ns(cfg: &RoceConfig) -> Option<u64> {
        wire::local_ack_timeout_ns(cfg.timeout)
    }

    // ------------------------------------------------------------------ requester: acks

    /// Go back to the oldest unacknowledged PSN, consuming one transport retry.
    pub(super) fn retry(&mut self, ctx: &mut Ctx) {
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
    pub(super) fn complete_front(&mut self, ctx: &mut Ctx, status: Status) {
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

    pub(super) fn on_response(&mut self, ctx: &mut Ctx, pkt: &Packet) {
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

    /// A NAK at `p` acknowledges every PSN before it: retire what that completes; returns
    /// whether that is an implicit NAK (a READ/ATOMIC before `p` still lacks its response;
    /// counted).
    fn ack_before(&mut self, ctx: &mut Ctx, p: u32) -> bool {
        let (progress, implicit) = self.ack_through(ctx, psn::add(p, wire::PSN_MASK));
        if progress {
            self.on_progress(ctx);
        }
        if implicit {
            ctx.counters.implicit_naks += 1;
        }
        implicit
    }

    fn on_seq_nak(&mut self, ctx: &mut Ctx, p: u32) {
        if self.req.rnr_until.is_some() || !self.in_range(p, false, true) {
            ctx.counters.rx_stale_responses += 1;
            return;
        }
        if p != self.req.una {
            self.ack_before(ctx, p);
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
        if p != self.req.una && self.ack_before(ctx, p) {
            self.retry(ctx);
            self.fix_cursor();
            return;
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

    pub(super) fn next_request(&mut self, ctx: &mut Ctx, buf: &mut [u8]) -> Option<usize> {
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
