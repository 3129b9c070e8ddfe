//! A deterministic, self-verifying RDMA workload: which operation each work request is, what
//! bytes it carries, and what every completion must show.

pub mod compliance;

use ferroce_transport::mem::access;

/// Operations the workload mixes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    FetchAdd,
    CmpSwap,
}

impl OpKind {
    pub const ALL: [OpKind; 7] = [
        OpKind::Send,
        OpKind::SendImm,
        OpKind::Write,
        OpKind::WriteImm,
        OpKind::Read,
        OpKind::FetchAdd,
        OpKind::CmpSwap,
    ];

    /// Consumes a receive at the server.
    pub fn consumes_recv(self) -> bool {
        matches!(self, OpKind::Send | OpKind::SendImm | OpKind::WriteImm)
    }

    pub fn is_atomic(self) -> bool {
        matches!(self, OpKind::FetchAdd | OpKind::CmpSwap)
    }
}

/// What the client sends to the server.
#[derive(Clone, Debug)]
pub struct WorkloadSpec {
    /// Streams (QPs) on the connection.
    pub streams: u32,
    /// Work requests per stream.
    pub messages: u32,
    /// Message sizes, cycled (atomics are always 8 bytes).
    pub sizes: Vec<u32>,
    /// Operations, cycled.
    pub ops: Vec<OpKind>,
    /// Work requests outstanding per stream.
    pub depth: u32,
    /// Receives the server keeps posted per stream (fewer than `depth` exercises RNR).
    pub recv_depth: u32,
    /// Rotates the size/op pattern per stream.
    pub seed: u64,
    /// Upper bound on the server's write slots per stream (0: no bound beyond
    /// [`MAX_WRITE_AREA`]). Large many-host runs use it to keep simulated memory small; a
    /// reused slot is checked only for its last write (and every write through its completion).
    pub max_write_slots: u32,
}

impl Default for WorkloadSpec {
    fn default() -> Self {
        WorkloadSpec {
            streams: 4,
            messages: 64,
            sizes: vec![1, 100, 4096, 4097, 20_000, 65_536],
            ops: OpKind::ALL.to_vec(),
            depth: 8,
            recv_depth: 16,
            seed: 1,
            max_write_slots: 0,
        }
    }
}

/// Largest server write area: up to this, every WRITE gets a slot of its own, so the
/// end-of-run check verifies every byte written; beyond it slots are reused (and only the
/// last write to each is checked at the end).
pub const MAX_WRITE_AREA: u64 = 256 << 20;

impl WorkloadSpec {
    /// Bulk one-way data: large WRITEs, for goodput runs.
    pub fn bulk_write(streams: u32, messages: u32, size: u32) -> Self {
        WorkloadSpec {
            streams,
            messages,
            sizes: vec![size],
            ops: vec![OpKind::Write],
            depth: 16,
            recv_depth: 16,
            seed: 1,
            max_write_slots: 0,
        }
    }

    /// Write slots per stream at the server.
    pub fn write_slots(&self) -> u32 {
        let per_msg = self.max_size() as u64 * self.streams.max(1) as u64;
        let fit = (MAX_WRITE_AREA / per_msg.max(1)).max(64) as u32;
        let n = self.messages.clamp(1, fit);
        if self.max_write_slots > 0 {
            n.min(self.max_write_slots)
        } else {
            n
        }
    }

    pub fn max_size(&self) -> u32 {
        self.sizes.iter().copied().max().unwrap_or(8).max(8)
    }

    /// Operation and size of work request `i` on stream `s`.
    pub fn op_at(&self, s: u32, i: u32) -> (OpKind, u32) {
        let rot = (s as u64 ^ self.seed) as usize;
        let op = self.ops[(i as usize + rot) % self.ops.len().max(1)];
        let size = if op.is_atomic() {
            8
        } else {
            self.sizes[(i as usize * 7 + rot) % self.sizes.len().max(1)]
        };
        (op, size)
    }

    /// Indices of the receive-consuming work requests of stream `s`, in order.
    pub fn consuming(&self, s: u32) -> Vec<u32> {
        (0..self.messages)
            .filter(|&i| self.op_at(s, i).0.consumes_recv())
            .collect()
    }

    /// Sum of payload bytes (SEND/WRITE/READ data) of the whole workload.
    pub fn total_bytes(&self) -> u64 {
        let mut t = 0u64;
        for s in 0..self.streams {
            for i in 0..self.messages {
                let (op, size) = self.op_at(s, i);
                if !op.is_atomic() {
                    t += size as u64;
                }
            }
        }
        t
    }
}

