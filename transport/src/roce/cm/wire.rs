//! IBTA CM MADs (IBTA vol. 1 §13.4 common MAD header, ch. 12 tables 106–113), what Linux's
//! rdma_cm sends on QP1 over RoCEv2: the 256-byte MAD with the CM class, the attributes REQ,
//! MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ and SIDR_REP (tables 119–120), the IP-based
//! service ID and the `cma_hdr` rdma_cm puts first in a REQ's (and SIDR_REQ's) private
//! data. spec/rocev2.md §10.
//!
//! Field positions follow the tables' Byte[Bit] notation: bit 0 is the most significant bit
//! of its byte, offsets count from the end of the 24-byte common header.

use std::net::Ipv4Addr;

/// A MAD is always this long (the UD payload; the area after a message's fields is its
/// private data, fixed-size, zero-padded).
pub const MAD_LEN: usize = 256;
/// The common MAD header.
pub const MAD_HDR_LEN: usize = 24;
pub const BASE_VERSION: u8 = 1;
pub const MGMT_CLASS_CM: u8 = 0x07;
pub const CM_CLASS_VERSION: u8 = 2;
/// The CM sends every message with method Send.
pub const METHOD_SEND: u8 = 0x03;
/// The GSI: CM MADs go to QP1 with this Q_Key.
pub const GSI_QPN: u32 = 1;
pub const GSI_QKEY: u32 = 0x8001_0000;

/// rdma_cm port spaces (the service ID's bits 16..31).
pub const PS_TCP: u16 = 0x0106;
pub const PS_UDP: u16 = 0x0111;
/// `cma_hdr` version and its length at the start of a REQ's private data.
pub const CMA_VERSION: u8 = 0x00;
pub const CMA_HDR_LEN: usize = 36;

/// CM attribute IDs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum CmAttr {
    Req = 0x0010,
    Mra = 0x0011,
    Rej = 0x0012,
    Rep = 0x0013,
    Rtu = 0x0014,
    Dreq = 0x0015,
    Drep = 0x0016,
    SidrReq = 0x0017,
    SidrRep = 0x0018,
}

impl CmAttr {
    pub fn from_u16(v: u16) -> Option<CmAttr> {
        use CmAttr::*;
        Some(match v {
            0x0010 => Req,
            0x0011 => Mra,
            0x0012 => Rej,
            0x0013 => Rep,
            0x0014 => Rtu,
            0x0015 => Dreq,
            0x0016 => Drep,
            0x0017 => SidrReq,
            0x0018 => SidrRep,
            _ => return None,
        })
    }

    /// (offset after the common header, length) of the message's private data.
    pub fn private_data_area(self) -> (usize, usize) {
        match self {
            CmAttr::Req => (140, 92),
            CmAttr::Mra => (10, 222),
            CmAttr::Rej => (84, 148),
            CmAttr::Rep => (36, 196),
            CmAttr::Rtu => (8, 224),
            CmAttr::Dreq => (12, 220),
            CmAttr::Drep => (8, 224),
            CmAttr::SidrReq => (16, 216),
            CmAttr::SidrRep => (96, 136),
        }
    }

    pub fn max_private_data(self) -> usize {
        self.private_data_area().1
    }
}

/// The "message MRAed / rejected" codes of MRA and REJ.
pub mod msg_code {
    pub const REQ: u8 = 0;
    pub const REP: u8 = 1;
    pub const OTHER: u8 = 2;
}

/// REJ reasons (IBTA table 109) ferroce sends or interprets.
pub mod rej_reason {
    pub const TIMEOUT: u16 = 1;
    pub const INVALID_COMM_ID: u16 = 5;
    pub const INVALID_SERVICE_ID: u16 = 8;
    pub const STALE_CONN: u16 = 10;
    pub const INVALID_MTU: u16 = 26;
    pub const CONSUMER: u16 = 28;
}

