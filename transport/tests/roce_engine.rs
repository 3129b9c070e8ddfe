//! The RoCEv2 RC engine between two endpoints on a tiny deterministic wire (fixed delay,
//! scripted drops): go-back-N, READ re-issue, atomic replay, RNR, error completions, PSN
//! wrap-around, and the packets' validity as RoCEv2 (ICRC over the canonical headers).

mod roce_common;

use ferroce_transport::roce::wire::{self, Opcode, Packet, Syndrome};
use ferroce_transport::roce::{RoceConfig, RoceEndpoint};
use ferroce_transport::*;
use roce_common::*;

#[test]
fn write_send_read_atomics_lossless() {
    let mut w = Wire::new(&|_| {});
    let k = setup(&mut w, 16384);
    let (ac, bc) = (w.a.conn, w.b.conn);
    w.b.ep
        .post_recv(
            bc,
            QP,
            RecvWr {
                wr_id: 900,
                sgl: sge(k.b_recv, 0x40000, 16384),
            },
        )
        .unwrap();
    w.b.ep
        .post_recv(
            bc,
            QP,
            RecvWr {
                wr_id: 901,
                sgl: sge(k.b_recv, 0x40000, 16384),
            },
        )
        .unwrap();
    let ep = &mut w.a.ep;
    ep.post_send(
        ac,
        QP,
        wr(
            1,
            SendOp::Write {
                rkey: k.b_rkey,
                raddr: 0x8000,
                imm: None,
            },
            sge(k.a_lkey, 0x1000, 5000),
        ),
    )
    .unwrap();
    ep.post_send(
        ac,
        QP,
        wr(
            2,
            SendOp::Send { imm: Some(77) },
            sge(k.a_lkey, 0x1000, 3000),
        ),
    )
    .unwrap();
    // READ B[0x9000..+2500] into A[0x3000..].
    ep.post_send(
        ac,
        QP,
        wr(
            3,
            SendOp::Read {
                rkey: k.b_rkey,
                raddr: 0x9000,
            },
            sge(k.a_lkey, 0x3000, 2500),
        ),
    )
    .unwrap();
    ep.post_send(
        ac,
        QP,
        wr(
            4,
            SendOp::FetchAdd {
                rkey: k.b_rkey,
                raddr: 0xa000,
                add: 5,
            },
            sge(k.a_lkey, 0x4000, 8),
        ),
    )
    .unwrap();
    ep.post_send(
        ac,
        QP,
        wr(
            5,
            SendOp::Write {
                rkey: k.b_rkey,
                raddr: 0xb000,
                imm: Some(0xfeed),
            },
            sge(k.a_lkey, 0x1000, 0),
        ),
    )
    .unwrap();
    w.run(10_000_000);
    let ids: Vec<(u64, Status, CompletionOp, u32)> =
        w.a.done
            .iter()
            .map(|c| (c.wr_id, c.status, c.op, c.byte_len))
            .collect();
    assert_eq!(
        ids,
        vec![
            (1, Status::Success, CompletionOp::Write, 5000),
            (2, Status::Success, CompletionOp::Send, 3000),
            (3, Status::Success, CompletionOp::Read, 2500),
            (4, Status::Success, CompletionOp::FetchAdd, 8),
            (5, Status::Success, CompletionOp::Write, 0),
        ]
    );
    let recv: Vec<_> =
        w.b.done
            .iter()
            .map(|c| (c.wr_id, c.op, c.byte_len, c.imm))
            .collect();
    assert_eq!(
        recv,
        vec![
            (900, CompletionOp::Recv, 3000, Some(77)),
            (901, CompletionOp::RecvWriteImm, 0, Some(0xfeed)),
        ]
    );
    let src = pattern(16384, 0x5a);
    let dst0 = pattern(16384, 0x33);
    let b = &w.b.mem.region(k.b_rkey).unwrap().data;
    assert!(b[..5000] == src[..5000]);
    assert!(w.b.mem.region(k.b_recv).unwrap().data[..3000] == src[..3000]);
    let a = &w.a.mem.region(k.a_lkey).unwrap().data;
    // The READ ran after the WRITE, whose 5000 bytes cover the start of the range read.
    assert!(a[0x2000..0x2000 + 2500] == b[0x1000..0x1000 + 2500]);
    assert!(b[0x1000..0x1388] == src[0x1000..0x1388]);
    assert!(b[0x1388..0x1000 + 2500] == dst0[0x1388..0x1000 + 2500]);
    let orig = u64::from_ne_bytes(dst0[0x2000..0x2008].try_into().unwrap());
    assert_eq!(
        u64::from_ne_bytes(a[0x3000..0x3008].try_into().unwrap()),
        orig
    );
    assert_eq!(
        u64::from_ne_bytes(b[0x2000..0x2008].try_into().unwrap()),
        orig.wrapping_add(5)
    );
    let t = w.a.ep.totals();
    assert_eq!((t.retx_pkts, t.timeouts, t.nacks_received), (0, 0, 0));
    // 5 + 3 WRITE/SEND packets + READ + FETCH_ADD + WRITE_ONLY_IMM.
    assert_eq!(t.tx_pkts, 11, "{t:?}");
    // PSNs are contiguous: the READ consumed 3.
    let reqs: Vec<u32> = w.log.iter().filter(|x| x.0).map(|x| x.2).collect();
    for pair in reqs.windows(2) {
        assert!(wire::psn::diff(pair[1], pair[0]) >= 1);
    }
}

