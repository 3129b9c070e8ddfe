//! RoCEv2 packet formats: the InfiniBand transport headers of IBTA vol. 1 §9.2–9.3 (BTH and
//! the extended transport headers RETH, AETH, AtomicETH, AtomicAckETH, ImmDt, IETH) carried in
//! UDP datagrams to port 4791 (Annex A17), followed by the payload, its pad and the 4-byte
//! invariant CRC (ICRC). spec/rocev2.md is this module's description.
//!
//! Two layers, in the smoltcp style:
//! - [`PacketView`]: a zero-copy view over a UDP payload, checked once by
//!   [`PacketView::new_checked`]; its accessors never panic afterwards.
//! - [`Packet`]: the parsed representation with [`Packet::parse`] and [`Packet::emit`]; the
//!   payload is a borrowed slice of the input.
//!
//! The ICRC covers the IPv4 and UDP headers too (with the fields routers may change masked),
//! so the functions that compute it take those headers: [`icrc`] over real headers, and
//! [`ipv4_udp_headers`] builds the canonical headers ferroce sends (see `roce/mod.rs`).
//! All multi-byte header fields are big-endian; the ICRC is little-endian on the wire.

use core::fmt;

mod ext;
mod ip;
mod opcode;
pub use ext::*;
pub use ip::*;
pub use opcode::*;

/// UDP destination port of RoCEv2 (IANA).
pub const UDP_PORT: u16 = 4791;
/// Base transport header.
pub const BTH_LEN: usize = 12;
/// RDMA extended transport header: virtual address, R_Key, DMA length.
pub const RETH_LEN: usize = 16;
/// ACK extended transport header: syndrome and MSN.
pub const AETH_LEN: usize = 4;
/// Atomic extended transport header: VA, R_Key, swap/add data, compare data.
pub const ATOMIC_ETH_LEN: usize = 28;
/// Atomic acknowledge extended transport header: the original remote data.
pub const ATOMIC_ACK_ETH_LEN: usize = 8;
/// Immediate data.
pub const IMM_LEN: usize = 4;
/// Invalidate extended transport header (an R_Key).
pub const IETH_LEN: usize = 4;
/// Reserved bytes after the BTH of a RoCEv2 congestion notification packet (Annex A17).
pub const CNP_RESERVED_LEN: usize = 16;
/// Datagram extended transport header: Q_Key, reserved byte, source QP (UD).
pub const DETH_LEN: usize = 8;
/// XRC extended transport header: reserved byte, XRC SRQ number (24 bits).
pub const XRCETH_LEN: usize = 4;
/// Invariant CRC trailer.
pub const ICRC_LEN: usize = 4;
/// Length of the IPv4 header ferroce sends (no options).
pub const IPV4_HEADER_LEN: usize = 20;
/// Length of a UDP header.
pub const UDP_HEADER_LEN: usize = 8;
/// PSNs are 24 bits.
pub const PSN_MASK: u32 = 0x00ff_ffff;
/// QPNs are 24 bits.
pub const QPN_MASK: u32 = 0x00ff_ffff;
/// The default partition key (full member of the default partition).
pub const DEFAULT_PKEY: u16 = 0xffff;
/// AETH credit count meaning "no credit information" (IBTA vol. 1 §9.7.5, AETH credit count:
/// the value rxe always sends).
pub const CREDITS_INVALID: u8 = 0x1f;

/// A Q_Key with this bit set is "controlled": a UD send whose work request names one uses
/// the sending QP's own Q_Key instead (IBTA vol. 1 §10.2.4; rxe and rdma-core do the same).
pub const QKEY_CONTROLLED: u32 = 0x8000_0000;

