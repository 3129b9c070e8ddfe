//! The RoCEv2 RC endpoint: every queue pair of one host behind the [`Transport`] interface.
//!
//! A "connection" is a peer record (RoCEv2 has no transport handshake: `connect` queues
//! `Event::Connected` at once); a "stream" is an RC QP in RTS. Packets are demultiplexed by
//! (peer address, destination QPN).

use super::cm::wire::GSI_QPN;
use super::cm::RoceCm;
use super::qp::{Ctx, Qp, QpState, XrcRole};
use super::ud::{IpHeader, UdDest, UdQp};
use super::wire::{self, Flow, Packet, PacketView, WireError, IPV4_HEADER_LEN, QPN_MASK};
use super::{RoceConfig, RoceCounters};
use crate::api::*;
use crate::mem::Memory;
use rustc_hash::FxHashMap as HashMap;
use std::collections::VecDeque;
use std::net::Ipv4Addr;

/// Explicit QP attributes (what a verbs application sets with `ibv_modify_qp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpParams {
    /// The QPN peers send to.
    pub local_qpn: u32,
    /// The peer's QPN.
    pub remote_qpn: u32,
    /// Protection domain remote accesses are checked against.
    pub pd: u32,
    /// First PSN this QP sends (sq_psn).
    pub sq_psn: u32,
    /// First PSN this QP expects (rq_psn).
    pub rq_psn: u32,
    /// Path MTU of this QP in bytes (verbs `path_mtu`: 256 to 4096); 0 = the endpoint's
    /// configured MTU. Both ends of a QP must use the same one (IBTA segments by it).
    pub mtu: u32,
}

mod gsi;

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The initial PSN of the direction (requester `src`/`src_qpn`) → (responder `dst`/`dst_qpn`)
/// when none is configured: both ends compute the same value (spec/rocev2.md §7).
pub fn derived_initial_psn(src: Ipv4Addr, dst: Ipv4Addr, src_qpn: u32, dst_qpn: u32) -> u32 {
    let a = (u32::from(src) as u64) << 32 | u32::from(dst) as u64;
    let b = ((src_qpn & QPN_MASK) as u64) << 24 | (dst_qpn & QPN_MASK) as u64;
    (splitmix64(a ^ splitmix64(b)) as u32) & wire::PSN_MASK
}

/// The UDP source port of a QP: 0xC000 | 14 bits of a hash of its QPN (rxe also draws its
/// source ports from 0xC000..=0xFFFF per QP).
pub fn qp_source_port(local_qpn: u32) -> u16 {
    0xc000 | (splitmix64(local_qpn as u64) as u16 & 0x3fff)
}

/// All RC queue pairs of one host.
#[derive(Debug)]
pub struct RoceEndpoint {
    cfg: RoceConfig,
    /// Peer of connection `ConnId(i + 1)`.
    peers: Vec<Ipv4Addr>,
    qps: Vec<Qp>,
    by_key: HashMap<(Ipv4Addr, u32), usize>,
    /// UD QPs (no peer: found by QPN alone).
    ud: Vec<UdQp>,
    ud_by_qpn: HashMap<u32, usize>,
    /// Round robin over `qps` then `ud`.
    rr: usize,
    completions: VecDeque<Completion>,
    events: VecDeque<Event>,
    counters: RoceCounters,
    /// The connection manager on QP1 (the GSI), if enabled (boxed: most endpoints have none).
    cm: Option<Box<RoceCm>>,
    /// PSN of QP1's next datagram.
    gsi_psn: u32,
}

impl RoceEndpoint {
    pub fn new(cfg: RoceConfig) -> Self {
        RoceEndpoint {
            cfg,
            peers: Vec::new(),
            qps: Vec::new(),
            by_key: HashMap::default(),
            ud: Vec::new(),
            ud_by_qpn: HashMap::default(),
            rr: 0,
            completions: VecDeque::new(),
            events: VecDeque::new(),
            counters: RoceCounters::default(),
            cm: None,
            gsi_psn: 0,
        }
    }

