//! Per-stream state indexed by MSN within the stream's window: a ring from the oldest MSN
//! not yet retired, so a packet finds its message by one subtraction instead of a hash
//! lookup, and retiring in MSN order pops the front. MSNs are admitted only within the
//! stream window (transport.md §4), which bounds the ring's length.

use super::slim::SlimDeque;

#[derive(Debug)]
pub(super) struct MsnRing<T> {
    /// MSN of `slots[0]`.
    base: u32,
    /// One pointer while empty (an idle stream has two rings).
    slots: SlimDeque<Option<T>>,
}

impl<T> Default for MsnRing<T> {
    fn default() -> Self {
        MsnRing {
            base: 0,
            slots: SlimDeque::new(),
        }
    }
}

impl<T> MsnRing<T> {
    fn index(&self, msn: u32) -> Option<usize> {
        let rel = msn.wrapping_sub(self.base);
        // MSNs behind the base (retired) or beyond any window are not here.
        (rel < 1 << 30).then_some(rel as usize)
    }

    pub(super) fn get(&self, msn: u32) -> Option<&T> {
        self.slots.get(self.index(msn)?)?.as_ref()
    }

    pub(super) fn get_mut(&mut self, msn: u32) -> Option<&mut T> {
        let i = self.index(msn)?;
        self.slots.get_mut(i)?.as_mut()
    }

    /// The entry of `msn`, made by `f` if absent; `None` for an MSN behind the base.
    pub(super) fn get_or_insert_with(&mut self, msn: u32, f: impl FnOnce() -> T) -> Option<&mut T> {
        let i = self.index(msn)?;
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        self.slots.get_mut(i).map(|s| s.get_or_insert_with(f))
    }

    /// Give back spare capacity (the connection has gone idle).
    pub(super) fn compact(&mut self) {
        self.slots.shrink_to_fit();
    }

    /// Take the oldest entry (`msn` must be the base) and move the base past it.
    pub(super) fn pop_base(&mut self, msn: u32) -> Option<T> {
        if msn != self.base {
            return None;
        }
        let v = self.slots.pop_front().flatten();
        self.base = self.base.wrapping_add(1);
        v
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().flatten()
    }

    /// The oldest MSN the ring can hold.
    pub(super) fn base(&self) -> u32 {
        self.base
    }

    /// How many MSNs from the base have a slot (live or empty).
    pub(super) fn span(&self) -> usize {
        self.slots.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.slots.iter().all(Option::is_none)
    }

    /// Take the entry of `msn` out of any position. Empty slots at the front go too (the base
    /// moves past them), so a ring whose entries are taken out of order stays as short as its
    /// oldest live entry allows. Only for state whose entries are made in MSN order (nothing
    /// is ever inserted behind a later entry).
    pub(super) fn take(&mut self, msn: u32) -> Option<T> {
        let i = self.index(msn)?;
        let v = self.slots.get_mut(i)?.take();
        while matches!(self.slots.front(), Some(None)) {
            self.slots.pop_front();
            self.base = self.base.wrapping_add(1);
        }
        v
    }

    /// Drop every entry for an MSN before `msn` and move the base up to it; returns how many
    /// live entries were dropped. An `msn` at or behind the base changes nothing.
    pub(super) fn retire_before(&mut self, msn: u32) -> usize {
        let rel = msn.wrapping_sub(self.base);
        if rel == 0 || rel >= 1 << 31 {
            return 0;
        }
        let n = (rel as usize).min(self.slots.len());
        let live = self.slots.drain_front(n).flatten().count();
        self.base = msn;
        live
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_by_msn_retired_in_order_across_the_wrap() {
        let mut r: MsnRing<u32> = MsnRing {
            base: u32::MAX - 1,
            slots: SlimDeque::new(),
        };
        *r.get_or_insert_with(1, || 10).unwrap() += 1; // wraps: 3 slots
        r.get_or_insert_with(u32::MAX - 1, || 20);
        assert_eq!(r.get(1), Some(&11));
        assert_eq!(r.get(u32::MAX), None);
        assert_eq!(r.values().count(), 2);
        assert_eq!(r.pop_base(u32::MAX), None, "not the base");
        assert_eq!(r.pop_base(u32::MAX - 1), Some(20));
        assert_eq!(r.pop_base(u32::MAX), None, "an empty slot retires");
        assert_eq!(r.pop_base(0), None);
        assert_eq!(r.get(u32::MAX - 1), None, "behind the base");
        assert!(r.get_or_insert_with(u32::MAX - 1, || 0).is_none());
        assert_eq!(r.pop_base(1), Some(11));
        assert_eq!(r.values().count(), 0);
    }

    #[test]
    fn taken_out_of_order_and_retired_from_the_front() {
        let mut r: MsnRing<u32> = MsnRing::default();
        for m in [0, 2, 3, 7] {
            r.get_or_insert_with(m, || m);
        }
        assert_eq!(r.take(2), Some(2));
        assert_eq!(r.slots.len(), 8, "a hole in the middle stays");
        assert_eq!(r.take(0), Some(0));
        assert_eq!((r.base, r.slots.len()), (3, 5), "front holes go with it");
        assert_eq!(r.take(0), None, "behind the base");
        assert_eq!(r.retire_before(3), 0, "at the base");
        assert_eq!(r.retire_before(u32::MAX), 0, "behind the base");
        assert_eq!(r.retire_before(5), 1, "3 dropped, 4 was empty");
        assert_eq!((r.base, r.get(7)), (5, Some(&7)));
        assert_eq!(r.retire_before(100), 1);
        assert!(r.is_empty() && r.slots.is_empty() && r.base == 100);
        assert!(r.get_or_insert_with(99, || 0).is_none());
        assert_eq!(r.get_or_insert_with(100, || 5), Some(&mut 5));
    }
}
