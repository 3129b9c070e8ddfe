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
use std::net::Ipv4Addr;

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

/// Transport prefix of the unreliable connected (UC) opcodes (IBTA vol. 1 §9.2: bits 7..5 of
/// the opcode byte, 001).
pub const UC_PREFIX: u8 = 0x20;
/// Transport prefix of the unreliable datagram (UD) opcodes (bits 7..5 011): of them only
/// SEND_ONLY (0x64) and SEND_ONLY with immediate (0x65) exist.
pub const UD_PREFIX: u8 = 0x60;
/// A Q_Key with this bit set is "controlled": a UD send whose work request names one uses
/// the sending QP's own Q_Key instead (IBTA vol. 1 §10.2.4; rxe and rdma-core do the same).
pub const QKEY_CONTROLLED: u32 = 0x8000_0000;

/// BTH opcodes of the reliable connected (RC) transport (IBTA vol. 1 §9.2 opcode table, prefix 000)
/// plus the RoCEv2 congestion notification packet (Annex A17).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Opcode {
    SendFirst = 0x00,
    SendMiddle = 0x01,
    SendLast = 0x02,
    SendLastImm = 0x03,
    SendOnly = 0x04,
    SendOnlyImm = 0x05,
    WriteFirst = 0x06,
    WriteMiddle = 0x07,
    WriteLast = 0x08,
    WriteLastImm = 0x09,
    WriteOnly = 0x0a,
    WriteOnlyImm = 0x0b,
    ReadRequest = 0x0c,
    ReadResponseFirst = 0x0d,
    ReadResponseMiddle = 0x0e,
    ReadResponseLast = 0x0f,
    ReadResponseOnly = 0x10,
    Acknowledge = 0x11,
    AtomicAcknowledge = 0x12,
    CompareSwap = 0x13,
    FetchAdd = 0x14,
    SendLastInv = 0x16,
    SendOnlyInv = 0x17,
    /// UD SEND_ONLY (prefix 011): BTH, DETH, payload.
    UdSendOnly = 0x64,
    /// UD SEND_ONLY with immediate: BTH, DETH, ImmDt, payload.
    UdSendOnlyImm = 0x65,
    /// RoCEv2 CNP (DCQCN congestion notification).
    Cnp = 0x81,
}

/// Which extended headers an opcode carries, and whether a payload may follow.
mod layout {
    pub const RETH: u16 = 1 << 0;
    pub const AETH: u16 = 1 << 1;
    pub const ATOMIC: u16 = 1 << 2;
    pub const ATOMIC_ACK: u16 = 1 << 3;
    pub const IMM: u16 = 1 << 4;
    pub const IETH: u16 = 1 << 5;
    pub const PAYLOAD: u16 = 1 << 6;
    pub const CNP: u16 = 1 << 7;
    pub const DETH: u16 = 1 << 8;
}

/// Where a packet sits in its message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Position {
    First,
    Middle,
    Last,
    Only,
}

impl Position {
    /// Position of packet `k` (0-based) of a message of `n` packets.
    pub fn of(k: u32, n: u32) -> Position {
        match (k == 0, k + 1 >= n) {
            (true, true) => Position::Only,
            (true, false) => Position::First,
            (false, true) => Position::Last,
            (false, false) => Position::Middle,
        }
    }
    /// Starts a message.
    pub fn is_first(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }
    /// Ends a message.
    pub fn is_last(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// The operation family of an opcode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    Send,
    Write,
    ReadRequest,
    ReadResponse,
    Acknowledge,
    AtomicAcknowledge,
    CompareSwap,
    FetchAdd,
    Cnp,
}

impl Opcode {
    /// A BTH opcode byte: the RC opcodes (transport prefix 000) and the UC opcodes (prefix
    /// 001: SEND and RDMA WRITE, IBTA vol. 1 §9.2 table 35). Returns the operation and
    /// whether it is UC.
    pub fn decode(v: u8) -> Option<(Opcode, bool)> {
        if v & 0xe0 == UC_PREFIX {
            // UC has only SEND and RDMA WRITE (first .. only with immediate): 0x20..=0x2b.
            let op = Opcode::from_u8(v & 0x1f)?;
            return matches!(op.kind(), OpKind::Send | OpKind::Write)
                .then_some((op, true))
                .filter(|_| !op.has_ieth());
        }
        Opcode::from_u8(v).map(|op| (op, false))
    }

    /// The opcode byte of this operation on the RC (`uc` false) or UC transport.
    pub fn encode(self, uc: bool) -> u8 {
        if uc {
            self as u8 | UC_PREFIX
        } else {
            self as u8
        }
    }

