//! Queue pairs of cm ids over the public verbs ABI: creation (with the CQs and completion
//! channels rdma-core makes when the application gives none), the INIT / RTR / RTS / ERR
//! transitions the CM drives, `rdma_init_qp_attr`, SRQs.

use crate::state::*;
use crate::sys::*;
use crate::verbs::*;
use std::ffi::{c_int, CStr};

/// The device whose CM the process uses ([`cm_device`]): its context and a PD for ids
/// given none.
pub fn open_cm_device() -> Option<(*mut ibv_context, *mut ibv_pd)> {
    let want = cm_device().0;
    let mut n = 0;
    // SAFETY: verbs calls with valid arguments; the list is freed after use and the device
    // opened before that, as verbs allows.
    unsafe {
        let list = ibv_get_device_list(&mut n);
        if list.is_null() {
            return None;
        }
        let mut found = std::ptr::null_mut();
        for i in 0..n.max(0) as usize {
            let d = *list.add(i);
            let name = CStr::from_ptr(ibv_get_device_name(d));
            if name.to_bytes() == want.as_bytes() {
                found = d;
            }
        }
        let ctx = if found.is_null() {
            std::ptr::null_mut()
        } else {
            ibv_open_device(found)
        };
        ibv_free_device_list(list);
        if ctx.is_null() {
            return None;
        }
        let pd = ibv_alloc_pd(ctx);
        (!pd.is_null()).then_some((ctx, pd))
    }
}

/// The PSN the id's QP expects first. The native CM announces the PSN a side sends from;
/// the IBTA CM (RoCEv2 device), as Linux, the one it expects (the peer sends from it).
fn rq_psn(st: &IdSt) -> u32 {
    if cm_device().1 == 1 {
        st.my_psn
    } else {
        st.peer_qp.start_psn
    }
}

/// The PSN the id's QP sends from (see [`rq_psn`]).
fn sq_psn(st: &IdSt) -> u32 {
    if cm_device().1 == 1 {
        st.peer_qp.start_psn
    } else {
        st.my_psn
    }
}

fn errno() -> c_int {
    // SAFETY: errno of this thread.
    unsafe { *libc::__errno_location() }
}

/// Fill `a`/`mask` for moving the id's QP to `a.qp_state` (INIT, RTR or RTS).
fn init_attr(p: &IdPriv, a: &mut ibv_qp_attr, mask: &mut c_int) -> Result<(), c_int> {
    let st = lock(&p.st);
    match a.qp_state {
        IBV_QPS_INIT => {
            a.pkey_index = 0;
            a.port_num = 1;
            a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE
                | IBV_ACCESS_REMOTE_WRITE
                | IBV_ACCESS_REMOTE_READ
                | IBV_ACCESS_REMOTE_ATOMIC;
            *mask = (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) as c_int;
        }
        IBV_QPS_RTR => {
            let mut port = ibv_port_attr::default();
            // SAFETY: the id's device context and a writable attribute struct.
            let r = unsafe { ibv_query_port(p.cm().verbs, 1, &mut port) };
            // The REQ's path MTU when the CM reported one (RoCEv2: both ends use the
            // initiator's), else the port's.
            a.path_mtu = match st.path_mtu {
                256 => IBV_MTU_256,
                512 => IBV_MTU_512,
                1024 => IBV_MTU_1024,
                2048 => IBV_MTU_2048,
                4096 => IBV_MTU_4096,
                _ if r == 0 => port.active_mtu,
                _ => IBV_MTU_1024,
            };
            a.dest_qp_num = st.peer_qp.qpn;
            a.rq_psn = rq_psn(&st);
            a.max_dest_rd_atomic = st.peer_qp.initiator_depth.max(1);
            a.min_rnr_timer = 12;
            a.ah_attr.is_global = 1;
            a.ah_attr.port_num = 1;
            a.ah_attr.grh.dgid = gid_of(*st.remote.ip());
            a.ah_attr.grh.sgid_index = 1;
            a.ah_attr.grh.hop_limit = 64;
            *mask = (IBV_QP_STATE
                | IBV_QP_AV
                | IBV_QP_PATH_MTU
                | IBV_QP_DEST_QPN
                | IBV_QP_RQ_PSN
                | IBV_QP_MAX_DEST_RD_ATOMIC
                | IBV_QP_MIN_RNR_TIMER) as c_int;
        }
        IBV_QPS_RTS => {
            a.sq_psn = sq_psn(&st);
            a.timeout = 14;
            a.retry_cnt = 7;
            a.rnr_retry = st.peer_qp.rnr_retry_count.max(1);
            a.max_rd_atomic = st.peer_qp.responder_resources.max(1);
            *mask = (IBV_QP_STATE
                | IBV_QP_TIMEOUT
                | IBV_QP_RETRY_CNT
                | IBV_QP_RNR_RETRY
                | IBV_QP_SQ_PSN
                | IBV_QP_MAX_QP_RD_ATOMIC) as c_int;
        }
        _ => return Err(libc::EINVAL),
    }
    Ok(())
}

