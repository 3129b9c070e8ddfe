//! IBTA UD over RoCEv2 between two endpoints in memory: delivery with the GRH area, the
//! immediate, the Q_Key rules (mismatch dropped, controlled Q_Key), drops without a posted
//! receive (and no ACK ever), the MTU limit (IBTA C10-93.1.1) and the packets' bytes (BTH + DETH).

use ferroce_transport::mem::{access, Regions};
use ferroce_transport::roce::wire::{self, Opcode, Packet, PacketView, QKEY_CONTROLLED};
use ferroce_transport::roce::{RoceConfig, RoceEndpoint, UdDest, GRH_LEN};
use ferroce_transport::*;
use std::net::Ipv4Addr;

const A: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 9, 0, 2);
const QA: u32 = 0x00_0101;
const QB: u32 = 0x00_0202;
const QKEY: u32 = 0x1111_2222;
const PD: u32 = 1;
const BUF: usize = 8192;

struct Side {
    ep: RoceEndpoint,
    mem: Regions,
    key: u32,
}

fn side(ip: Ipv4Addr, qpn: u32, qkey: u32) -> Side {
    let mut ep = RoceEndpoint::new(RoceConfig::new(ip));
    ep.create_ud_qp(qpn, PD, qkey, 0x10).unwrap();
    let mut mem = Regions::new();
    let key = mem.register(PD, 0, BUF, access::LOCAL_WRITE);
    Side { ep, mem, key }
}

fn sge(key: u32, addr: u64, len: u32) -> SgList {
    let mut s = SgList::new();
    s.push(Sge {
        lkey: key,
        addr,
        len,
    });
    s
}

impl Side {
    fn send(&mut self, qpn: u32, to: UdDest, data: &[u8], imm: Option<u32>) {
        // The payload sits at offset 4096 of the region.
        self.mem.region_mut(self.key).unwrap().data[4096..4096 + data.len()].copy_from_slice(data);
        let wr = SendWr {
            wr_id: 7,
            op: SendOp::Send { imm },
            sgl: sge(self.key, 4096, data.len() as u32),
            signaled: true,
            solicited: false,
            fence: false,
        };
        self.ep.post_ud_send(qpn, to, wr).unwrap();
    }
    fn recv(&mut self, qpn: u32, wr_id: u64, len: u32) {
        let wr = RecvWr {
            wr_id,
            sgl: sge(self.key, 0, len),
        };
        self.ep.post_ud_recv(qpn, wr).unwrap();
    }
    /// Every datagram this side sends now.
    fn drain(&mut self, from: Ipv4Addr) -> Vec<(Vec<u8>, u16, Ipv4Addr)> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 9000];
        while let Some(t) = self.ep.poll_transmit(0, &mut buf, &mut self.mem) {
            let bytes = buf[..t.len].to_vec();
            assert_eq!(t.dst_port, 4791);
            let v = PacketView::new_checked(&bytes[..]).unwrap();
            let flow = wire::Flow {
                src: from,
                dst: t.dst,
                src_port: t.src_port,
                dst_port: 4791,
            };
            assert!(
                v.icrc_ok_canonical(&flow),
                "ICRC over the canonical headers"
            );
            out.push((bytes, t.src_port, t.dst));
        }
        out
    }
    fn completions(&mut self) -> Vec<Completion> {
        std::iter::from_fn(|| self.ep.poll_completion()).collect()
    }
    fn bytes(&self, at: usize, n: usize) -> Vec<u8> {
        self.mem.region(self.key).unwrap().data[at..at + n].to_vec()
    }
}

fn to_b(qkey: u32) -> UdDest {
    UdDest {
        ip: B,
        qpn: QB,
        qkey,
    }
}

/// A's datagrams handed to B as the simulator does (no IPv4 header: canonical).
fn deliver(a: &mut Side, b: &mut Side) -> usize {
    let pkts = a.drain(A);
    for (p, sport, dst) in &pkts {
        assert_eq!(*dst, B);
        b.ep.handle_datagram(0, A, *sport, false, p, &mut b.mem);
    }
    pkts.len()
}

