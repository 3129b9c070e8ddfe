//! Extended CQs (`ibv_create_cq_ex`): the `ibv_cq_ex` poll interface, `ibv_start_poll` /
//! `ibv_next_poll` / `ibv_end_poll` and the `ibv_wc_read_*` accessors, which `verbs.h`
//! implements as inline functions calling the function pointers of `struct ibv_cq_ex`.
//!
//! Every CQ of the shim is laid out as an `ibv_cq_ex` (its first fields are `ibv_cq`'s), so
//! an extended CQ is an ordinary one (`ibv_poll_cq`, channels and `ibv_destroy_cq` work on
//! it through `ibv_cq_ex_to_cq`) with the pointers filled in. `start_poll` and `next_poll`
//! take the next completion off the queue and make it the current one, which the readers
//! return fields of; `end_poll` forgets it.
//!
//! Supported `wc_flags`: `IBV_WC_STANDARD_FLAGS` (byte_len, imm, qp_num, src_qp, slid, sl,
//! dlid_path_bits); completion timestamps, CVLAN, flow tag and tag-matching info are
//! EOPNOTSUPP, and so are their readers (left NULL: verbs calls them only for a CQ created
//! with their flag).

use crate::state::lock;
use crate::sys::*;
use crate::verbs::Cq;
use std::os::raw::c_int;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

/// The `wc_flags` this device fills.
pub const WC_FLAGS: u64 = (IBV_WC_EX_WITH_BYTE_LEN
    | IBV_WC_EX_WITH_IMM
    | IBV_WC_EX_WITH_QP_NUM
    | IBV_WC_EX_WITH_SRC_QP
    | IBV_WC_EX_WITH_SLID
    | IBV_WC_EX_WITH_SL
    | IBV_WC_EX_WITH_DLID_PATH_BITS) as u64;

/// The completion `start_poll` / `next_poll` made current.
#[derive(Default)]
pub struct Polling {
    cur: Mutex<Option<ibv_wc>>,
}

fn fail(e: c_int, what: &str) -> *mut ibv_cq_ex {
    crate::state::dbg_log!("{what}: errno {e}");
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() = e };
    std::ptr::null_mut()
}

/// `verbs_context::create_cq_ex`.
///
/// # Safety
/// `c` is a context of this library (or null), `a` the caller's attributes (or null).
pub unsafe extern "C" fn create_cq_ex(
    c: *mut ibv_context,
    a: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    if c.is_null() || a.is_null() {
        return fail(libc::EINVAL, "ibv_create_cq_ex");
    }
    // SAFETY: the caller's attributes.
    let a = unsafe { &*a };
    if a.comp_mask & !(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD) != 0 {
        return fail(libc::EINVAL, "ibv_create_cq_ex: unknown comp_mask bits");
    }
    if a.wc_flags & !WC_FLAGS != 0 {
        return fail(
            libc::EOPNOTSUPP,
            "ibv_create_cq_ex: wc_flags beyond IBV_WC_STANDARD_FLAGS (timestamps, cvlan, \
             flow tag, TM)",
        );
    }
    // Single-threaded use needs nothing; the queue never overruns (it grows), so ignoring
    // overruns is what it does anyway.
    let known = IBV_CREATE_CQ_ATTR_SINGLE_THREADED | IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
    if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS != 0 && a.flags & !known != 0 {
        return fail(libc::EOPNOTSUPP, "ibv_create_cq_ex: flags");
    }
    if a.comp_mask & IBV_CQ_INIT_ATTR_MASK_PD != 0 && !a.parent_domain.is_null() {
        return fail(libc::EOPNOTSUPP, "ibv_create_cq_ex: no parent domains");
    }
    let Ok(cqe) = c_int::try_from(a.cqe) else {
        return fail(libc::EINVAL, "ibv_create_cq_ex: cqe");
    };
    let Ok(vector) = c_int::try_from(a.comp_vector) else {
        return fail(libc::EINVAL, "ibv_create_cq_ex: comp_vector");
    };
    // SAFETY: as ibv_create_cq with the same arguments (it checks them and sets errno).
    let cq = unsafe { crate::verbs::ibv_create_cq(c, cqe, a.cq_context, a.channel, vector) };
    if cq.is_null() {
        return std::ptr::null_mut();
    }
    let x = cq as *mut ibv_cq_ex;
    // SAFETY: every CQ of this library is a Cq, whose first field is an ibv_cq_ex.
    unsafe {
        (*x).start_poll = Some(start_poll);
        (*x).next_poll = Some(next_poll);
        (*x).end_poll = Some(end_poll);
        (*x).read_opcode = Some(read_opcode);
        (*x).read_vendor_err = Some(read_vendor_err);
        (*x).read_byte_len = Some(read_byte_len);
        (*x).read_imm_data = Some(read_imm_data);
        (*x).read_qp_num = Some(read_qp_num);
        (*x).read_src_qp = Some(read_src_qp);
        (*x).read_wc_flags = Some(read_wc_flags);
        (*x).read_slid = Some(read_slid);
        (*x).read_sl = Some(read_sl);
        (*x).read_dlid_path_bits = Some(read_dlid_path_bits);
    }
    x
}

