//! The 256-bit selective-acknowledgement bitmap carried in every ACK.

/// Bit `i` (0..256) stands for PSN `cum_psn + 1 + i`. On the wire: 32 bytes, bit `i` in byte
/// `i / 8` at bit position `i % 8` (least significant bit first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct Sack256(pub [u64; 4]);

impl Sack256 {
    pub const BITS: u32 = 256;

    pub fn get(&self, i: u32) -> bool {
        i < Self::BITS && (self.0[(i / 64) as usize] >> (i % 64)) & 1 == 1
    }

    /// Set bit `i`; out-of-range indices are ignored.
    pub fn set(&mut self, i: u32) {
        if i < Self::BITS {
            self.0[(i / 64) as usize] |= 1 << (i % 64);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }

    pub fn count(&self) -> u32 {
        self.0.iter().map(|w| w.count_ones()).sum()
    }

    /// Index of the highest set bit, if any.
    pub fn highest(&self) -> Option<u32> {
        (0..4)
            .rev()
            .find(|&w| self.0[w] != 0)
            .map(|w| w as u32 * 64 + 63 - self.0[w].leading_zeros())
    }

    /// Shift the window down by `n` bits (bit `n` becomes bit 0).
    pub fn shift_down(&mut self, n: u32) {
        if n >= Self::BITS {
            *self = Sack256::default();
            return;
        }
        let words = (n / 64) as usize;
        let bits = n % 64;
        let mut out = [0u64; 4];
        for (i, o) in out.iter_mut().enumerate() {
            let src = i + words;
            if src < 4 {
                let mut v = self.0[src] >> bits;
                if bits != 0 && src + 1 < 4 {
                    v |= self.0[src + 1] << (64 - bits);
                }
                *o = v;
            }
        }
        self.0 = out;
    }

    /// Number of consecutive set bits starting at bit 0.
    pub fn leading_run(&self) -> u32 {
        let mut n = 0;
        for w in self.0 {
            let run = w.trailing_ones();
            n += run;
            if run < 64 {
                break;
            }
        }
        n
    }

    pub fn to_bytes(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        for (i, w) in self.0.iter().enumerate() {
            b[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    pub fn from_bytes(b: [u8; 32]) -> Sack256 {
        let mut s = Sack256::default();
        for (i, w) in s.0.iter_mut().enumerate() {
            let mut x = [0u8; 8];
            x.copy_from_slice(&b[i * 8..i * 8 + 8]);
            *w = u64::from_le_bytes(x);
        }
        s
    }
}
