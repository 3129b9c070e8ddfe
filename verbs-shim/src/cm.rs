//! The connection manager in the engine, and the private interface `librdmacm.so.1`
//! (crate `rdmacm/`) reaches it through.
//!
//! The native engine's transport is wrapped in [`CmTransport`]: CM packets (opcodes 0x40..,
//! spec/cm.md §1) go to the sans-IO [`Cm`], everything else to the native endpoint
//! unchanged; the CM's packets and deadlines join the endpoint's. The CM runs on the
//! engine's thread: the `ferroce_cm_*` calls below send it closures and wait for them, and
//! its events reach librdmacm through the callback it registered (called on the engine's
//! thread, with no shim lock held).
//!
//! The interface is not part of rdma-core's ABI: librdmacm finds it with `dlsym` and checks
//! `ferroce_cm_abi()`; the structures are mirrored in `rdmacm/src/shim.rs`.
//!
//! `ferroce_cm_start` picks the device whose CM the process uses: mode 0 the native one
//! (here), mode 1 the RoCEv2 one (the IBTA CM on QP1, cm_roce.rs); the other calls go to it.

use crate::state::{engine, lock, Mode};
use ferroce_dataplane::engine::{Command, TransportFn};
use ferroce_transport::cm::{Cm, CmConfig, CmEvent, CmId, QpInfo};
use ferroce_transport::mem::Memory;
use ferroce_transport::wire::NATIVE_UDP_PORT;
use ferroce_transport::{
    Completion, ConnId, Event, PostError, RecvWr, RxDatagram, SendWr, Transmit, Transport,
    TransportTotals,
};
use std::ffi::{c_int, c_void};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// Version of this interface (librdmacm refuses another).
pub const ABI: u32 = 3;

/// rdma_cm's UD port space: `connect` in it sends a SIDR_REQ instead of a REQ.
pub const PS_UDP: u16 = 0x0111;

/// Event kinds of [`FfiEvent::kind`].
pub mod kind {
    pub const CONNECT_REQUEST: u32 = 1;
    pub const CONNECT_RESPONSE: u32 = 2;
    pub const ESTABLISHED: u32 = 3;
    pub const REJECTED: u32 = 4;
    pub const UNREACHABLE: u32 = 5;
    pub const DISCONNECTED: u32 = 6;
    /// The SIDR_REP of a UD connect: `reason` its status (0: `qp.qpn` and `qkey` valid).
    pub const SIDR_RESPONSE: u32 = 7;
}

/// Queue-pair parameters across the interface.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FfiQp {
    pub qpn: u32,
    pub start_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
}

/// One CM event; `pd` is valid during the callback only.
#[repr(C)]
pub struct FfiEvent {
    pub kind: u32,
    pub id: u32,
    /// IPv4 addresses as host-order integers.
    pub peer: u32,
    pub local_addr: u32,
    pub port_space: u16,
    pub port: u16,
    pub peer_port: u16,
    pub reason: u16,
    pub qp: FfiQp,
    pub pd_len: u32,
    pub pd: *const u8,
    /// CONNECT_REQUEST of the RoCEv2 CM: the path MTU (bytes) the initiator chose, which
    /// both QPs use; 0 otherwise (the port's).
    pub mtu: u32,
    /// SIDR_RESPONSE: the peer's UD Q_Key.
    pub qkey: u32,
}

impl FfiEvent {
    pub fn empty() -> FfiEvent {
        FfiEvent {
            kind: 0,
            id: 0,
            peer: 0,
            local_addr: 0,
            port_space: 0,
            port: 0,
            peer_port: 0,
            reason: 0,
            qp: FfiQp::default(),
            pd_len: 0,
            pd: std::ptr::null(),
            mtu: 0,
            qkey: 0,
        }
    }

    /// An event of `kind` about `id`, every other field empty.
    pub fn of(kind: u32, id: u32) -> FfiEvent {
        FfiEvent {
            kind,
            id,
            ..FfiEvent::empty()
        }
    }

    /// A CONNECT_REQUEST (RC or, by its port space, UD): who asks, for which service.
    pub fn request(
        id: u32,
        peer: Ipv4Addr,
        local_addr: Ipv4Addr,
        port_space: u16,
        port: u16,
        peer_port: u16,
    ) -> FfiEvent {
        FfiEvent {
            peer: u32::from(peer),
            local_addr: u32::from(local_addr),
            port_space,
            port,
            peer_port,
            ..FfiEvent::of(kind::CONNECT_REQUEST, id)
        }
    }
}