/// # Safety
/// `cq` is a CQ of this library.
unsafe fn cq<'a>(cq: *mut ibv_cq_ex) -> &'a Cq {
    // SAFETY: the caller's CQ; Cq starts with its ibv_cq_ex.
    unsafe { &*(cq as *const Cq) }
}

/// Make the next completion current: 0, or ENOENT when there is none.
///
/// # Safety
/// `x` is an extended CQ of this library.
unsafe fn advance(x: *mut ibv_cq_ex) -> c_int {
    // SAFETY: the caller's CQ.
    let c = unsafe { cq(x) };
    let wc = {
        let mut q = lock(&c.st.q);
        let w = q.pop_front();
        if w.is_some() {
            c.st.n.fetch_sub(1, Ordering::AcqRel);
        }
        w
    };
    let Some(wc) = wc else {
        *lock(&c.ex.cur) = None;
        return libc::ENOENT;
    };
    // SAFETY: the application reads status and wr_id from its live ibv_cq_ex.
    unsafe {
        (*x).status = wc.status;
        (*x).wr_id = wc.wr_id;
    }
    *lock(&c.ex.cur) = Some(wc);
    0
}

unsafe extern "C" fn start_poll(x: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: the caller's attributes (verbs: comp_mask must be 0).
    if !attr.is_null() && unsafe { (*attr).comp_mask } != 0 {
        return libc::EINVAL;
    }
    // SAFETY: a CQ of this library (the verbs contract).
    let c = unsafe { cq(x) };
    if c.st.n.load(Ordering::Acquire) == 0 {
        // Applications spin on start_poll as on ibv_poll_cq: give the engine the CPU.
        crate::verbs::idle_backoff(&c.st);
        return libc::ENOENT;
    }
    // SAFETY: as above.
    unsafe { advance(x) }
}

unsafe extern "C" fn next_poll(x: *mut ibv_cq_ex) -> c_int {
    // SAFETY: a CQ of this library (the verbs contract).
    unsafe { advance(x) }
}

unsafe extern "C" fn end_poll(x: *mut ibv_cq_ex) {
    // SAFETY: a CQ of this library (the verbs contract).
    *lock(&unsafe { cq(x) }.ex.cur) = None;
}

/// A field of the current completion (zero when there is none: a reader called outside a
/// poll).
///
/// # Safety
/// `x` is a CQ of this library.
unsafe fn cur<T: Default>(x: *mut ibv_cq_ex, f: impl FnOnce(&ibv_wc) -> T) -> T {
    // SAFETY: the caller's CQ.
    lock(&unsafe { cq(x) }.ex.cur)
        .as_ref()
        .map(f)
        .unwrap_or_default()
}

unsafe extern "C" fn read_opcode(x: *mut ibv_cq_ex) -> ibv_wc_opcode {
    // SAFETY: a CQ of this library (the verbs contract), as for every reader below.
    unsafe { cur(x, |w| w.opcode) }
}
unsafe extern "C" fn read_vendor_err(x: *mut ibv_cq_ex) -> u32 {
    // SAFETY: as above.
    unsafe { cur(x, |w| w.vendor_err) }
}
unsafe extern "C" fn read_byte_len(x: *mut ibv_cq_ex) -> u32 {
    // SAFETY: as above.
    unsafe { cur(x, |w| w.byte_len) }
}
unsafe extern "C" fn read_imm_data(x: *mut ibv_cq_ex) -> __be32 {
    // SAFETY: as above; the union member a completion with immediate carries (big-endian as
    // stored).
    unsafe { cur(x, |w| w.__bindgen_anon_1.imm_data) }
}
unsafe extern "C" fn read_qp_num(x: *mut ibv_cq_ex) -> u32 {
    // SAFETY: as above.
    unsafe { cur(x, |w| w.qp_num) }
}
unsafe extern "C" fn read_src_qp(x: *mut ibv_cq_ex) -> u32 {
    // SAFETY: as above.
    unsafe { cur(x, |w| w.src_qp) }
}
unsafe extern "C" fn read_wc_flags(x: *mut ibv_cq_ex) -> std::os::raw::c_uint {
    // SAFETY: as above.
    unsafe { cur(x, |w| w.wc_flags) }
}
unsafe extern "C" fn read_slid(x: *mut ibv_cq_ex) -> u32 {
    // SAFETY: as above.
    unsafe { cur(x, |w| w.slid as u32) }
}
unsafe extern "C" fn read_sl(x: *mut ibv_cq_ex) -> u8 {
    // SAFETY: as above.
    unsafe { cur(x, |w| w.sl) }
}
unsafe extern "C" fn read_dlid_path_bits(x: *mut ibv_cq_ex) -> u8 {
    // SAFETY: as above.
    unsafe { cur(x, |w| w.dlid_path_bits) }
}
