//! Receiver, responder and sender rules the spec settled for a stranger who must interoperate
//! (issue 16, item 2): receives named by `rsn`, NACK reason precedence, which packets move
//! `ts_echo` and the ACK count, a zero-length READ's completion, the hint's rounding, a window
//! of READs, MSN/RSN numbering. Each test names the requirements it checks
//! (spec/requirements.md); the connection rules (open, close, ids) are in spec_conn.rs, the
//! sender's (probing, resends, RNR, flags) in spec_sender.rs.

mod common;

use common::*;
use ferroce_transport::mem::access;
use ferroce_transport::wire::{flags, Body, DataOp, DataRepr, MsgHeader, NackReason, Packet};
use ferroce_transport::*;

// checks: [STREAM-4] [STREAM-5]
#[test]
fn a_send_naming_a_consumed_receive_is_invalid_and_one_ahead_waits_for_a_receive() {
    let mut p = Pair::new();
    let lkey = p.mb.register(1, 0x20_000, 1024, access::LOCAL_WRITE);
    post_recv(&mut p, 1, lkey, 0x20_000);
    let n = p.send_b(
        flags::LAST,
        msg(0, 0, 4),
        DataOp::Send { rsn: 0 },
        &[1, 2, 3, 4],
    );
    assert!(n.is_empty(), "{n:?}");
    assert_eq!(
        p.b.poll_completion().map(|c| c.status),
        Some(Status::Success)
    );
    post_recv(&mut p, 2, lkey, 0x20_100);
    // Receive 0 is consumed: no resend can ever be placed there.
    let n = p.send_b(flags::LAST, msg(1, 0, 4), DataOp::Send { rsn: 0 }, &[5; 4]);
    assert_eq!(n, vec![NackReason::InvalidRequest]);
    // Receive 2 is not posted yet (only receive 1 is): RNR, the requester retries.
    let n = p.send_b(flags::LAST, msg(1, 0, 4), DataOp::Send { rsn: 2 }, &[5; 4]);
    assert_eq!(n, vec![NackReason::ReceiverNotReady]);
    // The same for WRITE_IMM's receive.
    let rkey = p.mb.register(1, DST, 64, access::REMOTE_WRITE);
    let wi = |rsn| DataOp::WriteImm {
        rkey,
        raddr: DST,
        rsn,
        imm: 3,
    };
    let n = p.send_b(flags::LAST, msg(1, 0, 4), wi(0), &[5; 4]);
    assert_eq!(n, vec![NackReason::InvalidRequest]);
    let n = p.send_b(flags::LAST, msg(1, 0, 4), wi(1), &[5; 4]);
    assert!(n.is_empty(), "{n:?}");
    assert_eq!(p.b.poll_completion().map(|c| c.imm), Some(Some(3)));
}