    pub fn config(&self) -> &RoceConfig {
        &self.cfg
    }

    pub fn counters(&self) -> &RoceCounters {
        &self.counters
    }

    /// Peer address of a connection.
    pub fn peer(&self, c: ConnId) -> Option<Ipv4Addr> {
        (c.0 as usize)
            .checked_sub(1)
            .and_then(|i| self.peers.get(i))
            .copied()
    }

    /// A peer record; `Event::Connected` is queued at once (no handshake in RoCEv2).
    pub fn connect(&mut self, peer: Ipv4Addr) -> ConnId {
        self.peers.push(peer);
        let c = ConnId(self.peers.len() as u32);
        self.events.push_back(Event::Connected { conn: c, peer });
        c
    }

    /// Create an RC QP in RTS with explicit PSNs.
    pub fn create_qp(&mut self, c: ConnId, p: QpParams) -> Result<(), PostError> {
        let peer = self.peer(c).ok_or(PostError::UnknownConnection)?;
        if p.local_qpn > QPN_MASK || p.remote_qpn > QPN_MASK {
            return Err(PostError::UnknownStream);
        }
        if self.by_key.contains_key(&(peer, p.local_qpn)) {
            return Err(PostError::StreamExists);
        }
        let mut qp = Qp::new(
            &self.cfg,
            c,
            peer,
            p.local_qpn,
            p.remote_qpn,
            p.pd,
            p.sq_psn,
            p.rq_psn,
            qp_source_port(p.local_qpn),
        );
        if p.mtu != 0 {
            qp.set_mtu(p.mtu);
        }
        self.by_key.insert((peer, p.local_qpn), self.qps.len());
        self.qps.push(qp);
        Ok(())
    }

    /// Set the first send PSN of QP `qpn` (see [`Qp::set_sq_psn`]): a QP created as a
    /// responder only (verbs RTR, no `sq_psn` yet) that then moves to RTS.
    pub fn set_sq_psn(&mut self, c: ConnId, qpn: u32, psn: u32) -> Result<(), PostError> {
        let i = self.qp_index(c, qpn)?;
        self.qps[i].set_sq_psn(psn)
    }

    /// Remove QP `qpn` of connection `c` with its queues (verbs RESET): packets for it are
    /// then dropped as for an unknown QP, and the QPN may be created again.
    pub fn destroy_qp(&mut self, c: ConnId, qpn: u32) -> Result<(), PostError> {
        let i = self.qp_index(c, qpn)?;
        let peer = self.qps[i].peer;
        self.by_key.remove(&(peer, qpn));
        self.qps.swap_remove(i);
        if let Some(moved) = self.qps.get(i) {
            self.by_key.insert((moved.peer, moved.local_qpn), i);
        }
        if self.rr >= self.qps.len() + self.ud.len() {
            self.rr = 0;
        }
        Ok(())
    }

    /// Create a UD QP (spec/rocev2.md §6.9): it sends to any address and QPN a work request
    /// names, and takes datagrams from anyone that names its QPN and Q_Key.
    pub fn create_ud_qp(
        &mut self,
        qpn: u32,
        pd: u32,
        qkey: u32,
        sq_psn: u32,
    ) -> Result<(), PostError> {
        if qpn > QPN_MASK {
            return Err(PostError::UnknownStream);
        }
        if self.ud_by_qpn.contains_key(&qpn) {
            return Err(PostError::StreamExists);
        }
        self.ud_by_qpn.insert(qpn, self.ud.len());
        self.ud.push(UdQp::new(qpn, pd, qkey, sq_psn));
        Ok(())
    }

    /// Remove a UD QP; its queued work requests complete as flushed.
    pub fn destroy_ud_qp(&mut self, qpn: u32) -> Result<(), PostError> {
        let i = self
            .ud_by_qpn
            .remove(&qpn)
            .ok_or(PostError::UnknownStream)?;
        let mut q = self.ud.swap_remove(i);
        q.flush(&mut self.completions, &mut self.counters);
        if let Some(moved) = self.ud.get(i) {
            self.ud_by_qpn.insert(moved.qpn, i);
        }
        if self.rr >= self.qps.len() + self.ud.len() {
            self.rr = 0;
        }
        Ok(())
    }

