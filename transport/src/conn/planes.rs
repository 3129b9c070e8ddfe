//! Restricting a connection to a subset of its host's planes (NIC ports), for embedders
//! (the verbs shim's `ferrocedv_set_planes`). Local only: the peer sees the same packets,
//! arriving on fewer planes (spec/transport.md §4.6).

use super::*;

/// A plane mask that names none of the host's planes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoSuchPlane;

impl std::fmt::Display for NoSuchPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the plane mask names none of the host's planes")
    }
}

impl std::error::Error for NoSuchPlane {}

impl Connection {
    /// NIC ports (planes) of the host this connection runs on.
    pub fn nic_ports(&self) -> u8 {
        self.nic_ports
    }

    /// The planes this connection may send on (bit i: plane i), within the host's.
    pub fn plane_mask(&self) -> u64 {
        self.plane_mask & self.all_planes()
    }

    pub(super) fn all_planes(&self) -> u64 {
        if self.nic_ports >= 64 {
            u64::MAX
        } else {
            (1u64 << self.nic_ports) - 1
        }
    }

    /// Send only on the planes of `mask` (bits beyond the host's planes are ignored): a path
    /// on another plane moves to an allowed one at once (its packets in flight stay where
    /// they are), a failed path re-routes among the allowed ones only, and no packet of this
    /// connection (data, ACK, probe) leaves on another. `u64::MAX` lifts the restriction;
    /// each path then returns to its own plane by its usual home probes.
    pub fn set_plane_mask(&mut self, mask: u64) -> Result<u64, NoSuchPlane> {
        let m = mask & self.all_planes();
        if m == 0 {
            return Err(NoSuchPlane);
        }
        self.plane_mask = m;
        self.grow_all();
        self.apply_plane_mask();
        Ok(m)
    }

    /// Give every path its home plane within the mask (its own, `index % planes`, if
    /// allowed; else the allowed planes shared round robin) and move it there if its current
    /// plane is not allowed.
    pub(super) fn apply_plane_mask(&mut self) {
        let m = self.plane_mask();
        let allowed: SmallVec<[u8; 8]> = (0..self.nic_ports.min(64))
            .filter(|&b| m >> b & 1 == 1)
            .collect();
        if allowed.is_empty() {
            return;
        }
        for i in 0..self.paths.len() {
            let p = &mut self.paths[i];
            p.allowed = m;
            let own = p.index % p.planes.max(1);
            p.home_plane = if m >> own & 1 == 1 {
                own
            } else {
                allowed[p.index as usize % allowed.len()]
            };
            if p.plane >= 64 || m >> p.plane & 1 == 0 {
                p.plane = p.home_plane;
                p.home_probe_seq = None;
                p.home_probe_at = None;
                p.home_probes = 0;
            }
            self.mark_path(i);
        }
        self.pt_all = true;
    }
}
