//! QP1 of the RoCEv2 engine: the GSI that carries the IBTA CM's MADs (spec/rocev2.md §10),
//! and the RC QPs a CM exchange sets up.

use super::{qp_source_port, QpParams, RoceEndpoint};
use crate::api::*;
use crate::roce::cm::wire::{GSI_QKEY, GSI_QPN, MAD_LEN};
use crate::roce::cm::{CmQp, RoceCm, RoceCmConfig};
use crate::roce::ud::Datagram;
use crate::roce::wire::{self, Packet};
use std::net::Ipv4Addr;

impl RoceEndpoint {
    /// Serve the IBTA CM on QP1 (spec/rocev2.md §10): MADs to QP1 with the GSI Q_Key go
    /// to it, and its MADs leave from QP1. `seed` as for [`RoceCm::new`].
    pub fn enable_cm(&mut self, cfg: RoceCmConfig, seed: u32) {
        self.cm = Some(Box::new(RoceCm::new(cfg, seed)));
    }

    pub fn cm(&self) -> Option<&RoceCm> {
        self.cm.as_deref()
    }

    pub fn cm_mut(&mut self) -> Option<&mut RoceCm> {
        self.cm.as_deref_mut()
    }

    /// The RC QP of a CM exchange, in RTS: `local_qpn` expecting `rq_psn` (the starting
    /// PSN it announced) and sending to the peer's QP from the PSN the peer announced, at
    /// the exchange's path MTU (the REQ's).
    pub fn create_cm_qp(
        &mut self,
        peer: Ipv4Addr,
        local_qpn: u32,
        pd: u32,
        rq_psn: u32,
        remote: &CmQp,
        mtu: u32,
    ) -> Result<ConnId, PostError> {
        let c = self.connect(peer);
        self.create_qp(
            c,
            QpParams {
                local_qpn,
                remote_qpn: remote.qpn,
                pd,
                sq_psn: remote.starting_psn,
                rq_psn,
                mtu,
            },
        )?;
        Ok(c)
    }

    /// A UD packet to QP1: the CM's if it is enabled (true: taken, or dropped for its Q_Key).
    pub(super) fn gsi_receive(&mut self, now: u64, src: Ipv4Addr, pkt: &Packet<'_>) -> bool {
        let Some(cm) = self.cm.as_mut() else {
            return false;
        };
        if pkt.ext.deth.map(|d| d.qkey) != Some(GSI_QKEY) {
            self.counters.ud_bad_qkey += 1;
            return true;
        }
        self.counters.rx_pkts += 1;
        self.counters.gsi_mads_received += 1;
        cm.handle(now, src, pkt.payload);
        self.apply_ended();
        true
    }

    /// QPs whose connection the CM saw end stop retrying forever (`Qp::peer_gone`).
    pub(super) fn apply_ended(&mut self) {
        let Some(cm) = self.cm.as_mut() else {
            return;
        };
        for (peer, qpn) in cm.take_ended() {
            if let Some(&i) = self.by_key.get(&(peer, qpn)) {
                self.qps[i].peer_gone(self.cfg.retry_cnt);
            }
        }
    }

    /// A CM MAD as a UD SEND from QP1 to QP1 of its destination.
    pub(super) fn gsi_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let cm = self.cm.as_mut()?;
        if !cm.has_transmit() {
            return None;
        }
        let src_port = qp_source_port(GSI_QPN);
        let mut d = Datagram {
            dst: Ipv4Addr::UNSPECIFIED,
            dst_qpn: GSI_QPN,
            qkey: GSI_QKEY,
            src_qpn: GSI_QPN,
            src_port,
            psn: self.gsi_psn,
            solicited: false,
            imm: None,
        };
        let at = d.header_len();
        if buf.len() < at + MAD_LEN + wire::ICRC_LEN {
            self.counters.tx_buffer_too_small += 1;
            return None;
        }
        let (dst, mad) = cm.poll_transmit()?;
        d.dst = dst;
        buf[at..at + MAD_LEN].copy_from_slice(&mad);
        let len = d.finish(&self.cfg, buf, MAD_LEN)?;
        self.gsi_psn = wire::psn::add(self.gsi_psn, 1);
        self.counters.tx_pkts += 1;
        self.counters.tx_bytes += len as u64;
        self.counters.gsi_mads_sent += 1;
        Some(Transmit {
            dst,
            src_port,
            dst_port: wire::UDP_PORT,
            len,
            port: 0,
        })
    }
}
