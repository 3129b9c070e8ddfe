//! ACK_MULTI (0x12): one datagram acknowledging several paths of a connection (spec/wire.md
//! §2.16). A block per path, each the content of a per-path ACK without the rate hint, with
//! the SACK bitmap cut after its last nonzero 64-bit word.

use super::{seal, Sack256, WireError, BASE_LEN, TRAILER_LEN, VERSION};

/// Fixed part after the base header: rate hint (4), block count (1), reserved (3).
pub const ACK_MULTI_HEADER_LEN: usize = 8;
/// Fixed part of a block: path, SACK words, reserved (2), cum_psn, ecn_ce, ts_echo, ack_delay.
pub const ACK_BLOCK_LEN: usize = 20;
/// Base-header `path` of an ACK_MULTI: the blocks name their paths.
pub const ACK_MULTI_PATH: u8 = 0xff;

/// One path's acknowledgement inside an ACK_MULTI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AckBlock {
    pub path: u8,
    /// Next PSN the receiver expects on this path (as in ACK).
    pub cum_psn: u32,
    /// Bit i set: PSN `cum_psn + 1 + i` was received.
    pub sack: Sack256,
    pub ecn_ce: u32,
    pub ts_echo: u32,
    pub ack_delay_ns: u32,
}

impl AckBlock {
    /// 64-bit SACK words an encoder writes: up to the last nonzero one.
    pub fn words(&self) -> usize {
        self.sack
            .0
            .iter()
            .rposition(|w| *w != 0)
            .map_or(0, |i| i + 1)
    }

    /// Encoded length of this block.
    pub fn encoded_len(&self) -> usize {
        ACK_BLOCK_LEN + 8 * self.words()
    }
}

/// Parsed ACK_MULTI body: the hint and the (validated) encoded blocks, decoded on iteration.
/// Two are equal when their hints and decoded blocks are (absent and zero SACK words alike).
#[derive(Clone, Copy, Debug)]
pub struct AckMultiRepr<'a> {
    /// The receiver's fair-share rate for this connection in Mbit/s; 0 = no hint.
    pub rate_hint_mbps: u32,
    count: u8,
    raw: &'a [u8],
}

impl PartialEq for AckMultiRepr<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.rate_hint_mbps == other.rate_hint_mbps && self.blocks().eq(other.blocks())
    }
}

impl Eq for AckMultiRepr<'_> {}

impl<'a> AckMultiRepr<'a> {
    /// Check the blocks after the fixed part (`rest`: from offset 16 to the trailer).
    pub(super) fn parse(rate_hint_mbps: u32, count: u8, rest: &'a [u8]) -> Result<Self, WireError> {
        if count == 0 {
            return Err(WireError::Malformed("ACK_MULTI without blocks"));
        }
        let mut seen = [0u64; 4];
        let mut pos = 0;
        for _ in 0..count {
            if rest.len() < pos + ACK_BLOCK_LEN {
                return Err(WireError::Malformed("ACK_MULTI blocks shorter than count"));
            }
            let path = rest[pos];
            let words = rest[pos + 1] as usize;
            if words > 4 {
                return Err(WireError::Malformed(
                    "ACK_MULTI block with more than 4 SACK words",
                ));
            }
            let bit = 1u64 << (path % 64);
            if seen[(path / 64) as usize] & bit != 0 {
                return Err(WireError::Malformed("ACK_MULTI names a path twice"));
            }
            seen[(path / 64) as usize] |= bit;
            pos += ACK_BLOCK_LEN + 8 * words;
            if rest.len() < pos {
                return Err(WireError::Malformed("ACK_MULTI blocks shorter than count"));
            }
        }
        if pos != rest.len() {
            return Err(WireError::Malformed(
                "trailing bytes after ACK_MULTI blocks",
            ));
        }
        Ok(AckMultiRepr {
            rate_hint_mbps,
            count,
            raw: rest,
        })
    }

    /// Number of blocks (1..=255).
    pub fn count(&self) -> usize {
        self.count as usize
    }

    /// Encoded length of the blocks as a re-encoding writes them.
    pub(super) fn blocks_len(&self) -> usize {
        self.blocks().map(|b| b.encoded_len()).sum()
    }

    /// The blocks in wire order.
    pub fn blocks(&self) -> AckBlocks<'a> {
        AckBlocks {
            raw: self.raw,
            left: self.count,
        }
    }

    /// Write the blocks (reserved bytes zero, SACK words minimal) at `buf[0..]`, just after
    /// the fixed part; returns the bytes written. The caller checked the room.
    pub(super) fn write_blocks(&self, buf: &mut [u8]) -> usize {
        let mut pos = 0;
        for b in self.blocks() {
            pos += write_block(&mut buf[pos..], &b);
        }
        pos
    }
}

