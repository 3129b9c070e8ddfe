//! The `ibv_wr_*` send API (`ibv_qp_ex`): `ibv_create_qp_ex` with `send_ops_flags`,
//! `ibv_qp_to_qp_ex`, and `ibv_wr_start` / `ibv_wr_<op>` / `ibv_wr_set_*` /
//! `ibv_wr_complete` / `ibv_wr_abort`, which `verbs.h` implements as inline functions
//! calling the function pointers of `struct ibv_qp_ex`.
//!
//! Every QP of the shim is laid out as an `ibv_qp_ex` (the `ibv_qp`, then [`ExTail`]: the
//! rest of the struct, rdma-core 44's layout, checked at compile time), so
//! `ibv_qp_to_qp_ex` returns the QP itself when it was created with send ops. Between
//! `wr_start` and `wr_complete` the work requests are built in the QP's [`Builder`]
//! (opcode, the `wr_id` and `wr_flags` the application set in the `ibv_qp_ex`, then its
//! scatter list, inline data or UD address); `wr_complete` posts them all as one
//! `ibv_send_wr` chain through the QP's own `post_send`, so they take the same path
//! (checks, inline copies, completions) as `ibv_post_send`.
//!
//! Send ops by QP type: RC: SEND, SEND_WITH_IMM, RDMA_WRITE, RDMA_WRITE_WITH_IMM, RDMA_READ,
//! ATOMIC_CMP_AND_SWP, ATOMIC_FETCH_AND_ADD; UC: the first four; UD: SEND, SEND_WITH_IMM.
//! LOCAL_INV, BIND_MW, SEND_WITH_INV, TSO and ATOMIC_WRITE are EOPNOTSUPP (the shim has no
//! memory windows, invalidation, raw packet QPs or atomic write).

use crate::state::lock;
use crate::sys::*;
use crate::verbs::Qp;
use std::mem::offset_of;
use std::os::raw::c_int;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

const TAIL_LEN: usize = std::mem::size_of::<ibv_qp_ex>() - offset_of!(ibv_qp_ex, comp_mask);

/// The fields of `ibv_qp_ex` after its `ibv_qp`, as raw storage written through
/// `*mut ibv_qp_ex`.
#[repr(C, align(8))]
pub struct ExTail([u8; TAIL_LEN]);

impl Default for ExTail {
    fn default() -> Self {
        ExTail([0; TAIL_LEN])
    }
}

// The tail sits where ibv_qp_ex's fields after qp_base are.
const _: () = assert!(offset_of!(Qp, ex) == offset_of!(ibv_qp_ex, comp_mask));
const _: () = assert!(offset_of!(Qp, ex) + TAIL_LEN == std::mem::size_of::<ibv_qp_ex>());

/// The send ops a QP type has.
fn ops_of(qp_type: u32) -> u64 {
    let sends = (IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM) as u64;
    let writes = (IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM) as u64;
    let rc_only = (IBV_QP_EX_WITH_RDMA_READ
        | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
        | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD) as u64;
    match qp_type {
        IBV_QPT_RC => sends | writes | rc_only,
        IBV_QPT_UC => sends | writes,
        IBV_QPT_UD => sends,
        // The XRC header rides in a SEND; WRITE_WITH_IMM would need an SRQ entry (xrc.rs).
        IBV_QPT_XRC_SEND => sends | IBV_QP_EX_WITH_RDMA_WRITE as u64 | rc_only,
        _ => 0,
    }
}

/// Whether a QP of `qp_type` can have `send_ops_flags` `ops`: Err(EOPNOTSUPP) otherwise.
pub fn check_ops(qp_type: u32, ops: u64) -> Result<(), c_int> {
    if ops & !ops_of(qp_type) != 0 {
        return Err(libc::EOPNOTSUPP);
    }
    Ok(())
}