/// Why a MAD was not taken (each has a counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MadError {
    /// Shorter than 256 bytes.
    Truncated,
    BadBaseVersion(u8),
    /// Another management class (not for the CM).
    NotCm(u8),
    BadClassVersion(u8),
    /// A method other than Send.
    BadMethod(u8),
    /// LAP, APR, ClassPortInfo, ...: not served.
    UnsupportedAttribute(u16),
    Malformed(&'static str),
}

/// The common MAD header (the fields a CM message's sender chooses; the rest are fixed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MadHeader {
    pub status: u16,
    pub tid: u64,
    pub attr_mod: u32,
}

/// One path of a REQ (primary or alternate).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmPath {
    pub local_lid: u16,
    pub remote_lid: u16,
    pub local_gid: [u8; 16],
    pub remote_gid: [u8; 16],
    /// 20 bits.
    pub flow_label: u32,
    /// 6 bits (IBTA rate enumeration).
    pub packet_rate: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
    /// 4 bits.
    pub sl: u8,
    pub subnet_local: bool,
    /// 5 bits: 4.096 µs × 2^n.
    pub local_ack_timeout: u8,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Req {
    pub local_comm_id: u32,
    pub service_id: u64,
    pub local_ca_guid: u64,
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    pub responder_resources: u8,
    pub local_eecn: u32,
    pub initiator_depth: u8,
    pub remote_eecn: u32,
    /// 5 bits: how long the passive side may take to answer, 4.096 µs × 2^n.
    pub remote_cm_response_timeout: u8,
    /// 2 bits: 0 RC, 1 UC, 3 XRC (RD 2).
    pub transport_service_type: u8,
    pub end_to_end_flow_control: bool,
    /// 24 bits.
    pub starting_psn: u32,
    /// 5 bits: how long the active side may take to answer a REP.
    pub local_cm_response_timeout: u8,
    /// 3 bits.
    pub retry_count: u8,
    pub pkey: u16,
    /// 4 bits: the IBTA MTU enumeration (1 = 256 … 5 = 4096).
    pub path_mtu: u8,
    pub rdc_exists: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    /// 4 bits: how often the initiator sends the REQ (and the passive side its REP).
    pub max_cm_retries: u8,
    pub srq: bool,
    /// 3 bits.
    pub extended_transport_type: u8,
    pub primary: CmPath,
    pub alternate: CmPath,
    pub sap_supported: bool,
    pub private_data: Vec<u8>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Mra {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 2 bits ([`msg_code`]).
    pub message_mraed: u8,
    /// 5 bits: the extra time the sender needs, 4.096 µs × 2^n.
    pub service_timeout: u8,
    pub private_data: Vec<u8>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rej {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 2 bits ([`msg_code`]).
    pub message_rejected: u8,
    pub reason: u16,
    /// Additional rejection information (at most 72 bytes; its length is on the wire).
    pub ari: Vec<u8>,
    pub private_data: Vec<u8>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rep {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    pub local_eecn: u32,
    /// 24 bits.
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// 5 bits.
    pub target_ack_delay: u8,
    /// 2 bits.
    pub failover_accepted: u8,
    pub end_to_end_flow_control: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub local_ca_guid: u64,
    pub private_data: Vec<u8>,
}

/// RTU and DREP: the two comm IDs and private data; DREQ adds the receiver's QPN.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Short {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: Vec<u8>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dreq {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 24 bits: the QPN of the receiver of the DREQ.
    pub remote_qpn_eecn: u32,
    pub private_data: Vec<u8>,
}

/// SIDR_REQ (table 119): which QP serves a service ID (a UD port space's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SidrReq {
    pub request_id: u32,
    pub pkey: u16,
    pub service_id: u64,
    pub private_data: Vec<u8>,
}

/// SIDR_REP (table 120).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SidrRep {
    /// The SIDR_REQ's request ID.
    pub request_id: u32,
    /// 0 QP valid, 1 service ID not supported, 2 rejected, 3 no QP, 4 redirect, 5 version.
    pub status: u8,
    /// 24 bits.
    pub qpn: u32,
    pub service_id: u64,
    pub qkey: u32,
    /// Additional information (at most 72 bytes; its length is on the wire).
    pub info: Vec<u8>,
    pub private_data: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmBody {
    Req(Req),
    Mra(Mra),
    Rej(Rej),
    Rep(Rep),
    Rtu(Short),
    Dreq(Dreq),
    Drep(Short),
    SidrReq(SidrReq),
    SidrRep(SidrRep),
}

/// A parsed CM MAD. Private data is the whole fixed area on parse; on emit, shorter data is
/// zero-padded (longer is an error).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmMad {
    pub hdr: MadHeader,
    pub body: CmBody,
}