    /// The RC opcode of byte `v` (transport prefix 000), the two UD SEND opcodes (prefix
    /// 011) and the CNP.
    pub fn from_u8(v: u8) -> Option<Opcode> {
        use Opcode::*;
        Some(match v {
            0x00 => SendFirst,
            0x01 => SendMiddle,
            0x02 => SendLast,
            0x03 => SendLastImm,
            0x04 => SendOnly,
            0x05 => SendOnlyImm,
            0x06 => WriteFirst,
            0x07 => WriteMiddle,
            0x08 => WriteLast,
            0x09 => WriteLastImm,
            0x0a => WriteOnly,
            0x0b => WriteOnlyImm,
            0x0c => ReadRequest,
            0x0d => ReadResponseFirst,
            0x0e => ReadResponseMiddle,
            0x0f => ReadResponseLast,
            0x10 => ReadResponseOnly,
            0x11 => Acknowledge,
            0x12 => AtomicAcknowledge,
            0x13 => CompareSwap,
            0x14 => FetchAdd,
            0x16 => SendLastInv,
            0x17 => SendOnlyInv,
            0x64 => UdSendOnly,
            0x65 => UdSendOnlyImm,
            0x81 => Cnp,
            _ => return None,
        })
    }

    fn layout(self) -> u16 {
        use layout::*;
        use Opcode::*;
        match self {
            SendFirst | SendMiddle | SendLast | SendOnly => PAYLOAD,
            SendLastImm | SendOnlyImm => IMM | PAYLOAD,
            SendLastInv | SendOnlyInv => IETH | PAYLOAD,
            WriteFirst | WriteOnly => RETH | PAYLOAD,
            WriteMiddle | WriteLast => PAYLOAD,
            WriteLastImm => IMM | PAYLOAD,
            WriteOnlyImm => RETH | IMM | PAYLOAD,
            ReadRequest => RETH,
            ReadResponseFirst | ReadResponseLast | ReadResponseOnly => AETH | PAYLOAD,
            ReadResponseMiddle => PAYLOAD,
            Acknowledge => AETH,
            AtomicAcknowledge => AETH | ATOMIC_ACK,
            CompareSwap | FetchAdd => ATOMIC,
            UdSendOnly => DETH | PAYLOAD,
            UdSendOnlyImm => DETH | IMM | PAYLOAD,
            Cnp => CNP,
        }
    }

    /// A UD opcode (transport prefix 011).
    pub fn is_ud(self) -> bool {
        matches!(self, Opcode::UdSendOnly | Opcode::UdSendOnlyImm)
    }
    pub fn has_deth(self) -> bool {
        self.layout() & layout::DETH != 0
    }

    pub fn has_reth(self) -> bool {
        self.layout() & layout::RETH != 0
    }
    pub fn has_aeth(self) -> bool {
        self.layout() & layout::AETH != 0
    }
    pub fn has_atomic_eth(self) -> bool {
        self.layout() & layout::ATOMIC != 0
    }
    pub fn has_atomic_ack_eth(self) -> bool {
        self.layout() & layout::ATOMIC_ACK != 0
    }
    pub fn has_imm(self) -> bool {
        self.layout() & layout::IMM != 0
    }
    pub fn has_ieth(self) -> bool {
        self.layout() & layout::IETH != 0
    }
    /// Whether a payload may follow the headers.
    pub fn has_payload(self) -> bool {
        self.layout() & layout::PAYLOAD != 0
    }

    /// Length of the extended headers between the BTH and the payload.
    pub fn ext_len(self) -> usize {
        let l = self.layout();
        let mut n = 0;
        if l & layout::DETH != 0 {
            n += DETH_LEN;
        }
        if l & layout::RETH != 0 {
            n += RETH_LEN;
        }
        if l & layout::AETH != 0 {
            n += AETH_LEN;
        }
        if l & layout::ATOMIC != 0 {
            n += ATOMIC_ETH_LEN;
        }
        if l & layout::ATOMIC_ACK != 0 {
            n += ATOMIC_ACK_ETH_LEN;
        }
        if l & layout::IMM != 0 {
            n += IMM_LEN;
        }
        if l & layout::IETH != 0 {
            n += IETH_LEN;
        }
        if l & layout::CNP != 0 {
            n += CNP_RESERVED_LEN;
        }
        n
    }

    pub fn kind(self) -> OpKind {
        use Opcode::*;
        match self {
            SendFirst | SendMiddle | SendLast | SendLastImm | SendOnly | SendOnlyImm
            | SendLastInv | SendOnlyInv | UdSendOnly | UdSendOnlyImm => OpKind::Send,
            WriteFirst | WriteMiddle | WriteLast | WriteLastImm | WriteOnly | WriteOnlyImm => {
                OpKind::Write
            }
            ReadRequest => OpKind::ReadRequest,
            ReadResponseFirst | ReadResponseMiddle | ReadResponseLast | ReadResponseOnly => {
                OpKind::ReadResponse
            }
            Acknowledge => OpKind::Acknowledge,
            AtomicAcknowledge => OpKind::AtomicAcknowledge,
            CompareSwap => OpKind::CompareSwap,
            FetchAdd => OpKind::FetchAdd,
            Cnp => OpKind::Cnp,
        }
    }

