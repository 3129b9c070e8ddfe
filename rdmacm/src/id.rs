//! Event channels, cm ids and their life cycle for RDMA_PS_TCP (and RDMA_PS_IB's RC use):
//! bind, resolve, listen, connect, accept, reject, disconnect, and the events. RDMA_PS_UDP
//! ids connect by service-ID resolution (SIDR): accept / reject answer it, no disconnect.
//!
//! Addresses: a program names ordinary IPv4 addresses; `addr::map` turns each into the
//! address of the engine that serves it (README "librdmacm"). Address and route resolution
//! are local (the engine finds the peer's MAC itself), so ADDR_RESOLVED and ROUTE_RESOLVED
//! are queued at once; a peer that does not answer shows up as UNREACHABLE after the CM's
//! retries.

use crate::addr;
use crate::events::{rdma_ack_cm_event, rdma_get_cm_event};
use crate::qp;
use crate::shim::{self, FfiEvent, FfiQp};
use crate::state::*;
use crate::sys::*;
use crate::ud::{is_ud, sidr_answer, SIDR_REJECT, SIDR_SUCCESS};
use std::ffi::{c_int, c_void};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::Mutex;

/// Start the CM (the shim's engine) and open the native device once: the engine's own
/// address, or the errno to fail with.
pub fn ensure_started() -> Result<Ipv4Addr, c_int> {
    static START: Mutex<()> = Mutex::new(());
    let _one = lock(&START);
    if let Some(ip) = lock(global()).local_ip {
        return Ok(ip);
    }
    let ops = shim::ops().ok_or_else(|| {
        eprintln!(
            "ferroce rdmacm: the loaded libibverbs.so.1 is not ferroce's verbs shim (set \
             LD_LIBRARY_PATH to the directory holding both)"
        );
        libc::ENODEV
    })?;
    let mut ip = 0u32;
    let (dev, mode) = cm_device();
    // SAFETY: on_event matches the callback type and lives for the whole process.
    let r = unsafe { (ops.start)(mode, Some(on_event), std::ptr::null_mut(), &mut ip) };
    if r != 0 {
        return Err(r);
    }
    let (ctx, pd) = qp::open_cm_device().ok_or_else(|| {
        eprintln!("ferroce rdmacm: cannot open device {dev}");
        libc::ENODEV
    })?;
    let mut g = lock(global());
    g.ctx = ctx as usize;
    g.pd = pd as usize;
    g.local_ip = Some(Ipv4Addr::from(ip));
    drop(g);
    START_PID.store(std::process::id(), std::sync::atomic::Ordering::SeqCst);
    // SAFETY: registers a plain extern "C" function; at most once (START is held and
    // local_ip is set from here on).
    unsafe { libc::atexit(close_at_exit) };
    dbg_log!("CM started on {dev}, engine {}", Ipv4Addr::from(ip));
    Ok(Ipv4Addr::from(ip))
}

/// At exit, first disconnect the ids still connected (a DREQ each), as Linux's CM does when
/// the process's rdma_cm file closes: perftest -R, for one, never destroys its first
/// connection's id, and the peer's DREQ to a process that is gone gets no DREP. Then close
/// the device the library opened, as a verbs program closes its own: with the last context
/// closed the shim gives its engine a moment to send the last ACKs, DREQs and DREPs before
/// the process ends.
extern "C" fn close_at_exit() {
    EXITING.store(true, std::sync::atomic::Ordering::SeqCst);
    // Not in a forked child: its engine (a thread of the parent) is not there to ask.
    if START_PID.load(std::sync::atomic::Ordering::SeqCst) == std::process::id() {
        if let Some(ops) = shim::ops() {
            for comm in connected_comms() {
                // SAFETY: no private data.
                let r = unsafe { (ops.disconnect)(comm, std::ptr::null(), 0) };
                dbg_log!("exit: DREQ for comm {comm:#x}: {r}");
            }
        }
    }
    let ctx = std::mem::take(&mut lock(global()).ctx) as *mut ibv_context;
    if !ctx.is_null() {
        // SAFETY: the context open_cm_device opened, closed once (taken out above).
        unsafe { crate::verbs::ibv_close_device(ctx) };
    }
}