fn bulk_writes(w: &mut Wire, k: &Keys, n: u64, size: u32) {
    for i in 0..n {
        w.a.ep
            .post_send(
                w.a.conn,
                QP,
                wr(
                    i,
                    SendOp::Write {
                        rkey: k.b_rkey,
                        raddr: 0x8000 + (i * size as u64) % 32768,
                        imm: None,
                    },
                    sge(k.a_lkey, 0x1000 + (i * size as u64) % 32768, size),
                ),
            )
            .unwrap();
    }
}

#[test]
fn go_back_n_after_one_loss_resends_the_window_from_the_hole() {
    let mut w = Wire::new(&|_| {});
    let k = setup(&mut w, 65536);
    // Drop the 5th data packet, once.
    w.drop = Box::new(|from_a, op, _, n| from_a && op != Opcode::Acknowledge && n == 4);
    bulk_writes(&mut w, &k, 8, 4096);
    w.run(50_000_000);
    assert_eq!(w.a.done.len(), 8);
    assert!(w.a.done.iter().all(|c| c.status == Status::Success));
    let ca = *w.a.ep.counters();
    let cb = *w.b.ep.counters();
    assert_eq!(cb.seq_naks_sent, 1, "one NAK per gap");
    assert_eq!(ca.seq_naks_received, 1);
    assert_eq!(ca.timeouts, 0, "the NAK, not the timer, recovered");
    assert!(cb.rx_out_of_sequence >= 1);
    // Everything after the hole was sent again.
    let data: Vec<u32> = w
        .log
        .iter()
        .filter(|x| x.0 && x.1 != Opcode::Acknowledge)
        .map(|x| x.2)
        .collect();
    let hole = data[4];
    let resent = data.iter().filter(|&&p| p == hole).count();
    assert_eq!(resent, 2);
    assert_eq!(
        ca.retx_pkts,
        32 - 4,
        "go-back-N resends from the hole: {ca:?}"
    );
    let b = &w.b.mem.region(k.b_rkey).unwrap().data;
    let a = &w.a.mem.region(k.a_lkey).unwrap().data;
    assert!(b[..32768] == a[..32768]);
}

#[test]
fn tail_loss_is_recovered_by_the_local_ack_timeout() {
    let mut w = Wire::new(&|_| {});
    let k = setup(&mut w, 65536);
    // Drop the last data packet the first time.
    let mut seen = false;
    w.drop = Box::new(move |from_a, op, _, _| {
        if from_a && op == Opcode::WriteLast && !seen {
            seen = true;
            return true;
        }
        false
    });
    bulk_writes(&mut w, &k, 1, 4096);
    w.run(50_000_000);
    assert_eq!(w.a.done.len(), 1);
    assert_eq!(w.a.done[0].status, Status::Success);
    let ca = *w.a.ep.counters();
    assert_eq!(ca.timeouts, 1);
    // Only the last packet asked for an ACK, so nothing was acknowledged: go-back-N resends
    // all four packets of the message.
    assert_eq!(ca.retx_pkts, 4);
    // The timer fired ~1 ms (timeout 8: 4.096 µs * 256) after the last packet was sent.
    assert!(w.now >= 1_048_576, "{}", w.now);
}

