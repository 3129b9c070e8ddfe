//! Requester side of the streams: posting work requests, the order they start in (stream window, fences), and completing them in MSN order (spec/transport.md §3, §5.5, §8).

use super::*;

impl Connection {
    // ---- streams and work requests ----------------------------------------------------

    pub(crate) fn create_stream(
        &mut self,
        local: u32,
        remote: u32,
        pd: u32,
    ) -> Result<(), PostError> {
        if self.streams.contains_key(&local) {
            return Err(PostError::StreamExists);
        }
        self.streams.insert(
            local,
            Box::new(Stream {
                remote,
                pd,
                err_msn: None,
                in_active: false,
                next_msn: 0,
                next_rsn: 0,
                base_msn: 0,
                wrs: SlimDeque::new(),
                cursor_msn: 0,
                cursor_chunk: 0,
                rx_err: None,
                rx_base_msn: 0,
                rx_msgs: Default::default(),
                posted: SlimDeque::new(),
                consumed_rsn: 0,
                responses: Default::default(),
                resp_cursor: (0, 0),
                in_resp_active: false,
                uc: None,
            }),
        );
        Ok(())
    }

    /// Remove a stream, flushing whatever it still holds.
    pub(crate) fn destroy_stream(&mut self, local: u32) -> Result<(), PostError> {
        self.flush_stream(local);
        let s = self
            .streams
            .remove(&local)
            .ok_or(PostError::UnknownStream)?;
        let held: usize = s
            .rx_msgs
            .values()
            .flat_map(|m| m.held.iter().map(|(_, d)| d.len()))
            .sum();
        self.held_bytes -= held as u64;
        Ok(())
    }

    pub(crate) fn post_send(&mut self, local: u32, wr: SendWr) -> Result<(), PostError> {
        if matches!(
            self.state,
            ConnState::Closing | ConnState::Closed | ConnState::Failed
        ) {
            return Err(PostError::ConnectionClosed);
        }
        let mtu = self.mtu;
        let s = self
            .streams
            .get_mut(&local)
            .ok_or(PostError::UnknownStream)?;
        if s.in_error() {
            return Err(PostError::StreamInError);
        }
        let len = wr.len();
        if s.uc.is_some() && !matches!(wr.op, SendOp::Send { .. } | SendOp::Write { .. }) {
            return Err(PostError::Unsupported); // UC has SEND and WRITE only
        }
        if len > u32::MAX as u64 {
            return Err(PostError::InvalidLength);
        }
        let len = len as u32;
        let data_chunks = len.div_ceil(mtu).max(1);
        let (chunks, resp_chunks, rsn) = match &wr.op {
            SendOp::Send { .. } => {
                s.next_rsn = s.next_rsn.wrapping_add(1);
                (data_chunks, 0, s.next_rsn.wrapping_sub(1))
            }
            SendOp::Write { imm: Some(_), .. } => {
                s.next_rsn = s.next_rsn.wrapping_add(1);
                (data_chunks, 0, s.next_rsn.wrapping_sub(1))
            }
            SendOp::Write { imm: None, .. } => (data_chunks, 0, 0),
            SendOp::Read { .. } => (1, data_chunks, 0),
            SendOp::FetchAdd { .. } | SendOp::CmpSwap { .. } => {
                if len != 8 {
                    return Err(PostError::InvalidLength);
                }
                (1, 1, 0)
            }
        };
        // Overlap with earlier requests not completed yet (§7.2): a WRITE over the target of
        // an earlier WRITE or atomic is ORDERED; a WRITE or atomic over an earlier READ's
        // source waits for that READ (its response is read from memory when sent).
        let (mut ordered, mut read_fence) = (false, false);
        let target = wr.remote_range();
        if let Some((lo, hi)) = target {
            let is_write = matches!(wr.op, SendOp::Write { .. });
            let modifies = !matches!(wr.op, SendOp::Read { .. });
            // Every WR still queued counts, acknowledged or not: an acknowledged chunk may be
            // held at the responder until the WRs before it complete. A READ whose response
            // is all in is no longer read for this requester.
            for x in s.wrs.iter() {
                let Some((xl, xh)) = x.target else {
                    continue;
                };
                if xl >= hi || lo >= xh {
                    continue;
                }
                if matches!(x.wr.op, SendOp::Read { .. }) {
                    read_fence |= modifies && !x.done();
                } else {
                    ordered |= is_write;
                }
            }
        }
        let msn = s.next_msn;
        s.next_msn = msn.wrapping_add(1);
        s.wrs.push_back(ReqWr {
            wr,
            rsn,
            len,
            chunks,
            acked: Bits::new(chunks),
            resp_chunks,
            resp_got: Bits::new(resp_chunks),
            status: None,
            rnr_count: 0,
            ordered,
            read_fence,
            target,
        });
        if !s.in_active {
            s.in_active = true;
            self.active.push_back(local);
        }
        Ok(())
    }

