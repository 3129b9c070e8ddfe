//! The verbs shim's private connection-manager interface (`verbs-shim/src/cm.rs`), found at
//! run time with `dlsym`: with another libibverbs (real hardware) it is absent and the CM
//! says so (ENODEV) instead of failing to load. `tests/rdmacm_abi.rs` checks these
//! declarations against the shim's, field by field.

use std::ffi::{c_int, c_void, CStr};
use std::sync::OnceLock;

/// The interface version this library speaks (`ferroce_cm_abi()`).
pub const ABI: u32 = 3;

pub const CONNECT_REQUEST: u32 = 1;
pub const CONNECT_RESPONSE: u32 = 2;
pub const ESTABLISHED: u32 = 3;
pub const REJECTED: u32 = 4;
pub const UNREACHABLE: u32 = 5;
pub const DISCONNECTED: u32 = 6;
/// A UD connect's SIDR_REP: `reason` its status, `qp.qpn` and `qkey` the peer's.
pub const SIDR_RESPONSE: u32 = 7;

/// Mirrors `ferroce_verbs::cm::FfiQp`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FfiQp {
    pub qpn: u32,
    pub start_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
}

/// Mirrors `ferroce_verbs::cm::FfiEvent`.
#[repr(C)]
pub struct FfiEvent {
    pub kind: u32,
    pub id: u32,
    pub peer: u32,
    pub local_addr: u32,
    pub port_space: u16,
    pub port: u16,
    pub peer_port: u16,
    pub reason: u16,
    pub qp: FfiQp,
    pub pd_len: u32,
    pub pd: *const u8,
    pub mtu: u32,
    pub qkey: u32,
}

pub type Callback = unsafe extern "C" fn(ev: *const FfiEvent, ctx: *mut c_void);

/// The interface's functions.
pub struct Ops {
    pub start: unsafe extern "C" fn(u32, Option<Callback>, *mut c_void, *mut u32) -> c_int,
    pub listen: unsafe extern "C" fn(u16, u16) -> c_int,
    pub unlisten: unsafe extern "C" fn(u16, u16) -> c_int,
    #[allow(clippy::type_complexity)]
    pub connect:
        unsafe extern "C" fn(u32, u16, u16, u16, *const FfiQp, *const u8, u8, *mut u32) -> c_int,
    pub accept: unsafe extern "C" fn(u32, *const FfiQp, *const u8, u8) -> c_int,
    pub reject: unsafe extern "C" fn(u32, u16, *const u8, u8) -> c_int,
    pub establish: unsafe extern "C" fn(u32, *const u8, u8) -> c_int,
    pub disconnect: unsafe extern "C" fn(u32, *const u8, u8) -> c_int,
    pub release: unsafe extern "C" fn(u32) -> c_int,
    pub sidr_reply: unsafe extern "C" fn(u32, u8, u32, u32, *const u8, u8) -> c_int,
}

fn sym(name: &CStr) -> Option<*mut c_void> {
    // SAFETY: dlsym with a NUL-terminated name over the global scope; only reads.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// The interface, if the loaded libibverbs is ferroce's and speaks [`ABI`].
// The transmutes' target types are the fields' types (written once, in `Ops`).
#[allow(clippy::missing_transmute_annotations)]
pub fn ops() -> Option<&'static Ops> {
    static OPS: OnceLock<Option<Ops>> = OnceLock::new();
    OPS.get_or_init(|| {
        let abi = sym(c"ferroce_cm_abi")?;
        // SAFETY: ferroce_cm_abi is `extern "C" fn() -> u32` in the shim.
        let abi: extern "C" fn() -> u32 = unsafe { std::mem::transmute(abi) };
        if abi() != ABI {
            return None;
        }
        macro_rules! get {
            ($n:literal) => {
                // SAFETY: each name is the shim's function of exactly the type of the field
                // it fills (verbs-shim/src/cm.rs, same ABI version).
                unsafe { std::mem::transmute(sym($n)?) }
            };
        }
        Some(Ops {
            start: get!(c"ferroce_cm_start"),
            listen: get!(c"ferroce_cm_listen"),
            unlisten: get!(c"ferroce_cm_unlisten"),
            connect: get!(c"ferroce_cm_connect"),
            accept: get!(c"ferroce_cm_accept"),
            reject: get!(c"ferroce_cm_reject"),
            establish: get!(c"ferroce_cm_establish"),
            disconnect: get!(c"ferroce_cm_disconnect"),
            release: get!(c"ferroce_cm_release"),
            sidr_reply: get!(c"ferroce_cm_sidr_reply"),
        })
    })
    .as_ref()
}
