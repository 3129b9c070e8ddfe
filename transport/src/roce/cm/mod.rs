//! The IBTA connection manager of RoCEv2 mode (spec/rocev2.md §10): the REQ / MRA / REP /
//! RTU / REJ / DREQ / DREP exchange of IBTA vol. 1 ch. 12 as Linux's CM and rdma_cm speak it,
//! carried as MADs on QP1 (the GSI). Sans-IO and deterministic: inputs are received MADs,
//! the time and the application's calls; outputs are MADs to send (to QP1 of an address),
//! [`RoceCmEvent`]s and the next deadline. [`super::RoceEndpoint::enable_cm`] wires one
//! into the engine's QP1.
//!
//! Timers come from the REQ, as IBTA has them: the initiator waits 2 × packet lifetime +
//! the REQ's remote CM response timeout for a REP, the passive side 2 × packet lifetime +
//! the REQ's local CM response timeout for the RTU, each message sent at most
//! `max_cm_retries` + 1 times. An MRA stretches the wait by its service timeout.

mod recv;
mod sidr;
pub mod wire;
pub use sidr::sidr_status;

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::Ipv4Addr;
use wire::{
    msg_code, CmAttr, CmBody, CmMad, CmPath, CmaHdr, Dreq, MadHeader, Rej, Rep, Req, Short,
    CMA_HDR_LEN, MAD_LEN,
};

/// A local comm ID, never 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RoceCmId(pub u32);

/// IBTA time encoding: 4.096 µs × 2^t, in ns (t is at most 31).
pub fn iba_time_ns(t: u8) -> u64 {
    4096u64 << t.min(31)
}

/// The IBTA MTU enumeration of a byte count (1 = 256 … 5 = 4096), 0 for others.
pub fn mtu_enum(bytes: u32) -> u8 {
    match bytes {
        256 => 1,
        512 => 2,
        1024 => 3,
        2048 => 4,
        4096 => 5,
        _ => 0,
    }
}

/// Bytes of an IBTA MTU enumeration.
pub fn mtu_bytes(e: u8) -> Option<u32> {
    (1..=5).contains(&e).then(|| 128u32 << e)
}

#[derive(Clone, Copy, Debug)]
pub struct RoceCmConfig {
    /// This host's address (the GIDs and the cma_hdr name it).
    pub local_ip: Ipv4Addr,
    /// The node GUID put in REQ and REP.
    pub ca_guid: u64,
    /// Both CM response timeouts this end puts in its REQs (IBTA time; rdma_cm uses 20).
    pub cm_response_timeout: u8,
    /// `max_cm_retries` of this end's REQs (rdma_cm uses 15).
    pub max_cm_retries: u8,
    /// Packet lifetime (IBTA time) of the path; rdma_cm uses 18 on RoCE.
    pub packet_life_time: u8,
    /// Service timeout this end asks for in an MRA when a REQ is retransmitted while the
    /// application has not answered the first (IBTA time).
    pub mra_service_timeout: u8,
    /// How long an ended exchange's last message is kept to answer duplicates.
    pub timewait_ns: u64,
    /// A REQ for a port nobody listens on is answered (REJ, invalid service ID) only once
    /// this long has passed since its first copy: a process that has started its engine
    /// but not yet called rdma_listen gets the initiator's next retransmission.
    pub listen_grace_ns: u64,
}

impl RoceCmConfig {
    pub fn new(local_ip: Ipv4Addr) -> Self {
        let o = local_ip.octets();
        RoceCmConfig {
            local_ip,
            // A locally administered EUI-64 from the address, as rxe's is from the MAC.
            ca_guid: u64::from_be_bytes([0x02, 0, 0, 0xff, 0xfe, o[1], o[2], o[3]])
                ^ (o[0] as u64) << 32,
            cm_response_timeout: 20,
            max_cm_retries: 15,
            packet_life_time: 18,
            mra_service_timeout: 20,
            timewait_ns: 2_000_000_000,
            listen_grace_ns: 200_000_000,
        }
    }
}