    pub(crate) fn post_recv(&mut self, local: u32, wr: RecvWr) -> Result<(), PostError> {
        let s = self
            .streams
            .get_mut(&local)
            .ok_or(PostError::UnknownStream)?;
        if s.in_error() {
            return Err(PostError::StreamInError);
        }
        s.posted.push_back(wr);
        Ok(())
    }

    /// Requester: report finished work requests in MSN order.
    pub(super) fn complete_requests(&mut self, local: u32) {
        let conn = self.id;
        let Some(s) = self.streams.get_mut(&local) else {
            return;
        };
        if let Some(e) = s.err_msn {
            let first = e.wrapping_sub(s.base_msn) as usize;
            for w in s.wrs.iter_mut().skip(first + 1) {
                if !w.done() {
                    w.status = Some(Status::Flushed);
                }
            }
        }
        while let Some(w) = s.wrs.front() {
            if !w.done() {
                break;
            }
            let w = match s.wrs.pop_front() {
                Some(w) => w,
                None => break,
            };
            s.base_msn = s.base_msn.wrapping_add(1);
            if (s.cursor_msn.wrapping_sub(s.base_msn) as i32) < 0 {
                s.cursor_msn = s.base_msn;
                s.cursor_chunk = 0;
            }
            let status = w.status.unwrap_or(Status::Success);
            self.counters.live().messages_completed_tx += 1;
            if status != Status::Success || w.wr.signaled {
                let op = match w.wr.op {
                    SendOp::Send { .. } => CompletionOp::Send,
                    SendOp::Write { .. } => CompletionOp::Write,
                    SendOp::Read { .. } => CompletionOp::Read,
                    SendOp::FetchAdd { .. } => CompletionOp::FetchAdd,
                    SendOp::CmpSwap { .. } => CompletionOp::CmpSwap,
                };
                self.completions.push_back(Completion {
                    conn,
                    stream: local,
                    wr_id: w.wr.wr_id,
                    status,
                    op,
                    byte_len: w.len,
                    imm: None,
                    ud_src: None,
                });
            }
        }
        // Completions may have lifted a window or fence block: make the stream active again.
        if !s.in_active && s.cursor_msn != s.next_msn && s.sendable(s.cursor_msn) {
            s.in_active = true;
            self.active.push_back(local);
        }
        if s.in_error() {
            // RC semantics: the error state flushes the receive queue too.
            while let Some(r) = s.posted.pop_front() {
                self.completions.push_back(Completion {
                    conn,
                    stream: local,
                    wr_id: r.wr_id,
                    status: Status::Flushed,
                    op: CompletionOp::Recv,
                    byte_len: 0,
                    imm: None,
                    ud_src: None,
                });
            }
        }
    }

    pub(super) fn flush_stream(&mut self, local: u32) {
        if let Some(s) = self.streams.get_mut(&local) {
            for w in s.wrs.iter_mut() {
                if !w.done() {
                    w.status = Some(Status::Flushed);
                }
            }
            s.err_msn = Some(s.base_msn);
        }
        self.complete_requests(local);
    }

    /// Fail every stream: the first unfinished WR of each gets `first`, the rest are flushed.
    pub(super) fn fail_all(&mut self, first: Status) {
        let ids: Vec<u32> = self.streams.keys().copied().collect();
        for id in ids {
            if let Some(s) = self.streams.get_mut(&id) {
                let base = s.base_msn;
                let msn = s
                    .wrs
                    .iter()
                    .position(|w| !w.done())
                    .map(|i| base.wrapping_add(i as u32));
                if let Some(m) = msn {
                    s.fail_wr(m, first);
                }
                for w in s.wrs.iter_mut() {
                    if !w.done() {
                        w.status = Some(Status::Flushed);
                    }
                }
                if s.err_msn.is_none() {
                    s.err_msn = Some(base);
                }
            }
            self.complete_requests(id);
        }
        self.retx.clear();
        self.tlp = None;
        self.resp_active.clear();
        for s in self.streams.values_mut() {
            s.in_resp_active = false;
        }
        self.active.clear();
        self.rnr_wait.clear();
    }

