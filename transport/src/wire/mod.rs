//! Native ferroce wire format (spec/wire.md is normative; this module is its code).
//!
//! Two layers, in the smoltcp style:
//! - [`PacketView`]: a zero-copy, checked view over a received UDP payload, for the fields
//!   the fast path needs before deciding what to do (version, opcode, connection).
//! - [`Packet`]: the fully parsed representation with `parse` and `emit`; data payloads
//!   are borrowed slices of the input, never copied.
//!
//! Every native packet is: base header (8 B) | opcode-specific headers | payload | CRC-32 (4 B).
//! All multi-byte fields are big-endian (network order).

mod ack_multi;
mod sack;
pub use ack_multi::{
    AckBlock, AckBlocks, AckMultiRepr, AckMultiWriter, ACK_BLOCK_LEN, ACK_MULTI_HEADER_LEN,
    ACK_MULTI_PATH,
};
pub use sack::Sack256;

use core::fmt;

/// UDP destination port of native ferroce packets.
pub const NATIVE_UDP_PORT: u16 = 4792;
/// UDP destination port of RoCEv2 (IANA), used by the RoCEv2 mode.
pub const ROCEV2_UDP_PORT: u16 = 4791;
/// Protocol version carried in byte 0.
pub const VERSION: u8 = 1;

/// Base header: version, opcode, flags, path, destination connection id.
pub const BASE_LEN: usize = 8;
/// Sequence header of reliable packets: PSN, PSN floor, timestamp.
pub const SEQ_LEN: usize = 12;
/// Message header of reliable packets: stream, MSN, offset, message length.
pub const MSG_LEN: usize = 16;
/// Trailing CRC-32.
pub const TRAILER_LEN: usize = 4;
/// Smallest payload size a connection may agree on.
pub const MIN_MTU: u16 = 64;

/// Packet flags (byte 2 of the base header).
pub mod flags {
    /// The sender asks the receiver to acknowledge this packet without delay.
    pub const ACK_REQ: u8 = 0x01;
    /// Last packet of its message (by offset); informative, the length field is authoritative.
    pub const LAST: u8 = 0x02;
    /// This packet is a retransmission of a chunk sent before under another PSN.
    pub const RETX: u8 = 0x04;
    /// Solicited event (verbs `IBV_SEND_SOLICITED`).
    pub const SOLICITED: u8 = 0x08;
    /// The sending connection has more data queued than its window lets out (demand signal
    /// for the receiver's fair-share allocation).
    pub const BACKLOG: u8 = 0x10;
    /// OPEN and OPEN_ACK (the same bit as BACKLOG): the sender has no other connection open,
    /// so the peer may start at line rate without a cold start (spec/transport.md §5.8).
    pub const SOLE: u8 = 0x10;
    /// WRITE / WRITE_IMM: the message's target overlaps an earlier request of its stream the
    /// requester has not completed, so the responder places it only once every earlier
    /// message of the stream is complete (spec/transport.md §7.2).
    pub const ORDERED: u8 = 0x20;
    /// SEND, SEND_IMM, WRITE, WRITE_IMM: the packet belongs to an unreliable stream (verbs
    /// UC): it is never resent, and the receiver drops a message that lost a packet
    /// (spec/transport.md §3.5).
    pub const UNRELIABLE: u8 = 0x40;
    /// Mask of the flags defined by this version; others must be sent as 0 and ignored.
    pub const DEFINED: u8 = 0x7f;
}

/// Opcode numbers (byte 1 of the base header).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Opcode {
    Send = 0x01,
    SendImm = 0x02,
    Write = 0x03,
    WriteImm = 0x04,
    ReadReq = 0x05,
    ReadResp = 0x06,
    FetchAdd = 0x07,
    CmpSwap = 0x08,
    AtomicResp = 0x09,
    Ack = 0x10,
    Nack = 0x11,
    AckMulti = 0x12,
    Open = 0x20,
    OpenAck = 0x21,
    Close = 0x22,
    CloseAck = 0x23,
    Probe = 0x30,
    ProbeAck = 0x31,
}