    fn ud_index(&self, qpn: u32) -> Result<usize, PostError> {
        self.ud_by_qpn
            .get(&qpn)
            .copied()
            .ok_or(PostError::UnknownStream)
    }

    /// Change a UD QP's Q_Key (verbs `IBV_QP_QKEY`).
    pub fn set_ud_qkey(&mut self, qpn: u32, qkey: u32) -> Result<(), PostError> {
        let i = self.ud_index(qpn)?;
        self.ud[i].set_qkey(qkey);
        Ok(())
    }

    /// A UD QP's Q_Key.
    pub fn ud_qkey(&self, qpn: u32) -> Option<u32> {
        self.ud_index(qpn).ok().map(|i| self.ud[i].qkey())
    }

    /// Queue a datagram on UD QP `qpn`: a SEND (with or without immediate). One longer than
    /// [`RoceConfig::ud_mtu`] completes successfully without a packet, as IBTA C10-93.1.1
    /// and rxe have it.
    pub fn post_ud_send(&mut self, qpn: u32, dest: UdDest, wr: SendWr) -> Result<(), PostError> {
        let i = self.ud_index(qpn)?;
        let mtu = self.cfg.ud_mtu;
        self.ud[i].post_send(mtu, dest, wr)
    }

    /// Queue a receive on UD QP `qpn`: it needs room for the 40-byte GRH area and the
    /// payload.
    pub fn post_ud_recv(&mut self, qpn: u32, wr: RecvWr) -> Result<(), PostError> {
        let i = self.ud_index(qpn)?;
        self.ud[i].post_recv(wr);
        Ok(())
    }

    /// Create a UC QP in RTS with explicit PSNs (UC opcodes, no ACKs, no retransmission: a
    /// lost packet loses its message; spec/rocev2.md §6.8).
    pub fn create_uc_qp(&mut self, c: ConnId, p: QpParams) -> Result<(), PostError> {
        self.create_qp(c, p)?;
        let peer = self.peer(c).ok_or(PostError::UnknownConnection)?;
        if let Some(&i) = self.by_key.get(&(peer, p.local_qpn)) {
            self.qps[i].set_uc();
        }
        Ok(())
    }

    /// Create an XRC QP in RTS with explicit PSNs: the initiator (`XrcRole::Initiator`,
    /// verbs XRC_SEND) or target (XRC_RECV) end of an XRC pair (XRC opcodes, the XRCETH on
    /// requests; spec/rocev2.md §6.10).
    pub fn create_xrc_qp(
        &mut self,
        c: ConnId,
        p: QpParams,
        role: XrcRole,
    ) -> Result<(), PostError> {
        self.create_qp(c, p)?;
        let peer = self.peer(c).ok_or(PostError::UnknownConnection)?;
        if let Some(&i) = self.by_key.get(&(peer, p.local_qpn)) {
            self.qps[i].set_xrc(role);
        }
        Ok(())
    }

    /// The XRC role of a QP (`None` for RC and UC QPs).
    pub fn qp_xrc_role(&self, c: ConnId, qpn: u32) -> Option<XrcRole> {
        let i = self.qp_index(c, qpn).ok()?;
        self.qps[i].xrc_role()
    }

    /// Queue a request on XRC initiator `qpn` for the target's SRQ `srqn` (what its XRCETH
    /// carries). `post_send` refuses XRC QPs (`Unsupported`).
    pub fn post_xrc_send(
        &mut self,
        c: ConnId,
        qpn: u32,
        srqn: u32,
        wr: SendWr,
    ) -> Result<(), PostError> {
        let i = self.qp_index(c, qpn)?;
        self.qps[i].post_xrc_send(wr, srqn)
    }

    /// Whether a QP is a UC one.
    pub fn qp_is_uc(&self, c: ConnId, qpn: u32) -> Option<bool> {
        let i = self.qp_index(c, qpn).ok()?;
        Some(self.qps[i].is_uc())
    }