    /// Position in the message for SEND, WRITE and READ response opcodes; `Only` for the
    /// single-packet requests and responses.
    pub fn position(self) -> Position {
        use Opcode::*;
        match self {
            SendFirst | WriteFirst | ReadResponseFirst => Position::First,
            SendMiddle | WriteMiddle | ReadResponseMiddle => Position::Middle,
            SendLast | SendLastImm | SendLastInv | WriteLast | WriteLastImm | ReadResponseLast => {
                Position::Last
            }
            _ => Position::Only,
        }
    }

    /// Sent by a responder (ACK, READ response, ATOMIC ACK): handled by the requester side.
    pub fn is_response(self) -> bool {
        matches!(
            self.kind(),
            OpKind::ReadResponse | OpKind::Acknowledge | OpKind::AtomicAcknowledge
        )
    }

    /// The SEND opcode for packet position `p`, with immediate data on the last packet.
    pub fn send(p: Position, imm: bool) -> Opcode {
        match (p, imm) {
            (Position::First, _) => Opcode::SendFirst,
            (Position::Middle, _) => Opcode::SendMiddle,
            (Position::Last, false) => Opcode::SendLast,
            (Position::Last, true) => Opcode::SendLastImm,
            (Position::Only, false) => Opcode::SendOnly,
            (Position::Only, true) => Opcode::SendOnlyImm,
        }
    }

    /// The RDMA WRITE opcode for packet position `p`, with immediate data on the last packet.
    pub fn write(p: Position, imm: bool) -> Opcode {
        match (p, imm) {
            (Position::First, _) => Opcode::WriteFirst,
            (Position::Middle, _) => Opcode::WriteMiddle,
            (Position::Last, false) => Opcode::WriteLast,
            (Position::Last, true) => Opcode::WriteLastImm,
            (Position::Only, false) => Opcode::WriteOnly,
            (Position::Only, true) => Opcode::WriteOnlyImm,
        }
    }

    /// The READ response opcode for packet position `p`.
    pub fn read_response(p: Position) -> Opcode {
        match p {
            Position::First => Opcode::ReadResponseFirst,
            Position::Middle => Opcode::ReadResponseMiddle,
            Position::Last => Opcode::ReadResponseLast,
            Position::Only => Opcode::ReadResponseOnly,
        }
    }

    /// Short name in the style of Wireshark's dissector.
    pub fn name(self) -> &'static str {
        use Opcode::*;
        match self {
            SendFirst => "SEND_FIRST",
            SendMiddle => "SEND_MIDDLE",
            SendLast => "SEND_LAST",
            SendLastImm => "SEND_LAST_IMM",
            SendOnly => "SEND_ONLY",
            SendOnlyImm => "SEND_ONLY_IMM",
            WriteFirst => "RDMA_WRITE_FIRST",
            WriteMiddle => "RDMA_WRITE_MIDDLE",
            WriteLast => "RDMA_WRITE_LAST",
            WriteLastImm => "RDMA_WRITE_LAST_IMM",
            WriteOnly => "RDMA_WRITE_ONLY",
            WriteOnlyImm => "RDMA_WRITE_ONLY_IMM",
            ReadRequest => "RDMA_READ_REQUEST",
            ReadResponseFirst => "RDMA_READ_RESPONSE_FIRST",
            ReadResponseMiddle => "RDMA_READ_RESPONSE_MIDDLE",
            ReadResponseLast => "RDMA_READ_RESPONSE_LAST",
            ReadResponseOnly => "RDMA_READ_RESPONSE_ONLY",
            Acknowledge => "ACKNOWLEDGE",
            AtomicAcknowledge => "ATOMIC_ACKNOWLEDGE",
            CompareSwap => "COMPARE_SWAP",
            FetchAdd => "FETCH_ADD",
            SendLastInv => "SEND_LAST_INVALIDATE",
            SendOnlyInv => "SEND_ONLY_INVALIDATE",
            UdSendOnly => "UD_SEND_ONLY",
            UdSendOnlyImm => "UD_SEND_ONLY_IMM",
            Cnp => "CNP",
        }
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why bytes could not be parsed or emitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than the BTH, the opcode's extended headers and the ICRC.
    Truncated,
    /// An opcode this codec does not know (RD, XRC, CNP-less prefixes and reserved
    /// opcodes; of UC only SEND and RDMA WRITE are known, of UD only the two SENDs).
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
        let (opcode, uc) = Opcode::decode(b[0]).ok_or(WireError::UnknownOpcode(b[0]))?;
        Ok(Bth {
            opcode,
            uc,
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
        b[0] = self.opcode.encode(self.uc);
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

/// RDMA extended transport header (IBTA vol. 1 §9.3.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Reth {
    pub va: u64,
    pub rkey: u32,
    pub dma_len: u32,
}

impl Reth {
    pub fn parse(b: &[u8]) -> Result<Reth, WireError> {
        if b.len() < RETH_LEN {
            return Err(WireError::Truncated);
        }
        Ok(Reth {
            va: be64(&b[0..8]),
            rkey: be32(&b[8..12]),
            dma_len: be32(&b[12..16]),
        })
    }
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        if b.len() < RETH_LEN {
            return Err(WireError::BufferTooSmall);
        }
        b[0..8].copy_from_slice(&self.va.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..16].copy_from_slice(&self.dma_len.to_be_bytes());
        Ok(())
    }
}

/// Datagram extended transport header (IBTA vol. 1 §9.3.2): the Q_Key the receiving UD QP
/// checks and the sender's QP number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Deth {
    pub qkey: u32,
    /// Source QP (24 bits).
    pub src_qpn: u32,
    /// The reserved byte between them (sent as 0; kept for exact round trips).
    pub resv: u8,
}

impl Deth {
    pub fn parse(b: &[u8]) -> Result<Deth, WireError> {
        if b.len() < DETH_LEN {
            return Err(WireError::Truncated);
        }
        Ok(Deth {
            qkey: be32(&b[0..4]),
            resv: b[4],
            src_qpn: be24(&b[5..8]),
        })
    }
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        if b.len() < DETH_LEN {
            return Err(WireError::BufferTooSmall);
        }
        b[0..4].copy_from_slice(&self.qkey.to_be_bytes());
        b[4] = self.resv;
        put24(&mut b[5..8], self.src_qpn);
        Ok(())
    }
}