// checks: [NACK-2]
#[test]
fn nack_reasons_follow_the_precedence_of_the_checks() {
    let mut p = Pair::new();
    let rkey = p.mb.register(1, DST, 64, access::REMOTE_WRITE);
    // Out of the PSN window and for an unknown stream: the path check comes first.
    let d = data_at(
        p.to_b,
        1_000,
        1,
        flags::LAST,
        MsgHeader {
            stream: 77,
            msn: 0,
            offset: 0,
            length: 4,
        },
        DataOp::Write { rkey, raddr: DST },
        &[1; 4],
    );
    assert_eq!(
        nack_reasons(&to_b_all(&mut p, &d)),
        vec![NackReason::Sequence]
    );
    // Unknown stream and an MSN beyond any window: the stream check comes first.
    let unknown = MsgHeader {
        stream: 77,
        msn: 5_000,
        offset: 0,
        length: 4,
    };
    let n = p.send_b(
        flags::LAST,
        unknown,
        DataOp::Write { rkey, raddr: DST },
        &[1; 4],
    );
    assert_eq!(n, vec![NackReason::InvalidRequest]);
    // MSN beyond the stream window and a bad key: the stream window first.
    let n = p.send_b(
        flags::LAST,
        msg(5_000, 0, 4),
        DataOp::Write {
            rkey: rkey ^ 1,
            raddr: DST,
        },
        &[1; 4],
    );
    assert_eq!(n, vec![NackReason::Sequence]);
    // A misaligned offset and a bad key: the chunk rules before the key.
    let n = p.send_b(
        flags::LAST,
        msg(0, 3, 8),
        DataOp::Write {
            rkey: rkey ^ 1,
            raddr: DST,
        },
        &[1; 5],
    );
    assert_eq!(n, vec![NackReason::InvalidRequest]);
    // A misaligned atomic with a bad key: alignment before the key (transport.md §7).
    let n = p.send_b(
        0,
        msg(0, 0, 8),
        DataOp::FetchAdd {
            rkey: rkey ^ 1,
            raddr: DST + 4,
            add: 1,
        },
        &[],
    );
    assert_eq!(n, vec![NackReason::InvalidRequest]);
    // WRITE_IMM with no receive posted and a bad key: RNR before the key.
    let n = p.send_b(
        flags::LAST,
        msg(0, 0, 4),
        DataOp::WriteImm {
            rkey: rkey ^ 1,
            raddr: DST,
            rsn: 0,
            imm: 1,
        },
        &[1; 4],
    );
    assert_eq!(n, vec![NackReason::ReceiverNotReady]);
    // A SEND longer than its receive once one is posted: InvalidRequest, then the
    // responder error makes every later message RemoteOperation.
    let lkey = p.mb.register(1, 0x20_000, 1024, access::LOCAL_WRITE);
    p.b.post_recv(
        ConnId(p.to_b),
        1,
        RecvWr {
            wr_id: 1,
            sgl: sge(lkey, 0x20_000, 2),
        },
    )
    .unwrap();
    let n = p.send_b(flags::LAST, msg(0, 0, 4), DataOp::Send { rsn: 0 }, &[1; 4]);
    assert_eq!(n, vec![NackReason::InvalidRequest]);
    let n = p.send_b(
        flags::LAST,
        msg(1, 0, 4),
        DataOp::Write {
            rkey: rkey ^ 1,
            raddr: DST,
        },
        &[1; 4],
    );
    assert_eq!(n, vec![NackReason::RemoteOperation]);
}

// checks: [RECV-4] [RECV-5] [ACK-4]
#[test]
fn refused_and_out_of_window_packets_move_neither_ts_echo_nor_the_ack_count() {
    let mut p = Pair::new();
    let rkey = p.mb.register(1, DST, 4 * P as usize, access::REMOTE_WRITE);
    let w = DataOp::Write { rkey, raddr: DST };
    // A new packet without LAST or ACK_REQ: acknowledged only after `ack_delay`.
    let d = data_at(p.to_b, 0, 60, 0, msg(0, 0, 2 * P), w, &[1; P as usize]);
    assert!(acks(&to_b_all(&mut p, &d)).is_empty());
    // A refused one (bad key) and an out-of-window one: NACKed, not acknowledged.
    let bad = DataOp::Write {
        rkey: rkey ^ 1,
        raddr: DST,
    };
    let d = data_at(p.to_b, 1, 70, flags::LAST, msg(1, 0, 4), bad, &[1; 4]);
    let out = to_b_all(&mut p, &d);
    assert_eq!(nack_reasons(&out), vec![NackReason::RemoteAccess]);
    assert!(acks(&out).is_empty(), "a refused packet triggered an ACK");
    let d = data_at(p.to_b, 900, 80, flags::LAST, msg(1, 0, 4), w, &[1; 4]);
    let out = to_b_all(&mut p, &d);
    assert_eq!(nack_reasons(&out), vec![NackReason::Sequence]);
    assert!(
        acks(&out).is_empty(),
        "an out-of-window packet triggered an ACK"
    );
    // Three more new packets would make `ack_every` (4) with the refused ones counted; they
    // are not, so two new ones still leave the ACK to the timer.
    let d = data_at(p.to_b, 1, 90, 0, msg(2, 0, 2 * P), w, &[1; P as usize]);
    assert!(acks(&to_b_all(&mut p, &d)).is_empty());
    let d = data_at(p.to_b, 2, 95, 0, msg(3, 0, 2 * P), w, &[1; P as usize]);
    assert!(acks(&to_b_all(&mut p, &d)).is_empty());
    // The delayed ACK echoes the latest *accepted* packet's timestamp.
    p.now += 10_000;
    p.b.handle_timeout(p.now);
    let mut out = Vec::new();
    while let Some(t) = p.b.poll_transmit(p.now, &mut p.buf, &mut p.mb) {
        out.push(p.buf[..t.len].to_vec());
    }
    assert_eq!(acks(&out), vec![(3, 95)]);
    // A duplicate is acknowledged at once and its timestamp echoed.
    let d = data_at(p.to_b, 0, 99, 0, msg(0, 0, 2 * P), w, &[1; P as usize]);
    assert_eq!(acks(&to_b_all(&mut p, &d)), vec![(3, 99)]);
}

