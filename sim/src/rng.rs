//! A tiny seeded PRNG (xoshiro256** seeded through splitmix64). Written out here instead of taken
//! from a crate so that a given seed produces the same stream forever, whatever crate versions do.

/// The splitmix64 finaliser: a fast, well-mixing bijection on `u64`. Used for seeding, stream
/// derivation and ECMP hashing.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One splitmix64 step: advances `state` and returns the next output.
#[inline]
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    mix64(*state)
}

/// xoshiro256** (Blackman & Vigna), seeded through splitmix64. Deterministic across platforms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator whose whole stream is determined by `seed`.
    pub fn new(seed: u64) -> Self {
        let mut sm = seed;
        let s = [
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
        ];
        // splitmix64 outputs are a bijection of distinct counters, so four zeros cannot happen;
        // keep the guard anyway because the all-zero state is a fixed point of xoshiro.
        if s == [0; 4] {
            return Rng { s: [1, 2, 3, 4] };
        }
        Rng { s }
    }

    /// A generator for sub-stream `stream` of master seed `seed`: independent streams for
    /// independent components (e.g. one per link direction), so that drawing on one does not
    /// shift the draws of another.
    pub fn derive(seed: u64, stream: u64) -> Self {
        Rng::new(mix64(
            seed ^ mix64(stream.wrapping_add(0x5851_f42d_4c95_7f2d)),
        ))
    }

    /// Next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in `[0, 1)` with 53 bits of precision.
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `0..n` (multiply-shift; `n == 0` gives 0).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// True with probability `p`. `p <= 0` or NaN is never true and `p >= 1` always is; neither
    /// consumes a draw, so a disabled fault costs nothing.
    #[inline]
    pub fn chance(&mut self, p: f64) -> bool {
        if p.is_nan() || p <= 0.0 {
            false
        } else if p >= 1.0 {
            true
        } else {
            self.next_f64() < p
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_is_pinned() {
        // Pin the first outputs: if these ever change, every recorded run changes with them.
        let mut r = Rng::new(0);
        let first: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        let mut r2 = Rng::new(0);
        let again: Vec<u64> = (0..3).map(|_| r2.next_u64()).collect();
        assert_eq!(first, again);
        assert_eq!(first, PINNED);
    }

    // Computed once from this implementation; guards against accidental changes.
    const PINNED: [u64; 3] = [
        0x99ec_5f36_cb75_f2b4,
        0xbf6e_1f78_4956_452a,
        0x1a5f_849d_4933_e6e0,
    ];

    #[test]
    fn f64_range_and_mean() {
        let mut r = Rng::new(42);
        let mut sum = 0.0;
        for _ in 0..100_000 {
            let x = r.next_f64();
            assert!((0.0..1.0).contains(&x));
            sum += x;
        }
        let mean = sum / 100_000.0;
        assert!((mean - 0.5).abs() < 0.01, "{mean}");
    }

    #[test]
    fn chance_edges() {
        let mut r = Rng::new(1);
        assert!(!r.chance(0.0));
        assert!(!r.chance(-1.0));
        assert!(!r.chance(f64::NAN));
        assert!(r.chance(1.0));
        assert!(r.chance(7.0));
        assert_eq!(r.below(0), 0);
        for _ in 0..1000 {
            assert!(r.below(10) < 10);
        }
    }

    #[test]
    fn derived_streams_differ() {
        let a = Rng::derive(7, 0).next_u64();
        let b = Rng::derive(7, 1).next_u64();
        let c = Rng::derive(8, 0).next_u64();
        assert_ne!(a, b);
        assert_ne!(a, c);
    }
}
