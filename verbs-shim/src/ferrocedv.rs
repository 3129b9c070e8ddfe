//! `ferrocedv_*`: the multiplane extension API (`include/ferrocedv.h`, docs/ferrocedv.md),
//! exported as `<name>@@FERROCEDV_1.0` (`exports.rs`). A native QP's connection, its paths and
//! planes, read on the engine's thread; `ferrocedv_set_planes` restricts the connection
//! (`Connection::set_plane_mask`). Errors are positive errno values, as the header lists.

use crate::state::{self, lock, Mode};
use crate::verbs::qp_of;
use ferroce_dataplane::engine::{Command, TransportFn};
use ferroce_transport::{ConnId, ConnState, Connection, PathState};
use libc::{c_int, size_t};
use std::time::{Duration, Instant};

/// `struct ferrocedv_qp` (48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FerrocedvQp {
    pub comp_mask: u64,
    pub conn_id: u64,
    pub peer_ipv4: u32,
    pub state: u32,
    pub num_paths: u32,
    pub num_planes: u32,
    pub plane_mask: u64,
    pub mtu: u32,
    pub reserved: u32,
}

pub const QP_MASK_MTU: u64 = 1;
pub const PATH_MASK_SRTT: u64 = 1;

/// `struct ferrocedv_path_counters`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FerrocedvPathCounters {
    pub tx_pkts: u64,
    pub tx_bytes: u64,
    pub retx_pkts: u64,
    pub acked_pkts: u64,
    pub sack_holes: u64,
    pub time_losses: u64,
    pub tlps: u64,
    pub rtos: u64,
    pub ecn_echoed: u64,
    pub cwnd_decreases: u64,
    pub probes_sent: u64,
    pub failures: u64,
    pub reroutes: u64,
}

/// `struct ferrocedv_path` (176 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct FerrocedvPath {
    pub comp_mask: u64,
    pub index: u32,
    pub state: u32,
    pub plane: u32,
    pub home_plane: u32,
    pub udp_sport: u16,
    pub reserved0: u16,
    pub generation: u32,
    pub srtt_ns: u64,
    pub min_rtt_ns: u64,
    pub rto_ns: u64,
    pub cwnd_bytes: u64,
    pub inflight_bytes: u64,
    pub counters: FerrocedvPathCounters,
}

const EINVAL: c_int = libc::EINVAL;

/// The connection of the QP behind `qp`, and the engine that has it.
///
/// # Safety
/// `qp` is null or a QP this library created (the verbs contract: this library is
/// libibverbs, so every `ibv_qp` an application holds is one of ours).
unsafe fn conn_of(
    qp: *mut crate::sys::ibv_qp,
) -> Result<(ConnId, &'static state::EngineCtl), c_int> {
    // SAFETY: as this function's contract; qp_of checks null.
    let q = unsafe { qp_of(qp) }.ok_or(EINVAL)?;
    let st = &q.st;
    // RC QPs of the native device (UC ones ride a connection too, but are not tested
    // through this API yet: the header documents them as EOPNOTSUPP).
    if st.mode != Mode::Native || st.ud.is_some() || st.xrc.is_some() || st.uc {
        return Err(libc::EOPNOTSUPP);
    }
    let conn = lock(&st.inner).conn.ok_or(libc::ENOTCONN)?;
    let e = state::running(Mode::Native).ok_or(libc::ENOTCONN)?;
    Ok((conn, e))
}

/// Run `f` with the connection on the engine's thread and wait for its answer (5 s at most;
/// engine turns are taken here meanwhile, as an empty `ibv_poll_cq` takes them).
fn with_conn<R: Send + 'static>(
    e: &state::EngineCtl,
    conn: ConnId,
    f: impl FnOnce(&mut Connection) -> R + Send + 'static,
) -> Result<R, c_int> {
    let (tx, rx) = crossbeam_channel::bounded(1);
    e.h.command(Command::Exec(TransportFn(Box::new(move |t| {
        let r = t.engine_mut().native().and_then(|ep| {
            let r = ep.connection_mut(conn).map(f);
            // Its deadlines and readiness follow what `f` changed.
            ep.refresh(conn);
            r
        });
        let _ = tx.send(r);
    }))));
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        match rx.recv_timeout(Duration::from_millis(1)) {
            Ok(r) => return r.ok_or(libc::EIO),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return Err(libc::EIO),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                let _ = state::drive_engines();
            }
        }
    }
    Err(libc::ETIMEDOUT)
}

