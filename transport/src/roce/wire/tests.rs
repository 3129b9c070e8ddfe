//! The codec's unit tests.

use super::*;
use std::net::Ipv4Addr;

#[test]
fn psn_arith() {
    assert_eq!(psn::add(0xff_ffff, 1), 0);
    assert_eq!(psn::diff(0, 0xff_ffff), 1);
    assert_eq!(psn::diff(0xff_ffff, 0), -1);
    assert!(psn::lt(0xff_fff0, 3));
    assert!(psn::le(5, 5));
}

#[test]
fn syndromes_round_trip() {
    for v in 0..=255u8 {
        assert_eq!(Syndrome::from_u8(v).to_u8(), v);
    }
    assert_eq!(Syndrome::from_u8(0x1f), Syndrome::ACK);
    assert_eq!(
        Syndrome::from_u8(0x60),
        Syndrome::Nak(NakCode::PsnSequenceError)
    );
    assert_eq!(Syndrome::from_u8(0x2c), Syndrome::RnrNak { timer: 12 });
}

#[test]
fn uc_opcodes() {
    // IBTA table 35: UC is 0x20..=0x2b (SEND and RDMA WRITE); the rest of prefix 001 is
    // reserved, and no other prefix but RC's parses.
    for v in 0x20..=0xffu8 {
        let known = Opcode::decode(v);
        assert_eq!(
            known.is_some(),
            (0x20..=0x2b).contains(&v) || v == 0x64 || v == 0x65 || v == 0x81,
            "{v:#x}"
        );
        if let Some((op, true)) = known {
            assert_eq!(op.encode(true), v);
            let mut bth = Bth::new(op, 7, 9);
            bth.uc = true;
            let mut b = [0u8; BTH_LEN];
            bth.emit(&mut b).unwrap();
            assert_eq!(b[0], v);
            assert_eq!(Bth::parse(&b).unwrap(), bth);
        }
    }
    // A UC READ or ACK does not exist: refused on emit.
    let mut bth = Bth::new(Opcode::ReadRequest, 7, 9);
    bth.uc = true;
    assert!(bth.emit(&mut [0u8; BTH_LEN]).is_err());
    assert_eq!(Opcode::decode(0x04), Some((Opcode::SendOnly, false)));
}

#[test]
fn ud_send_only_imm_bytes() {
    // BTH (0x65, solicited, P_Key ffff, dest QP 0x000123, PSN 0x000007), DETH (Q_Key
    // 0x11111111, source QP 0x000456), ImmDt, 3 payload bytes and one pad byte.
    let mut bth = Bth::new(Opcode::UdSendOnlyImm, 0x123, 7);
    bth.solicited = true;
    bth.pad = pad_for(3);
    let p = Packet {
        bth,
        ext: ExtHeaders {
            deth: Some(Deth {
                qkey: 0x1111_1111,
                src_qpn: 0x456,
                resv: 0,
            }),
            imm: Some(0xdead_beef),
            ..Default::default()
        },
        payload: b"abc",
    };
    let mut buf = [0u8; 64];
    let n = p.emit_without_icrc(&mut buf).unwrap();
    assert_eq!(
        &buf[..n],
        &[
            0x65, 0x90, 0xff, 0xff, 0, 0, 0x01, 0x23, 0, 0, 0, 7, // BTH
            0x11, 0x11, 0x11, 0x11, 0, 0, 0x04, 0x56, // DETH
            0xde, 0xad, 0xbe, 0xef, b'a', b'b', b'c', 0, // ImmDt, payload, pad
        ]
    );
    assert_eq!(Opcode::decode(0x64), Some((Opcode::UdSendOnly, false)));
    assert_eq!(Opcode::decode(0x66), None);
    // A UD opcode has no UC form.
    let mut b = Bth::new(Opcode::UdSendOnly, 1, 1);
    b.uc = true;
    assert!(b.emit(&mut [0u8; BTH_LEN]).is_err());
    // Without its DETH the headers do not match the opcode.
    let bad = Packet {
        ext: ExtHeaders::default(),
        ..p
    };
    assert!(bad.emit_without_icrc(&mut buf).is_err());
}

#[test]
fn emit_parse_every_opcode() {
    for v in 0..=255u8 {
        let Some(op) = Opcode::from_u8(v) else {
            continue;
        };
        let payload: &[u8] = if op.has_payload() { b"hello" } else { b"" };
        let mut bth = Bth::new(op, 0x12_3456, 0xab_cdef);
        bth.pad = pad_for(payload.len());
        bth.ack_req = true;
        let ext = ExtHeaders {
            deth: op.has_deth().then_some(Deth {
                qkey: 0x1111_1111,
                src_qpn: 0x00ab_cdef,
                resv: 0,
            }),
            reth: op.has_reth().then_some(Reth {
                va: 0x1122_3344_5566_7788,
                rkey: 0xdead_beef,
                dma_len: 5,
            }),
            aeth: op.has_aeth().then_some(Aeth {
                syndrome: Syndrome::ACK,
                msn: 7,
            }),
            atomic: op.has_atomic_eth().then_some(AtomicEth {
                va: 8,
                rkey: 9,
                swap_add: 10,
                compare: 11,
            }),
            atomic_ack: op.has_atomic_ack_eth().then_some(42),
            imm: op.has_imm().then_some(0x0102_0304),
            ieth: op.has_ieth().then_some(0x55),
            cnp: (op == Opcode::Cnp).then_some([0; CNP_RESERVED_LEN]),
        };
        let p = Packet { bth, ext, payload };
        let flow = Flow {
            src: Ipv4Addr::new(10, 0, 0, 1),
            dst: Ipv4Addr::new(10, 0, 0, 2),
            src_port: 0xc001,
            dst_port: UDP_PORT,
        };
        let mut buf = [0u8; 128];
        let n = p.emit_canonical(&mut buf, &flow).unwrap();
        assert_eq!(n, p.buffer_len());
        assert_eq!(n % 4, 0, "{op}");
        let q = Packet::parse(&buf[..n]).unwrap();
        assert_eq!(p, q);
        let v = PacketView::new_checked(&buf[..n]).unwrap();
        assert!(v.icrc_ok_canonical(&flow));
        assert_eq!(v.psn(), 0xab_cdef);
        assert_eq!(v.dest_qpn(), 0x12_3456);
    }
}

#[test]
fn checksum_of_canonical_header_verifies() {
    let h = ipv4_udp_headers(
        Ipv4Addr::new(10, 77, 0, 3),
        Ipv4Addr::new(10, 77, 0, 2),
        49441,
        UDP_PORT,
        272,
    );
    assert_eq!(ipv4_checksum(&h[..20]), 0);
    assert_eq!(u16::from_be_bytes([h[2], h[3]]), 300);
    assert_eq!(u16::from_be_bytes([h[24], h[25]]), 280);
}

#[test]
fn never_panics_on_short_or_odd_input() {
    for len in 0..40 {
        for fill in [0u8, 0x11, 0xff, 0x35] {
            let b = vec![fill; len];
            let _ = Packet::parse(&b);
            let _ = icrc(&b, &b, &b);
        }
    }
}