/// The callback librdmacm registers.
pub type FfiCallback = unsafe extern "C" fn(ev: *const FfiEvent, ctx: *mut c_void);

struct Shared {
    cm: Cm,
    /// The engine's time as of its latest call into the transport (the calls below run
    /// between two of those, on the same thread).
    now: u64,
    cb: Option<(FfiCallback, usize)>,
}

/// The first comm ID of a CM: differs per process, so a restarted one does not reuse its
/// predecessor's while peers remember them.
pub fn seed() -> u32 {
    std::process::id().wrapping_mul(0x9e37_79b9)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0)
}

fn shared() -> &'static Arc<Mutex<Shared>> {
    static S: OnceLock<Arc<Mutex<Shared>>> = OnceLock::new();
    S.get_or_init(|| {
        Arc::new(Mutex::new(Shared {
            cm: Cm::new(CmConfig::default(), seed()),
            now: 0,
            cb: None,
        }))
    })
}

/// Hand the CM's events to librdmacm (engine thread, no lock held during the callback).
fn deliver() {
    let events: Vec<CmEvent> = {
        let mut s = lock(shared());
        std::iter::from_fn(|| s.cm.poll_event()).collect()
    };
    for e in events {
        if let Some((f, pd)) = ffi_event(&e) {
            ffi_deliver(f, &pd);
        }
    }
}

/// One event to librdmacm's callback, with `pd` as its private data (engine thread; no
/// lock held during the callback).
pub fn ffi_deliver(mut f: FfiEvent, pd: &[u8]) {
    let Some((cb, ctx)) = lock(shared()).cb else {
        return;
    };
    f.pd = pd.as_ptr();
    f.pd_len = pd.len() as u32;
    // SAFETY: the callback librdmacm registered, given an event that lives (with its
    // private data) until it returns, as the interface documents.
    unsafe { cb(&f, ctx as *mut c_void) };
}

/// The device whose CM this process uses (set by the first `ferroce_cm_start`).
static CM_MODE: OnceLock<Mode> = OnceLock::new();

fn roce() -> bool {
    CM_MODE.get() == Some(&Mode::Roce)
}

fn ffi_qp(q: &QpInfo) -> FfiQp {
    FfiQp {
        qpn: q.qpn,
        start_psn: q.start_psn,
        responder_resources: q.responder_resources,
        initiator_depth: q.initiator_depth,
        retry_count: q.retry_count,
        rnr_retry_count: q.rnr_retry_count,
    }
}

