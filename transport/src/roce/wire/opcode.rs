//! The BTH opcode byte: the RC, UC, UD and XRC opcodes, the headers each one carries and
//! where a packet sits in its message (IBTA vol. 1 §9.2).

use super::*;
use core::fmt;

/// Transport prefix of the unreliable connected (UC) opcodes (IBTA vol. 1 §9.2: bits 7..5 of
/// the opcode byte, 001).
pub const UC_PREFIX: u8 = 0x20;
/// Transport prefix of the unreliable datagram (UD) opcodes (bits 7..5 011): of them only
/// SEND_ONLY (0x64) and SEND_ONLY with immediate (0x65) exist.
pub const UD_PREFIX: u8 = 0x60;
/// Transport prefix of the extended reliable connected (XRC) opcodes (bits 7..5 101): the RC
/// opcodes (same low 5 bits) with the XRCETH after the BTH of every request (IBTA vol. 1
/// §9.2, §9.3.9).
pub const XRC_PREFIX: u8 = 0xa0;

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

    /// Any opcode byte this codec knows: (operation, UC, XRC). [`Opcode::decode`] without
    /// XRC; an XRC opcode is an RC one (0x00..=0x14, 0x16, 0x17) with prefix 101.
    pub fn decode_full(v: u8) -> Option<(Opcode, bool, bool)> {
        if v & 0xe0 == XRC_PREFIX {
            return Opcode::from_u8(v & 0x1f).map(|op| (op, false, true));
        }
        Opcode::decode(v).map(|(op, uc)| (op, uc, false))
    }

    /// Whether the XRC form of this opcode carries an XRCETH: every request does (the target
    /// SRQ's number), responses do not (IBTA vol. 1 §9.3.9).
    pub fn has_xrceth(self, xrc: bool) -> bool {
        xrc && !self.is_response() && !self.is_ud() && self != Opcode::Cnp
    }

    /// Length of the extended headers of this opcode on the XRC (`xrc`) or another transport.
    pub fn ext_len_in(self, xrc: bool) -> usize {
        self.ext_len() + if self.has_xrceth(xrc) { XRCETH_LEN } else { 0 }
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
