//! Addresses and the convenience layer: the address map, `rdma_getaddrinfo`,
//! `rdma_create_ep` / `rdma_destroy_ep` / `rdma_get_request` (synchronous ids), devices.
//!
//! The address rule: a program names IPv4 addresses. `FERROCE_CM_MAP="a=b,c=d"` maps a
//! named address `a` to the engine address `b` (e.g. a host's kernel address to the address
//! its ferroce engine answers on); an address not in the map is used as it is, so naming the
//! engines' own addresses (`FERROCE_IP` of each side) needs no map. A bound address must map
//! to 0.0.0.0, a loopback address (taken as the engine, as Linux's rdma_cm binds loopback to
//! its first device) or this process's engine (`FERROCE_IP`), else EADDRNOTAVAIL.

use crate::events::{rdma_ack_cm_event, rdma_get_cm_event};
use crate::id::*;
use crate::qp;
use crate::state::*;
use crate::sys::*;
use std::ffi::{c_char, c_int};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::OnceLock;

/// Parse `FERROCE_CM_MAP` (malformed entries are reported once and ignored).
pub fn parse_map(s: &str) -> Vec<(Ipv4Addr, Ipv4Addr)> {
    let mut v = Vec::new();
    for e in s.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        match e
            .split_once('=')
            .map(|(a, b)| (a.trim().parse(), b.trim().parse()))
        {
            Some((Ok(a), Ok(b))) => v.push((a, b)),
            _ => eprintln!("ferroce rdmacm: FERROCE_CM_MAP entry {e:?} is not a=b (IPv4)"),
        }
    }
    v
}

/// The engine address serving the address a program named.
pub fn map(a: Ipv4Addr) -> Ipv4Addr {
    static MAP: OnceLock<Vec<(Ipv4Addr, Ipv4Addr)>> = OnceLock::new();
    let m = MAP.get_or_init(|| {
        std::env::var("FERROCE_CM_MAP")
            .map(|s| parse_map(&s))
            .unwrap_or_default()
    });
    m.iter().find(|(k, _)| *k == a).map_or(a, |(_, v)| *v)
}

fn malloc_sin(a: SocketAddrV4) -> *mut libc::sockaddr {
    // SAFETY: a fresh allocation of a sockaddr_in's size, written before use; freed by
    // rdma_freeaddrinfo with free().
    unsafe {
        let p = libc::calloc(1, std::mem::size_of::<libc::sockaddr_in>()) as *mut libc::sockaddr_in;
        if !p.is_null() {
            p.write(sockaddr_in(a));
        }
        p as *mut libc::sockaddr
    }
}

