//! Per-stream state indexed by MSN within the stream's window: a ring from the oldest MSN
//! not yet retired, so a packet finds its message by one subtraction instead of a hash
//! lookup, and retiring in MSN order pops the front. MSNs are admitted only within the
//! stream window (transport.md §4), which bounds the ring's length.

use std::collections::VecDeque;

#[derive(Debug)]
pub(super) struct MsnRing<T> {
    /// MSN of `slots[0]`.
    base: u32,
    slots: VecDeque<Option<T>>,
}

impl<T> Default for MsnRing<T> {
    fn default() -> Self {
        MsnRing {
            base: 0,
            slots: VecDeque::new(),
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
        Some(self.slots[i].get_or_insert_with(f))
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_by_msn_retired_in_order_across_the_wrap() {
        let mut r: MsnRing<u32> = MsnRing {
            base: u32::MAX - 1,
            slots: VecDeque::new(),
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
}
