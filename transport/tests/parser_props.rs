//! Property tests of the native wire codec (spec/wire.md).
//!
//! (a) arbitrary bytes never panic `Packet::parse` / `PacketView::new_checked`, and any input
//!     that parses re-emits canonically; (b) valid packets round-trip emit -> parse;
//! (c) flipping any single bit of a valid packet makes it invalid; (d) any truncation of a
//!     valid packet is invalid. Plus SACK bit order and PSN serial arithmetic.

use ferroce_transport::wire::{
    psn_diff, psn_lt, seal, AckBlock, AckMultiWriter, AckRepr, Body, CloseRepr, DataOp, DataRepr,
    MsgHeader, NackReason, NackRepr, Opcode, OpenRepr, Packet, PacketView, ProbeRepr, Sack256,
    SeqHeader, WireError, BASE_LEN, TRAILER_LEN,
};
use proptest::prelude::*;

/// A valid packet whose payload is owned (a `Packet` borrows it).
#[derive(Clone, Debug)]
struct Owned {
    flags: u8,
    path: u8,
    dst_conn: u32,
    /// For `Body::Data` the payload slice is replaced by `payload` in `packet()`.
    body: Body<'static>,
    payload: Vec<u8>,
}

impl Owned {
    fn packet(&self) -> Packet<'_> {
        let body = match self.body {
            Body::Data(d) => Body::Data(DataRepr {
                payload: &self.payload,
                ..d
            }),
            b => b,
        };
        Packet {
            flags: self.flags,
            path: self.path,
            dst_conn: self.dst_conn,
            body,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let p = self.packet();
        let mut buf = vec![0u8; p.buffer_len()];
        let n = p.emit(&mut buf).expect("emit of a valid packet");
        assert_eq!(n, buf.len());
        buf
    }
}

fn seq_header() -> impl Strategy<Value = SeqHeader> {
    (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(psn, floor, tsval)| SeqHeader {
        psn,
        floor,
        tsval,
    })
}

/// (msg header, payload) valid for an opcode that carries a payload.
fn chunk() -> impl Strategy<Value = (MsgHeader, Vec<u8>)> {
    (
        any::<u32>(),
        any::<u32>(),
        prop::collection::vec(any::<u8>(), 0..80),
    )
        .prop_flat_map(|(stream, msn, payload)| {
            let len = payload.len() as u32;
            if len == 0 {
                return Just((
                    MsgHeader {
                        stream,
                        msn,
                        offset: 0,
                        length: 0,
                    },
                    payload,
                ))
                .boxed();
            }
            (0..=u32::MAX - len)
                .prop_flat_map(move |offset| (Just(offset), offset + len..=u32::MAX))
                .prop_map(move |(offset, length)| {
                    (
                        MsgHeader {
                            stream,
                            msn,
                            offset,
                            length,
                        },
                        payload.clone(),
                    )
                })
                .boxed()
        })
}

fn fixed_msg(length: Option<u32>) -> impl Strategy<Value = MsgHeader> {
    (any::<u32>(), any::<u32>(), any::<u32>()).prop_map(move |(stream, msn, l)| MsgHeader {
        stream,
        msn,
        offset: 0,
        length: length.unwrap_or(l),
    })
}

fn data_op_with_payload() -> impl Strategy<Value = DataOp> {
    prop_oneof![
        any::<u32>().prop_map(|rsn| DataOp::Send { rsn }),
        (any::<u32>(), any::<u32>()).prop_map(|(rsn, imm)| DataOp::SendImm { rsn, imm }),
        (any::<u32>(), any::<u64>()).prop_map(|(rkey, raddr)| DataOp::Write { rkey, raddr }),
        (any::<u32>(), any::<u64>(), any::<u32>(), any::<u32>()).prop_map(
            |(rkey, raddr, rsn, imm)| DataOp::WriteImm {
                rkey,
                raddr,
                rsn,
                imm
            }
        ),
        Just(DataOp::ReadResp),
    ]
}