#[test]
fn lost_ack_is_recovered_by_timeout_and_duplicate_re_ack() {
    let mut w = Wire::new(&|_| {});
    let k = setup(&mut w, 65536);
    let mut n_acks = 0;
    w.drop = Box::new(move |from_a, op, _, _| {
        if !from_a && op == Opcode::Acknowledge {
            n_acks += 1;
            return n_acks == 1;
        }
        false
    });
    bulk_writes(&mut w, &k, 1, 2048);
    w.run(50_000_000);
    assert_eq!(w.a.done.len(), 1);
    let cb = *w.b.ep.counters();
    assert_eq!(cb.rx_duplicates, 2, "both packets arrived twice");
    assert_eq!(
        cb.acks_sent, 2,
        "the duplicate with AckReq was acknowledged again"
    );
    assert_eq!(w.a.ep.counters().timeouts, 1);
}

#[test]
fn lost_read_responses_are_re_requested_from_the_missing_psn() {
    let mut w = Wire::new(&|_| {});
    let k = setup(&mut w, 65536);
    // Drop the 3rd READ response once: the requester re-issues the READ for the rest.
    let mut dropped = false;
    w.drop = Box::new(move |from_a, op, _, _| {
        if !from_a && op == Opcode::ReadResponseMiddle && !dropped {
            dropped = true;
            return true;
        }
        false
    });
    w.a.ep
        .post_send(
            w.a.conn,
            QP,
            wr(
                7,
                SendOp::Read {
                    rkey: k.b_rkey,
                    raddr: 0x8000,
                },
                sge(k.a_lkey, 0x1000, 8 * 1024 + 100),
            ),
        )
        .unwrap();
    w.run(50_000_000);
    assert_eq!(w.a.done.len(), 1);
    assert_eq!(w.a.done[0].status, Status::Success);
    assert_eq!(w.a.done[0].byte_len, 8 * 1024 + 100);
    let a = &w.a.mem.region(k.a_lkey).unwrap().data;
    assert!(a[..8292] == pattern(65536, 0x33)[..8292]);
    let ca = *w.a.ep.counters();
    assert_eq!(ca.read_gap_retries, 1);
    assert_eq!(ca.timeouts, 0);
    // The second READ request starts at the first missing response's PSN, mid-message.
    let reqs: Vec<u32> = w
        .log
        .iter()
        .filter(|x| x.1 == Opcode::ReadRequest)
        .map(|x| x.2)
        .collect();
    assert_eq!(reqs.len(), 2);
    let first = reqs[0];
    assert_eq!(
        reqs[1],
        wire::psn::add(first, 1),
        "the FIRST response arrived, the second did not"
    );
    let cb = *w.b.ep.counters();
    assert!(cb.retx_pkts >= 8, "responses replayed: {cb:?}");
}

#[test]
fn lost_atomic_ack_is_replayed_not_re_executed() {
    let mut w = Wire::new(&|_| {});
    let k = setup(&mut w, 65536);
    let mut dropped = false;
    w.drop = Box::new(move |from_a, op, _, _| {
        if !from_a && op == Opcode::AtomicAcknowledge && !dropped {
            dropped = true;
            return true;
        }
        false
    });
    w.a.ep
        .post_send(
            w.a.conn,
            QP,
            wr(
                1,
                SendOp::FetchAdd {
                    rkey: k.b_rkey,
                    raddr: 0x8000,
                    add: 1,
                },
                sge(k.a_lkey, 0x1000, 8),
            ),
        )
        .unwrap();
    w.a.ep
        .post_send(
            w.a.conn,
            QP,
            wr(
                2,
                SendOp::CmpSwap {
                    rkey: k.b_rkey,
                    raddr: 0x8008,
                    compare: 0,
                    swap: 9,
                },
                sge(k.a_lkey, 0x1008, 8),
            ),
        )
        .unwrap();
    w.run(50_000_000);
    assert_eq!(w.a.done.len(), 2);
    let b = &w.b.mem.region(k.b_rkey).unwrap().data;
    let orig = u64::from_ne_bytes(pattern(65536, 0x33)[..8].try_into().unwrap());
    // Executed exactly once although the request arrived twice.
    assert_eq!(u64::from_ne_bytes(b[..8].try_into().unwrap()), orig + 1);
    let a = &w.a.mem.region(k.a_lkey).unwrap().data;
    assert_eq!(u64::from_ne_bytes(a[..8].try_into().unwrap()), orig);
    assert!(w.b.ep.counters().rx_duplicates >= 1);
}