/// NAK codes of the AETH syndrome (IBTA vol. 1 §9.7.5, AETH syndrome encodings).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NakCode {
    PsnSequenceError,
    InvalidRequest,
    RemoteAccessError,
    RemoteOperationalError,
    /// Invalid RD request (RD only; never sent by ferroce).
    InvalidRdRequest,
    /// Reserved codes 5..=31, kept for round trips.
    Reserved(u8),
}

impl NakCode {
    pub fn from_u8(v: u8) -> NakCode {
        match v & 0x1f {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            x => NakCode::Reserved(x),
        }
    }
    pub fn to_u8(self) -> u8 {
        match self {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(x) => x & 0x1f,
        }
    }
}

/// The 8-bit AETH syndrome: bits 6..5 select ACK (00), RNR NAK (01), reserved (10) or NAK
/// (11); bits 4..0 are the credit count, the RNR timer code or the NAK code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Syndrome {
    Ack {
        credits: u8,
    },
    RnrNak {
        timer: u8,
    },
    Nak(NakCode),
    /// Bit 7 set or type 10: reserved encodings, kept as the raw byte.
    Reserved(u8),
}

impl Syndrome {
    /// An ACK without credit information (what rxe sends).
    pub const ACK: Syndrome = Syndrome::Ack {
        credits: CREDITS_INVALID,
    };

    pub fn from_u8(v: u8) -> Syndrome {
        if v & 0x80 != 0 {
            return Syndrome::Reserved(v);
        }
        let low = v & 0x1f;
        match (v >> 5) & 3 {
            0 => Syndrome::Ack { credits: low },
            1 => Syndrome::RnrNak { timer: low },
            3 => Syndrome::Nak(NakCode::from_u8(low)),
            _ => Syndrome::Reserved(v),
        }
    }

    pub fn to_u8(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1f,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            Syndrome::Nak(c) => 0x60 | c.to_u8(),
            Syndrome::Reserved(v) => v,
        }
    }

    pub fn is_ack(self) -> bool {
        matches!(self, Syndrome::Ack { .. })
    }
}

/// ACK extended transport header (IBTA vol. 1 §9.3.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aeth {
    pub syndrome: Syndrome,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

impl Aeth {
    pub fn parse(b: &[u8]) -> Result<Aeth, WireError> {
        if b.len() < AETH_LEN {
            return Err(WireError::Truncated);
        }
        Ok(Aeth {
            syndrome: Syndrome::from_u8(b[0]),
            msn: be24(&b[1..4]),
        })
    }
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        if b.len() < AETH_LEN {
            return Err(WireError::BufferTooSmall);
        }
        b[0] = self.syndrome.to_u8();
        put24(&mut b[1..4], self.msn);
        Ok(())
    }
}

/// Atomic extended transport header (IBTA vol. 1 §9.3.4). FETCH_ADD carries the addend in
/// `swap_add` and sends `compare` as 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AtomicEth {
    pub va: u64,
    pub rkey: u32,
    pub swap_add: u64,
    pub compare: u64,
}

