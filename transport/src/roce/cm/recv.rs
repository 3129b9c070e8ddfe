//! What the CM does with a received MAD (spec/rocev2.md §10): find its exchange, move it
//! along, answer duplicates from state.

use super::wire::{
    msg_code, rej_reason, CmBody, CmMad, CmaHdr, MadError, Mra, Rej, Req, Short, CMA_HDR_LEN,
};
use super::*;

impl RoceCm {
    /// A MAD that arrived on QP1 from `src`; a bad one is counted and dropped.
    pub fn handle(&mut self, now: u64, src: Ipv4Addr, data: &[u8]) {
        self.counters.rx += 1;
        let m = match CmMad::parse(data) {
            Ok(m) => m,
            Err(e) => {
                let c = &mut self.counters;
                match e {
                    MadError::Truncated => c.drop_truncated += 1,
                    MadError::BadBaseVersion(_) | MadError::BadClassVersion(_) => {
                        c.drop_bad_version += 1
                    }
                    MadError::NotCm(_) => c.drop_not_cm += 1,
                    MadError::BadMethod(_) | MadError::UnsupportedAttribute(_) => {
                        c.drop_unsupported += 1
                    }
                    MadError::Malformed(_) => c.drop_malformed += 1,
                }
                return;
            }
        };
        if !self.dispatch(now, src, m) {
            self.counters.drop_unexpected += 1;
        }
    }

    /// Our exchange a non-REQ message is for: its remote comm ID is ours, from `src`, and
    /// its local comm ID is the peer's we know (if we know it).
    fn ours(&self, src: Ipv4Addr, local: u32, remote: u32) -> Option<(u32, State)> {
        let e = self.ex.get(&remote)?;
        if e.peer != src || (e.remote != 0 && e.remote != local) {
            return None;
        }
        Some((remote, e.state))
    }

    pub(super) fn resend_last(&mut self, id: u32) {
        if let Some(e) = self.ex.get(&id) {
            if let Some(b) = e.last {
                let peer = e.peer;
                self.tx.push_back((peer, b));
                self.counters.tx += 1;
                self.counters.retransmits += 1;
            }
        }
    }

    /// A REJ of a REQ by the CM itself (no exchange is kept: a retransmitted REQ is
    /// answered again the same way).
    fn reject_req(&mut self, src: Ipv4Addr, tid: u64, req: &Req, reason: u16) {
        self.counters.rej_sent_by_cm += 1;
        let rej = Rej {
            local_comm_id: 0,
            remote_comm_id: req.local_comm_id,
            message_rejected: msg_code::REQ,
            reason,
            ari: Vec::new(),
            private_data: Vec::new(),
        };
        self.send(src, tid, CmBody::Rej(rej));
    }

