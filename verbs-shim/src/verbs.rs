//! The verbs entry points (rdma-core 44 ABI). Each `ibv_*` function here is exported as
//! `ferroce_v_ibv_*` and bound to its versioned name (`ibv_*@@IBVERBS_x`) in `exports.rs`.
//!
//! Objects: every verbs object the application sees is the first field of a `#[repr(C)]`
//! shim struct allocated here (Box), so the application's pointer is also ours. Pointers the
//! application passes in are trusted as verbs trusts them: they must be objects this library
//! returned and has not freed (the C ABI contract every provider relies on).

#![allow(clippy::missing_safety_doc)]

use crate::mr::copy_inline;
use crate::state::{
    self, dbg_log, engine, global, lock, ChannelState, CqState, Mode, Pending, QpInner, QpShared,
    WrMeta,
};
use crate::sys::*;
use ferroce_dataplane::engine::{Command, TransportFn};
use ferroce_transport::{RecvWr, SendOp, SendWr, SgList, Sge};
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::mem::{offset_of, size_of};
use std::net::Ipv4Addr;
use std::ptr::{null_mut, write_bytes};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// ferroce's own vendor id: perftest keeps to `ibv_post_send` for unknown vendors (it takes
/// mlx5/efa paths only for theirs).
pub const VENDOR_ID: u32 = 0x00fe_0ce0 & 0x00ff_ffff;
pub const VENDOR_PART_ID: u32 = 0x0001;

fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

pub(crate) fn fail<T>(e: c_int, what: &str) -> *mut T {
    if !what.is_empty() {
        dbg_log!("{what}: {}", std::io::Error::from_raw_os_error(e));
    }
    set_errno(e);
    null_mut()
}

// ---------------------------------------------------------------------------------------
// Devices
// ---------------------------------------------------------------------------------------

/// A device: `ibv_device` first.
#[repr(C)]
pub struct Dev {
    pub dev: ibv_device,
    pub mode: Mode,
    pub index: c_int,
    pub guid: u64,
    pub name: &'static str,
}

pub const DEVICE_NAMES: [&str; 2] = ["ferroce0", "ferroce0_rocev2"];

fn fill(dst: &mut [c_char], s: &str) {
    for (d, b) in dst.iter_mut().zip(s.bytes().chain(std::iter::once(0))) {
        *d = b as c_char;
    }
}

fn devices() -> &'static [usize; 2] {
    static DEVS: OnceLock<[usize; 2]> = OnceLock::new();
    DEVS.get_or_init(|| {
        let mk = |i: usize, mode: Mode| {
            let mut d = Box::new(Dev {
                dev: ibv_device::default(),
                mode,
                index: i as c_int,
                // Node GUID from the local address (GID 0 names the host through it).
                guid: crate::device::node_guid(
                    crate::config::local_ip().unwrap_or(Ipv4Addr::UNSPECIFIED),
                    i,
                ),
                name: DEVICE_NAMES[i],
            });
            d.dev.node_type = IBV_NODE_CA;
            d.dev.transport_type = IBV_TRANSPORT_IB;
            fill(&mut d.dev.name, DEVICE_NAMES[i]);
            fill(&mut d.dev.dev_name, &crate::device::uverbs_name(i));
            fill(
                &mut d.dev.dev_path,
                &format!(
                    "/sys/class/infiniband_verbs/{}",
                    crate::device::uverbs_name(i)
                ),
            );
            fill(
                &mut d.dev.ibdev_path,
                &format!("/sys/class/infiniband/{}", DEVICE_NAMES[i]),
            );
            Box::into_raw(d) as usize
        };
        [mk(0, Mode::Native), mk(1, Mode::Roce)]
    })
}

/// # Safety
/// `d` is null or a pointer from this library's device list.
unsafe fn dev_of(d: *mut ibv_device) -> Option<&'static Dev> {
    if d.is_null() || !devices().contains(&(d as usize)) {
        return None;
    }
    // SAFETY: one of our leaked, never-freed Dev boxes (checked above).
    Some(unsafe { &*(d as *const Dev) })
}

#[export_name = "ferroce_v_ibv_get_device_list"]
pub unsafe extern "C" fn ibv_get_device_list(num: *mut c_int) -> *mut *mut ibv_device {
    let d = devices();
    let list: Box<[*mut ibv_device]> =
        vec![d[0] as *mut ibv_device, d[1] as *mut ibv_device, null_mut()].into_boxed_slice();
    if !num.is_null() {
        // SAFETY: the caller passes a writable int or NULL.
        unsafe { *num = 2 };
    }
    Box::into_raw(list) as *mut *mut ibv_device
}

#[export_name = "ferroce_v_ibv_free_device_list"]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    if list.is_null() {
        return;
    }
    // SAFETY: `list` came from ibv_get_device_list: a boxed slice of 3 pointers.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(list, 3)) });
}

#[export_name = "ferroce_v_ibv_get_device_name"]
pub unsafe extern "C" fn ibv_get_device_name(d: *mut ibv_device) -> *const c_char {
    match unsafe { dev_of(d) } {
        Some(dev) => dev.dev.name.as_ptr(),
        None => fail::<c_char>(libc::EINVAL, ""),
    }
}

#[export_name = "ferroce_v_ibv_get_device_guid"]
pub unsafe extern "C" fn ibv_get_device_guid(d: *mut ibv_device) -> u64 {
    // SAFETY: `d` is a device pointer the application got from ibv_get_device_list (the verbs contract); dev_of checks it is one of ours.
    unsafe { dev_of(d) }.map(|x| x.guid.to_be()).unwrap_or(0)
}

#[export_name = "ferroce_v_ibv_get_device_index"]
pub unsafe extern "C" fn ibv_get_device_index(d: *mut ibv_device) -> c_int {
    // SAFETY: `d` is a device pointer the application got from ibv_get_device_list (the verbs contract); dev_of checks it is one of ours.
    unsafe { dev_of(d) }.map(|x| x.index).unwrap_or(-1)
}

// ---------------------------------------------------------------------------------------
// Context
// ---------------------------------------------------------------------------------------

/// A context: `verbs_context` first (it ends with the `ibv_context` applications see).
#[repr(C)]
pub struct Ctx {
    pub vctx: verbs_context,
    pub dev: &'static Dev,
    /// Its asynchronous events (CQ overruns, QPs that cannot go on).
    pub events: Arc<state::AsyncEvents>,
}

/// # Safety
/// `c` is null or a context this library created (its `ibv_context` is the tail of our `Ctx`).
pub(crate) unsafe fn ctx_of<'a>(c: *mut ibv_context) -> Option<&'a Ctx> {
    if c.is_null() {
        return None;
    }
    // SAFETY: applications only pass contexts from ibv_open_device: the ibv_context is the
    // last field of the verbs_context at the start of our Ctx (container_of).
    Some(unsafe { &*((c as *mut u8).sub(offset_of!(verbs_context, context)) as *const Ctx) })
}

fn eventfd(flags: c_int) -> c_int {
    // SAFETY: plain syscall wrapper.
    unsafe { libc::eventfd(0, flags | libc::EFD_CLOEXEC) }
}

#[export_name = "ferroce_v_ibv_open_device"]
pub unsafe extern "C" fn ibv_open_device(d: *mut ibv_device) -> *mut ibv_context {
    let Some(dev) = (unsafe { dev_of(d) }) else {
        return fail(libc::ENODEV, "ibv_open_device");
    };
    // SAFETY: an all-zero verbs_context is valid (pointers NULL, options None, and glibc's
    // PTHREAD_MUTEX_INITIALIZER is all zeros).
    let async_fd = eventfd(0);
    let mut ctx = Box::new(Ctx {
        vctx: unsafe { std::mem::zeroed() },
        dev,
        events: Arc::new(state::AsyncEvents::new(async_fd)),
    });
    let v = &mut ctx.vctx;
    v.sz = size_of::<verbs_context>();
    v.query_port = Some(vctx_query_port);
    v.query_device_ex = Some(vctx_query_device_ex);
    v.create_qp_ex = Some(vctx_create_qp_ex);
    v.create_cq_ex = Some(crate::cq_ex::create_cq_ex);
    v.create_srq_ex = Some(crate::xrc::create_srq_ex);
    v.get_srq_num = Some(crate::xrc::get_srq_num);
    v.open_xrcd = Some(crate::xrc::open_xrcd);
    v.close_xrcd = Some(crate::xrc::close_xrcd);
    v.open_qp = Some(crate::xrc::open_qp);
    let c = &mut v.context;
    c.device = d;
    c.cmd_fd = eventfd(0);
    c.async_fd = async_fd;
    c.num_comp_vectors = 1;
    // "Extended" context: verbs.h's inline calls go through verbs_context.
    c.abi_compat = usize::MAX as *mut c_void;
    c.ops.poll_cq = Some(op_poll_cq);
    c.ops.req_notify_cq = Some(op_req_notify_cq);
    c.ops.post_send = Some(op_post_send);
    c.ops.post_recv = Some(op_post_recv);
    c.ops.post_srq_recv = Some(op_post_srq_recv);
    // SAFETY: initialise the embedded mutex explicitly (applications may lock it).
    unsafe { libc::pthread_mutex_init(std::ptr::addr_of_mut!(c.mutex) as *mut _, null_mut()) };
    global().open_contexts.fetch_add(1, Ordering::SeqCst);
    let p = Box::into_raw(ctx);
    // SAFETY: p is the live box just leaked; return the embedded ibv_context.
    unsafe { std::ptr::addr_of_mut!((*p).vctx.context) }
}

#[export_name = "ferroce_v_ibv_close_device"]
pub unsafe extern "C" fn ibv_close_device(c: *mut ibv_context) -> c_int {
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        return libc::EINVAL;
    };
    let p = ctx as *const Ctx as *mut Ctx;
    // SAFETY: p is the Ctx box from ibv_open_device, closed once by the verbs contract.
    let ctx = unsafe { Box::from_raw(p) };
    // SAFETY: our own eventfds.
    unsafe {
        libc::close(ctx.vctx.context.cmd_fd);
        libc::close(ctx.vctx.context.async_fd);
    }
    if global().open_contexts.fetch_sub(1, Ordering::SeqCst) == 1 {
        state::last_context_closed();
    }
    0
}

fn device_attr(dev: &Dev) -> ibv_device_attr {
    let mut a = ibv_device_attr::default();
    fill(
        &mut a.fw_ver,
        concat!("ferroce ", env!("CARGO_PKG_VERSION")),
    );
    a.node_guid = dev.guid.to_be();
    a.sys_image_guid = dev.guid.to_be();
    a.max_mr_size = u64::MAX;
    a.page_size_cap = 0xffff_f000;
    a.vendor_id = VENDOR_ID;
    a.vendor_part_id = VENDOR_PART_ID;
    a.hw_ver = 1;
    a.max_qp = 1 << 16;
    a.max_qp_wr = MAX_QP_WR as c_int;
    // XRC domains, SRQs and QPs (xrc.rs) on both devices: native XRC streams, IBTA XRC
    // (XRCETH) on the RoCEv2 device.
    a.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT | IBV_DEVICE_XRC;
    a.max_sge = 16;
    a.max_sge_rd = 16;
    a.max_cq = 1 << 16;
    a.max_cqe = MAX_CQE;
    a.max_mr = 1 << 20;
    a.max_pd = 1 << 16;
    a.max_qp_rd_atom = 16;
    a.max_res_rd_atom = 16 << 16;
    a.max_qp_init_rd_atom = 16;
    a.atomic_cap = IBV_ATOMIC_HCA;
    a.max_ah = 1 << 16;
    a.max_srq = 1 << 16;
    a.max_srq_wr = 1 << 14;
    a.max_srq_sge = 16;
    a.max_pkeys = 1;
    a.local_ca_ack_delay = 15;
    a.phys_port_cnt = 1;
    a
}

#[export_name = "ferroce_v_ibv_query_device"]
pub unsafe extern "C" fn ibv_query_device(
    c: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    // SAFETY: `c` is a context this library returned from ibv_open_device (the verbs contract); ctx_of checks null.
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        return libc::EINVAL;
    };
    if attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller passes a whole ibv_device_attr.
    unsafe { attr.write(device_attr(ctx.dev)) };
    0
}