/// Byte `j` of the message of work request `i` on stream `s`: position-dependent so that
/// misplaced, shifted or swapped data is caught.
#[inline]
pub fn pattern(s: u32, i: u32, j: u32) -> u8 {
    (s.wrapping_mul(131) ^ i.wrapping_mul(31) ^ j ^ (j >> 8) ^ (j >> 16)) as u8
}

/// The byte every pattern byte of message (s, i) is XORed with.
#[inline]
fn pattern_key(s: u32, i: u32) -> u8 {
    (s.wrapping_mul(131) ^ i.wrapping_mul(31)) as u8
}

/// 0, 1, ..., 255.
const IOTA: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut k = 0;
    while k < 256 {
        t[k] = k as u8;
        k += 1;
    }
    t
};

/// Within the `n`th 256-byte block of a message (bytes `j = 256 n + t`), `j >> 8` and
/// `j >> 16` are constant, so the pattern byte is `t ^` this.
#[inline]
fn block_key(key: u8, n: usize) -> u8 {
    let j = (n as u32).wrapping_mul(256);
    ((j >> 8) ^ (j >> 16)) as u8 ^ key
}

/// Writes the pattern of message (s, i) into `buf` (byte `j` = [`pattern`]`(s, i, j)`): per
/// 256-byte block one XOR of a constant table with a byte, which compiles to vector code.
pub fn fill_pattern(buf: &mut [u8], s: u32, i: u32) {
    let key = pattern_key(s, i);
    for (n, block) in buf.chunks_mut(256).enumerate() {
        let x = block_key(key, n);
        for (b, &t) in block.iter_mut().zip(IOTA.iter()) {
            *b = t ^ x;
        }
    }
}

/// Offset of the first byte that differs from the pattern of message (s, i). Every byte is
/// compared, a 256-byte block at a time without branches (vector code); the search for the
/// offset runs only in a block that differs.
pub fn check_pattern(buf: &[u8], s: u32, i: u32) -> Option<usize> {
    let key = pattern_key(s, i);
    for (n, block) in buf.chunks(256).enumerate() {
        let x = block_key(key, n);
        let diff = block
            .iter()
            .zip(IOTA.iter())
            .fold(0u8, |acc, (&b, &t)| acc | (b ^ t ^ x));
        if diff != 0 {
            let k = block
                .iter()
                .zip(IOTA.iter())
                .position(|(&b, &t)| b != t ^ x)
                .unwrap_or(0);
            return Some(n * 256 + k);
        }
    }
    None
}

impl WorkloadSpec {
    /// Checks the write slot of WRITE `i` of stream `s` as seen when `i` completed: every
    /// byte holds `i`'s data or that of a later WRITE of the stream to the same slot (a
    /// reused slot: later WRITEs may already be placed, earlier ones never after `i`);
    /// returns the first wrong byte.
    pub fn check_write_slot(&self, buf: &[u8], s: u32, i: u32) -> Option<usize> {
        // The common case, every byte `i`'s: one fast pass.
        check_pattern(buf, s, i)?;
        let slots = self.write_slots();
        let later: Vec<(u32, u32)> = (i + 1..self.messages)
            .filter(|j| j % slots == i % slots)
            .filter_map(|j| match self.op_at(s, j) {
                (OpKind::Write | OpKind::WriteImm, size) => Some((j, size)),
                _ => None,
            })
            .collect();
        buf.iter().enumerate().position(|(b, &v)| {
            v != pattern(s, i, b as u32)
                && !later
                    .iter()
                    .any(|&(j, size)| (b as u32) < size && v == pattern(s, j, b as u32))
        })
    }
}

/// Content of the server's READ source region at address offset `a`.
#[inline]
pub fn read_source_byte(a: u64) -> u8 {
    (a ^ (a >> 9) ^ 0x5a) as u8
}

/// The server's memory layout (virtual addresses; keys are assigned at registration).
#[derive(Clone, Copy, Debug)]
pub struct ServerLayout {
    pub recv_base: u64,
    pub write_base: u64,
    pub read_base: u64,
    pub atomic_base: u64,
    pub slot: u64,
}