#[test]
fn ud_send_delivers_behind_the_grh_with_source_and_immediate() {
    let mut a = side(A, QA, QKEY);
    let mut b = side(B, QB, QKEY);
    b.recv(QB, 1, 2048);
    a.send(QA, to_b(QKEY), b"hello, ud", Some(0xfeed_f00d));
    let pkts = a.drain(A);
    assert_eq!(pkts.len(), 1);
    let (p, sport, _) = &pkts[0];
    let pkt = Packet::parse(p).unwrap();
    assert_eq!(pkt.bth.opcode, Opcode::UdSendOnlyImm);
    assert_eq!(p[0], 0x65);
    assert_eq!(pkt.bth.dest_qpn, QB);
    assert_eq!(pkt.bth.psn, 0x10, "the QP's first PSN");
    let d = pkt.ext.deth.unwrap();
    assert_eq!((d.qkey, d.src_qpn), (QKEY, QA));
    assert_eq!(pkt.ext.imm, Some(0xfeed_f00d));
    assert_eq!(pkt.payload, b"hello, ud");
    assert_eq!(*sport, ferroce_transport::roce::engine::qp_source_port(QA));
    // The send completes once the datagram is out.
    let c = a.completions();
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].wr_id, c[0].status, c[0].op, c[0].byte_len),
        (7, Status::Success, CompletionOp::Send, 9)
    );

    b.ep.handle_datagram(0, A, *sport, false, p, &mut b.mem);
    let c = b.completions();
    assert_eq!(c.len(), 1);
    let c = c[0];
    assert_eq!(c.status, Status::Success);
    assert_eq!(c.op, CompletionOp::Recv);
    assert_eq!(c.stream, QB);
    assert_eq!(
        c.byte_len as usize,
        GRH_LEN + 9,
        "byte_len counts the GRH area"
    );
    assert_eq!(c.imm, Some(0xfeed_f00d));
    assert_eq!(c.ud_src, Some(UdSource { ip: A, qpn: QA }));
    // GRH area: 20 zero bytes, then the IPv4 header (RoCEv2 over IPv4, as rxe writes it).
    let grh = b.bytes(0, GRH_LEN);
    assert_eq!(&grh[..20], &[0u8; 20]);
    let ip = &grh[20..];
    assert_eq!(ip[0], 0x45);
    assert_eq!(ip[9], 17);
    assert_eq!(&ip[12..16], &A.octets());
    assert_eq!(&ip[16..20], &B.octets());
    assert_eq!(
        u16::from_be_bytes([ip[2], ip[3]]) as usize,
        20 + 8 + p.len(),
        "total length of the datagram"
    );
    assert_eq!(wire::ipv4_checksum(ip), 0, "a valid header");
    assert_eq!(b.bytes(GRH_LEN, 9), b"hello, ud");
    // No ACK, nothing at all goes back.
    assert!(b.drain(B).is_empty());
    assert_eq!(b.ep.counters().ud_delivered, 1);
}

#[test]
fn grh_holds_the_real_ipv4_header_when_the_embedder_has_it() {
    let mut a = side(A, QA, QKEY);
    let mut b = side(B, QB, QKEY);
    b.recv(QB, 1, 256);
    a.send(QA, to_b(QKEY), b"x", None);
    let (p, sport, _) = a.drain(A).remove(0);
    // An rxe-like header: identification 0x1234, TTL 63, no DF. The ICRC covers the
    // identification, so compute it over this header.
    let mut h = wire::ipv4_udp_headers(A, B, sport, 4791, p.len());
    h[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
    h[6] = 0;
    h[8] = 63;
    h[10..12].fill(0);
    let ck = wire::ipv4_checksum(&h[..20]);
    h[10..12].copy_from_slice(&ck.to_be_bytes());
    let mut p = p;
    PacketView::new_checked(&mut p[..])
        .unwrap()
        .fill_icrc(&h[..20], &h[20..]);
    b.ep.handle_datagram_ip(0, &h[..20], &h[20..], &p, &mut b.mem);
    let c = b.completions();
    assert_eq!(c.len(), 1, "{:?}", b.ep.counters());
    assert_eq!(c[0].status, Status::Success);
    assert_eq!(b.bytes(20, 20), h[..20].to_vec(), "the header as received");
    assert_eq!(b.bytes(GRH_LEN, 1), b"x");
}

#[test]
fn wrong_qkey_is_a_counted_drop_and_the_receive_stays() {
    let mut a = side(A, QA, QKEY);
    let mut b = side(B, QB, QKEY);
    b.recv(QB, 1, 256);
    a.send(QA, to_b(QKEY ^ 1), b"nope", None);
    assert_eq!(deliver(&mut a, &mut b), 1);
    assert!(b.completions().is_empty());
    assert_eq!(b.ep.counters().ud_bad_qkey, 1);
    // The receive is still there for the next datagram with the right Q_Key.
    a.send(QA, to_b(QKEY), b"yes", None);
    deliver(&mut a, &mut b);
    let c = b.completions();
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].wr_id, c[0].byte_len), (1, GRH_LEN as u32 + 3));
    assert_eq!(b.bytes(GRH_LEN, 3), b"yes");
}

