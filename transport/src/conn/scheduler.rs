//! Sending: which chunk goes next (resends, responses, new data), on which path and plane, under which window, and building its packet (spec/transport.md §4.3, §5.1, §5.2; congestion.md §2).

use super::*;

impl Connection {
    /// Bytes in flight on all paths (the running total; checked against the sum in tests).
    pub(super) fn inflight(&self) -> u64 {
        #[cfg(any(test, debug_assertions))]
        assert_eq!(
            self.inflight as u64,
            self.paths.iter().map(|p| p.inflight_bytes).sum::<u64>(),
            "stale in-flight total"
        );
        self.inflight as u64
    }

    /// Path `i`'s bytes in flight were `before` a call that may have changed them: bring
    /// the connection's total in step. (A u32 holds it: at most 255 paths of 256 packets of
    /// at most 65,535 B each, the SACK span bounding every path.)
    pub(super) fn path_changed(&mut self, i: usize, before: u64) {
        let after = self.paths[i].inflight_bytes;
        self.inflight = (self.inflight as u64 + after - before) as u32;
    }

    /// Connection-level window: sum of path windows, capped by the receiver's hint.
    pub(super) fn conn_window(&self) -> f64 {
        if let Some(w) = self.win_cache.get() {
            #[cfg(any(test, debug_assertions))]
            assert_eq!(w, self.conn_window_now(), "stale connection window cache");
            return w;
        }
        let w = self.conn_window_now();
        self.win_cache.set(Some(w));
        w
    }

    fn conn_window_now(&self) -> f64 {
        let sum = self.window_sum();
        if self.peer_hint_mbps != 0 {
            sum.min(self.hint_window().max(self.mtu as f64))
        } else {
            sum
        }
    }

    /// Where a tail-loss probe for silent path `silent` goes: the least-loaded other Good
    /// path with room in the SACK span and a ready NIC port (a black-holed route is then
    /// still probed around), else the silent path itself.
    pub(super) fn tlp_path(&self, silent: usize) -> usize {
        let built = self
            .paths
            .iter()
            .enumerate()
            .filter(|(i, p)| {
                *i != silent
                    && p.state == PathState::Good
                    && p.in_span()
                    && p.plane < 64
                    && self.tx_ready >> p.plane & 1 == 1
            })
            .min_by(|a, b| a.1.load().total_cmp(&b.1.load()))
            .map(|(i, p)| (i, p.load()));
        // A fresh path (Good, empty: load 0) comes after the built ones in path order, so
        // it is the pick unless a built one is as empty.
        if built.is_none_or(|(_, l)| l > 0.0) {
            let fresh = (self.paths.len()..self.n_paths as usize).find(|&i| {
                i != silent
                    && self
                        .tx_plane(i)
                        .is_some_and(|pl| self.tx_ready >> pl & 1 == 1)
            });
            if let Some(i) = fresh {
                return i;
            }
        }
        built.map_or(silent, |(i, _)| i)
    }

    /// Which paths may carry the next packet: with any path Good, the Good ones (`None`);
    /// with every path in trouble, the least recently failed (`Some(its failed_at)`, found
    /// once, not once per path).
    fn usable_rule(&self) -> Option<u64> {
        if self.any_good() {
            None
        } else {
            Some(self.paths.iter().map(|q| q.failed_at).min().unwrap_or(0))
        }
    }

    /// Path `i`'s plane if it may carry `bytes` more under `rule` (a fresh path is Good and
    /// empty), whether or not its NIC port has room.
    fn candidate(&self, i: usize, bytes: u32, rule: Option<u64>) -> Option<u8> {
        match self.paths.get(i) {
            Some(p) => {
                let usable = match rule {
                    None => p.state == PathState::Good,
                    Some(newest) => p.failed_at == newest,
                };
                (usable && p.has_room(bytes)).then_some(p.plane)
            }
            None => Some(self.fresh_plane(i)),
        }
    }