impl AtomicEth {
    pub fn parse(b: &[u8]) -> Result<AtomicEth, WireError> {
        if b.len() < ATOMIC_ETH_LEN {
            return Err(WireError::Truncated);
        }
        Ok(AtomicEth {
            va: be64(&b[0..8]),
            rkey: be32(&b[8..12]),
            swap_add: be64(&b[12..20]),
            compare: be64(&b[20..28]),
        })
    }
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        if b.len() < ATOMIC_ETH_LEN {
            return Err(WireError::BufferTooSmall);
        }
        b[0..8].copy_from_slice(&self.va.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..20].copy_from_slice(&self.swap_add.to_be_bytes());
        b[20..28].copy_from_slice(&self.compare.to_be_bytes());
        Ok(())
    }
}

/// The extended headers of one packet. Exactly the ones its opcode calls for are `Some`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ExtHeaders {
    /// DETH (UD).
    pub deth: Option<Deth>,
    pub reth: Option<Reth>,
    pub aeth: Option<Aeth>,
    pub atomic: Option<AtomicEth>,
    /// AtomicAckETH: the original remote data (IBTA vol. 1 §9.3.6).
    pub atomic_ack: Option<u64>,
    /// ImmDt (IBTA vol. 1 §9.3.7).
    pub imm: Option<u32>,
    /// IETH: the R_Key to invalidate (IBTA vol. 1 §9.3.8).
    pub ieth: Option<u32>,
    /// The 16 reserved bytes of a CNP.
    pub cnp: Option<[u8; CNP_RESERVED_LEN]>,
}

impl ExtHeaders {
    /// Parse the extended headers of `opcode` from `b` (which starts right after the BTH), in
    /// the order IBTA vol. 1 §9.2 gives: DETH, RETH/AtomicETH, AETH, AtomicAckETH,
    /// ImmDt/IETH.
    pub fn parse(opcode: Opcode, b: &[u8]) -> Result<ExtHeaders, WireError> {
        if b.len() < opcode.ext_len() {
            return Err(WireError::Truncated);
        }
        let mut e = ExtHeaders::default();
        let mut o = 0;
        if opcode.has_deth() {
            e.deth = Some(Deth::parse(&b[o..])?);
            o += DETH_LEN;
        }
        if opcode.has_reth() {
            e.reth = Some(Reth::parse(&b[o..])?);
            o += RETH_LEN;
        }
        if opcode.has_atomic_eth() {
            e.atomic = Some(AtomicEth::parse(&b[o..])?);
            o += ATOMIC_ETH_LEN;
        }
        if opcode.has_aeth() {
            e.aeth = Some(Aeth::parse(&b[o..])?);
            o += AETH_LEN;
        }
        if opcode.has_atomic_ack_eth() {
            e.atomic_ack = Some(be64(&b[o..o + 8]));
            o += ATOMIC_ACK_ETH_LEN;
        }
        if opcode.has_imm() {
            e.imm = Some(be32(&b[o..o + 4]));
            o += IMM_LEN;
        }
        if opcode.has_ieth() {
            e.ieth = Some(be32(&b[o..o + 4]));
            o += IETH_LEN;
        }
        if opcode == Opcode::Cnp {
            let mut r = [0u8; CNP_RESERVED_LEN];
            r.copy_from_slice(&b[o..o + CNP_RESERVED_LEN]);
            e.cnp = Some(r);
        }
        Ok(e)
    }

    /// Whether exactly the headers `opcode` calls for are present.
    pub fn matches(&self, opcode: Opcode) -> bool {
        self.deth.is_some() == opcode.has_deth()
            && self.reth.is_some() == opcode.has_reth()
            && self.aeth.is_some() == opcode.has_aeth()
            && self.atomic.is_some() == opcode.has_atomic_eth()
            && self.atomic_ack.is_some() == opcode.has_atomic_ack_eth()
            && self.imm.is_some() == opcode.has_imm()
            && self.ieth.is_some() == opcode.has_ieth()
            && self.cnp.is_some() == (opcode == Opcode::Cnp)
    }

