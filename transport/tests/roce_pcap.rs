//! The RoCEv2 codec against 84 packets captured from Linux soft-RoCE (rxe):
//! spec/vectors/rxe-sample.pcap. Every packet parses, its fields are what the capture says,
//! the ICRC recomputed over the real IPv4/UDP headers matches its trailer, and
//! parse → emit gives back the identical bytes.
//!
//! `cargo test -p ferroce-transport --test roce_pcap -- --nocapture` prints the packets.

use ferroce_transport::roce::wire::{
    self, icrc, ipv4_checksum, ipv4_udp_headers, NakCode, Opcode, Packet, PacketView, Reth,
    Syndrome, UDP_PORT,
};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

const PCAP: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../spec/vectors/rxe-sample.pcap"
);

/// One captured RoCEv2 frame, split into its layers.
struct Frame {
    ip: Vec<u8>,
    udp: Vec<u8>,
    ib: Vec<u8>,
}

impl Frame {
    fn src(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.ip[12], self.ip[13], self.ip[14], self.ip[15])
    }
    fn dst(&self) -> Ipv4Addr {
        Ipv4Addr::new(self.ip[16], self.ip[17], self.ip[18], self.ip[19])
    }
    fn sport(&self) -> u16 {
        u16::from_be_bytes([self.udp[0], self.udp[1]])
    }
    fn ident(&self) -> u16 {
        u16::from_be_bytes([self.ip[4], self.ip[5]])
    }
}

/// A tiny pcap reader (classic format, either byte order, µs or ns timestamps) that keeps
/// Ethernet / IPv4 / UDP-to-4791 frames.
fn read_pcap(bytes: &[u8]) -> Vec<Frame> {
    assert!(bytes.len() >= 24, "pcap too short");
    let magic = u32::from_le_bytes(bytes[0..4].try_into().unwrap());
    let le = match magic {
        0xa1b2_c3d4 | 0xa1b2_3c4d => true,
        0xd4c3_b2a1 | 0x4d3c_b2a1 => false,
        m => panic!("not a pcap file (magic {m:#x})"),
    };
    let u32_at = |b: &[u8], o: usize| {
        let a: [u8; 4] = b[o..o + 4].try_into().unwrap();
        if le {
            u32::from_le_bytes(a)
        } else {
            u32::from_be_bytes(a)
        }
    };
    assert_eq!(u32_at(bytes, 20), 1, "link type must be Ethernet");
    let mut frames = Vec::new();
    let mut off = 24;
    while off + 16 <= bytes.len() {
        let incl = u32_at(bytes, off + 8) as usize;
        let data = &bytes[off + 16..off + 16 + incl];
        off += 16 + incl;
        let mut e = 12;
        let mut ethertype = u16::from_be_bytes([data[e], data[e + 1]]);
        while ethertype == 0x8100 {
            e += 4;
            ethertype = u16::from_be_bytes([data[e], data[e + 1]]);
        }
        if ethertype != 0x0800 {
            continue;
        }
        let ip0 = e + 2;
        let ihl = ((data[ip0] & 0x0f) as usize) * 4;
        let total = u16::from_be_bytes([data[ip0 + 2], data[ip0 + 3]]) as usize;
        if data[ip0 + 9] != 17 {
            continue;
        }
        let udp0 = ip0 + ihl;
        let dport = u16::from_be_bytes([data[udp0 + 2], data[udp0 + 3]]);
        if dport != UDP_PORT {
            continue;
        }
        let udp_len = u16::from_be_bytes([data[udp0 + 4], data[udp0 + 5]]) as usize;
        assert_eq!(udp_len + ihl, total, "UDP and IPv4 lengths disagree");
        frames.push(Frame {
            ip: data[ip0..udp0].to_vec(),
            udp: data[udp0..udp0 + 8].to_vec(),
            // The IPv4 total length trims any Ethernet padding.
            ib: data[udp0 + 8..ip0 + total].to_vec(),
        });
    }
    frames
}

fn frames() -> Vec<Frame> {
    let bytes = std::fs::read(PCAP).expect("spec/vectors/rxe-sample.pcap");
    read_pcap(&bytes)
}