/// Resolve `node`/`service` to one IPv4 address with the system resolver (numeric or named).
fn resolve(
    node: *const c_char,
    service: *const c_char,
    passive: bool,
) -> Result<SocketAddrV4, c_int> {
    let hints = libc::addrinfo {
        ai_flags: if passive { libc::AI_PASSIVE } else { 0 },
        ai_family: libc::AF_INET,
        ai_socktype: libc::SOCK_STREAM,
        ai_protocol: 0,
        ai_addrlen: 0,
        ai_addr: std::ptr::null_mut(),
        ai_canonname: std::ptr::null_mut(),
        ai_next: std::ptr::null_mut(),
    };
    let mut res: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: NUL-terminated strings or null (the caller's), our hints and out pointer.
    let r = unsafe { libc::getaddrinfo(node, service, &hints, &mut res) };
    if r != 0 || res.is_null() {
        return Err(libc::EADDRNOTAVAIL);
    }
    // SAFETY: getaddrinfo's first result, AF_INET as asked; freed right after.
    let out = unsafe {
        let a = sa_v4((*res).ai_addr).ok().flatten();
        libc::freeaddrinfo(res);
        a
    };
    out.ok_or(libc::EADDRNOTAVAIL)
}

/// # Safety
/// `node`/`service` null or NUL-terminated; `hints` null or readable; `res` writable.
#[export_name = "frdmacm_v_rdma_getaddrinfo"]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const rdma_addrinfo,
    res: *mut *mut rdma_addrinfo,
) -> c_int {
    // SAFETY: null or the caller's hints.
    let h = unsafe { hints.as_ref() };
    // Neither node nor service: the hints' own addresses, as rdma-core allows (libfabric's
    // verbs provider passes the peer's address that way).
    let hint_addrs = h.map(|h| {
        (
            sa_v4(h.ai_src_addr as *const libc::sockaddr),
            sa_v4(h.ai_dst_addr as *const libc::sockaddr),
        )
    });
    let from_hints = node.is_null() && service.is_null();
    if res.is_null()
        || (from_hints && !matches!(hint_addrs, Some((Ok(Some(_)), _) | (_, Ok(Some(_))))))
    {
        return fail(libc::EINVAL);
    }
    let flags = h.map_or(0, |h| h.ai_flags);
    let passive = flags & RAI_PASSIVE as c_int != 0;
    let ps = h.map_or(0, |h| h.ai_port_space);
    let ud = ps == RDMA_PS_UDP as c_int;
    if ps != 0 && ps != RDMA_PS_TCP as c_int && ps != RDMA_PS_IB as c_int && !ud {
        return fail(libc::EPROTONOSUPPORT);
    }
    // RDMA_PS_UDP goes with UD QPs, the others with RC.
    let qp_type = if ud { IBV_QPT_UD } else { IBV_QPT_RC } as c_int;
    if let Some(h) = h {
        if h.ai_family != 0 && h.ai_family != libc::AF_INET {
            return fail(libc::EAFNOSUPPORT);
        }
        if h.ai_qp_type != 0 && h.ai_qp_type != qp_type {
            return fail(libc::EPROTONOSUPPORT);
        }
    }
    let (hint_src, hint_dst) = match hint_addrs {
        Some((s, d)) => (s.ok().flatten(), d.ok().flatten()),
        None => (None, None),
    };
    let a = if from_hints {
        match (passive, hint_src, hint_dst) {
            (true, Some(s), _) | (false, _, Some(s)) => s,
            _ => return fail(libc::EINVAL),
        }
    } else {
        match resolve(node, service, passive) {
            Ok(a) => a,
            Err(e) => return fail(e),
        }
    };
    // SAFETY: a zeroed allocation of the struct, freed by rdma_freeaddrinfo.
    let ai = unsafe { libc::calloc(1, std::mem::size_of::<rdma_addrinfo>()) } as *mut rdma_addrinfo;
    if ai.is_null() {
        return fail(libc::ENOMEM);
    }
    // SAFETY: just allocated and zeroed.
    let r = unsafe { &mut *ai };
    r.ai_flags = flags;
    r.ai_family = libc::AF_INET;
    r.ai_qp_type = qp_type;
    r.ai_port_space = if ps == 0 { RDMA_PS_TCP as c_int } else { ps };
    let sin = std::mem::size_of::<libc::sockaddr_in>() as u32;
    if passive {
        r.ai_src_addr = malloc_sin(a) as *mut _;
        r.ai_src_len = sin;
    } else {
        r.ai_dst_addr = malloc_sin(a) as *mut _;
        r.ai_dst_len = sin;
        if let Some(s) = hint_src {
            r.ai_src_addr = malloc_sin(s) as *mut _;
            r.ai_src_len = sin;
        }
    }
    // SAFETY: writable (contract).
    unsafe { *res = ai };
    0
}

/// # Safety
/// `res` a list rdma_getaddrinfo returned.
#[export_name = "frdmacm_v_rdma_freeaddrinfo"]
pub unsafe extern "C" fn rdma_freeaddrinfo(mut res: *mut rdma_addrinfo) {
    while !res.is_null() {
        // SAFETY: our allocations (calloc), each freed once.
        unsafe {
            let next = (*res).ai_next;
            libc::free((*res).ai_src_addr as *mut libc::c_void);
            libc::free((*res).ai_dst_addr as *mut libc::c_void);
            libc::free(res as *mut libc::c_void);
            res = next;
        }
    }
}

/// # Safety
/// `id` writable; `res` an rdma_addrinfo; `pd`, `a` null or valid.
#[export_name = "frdmacm_v_rdma_create_ep"]
pub unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut rdma_cm_id,
    res: *mut rdma_addrinfo,
    pd: *mut ibv_pd,
    a: *mut ibv_qp_init_attr,
) -> c_int {
    if id.is_null() || res.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: the caller's addrinfo.
    let r = unsafe { &*res };
    let mut cm: *mut rdma_cm_id = std::ptr::null_mut();
    // SAFETY: a synchronous id (no channel).
    if unsafe {
        rdma_create_id(
            std::ptr::null_mut(),
            &mut cm,
            std::ptr::null_mut(),
            r.ai_port_space as rdma_port_space,
        )
    } != 0
    {
        return -1;
    }
    let undo = |cm| {
        // SAFETY: the id just created.
        unsafe { rdma_destroy_id(cm) };
        -1
    };
    if r.ai_flags & RAI_PASSIVE as c_int != 0 {
        // SAFETY: our id, the caller's address.
        if unsafe { rdma_bind_addr(cm, r.ai_src_addr as *mut libc::sockaddr) } != 0 {
            return undo(cm);
        }
        if !a.is_null() {
            let p = id_of(cm).expect("just created");
            // SAFETY: the caller's attributes, copied for the requests to come.
            lock(&p.st).ep_qp = Some((pd as usize, unsafe { *a }));
        }
    } else {
        // SAFETY: our id, the caller's addresses (src may be null).
        let ok = unsafe {
            rdma_resolve_addr(cm, r.ai_src_addr as *mut _, r.ai_dst_addr as *mut _, 2000) == 0
                && rdma_resolve_route(cm, 2000) == 0
        };
        if !ok {
            return undo(cm);
        }
        if !a.is_null() {
            let p = id_of(cm).expect("just created");
            // SAFETY: the caller's attributes.
            if let Err(e) = qp::create_qp(p, pd, unsafe { &mut *a }) {
                undo(cm);
                return fail(e);
            }
        }
    }
    // SAFETY: writable (contract).
    unsafe { *id = cm };
    0
}