/// Why bytes could not be parsed or emitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than the BTH, the opcode's extended headers and the ICRC.
    Truncated,
    /// An opcode this codec does not know (RD, CNP-less prefixes and reserved opcodes; of UC
    /// only SEND and RDMA WRITE are known, of UD only the two SENDs).
    UnknownOpcode(u8),
    /// Inconsistent lengths (pad beyond the payload, payload on an opcode without one) or a
    /// representation whose extended headers do not match its opcode.
    Malformed(&'static str),
    /// The ICRC does not match.
    BadIcrc,
    /// The output buffer is too small.
    BufferTooSmall,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Truncated => write!(f, "packet truncated"),
            WireError::UnknownOpcode(o) => write!(f, "unknown opcode {o:#04x}"),
            WireError::Malformed(w) => write!(f, "malformed packet: {w}"),
            WireError::BadIcrc => write!(f, "ICRC mismatch"),
            WireError::BufferTooSmall => write!(f, "output buffer too small"),
        }
    }
}

impl std::error::Error for WireError {}

#[inline]
fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}
#[inline]
fn be24(b: &[u8]) -> u32 {
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}
#[inline]
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
#[inline]
fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}
#[inline]
fn put24(b: &mut [u8], v: u32) {
    let x = v.to_be_bytes();
    b[..3].copy_from_slice(&x[1..]);
}

/// PSN arithmetic modulo 2^24.
pub mod psn {
    use super::PSN_MASK;

    /// `a + n` modulo 2^24.
    #[inline]
    pub fn add(a: u32, n: u32) -> u32 {
        a.wrapping_add(n) & PSN_MASK
    }
    /// `a - b` as a signed distance in [-2^23, 2^23).
    #[inline]
    pub fn diff(a: u32, b: u32) -> i32 {
        ((a.wrapping_sub(b)) << 8) as i32 >> 8
    }
    /// `a` comes before `b`.
    #[inline]
    pub fn lt(a: u32, b: u32) -> bool {
        diff(a, b) < 0
    }
    /// `a` comes at or before `b`.
    #[inline]
    pub fn le(a: u32, b: u32) -> bool {
        diff(a, b) <= 0
    }
}

/// Base transport header (IBTA vol. 1 §9.2; FECN/BECN in byte 4 per Annex A17).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bth {
    pub opcode: Opcode,
    /// The opcode is the UC one (transport prefix 001) rather than RC (000).
    pub uc: bool,
    /// The opcode is the XRC one (transport prefix 101) rather than RC (000).
    pub xrc: bool,
    /// Solicited event.
    pub solicited: bool,
    /// MigReq (path migration; ferroce sends 0).
    pub mig_req: bool,
    /// Pad count: bytes (0..=3) after the payload to align it to 4 bytes.
    pub pad: u8,
    /// Transport header version (0; other values are dropped by receivers).
    pub tver: u8,
    pub pkey: u16,
    /// Forward explicit congestion notification (A17: byte 4 bit 7).
    pub fecn: bool,
    /// Backward explicit congestion notification (A17: byte 4 bit 6).
    pub becn: bool,
    /// The other 6 bits of byte 4 (reserved, sent as 0; kept for exact round trips).
    pub resv6: u8,
    /// Destination QP number (24 bits).
    pub dest_qpn: u32,
    /// AckReq: the responder must acknowledge this packet.
    pub ack_req: bool,
    /// The 7 reserved bits of byte 8 (sent as 0; kept for exact round trips).
    pub resv7: u8,
    /// Packet sequence number (24 bits).
    pub psn: u32,
}

impl Bth {
    /// A BTH with every flag clear, the default P_Key and TVer 0.
    pub fn new(opcode: Opcode, dest_qpn: u32, psn: u32) -> Bth {
        Bth {
            opcode,
            uc: false,
            xrc: false,
            solicited: false,
            mig_req: false,
            pad: 0,
            tver: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            resv6: 0,
            dest_qpn: dest_qpn & QPN_MASK,
            ack_req: false,
            resv7: 0,
            psn: psn & PSN_MASK,
        }
    }

    /// Parse the first 12 bytes of `b`.
    pub fn parse(b: &[u8]) -> Result<Bth, WireError> {
        if b.len() < BTH_LEN {
            return Err(WireError::Truncated);
        }
        let (opcode, uc, xrc) = Opcode::decode_full(b[0]).ok_or(WireError::UnknownOpcode(b[0]))?;
        Ok(Bth {
            opcode,
            uc,
            xrc,
            solicited: b[1] & 0x80 != 0,
            mig_req: b[1] & 0x40 != 0,
            pad: (b[1] >> 4) & 3,
            tver: b[1] & 0x0f,
            pkey: be16(&b[2..4]),
            fecn: b[4] & 0x80 != 0,
            becn: b[4] & 0x40 != 0,
            resv6: b[4] & 0x3f,
            dest_qpn: be24(&b[5..8]),
            ack_req: b[8] & 0x80 != 0,
            resv7: b[8] & 0x7f,
            psn: be24(&b[9..12]),
        })
    }

