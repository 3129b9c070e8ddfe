//! The send paths, and an index over them that finds the next packet's path without reading
//! every path per packet (issue 12): a compact table of the paths' loads, refreshed only
//! for the paths that changed since the last pick. It chooses exactly what the scan over all
//! paths (`scheduler.rs`, the reference, checked against it in tests) chooses.
//!
//! Changes cannot be missed: reads of the paths go through `Deref` to the slice, and every
//! mutable access (`IndexMut`, `get_mut`, `iter_mut`, `push`) marks the path it reaches.

use super::*;
use std::ops::{Deref, Index, IndexMut};

#[cfg(test)]
thread_local! {
    /// Picks the table answered (each also checked against the scan), for the tests to see
    /// that it did.
    pub(crate) static INDEX_PICKS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The built send paths, in index order.
#[derive(Debug, Default)]
pub(super) struct PathVec {
    v: Vec<TxPath>,
    /// Made by the first pick over at most 64 paths; dropped when the connection compacts.
    index: Option<Box<PickIndex>>,
}

impl PathVec {
    #[inline]
    fn mark(&mut self, i: usize) {
        if let Some(ix) = self.index.as_deref_mut() {
            if i < 64 {
                ix.dirty |= 1 << i;
            }
        }
    }

    fn mark_all(&mut self) {
        if let Some(ix) = self.index.as_deref_mut() {
            ix.dirty = u64::MAX;
        }
    }

    pub(super) fn get_mut(&mut self, i: usize) -> Option<&mut TxPath> {
        self.mark(i);
        self.v.get_mut(i)
    }

    pub(super) fn iter_mut(&mut self) -> std::slice::IterMut<'_, TxPath> {
        self.mark_all();
        self.v.iter_mut()
    }

    pub(super) fn push(&mut self, p: TxPath) {
        self.mark(self.v.len());
        self.v.push(p);
    }

    pub(super) fn reserve_exact(&mut self, n: usize) {
        self.v.reserve_exact(n);
    }

    pub(super) fn clear(&mut self) {
        self.v.clear();
        self.mark_all();
    }

    /// Drop the index (the connection went idle); the next pick rebuilds it whole.
    pub(super) fn drop_index(&mut self) {
        self.index = None;
    }
}

impl Deref for PathVec {
    type Target = [TxPath];
    fn deref(&self) -> &[TxPath] {
        &self.v
    }
}

impl Index<usize> for PathVec {
    type Output = TxPath;
    #[inline]
    fn index(&self, i: usize) -> &TxPath {
        &self.v[i]
    }
}

impl IndexMut<usize> for PathVec {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut TxPath {
        self.mark(i);
        &mut self.v[i]
    }
}

impl<'a> IntoIterator for &'a PathVec {
    type Item = &'a TxPath;
    type IntoIter = std::slice::Iter<'a, TxPath>;
    fn into_iter(self) -> Self::IntoIter {
        self.v.iter()
    }
}

