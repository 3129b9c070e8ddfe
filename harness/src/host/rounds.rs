//! Running the workload again and again on the same connections (a soak's rounds), and the
//! checks of the server's write slots at the end of a round or run.

use super::*;

impl NodeHost {
    /// Run client `idx`'s workload again, as round [`Client::round`] + 1, on the same
    /// connection and streams (a soak's clients do this over and over). The client must be
    /// done and its server re-armed first ([`NodeHost::rearm_server`]). Returns false (and
    /// changes nothing) when the client is not done.
    pub fn restart_client(&mut self, idx: usize, now: u64) -> bool {
        let Some(cl) = self.clients.get_mut(idx) else {
            return false;
        };
        if cl.finished_at.is_none() {
            return false;
        }
        cl.round = cl.round.wrapping_add(1) & 0xffff;
        cl.next_post.iter_mut().for_each(|x| *x = 0);
        cl.next_done.iter_mut().for_each(|x| *x = 0);
        cl.finished_at = None;
        cl.started_at = now;
        cl.posted = false;
        self.post_initial(idx, now);
        true
    }

    /// Post a new round of receives on every connection of the server role (see
    /// [`NodeHost::restart_client`]): every client of this server must have finished its
    /// round, so every receive of it has been consumed.
    pub fn rearm_server(&mut self) {
        let Some(sv) = self.server_role.as_deref_mut() else {
            return;
        };
        let conns = sv.conns.clone();
        for conn in conns {
            let Some(pc) = sv.per_conn.get_mut(&conn) else {
                continue;
            };
            pc.round = pc.round.wrapping_add(1) & 0xffff;
            pc.next_recv.iter_mut().for_each(|x| *x = 0);
            for s in 0..sv.spec.streams {
                for _ in 0..sv.spec.recv_depth {
                    Self::post_recv(&mut *self.ep, sv, conn, s, &mut self.errors);
                }
            }
        }
    }

    /// Check the server's write slots against the last write to each (end-of-run check).
    pub fn verify_server_writes(&self) -> Vec<String> {
        let Some(srv) = self.server() else {
            return Vec::new();
        };
        let Some(region) = self.mem.region(srv.keys.write_rkey) else {
            return vec!["write region missing".into()];
        };
        let mut errs = Vec::new();
        for (s, i, off, size) in self.server_last_writes() {
            let bytes = &region.data[off..off + size];
            if let Some(j) = check_pattern(bytes, s, i) {
                errs.push(format!(
                    "stream {s} write {i}: byte {j} wrong in server memory"
                ));
            }
        }
        errs
    }

    /// [`NodeHost::verify_server_writes`], then zero the bytes it checked: a soak's rounds
    /// write the same patterns again, so a WRITE of the next round that never lands leaves
    /// zeros to be caught instead of last round's identical bytes.
    pub fn verify_and_scrub_server_writes(&mut self) -> Vec<String> {
        let errs = self.verify_server_writes();
        let last = self.server_last_writes();
        let key = self.server().map(|s| s.keys.write_rkey);
        if let Some(r) = key.and_then(|k| self.mem.region_mut(k)) {
            for (_, _, off, size) in last {
                r.data[off..off + size].fill(0);
            }
        }
        errs
    }

    /// (stream, index, offset in the write region, size) of the last WRITE to each slot.
    fn server_last_writes(&self) -> Vec<(u32, u32, usize, usize)> {
        let Some(srv) = self.server() else {
            return Vec::new();
        };
        let spec = &srv.spec;
        let slots = spec.write_slots();
        let mut out = Vec::new();
        for s in 0..spec.streams {
            let mut last: HashMap<u32, (u32, u32)> = HashMap::new();
            for i in 0..spec.messages {
                let (op, size) = spec.op_at(s, i);
                if matches!(op, OpKind::Write | OpKind::WriteImm) {
                    last.insert(i % slots, (i, size));
                }
            }
            for (slot, (i, size)) in last {
                let off = ((s * slots + slot) as u64 * srv.keys.layout.slot) as usize;
                out.push((s, i, off, size as usize));
            }
        }
        out
    }
}