#[test]
fn rnr_nak_waits_for_the_timer_then_succeeds() {
    let mut w = Wire::new(&|c| c.min_rnr_timer = 1); // 10 µs
    let k = setup(&mut w, 65536);
    w.a.ep
        .post_send(
            w.a.conn,
            QP,
            wr(1, SendOp::Send { imm: None }, sge(k.a_lkey, 0x1000, 3000)),
        )
        .unwrap();
    // No receive posted yet: RNR NAKs until one is.
    w.run(35_000);
    assert!(w.a.done.is_empty());
    let rnr = w.a.ep.counters().rnr_naks_received;
    assert!(rnr >= 2, "{rnr}");
    w.b.ep
        .post_recv(
            w.b.conn,
            QP,
            RecvWr {
                wr_id: 5,
                sgl: sge(k.b_recv, 0x40000, 4096),
            },
        )
        .unwrap();
    w.run(10_000_000);
    assert_eq!(w.a.done.len(), 1);
    assert_eq!(w.a.done[0].status, Status::Success);
    assert_eq!(w.b.done[0].byte_len, 3000);
    assert_eq!(w.a.ep.counters().timeouts, 0);
}

#[test]
fn rnr_retry_exceeded_flushes_the_queue() {
    let mut w = Wire::new(&|c| {
        c.min_rnr_timer = 1;
        c.rnr_retry = 2;
    });
    let k = setup(&mut w, 65536);
    for i in 0..3 {
        w.a.ep
            .post_send(
                w.a.conn,
                QP,
                wr(i, SendOp::Send { imm: None }, sge(k.a_lkey, 0x1000, 100)),
            )
            .unwrap();
    }
    w.run(10_000_000);
    let st: Vec<Status> = w.a.done.iter().map(|c| c.status).collect();
    assert_eq!(
        st,
        vec![Status::RnrRetryExceeded, Status::Flushed, Status::Flushed]
    );
    assert_eq!(w.a.ep.counters().rnr_naks_received, 3);
    assert_eq!(w.a.ep.qp_in_error(w.a.conn, QP), Some(true));
    assert_eq!(
        w.a.ep.post_send(
            w.a.conn,
            QP,
            wr(9, SendOp::Send { imm: None }, sge(k.a_lkey, 0x1000, 1))
        ),
        Err(PostError::StreamInError)
    );
}

#[test]
fn wrong_rkey_gives_remote_access_error_and_touches_nothing() {
    let mut w = Wire::new(&|_| {});
    let k = setup(&mut w, 65536);
    w.b.ep
        .post_recv(
            w.b.conn,
            QP,
            RecvWr {
                wr_id: 1,
                sgl: sge(k.b_recv, 0x40000, 4096),
            },
        )
        .unwrap();
    let before = w.b.mem.region(k.b_rkey).unwrap().data.clone();
    w.a.ep
        .post_send(
            w.a.conn,
            QP,
            wr(
                1,
                SendOp::Write {
                    rkey: k.b_rkey ^ 0x40,
                    raddr: 0x8000,
                    imm: None,
                },
                sge(k.a_lkey, 0x1000, 5000),
            ),
        )
        .unwrap();
    w.a.ep
        .post_send(
            w.a.conn,
            QP,
            wr(2, SendOp::Send { imm: None }, sge(k.a_lkey, 0x1000, 10)),
        )
        .unwrap();
    w.run(10_000_000);
    let st: Vec<(u64, Status)> = w.a.done.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(st, vec![(1, Status::RemoteAccess), (2, Status::Flushed)]);
    assert!(w.b.mem.region(k.b_rkey).unwrap().data == before);
    assert_eq!(w.b.ep.counters().fatal_naks_sent, 1);
    assert_eq!(w.b.ep.qp_in_error(w.b.conn, QP), Some(true));
    // The responder's receive was flushed.
    assert_eq!(w.b.done.len(), 1);
    assert_eq!(w.b.done[0].status, Status::Flushed);
    // The NAK named the WRITE's first PSN.
    let nak = w
        .log
        .iter()
        .find(|x| !x.0 && x.1 == Opcode::Acknowledge)
        .unwrap();
    let first = w.log.iter().find(|x| x.0).unwrap();
    assert_eq!(nak.2, first.2);
}

#[test]
fn out_of_bounds_read_and_misaligned_atomic_are_refused() {
    let mut w = Wire::new(&|_| {});
    let k = setup(&mut w, 4096);
    w.a.ep
        .post_send(
            w.a.conn,
            QP,
            wr(
                1,
                SendOp::Read {
                    rkey: k.b_rkey,
                    raddr: 0x8000 + 4000,
                },
                sge(k.a_lkey, 0x1000, 200),
            ),
        )
        .unwrap();
    w.run(10_000_000);
    assert_eq!(w.a.done[0].status, Status::RemoteAccess);

    let mut w = Wire::new(&|_| {});
    let k = setup(&mut w, 4096);
    w.a.ep
        .post_send(
            w.a.conn,
            QP,
            wr(
                1,
                SendOp::FetchAdd {
                    rkey: k.b_rkey,
                    raddr: 0x8004,
                    add: 1,
                },
                sge(k.a_lkey, 0x1000, 8),
            ),
        )
        .unwrap();
    w.run(10_000_000);
    assert_eq!(w.a.done[0].status, Status::RemoteInvalidRequest);
}