/// One work request being built.
#[derive(Default)]
struct Built {
    wr: ibv_send_wr,
    sges: Vec<ibv_sge>,
    inline: Option<Vec<u8>>,
}

/// The QP's `ibv_qp_ex` state: whether it has the API, and the work requests being built.
#[derive(Default)]
pub struct Builder {
    enabled: AtomicBool,
    wrs: Mutex<Vec<Built>>,
}

// SAFETY: the raw pointers in the built work requests (AHs, the application's buffers) are
// only read on the thread that posts them, under the lock.
unsafe impl Send for Builder {}
// SAFETY: as above.
unsafe impl Sync for Builder {}

/// # Safety
/// `x` is a QP of this library.
unsafe fn qp<'a>(x: *mut ibv_qp_ex) -> &'a Qp {
    // SAFETY: the caller's QP; Qp starts with the ibv_qp_ex's qp_base.
    unsafe { &*(x as *const Qp) }
}

/// Give QP `q` (just created with `send_ops_flags`) the `ibv_qp_ex` API.
///
/// # Safety
/// `q` is a QP this library just created.
pub unsafe fn enable(q: *mut ibv_qp) {
    let x = q as *mut ibv_qp_ex;
    // SAFETY: every QP of this library is laid out as an ibv_qp_ex (checked above).
    unsafe {
        qp(x).wr.enabled.store(true, Ordering::Release);
        (*x).wr_send = Some(wr_send);
        (*x).wr_send_imm = Some(wr_send_imm);
        (*x).wr_rdma_write = Some(wr_rdma_write);
        (*x).wr_rdma_write_imm = Some(wr_rdma_write_imm);
        (*x).wr_rdma_read = Some(wr_rdma_read);
        (*x).wr_atomic_cmp_swp = Some(wr_atomic_cmp_swp);
        (*x).wr_atomic_fetch_add = Some(wr_atomic_fetch_add);
        (*x).wr_set_ud_addr = Some(wr_set_ud_addr);
        (*x).wr_set_xrc_srqn = Some(wr_set_xrc_srqn);
        (*x).wr_set_sge = Some(wr_set_sge);
        (*x).wr_set_sge_list = Some(wr_set_sge_list);
        (*x).wr_set_inline_data = Some(wr_set_inline_data);
        (*x).wr_set_inline_data_list = Some(wr_set_inline_data_list);
        (*x).wr_start = Some(wr_start);
        (*x).wr_complete = Some(wr_complete);
        (*x).wr_abort = Some(wr_abort);
    }
}

/// `ibv_qp_to_qp_ex`: the QP as an `ibv_qp_ex` if it was created with send ops.
///
/// # Safety
/// `q` is null or a QP of this library.
pub unsafe fn to_qp_ex(q: *mut ibv_qp) -> *mut ibv_qp_ex {
    if q.is_null() {
        return null_mut();
    }
    // SAFETY: the caller's QP.
    let enabled = unsafe { qp(q as *mut ibv_qp_ex) }
        .wr
        .enabled
        .load(Ordering::Acquire);
    if enabled {
        q as *mut ibv_qp_ex
    } else {
        null_mut()
    }
}

unsafe extern "C" fn wr_start(x: *mut ibv_qp_ex) {
    // SAFETY: a QP of this library (the verbs contract), as in every function below.
    lock(&unsafe { qp(x) }.wr.wrs).clear();
}

unsafe extern "C" fn wr_abort(x: *mut ibv_qp_ex) {
    // SAFETY: as above.
    lock(&unsafe { qp(x) }.wr.wrs).clear();
}

/// Start a new work request of `opcode`, with the `wr_id` and `wr_flags` the application
/// set in the `ibv_qp_ex`; `f` fills in the operation's fields.
unsafe fn begin(x: *mut ibv_qp_ex, opcode: u32, f: impl FnOnce(&mut ibv_send_wr)) {
    // SAFETY: as above; the application's ibv_qp_ex fields.
    let (wr_id, flags) = unsafe { ((*x).wr_id, (*x).wr_flags) };
    let mut wr = ibv_send_wr {
        wr_id,
        opcode,
        send_flags: flags,
        ..Default::default()
    };
    f(&mut wr);
    // SAFETY: as above.
    lock(&unsafe { qp(x) }.wr.wrs).push(Built {
        wr,
        ..Default::default()
    });
}

