//! XRC: domains and XRC SRQs (`ibv_open_xrcd`, `ibv_close_xrcd`, `ibv_create_srq_ex`,
//! `ibv_get_srq_num`, reached through the `verbs_context` operations verbs.h's inline
//! functions call) and XRC QPs (created in `verbs.rs`).
//!
//! An XRC_SEND QP and the XRC_RECV QP it is connected to are a reliable stream like an RC
//! pair's. Each SEND carries, first in its payload, the [`HDR`]-byte XRC header: the target
//! SRQ's number from the work request (spec/transport.md §3.7). The initiator copies header
//! and data into one shim-owned region at post time ([`message`]); the target keeps virtual
//! SRQ receives on its stream, bound to no SRQ until the header names one of its domain
//! (`srq.rs`), and reports the completion on that SRQ's CQ. WRITE, READ and atomics carry
//! no header: they reach the target's memory through the XRC_RECV QP, whose remote accesses
//! are allowed to the PDs of its domain's SRQs (`mr.rs`). WRITE_WITH_IMM (it would need an
//! SRQ entry) is EOPNOTSUPP at post. `ibv_open_qp` gives another handle to an XRC_RECV QP of
//! the domain ([`open_qp`]): the QP lives until its last handle is destroyed, and keeps the
//! domain busy until then.
//!
//! Both devices offer XRC (`IBV_DEVICE_XRC`). On the RoCEv2 device the pair is the engine's
//! IBTA XRC initiator and target (spec/rocev2.md §6.10): the SRQ number rides in every
//! request's XRCETH instead of the message, and the engine hands the target the same 4 bytes
//! first in the SEND, so the receive side here is the same for both.
//!
//! Sharing a domain through a file (`fd` ≠ -1), as verbs defines it: every `ibv_open_xrcd`
//! of one device naming the same inode gets the same domain, `O_CREAT` creates it when there
//! is none, `O_EXCL` with `O_CREAT` refuses an existing one, and without `O_CREAT` a missing
//! one is refused (EINVAL, as the kernel answers). The sharing is **per process**: each
//! process runs its own engine, so another process opening the same file gets a domain of
//! its own (its SRQ numbers are its own too).

use crate::srq::SrqState;
use crate::state::{global, lock, Mode};
use crate::sys::*;
use crate::verbs::{cq_of, ctx_of, fail, new_srq, Srq};
use ferroce_transport::SgList;
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// One XRC domain (shared by the handles that opened it).
pub struct XrcdState {
    /// The device's mode (an SRQ of another device cannot join it).
    pub mode: Mode,
    /// The (st_dev, st_ino) it is shared through, if opened with a file.
    pub inode: Option<(u64, u64)>,
    /// Open `ibv_xrcd` handles.
    pub handles: AtomicU32,
    /// SRQs and XRC_RECV QP handles in the domain: it cannot be closed while there are any.
    pub users: AtomicU32,
    /// The XRC_RECV QPs of the domain: QPN → the live `ibv_qp` handles of each (the one
    /// `ibv_create_qp_ex` gave, and those `ibv_open_qp` gave), as addresses.
    pub qps: Mutex<HashMap<u32, Vec<usize>>>,
}

/// What an XRC QP is.
pub enum XrcRole {
    /// XRC_SEND: each SEND carries the XRC header naming the target's SRQ.
    Send,
    /// XRC_RECV in this domain: its messages land in the SRQ their header names.
    Recv(Arc<XrcdState>),
}

/// The XRC header's length: the target SRQ's number, big-endian, first in every message
/// of an XRC stream (spec/transport.md §3.7).
pub const HDR: usize = 4;

/// The domain of an XRCD handle.
///
/// # Safety
/// `x` is a live XRCD this library returned.
pub unsafe fn state_of(x: *mut ibv_xrcd) -> Arc<XrcdState> {
    // SAFETY: ibv_xrcd is the first field of our Xrcd.
    unsafe { (*(x as *const Xrcd)).st.clone() }
}

/// A domain's identity (its shared state's address), as SRQs and slots name it.
pub fn domain_id(x: &Arc<XrcdState>) -> usize {
    Arc::as_ptr(x) as usize
}

/// XRC SRQs by number.
fn srqs() -> &'static Mutex<HashMap<u32, Weak<SrqState>>> {
    static T: OnceLock<Mutex<HashMap<u32, Weak<SrqState>>>> = OnceLock::new();
    T.get_or_init(Default::default)
}

