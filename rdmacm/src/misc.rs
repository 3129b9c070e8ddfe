//! What the connection manager does not offer, refused as its man pages define a failure
//! (-1 with errno), never a pretended success: multicast, ECE, most options, rsockets.

use crate::state::*;
use crate::sys::*;
use std::ffi::{c_int, c_void};

/// Options: REUSEADDR and AFONLY hold already (ports are not reserved after an id is
/// destroyed; only IPv4 is served); TOS, ACK_TIMEOUT and IB paths are not applied by the
/// engine, so they are refused (ENOSYS).
///
/// # Safety
/// `id` ours.
#[export_name = "frdmacm_v_rdma_set_option"]
pub unsafe extern "C" fn rdma_set_option(
    id: *mut rdma_cm_id,
    level: c_int,
    name: c_int,
    _val: *mut c_void,
    _len: usize,
) -> c_int {
    if id_of(id).is_none() {
        return fail(libc::EINVAL);
    }
    if level == RDMA_OPTION_ID as c_int
        && (name == RDMA_OPTION_ID_REUSEADDR as c_int || name == RDMA_OPTION_ID_AFONLY as c_int)
    {
        return 0;
    }
    fail(libc::ENOSYS)
}

macro_rules! refuse {
    ($($(#[$m:meta])* $name:ident => $errno:expr;)*) => {
        $(
            $(#[$m])*
            // Defined without parameters: on x86-64 (the only target, see exports.rs) the
            // caller passes them in registers and cleans up, so ignoring them is the C
            // function's ABI; -1 in rax is -1 for every integer return type.
            #[export_name = concat!("frdmacm_v_", stringify!($name))]
            pub extern "C" fn $name() -> isize {
                fail($errno) as isize
            }
        )*
    };
}

refuse! {
    /// Multicast (UD) is not implemented.
    rdma_join_multicast => libc::ENOSYS;
    rdma_join_multicast_ex => libc::ENOSYS;
    rdma_leave_multicast => libc::ENOSYS;
    /// Enhanced connection establishment is not negotiated.
    rdma_get_remote_ece => libc::EOPNOTSUPP;
    rdma_set_local_ece => libc::EOPNOTSUPP;
    rdma_reject_ece => libc::EOPNOTSUPP;
    /// rsockets are not implemented: no call can create one, so every other call is on a
    /// descriptor that is not an rsocket.
    rsocket => libc::ENOSYS;
    rbind => libc::ENOSYS;
    rlisten => libc::ENOSYS;
    raccept => libc::ENOSYS;
    rconnect => libc::ENOSYS;
    rshutdown => libc::ENOSYS;
    rclose => libc::ENOSYS;
    rrecv => libc::ENOSYS;
    rrecvfrom => libc::ENOSYS;
    rrecvmsg => libc::ENOSYS;
    rsend => libc::ENOSYS;
    rsendto => libc::ENOSYS;
    rsendmsg => libc::ENOSYS;
    rread => libc::ENOSYS;
    rreadv => libc::ENOSYS;
    rwrite => libc::ENOSYS;
    rwritev => libc::ENOSYS;
    rgetpeername => libc::ENOSYS;
    rgetsockname => libc::ENOSYS;
    rsetsockopt => libc::ENOSYS;
    rgetsockopt => libc::ENOSYS;
    rfcntl => libc::ENOSYS;
    riomap => libc::ENOSYS;
    riounmap => libc::ENOSYS;
    riowrite => libc::ENOSYS;
}

/// rpoll over descriptors none of which can be an rsocket (see above) is poll(2), which is
/// what rdma-core's rpoll does for them; rping and ucmatose wait on their event channel so.
///
/// # Safety
/// As poll(2).
#[export_name = "frdmacm_v_rpoll"]
pub unsafe extern "C" fn rpoll(fds: *mut libc::pollfd, n: libc::nfds_t, timeout: c_int) -> c_int {
    // SAFETY: the caller's poll arguments, passed through.
    unsafe { libc::poll(fds, n, timeout) }
}

/// rselect: select(2), for the same reason.
///
/// # Safety
/// As select(2).
#[export_name = "frdmacm_v_rselect"]
pub unsafe extern "C" fn rselect(
    n: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    t: *mut libc::timeval,
) -> c_int {
    // SAFETY: the caller's select arguments, passed through.
    unsafe { libc::select(n, r, w, e, t) }
}