// checks: [WIRE-19] [CMPL-2]
#[test]
fn a_zero_length_read_completes_on_its_empty_response_not_on_the_requests_ack() {
    let mut p = Pair::new();
    let lkey = p.ma.register(1, 0x1000, 64, access::LOCAL_WRITE);
    let op = SendOp::Read { rkey: 0, raddr: 0 };
    p.a.post_send(p.a_conn, 1, wr(3, op, sge(lkey, 0x1000, 0)))
        .unwrap();
    let mut held = 0;
    let mut acked_req = false;
    let mut done = Vec::new();
    for step in 0..400 {
        for e in [&mut p.a, &mut p.b] {
            if e.poll_timeout().is_some_and(|t| t <= p.now) {
                e.handle_timeout(p.now);
            }
        }
        while let Some(t) = p.a.poll_transmit(p.now, &mut p.buf, &mut p.ma) {
            let d = p.buf[..t.len].to_vec();
            p.b.handle_datagram(p.now, A, t.src_port, false, &d, &mut p.mb);
        }
        while let Some(t) = p.b.poll_transmit(p.now, &mut p.buf, &mut p.mb) {
            let d = p.buf[..t.len].to_vec();
            let resp = matches!(
                Packet::parse(&d),
                Ok(Packet {
                    body: Body::Data(DataRepr {
                        op: DataOp::ReadResp,
                        ..
                    }),
                    ..
                })
            );
            if resp {
                let Ok(Packet {
                    body: Body::Data(r),
                    ..
                }) = Packet::parse(&d)
                else {
                    unreachable!()
                };
                assert_eq!((r.msg.offset, r.msg.length, r.payload.len()), (0, 0, 0));
            }
            if resp && step < 100 {
                held += 1; // lost, for a while: B resends it
                continue;
            }
            if matches!(
                Packet::parse(&d),
                Ok(Packet {
                    body: Body::Ack(_) | Body::AckMulti(_),
                    ..
                })
            ) {
                acked_req = true;
            }
            p.a.handle_datagram(p.now, B, t.src_port, false, &d, &mut p.ma);
        }
        while let Some(c) = p.a.poll_completion() {
            assert!(step >= 100, "completed before its response arrived: {c:?}");
            done.push(c);
        }
        if !done.is_empty() {
            break;
        }
        p.now += 1_000;
    }
    assert!(held > 0, "B never answered with an empty READ_RESP");
    assert!(acked_req, "B never acknowledged the READ_REQ");
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].status, done[0].byte_len), (Status::Success, 0));
}

/// The rate hint in B's first ACK to a new sender, with B's line rate `rate` Mbit/s;
/// `alone`: B's `full_rate_alone`; `marked`: the data packet arrives CE-marked.
fn first_hint_of(rate: u32, alone: bool, marked: bool) -> u32 {
    let mut p = Pair::with(|c| {
        c.line_rate_mbps = rate;
        c.full_rate_alone = alone;
    });
    let rkey = p.mb.register(1, DST, 64, access::REMOTE_WRITE);
    let w = DataOp::Write { rkey, raddr: DST };
    let d = data_at(p.to_b, 0, 5, flags::LAST, msg(0, 0, 4), w, &[1; 4]);
    p.b.handle_datagram(p.now, A, 40_000, marked, &d, &mut p.mb);
    let mut out = Vec::new();
    while let Some(t) = p.b.poll_transmit(p.now, &mut p.buf, &mut p.mb) {
        out.push(p.buf[..t.len].to_vec());
    }
    out.iter()
        .find_map(|d| match Packet::parse(d) {
            Ok(Packet {
                body: Body::Ack(a), ..
            }) => Some(a.rate_hint_mbps),
            _ => None,
        })
        .expect("an ACK")
}