fn ffi_event(e: &CmEvent) -> Option<(FfiEvent, Vec<u8>)> {
    Some(match e {
        CmEvent::ConnectRequest {
            id,
            peer,
            port_space,
            port,
            peer_port,
            local_addr,
            qp,
            private_data,
        } => {
            let mut f = FfiEvent::request(id.0, *peer, *local_addr, *port_space, *port, *peer_port);
            f.qp = ffi_qp(qp);
            (f, private_data.clone())
        }
        CmEvent::ConnectResponse {
            id,
            qp,
            private_data,
        } => {
            let mut f = FfiEvent::of(kind::CONNECT_RESPONSE, id.0);
            f.qp = ffi_qp(qp);
            (f, private_data.clone())
        }
        CmEvent::Established { id, private_data } => {
            (FfiEvent::of(kind::ESTABLISHED, id.0), private_data.clone())
        }
        CmEvent::Rejected {
            id,
            reason,
            private_data,
        } => {
            let mut f = FfiEvent::of(kind::REJECTED, id.0);
            f.reason = *reason;
            (f, private_data.clone())
        }
        CmEvent::Unreachable { id } => (FfiEvent::of(kind::UNREACHABLE, id.0), Vec::new()),
        CmEvent::Disconnected { id, private_data } => {
            (FfiEvent::of(kind::DISCONNECTED, id.0), private_data.clone())
        }
        // A UD id's CONNECT_REQUEST: librdmacm knows it by the port space.
        CmEvent::SidrRequest {
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
        CmEvent::SidrResponse {
            id,
            status,
            qpn,
            qkey,
            private_data,
        } => (
            sidr_response(id.0, *status, *qpn, *qkey),
            private_data.clone(),
        ),
    })
}

/// A SIDR_RESPONSE: the status, and the peer's UD QPN and Q_Key.
pub fn sidr_response(id: u32, status: u8, qpn: u32, qkey: u32) -> FfiEvent {
    let mut f = FfiEvent::of(kind::SIDR_RESPONSE, id);
    f.reason = status as u16;
    f.qp.qpn = qpn;
    f.qkey = qkey;
    f
}

/// The native transport with the CM beside it.
pub struct CmTransport {
    inner: Box<dyn Transport + Send>,
    s: Arc<Mutex<Shared>>,
}

/// Wrap the native engine's transport (state.rs, when the engine starts).
pub fn wrap(inner: Box<dyn Transport + Send>) -> Box<dyn Transport + Send> {
    Box::new(CmTransport {
        inner,
        s: shared().clone(),
    })
}

impl CmTransport {
    fn tick(&self, now: u64) {
        lock(&self.s).now = now;
    }

    /// The CM's next packet, ahead of the endpoint's (there are few, and they are what a
    /// connection waits for).
    fn cm_transmit(&mut self, now: u64, buf: &mut [u8]) -> Option<Transmit> {
        let mut s = lock(&self.s);
        s.now = now;
        let (dst, len) = s.cm.poll_transmit(buf)?;
        Some(Transmit {
            dst,
            src_port: NATIVE_UDP_PORT,
            dst_port: NATIVE_UDP_PORT,
            len,
            port: 0,
        })
    }
}

impl Transport for CmTransport {
    fn connect(&mut self, peer: Ipv4Addr) -> ConnId {
        self.inner.connect(peer)
    }
    fn create_stream(&mut self, c: ConnId, l: u32, r: u32, pd: u32) -> Result<(), PostError> {
        self.inner.create_stream(c, l, r, pd)
    }
    fn destroy_stream(&mut self, c: ConnId, l: u32) -> Result<(), PostError> {
        self.inner.destroy_stream(c, l)
    }
    fn post_send(&mut self, c: ConnId, stream: u32, wr: SendWr) -> Result<(), PostError> {
        self.inner.post_send(c, stream, wr)
    }
    fn post_recv(&mut self, c: ConnId, stream: u32, wr: RecvWr) -> Result<(), PostError> {
        self.inner.post_recv(c, stream, wr)
    }
    fn receive(&mut self, now: u64, d: &RxDatagram<'_>, mem: &mut dyn Memory) {
        if ferroce_transport::cm::is_cm_packet(d.payload) {
            {
                let mut s = lock(&self.s);
                s.now = now;
                s.cm.handle(now, d.src, d.payload);
            }
            deliver();
            return;
        }
        self.inner.receive(now, d, mem)
    }
    fn transmit(
        &mut self,
        now: u64,
        buf: &mut [u8],
        mem: &mut dyn Memory,
        ready: u64,
    ) -> Option<Transmit> {
        // CM packets leave on port 0, which must have room.
        if ready & 1 != 0 {
            if let Some(t) = self.cm_transmit(now, buf) {
                return Some(t);
            }
        }
        self.inner.transmit(now, buf, mem, ready)
    }
    fn close(&mut self, c: ConnId) -> Result<(), PostError> {
        self.inner.close(c)
    }
    fn poll_timeout(&self) -> Option<u64> {
        let cm = lock(&self.s).cm.poll_timeout();
        match (cm, self.inner.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
    fn handle_timeout(&mut self, now: u64) {
        self.tick(now);
        let due = lock(&self.s).cm.poll_timeout().is_some_and(|t| t <= now);
        if due {
            lock(&self.s).cm.handle_timeout(now);
            deliver();
        }
        // Always: the engine calls this only when something is due, and the endpoint's
        // own bookkeeping (its timer heap) runs in it.
        self.inner.handle_timeout(now);
    }
    fn poll_completion(&mut self) -> Option<Completion> {
        self.inner.poll_completion()
    }
    fn poll_event(&mut self) -> Option<Event> {
        self.inner.poll_event()
    }
    fn compact_idle(&mut self) {
        self.inner.compact_idle()
    }
    fn totals(&self) -> TransportTotals {
        self.inner.totals()
    }
    fn udp_port(&self) -> u16 {
        self.inner.udp_port()
    }
    fn accepts_connections(&self) -> bool {
        self.inner.accepts_connections()
    }
    // The endpoint itself: the shim reaches the `Endpoint` through it.
    fn engine(&self) -> ferroce_transport::EngineRef<'_> {
        self.inner.engine()
    }
    fn engine_mut(&mut self) -> ferroce_transport::EngineMut<'_> {
        self.inner.engine_mut()
    }
}

/// At exit: how many DREQs are unanswered, after asking the CM to retransmit them every
/// `every` and, with `repeat_dreps`, to send its DREPs once more (state.rs,
/// `last_context_closed`); 0 if the CM does not answer.
pub fn hasten_disconnects(every: std::time::Duration, repeat_dreps: bool) -> usize {
    let ns = every.as_nanos() as u64;
    on_engine(move |cm, now| {
        if repeat_dreps {
            cm.repeat_dreps();
        }
        cm.hasten_disconnects(now, ns)
    })
    .unwrap_or(0)
}

/// Run `f` on the CM in the engine's thread and wait for its result (errno on failure).
fn on_engine<R: Send + 'static>(
    f: impl FnOnce(&mut Cm, u64) -> R + Send + 'static,
) -> Result<R, c_int> {
    let e = engine(Mode::Native).map_err(|m| {
        crate::state::dbg_log!("CM: {m}");
        libc::ENODEV
    })?;
    let (tx, rx) = crossbeam_channel::bounded(1);
    let s = shared().clone();
    e.h.command(Command::Exec(TransportFn(Box::new(move |_t| {
        let r = {
            let mut g = lock(&s);
            let now = g.now;
            f(&mut g.cm, now)
        };
        deliver();
        let _ = tx.send(r);
    }))));
    rx.recv_timeout(Duration::from_secs(5))
        .map_err(|_| libc::ETIMEDOUT)
}