/// Reads and writes of the tables' fields, on the CM data (after the common header).
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn u8(&self, at: usize) -> u8 {
        self.0[MAD_HDR_LEN + at]
    }
    /// `width` bits starting `bit` bits below the byte's most significant bit.
    fn bits(&self, at: usize, bit: u32, width: u32) -> u8 {
        (self.u8(at) >> (8 - bit - width)) & ((1u16 << width) - 1) as u8
    }
    fn flag(&self, at: usize, bit: u32) -> bool {
        self.bits(at, bit, 1) != 0
    }
    fn be(&self, at: usize, n: usize) -> u64 {
        self.0[MAD_HDR_LEN + at..MAD_HDR_LEN + at + n]
            .iter()
            .fold(0, |v, &b| v << 8 | b as u64)
    }
    fn u16(&self, at: usize) -> u16 {
        self.be(at, 2) as u16
    }
    fn u24(&self, at: usize) -> u32 {
        self.be(at, 3) as u32
    }
    fn u32(&self, at: usize) -> u32 {
        self.be(at, 4) as u32
    }
    fn u64(&self, at: usize) -> u64 {
        self.be(at, 8)
    }
    fn bytes(&self, at: usize, n: usize) -> &[u8] {
        &self.0[MAD_HDR_LEN + at..MAD_HDR_LEN + at + n]
    }
    fn gid(&self, at: usize) -> [u8; 16] {
        let mut g = [0; 16];
        g.copy_from_slice(self.bytes(at, 16));
        g
    }
}

struct FieldsMut<'a>(&'a mut [u8]);

impl FieldsMut<'_> {
    fn bits(&mut self, at: usize, bit: u32, width: u32, v: u8) {
        let mask = ((1u16 << width) - 1) as u8;
        let shift = 8 - bit - width;
        let b = &mut self.0[MAD_HDR_LEN + at];
        *b = (*b & !(mask << shift)) | ((v & mask) << shift);
    }
    fn flag(&mut self, at: usize, bit: u32, v: bool) {
        self.bits(at, bit, 1, v as u8);
    }
    fn u8(&mut self, at: usize, v: u8) {
        self.0[MAD_HDR_LEN + at] = v;
    }
    fn be(&mut self, at: usize, n: usize, v: u64) {
        for i in 0..n {
            self.0[MAD_HDR_LEN + at + i] = (v >> (8 * (n - 1 - i))) as u8;
        }
    }
    fn u16(&mut self, at: usize, v: u16) {
        self.be(at, 2, v as u64);
    }
    fn u24(&mut self, at: usize, v: u32) {
        self.be(at, 3, (v & 0x00ff_ffff) as u64);
    }
    fn u32(&mut self, at: usize, v: u32) {
        self.be(at, 4, v as u64);
    }
    fn u64(&mut self, at: usize, v: u64) {
        self.be(at, 8, v);
    }
    fn bytes(&mut self, at: usize, v: &[u8]) {
        self.0[MAD_HDR_LEN + at..MAD_HDR_LEN + at + v.len()].copy_from_slice(v);
    }
}

fn parse_path(f: &Fields<'_>, at: usize) -> CmPath {
    CmPath {
        local_lid: f.u16(at),
        remote_lid: f.u16(at + 2),
        local_gid: f.gid(at + 4),
        remote_gid: f.gid(at + 20),
        flow_label: f.u32(at + 36) >> 12,
        packet_rate: f.bits(at + 39, 2, 6),
        traffic_class: f.u8(at + 40),
        hop_limit: f.u8(at + 41),
        sl: f.bits(at + 42, 0, 4),
        subnet_local: f.flag(at + 42, 4),
        local_ack_timeout: f.bits(at + 43, 0, 5),
    }
}