/// As above, with the headroom of `share_target` always applied (CC-13 off).
fn first_hint(rate: u32) -> u32 {
    first_hint_of(rate, false, false)
}

// checks: [CC-4] [CC-5]
#[test]
fn the_hint_is_the_share_rounded_down_and_never_below_one() {
    // One sender joins: the immediate share is all of C = line rate × 0.97.
    assert_eq!(first_hint(1_000), 970);
    assert_eq!(first_hint(100_000), 97_000);
    assert_eq!(first_hint(10), 9, "9.7 rounds down");
    // 0.97 Mbit/s would round to 0, which means "no hint": it is 1.
    assert_eq!(first_hint(1), 1);
}

// checks: [CC-13]
#[test]
fn a_lone_unmarked_sender_gets_the_whole_line_rate_and_a_mark_brings_the_headroom_back() {
    // The immediate share of a joining sender keeps the headroom (others may follow).
    assert_eq!(first_hint_of(100_000, true, false), 97_000);
    let mut p = Pair::new();
    let rkey = p.mb.register(1, DST, 64, access::REMOTE_WRITE);
    let w = DataOp::Write { rkey, raddr: DST };
    let hint_of = |out: &[Vec<u8>]| {
        out.iter().find_map(|d| match Packet::parse(d) {
            Ok(Packet {
                body: Body::Ack(a), ..
            }) => Some(a.rate_hint_mbps),
            _ => None,
        })
    };
    let mut psn = 0;
    let mut send = |p: &mut Pair, ce: bool| {
        let d = data_at(
            p.to_b,
            psn,
            5,
            flags::LAST | flags::ACK_REQ,
            msg(psn, 0, 4),
            w,
            &[1; 4],
        );
        psn += 1;
        p.b.handle_datagram(p.now, A, 40_000, ce, &d, &mut p.mb);
        let mut out = Vec::new();
        while let Some(t) = p.b.poll_transmit(p.now, &mut p.buf, &mut p.mb) {
            out.push(p.buf[..t.len].to_vec());
        }
        hint_of(&out)
    };
    // Packets every 20 µs keep the sender active; it joined at 0 and is alone: the whole
    // line rate once the join is more than active_timeout (80 µs) old.
    assert_eq!(send(&mut p, false), Some(97_000));
    for t in [20_000, 40_000, 60_000, 80_000] {
        p.now = t;
        assert_eq!(send(&mut p, false), Some(97_000), "joined {t} ns ago");
    }
    p.now = 100_000;
    assert_eq!(send(&mut p, false), Some(100_000), "alone for 100 µs");
    // A CE mark brings the headroom back at the next computation, for active_timeout.
    p.now = 120_000;
    assert_eq!(send(&mut p, true), Some(97_000), "marked");
    for t in [140_000, 160_000, 180_000, 200_000] {
        p.now = t;
        assert_eq!(
            send(&mut p, false),
            Some(97_000),
            "marked at 120 µs, now {t}"
        );
    }
    p.now = 220_000;
    assert_eq!(send(&mut p, false), Some(100_000), "the mark is 100 µs old");
}

