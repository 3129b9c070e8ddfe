//! The RoCEv2 device's connection manager: the IBTA CM on QP1 of its engine
//! (`ferroce_transport::roce::cm`, spec/rocev2.md §10), behind the same private interface
//! as the native CM (cm.rs: `ferroce_cm_start` with mode 1 selects it).
//!
//! The engine's [`RoceEndpoint`] serves QP1 itself; [`RoceCmTransport`] wraps it only to
//! know the time and to hand the CM's events to librdmacm after each receive and timer
//! (engine thread, no shim lock held), as the native wrapper does.

use crate::cm::{ffi_deliver, kind, FfiEvent, FfiQp};
use crate::state::{engine, Mode};
use ferroce_dataplane::engine::{Command, TransportFn};
use ferroce_transport::mem::Memory;
use ferroce_transport::roce::cm::{
    CmQp, ConnectParams, RoceCmConfig, RoceCmError, RoceCmEvent, RoceCmId,
};
use ferroce_transport::roce::RoceEndpoint;
use ferroce_transport::{
    Completion, ConnId, Event, PostError, RecvWr, RxDatagram, SendWr, Transmit, Transport,
    TransportTotals,
};
use std::ffi::c_int;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The engine's time as of its latest call into the transport.
static NOW: AtomicU64 = AtomicU64::new(0);

/// Local ACK timeout the CM's QPs are announced with (the shim's RC default).
const LOCAL_ACK_TIMEOUT: u8 = 14;

/// Enable the CM on the RoCEv2 endpoint and wrap it (state.rs, when the engine starts);
/// `timers`: its REQs' `(cm_response_timeout, max_cm_retries)` (config.rs).
pub fn wrap(mut ep: RoceEndpoint, seed: u32, timers: (u8, u8)) -> Box<dyn Transport + Send> {
    let ip = ep.config().local_ip;
    let cfg = RoceCmConfig {
        cm_response_timeout: timers.0,
        max_cm_retries: timers.1,
        ..RoceCmConfig::new(ip)
    };
    ep.enable_cm(cfg, seed);
    Box::new(RoceCmTransport { inner: ep })
}

pub struct RoceCmTransport {
    inner: RoceEndpoint,
}

fn ffi_qp(q: &CmQp) -> FfiQp {
    FfiQp {
        qpn: q.qpn,
        start_psn: q.starting_psn,
        responder_resources: q.responder_resources,
        initiator_depth: q.initiator_depth,
        retry_count: q.retry_count,
        rnr_retry_count: q.rnr_retry_count,
    }
}

fn ffi_event(e: &RoceCmEvent) -> Option<(FfiEvent, Vec<u8>)> {
    Some(match e {
        RoceCmEvent::ConnectRequest {
            id,
            peer,
            port_space,
            port,
            peer_port,
            local_addr,
            qp,
            mtu,
            private_data,
            ..
        } => {
            let mut f = FfiEvent::request(id.0, *peer, *local_addr, *port_space, *port, *peer_port);
            f.qp = ffi_qp(qp);
            f.mtu = *mtu;
            (f, private_data.clone())
        }
        RoceCmEvent::ConnectResponse {
            id,
            qp,
            private_data,
        } => {
            let mut f = FfiEvent::of(kind::CONNECT_RESPONSE, id.0);
            f.qp = ffi_qp(qp);
            (f, private_data.clone())
        }
        RoceCmEvent::Established { id } => (FfiEvent::of(kind::ESTABLISHED, id.0), Vec::new()),
        RoceCmEvent::Rejected {
            id,
            reason,
            private_data,
        } => {
            let mut f = FfiEvent::of(kind::REJECTED, id.0);
            f.reason = *reason;
            (f, private_data.clone())
        }
        RoceCmEvent::Unreachable { id } => (FfiEvent::of(kind::UNREACHABLE, id.0), Vec::new()),
        RoceCmEvent::Disconnected { id } => (FfiEvent::of(kind::DISCONNECTED, id.0), Vec::new()),
        RoceCmEvent::SidrRequest {
            id,
            peer,
            port_space,
            port,
            peer_port,
            local_addr,
            private_data,
        } => (
            FfiEvent::request(id.0, *peer, *local_addr, *port_space, *port, *peer_port),
            private_data.clone(),
        ),
        RoceCmEvent::SidrResponse {
            id,
            status,
            qpn,
            qkey,
            private_data,
        } => (
            crate::cm::sidr_response(id.0, *status, *qpn, *qkey),
            private_data.clone(),
        ),
    })
}