#[test]
fn retry_exceeded_when_the_peer_is_silent() {
    let mut w = Wire::new(&|c| c.retry_cnt = 3);
    let k = setup(&mut w, 65536);
    w.drop = Box::new(|from_a, _, _, _| from_a);
    bulk_writes(&mut w, &k, 2, 1000);
    w.run(100_000_000);
    let st: Vec<Status> = w.a.done.iter().map(|c| c.status).collect();
    assert_eq!(st, vec![Status::RetryExceeded, Status::Flushed]);
    assert_eq!(
        w.a.ep.counters().timeouts,
        4,
        "3 retries, the 4th timeout fails"
    );
}

/// A dead peer with retry_cnt 7: IBTA's reading (the verbs shim's) fails the QP after 7
/// retries, the 8th timeout; rxe's (the default) keeps retrying.
#[test]
fn retry_cnt_7_fails_after_seven_retries_unless_forever() {
    for forever in [false, true] {
        let mut w = Wire::new(&|c| {
            c.retry_cnt = 7;
            c.retry_forever_at_7 = forever;
        });
        let k = setup(&mut w, 65536);
        w.drop = Box::new(|from_a, _, _, _| from_a);
        bulk_writes(&mut w, &k, 2, 1000);
        // 8 timeouts of ~67 ms (timeout 14) fit in 1 s; far more than that in 3 s.
        w.run(3_000_000_000);
        let st: Vec<Status> = w.a.done.iter().map(|c| c.status).collect();
        if forever {
            assert!(st.is_empty(), "{st:?}");
            assert!(w.a.ep.counters().timeouts > 8);
        } else {
            assert_eq!(st, vec![Status::RetryExceeded, Status::Flushed]);
            assert_eq!(
                w.a.ep.counters().timeouts,
                8,
                "7 retries, the 8th timeout fails"
            );
        }
    }
}

#[test]
fn psn_wraps_around_2_pow_24() {
    let mut w = Wire::new(&|c| c.initial_psn = Some(0xff_fff0));
    let k = setup(&mut w, 65536);
    let mut n = 0;
    // Lose a packet right at the wrap.
    w.drop = Box::new(move |from_a, _, psn, _| {
        if from_a && psn == 0 {
            n += 1;
            return n == 1;
        }
        false
    });
    bulk_writes(&mut w, &k, 10, 3000);
    w.b.ep
        .post_recv(
            w.b.conn,
            QP,
            RecvWr {
                wr_id: 1,
                sgl: sge(k.b_recv, 0x40000, 65536),
            },
        )
        .unwrap();
    w.a.ep
        .post_send(
            w.a.conn,
            QP,
            wr(
                100,
                SendOp::Send { imm: None },
                sge(k.a_lkey, 0x1000, 20000),
            ),
        )
        .unwrap();
    w.run(50_000_000);
    assert_eq!(w.a.done.len(), 11);
    assert!(w.a.done.iter().all(|c| c.status == Status::Success));
    let (snd, una, _) = w.a.ep.qp_psns(w.a.conn, QP).unwrap();
    assert_eq!(snd, una);
    assert!(snd < 0x100, "wrapped: {snd:#x}");
    assert!(w.b.mem.region(k.b_recv).unwrap().data[..20000] == pattern(65536, 0x5a)[..20000]);
}

