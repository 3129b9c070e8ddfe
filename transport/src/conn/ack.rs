//! ACKs and NACKs: what the sender learns from them, and the receiver building its ACKs (spec/transport.md §5.3, §6.2, §9).

use super::*;

/// What the blocks of one ACK datagram left to do once they are all in.
#[derive(Default)]
struct AckDone {
    /// Some block acknowledged a packet: run time-based loss detection.
    newest: bool,
    /// Streams with newly acknowledged requests, to complete in order.
    touched: SmallVec<[u32; 4]>,
}

impl Connection {
    pub(super) fn on_ack(&mut self, now: u64, path: u8, a: &AckRepr) {
        if path as usize >= self.n_paths as usize {
            self.counters.live().rx_bad_path += 1;
            return;
        }
        let block = AckBlock {
            path,
            cum_psn: a.cum_psn,
            sack: a.sack,
            ecn_ce: a.ecn_ce,
            ts_echo: a.ts_echo,
            ack_delay_ns: a.ack_delay_ns,
        };
        let mut done = AckDone::default();
        self.ack_begin(now, a.rate_hint_mbps);
        self.ack_block(now, &block, &mut done);
        self.ack_end(now, done);
    }

    /// An ACK_MULTI: the hint once, each block as its path's ACK, then loss detection and
    /// completions once for all of them (spec/transport.md §5.3).
    pub(super) fn on_ack_multi(&mut self, now: u64, m: &AckMultiRepr<'_>) {
        self.counters.live().ack_multi_received += 1;
        let mut done = AckDone::default();
        let mut begun = false;
        for b in m.blocks() {
            if b.path as usize >= self.n_paths as usize {
                self.counters.live().rx_bad_path += 1;
                continue;
            }
            if !begun {
                self.ack_begin(now, m.rate_hint_mbps);
                begun = true;
            }
            self.ack_block(now, &b, &mut done);
        }
        if begun {
            self.ack_end(now, done);
        }
    }

    /// What every ACK datagram tells, whatever paths it covers: the peer is alive and the
    /// hint it gives.
    fn ack_begin(&mut self, now: u64, rate_hint_mbps: u32) {
        self.counters.live().acks_received += 1;
        self.last_ack_at = now;
        self.ack_req_out = false;
        let was_cold = self.hint_req_at.take().is_some();
        self.hint_tries = 0;
        // A crowd start (COLD-8) already paces from its own phase: the answer sets the rate.
        let crowd_started = std::mem::take(&mut self.crowd_started);
        if rate_hint_mbps != 0 {
            self.apply_hint(rate_hint_mbps);
            if was_cold && self.pilot_sent_at.get().is_none() && !crowd_started {
                // No pilot went (the pacing after one is set below): data starts at the
                // pilot's (random) time if that is still ahead; otherwise senders released by
                // the same fair-share decision would all send at once, so start at a
                // deterministic pseudo-random point of one gap.
                let at = match self.pilot_at.get() {
                    Some(t) if t > now => t,
                    _ => now + splitmix64(self.seed ^ now) % self.hint_gap().max(1),
                };
                self.first_paced_at(now, at);
            }
        }
        self.pilot_at = At::from(None);
    }

