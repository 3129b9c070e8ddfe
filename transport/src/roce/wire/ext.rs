//! The extended transport headers after the BTH (IBTA vol. 1 §9.3) and their order.

use super::*;

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

/// XRC extended transport header (IBTA vol. 1 §9.3.9): the XRC SRQ of the target's domain a
/// request is for, after the BTH (and DETH) of every XRC request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Xrceth {
    /// XRC SRQ number (24 bits).
    pub srqn: u32,
    /// The reserved first byte (sent as 0; kept for exact round trips).
    pub resv: u8,
}

impl Xrceth {
    pub fn new(srqn: u32) -> Xrceth {
        Xrceth {
            srqn: srqn & 0x00ff_ffff,
            resv: 0,
        }
    }
    /// The header's 4 bytes.
    pub fn to_bytes(&self) -> [u8; XRCETH_LEN] {
        let mut b = [0u8; XRCETH_LEN];
        b[0] = self.resv;
        put24(&mut b[1..], self.srqn);
        b
    }
    pub fn parse(b: &[u8]) -> Result<Xrceth, WireError> {
        if b.len() < XRCETH_LEN {
            return Err(WireError::Truncated);
        }
        Ok(Xrceth {
            resv: b[0],
            srqn: be24(&b[1..4]),
        })
    }
    pub fn emit(&self, b: &mut [u8]) -> Result<(), WireError> {
        if b.len() < XRCETH_LEN {
            return Err(WireError::BufferTooSmall);
        }
        b[0] = self.resv;
        put24(&mut b[1..4], self.srqn);
        Ok(())
    }
}

/// The extended headers of one packet. Exactly the ones its opcode calls for are `Some`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ExtHeaders {
    /// DETH (UD).
    pub deth: Option<Deth>,
    /// XRCETH (XRC requests).
    pub xrceth: Option<Xrceth>,
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
    /// Parse the extended headers of an RC, UC or UD `opcode` from `b` (which starts right
    /// after the BTH), in the order IBTA vol. 1 §9.2 gives: DETH, XRCETH, RETH/AtomicETH,
    /// AETH, AtomicAckETH, ImmDt/IETH.
    pub fn parse(opcode: Opcode, b: &[u8]) -> Result<ExtHeaders, WireError> {
        ExtHeaders::parse_in(opcode, false, b)
    }

    /// [`ExtHeaders::parse`] of `opcode` on the XRC transport (`xrc`) or another.
    pub fn parse_in(opcode: Opcode, xrc: bool, b: &[u8]) -> Result<ExtHeaders, WireError> {
        if b.len() < opcode.ext_len_in(xrc) {
            return Err(WireError::Truncated);
        }
        let mut e = ExtHeaders::default();
        let mut o = 0;
        if opcode.has_deth() {
            e.deth = Some(Deth::parse(&b[o..])?);
            o += DETH_LEN;
        }
        if opcode.has_xrceth(xrc) {
            e.xrceth = Some(Xrceth::parse(&b[o..])?);
            o += XRCETH_LEN;
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

    /// Whether exactly the headers an RC, UC or UD `opcode` calls for are present.
    pub fn matches(&self, opcode: Opcode) -> bool {
        self.matches_in(opcode, false)
    }

    /// [`ExtHeaders::matches`] on the XRC transport (`xrc`) or another.
    pub fn matches_in(&self, opcode: Opcode, xrc: bool) -> bool {
        self.deth.is_some() == opcode.has_deth()
            && self.xrceth.is_some() == opcode.has_xrceth(xrc)
            && self.reth.is_some() == opcode.has_reth()
            && self.aeth.is_some() == opcode.has_aeth()
            && self.atomic.is_some() == opcode.has_atomic_eth()
            && self.atomic_ack.is_some() == opcode.has_atomic_ack_eth()
            && self.imm.is_some() == opcode.has_imm()
            && self.ieth.is_some() == opcode.has_ieth()
            && self.cnp.is_some() == (opcode == Opcode::Cnp)
    }

    /// Write the headers into `b`; returns their length. Fails when they do not match the
    /// RC, UC or UD `opcode`.
    pub fn emit(&self, opcode: Opcode, b: &mut [u8]) -> Result<usize, WireError> {
        self.emit_in(opcode, false, b)
    }

    /// [`ExtHeaders::emit`] on the XRC transport (`xrc`) or another.
    pub fn emit_in(&self, opcode: Opcode, xrc: bool, b: &mut [u8]) -> Result<usize, WireError> {
        if !self.matches_in(opcode, xrc) {
            return Err(WireError::Malformed(
                "extended headers do not match the opcode",
            ));
        }
        let n = opcode.ext_len_in(xrc);
        if b.len() < n {
            return Err(WireError::BufferTooSmall);
        }
        let mut o = 0;
        if let Some(d) = self.deth {
            d.emit(&mut b[o..])?;
            o += DETH_LEN;
        }
        if let Some(x) = self.xrceth {
            x.emit(&mut b[o..])?;
            o += XRCETH_LEN;
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