    /// Write the headers into `b`; returns their length. Fails when they do not match
    /// `opcode`.
    pub fn emit(&self, opcode: Opcode, b: &mut [u8]) -> Result<usize, WireError> {
        if !self.matches(opcode) {
            return Err(WireError::Malformed(
                "extended headers do not match the opcode",
            ));
        }
        let n = opcode.ext_len();
        if b.len() < n {
            return Err(WireError::BufferTooSmall);
        }
        let mut o = 0;
        if let Some(d) = self.deth {
            d.emit(&mut b[o..])?;
            o += DETH_LEN;
        }
        if let Some(r) = self.reth {
            r.emit(&mut b[o..])?;
            o += RETH_LEN;
        }
        if let Some(a) = self.atomic {
            a.emit(&mut b[o..])?;
            o += ATOMIC_ETH_LEN;
        }
        if let Some(a) = self.aeth {
            a.emit(&mut b[o..])?;
            o += AETH_LEN;
        }
        if let Some(v) = self.atomic_ack {
            b[o..o + 8].copy_from_slice(&v.to_be_bytes());
            o += ATOMIC_ACK_ETH_LEN;
        }
        if let Some(v) = self.imm {
            b[o..o + 4].copy_from_slice(&v.to_be_bytes());
            o += IMM_LEN;
        }
        if let Some(v) = self.ieth {
            b[o..o + 4].copy_from_slice(&v.to_be_bytes());
            o += IETH_LEN;
        }
        if let Some(r) = self.cnp {
            b[o..o + CNP_RESERVED_LEN].copy_from_slice(&r);
            o += CNP_RESERVED_LEN;
        }
        debug_assert_eq!(o, n);
        Ok(n)
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
        let (op, _) = Opcode::decode(b[0]).ok_or(WireError::UnknownOpcode(b[0]))?;
        let hdr = BTH_LEN + op.ext_len();
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
        Opcode::decode(self.b()[0]).map_or(Opcode::Acknowledge, |(op, _)| op)
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
        BTH_LEN + self.opcode().ext_len()
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
        let ext = ExtHeaders::parse(bth.opcode, &b[BTH_LEN..])?;
        let end = b.len() - ICRC_LEN - v.pad_count();
        Ok(Packet {
            bth,
            ext,
            payload: &b[v.header_len()..end],
        })
    }

    /// Bytes before the payload.
    pub fn header_len(&self) -> usize {
        BTH_LEN + self.bth.opcode.ext_len()
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
        let h = BTH_LEN + self.ext.emit(self.bth.opcode, &mut buf[BTH_LEN..])?;
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

/// The ICRC (IBTA vol. 1 §7.8 and Annex A17): CRC-32 (zlib) over 8 bytes of 0xFF standing for
/// the absent LRH, the IPv4 header with TOS, TTL and header checksum set to all ones, the UDP
/// header with the checksum set to all ones, and `ib` (BTH .. pad, without the ICRC) with
/// BTH byte 4 (FECN, BECN, reserved) set to all ones. Never panics: short inputs are used as
/// they are.
pub fn icrc(ip_hdr: &[u8], udp_hdr: &[u8], ib: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&[0xff; 8]);
    let mut ip = [0u8; 60];
    let n = ip_hdr.len().min(60);
    ip[..n].copy_from_slice(&ip_hdr[..n]);
    for (i, v) in [(1, 0xff), (8, 0xff), (10, 0xff), (11, 0xff)] {
        if i < n {
            ip[i] = v;
        }
    }
    h.update(&ip[..n]);
    if ip_hdr.len() > 60 {
        h.update(&ip_hdr[60..]);
    }
    let mut udp = [0u8; UDP_HEADER_LEN];
    let n = udp_hdr.len().min(UDP_HEADER_LEN);
    udp[..n].copy_from_slice(&udp_hdr[..n]);
    for b in udp.iter_mut().take(n).skip(6) {
        *b = 0xff;
    }
    h.update(&udp[..n]);
    if ib.len() > 4 {
        h.update(&ib[..4]);
        h.update(&[0xff]);
        h.update(&ib[5..]);
    } else {
        h.update(ib);
    }
    h.finalize()
}

/// The addressing of one datagram: enough to build its canonical IPv4 and UDP headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Flow {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub src_port: u16,
    pub dst_port: u16,
}

impl Flow {
    /// The canonical headers for a UDP payload of `udp_payload_len` bytes.
    pub fn headers(&self, udp_payload_len: usize) -> [u8; IPV4_HEADER_LEN + UDP_HEADER_LEN] {
        ipv4_udp_headers(
            self.src,
            self.dst,
            self.src_port,
            self.dst_port,
            udp_payload_len,
        )
    }
}

/// TOS byte of the canonical IPv4 header: DSCP 0, ECN ECT(0). (TOS is masked by the ICRC, so
/// an embedder may send another DSCP/ECN value without changing the ICRC.)
pub const CANONICAL_TOS: u8 = 0x02;
/// TTL of the canonical IPv4 header (masked by the ICRC).
pub const CANONICAL_TTL: u8 = 64;
/// Flags/fragment offset of the canonical IPv4 header: DF, offset 0.
pub const CANONICAL_FLAGS_FRAG: u16 = 0x4000;
/// Identification of the canonical IPv4 header. It is *not* masked by the ICRC, so every
/// ferroce RoCEv2 datagram is sent with identification 0 (RFC 6864 allows any value on an
/// atomic datagram, which DF makes it).
pub const CANONICAL_IDENT: u16 = 0;