/// The live XRC SRQ numbered `num` if it belongs to domain `domain`.
pub fn srq_by_num(num: u32, domain: usize) -> Option<Arc<SrqState>> {
    let q = lock(srqs()).get(&num).and_then(Weak::upgrade)?;
    let ok = q.xrc.as_ref().is_some_and(|(_, d)| *d == domain) && !q.dead.load(Ordering::Relaxed);
    ok.then_some(q)
}

/// An XRC initiator's SEND as its stream carries it: the XRC header naming target SRQ `srqn`,
/// then the bytes of `sgl` (read under their lkeys, or as inline data straight from the
/// application's memory). A bad lkey is EINVAL at post time.
pub fn message(srqn: u32, sgl: &SgList, inline: bool) -> Result<Vec<u8>, c_int> {
    let total: usize = sgl.iter().map(|s| s.len as usize).sum();
    let mut data = Vec::with_capacity(HDR + total);
    data.extend_from_slice(&(srqn & 0x00ff_ffff).to_be_bytes());
    let mrs = global().mrs.read().unwrap_or_else(|p| p.into_inner());
    for s in sgl {
        if inline {
            // SAFETY: inline data is read from the application's memory at post time (the
            // verbs contract: readable, not necessarily registered).
            unsafe { crate::mr::copy_inline(s.addr, s.len as usize, &mut data) };
        } else {
            let at = data.len();
            data.resize(at + s.len as usize, 0);
            mrs.read_local_checked(s.lkey, s.addr, &mut data[at..])
                .map_err(|_| libc::EINVAL)?;
        }
    }
    Ok(data)
}

pub fn register_srq(num: u32, q: &Arc<SrqState>) {
    lock(srqs()).insert(num, Arc::downgrade(q));
}

pub fn forget_srq(num: u32) {
    lock(srqs()).remove(&num);
}

/// An `ibv_xrcd` handle: `ibv_xrcd` first (applications only see that).
#[repr(C)]
pub struct Xrcd {
    pub xrcd: ibv_xrcd,
    pub st: Arc<XrcdState>,
}

/// Domains shared through files, by (device mode, st_dev, st_ino).
type InodeTable = Mutex<HashMap<(usize, u64, u64), Weak<XrcdState>>>;

fn by_inode() -> &'static InodeTable {
    static T: OnceLock<InodeTable> = OnceLock::new();
    T.get_or_init(Default::default)
}

/// A new SRQ number: 24 bits as verbs carries it, never 0, unique in the process.
pub fn new_srq_num() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed).wrapping_add(1) & 0x00ff_ffff;
        if n != 0 {
            return n;
        }
    }
}

fn inode_of(fd: c_int) -> Result<(u64, u64), c_int> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: fstat writes a whole `stat` into our buffer when it succeeds.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return Err(libc::EBADF);
    }
    // SAFETY: fstat succeeded, so `st` is initialised.
    let st = unsafe { st.assume_init() };
    Ok((st.st_dev, st.st_ino))
}

/// # Safety
/// Called by verbs.h with the objects this library returned (or null).
pub(crate) unsafe extern "C" fn open_xrcd(
    c: *mut ibv_context,
    a: *mut ibv_xrcd_init_attr,
) -> *mut ibv_xrcd {
    // SAFETY: a context this library returned (ctx_of checks null).
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        return fail(libc::EINVAL, "ibv_open_xrcd: no context");
    };
    if a.is_null() {
        return fail(libc::EINVAL, "ibv_open_xrcd: no attributes");
    }
    // SAFETY: the caller's init attributes.
    let a = unsafe { &*a };
    if a.comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED {
        return fail(libc::EOPNOTSUPP, "ibv_open_xrcd: unknown comp_mask bits");
    }
    let need = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
    if a.comp_mask & need != need || a.oflags & !(libc::O_CREAT | libc::O_EXCL) != 0 {
        return fail(
            libc::EINVAL,
            "ibv_open_xrcd: fd and oflags (O_CREAT, O_EXCL)",
        );
    }
    let create = a.oflags & libc::O_CREAT != 0;
    let st = if a.fd == -1 {
        // A private domain: only O_CREAT makes sense.
        if !create {
            return fail(libc::EINVAL, "ibv_open_xrcd: fd -1 without O_CREAT");
        }
        Arc::new(XrcdState {
            mode: ctx.dev.mode,
            inode: None,
            handles: AtomicU32::new(1),
            users: AtomicU32::new(0),
            qps: Default::default(),
        })
    } else {
        let (dev, ino) = match inode_of(a.fd) {
            Ok(k) => k,
            Err(e) => return fail(e, "ibv_open_xrcd: fd"),
        };
        let key = (ctx.dev.mode.index(), dev, ino);
        let mut t = lock(by_inode());
        match t.get(&key).and_then(Weak::upgrade) {
            Some(_) if create && a.oflags & libc::O_EXCL != 0 => {
                return fail(libc::EINVAL, "ibv_open_xrcd: O_EXCL and the domain exists");
            }
            Some(st) => {
                st.handles.fetch_add(1, Ordering::SeqCst);
                st
            }
            None if !create => {
                return fail(libc::EINVAL, "ibv_open_xrcd: no domain and no O_CREAT");
            }
            None => {
                let st = Arc::new(XrcdState {
                    mode: ctx.dev.mode,
                    inode: Some((dev, ino)),
                    handles: AtomicU32::new(1),
                    users: AtomicU32::new(0),
                    qps: Default::default(),
                });
                t.insert(key, Arc::downgrade(&st));
                st
            }
        }
    };
    let b = Box::new(Xrcd {
        xrcd: ibv_xrcd { context: c },
        st,
    });
    Box::into_raw(b) as *mut ibv_xrcd
}