/// Change the work request being built (none: nothing to change, wr_complete posts what
/// there is).
unsafe fn current(x: *mut ibv_qp_ex, f: impl FnOnce(&mut Built)) {
    // SAFETY: as above.
    if let Some(b) = lock(&unsafe { qp(x) }.wr.wrs).last_mut() {
        f(b);
    }
}

unsafe extern "C" fn wr_send(x: *mut ibv_qp_ex) {
    // SAFETY: as above.
    unsafe { begin(x, IBV_WR_SEND, |_| {}) }
}
unsafe extern "C" fn wr_send_imm(x: *mut ibv_qp_ex, imm: __be32) {
    // SAFETY: as above.
    unsafe {
        begin(x, IBV_WR_SEND_WITH_IMM, |w| {
            w.__bindgen_anon_1.imm_data = imm
        })
    }
}
unsafe extern "C" fn wr_rdma_write(x: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    // SAFETY: as above.
    unsafe {
        begin(x, IBV_WR_RDMA_WRITE, |w| {
            w.wr.rdma.rkey = rkey;
            w.wr.rdma.remote_addr = addr;
        })
    }
}
unsafe extern "C" fn wr_rdma_write_imm(x: *mut ibv_qp_ex, rkey: u32, addr: u64, imm: __be32) {
    // SAFETY: as above.
    unsafe {
        begin(x, IBV_WR_RDMA_WRITE_WITH_IMM, |w| {
            w.wr.rdma.rkey = rkey;
            w.wr.rdma.remote_addr = addr;
            w.__bindgen_anon_1.imm_data = imm;
        })
    }
}
unsafe extern "C" fn wr_rdma_read(x: *mut ibv_qp_ex, rkey: u32, addr: u64) {
    // SAFETY: as above.
    unsafe {
        begin(x, IBV_WR_RDMA_READ, |w| {
            w.wr.rdma.rkey = rkey;
            w.wr.rdma.remote_addr = addr;
        })
    }
}
unsafe extern "C" fn wr_atomic_cmp_swp(
    x: *mut ibv_qp_ex,
    rkey: u32,
    addr: u64,
    compare: u64,
    swap: u64,
) {
    // SAFETY: as above.
    unsafe {
        begin(x, IBV_WR_ATOMIC_CMP_AND_SWP, |w| {
            w.wr.atomic.rkey = rkey;
            w.wr.atomic.remote_addr = addr;
            w.wr.atomic.compare_add = compare;
            w.wr.atomic.swap = swap;
        })
    }
}
unsafe extern "C" fn wr_atomic_fetch_add(x: *mut ibv_qp_ex, rkey: u32, addr: u64, add: u64) {
    // SAFETY: as above.
    unsafe {
        begin(x, IBV_WR_ATOMIC_FETCH_AND_ADD, |w| {
            w.wr.atomic.rkey = rkey;
            w.wr.atomic.remote_addr = addr;
            w.wr.atomic.compare_add = add;
        })
    }
}
unsafe extern "C" fn wr_set_ud_addr(x: *mut ibv_qp_ex, ah: *mut ibv_ah, qpn: u32, qkey: u32) {
    // SAFETY: as above.
    unsafe {
        current(x, |b| {
            b.wr.wr.ud.ah = ah;
            b.wr.wr.ud.remote_qpn = qpn;
            b.wr.wr.ud.remote_qkey = qkey;
        })
    }
}
unsafe extern "C" fn wr_set_xrc_srqn(x: *mut ibv_qp_ex, srqn: u32) {
    // SAFETY: as above.
    unsafe { current(x, |b| b.wr.qp_type.xrc.remote_srqn = srqn) }
}
unsafe extern "C" fn wr_set_sge(x: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    // SAFETY: as above.
    unsafe {
        current(x, |b| {
            b.inline = None;
            b.sges = vec![ibv_sge { addr, length, lkey }];
        })
    }
}
unsafe extern "C" fn wr_set_sge_list(x: *mut ibv_qp_ex, n: usize, list: *const ibv_sge) {
    let sges = if n == 0 || list.is_null() {
        Vec::new()
    } else {
        // SAFETY: the caller's array of `n` SGEs (the verbs contract).
        unsafe { std::slice::from_raw_parts(list, n) }.to_vec()
    };
    // SAFETY: as above.
    unsafe {
        current(x, |b| {
            b.inline = None;
            b.sges = sges;
        })
    }
}

