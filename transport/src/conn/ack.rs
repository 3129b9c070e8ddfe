//! ACKs and NACKs: what the sender learns from them, and the receiver building its ACKs (spec/transport.md §5.3, §6.2, §9).

use super::*;

impl Connection {
    pub(super) fn on_ack(&mut self, now: u64, path: u8, a: &AckRepr) {
        let p = path as usize;
        if p >= self.paths.len() {
            self.counters.rx_bad_path += 1;
            return;
        }
        self.counters.acks_received += 1;
        self.last_ack_at = now;
        self.ack_req_out = false;
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
        let mut out = std::mem::take(&mut self.ack_scratch);
        self.mark_path(p);
        self.paths[p].on_ack(
            now, a.cum_psn, &a.sack, a.ecn_ce, rtt_sample, &self.cfg, &mut out,
        );
        self.min_rtt_all = self.min_rtt_all.min(self.paths[p].min_rtt_ns);
        if out.progress {
            self.no_progress_rtos = 0;
        }
        self.counters.sack_holes += out.lost.len() as u64;
        for c in out.lost.drain(..) {
            self.retx.push_back((c, path));
        }
        if let Some(t) = out.newest_acked_sent_at {
            if t > self.rack_time {
                self.rack_time = t;
            }
            self.detect_time_losses(now);
        }
        let mut touched: SmallVec<[u32; 4]> = SmallVec::new();
        for c in out.acked.drain(..) {
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
        self.ack_scratch = out;
        for s in touched {
            self.complete_requests(s);
        }
    }

    pub(super) fn on_nack(&mut self, now: u64, path: u8, n: &NackRepr) {
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

    pub(super) fn emit_ack(&mut self, now: u64, p: u8, buf: &mut [u8]) -> Option<(usize, u16)> {
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
}