/// Iterator over the blocks of a parsed ACK_MULTI (validated at parse, so it cannot fail).
#[derive(Clone, Debug)]
pub struct AckBlocks<'a> {
    raw: &'a [u8],
    left: u8,
}

impl Iterator for AckBlocks<'_> {
    type Item = AckBlock;

    fn next(&mut self) -> Option<AckBlock> {
        if self.left == 0 || self.raw.len() < ACK_BLOCK_LEN {
            return None;
        }
        self.left -= 1;
        let r = self.raw;
        let be = |o: usize| u32::from_be_bytes([r[o], r[o + 1], r[o + 2], r[o + 3]]);
        let words = (r[1] as usize).min(4);
        let end = (ACK_BLOCK_LEN + 8 * words).min(r.len());
        let mut bytes = [0u8; 32];
        bytes[..end - ACK_BLOCK_LEN].copy_from_slice(&r[ACK_BLOCK_LEN..end]);
        let b = AckBlock {
            path: r[0],
            cum_psn: be(4),
            ecn_ce: be(8),
            ts_echo: be(12),
            ack_delay_ns: be(16),
            sack: Sack256::from_bytes(bytes),
        };
        self.raw = &r[end..];
        Some(b)
    }
}

fn write_fixed(buf: &mut [u8], rate_hint_mbps: u32, count: u8) {
    buf[0..4].copy_from_slice(&rate_hint_mbps.to_be_bytes());
    buf[4] = count;
    buf[5..8].fill(0);
}

/// Write one block at `buf[0..]`; the caller checked the room (`encoded_len`).
fn write_block(buf: &mut [u8], b: &AckBlock) -> usize {
    let words = b.words();
    buf[0] = b.path;
    buf[1] = words as u8;
    buf[2..4].fill(0);
    buf[4..8].copy_from_slice(&b.cum_psn.to_be_bytes());
    buf[8..12].copy_from_slice(&b.ecn_ce.to_be_bytes());
    buf[12..16].copy_from_slice(&b.ts_echo.to_be_bytes());
    buf[16..20].copy_from_slice(&b.ack_delay_ns.to_be_bytes());
    let n = 8 * words;
    buf[ACK_BLOCK_LEN..ACK_BLOCK_LEN + n].copy_from_slice(&b.sack.to_bytes()[..n]);
    ACK_BLOCK_LEN + n
}

/// Builds an ACK_MULTI in place in a transmit buffer, block by block, without allocating.
pub struct AckMultiWriter<'b> {
    buf: &'b mut [u8],
    pos: usize,
    count: u8,
    rate_hint_mbps: u32,
}

impl<'b> AckMultiWriter<'b> {
    /// Start an ACK_MULTI to connection `dst_conn`; fails if `buf` cannot hold one block.
    pub fn new(buf: &'b mut [u8], dst_conn: u32, rate_hint_mbps: u32) -> Result<Self, WireError> {
        let start = BASE_LEN + ACK_MULTI_HEADER_LEN;
        if buf.len() < start + ACK_BLOCK_LEN + 32 + TRAILER_LEN {
            return Err(WireError::BufferTooSmall);
        }
        buf[0] = VERSION;
        buf[1] = super::Opcode::AckMulti as u8;
        buf[2] = 0;
        buf[3] = ACK_MULTI_PATH;
        buf[4..8].copy_from_slice(&dst_conn.to_be_bytes());
        Ok(AckMultiWriter {
            buf,
            pos: start,
            count: 0,
            rate_hint_mbps,
        })
    }

    /// Whether a block of any SACK length still fits (and the count allows another).
    pub fn has_room(&self) -> bool {
        self.count < u8::MAX && self.pos + ACK_BLOCK_LEN + 32 + TRAILER_LEN <= self.buf.len()
    }

    /// Append a block; false (and nothing written) if it does not fit.
    pub fn push(&mut self, b: &AckBlock) -> bool {
        if self.count == u8::MAX || self.pos + b.encoded_len() + TRAILER_LEN > self.buf.len() {
            return false;
        }
        self.pos += write_block(&mut self.buf[self.pos..], b);
        self.count += 1;
        true
    }

    pub fn count(&self) -> usize {
        self.count as usize
    }

    /// Write the fixed part and the CRC; returns the datagram length (None without blocks,
    /// which would not be a valid packet).
    pub fn finish(self) -> Option<usize> {
        if self.count == 0 {
            return None;
        }
        write_fixed(&mut self.buf[BASE_LEN..], self.rate_hint_mbps, self.count);
        Some(seal(self.buf, self.pos))
    }
}