impl Opcode {
    pub fn from_u8(v: u8) -> Option<Opcode> {
        use Opcode::*;
        Some(match v {
            0x01 => Send,
            0x02 => SendImm,
            0x03 => Write,
            0x04 => WriteImm,
            0x05 => ReadReq,
            0x06 => ReadResp,
            0x07 => FetchAdd,
            0x08 => CmpSwap,
            0x09 => AtomicResp,
            0x10 => Ack,
            0x11 => Nack,
            0x12 => AckMulti,
            0x20 => Open,
            0x21 => OpenAck,
            0x22 => Close,
            0x23 => CloseAck,
            0x30 => Probe,
            0x31 => ProbeAck,
            _ => return None,
        })
    }

    /// Reliable opcodes carry a sequence header, take a PSN on their path and are SACKed.
    pub fn is_sequenced(self) -> bool {
        (self as u8) < 0x10
    }

    /// Length of the opcode-specific headers after the base header (and before any payload).
    pub fn header_len(self) -> usize {
        use Opcode::*;
        let seq = SEQ_LEN + MSG_LEN;
        match self {
            Send => seq + 4,
            SendImm => seq + 8,
            Write => seq + 12,
            WriteImm => seq + 20,
            ReadReq => seq + 12,
            ReadResp => seq,
            FetchAdd => seq + 20,
            CmpSwap => seq + 28,
            AtomicResp => seq + 8,
            Ack => ACK_BODY_LEN,
            Nack => NACK_BODY_LEN,
            AckMulti => ACK_MULTI_HEADER_LEN,
            Open | OpenAck => OPEN_BODY_LEN,
            Close | CloseAck => CLOSE_BODY_LEN,
            Probe | ProbeAck => PROBE_BODY_LEN,
        }
    }

    /// Whether a payload may follow the headers.
    pub fn has_payload(self) -> bool {
        matches!(
            self,
            Opcode::Send | Opcode::SendImm | Opcode::Write | Opcode::WriteImm | Opcode::ReadResp
        )
    }
}

pub const ACK_BODY_LEN: usize = 4 + 32 + 4 + 4 + 4 + 4;
pub const NACK_BODY_LEN: usize = 16;
pub const OPEN_BODY_LEN: usize = 12;
pub const CLOSE_BODY_LEN: usize = 8;
pub const PROBE_BODY_LEN: usize = 8;

/// Why a packet could not be parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// Shorter than its headers and trailer.
    Truncated,
    /// Byte 0 is not a version this code speaks.
    BadVersion(u8),
    /// Unknown opcode.
    BadOpcode(u8),
    /// The CRC-32 trailer does not match.
    BadCrc,
    /// A payload on an opcode that has none, or a field out of its valid range.
    Malformed(&'static str),
    /// The output buffer is too small for `emit`.
    BufferTooSmall,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Truncated => write!(f, "packet truncated"),
            WireError::BadVersion(v) => write!(f, "unsupported version {v}"),
            WireError::BadOpcode(o) => write!(f, "unknown opcode {o:#04x}"),
            WireError::BadCrc => write!(f, "CRC-32 mismatch"),
            WireError::Malformed(why) => write!(f, "malformed packet: {why}"),
            WireError::BufferTooSmall => write!(f, "output buffer too small"),
        }
    }
}

impl std::error::Error for WireError {}

/// CRC-32 (IEEE 802.3 / zlib) of `data`.
pub fn crc32(data: &[u8]) -> u32 {
    let mut h = crc32_hasher();
    h.update(data);
    h.finalize()
}

/// A fresh CRC-32 hasher. Every CRC of the transport (the native trailer, the RoCEv2 ICRC)
/// starts here: `crc32fast::Hasher::new` detects the CPU's features on every call (about 35
/// instructions, twice per data packet), so one detected hasher is kept and cloned.
pub(crate) fn crc32_hasher() -> crc32fast::Hasher {
    static TEMPLATE: std::sync::OnceLock<crc32fast::Hasher> = std::sync::OnceLock::new();
    TEMPLATE.get_or_init(crc32fast::Hasher::new).clone()
}

/// Zero-copy checked view over a native packet (the UDP payload).
#[derive(Clone, Copy, Debug)]
pub struct PacketView<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> PacketView<T> {
    /// Check the length against the opcode's headers and the version; does not check the CRC.
    pub fn new_checked(buf: T) -> Result<Self, WireError> {
        let b = buf.as_ref();
        if b.len() < BASE_LEN + TRAILER_LEN {
            return Err(WireError::Truncated);
        }
        if b[0] != VERSION {
            return Err(WireError::BadVersion(b[0]));
        }
        let op = Opcode::from_u8(b[1]).ok_or(WireError::BadOpcode(b[1]))?;
        let min = BASE_LEN + op.header_len() + TRAILER_LEN;
        if b.len() < min {
            return Err(WireError::Truncated);
        }
        // ACK_MULTI's blocks follow its fixed part; `Packet::parse` checks their lengths.
        if !op.has_payload() && op != Opcode::AckMulti && b.len() != min {
            return Err(WireError::Malformed("trailing bytes after headers"));
        }
        Ok(PacketView { buf })
    }