/// The IPv4 header (20 bytes, no options) and UDP header (8 bytes) ferroce sends a RoCEv2
/// datagram with: version 4, IHL 5, TOS [`CANONICAL_TOS`], total length 28 +
/// `udp_payload_len`, identification 0, DF, TTL 64, protocol 17, a correct header checksum,
/// the addresses; UDP ports, length 8 + `udp_payload_len`, checksum 0 (RoCEv2 sends none).
/// Lengths beyond 65 507 payload bytes saturate (such datagrams cannot be sent).
/// Deterministic: the DPDK dataplane writes exactly these bytes, and the engine computes
/// (and checks) the ICRC over them.
pub fn ipv4_udp_headers(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    src_port: u16,
    dst_port: u16,
    udp_payload_len: usize,
) -> [u8; IPV4_HEADER_LEN + UDP_HEADER_LEN] {
    let mut h = [0u8; IPV4_HEADER_LEN + UDP_HEADER_LEN];
    let udp_len = (udp_payload_len + UDP_HEADER_LEN).min(65_535 - IPV4_HEADER_LEN) as u16;
    let total = udp_len + IPV4_HEADER_LEN as u16;
    h[0] = 0x45;
    h[1] = CANONICAL_TOS;
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h[4..6].copy_from_slice(&CANONICAL_IDENT.to_be_bytes());
    h[6..8].copy_from_slice(&CANONICAL_FLAGS_FRAG.to_be_bytes());
    h[8] = CANONICAL_TTL;
    h[9] = 17;
    h[12..16].copy_from_slice(&src.octets());
    h[16..20].copy_from_slice(&dst.octets());
    let ck = ipv4_checksum(&h[..IPV4_HEADER_LEN]);
    h[10..12].copy_from_slice(&ck.to_be_bytes());
    let u = &mut h[IPV4_HEADER_LEN..];
    u[0..2].copy_from_slice(&src_port.to_be_bytes());
    u[2..4].copy_from_slice(&dst_port.to_be_bytes());
    u[4..6].copy_from_slice(&udp_len.to_be_bytes());
    h
}