    /// Create an RC QP with the configured (or derived) initial PSNs.
    pub fn create_stream(
        &mut self,
        c: ConnId,
        local: u32,
        remote: u32,
        pd: u32,
    ) -> Result<(), PostError> {
        let peer = self.peer(c).ok_or(PostError::UnknownConnection)?;
        let me = self.cfg.local_ip;
        let (sq_psn, rq_psn) = match self.cfg.initial_psn {
            Some(p) => (p, p),
            None => (
                derived_initial_psn(me, peer, local, remote),
                derived_initial_psn(peer, me, remote, local),
            ),
        };
        self.create_qp(
            c,
            QpParams {
                local_qpn: local,
                remote_qpn: remote,
                pd,
                sq_psn,
                rq_psn,
                mtu: 0,
            },
        )
    }

    fn qp_index(&self, c: ConnId, qpn: u32) -> Result<usize, PostError> {
        let peer = self.peer(c).ok_or(PostError::UnknownConnection)?;
        let i = *self
            .by_key
            .get(&(peer, qpn))
            .ok_or(PostError::UnknownStream)?;
        if self.qps[i].conn != c {
            return Err(PostError::UnknownStream);
        }
        Ok(i)
    }

    pub fn post_send(&mut self, c: ConnId, qpn: u32, wr: SendWr) -> Result<(), PostError> {
        let i = self.qp_index(c, qpn)?;
        self.qps[i].post_send(wr)
    }

    pub fn post_recv(&mut self, c: ConnId, qpn: u32, wr: RecvWr) -> Result<(), PostError> {
        let i = self.qp_index(c, qpn)?;
        self.qps[i].post_recv(wr)
    }

    /// Whether the QP is in the error state.
    pub fn qp_in_error(&self, c: ConnId, qpn: u32) -> Option<bool> {
        let i = self.qp_index(c, qpn).ok()?;
        Some(self.qps[i].state == QpState::Error)
    }

    /// (next PSN to send, oldest unacknowledged PSN, expected PSN) of a QP.
    pub fn qp_psns(&self, c: ConnId, qpn: u32) -> Option<(u32, u32, u32)> {
        let i = self.qp_index(c, qpn).ok()?;
        Some(self.qps[i].psns())
    }

    /// Send work requests posted and not yet completed on a QP.
    pub fn qp_outstanding(&self, c: ConnId, qpn: u32) -> Option<usize> {
        let i = self.qp_index(c, qpn).ok()?;
        Some(self.qps[i].outstanding_wrs())
    }

    /// Path MTU of a QP.
    pub fn qp_mtu(&self, c: ConnId, qpn: u32) -> Option<u32> {
        let i = self.qp_index(c, qpn).ok()?;
        Some(self.qps[i].mtu())
    }

    /// A UDP payload from `src`:`src_port` to port 4791; the ICRC is checked against the
    /// canonical headers (see the module documentation). Never panics on any bytes.
    pub fn handle_datagram(
        &mut self,
        now: u64,
        src: Ipv4Addr,
        src_port: u16,
        ce: bool,
        data: &[u8],
        mem: &mut dyn Memory,
    ) {
        self.counters.rx_datagrams += 1;
        let Some(view) = self.check(data) else { return };
        if self.cfg.verify_icrc {
            let flow = Flow {
                src,
                dst: self.cfg.local_ip,
                src_port,
                dst_port: wire::UDP_PORT,
            };
            if !view.icrc_ok_canonical(&flow) {
                self.counters.rx_bad_icrc += 1;
                return;
            }
        }
        let ip = IpHeader::Canonical {
            src_port,
            udp_payload_len: data.len(),
        };
        self.handle_ib(now, src, ce, ip, data, mem);
    }