fn qp_info(c: &Connection) -> FerrocedvQp {
    FerrocedvQp {
        comp_mask: QP_MASK_MTU,
        conn_id: c.id.0 as u64,
        peer_ipv4: u32::from(c.peer).to_be(),
        state: match c.state {
            ConnState::Opening => 0,
            ConnState::Open => 1,
            ConnState::Closing => 2,
            ConnState::Closed => 3,
            ConnState::Failed => 4,
        },
        num_paths: c.num_paths() as u32,
        num_planes: c.nic_ports() as u32,
        plane_mask: c.plane_mask(),
        mtu: c.mtu(),
        reserved: 0,
    }
}

fn path_info(c: &Connection) -> Vec<FerrocedvPath> {
    // Every agreed path, the ones not used yet (not built) as they start.
    (0..c.num_paths())
        .filter_map(|i| c.with_path(i, path_entry))
        .collect()
}

fn path_entry(p: &ferroce_transport::path::TxPath) -> FerrocedvPath {
    let k = &p.counters();
    let srtt = p.srtt_ns.filter(|s| s.is_finite() && *s >= 0.0);
    FerrocedvPath {
        comp_mask: if srtt.is_some() { PATH_MASK_SRTT } else { 0 },
        index: p.index as u32,
        state: match p.state {
            PathState::Good => 0,
            PathState::Suspect => 1,
            PathState::Probing => 2,
        },
        plane: p.plane as u32,
        home_plane: p.home_plane as u32,
        udp_sport: p.entropy,
        reserved0: 0,
        generation: p.generation,
        srtt_ns: srtt.map_or(0, |s| s as u64),
        min_rtt_ns: if srtt.is_some() { p.min_rtt_ns } else { 0 },
        rto_ns: p.rto_ns,
        cwnd_bytes: p.cwnd().max(0.0) as u64,
        inflight_bytes: p.inflight_bytes,
        counters: FerrocedvPathCounters {
            tx_pkts: k.tx_pkts,
            tx_bytes: k.tx_bytes,
            retx_pkts: k.retx_pkts,
            acked_pkts: k.acked_pkts,
            sack_holes: k.sack_holes,
            time_losses: k.time_losses,
            tlps: k.tlps,
            rtos: k.rtos,
            ecn_echoed: k.ecn_echoed,
            cwnd_decreases: k.cwnd_decreases,
            probes_sent: k.probes_sent,
            failures: k.failures,
            reroutes: k.reroutes,
        },
    }
}

/// Catch a panic so none crosses the FFI boundary: it becomes EIO.
fn guarded(f: impl FnOnce() -> c_int) -> c_int {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(libc::EIO)
}

#[export_name = "ferroce_v_ferrocedv_query_qp"]
/// # Safety
/// `qp` is null or a QP of this library; `attr` is null or writable for `attr_size` bytes.
pub unsafe extern "C" fn ferrocedv_query_qp(
    qp: *mut crate::sys::ibv_qp,
    attr: *mut FerrocedvQp,
    attr_size: size_t,
) -> c_int {
    guarded(|| {
        if attr.is_null() || attr_size < std::mem::size_of::<FerrocedvQp>() {
            return EINVAL;
        }
        // SAFETY: the caller's contract for `qp`.
        let (conn, e) = match unsafe { conn_of(qp) } {
            Ok(x) => x,
            Err(r) => return r,
        };
        match with_conn(e, conn, |c| qp_info(c)) {
            Ok(info) => {
                // SAFETY: `attr` is non-null and writable for at least our struct's size (the
                // caller's contract, checked against attr_size); unaligned-safe write.
                unsafe { attr.write_unaligned(info) };
                0
            }
            Err(r) => r,
        }
    })
}