/// # Safety
/// Called by verbs.h with the objects this library returned (or null).
pub(crate) unsafe extern "C" fn close_xrcd(x: *mut ibv_xrcd) -> c_int {
    if x.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: an XRCD handle from open_xrcd: ibv_xrcd is the first field of our Xrcd.
    let st = unsafe { &(*(x as *const Xrcd)).st };
    {
        // The table lock orders this against a concurrent open of the same inode.
        let mut t = lock(by_inode());
        if st.handles.load(Ordering::SeqCst) == 1 {
            // The last handle: the domain goes away, which it may not while in use.
            if st.users.load(Ordering::SeqCst) != 0 {
                return libc::EBUSY;
            }
            if let Some((dev, ino)) = st.inode {
                t.remove(&(st.mode.index(), dev, ino));
            }
        }
        st.handles.fetch_sub(1, Ordering::SeqCst);
    }
    // SAFETY: the box open_xrcd leaked, closed once by the verbs contract.
    drop(unsafe { Box::from_raw(x as *mut Xrcd) });
    0
}

/// # Safety
/// Called by verbs.h with the objects this library returned (or null).
pub(crate) unsafe extern "C" fn create_srq_ex(
    c: *mut ibv_context,
    a: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    // SAFETY: a context this library returned (ctx_of checks null).
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        return fail(libc::EINVAL, "ibv_create_srq_ex: no context");
    };
    if a.is_null() {
        return fail(libc::EINVAL, "ibv_create_srq_ex: no attributes");
    }
    // SAFETY: the caller's init attributes (max_wr/max_sge are written back).
    let a = unsafe { &mut *a };
    let known = IBV_SRQ_INIT_ATTR_TYPE
        | IBV_SRQ_INIT_ATTR_PD
        | IBV_SRQ_INIT_ATTR_XRCD
        | IBV_SRQ_INIT_ATTR_CQ;
    if a.comp_mask & !known != 0 {
        return fail(
            libc::EOPNOTSUPP,
            "ibv_create_srq_ex: tag matching and unknown comp_mask bits",
        );
    }
    let ty = if a.comp_mask & IBV_SRQ_INIT_ATTR_TYPE != 0 {
        a.srq_type
    } else {
        IBV_SRQT_BASIC
    };
    if a.comp_mask & IBV_SRQ_INIT_ATTR_PD == 0 || a.pd.is_null() {
        return fail(libc::EINVAL, "ibv_create_srq_ex: no PD");
    }
    // SAFETY: a live PD.
    if unsafe { (*a.pd).context } != c {
        return fail(libc::EINVAL, "ibv_create_srq_ex: PD of another context");
    }
    let xrcd = match ty {
        IBV_SRQT_BASIC => None,
        IBV_SRQT_XRC => {
            let has = IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
            if a.comp_mask & has != has || a.xrcd.is_null() || a.cq.is_null() {
                return fail(
                    libc::EINVAL,
                    "ibv_create_srq_ex: XRC needs an XRCD and a CQ",
                );
            }
            // SAFETY: an XRCD handle from open_xrcd: ibv_xrcd is the first field of our Xrcd.
            let x = unsafe { &*(a.xrcd as *const Xrcd) };
            if x.st.mode != ctx.dev.mode {
                return fail(libc::EINVAL, "ibv_create_srq_ex: XRCD of another device");
            }
            // SAFETY: a CQ this library returned (cq_of checks null).
            let Some(cq) = (unsafe { cq_of(a.cq) }) else {
                return fail(libc::EINVAL, "ibv_create_srq_ex: CQ");
            };
            Some((x.st.clone(), cq.st.clone()))
        }
        _ => return fail(libc::EOPNOTSUPP, "ibv_create_srq_ex: tag-matching SRQ"),
    };
    // SAFETY: a live PD of this context.
    let xrc = xrcd.as_ref().map(|(x, cq)| (cq.clone(), domain_id(x)));
    let mut b = match unsafe { new_srq(a.pd, &mut a.attr, a.srq_context, xrc) } {
        Ok(b) => b,
        Err(e) => return fail(e, "ibv_create_srq_ex: capabilities"),
    };
    if let Some((x, _)) = xrcd {
        // SAFETY: a live PD of this context (checked above).
        let pd = unsafe { (*a.pd).handle };
        global()
            .mrs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .add_xrc_pd(domain_id(&x), pd);
        x.users.fetch_add(1, Ordering::SeqCst);
        b.xrcd = Some(x);
        register_srq(b.num, &b.st);
    }
    Box::into_raw(b) as *mut ibv_srq
}