/// Copy `src` into the caller's `len` bytes at `dst`: never more than the caller has, zeros
/// for what the caller has beyond our struct.
///
/// # Safety
/// `dst` must be valid for writes of `len` bytes and must not overlap `src`.
unsafe fn copy_sized<T>(src: &T, dst: *mut c_void, len: usize) {
    let n = len.min(size_of::<T>());
    // SAFETY: the caller promises `len` writable bytes at dst; we write at most that.
    unsafe {
        std::ptr::copy_nonoverlapping(src as *const T as *const u8, dst as *mut u8, n);
        if len > n {
            write_bytes((dst as *mut u8).add(n), 0, len - n);
        }
    }
}

unsafe extern "C" fn vctx_query_device_ex(
    c: *mut ibv_context,
    _input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    // SAFETY: `c` is a context this library returned from ibv_open_device (the verbs contract); ctx_of checks null.
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        return libc::EINVAL;
    };
    if attr.is_null() || attr_size < size_of::<ibv_device_attr>() {
        return libc::EINVAL;
    }
    let mut a = ibv_device_attr_ex {
        orig_attr: device_attr(ctx.dev),
        ..Default::default()
    };
    a.phys_port_cnt_ex = 1;
    // SAFETY: the caller sized its struct as attr_size.
    unsafe { copy_sized(&a, attr as *mut c_void, attr_size) };
    0
}

fn port_attr(dev: &Dev) -> ibv_port_attr {
    // The RoCEv2 port's active MTU is what its engine's packets carry (1024 on a 1500-byte
    // link, 4096 on a jumbo one: UD messages are limited to it); the native port's is 1024.
    let active_mtu = match dev.mode {
        Mode::Roce => match state::roce_active_mtu() {
            4096 => IBV_MTU_4096,
            2048 => IBV_MTU_2048,
            512 => IBV_MTU_512,
            256 => IBV_MTU_256,
            _ => IBV_MTU_1024,
        },
        Mode::Native => IBV_MTU_1024,
    };
    ibv_port_attr {
        state: IBV_PORT_ACTIVE,
        max_mtu: IBV_MTU_4096,
        active_mtu,
        gid_tbl_len: GID_TBL_LEN as c_int,
        port_cap_flags: IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS,
        max_msg_sz: 1 << 31,
        bad_pkey_cntr: 0,
        qkey_viol_cntr: 0,
        pkey_tbl_len: 1,
        lid: crate::lid::port_lid(),
        sm_lid: 0,
        lmc: 0,
        max_vl_num: 1,
        sm_sl: 0,
        subnet_timeout: 0,
        init_type_reply: 0,
        active_width: 2,  // 4X
        active_speed: 32, // EDR (25 Gb/s per lane)
        phys_state: 5,    // LinkUp
        link_layer: IBV_LINK_LAYER_ETHERNET as u8,
        flags: 0,
        port_cap_flags2: 0,
    }
}

unsafe extern "C" fn vctx_query_port(
    c: *mut ibv_context,
    port: u8,
    attr: *mut ibv_port_attr,
    len: usize,
) -> c_int {
    // SAFETY: `c` is a context this library returned from ibv_open_device (the verbs contract); ctx_of checks null.
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        return libc::EINVAL;
    };
    if port != 1 || attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: the caller sized its struct as len.
    unsafe { copy_sized(&port_attr(ctx.dev), attr as *mut c_void, len) };
    0
}

#[export_name = "ferroce_v_ibv_query_port"]
pub unsafe extern "C" fn ibv_query_port(
    c: *mut ibv_context,
    port: u8,
    attr: *mut _compat_ibv_port_attr,
) -> c_int {
    // The old entry point: callers pass a whole ibv_port_attr of this ABI.
    // SAFETY: the caller passes a context of ours and an ibv_port_attr of this ABI (the verbs contract).
    unsafe {
        vctx_query_port(
            c,
            port,
            attr as *mut ibv_port_attr,
            size_of::<ibv_port_attr>(),
        )
    }
}

/// Slots of the port's GID table. Only 0 and 1 hold a GID; the others are empty, as on a
/// RoCE NIC whose table has room for more addresses than its netdev has (verbs reports an
/// empty slot as ENODATA in `ibv_query_gid_ex`, a zero GID in `ibv_query_gid`).
const GID_TBL_LEN: u32 = 16;

/// GID `index` of the port: 0 = fe80::<EUI-64 of the node GUID>, 1 = ::ffff:<IPv4>; `None`
/// for an empty slot.
fn gid(dev: &Dev, index: u32) -> Option<ibv_gid> {
    let mut g = ibv_gid::default();
    match index {
        0 => {
            // SAFETY: writing the raw bytes of a plain-data union.
            unsafe {
                g.raw[0] = 0xfe;
                g.raw[1] = 0x80;
                g.raw[8..16].copy_from_slice(&dev.guid.to_be_bytes());
            }
        }
        1 => {
            let ip = state::engine_if_running()
                .map(|e| e.ip)
                .or_else(crate::config::local_ip)
                .unwrap_or(Ipv4Addr::UNSPECIFIED);
            // SAFETY: as above.
            unsafe {
                g.raw[10] = 0xff;
                g.raw[11] = 0xff;
                g.raw[12..16].copy_from_slice(&ip.octets());
            }
        }
        _ => return None,
    }
    Some(g)
}

#[export_name = "ferroce_v_ibv_query_gid"]
pub unsafe extern "C" fn ibv_query_gid(
    c: *mut ibv_context,
    port: u8,
    index: c_int,
    out: *mut ibv_gid,
) -> c_int {
    // SAFETY: `c` is a context this library returned from ibv_open_device (the verbs contract); ctx_of checks null.
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        return -1;
    };
    if port != 1 || !(0..GID_TBL_LEN as c_int).contains(&index) || out.is_null() {
        return -1;
    }
    // rdma-core: an empty slot reads as the zero GID (success).
    let g = gid(ctx.dev, index as u32).unwrap_or_default();
    // SAFETY: the caller passes a union ibv_gid.
    unsafe { out.write(g) };
    0
}

fn gid_entry(dev: &Dev, index: u32) -> Option<ibv_gid_entry> {
    Some(ibv_gid_entry {
        gid: gid(dev, index)?,
        gid_index: index,
        port_num: 1,
        gid_type: IBV_GID_TYPE_ROCE_V2,
        ndev_ifindex: 0,
    })
}

#[export_name = "ferroce_v__ibv_query_gid_ex"]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    c: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    // SAFETY: `c` is a context this library returned from ibv_open_device (the verbs contract); ctx_of checks null.
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        return libc::EINVAL;
    };
    if flags != 0 || port != 1 || entry.is_null() || index >= GID_TBL_LEN {
        return libc::EINVAL;
    }
    match gid_entry(ctx.dev, index) {
        // SAFETY: the caller sized its entry as entry_size.
        Some(e) => {
            unsafe { copy_sized(&e, entry as *mut c_void, entry_size) };
            0
        }
        None => libc::ENODATA,
    }
}

#[export_name = "ferroce_v__ibv_query_gid_table"]
pub unsafe extern "C" fn _ibv_query_gid_table(
    c: *mut ibv_context,
    entries: *mut ibv_gid_entry,
    max: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    // SAFETY: `c` is a context this library returned from ibv_open_device (the verbs contract); ctx_of checks null.
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        return -(libc::EINVAL as isize);
    };
    if flags != 0 || entries.is_null() || entry_size == 0 {
        return -(libc::EINVAL as isize);
    }
    let valid: Vec<ibv_gid_entry> = (0..GID_TBL_LEN)
        .filter_map(|i| gid_entry(ctx.dev, i))
        .collect();
    // The kernel's rule (rdma_query_gid_table): a buffer with fewer entries than the table
    // has valid GIDs is EINVAL, not a truncated answer.
    if max < valid.len() {
        return -(libc::EINVAL as isize);
    }
    for (n, e) in valid.iter().enumerate() {
        // SAFETY: the caller provides max (>= valid.len()) entries of entry_size bytes each.
        unsafe {
            copy_sized(
                e,
                (entries as *mut u8).add(n * entry_size) as *mut c_void,
                entry_size,
            )
        };
    }
    valid.len() as isize
}

/// rdma-core's private `ibv_query_gid_type` (sysfs types: 0 = IB/RoCE v1, 1 = RoCE v2).
#[export_name = "ferroce_v_ibv_query_gid_type"]
pub unsafe extern "C" fn ibv_query_gid_type(
    c: *mut ibv_context,
    port: u8,
    index: c_uint,
    ty: *mut c_uint,
) -> c_int {
    // SAFETY: `c` is a context this library returned from ibv_open_device (the verbs contract); ctx_of checks null.
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        return -1;
    };
    if port != 1 || index >= GID_TBL_LEN || ty.is_null() {
        return -1;
    }
    // rdma-core: an empty slot reads as type 0 (IB / RoCE v1), success.
    let t = c_uint::from(gid(ctx.dev, index).is_some());
    // SAFETY: the caller passes an enum (int-sized) slot.
    unsafe { *ty = t };
    0
}

#[export_name = "ferroce_v_ibv_query_pkey"]
pub unsafe extern "C" fn ibv_query_pkey(
    c: *mut ibv_context,
    port: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    // SAFETY: `c` is a context this library returned from ibv_open_device (the verbs contract); ctx_of checks null.
    if unsafe { ctx_of(c) }.is_none() || port != 1 || index != 0 || pkey.is_null() {
        return -1;
    }
    // SAFETY: the caller passes a __be16 slot.
    unsafe { *pkey = 0xffffu16.to_be() };
    0
}

#[export_name = "ferroce_v_ibv_get_pkey_index"]
pub unsafe extern "C" fn ibv_get_pkey_index(_c: *mut ibv_context, _port: u8, pkey: u16) -> c_int {
    if u16::from_be(pkey) & 0x7fff == 0x7fff {
        0
    } else {
        -1
    }
}

// ---------------------------------------------------------------------------------------
// PD, MR
// ---------------------------------------------------------------------------------------

#[export_name = "ferroce_v_ibv_alloc_pd"]
pub unsafe extern "C" fn ibv_alloc_pd(c: *mut ibv_context) -> *mut ibv_pd {
    // SAFETY: `c` is a context this library returned from ibv_open_device (the verbs contract); ctx_of checks null.
    if unsafe { ctx_of(c) }.is_none() {
        return fail(libc::EINVAL, "ibv_alloc_pd");
    }
    let pd = Box::new(ibv_pd {
        context: c,
        handle: global().next_pd.fetch_add(1, Ordering::Relaxed),
    });
    Box::into_raw(pd)
}

#[export_name = "ferroce_v_ibv_dealloc_pd"]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    if pd.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a PD from ibv_alloc_pd, freed once.
    drop(unsafe { Box::from_raw(pd) });
    0
}

unsafe fn reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    if pd.is_null() || (addr.is_null() && len > 0) {
        return fail(libc::EINVAL, "ibv_reg_mr");
    }
    // Remote write and atomic need local write (verbs rule).
    let a = access & 0xf;
    if a & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC) != 0
        && a & IBV_ACCESS_LOCAL_WRITE == 0
    {
        return fail(
            libc::EINVAL,
            "ibv_reg_mr: remote write/atomic without local write",
        );
    }
    if !crate::mr::mapped(addr as u64, len as u64) {
        return fail(libc::EFAULT, "ibv_reg_mr: the range is not mapped memory");
    }
    // SAFETY: pd is a live PD.
    let (ctx, handle) = unsafe { ((*pd).context, (*pd).handle) };
    let key = global()
        .mrs
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .register_app_iova(handle, addr as u64, iova, len as u64, a);
    let Some(key) = key else {
        return fail(libc::EINVAL, "ibv_reg_mr: range overflows");
    };
    let mr = Box::new(ibv_mr {
        context: ctx,
        pd,
        addr,
        length: len,
        handle: key,
        lkey: key,
        rkey: key,
    });
    Box::into_raw(mr)
}

#[export_name = "ferroce_v_ibv_reg_mr"]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: the application registers memory it owns (the verbs contract); reg_mr checks the PD and the range.
    unsafe { reg_mr(pd, addr, len, addr as u64, access as c_uint) }
}

#[export_name = "ferroce_v_ibv_reg_mr_iova"]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    // SAFETY: the application registers memory it owns (the verbs contract); reg_mr checks the PD and the range.
    unsafe { reg_mr(pd, addr, len, iova, access as c_uint) }
}