#[test]
fn bad_icrc_unknown_qp_and_garbage_are_dropped() {
    let mut w = Wire::new(&|_| {});
    let _ = setup(&mut w, 4096);
    let mut buf = [0u8; 64];
    let p = Packet {
        bth: wire::Bth::new(Opcode::Acknowledge, QP, 0),
        ext: wire::ExtHeaders {
            aeth: Some(wire::Aeth {
                syndrome: Syndrome::ACK,
                msn: 0,
            }),
            ..Default::default()
        },
        payload: &[],
    };
    let flow = wire::Flow {
        src: B,
        dst: A,
        src_port: 0xc000,
        dst_port: 4791,
    };
    let n = p.emit_canonical(&mut buf, &flow).unwrap();
    buf[13] ^= 1; // corrupt the AETH
    w.a.ep
        .handle_datagram(0, B, 0xc000, false, &buf[..n], &mut w.a.mem);
    assert_eq!(w.a.ep.counters().rx_bad_icrc, 1);
    let mut p2 = p;
    p2.bth.dest_qpn = 0x99;
    let n = p2.emit_canonical(&mut buf, &flow).unwrap();
    w.a.ep
        .handle_datagram(0, B, 0xc000, false, &buf[..n], &mut w.a.mem);
    assert_eq!(w.a.ep.counters().rx_unknown_qp, 1);
    for len in 0..64 {
        for seed in 0..8u8 {
            let junk: Vec<u8> = (0..len)
                .map(|i| (i as u8).wrapping_mul(31) ^ seed)
                .collect();
            w.a.ep
                .handle_datagram(0, B, 0xc000, false, &junk, &mut w.a.mem);
        }
    }
    assert_eq!(w.a.ep.counters().rx_pkts, 0);
}

/// xorshift64*: a tiny deterministic generator for the fuzz test.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Packets with a valid ICRC but random opcodes, PSNs near the live ones, random headers and
/// lengths, thrown at both ends while they run a workload: nothing panics (run this test in
/// a debug build too: overflow checks), and the engine keeps its invariants.
#[test]
fn fuzzed_packets_never_panic() {
    // The RC QPs' opcodes (UD ones go to UD QPs, which this wire has none of: roce_ud.rs).
    let opcodes: Vec<Opcode> = (0..=255u8)
        .filter_map(Opcode::from_u8)
        .filter(|o| !o.is_ud())
        .collect();
    let mut wrong_transport = 0;
    for seed in 1..40u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mut w = Wire::new(&|c| c.min_rnr_timer = 1);
        let k = setup(&mut w, 65536);
        for i in 0..4 {
            w.b.ep
                .post_recv(
                    w.b.conn,
                    QP,
                    RecvWr {
                        wr_id: i,
                        sgl: sge(k.b_recv, 0x40000, 3000),
                    },
                )
                .unwrap();
        }
        bulk_writes(&mut w, &k, 3, 2500);
        w.a.ep
            .post_send(
                w.a.conn,
                QP,
                wr(
                    50,
                    SendOp::Read {
                        rkey: k.b_rkey,
                        raddr: 0x8000,
                    },
                    sge(k.a_lkey, 0x1000, 5000),
                ),
            )
            .unwrap();
        w.a.ep
            .post_send(
                w.a.conn,
                QP,
                wr(51, SendOp::Send { imm: None }, sge(k.a_lkey, 0x1000, 100)),
            )
            .unwrap();
        let mut payload = vec![0u8; 3000];
        let mut buf = vec![0u8; 4096];
        for step in 0..300 {
            if step % 10 == 0 {
                w.run(3_000);
            }
            let to_b = rng.below(2) == 0;
            let (a_psns, b_psns) = (
                w.a.ep.qp_psns(w.a.conn, QP).unwrap(),
                w.b.ep.qp_psns(w.b.conn, QP).unwrap(),
            );
            let near = if to_b { b_psns } else { a_psns };
            let base = [near.0, near.1, near.2][rng.below(3) as usize];
            let psn = wire::psn::add(base, (rng.below(9) as u32).wrapping_sub(4));
            let op = opcodes[rng.below(opcodes.len() as u64) as usize];
            let plen = if op.has_payload() {
                [0, 1, 5, 1023, 1024, 1025, 3000][rng.below(7) as usize]
            } else {
                0
            };
            for b in payload.iter_mut().take(plen) {
                *b = rng.next() as u8;
            }
            let mut bth = wire::Bth::new(op, QP, psn);
            bth.ack_req = rng.below(2) == 0;
            bth.pad = wire::pad_for(plen);
            // Now and then the XRC form (to an RC QP: dropped as another transport's).
            bth.xrc = rng.below(8) == 0 && !op.is_ud() && op != Opcode::Cnp;
            let addr = [0x8000u64, 0x8004, 0x9000, 0xffff_ffff_ffff_fff0, 0][rng.below(5) as usize];
            let key = [k.b_rkey, k.a_lkey, 0, 0xffff_ffff][rng.below(4) as usize];
            let len = [0u32, 8, 1024, 5000, 70000, u32::MAX][rng.below(6) as usize];
            let ext = wire::ExtHeaders {
                xrceth: op
                    .has_xrceth(bth.xrc)
                    .then_some(wire::Xrceth::new(rng.next() as u32)),
                deth: op.has_deth().then_some(wire::Deth {
                    qkey: rng.next() as u32,
                    src_qpn: QP,
                    resv: 0,
                }),
                reth: op.has_reth().then_some(wire::Reth {
                    va: addr,
                    rkey: key,
                    dma_len: len,
                }),
                aeth: op.has_aeth().then_some(wire::Aeth {
                    syndrome: Syndrome::from_u8(rng.next() as u8),
                    msn: rng.next() as u32 & 0xff_ffff,
                }),
                atomic: op.has_atomic_eth().then_some(wire::AtomicEth {
                    va: addr,
                    rkey: key,
                    swap_add: rng.next(),
                    compare: rng.next(),
                }),
                atomic_ack: op.has_atomic_ack_eth().then_some(rng.next()),
                imm: op.has_imm().then_some(rng.next() as u32),
                ieth: op.has_ieth().then_some(rng.next() as u32),
                cnp: (op == Opcode::Cnp).then_some([0; 16]),
            };
            let p = Packet {
                bth,
                ext,
                payload: &payload[..plen],
            };
            let (src, dst) = if to_b { (A, B) } else { (B, A) };
            let flow = wire::Flow {
                src,
                dst,
                src_port: 0xc123,
                dst_port: 4791,
            };
            let Ok(n) = p.emit_canonical(&mut buf, &flow) else {
                continue;
            };
            let s = if to_b { &mut w.b } else { &mut w.a };
            s.ep.handle_datagram(w.now, src, 0xc123, false, &buf[..n], &mut s.mem);
            // Truncated and bit-flipped copies too.
            let cut = rng.below(n as u64 + 1) as usize;
            s.ep.handle_datagram(w.now, src, 0xc123, false, &buf[..cut], &mut s.mem);
        }
        w.run(100_000_000);
        let reached = w.a.ep.counters().rx_pkts + w.b.ep.counters().rx_pkts;
        assert!(reached > 300, "fuzzed packets reach the QPs: {reached}");
        wrong_transport += w.a.ep.counters().rx_wrong_transport;
        wrong_transport += w.b.ep.counters().rx_wrong_transport;
        // Whatever happened, every posted request completed exactly once, in order.
        let ids: Vec<u64> = w.a.done.iter().map(|c| c.wr_id).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted, "seed {seed}");
        assert!(ids.len() <= 5);
        if w.a.ep.qp_in_error(w.a.conn, QP) == Some(true) {
            assert_eq!(
                ids,
                vec![0, 1, 2, 50, 51],
                "seed {seed}: flushed ones complete too"
            );
        }
    }
    // The XRC forms reached RC QPs and were refused as another transport's.
    assert!(wrong_transport > 0);
}

