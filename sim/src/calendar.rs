//! The event queue's priority structure: a calendar queue (timing wheel) ordered by
//! `(time, seq)`.
//!
//! Nearly every event of a packet simulation lands within a few microseconds of "now", and a
//! binary heap pays ~log2(n) unpredictable branches per pop for it. Here time is cut into buckets
//! of `2^BUCKET_BITS` ns; the bucket being drained (`current`) is a small vector kept sorted,
//! the next `WHEEL - 1` buckets are unsorted vectors found through an occupancy bitmap, and
//! anything further out waits in a binary heap. The pop order is exactly the `(time, seq)`
//! order, so runs stay deterministic.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// log2 of the bucket width in ns.
const BUCKET_BITS: u32 = 5;
/// Buckets in the wheel (a power of two); horizon = WHEEL << BUCKET_BITS ns (≈ 262 µs).
const WHEEL: usize = 1 << 13;
const WORDS: usize = WHEEL / 64;

/// An entry: ordered by time, then by insertion sequence number; `slot` is payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Entry {
    pub time: u64,
    pub seq: u64,
    pub slot: u32,
}

#[derive(Debug)]
pub(crate) struct Calendar {
    /// Bucket number (`time >> BUCKET_BITS`) being drained. Entries of buckets `<= cur` live in
    /// `current`, buckets `cur+1 .. cur+WHEEL` in the wheel, later ones in `overflow`.
    cur: u64,
    /// Sorted descending, so the smallest entry is at the end.
    current: Vec<Entry>,
    wheel: Vec<Vec<Entry>>,
    occupied: [u64; WORDS],
    in_wheel: usize,
    overflow: BinaryHeap<Reverse<Entry>>,
    len: usize,
}

impl Default for Calendar {
    fn default() -> Self {
        Calendar {
            cur: 0,
            current: Vec::new(),
            wheel: (0..WHEEL).map(|_| Vec::new()).collect(),
            occupied: [0; WORDS],
            in_wheel: 0,
            overflow: BinaryHeap::new(),
            len: 0,
        }
    }
}

impl Calendar {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn bucket_of(time: u64) -> u64 {
        time >> BUCKET_BITS
    }

    #[inline]
    fn insert_current(&mut self, e: Entry) {
        // Descending order: find the first position whose entry is smaller than `e`.
        let pos = self.current.partition_point(|x| *x > e);
        self.current.insert(pos, e);
    }

    #[inline]
    fn insert_wheel(&mut self, b: u64, e: Entry) {
        let slot = (b as usize) & (WHEEL - 1);
        self.wheel[slot].push(e);
        self.occupied[slot / 64] |= 1 << (slot % 64);
        self.in_wheel += 1;
    }

    #[inline]
    pub(crate) fn push(&mut self, e: Entry) {
        self.len += 1;
        let b = Self::bucket_of(e.time);
        if b <= self.cur {
            self.insert_current(e);
        } else if b - self.cur < WHEEL as u64 {
            self.insert_wheel(b, e);
        } else {
            self.overflow.push(Reverse(e));
        }
    }

    /// Next occupied wheel slot after `from` (cyclically), as a distance 1..WHEEL from it.
    fn next_occupied_distance(&self, from: usize) -> Option<usize> {
        if self.in_wheel == 0 {
            return None;
        }
        // Scan the bitmap starting just after `from`, wrapping around once.
        let start = (from + 1) & (WHEEL - 1);
        let mut word = start / 64;
        let mut bits = self.occupied[word] & (!0u64 << (start % 64));
        for _ in 0..=WORDS {
            if bits != 0 {
                let slot = word * 64 + bits.trailing_zeros() as usize;
                let dist = slot.wrapping_sub(from) & (WHEEL - 1);
                return Some(if dist == 0 { WHEEL } else { dist });
            }
            word = (word + 1) % WORDS;
            bits = self.occupied[word];
        }
        None
    }

