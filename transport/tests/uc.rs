//! Unreliable streams (verbs UC, spec/transport.md §3.5) on the scripted pair of `common`:
//! every chunk is sent once on the stream's one path with the UNRELIABLE flag, WRs complete
//! once sent, and a lost packet loses exactly its message (the receiver reuses that
//! message's receive and resynchronises on the next first chunk), with no NACK.

mod common;

use common::*;
use ferroce_transport::mem::access;
use ferroce_transport::wire::{flags, Body, DataOp};
use ferroce_transport::*;

/// The pair of `common` with 4 paths and stream 1 unreliable on both ends.
fn uc_pair() -> Pair {
    let mut p = Pair::with(|c| c.conn.paths = 4);
    let b_conn = p.b.connections().next().unwrap().id;
    p.a.destroy_stream(p.a_conn, 1).unwrap();
    p.b.destroy_stream(b_conn, 1).unwrap();
    p.a.create_uc_stream(p.a_conn, 1, 1, 1).unwrap();
    p.b.create_uc_stream(b_conn, 1, 1, 1).unwrap();
    p
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(13) ^ seed).collect()
}

// checks: [UC-1]
#[test]
fn a_lost_packet_loses_its_message_and_nothing_is_resent() {
    let mut p = uc_pair();
    let src = p.ma.register(1, 0x1000, 4096, access::LOCAL_WRITE);
    p.ma.region_mut(src).unwrap().data = pattern(4096, 0x5a);
    let dst =
        p.mb.register(1, 0x8000, 4096, access::LOCAL_WRITE | access::REMOTE_WRITE);
    let before = pattern(4096, 0x33);
    p.mb.region_mut(dst).unwrap().data = before.clone();
    let recv = p.mb.register(1, 0x40000, 4096, access::LOCAL_WRITE);
    let b_conn = p.b.connections().next().unwrap().id;
    for i in 0..3u64 {
        let r = RecvWr {
            wr_id: 900 + i,
            sgl: sge(recv, 0x40000 + i * 0x400, 0x400),
        };
        p.b.post_recv(b_conn, 1, r).unwrap();
    }
    let write = |raddr, imm| SendOp::Write {
        rkey: dst,
        raddr,
        imm,
    };
    // P = 64: SEND 1 and 2 are 4 chunks, WRITE 4 is 4, WRITE 5 and 6 are 2.
    let posts = [
        (1, SendOp::Send { imm: None }, 0x1000, 200),
        (2, SendOp::Send { imm: None }, 0x1100, 200),
        (3, SendOp::Send { imm: Some(9) }, 0x1000, 10),
        (4, write(0x8000, None), 0x1000, 200),
        (5, write(0x8400, Some(0x77)), 0x1000, 100),
        (6, write(0x8800, None), 0x1000, 128),
    ];
    for (id, op, at, len) in posts {
        p.a.post_send(p.a_conn, 1, wr(id, op, sge(src, at, len)))
            .unwrap();
    }
    // No READ or atomics on an unreliable stream.
    let read = wr(
        7,
        SendOp::Read {
            rkey: dst,
            raddr: 0x8000,
        },
        sge(src, 0x1000, 8),
    );
    assert_eq!(
        p.a.post_send(p.a_conn, 1, read),
        Err(PostError::Unsupported)
    );
    // Lose SEND 1's second chunk and WRITE 4's first (A's data packets 1 and 9).
    let mut seen = Vec::new();
    let done = run_until(&mut p, 6, |pkt| {
        let Body::Data(d) = &pkt.body else {
            return false;
        };
        assert_ne!(
            pkt.flags & flags::UNRELIABLE,
            0,
            "every packet says unreliable"
        );
        seen.push((pkt.path, d.msg.msn, d.msg.offset));
        let n = seen.len() - 1;
        n == 1 || n == 9
    });
    for _ in 0..20 {
        p.exchange();
    }
    let a: Vec<_> = done.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(a, (1..=6).map(|i| (i, Status::Success)).collect::<Vec<_>>());
    // Each chunk went once, all on one path, although 4 were open.
    assert_eq!(seen.len(), 17, "{seen:?}");
    let mut uniq = seen.clone();
    uniq.sort();
    uniq.dedup();
    assert_eq!(uniq.len(), 17, "nothing resent");
    assert!(seen.iter().all(|s| s.0 == seen[0].0), "one path: {seen:?}");
    let mut b = Vec::new();
    while let Some(c) = p.b.poll_completion() {
        b.push((c.wr_id, c.status, c.op, c.byte_len, c.imm));
    }
    assert_eq!(
        b,
        vec![
            (900, Status::Success, CompletionOp::Recv, 200, None),
            (901, Status::Success, CompletionOp::Recv, 10, Some(9)),
            (
                902,
                Status::Success,
                CompletionOp::RecvWriteImm,
                100,
                Some(0x77)
            ),
        ]
    );
    let s = pattern(4096, 0x5a);
    let r = &p.mb.region(recv).unwrap().data;
    assert_eq!(
        &r[..200],
        &s[0x100..0x100 + 200],
        "SEND 2 landed in receive 900"
    );
    assert_eq!(&r[0x400..0x400 + 10], &s[..10]);
    let d = &p.mb.region(dst).unwrap().data;
    assert_eq!(&d[..200], &before[..200], "the lost WRITE placed nothing");
    assert_eq!(&d[0x400..0x400 + 100], &s[..100]);
    assert_eq!(&d[0x800..0x800 + 128], &s[..128]);
    let c = p.b.connections().next().unwrap().counters();
    assert_eq!((c.uc_msgs_dropped, c.uc_pkts_dropped), (1, 5));
    assert_eq!(c.nacks_sent.iter().sum::<u64>(), 0);
    let ca = p.a.connections().next().unwrap().counters();
    assert_eq!(ca.retx_pkts, 0);
}

// checks: [UC-2]
#[test]
fn disagreeing_ends_and_missing_receives_are_dropped_without_nack() {
    let mut p = uc_pair();
    let b_conn = p.b.connections().next().unwrap().id;
    let rsn = DataOp::Send { rsn: 0 };
    // An unreliable SEND with no receive posted: dropped, no NACK (UC has no RNR).
    let nacks = p.send_b(
        flags::UNRELIABLE | flags::LAST,
        msg(0, 0, 10),
        rsn,
        &[1; 10],
    );
    assert!(nacks.is_empty());
    // A reliable packet on the unreliable stream: dropped and counted, no NACK.
    let nacks = p.send_b(flags::LAST, msg(1, 0, 10), rsn, &[1; 10]);
    assert!(nacks.is_empty());
    let c = p.b.connections().next().unwrap().counters();
    assert_eq!((c.uc_no_recv, c.uc_refused), (1, 1));
    // An unreliable packet on a reliable stream is refused as an invalid request.
    p.b.destroy_stream(b_conn, 1).unwrap();
    p.b.create_stream(b_conn, 1, 1, 1).unwrap();
    let nacks = p.send_b(
        flags::UNRELIABLE | flags::LAST,
        msg(0, 0, 10),
        rsn,
        &[1; 10],
    );
    assert_eq!(nacks, vec![wire::NackReason::InvalidRequest]);
}