    pub(super) fn chunk_needed(&self, c: &ChunkRef) -> bool {
        match *c {
            ChunkRef::Req { stream, msn, chunk } => self.streams.get(&stream).is_some_and(|s| {
                let d = msn.wrapping_sub(s.base_msn) as usize;
                s.wrs
                    .get(d)
                    .is_some_and(|w| w.status.is_none() && !w.acked.get(chunk))
            }),
            ChunkRef::Resp { stream, msn, chunk } => self
                .streams
                .get(&stream)
                .and_then(|s| s.responses.get(msn))
                .is_some_and(|r| !r.acked.get(chunk)),
        }
    }

    /// Next new request chunk from the active streams (round robin by packet).
    /// WR at index `d` may not start yet: it is beyond the receiver's stream window, or it
    /// is fenced behind an unfinished READ or ATOMIC (verbs `IBV_SEND_FENCE`).
    pub(super) fn blocked(s: &Stream, d: usize, window: u32) -> bool {
        if d as u32 >= window {
            return true;
        }
        let Some(w) = s.wrs.get(d) else {
            return false;
        };
        if !w.wr.fence && !w.read_fence {
            return false;
        }
        s.wrs.iter().take(d).any(|x| {
            !x.done()
                && match x.wr.op {
                    SendOp::Read { .. } => true,
                    SendOp::FetchAdd { .. } | SendOp::CmpSwap { .. } => w.wr.fence,
                    _ => false,
                }
        })
    }

    pub(super) fn next_new_chunk(&mut self) -> Option<ChunkRef> {
        let window = self.cfg.stream_window;
        while let Some(id) = self.active.pop_front() {
            let Some(s) = self.streams.get_mut(&id) else {
                continue;
            };
            let mut found = None;
            while s.cursor_msn != s.next_msn && s.sendable(s.cursor_msn) {
                let d = s.cursor_msn.wrapping_sub(s.base_msn) as usize;
                let Some(w) = s.wrs.get(d) else { break };
                if w.status.is_some() || s.cursor_chunk >= w.chunks {
                    s.cursor_msn = s.cursor_msn.wrapping_add(1);
                    s.cursor_chunk = 0;
                    continue;
                }
                if s.cursor_chunk == 0 && Self::blocked(s, d, window) {
                    break; // re-activated by complete_requests when the block clears
                }
                found = Some(ChunkRef::Req {
                    stream: id,
                    msn: s.cursor_msn,
                    chunk: s.cursor_chunk,
                });
                s.cursor_chunk += 1;
                // Past the WR's last chunk now, not on the next call: `more` below, and so
                // the packet's BACKLOG flag, must not count a WR with nothing left to send.
                if s.cursor_chunk >= w.chunks {
                    s.cursor_msn = s.cursor_msn.wrapping_add(1);
                    s.cursor_chunk = 0;
                }
                break;
            }
            let d = s.cursor_msn.wrapping_sub(s.base_msn) as usize;
            let more = s.cursor_msn != s.next_msn
                && s.sendable(s.cursor_msn)
                && !(s.cursor_chunk == 0 && Self::blocked(s, d, window));
            if more {
                self.active.push_back(id);
            } else {
                s.in_active = false;
            }
            if found.is_some() {
                return found;
            }
        }
        None
    }

    pub(super) fn local_failure(&mut self, chunk: ChunkRef, stream: u32) {
        match chunk {
            ChunkRef::Req { msn, .. } => {
                if let Some(s) = self.streams.get_mut(&stream) {
                    s.fail_wr(msn, Status::LocalProtection);
                }
                self.complete_requests(stream);
            }
            ChunkRef::Resp { msn, .. } => {
                // The region behind a READ went away after the request was accepted.
                if let Some(s) = self.streams.get_mut(&stream) {
                    s.responses.take(msn);
                    let remote = s.remote;
                    self.counters.live().remote_access_refused += 1;
                    self.nack_queue.push_back(late_nack(remote, msn));
                }
            }
        }
    }
}