fn emit_path(f: &mut FieldsMut<'_>, at: usize, p: &CmPath) {
    f.u16(at, p.local_lid);
    f.u16(at + 2, p.remote_lid);
    f.bytes(at + 4, &p.local_gid);
    f.bytes(at + 20, &p.remote_gid);
    // Flow label in the top 20 bits of the word, packet rate in the low 6 of its last byte.
    f.u32(at + 36, (p.flow_label & 0xf_ffff) << 12);
    f.bits(at + 39, 2, 6, p.packet_rate);
    f.u8(at + 40, p.traffic_class);
    f.u8(at + 41, p.hop_limit);
    f.bits(at + 42, 0, 4, p.sl);
    f.flag(at + 42, 4, p.subnet_local);
    f.bits(at + 43, 0, 5, p.local_ack_timeout);
}

impl CmMad {
    pub fn attr(&self) -> CmAttr {
        match self.body {
            CmBody::Req(_) => CmAttr::Req,
            CmBody::Mra(_) => CmAttr::Mra,
            CmBody::Rej(_) => CmAttr::Rej,
            CmBody::Rep(_) => CmAttr::Rep,
            CmBody::Rtu(_) => CmAttr::Rtu,
            CmBody::Dreq(_) => CmAttr::Dreq,
            CmBody::Drep(_) => CmAttr::Drep,
            CmBody::SidrReq(_) => CmAttr::SidrReq,
            CmBody::SidrRep(_) => CmAttr::SidrRep,
        }
    }

    pub fn private_data(&self) -> &[u8] {
        match &self.body {
            CmBody::Req(m) => &m.private_data,
            CmBody::Mra(m) => &m.private_data,
            CmBody::Rej(m) => &m.private_data,
            CmBody::Rep(m) => &m.private_data,
            CmBody::Rtu(m) | CmBody::Drep(m) => &m.private_data,
            CmBody::Dreq(m) => &m.private_data,
            CmBody::SidrReq(m) => &m.private_data,
            CmBody::SidrRep(m) => &m.private_data,
        }
    }

    /// The sender's and the receiver's comm IDs (a REQ has no receiver's: 0; SIDR has the
    /// requester's request ID only).
    pub fn comm_ids(&self) -> (u32, u32) {
        match &self.body {
            CmBody::Req(m) => (m.local_comm_id, 0),
            CmBody::Mra(m) => (m.local_comm_id, m.remote_comm_id),
            CmBody::Rej(m) => (m.local_comm_id, m.remote_comm_id),
            CmBody::Rep(m) => (m.local_comm_id, m.remote_comm_id),
            CmBody::Rtu(m) | CmBody::Drep(m) => (m.local_comm_id, m.remote_comm_id),
            CmBody::Dreq(m) => (m.local_comm_id, m.remote_comm_id),
            CmBody::SidrReq(m) => (m.request_id, 0),
            CmBody::SidrRep(m) => (0, m.request_id),
        }
    }