fn modify(p: &IdPriv, state: ibv_qp_state) -> Result<(), c_int> {
    let mut a = ibv_qp_attr {
        qp_state: state,
        ..Default::default()
    };
    let mut mask = 0;
    init_attr(p, &mut a, &mut mask)?;
    // SAFETY: the id's live QP and a filled attribute struct.
    let r = unsafe { ibv_modify_qp(p.cm().qp, &mut a, mask) };
    if r != 0 {
        return Err(r);
    }
    Ok(())
}

/// The id's QP to RTR and RTS toward the peer queue pair the CM reported.
pub fn connect_qp(p: &IdPriv) -> Result<(), c_int> {
    modify(p, IBV_QPS_RTR)?;
    modify(p, IBV_QPS_RTS)
}

/// The id's QP (if any) to ERR: its outstanding work is flushed, as on a disconnect.
pub fn to_error(p: &IdPriv) {
    if p.cm().qp.is_null() {
        return;
    }
    let mut a = ibv_qp_attr {
        qp_state: IBV_QPS_ERR,
        ..Default::default()
    };
    // SAFETY: the id's live QP.
    unsafe { ibv_modify_qp(p.cm().qp, &mut a, IBV_QP_STATE as c_int) };
}

/// # Safety
/// `id` ours; `a` and `mask` writable.
#[export_name = "frdmacm_v_rdma_init_qp_attr"]
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut rdma_cm_id,
    a: *mut ibv_qp_attr,
    mask: *mut c_int,
) -> c_int {
    let (Some(p), false, false) = (id_of(id), a.is_null(), mask.is_null()) else {
        return fail(libc::EINVAL);
    };
    // SAFETY: writable (contract).
    match init_attr(p, unsafe { &mut *a }, unsafe { &mut *mask }) {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

fn mut_id(p: &IdPriv) -> &mut rdma_cm_id {
    p.cm_mut()
}

/// CQs (and completion channels) for an id whose application gave none.
fn own_cqs(p: &IdPriv, a: &mut ibv_qp_init_attr) -> Result<(), c_int> {
    let id = mut_id(p);
    let ctx = id.verbs;
    if a.send_cq.is_null() || a.recv_cq.is_null() {
        // SAFETY: verbs calls on the id's context; results checked.
        unsafe {
            let n = (a.cap.max_send_wr.max(a.cap.max_recv_wr).max(1)) as c_int;
            if a.send_cq.is_null() {
                let ch = ibv_create_comp_channel(ctx);
                let cq = ibv_create_cq(ctx, n, std::ptr::null_mut(), ch, 0);
                if ch.is_null() || cq.is_null() {
                    return Err(libc::ENOMEM);
                }
                id.send_cq_channel = ch;
                id.send_cq = cq;
                a.send_cq = cq;
            }
            if a.recv_cq.is_null() {
                let ch = ibv_create_comp_channel(ctx);
                let cq = ibv_create_cq(ctx, n, std::ptr::null_mut(), ch, 0);
                if ch.is_null() || cq.is_null() {
                    return Err(libc::ENOMEM);
                }
                id.recv_cq_channel = ch;
                id.recv_cq = cq;
                a.recv_cq = cq;
            }
        }
        lock(&p.st).own_cqs = true;
    }
    Ok(())
}

/// Destroy the CQs `own_cqs` made (rdma_destroy_id, rdma_destroy_ep).
pub fn destroy_own_cqs(p: &IdPriv) {
    if !lock(&p.st).own_cqs {
        return;
    }
    let id = mut_id(p);
    // SAFETY: CQs and channels this library created for the id; the QP using them is gone
    // (rdma_destroy_qp comes first, as rdma-core requires).
    unsafe {
        for (cq, ch) in [
            (&mut id.send_cq, &mut id.send_cq_channel),
            (&mut id.recv_cq, &mut id.recv_cq_channel),
        ] {
            if !cq.is_null() {
                ibv_destroy_cq(*cq);
                *cq = std::ptr::null_mut();
            }
            if !ch.is_null() {
                ibv_destroy_comp_channel(*ch);
                *ch = std::ptr::null_mut();
            }
        }
    }
    lock(&p.st).own_cqs = false;
}

/// Create the id's RC QP on `pd` (null: the id's, else the device's default) and move it
/// to INIT, as rdma-core does.
pub fn create_qp(p: &IdPriv, pd: *mut ibv_pd, a: &mut ibv_qp_init_attr) -> Result<(), c_int> {
    let id = mut_id(p);
    if id.verbs.is_null() {
        // Neither bound nor resolved: no device yet.
        return Err(libc::EINVAL);
    }
    // 0 (unset, as rdma_client leaves it): the id's type (RC, or UD for RDMA_PS_UDP).
    let ud = id.ps == RDMA_PS_UDP;
    let want = if ud { IBV_QPT_UD } else { IBV_QPT_RC };
    if a.qp_type == 0 {
        a.qp_type = want;
    }
    if a.qp_type != want {
        return Err(libc::EOPNOTSUPP);
    }
    if !id.qp.is_null() {
        return Err(libc::EINVAL);
    }
    let pd = if !pd.is_null() {
        pd
    } else if !id.pd.is_null() {
        id.pd
    } else {
        lock(global()).pd as *mut ibv_pd
    };
    own_cqs(p, a)?;
    if a.srq.is_null() {
        a.srq = id.srq;
    }
    // SAFETY: a PD of the shim and a filled attribute struct (caps written back).
    let qp = unsafe { ibv_create_qp(pd, a) };
    if qp.is_null() {
        return Err(errno());
    }
    id.qp = qp;
    id.pd = pd;
    // 24-bit start PSN, random per QP as the kernel picks it.
    let mut r = [0u8; 4];
    // SAFETY: fills 3 bytes of a live buffer.
    unsafe { libc::getrandom(r.as_mut_ptr() as *mut libc::c_void, 3, 0) };
    lock(&p.st).my_psn = u32::from_le_bytes(r) & 0x00ff_ffff;
    // A UD QP needs no peer: all the way to RTS with rdma_cm's Q_Key, as librdmacm does.
    let r = if ud {
        ud_to_rts(qp)
    } else {
        modify(p, IBV_QPS_INIT)
    };
    if let Err(e) = r {
        // SAFETY: the QP just created.
        unsafe { ibv_destroy_qp(qp) };
        id.qp = std::ptr::null_mut();
        return Err(e);
    }
    Ok(())
}

/// A new UD QP to INIT (Q_Key RDMA_UDP_QKEY), RTR and RTS (send PSN 0).
fn ud_to_rts(qp: *mut ibv_qp) -> Result<(), c_int> {
    let steps = [
        (
            ibv_qp_attr {
                qp_state: IBV_QPS_INIT,
                pkey_index: 0,
                port_num: 1,
                qkey: RDMA_UDP_QKEY,
                ..Default::default()
            },
            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY,
        ),
        (
            ibv_qp_attr {
                qp_state: IBV_QPS_RTR,
                ..Default::default()
            },
            IBV_QP_STATE,
        ),
        (
            ibv_qp_attr {
                qp_state: IBV_QPS_RTS,
                sq_psn: 0,
                ..Default::default()
            },
            IBV_QP_STATE | IBV_QP_SQ_PSN,
        ),
    ];
    for (mut a, mask) in steps {
        // SAFETY: a live QP of the shim and a filled attribute struct.
        let r = unsafe { ibv_modify_qp(qp, &mut a, mask as c_int) };
        if r != 0 {
            return Err(r);
        }
    }
    Ok(())
}

/// # Safety
/// `id` ours; `a` an attribute struct.
#[export_name = "frdmacm_v_rdma_create_qp"]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    a: *mut ibv_qp_init_attr,
) -> c_int {
    let (Some(p), false) = (id_of(id), a.is_null()) else {
        return fail(libc::EINVAL);
    };
    // SAFETY: the caller's attributes.
    match create_qp(p, pd, unsafe { &mut *a }) {
        Ok(()) => 0,
        Err(e) => fail(e),
    }
}

/// The extended form, for the attributes ibv_qp_init_attr has (PD included); anything else
/// asked in `comp_mask` (XRC, TSO, RSS, source QPN, send ops) is not supported.
///
/// # Safety
/// `id` ours; `a` an attribute struct.
#[export_name = "frdmacm_v_rdma_create_qp_ex"]
pub unsafe extern "C" fn rdma_create_qp_ex(
    id: *mut rdma_cm_id,
    a: *mut ibv_qp_init_attr_ex,
) -> c_int {
    let (Some(p), false) = (id_of(id), a.is_null()) else {
        return fail(libc::EINVAL);
    };
    // SAFETY: the caller's attributes.
    let x = unsafe { &mut *a };
    if x.comp_mask & !IBV_QP_INIT_ATTR_PD != 0 || x.create_flags != 0 {
        return fail(libc::EOPNOTSUPP);
    }
    let mut b = ibv_qp_init_attr {
        qp_context: x.qp_context,
        send_cq: x.send_cq,
        recv_cq: x.recv_cq,
        srq: x.srq,
        cap: x.cap,
        qp_type: x.qp_type,
        sq_sig_all: x.sq_sig_all,
    };
    let pd = if x.comp_mask & IBV_QP_INIT_ATTR_PD != 0 {
        x.pd
    } else {
        std::ptr::null_mut()
    };
    match create_qp(p, pd, &mut b) {
        Ok(()) => {
            x.cap = b.cap;
            0
        }
        Err(e) => fail(e),
    }
}

/// # Safety
/// `id` ours.
#[export_name = "frdmacm_v_rdma_destroy_qp"]
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut rdma_cm_id) {
    let Some(p) = id_of(id) else {
        return;
    };
    let id = mut_id(p);
    if !id.qp.is_null() {
        // SAFETY: the id's QP, created by rdma_create_qp.
        unsafe { ibv_destroy_qp(id.qp) };
        id.qp = std::ptr::null_mut();
    }
}