/// Queue-pair parameters one side announces (its REQ or REP).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmQp {
    /// 24 bits.
    pub qpn: u32,
    /// 24 bits: the first PSN this side expects to receive, which the peer sends from. (As
    /// Linux has it: the REQ's Starting PSN becomes the active QP's rq_psn and the passive
    /// QP's sq_psn, the REP's the other way round. Native mode's CM is the opposite.)
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// 0..=7 (REQ only: the initiator's transport retries, used by both ends).
    pub retry_count: u8,
    /// 0..=7.
    pub rnr_retry_count: u8,
}

/// What an active side asks for.
#[derive(Clone, Debug)]
pub struct ConnectParams {
    pub peer: Ipv4Addr,
    pub port_space: u16,
    pub port: u16,
    /// The initiator's own port (in the cma_hdr).
    pub src_port: u16,
    pub qp: CmQp,
    /// Path MTU in bytes (256 … 4096), used by both ends.
    pub mtu: u32,
    /// Local ACK timeout of the RC QPs (IBTA time).
    pub local_ack_timeout: u8,
    /// The application's private data (after the cma_hdr; at most 56 bytes).
    pub private_data: Vec<u8>,
}

/// Most private data an rdma_cm application passes with a REQ (92 less the cma_hdr).
pub const REQ_USER_PRIVATE_DATA: usize = 92 - CMA_HDR_LEN;
/// Likewise with a SIDR_REQ (216 less the cma_hdr).
pub const SIDR_REQ_USER_PRIVATE_DATA: usize = 216 - CMA_HDR_LEN;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RoceCmEvent {
    /// A REQ for a port this end listens on: `accept` or `reject`.
    ConnectRequest {
        id: RoceCmId,
        peer: Ipv4Addr,
        port_space: u16,
        port: u16,
        /// From the cma_hdr.
        peer_port: u16,
        local_addr: Ipv4Addr,
        qp: CmQp,
        /// Path MTU in bytes the initiator chose (both ends use it).
        mtu: u32,
        local_ack_timeout: u8,
        /// The REQ's private data after the cma_hdr (56 bytes, zero-padded).
        private_data: Vec<u8>,
    },
    /// The REP to our REQ: bring the QP to RTR/RTS, then `establish` (sends the RTU).
    ConnectResponse {
        id: RoceCmId,
        qp: CmQp,
        private_data: Vec<u8>,
    },
    /// Passive side: the RTU arrived (or `establish` on a REP outstanding).
    Established { id: RoceCmId },
    Rejected {
        id: RoceCmId,
        reason: u16,
        private_data: Vec<u8>,
    },
    /// No answer after every retry.
    Unreachable { id: RoceCmId },
    /// The peer's DREQ, or the end of our own (DREP, or its retries ran out).
    Disconnected { id: RoceCmId },
    /// A SIDR_REQ for a UD port this end listens on: answer with `sidr_reply`.
    SidrRequest {
        id: RoceCmId,
        peer: Ipv4Addr,
        port_space: u16,
        port: u16,
        /// From the cma_hdr.
        peer_port: u16,
        local_addr: Ipv4Addr,
        /// The SIDR_REQ's private data after the cma_hdr (180 bytes, zero-padded).
        private_data: Vec<u8>,
    },
    /// The SIDR_REP to our SIDR_REQ (the exchange is over); no answer: `Unreachable`.
    SidrResponse {
        id: RoceCmId,
        status: u8,
        qpn: u32,
        qkey: u32,
        /// 136 bytes, zero-padded.
        private_data: Vec<u8>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoceCmError {
    UnknownId,
    InvalidState,
    PrivateDataTooLong,
    PortInUse,
    InvalidMtu,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoceCmCounters {
    pub rx: u64,
    pub tx: u64,
    pub retransmits: u64,
    pub timeouts: u64,
    pub mra_sent: u64,
    pub mra_received: u64,
    pub duplicates: u64,
    /// REQs answered with a REJ by the CM itself (no listener, bad REQ).
    pub rej_sent_by_cm: u64,
    pub drop_truncated: u64,
    pub drop_bad_version: u64,
    /// Another management class (the GSI serves the CM class only).
    pub drop_not_cm: u64,
    pub drop_unsupported: u64,
    pub drop_malformed: u64,
    /// Well-formed but for no exchange this end knows, or out of its state.
    pub drop_unexpected: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    ReqSent,
    /// An MRA of our REQ arrived: waiting longer, not retransmitting meanwhile.
    MraRcvd,
    ReqRcvd,
    /// ReqRcvd, and an MRA was sent (re-sent on further duplicates).
    MraSent,
    RepSent,
    RepRcvd,
    Established,
    DreqSent,
    SidrReqSent,
    /// A SIDR_REQ delivered to the application, not answered yet.
    SidrReqRcvd,
    TimeWait,
}

/// What starts an exchange (`RoceCm::start_exchange`).
struct Start {
    peer: Ipv4Addr,
    /// The id's own port, for rdma_cm's header.
    src_port: u16,
    attr: CmAttr,
    state: State,
    local_qpn: u32,
}

#[derive(Debug)]
struct Exchange {
    peer: Ipv4Addr,
    /// The peer's comm ID (0 until known).
    remote: u32,
    /// The peer's QPN (DREQs name it) and ours (a DREQ must name it).
    remote_qpn: u32,
    local_qpn: u32,
    state: State,
    /// TID of the REQ/REP/RTU exchange (or of the DREQ being answered).
    tid: u64,
    last: Option<[u8; MAD_LEN]>,
    retries: u32,
    max_retries: u32,
    /// Wait before a retransmission.
    timeout_ns: u64,
    deadline: Option<u64>,
    /// Released by the application: no more events.
    quiet: bool,
    /// In time-wait after answering the peer's DREQ: `last` is that DREP.
    drep: bool,
}

#[derive(Debug)]
pub struct RoceCm {
    cfg: RoceCmConfig,
    next_id: u32,
    next_tid: u64,
    ex: HashMap<u32, Exchange>,
    /// (peer, its comm ID) -> ours: duplicate REQs find their exchange.
    by_remote: HashMap<(Ipv4Addr, u32), u32>,
    listening: HashSet<(u16, u16)>,
    /// REQs for a port nobody listens on (yet): (peer, its comm ID) -> first seen.
    unserved: HashMap<(Ipv4Addr, u32), u64>,
    /// SIDR_REQs the application has not answered yet: our id -> the service ID asked for.
    sidr_service: HashMap<u32, u64>,
    tx: VecDeque<(Ipv4Addr, [u8; MAD_LEN])>,
    events: VecDeque<RoceCmEvent>,
    /// Connections that ended (peer, our QPN), whether or not the application still listens
    /// for events: the endpoint stops retrying their QPs forever (`take_ended`).
    ended: Vec<(Ipv4Addr, u32)>,
    pub counters: RoceCmCounters,
}

impl RoceCm {
    /// `seed` picks the first comm ID and TID (a restarted process should not reuse its
    /// predecessor's while peers remember them).
    pub fn new(cfg: RoceCmConfig, seed: u32) -> RoceCm {
        RoceCm {
            cfg,
            next_id: seed | 1,
            next_tid: (seed as u64) << 32,
            ex: HashMap::new(),
            by_remote: HashMap::new(),
            listening: HashSet::new(),
            unserved: HashMap::new(),
            sidr_service: HashMap::new(),
            tx: VecDeque::new(),
            events: VecDeque::new(),
            ended: Vec::new(),
            counters: RoceCmCounters::default(),
        }
    }

    pub fn config(&self) -> &RoceCmConfig {
        &self.cfg
    }

    fn alloc(&mut self) -> u32 {
        loop {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1);
            if id != 0 && !self.ex.contains_key(&id) {
                return id;
            }
        }
    }

    fn tid(&mut self) -> u64 {
        self.next_tid = self.next_tid.wrapping_add(1);
        self.next_tid
    }

    /// Queue a MAD; its bytes are returned to be kept for retransmission.
    fn send(&mut self, peer: Ipv4Addr, tid: u64, body: CmBody) -> Option<[u8; MAD_LEN]> {
        let m = CmMad {
            hdr: MadHeader {
                tid,
                ..Default::default()
            },
            body,
        };
        // Callers check private-data sizes first, so this cannot fail; a failure is counted.
        let Ok(b) = m.emit() else {
            self.counters.drop_malformed += 1;
            return None;
        };
        self.tx.push_back((peer, b));
        self.counters.tx += 1;
        Some(b)
    }

    fn check_pd(attr: CmAttr, pd: &[u8]) -> Result<(), RoceCmError> {
        let max = match attr {
            CmAttr::Req => REQ_USER_PRIVATE_DATA,
            CmAttr::SidrReq => SIDR_REQ_USER_PRIVATE_DATA,
            _ => attr.max_private_data(),
        };
        if pd.len() > max {
            return Err(RoceCmError::PrivateDataTooLong);
        }
        Ok(())
    }

    pub fn listen(&mut self, port_space: u16, port: u16) -> Result<(), RoceCmError> {
        if !self.listening.insert((port_space, port)) {
            return Err(RoceCmError::PortInUse);
        }
        Ok(())
    }

    pub fn unlisten(&mut self, port_space: u16, port: u16) {
        self.listening.remove(&(port_space, port));
    }

    fn wait_ns(&self, response_timeout: u8) -> u64 {
        2 * iba_time_ns(self.cfg.packet_life_time) + iba_time_ns(response_timeout)
    }

    /// Send a REQ (retransmitted until a REP, REJ or MRA).
    pub fn connect(&mut self, now: u64, p: &ConnectParams) -> Result<RoceCmId, RoceCmError> {
        let mtu = mtu_enum(p.mtu);
        if mtu == 0 {
            return Err(RoceCmError::InvalidMtu);
        }
        let start = Start {
            peer: p.peer,
            src_port: p.src_port,
            attr: CmAttr::Req,
            state: State::ReqSent,
            local_qpn: p.qp.qpn & 0x00ff_ffff,
        };
        self.start_exchange(now, start, &p.private_data, |c, id, pd| {
            CmBody::Req(Req {
                local_comm_id: id,
                service_id: wire::ip_service_id(p.port_space, p.port),
                local_ca_guid: c.ca_guid,
                local_qpn: p.qp.qpn & 0x00ff_ffff,
                responder_resources: p.qp.responder_resources,
                initiator_depth: p.qp.initiator_depth,
                remote_cm_response_timeout: c.cm_response_timeout,
                transport_service_type: 0,
                end_to_end_flow_control: true,
                starting_psn: p.qp.starting_psn & 0x00ff_ffff,
                local_cm_response_timeout: c.cm_response_timeout,
                retry_count: p.qp.retry_count.min(7),
                pkey: 0xffff,
                path_mtu: mtu,
                rnr_retry_count: p.qp.rnr_retry_count.min(7),
                max_cm_retries: c.max_cm_retries.min(15),
                // What Linux rdma_cm puts in a RoCEv2 REQ: permissive LIDs (not subnet-local),
                // the IPv4-mapped GIDs, the IPv4 TTL as hop limit; no alternate path.
                primary: CmPath {
                    local_lid: 0xffff,
                    remote_lid: 0xffff,
                    local_gid: wire::ipv4_gid(c.local_ip),
                    remote_gid: wire::ipv4_gid(p.peer),
                    packet_rate: 3,
                    hop_limit: 64,
                    local_ack_timeout: p.local_ack_timeout.min(31),
                    ..Default::default()
                },
                private_data: pd,
                ..Default::default()
            })
        })
    }

    /// Start an exchange under a new comm id: its first message (a REQ or a SIDR_REQ, built
    /// by `body` from the id and the private data behind rdma_cm's header) goes out now and
    /// is retransmitted, as the message itself announces, every CM response timeout up to
    /// `max_cm_retries` times.
    fn start_exchange(
        &mut self,
        now: u64,
        s: Start,
        private_data: &[u8],
        body: impl FnOnce(&RoceCmConfig, u32, Vec<u8>) -> CmBody,
    ) -> Result<RoceCmId, RoceCmError> {
        Self::check_pd(s.attr, private_data)?;
        let id = self.alloc();
        let tid = self.tid();
        let mut pd = CmaHdr {
            src_port: s.src_port,
            src: self.cfg.local_ip,
            dst: s.peer,
        }
        .emit()
        .to_vec();
        pd.extend_from_slice(private_data);
        let timeout_ns = self.wait_ns(self.cfg.cm_response_timeout);
        let max_retries = self.cfg.max_cm_retries.min(15) as u32;
        let body = body(&self.cfg, id, pd);
        let last = self.send(s.peer, tid, body);
        self.ex.insert(
            id,
            Exchange {
                peer: s.peer,
                remote: 0,
                remote_qpn: 0,
                local_qpn: s.local_qpn,
                state: s.state,
                tid,
                last,
                retries: 0,
                max_retries,
                timeout_ns,
                deadline: Some(now + timeout_ns),
                quiet: false,
                drep: false,
            },
        );
        Ok(RoceCmId(id))
    }

    fn get(&mut self, id: RoceCmId, want: &[State]) -> Result<&mut Exchange, RoceCmError> {
        let e = self.ex.get_mut(&id.0).ok_or(RoceCmError::UnknownId)?;
        if !want.contains(&e.state) {
            return Err(RoceCmError::InvalidState);
        }
        Ok(e)
    }

    /// Answer a ConnectRequest with a REP (retransmitted until the RTU).
    pub fn accept(
        &mut self,
        now: u64,
        id: RoceCmId,
        qp: CmQp,
        private_data: &[u8],
    ) -> Result<(), RoceCmError> {
        Self::check_pd(CmAttr::Rep, private_data)?;
        let e = self.get(id, &[State::ReqRcvd, State::MraSent])?;
        let (peer, remote, tid) = (e.peer, e.remote, e.tid);
        let rep = Rep {
            local_comm_id: id.0,
            remote_comm_id: remote,
            local_qpn: qp.qpn & 0x00ff_ffff,
            starting_psn: qp.starting_psn & 0x00ff_ffff,
            responder_resources: qp.responder_resources,
            initiator_depth: qp.initiator_depth,
            target_ack_delay: 15,
            end_to_end_flow_control: true,
            rnr_retry_count: qp.rnr_retry_count.min(7),
            local_ca_guid: self.cfg.ca_guid,
            private_data: private_data.to_vec(),
            ..Default::default()
        };
        let last = self.send(peer, tid, CmBody::Rep(rep));
        let e = self.ex.get_mut(&id.0).ok_or(RoceCmError::UnknownId)?;
        e.state = State::RepSent;
        e.local_qpn = qp.qpn & 0x00ff_ffff;
        e.last = last;
        e.retries = 0;
        e.deadline = Some(now + e.timeout_ns);
        Ok(())
    }

    /// Answer a ConnectRequest (or, active side, a ConnectResponse) with a REJ.
    pub fn reject(
        &mut self,
        now: u64,
        id: RoceCmId,
        reason: u16,
        private_data: &[u8],
    ) -> Result<(), RoceCmError> {
        Self::check_pd(CmAttr::Rej, private_data)?;
        let e = self.get(id, &[State::ReqRcvd, State::MraSent, State::RepRcvd])?;
        let (peer, remote, tid, st) = (e.peer, e.remote, e.tid, e.state);
        let rej = Rej {
            local_comm_id: id.0,
            remote_comm_id: remote,
            message_rejected: if st == State::RepRcvd {
                msg_code::REP
            } else {
                msg_code::REQ
            },
            reason,
            ari: Vec::new(),
            private_data: private_data.to_vec(),
        };
        let last = self.send(peer, tid, CmBody::Rej(rej));
        self.timewait(now, id.0, last);
        Ok(())
    }

    /// Active side after a ConnectResponse: send the RTU. Passive side with a REP
    /// outstanding (the RTU lost but the QP saw traffic, verbs' COMM_EST): established.
    pub fn establish(&mut self, id: RoceCmId, private_data: &[u8]) -> Result<(), RoceCmError> {
        Self::check_pd(CmAttr::Rtu, private_data)?;
        let e = self.get(id, &[State::RepRcvd, State::RepSent])?;
        let (peer, remote, tid, st) = (e.peer, e.remote, e.tid, e.state);
        if st == State::RepSent {
            e.state = State::Established;
            e.last = None;
            e.deadline = None;
            self.emit(RoceCmEvent::Established { id });
            return Ok(());
        }
        let rtu = Short {
            local_comm_id: id.0,
            remote_comm_id: remote,
            private_data: private_data.to_vec(),
        };
        let last = self.send(peer, tid, CmBody::Rtu(rtu));
        let e = self.ex.get_mut(&id.0).ok_or(RoceCmError::UnknownId)?;
        e.state = State::Established;
        // Kept to answer a duplicate REP (our RTU lost).
        e.last = last;
        e.deadline = None;
        Ok(())
    }

    /// Send a DREQ (retransmitted until the DREP); Disconnected follows either way.
    pub fn disconnect(
        &mut self,
        now: u64,
        id: RoceCmId,
        private_data: &[u8],
    ) -> Result<(), RoceCmError> {
        Self::check_pd(CmAttr::Dreq, private_data)?;
        let e = self.get(id, &[State::Established, State::RepSent])?;
        let (peer, remote, rqpn) = (e.peer, e.remote, e.remote_qpn);
        let tid = self.tid();
        let dreq = Dreq {
            local_comm_id: id.0,
            remote_comm_id: remote,
            remote_qpn_eecn: rqpn,
            private_data: private_data.to_vec(),
        };
        let last = self.send(peer, tid, CmBody::Dreq(dreq));
        let e = self.ex.get_mut(&id.0).ok_or(RoceCmError::UnknownId)?;
        e.state = State::DreqSent;
        e.tid = tid;
        e.last = last;
        e.retries = 0;
        e.deadline = Some(now + e.timeout_ns);
        Ok(())
    }

    /// The application is done with `id`: no more events. A connected id sends its DREQ, and
    /// a DREQ outstanding runs its course; an exchange in progress is abandoned (the peer
    /// times out); duplicates are still answered during the time-wait.
    pub fn release(&mut self, now: u64, id: RoceCmId) {
        let connected = self.ex.get(&id.0).map(|e| e.state) == Some(State::Established);
        // A connected id destroyed without rdma_disconnect: the DREQ Linux's CM sends then,
        // so the peer learns the connection is gone (and stops retrying into it).
        if connected && self.disconnect(now, id, &[]).is_ok() {
            if let Some(e) = self.ex.get_mut(&id.0) {
                e.quiet = true;
            }
            return;
        }
        if let Some(e) = self.ex.get_mut(&id.0) {
            e.quiet = true;
            if e.state == State::DreqSent || e.state == State::TimeWait {
                return;
            }
            let last = match e.state {
                State::Established => None,
                _ => e.last,
            };
            self.timewait(now, id.0, last);
        }
    }

    /// The process is ending and this CM with it (a shim's CM lives in the process, unlike
    /// Linux's in the kernel, which outlives it): every DREQ still unanswered is
    /// retransmitted every `interval_ns` from now on instead of every response timeout
    /// (seconds), so the DREP, or the fact that one was lost, comes while someone is here to
    /// hear it. Returns how many DREQs are outstanding (0: the process may go).
    pub fn hasten_disconnects(&mut self, now: u64, interval_ns: u64) -> usize {
        let mut n = 0;
        for e in self.ex.values_mut().filter(|e| e.state == State::DreqSent) {
            n += 1;
            e.timeout_ns = e.timeout_ns.min(interval_ns);
            let soon = now.saturating_add(interval_ns);
            if e.deadline.is_none_or(|d| d > soon) {
                e.deadline = Some(soon);
            }
        }
        n
    }

    /// The process is ending: the DREPs it answered its peers' DREQs with are sent once
    /// more (a lost one would leave the peer retrying its DREQ, seconds apart, into a
    /// process that is gone; a duplicate DREP is ignored). Returns how many went.
    pub fn repeat_dreps(&mut self) -> usize {
        let ids: Vec<u32> = self
            .ex
            .iter()
            .filter(|(_, e)| e.drep && e.state == State::TimeWait)
            .map(|(k, _)| *k)
            .collect();
        for &id in &ids {
            self.resend_last(id);
        }
        ids.len()
    }

    /// Whether `id` names a live exchange (not in time-wait).
    pub fn is_live(&self, id: RoceCmId) -> bool {
        self.ex
            .get(&id.0)
            .is_some_and(|e| e.state != State::TimeWait)
    }

    /// Connections that ended since the last call: (peer, our QPN).
    pub fn take_ended(&mut self) -> Vec<(Ipv4Addr, u32)> {
        std::mem::take(&mut self.ended)
    }

    fn emit(&mut self, ev: RoceCmEvent) {
        let id = match &ev {
            RoceCmEvent::ConnectRequest { id, .. }
            | RoceCmEvent::ConnectResponse { id, .. }
            | RoceCmEvent::Established { id }
            | RoceCmEvent::Rejected { id, .. }
            | RoceCmEvent::Unreachable { id }
            | RoceCmEvent::Disconnected { id }
            | RoceCmEvent::SidrRequest { id, .. }
            | RoceCmEvent::SidrResponse { id, .. } => *id,
        };
        if let (RoceCmEvent::Disconnected { .. }, Some(e)) = (&ev, self.ex.get(&id.0)) {
            if e.local_qpn != 0 {
                self.ended.push((e.peer, e.local_qpn));
            }
        }
        if !self.ex.get(&id.0).is_some_and(|e| e.quiet) {
            self.events.push_back(ev);
        }
    }

    fn timewait(&mut self, now: u64, id: u32, last: Option<[u8; MAD_LEN]>) {
        let tw = self.cfg.timewait_ns;
        if let Some(e) = self.ex.get_mut(&id) {
            e.state = State::TimeWait;
            e.last = last;
            e.deadline = Some(now + tw);
        }
    }

    /// The next MAD to send and the address whose QP1 it goes to.
    pub fn poll_transmit(&mut self) -> Option<(Ipv4Addr, [u8; MAD_LEN])> {
        self.tx.pop_front()
    }

    pub fn has_transmit(&self) -> bool {
        !self.tx.is_empty()
    }

    pub fn poll_event(&mut self) -> Option<RoceCmEvent> {
        self.events.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<u64> {
        self.ex.values().filter_map(|e| e.deadline).min()
    }

    pub fn handle_timeout(&mut self, now: u64) {
        // Initiators retransmit within seconds; older entries are of ones that gave up.
        let keep = self
            .cfg
            .listen_grace_ns
            .saturating_mul(10)
            .max(60_000_000_000);
        self.unserved.retain(|_, t| now.saturating_sub(*t) < keep);
        let due: Vec<u32> = self
            .ex
            .iter()
            .filter(|(_, e)| e.deadline.is_some_and(|d| d <= now))
            .map(|(k, _)| *k)
            .collect();
        for id in due {
            let Some(e) = self.ex.get_mut(&id) else {
                continue;
            };
            if e.state == State::TimeWait {
                let key = (e.peer, e.remote);
                self.ex.remove(&id);
                self.sidr_service.remove(&id);
                if self.by_remote.get(&key) == Some(&id) {
                    self.by_remote.remove(&key);
                }
                continue;
            }
            if e.retries >= e.max_retries {
                self.counters.timeouts += 1;
                let ev = if e.state == State::DreqSent {
                    RoceCmEvent::Disconnected { id: RoceCmId(id) }
                } else {
                    RoceCmEvent::Unreachable { id: RoceCmId(id) }
                };
                self.emit(ev);
                self.timewait(now, id, None);
                continue;
            }
            e.retries += 1;
            if e.state == State::MraRcvd {
                // The MRA's extra time is over: the REQ again, on its normal timer.
                e.state = State::ReqSent;
            }
            e.deadline = Some(now + e.timeout_ns);
            if let Some(b) = e.last {
                let peer = e.peer;
                self.tx.push_back((peer, b));
                self.counters.tx += 1;
                self.counters.retransmits += 1;
            }
        }
    }
}