#[export_name = "ferroce_v_ibv_reg_mr_iova2"]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    // SAFETY: the application registers memory it owns (the verbs contract); reg_mr checks the PD and the range.
    unsafe { reg_mr(pd, addr, len, iova, access) }
}

#[export_name = "ferroce_v_ibv_dereg_mr"]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    if mr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: an MR from ibv_reg_mr, freed once.
    let m = unsafe { Box::from_raw(mr) };
    global()
        .mrs
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .deregister(m.lkey);
    0
}

// ---------------------------------------------------------------------------------------
// Completion channels and CQs
// ---------------------------------------------------------------------------------------

#[repr(C)]
pub struct Channel {
    pub ch: ibv_comp_channel,
    pub st: Arc<ChannelState>,
}

#[export_name = "ferroce_v_ibv_create_comp_channel"]
pub unsafe extern "C" fn ibv_create_comp_channel(c: *mut ibv_context) -> *mut ibv_comp_channel {
    // SAFETY: `c` is a context this library returned from ibv_open_device (the verbs contract); ctx_of checks null.
    if unsafe { ctx_of(c) }.is_none() {
        return fail(libc::EINVAL, "ibv_create_comp_channel");
    }
    let fd = eventfd(libc::EFD_SEMAPHORE);
    if fd < 0 {
        return fail(libc::EMFILE, "ibv_create_comp_channel: eventfd");
    }
    let ch = Box::new(Channel {
        ch: ibv_comp_channel {
            context: c,
            fd,
            refcnt: 0,
        },
        st: Arc::new(ChannelState {
            fd,
            fired: Mutex::new(Default::default()),
        }),
    });
    Box::into_raw(ch) as *mut ibv_comp_channel
}

#[export_name = "ferroce_v_ibv_destroy_comp_channel"]
pub unsafe extern "C" fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
    if ch.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a channel from ibv_create_comp_channel.
    if unsafe { (*ch).refcnt } > 0 {
        return libc::EBUSY;
    }
    // SAFETY: as above, freed once.
    let b = unsafe { Box::from_raw(ch as *mut Channel) };
    // SAFETY: our eventfd.
    unsafe { libc::close(b.ch.fd) };
    0
}

/// Largest CQ (`max_cqe`).
const MAX_CQE: c_int = (1 << 20) - 1;

#[repr(C)]
/// Laid out as an `ibv_cq_ex` (whose first fields are `ibv_cq`'s), so any CQ can be an
/// extended one (`cq_ex.rs`).
pub struct Cq {
    pub cq: ibv_cq_ex,
    pub st: Arc<CqState>,
    pub ex: crate::cq_ex::Polling,
}

/// # Safety
/// `cq` is null or a CQ this library created.
pub(crate) unsafe fn cq_of<'a>(cq: *mut ibv_cq) -> Option<&'a Cq> {
    // SAFETY: CQs come from ibv_create_cq: ibv_cq is the first field of our Cq.
    (!cq.is_null()).then(|| unsafe { &*(cq as *const Cq) })
}

#[export_name = "ferroce_v_ibv_create_cq"]
pub unsafe extern "C" fn ibv_create_cq(
    c: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    vector: c_int,
) -> *mut ibv_cq {
    // SAFETY: `c` is a context this library returned from ibv_open_device (the verbs contract); ctx_of checks null.
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        return fail(libc::EINVAL, "ibv_create_cq: no context");
    };
    if !(1..=MAX_CQE).contains(&cqe) {
        return fail(libc::EINVAL, "ibv_create_cq: cqe outside 1..=max_cqe");
    }
    // SAFETY: as above (a live context of ours).
    let vectors = unsafe { (*c).num_comp_vectors };
    if !(0..vectors).contains(&vector) {
        // ibv_create_cq(3): comp_vector must be in [0, num_comp_vectors).
        return fail(
            libc::EINVAL,
            "ibv_create_cq: completion vector outside [0, num_comp_vectors)",
        );
    }
    let ch = if channel.is_null() {
        None
    } else {
        // SAFETY: a channel from ibv_create_comp_channel.
        unsafe { (*channel).refcnt += 1 };
        Some(unsafe { &*(channel as *const Channel) }.st.clone())
    };
    let st = Arc::new(CqState {
        q: Mutex::new(Default::default()),
        cap: AtomicUsize::new(cqe as usize),
        overrun: AtomicBool::new(false),
        events: Some(ctx.events.clone()),
        n: AtomicUsize::new(0),
        armed: AtomicBool::new(false),
        channel: ch,
        cq_ptr: AtomicUsize::new(0),
        dead: AtomicBool::new(false),
        waiter: Default::default(),
    });
    // SAFETY: all-zero ibv_cq is valid; the mutex/cond are initialised below.
    let mut cq = Box::new(Cq {
        cq: unsafe { std::mem::zeroed() },
        st,
        ex: Default::default(),
    });
    cq.cq.context = c;
    cq.cq.channel = channel;
    cq.cq.cq_context = cq_context;
    cq.cq.cqe = cqe;
    // SAFETY: initialise the embedded mutex and condition variable.
    unsafe {
        libc::pthread_mutex_init(std::ptr::addr_of_mut!(cq.cq.mutex) as *mut _, null_mut());
        libc::pthread_cond_init(std::ptr::addr_of_mut!(cq.cq.cond) as *mut _, null_mut());
    }
    // The box's address is where it stays.
    cq.st
        .cq_ptr
        .store(&*cq as *const Cq as usize, Ordering::Relaxed);
    Box::into_raw(cq) as *mut ibv_cq
}

#[export_name = "ferroce_v_ibv_destroy_cq"]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    if cq.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a CQ from ibv_create_cq, freed once.
    let b = unsafe { Box::from_raw(cq as *mut Cq) };
    b.st.dead.store(true, Ordering::SeqCst);
    if !b.cq.channel.is_null() {
        // SAFETY: the channel outlives its CQs (verbs rule: EBUSY otherwise).
        unsafe { (*b.cq.channel).refcnt -= 1 };
    }
    0
}

#[export_name = "ferroce_v_ibv_resize_cq"]
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut ibv_cq, cqe: c_int) -> c_int {
    // SAFETY: `cq` is a CQ this library returned from ibv_create_cq (the verbs contract); cq_of checks null.
    let Some(c) = (unsafe { cq_of(cq) }) else {
        return libc::EINVAL;
    };
    if !(1..=MAX_CQE).contains(&cqe) {
        return libc::EINVAL;
    }
    // ibv_resize_cq(3): the new size must hold the completions still in the CQ. The queue's
    // lock keeps the engine from adding one between the check and the new size.
    let q = lock(&c.st.q);
    if q.len() > cqe as usize {
        dbg_log!(
            "ibv_resize_cq: {} unpolled completions, asked for {cqe}",
            q.len()
        );
        return libc::EINVAL;
    }
    c.st.cap.store(cqe as usize, Ordering::Relaxed);
    // SAFETY: a live CQ; the application reads cqe after the call returns.
    unsafe { (*cq).cqe = cqe };
    drop(q);
    0
}

/// What an empty poll does: on every `FERROCE_POLL_SLEEP_EVERY`-th (default 2) empty poll,
/// sleep up to `FERROCE_POLL_SLEEP_US` (default 20 µs, 0 = only yield) on the CQ's waiter,
/// which the next completion pushed to the CQ ends at once. Applications spin on empty CQs;
/// with fewer cores than busy threads (application, engine lcore, the kernel's softirq work
/// for af_packet/veth) spinning starves the packet path, and a plain sleep (which Linux's
/// default 50 µs timer slack stretched to ~55 µs whatever was asked) added its full length to
/// every round trip.
fn every() -> u32 {
    static E: OnceLock<u32> = OnceLock::new();
    *E.get_or_init(|| {
        std::env::var("FERROCE_POLL_SLEEP_EVERY")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2)
            .max(1)
    })
}

pub(crate) fn idle_backoff(cq: &CqState) {
    use std::cell::Cell;
    static SLEEP_US: OnceLock<u64> = OnceLock::new();
    thread_local!(static EMPTY: Cell<u32> = const { Cell::new(0) });
    let us = *SLEEP_US.get_or_init(|| {
        std::env::var("FERROCE_POLL_SLEEP_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20)
    });
    let n = EMPTY.with(|e| {
        let n = e.get().wrapping_add(1);
        e.set(n);
        n
    });
    if us > 0 && n.is_multiple_of(every()) {
        cq.waiter.sleep(us, || cq.n.load(Ordering::Acquire) > 0);
    } else {
        std::thread::yield_now();
    }
}

unsafe extern "C" fn op_poll_cq(cq: *mut ibv_cq, num: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: `cq` is a CQ this library returned from ibv_create_cq (the verbs contract); cq_of checks null.
    let Some(c) = (unsafe { cq_of(cq) }) else {
        return -1;
    };
    if num <= 0 {
        return 0;
    }
    if c.st.n.load(Ordering::Acquire) == 0 {
        // Nothing yet: the application's thread runs the engine a turn itself (when its own
        // thread is not running it), so progress needs no other thread to win the CPU.
        let turn = state::drive_engines();
        if c.st.n.load(Ordering::Acquire) == 0 {
            match turn {
                // It moved something: the answer may be a moment away, ask again at once.
                Some(true) => {}
                // Nothing to do: let another thread have the core a moment.
                Some(false) => std::thread::yield_now(),
                // Applications spin on an empty CQ; on a machine with fewer cores than busy
                // threads the engine's lcore must get the CPU to make progress.
                None => idle_backoff(&c.st),
            }
            return 0;
        }
    }
    let mut q = lock(&c.st.q);
    let mut k = 0;
    while k < num as usize {
        let Some(w) = q.pop_front() else { break };
        // SAFETY: the caller passes an array of `num` ibv_wc.
        unsafe { wc.add(k).write(w) };
        k += 1;
    }
    c.st.n.fetch_sub(k, Ordering::AcqRel);
    k as c_int
}

unsafe extern "C" fn op_req_notify_cq(cq: *mut ibv_cq, _solicited_only: c_int) -> c_int {
    // SAFETY: `cq` is a CQ this library returned from ibv_create_cq (the verbs contract); cq_of checks null.
    let Some(c) = (unsafe { cq_of(cq) }) else {
        return libc::EINVAL;
    };
    if c.st.channel.is_none() {
        return libc::EINVAL;
    }
    c.st.armed.store(true, Ordering::SeqCst);
    0
}

#[export_name = "ferroce_v_ibv_get_cq_event"]
pub unsafe extern "C" fn ibv_get_cq_event(
    ch: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    if ch.is_null() || cq.is_null() {
        return -1;
    }
    // SAFETY: a channel from ibv_create_comp_channel.
    let chan = unsafe { &*(ch as *const Channel) };
    let mut v: u64 = 0;
    // SAFETY: reads 8 bytes into a live u64 from our eventfd (blocking unless the
    // application made the fd non-blocking: then -1/EAGAIN, as verbs returns).
    let r = unsafe { libc::read(chan.st.fd, &mut v as *mut u64 as *mut c_void, 8) };
    if r != 8 {
        return -1;
    }
    let Some(p) = lock(&chan.st.fired).pop_front() else {
        return -1;
    };
    let p = p as *mut ibv_cq;
    // SAFETY: the caller's out-parameters; p is the CQ that fired (live: a CQ with
    // unacknowledged events may not be destroyed).
    unsafe {
        *cq = p;
        if !cq_context.is_null() {
            *cq_context = (*p).cq_context;
        }
    }
    0
}

#[export_name = "ferroce_v_ibv_ack_cq_events"]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, n: c_uint) {
    if !cq.is_null() {
        // SAFETY: a live CQ.
        unsafe { (*cq).comp_events_completed += n };
    }
}

// ---------------------------------------------------------------------------------------
// QPs
// ---------------------------------------------------------------------------------------

#[repr(C)]
pub struct Qp {
    pub qp: ibv_qp,
    /// The rest of an `ibv_qp_ex`, so that any QP can be an extended one (`qp_ex.rs`).
    pub ex: crate::qp_ex::ExTail,
    pub st: Arc<QpShared>,
    pub wr: crate::qp_ex::Builder,
    /// Scatter/gather entries a work request may carry (send, receive), as created: more is
    /// EINVAL at post (rxe's and mlx5's answer).
    pub max_sge: (u32, u32),
    /// Work requests of each queue that may be outstanding (send, receive), as created:
    /// one more is ENOMEM at post (ibv_post_send(3)).
    pub max_wr: (u32, u32),
}