    /// A datagram with its real IPv4 header (`ip_hdr`, options included) and UDP header:
    /// the ICRC is checked over them (what an embedder that sees whole frames should call;
    /// peers such as rxe use IPv4 identifications other than the canonical 0).
    pub fn handle_datagram_ip(
        &mut self,
        now: u64,
        ip_hdr: &[u8],
        udp_hdr: &[u8],
        data: &[u8],
        mem: &mut dyn Memory,
    ) {
        self.counters.rx_datagrams += 1;
        if ip_hdr.len() < IPV4_HEADER_LEN || udp_hdr.len() < wire::UDP_HEADER_LEN {
            self.counters.rx_truncated += 1;
            return;
        }
        let Some(view) = self.check(data) else { return };
        if self.cfg.verify_icrc && !view.icrc_ok(ip_hdr, udp_hdr) {
            self.counters.rx_bad_icrc += 1;
            return;
        }
        let src = Ipv4Addr::new(ip_hdr[12], ip_hdr[13], ip_hdr[14], ip_hdr[15]);
        let ce = ip_hdr[1] & 3 == 3;
        self.handle_ib(now, src, ce, IpHeader::Real(ip_hdr), data, mem);
    }

    fn check<'a>(&mut self, data: &'a [u8]) -> Option<PacketView<&'a [u8]>> {
        match PacketView::new_checked(data) {
            Ok(v) => Some(v),
            Err(e) => {
                match e {
                    WireError::Truncated => self.counters.rx_truncated += 1,
                    WireError::UnknownOpcode(_) => self.counters.rx_unknown_opcode += 1,
                    _ => self.counters.rx_malformed += 1,
                }
                None
            }
        }
    }

    fn handle_ib(
        &mut self,
        now: u64,
        src: Ipv4Addr,
        ce: bool,
        ip: IpHeader<'_>,
        data: &[u8],
        mem: &mut dyn Memory,
    ) {
        let pkt = match Packet::parse(data) {
            Ok(p) => p,
            Err(_) => {
                self.counters.rx_malformed += 1;
                return;
            }
        };
        if pkt.bth.tver != 0 || (pkt.bth.pkey & 0x7fff) != (self.cfg.pkey & 0x7fff) {
            self.counters.rx_bad_bth += 1;
            return;
        }
        // A UD QP is found by its number alone (any source may send to it), an RC/UC QP by
        // its peer and number.
        let ud = pkt.bth.opcode.is_ud();
        if ud && pkt.bth.dest_qpn == GSI_QPN && self.gsi_receive(now, src, &pkt) {
            return;
        }
        let found = if ud {
            self.ud_by_qpn.get(&pkt.bth.dest_qpn)
        } else {
            self.by_key.get(&(src, pkt.bth.dest_qpn))
        };
        let Some(&i) = found else {
            self.counters.rx_unknown_qp += 1;
            return;
        };
        self.counters.rx_pkts += 1;
        if ce {
            self.counters.rx_ecn_ce += 1;
        }
        let RoceEndpoint {
            cfg,
            qps,
            ud: uds,
            completions,
            counters,
            ..
        } = self;
        let mut ctx = Ctx {
            cfg,
            mem,
            completions,
            counters,
            now,
        };
        if ud {
            uds[i].on_packet(&mut ctx, src, ip, &pkt);
        } else {
            qps[i].on_packet(&mut ctx, &pkt);
        }
    }

    /// The next datagram to send, written into `buf` (at least MTU + 80 bytes); QPs take
    /// turns.
    pub fn poll_transmit(
        &mut self,
        now: u64,
        buf: &mut [u8],
        mem: &mut dyn Memory,
    ) -> Option<Transmit> {
        loop {
            let t = self.next_transmit(now, buf, mem)?;
            if t.dst != self.cfg.local_ip || buf[0] & 0xe0 != wire::UD_PREFIX {
                return Some(t);
            }
            // A UD datagram to this host's own address: a NIC loops it back without the
            // wire (sent there, it would never come back).
            let d = buf[..t.len].to_vec();
            self.counters.ud_looped_back += 1;
            self.handle_datagram(now, t.dst, t.src_port, false, &d, mem);
        }
    }

    fn next_transmit(
        &mut self,
        now: u64,
        buf: &mut [u8],
        mem: &mut dyn Memory,
    ) -> Option<Transmit> {
        // Connection management first: it is rare and others wait for it.
        if let Some(t) = self.gsi_transmit(buf) {
            return Some(t);
        }
        let nrc = self.qps.len();
        let n = nrc + self.ud.len();
        let RoceEndpoint {
            cfg,
            qps,
            ud,
            completions,
            counters,
            rr,
            ..
        } = self;
        let mut ctx = Ctx {
            cfg,
            mem,
            completions,
            counters,
            now,
        };
        for k in 0..n {
            let i = (*rr + k) % n;
            if i >= nrc {
                let q = &mut ud[i - nrc];
                if !q.has_work() {
                    continue;
                }
                let src_port = super::engine::qp_source_port(q.qpn);
                if let Some((len, dst)) = q.poll_transmit(&mut ctx, buf) {
                    *rr = (i + 1) % n;
                    ctx.counters.tx_pkts += 1;
                    ctx.counters.tx_bytes += len as u64;
                    return Some(Transmit {
                        dst,
                        src_port,
                        dst_port: wire::UDP_PORT,
                        len,
                        port: 0,
                    });
                }
                continue;
            }
            let qp = &mut qps[i];
            if let Some(len) = qp.poll_transmit(&mut ctx, buf) {
                *rr = (i + 1) % n;
                ctx.counters.tx_pkts += 1;
                ctx.counters.tx_bytes += len as u64;
                return Some(Transmit {
                    dst: qp.peer,
                    src_port: qp.src_port,
                    dst_port: wire::UDP_PORT,
                    len,
                    port: 0,
                });
            }
        }
        None
    }

    pub fn poll_timeout(&self) -> Option<u64> {
        let cm = self.cm.as_ref().and_then(|c| c.poll_timeout());
        self.qps
            .iter()
            .filter_map(|q| q.next_deadline())
            .chain(cm)
            .min()
    }

    pub fn handle_timeout(&mut self, now: u64) {
        if let Some(cm) = self.cm.as_mut() {
            if cm.poll_timeout().is_some_and(|t| t <= now) {
                cm.handle_timeout(now);
                self.apply_ended();
            }
        }
        let RoceEndpoint {
            cfg,
            qps,
            completions,
            counters,
            ..
        } = self;
        // Timers never touch memory.
        let mut nomem = NoMemory;
        let mut ctx = Ctx {
            cfg,
            mem: &mut nomem,
            completions,
            counters,
            now,
        };
        for qp in qps.iter_mut() {
            if qp.next_deadline().is_some_and(|t| t <= now) {
                qp.on_timeout(&mut ctx);
            }
        }
    }

    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Give back the spare queue capacity of every QP and of the endpoint's own queues
    /// (see [`Transport::compact_idle`]); nothing queued is dropped.
    pub fn compact_idle(&mut self) {
        for q in &mut self.qps {
            q.compact();
        }
        self.completions.shrink_to_fit();
        self.events.shrink_to_fit();
    }

    /// Engine-independent totals.
    pub fn totals(&self) -> TransportTotals {
        let k = &self.counters;
        TransportTotals {
            tx_pkts: k.tx_pkts,
            tx_payload_bytes: k.tx_payload_bytes,
            retx_pkts: k.retx_pkts,
            rx_pkts: k.rx_pkts,
            rx_duplicates: k.rx_duplicates,
            timeouts: k.timeouts,
            nacks_sent: k.seq_naks_sent + k.rnr_naks_sent + k.fatal_naks_sent,
            nacks_received: k.seq_naks_received + k.rnr_naks_received + k.fatal_naks_received,
        }
    }
}

