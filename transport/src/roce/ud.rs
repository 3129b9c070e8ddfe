//! IBTA UD queue pairs over RoCEv2 (spec/rocev2.md §6.9): single-packet SENDs (opcodes
//! 0x64 / 0x65) with a DETH carrying the Q_Key and the source QP; no connection, no ACK, no
//! retransmission. A datagram that finds no posted receive, or names the wrong Q_Key, is
//! dropped and counted. A receive gets the 40-byte GRH area first (RoCEv2 over IPv4: 20
//! zero bytes, then the datagram's IPv4 header, as rxe and mlx5 write it), then the payload.

use super::engine::qp_source_port;
use super::qp::Ctx;
use super::wire::{
    self, Bth, Deth, ExtHeaders, Flow, Opcode, Packet, BTH_LEN, DETH_LEN, ICRC_LEN, IMM_LEN,
    IPV4_HEADER_LEN, QKEY_CONTROLLED, QPN_MASK,
};
use super::{RoceConfig, RoceCounters};
use crate::api::*;
use crate::mem::{sgl_len, sgl_read, sgl_write};
use std::collections::VecDeque;
use std::net::Ipv4Addr;

/// Bytes of the GRH area before a UD receive's payload (verbs: `struct ibv_grh`).
pub const GRH_LEN: usize = 40;

/// Where a UD send goes: what a verbs UD work request names (its address handle's address,
/// `remote_qpn`, `remote_qkey`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdDest {
    pub ip: Ipv4Addr,
    pub qpn: u32,
    /// The Q_Key to send; one with [`QKEY_CONTROLLED`] set means the QP's own.
    pub qkey: u32,
}

#[derive(Debug)]
struct UdWqe {
    wr: SendWr,
    dest: UdDest,
    /// Longer than the MTU: sent as nothing (IBTA C10-93.1.1).
    too_long: bool,
}

/// One UD QP.
#[derive(Debug)]
pub(crate) struct UdQp {
    pub qpn: u32,
    pd: u32,
    qkey: u32,
    src_port: u16,
    /// PSN of the next datagram (IBTA: UD PSNs count per QP; receivers do not check them).
    psn: u32,
    sq: VecDeque<UdWqe>,
    rq: VecDeque<RecvWr>,
}

/// The headers of one UD SEND: what [`Datagram::finish`] writes around a payload.
pub(crate) struct Datagram {
    pub dst: Ipv4Addr,
    pub dst_qpn: u32,
    pub qkey: u32,
    pub src_qpn: u32,
    pub src_port: u16,
    pub psn: u32,
    pub solicited: bool,
    pub imm: Option<u32>,
}

impl Datagram {
    /// Where the payload starts in the buffer.
    pub fn header_len(&self) -> usize {
        BTH_LEN + DETH_LEN + if self.imm.is_some() { IMM_LEN } else { 0 }
    }

    /// Write BTH, DETH (and immediate), pad and ICRC around the `len` payload bytes already
    /// at `buf[header_len()..]`; the datagram's length, or None if `buf` is too small.
    pub fn finish(&self, cfg: &RoceConfig, buf: &mut [u8], len: usize) -> Option<usize> {
        let hdr = self.header_len();
        if buf.len() < hdr + len + 3 + ICRC_LEN {
            return None;
        }
        let opcode = if self.imm.is_some() {
            Opcode::UdSendOnlyImm
        } else {
            Opcode::UdSendOnly
        };
        let mut bth = Bth::new(opcode, self.dst_qpn, self.psn);
        bth.pkey = cfg.pkey;
        bth.solicited = self.solicited;
        bth.pad = wire::pad_for(len);
        let ext = ExtHeaders {
            deth: Some(Deth {
                qkey: self.qkey,
                src_qpn: self.src_qpn,
                resv: 0,
            }),
            imm: self.imm,
            ..Default::default()
        };
        bth.emit(buf).ok()?;
        ext.emit(bth.opcode, &mut buf[BTH_LEN..]).ok()?;
        let end = hdr + len + bth.pad as usize;
        buf[hdr + len..end].fill(0);
        let flow = Flow {
            src: cfg.local_ip,
            dst: self.dst,
            src_port: self.src_port,
            dst_port: wire::UDP_PORT,
        };
        let h = flow.headers(end + ICRC_LEN);
        let c = wire::icrc(&h[..IPV4_HEADER_LEN], &h[IPV4_HEADER_LEN..], &buf[..end]);
        buf[end..end + ICRC_LEN].copy_from_slice(&c.to_le_bytes());
        Some(end + ICRC_LEN)
    }
}