    /// Whether `pick_path(bytes, _)` would find a path, without its side effects (the
    /// round-robin cursor) and without comparing loads.
    pub(super) fn any_path_has_room(&mut self, bytes: u32) -> bool {
        let rule = self.usable_rule();
        let mut blocked = false;
        for i in 0..self.n_paths as usize {
            let Some(plane) = self.candidate(i, bytes, rule) else {
                continue;
            };
            if plane >= 64 || self.tx_ready >> plane & 1 == 0 {
                blocked = true;
                continue;
            }
            return true;
        }
        if blocked {
            self.port_blocked = true;
        }
        false
    }

    /// Pick the path for the next packet: the least-loaded usable path with room, avoiding
    /// `avoid` (the path that just lost this chunk) when another will do. The index finds
    /// it without reading every path (`pick.rs`); the scan is the reference, and what runs
    /// where the index cannot say.
    pub(super) fn pick_path(&mut self, bytes: u32, avoid: u8) -> Option<usize> {
        let n = self.n_paths as usize;
        let pick = match self.pick_by_index(bytes, avoid) {
            Some(pick) => {
                #[cfg(test)]
                pick::INDEX_PICKS.with(|c| c.set(c.get() + 1));
                #[cfg(any(test, debug_assertions))]
                assert_eq!(
                    (pick, false),
                    self.pick_by_scan(bytes, avoid),
                    "the pick index disagrees with the scan"
                );
                pick?
            }
            None => {
                let (pick, blocked) = self.pick_by_scan(bytes, avoid);
                if blocked {
                    self.port_blocked = true; // one would go, but its NIC port is full
                }
                pick?
            }
        };
        // `pick` < `n_paths`, a u8.
        self.rr = if pick + 1 < n { pick as u8 + 1 } else { 0 };
        Some(pick)
    }

    /// `pick_path` by reading every path: the pick, and whether a path would have gone but
    /// for its full NIC port.
    fn pick_by_scan(&self, bytes: u32, avoid: u8) -> (Option<usize>, bool) {
        let n = self.n_paths as usize;
        let mut scan = PathScan {
            bytes,
            avoid,
            rule: self.usable_rule(),
            tx_ready: self.tx_ready,
            best: None,
            fallback: None,
            blocked: false,
        };
        // Round robin from `rr`: two straight runs, `rr..n` then `0..rr`, so the scan (every
        // path, every packet) needs no wrapped index and no bounds check per path.
        let start = if (self.rr as usize) < n {
            self.rr as usize
        } else {
            0
        };
        self.scan_paths(start, n, &mut scan);
        self.scan_paths(0, start, &mut scan);
        let pick = scan.best.or(scan.fallback).map(|(i, _)| i);
        (pick, scan.blocked)
    }

    /// `pick_path` over paths `from..to` in order: the built ones, then the fresh ones (a
    /// fresh path is Good, empty, load 0), which are the indices past `paths`.
    fn scan_paths(&self, from: usize, to: usize, sc: &mut PathScan) {
        let built = to.min(self.paths.len());
        let paths: &[TxPath] = &self.paths;
        for (i, p) in paths[from.min(built)..built].iter().enumerate() {
            let usable = match sc.rule {
                None => p.state == PathState::Good,
                Some(newest) => p.failed_at == newest,
            };
            if !usable || !p.in_span() {
                continue;
            }
            // `has_room` and `load` with one conversion of the bytes in flight between them.
            let (inflight, cwnd) = (p.inflight_bytes as f64, p.cwnd());
            let room = p.inflight_bytes == 0 || inflight + sc.bytes as f64 <= cwnd;
            debug_assert_eq!(room, p.has_room(sc.bytes));
            if room {
                sc.offer(from + i, p.plane, || {
                    let l = inflight / cwnd.max(1.0);
                    debug_assert_eq!(l.to_bits(), p.load().to_bits());
                    l
                });
            }
        }
        for i in from.max(built)..to {
            sc.offer(i, self.fresh_plane(i), || 0.0);
        }
    }