    /// Parse a UD payload. Checks in order: length, base version, class, class version,
    /// method, attribute, fields.
    pub fn parse(b: &[u8]) -> Result<CmMad, MadError> {
        if b.len() < MAD_LEN {
            return Err(MadError::Truncated);
        }
        // A longer payload (a padded datagram) carries the MAD in its first 256 bytes.
        let b = &b[..MAD_LEN];
        if b[0] != BASE_VERSION {
            return Err(MadError::BadBaseVersion(b[0]));
        }
        if b[1] != MGMT_CLASS_CM {
            return Err(MadError::NotCm(b[1]));
        }
        if b[2] != CM_CLASS_VERSION {
            return Err(MadError::BadClassVersion(b[2]));
        }
        if b[3] != METHOD_SEND {
            return Err(MadError::BadMethod(b[3]));
        }
        let be = |at: usize, n: usize| b[at..at + n].iter().fold(0u64, |v, &x| v << 8 | x as u64);
        let hdr = MadHeader {
            status: be(4, 2) as u16,
            tid: be(8, 8),
            attr_mod: be(20, 4) as u32,
        };
        let attr_id = be(16, 2) as u16;
        let attr = CmAttr::from_u16(attr_id).ok_or(MadError::UnsupportedAttribute(attr_id))?;
        let f = Fields(b);
        let (pd_at, pd_len) = attr.private_data_area();
        let private_data = f.bytes(pd_at, pd_len).to_vec();
        let body = match attr {
            CmAttr::Req => CmBody::Req(Req {
                local_comm_id: f.u32(0),
                service_id: f.u64(8),
                local_ca_guid: f.u64(16),
                local_qkey: f.u32(28),
                local_qpn: f.u24(32),
                responder_resources: f.u8(35),
                local_eecn: f.u24(36),
                initiator_depth: f.u8(39),
                remote_eecn: f.u24(40),
                remote_cm_response_timeout: f.bits(43, 0, 5),
                transport_service_type: f.bits(43, 5, 2),
                end_to_end_flow_control: f.flag(43, 7),
                starting_psn: f.u24(44),
                local_cm_response_timeout: f.bits(47, 0, 5),
                retry_count: f.bits(47, 5, 3),
                pkey: f.u16(48),
                path_mtu: f.bits(50, 0, 4),
                rdc_exists: f.flag(50, 4),
                rnr_retry_count: f.bits(50, 5, 3),
                max_cm_retries: f.bits(51, 0, 4),
                srq: f.flag(51, 4),
                extended_transport_type: f.bits(51, 5, 3),
                primary: parse_path(&f, 52),
                alternate: parse_path(&f, 96),
                sap_supported: f.flag(139, 5),
                private_data,
            }),
            CmAttr::Mra => CmBody::Mra(Mra {
                local_comm_id: f.u32(0),
                remote_comm_id: f.u32(4),
                message_mraed: f.bits(8, 0, 2),
                service_timeout: f.bits(9, 0, 5),
                private_data,
            }),
            CmAttr::Rej => {
                let ari_len = f.bits(9, 0, 7) as usize;
                if ari_len > 72 {
                    return Err(MadError::Malformed("REJ rejected-info length over 72"));
                }
                CmBody::Rej(Rej {
                    local_comm_id: f.u32(0),
                    remote_comm_id: f.u32(4),
                    message_rejected: f.bits(8, 0, 2),
                    reason: f.u16(10),
                    ari: f.bytes(12, ari_len).to_vec(),
                    private_data,
                })
            }
            CmAttr::Rep => CmBody::Rep(Rep {
                local_comm_id: f.u32(0),
                remote_comm_id: f.u32(4),
                local_qkey: f.u32(8),
                local_qpn: f.u24(12),
                local_eecn: f.u24(16),
                starting_psn: f.u24(20),
                responder_resources: f.u8(24),
                initiator_depth: f.u8(25),
                target_ack_delay: f.bits(26, 0, 5),
                failover_accepted: f.bits(26, 5, 2),
                end_to_end_flow_control: f.flag(26, 7),
                rnr_retry_count: f.bits(27, 0, 3),
                srq: f.flag(27, 3),
                local_ca_guid: f.u64(28),
                private_data,
            }),
            CmAttr::Rtu | CmAttr::Drep => {
                let s = Short {
                    local_comm_id: f.u32(0),
                    remote_comm_id: f.u32(4),
                    private_data,
                };
                if attr == CmAttr::Rtu {
                    CmBody::Rtu(s)
                } else {
                    CmBody::Drep(s)
                }
            }
            CmAttr::Dreq => CmBody::Dreq(Dreq {
                local_comm_id: f.u32(0),
                remote_comm_id: f.u32(4),
                remote_qpn_eecn: f.u24(8),
                private_data,
            }),
            CmAttr::SidrReq => CmBody::SidrReq(SidrReq {
                request_id: f.u32(0),
                pkey: f.u16(4),
                service_id: f.u64(8),
                private_data,
            }),
            CmAttr::SidrRep => {
                let info_len = f.u8(5) as usize;
                if info_len > 72 {
                    return Err(MadError::Malformed(
                        "SIDR_REP additional-information length over 72",
                    ));
                }
                CmBody::SidrRep(SidrRep {
                    request_id: f.u32(0),
                    status: f.u8(4),
                    qpn: f.u24(8),
                    service_id: f.u64(12),
                    qkey: f.u32(20),
                    info: f.bytes(24, info_len).to_vec(),
                    private_data,
                })
            }
        };
        Ok(CmMad { hdr, body })
    }