/// The process that started the CM (and registered [`close_at_exit`]).
static START_PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Comm ids of the live ids connected or connecting (those rdma_destroy_id would
/// disconnect; a passive id whose ESTABLISHED the application never read is still
/// Connecting here, perftest -R's first one for instance).
fn connected_comms() -> Vec<u32> {
    let g = lock(global());
    g.ids
        .keys()
        .filter_map(|&a| {
            // SAFETY: a live id of ours (in `ids`, so not destroyed: destruction takes the
            // global lock to remove it): the rdma_cm_id is the first field of its IdPriv.
            let p = unsafe { &*(a as *const IdPriv) };
            let st = lock(&p.st);
            let live = matches!(st.phase, Phase::Connected | Phase::Connecting);
            (live && st.comm != 0).then_some(st.comm)
        })
        .collect()
}

fn ctx() -> *mut ibv_context {
    lock(global()).ctx as *mut ibv_context
}

#[export_name = "frdmacm_v_rdma_create_event_channel"]
pub extern "C" fn rdma_create_event_channel() -> *mut rdma_event_channel {
    match ChanPriv::new() {
        Some(c) => {
            let p = Box::into_raw(c);
            lock(global()).chans.insert(p as usize, 0);
            p as *mut rdma_event_channel
        }
        None => {
            fail(libc::EMFILE);
            std::ptr::null_mut()
        }
    }
}

/// # Safety
/// `ch` is a channel this library returned.
#[export_name = "frdmacm_v_rdma_destroy_event_channel"]
pub unsafe extern "C" fn rdma_destroy_event_channel(ch: *mut rdma_event_channel) {
    let mut g = lock(global());
    match g.chans.get(&(ch as usize)) {
        Some(0) => {
            g.chans.remove(&(ch as usize));
        }
        // Ids still use it (rdma-core would fail; the function returns nothing): keep it.
        _ => return,
    }
    drop(g);
    // SAFETY: ours and unused: free it and close its fd.
    let c = unsafe { Box::from_raw(ch as *mut ChanPriv) };
    // SAFETY: our own eventfd.
    unsafe { libc::close(c.ch.fd) };
}

fn new_id(
    chan: *mut rdma_event_channel,
    context: *mut c_void,
    ps: rdma_port_space,
) -> Option<*mut IdPriv> {
    let (chan, own) = if chan.is_null() {
        (Box::into_raw(ChanPriv::new()?), true)
    } else {
        (chan as *mut ChanPriv, false)
    };
    let any = SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0);
    let id = rdma_cm_id {
        channel: if own {
            std::ptr::null_mut()
        } else {
            chan as *mut rdma_event_channel
        },
        context,
        ps,
        port_num: 1,
        qp_type: if ps == RDMA_PS_UDP {
            IBV_QPT_UD
        } else {
            IBV_QPT_RC
        },
        ..Default::default()
    };
    Some(Box::into_raw(Box::new(IdPriv {
        id: std::cell::UnsafeCell::new(id),
        chan,
        own_chan: own,
        st: Mutex::new(IdSt {
            phase: Phase::Idle,
            comm: 0,
            local: any,
            remote: any,
            listen: None,
            peer_qp: FfiQp::default(),
            my_psn: 0,
            path_mtu: 0,
            ep_qp: None,
            own_cqs: false,
        }),
        outstanding: Default::default(),
    })))
}

/// A child id for a CONNECT_REQUEST on `l` (engine thread, global lock held: `ctx` is the
/// device context from it).
pub fn new_child(l: &IdPriv, e: &FfiEvent, ctx: usize) -> Option<*mut IdPriv> {
    let sync = l.own_chan;
    let chan = if sync {
        std::ptr::null_mut()
    } else {
        l.chan as *mut rdma_event_channel
    };
    let p = new_id(chan, l.cm().context, l.cm().ps)?;
    // SAFETY: just created, not shared yet.
    let c = unsafe { &mut *p };
    c.cm_mut().verbs = ctx as *mut ibv_context;
    let local = SocketAddrV4::new(Ipv4Addr::from(e.local_addr), e.port);
    let remote = SocketAddrV4::new(Ipv4Addr::from(e.peer), e.peer_port);
    publish_addrs(c.cm_mut(), local, remote);
    let st = c.st.get_mut().unwrap_or_else(|p| p.into_inner());
    st.phase = Phase::Request;
    st.comm = e.id;
    st.local = local;
    st.remote = remote;
    st.peer_qp = e.qp;
    st.path_mtu = e.mtu;
    if let Some((pd, a)) = lock(&l.st).ep_qp {
        st.ep_qp = Some((pd, a));
    }
    Some(p)
}