    /// When the pacer next lets a data packet go (spec/congestion.md §2.1): at `pace_next`
    /// within a released batch, otherwise once a batch is due: `n - 1` gaps of the last
    /// paced packet after `pace_next`, `n = min(pace_burst, 1 + pace_quantum / gap)`.
    pub(super) fn pace_release_at(&self) -> u64 {
        if self.pace_batch {
            return self.pace_next;
        }
        self.pace_next + self.pace_hold
    }

    pub(super) fn emit_data(
        &mut self,
        now: u64,
        buf: &mut [u8],
        mem: &mut dyn Memory,
    ) -> Option<(usize, u16)> {
        // A tail-loss probe goes first and past the windows and the pacer: the flight it asks
        // about is what fills them, and a probe held back until the RTO is no probe at all.
        if let Some((c, p)) = self.tlp.take() {
            if self.pilot_sent_at.get().is_some() {
                // The pilot sent again: its copy's ACK tells the queueing now.
                self.pilot_sent_at = At::from(Some(now));
            }
            if self.chunk_needed(&c) {
                let via = self.tlp_path(p as usize);
                match self.build_packet(now, c, p, true, Some(via), buf, mem) {
                    Ok(Some(x)) => return Some(x),
                    // Its NIC port is full: next time (the endpoint polls again when it
                    // drains); other paths' ports may still take data meanwhile.
                    Ok(None) if self.port_blocked => self.tlp = Some((c, p)),
                    // The SACK span is full (the RTO covers that flight) or the WR failed.
                    Ok(None) | Err(()) => {}
                }
            }
        }
        let inflight = self.inflight();
        if inflight == 0 && self.has_unsent() {
            // Busy again after an idle spell: a backed-off home probe comes forward now, not
            // at the next full timer pass, which a busy flow may not reach for a long time.
            self.cap_home_probes(now);
        }
        if inflight > 0 && inflight as f64 + self.mtu as f64 > self.conn_window() {
            self.pace_fresh = true; // held by the window, not late: no catch-up credit
            return None;
        }
        // Cold start: with no ACK heard (or none for `cold_after`), ask the receiver for its
        // fair-share hint with a small PROBE and send data once its ACK arrives. N senders
        // starting together then put N tiny probes, not N windows, into the receiver's queue.
        let mut cold =
            self.last_ack_at == 0 || now.saturating_sub(self.last_ack_at) > self.cfg.cold_after_ns;
        if cold && self.peer_sole && self.hint_req_at.get().is_none() && self.has_unsent() {
            // The peer has no other connection (SOLE, §5.8 COLD-5): nothing can share its
            // inbound link, so its hint would be the line rate: start there now (and count
            // as warm, as after an ACK, until `cold_after` passes without one).
            self.apply_hint(self.line_rate_mbps);
            self.last_ack_at = now.max(1);
            cold = false;
        }
        let waiting = self
            .hint_req_at
            .get()
            .is_some_and(|t| now < t + self.cfg.initial_rto_ns);
        if waiting && !self.crowd_started {
            // Only the pilot goes before the answer: one data packet, on the request's path
            // (behind the request, so the receiver holds its ACK with the answer's).
            if inflight > 0 || self.pilot_at.get().is_none_or(|t| t > now) {
                return None;
            }
            self.pilot_at = At::from(None);
            let path = (self.pilot_path as usize).min(self.n_paths as usize - 1);
            while let Some((chunk, _, retx)) = self.next_chunk() {
                match self.build_packet(now, chunk, u8::MAX, retx, Some(path), buf, mem) {
                    Ok(Some(x)) => {
                        self.pilot_sent_at = At::from(Some(now));
                        return Some(x);
                    }
                    Ok(None) => {
                        self.retx.push_front((chunk, u8::MAX));
                        self.pilot_at = At::from(Some(now)); // its NIC port is busy: next time
                        return None;
                    }
                    Err(()) => continue,
                }
            }
            return None;
        }
        // A request goes out when the connection is cold and has data, or again while the
        // pilot is all that went out (the request or its answer was lost); not while one is
        // pending (only a crowd start, COLD-8, gets here then: it sends data meanwhile).
        if cold
            && !waiting
            && self.has_unsent()
            && self.hint_tries < HINT_TRIES
            && (inflight == 0 || self.hint_tries > 0)
        {
            let p = match self.paths.iter().position(|p| p.state == PathState::Good) {
                Some(i) => i,
                // The first fresh path is Good.
                None if self.paths.len() < self.n_paths as usize => self.paths.len(),
                None => 0,
            } as u8;
            if self.hint_tries == 0 {
                self.pilot_path = p;
                self.pilot_sent_at = At::from(None);
                self.crowd_started = self.may_crowd_start(now);
                if self.crowd_started {
                    // COLD-8: the crowd's share at once, no pilot; the first packet at a
                    // pseudo-random point of the crowd's span (COLD-7's, uncapped: the
                    // crowd's first packets beyond what the last hop absorbs arrive no
                    // faster than the link drains them).
                    self.apply_hint(self.line_rate_mbps / u32::from(self.peer_crowd));
                    self.pilot_at = At::from(None);
                    let at = now + splitmix64(self.seed ^ now) % self.crowd_span().max(1);
                    self.first_paced_at(now, at);
                } else {
                    self.pilot_at = At::from(Some(
                        now + splitmix64(self.seed ^ now ^ 0x9170) % self.pilot_spread().max(1),
                    ));
                }
            }
            self.hint_req_at = At::from(Some(now));
            self.hint_tries += 1;
            self.ctrl_queue.push_back(Ctrl::HintRequest(p));
            return self.emit_ctrl(now, buf);
        }
        // Paced at the receiver's hint: the rate is what the receiver allots, whatever the
        // RTT (a window of one packet per RTT would favour near senders).
        if self.peer_hint_mbps != 0 {
            if now < self.pace_release_at() {
                return None;
            }
            // Released: the packets due now go back to back (build_packet ends the batch).
            self.pace_batch = true;
        }
        // Nothing goes out unless some path has room for a full packet (checked without
        // choosing one: `build_packet` chooses, once, for the chunk it builds).
        if !self.any_path_has_room(self.mtu) {
            self.pace_fresh = true;
            return None;
        }
        loop {
            let Some((chunk, avoid, retx)) = self.next_chunk() else {
                self.pace_fresh = true; // nothing to send: idle time earns no credit
                return None;
            };
            match self.build_packet(now, chunk, avoid, retx, None, buf, mem) {
                Ok(Some(x)) => {
                    self.pilot_sent_at = At::from(None);
                    return Some(x);
                }
                Ok(None) => {
                    // No path has room after all: put the chunk back at the front.
                    self.retx.push_front((chunk, avoid));
                    self.pace_fresh = true;
                    return None;
                }
                Err(()) => continue, // the chunk's WR failed locally; try the next one
            }
        }
    }