    /// The 256 bytes of the MAD. Fields wider than their bits are cut to them; private data
    /// or ARI longer than its area is an error.
    pub fn emit(&self) -> Result<[u8; MAD_LEN], MadError> {
        let attr = self.attr();
        let (pd_at, pd_len) = attr.private_data_area();
        let pd = self.private_data();
        if pd.len() > pd_len {
            return Err(MadError::Malformed("private data over its area"));
        }
        let mut b = [0u8; MAD_LEN];
        b[0] = BASE_VERSION;
        b[1] = MGMT_CLASS_CM;
        b[2] = CM_CLASS_VERSION;
        b[3] = METHOD_SEND;
        b[4..6].copy_from_slice(&self.hdr.status.to_be_bytes());
        b[8..16].copy_from_slice(&self.hdr.tid.to_be_bytes());
        b[16..18].copy_from_slice(&(attr as u16).to_be_bytes());
        b[20..24].copy_from_slice(&self.hdr.attr_mod.to_be_bytes());
        let mut f = FieldsMut(&mut b);
        match &self.body {
            CmBody::Req(m) => {
                f.u32(0, m.local_comm_id);
                f.u64(8, m.service_id);
                f.u64(16, m.local_ca_guid);
                f.u32(28, m.local_qkey);
                f.u24(32, m.local_qpn);
                f.u8(35, m.responder_resources);
                f.u24(36, m.local_eecn);
                f.u8(39, m.initiator_depth);
                f.u24(40, m.remote_eecn);
                f.bits(43, 0, 5, m.remote_cm_response_timeout);
                f.bits(43, 5, 2, m.transport_service_type);
                f.flag(43, 7, m.end_to_end_flow_control);
                f.u24(44, m.starting_psn);
                f.bits(47, 0, 5, m.local_cm_response_timeout);
                f.bits(47, 5, 3, m.retry_count);
                f.u16(48, m.pkey);
                f.bits(50, 0, 4, m.path_mtu);
                f.flag(50, 4, m.rdc_exists);
                f.bits(50, 5, 3, m.rnr_retry_count);
                f.bits(51, 0, 4, m.max_cm_retries);
                f.flag(51, 4, m.srq);
                f.bits(51, 5, 3, m.extended_transport_type);
                emit_path(&mut f, 52, &m.primary);
                emit_path(&mut f, 96, &m.alternate);
                f.flag(139, 5, m.sap_supported);
            }
            CmBody::Mra(m) => {
                f.u32(0, m.local_comm_id);
                f.u32(4, m.remote_comm_id);
                f.bits(8, 0, 2, m.message_mraed);
                f.bits(9, 0, 5, m.service_timeout);
            }
            CmBody::Rej(m) => {
                if m.ari.len() > 72 {
                    return Err(MadError::Malformed("REJ ARI over 72 bytes"));
                }
                f.u32(0, m.local_comm_id);
                f.u32(4, m.remote_comm_id);
                f.bits(8, 0, 2, m.message_rejected);
                f.bits(9, 0, 7, m.ari.len() as u8);
                f.u16(10, m.reason);
                f.bytes(12, &m.ari);
            }
            CmBody::Rep(m) => {
                f.u32(0, m.local_comm_id);
                f.u32(4, m.remote_comm_id);
                f.u32(8, m.local_qkey);
                f.u24(12, m.local_qpn);
                f.u24(16, m.local_eecn);
                f.u24(20, m.starting_psn);
                f.u8(24, m.responder_resources);
                f.u8(25, m.initiator_depth);
                f.bits(26, 0, 5, m.target_ack_delay);
                f.bits(26, 5, 2, m.failover_accepted);
                f.flag(26, 7, m.end_to_end_flow_control);
                f.bits(27, 0, 3, m.rnr_retry_count);
                f.flag(27, 3, m.srq);
                f.u64(28, m.local_ca_guid);
            }
            CmBody::Rtu(m) | CmBody::Drep(m) => {
                f.u32(0, m.local_comm_id);
                f.u32(4, m.remote_comm_id);
            }
            CmBody::Dreq(m) => {
                f.u32(0, m.local_comm_id);
                f.u32(4, m.remote_comm_id);
                f.u24(8, m.remote_qpn_eecn);
            }
            CmBody::SidrReq(m) => {
                f.u32(0, m.request_id);
                f.u16(4, m.pkey);
                f.u64(8, m.service_id);
            }
            CmBody::SidrRep(m) => {
                if m.info.len() > 72 {
                    return Err(MadError::Malformed("SIDR_REP information over 72 bytes"));
                }
                f.u32(0, m.request_id);
                f.u8(4, m.status);
                f.u8(5, m.info.len() as u8);
                f.u24(8, m.qpn);
                f.u64(12, m.service_id);
                f.u32(20, m.qkey);
                f.bytes(24, &m.info);
            }
        }
        f.bytes(pd_at, pd);
        Ok(b)
    }
}