/// # Safety
/// `id` writable; `chan` null or a channel of ours.
#[export_name = "frdmacm_v_rdma_create_id"]
pub unsafe extern "C" fn rdma_create_id(
    chan: *mut rdma_event_channel,
    id: *mut *mut rdma_cm_id,
    context: *mut c_void,
    ps: rdma_port_space,
) -> c_int {
    if id.is_null() {
        return fail(libc::EINVAL);
    }
    // RC (RDMA_PS_TCP, RDMA_PS_IB) and UD with service-ID resolution (RDMA_PS_UDP);
    // RDMA_PS_IPOIB (IPoIB's Q_Key and multicast) is not implemented.
    if ps != RDMA_PS_TCP && ps != RDMA_PS_IB && ps != RDMA_PS_UDP {
        return fail(libc::EPROTONOSUPPORT);
    }
    if !chan.is_null() && !lock(global()).chans.contains_key(&(chan as usize)) {
        return fail(libc::EINVAL);
    }
    let Some(p) = new_id(chan, context, ps) else {
        return fail(libc::EMFILE);
    };
    let mut g = lock(global());
    g.ids.insert(p as usize, ());
    if !chan.is_null() {
        *g.chans.entry(chan as usize).or_default() += 1;
    } else {
        // SAFETY: just created, not shared yet.
        g.private_chans.insert(unsafe { &*p }.chan as usize);
    }
    // SAFETY: writable (contract).
    unsafe { *id = p as *mut rdma_cm_id };
    0
}

/// # Safety
/// `id` is an id of ours; no event of it is held unacknowledged.
#[export_name = "frdmacm_v_rdma_destroy_id"]
pub unsafe extern "C" fn rdma_destroy_id(id: *mut rdma_cm_id) -> c_int {
    let Some(p) = id_of(id) else {
        return fail(libc::EINVAL);
    };
    let (comm, phase, listen) = {
        let st = lock(&p.st);
        (st.comm, st.phase, st.listen)
    };
    if !p.cm().event.is_null() {
        // SAFETY: the request event rdma_get_request kept on the id.
        unsafe { rdma_ack_cm_event(p.cm().event) };
    }
    if let Some(ops) = shim::ops() {
        if let Some((ps, port)) = listen {
            // SAFETY: plain call.
            unsafe { (ops.unlisten)(ps, port) };
        }
        if comm != 0 {
            // A connected id's destruction tells the peer, as the kernel's CM does.
            if phase == Phase::Connected || phase == Phase::Connecting {
                // SAFETY: no private data.
                unsafe { (ops.disconnect)(comm, std::ptr::null(), 0) };
            }
            // SAFETY: plain call.
            unsafe { (ops.release)(comm) };
        }
    }
    {
        let mut g = lock(global());
        g.ids.remove(&(id as usize));
        g.by_comm.retain(|_, v| *v != id as usize);
        g.listeners.retain(|_, v| *v != id as usize);
        if p.own_chan {
            g.private_chans.remove(&(p.chan as usize));
        } else if let Some(n) = g.chans.get_mut(&(p.chan as usize)) {
            *n = n.saturating_sub(1);
        }
    }
    // Events handed out are acknowledged first (rdma-core's contract: destroy blocks until
    // then); those still queued are dropped with the id, and their counts taken from the
    // channel's eventfd so it does not wake a reader for nothing.
    while p.outstanding.load(std::sync::atomic::Ordering::SeqCst) != 0 {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let purged = {
        let mut q = lock(&p.chan().q);
        let before = q.len();
        q.retain(|e| e.ev.id != id);
        before - q.len()
    };
    for _ in 0..purged {
        let mut pfd = libc::pollfd {
            fd: p.chan().ch.fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let mut n = 0u64;
        // SAFETY: poll and an 8-byte read on our own eventfd, the read only when readable
        // (another reader may have taken the count meanwhile: then nothing is read).
        unsafe {
            if libc::poll(&mut pfd, 1, 0) == 1 {
                libc::read(pfd.fd, &mut n as *mut u64 as *mut c_void, 8);
            }
        }
    }
    qp::destroy_own_cqs(p);
    // SAFETY: ours, no longer reachable from any map.
    let b = unsafe { Box::from_raw(id as *mut IdPriv) };
    if b.own_chan {
        // SAFETY: the id's private channel, used by nobody else.
        let c = unsafe { Box::from_raw(b.chan) };
        // SAFETY: our own eventfd.
        unsafe { libc::close(c.ch.fd) };
    }
    0
}

/// `sockaddr` as IPv4 (null: None); another family is EAFNOSUPPORT.
pub(crate) fn sa_v4(sa: *const libc::sockaddr) -> Result<Option<SocketAddrV4>, c_int> {
    if sa.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's sockaddr; the family field is first in every sockaddr.
    let fam = unsafe { (*sa).sa_family } as c_int;
    if fam != libc::AF_INET {
        return Err(libc::EAFNOSUPPORT);
    }
    // SAFETY: an AF_INET sockaddr is a sockaddr_in.
    let s = unsafe { std::ptr::read_unaligned(sa as *const libc::sockaddr_in) };
    Ok(Some(SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)),
        u16::from_be(s.sin_port),
    )))
}

