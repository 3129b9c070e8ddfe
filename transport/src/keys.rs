//! Unpredictable memory keys (spec/security.md §1.1).
//!
//! A key is the 32-bit output of SipHash-2-4, keyed with a 128-bit secret, over a counter:
//! a PRF, so keys seen on the wire say nothing about the secret or about other keys. The
//! core has no entropy of its own (it is sans-IO and the simulator must stay deterministic):
//! the embedder passes the secret in, from the OS on a real host ([`KeyGen::new`]), a fixed
//! or seeded one in tests and the simulator ([`KeyGen::deterministic`]).

/// A generator of 32-bit memory keys.
#[derive(Clone)]
pub struct KeyGen {
    k0: u64,
    k1: u64,
    ctr: u64,
}

impl std::fmt::Debug for KeyGen {
    // The secret stays out of logs and panics.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyGen").field("ctr", &self.ctr).finish()
    }
}

impl KeyGen {
    /// Keys from a 128-bit secret; on a real host it comes from the OS (getrandom).
    pub fn new(secret: [u8; 16]) -> Self {
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        a.copy_from_slice(&secret[..8]);
        b.copy_from_slice(&secret[8..]);
        KeyGen {
            k0: u64::from_le_bytes(a),
            k1: u64::from_le_bytes(b),
            ctr: 0,
        }
    }

    /// Keys from a 64-bit seed: reproducible, hence predictable; for the simulator and tests.
    pub fn deterministic(seed: u64) -> Self {
        let mut s = [0u8; 16];
        s[..8].copy_from_slice(&seed.to_le_bytes());
        s[8..].copy_from_slice(&(!seed).to_le_bytes());
        KeyGen::new(s)
    }

    /// The next candidate key: 32 pseudo-random bits, never 0. The caller skips keys still
    /// in use (a collision among n live keys has probability about n / 2^32).
    pub fn next_key(&mut self) -> u32 {
        loop {
            let h = siphash24(self.k0, self.k1, self.ctr);
            self.ctr = self.ctr.wrapping_add(1);
            let k = h as u32;
            if k != 0 {
                return k;
            }
        }
    }
}

/// SipHash-2-4 of the 8-byte little-endian encoding of `m` (Aumasson and Bernstein, 2012).
fn siphash24(k0: u64, k1: u64, m: u64) -> u64 {
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    fn round(v: &mut [u64; 4]) {
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }
    // One full block (the message), then the final block: only the length byte (8).
    for b in [m, 8u64 << 56] {
        v[3] ^= b;
        round(&mut v);
        round(&mut v);
        v[0] ^= b;
    }
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference implementation's vector for an 8-byte message 00..07 under key 00..0f.
    #[test]
    fn siphash_reference_vector() {
        let k0 = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        let k1 = u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]);
        let m = u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(siphash24(k0, k1, m), 0x93f5_f579_9a93_2462);
    }

    /// The same function as std's (deprecated, still SipHash-2-4) hasher, over many inputs.
    #[test]
    #[allow(deprecated)]
    fn siphash_matches_std() {
        use std::hash::Hasher;
        for i in 0..1000u64 {
            let (k0, k1, m) = (i.wrapping_mul(0x1234_5678_9abc_def1), !i, i << 7 | 3);
            let mut h = std::hash::SipHasher::new_with_keys(k0, k1);
            h.write(&m.to_le_bytes());
            assert_eq!(siphash24(k0, k1, m), h.finish());
        }
    }

    // checks: [SEC-4]
    /// Different secrets give unrelated sequences; consecutive keys have no constant step.
    #[test]
    fn keys_depend_on_the_secret_and_do_not_step() {
        let mut a = KeyGen::new([1; 16]);
        let mut b = KeyGen::new([2; 16]);
        let ka: Vec<u32> = (0..64).map(|_| a.next_key()).collect();
        let kb: Vec<u32> = (0..64).map(|_| b.next_key()).collect();
        assert!(ka.iter().zip(&kb).all(|(x, y)| x != y));
        let steps: std::collections::HashSet<u32> =
            ka.windows(2).map(|w| w[1].wrapping_sub(w[0])).collect();
        assert!(steps.len() > 60, "steps repeat: {steps:?}");
        // Every bit of the key varies.
        let or = ka.iter().fold(0, |a, k| a | k);
        let and = ka.iter().fold(!0, |a, k| a & k);
        assert_eq!((or, and), (!0, 0));
    }
}