/// The 20 IPv4 header bytes a receive's GRH area ends with.
pub(crate) enum IpHeader<'a> {
    /// The datagram's real header (its first 20 bytes: options are not part of the GRH).
    Real(&'a [u8]),
    /// No header seen (the simulator): the canonical header the sender would have used.
    Canonical {
        src_port: u16,
        udp_payload_len: usize,
    },
}

impl UdQp {
    pub fn new(qpn: u32, pd: u32, qkey: u32, sq_psn: u32) -> UdQp {
        UdQp {
            qpn,
            pd,
            qkey,
            src_port: qp_source_port(qpn),
            psn: sq_psn & wire::PSN_MASK,
            sq: VecDeque::new(),
            rq: VecDeque::new(),
        }
    }

    pub fn set_qkey(&mut self, qkey: u32) {
        self.qkey = qkey;
    }

    pub fn qkey(&self) -> u32 {
        self.qkey
    }

    pub fn post_send(&mut self, mtu: u32, dest: UdDest, wr: SendWr) -> Result<(), PostError> {
        // Only SEND exists on UD.
        if !matches!(wr.op, SendOp::Send { .. }) {
            return Err(PostError::Unsupported);
        }
        if wr.len() > u32::MAX as u64 || dest.qpn > QPN_MASK {
            return Err(PostError::InvalidLength);
        }
        // One packet per datagram. A longer message is not an error: IBTA C10-93.1.1 says
        // no packet is emitted and no error reported (rxe completes it successfully).
        let too_long = wr.len() > mtu as u64;
        self.sq.push_back(UdWqe { wr, dest, too_long });
        Ok(())
    }

    pub fn post_recv(&mut self, wr: RecvWr) {
        self.rq.push_back(wr);
    }

    pub fn has_work(&self) -> bool {
        !self.sq.is_empty()
    }

    /// The next datagram, written into `buf`: (length, destination, source port).
    pub fn poll_transmit(&mut self, ctx: &mut Ctx, buf: &mut [u8]) -> Option<(usize, Ipv4Addr)> {
        let Ctx {
            cfg,
            mem,
            completions,
            counters,
            ..
        } = ctx;
        loop {
            let w = self.sq.front()?;
            if w.too_long {
                let w = self.sq.pop_front()?;
                self.psn = wire::psn::add(self.psn, 1);
                counters.ud_too_long += 1;
                complete(completions, counters, self.qpn, &w.wr, Status::Success);
                continue;
            }
            let len = w.wr.len() as usize;
            let imm = match w.wr.op {
                SendOp::Send { imm } => imm,
                _ => None,
            };
            let hdr = BTH_LEN + DETH_LEN + if imm.is_some() { IMM_LEN } else { 0 };
            if buf.len() < hdr + len + 3 + ICRC_LEN {
                counters.tx_buffer_too_small += 1;
                return None;
            }
            let w = self.sq.pop_front()?;
            if sgl_read(&mut **mem, self.pd, &w.wr.sgl, 0, &mut buf[hdr..hdr + len]).is_err() {
                complete(
                    completions,
                    counters,
                    self.qpn,
                    &w.wr,
                    Status::LocalProtection,
                );
                continue;
            }
            let qkey = if w.dest.qkey & QKEY_CONTROLLED != 0 {
                self.qkey
            } else {
                w.dest.qkey
            };
            let d = Datagram {
                dst: w.dest.ip,
                dst_qpn: w.dest.qpn,
                qkey,
                src_qpn: self.qpn,
                src_port: self.src_port,
                psn: self.psn,
                solicited: w.wr.solicited,
                imm,
            };
            self.psn = wire::psn::add(self.psn, 1);
            let Some(n) = d.finish(cfg, buf, len) else {
                counters.tx_buffer_too_small += 1;
                return None;
            };
            counters.tx_payload_bytes += len as u64;
            counters.ud_sent += 1;
            complete(completions, counters, self.qpn, &w.wr, Status::Success);
            return Some((n, w.dest.ip));
        }
    }

