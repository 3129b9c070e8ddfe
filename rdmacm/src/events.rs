//! Events: `rdma_get_cm_event` (blocking on the channel's eventfd, or EAGAIN when the
//! application made it non-blocking), the processing an event does to its id before the
//! application sees it, acknowledgement, migration between channels, names.

use crate::qp;
use crate::shim;
use crate::state::*;
use crate::sys::*;
use std::ffi::{c_char, c_int, c_void};

/// # Safety
/// `ch` a channel of ours; `out` writable.
#[export_name = "frdmacm_v_rdma_get_cm_event"]
pub unsafe extern "C" fn rdma_get_cm_event(
    ch: *mut rdma_event_channel,
    out: *mut *mut rdma_cm_event,
) -> c_int {
    if ch.is_null() || out.is_null() {
        return fail(libc::EINVAL);
    }
    if !chan_live(ch as usize) {
        // A destroyed channel (its memory is gone: only the address is compared). While the
        // process exits (our atexit handler closes the device, ~150 ms in the shim), a thread
        // still looping on it, as rping's event thread does after main destroyed it, waits
        // for the exit instead of failing the program with EBADF.
        while EXITING.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        return fail(libc::EBADF);
    }
    // SAFETY: a channel of ours (the rdma_event_channel is its first field).
    let c = unsafe { &*(ch as *const ChanPriv) };
    loop {
        let mut n = 0u64;
        // SAFETY: reads 8 bytes into a live u64 from our eventfd; blocks unless the
        // application made the fd non-blocking (then EAGAIN, as rdma-core).
        let r = unsafe { libc::read(c.ch.fd, &mut n as *mut u64 as *mut c_void, 8) };
        if r != 8 {
            // SAFETY: errno of this thread.
            let e = unsafe { *libc::__errno_location() };
            if e == libc::EINTR {
                continue;
            }
            return -1;
        }
        let Some(mut e) = lock(&c.q).pop_front() else {
            continue;
        };
        // Counted before it is processed: a destroy racing this (rping's main thread while
        // its event thread takes the DISCONNECTED) then waits for the acknowledgement
        // instead of freeing the id under us, or of waiting forever for an uncounted ack.
        if count_event(&mut e) {
            process(&mut e);
        } else if !e.ev.id.is_null() {
            // Its id was destroyed between the queue and here: the event goes with it, as
            // the ones still queued did (rdma_destroy_id purges them).
            continue;
        }
        // SAFETY: writable (contract).
        unsafe { *out = Box::into_raw(e) as *mut rdma_cm_event };
        return 0;
    }
}

/// What an event does to its id before the application sees it (application thread: it may
/// call verbs and the shim). A REP is answered here: QP to RTR and RTS, RTU, ESTABLISHED.
fn process(e: &mut EvPriv) -> Option<()> {
    let p = id_of(e.ev.id)?;
    match e.ev.event {
        RDMA_CM_EVENT_CONNECT_RESPONSE => {
            let comm = {
                let mut st = lock(&p.st);
                st.peer_qp = e.qp;
                st.comm
            };
            if p.cm().qp.is_null() {
                return Some(());
            }
            let ops = shim::ops()?;
            match qp::connect_qp(p) {
                Ok(()) => {
                    // SAFETY: no private data in our RTU.
                    let r = unsafe { (ops.establish)(comm, std::ptr::null(), 0) };
                    if r == 0 {
                        e.ev.event = RDMA_CM_EVENT_ESTABLISHED;
                        lock(&p.st).phase = Phase::Connected;
                    } else {
                        e.ev.event = RDMA_CM_EVENT_CONNECT_ERROR;
                        e.ev.status = -r;
                    }
                }
                Err(err) => {
                    // SAFETY: no private data.
                    unsafe { (ops.reject)(comm, 28, std::ptr::null(), 0) };
                    e.ev.event = RDMA_CM_EVENT_CONNECT_ERROR;
                    e.ev.status = -err;
                    lock(&p.st).phase = Phase::Disconnected;
                }
            }
        }
        RDMA_CM_EVENT_ESTABLISHED if e.kind == shim::SIDR_RESPONSE => {
            let remote = {
                let mut st = lock(&p.st);
                st.phase = Phase::Connected;
                st.peer_qp.qpn = e.qp.qpn;
                st.remote
            };
            // SAFETY: `ud` is the member set_ud filled; plain data.
            let a = unsafe { &mut e.ev.param.ud.ah_attr };
            // The peer as RoCE addresses it (the shim's GIDs are IPv4-mapped), as
            // rdma_cm's path record gives it.
            a.is_global = 1;
            a.port_num = 1;
            a.grh.dgid = gid_of(*remote.ip());
            a.grh.sgid_index = 1;
            a.grh.hop_limit = 64;
        }
        RDMA_CM_EVENT_ESTABLISHED => lock(&p.st).phase = Phase::Connected,
        RDMA_CM_EVENT_DISCONNECTED => {
            qp::to_error(p);
            lock(&p.st).phase = Phase::Disconnected;
        }
        RDMA_CM_EVENT_REJECTED | RDMA_CM_EVENT_UNREACHABLE => {
            lock(&p.st).phase = Phase::Disconnected
        }
        _ => {}
    }
    Some(())
}