/// # Safety
/// `id` ours; `a` an SRQ attribute struct.
#[export_name = "frdmacm_v_rdma_create_srq"]
pub unsafe extern "C" fn rdma_create_srq(
    id: *mut rdma_cm_id,
    pd: *mut ibv_pd,
    a: *mut ibv_srq_init_attr,
) -> c_int {
    let (Some(p), false) = (id_of(id), a.is_null()) else {
        return fail(libc::EINVAL);
    };
    let id = mut_id(p);
    let pd = if pd.is_null() {
        lock(global()).pd as *mut ibv_pd
    } else {
        pd
    };
    // SAFETY: a PD of the shim and the caller's attributes.
    let srq = unsafe { ibv_create_srq(pd, a) };
    if srq.is_null() {
        return fail(errno());
    }
    id.srq = srq;
    id.pd = pd;
    0
}

/// XRC and the other extended SRQ kinds are not supported.
///
/// # Safety
/// Any arguments; none is dereferenced.
#[export_name = "frdmacm_v_rdma_create_srq_ex"]
pub unsafe extern "C" fn rdma_create_srq_ex(
    _id: *mut rdma_cm_id,
    _a: *mut ibv_srq_init_attr_ex,
) -> c_int {
    fail(libc::EOPNOTSUPP)
}

/// # Safety
/// `id` ours.
#[export_name = "frdmacm_v_rdma_destroy_srq"]
pub unsafe extern "C" fn rdma_destroy_srq(id: *mut rdma_cm_id) {
    let Some(p) = id_of(id) else {
        return;
    };
    let id = mut_id(p);
    if !id.srq.is_null() {
        // SAFETY: the id's SRQ, created by rdma_create_srq.
        unsafe { ibv_destroy_srq(id.srq) };
        id.srq = std::ptr::null_mut();
    }
}
