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

// checks: [ROCE-9] [ROCE-10]
#[test]
fn emit_parse_every_opcode() {
    let mut xrc_ops = 0;
    for v in 0..=255u8 {
        // RC, UC, UD, CNP and XRC opcode bytes.
        let Some((op, uc, xrc)) = Opcode::decode_full(v) else {
            continue;
        };
        let payload: &[u8] = if op.has_payload() { b"hello" } else { b"" };
        let mut bth = Bth::new(op, 0x12_3456, 0xab_cdef);
        bth.pad = pad_for(payload.len());
        bth.ack_req = true;
        bth.uc = uc;
        bth.xrc = xrc;
        xrc_ops += usize::from(xrc);
        let ext = ExtHeaders {
            xrceth: op.has_xrceth(xrc).then_some(Xrceth::new(0x00ab_c123)),
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
        assert_eq!(buf[0], v, "{op}");
        let q = Packet::parse(&buf[..n]).unwrap();
        assert_eq!(p, q);
        let view = PacketView::new_checked(&buf[..n]).unwrap();
        assert!(view.icrc_ok_canonical(&flow));
        assert_eq!(view.psn(), 0xab_cdef);
        assert_eq!(view.dest_qpn(), 0x12_3456);
        assert_eq!(view.is_xrc(), xrc);
        // An XRC request's XRCETH comes right after the BTH; an XRC response has none.
        if op.has_xrceth(xrc) {
            assert_eq!(&buf[12..16], &[0, 0xab, 0xc1, 0x23], "{op}");
        }
        assert_eq!(
            view.header_len(),
            BTH_LEN + op.ext_len() + if op.has_xrceth(xrc) { 4 } else { 0 }
        );
        // Without its XRCETH an XRC request is a header short: it does not emit.
        if op.has_xrceth(xrc) {
            let bare = Packet {
                ext: ExtHeaders {
                    xrceth: None,
                    ..p.ext
                },
                ..p
            };
            assert!(bare.emit_without_icrc(&mut buf).is_err(), "{op}");
        }
    }
    // The RC opcodes 0x00..=0x14, 0x16, 0x17 with prefix 101.
    assert_eq!(xrc_ops, 23);
    for v in [0xb5u8, 0xb8, 0xbf, 0xe4] {
        assert_eq!(Opcode::decode_full(v), None, "{v:#x}");
    }
    // No XRC form of UC, UD or CNP.
    for (op, uc) in [
        (Opcode::SendOnly, true),
        (Opcode::UdSendOnly, false),
        (Opcode::Cnp, false),
    ] {
        let mut bth = Bth::new(op, 1, 1);
        bth.uc = uc;
        bth.xrc = true;
        assert!(bth.emit(&mut [0u8; 12]).is_err(), "{op}");
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