/// # Safety
/// `e` an event this library returned, not acknowledged yet.
#[export_name = "frdmacm_v_rdma_ack_cm_event"]
pub unsafe extern "C" fn rdma_ack_cm_event(e: *mut rdma_cm_event) -> c_int {
    if e.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: ours (an EvPriv leaked by rdma_get_cm_event).
    let mut e = unsafe { Box::from_raw(e as *mut EvPriv) };
    uncount_event(&mut e);
    0
}

/// # Safety
/// `id` ours; `ch` null or ours.
#[export_name = "frdmacm_v_rdma_migrate_id"]
pub unsafe extern "C" fn rdma_migrate_id(
    id: *mut rdma_cm_id,
    ch: *mut rdma_event_channel,
) -> c_int {
    let Some(p) = id_of(id) else {
        return fail(libc::EINVAL);
    };
    // Only to an application's channel: to a private one (making the id synchronous) is not
    // offered. From a private one it is, as rdma-core allows: libfabric's verbs provider
    // creates its ids synchronous and moves them to its event queue's channel.
    let mut g = lock(global());
    if ch.is_null() || !g.chans.contains_key(&(ch as usize)) {
        drop(g);
        return fail(libc::EINVAL);
    }
    let old = p.chan;
    let was_own = p.own_chan;
    if old == ch as *mut ChanPriv {
        return 0;
    }
    let moved: Vec<Box<EvPriv>> = {
        let mut q = lock(&p.chan().q);
        let (m, keep): (Vec<_>, Vec<_>) = q.drain(..).partition(|e| e.ev.id == id);
        q.extend(keep);
        m
    };
    if was_own {
        g.private_chans.remove(&(old as usize));
    } else if let Some(n) = g.chans.get_mut(&(old as usize)) {
        *n = n.saturating_sub(1);
    }
    *g.chans.entry(ch as usize).or_default() += 1;
    let pm = p as *const IdPriv as *mut IdPriv;
    // SAFETY: our id; the engine thread reaches it only under the global lock, held here, and
    // the application does not use it concurrently during a migration (rdma-core's
    // contract).
    unsafe {
        (*pm).chan = ch as *mut ChanPriv;
        (*pm).own_chan = false;
        (*pm).cm_mut().channel = ch;
    }
    drop(g);
    for e in moved {
        p.chan().push(e);
    }
    if was_own {
        // SAFETY: the id's private channel, no longer reachable from the id or the maps.
        let c = unsafe { Box::from_raw(old) };
        // SAFETY: its own eventfd.
        unsafe { libc::close(c.ch.fd) };
    }
    0
}

#[export_name = "frdmacm_v_rdma_event_str"]
pub extern "C" fn rdma_event_str(e: rdma_cm_event_type) -> *const c_char {
    let s: &'static std::ffi::CStr = match e {
        RDMA_CM_EVENT_ADDR_RESOLVED => c"RDMA_CM_EVENT_ADDR_RESOLVED",
        RDMA_CM_EVENT_ADDR_ERROR => c"RDMA_CM_EVENT_ADDR_ERROR",
        RDMA_CM_EVENT_ROUTE_RESOLVED => c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        RDMA_CM_EVENT_ROUTE_ERROR => c"RDMA_CM_EVENT_ROUTE_ERROR",
        RDMA_CM_EVENT_CONNECT_REQUEST => c"RDMA_CM_EVENT_CONNECT_REQUEST",
        RDMA_CM_EVENT_CONNECT_RESPONSE => c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        RDMA_CM_EVENT_CONNECT_ERROR => c"RDMA_CM_EVENT_CONNECT_ERROR",
        RDMA_CM_EVENT_UNREACHABLE => c"RDMA_CM_EVENT_UNREACHABLE",
        RDMA_CM_EVENT_REJECTED => c"RDMA_CM_EVENT_REJECTED",
        RDMA_CM_EVENT_ESTABLISHED => c"RDMA_CM_EVENT_ESTABLISHED",
        RDMA_CM_EVENT_DISCONNECTED => c"RDMA_CM_EVENT_DISCONNECTED",
        RDMA_CM_EVENT_DEVICE_REMOVAL => c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        RDMA_CM_EVENT_MULTICAST_JOIN => c"RDMA_CM_EVENT_MULTICAST_JOIN",
        RDMA_CM_EVENT_MULTICAST_ERROR => c"RDMA_CM_EVENT_MULTICAST_ERROR",
        RDMA_CM_EVENT_ADDR_CHANGE => c"RDMA_CM_EVENT_ADDR_CHANGE",
        RDMA_CM_EVENT_TIMEWAIT_EXIT => c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
        _ => c"UNKNOWN EVENT",
    };
    s.as_ptr()
}