    fn dispatch(&mut self, now: u64, src: Ipv4Addr, m: CmMad) -> bool {
        let tid = m.hdr.tid;
        match m.body {
            CmBody::Req(req) => self.on_req(now, src, tid, req),
            CmBody::SidrReq(r) => self.on_sidr_req(now, src, tid, r),
            CmBody::SidrRep(r) => self.on_sidr_rep(now, src, r),
            CmBody::Mra(mra) => {
                let Some((id, st)) = self.ours(src, mra.local_comm_id, mra.remote_comm_id) else {
                    return false;
                };
                self.counters.mra_received += 1;
                let e = self.ex.get_mut(&id).expect("looked up");
                match (st, mra.message_mraed) {
                    (State::ReqSent | State::MraRcvd, msg_code::REQ) => {
                        e.remote = mra.local_comm_id;
                        e.state = State::MraRcvd;
                        // The peer needs its service timeout more, plus the trip.
                        let extra = iba_time_ns(mra.service_timeout)
                            + 2 * iba_time_ns(self.cfg.packet_life_time);
                        e.deadline = Some(now + extra);
                        true
                    }
                    (State::RepSent, msg_code::REP) => {
                        let extra = iba_time_ns(mra.service_timeout)
                            + 2 * iba_time_ns(self.cfg.packet_life_time);
                        e.deadline = Some(now + extra);
                        true
                    }
                    _ => false,
                }
            }
            CmBody::Rep(rep) => {
                let Some((id, st)) = self.ours(src, rep.local_comm_id, rep.remote_comm_id) else {
                    return false;
                };
                match st {
                    State::ReqSent | State::MraRcvd => {
                        let e = self.ex.get_mut(&id).expect("looked up");
                        e.remote = rep.local_comm_id;
                        e.remote_qpn = rep.local_qpn;
                        e.state = State::RepRcvd;
                        e.last = None;
                        e.deadline = None;
                        self.by_remote.insert((src, rep.local_comm_id), id);
                        self.emit(RoceCmEvent::ConnectResponse {
                            id: RoceCmId(id),
                            qp: CmQp {
                                qpn: rep.local_qpn,
                                starting_psn: rep.starting_psn,
                                responder_resources: rep.responder_resources,
                                initiator_depth: rep.initiator_depth,
                                retry_count: 0,
                                rnr_retry_count: rep.rnr_retry_count,
                            },
                            private_data: rep.private_data,
                        });
                        true
                    }
                    // Our RTU was lost: again.
                    State::Established => {
                        self.counters.duplicates += 1;
                        self.resend_last(id);
                        true
                    }
                    State::RepRcvd | State::DreqSent | State::TimeWait => {
                        self.counters.duplicates += 1;
                        true
                    }
                    _ => false,
                }
            }
            CmBody::Rtu(rtu) => {
                let Some((id, st)) = self.ours(src, rtu.local_comm_id, rtu.remote_comm_id) else {
                    return false;
                };
                match st {
                    State::RepSent => {
                        let e = self.ex.get_mut(&id).expect("looked up");
                        e.state = State::Established;
                        e.last = None;
                        e.deadline = None;
                        self.emit(RoceCmEvent::Established { id: RoceCmId(id) });
                        true
                    }
                    State::Established | State::DreqSent | State::TimeWait => true,
                    _ => false,
                }
            }
            CmBody::Rej(rej) => {
                // A REJ of our REQ by a CM with no exchange of its own carries no comm ID
                // of its sender (no listener): take it if we do not know the peer's yet.
                let found = if rej.local_comm_id == 0 {
                    self.ex
                        .get(&rej.remote_comm_id)
                        .filter(|e| e.peer == src && e.remote == 0)
                        .map(|e| (rej.remote_comm_id, e.state))
                } else {
                    self.ours(src, rej.local_comm_id, rej.remote_comm_id)
                };
                let Some((id, st)) = found else {
                    return false;
                };
                match st {
                    State::ReqSent | State::MraRcvd | State::RepSent | State::RepRcvd => {
                        self.emit(RoceCmEvent::Rejected {
                            id: RoceCmId(id),
                            reason: rej.reason,
                            private_data: rej.private_data,
                        });
                        self.timewait(now, id, None);
                        true
                    }
                    _ => false,
                }
            }
            CmBody::Dreq(dreq) => {
                let found = self
                    .ours(src, dreq.local_comm_id, dreq.remote_comm_id)
                    .filter(|(id, _)| self.ex[id].local_qpn == dreq.remote_qpn_eecn);
                let drep = |local: u32, remote: u32| {
                    CmBody::Drep(Short {
                        local_comm_id: local,
                        remote_comm_id: remote,
                        private_data: Vec::new(),
                    })
                };
                let Some((id, st)) = found else {
                    // Already forgotten: a DREP still ends the peer's retries (as Linux).
                    self.send(src, tid, drep(dreq.remote_comm_id, dreq.local_comm_id));
                    return false;
                };
                match st {
                    State::Established | State::RepSent | State::RepRcvd | State::DreqSent => {
                        let last = self.send(src, tid, drep(id, dreq.local_comm_id));
                        self.emit(RoceCmEvent::Disconnected { id: RoceCmId(id) });
                        self.timewait(now, id, last);
                        if let Some(e) = self.ex.get_mut(&id) {
                            e.drep = true;
                        }
                    }
                    // In time-wait after a silent end (a release, or a DREQ of ours that timed
                    // out) there is no DREP to repeat: answer with one, as Linux does.
                    State::TimeWait if self.ex[&id].last.is_none() => {
                        self.counters.duplicates += 1;
                        self.send(src, tid, drep(id, dreq.local_comm_id));
                    }
                    _ => {
                        self.counters.duplicates += 1;
                        self.resend_last(id);
                    }
                }
                true
            }
            CmBody::Drep(drep) => {
                let Some((id, st)) = self.ours(src, drep.local_comm_id, drep.remote_comm_id) else {
                    return false;
                };
                if st != State::DreqSent {
                    return st == State::TimeWait;
                }
                self.emit(RoceCmEvent::Disconnected { id: RoceCmId(id) });
                self.timewait(now, id, None);
                true
            }
        }
    }