/// # Safety
/// `qp` is null or a QP this library created.
pub(crate) unsafe fn qp_of<'a>(qp: *mut ibv_qp) -> Option<&'a Qp> {
    // SAFETY: QPs come from ibv_create_qp: ibv_qp is the first field of our Qp.
    (!qp.is_null()).then(|| unsafe { &*(qp as *const Qp) })
}

const MAX_INLINE: u32 = 4096;
/// Deepest send or receive queue (`max_qp_wr`).
const MAX_QP_WR: u32 = 1 << 14;

/// A QP of `pd`; an XRC target (`xrcd`, from `ibv_create_qp_ex`) has no PD and belongs to
/// context `tgt_ctx` instead.
unsafe fn create_qp(
    pd: *mut ibv_pd,
    a: &mut ibv_qp_init_attr,
    xrcd: Option<(*mut ibv_context, Arc<crate::xrc::XrcdState>)>,
) -> *mut ibv_qp {
    let (c, pdh) = match (&xrcd, pd.is_null()) {
        (Some((c, _)), _) => (*c, 0),
        (None, true) => return fail(libc::EINVAL, "ibv_create_qp: no PD"),
        // SAFETY: a live PD.
        (None, false) => unsafe { ((*pd).context, (*pd).handle) },
    };
    // SAFETY: a context this library returned (ctx_of checks null).
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        return fail(libc::EINVAL, "ibv_create_qp: no context");
    };
    let xrc = match (a.qp_type, xrcd) {
        (IBV_QPT_RC | IBV_QPT_UD | IBV_QPT_UC, None) => None,
        (IBV_QPT_XRC_SEND, None) => Some(crate::xrc::XrcRole::Send),
        (IBV_QPT_XRC_RECV, Some((_, x))) => Some(crate::xrc::XrcRole::Recv(x)),
        (IBV_QPT_XRC_RECV, None) => {
            return fail(libc::EINVAL, "ibv_create_qp: an XRC_RECV QP needs an XRCD");
        }
        _ => {
            return fail(
                libc::EOPNOTSUPP,
                "ibv_create_qp: only RC, UC, UD and XRC QPs",
            )
        }
    };
    let srq = if a.srq.is_null() {
        None
    } else if a.qp_type != IBV_QPT_RC {
        return fail(libc::EOPNOTSUPP, "ibv_create_qp: SRQ with a QP not RC");
    } else {
        // SAFETY: SRQs come from ibv_create_srq: ibv_srq is the first field of our Srq.
        Some(unsafe { &*(a.srq as *const Srq) }.st.clone())
    };
    // An XRC initiator has no receive queue, a target neither queue: their CQs are never
    // given completions.
    let (scq, rcq) = match &xrc {
        Some(crate::xrc::XrcRole::Recv(_)) => {
            a.cap = ibv_qp_cap::default();
            (crate::ud::dead_cq(), crate::ud::dead_cq())
        }
        _ => {
            // SAFETY: CQs this library returned (cq_of checks null).
            let scq = unsafe { cq_of(a.send_cq) }.map(|q| q.st.clone());
            let rcq = if matches!(xrc, Some(crate::xrc::XrcRole::Send)) {
                a.cap.max_recv_wr = 0;
                a.cap.max_recv_sge = 0;
                Some(crate::ud::dead_cq())
            } else {
                // SAFETY: as above.
                unsafe { cq_of(a.recv_cq) }.map(|q| q.st.clone())
            };
            let (Some(scq), Some(rcq)) = (scq, rcq) else {
                return fail(libc::EINVAL, "ibv_create_qp: CQs");
            };
            (scq, rcq)
        }
    };
    if a.cap.max_inline_data > MAX_INLINE || a.cap.max_send_sge > 16 || a.cap.max_recv_sge > 16 {
        return fail(libc::EINVAL, "ibv_create_qp: capabilities");
    }
    // ibv_create_qp(3): a queue deeper than the device's max_qp_wr is EINVAL (the receive
    // queue's depth does not matter with an SRQ: receives come from it).
    if a.cap.max_send_wr > MAX_QP_WR || (a.srq.is_null() && a.cap.max_recv_wr > MAX_QP_WR) {
        return fail(
            libc::EINVAL,
            "ibv_create_qp: max_send_wr or max_recv_wr above max_qp_wr",
        );
    }
    // The engine starts with the first QP (its configuration errors are reported here).
    if let Err(e) = engine(ctx.dev.mode) {
        eprintln!("{e}");
        return fail(libc::ENODEV, "");
    }
    let qpn = state::new_qpn();
    // No remote access until ibv_modify_qp grants it (qp_access_flags starts at 0). An XRC
    // target reaches the memory of its XRC domain's SRQs' PDs (mr.rs).
    let domain = {
        let mut mrs = global().mrs.write().unwrap_or_else(|p| p.into_inner());
        match &xrc {
            Some(crate::xrc::XrcRole::Recv(x)) => mrs.new_xrc_domain(crate::xrc::domain_id(x), 0),
            _ => mrs.new_domain(pdh, 0),
        }
    };
    let st = Arc::new(QpShared {
        qpn,
        pd: domain,
        sq_sig_all: a.sq_sig_all != 0,
        send_cq: scq,
        recv_cq: rcq,
        mode: ctx.dev.mode,
        max_inline: a.cap.max_inline_data,
        inner: Mutex::new(QpInner {
            state: IBV_QPS_RESET,
            peer: None,
            remote_qpn: 0,
            rq_psn: 0,
            sq_psn: 0,
            path_mtu: 0,
            conn: None,
            pending: Vec::new(),
            requested: false,
        }),
        qp_ptr: AtomicUsize::new(0),
        srq,
        ud: (a.qp_type == IBV_QPT_UD).then(crate::ud::UdQp::default),
        uc: a.qp_type == IBV_QPT_UC,
        xrc,
        wrs: Default::default(),
        ids: Default::default(),
    });
    crate::inflight::register(&st);
    if let Some(crate::xrc::XrcRole::Recv(x)) = &st.xrc {
        x.users.fetch_add(1, Ordering::SeqCst);
    }
    // SAFETY: an all-zero ibv_qp is valid; mutex/cond initialised below.
    let mut qp = Box::new(Qp {
        qp: unsafe { std::mem::zeroed() },
        ex: Default::default(),
        st,
        wr: Default::default(),
        max_sge: (a.cap.max_send_sge.max(1), a.cap.max_recv_sge.max(1)),
        max_wr: (a.cap.max_send_wr, a.cap.max_recv_wr),
    });
    qp.qp.context = c;
    qp.qp.qp_context = a.qp_context;
    qp.qp.pd = pd;
    qp.qp.send_cq = a.send_cq;
    qp.qp.recv_cq = a.recv_cq;
    qp.qp.handle = qpn;
    qp.qp.qp_num = qpn;
    qp.qp.state = IBV_QPS_RESET;
    qp.qp.qp_type = a.qp_type;
    qp.qp.srq = a.srq;
    // SAFETY: initialise the embedded mutex and condition variable.
    unsafe {
        libc::pthread_mutex_init(std::ptr::addr_of_mut!(qp.qp.mutex) as *mut _, null_mut());
        libc::pthread_cond_init(std::ptr::addr_of_mut!(qp.qp.cond) as *mut _, null_mut());
    }
    qp.st
        .qp_ptr
        .store(&*qp as *const Qp as usize, Ordering::Relaxed);
    if qp.st.ud.is_some() {
        crate::ud::register_qp(&qp.st);
    }
    if let Some(crate::xrc::XrcRole::Recv(x)) = &qp.st.xrc {
        crate::xrc::register_handle(x, qpn, &*qp as *const Qp as usize);
    }
    dbg_log!("QP {qpn:#x} created ({:?})", ctx.dev.mode);
    Box::into_raw(qp) as *mut ibv_qp
}

/// Another `ibv_qp` handle of the QP `src` is a handle of (`ibv_open_qp`): context `c`, its
/// own `qp_context` (`src`'s when `None`), no PD, CQs or SRQ.
///
/// # Safety
/// `src` is a live QP handle this library returned.
pub(crate) unsafe fn another_handle(
    src: *const Qp,
    c: *mut ibv_context,
    qp_context: Option<*mut c_void>,
) -> *mut ibv_qp {
    // SAFETY: a live handle (the caller's contract).
    let src = unsafe { &*src };
    // SAFETY: an all-zero ibv_qp is valid; mutex/cond initialised below.
    let mut qp = Box::new(Qp {
        qp: unsafe { std::mem::zeroed() },
        ex: Default::default(),
        st: src.st.clone(),
        wr: Default::default(),
        max_sge: src.max_sge,
        max_wr: src.max_wr,
    });
    qp.qp.context = c;
    qp.qp.qp_context = qp_context.unwrap_or(src.qp.qp_context);
    qp.qp.handle = src.qp.handle;
    qp.qp.qp_num = src.qp.qp_num;
    qp.qp.state = lock(&src.st.inner).state;
    qp.qp.qp_type = src.qp.qp_type;
    // SAFETY: initialise the embedded mutex and condition variable.
    unsafe {
        libc::pthread_mutex_init(std::ptr::addr_of_mut!(qp.qp.mutex) as *mut _, null_mut());
        libc::pthread_cond_init(std::ptr::addr_of_mut!(qp.qp.cond) as *mut _, null_mut());
    }
    Box::into_raw(qp) as *mut ibv_qp
}

#[export_name = "ferroce_v_ibv_create_qp"]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    if attr.is_null() {
        return fail(libc::EINVAL, "ibv_create_qp");
    }
    // SAFETY: the caller's init attributes (cap is written back, as providers do).
    unsafe { create_qp(pd, &mut *attr, None) }
}

unsafe extern "C" fn vctx_create_qp_ex(
    c: *mut ibv_context,
    a: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    if a.is_null() {
        return fail(libc::EINVAL, "ibv_create_qp_ex");
    }
    // SAFETY: the caller's extended attributes.
    let a = unsafe { &mut *a };
    // CREATE_FLAGS with no flag set asks for nothing; any flag (scatter FCS, source QPN, …)
    // and every other extension is a feature this device lacks.
    let create_flags = a.comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0;
    let known = IBV_QP_INIT_ATTR_PD
        | IBV_QP_INIT_ATTR_XRCD
        | IBV_QP_INIT_ATTR_CREATE_FLAGS
        | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    if a.comp_mask & !known != 0 || create_flags {
        return fail(
            libc::EOPNOTSUPP,
            "ibv_create_qp_ex: only PD, XRCD, send_ops_flags and empty create_flags in comp_mask",
        );
    }
    if a.qp_type == IBV_QPT_XRC_RECV {
        if a.comp_mask & IBV_QP_INIT_ATTR_XRCD == 0 || a.xrcd.is_null() {
            return fail(libc::EINVAL, "ibv_create_qp_ex: XRC_RECV without an XRCD");
        }
        // SAFETY: an XRCD this library returned.
        let x = unsafe { crate::xrc::state_of(a.xrcd) };
        if a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0 {
            return fail(
                libc::EINVAL,
                "ibv_create_qp_ex: an XRC_RECV QP sends nothing",
            );
        }
        let mut b = ibv_qp_init_attr {
            qp_context: a.qp_context,
            send_cq: null_mut(),
            recv_cq: null_mut(),
            srq: null_mut(),
            cap: a.cap,
            qp_type: a.qp_type,
            sq_sig_all: 0,
        };
        // SAFETY: the XRCD's context; no PD.
        let qp = unsafe { create_qp(null_mut(), &mut b, Some((c, x))) };
        a.cap = b.cap;
        return qp;
    }
    if a.comp_mask & IBV_QP_INIT_ATTR_XRCD != 0 {
        return fail(
            libc::EINVAL,
            "ibv_create_qp_ex: an XRCD for a QP not XRC_RECV",
        );
    }
    // The ibv_wr_* API (qp_ex.rs), for the send ops the QP type has.
    let send_ops = a.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0;
    if send_ops {
        if let Err(e) = crate::qp_ex::check_ops(a.qp_type, a.send_ops_flags) {
            return fail(e, "ibv_create_qp_ex: send_ops_flags this QP type lacks");
        }
    }
    if a.pd.is_null() || a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
        return fail(libc::EINVAL, "ibv_create_qp_ex: no PD");
    }
    let mut b = ibv_qp_init_attr {
        qp_context: a.qp_context,
        send_cq: a.send_cq,
        recv_cq: a.recv_cq,
        srq: a.srq,
        cap: a.cap,
        qp_type: a.qp_type,
        sq_sig_all: a.sq_sig_all,
    };
    // SAFETY: `a.pd` is a PD this library returned; create_qp checks null.
    let qp = unsafe { create_qp(a.pd, &mut b, None) };
    a.cap = b.cap;
    if send_ops && !qp.is_null() {
        // SAFETY: the QP just created.
        unsafe { crate::qp_ex::enable(qp) };
    }
    qp
}