    /// One path's acknowledgement (`b.path` checked by the caller).
    fn ack_block(&mut self, now: u64, a: &AckBlock, done: &mut AckDone) {
        let p = a.path as usize;
        self.grow_tx(p);
        if self.paths[p].ack_names_unsent(a.cum_psn, &a.sack) {
            // Believing it would complete work the peer never received.
            self.counters.live().rx_acks_bogus += 1;
            return;
        }
        if self.paths[p].ack_is_stale(a.cum_psn) {
            self.counters.live().rx_acks_stale += 1;
        }
        let hold = (a.ack_delay_ns as u64).min(MAX_PEER_HOLD_NS);
        if hold > self.cfg.ack_delay_ns {
            self.counters.live().rx_ack_holds_long += 1;
        }
        // The counter keeps the hold as reported, past the timers' cap: a diagnostic.
        self.counters.live().rx_ack_hold_max_ns = self
            .counters
            .live()
            .rx_ack_hold_max_ns
            .max(a.ack_delay_ns as u64);
        // Up at once, down by an eighth of the difference per ACK: one short hold (a quiet
        // moment at the peer) does not undo what a busy spell showed.
        self.peer_hold_ns = if hold >= self.peer_hold_ns {
            hold
        } else {
            self.peer_hold_ns - (self.peer_hold_ns - hold) / 8
        };
        let now32 = now as u32;
        let rtt = now32.wrapping_sub(a.ts_echo).wrapping_sub(a.ack_delay_ns);
        let rtt_sample = (a.ts_echo != 0 && rtt < 1 << 31).then_some(rtt.max(1) as u64);
        if let Some(t) = self.pilot_sent_at.get() {
            if self.peer_hint_mbps != 0 {
                // The pilot's own round trip says how long it queued: the next packet goes one
                // fair-share gap after the pilot *arrived*, so senders whose pilots left
                // together (and queued one behind another) keep the spacing the bottleneck gave
                // them instead of arriving together again one gap later. Until the pilot's ACK
                // is in, wait (at most two base RTTs past the gap: it may be lost), unless the
                // gap is shorter than an RTT.
                let gap = self.hint_gap();
                let echo = a.ts_echo == (t as u32).max(1);
                let at = match (rtt_sample, self.pilot_wait_until()) {
                    (Some(r), _) if echo => {
                        self.pilot_sent_at = At::from(None);
                        // The base RTT was measured with the small request, which the pilot
                        // exceeds by one MTU's serialisation on every store-and-forward hop:
                        // take that off for up to PILOT_HOPS hops, erring early (an early
                        // packet queues briefly; a late one leaves the bottleneck idle).
                        let ser = self.full_packet_ser();
                        t + r.saturating_sub(self.base_rtt() + PILOT_HOPS * ser) + gap
                    }
                    (_, Some(w)) => w,
                    // Its ACK could not be back before the next packet is due anyway (more
                    // than one packet per RTT: few senders, so little queue to learn about).
                    // It keeps the pilot's (random) phase: released together, senders would
                    // otherwise all start together.
                    _ => t + gap * (now.saturating_sub(t) / gap.max(1) + 1),
                };
                self.first_paced_at(now, at);
            }
        }
        let mut out = self.ack_scratch.take().unwrap_or_default();
        self.mark_path(p);
        // The controller's base RTT is the connection's smallest, this sample included: its
        // paths cross the same hops, and one path's few samples may all have queued.
        if let Some(r) = rtt_sample {
            self.min_rtt_all = self.min_rtt_all.min(r.max(1));
            self.srtt_all = if self.srtt_all == 0.0 {
                r as f64
            } else {
                0.875 * self.srtt_all + 0.125 * r as f64
            };
        }
        let before = self.paths[p].inflight_bytes;
        self.paths[p].on_ack(
            now,
            a.cum_psn,
            &a.sack,
            a.ecn_ce,
            rtt_sample,
            self.min_rtt_all,
            &self.cfg,
            &mut out,
        );
        self.path_changed(p, before);
        self.min_rtt_all = self.min_rtt_all.min(self.paths[p].min_rtt_ns);
        self.win_cache.set(None);
        if out.congested
            && self.n_paths > 1
            && self.paths[p].state == PathState::Good
            // One path moves at a time: paths of many connections leaving a hot link
            // together would only make the next one hot (each lands at random).
            && !self.paths.iter().any(|q| q.moving())
        {
            // Its route stays congested: try another (PATH-13).
            let q = &mut self.paths[p];
            let e = path_entropy(self.seed, p as u8, q.generation.wrapping_add(1));
            q.reroute(e);
        }
        if out.progress {
            self.no_progress_rtos = 0;
        }
        self.counters.live().sack_holes += out.lost.len() as u64;
        for c in out.lost.drain(..) {
            self.retx.push_back((c, a.path));
        }
        if let Some(t) = out.newest_acked_sent_at {
            if t > self.rack_time {
                self.rack_time = t;
            }
            done.newest = true;
        }
        for c in out.acked.drain(..) {
            match c {
                ChunkRef::Req { stream, msn, chunk } => {
                    if let Some(s) = self.streams.get_mut(&stream) {
                        let fresh = s.wr_mut(msn).is_some_and(|w| w.acked.set(chunk));
                        if !fresh {
                            self.counters.live().acks_redundant += 1;
                        }
                        if !done.touched.contains(&stream) {
                            done.touched.push(stream);
                        }
                    }
                }
                ChunkRef::Resp { stream, msn, chunk } => {
                    if let Some(s) = self.streams.get_mut(&stream) {
                        let done = s.responses.get_mut(msn).map(|r| {
                            r.acked.set(chunk);
                            r.acked.count() == r.chunks
                        });
                        if done == Some(true) {
                            s.responses.take(msn);
                        }
                    }
                }
            }
        }
        self.ack_scratch = Some(out);
    }