/// spec/vectors/rxe-ud-sample.pcap: the first two datagrams each way of `ibv_ud_pingpong -g 1
/// -c -s 1024` between rxe (Linux 6.1, 198.18.0.2, QPN 0x11) and ferroce (the verbs shim's
/// RoCEv2 device, 198.18.0.11, QPN 0x267010), captured on the VM's NIC by `ferroce interop`.
const UD_PCAP: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../spec/vectors/rxe-ud-sample.pcap"
);

#[test]
fn ud_datagrams_of_rxe_and_ferroce_parse_match_icrc_round_trip_and_deliver() {
    let bytes = std::fs::read(UD_PCAP).expect("spec/vectors/rxe-ud-sample.pcap");
    let frames = read_pcap(&bytes);
    assert_eq!(frames.len(), 4);
    let (rxe, fer) = (Ipv4Addr::new(198, 18, 0, 2), Ipv4Addr::new(198, 18, 0, 11));
    for (i, f) in frames.iter().enumerate() {
        let p = Packet::parse(&f.ib).unwrap_or_else(|e| panic!("packet {i}: {e}"));
        assert_eq!(p.bth.opcode, Opcode::UdSendOnly, "packet {i}");
        assert_eq!(f.ib[0], 0x64);
        assert_eq!(p.payload.len(), 1024);
        let d = p.ext.deth.expect("a DETH");
        assert_eq!(d.qkey, 0x1111_1111, "ibv_ud_pingpong's Q_Key");
        let (from_rxe, src_qp, dst_qp) = if f.src() == rxe {
            (true, 0x11, 0x26_7010)
        } else {
            (false, 0x26_7010, 0x11)
        };
        assert_eq!((d.src_qpn, p.bth.dest_qpn), (src_qp, dst_qp), "packet {i}");
        assert_eq!(f.dst(), if from_rxe { fer } else { rxe });
        let view = PacketView::new_checked(&f.ib[..]).unwrap();
        assert!(
            view.icrc_ok(&f.ip, &f.udp),
            "packet {i}: ICRC over the real headers"
        );
        if !from_rxe {
            // ferroce sends the canonical headers (identification 0).
            assert_eq!(f.ident(), 0);
            let flow = wire::Flow {
                src: fer,
                dst: rxe,
                src_port: f.sport(),
                dst_port: UDP_PORT,
            };
            assert!(view.icrc_ok_canonical(&flow));
        }
        let mut out = vec![0u8; f.ib.len()];
        let n = p.emit(&mut out, &f.ip, &f.udp).unwrap();
        assert_eq!(&out[..n], &f.ib[..], "packet {i}: parse -> emit");
    }
    // The engine as ferroce's host takes rxe's datagram: payload behind the GRH area that
    // ends with rxe's IPv4 header as received, source (rxe, QPN 0x11).
    let f = &frames[0];
    let mut ep = RoceEndpoint::new(RoceConfig::new(fer));
    ep.create_ud_qp(0x26_7010, 1, 0x1111_1111, 0).unwrap();
    let mut mem = KeyedMem(HashMap::new());
    mem.add(7, 0, vec![0; 2048]);
    let mut sgl = ferroce_transport::SgList::new();
    sgl.push(Sge {
        lkey: 7,
        addr: 0,
        len: 2048,
    });
    ep.post_ud_recv(0x26_7010, RecvWr { wr_id: 9, sgl })
        .unwrap();
    ep.handle_datagram_ip(0, &f.ip, &f.udp, &f.ib, &mut mem);
    let c = ep.poll_completion().expect("a receive completion");
    assert_eq!(
        (c.wr_id, c.status, c.byte_len),
        (9, Status::Success, 40 + 1024)
    );
    assert_eq!(
        c.ud_src,
        Some(ferroce_transport::UdSource { ip: rxe, qpn: 0x11 })
    );
    let buf = mem.get(7);
    assert_eq!(&buf[..20], &[0u8; 20]);
    assert_eq!(&buf[20..40], &f.ip[..20]);
    assert_eq!(&buf[40..40 + 1024], Packet::parse(&f.ib).unwrap().payload);
}