fn alloc_port() -> u16 {
    let mut g = lock(global());
    let p = g.next_port;
    g.next_port = if p >= 60999 { 32768 } else { p + 1 };
    p
}

/// Bind `p` to `a` (mapped; 0.0.0.0, a loopback address or the engine's own address), port
/// 0 = ephemeral.
fn bind(p: &IdPriv, a: SocketAddrV4) -> Result<(), c_int> {
    let me = ensure_started()?;
    let mut ip = addr::map(*a.ip());
    if ip.is_loopback() {
        // Linux's rdma_cm binds a loopback address to the first RDMA device; here, the
        // engine (libfabric's verbs provider binds 127.0.0.1 when given no address).
        ip = me;
    }
    if !ip.is_unspecified() && ip != me {
        return Err(libc::EADDRNOTAVAIL);
    }
    let port = if a.port() == 0 {
        alloc_port()
    } else {
        a.port()
    };
    let local = SocketAddrV4::new(if ip.is_unspecified() { me } else { ip }, port);
    let mut st = lock(&p.st);
    st.local = local;
    if st.phase == Phase::Idle {
        st.phase = Phase::Bound;
    }
    let remote = st.remote;
    drop(st);
    p.cm_mut().verbs = ctx();
    publish_addrs(p.cm_mut(), local, remote);
    Ok(())
}

/// # Safety
/// `id` ours, `a` a sockaddr.
#[export_name = "frdmacm_v_rdma_bind_addr"]
pub unsafe extern "C" fn rdma_bind_addr(id: *mut rdma_cm_id, a: *mut libc::sockaddr) -> c_int {
    let Some(p) = id_of(id) else {
        return fail(libc::EINVAL);
    };
    match sa_v4(a) {
        Ok(Some(a)) => match bind(p, a) {
            Ok(()) => 0,
            Err(e) => fail(e),
        },
        Ok(None) => fail(libc::EINVAL),
        Err(e) => fail(e),
    }
}

/// Wait for the next event of a synchronous id's own channel.
fn wait(p: &IdPriv) -> Option<Box<EvPriv>> {
    let mut out: *mut rdma_cm_event = std::ptr::null_mut();
    // SAFETY: the id's own channel, a valid out pointer.
    if unsafe { rdma_get_cm_event(p.chan as *mut rdma_event_channel, &mut out) } != 0 {
        return None;
    }
    // SAFETY: the event we just took, an EvPriv of ours; consumed here, so it is not
    // outstanding for the application.
    let mut e = unsafe { Box::from_raw(out as *mut EvPriv) };
    uncount_event(&mut e);
    Some(e)
}

/// Synchronous ids: wait for the event completing an operation, 0 if it is `ok`.
fn complete(p: &IdPriv, ok: rdma_cm_event_type) -> c_int {
    if !p.own_chan {
        return 0;
    }
    match wait(p) {
        Some(e) if e.ev.event == ok && e.ev.status == 0 => 0,
        Some(e) => {
            dbg_log!("sync id: event {} status {}", e.ev.event, e.ev.status);
            let s = e.ev.status;
            fail(match e.ev.event {
                RDMA_CM_EVENT_REJECTED => libc::ECONNREFUSED,
                RDMA_CM_EVENT_UNREACHABLE => libc::ETIMEDOUT,
                _ if s < 0 => -s,
                _ => libc::EIO,
            })
        }
        None => -1,
    }
}