    /// A UD packet for this QP from `src`.
    pub fn on_packet(&mut self, ctx: &mut Ctx, src: Ipv4Addr, ip: IpHeader<'_>, pkt: &Packet<'_>) {
        let Ctx {
            cfg,
            mem,
            completions,
            counters,
            ..
        } = ctx;
        let Some(deth) = pkt.ext.deth else {
            counters.rx_malformed += 1;
            return;
        };
        if deth.qkey != self.qkey {
            counters.ud_bad_qkey += 1;
            return;
        }
        let Some(r) = self.rq.pop_front() else {
            counters.ud_no_recv += 1;
            return;
        };
        let mut grh = [0u8; GRH_LEN];
        match ip {
            IpHeader::Real(h) => {
                let n = h.len().min(IPV4_HEADER_LEN);
                grh[GRH_LEN - IPV4_HEADER_LEN..GRH_LEN - IPV4_HEADER_LEN + n]
                    .copy_from_slice(&h[..n]);
            }
            IpHeader::Canonical {
                src_port,
                udp_payload_len,
            } => {
                let h = Flow {
                    src,
                    dst: cfg.local_ip,
                    src_port,
                    dst_port: wire::UDP_PORT,
                }
                .headers(udp_payload_len);
                grh[GRH_LEN - IPV4_HEADER_LEN..].copy_from_slice(&h[..IPV4_HEADER_LEN]);
            }
        }
        let total = GRH_LEN + pkt.payload.len();
        let status = if sgl_len(&r.sgl) < total as u64 {
            Status::LocalLength
        } else if sgl_write(&mut **mem, self.pd, &r.sgl, 0, &grh).is_err()
            || sgl_write(&mut **mem, self.pd, &r.sgl, GRH_LEN as u64, pkt.payload).is_err()
        {
            Status::LocalProtection
        } else {
            Status::Success
        };
        if status == Status::Success {
            counters.completions_ok += 1;
            counters.rx_payload_bytes += pkt.payload.len() as u64;
            counters.ud_delivered += 1;
        } else {
            counters.completions_err += 1;
        }
        completions.push_back(Completion {
            conn: ConnId(0),
            stream: self.qpn,
            wr_id: r.wr_id,
            status,
            op: CompletionOp::Recv,
            byte_len: if status == Status::Success {
                total as u32
            } else {
                0
            },
            imm: pkt.ext.imm,
            ud_src: Some(UdSource {
                ip: src,
                qpn: deth.src_qpn,
            }),
        });
    }

    /// Every queued work request, completed as flushed (the QP goes away).
    pub fn flush(&mut self, completions: &mut VecDeque<Completion>, counters: &mut RoceCounters) {
        for w in std::mem::take(&mut self.sq) {
            complete(completions, counters, self.qpn, &w.wr, Status::Flushed);
        }
        for r in std::mem::take(&mut self.rq) {
            counters.completions_err += 1;
            completions.push_back(Completion {
                conn: ConnId(0),
                stream: self.qpn,
                wr_id: r.wr_id,
                status: Status::Flushed,
                op: CompletionOp::Recv,
                byte_len: 0,
                imm: None,
                ud_src: None,
            });
        }
    }
}

fn complete(
    completions: &mut VecDeque<Completion>,
    counters: &mut RoceCounters,
    qpn: u32,
    wr: &SendWr,
    status: Status,
) {
    if status == Status::Success {
        counters.completions_ok += 1;
        if !wr.signaled {
            return;
        }
    } else {
        counters.completions_err += 1;
    }
    completions.push_back(Completion {
        conn: ConnId(0),
        stream: qpn,
        wr_id: wr.wr_id,
        status,
        op: CompletionOp::Send,
        byte_len: if status == Status::Success {
            wr.len() as u32
        } else {
            0
        },
        imm: None,
        ud_src: None,
    });
}