#[test]
fn controlled_qkey_means_the_senders_own() {
    // A's own Q_Key is B's: a work request with the high bit set sends A's (IBTA 10.2.4).
    let mut a = side(A, QA, QKEY);
    let mut b = side(B, QB, QKEY);
    b.recv(QB, 1, 256);
    a.send(QA, to_b(QKEY_CONTROLLED | 5), b"ctl", None);
    let pkts = a.drain(A);
    let pkt = Packet::parse(&pkts[0].0).unwrap();
    assert_eq!(pkt.ext.deth.unwrap().qkey, QKEY);
    b.ep.handle_datagram(0, A, pkts[0].1, false, &pkts[0].0, &mut b.mem);
    assert_eq!(b.completions().len(), 1);
    // And a changed Q_Key is the one checked from then on.
    b.ep.set_ud_qkey(QB, 0x77).unwrap();
    assert_eq!(b.ep.ud_qkey(QB), Some(0x77));
    b.recv(QB, 2, 256);
    a.send(QA, to_b(QKEY), b"old", None);
    deliver(&mut a, &mut b);
    assert!(b.completions().is_empty());
    assert_eq!(b.ep.counters().ud_bad_qkey, 1);
}

#[test]
fn no_posted_receive_drops_without_any_answer() {
    let mut a = side(A, QA, QKEY);
    let mut b = side(B, QB, QKEY);
    for i in 0..3u8 {
        a.send(QA, to_b(QKEY), &[i; 10], None);
    }
    assert_eq!(deliver(&mut a, &mut b), 3);
    assert!(b.completions().is_empty());
    assert_eq!(b.ep.counters().ud_no_recv, 3);
    assert!(b.drain(B).is_empty(), "UD sends no ACK or NAK");
    assert_eq!(b.ep.poll_timeout(), None, "and keeps no timer");
    // Sender side: three completions, PSNs counted per QP, nothing to resend.
    assert_eq!(a.completions().len(), 3);
    assert_eq!(a.ep.counters().ud_sent, 3);
    assert!(a.drain(A).is_empty());
    // A datagram for a QPN nobody has is counted as such.
    a.send(
        QA,
        UdDest {
            ip: B,
            qpn: 0x999,
            qkey: QKEY,
        },
        b"?",
        None,
    );
    deliver(&mut a, &mut b);
    assert_eq!(b.ep.counters().rx_unknown_qp, 1);
}

#[test]
fn psns_count_per_qp() {
    let mut a = side(A, QA, QKEY);
    for _ in 0..3 {
        a.send(QA, to_b(QKEY), b"p", None);
    }
    let psns: Vec<u32> = a
        .drain(A)
        .iter()
        .map(|(p, _, _)| Packet::parse(p).unwrap().bth.psn)
        .collect();
    assert_eq!(psns, vec![0x10, 0x11, 0x12]);
}

#[test]
fn messages_above_the_mtu_are_sent_as_nothing() {
    let mut a = side(A, QA, QKEY);
    let mtu = a.ep.config().ud_mtu;
    let big = vec![0xab; mtu as usize + 1];
    a.mem.region_mut(a.key).unwrap().data[..big.len()].copy_from_slice(&big);
    let key = a.key;
    let wr = |n: usize| SendWr {
        wr_id: 1,
        op: SendOp::Send { imm: None },
        sgl: sge(key, 0, n as u32),
        signaled: true,
        solicited: false,
        fence: false,
    };
    // IBTA C10-93.1.1 (and rxe): a UD message above the MTU emits no packet and is no error.
    a.ep.post_ud_send(QA, to_b(QKEY), wr(mtu as usize + 1))
        .unwrap();
    a.ep.post_ud_send(QA, to_b(QKEY), wr(mtu as usize)).unwrap();
    let pkts = a.drain(A);
    assert_eq!(pkts.len(), 1);
    let p = Packet::parse(&pkts[0].0).unwrap();
    assert_eq!(p.payload.len(), mtu as usize);
    assert_eq!(p.bth.psn, 0x11, "the dropped message took a PSN, as in rxe");
    let c = a.completions();
    assert_eq!(c.len(), 2);
    assert!(c.iter().all(|c| c.status == Status::Success));
    assert_eq!(a.ep.counters().ud_too_long, 1);
    // WRITE does not exist on UD.
    let w = SendWr {
        op: SendOp::Write {
            rkey: 1,
            raddr: 0,
            imm: None,
        },
        ..wr(4)
    };
    assert_eq!(
        a.ep.post_ud_send(QA, to_b(QKEY), w),
        Err(PostError::Unsupported)
    );
}

