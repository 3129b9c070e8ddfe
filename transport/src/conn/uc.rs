//! Unreliable streams (verbs UC QPs; spec/transport.md §3.5): SEND and WRITE, with and
//! without immediate, sent once and never acknowledged at the message level.
//!
//! - Requester: a chunk counts as done once sent; a WR completes (successfully) when its
//!   last chunk has left. The chunk still takes a PSN on its path and the path's ACKs still
//!   carry it, because congestion control and the path's loss detection work on PSNs; but a
//!   chunk declared lost is never resent (its WR is gone, so [`Connection::chunk_needed`]
//!   says no) and its PSN is simply settled.
//! - Every chunk of a stream takes one path, its home path (chosen from the stream id, the
//!   next good one if that path is not), so on a network that keeps a flow's order the
//!   chunks arrive in order, and a gap in (MSN, offset) means loss, not reordering.
//! - Every packet carries the UNRELIABLE flag, so a stream whose two ends disagree is found
//!   at once.
//! - Responder: the stream expects the next (MSN, offset); any other packet ends the message
//!   in progress (its partial data stays placed, its receive is reused by the next message,
//!   no completion), and packets are dropped until a message's first chunk (offset 0)
//!   arrives, whatever its MSN: the stream resynchronises on it. RC's refusals (no receive,
//!   bad key, bad chunk) drop the message silently instead of sending a NACK; a SEND longer
//!   than its receive completes that receive with a local length error.

use super::*;

/// The receive side of an unreliable stream.
#[derive(Debug, Default)]
pub(super) struct UcRx {
    /// The (MSN, offset) the next packet must carry.
    next_msn: u32,
    next_off: u32,
    /// The message in progress: what each further chunk must repeat, and its receive.
    cur: Option<UcMsg>,
    /// The message in progress lost a packet: drop until the next first chunk.
    dropping: bool,
}

#[derive(Debug)]
struct UcMsg {
    kind: RxKind,
    length: u32,
    /// WRITE: rkey and base address.
    rkey: u32,
    base: u64,
    /// SEND: the receive it fills (taken from the posted queue).
    recv: Option<RecvWr>,
}

impl Connection {
    /// Create an unreliable stream (a verbs UC QP): see the module documentation.
    pub(crate) fn create_uc_stream(
        &mut self,
        local: u32,
        remote: u32,
        pd: u32,
    ) -> Result<(), PostError> {
        self.create_stream(local, remote, pd)?;
        if let Some(s) = self.streams.get_mut(&local) {
            s.uc = Some(Box::default());
        }
        Ok(())
    }

    /// The home path of unreliable stream `stream` for a packet of `bytes`; None when it has
    /// no room (the chunk waits: another path would reorder the stream).
    pub(super) fn uc_path(&mut self, stream: u32, bytes: u32) -> Option<usize> {
        let n = self.n_paths as usize;
        if n == 0 {
            return None;
        }
        let home = (splitmix64(self.seed ^ stream as u64) % n as u64) as usize;
        let any_good = self.any_good();
        let pi = (0..n)
            .map(|k| (home + k) % n)
            .find(|&i| !any_good || self.paths.get(i).is_none_or(|p| p.state == PathState::Good))?;
        // A fresh path is Good with room.
        let plane = match self.paths.get(pi) {
            Some(p) if !p.has_room(bytes) => return None,
            Some(p) => p.plane,
            None => self.tx_plane(pi)?,
        };
        if plane >= 64 || self.tx_ready >> plane & 1 == 0 {
            self.port_blocked = true;
            return None;
        }
        Some(pi)
    }

    /// A chunk of unreliable stream `stream` has left: it is done, and so may its WR be.
    pub(super) fn uc_sent(&mut self, stream: u32, msn: u32, chunk: u32) {
        if let Some(s) = self.streams.get_mut(&stream) {
            if let Some(w) = s.wr_mut(msn) {
                w.acked.set(chunk);
            }
        }
        self.complete_requests(stream);
    }

    /// Whether `stream` is unreliable.
    pub(super) fn is_uc(&self, stream: u32) -> bool {
        self.streams.get(&stream).is_some_and(|s| s.uc.is_some())
    }