fn describe(p: &Packet) -> String {
    let mut s = String::new();
    if let Some(r) = p.ext.reth {
        s += &format!(
            "RETH va={:#018x} rkey={:#x} len={} ",
            r.va, r.rkey, r.dma_len
        );
    }
    if let Some(a) = p.ext.aeth {
        let syn = match a.syndrome {
            Syndrome::Ack { credits } => format!("ACK credits={credits:#x}"),
            Syndrome::RnrNak { timer } => format!("RNR timer={timer}"),
            Syndrome::Nak(c) => format!("NAK {c:?}"),
            Syndrome::Reserved(v) => format!("reserved {v:#x}"),
        };
        s += &format!("AETH {syn} msn={} ", a.msn);
    }
    if let Some(v) = p.ext.imm {
        s += &format!("imm={v:#x} ");
    }
    if let Some(a) = p.ext.atomic {
        s += &format!("{a:?} ");
    }
    if let Some(v) = p.ext.atomic_ack {
        s += &format!("orig={v:#x} ");
    }
    s
}

// checks: [ROCE-2]
#[test]
fn every_packet_parses_matches_icrc_and_round_trips() {
    let frames = frames();
    assert_eq!(frames.len(), 84, "the capture holds 84 RoCEv2 packets");
    let mut counts: BTreeMap<Opcode, usize> = BTreeMap::new();
    println!(
        "{:>3} {:<15} {:<15} {:>5} {:<26} {:>6} {:>9} A {:>5}  ICRC       fields",
        "#", "src", "dst", "sport", "opcode", "QPN", "PSN", "pay"
    );
    for (i, f) in frames.iter().enumerate() {
        let n = i + 1;
        let view =
            PacketView::new_checked(&f.ib[..]).unwrap_or_else(|e| panic!("packet {n}: view: {e}"));
        let p = Packet::parse(&f.ib).unwrap_or_else(|e| panic!("packet {n}: parse: {e}"));
        *counts.entry(p.bth.opcode).or_default() += 1;

        // ICRC over the real headers, bit-exact.
        let ours = icrc(&f.ip, &f.udp, view.icrc_covered());
        assert_eq!(ours, view.icrc(), "packet {n}: ICRC");
        assert!(view.icrc_ok(&f.ip, &f.udp));

        // Round trip: parse -> emit (ICRC recomputed) -> identical bytes.
        let mut out = vec![0u8; f.ib.len() + 16];
        let len = p
            .emit(&mut out, &f.ip, &f.udp)
            .unwrap_or_else(|e| panic!("packet {n}: emit: {e}"));
        assert_eq!(len, f.ib.len(), "packet {n}: length");
        assert_eq!(&out[..len], &f.ib[..], "packet {n}: bytes");
        assert_eq!(p.buffer_len(), f.ib.len());

        // View and representation agree.
        assert_eq!(view.opcode(), p.bth.opcode);
        assert_eq!(view.psn(), p.bth.psn);
        assert_eq!(view.dest_qpn(), p.bth.dest_qpn);
        assert_eq!(view.ack_req(), p.bth.ack_req);
        assert_eq!(view.payload(), p.payload);
        assert_eq!(view.bth(), p.bth);

        // Fields every rxe packet shares.
        assert_eq!(p.bth.tver, 0);
        assert_eq!(p.bth.pkey, 0xffff);
        assert!(!p.bth.fecn && !p.bth.becn && !p.bth.mig_req && !p.bth.solicited);
        assert_eq!((p.bth.resv6, p.bth.resv7), (0, 0));
        assert_eq!(p.bth.pad as usize, (4 - p.payload.len() % 4) % 4);
        assert!(view.pad_bytes().iter().all(|&b| b == 0));
        assert_eq!(ipv4_checksum(&f.ip), 0, "packet {n}: IPv4 checksum");
        assert!(p.ext.matches(p.bth.opcode));

        // The canonical-header rule: our headers differ from rxe's only in fields the ICRC
        // masks (TOS, checksum) and in the identification, which it covers.
        let mut h = ipv4_udp_headers(f.src(), f.dst(), f.sport(), UDP_PORT, f.ib.len());
        assert_eq!(h[0], f.ip[0]);
        assert_eq!(&h[2..4], &f.ip[2..4], "packet {n}: total length");
        assert_eq!(&h[6..8], &f.ip[6..8], "packet {n}: DF");
        assert_eq!(h[8], f.ip[8], "packet {n}: TTL 64");
        assert_eq!(&h[12..20], &f.ip[12..20]);
        assert_eq!(&h[20..26], &f.udp[0..6]);
        h[4..6].copy_from_slice(&f.ident().to_be_bytes());
        assert_eq!(
            icrc(&h[..20], &h[20..], view.icrc_covered()),
            view.icrc(),
            "packet {n}: canonical headers with rxe's identification"
        );
        if f.ident() != 0 {
            assert!(
                !view.icrc_ok_canonical(&wire::Flow {
                    src: f.src(),
                    dst: f.dst(),
                    src_port: f.sport(),
                    dst_port: UDP_PORT,
                }),
                "packet {n}: identification is covered by the ICRC"
            );
        }

        println!(
            "{n:>3} {:<15} {:<15} {:>5} {:<26} {:>#6x} {:>9} {} {:>5}  {:08x} ok {}",
            f.src().to_string(),
            f.dst().to_string(),
            f.sport(),
            p.bth.opcode.name(),
            p.bth.dest_qpn,
            p.bth.psn,
            p.bth.ack_req as u8,
            p.payload.len(),
            view.icrc(),
            describe(&p)
        );
    }

    println!("\n{:<26} {:>5} {:>6}", "opcode", "code", "count");
    for (op, c) in &counts {
        println!("{:<26} {:>#5x} {:>6}", op.name(), *op as u8, c);
    }
    let want: BTreeMap<Opcode, usize> = [
        (Opcode::SendFirst, 5),
        (Opcode::SendMiddle, 5),
        (Opcode::SendLast, 5),
        (Opcode::SendOnly, 12),
        (Opcode::WriteFirst, 5),
        (Opcode::WriteMiddle, 5),
        (Opcode::WriteLast, 5),
        (Opcode::ReadRequest, 5),
        (Opcode::ReadResponseFirst, 5),
        (Opcode::ReadResponseMiddle, 5),
        (Opcode::ReadResponseLast, 5),
        (Opcode::Acknowledge, 22),
    ]
    .into_iter()
    .collect();
    assert_eq!(counts, want);
}