    fn on_req(&mut self, now: u64, src: Ipv4Addr, tid: u64, req: Req) -> bool {
        if let Some(&id) = self.by_remote.get(&(src, req.local_comm_id)) {
            self.counters.duplicates += 1;
            let st = self.ex.get(&id).map(|e| e.state);
            match st {
                // The application is still deciding: tell the initiator to wait longer.
                Some(State::ReqRcvd) | Some(State::MraSent) => {
                    let peer_comm = req.local_comm_id;
                    let mra = Mra {
                        local_comm_id: id,
                        remote_comm_id: peer_comm,
                        message_mraed: msg_code::REQ,
                        service_timeout: self.cfg.mra_service_timeout,
                        private_data: Vec::new(),
                    };
                    self.send(src, tid, CmBody::Mra(mra));
                    self.counters.mra_sent += 1;
                    if let Some(e) = self.ex.get_mut(&id) {
                        e.state = State::MraSent;
                    }
                }
                Some(State::RepSent) | Some(State::TimeWait) => self.resend_last(id),
                _ => {}
            }
            return true;
        }
        // Only RC (transport service type 0, no extended type) over RDMA_PS_TCP-style IDs.
        let Some((ps, port)) = wire::parse_ip_service_id(req.service_id) else {
            self.reject_req(src, tid, &req, rej_reason::INVALID_SERVICE_ID);
            return true;
        };
        let key = (src, req.local_comm_id);
        if !self.listening.contains(&(ps, port)) {
            let first = *self.unserved.entry(key).or_insert(now);
            if now.saturating_sub(first) >= self.cfg.listen_grace_ns {
                self.unserved.remove(&key);
                self.reject_req(src, tid, &req, rej_reason::INVALID_SERVICE_ID);
            }
            return true;
        }
        self.unserved.remove(&key);
        let Some(mtu) = mtu_bytes(req.path_mtu) else {
            self.reject_req(src, tid, &req, rej_reason::INVALID_MTU);
            return true;
        };
        let cma = match CmaHdr::parse(&req.private_data) {
            Ok(h) if req.transport_service_type == 0 && req.extended_transport_type == 0 => h,
            _ => {
                self.reject_req(src, tid, &req, rej_reason::CONSUMER);
                return true;
            }
        };
        let id = self.alloc();
        self.by_remote.insert((src, req.local_comm_id), id);
        self.ex.insert(
            id,
            Exchange {
                peer: src,
                remote: req.local_comm_id,
                remote_qpn: req.local_qpn,
                local_qpn: 0,
                state: State::ReqRcvd,
                tid,
                last: None,
                retries: 0,
                max_retries: req.max_cm_retries as u32,
                timeout_ns: self.wait_ns(req.local_cm_response_timeout),
                deadline: None,
                quiet: false,
                drep: false,
            },
        );
        self.emit(RoceCmEvent::ConnectRequest {
            id: RoceCmId(id),
            peer: src,
            port_space: ps,
            port,
            peer_port: cma.src_port,
            local_addr: cma.dst,
            qp: CmQp {
                qpn: req.local_qpn,
                starting_psn: req.starting_psn,
                responder_resources: req.responder_resources,
                initiator_depth: req.initiator_depth,
                retry_count: req.retry_count,
                rnr_retry_count: req.rnr_retry_count,
            },
            mtu,
            local_ack_timeout: req.primary.local_ack_timeout,
            private_data: req.private_data[CMA_HDR_LEN..].to_vec(),
        });
        true
    }
}