pub(crate) fn peer_of(ah: &ibv_ah_attr) -> Option<Ipv4Addr> {
    if ah.is_global == 0 {
        // Addressed by LID (lid.rs).
        return crate::lid::peer_of_lid(ah.dlid);
    }
    // SAFETY: reading the raw bytes of a plain-data union.
    crate::device::ip_of_gid(&unsafe { ah.grh.dgid.raw })
}

#[export_name = "ferroce_v_ibv_modify_qp"]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    mask: c_int,
) -> c_int {
    // SAFETY: `qp` is a QP this library returned from ibv_create_qp (the verbs contract); qp_of checks null.
    let (Some(q), false) = (unsafe { qp_of(qp) }, attr.is_null()) else {
        return libc::EINVAL;
    };
    // SAFETY: the caller's attributes.
    let a = unsafe { &*attr };
    let mask = mask as c_uint;
    let st = &q.st;
    let mut inner = lock(&st.inner);
    let cur = inner.state;
    let new = if mask & IBV_QP_STATE != 0 {
        a.qp_state
    } else {
        cur
    };
    let ok = match (cur, new) {
        _ if st.uc => crate::uc::modify_ok(cur, new, mask),
        (_, IBV_QPS_RESET) | (_, IBV_QPS_ERR) => true,
        (IBV_QPS_RESET, IBV_QPS_INIT) | (IBV_QPS_INIT, IBV_QPS_INIT) => true,
        (IBV_QPS_INIT, IBV_QPS_RTR) if st.ud.is_some() => true,
        (IBV_QPS_INIT, IBV_QPS_RTR) => {
            mask & (IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN)
                == IBV_QP_AV | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN
        }
        (IBV_QPS_RTR, IBV_QPS_RTS) => mask & IBV_QP_SQ_PSN != 0,
        (IBV_QPS_RTS, IBV_QPS_RTS) => true,
        _ => false,
    };
    if !ok {
        dbg_log!(
            "QP {:#x}: modify {cur} -> {new} (mask {mask:#x}) refused",
            st.qpn
        );
        return libc::EINVAL;
    }
    if mask & IBV_QP_ACCESS_FLAGS != 0 {
        global()
            .mrs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .set_domain_access(st.pd, a.qp_access_flags & 0xf);
    }
    if let Some(ud) = &st.ud {
        if mask & IBV_QP_QKEY != 0 {
            ud.qkey.store(a.qkey, Ordering::Relaxed);
            if st.mode == Mode::Roce {
                crate::ud_roce::set_qkey(st, a.qkey);
            }
        }
        if new == IBV_QPS_RTS && cur == IBV_QPS_RTR {
            inner.sq_psn = a.sq_psn & 0x00ff_ffff;
        }
        inner.state = new;
        drop(inner);
        // SAFETY: the application's live ibv_qp.
        unsafe { (*qp).state = new };
        if new == IBV_QPS_ERR && cur != new {
            state::flush_qp(st);
        }
        if new == IBV_QPS_RESET && cur != new {
            state::discard_qp(st);
        }
        if st.mode == Mode::Roce && cur != new && (new == IBV_QPS_ERR || new == IBV_QPS_RESET) {
            crate::ud_roce::reset(st);
        }
        return 0;
    }
    let xrc_recv = matches!(st.xrc, Some(crate::xrc::XrcRole::Recv(_)));
    if new == IBV_QPS_INIT && cur == IBV_QPS_RESET && (st.srq.is_some() || xrc_recv) {
        // The QP's share of the SRQ: virtual receives on its stream (srq.rs).
        for _ in 0..crate::srq::SLOTS_PER_QP {
            if let Some(wr) = crate::srq::virtual_recv(st) {
                inner.pending.push(Pending::Recv(wr));
            }
        }
    }
    if new == IBV_QPS_RTR && cur == IBV_QPS_INIT {
        let Some(peer) = peer_of(&a.ah_attr) else {
            eprintln!(
                "ferroce verbs: QP {:#x}: the address vector needs a global route to a \
                 ferroce GID (::ffff:a.b.c.d, GID index 1, e.g. ibv_rc_pingpong -g 1; or the \
                 device's fe80:: GID, index 0), or the DLID of a ferroce port (the low 16 \
                 bits of its engine's address)",
                st.qpn
            );
            return libc::EINVAL;
        };
        // RoCEv2 segments by the path MTU: a larger one than the engine's packets carry
        // would never leave (native mode segments by its connection's MTU instead).
        let want = 128u32 << a.path_mtu.min(5);
        if let (Mode::Roce, true, Some(e)) = (
            st.mode,
            mask & IBV_QP_PATH_MTU != 0,
            state::running(st.mode),
        ) {
            if want > e.mtu {
                eprintln!(
                    "ferroce verbs: QP {:#x}: path_mtu {want} is above the port's active MTU {} \
                     (e.g. qperf -mt {})",
                    st.qpn, e.mtu, e.mtu
                );
                return libc::EINVAL;
            }
        }
        inner.peer = Some(peer);
        inner.remote_qpn = a.dest_qp_num & 0x00ff_ffff;
        inner.rq_psn = a.rq_psn & 0x00ff_ffff;
        if mask & IBV_QP_PATH_MTU != 0 && (1..=5).contains(&a.path_mtu) {
            // IBV_MTU_256 = 1 … IBV_MTU_4096 = 5: 128 << n bytes.
            inner.path_mtu = 128 << a.path_mtu;
        }
    }
    if new == IBV_QPS_RTS && cur == IBV_QPS_RTR {
        inner.sq_psn = a.sq_psn & 0x00ff_ffff;
    }
    inner.state = new;
    // SAFETY: the application's live ibv_qp.
    unsafe { (*qp).state = new };
    // The engine's QP exists from RTR on, so that it answers requests as soon as the
    // application tells its peer it is ready (IBTA: an RTR QP responds). A RoCEv2 QP gets
    // its send queue's PSN at RTS (below); until then it only responds.
    let want_stream = new == IBV_QPS_RTR || new == IBV_QPS_RTS;
    let peer = inner.peer;
    let request = want_stream && !inner.requested;
    if request {
        inner.requested = true;
    }
    // A RoCEv2 QP created at RTR has its send queue at PSN 0: give it the sq_psn RTS
    // names, or its first request is out of sequence at the peer for good (the peer's NAK
    // names a PSN this QP never sent, and every resend is out of sequence again).
    let rts_after_rtr = st.mode == Mode::Roce
        && new == IBV_QPS_RTS
        && cur == IBV_QPS_RTR
        && !request
        && inner.requested;
    let sq_psn = inner.sq_psn;
    drop(inner);
    if rts_after_rtr {
        if let Some(e) = state::running(st.mode) {
            let ran = state::set_sq_psn(e, st.clone(), sq_psn);
            if ran.recv_timeout(std::time::Duration::from_secs(5)).is_err() {
                dbg_log!("QP {:#x}: the engine did not set sq_psn within 5 s", st.qpn);
            }
        }
    }
    if request {
        if let (Some(e), Some(peer)) = (state::running(st.mode), peer) {
            // Return only once the engine has the stream: the application tells its peer it
            // is ready as soon as this returns, and the peer's first request must not reach
            // an engine that has not yet run the command (native: the request is refused as
            // for an unknown stream, IBV_WC_REM_INV_REQ_ERR at the peer's first WR).
            let ran = state::request_stream(e, st.clone(), peer);
            if ran.recv_timeout(std::time::Duration::from_secs(5)).is_err() {
                dbg_log!(
                    "QP {:#x}: the engine did not run the stream request within 5 s",
                    st.qpn
                );
            }
        }
    }
    if new == IBV_QPS_ERR && cur != IBV_QPS_ERR {
        state::flush_qp(st);
    }
    if new == IBV_QPS_RESET && cur != IBV_QPS_RESET {
        state::discard_qp(st);
        state::reset_stream(st);
    }
    0
}

#[export_name = "ferroce_v_ibv_query_qp"]
#[allow(clippy::field_reassign_with_default)]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: `qp` is a QP this library returned from ibv_create_qp (the verbs contract); qp_of checks null.
    let Some(q) = (unsafe { qp_of(qp) }) else {
        return libc::EINVAL;
    };
    let inner = lock(&q.st.inner);
    let cap = ibv_qp_cap {
        max_send_wr: MAX_QP_WR,
        max_recv_wr: MAX_QP_WR,
        max_send_sge: 16,
        max_recv_sge: 16,
        max_inline_data: q.st.max_inline,
    };
    if !attr.is_null() {
        let mut a = ibv_qp_attr::default();
        a.qp_state = inner.state;
        a.cur_qp_state = inner.state;
        a.path_mtu = IBV_MTU_1024;
        a.rq_psn = inner.rq_psn;
        a.sq_psn = inner.sq_psn;
        a.dest_qp_num = inner.remote_qpn;
        if let Some(ud) = &q.st.ud {
            a.qkey = ud.qkey.load(Ordering::Relaxed);
        }
        a.qp_access_flags = global()
            .mrs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .domain_access(q.st.pd);
        a.cap = cap;
        a.max_rd_atomic = 16;
        a.max_dest_rd_atomic = 16;
        a.min_rnr_timer = 12;
        a.port_num = 1;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        if let Some(p) = inner.peer {
            a.ah_attr.is_global = 1;
            a.ah_attr.port_num = 1;
            a.ah_attr.grh.sgid_index = 1;
            // SAFETY: writing raw bytes of a plain-data union.
            unsafe {
                a.ah_attr.grh.dgid.raw[10] = 0xff;
                a.ah_attr.grh.dgid.raw[11] = 0xff;
                a.ah_attr.grh.dgid.raw[12..16].copy_from_slice(&p.octets());
            }
        }
        // SAFETY: the caller's attribute struct.
        unsafe { attr.write(a) };
    }
    if !init.is_null() {
        // SAFETY: the caller's init attribute struct; our ibv_qp's fields are live.
        unsafe {
            init.write(ibv_qp_init_attr {
                qp_context: (*qp).qp_context,
                send_cq: (*qp).send_cq,
                recv_cq: (*qp).recv_cq,
                srq: (*qp).srq,
                cap,
                qp_type: (*qp).qp_type,
                sq_sig_all: q.st.sq_sig_all as c_int,
            })
        };
    }
    0
}

#[export_name = "ferroce_v_ibv_destroy_qp"]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    if qp.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a QP from ibv_create_qp(_ex) or ibv_open_qp, freed once.
    let b = unsafe { Box::from_raw(qp as *mut Qp) };
    if let Some(crate::xrc::XrcRole::Recv(x)) = &b.st.xrc {
        // One handle of a shared XRC_RECV QP: the QP lives while another does.
        if let Some(other) = crate::xrc::forget_handle(x, b.st.qpn, qp as usize) {
            b.st.qp_ptr.store(other, Ordering::Relaxed);
            x.users.fetch_sub(1, Ordering::SeqCst);
            return 0;
        }
    }
    b.st.qp_ptr.store(0, Ordering::Relaxed);
    global()
        .mrs
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .drop_domain(b.st.pd);
    if b.st.ud.is_some() {
        crate::ud::unregister_qp(&b.st);
    }
    if let Some(crate::xrc::XrcRole::Recv(x)) = &b.st.xrc {
        x.users.fetch_sub(1, Ordering::SeqCst);
    }
    // The stream stays in the engine (idle): the peer may still retransmit the tail of the
    // conversation (an ACK was lost) and must get its answer, not an unknown-stream refusal.
    // What it places goes through the MR table, which no longer has this QP's regions once
    // the application deregisters them.
    // Work still in flight completes into nothing; an inline copy stays registered while
    // the idle stream may still resend from it, and goes with the work request's completion.
    crate::inflight::orphan_copies(&crate::inflight::unregister(&b.st));
    state::conns(b.st.mode)
        .waiting
        .values_mut()
        .for_each(|v| v.retain(|q| !Arc::ptr_eq(q, &b.st)));
    0
}