/// # Safety
/// `id` ours; `src`, `dst` sockaddrs (src may be null).
#[export_name = "frdmacm_v_rdma_resolve_addr"]
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut rdma_cm_id,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    let Some(p) = id_of(id) else {
        return fail(libc::EINVAL);
    };
    let (src, dst) = match (sa_v4(src), sa_v4(dst)) {
        (Ok(s), Ok(Some(d))) => (s, d),
        (Err(e), _) | (_, Err(e)) => return fail(e),
        _ => return fail(libc::EINVAL),
    };
    let phase = lock(&p.st).phase;
    let status = match (phase, src) {
        (Phase::Idle, s) => bind(p, s.unwrap_or(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)))
            .err()
            .unwrap_or(0),
        (Phase::Bound, _) => 0,
        _ => return fail(libc::EINVAL),
    };
    let peer = addr::map(*dst.ip());
    let status = if status != 0 {
        -status
    } else if peer.is_unspecified() || peer.is_broadcast() || peer.is_multicast() {
        -libc::EADDRNOTAVAIL
    } else {
        0
    };
    let ev = if status == 0 {
        let mut st = lock(&p.st);
        st.remote = SocketAddrV4::new(peer, dst.port());
        st.phase = Phase::AddrResolved;
        let (l, r) = (st.local, st.remote);
        drop(st);
        // SAFETY: our id (see `bind`).
        unsafe { publish_addrs(&mut *id, l, r) };
        event(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0)
    } else {
        event(id, RDMA_CM_EVENT_ADDR_ERROR, status)
    };
    p.chan().push(ev);
    complete(p, RDMA_CM_EVENT_ADDR_RESOLVED)
}

/// # Safety
/// `id` ours.
#[export_name = "frdmacm_v_rdma_resolve_route"]
pub unsafe extern "C" fn rdma_resolve_route(id: *mut rdma_cm_id, _timeout_ms: c_int) -> c_int {
    let Some(p) = id_of(id) else {
        return fail(libc::EINVAL);
    };
    {
        let mut st = lock(&p.st);
        if st.phase != Phase::AddrResolved {
            return fail(libc::EINVAL);
        }
        st.phase = Phase::RouteResolved;
    }
    p.chan().push(event(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0));
    complete(p, RDMA_CM_EVENT_ROUTE_RESOLVED)
}

/// # Safety
/// `id` ours.
#[export_name = "frdmacm_v_rdma_listen"]
pub unsafe extern "C" fn rdma_listen(id: *mut rdma_cm_id, _backlog: c_int) -> c_int {
    let Some(p) = id_of(id) else {
        return fail(libc::EINVAL);
    };
    let phase = lock(&p.st).phase;
    if phase == Phase::Idle {
        if let Err(e) = bind(p, SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)) {
            return fail(e);
        }
    } else if phase != Phase::Bound {
        return fail(libc::EINVAL);
    }
    let Some(ops) = shim::ops() else {
        return fail(libc::ENODEV);
    };
    let (ps, port) = (p.cm().ps as u16, lock(&p.st).local.port());
    // Registered before the CM may deliver a request for it.
    lock(global()).listeners.insert((ps, port), id as usize);
    // SAFETY: plain call.
    let r = unsafe { (ops.listen)(ps, port) };
    if r != 0 {
        lock(global()).listeners.remove(&(ps, port));
        return fail(r);
    }
    let mut st = lock(&p.st);
    st.phase = Phase::Listening;
    st.listen = Some((ps, port));
    0
}

fn conn_param<'a>(c: *const rdma_conn_param) -> Option<&'a rdma_conn_param> {
    // SAFETY: null or the caller's parameters.
    unsafe { c.as_ref() }
}

fn private_of(c: Option<&rdma_conn_param>) -> (*const u8, u8) {
    match c {
        Some(c) if !c.private_data.is_null() => (c.private_data as *const u8, c.private_data_len),
        _ => (std::ptr::null(), 0),
    }
}