#[test]
fn fields_checked_by_hand() {
    let f = frames();
    let p = |n: usize| Packet::parse(&f[n - 1].ib).unwrap();
    let ack = |msn| {
        Some(wire::Aeth {
            syndrome: Syndrome::Ack { credits: 0x1f },
            msn,
        })
    };

    // 1: SEND_ONLY of 256 bytes of 0x7b from 10.77.0.3, QP 0x11, AckReq; 2: its ACK.
    let p1 = p(1);
    assert_eq!(p1.bth.opcode, Opcode::SendOnly);
    assert_eq!((p1.bth.dest_qpn, p1.bth.psn), (0x11, 8_188_412));
    assert!(p1.bth.ack_req);
    assert_eq!(p1.payload, &[0x7b; 256][..]);
    assert_eq!(f[0].src(), Ipv4Addr::new(10, 77, 0, 3));
    assert_eq!(f[0].sport(), 49441);
    let p2 = p(2);
    assert_eq!(p2.bth.opcode, Opcode::Acknowledge);
    assert_eq!((p2.bth.dest_qpn, p2.bth.psn), (0x11, 8_188_412));
    assert_eq!(p2.ext.aeth, ack(1));
    assert!(p2.payload.is_empty());
    // 6: the ACK of the second SEND on that QP carries MSN 2.
    assert_eq!(p(6).ext.aeth, ack(2));

    // 21..23: a 3000-byte WRITE in three packets (1024 + 1024 + 952), QP 0x12.
    let w = p(21);
    assert_eq!(w.bth.opcode, Opcode::WriteFirst);
    assert_eq!((w.bth.dest_qpn, w.bth.psn), (0x12, 8_687_406));
    assert_eq!(
        w.ext.reth,
        Some(Reth {
            va: 0x0000_5650_3885_b000,
            rkey: 0x3d8,
            dma_len: 3000
        })
    );
    assert_eq!(w.payload.len(), 1024);
    assert!(!w.bth.ack_req);
    let m = p(22);
    assert_eq!((m.bth.opcode, m.bth.psn), (Opcode::WriteMiddle, 8_687_407));
    assert_eq!((m.ext.reth, m.payload.len()), (None, 1024));
    let l = p(23);
    assert_eq!((l.bth.opcode, l.bth.psn), (Opcode::WriteLast, 8_687_408));
    assert!(l.bth.ack_req);
    assert_eq!(l.payload.len(), 952);
    let a = p(25);
    assert_eq!((a.bth.opcode, a.bth.psn), (Opcode::Acknowledge, 8_687_408));
    assert_eq!(a.ext.aeth, ack(1));

    // 41..45: READ requests of 3000 bytes, QP 0x13; each consumes 3 PSNs.
    let r = p(41);
    assert_eq!(r.bth.opcode, Opcode::ReadRequest);
    assert_eq!((r.bth.dest_qpn, r.bth.psn), (0x13, 9_638_418));
    assert!(r.bth.ack_req);
    assert_eq!(
        r.ext.reth,
        Some(Reth {
            va: 0x0000_5640_7c8e_c000,
            rkey: 0x48a,
            dma_len: 3000
        })
    );
    assert!(r.payload.is_empty());
    assert_eq!(p(42).bth.psn, 9_638_421);
    assert_eq!(p(45).bth.psn, 9_638_430);
    // 46..48: the responses of the first READ: FIRST and LAST carry AETH (MSN 1), MIDDLE
    // none; PSNs are the request's PSN and the two after it.
    let r1 = p(46);
    assert_eq!(
        (r1.bth.opcode, r1.bth.psn),
        (Opcode::ReadResponseFirst, 9_638_418)
    );
    assert_eq!(r1.ext.aeth, ack(1));
    assert_eq!(r1.payload.len(), 1024);
    let r2 = p(47);
    assert_eq!(
        (r2.bth.opcode, r2.bth.psn, r2.ext.aeth),
        (Opcode::ReadResponseMiddle, 9_638_419, None)
    );
    let r3 = p(48);
    assert_eq!(
        (r3.bth.opcode, r3.bth.psn),
        (Opcode::ReadResponseLast, 9_638_420)
    );
    assert_eq!((r3.ext.aeth, r3.payload.len()), (ack(1), 952));
    // The fifth READ's last response: MSN 5.
    let r5 = p(60);
    assert_eq!(
        (r5.bth.opcode, r5.bth.psn, r5.ext.aeth),
        (Opcode::ReadResponseLast, 9_638_432, ack(5))
    );

    // 61..: multi-packet SENDs on QP 0x14, acknowledged at their last packets.
    let s = p(61);
    assert_eq!(
        (s.bth.opcode, s.bth.dest_qpn, s.bth.psn),
        (Opcode::SendFirst, 0x14, 3_866_268)
    );
    assert!(!s.bth.ack_req);
    assert!(p(63).bth.ack_req);
    let a = p(80);
    assert_eq!((a.bth.psn, a.ext.aeth), (3_866_282, ack(5)));

    // 83/84: the exchange with a userspace peer at 10.77.0.1 (QPs 0x27 / 0x123, PSN 256).
    let u = p(83);
    assert_eq!(f[82].src(), Ipv4Addr::new(10, 77, 0, 1));
    assert_eq!(
        (u.bth.opcode, u.bth.dest_qpn, u.bth.psn),
        (Opcode::SendOnly, 0x27, 256)
    );
    assert_eq!(u.payload, &[0x48; 64][..]);
    let a = p(84);
    assert_eq!(
        (a.bth.opcode, a.bth.dest_qpn, a.bth.psn, a.ext.aeth),
        (Opcode::Acknowledge, 0x123, 256, ack(1))
    );
    // No NAK anywhere in the capture.
    assert!(f.iter().all(|x| !matches!(
        Packet::parse(&x.ib).unwrap().ext.aeth.map(|a| a.syndrome),
        Some(Syndrome::Nak(NakCode::PsnSequenceError) | Syndrome::RnrNak { .. })
    )));
}