    /// Write into the first 12 bytes of `b`.
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        if b.len() < BTH_LEN {
            return Err(WireError::BufferTooSmall);
        }
        if self.uc
            && (self.opcode.is_ud() || !matches!(self.opcode.kind(), OpKind::Send | OpKind::Write))
        {
            return Err(WireError::Malformed("no such UC opcode"));
        }
        if self.xrc && (self.uc || self.opcode.is_ud() || self.opcode == Opcode::Cnp) {
            return Err(WireError::Malformed("no such XRC opcode"));
        }
        b[0] = if self.xrc {
            self.opcode as u8 | XRC_PREFIX
        } else {
            self.opcode.encode(self.uc)
        };
        b[1] = (self.solicited as u8) << 7
            | (self.mig_req as u8) << 6
            | (self.pad & 3) << 4
            | (self.tver & 0x0f);
        b[2..4].copy_from_slice(&self.pkey.to_be_bytes());
        b[4] = (self.fecn as u8) << 7 | (self.becn as u8) << 6 | (self.resv6 & 0x3f);
        put24(&mut b[5..8], self.dest_qpn);
        b[8] = (self.ack_req as u8) << 7 | (self.resv7 & 0x7f);
        put24(&mut b[9..12], self.psn);
        Ok(())
    }
}