/// # Safety
/// `id` an id of ours.
#[export_name = "frdmacm_v_rdma_destroy_ep"]
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut rdma_cm_id) {
    // SAFETY: our id: its QP, then the id (and the CQs made for it).
    unsafe {
        qp::rdma_destroy_qp(id);
        qp::rdma_destroy_srq(id);
        rdma_destroy_id(id);
    }
}

/// # Safety
/// `listen` a synchronous listening id of ours; `out` writable.
#[export_name = "frdmacm_v_rdma_get_request"]
pub unsafe extern "C" fn rdma_get_request(
    listen: *mut rdma_cm_id,
    out: *mut *mut rdma_cm_id,
) -> c_int {
    let (Some(l), false) = (id_of(listen), out.is_null()) else {
        return fail(libc::EINVAL);
    };
    if !l.own_chan {
        return fail(libc::EINVAL);
    }
    loop {
        let mut e: *mut rdma_cm_event = std::ptr::null_mut();
        // SAFETY: the listening id's own channel.
        if unsafe { rdma_get_cm_event(l.chan as *mut rdma_event_channel, &mut e) } != 0 {
            return -1;
        }
        // SAFETY: the event just taken.
        let (ty, child) = unsafe { ((*e).event, (*e).id) };
        if ty != RDMA_CM_EVENT_CONNECT_REQUEST {
            // SAFETY: ours.
            unsafe { rdma_ack_cm_event(e) };
            continue;
        }
        let Some(c) = id_of(child) else {
            // SAFETY: ours.
            unsafe { rdma_ack_cm_event(e) };
            continue;
        };
        let ep = lock(&c.st).ep_qp;
        if let Some((pd, mut a)) = ep {
            if let Err(err) = qp::create_qp(c, pd as *mut ibv_pd, &mut a) {
                // SAFETY: ours; the request is refused.
                unsafe {
                    rdma_ack_cm_event(e);
                    rdma_reject(child, std::ptr::null(), 0);
                    rdma_destroy_id(child);
                }
                return fail(err);
            }
        }
        // The request stays on the id until rdma_accept / rdma_reject / rdma_destroy_id.
        // SAFETY: our id and its event.
        unsafe {
            (*child).event = e;
            *out = child;
        }
        return 0;
    }
}

/// # Safety
/// `num` null or writable.
#[export_name = "frdmacm_v_rdma_get_devices"]
pub unsafe extern "C" fn rdma_get_devices(num: *mut c_int) -> *mut *mut ibv_context {
    let ctx = match ensure_started() {
        Ok(_) => lock(global()).ctx as *mut ibv_context,
        Err(_) => std::ptr::null_mut(),
    };
    let n = usize::from(!ctx.is_null());
    // SAFETY: an array of n + 1 pointers, NULL-terminated, freed by rdma_free_devices.
    let list = unsafe { libc::calloc(n + 1, std::mem::size_of::<*mut ibv_context>()) }
        as *mut *mut ibv_context;
    if list.is_null() {
        fail(libc::ENOMEM);
        return list;
    }
    if n == 1 {
        // SAFETY: within the allocation.
        unsafe { *list = ctx };
    }
    if !num.is_null() {
        // SAFETY: writable (contract).
        unsafe { *num = n as c_int };
    }
    list
}

/// # Safety
/// `list` from rdma_get_devices.
#[export_name = "frdmacm_v_rdma_free_devices"]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut ibv_context) {
    // SAFETY: our calloc; the contexts stay open (rdma-core keeps them too).
    unsafe { libc::free(list as *mut libc::c_void) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_map_parses_pairs_and_skips_junk() {
        let m = parse_map(" 198.18.0.2=198.18.0.12, junk ,198.18.0.1 = 198.18.0.11,");
        assert_eq!(
            m,
            vec![
                (
                    "198.18.0.2".parse().unwrap(),
                    "198.18.0.12".parse().unwrap()
                ),
                (
                    "198.18.0.1".parse().unwrap(),
                    "198.18.0.11".parse().unwrap()
                )
            ]
        );
    }
}