/// RFC 791 header checksum of `hdr` (its checksum field taken as it is: pass it zeroed to
/// compute, or filled to verify — a valid header sums to 0).
pub fn ipv4_checksum(hdr: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in hdr.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        s += w as u32;
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
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
mod tests {
    use super::*;

    #[test]
    fn psn_arith() {
        assert_eq!(psn::add(0xff_ffff, 1), 0);
        assert_eq!(psn::diff(0, 0xff_ffff), 1);
        assert_eq!(psn::diff(0xff_ffff, 0), -1);
        assert!(psn::lt(0xff_fff0, 3));
        assert!(psn::le(5, 5));
    }

    #[test]
    fn syndromes_round_trip() {
        for v in 0..=255u8 {
            assert_eq!(Syndrome::from_u8(v).to_u8(), v);
        }
        assert_eq!(Syndrome::from_u8(0x1f), Syndrome::ACK);
        assert_eq!(
            Syndrome::from_u8(0x60),
            Syndrome::Nak(NakCode::PsnSequenceError)
        );
        assert_eq!(Syndrome::from_u8(0x2c), Syndrome::RnrNak { timer: 12 });
    }

    #[test]
    fn uc_opcodes() {
        // IBTA table 35: UC is 0x20..=0x2b (SEND and RDMA WRITE); the rest of prefix 001 is
        // reserved, and no other prefix but RC's parses.
        for v in 0x20..=0xffu8 {
            let known = Opcode::decode(v);
            assert_eq!(
                known.is_some(),
                (0x20..=0x2b).contains(&v) || v == 0x64 || v == 0x65 || v == 0x81,
                "{v:#x}"
            );
            if let Some((op, true)) = known {
                assert_eq!(op.encode(true), v);
                let mut bth = Bth::new(op, 7, 9);
                bth.uc = true;
                let mut b = [0u8; BTH_LEN];
                bth.emit(&mut b).unwrap();
                assert_eq!(b[0], v);
                assert_eq!(Bth::parse(&b).unwrap(), bth);
            }
        }
        // A UC READ or ACK does not exist: refused on emit.
        let mut bth = Bth::new(Opcode::ReadRequest, 7, 9);
        bth.uc = true;
        assert!(bth.emit(&mut [0u8; BTH_LEN]).is_err());
        assert_eq!(Opcode::decode(0x04), Some((Opcode::SendOnly, false)));
    }

    #[test]
    fn ud_send_only_imm_bytes() {
        // BTH (0x65, solicited, P_Key ffff, dest QP 0x000123, PSN 0x000007), DETH (Q_Key
        // 0x11111111, source QP 0x000456), ImmDt, 3 payload bytes and one pad byte.
        let mut bth = Bth::new(Opcode::UdSendOnlyImm, 0x123, 7);
        bth.solicited = true;
        bth.pad = pad_for(3);
        let p = Packet {
            bth,
            ext: ExtHeaders {
                deth: Some(Deth {
                    qkey: 0x1111_1111,
                    src_qpn: 0x456,
                    resv: 0,
                }),
                imm: Some(0xdead_beef),
                ..Default::default()
            },
            payload: b"abc",
        };
        let mut buf = [0u8; 64];
        let n = p.emit_without_icrc(&mut buf).unwrap();
        assert_eq!(
            &buf[..n],
            &[
                0x65, 0x90, 0xff, 0xff, 0, 0, 0x01, 0x23, 0, 0, 0, 7, // BTH
                0x11, 0x11, 0x11, 0x11, 0, 0, 0x04, 0x56, // DETH
                0xde, 0xad, 0xbe, 0xef, b'a', b'b', b'c', 0, // ImmDt, payload, pad
            ]
        );
        assert_eq!(Opcode::decode(0x64), Some((Opcode::UdSendOnly, false)));
        assert_eq!(Opcode::decode(0x66), None);
        // A UD opcode has no UC form.
        let mut b = Bth::new(Opcode::UdSendOnly, 1, 1);
        b.uc = true;
        assert!(b.emit(&mut [0u8; BTH_LEN]).is_err());
        // Without its DETH the headers do not match the opcode.
        let bad = Packet {
            ext: ExtHeaders::default(),
            ..p
        };
        assert!(bad.emit_without_icrc(&mut buf).is_err());
    }

    #[test]
    fn emit_parse_every_opcode() {
        for v in 0..=255u8 {
            let Some(op) = Opcode::from_u8(v) else {
                continue;
            };
            let payload: &[u8] = if op.has_payload() { b"hello" } else { b"" };
            let mut bth = Bth::new(op, 0x12_3456, 0xab_cdef);
            bth.pad = pad_for(payload.len());
            bth.ack_req = true;
            let ext = ExtHeaders {
                deth: op.has_deth().then_some(Deth {
                    qkey: 0x1111_1111,
                    src_qpn: 0x00ab_cdef,
                    resv: 0,
                }),
                reth: op.has_reth().then_some(Reth {
                    va: 0x1122_3344_5566_7788,
                    rkey: 0xdead_beef,
                    dma_len: 5,
                }),
                aeth: op.has_aeth().then_some(Aeth {
                    syndrome: Syndrome::ACK,
                    msn: 7,
                }),
                atomic: op.has_atomic_eth().then_some(AtomicEth {
                    va: 8,
                    rkey: 9,
                    swap_add: 10,
                    compare: 11,
                }),
                atomic_ack: op.has_atomic_ack_eth().then_some(42),
                imm: op.has_imm().then_some(0x0102_0304),
                ieth: op.has_ieth().then_some(0x55),
                cnp: (op == Opcode::Cnp).then_some([0; CNP_RESERVED_LEN]),
            };
            let p = Packet { bth, ext, payload };
            let flow = Flow {
                src: Ipv4Addr::new(10, 0, 0, 1),
                dst: Ipv4Addr::new(10, 0, 0, 2),
                src_port: 0xc001,
                dst_port: UDP_PORT,
            };
            let mut buf = [0u8; 128];
            let n = p.emit_canonical(&mut buf, &flow).unwrap();
            assert_eq!(n, p.buffer_len());
            assert_eq!(n % 4, 0, "{op}");
            let q = Packet::parse(&buf[..n]).unwrap();
            assert_eq!(p, q);
            let v = PacketView::new_checked(&buf[..n]).unwrap();
            assert!(v.icrc_ok_canonical(&flow));
            assert_eq!(v.psn(), 0xab_cdef);
            assert_eq!(v.dest_qpn(), 0x12_3456);
        }
    }

    #[test]
    fn checksum_of_canonical_header_verifies() {
        let h = ipv4_udp_headers(
            Ipv4Addr::new(10, 77, 0, 3),
            Ipv4Addr::new(10, 77, 0, 2),
            49441,
            UDP_PORT,
            272,
        );
        assert_eq!(ipv4_checksum(&h[..20]), 0);
        assert_eq!(u16::from_be_bytes([h[2], h[3]]), 300);
        assert_eq!(u16::from_be_bytes([h[24], h[25]]), 280);
    }

    #[test]
    fn never_panics_on_short_or_odd_input() {
        for len in 0..40 {
            for fill in [0u8, 0x11, 0xff, 0x35] {
                let b = vec![fill; len];
                let _ = Packet::parse(&b);
                let _ = icrc(&b, &b, &b);
            }
        }
    }
}