    pub fn opcode(&self) -> Opcode {
        // new_checked validated it.
        Opcode::from_u8(self.buf.as_ref()[1]).unwrap_or(Opcode::Probe)
    }
    pub fn flags(&self) -> u8 {
        self.buf.as_ref()[2]
    }
    pub fn path(&self) -> u8 {
        self.buf.as_ref()[3]
    }
    pub fn dst_conn(&self) -> u32 {
        be32(&self.buf.as_ref()[4..8])
    }
    /// The CRC-32 trailer matches the rest of the packet.
    pub fn crc_ok(&self) -> bool {
        let b = self.buf.as_ref();
        let n = b.len() - TRAILER_LEN;
        crc32(&b[..n]) == be32(&b[n..])
    }
    /// The payload bytes (empty for opcodes without one).
    pub fn payload(&self) -> &[u8] {
        let b = self.buf.as_ref();
        if !self.opcode().has_payload() {
            return &[];
        }
        &b[BASE_LEN + self.opcode().header_len()..b.len() - TRAILER_LEN]
    }
    pub fn into_inner(self) -> T {
        self.buf
    }
}

/// Sequence header of reliable packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SeqHeader {
    /// Packet sequence number on this path (32-bit, wraps).
    pub psn: u32,
    /// Every PSN of this path below `floor` is acknowledged or abandoned by the sender: the
    /// receiver may move its cumulative PSN up to it.
    pub floor: u32,
    /// Sender timestamp (ns, wrapping), echoed in the ACK for RTT.
    pub tsval: u32,
}

/// Message header: where in which message of which stream these bytes belong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MsgHeader {
    /// Stream id at the receiver of this packet.
    pub stream: u32,
    /// Message sequence number within the stream (requests; responses echo the request's).
    pub msn: u32,
    /// Byte offset of this packet's payload within the message.
    pub offset: u32,
    /// Total length of the message in bytes.
    pub length: u32,
}

/// The opcode-specific part of a reliable packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataOp {
    Send {
        rsn: u32,
    },
    SendImm {
        rsn: u32,
        imm: u32,
    },
    /// `raddr` is the remote address of this packet's first payload byte.
    Write {
        rkey: u32,
        raddr: u64,
    },
    WriteImm {
        rkey: u32,
        raddr: u64,
        rsn: u32,
        imm: u32,
    },
    /// `raddr` is the start of the region to read; the length is the message length.
    ReadReq {
        rkey: u32,
        raddr: u64,
    },
    ReadResp,
    FetchAdd {
        rkey: u32,
        raddr: u64,
        add: u64,
    },
    CmpSwap {
        rkey: u32,
        raddr: u64,
        compare: u64,
        swap: u64,
    },
    AtomicResp {
        orig: u64,
    },
}

impl DataOp {
    pub fn opcode(&self) -> Opcode {
        match self {
            DataOp::Send { .. } => Opcode::Send,
            DataOp::SendImm { .. } => Opcode::SendImm,
            DataOp::Write { .. } => Opcode::Write,
            DataOp::WriteImm { .. } => Opcode::WriteImm,
            DataOp::ReadReq { .. } => Opcode::ReadReq,
            DataOp::ReadResp => Opcode::ReadResp,
            DataOp::FetchAdd { .. } => Opcode::FetchAdd,
            DataOp::CmpSwap { .. } => Opcode::CmpSwap,
            DataOp::AtomicResp { .. } => Opcode::AtomicResp,
        }
    }
}

/// A reliable (sequenced) packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataRepr<'a> {
    pub seq: SeqHeader,
    pub msg: MsgHeader,
    pub op: DataOp,
    pub payload: &'a [u8],
}