/// The QPN an id announces: its QP's, or (no QP on the id) the application's `param_qpn`.
pub(crate) fn id_qpn(p: &IdPriv, param_qpn: u32) -> u32 {
    if p.cm().qp.is_null() {
        param_qpn
    } else {
        // SAFETY: the id's live QP.
        unsafe { (*p.cm().qp).qp_num }
    }
}

/// Our queue pair as announced: the id's QP, or (no QP on the id) the parameters' qp_num.
fn my_qp(p: &IdPriv, c: Option<&rdma_conn_param>) -> FfiQp {
    let qpn = id_qpn(p, c.map_or(0, |c| c.qp_num));
    let psn = lock(&p.st).my_psn;
    FfiQp {
        qpn,
        start_psn: psn,
        responder_resources: c.map_or(1, |c| c.responder_resources),
        initiator_depth: c.map_or(1, |c| c.initiator_depth),
        retry_count: c.map_or(7, |c| c.retry_count.min(7)),
        rnr_retry_count: c.map_or(7, |c| c.rnr_retry_count.min(7)),
    }
}

/// # Safety
/// `id` ours; `c` null or parameters.
#[export_name = "frdmacm_v_rdma_connect"]
pub unsafe extern "C" fn rdma_connect(id: *mut rdma_cm_id, c: *mut rdma_conn_param) -> c_int {
    let Some(p) = id_of(id) else {
        return fail(libc::EINVAL);
    };
    let c = conn_param(c);
    let (pd, len) = private_of(c);
    // What rdma_cm leaves of a REQ's (SIDR_REQ's) private data after its own header.
    let max = if is_ud(p) { 180 } else { 56 };
    if len as usize > max {
        return fail(libc::EINVAL);
    }
    let (phase, local, remote) = {
        let st = lock(&p.st);
        (st.phase, st.local, st.remote)
    };
    if phase != Phase::RouteResolved {
        return fail(libc::EINVAL);
    }
    let Some(ops) = shim::ops() else {
        return fail(libc::ENODEV);
    };
    let q = my_qp(p, c);
    let mut comm = 0u32;
    // SAFETY: `pd` holds `len` bytes (the caller's private data), the outputs are ours.
    let r = unsafe {
        (ops.connect)(
            u32::from(*remote.ip()),
            p.cm().ps as u16,
            remote.port(),
            local.port(),
            &q,
            pd,
            len,
            &mut comm,
        )
    };
    if r != 0 {
        return fail(r);
    }
    {
        let mut st = lock(&p.st);
        st.comm = comm;
        st.phase = Phase::Connecting;
    }
    register(p, comm);
    complete(p, RDMA_CM_EVENT_ESTABLISHED)
}

/// # Safety
/// `id` ours (a connect request's); `c` null or parameters.
#[export_name = "frdmacm_v_rdma_accept"]
pub unsafe extern "C" fn rdma_accept(id: *mut rdma_cm_id, c: *mut rdma_conn_param) -> c_int {
    let Some(p) = id_of(id) else {
        return fail(libc::EINVAL);
    };
    let c = conn_param(c);
    let (pd, len) = private_of(c);
    let (phase, comm) = {
        let st = lock(&p.st);
        (st.phase, st.comm)
    };
    if phase != Phase::Request {
        return fail(libc::EINVAL);
    }
    if is_ud(p) {
        return sidr_answer(p, SIDR_SUCCESS, c.map_or(0, |c| c.qp_num), pd, len);
    }
    if !p.cm().qp.is_null() {
        if let Err(e) = qp::connect_qp(p) {
            return fail(e);
        }
    }
    let Some(ops) = shim::ops() else {
        return fail(libc::ENODEV);
    };
    let q = my_qp(p, c);
    // SAFETY: `pd` holds `len` bytes.
    let r = unsafe { (ops.accept)(comm, &q, pd, len) };
    if r != 0 {
        return fail(r);
    }
    lock(&p.st).phase = Phase::Connecting;
    if !p.cm().event.is_null() {
        let e = p.cm().event;
        let idm = id;
        // SAFETY: our id; the request event rdma_get_request left on it.
        unsafe {
            (*idm).event = std::ptr::null_mut();
            rdma_ack_cm_event(e);
        }
    }
    complete(p, RDMA_CM_EVENT_ESTABLISHED)
}