/// A [`Memory`] that refuses everything (timer handling needs none).
struct NoMemory;

impl Memory for NoMemory {
    fn read_local(
        &mut self,
        _: u32,
        _: u32,
        _: u64,
        _: &mut [u8],
    ) -> Result<(), crate::mem::MemError> {
        Err(crate::mem::MemError::UnknownKey)
    }
    fn write_local(
        &mut self,
        _: u32,
        _: u32,
        _: u64,
        _: &[u8],
    ) -> Result<(), crate::mem::MemError> {
        Err(crate::mem::MemError::UnknownKey)
    }
    fn check_remote(
        &mut self,
        _: u32,
        _: u32,
        _: u64,
        _: u64,
        _: u32,
    ) -> Result<(), crate::mem::MemError> {
        Err(crate::mem::MemError::UnknownKey)
    }
    fn read_remote(
        &mut self,
        _: u32,
        _: u32,
        _: u64,
        _: &mut [u8],
    ) -> Result<(), crate::mem::MemError> {
        Err(crate::mem::MemError::UnknownKey)
    }
    fn write_remote(
        &mut self,
        _: u32,
        _: u32,
        _: u64,
        _: &[u8],
    ) -> Result<(), crate::mem::MemError> {
        Err(crate::mem::MemError::UnknownKey)
    }
    fn atomic_remote(
        &mut self,
        _: u32,
        _: u32,
        _: u64,
        _: crate::mem::AtomicOp,
    ) -> Result<u64, crate::mem::MemError> {
        Err(crate::mem::MemError::UnknownKey)
    }
}