/// Per-path acknowledgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckRepr {
    /// Next PSN the receiver expects on this path: all PSNs before it were received or abandoned.
    pub cum_psn: u32,
    /// Bit i set: PSN `cum_psn + 1 + i` was received.
    pub sack: Sack256,
    /// Count of CE-marked packets received on this path since the connection opened (wraps).
    pub ecn_ce: u32,
    /// Receiver's fair-share rate for this sender in Mbit/s; 0 = no hint.
    pub rate_hint_mbps: u32,
    /// `tsval` of the packet that triggered this ACK.
    pub ts_echo: u32,
    /// Nanoseconds the receiver held that packet before acknowledging (saturating).
    pub ack_delay_ns: u32,
}

/// Reason codes of a NACK.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum NackReason {
    /// rkey unknown, access right missing or address outside the region.
    RemoteAccess = 1,
    /// Unknown stream, malformed or unsupported request (e.g. misaligned atomic).
    InvalidRequest = 2,
    /// No receive posted for a SEND: retry after the advertised delay.
    ReceiverNotReady = 3,
    /// PSN outside the receiver's 256-packet window or message outside its stream window.
    Sequence = 4,
    /// A valid request the responder could not carry out in its own memory: the receive it
    /// consumes names memory its stream may not write (key, bounds, access or protection
    /// domain). The responder's stream is in Error from then on (IBTA's Remote Operational
    /// Error; verbs `IBV_WC_REM_OP_ERR` at the requester).
    RemoteOperation = 5,
}

impl NackReason {
    pub fn from_u8(v: u8) -> Option<NackReason> {
        Some(match v {
            1 => NackReason::RemoteAccess,
            2 => NackReason::InvalidRequest,
            3 => NackReason::ReceiverNotReady,
            4 => NackReason::Sequence,
            5 => NackReason::RemoteOperation,
            _ => return None,
        })
    }
}

/// Negative acknowledgement of one reliable packet: it was *not* accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NackRepr {
    pub psn: u32,
    pub stream: u32,
    pub msn: u32,
    pub reason: NackReason,
    /// For ReceiverNotReady: retry delay in units of 10 µs (0 = the sender's default).
    pub rnr_delay: u8,
}

/// Connection open (and its answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenRepr {
    /// The sender's own connection id: the peer puts it in `dst_conn` of everything it sends.
    pub src_conn: u32,
    /// Number of paths the sender will use (1..=255).
    pub paths: u8,
    /// The sending endpoint's connection count, rounded up to a level of [`crowd_level`]
    /// (0: unknown). A cold sender spreads its pilot by it (spec/transport.md §5.8, COLD-6).
    pub crowd: u8,
    /// Largest payload per packet the sender accepts.
    pub mtu: u16,
    /// The sender's line rate in Mbit/s (receiver-side allocation uses the smaller side).
    pub line_rate_mbps: u32,
}

/// The crowd value (OPEN / OPEN_ACK byte 13) for `count` connections: `count` itself up to 8,
/// above it rounded up to the next `m · 2^e` with `m` in 4..=7 (at most 25 % high), capped at
/// 255 ("255 or more"). The grid keeps the repeated OPEN_ACKs that update it to a few per
/// doubling of the count (spec/wire.md §2.12, transport.md §5.8).
pub fn crowd_level(count: usize) -> u8 {
    if count <= 8 {
        return count as u8;
    }
    if count > 224 {
        return 255;
    }
    // count in 9..=224: e with 4 · 2^e < count <= 8 · 2^e, then the smallest m · 2^e >= count.
    let e = usize::BITS - 1 - (count - 1).leading_zeros() - 2; // floor(log2(count - 1)) - 2
    let m = count.div_ceil(1 << e);
    (m << e) as u8
}

/// Connection close (and its answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CloseRepr {
    pub src_conn: u32,
    /// 0 = normal close; other values are implementation-defined errors.
    pub reason: u32,
}

/// Path liveness probe (and its answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeRepr {
    pub probe_seq: u32,
    /// tsval in a probe, echoed tsval in a probe ACK.
    pub ts: u32,
}

/// Opcode-specific content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body<'a> {
    Data(DataRepr<'a>),
    Ack(AckRepr),
    Nack(NackRepr),
    AckMulti(AckMultiRepr<'a>),
    Open(OpenRepr),
    OpenAck(OpenRepr),
    Close(CloseRepr),
    CloseAck(CloseRepr),
    Probe(ProbeRepr),
    ProbeAck(ProbeRepr),
}

/// A fully parsed native packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Packet<'a> {
    pub flags: u8,
    pub path: u8,
    pub dst_conn: u32,
    pub body: Body<'a>,
}