fn errno_of(e: ferroce_transport::cm::CmError) -> c_int {
    use ferroce_transport::cm::CmError::*;
    match e {
        UnknownId => libc::ENOENT,
        InvalidState => libc::EINVAL,
        PrivateDataTooLong => libc::EINVAL,
        PortInUse => libc::EADDRINUSE,
    }
}

fn qp_info(q: *const FfiQp) -> QpInfo {
    if q.is_null() {
        return QpInfo::default();
    }
    // SAFETY: non-null, pointing at the caller's FfiQp (the interface's contract).
    let q = unsafe { *q };
    QpInfo {
        qpn: q.qpn & 0x00ff_ffff,
        start_psn: q.start_psn & 0x00ff_ffff,
        responder_resources: q.responder_resources,
        initiator_depth: q.initiator_depth,
        retry_count: q.retry_count.min(7),
        rnr_retry_count: q.rnr_retry_count.min(7),
    }
}

fn private(pd: *const u8, len: u8) -> Vec<u8> {
    if pd.is_null() || len == 0 {
        return Vec::new();
    }
    // SAFETY: the caller passes `len` readable bytes at `pd` (the interface's contract).
    unsafe { std::slice::from_raw_parts(pd, len as usize) }.to_vec()
}

fn status(r: Result<Result<(), ferroce_transport::cm::CmError>, c_int>) -> c_int {
    match r {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => errno_of(e),
        Err(e) => e,
    }
}

#[no_mangle]
pub extern "C" fn ferroce_cm_abi() -> u32 {
    ABI
}

/// Start the engine of `mode` (0 native, 1 RoCEv2) if needed, make its CM the process's,
/// register the event callback, report the engine's own address (host order). 0 or an
/// errno (EINVAL: an unknown mode, or another than the process started with).
///
/// # Safety
/// `local_ip` is null or writable; `cb` stays callable for the life of the process.
#[no_mangle]
pub unsafe extern "C" fn ferroce_cm_start(
    mode: u32,
    cb: Option<FfiCallback>,
    ctx: *mut c_void,
    local_ip: *mut u32,
) -> c_int {
    let mode = match mode {
        0 => Mode::Native,
        1 => Mode::Roce,
        _ => return libc::EINVAL,
    };
    if *CM_MODE.get_or_init(|| mode) != mode {
        return libc::EINVAL;
    }
    let e = match engine(mode) {
        Ok(e) => e,
        Err(m) => {
            eprintln!("{m}");
            return libc::ENODEV;
        }
    };
    lock(shared()).cb = cb.map(|f| (f, ctx as usize));
    if !local_ip.is_null() {
        // SAFETY: non-null and writable (contract above).
        unsafe { *local_ip = u32::from(e.ip) };
    }
    0
}

#[no_mangle]
pub extern "C" fn ferroce_cm_listen(port_space: u16, port: u16) -> c_int {
    if roce() {
        return crate::cm_roce::listen(port_space, port);
    }
    status(on_engine(move |cm, _| cm.listen(port_space, port)))
}

