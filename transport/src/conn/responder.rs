//! Responder side: a new reliable packet is classified on its path, checked, placed or held, and complete messages retire in MSN order (spec/transport.md §6.1, §7).

use super::*;

impl Connection {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn on_data(
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
            self.counters.live().rx_not_open += 1;
            return;
        }
        if p >= self.n_paths as usize {
            self.counters.live().rx_bad_path += 1;
            return;
        }
        self.grow_rx(p);
        // Entropy reflection: answers on this path take the sender's current source port, so
        // when the sender re-routes a path, its ACKs are re-routed with it.
        self.rx_paths[p].reply_port = src_port;
        self.counters.live().rx_pkts += 1;
        if ce {
            self.rx_paths[p].ce_count = self.rx_paths[p].ce_count.wrapping_add(1);
            self.counters.live().ecn_ce_received += 1;
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
                self.counters.live().rx_out_of_window += 1;
                self.queue_nack(path, d, NackReason::Sequence, 0);
            }
            RxVerdict::Duplicate => {
                self.counters.live().rx_duplicates += 1;
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
                    self.counters.live().rx_payload_bytes += d.payload.len() as u64;
                    let every = self.cfg.ack_every;
                    let rx = &mut self.rx_paths[p];
                    rx.record(d.seq.psn);
                    rx.unacked += 1;
                    rx.ts_echo = d.seq.tsval;
                    rx.ts_arrival = now;
                    if rx.first_unacked_at.is_none() {
                        rx.first_unacked_at = Some(now);
                        self.rx_timer(p);
                    }
                    // The LAST packet of a message is acknowledged at once when nothing
                    // follows it (its WR completes on it). With BACKLOG set more packets are
                    // coming: it rides the next ACK datagram (with riders, or on a lone path
                    // its count), or `ack_delay` acknowledges it (spec/transport.md §6.2). An
                    // ACK per message made 0.30-1.0 ACKs per data packet in a bulk transfer.
                    let can_hold =
                        self.n_paths == 1 || (self.cfg.ack_multi && self.cfg.ack_multi_riders);
                    let last = fl & flags::LAST != 0;
                    let hold = last && fl & flags::BACKLOG != 0 && can_hold;
                    let rx = &mut self.rx_paths[p];
                    if !in_order
                        || fl & flags::ACK_REQ != 0
                        || (last && !hold)
                        || rx.unacked >= every
                    {
                        rx.ack_now = true;
                        self.queue_ack(path);
                    } else if hold {
                        rx.held_last = true;
                    }
                }
                Verdict::Refuse(reason, delay) => self.queue_nack(path, d, reason, delay),
                Verdict::Drop => {}
            },
        }
    }

    pub(super) fn queue_ack(&mut self, path: u8) {
        let p = path as usize;
        if !self.ack_queued[p] {
            self.ack_queued[p] = true;
            self.ack_queue.push_back(path);
        }
    }

    pub(super) fn queue_nack(
        &mut self,
        path: u8,
        d: &DataRepr<'_>,
        reason: NackReason,
        rnr_delay: u8,
    ) {
        self.counters.live().nacks_sent[nack_index(reason)] += 1;
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
    pub(super) fn process(
        &mut self,
        now: u64,
        fl: u8,
        d: &DataRepr<'_>,
        mem: &mut dyn Memory,
    ) -> Verdict {
        let mtu = self.mtu;
        let window = self.cfg.stream_window;
        let hold_limit = self.cfg.order_hold_bytes;
        let Some(s) = self.streams.get_mut(&d.msg.stream) else {
            return Verdict::Refuse(NackReason::InvalidRequest, 0);
        };
        if s.uc.is_some() {
            return self.process_uc(fl, d, mem);
        }
        if fl & flags::UNRELIABLE != 0 {
            // An unreliable packet for a reliable stream: the two ends disagree.
            return Verdict::Refuse(NackReason::InvalidRequest, 0);
        }
        let m = d.msg;
        let pd = s.pd;
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
                            if sgl_write(mem, pd, &w.wr.sgl, m.offset as u64, d.payload).is_err() {
                                s.fail_wr(m.msn, Status::LocalProtection);
                            } else {
                                w.resp_got.set(ci);
                            }
                        }
                    }
                }
                if bad {
                    self.counters.live().rx_bad_responses += 1;
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
                        if sgl_write(mem, pd, &w.wr.sgl, 0, &orig.to_ne_bytes()).is_err() {
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
        // RES-2: a requester starts MSN m only after every MSN a window before it completed,
        // its response placed (STREAM-2), so this request acknowledges their responses. One
        // that never acknowledges them otherwise holds at most a window of them.
        let retired = s.responses.retire_before(m.msn.wrapping_sub(window - 1));
        self.counters.live().responses_retired_unacked += retired as u64;
        if let Some(e) = s.rx_err {
            // From the failed message on, the responder side is in Error: the failed
            // message (a resend of it, too) keeps its reason, later ones are refused as
            // operations it can no longer carry out. Earlier messages go on as usual.
            let from = m.msn.wrapping_sub(s.rx_base_msn);
            let at = e.msn.wrapping_sub(s.rx_base_msn);
            if from == at {
                return Verdict::Refuse(e.reason, 0);
            }
            if from > at {
                return Verdict::Refuse(NackReason::RemoteOperation, 0);
            }
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
        if let Some(msg) = s.rx_msgs.get(m.msn) {
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
        // A receive is needed for SEND and WRITE with immediate. An `rsn` before the oldest
        // posted receive names one already consumed, which no resend can make right: refused
        // as invalid rather than RNR, which would be retried forever (transport.md STREAM-5).
        let recv_index = |s: &Stream, rsn: u32| -> Result<usize, NackReason> {
            let d = rsn.wrapping_sub(s.rx_base_rsn()) as i32;
            if d < 0 {
                return Err(NackReason::InvalidRequest);
            }
            let i = d as usize;
            if i < s.posted.len() {
                Ok(i)
            } else {
                Err(NackReason::ReceiverNotReady)
            }
        };
        // An ORDERED chunk of a message that is not the stream's oldest incomplete one waits
        // (§7.2): its payload is held until then.
        let mut held = None;
        match kind {
            RxKind::Send { .. } => {
                let i = match recv_index(s, rsn) {
                    Ok(i) => i,
                    Err(NackReason::ReceiverNotReady) => {
                        self.counters.live().rnr_waits += 1;
                        return Verdict::Refuse(NackReason::ReceiverNotReady, 0);
                    }
                    Err(r) => return Verdict::Refuse(r, 0),
                };
                let recv = &s.posted[i];
                // A valid SEND that its receive cannot hold fails that receive and puts the
                // responder side in Error (IBTA: a too-short receive is an invalid request,
                // a receive naming memory the QP may not write a remote operational error).
                let failed = if m.length as u64 > sgl_len(&recv.sgl) {
                    Some((Status::LocalLength, NackReason::InvalidRequest))
                } else if sgl_write(mem, pd, &recv.sgl, m.offset as u64, d.payload).is_err() {
                    Some((Status::LocalProtection, NackReason::RemoteOperation))
                } else {
                    None
                };
                if let Some((status, reason)) = failed {
                    self.counters.live().rx_local_errors += 1;
                    let e = RxErr {
                        msn: m.msn,
                        status,
                        reason,
                    };
                    let rel = |x: u32| x.wrapping_sub(s.rx_base_msn);
                    if s.rx_err.is_none_or(|o| rel(m.msn) < rel(o.msn)) {
                        s.rx_err = Some(e);
                    }
                    let st = d.msg.stream;
                    self.deliver_requests(now, st, mem);
                    return Verdict::Refuse(reason, 0);
                }
            }
            RxKind::Write | RxKind::WriteImm { .. } => {
                if matches!(kind, RxKind::WriteImm { .. }) {
                    match recv_index(s, rsn) {
                        Ok(_) => {}
                        Err(NackReason::ReceiverNotReady) => {
                            self.counters.live().rnr_waits += 1;
                            return Verdict::Refuse(NackReason::ReceiverNotReady, 0);
                        }
                        Err(r) => return Verdict::Refuse(r, 0),
                    }
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
                        self.counters.live().remote_access_refused += 1;
                        return Verdict::Refuse(NackReason::RemoteAccess, 0);
                    }
                    if fl & flags::ORDERED != 0 && rel > 0 {
                        let n = d.payload.len() as u64;
                        if self.held_bytes + n > hold_limit {
                            self.counters.live().rx_ordered_dropped += 1;
                            return Verdict::Drop;
                        }
                        self.held_bytes += n;
                        self.counters.live().rx_ordered_held += 1;
                        held = Some((raddr, d.payload.to_vec()));
                    } else if mem.write_remote(pd, rkey, raddr, d.payload).is_err() {
                        self.counters.live().remote_access_refused += 1;
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
                    self.counters.live().remote_access_refused += 1;
                    return Verdict::Refuse(NackReason::RemoteAccess, 0);
                }
            }
            RxKind::Atomic { rkey, raddr, .. } => {
                if let Err(v) = Self::check_atomic(mem, pd, rkey, raddr) {
                    self.counters.live().remote_access_refused += 1;
                    return v;
                }
            }
        }
        let Some(msg) = s.rx_msgs.get_or_insert_with(m.msn, || RxMsg {
            kind,
            length: m.length,
            chunks,
            got: Bits::new(chunks),
            rkey,
            base,
            rsn,
            held: Vec::new(),
        }) else {
            // Behind the oldest message not retired: admitted by the window checks above
            // only as a duplicate, which never gets here.
            return Verdict::Accept;
        };
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

    pub(super) fn check_atomic(
        mem: &mut dyn Memory,
        pd: u32,
        rkey: u32,
        raddr: u64,
    ) -> Result<(), Verdict> {
        if !raddr.is_multiple_of(8) {
            return Err(Verdict::Refuse(NackReason::InvalidRequest, 0));
        }
        mem.check_remote(pd, rkey, raddr, 8, access::REMOTE_ATOMIC)
            .map_err(|_| Verdict::Refuse(NackReason::RemoteAccess, 0))
    }

    /// Responder: retire complete messages in MSN order (RC ordering), executing READs and
    /// ATOMICs only once every earlier message of the stream is complete.
    pub(super) fn deliver_requests(&mut self, _now: u64, local: u32, mem: &mut dyn Memory) {
        let conn = self.id;
        let mtu = self.mtu;
        let Some(s) = self.streams.get_mut(&local) else {
            return;
        };
        let mut failed = false;
        loop {
            let base = s.rx_base_msn;
            if let Some(e) = s.rx_err.filter(|e| e.msn == base) {
                // Every earlier message is retired: the failed one's receive completes with
                // its error, and the stream enters Error (flushing the rest, both ways).
                if let Some(r) = s.posted.pop_front() {
                    s.consumed_rsn = s.consumed_rsn.wrapping_add(1);
                    self.completions.push_back(Completion {
                        conn,
                        stream: local,
                        wr_id: r.wr_id,
                        status: e.status,
                        op: CompletionOp::Recv,
                        byte_len: 0,
                        imm: None,
                        ud_src: None,
                    });
                }
                failed = true;
                break;
            }
            let Some(msg) = s.rx_msgs.get_mut(base) else {
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
                    self.counters.live().remote_access_refused += 1;
                    self.nack_queue.push_back(late_nack(s.remote, base));
                }
            }
            if msg.got.count() != msg.chunks {
                break;
            }
            let msg = match s.rx_msgs.pop_base(base) {
                Some(m) => m,
                None => break,
            };
            s.rx_base_msn = base.wrapping_add(1);
            self.counters.live().messages_completed_rx += 1;
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
                        ud_src: None,
                    });
                }
            }
            match msg.kind {
                RxKind::Send { .. } | RxKind::WriteImm { .. } => {}
                RxKind::Write => {}
                RxKind::Read { rkey, raddr } => {
                    let chunks = msg.length.div_ceil(mtu).max(1);
                    // The ring's base never passes the stream's (RES-2 retires only MSNs a
                    // window behind an accepted request), so the slot exists.
                    let _ = s.responses.get_or_insert_with(base, || Resp {
                        kind: RespKind::Read { rkey, raddr },
                        length: msg.length,
                        chunks,
                        acked: Bits::new(chunks),
                    });
                    if !s.in_resp_active {
                        s.in_resp_active = true;
                        self.resp_active.push_back(local);
                    }
                }
                RxKind::Atomic { rkey, raddr, op } => {
                    // Validated on arrival; a region deregistered since then yields a NACK.
                    match mem.atomic_remote(s.pd, rkey, raddr, op) {
                        Ok(orig) => {
                            let _ = s.responses.get_or_insert_with(base, || Resp {
                                kind: RespKind::Atomic { orig },
                                length: 8,
                                chunks: 1,
                                acked: Bits::new(1),
                            });
                            if !s.in_resp_active {
                                s.in_resp_active = true;
                                self.resp_active.push_back(local);
                            }
                        }
                        Err(_) => {
                            self.counters.live().remote_access_refused += 1;
                            self.nack_queue.push_back(late_nack(s.remote, base));
                        }
                    }
                }
            }
        }
        if failed {
            self.flush_stream(local);
        }
    }
}