    /// A new request packet of unreliable stream `d.msg.stream` (its path already accepted
    /// it as new): place it or drop it. Never refused: UC sends no NACK, and the packet is
    /// acknowledged on its path like any other (that ACK is for congestion control only).
    pub(super) fn process_uc(&mut self, fl: u8, d: &DataRepr<'_>, mem: &mut dyn Memory) -> Verdict {
        let mtu = self.mtu;
        let conn = self.id;
        let local = d.msg.stream;
        let Some(s) = self.streams.get_mut(&local) else {
            return Verdict::Refuse(NackReason::InvalidRequest, 0);
        };
        let pd = s.pd;
        let Some(rx) = s.uc.as_deref_mut() else {
            return Verdict::Refuse(NackReason::InvalidRequest, 0);
        };
        let m = d.msg;
        let c = self.counters.live();
        if fl & flags::UNRELIABLE == 0
            || matches!(
                d.op,
                DataOp::ReadReq { .. }
                    | DataOp::FetchAdd { .. }
                    | DataOp::CmpSwap { .. }
                    | DataOp::ReadResp
                    | DataOp::AtomicResp { .. }
            )
        {
            // A reliable packet or an operation UC does not have: the ends disagree.
            c.uc_refused += 1;
            return Verdict::Accept;
        }
        // Abandon the message in progress: its receive goes back for the next message.
        let abandon = |rx: &mut UcRx, posted: &mut SlimDeque<RecvWr>, c: &mut ConnCounters| {
            if let Some(msg) = rx.cur.take() {
                c.uc_msgs_dropped += 1;
                if let Some(r) = msg.recv {
                    posted.push_front(r);
                }
            }
        };
        let first = m.offset == 0;
        if (m.msn, m.offset) != (rx.next_msn, rx.next_off) || rx.dropping {
            abandon(rx, &mut s.posted, c);
            if !first {
                rx.dropping = true;
                c.uc_pkts_dropped += 1;
                return Verdict::Accept;
            }
            rx.dropping = false;
        }
        let last = m.offset as u64 + d.payload.len() as u64 >= m.length as u64;
        // Whatever happens to this packet, the next one expected follows it.
        (rx.next_msn, rx.next_off) = if last {
            (m.msn.wrapping_add(1), 0)
        } else {
            (m.msn, m.offset.wrapping_add(mtu))
        };
        let (kind, rkey, base) = match d.op {
            DataOp::Send { .. } => (RxKind::Send { imm: None }, 0, 0),
            DataOp::SendImm { imm, .. } => (RxKind::Send { imm: Some(imm) }, 0, 0),
            DataOp::Write { rkey, raddr } => {
                (RxKind::Write, rkey, raddr.wrapping_sub(m.offset as u64))
            }
            DataOp::WriteImm {
                rkey, raddr, imm, ..
            } => (
                RxKind::WriteImm { imm },
                rkey,
                raddr.wrapping_sub(m.offset as u64),
            ),
            _ => return Verdict::Accept, // excluded above
        };
        // Drop the rest of this message (no NACK: UC).
        let drop_rest = |rx: &mut UcRx| {
            rx.cur = None;
            rx.dropping = !last;
        };
        // The chunk carries exactly its share of the message (§5.1).
        if !m.offset.is_multiple_of(mtu)
            || d.payload.len() as u32 != m.length.saturating_sub(m.offset).min(mtu)
        {
            abandon(rx, &mut s.posted, c);
            c.uc_refused += 1;
            drop_rest(rx);
            return Verdict::Accept;
        }
        if first {
            abandon(rx, &mut s.posted, c);
            let recv = match kind {
                RxKind::Send { .. } => {
                    let Some(r) = s.posted.pop_front() else {
                        c.uc_no_recv += 1;
                        drop_rest(rx);
                        return Verdict::Accept;
                    };
                    if m.length as u64 > sgl_len(&r.sgl) {
                        // Too long for its receive: that receive fails, as in RC.
                        self.completions.push_back(Completion {
                            conn,
                            stream: local,
                            wr_id: r.wr_id,
                            status: Status::LocalLength,
                            op: CompletionOp::Recv,
                            byte_len: 0,
                            imm: None,
                            ud_src: None,
                        });
                        drop_rest(rx);
                        return Verdict::Accept;
                    }
                    Some(r)
                }
                _ => {
                    let key_ok = m.length == 0
                        || mem
                            .check_remote(pd, rkey, base, m.length as u64, access::REMOTE_WRITE)
                            .is_ok();
                    let recv_ok = !matches!(kind, RxKind::WriteImm { .. }) || !s.posted.is_empty();
                    if !key_ok || !recv_ok {
                        if !key_ok {
                            c.remote_access_refused += 1;
                            c.uc_refused += 1;
                        } else {
                            c.uc_no_recv += 1;
                        }
                        drop_rest(rx);
                        return Verdict::Accept;
                    }
                    None
                }
            };
            rx.cur = Some(UcMsg {
                kind,
                length: m.length,
                rkey,
                base,
                recv,
            });
        }
        let Some(msg) = rx.cur.as_mut() else {
            return Verdict::Accept;
        };
        if msg.kind != kind || msg.length != m.length || msg.rkey != rkey || msg.base != base {
            abandon(rx, &mut s.posted, c);
            c.uc_refused += 1;
            drop_rest(rx);
            return Verdict::Accept;
        }
        let placed = match &msg.recv {
            Some(r) => sgl_write(mem, pd, &r.sgl, m.offset as u64, d.payload).is_ok(),
            None => {
                d.payload.is_empty()
                    || mem
                        .write_remote(pd, rkey, base.wrapping_add(m.offset as u64), d.payload)
                        .is_ok()
            }
        };
        if !placed {
            // The receive buffer or the region changed under the message.
            if let Some(r) = rx.cur.take().and_then(|msg| msg.recv) {
                self.completions.push_back(Completion {
                    conn,
                    stream: local,
                    wr_id: r.wr_id,
                    status: Status::LocalProtection,
                    op: CompletionOp::Recv,
                    byte_len: 0,
                    imm: None,
                    ud_src: None,
                });
            }
            drop_rest(rx);
            return Verdict::Accept;
        }
        if !last {
            return Verdict::Accept;
        }
        let Some(msg) = rx.cur.take() else {
            return Verdict::Accept;
        };
        c.messages_completed_rx += 1;
        let done = match (msg.kind, msg.recv) {
            (RxKind::Send { imm }, Some(r)) => Some((r, CompletionOp::Recv, imm)),
            (RxKind::WriteImm { imm }, None) => s
                .posted
                .pop_front()
                .map(|r| (r, CompletionOp::RecvWriteImm, Some(imm))),
            _ => None,
        };
        if let Some((r, op, imm)) = done {
            self.completions.push_back(Completion {
                conn,
                stream: local,
                wr_id: r.wr_id,
                status: Status::Success,
                op,
                byte_len: m.length,
                imm,
                ud_src: None,
            });
        }
        Verdict::Accept
    }
}