impl<'a> Packet<'a> {
    pub fn opcode(&self) -> Opcode {
        match &self.body {
            Body::Data(d) => d.op.opcode(),
            Body::Ack(_) => Opcode::Ack,
            Body::Nack(_) => Opcode::Nack,
            Body::AckMulti(_) => Opcode::AckMulti,
            Body::Open(_) => Opcode::Open,
            Body::OpenAck(_) => Opcode::OpenAck,
            Body::Close(_) => Opcode::Close,
            Body::CloseAck(_) => Opcode::CloseAck,
            Body::Probe(_) => Opcode::Probe,
            Body::ProbeAck(_) => Opcode::ProbeAck,
        }
    }

    fn payload(&self) -> &'a [u8] {
        match &self.body {
            Body::Data(d) => d.payload,
            _ => &[],
        }
    }

    /// Bytes `emit` writes: headers, payload and trailer.
    pub fn buffer_len(&self) -> usize {
        let blocks = match &self.body {
            Body::AckMulti(m) => m.blocks_len(),
            _ => 0,
        };
        BASE_LEN + self.opcode().header_len() + self.payload().len() + blocks + TRAILER_LEN
    }

    /// Parse and verify a received packet (the UDP payload). Never panics.
    pub fn parse(buf: &'a [u8]) -> Result<Packet<'a>, WireError> {
        let view = PacketView::new_checked(buf)?;
        if !view.crc_ok() {
            return Err(WireError::BadCrc);
        }
        let op = view.opcode();
        let mut r = Reader(&buf[BASE_LEN..buf.len() - TRAILER_LEN]);
        let body = if op.is_sequenced() {
            let seq = SeqHeader {
                psn: r.u32(),
                floor: r.u32(),
                tsval: r.u32(),
            };
            let msg = MsgHeader {
                stream: r.u32(),
                msn: r.u32(),
                offset: r.u32(),
                length: r.u32(),
            };
            let dop = match op {
                Opcode::Send => DataOp::Send { rsn: r.u32() },
                Opcode::SendImm => DataOp::SendImm {
                    rsn: r.u32(),
                    imm: r.u32(),
                },
                Opcode::Write => DataOp::Write {
                    rkey: r.u32(),
                    raddr: r.u64(),
                },
                Opcode::WriteImm => DataOp::WriteImm {
                    rkey: r.u32(),
                    raddr: r.u64(),
                    rsn: r.u32(),
                    imm: r.u32(),
                },
                Opcode::ReadReq => DataOp::ReadReq {
                    rkey: r.u32(),
                    raddr: r.u64(),
                },
                Opcode::ReadResp => DataOp::ReadResp,
                Opcode::FetchAdd => DataOp::FetchAdd {
                    rkey: r.u32(),
                    raddr: r.u64(),
                    add: r.u64(),
                },
                Opcode::CmpSwap => DataOp::CmpSwap {
                    rkey: r.u32(),
                    raddr: r.u64(),
                    compare: r.u64(),
                    swap: r.u64(),
                },
                Opcode::AtomicResp => DataOp::AtomicResp { orig: r.u64() },
                _ => return Err(WireError::BadOpcode(op as u8)),
            };
            let payload = r.rest();
            validate_data(&msg, &dop, payload.len())?;
            Body::Data(DataRepr {
                seq,
                msg,
                op: dop,
                payload,
            })
        } else {
            match op {
                Opcode::Ack => {
                    let cum_psn = r.u32();
                    let sack = Sack256::from_bytes(r.bytes::<32>());
                    Body::Ack(AckRepr {
                        cum_psn,
                        sack,
                        ecn_ce: r.u32(),
                        rate_hint_mbps: r.u32(),
                        ts_echo: r.u32(),
                        ack_delay_ns: r.u32(),
                    })
                }
                Opcode::Nack => {
                    let psn = r.u32();
                    let stream = r.u32();
                    let msn = r.u32();
                    let rc = r.u8();
                    let reason = NackReason::from_u8(rc)
                        .ok_or(WireError::Malformed("unknown NACK reason"))?;
                    let rnr_delay = r.u8();
                    let _reserved = r.u16();
                    Body::Nack(NackRepr {
                        psn,
                        stream,
                        msn,
                        reason,
                        rnr_delay,
                    })
                }
                Opcode::AckMulti => {
                    let hint = r.u32();
                    let count = r.u8();
                    let _reserved = (r.u8(), r.u16());
                    Body::AckMulti(AckMultiRepr::parse(hint, count, r.rest())?)
                }
                Opcode::Open | Opcode::OpenAck => {
                    let o = OpenRepr {
                        src_conn: r.u32(),
                        paths: r.u8(),
                        crowd: r.u8(),
                        mtu: r.u16(),
                        line_rate_mbps: r.u32(),
                    };
                    if o.paths == 0 {
                        return Err(WireError::Malformed("open with zero paths"));
                    }
                    if o.src_conn == 0 {
                        return Err(WireError::Malformed("connection id 0 is reserved"));
                    }
                    if o.mtu < MIN_MTU {
                        return Err(WireError::Malformed("mtu below 64"));
                    }
                    if op == Opcode::Open {
                        Body::Open(o)
                    } else {
                        Body::OpenAck(o)
                    }
                }
                Opcode::Close | Opcode::CloseAck => {
                    let c = CloseRepr {
                        src_conn: r.u32(),
                        reason: r.u32(),
                    };
                    if op == Opcode::Close {
                        Body::Close(c)
                    } else {
                        Body::CloseAck(c)
                    }
                }
                Opcode::Probe | Opcode::ProbeAck => {
                    let p = ProbeRepr {
                        probe_seq: r.u32(),
                        ts: r.u32(),
                    };
                    if op == Opcode::Probe {
                        Body::Probe(p)
                    } else {
                        Body::ProbeAck(p)
                    }
                }
                _ => return Err(WireError::BadOpcode(op as u8)),
            }
        };
        Ok(Packet {
            flags: view.flags(),
            path: view.path(),
            dst_conn: view.dst_conn(),
            body,
        })
    }

    /// Write headers, payload and CRC trailer into `buf`; returns the bytes written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        if let Body::AckMulti(m) = &self.body {
            let end = self.buffer_len() - TRAILER_LEN;
            if buf.len() < end + TRAILER_LEN {
                return Err(WireError::BufferTooSmall);
            }
            let hdr = self.emit_headers(buf)?;
            let n = m.write_blocks(&mut buf[hdr..]);
            debug_assert_eq!(hdr + n, end);
            return Ok(seal(buf, end));
        }
        let hdr = self.emit_headers(buf)?;
        let p = self.payload();
        let end = hdr + p.len();
        if buf.len() < end + TRAILER_LEN {
            return Err(WireError::BufferTooSmall);
        }
        buf[hdr..end].copy_from_slice(p);
        Ok(seal(buf, end))
    }

    /// Write only the headers (base and opcode-specific); returns their length. The caller
    /// then writes the payload in place (e.g. straight from registered memory) and calls
    /// [`seal`]. The payload of `self` is ignored here.
    pub fn emit_headers(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let op = self.opcode();
        let len = BASE_LEN + op.header_len();
        if buf.len() < len + TRAILER_LEN {
            return Err(WireError::BufferTooSmall);
        }
        let mut w = Writer { buf, pos: 0 };
        w.u8(VERSION);
        w.u8(op as u8);
        w.u8(self.flags);
        w.u8(self.path);
        w.u32(self.dst_conn);
        match &self.body {
            Body::Data(d) => {
                w.u32(d.seq.psn);
                w.u32(d.seq.floor);
                w.u32(d.seq.tsval);
                w.u32(d.msg.stream);
                w.u32(d.msg.msn);
                w.u32(d.msg.offset);
                w.u32(d.msg.length);
                match d.op {
                    DataOp::Send { rsn } => w.u32(rsn),
                    DataOp::SendImm { rsn, imm } => {
                        w.u32(rsn);
                        w.u32(imm);
                    }
                    DataOp::Write { rkey, raddr } | DataOp::ReadReq { rkey, raddr } => {
                        w.u32(rkey);
                        w.u64(raddr);
                    }
                    DataOp::WriteImm {
                        rkey,
                        raddr,
                        rsn,
                        imm,
                    } => {
                        w.u32(rkey);
                        w.u64(raddr);
                        w.u32(rsn);
                        w.u32(imm);
                    }
                    DataOp::ReadResp => {}
                    DataOp::FetchAdd { rkey, raddr, add } => {
                        w.u32(rkey);
                        w.u64(raddr);
                        w.u64(add);
                    }
                    DataOp::CmpSwap {
                        rkey,
                        raddr,
                        compare,
                        swap,
                    } => {
                        w.u32(rkey);
                        w.u64(raddr);
                        w.u64(compare);
                        w.u64(swap);
                    }
                    DataOp::AtomicResp { orig } => w.u64(orig),
                }
            }
            Body::Ack(a) => {
                w.u32(a.cum_psn);
                w.put(&a.sack.to_bytes());
                w.u32(a.ecn_ce);
                w.u32(a.rate_hint_mbps);
                w.u32(a.ts_echo);
                w.u32(a.ack_delay_ns);
            }
            Body::AckMulti(m) => {
                // The fixed part only; `emit` writes the blocks after it.
                w.u32(m.rate_hint_mbps);
                w.u8(m.count() as u8);
                w.u8(0);
                w.u16(0);
            }
            Body::Nack(n) => {
                w.u32(n.psn);
                w.u32(n.stream);
                w.u32(n.msn);
                w.u8(n.reason as u8);
                w.u8(n.rnr_delay);
                w.u16(0);
            }
            Body::Open(o) | Body::OpenAck(o) => {
                w.u32(o.src_conn);
                w.u8(o.paths);
                w.u8(o.crowd);
                w.u16(o.mtu);
                w.u32(o.line_rate_mbps);
            }
            Body::Close(c) | Body::CloseAck(c) => {
                w.u32(c.src_conn);
                w.u32(c.reason);
            }
            Body::Probe(p) | Body::ProbeAck(p) => {
                w.u32(p.probe_seq);
                w.u32(p.ts);
            }
        }
        debug_assert_eq!(w.pos, len);
        Ok(len)
    }
}

