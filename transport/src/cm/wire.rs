//! The connection manager's packets (spec/cm.md §1): REQ, REP, RTU, REJ, DREQ, DREP and the
//! UD port spaces' SIDR_REQ / SIDR_REP, each the native base header, its fixed fields,
//! private data and the CRC-32 trailer.

use crate::wire::{crc32, BASE_LEN, TRAILER_LEN, VERSION};
use std::net::Ipv4Addr;

/// CM opcodes (byte 1 of the base header), after the transport's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CmOpcode {
    Req = 0x40,
    Rep = 0x41,
    Rtu = 0x42,
    Rej = 0x43,
    Dreq = 0x44,
    Drep = 0x45,
    SidrReq = 0x46,
    SidrRep = 0x47,
}

impl CmOpcode {
    pub fn from_u8(v: u8) -> Option<CmOpcode> {
        use CmOpcode::*;
        Some(match v {
            0x40 => Req,
            0x41 => Rep,
            0x42 => Rtu,
            0x43 => Rej,
            0x44 => Dreq,
            0x45 => Drep,
            0x46 => SidrReq,
            0x47 => SidrRep,
            _ => return None,
        })
    }

    /// Fixed bytes after the base header, before the private data.
    pub fn header_len(self) -> usize {
        match self {
            CmOpcode::Req => 28,
            CmOpcode::Rep | CmOpcode::SidrReq | CmOpcode::SidrRep => 16,
            _ => 8,
        }
    }

    /// Most private data the message carries (the IBTA CM's sizes, less the 36-byte header
    /// rdma_cm puts in a REQ's, which is what librdmacm applications may use).
    pub fn max_private_data(self) -> usize {
        match self {
            CmOpcode::Req => 56,
            CmOpcode::Rep => 196,
            CmOpcode::Rtu => 224,
            CmOpcode::Rej => 148,
            CmOpcode::Dreq => 220,
            CmOpcode::Drep => 224,
            // IBTA SIDR_REQ's 216 less rdma_cm's 36-byte header; SIDR_REP's 136.
            CmOpcode::SidrReq => 180,
            CmOpcode::SidrRep => 136,
        }
    }

    /// Offset of the private-data length byte.
    fn pd_len_at(self) -> usize {
        match self {
            CmOpcode::Req => 18,
            CmOpcode::Rep => 23,
            CmOpcode::Rej => 15,
            CmOpcode::SidrReq => 18,
            CmOpcode::SidrRep => 13,
            _ => 12,
        }
    }
}

/// Whether byte 1 of a native packet is a CM opcode (the embedder routes those to [`super::Cm`]).
pub fn is_cm_packet(data: &[u8]) -> bool {
    data.len() >= 2 && data[0] == VERSION && CmOpcode::from_u8(data[1]).is_some()
}

/// The queue-pair parameters both sides announce (verbs `rdma_conn_param`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpInfo {
    /// 24 bits.
    pub qpn: u32,
    /// 24 bits.
    pub start_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// 0..=7 (REQ only).
    pub retry_count: u8,
    /// 0..=7.
    pub rnr_retry_count: u8,
}

/// The kind-specific fields of a CM message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmBody {
    Req {
        port_space: u16,
        dst_port: u16,
        src_port: u16,
        qp: QpInfo,
        /// The address the initiator named (the passive side's `local` address).
        dst_addr: Ipv4Addr,
    },
    Rep {
        qp: QpInfo,
    },
    Rtu,
    Rej {
        reason: u16,
    },
    Dreq,
    Drep,
    /// Service-ID resolution for the UD port spaces: which QPN and Q_Key serve
    /// `(port_space, dst_port)` at the peer.
    SidrReq {
        port_space: u16,
        dst_port: u16,
        src_port: u16,
        dst_addr: Ipv4Addr,
    },
    /// The answer: `status` 0 (see [`super::sidr_status`]) with the QP that serves it.
    SidrRep {
        status: u8,
        /// 24 bits.
        qpn: u32,
        qkey: u32,
    },
}

/// A parsed CM message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmMsg {
    /// The receiver's comm id (0 in a REQ, and in a REJ of a REQ nobody took).
    pub dst_comm: u32,
    /// The sender's comm id (0 only in such a REJ).
    pub src_comm: u32,
    pub body: CmBody,
    pub private_data: Vec<u8>,
}

