//! Service-ID resolution on QP1 (spec/rocev2.md §10.5): SIDR_REQ / SIDR_REP as Linux's CM
//! sends them for RDMA_PS_UDP ids. The SIDR_REQ carries the IP-based service ID and the
//! cma_hdr + the application's private data; it is retransmitted like a REQ until its
//! SIDR_REP. The passive side answers once (status, QPN, Q_Key) and repeats the answer to
//! duplicates during the time-wait; a port nobody listens on gets status 1 after the grace.

use super::wire::{CmAttr, CmBody, CmaHdr, SidrRep, SidrReq, CMA_HDR_LEN};
use super::*;

/// SIDR_REP statuses (IBTA table 121).
pub mod sidr_status {
    pub const SUCCESS: u8 = 0;
    /// Nobody serves the service ID (Linux: IB_SIDR_UNSUPPORTED).
    pub const UNSUPPORTED: u8 = 1;
    pub const REJECT: u8 = 2;
}

impl RoceCm {
    /// Send a SIDR_REQ for the peer's UD `(port_space, port)`.
    pub fn sidr_request(
        &mut self,
        now: u64,
        peer: Ipv4Addr,
        port_space: u16,
        port: u16,
        src_port: u16,
        private_data: &[u8],
    ) -> Result<RoceCmId, RoceCmError> {
        let start = Start {
            peer,
            src_port,
            attr: CmAttr::SidrReq,
            state: State::SidrReqSent,
            local_qpn: 0,
        };
        self.start_exchange(now, start, private_data, |_, id, pd| {
            CmBody::SidrReq(SidrReq {
                request_id: id,
                pkey: 0xffff,
                service_id: wire::ip_service_id(port_space, port),
                private_data: pd,
            })
        })
    }

    /// Answer a SidrRequest: [`sidr_status::SUCCESS`] with the UD QP serving the port, or a
    /// refusal. Kept for the time-wait to answer duplicates; not retransmitted.
    pub fn sidr_reply(
        &mut self,
        now: u64,
        id: RoceCmId,
        status: u8,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<(), RoceCmError> {
        Self::check_pd(CmAttr::SidrRep, private_data)?;
        let e = self.get(id, &[State::SidrReqRcvd])?;
        let (peer, remote, tid) = (e.peer, e.remote, e.tid);
        let rep = SidrRep {
            request_id: remote,
            status,
            qpn: qpn & 0x00ff_ffff,
            // The service ID asked for, as Linux's CM echoes it.
            service_id: self.sidr_service.get(&id.0).copied().unwrap_or(0),
            qkey,
            info: Vec::new(),
            private_data: private_data.to_vec(),
        };
        let last = self.send(peer, tid, CmBody::SidrRep(rep));
        self.sidr_service.remove(&id.0);
        self.timewait(now, id.0, last);
        Ok(())
    }

    /// A SIDR_REP by the CM itself (nobody listens): no exchange is kept, a retransmitted
    /// SIDR_REQ is answered again the same way.
    fn sidr_refuse(&mut self, src: Ipv4Addr, tid: u64, r: &SidrReq, status: u8) {
        self.counters.rej_sent_by_cm += 1;
        let rep = SidrRep {
            request_id: r.request_id,
            status,
            service_id: r.service_id,
            ..Default::default()
        };
        self.send(src, tid, CmBody::SidrRep(rep));
    }

    pub(super) fn on_sidr_req(&mut self, now: u64, src: Ipv4Addr, tid: u64, r: SidrReq) -> bool {
        if let Some(&id) = self.by_remote.get(&(src, r.request_id)) {
            self.counters.duplicates += 1;
            // Nothing while the application decides; the reply again after it did.
            if self.ex.get(&id).map(|e| e.state) == Some(State::TimeWait) {
                self.resend_last(id);
            }
            return true;
        }
        let Some((ps, port)) = wire::parse_ip_service_id(r.service_id) else {
            self.sidr_refuse(src, tid, &r, sidr_status::UNSUPPORTED);
            return true;
        };
        let key = (src, r.request_id);
        if !self.listening.contains(&(ps, port)) {
            let first = *self.unserved.entry(key).or_insert(now);
            if now.saturating_sub(first) >= self.cfg.listen_grace_ns {
                self.unserved.remove(&key);
                self.sidr_refuse(src, tid, &r, sidr_status::UNSUPPORTED);
            }
            return true;
        }
        self.unserved.remove(&key);
        let Ok(cma) = CmaHdr::parse(&r.private_data) else {
            self.sidr_refuse(src, tid, &r, sidr_status::REJECT);
            return true;
        };
        let id = self.alloc();
        self.by_remote.insert(key, id);
        self.sidr_service.insert(id, r.service_id);
        let timeout_ns = self.wait_ns(self.cfg.cm_response_timeout);
        self.ex.insert(
            id,
            Exchange {
                peer: src,
                remote: r.request_id,
                remote_qpn: 0,
                local_qpn: 0,
                state: State::SidrReqRcvd,
                tid,
                last: None,
                retries: 0,
                max_retries: 0,
                timeout_ns,
                deadline: None,
                quiet: false,
                drep: false,
            },
        );
        self.emit(RoceCmEvent::SidrRequest {
            id: RoceCmId(id),
            peer: src,
            port_space: ps,
            port,
            peer_port: cma.src_port,
            local_addr: cma.dst,
            private_data: r.private_data[CMA_HDR_LEN..].to_vec(),
        });
        true
    }

    pub(super) fn on_sidr_rep(&mut self, now: u64, src: Ipv4Addr, r: SidrRep) -> bool {
        let Some(e) = self.ex.get(&r.request_id) else {
            return false;
        };
        if e.peer != src {
            return false;
        }
        match e.state {
            State::SidrReqSent => {
                self.emit(RoceCmEvent::SidrResponse {
                    id: RoceCmId(r.request_id),
                    status: r.status,
                    qpn: r.qpn,
                    qkey: r.qkey,
                    private_data: r.private_data,
                });
                self.timewait(now, r.request_id, None);
                true
            }
            // A copy of the reply already taken.
            State::TimeWait => {
                self.counters.duplicates += 1;
                true
            }
            _ => false,
        }
    }
}
