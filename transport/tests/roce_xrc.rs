//! XRC queue pairs in the RoCEv2 engine (spec/rocev2.md §6.10): an initiator on A, a target
//! on B, on the deterministic wire of `roce_common`, with a lost packet; the XRC opcodes and
//! the XRCETH of every request on the wire; what a target places for a SEND; the transports
//! a QP refuses.

mod roce_common;

use ferroce_transport::roce::wire::{self, Opcode, Packet, XRC_PREFIX};
use ferroce_transport::roce::{QpParams, XrcRole, XRC_HDR_LEN};
use ferroce_transport::*;
use roce_common::*;

const SRQN: u32 = 0x00ab_c123;

/// A's QP `QP` an XRC initiator, B's the target (sq_psn = rq_psn = 0x200 both ways).
fn xrc_wire() -> Wire {
    let mut w = Wire::new(&|_| {});
    for (s, role) in [(&mut w.a, XrcRole::Initiator), (&mut w.b, XrcRole::Target)] {
        s.ep.destroy_qp(s.conn, QP).unwrap();
        let p = QpParams {
            local_qpn: QP,
            remote_qpn: QP,
            pd: 1,
            sq_psn: 0x200,
            rq_psn: 0x200,
            mtu: 0,
        };
        s.ep.create_xrc_qp(s.conn, p, role).unwrap();
        assert_eq!(s.ep.qp_xrc_role(s.conn, QP), Some(role));
    }
    w.keep_frames = true;
    w
}

// checks: [ROCE-10] [ROCE-11]
#[test]
fn xrc_send_write_read_and_atomics_with_a_loss() {
    let mut w = xrc_wire();
    let k = setup(&mut w, 16384);
    let (ac, bc) = (w.a.conn, w.b.conn);
    w.b.ep
        .post_recv(
            bc,
            QP,
            RecvWr {
                wr_id: 900,
                sgl: sge(k.b_recv, 0x40000, 8192),
            },
        )
        .unwrap();
    let posts = [
        (1, SendOp::Send { imm: Some(5) }, 0x1000, 3000),
        (
            2,
            SendOp::Write {
                rkey: k.b_rkey,
                raddr: 0x8000,
                imm: None,
            },
            0x1000,
            2500,
        ),
        (
            3,
            SendOp::Read {
                rkey: k.b_rkey,
                raddr: 0x9000,
            },
            0x3000,
            2100,
        ),
        (
            4,
            SendOp::FetchAdd {
                rkey: k.b_rkey,
                raddr: 0xa000,
                add: 3,
            },
            0x2000,
            8,
        ),
    ];
    for (id, op, at, len) in posts {
        w.a.ep
            .post_xrc_send(ac, QP, SRQN + id as u32, wr(id, op, sge(k.a_lkey, at, len)))
            .unwrap();
    }
    // An XRC QP takes nothing through the RC calls: the initiator's requests name an SRQ,
    // it has no receive queue, and the target no send queue.
    let send = || wr(9, SendOp::Send { imm: None }, sge(k.a_lkey, 0x1000, 8));
    assert_eq!(
        w.a.ep.post_send(ac, QP, send()),
        Err(PostError::Unsupported)
    );
    assert_eq!(
        w.a.ep.post_recv(
            ac,
            QP,
            RecvWr {
                wr_id: 9,
                sgl: sge(k.a_lkey, 0x1000, 8)
            }
        ),
        Err(PostError::Unsupported)
    );
    assert_eq!(
        w.b.ep.post_send(bc, QP, send()),
        Err(PostError::Unsupported)
    );
    assert_eq!(
        w.b.ep.post_xrc_send(bc, QP, SRQN, send()),
        Err(PostError::Unsupported)
    );
    // Lose the SEND's second packet: go-back-N resends it and what followed.
    w.drop = Box::new(|from_a, _, _, n| from_a && n == 1);
    w.run(50_000_000);

    let a: Vec<_> = w.a.done.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(a, (1..=4).map(|i| (i, Status::Success)).collect::<Vec<_>>());
    let b: Vec<_> =
        w.b.done
            .iter()
            .map(|c| (c.wr_id, c.status, c.byte_len, c.imm))
            .collect();
    assert_eq!(
        b,
        vec![(900, Status::Success, 3000 + XRC_HDR_LEN, Some(5))],
        "the receive holds the SRQ number, then the payload"
    );
    let src = pattern(16384, 0x5a);
    let before = pattern(16384, 0x33);
    let recv = &w.b.mem.region(k.b_recv).unwrap().data;
    assert_eq!(&recv[..4], &(SRQN + 1).to_be_bytes());
    assert_eq!(&recv[4..3004], &src[..3000]);
    let dst = &w.b.mem.region(k.b_rkey).unwrap().data;
    assert_eq!(&dst[..2500], &src[..2500], "WRITE placed");
    let a_mem = &w.a.mem.region(k.a_lkey).unwrap().data;
    assert_eq!(
        &a_mem[0x2000..0x2000 + 2100],
        &before[0x1000..0x1000 + 2100]
    );
    let orig = u64::from_ne_bytes(before[0x2000..0x2008].try_into().unwrap());
    assert_eq!(
        u64::from_ne_bytes(a_mem[0x1000..0x1008].try_into().unwrap()),
        orig,
        "FETCH_ADD returned the original"
    );
    assert_eq!(
        u64::from_ne_bytes(dst[0x2000..0x2008].try_into().unwrap()),
        orig.wrapping_add(3)
    );

    // On the wire: XRC opcodes both ways; every request (resends included) carries the
    // XRCETH of its work request, no response does.
    let mut requests = 0;
    for (from_a, f) in &w.frames {
        assert_eq!(f[0] & 0xe0, XRC_PREFIX, "opcode {:#x}", f[0]);
        let p = Packet::parse(f).unwrap();
        assert!(p.bth.xrc && !p.bth.uc);
        assert_eq!(*from_a, !p.bth.opcode.is_response());
        if *from_a {
            requests += 1;
            let id = match p.bth.opcode {
                Opcode::SendFirst | Opcode::SendMiddle | Opcode::SendLastImm => 1,
                Opcode::WriteFirst | Opcode::WriteMiddle | Opcode::WriteLast => 2,
                Opcode::ReadRequest => 3,
                Opcode::FetchAdd => 4,
                op => panic!("unexpected request {op}"),
            };
            assert_eq!(p.ext.xrceth.map(|x| (x.srqn, x.resv)), Some((SRQN + id, 0)));
            // BTH, then XRCETH first among the extended headers.
            assert_eq!(&f[12..16], &wire::Xrceth::new(SRQN + id).to_bytes());
        } else {
            assert_eq!(p.ext.xrceth, None);
        }
    }
    // 3 SEND + 3 WRITE + 1 READ + 1 FETCH_ADD, and at least the lost packet again.
    assert!(requests > 8, "{requests} requests");
    assert!(w.a.ep.counters().go_back_n + w.a.ep.counters().timeouts > 0);
    assert_eq!(w.b.ep.counters().rx_wrong_transport, 0);
}

