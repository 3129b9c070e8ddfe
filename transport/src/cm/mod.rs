//! The connection manager (spec/cm.md): the REQ / REP / RTU / REJ / DREQ / DREP
//! exchange that librdmacm applications connect their queue pairs with, and the SIDR_REQ /
//! SIDR_REP one that resolves a UD port space's service to a QPN and Q_Key, sans-IO like the
//! rest of the core. One [`Cm`] per host; it is connectionless (its messages are not carried
//! on a native connection), retransmits its own requests and answers duplicates from state.
//!
//! Inputs: received CM packets ([`wire::is_cm_packet`]), the time, the application's calls.
//! Outputs: packets to send ([`Cm::poll_transmit`]), [`CmEvent`]s, the next deadline.

mod sidr;
#[cfg(test)]
mod sidr_tests;
#[cfg(test)]
mod tests;
pub mod wire;

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::Ipv4Addr;
pub use wire::{is_cm_packet, CmBody, CmMsg, CmOpcode, CmWireError, QpInfo};

/// A local connection identifier (the `src_comm` this end puts in its messages), never 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CmId(pub u32);

/// Reject reasons (IBTA CM REJ reason codes, as librdmacm reports them in `status`).
pub mod reason {
    /// Nobody listens on the requested port.
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// The application rejected (rdma_reject).
    pub const CONSUMER: u16 = 28;
    /// A REP or RTU for a connection this end does not know (it timed out or was released).
    pub const TIMEOUT: u16 = 1;
}

/// SIDR_REP status values (IBTA CM; librdmacm reports a non-zero one as the UNREACHABLE
/// event's `status`, as Linux does).
pub mod sidr_status {
    /// The QPN and Q_Key are valid.
    pub const SUCCESS: u8 = 0;
    /// Nobody listens on the requested port (Linux: IB_SIDR_UNSUPPORTED).
    pub const UNSUPPORTED: u8 = 1;
    /// The application rejected (rdma_reject).
    pub const REJECT: u8 = 2;
}

/// Timers of spec/cm.md §2.4.
#[derive(Clone, Copy, Debug)]
pub struct CmConfig {
    /// First retransmission timeout of REQ, REP and DREQ; doubles per retry up to `rto_max_ns`.
    pub rto_ns: u64,
    pub rto_max_ns: u64,
    /// Retransmissions before giving up (UNREACHABLE, or DISCONNECTED for a DREQ).
    pub max_retries: u32,
    /// How long a finished exchange's last answer is remembered, to answer duplicates.
    pub timewait_ns: u64,
    /// A REQ for a port nobody listens on is answered (REJ, INVALID_SERVICE_ID) only once
    /// this long has passed since its first copy: a listener that appears meanwhile gets the
    /// next retransmission (spec/cm.md §2.2).
    pub listen_grace_ns: u64,
}

impl Default for CmConfig {
    fn default() -> Self {
        CmConfig {
            rto_ns: 50_000_000,
            rto_max_ns: 800_000_000,
            max_retries: 8,
            timewait_ns: 2_000_000_000,
            listen_grace_ns: 200_000_000,
        }
    }
}

/// What the application learns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmEvent {
    /// A REQ for a port this end listens on: answer with `accept` or `reject`.
    ConnectRequest {
        id: CmId,
        peer: Ipv4Addr,
        port_space: u16,
        port: u16,
        peer_port: u16,
        local_addr: Ipv4Addr,
        qp: QpInfo,
        private_data: Vec<u8>,
    },
    /// The REP to our REQ: move the QP to RTR/RTS, then `establish` (sends the RTU).
    ConnectResponse {
        id: CmId,
        qp: QpInfo,
        private_data: Vec<u8>,
    },
    /// Passive side: the RTU arrived (or `establish` was called on a REP sent).
    Established { id: CmId, private_data: Vec<u8> },
    Rejected {
        id: CmId,
        reason: u16,
        private_data: Vec<u8>,
    },
    /// No answer after every retry (REQ: the peer; REP: the initiator's RTU).
    Unreachable { id: CmId },
    /// The peer's DREQ, or the end of our own disconnect (DREP, or its retries ran out).
    Disconnected { id: CmId, private_data: Vec<u8> },
    /// A SIDR_REQ for a port this end listens on: answer with `sidr_reply`.
    SidrRequest {
        id: CmId,
        peer: Ipv4Addr,
        port_space: u16,
        port: u16,
        peer_port: u16,
        local_addr: Ipv4Addr,
        private_data: Vec<u8>,
    },
    /// The SIDR_REP to our SIDR_REQ; the exchange is over (no RTU in SIDR). A SIDR_REQ that
    /// gets no answer reports `Unreachable`.
    SidrResponse {
        id: CmId,
        status: u8,
        qpn: u32,
        qkey: u32,
        private_data: Vec<u8>,
    },
}