pub const SERVER_PD: u32 = 7;
pub const CLIENT_PD: u32 = 3;
pub const WRITE_ACCESS: u32 = access::LOCAL_WRITE | access::REMOTE_WRITE;

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, byte by byte.
    fn slow_fill(buf: &mut [u8], s: u32, i: u32) {
        for (j, b) in buf.iter_mut().enumerate() {
            *b = pattern(s, i, j as u32);
        }
    }

    #[test]
    fn block_wise_fill_is_the_byte_pattern() {
        // Lengths around the block size, and past the 256 and 65,536 byte marks
        // where `j >> 8` and `j >> 16` change.
        for &len in &[
            0usize, 1, 7, 8, 9, 63, 64, 65, 255, 256, 257, 1408, 4097, 70_001,
        ] {
            for &(s, i) in &[(0u32, 0u32), (1, 2), (7, 1_000_003), (u32::MAX, 12_345)] {
                let mut a = vec![0u8; len];
                let mut b = vec![0xffu8; len];
                fill_pattern(&mut a, s, i);
                slow_fill(&mut b, s, i);
                assert_eq!(a, b, "len {len}, s {s}, i {i}");
                assert_eq!(check_pattern(&a, s, i), None);
            }
        }
    }

    #[test]
    fn the_check_finds_the_first_wrong_byte_anywhere() {
        let len = 70_001;
        let mut a = vec![0u8; len];
        fill_pattern(&mut a, 3, 9);
        for &at in &[
            0usize, 1, 7, 8, 63, 64, 65, 4095, 65_535, 65_536, 69_999, 70_000,
        ] {
            let mut b = a.clone();
            b[at] ^= 0x10;
            assert_eq!(check_pattern(&b, 3, 9), Some(at), "flipped byte {at}");
            // A second wrong byte later does not hide the first.
            if at + 100 < len {
                b[at + 100] ^= 1;
                assert_eq!(check_pattern(&b, 3, 9), Some(at));
            }
        }
        // Another message's pattern is wrong (at its first byte here: keys differ).
        assert_eq!(check_pattern(&a, 3, 10), Some(0));
    }
}

/// What the server registered, as the client learns it out of band.
#[derive(Clone, Copy, Debug)]
pub struct ServerKeys {
    pub layout: ServerLayout,
    pub write_rkey: u32,
    pub read_rkey: u32,
    pub read_len: u64,
    pub atomic_rkey: u32,
}

/// Immediate data the workload puts on work request `i` of stream `s`.
pub fn imm_of(s: u32, i: u32) -> u32 {
    (s << 20) ^ i ^ 0xabc
}

/// Latencies in a fixed amount of memory: log-linear buckets (64 per power of two, so a
/// quantile is within 1/64 of the true value), for drivers that run for hours and must not
/// keep one sample per work request.
#[derive(Clone, Debug)]
pub struct LatencyHist {
    counts: Vec<u64>,
    total: u64,
}

impl Default for LatencyHist {
    fn default() -> Self {
        LatencyHist {
            counts: vec![0; 64 * 64],
            total: 0,
        }
    }
}

impl LatencyHist {
    const SUB: u32 = 6;

    fn bucket(v: u64) -> usize {
        if v < 64 {
            return v as usize;
        }
        let msb = 63 - v.leading_zeros();
        let shift = msb - Self::SUB;
        (((shift + 1) as usize) << Self::SUB) + ((v >> shift) as usize & 63)
    }

    /// Smallest value of bucket `b`.
    fn low(b: usize) -> u64 {
        if b < 64 {
            return b as u64;
        }
        let shift = (b >> Self::SUB) as u32 - 1;
        (64 + (b as u64 & 63)) << shift
    }

    pub fn record(&mut self, v: u64) {
        let b = Self::bucket(v).min(self.counts.len() - 1);
        self.counts[b] += 1;
        self.total += 1;
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    /// The `f` quantile (0..=1), as its bucket's smallest value; 0 when empty.
    pub fn quantile(&self, f: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((self.total - 1) as f64 * f.clamp(0.0, 1.0)) as u64;
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen > rank {
                return Self::low(b);
            }
        }
        Self::low(self.counts.len() - 1)
    }
}

#[cfg(test)]
mod hist_tests {
    use super::LatencyHist;

    #[test]
    fn quantiles_are_within_one_sixty_fourth() {
        let mut h = LatencyHist::default();
        assert_eq!(h.quantile(0.5), 0);
        let mut v: Vec<u64> = (0..10_000u64).map(|i| (i * 7919) % 5_000_000 + 1).collect();
        for &x in &v {
            h.record(x);
        }
        v.sort_unstable();
        for f in [0.0, 0.5, 0.9, 0.99, 1.0] {
            let exact = v[((v.len() - 1) as f64 * f) as usize] as f64;
            let got = h.quantile(f) as f64;
            assert!(
                got <= exact && got >= exact * (1.0 - 1.0 / 64.0) - 1.0,
                "{f}: {got} vs {exact}"
            );
        }
        // Small values are exact; huge ones land in the last bucket without a panic.
        let mut s = LatencyHist::default();
        s.record(5);
        s.record(u64::MAX);
        assert_eq!(s.quantile(0.0), 5);
        assert!(s.quantile(1.0) > 1 << 60);
        assert_eq!(s.count(), 2);
    }
}
