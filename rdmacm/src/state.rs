//! The library's objects and process-wide state: event channels (an eventfd each), cm ids
//! (the `rdma_cm_id` the application sees, first in a private struct, as rdma-core does),
//! events, and the map from the CM's comm ids to cm ids that the shim's callback uses.
//!
//! Locks: `global()` before a channel's queue before an id's `st`; none is held across a
//! call into the shim (its calls wait for the engine thread, which may be in our callback).

use crate::shim::{self, FfiEvent, FfiQp};
use crate::sys::*;
use std::collections::{HashMap, VecDeque};
use std::ffi::{c_int, c_void};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::Ordering;
use std::sync::{Mutex, MutexGuard, OnceLock};

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Set errno, return -1 (librdmacm's convention).
/// The device whose CM this process uses, and its mode for `ferroce_cm_start`:
/// `FERROCE_CM_DEVICE` = `ferroce0` (native, the default) or `ferroce0_rocev2` (the IBTA CM
/// on QP1, which Linux rdma_cm peers such as rxe speak). Another name is kept, so opening it
/// fails with a message naming it.
pub fn cm_device() -> (&'static str, u32) {
    static DEV: OnceLock<(&'static str, u32)> = OnceLock::new();
    *DEV.get_or_init(|| match std::env::var("FERROCE_CM_DEVICE") {
        Err(_) => ("ferroce0", 0),
        Ok(v) if v == "ferroce0" => ("ferroce0", 0),
        Ok(v) if v == "ferroce0_rocev2" => ("ferroce0_rocev2", 1),
        Ok(v) => (Box::leak(v.into_boxed_str()), 0),
    })
}

pub fn fail(e: c_int) -> c_int {
    // SAFETY: errno is this thread's own.
    unsafe { *libc::__errno_location() = e };
    -1
}

macro_rules! dbg_log {
    ($($t:tt)*) => {
        if std::env::var_os("FERROCE_CM_DEBUG").is_some_and(|v| v != "0") {
            eprintln!("ferroce rdmacm: {}", format!($($t)*));
        }
    };
}
pub(crate) use dbg_log;

/// An event channel: the application's `rdma_event_channel` first.
#[repr(C)]
pub struct ChanPriv {
    pub ch: rdma_event_channel,
    pub q: Mutex<VecDeque<Box<EvPriv>>>,
}

/// An event: the application's `rdma_cm_event` first, then what it points into.
#[repr(C)]
pub struct EvPriv {
    pub ev: rdma_cm_event,
    pub pd: Vec<u8>,
    /// The CM's kind (shim::CONNECT_RESPONSE etc.; 0 for local events) and the peer's
    /// queue pair, for the processing `rdma_get_cm_event` does.
    pub kind: u32,
    pub qp: FfiQp,
    /// Counted in its id's `outstanding` when handed out ([`count_event`]): its
    /// acknowledgement must uncount it even if the id has left the map by then.
    pub counted: bool,
}

// SAFETY: an event's pointers are to ids of ours and to its own private data; it is moved
// between threads (engine -> application) whole, never shared.
unsafe impl Send for EvPriv {}

impl ChanPriv {
    pub fn new() -> Option<Box<ChanPriv>> {
        // SAFETY: plain syscall; EFD_SEMAPHORE: one count per queued event, so the fd is
        // readable exactly while events wait.
        let fd = unsafe { libc::eventfd(0, libc::EFD_SEMAPHORE | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        Some(Box::new(ChanPriv {
            ch: rdma_event_channel { fd },
            q: Mutex::new(VecDeque::new()),
        }))
    }

    pub fn push(&self, e: Box<EvPriv>) {
        lock(&self.q).push_back(e);
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd.
        let _ = unsafe { libc::write(self.ch.fd, &one as *const u64 as *const c_void, 8) };
    }
}

/// Where an id is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Idle,
    Bound,
    AddrResolved,
    RouteResolved,
    Listening,
    /// A child from a CONNECT_REQUEST, not answered yet.
    Request,
    /// REQ sent (active) / REP sent (passive).
    Connecting,
    Connected,
    Disconnected,
}

pub struct IdSt {
    pub phase: Phase,
    pub comm: u32,
    pub local: SocketAddrV4,
    pub remote: SocketAddrV4,
    pub listen: Option<(u16, u16)>,
    /// The peer's queue pair (from its REQ or REP).
    pub peer_qp: FfiQp,
    /// Ours, as announced.
    pub my_psn: u32,
    /// Path MTU (bytes) from the peer's REQ, 0 if none (the port's is used).
    pub path_mtu: u32,
    /// rdma_create_ep's QP attributes for the requests rdma_get_request returns.
    pub ep_qp: Option<(usize, ibv_qp_init_attr)>,
    /// CQs and channels rdma_create_qp made (destroyed with the id).
    pub own_cqs: bool,
}

/// A cm id: the application's `rdma_cm_id` first.
#[repr(C)]
pub struct IdPriv {
    /// The library fills its verbs fields as rdma-core does (the application reads them).
    pub id: std::cell::UnsafeCell<rdma_cm_id>,
    /// Where its events go: the application's channel, or its own (synchronous ids).
    pub chan: *mut ChanPriv,
    pub own_chan: bool,
    pub st: Mutex<IdSt>,
    /// Events of this id handed to the application and not acknowledged yet (rdma_destroy_id
    /// waits for them, as rdma-core's does).
    pub outstanding: std::sync::atomic::AtomicU32,
}

// SAFETY: the raw pointers are to objects this library owns (channels) or verbs objects
// the application shares across threads anyway; mutable state is behind the mutex.
unsafe impl Send for IdPriv {}
// SAFETY: as above.
unsafe impl Sync for IdPriv {}

impl IdPriv {
    /// The application's view of the id.
    pub fn cm(&self) -> &rdma_cm_id {
        // SAFETY: a shared read; the library writes the id only in calls the application
        // makes on this id (rdma-core's threading contract for one id), never concurrently.
        unsafe { &*self.id.get() }
    }

    /// Mutable access for the library's own writes (see `cm`).
    #[allow(clippy::mut_from_ref)]
    pub fn cm_mut(&self) -> &mut rdma_cm_id {
        // SAFETY: as `cm`: the writes happen in the calls that own the id at that moment.
        unsafe { &mut *self.id.get() }
    }

    pub fn chan(&self) -> &ChanPriv {
        // SAFETY: an id's channel outlives it (rdma_destroy_event_channel on a channel with
        // ids is the application's bug, as in rdma-core, which refuses it with EBUSY; we do too).
        unsafe { &*self.chan }
    }
}

pub struct Inner {
    /// comm id -> IdPriv address.
    pub by_comm: HashMap<u32, usize>,
    /// Events for a comm id not registered yet (a REP faster than rdma_connect's return).
    pub orphans: HashMap<u32, Vec<Box<EvPriv>>>,
    /// (port space, port) -> listening IdPriv address.
    pub listeners: HashMap<(u16, u16), usize>,
    /// Live ids (to refuse a stale pointer), and application channels with how many ids
    /// use them.
    pub ids: HashMap<usize, ()>,
    pub chans: HashMap<usize, usize>,
    /// Synchronous ids' own channels (the application never sees them).
    pub private_chans: std::collections::HashSet<usize>,
    pub next_port: u16,
    /// The engine's own address once started.
    pub local_ip: Option<Ipv4Addr>,
    /// The native device's context and a default PD (opened once, kept, as rdma-core does).
    pub ctx: usize,
    pub pd: usize,
}

/// Set when the process exits (the library's atexit handler runs).
pub static EXITING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether `ch` is a live channel of ours (application's or private).
pub fn chan_live(ch: usize) -> bool {
    let g = lock(global());
    g.chans.contains_key(&ch) || g.private_chans.contains(&ch)
}

pub fn global() -> &'static Mutex<Inner> {
    static G: OnceLock<Mutex<Inner>> = OnceLock::new();
    G.get_or_init(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        Mutex::new(Inner {
            by_comm: HashMap::new(),
            orphans: HashMap::new(),
            listeners: HashMap::new(),
            ids: HashMap::new(),
            chans: HashMap::new(),
            private_chans: Default::default(),
            next_port: 32768 + ((std::process::id() ^ t) % 28000) as u16,
            local_ip: None,
            ctx: 0,
            pd: 0,
        })
    })
}

/// A zeroed event about `id`.
pub fn event(id: *mut rdma_cm_id, ty: rdma_cm_event_type, status: c_int) -> Box<EvPriv> {
    Box::new(EvPriv {
        ev: rdma_cm_event {
            id,
            listen_id: std::ptr::null_mut(),
            event: ty,
            status,
            ..Default::default()
        },
        pd: Vec::new(),
        kind: 0,
        qp: FfiQp::default(),
        counted: false,
    })
}

/// Fill an event's connection parameters and private data (pointer into the box's own Vec).
pub fn set_conn(e: &mut EvPriv, pd: Vec<u8>, qp: &FfiQp) {
    e.pd = pd;
    e.qp = *qp;
    // SAFETY: `conn` is the union member for connected port spaces; plain data.
    let c = unsafe { &mut e.ev.param.conn };
    c.private_data = if e.pd.is_empty() {
        std::ptr::null()
    } else {
        e.pd.as_ptr() as *const c_void
    };
    c.private_data_len = e.pd.len() as u8;
    c.responder_resources = qp.responder_resources;
    c.initiator_depth = qp.initiator_depth;
    c.retry_count = qp.retry_count;
    c.rnr_retry_count = qp.rnr_retry_count;
    c.qp_num = qp.qpn;
}

/// A UD event's `param.ud` (its `ah_attr` is filled from the id when the application
/// reads the event: `events::process`).
pub fn set_ud(e: &mut EvPriv, pd: Vec<u8>, qpn: u32, qkey: u32) {
    e.pd = pd;
    e.qp.qpn = qpn;
    // SAFETY: `ud` is the union member for UD port spaces; plain data.
    let u = unsafe { &mut e.ev.param.ud };
    u.private_data = if e.pd.is_empty() {
        std::ptr::null()
    } else {
        e.pd.as_ptr() as *const c_void
    };
    u.private_data_len = e.pd.len() as u8;
    u.qp_num = qpn;
    u.qkey = qkey;
}

pub fn sockaddr_in(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

/// An IPv4-mapped GID (the shim's GID of an IPv4 address).
pub fn gid_of(ip: Ipv4Addr) -> ibv_gid {
    let mut g = ibv_gid::default();
    // SAFETY: `raw` is the byte view of the union; plain data.
    let raw = unsafe { &mut g.raw };
    raw[10] = 0xff;
    raw[11] = 0xff;
    raw[12..16].copy_from_slice(&ip.octets());
    g
}

/// Write the id's addresses into its `route` (what rdma_get_local_addr / rdma_get_peer_addr
/// and applications' own reads of `id->route.addr` see).
pub fn publish_addrs(id: &mut rdma_cm_id, local: SocketAddrV4, remote: SocketAddrV4) {
    let a = &mut id.route.addr;
    let (s, d) = (sockaddr_in(local), sockaddr_in(remote));
    // SAFETY: both unions are sockaddr storages of at least sockaddr_in's size; we write the
    // sockaddr_in member, byte for byte.
    unsafe {
        std::ptr::write_unaligned(
            std::ptr::addr_of_mut!(a.__bindgen_anon_1) as *mut libc::sockaddr_in,
            s,
        );
        std::ptr::write_unaligned(
            std::ptr::addr_of_mut!(a.__bindgen_anon_2) as *mut libc::sockaddr_in,
            d,
        );
        a.addr.ibaddr.sgid = gid_of(*local.ip());
        a.addr.ibaddr.dgid = gid_of(*remote.ip());
    }
}

/// The shim's callback (engine thread): queue the event on its id's channel. Never calls
/// the shim (that would wait for this very thread).
///
/// # Safety
/// `ev` is a valid event for the duration of the call (the shim's contract).
pub unsafe extern "C" fn on_event(ev: *const FfiEvent, _ctx: *mut c_void) {
    // SAFETY: the shim's contract.
    let e = unsafe { &*ev };
    let pd = if e.pd.is_null() || e.pd_len == 0 {
        Vec::new()
    } else {
        // SAFETY: `pd_len` bytes at `pd`, valid during the call.
        unsafe { std::slice::from_raw_parts(e.pd, e.pd_len as usize) }.to_vec()
    };
    dbg_log!("CM event {} on comm {:#x}", e.kind, e.id);
    let mut g = lock(global());
    if e.kind == shim::CONNECT_REQUEST {
        let Some(&lp) = g.listeners.get(&(e.port_space, e.port)) else {
            dbg_log!("CONNECT_REQUEST for port {} nobody listens on", e.port);
            return;
        };
        // SAFETY: listeners holds live ids only (removed before an id is freed).
        let l = unsafe { &*(lp as *const IdPriv) };
        let Some(child) = crate::id::new_child(l, e, g.ctx) else {
            return;
        };
        g.ids.insert(child as usize, ());
        g.by_comm.insert(e.id, child as usize);
        // SAFETY: just created.
        let c = unsafe { &*child };
        if c.own_chan {
            g.private_chans.insert(c.chan as usize);
        } else {
            *g.chans.entry(c.chan as usize).or_default() += 1;
        }
        let mut ev = event(child as *mut rdma_cm_id, RDMA_CM_EVENT_CONNECT_REQUEST, 0);
        ev.ev.listen_id = lp as *mut rdma_cm_id;
        ev.kind = e.kind;
        if e.port_space == RDMA_PS_UDP as u16 {
            set_ud(&mut ev, pd, 0, 0);
        } else {
            set_conn(&mut ev, pd, &e.qp);
        }
        l.chan().push(ev);
        return;
    }
    let (ty, status) = match e.kind {
        shim::CONNECT_RESPONSE => (RDMA_CM_EVENT_CONNECT_RESPONSE, 0),
        shim::ESTABLISHED => (RDMA_CM_EVENT_ESTABLISHED, 0),
        shim::REJECTED => (RDMA_CM_EVENT_REJECTED, e.reason as c_int),
        shim::UNREACHABLE => (RDMA_CM_EVENT_UNREACHABLE, -libc::ETIMEDOUT),
        shim::DISCONNECTED => (RDMA_CM_EVENT_DISCONNECTED, 0),
        // A resolved UD connect is ESTABLISHED (param.ud: the peer's QPN and Q_Key, its
        // address handle attributes filled when the application reads it); a refused one
        // UNREACHABLE with the SIDR status, as Linux's rdma_cm reports it.
        shim::SIDR_RESPONSE if e.reason == 0 => (RDMA_CM_EVENT_ESTABLISHED, 0),
        shim::SIDR_RESPONSE => (RDMA_CM_EVENT_UNREACHABLE, e.reason as c_int),
        _ => return,
    };
    let mut ev = event(std::ptr::null_mut(), ty, status);
    ev.kind = e.kind;
    if e.kind == shim::SIDR_RESPONSE {
        set_ud(&mut ev, pd, e.qp.qpn, e.qkey);
    } else {
        set_conn(&mut ev, pd, &e.qp);
    }
    match g.by_comm.get(&e.id) {
        Some(&p) => {
            ev.ev.id = p as *mut rdma_cm_id;
            // SAFETY: by_comm holds live ids only.
            unsafe { &*(p as *const IdPriv) }.chan().push(ev);
        }
        None => g.orphans.entry(e.id).or_default().push(ev),
    }
}

/// Register `comm` for `p` and deliver what arrived before.
pub fn register(p: &IdPriv, comm: u32) {
    let mut g = lock(global());
    g.by_comm.insert(comm, p as *const IdPriv as usize);
    if let Some(evs) = g.orphans.remove(&comm) {
        for mut e in evs {
            e.ev.id = p.id.get();
            p.chan().push(e);
        }
    }
}

/// An event about to be handed to the application: counted against its id if the id is
/// alive. The check and the count happen under the map's lock, under which
/// `rdma_destroy_id` removes the id before it waits for `outstanding` to drain: so a counted
/// event's id stays allocated until the event is acknowledged ([`uncount_event`]).
pub(crate) fn count_event(e: &mut EvPriv) -> bool {
    let id = e.ev.id;
    let g = lock(global());
    if id.is_null() || !g.ids.contains_key(&(id as usize)) {
        return false;
    }
    // SAFETY: a live id of ours (in the map, which we hold): the rdma_cm_id is the first
    // field of its IdPriv.
    let p = unsafe { &*(id as *const IdPriv) };
    p.outstanding.fetch_add(1, Ordering::SeqCst);
    e.counted = true;
    true
}

/// The application is done with `e`: its id's destruction may go on. The id is not looked
/// up in the map (a destroy in progress has removed it already and waits for this).
pub(crate) fn uncount_event(e: &mut EvPriv) {
    if !std::mem::take(&mut e.counted) {
        return;
    }
    // SAFETY: counted, so the id's rdma_destroy_id (which frees it) waits until this
    // decrement; the IdPriv is allocated.
    let p = unsafe { &*(e.ev.id as *const IdPriv) };
    p.outstanding.fetch_sub(1, Ordering::SeqCst);
}

/// The IdPriv behind an application's id, if it is one of ours and alive.
pub(crate) fn id_of<'a>(id: *mut rdma_cm_id) -> Option<&'a IdPriv> {
    if id.is_null() || !lock(global()).ids.contains_key(&(id as usize)) {
        return None;
    }
    // SAFETY: a live id of ours: the rdma_cm_id is the first field of its IdPriv.
    Some(unsafe { &*(id as *const IdPriv) })
}