// checks: [ROCE-12]
#[test]
fn a_packet_of_another_transport_is_dropped_and_counted() {
    let mut w = xrc_wire();
    let k = setup(&mut w, 4096);
    let (ac, bc) = (w.a.conn, w.b.conn);
    w.b.ep
        .post_recv(
            bc,
            QP,
            RecvWr {
                wr_id: 900,
                sgl: sge(k.b_recv, 0x40000, 4096),
            },
        )
        .unwrap();
    w.a.ep
        .post_xrc_send(
            ac,
            QP,
            SRQN,
            wr(1, SendOp::Send { imm: None }, sge(k.a_lkey, 0x1000, 100)),
        )
        .unwrap();
    w.pump_tx();
    let xrc = w.q.pop_front().unwrap();
    // The same SEND as RC (no XRCETH, prefix 000) to the XRC target: dropped.
    let p = Packet::parse(&xrc.bytes).unwrap();
    let mut rc = p;
    rc.bth.xrc = false;
    rc.ext.xrceth = None;
    let flow = wire::Flow {
        src: A,
        dst: B,
        src_port: xrc.sport,
        dst_port: wire::UDP_PORT,
    };
    let mut buf = vec![0u8; 512];
    let n = rc.emit_canonical(&mut buf, &flow).unwrap();
    w.b.ep
        .handle_datagram(w.now, A, xrc.sport, false, &buf[..n], &mut w.b.mem);
    assert_eq!(w.b.ep.counters().rx_wrong_transport, 1);
    // And as UC (prefix 001).
    rc.bth.uc = true;
    let n = rc.emit_canonical(&mut buf, &flow).unwrap();
    w.b.ep
        .handle_datagram(w.now, A, xrc.sport, false, &buf[..n], &mut w.b.mem);
    assert_eq!(w.b.ep.counters().rx_wrong_transport, 2);
    // The XRC one back to the initiator (a request to a QP that only sends them): dropped.
    let back = wire::Flow {
        src: B,
        dst: A,
        ..flow
    };
    let n = p.emit_canonical(&mut buf, &back).unwrap();
    w.a.ep
        .handle_datagram(w.now, B, xrc.sport, false, &buf[..n], &mut w.a.mem);
    assert_eq!(w.a.ep.counters().rx_wrong_transport, 1);
    // Nothing happened: the XRC original still goes through.
    w.collect();
    assert!(w.b.done.is_empty() && w.a.done.is_empty());
    w.b.ep
        .handle_datagram(w.now, A, xrc.sport, false, &xrc.bytes, &mut w.b.mem);
    w.run(10_000_000);
    assert_eq!(w.b.done.len(), 1);
    assert_eq!(w.b.done[0].byte_len, 100 + XRC_HDR_LEN);
    assert_eq!(
        w.a.done.iter().map(|c| c.status).collect::<Vec<_>>(),
        vec![Status::Success]
    );
}

/// The target's ACK lost (or late past the initiator's timer): the initiator resends, the
/// target takes the resend as a duplicate and acknowledges it again, and the initiator
/// completes. Single-packet and multi-packet SENDs, a WRITE.
#[test]
fn a_lost_xrc_ack_is_recovered_by_the_resend() {
    for (len, op) in [
        (100u32, SendOp::Send { imm: None }),
        (3000, SendOp::Send { imm: None }),
    ] {
        let mut w = xrc_wire();
        let k = setup(&mut w, 16384);
        let (ac, bc) = (w.a.conn, w.b.conn);
        w.b.ep
            .post_recv(
                bc,
                QP,
                RecvWr {
                    wr_id: 900,
                    sgl: sge(k.b_recv, 0x40000, 8192),
                },
            )
            .unwrap();
        w.a.ep
            .post_xrc_send(ac, QP, SRQN, wr(1, op, sge(k.a_lkey, 0x1000, len)))
            .unwrap();
        // The first response B sends is lost.
        let mut first = true;
        w.drop = Box::new(move |from_a, _, _, _| !from_a && std::mem::take(&mut first));
        w.run(200_000_000);
        let a: Vec<_> = w.a.done.iter().map(|c| (c.wr_id, c.status)).collect();
        assert_eq!(
            a,
            vec![(1, Status::Success)],
            "len {len}: {:?}",
            w.a.ep.counters()
        );
        assert!(w.a.ep.counters().timeouts > 0);
    }
}