/// Two endpoints whose QP `QP` is UC (sq_psn = rq_psn = 0x100 both ways).
fn uc_wire() -> Wire {
    let mut w = Wire::new(&|_| {});
    for (s, peer) in [(&mut w.a, B), (&mut w.b, A)] {
        let mut c = RoceConfig::new(s.ip);
        c.timeout = 8;
        s.ep = RoceEndpoint::new(c);
        s.conn = s.ep.connect(peer);
        s.ep.poll_event();
        s.ep.create_uc_qp(
            s.conn,
            ferroce_transport::roce::QpParams {
                local_qpn: QP,
                remote_qpn: QP,
                pd: 1,
                sq_psn: 0x100,
                rq_psn: 0x100,
                mtu: 0,
            },
        )
        .unwrap();
        assert_eq!(s.ep.qp_is_uc(s.conn, QP), Some(true));
    }
    w
}

#[test]
fn uc_loss_loses_whole_messages_and_resynchronises() {
    let mut w = uc_wire();
    let k = setup(&mut w, 16384);
    let (ac, bc) = (w.a.conn, w.b.conn);
    for (i, at) in [0x40000u64, 0x41000, 0x42000].into_iter().enumerate() {
        w.b.ep
            .post_recv(
                bc,
                QP,
                RecvWr {
                    wr_id: 900 + i as u64,
                    sgl: sge(k.b_recv, at, 4096),
                },
            )
            .unwrap();
    }
    let write = |raddr, imm| SendOp::Write {
        rkey: k.b_rkey,
        raddr,
        imm,
    };
    let posts = [
        (1, SendOp::Send { imm: None }, 0x1000, 3000),
        (2, SendOp::Send { imm: None }, 0x2000, 3000),
        (3, SendOp::Send { imm: Some(9) }, 0x1000, 100),
        (4, write(0x8000, None), 0x1000, 3000),
        (5, write(0x9000, Some(0x77)), 0x1000, 2000),
        (6, write(0xa000, None), 0x1000, 2048),
    ];
    for (id, op, at, len) in posts {
        w.a.ep
            .post_send(ac, QP, wr(id, op, sge(k.a_lkey, at, len)))
            .unwrap();
    }
    // UC has no READ or atomics.
    assert_eq!(
        w.a.ep.post_send(
            ac,
            QP,
            wr(
                7,
                SendOp::Read {
                    rkey: k.b_rkey,
                    raddr: 0x8000
                },
                sge(k.a_lkey, 0x1000, 8)
            )
        ),
        Err(PostError::Unsupported)
    );
    // Lose SEND 1's middle packet and WRITE 4's first (A's packets 1 and 7).
    w.drop = Box::new(|from_a, _, _, n| from_a && (n == 1 || n == 7));
    w.run(10_000_000);
    // The sender completes every request once sent, loss or not; nothing is resent and
    // the responder sends nothing at all (no ACKs).
    let a: Vec<_> = w.a.done.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(a, (1..=6).map(|i| (i, Status::Success)).collect::<Vec<_>>());
    assert_eq!(w.log.len(), 14, "each packet sent once");
    assert!(w.log.iter().all(|&(from_a, _, _)| from_a), "no ACKs");
    assert_eq!(w.a.ep.poll_timeout(), None, "no retransmission timer");
    // SEND 1 is lost: its receive (900) takes SEND 2; WRITE 4 is lost whole.
    let b: Vec<_> =
        w.b.done
            .iter()
            .map(|c| (c.wr_id, c.status, c.op, c.byte_len, c.imm))
            .collect();
    assert_eq!(
        b,
        vec![
            (900, Status::Success, CompletionOp::Recv, 3000, None),
            (901, Status::Success, CompletionOp::Recv, 100, Some(9)),
            (
                902,
                Status::Success,
                CompletionOp::RecvWriteImm,
                2000,
                Some(0x77)
            ),
        ]
    );
    let src = pattern(16384, 0x5a);
    let before = pattern(16384, 0x33);
    let recv = &w.b.mem.region(k.b_recv).unwrap().data;
    assert_eq!(
        &recv[..3000],
        &src[0x1000..0x1000 + 3000],
        "SEND 2 in receive 900"
    );
    assert_eq!(&recv[0x1000..0x1000 + 100], &src[..100]);
    let dst = &w.b.mem.region(k.b_rkey).unwrap().data;
    assert_eq!(&dst[..3000], &before[..3000], "the lost WRITE left nothing");
    assert_eq!(&dst[0x1000..0x1000 + 2000], &src[..2000]);
    assert_eq!(&dst[0x2000..0x2000 + 2048], &src[..2048]);
    let c = w.b.ep.counters();
    assert_eq!((c.uc_msgs_dropped, c.uc_pkts_dropped), (1, 3));
    assert_eq!(c.acks_sent + c.seq_naks_sent + c.rnr_naks_sent, 0);
}