/// Why a CM packet was dropped (each has a counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmWireError {
    Truncated,
    BadVersion,
    BadOpcode,
    /// Length other than headers + private data + trailer, private data over the limit, a
    /// field out of range.
    Malformed(&'static str),
    BadCrc,
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl CmMsg {
    pub fn opcode(&self) -> CmOpcode {
        match self.body {
            CmBody::Req { .. } => CmOpcode::Req,
            CmBody::Rep { .. } => CmOpcode::Rep,
            CmBody::Rtu => CmOpcode::Rtu,
            CmBody::Rej { .. } => CmOpcode::Rej,
            CmBody::Dreq => CmOpcode::Dreq,
            CmBody::Drep => CmOpcode::Drep,
            CmBody::SidrReq { .. } => CmOpcode::SidrReq,
            CmBody::SidrRep { .. } => CmOpcode::SidrRep,
        }
    }

    /// Bytes `emit` writes.
    pub fn len(&self) -> usize {
        BASE_LEN + self.opcode().header_len() + self.private_data.len() + TRAILER_LEN
    }

    pub fn is_empty(&self) -> bool {
        false
    }

    /// Parse a UDP payload; the checks run in spec/cm.md §1.7 order.
    pub fn parse(b: &[u8]) -> Result<CmMsg, CmWireError> {
        if b.len() < BASE_LEN + TRAILER_LEN {
            return Err(CmWireError::Truncated);
        }
        if b[0] != VERSION {
            return Err(CmWireError::BadVersion);
        }
        let op = CmOpcode::from_u8(b[1]).ok_or(CmWireError::BadOpcode)?;
        let fixed = BASE_LEN + op.header_len();
        if b.len() < fixed + TRAILER_LEN {
            return Err(CmWireError::Truncated);
        }
        let pd_len = b[op.pd_len_at()] as usize;
        if pd_len > op.max_private_data() {
            return Err(CmWireError::Malformed("private data over the limit"));
        }
        if b.len() != fixed + pd_len + TRAILER_LEN {
            return Err(CmWireError::Malformed(
                "length is not headers + private data",
            ));
        }
        let end = b.len() - TRAILER_LEN;
        if crc32(&b[..end]) != be32(b, end) {
            return Err(CmWireError::BadCrc);
        }
        let dst_comm = be32(b, 4);
        let src_comm = be32(b, 8);
        let qp = |at: usize| QpInfo {
            qpn: be32(b, at),
            start_psn: be32(b, at + 4),
            ..Default::default()
        };
        let body = match op {
            CmOpcode::Req => {
                let mut q = qp(20);
                q.responder_resources = b[19];
                q.initiator_depth = b[28];
                q.retry_count = b[29];
                q.rnr_retry_count = b[30];
                CmBody::Req {
                    port_space: be16(b, 12),
                    dst_port: be16(b, 14),
                    src_port: be16(b, 16),
                    qp: q,
                    dst_addr: Ipv4Addr::from(be32(b, 32)),
                }
            }
            CmOpcode::Rep => {
                let mut q = qp(12);
                q.responder_resources = b[20];
                q.initiator_depth = b[21];
                q.rnr_retry_count = b[22];
                CmBody::Rep { qp: q }
            }
            CmOpcode::Rtu => CmBody::Rtu,
            CmOpcode::Rej => CmBody::Rej {
                reason: be16(b, 12),
            },
            CmOpcode::Dreq => CmBody::Dreq,
            CmOpcode::Drep => CmBody::Drep,
            CmOpcode::SidrReq => CmBody::SidrReq {
                port_space: be16(b, 12),
                dst_port: be16(b, 14),
                src_port: be16(b, 16),
                dst_addr: Ipv4Addr::from(be32(b, 20)),
            },
            CmOpcode::SidrRep => CmBody::SidrRep {
                status: b[12],
                qpn: be32(b, 16),
                qkey: be32(b, 20),
            },
        };
        let m = CmMsg {
            dst_comm,
            src_comm,
            body,
            private_data: b[fixed..end].to_vec(),
        };
        m.check()?;
        Ok(m)
    }

    /// The field ranges of spec/cm.md §1.7 (after the CRC).
    fn check(&self) -> Result<(), CmWireError> {
        let op = self.opcode();
        let request = matches!(op, CmOpcode::Req | CmOpcode::SidrReq);
        if request && self.dst_comm != 0 {
            return Err(CmWireError::Malformed("REQ with a dst_comm"));
        }
        if !request && op != CmOpcode::Rej && self.dst_comm == 0 {
            return Err(CmWireError::Malformed("dst_comm 0"));
        }
        if op != CmOpcode::Rej && self.src_comm == 0 {
            return Err(CmWireError::Malformed("src_comm 0"));
        }
        match &self.body {
            CmBody::Req { qp, .. } => {
                if qp.qpn > 0x00ff_ffff || qp.start_psn > 0x00ff_ffff {
                    return Err(CmWireError::Malformed("QPN or PSN over 24 bits"));
                }
                if qp.retry_count > 7 || qp.rnr_retry_count > 7 {
                    return Err(CmWireError::Malformed("retry count over 7"));
                }
            }
            CmBody::Rep { qp } => {
                if qp.qpn > 0x00ff_ffff || qp.start_psn > 0x00ff_ffff {
                    return Err(CmWireError::Malformed("QPN or PSN over 24 bits"));
                }
                if qp.rnr_retry_count > 7 {
                    return Err(CmWireError::Malformed("retry count over 7"));
                }
            }
            CmBody::SidrRep { qpn, .. } if *qpn > 0x00ff_ffff => {
                return Err(CmWireError::Malformed("QPN over 24 bits"));
            }
            _ => {}
        }
        Ok(())
    }

    /// Write the packet into `out` (at least `len()` bytes); returns the length. Fields are
    /// written as given: callers build valid messages (the private data is cut to its limit).
    pub fn emit(&self, out: &mut [u8]) -> Option<usize> {
        let op = self.opcode();
        let pd = &self.private_data[..self.private_data.len().min(op.max_private_data())];
        let fixed = BASE_LEN + op.header_len();
        let n = fixed + pd.len() + TRAILER_LEN;
        if out.len() < n {
            return None;
        }
        let b = &mut out[..n];
        b.fill(0);
        b[0] = VERSION;
        b[1] = op as u8;
        b[4..8].copy_from_slice(&self.dst_comm.to_be_bytes());
        b[8..12].copy_from_slice(&self.src_comm.to_be_bytes());
        let put_qp = |b: &mut [u8], at: usize, q: &QpInfo| {
            b[at..at + 4].copy_from_slice(&(q.qpn & 0x00ff_ffff).to_be_bytes());
            b[at + 4..at + 8].copy_from_slice(&(q.start_psn & 0x00ff_ffff).to_be_bytes());
        };
        match &self.body {
            CmBody::Req {
                port_space,
                dst_port,
                src_port,
                qp,
                dst_addr,
            } => {
                b[12..14].copy_from_slice(&port_space.to_be_bytes());
                b[14..16].copy_from_slice(&dst_port.to_be_bytes());
                b[16..18].copy_from_slice(&src_port.to_be_bytes());
                b[19] = qp.responder_resources;
                put_qp(b, 20, qp);
                b[28] = qp.initiator_depth;
                b[29] = qp.retry_count.min(7);
                b[30] = qp.rnr_retry_count.min(7);
                b[32..36].copy_from_slice(&dst_addr.octets());
            }
            CmBody::Rep { qp } => {
                put_qp(b, 12, qp);
                b[20] = qp.responder_resources;
                b[21] = qp.initiator_depth;
                b[22] = qp.rnr_retry_count.min(7);
            }
            CmBody::Rej { reason } => b[12..14].copy_from_slice(&reason.to_be_bytes()),
            CmBody::SidrReq {
                port_space,
                dst_port,
                src_port,
                dst_addr,
            } => {
                b[12..14].copy_from_slice(&port_space.to_be_bytes());
                b[14..16].copy_from_slice(&dst_port.to_be_bytes());
                b[16..18].copy_from_slice(&src_port.to_be_bytes());
                b[20..24].copy_from_slice(&dst_addr.octets());
            }
            CmBody::SidrRep { status, qpn, qkey } => {
                b[12] = *status;
                b[16..20].copy_from_slice(&(qpn & 0x00ff_ffff).to_be_bytes());
                b[20..24].copy_from_slice(&qkey.to_be_bytes());
            }
            CmBody::Rtu | CmBody::Dreq | CmBody::Drep => {}
        }
        b[op.pd_len_at()] = pd.len() as u8;
        b[fixed..fixed + pd.len()].copy_from_slice(pd);
        let crc = crc32(&b[..n - TRAILER_LEN]);
        b[n - TRAILER_LEN..].copy_from_slice(&crc.to_be_bytes());
        Some(n)
    }

    /// `emit` into a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.len()];
        let n = self.emit(&mut v).unwrap_or(0);
        v.truncate(n);
        v
    }
}