/// Hand the CM's queued events to librdmacm (engine thread).
fn deliver(ep: &mut RoceEndpoint) {
    let Some(cm) = ep.cm_mut() else { return };
    let events: Vec<RoceCmEvent> = std::iter::from_fn(|| cm.poll_event()).collect();
    for e in events {
        let Some((f, pd)) = ffi_event(&e) else {
            continue;
        };
        ffi_deliver(f, &pd);
    }
}

impl Transport for RoceCmTransport {
    fn connect(&mut self, peer: Ipv4Addr) -> ConnId {
        self.inner.connect(peer)
    }
    fn create_stream(&mut self, c: ConnId, l: u32, r: u32, pd: u32) -> Result<(), PostError> {
        Transport::create_stream(&mut self.inner, c, l, r, pd)
    }
    fn destroy_stream(&mut self, c: ConnId, l: u32) -> Result<(), PostError> {
        Transport::destroy_stream(&mut self.inner, c, l)
    }
    fn post_send(&mut self, c: ConnId, stream: u32, wr: SendWr) -> Result<(), PostError> {
        self.inner.post_send(c, stream, wr)
    }
    fn post_recv(&mut self, c: ConnId, stream: u32, wr: RecvWr) -> Result<(), PostError> {
        self.inner.post_recv(c, stream, wr)
    }
    fn receive(&mut self, now: u64, d: &RxDatagram<'_>, mem: &mut dyn Memory) {
        NOW.store(now, Ordering::Relaxed);
        self.inner.receive(now, d, mem);
        deliver(&mut self.inner);
    }
    fn transmit(
        &mut self,
        now: u64,
        buf: &mut [u8],
        mem: &mut dyn Memory,
        ready: u64,
    ) -> Option<Transmit> {
        NOW.store(now, Ordering::Relaxed);
        self.inner.transmit(now, buf, mem, ready)
    }
    fn close(&mut self, c: ConnId) -> Result<(), PostError> {
        Transport::close(&mut self.inner, c)
    }
    fn poll_timeout(&self) -> Option<u64> {
        self.inner.poll_timeout()
    }
    fn handle_timeout(&mut self, now: u64) {
        NOW.store(now, Ordering::Relaxed);
        self.inner.handle_timeout(now);
        deliver(&mut self.inner);
    }
    fn poll_completion(&mut self) -> Option<Completion> {
        self.inner.poll_completion()
    }
    fn poll_event(&mut self) -> Option<Event> {
        self.inner.poll_event()
    }
    fn compact_idle(&mut self) {
        Transport::compact_idle(&mut self.inner)
    }
    fn totals(&self) -> TransportTotals {
        self.inner.totals()
    }
    fn udp_port(&self) -> u16 {
        Transport::udp_port(&self.inner)
    }
    fn accepts_connections(&self) -> bool {
        Transport::accepts_connections(&self.inner)
    }
    // The endpoint itself: the shim reaches the `RoceEndpoint` through it.
    fn engine(&self) -> ferroce_transport::EngineRef<'_> {
        self.inner.engine()
    }
    fn engine_mut(&mut self) -> ferroce_transport::EngineMut<'_> {
        self.inner.engine_mut()
    }
}

/// Run `f` on the RoCEv2 engine's CM in its thread and wait for the result.
fn on_engine<R: Send + 'static>(
    f: impl FnOnce(&mut ferroce_transport::roce::cm::RoceCm, u64, u32) -> R + Send + 'static,
) -> Result<R, c_int> {
    let e = engine(Mode::Roce).map_err(|m| {
        crate::state::dbg_log!("CM: {m}");
        libc::ENODEV
    })?;
    let mtu = e.mtu;
    let (tx, rx) = crossbeam_channel::bounded(1);
    e.h.command(Command::Exec(TransportFn(Box::new(move |t| {
        let Some(ep) = t.engine_mut().roce() else {
            let _ = tx.send(None);
            return;
        };
        let r = ep
            .cm_mut()
            .map(|cm| f(cm, NOW.load(Ordering::Relaxed), mtu));
        deliver(ep);
        let _ = tx.send(r);
    }))));
    rx.recv_timeout(Duration::from_secs(5))
        .map_err(|_| libc::ETIMEDOUT)?
        .ok_or(libc::ENODEV)
}