#[test]
fn uc_without_receive_drops_the_send_silently() {
    let mut w = uc_wire();
    let k = setup(&mut w, 16384);
    let ac = w.a.conn;
    w.a.ep
        .post_send(
            ac,
            QP,
            wr(1, SendOp::Send { imm: None }, sge(k.a_lkey, 0x1000, 2000)),
        )
        .unwrap();
    w.run(10_000_000);
    assert_eq!(w.a.done.len(), 1);
    assert_eq!(w.a.done[0].status, Status::Success);
    assert!(w.b.done.is_empty());
    let c = w.b.ep.counters();
    assert_eq!(
        (c.uc_no_recv, c.uc_pkts_dropped, c.rnr_naks_sent),
        (1, 1, 0)
    );
    // An RC QP of the peer refuses UC packets (and the reverse), counted as a bad BTH.
    let mut rc = Wire::new(&|_| {});
    let ka = setup(&mut rc, 4096);
    rc.a.ep
        .post_send(
            rc.a.conn,
            QP,
            wr(1, SendOp::Send { imm: None }, sge(ka.a_lkey, 0x1000, 10)),
        )
        .unwrap();
    let mut buf = vec![0u8; 9000];
    let t = rc.a.ep.poll_transmit(0, &mut buf, &mut rc.a.mem).unwrap();
    w.b.ep
        .handle_datagram(0, A, t.src_port, false, &buf[..t.len], &mut w.b.mem);
    assert_eq!(w.b.ep.counters().rx_bad_bth, 1);
}