    /// Moves `current` to the next non-empty bucket. Precondition: `current` is empty.
    fn advance(&mut self) -> bool {
        let from = (self.cur as usize) & (WHEEL - 1);
        if let Some(d) = self.next_occupied_distance(from) {
            self.cur += d as u64;
        } else if let Some(Reverse(e)) = self.overflow.peek() {
            self.cur = Self::bucket_of(e.time);
        } else {
            return false;
        }
        let slot = (self.cur as usize) & (WHEEL - 1);
        if self.occupied[slot / 64] & (1 << (slot % 64)) != 0 {
            self.occupied[slot / 64] &= !(1 << (slot % 64));
            let bucket = &mut self.wheel[slot];
            self.in_wheel -= bucket.len();
            self.current.append(bucket);
            self.current.sort_unstable_by(|a, b| b.cmp(a));
        }
        // The horizon moved: bring overflow entries that now fit into the wheel (or current).
        while let Some(Reverse(e)) = self.overflow.peek() {
            let b = Self::bucket_of(e.time);
            if b - self.cur >= WHEEL as u64 {
                break;
            }
            let e = *e;
            self.overflow.pop();
            if b <= self.cur {
                self.insert_current(e);
            } else {
                self.insert_wheel(b, e);
            }
        }
        true
    }

    /// Removes and returns the smallest entry.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<Entry> {
        if self.current.is_empty() && !self.advance() {
            return None;
        }
        let e = self.current.pop();
        if e.is_some() {
            self.len -= 1;
        }
        e
    }

    /// Time of the smallest entry. Deliberately does not advance `cur`: a peek that jumped far
    /// ahead (to a distant timer, say) would send every event pushed before that time into the
    /// sorted `current` vector, making pushes O(n). The extra scan happens once per bucket.
    pub(crate) fn peek_time(&self) -> Option<u64> {
        if let Some(e) = self.current.last() {
            return Some(e.time);
        }
        let from = (self.cur as usize) & (WHEEL - 1);
        if let Some(d) = self.next_occupied_distance(from) {
            let slot = (from + d) & (WHEEL - 1);
            return self.wheel[slot].iter().map(|e| e.time).min();
        }
        self.overflow.peek().map(|Reverse(e)| e.time)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rng;

    /// Random pushes (near, far, very far, at "now") and pops match a reference binary heap.
    #[test]
    fn matches_reference_order() {
        for seed in 0..20 {
            let mut r = Rng::new(seed);
            let mut cal = Calendar::default();
            let mut reference = BinaryHeap::new();
            let mut now = 0u64;
            let mut seq = 0u64;
            for _ in 0..20_000 {
                let op = r.below(10);
                if op < 5 {
                    let delta = match r.below(6) {
                        0 => 0,
                        1 => r.below(32),
                        2 => r.below(5_000),
                        3 => r.below(300_000),
                        4 => r.below(10_000_000),
                        _ => u64::MAX - now,
                    };
                    let e = Entry {
                        time: now.saturating_add(delta),
                        seq,
                        slot: seq as u32,
                    };
                    seq += 1;
                    cal.push(e);
                    reference.push(Reverse(e));
                } else if op < 9 {
                    let got = cal.pop();
                    let want = reference.pop().map(|Reverse(e)| e);
                    assert_eq!(got, want);
                    if let Some(e) = got {
                        assert!(e.time >= now);
                        now = e.time;
                    }
                } else {
                    // Like run_until: peek, and move the clock forward without popping.
                    let p = cal.peek_time();
                    assert_eq!(p, reference.peek().map(|Reverse(e)| e.time));
                    match p {
                        Some(t) => now = now.max(t.saturating_sub(r.below(100))),
                        None => now = now.saturating_add(r.below(1_000_000)),
                    }
                }
                assert_eq!(cal.len(), reference.len());
            }
            while let Some(Reverse(e)) = reference.pop() {
                assert_eq!(cal.pop(), Some(e));
            }
            assert_eq!(cal.pop(), None);
            assert_eq!(cal.peek_time(), None);
        }
    }
}