    /// The next chunk to send: resends first, then responses, then new request chunks;
    /// returns (chunk, path to avoid, is a resend).
    #[inline] // returned through memory, its result was read back with a stalled load
    pub(super) fn next_chunk(&mut self) -> Option<(ChunkRef, u8, bool)> {
        loop {
            if let Some((c, a)) = self.retx.pop_front() {
                if self.chunk_needed(&c) {
                    return Some((c, a, true));
                }
            } else if let Some(id) = self.resp_active.pop_front() {
                let Some(s) = self.streams.get_mut(&id) else {
                    continue;
                };
                match s.next_resp_chunk() {
                    Some((msn, chunk, more)) => {
                        if more {
                            self.resp_active.push_back(id);
                        } else {
                            s.in_resp_active = false;
                        }
                        let c = ChunkRef::Resp {
                            stream: id,
                            msn,
                            chunk,
                        };
                        return Some((c, u8::MAX, false));
                    }
                    None => s.in_resp_active = false,
                }
            } else {
                return self.next_new_chunk().map(|c| (c, u8::MAX, false));
            }
        }
    }

    /// Build the packet of one chunk into `buf`. Ok(None): no path has room. Err: the WR
    /// failed (local memory), already completed with an error. `forced`: this path, past its
    /// window (a tail-loss probe).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn build_packet(
        &mut self,
        now: u64,
        chunk: ChunkRef,
        avoid: u8,
        retx: bool,
        forced: Option<usize>,
        buf: &mut [u8],
        mem: &mut dyn Memory,
    ) -> Result<Option<(usize, u16)>, ()> {
        let mtu = self.mtu;
        // Work out the headers and where the payload comes from.
        enum Src {
            None,
            /// A scatter/gather list of up to two pieces, copied (no clone of the list per
            /// packet), its length, the message offset, the domain.
            Local([Sge; 2], usize, u64, u32),
            /// A longer list: the WR's index in the stream's queue, offset, domain.
            LocalAt(usize, u64, u32),
            Remote(u32, u32, u64),
        }
        let (stream_id, msg, op, plen, src, solicited, ordered) = match chunk {
            ChunkRef::Req {
                stream,
                msn,
                chunk: ci,
            } => {
                let s = self.streams.get(&stream).ok_or(())?;
                let d = msn.wrapping_sub(s.base_msn) as usize;
                let w = s.wrs.get(d).ok_or(())?;
                let off = ci * mtu;
                let plen = match w.wr.op {
                    SendOp::Send { .. } | SendOp::Write { .. } => {
                        w.len.saturating_sub(off).min(mtu)
                    }
                    _ => 0,
                };
                let msg = MsgHeader {
                    stream: s.remote,
                    msn,
                    offset: if plen > 0 { off } else { 0 },
                    length: w.len,
                };
                let op = match w.wr.op {
                    SendOp::Send { imm: None } => DataOp::Send { rsn: w.rsn },
                    SendOp::Send { imm: Some(imm) } => DataOp::SendImm { rsn: w.rsn, imm },
                    SendOp::Write { rkey, raddr, imm } => match imm {
                        None => DataOp::Write {
                            rkey,
                            raddr: raddr.wrapping_add(off as u64),
                        },
                        Some(imm) => DataOp::WriteImm {
                            rkey,
                            raddr: raddr.wrapping_add(off as u64),
                            rsn: w.rsn,
                            imm,
                        },
                    },
                    SendOp::Read { rkey, raddr } => DataOp::ReadReq { rkey, raddr },
                    SendOp::FetchAdd { rkey, raddr, add } => DataOp::FetchAdd { rkey, raddr, add },
                    SendOp::CmpSwap {
                        rkey,
                        raddr,
                        compare,
                        swap,
                    } => DataOp::CmpSwap {
                        rkey,
                        raddr,
                        compare,
                        swap,
                    },
                };
                let msg = match op {
                    DataOp::FetchAdd { .. } | DataOp::CmpSwap { .. } => MsgHeader {
                        length: 8,
                        offset: 0,
                        ..msg
                    },
                    _ => msg,
                };
                let src = if plen > 0 {
                    let sgl = &w.wr.sgl;
                    match *sgl.as_slice() {
                        [a] => Src::Local([a, a], 1, off as u64, s.pd),
                        [a, b] => Src::Local([a, b], 2, off as u64, s.pd),
                        _ => Src::LocalAt(d, off as u64, s.pd),
                    }
                } else {
                    Src::None
                };
                (stream, msg, op, plen, src, w.wr.solicited, w.ordered)
            }
            ChunkRef::Resp {
                stream,
                msn,
                chunk: ci,
            } => {
                let s = self.streams.get(&stream).ok_or(())?;
                let r = s.responses.get(msn).ok_or(())?;
                let off = ci * mtu;
                let (op, plen, src) = match r.kind {
                    // A zero-length READ reads nothing (and was never checked against a key).
                    RespKind::Read { .. } if r.length == 0 => (DataOp::ReadResp, 0, Src::None),
                    RespKind::Read { rkey, raddr } => {
                        let plen = r.length.saturating_sub(off).min(mtu);
                        (
                            DataOp::ReadResp,
                            plen,
                            Src::Remote(rkey, s.pd, raddr + off as u64),
                        )
                    }
                    RespKind::Atomic { orig } => (DataOp::AtomicResp { orig }, 0, Src::None),
                };
                let msg = MsgHeader {
                    stream: s.remote,
                    msn,
                    offset: if plen > 0 { off } else { 0 },
                    length: r.length,
                };
                (stream, msg, op, plen, src, false, false)
            }
        };
        let uc = matches!(chunk, ChunkRef::Req { .. }) && self.is_uc(stream_id);
        let pi = match forced {
            // A probe of this path: only the SACK span and the NIC port's room bound it.
            Some(pi) => {
                self.grow_tx(pi);
                let p = &self.paths[pi];
                if !p.in_span() {
                    return Ok(None);
                }
                if p.plane >= 64 || self.tx_ready >> p.plane & 1 == 0 {
                    self.port_blocked = true;
                    return Ok(None);
                }
                pi
            }
            // An unreliable stream keeps to its home path, so its chunks arrive in order.
            None if uc => match self.uc_path(stream_id, plen.max(1)) {
                Some(pi) => pi,
                None => return Ok(None),
            },
            None => match self.pick_path(plen.max(1), avoid) {
                Some(pi) => pi,
                None => return Ok(None),
            },
        };
        self.grow_tx(pi);
        let last = msg.offset + plen >= msg.length;
        let mut fl = 0;
        if last {
            fl |= flags::LAST;
        }
        if retx {
            fl |= flags::RETX;
        }
        if solicited && last {
            fl |= flags::SOLICITED;
        }
        if ordered {
            fl |= flags::ORDERED;
        }
        if uc {
            fl |= flags::UNRELIABLE;
        }
        let backlog = self.has_unsent();
        if backlog {
            fl |= flags::BACKLOG;
        }
        // Ask for an ACK at once rather than after the receiver's delayed-ACK timer when
        // nothing follows this packet (the end of a flight: no later packet would trigger
        // the receiver's ACK count), and when it fills the window, or a small window idles
        // for that long every round; the latter once until an ACK comes back, or a sender
        // held at its window would ask on every packet and get one ACK per packet.
        let fills = || (self.inflight() + 2 * mtu as u64) as f64 > self.conn_window();
        if forced.is_some() || (last && !backlog) || (!self.ack_req_out && fills()) {
            fl |= flags::ACK_REQ;
            self.ack_req_out = true;
        }
        let path = &self.paths[pi];
        let pkt = Packet {
            flags: fl,
            path: pi as u8,
            dst_conn: self.peer_conn,
            body: Body::Data(DataRepr {
                seq: SeqHeader {
                    psn: path.next_psn,
                    floor: path.floor(),
                    tsval: (now as u32).max(1),
                },
                msg,
                op,
                payload: &[],
            }),
        };
        let h = pkt.emit_headers(buf).map_err(|_| ())?;
        if buf.len() < h + plen as usize + wire::TRAILER_LEN {
            return Err(());
        }
        // Payload straight from registered memory into the packet buffer.
        let dst = &mut buf[h..h + plen as usize];
        let read = match src {
            Src::None => Ok(()),
            Src::Local(sgl, n, off, pd) => sgl_read(mem, pd, &sgl[..n], off, dst),
            Src::LocalAt(d, off, pd) => {
                // The same WR as above: nothing in between changes the stream's queue.
                let s = self.streams.get(&stream_id).ok_or(())?;
                let w = s.wrs.get(d).ok_or(())?;
                sgl_read(mem, pd, &w.wr.sgl, off, dst)
            }
            Src::Remote(rkey, pd, addr) => mem.read_remote(pd, rkey, addr, dst),
        };
        if read.is_err() {
            self.local_failure(chunk, stream_id);
            return Err(());
        }
        let len = wire::seal(buf, h + plen as usize);
        if self.peer_hint_mbps != 0 {
            // The hinted rate on wire bytes. A sender that was due but polled late (an engine
            // reads its clock once per poll, and a poll can take longer than a gap) catches up
            // on up to `pace_catch_up` packets at once, so the rate stays the hint's; a sender
            // that was idle, or held by its window or a full NIC port, earns no credit.
            let wire = (len + WIRE_OVERHEAD) as f64;
            let gap = (wire * 8000.0 / self.peer_hint_mbps as f64) as u64;
            // A released batch is owed its packets: the credit covers at least the batch.
            let credit = self
                .cfg
                .pace_catch_up
                .max(self.cfg.pace_burst.saturating_sub(1));
            let from = if std::mem::take(&mut self.pace_fresh) {
                self.pace_next.max(now)
            } else {
                self.pace_next.max(now.saturating_sub(gap * credit as u64))
            };
            self.pace_next = from + gap;
            if gap != self.pace_gap {
                // `pace_release_at` runs on every poll: its division is done here, once per
                // change of the gap.
                self.pace_gap = gap;
                self.pace_hold = if self.cfg.pace_burst <= 1 || gap == 0 {
                    0
                } else {
                    (self.cfg.pace_quantum_ns / gap).min(self.cfg.pace_burst as u64 - 1) * gap
                };
            }
            // The batch lasts while packets are due; the next one waits for a full batch.
            self.pace_batch &= self.pace_next <= now;
            self.pace_armed = self.pace_release_at() > now;
        }
        let entropy = self.paths[pi].entropy;
        self.last_tx_port = self.paths[pi].plane;
        let before = self.paths[pi].inflight_bytes;
        self.paths[pi].on_send(chunk, plen, now, retx);
        self.path_changed(pi, before);
        self.mark_path(pi);
        if let (true, ChunkRef::Req { msn, chunk: ci, .. }) = (uc, chunk) {
            // Sent once: done (nothing will resend it).
            self.uc_sent(stream_id, msn, ci);
        }
        let counters = self.counters.live();
        counters.tx_pkts += 1;
        counters.tx_payload_bytes += plen as u64;
        if retx {
            counters.retx_pkts += 1;
        }
        Ok(Some((len, entropy)))
    }
}

/// The running choice of `pick_path`.
struct PathScan {
    bytes: u32,
    avoid: u8,
    rule: Option<u64>,
    tx_ready: u64,
    best: Option<(usize, f64)>,
    fallback: Option<(usize, f64)>,
    blocked: bool,
}

impl PathScan {
    /// Path `i` may carry the packet on `plane`: keep it if its port has room and its load
    /// (read only then) is the lowest so far; the first of equal loads wins.
    #[inline]
    fn offer(&mut self, i: usize, plane: u8, load: impl FnOnce() -> f64) {
        if plane >= 64 || self.tx_ready >> plane & 1 == 0 {
            self.blocked = true;
            return;
        }
        let slot = if i as u8 == self.avoid {
            &mut self.fallback
        } else {
            &mut self.best
        };
        // No load is below 0: once the slot holds an empty path no later one can take it
        // (the first of equal loads wins), so its load, a division, is not computed.
        if slot.is_some_and(|(_, bl)| bl <= 0.0) {
            return;
        }
        let l = load();
        if slot.is_none_or(|(_, bl)| l < bl) {
            *slot = Some((i, l));
        }
    }
}