/// The IP-based CM service ID of rdma_cm port space `ps`, port `port` (IBTA Annex A11:
/// prefix 0x0000000001, then the protocol byte and the port).
pub fn ip_service_id(ps: u16, port: u16) -> u64 {
    (ps as u64) << 16 | port as u64
}

/// (port space, port) of an IP-based service ID; None for other service IDs.
pub fn parse_ip_service_id(sid: u64) -> Option<(u16, u16)> {
    if sid >> 24 != 0x01 {
        return None;
    }
    Some(((sid >> 16) as u16, sid as u16))
}

/// The IPv4-mapped GID (::ffff:a.b.c.d) of an address, as RoCEv2 GID tables hold it.
pub fn ipv4_gid(a: Ipv4Addr) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a.octets());
    g
}

/// The address of an IPv4-mapped GID.
pub fn gid_ipv4(g: &[u8; 16]) -> Option<Ipv4Addr> {
    if g[..10].iter().any(|&b| b != 0) || g[10] != 0xff || g[11] != 0xff {
        return None;
    }
    Some(Ipv4Addr::new(g[12], g[13], g[14], g[15]))
}

/// rdma_cm's header at the start of a REQ's private data (IPv4 only here).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmaHdr {
    /// The initiator's port.
    pub src_port: u16,
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
}

impl CmaHdr {
    pub fn emit(&self) -> [u8; CMA_HDR_LEN] {
        let mut b = [0u8; CMA_HDR_LEN];
        b[0] = CMA_VERSION;
        b[1] = 4 << 4;
        b[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        b[16..20].copy_from_slice(&self.src.octets());
        b[32..36].copy_from_slice(&self.dst.octets());
        b
    }

    /// From a REQ's private data: its first 36 bytes.
    pub fn parse(pd: &[u8]) -> Result<CmaHdr, MadError> {
        if pd.len() < CMA_HDR_LEN {
            return Err(MadError::Malformed("private data shorter than the cma_hdr"));
        }
        if pd[0] != CMA_VERSION {
            return Err(MadError::Malformed("cma_hdr version"));
        }
        if pd[1] >> 4 != 4 {
            return Err(MadError::Malformed("cma_hdr not IPv4"));
        }
        let ip = |at: usize| Ipv4Addr::new(pd[at], pd[at + 1], pd[at + 2], pd[at + 3]);
        Ok(CmaHdr {
            src_port: u16::from_be_bytes([pd[2], pd[3]]),
            src: ip(16),
            dst: ip(32),
        })
    }
}