#[export_name = "ferroce_v_ferrocedv_query_paths"]
/// # Safety
/// `qp` is null or a QP of this library; `num_paths` null or a valid `u32`; `paths` null or
/// writable for `*num_paths` entries of `path_size` bytes.
pub unsafe extern "C" fn ferrocedv_query_paths(
    qp: *mut crate::sys::ibv_qp,
    paths: *mut FerrocedvPath,
    num_paths: *mut u32,
    path_size: size_t,
) -> c_int {
    guarded(|| {
        if num_paths.is_null() || path_size < std::mem::size_of::<FerrocedvPath>() {
            return EINVAL;
        }
        // SAFETY: non-null, the caller's valid u32.
        let cap = unsafe { num_paths.read_unaligned() } as usize;
        if cap > 0 && paths.is_null() {
            return EINVAL;
        }
        // SAFETY: the caller's contract for `qp`.
        let (conn, e) = match unsafe { conn_of(qp) } {
            Ok(x) => x,
            Err(r) => return r,
        };
        let list = match with_conn(e, conn, |c| path_info(c)) {
            Ok(l) => l,
            Err(r) => return r,
        };
        let n = list.len().min(cap);
        for (i, p) in list.iter().take(n).enumerate() {
            // SAFETY: entry i < cap lies within the caller's array of `cap` entries of
            // `path_size` bytes, each at least our struct's size; unaligned-safe write.
            unsafe {
                let dst = (paths as *mut u8).add(i * path_size) as *mut FerrocedvPath;
                dst.write_unaligned(*p);
            }
        }
        // SAFETY: non-null, the caller's valid u32.
        unsafe { num_paths.write_unaligned(n as u32) };
        0
    })
}

#[export_name = "ferroce_v_ferrocedv_set_planes"]
/// # Safety
/// `qp` is null or a QP of this library.
pub unsafe extern "C" fn ferrocedv_set_planes(
    qp: *mut crate::sys::ibv_qp,
    plane_mask: u64,
) -> c_int {
    guarded(|| {
        if plane_mask == 0 {
            return EINVAL;
        }
        // SAFETY: the caller's contract for `qp`.
        let (conn, e) = match unsafe { conn_of(qp) } {
            Ok(x) => x,
            Err(r) => return r,
        };
        match with_conn(e, conn, move |c| c.set_plane_mask(plane_mask)) {
            Ok(Ok(m)) => {
                state::dbg_log!("connection {} restricted to planes {m:#x}", conn.0);
                0
            }
            Ok(Err(_)) => EINVAL,
            Err(r) => r,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The header's sizes (include/ferrocedv.h; the C test checks them from C).
    #[test]
    fn layouts_match_the_header() {
        assert_eq!(std::mem::size_of::<FerrocedvQp>(), 48);
        assert_eq!(std::mem::size_of::<FerrocedvPath>(), 176);
    }

    #[test]
    fn bad_pointers_and_sizes_are_einval() {
        let mut a = FerrocedvQp::default();
        // SAFETY: null QP and null/short buffers are what is tested; nothing is dereferenced.
        unsafe {
            assert_eq!(ferrocedv_query_qp(std::ptr::null_mut(), &mut a, 48), EINVAL);
            assert_eq!(ferrocedv_query_qp(std::ptr::null_mut(), &mut a, 8), EINVAL);
            assert_eq!(
                ferrocedv_query_qp(std::ptr::null_mut(), std::ptr::null_mut(), 48),
                EINVAL
            );
            let mut n = 4u32;
            assert_eq!(
                ferrocedv_query_paths(std::ptr::null_mut(), std::ptr::null_mut(), &mut n, 176),
                EINVAL
            );
            assert_eq!(ferrocedv_set_planes(std::ptr::null_mut(), 1), EINVAL);
            assert_eq!(ferrocedv_set_planes(std::ptr::null_mut(), 0), EINVAL);
        }
    }
}