/// Append the CRC-32 of `buf[..len]` at `buf[len..len + 4]`; returns the total length.
/// The caller guarantees `buf.len() >= len + TRAILER_LEN` (as `emit_headers` checked).
pub fn seal(buf: &mut [u8], len: usize) -> usize {
    let c = crc32(&buf[..len]);
    buf[len..len + TRAILER_LEN].copy_from_slice(&c.to_be_bytes());
    len + TRAILER_LEN
}

fn validate_data(msg: &MsgHeader, op: &DataOp, payload_len: usize) -> Result<(), WireError> {
    let end = msg.offset as u64 + payload_len as u64;
    match op {
        DataOp::ReadReq { .. } => {
            if msg.offset != 0 {
                return Err(WireError::Malformed("read request with nonzero offset"));
            }
        }
        DataOp::FetchAdd { .. } | DataOp::CmpSwap { .. } | DataOp::AtomicResp { .. } => {
            if msg.offset != 0 || msg.length != 8 {
                return Err(WireError::Malformed("atomic length must be 8"));
            }
        }
        _ => {
            if end > msg.length as u64 {
                return Err(WireError::Malformed("payload beyond message length"));
            }
            if payload_len == 0 && msg.length != 0 {
                return Err(WireError::Malformed("empty packet of a non-empty message"));
            }
        }
    }
    Ok(())
}