#[export_name = "ferroce_v_ibv_qp_to_qp_ex"]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    // SAFETY: a QP of this library or null (the verbs contract).
    let x = unsafe { crate::qp_ex::to_qp_ex(qp) };
    if x.is_null() {
        // A QP created without send ops has no ibv_qp_ex (as in rdma-core).
        return fail(
            libc::EOPNOTSUPP,
            "ibv_qp_to_qp_ex: created without send_ops_flags",
        );
    }
    x
}

pub(crate) fn sg_list(sge: *const ibv_sge, n: c_int) -> Option<SgList> {
    if !(0..=16).contains(&n) || (n > 0 && sge.is_null()) {
        return None;
    }
    let mut v = SgList::new();
    for i in 0..n as usize {
        // SAFETY: the work request names `n` scatter/gather entries.
        let s = unsafe { sge.add(i).read() };
        v.push(Sge {
            lkey: s.lkey,
            addr: s.addr,
            len: s.length,
        });
    }
    Some(v)
}

/// Hand work to the engine, or keep it until the QP's stream exists.
pub(crate) fn submit(q: &Arc<QpShared>, p: Pending) {
    let mut b = Batch::new(q, false);
    b.add(p);
}

/// The work requests of one post call (a chain of `ibv_send_wr` or `ibv_recv_wr`), handed to
/// the engine as one batch: one doorbell for the chain, when the call ends (or returns early
/// with `bad_wr`: what was accepted before it still goes).
pub(crate) struct Batch<'a> {
    q: &'a Arc<QpShared>,
    cmds: Vec<Command>,
    /// Without waking the engine: the caller takes an engine turn itself right after
    /// ([`state::drive_after_post`]).
    quiet: bool,
}

thread_local! {
    /// The poster's command buffer, kept between posts so that a post allocates nothing: a
    /// batch takes it and gives it back (a nested post, from an engine turn a full ring makes
    /// the poster take, finds it taken and starts an empty one).
    static BATCH_CMDS: std::cell::Cell<Vec<Command>> = const { std::cell::Cell::new(Vec::new()) };
}

impl<'a> Batch<'a> {
    pub(crate) fn new(q: &'a Arc<QpShared>, quiet: bool) -> Self {
        Batch {
            q,
            cmds: BATCH_CMDS.try_with(|b| b.take()).unwrap_or_default(),
            quiet,
        }
    }

    /// Add one work request, or keep it with the QP until its stream exists.
    pub(crate) fn add(&mut self, p: Pending) {
        let mut inner = lock(&self.q.inner);
        let Some(conn) = inner.conn else {
            inner.pending.push(p);
            return;
        };
        drop(inner);
        let q = self.q;
        self.cmds.push(match p {
            Pending::Send(wr) => Command::PostSend {
                conn,
                stream: q.qpn,
                wr,
            },
            Pending::XrcSend(srqn, wr) => {
                let qpn = q.qpn;
                Command::Exec(TransportFn(Box::new(move |t| {
                    state::post_xrc_send(t, conn, qpn, srqn, wr)
                })))
            }
            Pending::Recv(wr) => Command::PostRecv {
                conn,
                stream: q.qpn,
                wr,
            },
        });
    }

    /// Ring the doorbell now. A full ring is back-pressure: the poster waits for room,
    /// taking engine turns itself meanwhile when nobody else runs the engine.
    pub(crate) fn flush(&mut self) {
        if self.cmds.is_empty() {
            return;
        }
        let Some(e) = state::running(self.q.mode) else {
            self.cmds.clear();
            return;
        };
        e.h.submit_with(&mut self.cmds, self.quiet, || {
            let _ = state::drive_engines();
        });
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        // An early return (bad_wr) takes no engine turn after it: wake the engine.
        self.quiet = false;
        self.flush();
        let mut cmds = std::mem::take(&mut self.cmds);
        cmds.clear();
        // try_with: a thread being torn down keeps no buffer.
        let _ = BATCH_CMDS.try_with(|b| b.set(cmds));
    }
}

unsafe extern "C" fn op_post_send(
    qp: *mut ibv_qp,
    mut wr: *mut ibv_send_wr,
    bad: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: `qp` is a QP this library returned from ibv_create_qp (the verbs contract); qp_of checks null.
    let Some(q) = (unsafe { qp_of(qp) }) else {
        return libc::EINVAL;
    };
    let st = &q.st;
    let set_bad = |w: *mut ibv_send_wr| {
        if !bad.is_null() {
            // SAFETY: the caller's out-parameter.
            unsafe { *bad = w };
        }
    };
    let state = lock(&st.inner).state;
    if state != IBV_QPS_RTS {
        set_bad(wr);
        return libc::EINVAL;
    }
    if st.ud.is_some() {
        // SAFETY: the caller's work request chain and out-parameter.
        return unsafe { crate::ud::post_send(st, wr, bad) };
    }
    if matches!(st.xrc, Some(crate::xrc::XrcRole::Recv(_))) {
        // An XRC target has no send queue.
        set_bad(wr);
        return libc::EINVAL;
    }
    let xrc_send = matches!(st.xrc, Some(crate::xrc::XrcRole::Send));
    let mut batch = Batch::new(st, state::app_progress());
    while !wr.is_null() {
        // SAFETY: the caller's work request chain.
        let w = unsafe { &*wr };
        let lim = crate::wr::SendLimits {
            max_sge: q.max_sge.0,
            max_inline: st.max_inline.max(MAX_INLINE),
            uc: st.uc,
        };
        if !crate::wr::num_sge_ok(w.num_sge, &lim) {
            set_bad(wr);
            return libc::EINVAL;
        }
        let Some(mut sgl) = sg_list(w.sg_list, w.num_sge) else {
            set_bad(wr);
            return libc::EINVAL;
        };
        let d = match crate::wr::decode_send(w, &sgl, &lim) {
            Ok(d) => d,
            Err(e) => {
                set_bad(wr);
                return e;
            }
        };
        let op = d.op;
        let mut owned_key = 0;
        // An XRC initiator's message: the XRC header, then the application's bytes, copied
        // at post time (xrc.rs).
        // SAFETY: the union member XRC work requests use (an integer whatever the QP type).
        let srqn = xrc_send.then_some(unsafe { w.qp_type.xrc.remote_srqn });
        // Native: only a SEND carries it, first in its message; WRITE, READ and atomics go to
        // the target's memory through the XRC_RECV QP (spec/transport.md §3.7, XRC-3).
        // RoCEv2: every request's XRCETH carries it (the engine's post_xrc_send). WRITE_IMM
        // would need an SRQ entry the native stream cannot name: not offered on either.
        let hdr = srqn.filter(|_| st.mode == Mode::Native && matches!(op, SendOp::Send { .. }));
        if xrc_send && matches!(op, SendOp::Write { imm: Some(_), .. }) {
            set_bad(wr);
            return libc::EOPNOTSUPP;
        }
        let copy = match (hdr, d.inline_len) {
            (Some(n), inline) => match crate::xrc::message(n, &sgl, inline.is_some()) {
                Ok(v) => Some(v),
                Err(e) => {
                    set_bad(wr);
                    return e;
                }
            },
            (None, Some(total)) => {
                let mut data = Vec::with_capacity(total as usize);
                for s in &sgl {
                    // SAFETY: inline data is read from the application's memory at post
                    // time (the verbs contract: readable, not necessarily registered).
                    unsafe { copy_inline(s.addr, s.len as usize, &mut data) };
                }
                Some(data)
            }
            (None, None) => None,
        };
        if let Some(data) = copy {
            let total = data.len();
            let base = 0x1000u64;
            let mut mrs = global().mrs.write().unwrap_or_else(|p| p.into_inner());
            // In the QP's protection domain: the engine reads it under the QP's domain.
            let pd = mrs.domain_pd(st.pd).unwrap_or(st.pd);
            owned_key = mrs.register_owned(pd, base, data);
            drop(mrs);
            sgl = SgList::new();
            sgl.push(Sge {
                lkey: owned_key,
                addr: base,
                len: total as u32,
            });
        }
        let signaled = st.sq_sig_all || d.signaled;
        if !crate::inflight::room(st, false, q.max_wr.0) {
            if owned_key != 0 {
                global()
                    .mrs
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .deregister(owned_key);
            }
            set_bad(wr);
            return libc::ENOMEM;
        }
        let id = crate::inflight::insert(WrMeta {
            app_wr_id: w.wr_id,
            qp: st.clone(),
            recv: false,
            signaled,
            owned_key,
            ext: Default::default(),
        });
        let swr = SendWr {
            wr_id: id,
            op,
            sgl,
            // Every work request completes in the engine; the shim drops the successful
            // completions of unsignalled ones (so inline copies are freed and the send queue
            // accounting is exact).
            signaled: true,
            solicited: d.solicited,
            fence: d.fence,
        };
        let p = match srqn {
            Some(n) if st.mode == Mode::Roce => Pending::XrcSend(n, swr),
            _ => Pending::Send(swr),
        };
        batch.add(p);
        wr = w.next;
    }
    // The chain is one doorbell.
    batch.flush();
    drop(batch);
    state::drive_after_post();
    0
}

unsafe extern "C" fn op_post_recv(
    qp: *mut ibv_qp,
    mut wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: `qp` is a QP this library returned from ibv_create_qp (the verbs contract); qp_of checks null.
    let Some(q) = (unsafe { qp_of(qp) }) else {
        return libc::EINVAL;
    };
    let st = &q.st;
    let state = lock(&st.inner).state;
    if state == IBV_QPS_RESET || state == IBV_QPS_ERR || st.srq.is_some() || st.xrc.is_some() {
        if !bad.is_null() {
            // SAFETY: the caller's out-parameter.
            unsafe { *bad = wr };
        }
        return libc::EINVAL;
    }
    // UC: every post waits until its receives are in place (uc.rs); RoCEv2 UD only when
    // the engine held none for the QP (ud_roce.rs).
    let mut barrier = st.uc;
    // Quiet as before: the application's next poll takes the engine turn.
    let mut batch = Batch::new(st, state::app_progress());
    while !wr.is_null() {
        // SAFETY: the caller's work request chain.
        let w = unsafe { &*wr };
        let too_many = w.num_sge < 0 || w.num_sge as u32 > q.max_sge.1;
        let Some(sgl) = sg_list(w.sg_list, w.num_sge).filter(|_| !too_many) else {
            if !bad.is_null() {
                // SAFETY: as above.
                unsafe { *bad = wr };
            }
            return libc::EINVAL;
        };
        if st.ud.is_some() && st.mode == Mode::Roce {
            // The engine's UD QP places it (ud_roce.rs).
            match crate::ud_roce::post_recv(st, w.wr_id, sgl, MAX_QP_WR as usize) {
                Ok(wait) => barrier |= wait,
                Err(e) => {
                    if !bad.is_null() {
                        // SAFETY: as above.
                        unsafe { *bad = wr };
                    }
                    return e;
                }
            }
            wr = w.next;
            continue;
        }
        if !crate::inflight::room(st, true, q.max_wr.1) {
            if !bad.is_null() {
                // SAFETY: as above.
                unsafe { *bad = wr };
            }
            return libc::ENOMEM;
        }
        let id = crate::inflight::insert(WrMeta {
            app_wr_id: w.wr_id,
            qp: st.clone(),
            recv: true,
            signaled: true,
            owned_key: 0,
            ext: Default::default(),
        });
        match &st.ud {
            // UD receives wait in the shim until a datagram for this QP arrives (ud.rs).
            Some(ud) => {
                if let Err(e) = crate::ud::post_recv(ud, id, sgl, MAX_QP_WR as usize) {
                    crate::inflight::remove(id);
                    if !bad.is_null() {
                        // SAFETY: as above.
                        unsafe { *bad = wr };
                    }
                    return e;
                }
            }
            None => batch.add(Pending::Recv(RecvWr { wr_id: id, sgl })),
        }
        wr = w.next;
    }
    // The chain is one doorbell, rung before any barrier waits for it.
    batch.flush();
    drop(batch);
    if barrier {
        // In place before the call returns (uc.rs): UD, like UC, drops a datagram that
        // finds no receive.
        crate::uc::barrier(st.mode);
    }
    0
}