/// Zero-copy checked view over a RoCEv2 packet (a whole UDP payload: BTH .. ICRC).
#[derive(Clone, Copy, Debug)]
pub struct PacketView<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> PacketView<T> {
    /// Check the opcode and every length (headers, pad, ICRC); not the ICRC value.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        if b.len() < BTH_LEN + ICRC_LEN {
            return Err(WireError::Truncated);
        }
        let (op, _, xrc) = Opcode::decode_full(b[0]).ok_or(WireError::UnknownOpcode(b[0]))?;
        let hdr = BTH_LEN + op.ext_len_in(xrc);
        if b.len() < hdr + ICRC_LEN {
            return Err(WireError::Truncated);
        }
        let body = b.len() - hdr - ICRC_LEN;
        let pad = ((b[1] >> 4) & 3) as usize;
        if pad > body {
            return Err(WireError::Malformed("pad count exceeds the payload"));
        }
        if !op.has_payload() && body != 0 {
            return Err(WireError::Malformed("payload on an opcode without one"));
        }
        Ok(PacketView { buf })
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }
    pub fn opcode(&self) -> Opcode {
        // new_checked validated it; the fallback is never taken.
        Opcode::decode_full(self.b()[0]).map_or(Opcode::Acknowledge, |(op, _, _)| op)
    }
    /// The opcode is an XRC one.
    pub fn is_xrc(&self) -> bool {
        self.b()[0] & 0xe0 == XRC_PREFIX
    }
    /// The opcode is a UC one.
    pub fn is_uc(&self) -> bool {
        self.b()[0] & 0xe0 == UC_PREFIX
    }
    /// The opcode is a UD one.
    pub fn is_ud(&self) -> bool {
        self.b()[0] & 0xe0 == UD_PREFIX
    }
    pub fn solicited(&self) -> bool {
        self.b()[1] & 0x80 != 0
    }
    pub fn pad_count(&self) -> usize {
        ((self.b()[1] >> 4) & 3) as usize
    }
    pub fn tver(&self) -> u8 {
        self.b()[1] & 0x0f
    }
    pub fn pkey(&self) -> u16 {
        be16(&self.b()[2..4])
    }
    pub fn fecn(&self) -> bool {
        self.b()[4] & 0x80 != 0
    }
    pub fn becn(&self) -> bool {
        self.b()[4] & 0x40 != 0
    }
    pub fn dest_qpn(&self) -> u32 {
        be24(&self.b()[5..8])
    }
    pub fn ack_req(&self) -> bool {
        self.b()[8] & 0x80 != 0
    }
    pub fn psn(&self) -> u32 {
        be24(&self.b()[9..12])
    }
    pub fn bth(&self) -> Bth {
        // new_checked validated length and opcode.
        Bth::parse(self.b()).unwrap_or(Bth::new(Opcode::Acknowledge, 0, 0))
    }
    /// BTH plus extended headers.
    pub fn header_len(&self) -> usize {
        BTH_LEN + self.opcode().ext_len_in(self.is_xrc())
    }
    /// The extended header bytes.
    pub fn ext_bytes(&self) -> &[u8] {
        &self.b()[BTH_LEN..self.header_len()]
    }
    /// The payload (without pad).
    pub fn payload(&self) -> &[u8] {
        let b = self.b();
        let end = b.len() - ICRC_LEN - self.pad_count();
        &b[self.header_len()..end]
    }
    /// The pad bytes.
    pub fn pad_bytes(&self) -> &[u8] {
        let b = self.b();
        &b[b.len() - ICRC_LEN - self.pad_count()..b.len() - ICRC_LEN]
    }
    /// Everything the ICRC is computed over after the IP/UDP headers: BTH .. pad.
    pub fn icrc_covered(&self) -> &[u8] {
        let b = self.b();
        &b[..b.len() - ICRC_LEN]
    }
    /// The ICRC trailer (little-endian on the wire).
    pub fn icrc(&self) -> u32 {
        let b = self.b();
        let n = b.len();
        u32::from_le_bytes([b[n - 4], b[n - 3], b[n - 2], b[n - 1]])
    }
    /// The trailer matches the ICRC computed over these real IPv4 and UDP headers.
    pub fn icrc_ok(&self, ip_hdr: &[u8], udp_hdr: &[u8]) -> bool {
        icrc(ip_hdr, udp_hdr, self.icrc_covered()) == self.icrc()
    }
    /// The trailer matches the ICRC computed over the canonical headers of `flow`.
    pub fn icrc_ok_canonical(&self, flow: &Flow) -> bool {
        let h = flow.headers(self.b().len());
        icrc(
            &h[..IPV4_HEADER_LEN],
            &h[IPV4_HEADER_LEN..],
            self.icrc_covered(),
        ) == self.icrc()
    }
    pub fn into_inner(self) -> T {
        self.buf
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> PacketView<T> {
    pub fn set_psn(&mut self, psn: u32) {
        put24(&mut self.buf.as_mut()[9..12], psn);
    }
    pub fn set_ack_req(&mut self, on: bool) {
        let b = self.buf.as_mut();
        b[8] = (b[8] & 0x7f) | (on as u8) << 7;
    }
    pub fn set_becn(&mut self, on: bool) {
        let b = self.buf.as_mut();
        b[4] = (b[4] & !0x40) | (on as u8) << 6;
    }
    /// Recompute and store the ICRC over real headers (after changing fields).
    pub fn fill_icrc(&mut self, ip_hdr: &[u8], udp_hdr: &[u8]) {
        let c = icrc(ip_hdr, udp_hdr, self.icrc_covered());
        let b = self.buf.as_mut();
        let n = b.len();
        b[n - 4..].copy_from_slice(&c.to_le_bytes());
    }
}

/// A parsed RoCEv2 packet. The ICRC is not part of the representation: `parse` does not check
/// it (that needs the IP/UDP headers: [`PacketView::icrc_ok`]) and `emit` computes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    pub bth: Bth,
    pub ext: ExtHeaders,
    pub payload: &'a [u8],
}

