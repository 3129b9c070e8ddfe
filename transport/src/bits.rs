//! A small bitset with a population count, for chunks of a message.

use smallvec::SmallVec;

#[derive(Clone, Debug, Default)]
pub(crate) struct Bits {
    words: SmallVec<[u64; 1]>,
    len: u32,
    ones: u32,
}

impl Bits {
    pub fn new(len: u32) -> Self {
        Bits {
            words: SmallVec::from_elem(0, len.div_ceil(64) as usize),
            len,
            ones: 0,
        }
    }

    pub fn get(&self, i: u32) -> bool {
        i < self.len && self.words[(i / 64) as usize] >> (i % 64) & 1 == 1
    }

    /// Set bit `i`; returns true when it was newly set. Out of range: ignored.
    pub fn set(&mut self, i: u32) -> bool {
        if i >= self.len || self.get(i) {
            return false;
        }
        self.words[(i / 64) as usize] |= 1 << (i % 64);
        self.ones += 1;
        true
    }

    pub fn count(&self) -> u32 {
        self.ones
    }
}