/// Why a call was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmError {
    UnknownId,
    /// The call does not fit the exchange's state (e.g. accept twice).
    InvalidState,
    PrivateDataTooLong,
    PortInUse,
}

/// Counters (spec/cm.md §4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmCounters {
    pub rx: u64,
    pub tx: u64,
    pub retransmits: u64,
    pub timeouts: u64,
    pub drop_truncated: u64,
    pub drop_bad_version: u64,
    pub drop_bad_opcode: u64,
    pub drop_malformed: u64,
    pub drop_bad_crc: u64,
    /// Well-formed but for no exchange this end knows, or out of its state.
    pub drop_unexpected: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    ReqSent,
    /// A REQ delivered to the application, not answered yet.
    ReqRcvd,
    RepSent,
    /// The REP delivered to the application, RTU not sent yet.
    RepRcvd,
    Established,
    DreqSent,
    SidrReqSent,
    /// A SIDR_REQ delivered to the application, not answered yet.
    SidrReqRcvd,
    /// Over: the last message is kept to answer duplicates until the deadline.
    TimeWait,
}

struct Exchange {
    peer: Ipv4Addr,
    remote: u32,
    state: State,
    /// The message retransmitted on timeout (REQ, REP, DREQ) or re-sent on a duplicate.
    last: Option<Vec<u8>>,
    retries: u32,
    deadline: Option<u64>,
    /// Released by the application while its DREQ is outstanding: the DREQ is still
    /// retransmitted, but no event is reported.
    quiet: bool,
    /// Retransmit every this many ns instead of the backed-off RTO (`hasten_disconnects`).
    hasten_ns: Option<u64>,
    /// In time-wait after answering the peer's DREQ: `last` is that DREP.
    drep: bool,
}

/// One host's connection manager.
pub struct Cm {
    cfg: CmConfig,
    next_id: u32,
    ex: HashMap<u32, Exchange>,
    /// (peer, its comm id) -> ours: duplicate REQs find their exchange.
    by_remote: HashMap<(Ipv4Addr, u32), u32>,
    listening: HashSet<(u16, u16)>,
    /// REQs for a port nobody listens on (yet): (peer, its comm id) -> first seen.
    unserved: HashMap<(Ipv4Addr, u32), u64>,
    tx: VecDeque<(Ipv4Addr, Vec<u8>)>,
    events: VecDeque<CmEvent>,
    pub counters: CmCounters,
}