unsafe extern "C" fn op_post_srq_recv(
    srq: *mut ibv_srq,
    mut wr: *mut ibv_recv_wr,
    bad: *mut *mut ibv_recv_wr,
) -> c_int {
    let set_bad = |w: *mut ibv_recv_wr| {
        if !bad.is_null() {
            // SAFETY: the caller's out-parameter.
            unsafe { *bad = w };
        }
    };
    if srq.is_null() {
        set_bad(wr);
        return libc::EINVAL;
    }
    // SAFETY: SRQs come from ibv_create_srq: ibv_srq is the first field of our Srq.
    let st = &unsafe { &*(srq as *const Srq) }.st;
    while !wr.is_null() {
        // SAFETY: the caller's work request chain.
        let w = unsafe { &*wr };
        let Some(sgl) = sg_list(w.sg_list, w.num_sge) else {
            set_bad(wr);
            return libc::EINVAL;
        };
        let mut q = lock(&st.q);
        if q.len() >= st.max_wr as usize || w.num_sge as u32 > st.max_sge {
            drop(q);
            set_bad(wr);
            return libc::ENOMEM;
        }
        q.push_back(crate::srq::SrqWr {
            app_wr_id: w.wr_id,
            sgl,
        });
        drop(q);
        wr = w.next;
    }
    0
}

// ---------------------------------------------------------------------------------------
// SRQ (srq.rs), AH, multicast
// ---------------------------------------------------------------------------------------

#[repr(C)]
pub struct Srq {
    pub srq: ibv_srq,
    pub st: Arc<crate::srq::SrqState>,
    /// Its SRQ number (`ibv_get_srq_num`; what XRC senders name).
    pub num: u32,
    /// The XRC domain of an XRC SRQ (held: the domain is busy while the SRQ lives).
    pub xrcd: Option<Arc<crate::xrc::XrcdState>>,
}

/// A new SRQ of `pd` (`attr`'s max_wr/max_sge written back), or the errno.
///
/// # Safety
/// `pd` is a live PD this library returned.
pub(crate) unsafe fn new_srq(
    pd: *mut ibv_pd,
    attr: &mut ibv_srq_attr,
    srq_context: *mut c_void,
    xrc: Option<(Arc<CqState>, usize)>,
) -> Result<Box<Srq>, c_int> {
    if attr.max_wr == 0 || attr.max_wr > 1 << 14 || attr.max_sge > 16 {
        return Err(libc::EINVAL);
    }
    attr.max_sge = attr.max_sge.max(1);
    let st = Arc::new(crate::srq::SrqState {
        q: Mutex::new(Default::default()),
        max_wr: attr.max_wr,
        max_sge: attr.max_sge,
        limit: std::sync::atomic::AtomicU32::new(attr.srq_limit),
        dead: AtomicBool::new(false),
        xrc,
    });
    // SAFETY: an all-zero ibv_srq is valid; mutex/cond initialised below.
    let mut b = Box::new(Srq {
        srq: unsafe { std::mem::zeroed() },
        st,
        num: crate::xrc::new_srq_num(),
        xrcd: None,
    });
    // SAFETY: a live PD.
    b.srq.context = unsafe { (*pd).context };
    b.srq.srq_context = srq_context;
    b.srq.pd = pd;
    b.srq.handle = global().next_pd.fetch_add(1, Ordering::Relaxed);
    // SAFETY: initialise the embedded mutex and condition variable.
    unsafe {
        libc::pthread_mutex_init(std::ptr::addr_of_mut!(b.srq.mutex) as *mut _, null_mut());
        libc::pthread_cond_init(std::ptr::addr_of_mut!(b.srq.cond) as *mut _, null_mut());
    }
    Ok(b)
}

#[export_name = "ferroce_v_ibv_create_srq"]
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    a: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    if pd.is_null() || a.is_null() {
        return fail(libc::EINVAL, "ibv_create_srq");
    }
    // SAFETY: the caller's init attributes (max_wr/max_sge are written back) and live PD.
    let a = unsafe { &mut *a };
    match unsafe { new_srq(pd, &mut a.attr, a.srq_context, None) } {
        Ok(b) => Box::into_raw(b) as *mut ibv_srq,
        Err(e) => fail(e, "ibv_create_srq: capabilities"),
    }
}

#[export_name = "ferroce_v_ibv_destroy_srq"]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    if srq.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: an SRQ from ibv_create_srq(_ex), freed once (QPs keep the shared part alive).
    let b = unsafe { Box::from_raw(srq as *mut Srq) };
    b.st.dead.store(true, Ordering::SeqCst);
    lock(&b.st.q).clear();
    if let Some(x) = &b.xrcd {
        crate::xrc::forget_srq(b.num);
        // SAFETY: the SRQ's PD, live while the SRQ is (verbs forbids freeing it first).
        let pd = unsafe { (*b.srq.pd).handle };
        global()
            .mrs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove_xrc_pd(crate::xrc::domain_id(x), pd);
        x.users.fetch_sub(1, Ordering::SeqCst);
    }
    0
}

#[export_name = "ferroce_v_ibv_modify_srq"]
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    a: *mut ibv_srq_attr,
    m: c_int,
) -> c_int {
    if srq.is_null() || a.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a live SRQ and the caller's attributes.
    let (st, a) = (&unsafe { &*(srq as *const Srq) }.st, unsafe { &*a });
    let m = m as c_uint;
    if m & IBV_SRQ_MAX_WR != 0 {
        // Resizing is not offered (the queue is as large as created).
        return libc::EINVAL;
    }
    if m & IBV_SRQ_LIMIT != 0 {
        if a.srq_limit > st.max_wr {
            return libc::EINVAL;
        }
        st.limit.store(a.srq_limit, Ordering::Relaxed);
    }
    0
}

#[export_name = "ferroce_v_ibv_query_srq"]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, a: *mut ibv_srq_attr) -> c_int {
    if srq.is_null() || a.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: a live SRQ and the caller's attribute struct.
    let st = &unsafe { &*(srq as *const Srq) }.st;
    unsafe {
        a.write(ibv_srq_attr {
            max_wr: st.max_wr,
            max_sge: st.max_sge,
            srq_limit: st.limit.load(Ordering::Relaxed),
        })
    };
    0
}

#[repr(C)]
pub struct Ah {
    pub ah: ibv_ah,
    pub attr: ibv_ah_attr,
}

#[export_name = "ferroce_v_ibv_create_ah"]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    if pd.is_null() || attr.is_null() {
        return fail(libc::EINVAL, "ibv_create_ah");
    }
    // Both ports are Ethernet (RoCE): an address is a GID, so an AH without a global route
    // names no destination (rdma-core's providers refuse it with EINVAL), unless it names a
    // ferroce LID (lid.rs).
    // SAFETY: `attr` is the application's ibv_ah_attr (checked non-null above).
    if unsafe { (*attr).is_global == 0 && crate::lid::peer_of_lid((*attr).dlid).is_none() } {
        return fail(
            libc::EINVAL,
            "ibv_create_ah: a RoCE port needs a GRH (is_global = 1) or a ferroce LID",
        );
    }
    // SAFETY: live PD and the caller's attributes.
    let ah = Box::new(Ah {
        ah: ibv_ah {
            context: unsafe { (*pd).context },
            pd,
            handle: 0,
        },
        // SAFETY: `attr` points to the application's ibv_ah_attr (checked non-null above), read once.
        attr: unsafe { attr.read() },
    });
    // A UD peer: its datagram stream is set up now, before the first send.
    if let Some(peer) = peer_of(&ah.attr) {
        // SAFETY: the PD's context is one this library opened.
        if let Some(ctx) = unsafe { ctx_of((*pd).context) } {
            crate::ud::warm(peer, ctx.dev.mode);
        }
    }
    Box::into_raw(ah) as *mut ibv_ah
}

#[export_name = "ferroce_v_ibv_destroy_ah"]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    if ah.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: an AH from ibv_create_ah, freed once.
    drop(unsafe { Box::from_raw(ah as *mut Ah) });
    0
}

#[export_name = "ferroce_v_ibv_init_ah_from_wc"]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    c: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    attr: *mut ibv_ah_attr,
) -> c_int {
    // SAFETY: `c` is a context this library returned from ibv_open_device; ctx_of checks null.
    if unsafe { ctx_of(c) }.is_none() || wc.is_null() || attr.is_null() || port != 1 {
        return libc::EINVAL;
    }
    // SAFETY: the caller's work completion.
    let w = unsafe { &*wc };
    // A RoCE port needs the GRH to answer (rdma-core: the address is the GID).
    if w.wc_flags & IBV_WC_GRH == 0 || grh.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: verbs' GRH area is the first 40 bytes of the receive buffer, `grh` points to it.
    let g = unsafe { std::ptr::read_unaligned(grh as *const [u8; 40]) };
    // RoCEv2 over IPv4 (what both devices write): the IPv4 header in the last 20 bytes. The
    // reply goes to its source from this host's IPv4 GID (rdma-core's set_ah_attr_by_ipv4
    // does the same).
    let Some((src, ttl, tos)) = crate::ud_roce::ipv4_of_grh(&g) else {
        return libc::EINVAL;
    };
    let mut a = ibv_ah_attr {
        dlid: w.slid,
        sl: w.sl,
        src_path_bits: w.dlid_path_bits,
        is_global: 1,
        port_num: port,
        ..Default::default()
    };
    // SAFETY: writing the raw bytes of a plain-data union.
    unsafe {
        a.grh.dgid.raw[10] = 0xff;
        a.grh.dgid.raw[11] = 0xff;
        a.grh.dgid.raw[12..16].copy_from_slice(&src.octets());
    }
    a.grh.sgid_index = 1; // ::ffff:a.b.c.d, this host's RoCEv2 IPv4 GID
    a.grh.hop_limit = ttl;
    a.grh.traffic_class = tos;
    // SAFETY: the caller's out-parameter.
    unsafe { attr.write(a) };
    0
}

#[export_name = "ferroce_v_ibv_create_ah_from_wc"]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port: u8,
) -> *mut ibv_ah {
    if pd.is_null() {
        return fail(libc::EINVAL, "ibv_create_ah_from_wc");
    }
    let mut a = ibv_ah_attr::default();
    // SAFETY: a live PD's context, the caller's WC and GRH (checked inside).
    let r = unsafe { ibv_init_ah_from_wc((*pd).context, port, wc, grh, &mut a) };
    if r != 0 {
        return fail(r, "ibv_create_ah_from_wc");
    }
    // SAFETY: a live PD and the attributes just built.
    unsafe { ibv_create_ah(pd, &mut a) }
}

#[export_name = "ferroce_v_ibv_attach_mcast"]
pub unsafe extern "C" fn ibv_attach_mcast(
    _qp: *mut ibv_qp,
    _gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    libc::EOPNOTSUPP
}

#[export_name = "ferroce_v_ibv_detach_mcast"]
pub unsafe extern "C" fn ibv_detach_mcast(
    _qp: *mut ibv_qp,
    _gid: *const ibv_gid,
    _lid: u16,
) -> c_int {
    libc::EOPNOTSUPP
}

// ---------------------------------------------------------------------------------------
// Async events, strings, helpers, compat entry points librdmacm binds to
// ---------------------------------------------------------------------------------------

#[export_name = "ferroce_v_ibv_get_async_event"]
pub unsafe extern "C" fn ibv_get_async_event(
    c: *mut ibv_context,
    ev: *mut ibv_async_event,
) -> c_int {
    // SAFETY: `c` is a context this library returned from ibv_open_device (the verbs contract); ctx_of checks null.
    let Some(ctx) = (unsafe { ctx_of(c) }) else {
        return -1;
    };
    if ev.is_null() {
        return -1;
    }
    loop {
        if let Some((kind, element)) = ctx.events.pop() {
            let mut e = ibv_async_event {
                event_type: kind,
                ..Default::default()
            };
            // The union member the event type names (CQ or QP events only are raised).
            if kind == IBV_EVENT_CQ_ERR {
                e.element.cq = element as *mut ibv_cq;
            } else {
                e.element.qp = element as *mut ibv_qp;
            }
            // SAFETY: the caller's out-parameter, checked non-null.
            unsafe { ev.write(e) };
            return 0;
        }
        // None pending: block (or EAGAIN on a non-blocking fd) until one is signalled.
        let mut v: u64 = 0;
        // SAFETY: reads into a live u64 from our eventfd.
        let n = unsafe {
            libc::read(
                ctx.vctx.context.async_fd,
                &mut v as *mut u64 as *mut c_void,
                8,
            )
        };
        if n != 8 {
            return -1;
        }
    }
}