#[test]
fn corrupted_packets_fail_the_icrc_and_truncations_never_panic() {
    for f in frames() {
        for bit in [0usize, 7, 8 * 5 + 3, f.ib.len() * 8 - 1] {
            let mut b = f.ib.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            if let Ok(v) = PacketView::new_checked(&b[..]) {
                // Bits of BTH byte 4 are masked: flipping FECN/BECN keeps the ICRC.
                assert_eq!(v.icrc_ok(&f.ip, &f.udp), bit / 8 == 4, "bit {bit}");
            }
        }
        for n in 0..f.ib.len() {
            let _ = Packet::parse(&f.ib[..n]);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Interop: the engine plays each of the two rxe hosts of the capture.

use ferroce_transport::mem::{AtomicOp, MemError, Memory};
use ferroce_transport::roce::{QpParams, RoceConfig, RoceEndpoint};
use ferroce_transport::{Completion, CompletionOp, RecvWr, SendOp, SendWr, Sge, Status};
use std::collections::HashMap;

/// Registered memory with keys chosen by the test (rxe's rkeys), bounds-checked.
#[derive(Default)]
struct KeyedMem(HashMap<u32, (u64, Vec<u8>)>);

impl KeyedMem {
    fn add(&mut self, key: u32, addr: u64, data: Vec<u8>) {
        self.0.insert(key, (addr, data));
    }
    fn range(&self, key: u32, addr: u64, len: usize) -> Result<(usize, usize), MemError> {
        let (base, d) = self.0.get(&key).ok_or(MemError::UnknownKey)?;
        let s = addr.checked_sub(*base).ok_or(MemError::OutOfBounds)? as usize;
        if s + len > d.len() {
            return Err(MemError::OutOfBounds);
        }
        Ok((s, s + len))
    }
    fn get(&self, key: u32) -> &[u8] {
        &self.0[&key].1
    }
}

impl Memory for KeyedMem {
    fn read_local(&mut self, _: u32, k: u32, a: u64, buf: &mut [u8]) -> Result<(), MemError> {
        let (s, e) = self.range(k, a, buf.len())?;
        buf.copy_from_slice(&self.0[&k].1[s..e]);
        Ok(())
    }
    fn write_local(&mut self, _: u32, k: u32, a: u64, data: &[u8]) -> Result<(), MemError> {
        let (s, e) = self.range(k, a, data.len())?;
        self.0.get_mut(&k).unwrap().1[s..e].copy_from_slice(data);
        Ok(())
    }
    fn check_remote(&mut self, _: u32, k: u32, a: u64, l: u64, _: u32) -> Result<(), MemError> {
        self.range(k, a, l as usize).map(|_| ())
    }
    fn read_remote(&mut self, _: u32, k: u32, a: u64, buf: &mut [u8]) -> Result<(), MemError> {
        self.read_local(0, k, a, buf)
    }
    fn write_remote(&mut self, _: u32, k: u32, a: u64, data: &[u8]) -> Result<(), MemError> {
        self.write_local(0, k, a, data)
    }
    fn atomic_remote(&mut self, _: u32, _: u32, _: u64, _: AtomicOp) -> Result<u64, MemError> {
        Err(MemError::AccessDenied)
    }
}

const H2: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
const H3: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 3);
const WRITE_VA: u64 = 0x0000_5650_3885_b000;
const WRITE_RKEY: u32 = 0x3d8;
const READ_VA: u64 = 0x0000_5640_7c8e_c000;
const READ_RKEY: u32 = 0x48a;
const LKEY: u32 = 0x500;
const RECV_LKEY: u32 = 0x600;

/// Message payloads as the capture carries them.
struct Data {
    send_11_from3: Vec<u8>,
    send_11_from2: Vec<u8>,
    write: Vec<u8>,
    read: Vec<u8>,
    send_14: Vec<u8>,
}

fn data(f: &[Frame]) -> Data {
    let pay = |ns: &[usize]| -> Vec<u8> {
        ns.iter()
            .flat_map(|&n| Packet::parse(&f[n - 1].ib).unwrap().payload.to_vec())
            .collect()
    };
    Data {
        send_11_from3: pay(&[1]),
        send_11_from2: pay(&[3]),
        write: pay(&[21, 22, 23]),
        read: pay(&[46, 47, 48]),
        send_14: pay(&[61, 62, 63]),
    }
}

fn send_wr(id: u64, op: SendOp, addr: u64, len: u32) -> SendWr {
    SendWr {
        wr_id: id,
        op,
        sgl: [Sge {
            lkey: LKEY,
            addr,
            len,
        }]
        .into_iter()
        .collect(),
        signaled: true,
        solicited: false,
        fence: false,
    }
}

/// The engine as host `me` (10.77.0.2 or .3), with the QPs, PSNs, memory and work requests
/// the rxe host had.
fn host(me: Ipv4Addr, d: &Data) -> (RoceEndpoint, KeyedMem) {
    let peer = if me == H2 { H3 } else { H2 };
    let mut ep = RoceEndpoint::new(RoceConfig::new(me));
    let c = ep.connect(peer);
    // First PSNs of each direction, as the capture shows them (from .3 / from .2).
    let psns: [(u32, u32, u32); 4] = [
        (0x11, 8_188_412, 12_623_098),
        (0x12, 8_687_406, 0),
        (0x13, 9_638_418, 0),
        (0x14, 3_866_268, 0),
    ];
    for (qpn, from3, from2) in psns {
        let (sq_psn, rq_psn) = if me == H3 {
            (from3, from2)
        } else {
            (from2, from3)
        };
        ep.create_qp(
            c,
            QpParams {
                local_qpn: qpn,
                remote_qpn: qpn,
                pd: 0,
                sq_psn,
                rq_psn,
                mtu: 0,
            },
        )
        .unwrap();
    }
    let mut mem = KeyedMem::default();
    mem.add(RECV_LKEY, 0x10_0000, vec![0; 10 * 4096]);
    let recv = |i: u64| RecvWr {
        wr_id: 1000 + i,
        sgl: [Sge {
            lkey: RECV_LKEY,
            addr: 0x10_0000 + i * 4096,
            len: 4096,
        }]
        .into_iter()
        .collect(),
    };
    if me == H2 {
        // The responder of the WRITEs, READs and QP 0x14 SENDs; ping-pong on QP 0x11.
        mem.add(WRITE_RKEY, WRITE_VA, vec![0; 3000]);
        mem.add(READ_RKEY, READ_VA, d.read.clone());
        mem.add(LKEY, 0x1000, d.send_11_from2.clone());
        for i in 0..5 {
            ep.post_recv(c, 0x11, recv(i)).unwrap();
            ep.post_recv(c, 0x14, recv(5 + i)).unwrap();
            ep.post_send(c, 0x11, send_wr(i, SendOp::Send { imm: None }, 0x1000, 256))
                .unwrap();
        }
    } else {
        let mut local = vec![0u8; 0x10000];
        local[..256].copy_from_slice(&d.send_11_from3);
        local[0x1000..0x1000 + 3000].copy_from_slice(&d.write);
        local[0x2000..0x2000 + 3000].copy_from_slice(&d.send_14);
        mem.add(LKEY, 0, local);
        for i in 0..5u64 {
            ep.post_recv(c, 0x11, recv(i)).unwrap();
            ep.post_send(c, 0x11, send_wr(i, SendOp::Send { imm: None }, 0, 256))
                .unwrap();
            let write = SendOp::Write {
                rkey: WRITE_RKEY,
                raddr: WRITE_VA,
                imm: None,
            };
            ep.post_send(c, 0x12, send_wr(10 + i, write, 0x1000, 3000))
                .unwrap();
            let read = SendOp::Read {
                rkey: READ_RKEY,
                raddr: READ_VA,
            };
            ep.post_send(c, 0x13, send_wr(20 + i, read, 0x4000 + i * 0x1000, 3000))
                .unwrap();
            ep.post_send(
                c,
                0x14,
                send_wr(30 + i, SendOp::Send { imm: None }, 0x2000, 3000),
            )
            .unwrap();
        }
    }
    (ep, mem)
}

/// Key of a packet's stream: (destination QPN, is a response).
fn stream_of(ib: &[u8]) -> (u32, bool) {
    let p = Packet::parse(ib).unwrap();
    (p.bth.dest_qpn, p.bth.opcode.is_response())
}

/// Play host `me` against the captured packets of the other host; returns what the engine
/// sent (per stream, without the ICRC), what rxe sent (the same way), the completions and
/// the memory.
#[allow(clippy::type_complexity)]
fn play(
    me: Ipv4Addr,
) -> (
    BTreeMap<(u32, bool), Vec<Vec<u8>>>,
    BTreeMap<(u32, bool), Vec<Vec<u8>>>,
    Vec<Completion>,
    KeyedMem,
) {
    let f = frames();
    let d = data(&f);
    let (mut ep, mut mem) = host(me, &d);
    let mut ours: BTreeMap<(u32, bool), Vec<Vec<u8>>> = BTreeMap::new();
    let mut rxe: BTreeMap<(u32, bool), Vec<Vec<u8>>> = BTreeMap::new();
    let mut done = Vec::new();
    let mut buf = vec![0u8; 4200];
    let mut drain = |ep: &mut RoceEndpoint, mem: &mut KeyedMem, done: &mut Vec<Completion>| {
        while let Some(t) = ep.poll_transmit(0, &mut buf, mem) {
            let ib = &buf[..t.len];
            let v = PacketView::new_checked(ib).unwrap();
            assert!(v.icrc_ok_canonical(&wire::Flow {
                src: me,
                dst: t.dst,
                src_port: t.src_port,
                dst_port: UDP_PORT,
            }));
            ours.entry(stream_of(ib))
                .or_default()
                .push(v.icrc_covered().to_vec());
        }
        while let Some(c) = ep.poll_completion() {
            done.push(c);
        }
    };
    drain(&mut ep, &mut mem, &mut done);
    let rxe_host = |a: Ipv4Addr| a == H2 || a == H3;
    // Packets 81..84 are another exchange (with 10.77.0.1): not part of this one.
    for fr in f.iter().filter(|x| rxe_host(x.src()) && rxe_host(x.dst())) {
        if fr.src() == me {
            let v = PacketView::new_checked(&fr.ib[..]).unwrap();
            rxe.entry(stream_of(&fr.ib))
                .or_default()
                .push(v.icrc_covered().to_vec());
            continue;
        }
        // rxe's real headers: identification and all, checked by the ICRC.
        ep.handle_datagram_ip(0, &fr.ip, &fr.udp, &fr.ib, &mut mem);
        drain(&mut ep, &mut mem, &mut done);
    }
    let k = ep.counters();
    assert_eq!(k.rx_bad_icrc, 0);
    assert_eq!(k.rx_pkts, k.rx_datagrams, "{k:?}");
    assert_eq!(
        (k.retx_pkts, k.rx_duplicates, k.rx_out_of_sequence),
        (0, 0, 0)
    );
    (ours, rxe, done, mem)
}

fn assert_same_streams(
    ours: &BTreeMap<(u32, bool), Vec<Vec<u8>>>,
    rxe: &BTreeMap<(u32, bool), Vec<Vec<u8>>>,
) {
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        rxe.keys().collect::<Vec<_>>()
    );
    for (k, theirs) in rxe {
        let mine = &ours[k];
        assert_eq!(mine.len(), theirs.len(), "stream {k:x?}: packet count");
        for (i, (a, b)) in mine.iter().zip(theirs).enumerate() {
            assert!(
                a == b,
                "stream {k:x?} packet {i}: ours {:02x?} rxe {:02x?}",
                &a[..a.len().min(32)],
                &b[..b.len().min(32)]
            );
        }
    }
}

// checks: [ROCE-2] [ROCE-4]
#[test]
fn engine_as_the_responder_host_sends_what_rxe_sent() {
    let (ours, rxe, done, mem) = play(H2);
    assert_same_streams(&ours, &rxe);
    let n = |op| done.iter().filter(|c| c.op == op).count();
    assert!(done.iter().all(|c| c.status == Status::Success));
    assert_eq!((n(CompletionOp::Send), n(CompletionOp::Recv)), (5, 10));
    let d = data(&frames());
    assert!(mem.get(WRITE_RKEY) == &d.write[..]);
    let recv = mem.get(RECV_LKEY);
    assert!(recv[..256] == d.send_11_from3[..]);
    assert!(recv[5 * 4096..5 * 4096 + 3000] == d.send_14[..]);
}

#[test]
fn engine_as_the_requester_host_sends_what_rxe_sent() {
    let (ours, rxe, done, mem) = play(H3);
    assert_same_streams(&ours, &rxe);
    assert_eq!(done.len(), 25);
    assert!(done.iter().all(|c| c.status == Status::Success));
    let reads: Vec<u64> = done
        .iter()
        .filter(|c| c.op == CompletionOp::Read)
        .map(|c| c.wr_id)
        .collect();
    assert_eq!(reads, vec![20, 21, 22, 23, 24]);
    let d = data(&frames());
    let local = mem.get(LKEY);
    for i in 0..5 {
        assert!(local[0x4000 + i * 0x1000..0x4000 + i * 0x1000 + 3000] == d.read[..]);
    }
}