impl Transport for RoceEndpoint {
    fn receive(&mut self, now: u64, d: &RxDatagram<'_>, mem: &mut dyn Memory) {
        if d.ip_hdr.is_empty() {
            RoceEndpoint::handle_datagram(self, now, d.src, d.src_port, d.ce, d.payload, mem)
        } else {
            // The ICRC covers the real headers: check it over them, not over canonical ones.
            RoceEndpoint::handle_datagram_ip(self, now, d.ip_hdr, d.udp_hdr, d.payload, mem)
        }
    }
    fn transmit(
        &mut self,
        now: u64,
        buf: &mut [u8],
        mem: &mut dyn Memory,
        _ready: u64,
    ) -> Option<Transmit> {
        RoceEndpoint::poll_transmit(self, now, buf, mem)
    }
    fn close(&mut self, _c: ConnId) -> Result<(), PostError> {
        Err(PostError::Unsupported)
    }

    fn connect(&mut self, peer: Ipv4Addr) -> ConnId {
        RoceEndpoint::connect(self, peer)
    }
    fn create_stream(
        &mut self,
        c: ConnId,
        local: u32,
        remote: u32,
        pd: u32,
    ) -> Result<(), PostError> {
        RoceEndpoint::create_stream(self, c, local, remote, pd)
    }
    fn destroy_stream(&mut self, c: ConnId, local: u32) -> Result<(), PostError> {
        RoceEndpoint::destroy_qp(self, c, local)
    }
    fn post_send(&mut self, c: ConnId, stream: u32, wr: SendWr) -> Result<(), PostError> {
        RoceEndpoint::post_send(self, c, stream, wr)
    }
    fn post_recv(&mut self, c: ConnId, stream: u32, wr: RecvWr) -> Result<(), PostError> {
        RoceEndpoint::post_recv(self, c, stream, wr)
    }
    fn poll_timeout(&self) -> Option<u64> {
        RoceEndpoint::poll_timeout(self)
    }
    fn handle_timeout(&mut self, now: u64) {
        RoceEndpoint::handle_timeout(self, now)
    }
    fn poll_completion(&mut self) -> Option<Completion> {
        RoceEndpoint::poll_completion(self)
    }
    fn poll_event(&mut self) -> Option<Event> {
        RoceEndpoint::poll_event(self)
    }
    fn compact_idle(&mut self) {
        RoceEndpoint::compact_idle(self)
    }
    fn totals(&self) -> TransportTotals {
        RoceEndpoint::totals(self)
    }
    fn udp_port(&self) -> u16 {
        wire::UDP_PORT
    }
    fn accepts_connections(&self) -> bool {
        false
    }
    fn engine(&self) -> crate::api::EngineRef<'_> {
        crate::api::EngineRef::Roce(self)
    }
    fn engine_mut(&mut self) -> crate::api::EngineMut<'_> {
        crate::api::EngineMut::Roce(self)
    }
}