#[test]
fn a_receive_too_small_for_grh_and_payload_completes_in_error() {
    let mut a = side(A, QA, QKEY);
    let mut b = side(B, QB, QKEY);
    // Room for the GRH and 3 bytes: a 4-byte payload does not fit.
    b.recv(QB, 1, GRH_LEN as u32 + 3);
    a.send(QA, to_b(QKEY), b"four", None);
    deliver(&mut a, &mut b);
    let c = b.completions();
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].status, Status::LocalLength);
}

#[test]
fn destroying_a_ud_qp_flushes_its_queues() {
    let mut b = side(B, QB, QKEY);
    b.recv(QB, 1, 256);
    b.recv(QB, 2, 256);
    b.ep.destroy_ud_qp(QB).unwrap();
    let c = b.completions();
    assert_eq!(c.len(), 2);
    assert!(c.iter().all(|c| c.status == Status::Flushed));
    assert_eq!(
        b.ep.post_ud_recv(
            QB,
            RecvWr {
                wr_id: 3,
                sgl: SgList::new()
            }
        ),
        Err(PostError::UnknownStream)
    );
    b.ep.create_ud_qp(QB, PD, QKEY, 0).unwrap();
}

#[test]
fn a_datagram_to_the_own_address_loops_back() {
    // Two UD QPs of one endpoint: the datagram never leaves (no Transmit), as on a NIC.
    let mut a = side(A, QA, QKEY);
    a.ep.create_ud_qp(QB, PD, QKEY, 0).unwrap();
    a.recv(QB, 9, 256);
    a.send(
        QA,
        UdDest {
            ip: A,
            qpn: QB,
            qkey: QKEY,
        },
        b"self",
        None,
    );
    assert!(a.drain(A).is_empty());
    let c = a.completions();
    assert_eq!(c.len(), 2, "{c:?}");
    let r = c.iter().find(|c| c.op == CompletionOp::Recv).unwrap();
    assert_eq!(r.ud_src, Some(UdSource { ip: A, qpn: QA }));
    assert_eq!(a.bytes(GRH_LEN, 4), b"self");
    assert_eq!(a.ep.counters().ud_looped_back, 1);
}

#[test]
fn cut_and_flipped_ud_packets_never_panic() {
    let mut a = side(A, QA, QKEY);
    let mut b = side(B, QB, QKEY);
    a.send(QA, to_b(QKEY), &[5u8; 64], Some(1));
    let (p, sport, _) = a.drain(A).remove(0);
    let mut nocheck = side(B, QB, QKEY);
    let mut cfg = nocheck.ep.config().clone();
    cfg.verify_icrc = false;
    nocheck.ep = RoceEndpoint::new(cfg);
    nocheck.ep.create_ud_qp(QB, PD, QKEY, 0).unwrap();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for i in 0..2000usize {
        b.recv(QB, i as u64, 128);
        let mut q = p.clone();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let at = (x as usize) % q.len();
        q[at] ^= 1 << (x >> 60 & 7);
        let cut = (x >> 20) as usize % (q.len() + 1);
        b.ep.handle_datagram(0, A, sport, false, &q, &mut b.mem);
        b.ep.handle_datagram(0, A, sport, false, &q[..cut], &mut b.mem);
        // Without the ICRC check the flipped headers reach the UD path itself.
        nocheck.recv(QB, i as u64, 128);
        nocheck
            .ep
            .handle_datagram(0, A, sport, false, &q, &mut nocheck.mem);
        nocheck
            .ep
            .handle_datagram(0, A, sport, false, &q[..cut], &mut nocheck.mem);
    }
    let k = b.ep.counters();
    assert!(k.rx_bad_icrc > 0 && k.rx_truncated > 0, "{k:?}");
    let k = nocheck.ep.counters();
    assert!(k.ud_delivered > 0 && k.ud_bad_qkey > 0, "{k:?}");
}