    fn ack_end(&mut self, now: u64, done: AckDone) {
        if done.newest {
            self.detect_time_losses(now);
        }
        for s in done.touched {
            self.complete_requests(s);
        }
    }

    pub(super) fn on_nack(&mut self, now: u64, path: u8, n: &NackRepr) {
        self.counters.live().nacks_received[nack_index(n.reason)] += 1;
        // A NACK on path NO_PATH is about a request, not a packet (a deferred failure): it is
        // found by (stream, msn). Otherwise the PSN names the refused packet, and it must have
        // carried the MSN the NACK names.
        let chunk = match self.paths.get_mut(path as usize) {
            Some(p) if path != NO_PATH => {
                let msn_ok = p.peek(n.psn).is_some_and(|c| match c {
                    ChunkRef::Req { msn, .. } | ChunkRef::Resp { msn, .. } => msn == n.msn,
                });
                let before = p.inflight_bytes;
                let c = if msn_ok { p.forget(n.psn) } else { None };
                self.path_changed(path as usize, before);
                c
            }
            _ => None,
        };
        if chunk.is_some() {
            self.mark_path(path as usize);
        }
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
                    s.responses.take(msn);
                }
                return;
            }
            None => {
                let outstanding = self
                    .streams
                    .get_mut(&n.stream)
                    .and_then(|s| s.wr_mut(n.msn))
                    .is_some_and(|w| !w.done());
                if path == NO_PATH
                    && outstanding
                    && matches!(
                        n.reason,
                        NackReason::RemoteAccess
                            | NackReason::InvalidRequest
                            | NackReason::RemoteOperation
                    )
                {
                    (n.stream, n.msn, None)
                } else {
                    // Stale: for a packet already dealt with (or never sent).
                    self.counters.live().rx_nacks_ignored += 1;
                    return;
                }
            }
        };
        match n.reason {
            NackReason::RemoteAccess | NackReason::InvalidRequest | NackReason::RemoteOperation => {
                let st = match n.reason {
                    NackReason::RemoteAccess => Status::RemoteAccess,
                    NackReason::RemoteOperation => Status::RemoteOperation,
                    _ => Status::RemoteInvalidRequest,
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

    /// The next ACK datagram, if one is due: with `ack_multi`, one ACK_MULTI for every path
    /// of the due path's plane whose ACK is due too, and (`ack_multi_riders`) every path
    /// with a packet unacknowledged, so a burst sprayed over N paths costs one ACK, not N
    /// (spec/transport.md §6.2); a plain ACK when only the due path has news.
    pub(super) fn emit_acks(&mut self, now: u64, buf: &mut [u8]) -> Option<(usize, u16)> {
        while let Some(p) = self.ack_queue.pop_front() {
            self.ack_queued[p as usize] = false;
            let rx = &self.rx_paths[p as usize];
            // An answer to a hint request is being held: this ACK goes out with it (a cold
            // sender's pilot must not fetch a hint that does not yet count its fellow senders).
            if !rx.ack_now || rx.hint_ack_at.is_some() {
                continue;
            }
            if self.cfg.ack_multi && self.n_paths > 1 {
                if let Some(x) = self.emit_ack_multi(now, p, buf) {
                    return Some(x);
                }
            }
            if let Some(x) = self.emit_ack(now, p, buf) {
                return Some(x);
            }
        }
        None
    }

    /// Whether path `i` has anything a new ACK would tell.
    fn ack_pending(&self, i: usize) -> bool {
        let r = &self.rx_paths[i];
        (r.ack_now || self.rides(r)) && r.hint_ack_at.is_none()
    }

    /// Whether a path with no ACK due joins an ACK_MULTI: a packet unacknowledged (with many
    /// paths each one sees a packet per few µs, so waiting for two left most paths to their
    /// own delayed-ACK timers: 0.49 ACKs per MTU packet over 16 paths), a LAST packet held
    /// (§6.2), or a rider not yet acknowledged a second time.
    fn rides(&self, r: &RxPath) -> bool {
        self.cfg.ack_multi_riders && (r.unacked > 0 || r.rode || r.held_last)
    }

    /// An ACK_MULTI led by the due path `first`; None if no other path has news (the caller
    /// then sends a plain ACK) or the buffer is too small.
    fn emit_ack_multi(&mut self, now: u64, first: u8, buf: &mut [u8]) -> Option<(usize, u16)> {
        let plane = self.ctrl_port(first);
        let n = self.rx_paths.len();
        let others = (0..n).any(|i| {
            i != first as usize && self.ack_pending(i) && self.ctrl_port(i as u8) == plane
        });
        if !others {
            return None;
        }
        let mut w = AckMultiWriter::new(buf, self.peer_conn, self.hint_for_peer_mbps).ok()?;
        // The due path first, then the others in path order while they fit (those left out
        // keep their state for the next ACK).
        let order = std::iter::once(first as usize).chain((0..n).filter(|&i| i != first as usize));
        for i in order {
            if !w.has_room() {
                break;
            }
            if !self.ack_pending(i) || self.ctrl_port(i as u8) != plane {
                continue;
            }
            let rx = &mut self.rx_paths[i];
            let b = AckBlock {
                path: i as u8,
                cum_psn: rx.cum,
                sack: rx.sack,
                ecn_ce: rx.ce_count,
                ts_echo: rx.ts_echo,
                ack_delay_ns: now.saturating_sub(rx.ts_arrival).min(u32::MAX as u64) as u32,
            };
            let first_ride = !rx.ack_now && !rx.rode;
            if w.push(&b) {
                rx.ack_now = false;
                rx.unacked = 0;
                rx.held_last = false;
                // A first ride keeps the delayed-ACK timer: the path is acknowledged again
                // by the next ACK datagram or when the timer fires, whichever is first.
                rx.rode = first_ride;
                if !first_ride {
                    rx.first_unacked_at = None;
                    self.rx_timer(i);
                }
            }
        }
        let blocks = w.count() as u64;
        let len = w.finish()?;
        self.counters.live().acks_sent += 1;
        self.counters.live().ack_multi_sent += 1;
        self.counters.live().ack_blocks_sent += blocks;
        self.last_tx_port = plane;
        let port = match self.rx_paths[first as usize].reply_port {
            0 => self.tx_entropy(first as usize),
            r => r,
        };
        Some((len, port))
    }

    pub(super) fn emit_ack(&mut self, now: u64, p: u8, buf: &mut [u8]) -> Option<(usize, u16)> {
        let hint = self.hint_for_peer_mbps;
        let rx = &mut self.rx_paths[p as usize];
        rx.ack_now = false;
        rx.unacked = 0;
        rx.first_unacked_at = None;
        rx.rode = false;
        rx.held_last = false;
        let a = AckRepr {
            cum_psn: rx.cum,
            sack: rx.sack,
            ecn_ce: rx.ce_count,
            rate_hint_mbps: hint,
            ts_echo: rx.ts_echo,
            ack_delay_ns: now.saturating_sub(rx.ts_arrival).min(u32::MAX as u64) as u32,
        };
        self.rx_timer(p as usize);
        self.counters.live().acks_sent += 1;
        self.last_tx_port = self.ctrl_port(p);
        let pkt = Packet {
            flags: 0,
            path: p,
            dst_conn: self.peer_conn,
            body: Body::Ack(a),
        };
        let port = match self.rx_paths[p as usize].reply_port {
            0 => self.tx_entropy(p as usize),
            r => r,
        };
        pkt.emit(buf).ok().map(|l| (l, port))
    }
}

/// Longest peer ACK hold the sender's timers believe (ns): a peer reporting more (broken or
/// hostile) only slows its own connection's recovery, and by no more than this.
const MAX_PEER_HOLD_NS: u64 = 1_000_000;