#[inline]
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Reader over a slice whose length was already checked against the opcode's header length.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        // Lengths were validated in `PacketView::new_checked`; a short slice yields zeros
        // rather than a panic, which cannot happen for validated input.
        let n = N.min(self.0.len());
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        out
    }
    fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }
    fn u16(&mut self) -> u16 {
        u16::from_be_bytes(self.take())
    }
    fn u32(&mut self) -> u32 {
        u32::from_be_bytes(self.take())
    }
    fn u64(&mut self) -> u64 {
        u64::from_be_bytes(self.take())
    }
    fn bytes<const N: usize>(&mut self) -> [u8; N] {
        self.take()
    }
    fn rest(self) -> &'a [u8] {
        self.0
    }
}

struct Writer<'b> {
    buf: &'b mut [u8],
    pos: usize,
}

impl Writer<'_> {
    fn put(&mut self, b: &[u8]) {
        self.buf[self.pos..self.pos + b.len()].copy_from_slice(b);
        self.pos += b.len();
    }
    fn u8(&mut self, v: u8) {
        self.put(&[v]);
    }
    fn u16(&mut self, v: u16) {
        self.put(&v.to_be_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.put(&v.to_be_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.put(&v.to_be_bytes());
    }
}

/// Serial-number comparison of 32-bit PSNs (RFC 1982): `a` is before `b`.
#[inline]
pub fn psn_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// `b - a` as a signed distance in PSN space.
#[inline]
pub fn psn_diff(b: u32, a: u32) -> i32 {
    b.wrapping_sub(a) as i32
}

#[cfg(test)]
mod tests;