#[export_name = "ferroce_v_ibv_ack_async_event"]
pub unsafe extern "C" fn ibv_ack_async_event(_ev: *mut ibv_async_event) {}

macro_rules! cstr {
    ($s:expr) => {
        concat!($s, "\0").as_ptr() as *const c_char
    };
}

#[export_name = "ferroce_v_ibv_wc_status_str"]
pub extern "C" fn ibv_wc_status_str(s: c_uint) -> *const c_char {
    match s {
        0 => cstr!("success"),
        1 => cstr!("local length error"),
        2 => cstr!("local QP operation error"),
        3 => cstr!("local EE context operation error"),
        4 => cstr!("local protection error"),
        5 => cstr!("Work Request Flushed Error"),
        6 => cstr!("memory management operation error"),
        7 => cstr!("bad response error"),
        8 => cstr!("local access error"),
        9 => cstr!("remote invalid request error"),
        10 => cstr!("remote access error"),
        11 => cstr!("remote operation error"),
        12 => cstr!("transport retry counter exceeded"),
        13 => cstr!("RNR retry counter exceeded"),
        14 => cstr!("local RDD violation error"),
        15 => cstr!("remote invalid RD request"),
        16 => cstr!("aborted error"),
        17 => cstr!("invalid EE context number"),
        18 => cstr!("invalid EE context state"),
        19 => cstr!("fatal error"),
        20 => cstr!("response timeout error"),
        21 => cstr!("general error"),
        _ => cstr!("unknown"),
    }
}

#[export_name = "ferroce_v_ibv_node_type_str"]
pub extern "C" fn ibv_node_type_str(t: c_int) -> *const c_char {
    match t {
        1 => cstr!("InfiniBand channel adapter"),
        2 => cstr!("InfiniBand switch"),
        3 => cstr!("InfiniBand router"),
        4 => cstr!("iWARP NIC"),
        _ => cstr!("unknown"),
    }
}

#[export_name = "ferroce_v_ibv_port_state_str"]
pub extern "C" fn ibv_port_state_str(s: c_uint) -> *const c_char {
    match s {
        0 => cstr!("PORT_NOP"),
        1 => cstr!("PORT_DOWN"),
        2 => cstr!("PORT_INIT"),
        3 => cstr!("PORT_ARMED"),
        4 => cstr!("PORT_ACTIVE"),
        5 => cstr!("PORT_ACTIVE_DEFER"),
        _ => cstr!("invalid state"),
    }
}

#[export_name = "ferroce_v_ibv_event_type_str"]
pub extern "C" fn ibv_event_type_str(_e: c_uint) -> *const c_char {
    cstr!("unknown")
}

#[export_name = "ferroce_v_ibv_read_sysfs_file"]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    _dir: *const c_char,
    _file: *const c_char,
    _buf: *mut c_char,
    _size: usize,
) -> c_int {
    // No sysfs for ferroce devices.
    -1
}

#[export_name = "ferroce_v_ibv_get_sysfs_path"]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    cstr!("/sys")
}

#[export_name = "ferroce_v_ibv_fork_init"]
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

#[export_name = "ferroce_v_ibv_is_fork_initialized"]
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    0
}

#[export_name = "ferroce_v_ibv_dontfork_range"]
pub extern "C" fn ibv_dontfork_range(_b: *mut c_void, _s: usize) -> c_int {
    0
}

#[export_name = "ferroce_v_ibv_dofork_range"]
pub extern "C" fn ibv_dofork_range(_b: *mut c_void, _s: usize) -> c_int {
    0
}

#[export_name = "ferroce_v_ibv_register_driver"]
pub extern "C" fn ibv_register_driver(_name: *const c_char, _init: *mut c_void) {}

const RATES: [(c_int, c_int, c_int); 18] = [
    // (enum ibv_rate, multiple of 2.5 Gb/s, Mb/s)
    (2, 1, 2500),
    (3, 4, 10000),
    (4, 12, 30000),
    (5, 2, 5000),
    (6, 8, 20000),
    (7, 16, 40000),
    (8, 24, 60000),
    (9, 32, 80000),
    (10, 48, 120000),
    (11, 6, 14062),
    (12, 22, 56250),
    (13, 45, 112500),
    (14, 67, 168750),
    (15, 10, 25000),
    (16, 40, 100000),
    (17, 80, 200000),
    (18, 120, 300000),
    (19, 20, 50000),
];

#[export_name = "ferroce_v_ibv_rate_to_mult"]
pub extern "C" fn ibv_rate_to_mult(r: c_int) -> c_int {
    RATES.iter().find(|x| x.0 == r).map(|x| x.1).unwrap_or(0)
}

#[export_name = "ferroce_v_mult_to_ibv_rate"]
pub extern "C" fn mult_to_ibv_rate(m: c_int) -> c_int {
    RATES.iter().find(|x| x.1 == m).map(|x| x.0).unwrap_or(0)
}

#[export_name = "ferroce_v_ibv_rate_to_mbps"]
pub extern "C" fn ibv_rate_to_mbps(r: c_int) -> c_int {
    RATES.iter().find(|x| x.0 == r).map(|x| x.2).unwrap_or(0)
}

#[export_name = "ferroce_v_mbps_to_ibv_rate"]
pub extern "C" fn mbps_to_ibv_rate(m: c_int) -> c_int {
    RATES.iter().find(|x| x.2 == m).map(|x| x.0).unwrap_or(0)
}

/// Kernel ABI converters librdmacm binds to (only used with a kernel rdma_cm, which this
/// machine has none of): leave the destination as it is.
#[export_name = "ferroce_v_ibv_copy_ah_attr_from_kern"]
pub extern "C" fn ibv_copy_ah_attr_from_kern(_d: *mut c_void, _s: *const c_void) {}
#[export_name = "ferroce_v_ibv_copy_qp_attr_from_kern"]
pub extern "C" fn ibv_copy_qp_attr_from_kern(_d: *mut c_void, _s: *const c_void) {}
#[export_name = "ferroce_v_ibv_copy_path_rec_from_kern"]
pub extern "C" fn ibv_copy_path_rec_from_kern(_d: *mut c_void, _s: *const c_void) {}
#[export_name = "ferroce_v_ibv_copy_path_rec_to_kern"]
pub extern "C" fn ibv_copy_path_rec_to_kern(_d: *mut c_void, _s: *const c_void) {}

#[export_name = "ferroce_v_ibv_set_ece"]
pub extern "C" fn ibv_set_ece(_qp: *mut ibv_qp, _e: *mut ibv_ece) -> c_int {
    libc::EOPNOTSUPP
}

#[export_name = "ferroce_v_ibv_query_ece"]
pub extern "C" fn ibv_query_ece(_qp: *mut ibv_qp, _e: *mut ibv_ece) -> c_int {
    libc::EOPNOTSUPP
}

#[export_name = "ferroce_v_ibv_resolve_eth_l2_from_gid"]
pub extern "C" fn ibv_resolve_eth_l2_from_gid(
    _c: *mut ibv_context,
    _a: *mut ibv_ah_attr,
    _mac: *mut u8,
    _vid: *mut u16,
) -> c_int {
    -1
}

/// `ibv_rereg_mr(3)`: change an MR's translation (new buffer), protection domain and/or
/// access rights in place; the keys stay. Errors are rdma-core's: `IBV_REREG_MR_ERR_INPUT`
/// with errno EINVAL for bad input (the MR is unchanged and still usable),
/// `IBV_REREG_MR_ERR_CMD` with errno EINVAL for an MR this library does not know.
#[export_name = "ferroce_v_ibv_rereg_mr"]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut ibv_mr,
    flags: c_int,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> c_int {
    let input = |what: &str| {
        dbg_log!("ibv_rereg_mr: {what}");
        set_errno(libc::EINVAL);
        IBV_REREG_MR_ERR_INPUT
    };
    let flags = flags as c_uint;
    if mr.is_null() {
        return input("no MR");
    }
    if flags == 0 || flags & !IBV_REREG_MR_FLAGS_SUPPORTED != 0 {
        return input("flags must be a non-empty set of CHANGE_TRANSLATION|PD|ACCESS");
    }
    let translation = flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0;
    if translation && (addr.is_null() || len == 0) {
        return input("CHANGE_TRANSLATION needs an address and a length");
    }
    if translation && !crate::mr::mapped(addr as u64, len as u64) {
        // The kernel's answer when it cannot pin the new range (rdma-core: ERR_CMD + errno).
        dbg_log!("ibv_rereg_mr: the new range is not mapped memory");
        set_errno(libc::EFAULT);
        return IBV_REREG_MR_ERR_CMD;
    }
    if flags & IBV_REREG_MR_CHANGE_PD != 0 && pd.is_null() {
        return input("CHANGE_PD needs a PD");
    }
    let access = access as c_uint & 0xf;
    if flags & IBV_REREG_MR_CHANGE_ACCESS != 0
        && access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC) != 0
        && access & IBV_ACCESS_LOCAL_WRITE == 0
    {
        return input("remote write/atomic without local write");
    }
    // SAFETY: `mr` is an MR this library returned from ibv_reg_mr (the verbs contract), and
    // a PD named with CHANGE_PD is one of ours.
    let (key, new_pd) = unsafe {
        (
            (*mr).lkey,
            (flags & IBV_REREG_MR_CHANGE_PD != 0).then(|| (*pd).handle),
        )
    };
    let ok = global()
        .mrs
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .reregister(
            key,
            new_pd,
            translation.then_some((addr as u64, len as u64)),
            (flags & IBV_REREG_MR_CHANGE_ACCESS != 0).then_some(access),
        );
    if !ok {
        // Not a registered application range (or a range that wraps the address space).
        set_errno(libc::EINVAL);
        return IBV_REREG_MR_ERR_CMD;
    }
    // SAFETY: as above; the application's ibv_mr mirrors the new registration (libibverbs
    // updates these fields itself after a provider's rereg succeeds).
    unsafe {
        if new_pd.is_some() {
            (*mr).pd = pd;
        }
        if translation {
            (*mr).addr = addr;
            (*mr).length = len;
        }
    }
    0
}

#[export_name = "ferroce_v_ibv_reg_dmabuf_mr"]
pub extern "C" fn ibv_reg_dmabuf_mr(
    _pd: *mut ibv_pd,
    _off: u64,
    _len: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    fail(libc::EOPNOTSUPP, "")
}

#[export_name = "ferroce_v_ibv_import_device"]
pub extern "C" fn ibv_import_device(_fd: c_int) -> *mut ibv_context {
    fail(libc::EOPNOTSUPP, "")
}
#[export_name = "ferroce_v_ibv_import_pd"]
pub extern "C" fn ibv_import_pd(_c: *mut ibv_context, _h: u32) -> *mut ibv_pd {
    fail(libc::EOPNOTSUPP, "")
}
#[export_name = "ferroce_v_ibv_unimport_pd"]
pub extern "C" fn ibv_unimport_pd(_pd: *mut ibv_pd) {}
#[export_name = "ferroce_v_ibv_import_mr"]
pub extern "C" fn ibv_import_mr(_pd: *mut ibv_pd, _h: u32) -> *mut ibv_mr {
    fail(libc::EOPNOTSUPP, "")
}
#[export_name = "ferroce_v_ibv_unimport_mr"]
pub extern "C" fn ibv_unimport_mr(_mr: *mut ibv_mr) {}
#[export_name = "ferroce_v_ibv_import_dm"]
pub extern "C" fn ibv_import_dm(_c: *mut ibv_context, _h: u32) -> *mut c_void {
    fail(libc::EOPNOTSUPP, "")
}
#[export_name = "ferroce_v_ibv_unimport_dm"]
pub extern "C" fn ibv_unimport_dm(_dm: *mut c_void) {}

#[export_name = "ferroce_v_ibv_query_qp_data_in_order"]
pub extern "C" fn ibv_query_qp_data_in_order(_qp: *mut ibv_qp, _op: c_uint, _flags: u32) -> c_int {
    0
}