/// # Safety
/// `id` ours; `pd` holds `len` bytes.
#[export_name = "frdmacm_v_rdma_reject"]
pub unsafe extern "C" fn rdma_reject(id: *mut rdma_cm_id, pd: *const c_void, len: u8) -> c_int {
    let Some(p) = id_of(id) else {
        return fail(libc::EINVAL);
    };
    if is_ud(p) {
        return sidr_answer(p, SIDR_REJECT, 0, pd as *const u8, len);
    }
    let comm = lock(&p.st).comm;
    let Some(ops) = shim::ops() else {
        return fail(libc::ENODEV);
    };
    // SAFETY: `pd` holds `len` bytes (contract).
    let r = unsafe { (ops.reject)(comm, 28, pd as *const u8, len) };
    if r != 0 {
        return fail(r);
    }
    lock(&p.st).phase = Phase::Disconnected;
    0
}

/// # Safety
/// `id` ours.
#[export_name = "frdmacm_v_rdma_disconnect"]
pub unsafe extern "C" fn rdma_disconnect(id: *mut rdma_cm_id) -> c_int {
    let Some(p) = id_of(id) else {
        return fail(libc::EINVAL);
    };
    let (phase, comm) = {
        let st = lock(&p.st);
        (st.phase, st.comm)
    };
    if phase == Phase::Disconnected {
        // The peer's DREQ (or a reject) ended it already: what the caller asked for holds.
        qp::to_error(p);
        return 0;
    }
    if phase != Phase::Connected && phase != Phase::Connecting {
        return fail(libc::EINVAL);
    }
    qp::to_error(p);
    let Some(ops) = shim::ops() else {
        return fail(libc::ENODEV);
    };
    // SAFETY: no private data (the verbs API has none for a disconnect).
    let r = unsafe { (ops.disconnect)(comm, std::ptr::null(), 0) };
    lock(&p.st).phase = Phase::Disconnected;
    // EINVAL: the exchange is over already (the peer's DREQ, not read yet as an event).
    if r != 0 && r != libc::EINVAL {
        return fail(r);
    }
    0
}

/// # Safety
/// `id` ours.
#[export_name = "frdmacm_v_rdma_establish"]
pub unsafe extern "C" fn rdma_establish(id: *mut rdma_cm_id) -> c_int {
    let Some(p) = id_of(id) else {
        return fail(libc::EINVAL);
    };
    let comm = lock(&p.st).comm;
    let Some(ops) = shim::ops() else {
        return fail(libc::ENODEV);
    };
    // SAFETY: no private data.
    let r = unsafe { (ops.establish)(comm, std::ptr::null(), 0) };
    if r != 0 {
        return fail(r);
    }
    lock(&p.st).phase = Phase::Connected;
    0
}

/// Only IBV_EVENT_COMM_EST means something to the CM: data arrived before the RTU.
///
/// # Safety
/// `id` ours.
#[export_name = "frdmacm_v_rdma_notify"]
pub unsafe extern "C" fn rdma_notify(id: *mut rdma_cm_id, ev: ibv_event_type) -> c_int {
    let Some(p) = id_of(id) else {
        return fail(libc::EINVAL);
    };
    if ev != IBV_EVENT_COMM_EST {
        return fail(libc::EINVAL);
    }
    let (phase, comm) = {
        let st = lock(&p.st);
        (st.phase, st.comm)
    };
    if phase == Phase::Connected {
        return 0;
    }
    let Some(ops) = shim::ops() else {
        return fail(libc::ENODEV);
    };
    // SAFETY: no private data.
    let r = unsafe { (ops.establish)(comm, std::ptr::null(), 0) };
    if r != 0 {
        return fail(r);
    }
    0
}

/// # Safety
/// `id` ours.
#[export_name = "frdmacm_v_rdma_get_src_port"]
pub unsafe extern "C" fn rdma_get_src_port(id: *mut rdma_cm_id) -> u16 {
    id_of(id).map_or(0, |p| lock(&p.st).local.port().to_be())
}

/// # Safety
/// `id` ours.
#[export_name = "frdmacm_v_rdma_get_dst_port"]
pub unsafe extern "C" fn rdma_get_dst_port(id: *mut rdma_cm_id) -> u16 {
    id_of(id).map_or(0, |p| lock(&p.st).remote.port().to_be())
}