fn atomic_op() -> impl Strategy<Value = DataOp> {
    prop_oneof![
        (any::<u32>(), any::<u64>(), any::<u64>())
            .prop_map(|(rkey, raddr, add)| { DataOp::FetchAdd { rkey, raddr, add } }),
        (any::<u32>(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
            |(rkey, raddr, compare, swap)| DataOp::CmpSwap {
                rkey,
                raddr,
                compare,
                swap
            }
        ),
        any::<u64>().prop_map(|orig| DataOp::AtomicResp { orig }),
    ]
}

fn data_body() -> impl Strategy<Value = (Body<'static>, Vec<u8>)> {
    let with_payload =
        (seq_header(), chunk(), data_op_with_payload()).prop_map(|(seq, (msg, payload), op)| {
            (
                Body::Data(DataRepr {
                    seq,
                    msg,
                    op,
                    payload: &[],
                }),
                payload,
            )
        });
    let read_req = (seq_header(), fixed_msg(None), any::<u32>(), any::<u64>()).prop_map(
        |(seq, msg, rkey, raddr)| {
            (
                Body::Data(DataRepr {
                    seq,
                    msg,
                    op: DataOp::ReadReq { rkey, raddr },
                    payload: &[],
                }),
                Vec::new(),
            )
        },
    );
    let atomic = (seq_header(), fixed_msg(Some(8)), atomic_op()).prop_map(|(seq, msg, op)| {
        (
            Body::Data(DataRepr {
                seq,
                msg,
                op,
                payload: &[],
            }),
            Vec::new(),
        )
    });
    prop_oneof![3 => with_payload, 1 => read_req, 1 => atomic]
}

fn control_body() -> impl Strategy<Value = Body<'static>> {
    let sack = any::<[u64; 4]>().prop_map(Sack256);
    let ack = (
        any::<u32>(),
        sack,
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(
            |(cum_psn, sack, ecn_ce, rate_hint_mbps, ts_echo, ack_delay_ns)| {
                Body::Ack(AckRepr {
                    cum_psn,
                    sack,
                    ecn_ce,
                    rate_hint_mbps,
                    ts_echo,
                    ack_delay_ns,
                })
            },
        );
    let reason = prop_oneof![
        Just(NackReason::RemoteAccess),
        Just(NackReason::InvalidRequest),
        Just(NackReason::ReceiverNotReady),
        Just(NackReason::Sequence),
    ];
    let nack = (
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
        reason,
        any::<u8>(),
    )
        .prop_map(|(psn, stream, msn, reason, rnr_delay)| {
            Body::Nack(NackRepr {
                psn,
                stream,
                msn,
                reason,
                rnr_delay,
            })
        });
    let open = (
        1..=u32::MAX,
        1..=u8::MAX,
        any::<u8>(),
        ferroce_transport::wire::MIN_MTU..=u16::MAX,
        any::<u32>(),
        any::<bool>(),
    )
        .prop_map(|(src_conn, paths, crowd, mtu, line_rate_mbps, ack)| {
            let o = OpenRepr {
                src_conn,
                paths,
                crowd,
                mtu,
                line_rate_mbps,
            };
            if ack {
                Body::OpenAck(o)
            } else {
                Body::Open(o)
            }
        });
    let close = (any::<u32>(), any::<u32>(), any::<bool>()).prop_map(|(src_conn, reason, ack)| {
        let c = CloseRepr { src_conn, reason };
        if ack {
            Body::CloseAck(c)
        } else {
            Body::Close(c)
        }
    });
    let probe = (any::<u32>(), any::<u32>(), any::<bool>()).prop_map(|(probe_seq, ts, ack)| {
        let p = ProbeRepr { probe_seq, ts };
        if ack {
            Body::ProbeAck(p)
        } else {
            Body::Probe(p)
        }
    });
    prop_oneof![ack, nack, open, close, probe]
}

fn valid_packet() -> impl Strategy<Value = Owned> {
    let body = prop_oneof![
        3 => data_body(),
        2 => control_body().prop_map(|b| (b, Vec::new())),
    ];
    (any::<u8>(), any::<u8>(), any::<u32>(), body).prop_map(
        |(flags, path, dst_conn, (body, payload))| Owned {
            flags,
            path,
            dst_conn,
            body,
            payload,
        },
    )
}

fn opcode_byte() -> impl Strategy<Value = u8> {
    prop::sample::select(
        (0..=255u8)
            .filter(|b| Opcode::from_u8(*b).is_some())
            .collect::<Vec<_>>(),
    )
}

/// Bytes a conforming emitter writes for a packet that parsed from `input`: the input itself
/// with the reserved fields zeroed and the trailer recomputed.
fn canonical(input: &[u8], op: Opcode) -> Vec<u8> {
    let mut c = input.to_vec();
    if op == Opcode::AckMulti {
        // Reserved bytes zeroed, and each block's SACK cut after its last nonzero word
        // (spec/wire.md §2.10.1), re-encoded here from the spec's layout.
        c.truncate(BASE_LEN + 8);
        c[BASE_LEN + 5..BASE_LEN + 8].fill(0);
        let end = input.len() - TRAILER_LEN;
        let mut pos = BASE_LEN + 8;
        while pos < end {
            let words = input[pos + 1] as usize;
            let sack = &input[pos + 20..pos + 20 + 8 * words];
            let keep = (0..words)
                .rev()
                .find(|w| sack[8 * w..8 * w + 8].iter().any(|b| *b != 0))
                .map_or(0, |w| w + 1);
            c.extend_from_slice(&[input[pos], keep as u8, 0, 0]);
            c.extend_from_slice(&input[pos + 4..pos + 20]);
            c.extend_from_slice(&sack[..8 * keep]);
            pos += 20 + 8 * words;
        }
        let n = c.len();
        c.extend_from_slice(&[0; TRAILER_LEN]);
        seal(&mut c, n);
        return c;
    }
    // OPEN / OPEN_ACK byte 13 is the crowd (WIRE-27), carried whole: only NACK's reserved
    // bytes are zeroed.
    if op == Opcode::Nack {
        c[BASE_LEN + 14..BASE_LEN + 16].fill(0);
    }
    let n = c.len() - TRAILER_LEN;
    seal(&mut c, n);
    c
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    /// (a) Arbitrary bytes: no panic anywhere in parse or the view's accessors.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..160)) {
        let _ = Packet::parse(&bytes);
        if let Ok(v) = PacketView::new_checked(&bytes[..]) {
            let _ = (v.opcode(), v.flags(), v.path(), v.dst_conn(), v.crc_ok(), v.payload());
        }
    }

    // checks: [WIRE-29]
    /// (a') Plausible bytes (version 1, a known opcode, random body, correct CRC): no panic,
    /// and whenever they parse, emit gives the canonical bytes back and re-parses equal.
    #[test]
    fn sealed_random_bodies(
        op in opcode_byte(),
        head in any::<[u8; 6]>(),
        extra in 0usize..24,
        body in prop::collection::vec(any::<u8>(), 0..120),
    ) {
        let opcode = Opcode::from_u8(op).unwrap();
        let hlen = BASE_LEN + opcode.header_len();
        // Lengths around the exact header length, so the structural checks pass often.
        let target = (hlen + extra).saturating_sub(12).max(BASE_LEN);
        let mut buf = vec![1u8, op];
        buf.extend_from_slice(&head);
        let mut i = 0;
        while buf.len() < target {
            buf.push(body.get(i % body.len().max(1)).copied().unwrap_or(0));
            i += 1;
        }
        let n = buf.len();
        buf.extend_from_slice(&[0; TRAILER_LEN]);
        seal(&mut buf, n);
        let view = PacketView::new_checked(&buf[..]);
        match Packet::parse(&buf) {
            Ok(p) => {
                prop_assert!(view.is_ok());
                prop_assert_eq!(p.opcode(), opcode);
                let mut out = vec![0u8; p.buffer_len()];
                let m = p.emit(&mut out).unwrap();
                prop_assert_eq!(&out[..m], &canonical(&buf, opcode)[..]);
                prop_assert_eq!(Packet::parse(&out[..m]), Ok(p));
            }
            Err(WireError::BadCrc) => prop_assert!(false, "sealed packet failed its CRC"),
            Err(WireError::BadVersion(_)) | Err(WireError::BadOpcode(_)) => {
                prop_assert!(false, "version and opcode were valid")
            }
            Err(WireError::Truncated) => prop_assert!(buf.len() < hlen + TRAILER_LEN),
            Err(_) => {}
        }
    }

    // checks: [WIRE-23] [WIRE-24] [WIRE-29]
    /// (a'') Sealed ACK_MULTI bodies of random blocks with random `words` and reserved bytes:
    /// no panic; whatever parses re-emits canonically (reserved zero, minimal SACK words).
    #[test]
    fn sealed_random_ack_multi(
        count in 0u8..6,
        raw in prop::collection::vec((any::<u8>(), 0u8..6, any::<[u8; 2]>(), any::<[u8; 16]>(), any::<[u8; 40]>(), any::<bool>()), 0..6),
        extra in 0usize..3,
    ) {
        let mut buf = vec![1u8, Opcode::AckMulti as u8, 0, 255, 0, 0, 0, 9, 0, 0, 0, 1, count, 7, 7, 7];
        for (path, words, res, fixed, sack, zero) in &raw {
            buf.extend_from_slice(&[*path, *words]);
            buf.extend_from_slice(res);
            buf.extend_from_slice(fixed);
            let n = 8 * (*words as usize).min(5);
            let mut s = sack[..n].to_vec();
            if *zero && n >= 8 {
                s[n - 8..].fill(0); // a zero last word: non-minimal, still valid
            }
            buf.extend_from_slice(&s);
        }
        buf.extend(std::iter::repeat_n(0xab, extra));
        let n = buf.len();
        buf.extend_from_slice(&[0; TRAILER_LEN]);
        seal(&mut buf, n);
        if let Ok(p) = Packet::parse(&buf) {
            let mut out = vec![0u8; p.buffer_len()];
            let m = p.emit(&mut out).unwrap();
            prop_assert_eq!(&out[..m], &canonical(&buf, Opcode::AckMulti)[..]);
            prop_assert_eq!(Packet::parse(&out[..m]), Ok(p));
        }
    }

    // checks: [WIRE-29]
    /// (b) Valid reprs round-trip emit -> parse -> equal, and the two-step emit agrees.
    #[test]
    fn roundtrip(o in valid_packet()) {
        let p = o.packet();
        let bytes = o.bytes();
        prop_assert_eq!(bytes.len(), p.buffer_len());
        prop_assert_eq!(Packet::parse(&bytes), Ok(p));
        let view = PacketView::new_checked(&bytes[..]).unwrap();
        prop_assert!(view.crc_ok());
        prop_assert_eq!(view.opcode(), p.opcode());
        prop_assert_eq!(view.payload(), &o.payload[..]);

        // emit_headers + payload written in place + seal == emit.
        let mut buf = vec![0u8; bytes.len()];
        let h = p.emit_headers(&mut buf).unwrap();
        buf[h..h + o.payload.len()].copy_from_slice(&o.payload);
        prop_assert_eq!(seal(&mut buf, h + o.payload.len()), bytes.len());
        prop_assert_eq!(&buf, &bytes);

        // A buffer one byte short is refused.
        prop_assert_eq!(p.emit(&mut buf[..bytes.len() - 1]), Err(WireError::BufferTooSmall));
    }

    // checks: [VAL-6]
    /// (c) Every single-bit flip of a valid packet is rejected.
    #[test]
    fn any_bit_flip_is_rejected(o in valid_packet()) {
        let bytes = o.bytes();
        let mut b = bytes.clone();
        for i in 0..b.len() * 8 {
            b[i / 8] ^= 1 << (i % 8);
            let r = Packet::parse(&b);
            prop_assert!(r.is_err(), "bit {} flipped, still parsed: {:?}", i, r);
            b[i / 8] ^= 1 << (i % 8);
        }
    }

    // checks: [VAL-14]
    /// (d) Every truncation of a valid packet is rejected.
    #[test]
    fn any_truncation_is_rejected(o in valid_packet()) {
        let bytes = o.bytes();
        for n in 0..bytes.len() {
            let r = Packet::parse(&bytes[..n]);
            prop_assert!(r.is_err(), "truncated to {} of {} bytes, still parsed", n, bytes.len());
        }
    }

    // checks: [WIRE-29]
    /// ACK_MULTI: any set of blocks (distinct paths, any SACK) written by the writer parses
    /// back to the same blocks, re-emits byte for byte, and no bit flip or truncation of it
    /// parses.
    #[test]
    fn ack_multi_roundtrip(
        dst_conn in any::<u32>(),
        hint in any::<u32>(),
        blocks in prop::collection::btree_map(
            any::<u8>(),
            (any::<u32>(), 0usize..5, any::<[u64; 4]>(), any::<u32>(), any::<u32>(), any::<u32>()),
            1..20,
        ),
    ) {
        let blocks: Vec<AckBlock> = blocks
            .into_iter()
            .map(|(path, (cum_psn, words, mut sack, ecn_ce, ts_echo, ack_delay_ns))| {
                sack[words.min(4)..].fill(0); // every SACK length, from none to four words
                AckBlock { path, cum_psn, sack: Sack256(sack), ecn_ce, ts_echo, ack_delay_ns }
            })
            .collect();
        let mut buf = vec![0u8; 2048];
        let mut w = AckMultiWriter::new(&mut buf, dst_conn, hint).unwrap();
        for b in &blocks {
            prop_assert!(w.push(b));
        }
        let n = w.finish().unwrap();
        let bytes = buf[..n].to_vec();
        let pkt = Packet::parse(&bytes).unwrap();
        prop_assert_eq!(pkt.opcode(), Opcode::AckMulti);
        prop_assert_eq!(pkt.dst_conn, dst_conn);
        let Body::AckMulti(m) = pkt.body else { unreachable!() };
        prop_assert_eq!(m.rate_hint_mbps, hint);
        prop_assert_eq!(m.blocks().collect::<Vec<_>>(), blocks);
        prop_assert_eq!(pkt.buffer_len(), n);
        let mut out = vec![0u8; n];
        prop_assert_eq!(pkt.emit(&mut out), Ok(n));
        prop_assert_eq!(&out, &bytes);
        let mut b = bytes.clone();
        for i in 0..b.len() * 8 {
            b[i / 8] ^= 1 << (i % 8);
            prop_assert!(Packet::parse(&b).is_err(), "bit {} flipped, still parsed", i);
            b[i / 8] ^= 1 << (i % 8);
        }
        for k in 0..n {
            prop_assert!(Packet::parse(&bytes[..k]).is_err(), "truncated to {}", k);
        }
    }

    /// SACK: bit i is byte i/8, bit position i%8 (LSB first); the encoding round-trips.
    #[test]
    fn sack_bit_order(bits in prop::collection::btree_set(0u32..256, 0..40)) {
        let mut s = Sack256::default();
        for &i in &bits {
            s.set(i);
        }
        let b = s.to_bytes();
        for i in 0..256u32 {
            prop_assert_eq!(b[(i / 8) as usize] >> (i % 8) & 1 == 1, bits.contains(&i));
            prop_assert_eq!(s.get(i), bits.contains(&i));
        }
        prop_assert_eq!(Sack256::from_bytes(b), s);
        prop_assert_eq!(s.count() as usize, bits.len());
        prop_assert_eq!(s.highest(), bits.iter().next_back().copied());
    }

    /// PSN serial arithmetic (RFC 1982 on 32 bits).
    #[test]
    fn psn_serial(a in any::<u32>(), d in 1u32..(1 << 31)) {
        let b = a.wrapping_add(d);
        prop_assert!(psn_lt(a, b));
        prop_assert!(!psn_lt(b, a));
        prop_assert!(!psn_lt(a, a));
        prop_assert_eq!(psn_diff(b, a), d as i32);
        prop_assert_eq!(psn_diff(a, b), -(d as i32));
    }
}