fn errno_of(e: RoceCmError) -> c_int {
    match e {
        RoceCmError::UnknownId => libc::ENOENT,
        RoceCmError::InvalidState | RoceCmError::PrivateDataTooLong | RoceCmError::InvalidMtu => {
            libc::EINVAL
        }
        RoceCmError::PortInUse => libc::EADDRINUSE,
    }
}

fn status_of(r: Result<Result<(), RoceCmError>, c_int>) -> c_int {
    match r {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => errno_of(e),
        Err(e) => e,
    }
}

fn cm_qp(q: FfiQp) -> CmQp {
    CmQp {
        qpn: q.qpn & 0x00ff_ffff,
        starting_psn: q.start_psn & 0x00ff_ffff,
        responder_resources: q.responder_resources,
        initiator_depth: q.initiator_depth,
        retry_count: q.retry_count.min(7),
        rnr_retry_count: q.rnr_retry_count.min(7),
    }
}

pub fn listen(port_space: u16, port: u16) -> c_int {
    status_of(on_engine(move |cm, _, _| cm.listen(port_space, port)))
}

pub fn unlisten(port_space: u16, port: u16) -> c_int {
    status_of(on_engine(move |cm, _, _| {
        cm.unlisten(port_space, port);
        Ok(())
    }))
}

pub fn connect(
    peer: u32,
    port_space: u16,
    port: u16,
    src_port: u16,
    qp: FfiQp,
    pd: Vec<u8>,
) -> Result<u32, c_int> {
    let r = on_engine(move |cm, now, mtu| {
        if port_space == crate::cm::PS_UDP {
            let peer = Ipv4Addr::from(peer);
            return cm.sidr_request(now, peer, port_space, port, src_port, &pd);
        }
        let p = ConnectParams {
            peer: Ipv4Addr::from(peer),
            port_space,
            port,
            src_port,
            qp: cm_qp(qp),
            mtu,
            local_ack_timeout: LOCAL_ACK_TIMEOUT,
            private_data: pd,
        };
        cm.connect(now, &p)
    });
    match r {
        Ok(Ok(RoceCmId(v))) => Ok(v),
        Ok(Err(e)) => Err(errno_of(e)),
        Err(e) => Err(e),
    }
}

pub fn accept(id: u32, qp: FfiQp, pd: Vec<u8>) -> c_int {
    status_of(on_engine(move |cm, now, _| {
        cm.accept(now, RoceCmId(id), cm_qp(qp), &pd)
    }))
}

pub fn sidr_reply(id: u32, status: u8, qpn: u32, qkey: u32, pd: Vec<u8>) -> c_int {
    status_of(on_engine(move |cm, now, _| {
        cm.sidr_reply(now, RoceCmId(id), status, qpn, qkey, &pd)
    }))
}

pub fn reject(id: u32, reason: u16, pd: Vec<u8>) -> c_int {
    status_of(on_engine(move |cm, now, _| {
        cm.reject(now, RoceCmId(id), reason, &pd)
    }))
}

pub fn establish(id: u32, pd: Vec<u8>) -> c_int {
    status_of(on_engine(move |cm, _, _| cm.establish(RoceCmId(id), &pd)))
}

pub fn disconnect(id: u32, pd: Vec<u8>) -> c_int {
    status_of(on_engine(move |cm, now, _| {
        cm.disconnect(now, RoceCmId(id), &pd)
    }))
}

pub fn release(id: u32) -> c_int {
    status_of(on_engine(move |cm, now, _| {
        cm.release(now, RoceCmId(id));
        Ok(())
    }))
}

/// At exit: how many DREQs are unanswered, after asking the CM to retransmit them every
/// `every` and, with `repeat_dreps`, to send its DREPs once more (state.rs,
/// `last_context_closed`); 0 if the CM does not answer.
pub fn hasten_disconnects(every: Duration, repeat_dreps: bool) -> usize {
    let ns = every.as_nanos() as u64;
    on_engine(move |cm, now, _| {
        if repeat_dreps {
            let n = cm.repeat_dreps();
            if n > 0 {
                crate::state::dbg_log!("exit: DREP sent again to {n} peers");
            }
        }
        cm.hasten_disconnects(now, ns)
    })
    .unwrap_or(0)
}