/// # Safety
/// Called by verbs.h with the objects this library returned (or null).
pub(crate) unsafe extern "C" fn get_srq_num(srq: *mut ibv_srq, num: *mut u32) -> c_int {
    if srq.is_null() || num.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: SRQs come from ibv_create_srq(_ex): ibv_srq is the first field of our Srq; the
    // caller's out-parameter.
    unsafe { *num = (*(srq as *const Srq)).num };
    0
}

/// A new handle of XRC_RECV QP `qp_ptr` (`ibv_create_qp_ex`): the domain holds it.
pub fn register_handle(x: &XrcdState, qpn: u32, qp_ptr: usize) {
    lock(&x.qps).entry(qpn).or_default().push(qp_ptr);
}

/// Handle `qp_ptr` of XRC_RECV QP `qpn` is being destroyed: another live handle of the QP, if
/// any (the QP lives on, `None`: it goes).
pub fn forget_handle(x: &XrcdState, qpn: u32, qp_ptr: usize) -> Option<usize> {
    let mut t = lock(&x.qps);
    let v = t.get_mut(&qpn)?;
    v.retain(|&p| p != qp_ptr);
    match v.first() {
        Some(&other) => Some(other),
        None => {
            t.remove(&qpn);
            None
        }
    }
}

/// `ibv_open_qp`: another handle of the XRC_RECV QP numbered `qp_num` in domain `xrcd`
/// (verbs' way to share a target QP through its domain). The handle is an `ibv_qp` of its
/// own (its `qp_context`, no PD or CQs) on the same QP; EINVAL when the domain has no such
/// QP, for another QP type or a missing attribute.
///
/// # Safety
/// Called by verbs.h with the objects this library returned (or null).
pub(crate) unsafe extern "C" fn open_qp(
    c: *mut ibv_context,
    a: *mut ibv_qp_open_attr,
) -> *mut ibv_qp {
    // SAFETY: a context this library returned (ctx_of checks null).
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        return fail(libc::EINVAL, "ibv_open_qp: no context");
    };
    if a.is_null() {
        return fail(libc::EINVAL, "ibv_open_qp: no attributes");
    }
    // SAFETY: the caller's attributes.
    let a = unsafe { &*a };
    if a.comp_mask & !(IBV_QP_OPEN_ATTR_RESERVED - 1) != 0 {
        return fail(libc::EOPNOTSUPP, "ibv_open_qp: unknown comp_mask bits");
    }
    let need = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
    if a.comp_mask & need != need || a.xrcd.is_null() || a.qp_type != IBV_QPT_XRC_RECV {
        return fail(
            libc::EINVAL,
            "ibv_open_qp: an XRC_RECV QP number and its XRCD",
        );
    }
    // SAFETY: an XRCD handle from open_xrcd.
    let x = unsafe { state_of(a.xrcd) };
    if x.mode != ctx.dev.mode {
        return fail(libc::EINVAL, "ibv_open_qp: XRCD of another device");
    }
    let mut t = lock(&x.qps);
    let Some(&src) = t.get(&a.qp_num).and_then(|v| v.first()) else {
        return fail(libc::EINVAL, "ibv_open_qp: no such QP in the domain");
    };
    let ctx_of_qp = (a.comp_mask & IBV_QP_OPEN_ATTR_CONTEXT != 0).then_some(a.qp_context);
    // SAFETY: `src` is a live handle of the QP (handles leave the table before they are
    // freed, under this lock).
    let h = unsafe { crate::verbs::another_handle(src as *const crate::verbs::Qp, c, ctx_of_qp) };
    t.entry(a.qp_num).or_default().push(h as usize);
    x.users.fetch_add(1, Ordering::SeqCst);
    h
}