impl<'a> IntoIterator for &'a mut PathVec {
    type Item = &'a mut TxPath;
    type IntoIter = std::slice::IterMut<'a, TxPath>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}

#[derive(Debug, Default)]
pub(super) struct PickIndex {
    /// Paths whose keys are stale (bit i: path i).
    dirty: u64,
    /// What every key depends on besides its own path: when it moves, all are recomputed.
    basis: (u8, u32, u64, u8),
    /// Per path: its load when it is Good, in the SACK span, on an allowed plane and has
    /// room for a full packet, else infinity. A pick reads these 8 bytes a path, not the
    /// paths' two to three cache lines each.
    keys: Vec<f64>,
    /// Good, in span, on an allowed plane, but without room for a full packet: whether one
    /// takes the packet at hand (it may be smaller) is asked at each pick.
    tight: u64,
    /// Good and in span on a plane past 63 or outside the NIC ports and mask: only the scan
    /// says what those do (the scan marks the port blocked for them).
    odd: u64,
    /// Built paths that are Good.
    good: u64,
}

/// The first lowest key of `keys[lo..hi]` other than `skip`'s, if below `best`.
#[inline]
fn lowest(keys: &[f64], lo: usize, hi: usize, skip: usize, best: &mut (f64, usize)) {
    for (i, &k) in keys[lo..hi].iter().enumerate() {
        if k < best.0 && lo + i != skip {
            *best = (k, lo + i);
        }
    }
}

impl Connection {
    /// Path `i`'s key, and whether it is tight, odd or Good (see `PickIndex`).
    fn pick_key(&self, i: usize, ix: &mut PickIndex) {
        let bit = 1u64 << i;
        ix.tight &= !bit;
        ix.odd &= !bit;
        ix.good &= !bit;
        let allowed =
            |plane: u8| plane < 64 && plane < self.nic_ports && self.plane_mask >> plane & 1 == 1;
        let key = match self.paths.v.get(i) {
            Some(p) => {
                if p.state == PathState::Good {
                    ix.good |= bit;
                }
                if p.state != PathState::Good || !p.in_span() {
                    f64::INFINITY
                } else if !allowed(p.plane) {
                    ix.odd |= bit;
                    f64::INFINITY
                } else if p.has_room(self.mtu) {
                    p.load()
                } else {
                    ix.tight |= bit;
                    f64::INFINITY
                }
            }
            None if allowed(self.fresh_plane(i)) => 0.0,
            None => {
                ix.odd |= bit;
                f64::INFINITY
            }
        };
        ix.keys[i] = key;
    }

    /// `pick_path` by the index, or `None` where the scan says it (one path: the scan reads
    /// no more than the index would) or only the scan can (more than 64 paths, none Good, a
    /// path on an odd plane, a NIC port full, a packet past the MTU).
    pub(super) fn pick_by_index(&mut self, bytes: u32, avoid: u8) -> Option<Option<usize>> {
        let n = self.n_paths as usize;
        let ports = if self.nic_ports >= 64 {
            u64::MAX
        } else {
            (1u64 << self.nic_ports) - 1
        };
        if !(2..=64).contains(&n) || bytes > self.mtu || self.tx_ready != ports & self.plane_mask {
            return None;
        }
        let mut ix = self.paths.index.take().unwrap_or_default();
        let basis = (self.n_paths, self.mtu, self.plane_mask, self.nic_ports);
        if ix.basis != basis || ix.keys.len() != n {
            ix.basis = basis;
            ix.keys.clear();
            ix.keys.resize(n, f64::INFINITY);
            ix.dirty = u64::MAX;
        }
        let mut d = ix.dirty & (u64::MAX >> (64 - n));
        ix.dirty = 0;
        while d != 0 {
            let i = d.trailing_zeros() as usize;
            d &= d - 1;
            self.pick_key(i, &mut ix);
        }
        let usable = self.paths.len() < n || ix.good != 0;
        let out = (usable && ix.odd == 0).then(|| self.pick_from(&ix, n, bytes, avoid));
        self.paths.index = Some(ix);
        out
    }

    fn pick_from(&self, ix: &PickIndex, n: usize, bytes: u32, avoid: u8) -> Option<usize> {
        let start = if (self.rr as usize) < n {
            self.rr as usize
        } else {
            0
        };
        let av = avoid as usize;
        // Round-robin order, `start..n` then `0..start`: the first of equal loads wins.
        let mut best = (f64::INFINITY, usize::MAX);
        lowest(&ix.keys, start, n, av, &mut best);
        lowest(&ix.keys, 0, start, av, &mut best);
        // Tight paths may still take a smaller packet.
        let pos = |j: usize| if j >= start { j - start } else { j + n - start };
        let mut t = ix.tight;
        let mut tight_avoid = false;
        while t != 0 {
            let j = t.trailing_zeros() as usize;
            t &= t - 1;
            let p = &self.paths[j];
            if !p.has_room(bytes) {
                continue;
            }
            if j == av {
                tight_avoid = true;
                continue;
            }
            let l = p.load();
            if l < best.0 || (l == best.0 && pos(j) < pos(best.1)) {
                best = (l, j);
            }
        }
        if best.0.is_finite() {
            return Some(best.1);
        }
        let avoid_ok = av < n && (ix.keys[av].is_finite() || tight_avoid);
        avoid_ok.then_some(av)
    }
}
