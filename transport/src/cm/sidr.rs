//! Service-ID resolution (spec/cm.md §2.5): the SIDR_REQ / SIDR_REP exchange of the UD port
//! spaces. The initiator retransmits its SIDR_REQ like a REQ; the passive side answers once,
//! from the application's `sidr_reply` (or at once, UNSUPPORTED, for a port nobody listens
//! on after the listen grace), and repeats that answer to duplicates during the time-wait.

use super::{sidr_status, Cm, CmBody, CmError, CmEvent, CmId, CmMsg, CmOpcode, State};
use std::net::Ipv4Addr;

impl Cm {
    /// Send a SIDR_REQ to `peer` for its UD `(port_space, port)`: retransmitted like a REQ
    /// until the SIDR_REP (SidrResponse) or the retries end (Unreachable).
    pub fn sidr_request(
        &mut self,
        now: u64,
        peer: Ipv4Addr,
        port_space: u16,
        port: u16,
        src_port: u16,
        private_data: &[u8],
    ) -> Result<CmId, CmError> {
        let body = CmBody::SidrReq {
            port_space,
            dst_port: port,
            src_port,
            dst_addr: peer,
        };
        self.start_exchange(now, peer, State::SidrReqSent, body, private_data)
    }

    /// Answer a SidrRequest: `status` [`sidr_status::SUCCESS`] with the UD QP that serves
    /// the port, or a refusal ([`sidr_status::REJECT`]). The SIDR_REP is not retransmitted:
    /// it is kept for the time-wait and sent again on a duplicate SIDR_REQ.
    pub fn sidr_reply(
        &mut self,
        now: u64,
        id: CmId,
        status: u8,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        Self::check_pd(CmOpcode::SidrRep, private_data)?;
        let e = self.get(id, &[State::SidrReqRcvd])?;
        let (peer, remote) = (e.peer, e.remote);
        let m = CmMsg {
            dst_comm: remote,
            src_comm: id.0,
            body: CmBody::SidrRep {
                status,
                qpn: qpn & 0x00ff_ffff,
                qkey,
            },
            private_data: private_data.to_vec(),
        };
        let last = self.send(peer, &m);
        self.timewait(now, id.0, Some(last));
        Ok(())
    }

    /// A SIDR_REQ from `src` (its comm id `remote`); `ports` is (port space, destination
    /// port, source port).
    pub(super) fn on_sidr_req(
        &mut self,
        now: u64,
        src: Ipv4Addr,
        remote: u32,
        ports: (u16, u16, u16),
        local_addr: Ipv4Addr,
        private_data: Vec<u8>,
    ) -> bool {
        let (port_space, port, peer_port) = ports;
        if let Some(&id) = self.by_remote.get(&(src, remote)) {
            // A duplicate: our SIDR_REP again (nothing while the application decides).
            let st = self.ex.get(&id).map(|e| e.state);
            if st != Some(State::SidrReqRcvd) {
                self.resend_last(id);
            }
            return true;
        }
        if !self.listening.contains(&(port_space, port)) {
            if !self.grace_over(now, src, remote) {
                return true;
            }
            let id = self.alloc();
            let rep = CmMsg {
                dst_comm: remote,
                src_comm: id,
                body: CmBody::SidrRep {
                    status: sidr_status::UNSUPPORTED,
                    qpn: 0,
                    qkey: 0,
                },
                private_data: Vec::new(),
            };
            let last = self.send(src, &rep);
            self.insert_passive(src, remote, id, State::TimeWait, None);
            self.timewait(now, id, Some(last));
            return true;
        }
        self.unserved.remove(&(src, remote));
        let id = self.alloc();
        self.insert_passive(src, remote, id, State::SidrReqRcvd, None);
        self.emit(CmEvent::SidrRequest {
            id: CmId(id),
            peer: src,
            port_space,
            port,
            peer_port,
            local_addr,
            private_data,
        });
        true
    }

    /// A SIDR_REP from `src`: the answer to our SIDR_REQ, once.
    pub(super) fn on_sidr_rep(
        &mut self,
        now: u64,
        src: Ipv4Addr,
        m: &CmMsg,
        status: u8,
        qpn: u32,
        qkey: u32,
    ) -> bool {
        let Some((id, st)) = self.ours(src, m) else {
            return false;
        };
        match st {
            State::SidrReqSent => {
                self.emit(CmEvent::SidrResponse {
                    id: CmId(id),
                    status,
                    qpn,
                    qkey,
                    private_data: m.private_data.clone(),
                });
                // Nothing left to answer: later copies of the SIDR_REP are ignored.
                self.timewait(now, id, None);
                true
            }
            // A duplicate of the reply already taken (ours was retransmitted meanwhile).
            State::TimeWait => true,
            _ => false,
        }
    }
}
