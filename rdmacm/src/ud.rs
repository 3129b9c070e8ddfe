//! RDMA_PS_UDP ids (spec/cm.md §2.5): a UD connect is a service-ID resolution, answered by
//! the passive side's rdma_accept (its UD QP's QPN and rdma_cm's Q_Key) or rdma_reject.

use crate::shim;
use crate::state::*;
use crate::sys::*;
use std::ffi::c_int;

/// SIDR_REP statuses (IBTA): the QP is valid; the application refused.
pub const SIDR_SUCCESS: u8 = 0;
pub const SIDR_REJECT: u8 = 2;

pub(crate) fn is_ud(p: &IdPriv) -> bool {
    p.cm().ps == RDMA_PS_UDP
}

/// A UD id's rdma_accept / rdma_reject: the SIDR_REP (its QPN, or the parameters' when it
/// has no QP, and rdma_cm's UD Q_Key). No event follows on this side, as with Linux.
/// `pd` must hold `len` readable bytes (or be null with `len` 0).
pub(crate) fn sidr_answer(p: &IdPriv, status: u8, param_qpn: u32, pd: *const u8, len: u8) -> c_int {
    if len as usize > 136 {
        return fail(libc::EINVAL);
    }
    let qpn = crate::id::id_qpn(p, param_qpn);
    let comm = lock(&p.st).comm;
    let Some(ops) = shim::ops() else {
        return fail(libc::ENODEV);
    };
    let qpn = if status == SIDR_SUCCESS { qpn } else { 0 };
    let qkey = if status == SIDR_SUCCESS {
        RDMA_UDP_QKEY
    } else {
        0
    };
    // SAFETY: `pd` holds `len` bytes (the caller's private data).
    let r = unsafe { (ops.sidr_reply)(comm, status, qpn, qkey, pd, len) };
    if r != 0 {
        return fail(r);
    }
    lock(&p.st).phase = if status == SIDR_SUCCESS {
        Phase::Connected
    } else {
        Phase::Disconnected
    };
    0
}