impl<'a> Packet<'a> {
    /// Parse a UDP payload (BTH .. ICRC). Pad byte values are not checked (IBTA sends 0).
    pub fn parse(b: &'a [u8]) -> Result<Packet<'a>, WireError> {
        let v = PacketView::new_checked(b)?;
        let bth = Bth::parse(b)?;
        let ext = ExtHeaders::parse_in(bth.opcode, bth.xrc, &b[BTH_LEN..])?;
        let end = b.len() - ICRC_LEN - v.pad_count();
        Ok(Packet {
            bth,
            ext,
            payload: &b[v.header_len()..end],
        })
    }

    /// Bytes before the payload.
    pub fn header_len(&self) -> usize {
        BTH_LEN + self.bth.opcode.ext_len_in(self.bth.xrc)
    }

    /// Total length on the wire (UDP payload): headers, payload, pad, ICRC.
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload.len() + self.bth.pad as usize + ICRC_LEN
    }

    /// Write headers, payload and zero pad bytes into `buf` and the ICRC computed over the
    /// given real IPv4 and UDP headers; returns the length. The BTH pad count is emitted as
    /// given (use [`pad_for`] to derive it from the payload length).
    pub fn emit(&self, buf: &mut [u8], ip_hdr: &[u8], udp_hdr: &[u8]) -> Result<usize, WireError> {
        let n = self.emit_without_icrc(buf)?;
        let c = icrc(ip_hdr, udp_hdr, &buf[..n]);
        buf[n..n + ICRC_LEN].copy_from_slice(&c.to_le_bytes());
        Ok(n + ICRC_LEN)
    }

    /// Like [`Packet::emit`] with the canonical headers of `flow` (spec/rocev2.md §5).
    pub fn emit_canonical(&self, buf: &mut [u8], flow: &Flow) -> Result<usize, WireError> {
        let h = flow.headers(self.buffer_len());
        self.emit(buf, &h[..IPV4_HEADER_LEN], &h[IPV4_HEADER_LEN..])
    }

    /// Headers, payload and pad; returns the length without the ICRC (which the caller
    /// writes at that offset).
    pub fn emit_without_icrc(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        if !self.bth.opcode.has_payload() && (!self.payload.is_empty() || self.bth.pad != 0) {
            return Err(WireError::Malformed("payload on an opcode without one"));
        }
        let total = self.buffer_len();
        if buf.len() < total {
            return Err(WireError::BufferTooSmall);
        }
        self.bth.emit(buf)?;
        let h = BTH_LEN
            + self
                .ext
                .emit_in(self.bth.opcode, self.bth.xrc, &mut buf[BTH_LEN..])?;
        let p = h + self.payload.len();
        buf[h..p].copy_from_slice(self.payload);
        let e = p + self.bth.pad as usize;
        buf[p..e].fill(0);
        Ok(e)
    }
}

/// Pad count for a payload of `len` bytes.
#[inline]
pub fn pad_for(len: usize) -> u8 {
    ((4 - (len & 3)) & 3) as u8
}

/// RNR NAK timer codes (IBTA vol. 1 §9.7.5, RNR NAK timer encodings) in
/// nanoseconds: code 0 is 655.36 ms, codes 1..=31 grow from 0.01 ms to 491.52 ms.
pub const RNR_TIMER_NS: [u64; 32] = [
    655_360_000,
    10_000,
    20_000,
    30_000,
    40_000,
    60_000,
    80_000,
    120_000,
    160_000,
    240_000,
    320_000,
    480_000,
    640_000,
    960_000,
    1_280_000,
    1_920_000,
    2_560_000,
    3_840_000,
    5_120_000,
    7_680_000,
    10_240_000,
    15_360_000,
    20_480_000,
    30_720_000,
    40_960_000,
    61_440_000,
    81_920_000,
    122_880_000,
    163_840_000,
    245_760_000,
    327_680_000,
    491_520_000,
];

/// The RNR delay a timer code asks for (ns).
pub fn rnr_delay_ns(code: u8) -> u64 {
    RNR_TIMER_NS[(code & 0x1f) as usize]
}

/// Local ACK timeout for the QP attribute `timeout` (IBTA vol. 1 §9.7.6: 4.096 µs × 2^timeout);
/// `None` for 0, which disables the timer.
pub fn local_ack_timeout_ns(timeout: u8) -> Option<u64> {
    match timeout {
        0 => None,
        t => Some(4096u64 << t.min(31)),
    }
}

#[cfg(test)]
mod tests;