// checks: [RES-1] [STREAM-2] [SEND-1]
#[test]
fn a_responder_takes_a_whole_window_of_reads_and_the_requester_holds_the_next() {
    let mut p = Pair::new();
    let rkey = p.mb.register(1, DST, 64, access::REMOTE_READ);
    p.mb.region_mut(rkey).unwrap().data.fill(0x3c);
    let lkey = p.ma.register(1, 0x10_000, 2048, access::LOCAL_WRITE);
    const N: u32 = 1024;
    for i in 0..=N {
        let op = SendOp::Read {
            rkey,
            raddr: DST + (i % 64) as u64,
        };
        let sgl = sge(lkey, 0x10_000 + i as u64, 1);
        p.a.post_send(p.a_conn, 1, wr(i as u64, op, sgl)).unwrap();
    }
    // B's responses are lost for now (its ACKs, hint answers and probes get through): A's
    // READs stay outstanding, so A may start 1024 of them and no more.
    let mut msns = std::collections::BTreeSet::new();
    for _ in 0..4_000 {
        for e in [&mut p.a, &mut p.b] {
            if e.poll_timeout().is_some_and(|t| t <= p.now) {
                e.handle_timeout(p.now);
            }
        }
        while let Some(t) = p.a.poll_transmit(p.now, &mut p.buf, &mut p.ma) {
            let d = p.buf[..t.len].to_vec();
            if let Ok(Packet {
                body: Body::Data(x),
                ..
            }) = Packet::parse(&d)
            {
                msns.insert(x.msg.msn);
            }
            p.b.handle_datagram(p.now, A, t.src_port, false, &d, &mut p.mb);
        }
        while let Some(t) = p.b.poll_transmit(p.now, &mut p.buf, &mut p.mb) {
            let d = p.buf[..t.len].to_vec();
            if !matches!(
                Packet::parse(&d),
                Ok(Packet {
                    body: Body::Data(_),
                    ..
                })
            ) {
                p.a.handle_datagram(p.now, B, t.src_port, false, &d, &mut p.ma);
            }
        }
        p.now += 1_000;
        if msns.len() as u32 == N {
            break;
        }
    }
    assert_eq!(msns.len() as u32, N, "READs started");
    assert_eq!(msns.last().copied(), Some(N - 1), "the 1025th READ started");
    let b = p.b.connection(ConnId(p.to_b)).unwrap().counters();
    assert_eq!(b.nacks_sent.iter().sum::<u64>(), 0, "B refused some: {b:?}");
    assert!(p.a.poll_completion().is_none());
    // Now the responses get through: all 1025 READs complete, in order, every byte read.
    let mut done = Vec::new();
    for _ in 0..20_000 {
        p.exchange();
        while let Some(c) = p.a.poll_completion() {
            done.push(c);
        }
        if done.len() as u32 > N {
            break;
        }
    }
    assert_eq!(done.len() as u32, N + 1);
    assert!(
        done.iter().all(|c| c.status == Status::Success),
        "{:?}",
        &done[..4]
    );
    assert!(
        done.windows(2).all(|w| w[0].wr_id < w[1].wr_id),
        "not in MSN order"
    );
    let got = &p.ma.region(lkey).unwrap().data[..(N + 1) as usize];
    assert!(
        got.iter().all(|&b| b == 0x3c),
        "a READ placed the wrong bytes"
    );
}

// checks: [STREAM-3]
#[test]
fn msns_count_every_request_and_rsns_only_the_receive_consuming_ones() {
    let mut p = Pair::new();
    let rkey = p.mb.register(1, DST, 64, access::REMOTE_WRITE);
    let lkey = p.ma.register(1, 0x1000, 64, access::LOCAL_WRITE);
    let ops = [
        SendOp::Send { imm: None },
        SendOp::Write {
            rkey,
            raddr: DST,
            imm: None,
        },
        SendOp::Send { imm: Some(1) },
        SendOp::Write {
            rkey,
            raddr: DST,
            imm: Some(2),
        },
        SendOp::Read { rkey, raddr: DST },
        SendOp::Send { imm: None },
    ];
    for (i, op) in ops.into_iter().enumerate() {
        p.a.post_send(p.a_conn, 1, wr(i as u64, op, sge(lkey, 0x1000, 4)))
            .unwrap();
    }
    let sent = held_data(&mut p);
    let got: Vec<(u32, Option<u32>)> = sent
        .iter()
        .map(|(_, d)| match Packet::parse(d) {
            Ok(Packet {
                body: Body::Data(x),
                ..
            }) => (
                x.msg.msn,
                match x.op {
                    DataOp::Send { rsn } | DataOp::SendImm { rsn, .. } => Some(rsn),
                    DataOp::WriteImm { rsn, .. } => Some(rsn),
                    _ => None,
                },
            ),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (0, Some(0)),
            (1, None),
            (2, Some(1)),
            (3, Some(2)),
            (4, None),
            (5, Some(3))
        ]
    );
}