#[no_mangle]
pub extern "C" fn ferroce_cm_unlisten(port_space: u16, port: u16) -> c_int {
    if roce() {
        return crate::cm_roce::unlisten(port_space, port);
    }
    status(on_engine(move |cm, _| {
        cm.unlisten(port_space, port);
        Ok(())
    }))
}

/// # Safety
/// `qp` null or readable; `pd` holds `len` bytes; `id` writable.
#[no_mangle]
pub unsafe extern "C" fn ferroce_cm_connect(
    peer: u32,
    port_space: u16,
    port: u16,
    src_port: u16,
    qp: *const FfiQp,
    pd: *const u8,
    len: u8,
    id: *mut u32,
) -> c_int {
    if roce() {
        let q = if qp.is_null() {
            FfiQp::default()
        } else {
            // SAFETY: non-null, pointing at the caller's FfiQp (contract above).
            unsafe { *qp }
        };
        return match crate::cm_roce::connect(peer, port_space, port, src_port, q, private(pd, len))
        {
            Ok(v) => {
                if !id.is_null() {
                    // SAFETY: non-null and writable (contract above).
                    unsafe { *id = v };
                }
                0
            }
            Err(e) => e,
        };
    }
    let (q, pd) = (qp_info(qp), private(pd, len));
    let r = on_engine(move |cm, now| {
        let peer = Ipv4Addr::from(peer);
        if port_space == PS_UDP {
            return cm.sidr_request(now, peer, port_space, port, src_port, &pd);
        }
        cm.connect(now, peer, port_space, port, src_port, q, &pd)
    });
    match r {
        Ok(Ok(CmId(v))) => {
            if !id.is_null() {
                // SAFETY: non-null and writable (contract above).
                unsafe { *id = v };
            }
            0
        }
        Ok(Err(e)) => errno_of(e),
        Err(e) => e,
    }
}

/// # Safety
/// As `ferroce_cm_connect`.
#[no_mangle]
pub unsafe extern "C" fn ferroce_cm_accept(
    id: u32,
    qp: *const FfiQp,
    pd: *const u8,
    len: u8,
) -> c_int {
    if roce() {
        let q = if qp.is_null() {
            FfiQp::default()
        } else {
            // SAFETY: non-null, pointing at the caller's FfiQp (contract above).
            unsafe { *qp }
        };
        return crate::cm_roce::accept(id, q, private(pd, len));
    }
    let (q, pd) = (qp_info(qp), private(pd, len));
    status(on_engine(move |cm, now| cm.accept(now, CmId(id), q, &pd)))
}

/// # Safety
/// `pd` holds `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ferroce_cm_reject(id: u32, reason: u16, pd: *const u8, len: u8) -> c_int {
    let pd = private(pd, len);
    if roce() {
        return crate::cm_roce::reject(id, reason, pd);
    }
    status(on_engine(move |cm, now| {
        cm.reject(now, CmId(id), reason, &pd)
    }))
}

/// # Safety
/// `pd` holds `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ferroce_cm_establish(id: u32, pd: *const u8, len: u8) -> c_int {
    let pd = private(pd, len);
    if roce() {
        return crate::cm_roce::establish(id, pd);
    }
    status(on_engine(move |cm, _| cm.establish(CmId(id), &pd)))
}

/// # Safety
/// `pd` holds `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ferroce_cm_disconnect(id: u32, pd: *const u8, len: u8) -> c_int {
    let pd = private(pd, len);
    if roce() {
        return crate::cm_roce::disconnect(id, pd);
    }
    status(on_engine(move |cm, now| cm.disconnect(now, CmId(id), &pd)))
}

/// Answer a UD id's CONNECT_REQUEST (its SIDR_REQ): `status` 0 with the UD QP's `qpn` and
/// `qkey` (rdma_accept), or a refusal (rdma_reject: 2).
///
/// # Safety
/// `pd` holds `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn ferroce_cm_sidr_reply(
    id: u32,
    status: u8,
    qpn: u32,
    qkey: u32,
    pd: *const u8,
    len: u8,
) -> c_int {
    let pd = private(pd, len);
    if roce() {
        return crate::cm_roce::sidr_reply(id, status, qpn, qkey, pd);
    }
    self::status(on_engine(move |cm, now| {
        cm.sidr_reply(now, CmId(id), status, qpn, qkey, &pd)
    }))
}

#[no_mangle]
pub extern "C" fn ferroce_cm_release(id: u32) -> c_int {
    if roce() {
        return crate::cm_roce::release(id);
    }
    status(on_engine(move |cm, now| {
        cm.release(now, CmId(id));
        Ok(())
    }))
}