/// The bytes of `n` application buffers, copied now (inline data is the caller's only
/// until the call returns).
///
/// # Safety
/// `list` holds `n` readable buffers.
unsafe fn gather(n: usize, list: *const ibv_data_buf) -> Vec<u8> {
    let mut v = Vec::new();
    if n == 0 || list.is_null() {
        return v;
    }
    // SAFETY: the caller's array of `n` buffers.
    for d in unsafe { std::slice::from_raw_parts(list, n) } {
        // SAFETY: each names readable application memory (the verbs contract).
        unsafe { crate::mr::copy_inline(d.addr as u64, d.length, &mut v) };
    }
    v
}

unsafe extern "C" fn wr_set_inline_data(
    x: *mut ibv_qp_ex,
    addr: *mut std::ffi::c_void,
    len: usize,
) {
    let one = ibv_data_buf { addr, length: len };
    // SAFETY: the caller's buffer, then as above.
    unsafe {
        let data = gather(1, &one);
        current(x, |b| {
            b.sges.clear();
            b.inline = Some(data);
        })
    }
}
unsafe extern "C" fn wr_set_inline_data_list(
    x: *mut ibv_qp_ex,
    n: usize,
    list: *const ibv_data_buf,
) {
    // SAFETY: the caller's buffers, then as above.
    unsafe {
        let data = gather(n, list);
        current(x, |b| {
            b.sges.clear();
            b.inline = Some(data);
        })
    }
}

/// Post what was built as one chain through the QP's `post_send`; 0 or its error.
unsafe extern "C" fn wr_complete(x: *mut ibv_qp_ex) -> c_int {
    // SAFETY: as above.
    let q = unsafe { qp(x) };
    let mut built = std::mem::take(&mut *lock(&q.wr.wrs));
    if built.is_empty() {
        return 0;
    }
    for b in built.iter_mut() {
        if let Some(data) = &b.inline {
            // Inline data: one SGE over the shim's copy, flagged inline (read at post).
            b.sges = vec![ibv_sge {
                addr: data.as_ptr() as u64,
                length: data.len() as u32,
                lkey: 0,
            }];
            b.wr.send_flags |= IBV_SEND_INLINE;
        }
        b.wr.num_sge = b.sges.len() as c_int;
        b.wr.sg_list = if b.sges.is_empty() {
            null_mut()
        } else {
            b.sges.as_mut_ptr()
        };
    }
    let n = built.len();
    for i in 0..n - 1 {
        let next: *mut ibv_send_wr = &mut built[i + 1].wr;
        built[i].wr.next = next;
    }
    let mut bad: *mut ibv_send_wr = null_mut();
    // SAFETY: the QP's context and its ops table (this library's); the chain and its SGEs
    // live in `built` until post_send returns.
    unsafe {
        let ctx = (*x).qp_base.context;
        match (*ctx).ops.post_send {
            Some(post) => post(x as *mut ibv_qp, &mut built[0].wr, &mut bad),
            None => libc::EOPNOTSUPP,
        }
    }
}