impl Cm {
    /// `seed` picks the first comm id, so a restarted process does not reuse its
    /// predecessor's ids while the peer still remembers them.
    pub fn new(cfg: CmConfig, seed: u32) -> Cm {
        Cm {
            cfg,
            next_id: seed | 1,
            ex: HashMap::new(),
            by_remote: HashMap::new(),
            listening: HashSet::new(),
            unserved: HashMap::new(),
            tx: VecDeque::new(),
            events: VecDeque::new(),
            counters: CmCounters::default(),
        }
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

    fn send(&mut self, peer: Ipv4Addr, m: &CmMsg) -> Vec<u8> {
        let v = m.to_vec();
        self.tx.push_back((peer, v.clone()));
        self.counters.tx += 1;
        v
    }

    fn check_pd(op: CmOpcode, pd: &[u8]) -> Result<(), CmError> {
        if pd.len() > op.max_private_data() {
            return Err(CmError::PrivateDataTooLong);
        }
        Ok(())
    }

    pub fn listen(&mut self, port_space: u16, port: u16) -> Result<(), CmError> {
        if !self.listening.insert((port_space, port)) {
            return Err(CmError::PortInUse);
        }
        Ok(())
    }

    pub fn unlisten(&mut self, port_space: u16, port: u16) {
        self.listening.remove(&(port_space, port));
    }

    /// Send a REQ to `peer` for its `(port_space, port)`; `dst_addr` is the address the
    /// application named (for the peer's bookkeeping).
    #[allow(clippy::too_many_arguments)]
    pub fn connect(
        &mut self,
        now: u64,
        peer: Ipv4Addr,
        port_space: u16,
        port: u16,
        src_port: u16,
        qp: QpInfo,
        private_data: &[u8],
    ) -> Result<CmId, CmError> {
        let body = CmBody::Req {
            port_space,
            dst_port: port,
            src_port,
            qp,
            dst_addr: peer,
        };
        self.start_exchange(now, peer, State::ReqSent, body, private_data)
    }

    /// Start an exchange with `peer` under a new comm id: its first message (a REQ or a
    /// SIDR_REQ) goes out now and is retransmitted every `rto` until answered.
    fn start_exchange(
        &mut self,
        now: u64,
        peer: Ipv4Addr,
        state: State,
        body: CmBody,
        private_data: &[u8],
    ) -> Result<CmId, CmError> {
        let mut m = CmMsg {
            dst_comm: 0,
            src_comm: 0,
            body,
            private_data: Vec::new(),
        };
        Self::check_pd(m.opcode(), private_data)?;
        let id = self.alloc();
        m.src_comm = id;
        m.private_data = private_data.to_vec();
        let last = self.send(peer, &m);
        self.ex.insert(
            id,
            Exchange {
                peer,
                remote: 0,
                state,
                last: Some(last),
                retries: 0,
                deadline: Some(now + self.cfg.rto_ns),
                quiet: false,
                hasten_ns: None,
                drep: false,
            },
        );
        Ok(CmId(id))
    }

    fn get(&mut self, id: CmId, want: &[State]) -> Result<&mut Exchange, CmError> {
        let e = self.ex.get_mut(&id.0).ok_or(CmError::UnknownId)?;
        if !want.contains(&e.state) {
            return Err(CmError::InvalidState);
        }
        Ok(e)
    }

    /// Answer a ConnectRequest with a REP (retransmitted until the RTU).
    pub fn accept(
        &mut self,
        now: u64,
        id: CmId,
        qp: QpInfo,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        Self::check_pd(CmOpcode::Rep, private_data)?;
        let e = self.get(id, &[State::ReqRcvd])?;
        let (peer, remote) = (e.peer, e.remote);
        let m = CmMsg {
            dst_comm: remote,
            src_comm: id.0,
            body: CmBody::Rep { qp },
            private_data: private_data.to_vec(),
        };
        let last = self.send(peer, &m);
        let rto = self.cfg.rto_ns;
        let e = self.ex.get_mut(&id.0).ok_or(CmError::UnknownId)?;
        e.state = State::RepSent;
        e.last = Some(last);
        e.retries = 0;
        e.deadline = Some(now + rto);
        Ok(())
    }

    /// Answer a ConnectRequest (or a ConnectResponse) with a REJ.
    pub fn reject(
        &mut self,
        now: u64,
        id: CmId,
        reason: u16,
        private_data: &[u8],
    ) -> Result<(), CmError> {
        Self::check_pd(CmOpcode::Rej, private_data)?;
        let e = self.get(id, &[State::ReqRcvd, State::RepRcvd])?;
        let (peer, remote) = (e.peer, e.remote);
        let m = CmMsg {
            dst_comm: remote,
            src_comm: id.0,
            body: CmBody::Rej { reason },
            private_data: private_data.to_vec(),
        };
        let last = self.send(peer, &m);
        self.timewait(now, id.0, Some(last));
        Ok(())
    }

    /// Active side after a ConnectResponse: send the RTU, the exchange is established.
    /// Passive side with a REP outstanding (the RTU was lost but the QP saw data, verbs'
    /// COMM_EST): established without waiting further.
    pub fn establish(&mut self, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
        Self::check_pd(CmOpcode::Rtu, private_data)?;
        let e = self.get(id, &[State::RepRcvd, State::RepSent])?;
        let (peer, remote, state) = (e.peer, e.remote, e.state);
        if state == State::RepSent {
            let e = self.ex.get_mut(&id.0).ok_or(CmError::UnknownId)?;
            e.state = State::Established;
            e.deadline = None;
            self.emit(CmEvent::Established {
                id,
                private_data: Vec::new(),
            });
            return Ok(());
        }
        let m = CmMsg {
            dst_comm: remote,
            src_comm: id.0,
            body: CmBody::Rtu,
            private_data: private_data.to_vec(),
        };
        let last = self.send(peer, &m);
        let e = self.ex.get_mut(&id.0).ok_or(CmError::UnknownId)?;
        e.state = State::Established;
        // Kept to answer a duplicate REP (our RTU lost).
        e.last = Some(last);
        e.deadline = None;
        Ok(())
    }

    /// Send a DREQ (retransmitted until the DREP); Disconnected follows either way.
    pub fn disconnect(&mut self, now: u64, id: CmId, private_data: &[u8]) -> Result<(), CmError> {
        Self::check_pd(CmOpcode::Dreq, private_data)?;
        let e = self.get(id, &[State::Established, State::RepSent])?;
        let (peer, remote) = (e.peer, e.remote);
        let m = CmMsg {
            dst_comm: remote,
            src_comm: id.0,
            body: CmBody::Dreq,
            private_data: private_data.to_vec(),
        };
        let last = self.send(peer, &m);
        let rto = self.cfg.rto_ns;
        let e = self.ex.get_mut(&id.0).ok_or(CmError::UnknownId)?;
        e.state = State::DreqSent;
        e.last = Some(last);
        e.retries = 0;
        e.deadline = Some(now + rto);
        Ok(())
    }

    /// The application is done with `id`: no more events for it. An exchange in progress
    /// is abandoned (a REQ outstanding is no longer retried; the peer times out), an
    /// established one is left without a DREQ (call `disconnect` first for that; a DREQ
    /// outstanding keeps being retransmitted). Duplicates are still answered during the
    /// time-wait.
    pub fn release(&mut self, now: u64, id: CmId) {
        if let Some(e) = self.ex.get_mut(&id.0) {
            if e.state == State::DreqSent {
                // The peer still learns of the disconnect: the DREQ runs its course.
                e.quiet = true;
                return;
            }
            if e.state != State::TimeWait {
                let last = match e.state {
                    State::Established | State::DreqSent => None,
                    _ => e.last.clone(),
                };
                self.timewait(now, id.0, last);
            }
        }
    }

    /// The process is ending and this CM with it: every DREQ still unanswered is
    /// retransmitted every `interval_ns` from now on instead of on its backed-off RTO, so
    /// the DREP comes while someone is here to hear it. Returns how many DREQs are
    /// outstanding (0: the process may go).
    pub fn hasten_disconnects(&mut self, now: u64, interval_ns: u64) -> usize {
        let mut n = 0;
        for e in self.ex.values_mut().filter(|e| e.state == State::DreqSent) {
            n += 1;
            e.hasten_ns = Some(interval_ns);
            let soon = now.saturating_add(interval_ns);
            if e.deadline.is_none_or(|d| d > soon) {
                e.deadline = Some(soon);
            }
        }
        n
    }

    /// The process is ending: the DREPs it answered its peers' DREQs with are sent once
    /// more (a lost one would leave the peer retrying its DREQ into a process that is
    /// gone; a duplicate DREP is ignored). Returns how many went.
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
    pub fn is_live(&self, id: CmId) -> bool {
        self.ex
            .get(&id.0)
            .is_some_and(|e| e.state != State::TimeWait)
    }

    /// Queue an event unless its exchange was released.
    fn emit(&mut self, ev: CmEvent) {
        let id = match &ev {
            CmEvent::ConnectRequest { id, .. }
            | CmEvent::ConnectResponse { id, .. }
            | CmEvent::Established { id, .. }
            | CmEvent::Rejected { id, .. }
            | CmEvent::Unreachable { id }
            | CmEvent::Disconnected { id, .. }
            | CmEvent::SidrRequest { id, .. }
            | CmEvent::SidrResponse { id, .. } => *id,
        };
        if !self.ex.get(&id.0).is_some_and(|e| e.quiet) {
            self.events.push_back(ev);
        }
    }

    fn timewait(&mut self, now: u64, id: u32, last: Option<Vec<u8>>) {
        let tw = self.cfg.timewait_ns;
        if let Some(e) = self.ex.get_mut(&id) {
            e.state = State::TimeWait;
            e.last = last;
            e.deadline = Some(now + tw);
        }
    }

    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<(Ipv4Addr, usize)> {
        let (peer, v) = self.tx.pop_front()?;
        if buf.len() < v.len() {
            return None;
        }
        buf[..v.len()].copy_from_slice(&v);
        Some((peer, v.len()))
    }

    pub fn has_transmit(&self) -> bool {
        !self.tx.is_empty()
    }

    pub fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    pub fn poll_timeout(&self) -> Option<u64> {
        self.ex.values().filter_map(|e| e.deadline).min()
    }

    pub fn handle_timeout(&mut self, now: u64) {
        // Initiators retransmit within the grace; older entries are of ones that gave up.
        let keep = self.cfg.listen_grace_ns.saturating_mul(10);
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
                let (peer, remote) = (e.peer, e.remote);
                self.ex.remove(&id);
                if self.by_remote.get(&(peer, remote)) == Some(&id) {
                    self.by_remote.remove(&(peer, remote));
                }
                continue;
            }
            if e.retries >= self.cfg.max_retries {
                self.counters.timeouts += 1;
                let ev = match e.state {
                    State::DreqSent => CmEvent::Disconnected {
                        id: CmId(id),
                        private_data: Vec::new(),
                    },
                    _ => CmEvent::Unreachable { id: CmId(id) },
                };
                self.emit(ev);
                self.timewait(now, id, None);
                continue;
            }
            e.retries += 1;
            let rto = e
                .hasten_ns
                .unwrap_or((self.cfg.rto_ns << e.retries.min(20)).min(self.cfg.rto_max_ns));
            e.deadline = Some(now + rto);
            if let Some(v) = e.last.clone() {
                let peer = e.peer;
                self.tx.push_back((peer, v));
                self.counters.tx += 1;
                self.counters.retransmits += 1;
            }
        }
    }

    /// A CM packet from `src`; a bad one is counted and dropped, never answered.
    pub fn handle(&mut self, now: u64, src: Ipv4Addr, data: &[u8]) {
        self.counters.rx += 1;
        let m = match CmMsg::parse(data) {
            Ok(m) => m,
            Err(e) => {
                let c = &mut self.counters;
                match e {
                    CmWireError::Truncated => c.drop_truncated += 1,
                    CmWireError::BadVersion => c.drop_bad_version += 1,
                    CmWireError::BadOpcode => c.drop_bad_opcode += 1,
                    CmWireError::Malformed(_) => c.drop_malformed += 1,
                    CmWireError::BadCrc => c.drop_bad_crc += 1,
                }
                return;
            }
        };
        if !self.dispatch(now, src, m) {
            self.counters.drop_unexpected += 1;
        }
    }

    /// The exchange `m` is for, if it is from `src` and its peer comm id fits.
    fn ours(&self, src: Ipv4Addr, m: &CmMsg) -> Option<(u32, State)> {
        let e = self.ex.get(&m.dst_comm)?;
        if e.peer != src || (e.remote != 0 && e.remote != m.src_comm) {
            return None;
        }
        Some((m.dst_comm, e.state))
    }

    fn resend_last(&mut self, id: u32) -> bool {
        let Some(e) = self.ex.get(&id) else {
            return false;
        };
        if let Some(v) = e.last.clone() {
            let peer = e.peer;
            self.tx.push_back((peer, v));
            self.counters.tx += 1;
            self.counters.retransmits += 1;
        }
        true
    }

    fn dispatch(&mut self, now: u64, src: Ipv4Addr, m: CmMsg) -> bool {
        match m.body {
            CmBody::Req {
                port_space,
                dst_port,
                src_port,
                qp,
                dst_addr,
            } => {
                if let Some(&id) = self.by_remote.get(&(src, m.src_comm)) {
                    // A duplicate: our REP or REJ again (nothing while the application decides).
                    let st = self.ex.get(&id).map(|e| e.state);
                    if st != Some(State::ReqRcvd) && st != Some(State::SidrReqRcvd) {
                        self.resend_last(id);
                    }
                    return true;
                }
                if !self.listening.contains(&(port_space, dst_port)) {
                    if !self.grace_over(now, src, m.src_comm) {
                        return true;
                    }
                    let id = self.alloc();
                    let rej = CmMsg {
                        dst_comm: m.src_comm,
                        src_comm: id,
                        body: CmBody::Rej {
                            reason: reason::INVALID_SERVICE_ID,
                        },
                        private_data: Vec::new(),
                    };
                    let last = self.send(src, &rej);
                    self.insert_passive(src, m.src_comm, id, State::TimeWait, Some(last));
                    self.timewait(now, id, self.ex.get(&id).and_then(|e| e.last.clone()));
                    return true;
                }
                self.unserved.remove(&(src, m.src_comm));
                let id = self.alloc();
                self.insert_passive(src, m.src_comm, id, State::ReqRcvd, None);
                self.emit(CmEvent::ConnectRequest {
                    id: CmId(id),
                    peer: src,
                    port_space,
                    port: dst_port,
                    peer_port: src_port,
                    local_addr: dst_addr,
                    qp,
                    private_data: m.private_data,
                });
                true
            }
            CmBody::SidrReq {
                port_space,
                dst_port,
                src_port,
                dst_addr,
            } => self.on_sidr_req(
                now,
                src,
                m.src_comm,
                (port_space, dst_port, src_port),
                dst_addr,
                m.private_data,
            ),
            CmBody::SidrRep { status, qpn, qkey } => {
                self.on_sidr_rep(now, src, &m, status, qpn, qkey)
            }
            CmBody::Rep { qp } => {
                let Some((id, st)) = self.ours(src, &m) else {
                    return false;
                };
                match st {
                    State::ReqSent => {
                        let e = self.ex.get_mut(&id).expect("looked up");
                        e.remote = m.src_comm;
                        e.state = State::RepRcvd;
                        e.last = None;
                        e.deadline = None;
                        self.by_remote.insert((src, m.src_comm), id);
                        self.emit(CmEvent::ConnectResponse {
                            id: CmId(id),
                            qp,
                            private_data: m.private_data,
                        });
                        true
                    }
                    // Our RTU was lost: again (DREQ and time-wait keep their own answer).
                    State::Established => self.resend_last(id),
                    State::RepRcvd | State::DreqSent => true,
                    _ => false,
                }
            }
            CmBody::Rtu => {
                let Some((id, st)) = self.ours(src, &m) else {
                    return false;
                };
                match st {
                    State::RepSent => {
                        let e = self.ex.get_mut(&id).expect("looked up");
                        e.state = State::Established;
                        e.last = None;
                        e.deadline = None;
                        self.emit(CmEvent::Established {
                            id: CmId(id),
                            private_data: m.private_data,
                        });
                        true
                    }
                    State::Established | State::DreqSent => true,
                    _ => false,
                }
            }
            CmBody::Rej { reason } => {
                let Some((id, st)) = self.ours(src, &m) else {
                    return false;
                };
                match st {
                    State::ReqSent | State::RepSent | State::RepRcvd => {
                        self.emit(CmEvent::Rejected {
                            id: CmId(id),
                            reason,
                            private_data: m.private_data,
                        });
                        self.timewait(now, id, None);
                        true
                    }
                    _ => false,
                }
            }
            CmBody::Dreq => {
                let drep = |dst: u32, src_comm: u32| CmMsg {
                    dst_comm: dst,
                    src_comm,
                    body: CmBody::Drep,
                    private_data: Vec::new(),
                };
                let Some((id, st)) = self.ours(src, &m) else {
                    // Already forgotten: a DREP still ends the peer's retries.
                    if m.dst_comm != 0 {
                        self.send(src, &drep(m.src_comm, m.dst_comm));
                    }
                    return false;
                };
                match st {
                    State::Established | State::RepSent | State::RepRcvd | State::DreqSent => {
                        let last = self.send(src, &drep(m.src_comm, id));
                        self.emit(CmEvent::Disconnected {
                            id: CmId(id),
                            private_data: m.private_data,
                        });
                        self.timewait(now, id, Some(last));
                        if let Some(e) = self.ex.get_mut(&id) {
                            e.drep = true;
                        }
                    }
                    _ => {
                        self.resend_last(id);
                    }
                }
                true
            }
            CmBody::Drep => {
                let Some((id, st)) = self.ours(src, &m) else {
                    return false;
                };
                if st != State::DreqSent {
                    return st == State::TimeWait;
                }
                self.emit(CmEvent::Disconnected {
                    id: CmId(id),
                    private_data: m.private_data,
                });
                self.timewait(now, id, None);
                true
            }
        }
    }

    /// A request for a port nobody listens on: whether `listen_grace` has passed since its
    /// first copy (spec/cm.md §2.2), so it is refused now; earlier copies get no answer.
    fn grace_over(&mut self, now: u64, src: Ipv4Addr, remote: u32) -> bool {
        let first = *self.unserved.entry((src, remote)).or_insert(now);
        if now.saturating_sub(first) < self.cfg.listen_grace_ns {
            return false;
        }
        self.unserved.remove(&(src, remote));
        true
    }

    fn insert_passive(
        &mut self,
        peer: Ipv4Addr,
        remote: u32,
        id: u32,
        state: State,
        last: Option<Vec<u8>>,
    ) {
        self.by_remote.insert((peer, remote), id);
        self.ex.insert(
            id,
            Exchange {
                peer,
                remote,
                state,
                last,
                retries: 0,
                deadline: None,
                quiet: false,
                hasten_ns: None,
                drep: false,
            },
        );
    }
}
