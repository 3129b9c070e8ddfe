//! A hostile or broken peer (spec/security.md §3.1), on the sans-IO core where the wire is
//! the point: the test speaks for one side with crafted native packets, the other side is a
//! real endpoint (the victim). For each case the victim stays correct (no completion it
//! should not give, data placed exactly once, later work still succeeds), its state stays
//! bounded, and the event is counted.

mod common;

use common::*;
use ferroce_transport::mem::access;
use ferroce_transport::wire::{
    flags, AckRepr, Body, DataOp, NackReason, NackRepr, OpenRepr, Sack256,
};
use ferroce_transport::*;
use std::net::Ipv4Addr;

/// B's crafted packet to A (the victim); what A sends in answer.
fn to_a(p: &mut Pair, d: &[u8]) -> Vec<Vec<u8>> {
    p.a.handle_datagram(p.now, B, 40_000, false, d, &mut p.ma);
    let mut out = Vec::new();
    while let Some(t) = p.a.poll_transmit(p.now, &mut p.buf, &mut p.ma) {
        out.push(p.buf[..t.len].to_vec());
    }
    p.now += 1_000;
    out
}

fn ack(cum_psn: u32, sack: Sack256) -> Body<'static> {
    Body::Ack(AckRepr {
        cum_psn,
        sack,
        ecn_ce: 0,
        rate_hint_mbps: 0,
        ts_echo: 0,
        ack_delay_ns: 0,
    })
}

fn a_counters(p: &Pair) -> ConnCounters {
    p.a.connection(p.a_conn).unwrap().counters()
}

fn b_counters(p: &Pair) -> ConnCounters {
    p.b.connection(ConnId(p.to_b)).unwrap().counters()
}

/// A's WRITE of `n` chunks (0x5a) into B's region at `DST`; returns B's key.
fn post_write(p: &mut Pair, wr_id: u64, n: u32) -> u32 {
    let rkey = p.mb.iter().find(|(_, r)| r.addr == DST).map(|(k, _)| k);
    let rkey = rkey.unwrap_or_else(|| {
        p.mb.register(
            1,
            DST,
            4096,
            access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
        )
    });
    let lkey = p.ma.iter().find(|(_, r)| r.addr == 0x1000).map(|(k, _)| k);
    let lkey = lkey.unwrap_or_else(|| p.ma.register(1, 0x1000, 4096, access::LOCAL_WRITE));
    p.ma.region_mut(lkey).unwrap().data.fill(0x5a);
    p.a.post_send(
        p.a_conn,
        1,
        SendWr {
            wr_id,
            op: SendOp::Write {
                rkey,
                raddr: DST,
                imm: None,
            },
            sgl: [Sge {
                lkey,
                addr: 0x1000,
                len: n * P,
            }]
            .into_iter()
            .collect(),
            signaled: true,
            solicited: false,
            fence: false,
        },
    )
    .unwrap();
    rkey
}

/// Deliver `pkts` to B, then exchange until A has `n` completions (or give up).
fn deliver_and_complete(p: &mut Pair, pkts: &[Vec<u8>], n: usize) -> Vec<Completion> {
    for d in pkts {
        p.b.handle_datagram(p.now, A, 40_000, false, d, &mut p.mb);
    }
    let mut done = Vec::new();
    for _ in 0..200 {
        p.exchange();
        while let Some(c) = p.a.poll_completion() {
            done.push(c);
        }
        if done.len() >= n {
            break;
        }
    }
    done
}

// checks: [ACK-6] [SEC-5]
#[test]
fn acks_and_sacks_for_psns_never_sent_are_ignored_and_counted() {
    let mut p = Pair::new();
    post_write(&mut p, 1, 4);
    let (psns, pkts) = a_sends(&mut p);
    assert_eq!(psns.len(), 4, "{psns:?}");
    let top = *psns.iter().max().unwrap();
    let first = *psns.iter().min().unwrap();
    // A cumulative ACK far past anything sent, then one just past the last PSN sent + 1,
    // then a SACK bit for a PSN never sent (cumulative part honest: nothing received).
    let mut sack = Sack256::default();
    sack.0[0] = 1 << 40; // PSN first + 41
    for (i, body) in [
        ack(top.wrapping_add(1000), Sack256::default()),
        ack(top.wrapping_add(2), Sack256::default()),
        ack(first, sack),
    ]
    .into_iter()
    .enumerate()
    {
        let d = crafted(p.to_a, 0, 0, body);
        to_a(&mut p, &d);
        assert_eq!(a_counters(&p).rx_acks_bogus, i as u64 + 1);
        assert!(
            p.a.poll_completion().is_none(),
            "a bogus ACK completed the WRITE"
        );
    }
    // The real data reaches B; the WRITE completes once, successfully, every byte there.
    let done = deliver_and_complete(&mut p, &pkts, 1);
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!((done[0].wr_id, done[0].status), (1, Status::Success));
    assert!(p.dst()[..4 * P as usize].iter().all(|&b| b == 0x5a));
}

// checks: [ACK-6] [SEC-5]
#[test]
fn cumulative_acks_running_backwards_change_nothing_and_are_counted() {
    let mut p = Pair::new();
    post_write(&mut p, 1, 4);
    let (psns, pkts) = a_sends(&mut p);
    let done = deliver_and_complete(&mut p, &pkts, 1);
    assert_eq!(done.len(), 1);
    let first = *psns.iter().min().unwrap();
    let before = a_counters(&p);
    for back in 0..4 {
        let d = crafted(p.to_a, 0, 0, ack(first + back, Sack256::default()));
        to_a(&mut p, &d);
    }
    let after = a_counters(&p);
    assert!(after.rx_acks_stale >= before.rx_acks_stale + 4, "{after:?}");
    assert!(
        p.a.poll_completion().is_none(),
        "a stale ACK completed something"
    );
    // The connection still works: a second WRITE completes.
    post_write(&mut p, 2, 2);
    let (_, pkts) = a_sends(&mut p);
    let done = deliver_and_complete(&mut p, &pkts, 1);
    assert_eq!(
        done.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        vec![(2, Status::Success)]
    );
}

// checks: [NACK-3] [NACK-4] [SEC-5]
#[test]
fn nacks_for_innocent_messages_are_ignored_and_counted() {
    let mut p = Pair::new();
    post_write(&mut p, 1, 2);
    let (psns, pkts) = a_sends(&mut p);
    let done = deliver_and_complete(&mut p, &pkts, 1);
    assert_eq!(done.len(), 1);
    let nack = |psn, msn, reason| {
        Body::Nack(NackRepr {
            psn,
            stream: 1,
            msn,
            reason,
            rnr_delay: 0,
        })
    };
    let first = *psns.iter().min().unwrap();
    let before = a_counters(&p).rx_nacks_ignored;
    // For the completed message (on its path and as a late NACK), for a message never
    // posted, for a stream that does not exist, and every reason.
    let cases: Vec<(u8, Body)> = vec![
        (0, nack(first, 0, NackReason::RemoteAccess)),
        (0, nack(first, 0, NackReason::Sequence)),
        (0, nack(first + 1, 0, NackReason::ReceiverNotReady)),
        (255, nack(0, 0, NackReason::RemoteAccess)),
        (255, nack(0, 77, NackReason::InvalidRequest)),
        (
            255,
            Body::Nack(NackRepr {
                psn: 0,
                stream: 9,
                msn: 0,
                reason: NackReason::RemoteAccess,
                rnr_delay: 0,
            }),
        ),
    ];
    let n = cases.len() as u64;
    for (path, body) in cases {
        let d = crafted(p.to_a, path, 0, body);
        assert!(to_a(&mut p, &d).is_empty(), "a NACK was answered");
    }
    assert_eq!(a_counters(&p).rx_nacks_ignored, before + n);
    assert!(
        p.a.poll_completion().is_none(),
        "a NACK changed a completed message"
    );
    // The stream is not in error: the next WRITE succeeds.
    post_write(&mut p, 2, 2);
    let (_, pkts) = a_sends(&mut p);
    let done = deliver_and_complete(&mut p, &pkts, 1);
    assert_eq!(
        done.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        vec![(2, Status::Success)]
    );
}

// checks: [CONN-3] [CONN-4] [CLOSE-6] [SEC-3] [SEC-5]
#[test]
fn packets_for_unknown_or_closed_connections_are_dropped_counted_and_unanswered() {
    let mut p = Pair::new();
    p.mb.register(1, DST, 4096, access::REMOTE_WRITE);
    let rkey = p.rkey();
    let w = DataOp::Write { rkey, raddr: DST };
    // Unknown ids, and the right id from the wrong source address.
    let before = p.b.counters.drop_unknown_conn;
    for dst in [p.to_b ^ 0x5555_0000, 0xffff_ffff, p.to_b.wrapping_add(1)] {
        let d = p.data(dst, flags::LAST, msg(0, 0, P), w, &[1; P as usize]);
        p.b.handle_datagram(p.now, B, 40_000, false, &d, &mut p.mb);
    }
    let d = p.data(p.to_b, flags::LAST, msg(0, 0, P), w, &[1; P as usize]);
    p.b.handle_datagram(
        p.now,
        Ipv4Addr::new(198, 18, 0, 99),
        40_000,
        false,
        &d,
        &mut p.mb,
    );
    assert_eq!(p.b.counters.drop_unknown_conn, before + 4);
    assert!(
        p.b.poll_transmit(p.now, &mut p.buf, &mut p.mb).is_none(),
        "answered"
    );
    // A closes; afterwards B's side of the connection is Closed and drops data.
    p.a.close(p.a_conn).unwrap();
    for _ in 0..20 {
        p.exchange();
    }
    assert_eq!(
        p.b.connection(ConnId(p.to_b)).map(|c| c.state),
        Some(ConnState::Closed)
    );
    let not_open = b_counters(&p).rx_not_open;
    let d = p.data(p.to_b, flags::LAST, msg(0, 0, P), w, &[1; P as usize]);
    p.b.handle_datagram(p.now, A, 40_000, false, &d, &mut p.mb);
    assert_eq!(b_counters(&p).rx_not_open, not_open + 1);
    assert!(
        p.b.poll_transmit(p.now, &mut p.buf, &mut p.mb).is_none(),
        "answered"
    );
    assert!(p.dst().iter().all(|&b| b == 0), "placed");
}

// checks: [RECV-3] [SEC-5]
#[test]
fn replayed_old_packets_are_placed_once_and_counted() {
    let mut p = Pair::new();
    post_write(&mut p, 1, 4);
    let (_, pkts) = a_sends(&mut p);
    let done = deliver_and_complete(&mut p, &pkts, 1);
    assert_eq!(done.len(), 1);
    // B's application reuses its buffer; an attacker replays the old WRITE's packets.
    let k = p.rkey();
    p.mb.region_mut(k).unwrap().data.fill(0x11);
    let dup = b_counters(&p).rx_duplicates;
    for _ in 0..3 {
        for d in &pkts {
            p.b.handle_datagram(p.now, A, 40_000, false, d, &mut p.mb);
        }
        p.now += 1_000;
    }
    assert!(b_counters(&p).rx_duplicates >= dup + 3 * pkts.len() as u64 - 4);
    assert!(
        p.dst().iter().all(|&b| b == 0x11),
        "a replayed packet was placed again"
    );
    assert!(p.b.poll_completion().is_none());
}

// checks: [SEC-1] [SEC-5]
#[test]
fn an_open_flood_from_spoofed_sources_is_bounded_and_counted() {
    let mut b = Endpoint::new(EndpointConfig {
        seed: 9,
        max_accepted: 300,
        max_accepted_per_peer: 8,
        ..EndpointConfig::default()
    });
    let mut mem = ferroce_transport::mem::Regions::new();
    let mut buf = vec![0; 4096];
    let open = |src_conn| {
        crafted(
            0,
            0,
            0,
            Body::Open(OpenRepr {
                src_conn,
                paths: 16,
                crowd: 0,
                mtu: 4096,
                line_rate_mbps: 100_000,
            }),
        )
    };
    let mut answers = 0;
    let mut sent = 0;
    // 1000 spoofed sources (198.19.0.0/16), then 100 OPENs from one address.
    let sources = (0..1000u32).map(|i| (Ipv4Addr::from(0xc613_0000 | i), 1));
    let one = (0..100u32).map(|i| (Ipv4Addr::new(198, 18, 0, 77), 1000 + i));
    for (now, (src, c)) in sources.chain(one).enumerate() {
        b.handle_datagram(now as u64 * 100, src, 40_000, false, &open(c), &mut mem);
        sent += 1;
        while b
            .poll_transmit(now as u64 * 100, &mut buf, &mut mem)
            .is_some()
        {
            answers += 1;
        }
    }
    let conns = b.connections().count();
    println!(
        "OPEN flood: {sent} OPENs, {conns} connections kept (bound 300), {} dropped, {answers} \
         answered",
        b.counters.drop_open_limit
    );
    assert_eq!(conns, 300);
    assert_eq!(b.counters.drop_open_limit, sent - 300);
    // One OPEN_ACK per kept connection, and one more: the second connection withdraws the
    // first one's SOLE (spec/transport.md COLD-4).
    assert_eq!(answers, 301, "a refused OPEN was answered");
    // Per-address bound: with room in total, one address gets 8.
    let mut c = Endpoint::new(EndpointConfig {
        max_accepted_per_peer: 8,
        ..EndpointConfig::default()
    });
    for i in 0..50 {
        c.handle_datagram(
            i,
            Ipv4Addr::new(198, 18, 0, 77),
            40_000,
            false,
            &open(i as u32 + 1),
            &mut mem,
        );
    }
    assert_eq!(c.connections().count(), 8);
    assert_eq!(c.counters.drop_open_limit, 42);
}

// checks: [PLACE-1] [SEC-2] [SEC-5] [VAL-10]
#[test]
fn oversized_zero_length_and_out_of_range_requests_are_refused_and_counted() {
    let mut p = Pair::new();
    let k = p.mb.register(
        1,
        DST,
        256,
        access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
    );
    // A WRITE message of 4 GiB into a 256-byte region, at its first chunk.
    let n = p.send_b(
        0,
        msg(0, 0, 0xffff_ffc0),
        DataOp::Write {
            rkey: k,
            raddr: DST,
        },
        &[1; P as usize],
    );
    assert_eq!(n, vec![NackReason::RemoteAccess]);
    // A READ for more than any region (and for 4 GiB).
    for len in [257, 0xffff_ffff] {
        let n = p.send_b(
            flags::LAST,
            msg(1, 0, len),
            DataOp::ReadReq {
                rkey: k,
                raddr: DST,
            },
            &[],
        );
        assert_eq!(n, vec![NackReason::RemoteAccess], "READ of {len}");
    }
    // A SEND longer than any receive (none posted: RNR; one of 64 bytes posted: refused).
    let rk = p.mb.register(1, 0x20_000, 64, access::LOCAL_WRITE);
    p.b.post_recv(
        ConnId(p.to_b),
        1,
        RecvWr {
            wr_id: 5,
            sgl: [Sge {
                lkey: rk,
                addr: 0x20_000,
                len: 64,
            }]
            .into_iter()
            .collect(),
        },
    )
    .unwrap();
    let n = p.send_b(
        0,
        msg(2, 0, 1 << 30),
        DataOp::Send { rsn: 0 },
        &[2; P as usize],
    );
    assert_eq!(n, vec![NackReason::InvalidRequest]);
    // A zero-length chunk of a non-empty message.
    let malformed = p.b.counters.drop_malformed;
    let n = p.send_b(
        flags::LAST,
        msg(3, 0, P),
        DataOp::Write {
            rkey: k,
            raddr: DST,
        },
        &[],
    );
    // The parser already refuses it (wire.md §3: a data packet carries payload unless its
    // message is empty): dropped and counted, no answer.
    assert!(n.is_empty(), "{n:?}");
    assert_eq!(p.b.counters.drop_malformed, malformed + 1);
    // Stream numbers out of range.
    for stream in [0, 2, 0xffff_ffff] {
        let m = ferroce_transport::wire::MsgHeader {
            stream,
            msn: 0,
            offset: 0,
            length: P,
        };
        let n = p.send_b(
            flags::LAST,
            m,
            DataOp::Write {
                rkey: k,
                raddr: DST,
            },
            &[3; P as usize],
        );
        assert_eq!(n, vec![NackReason::InvalidRequest], "stream {stream}");
    }
    let c = b_counters(&p);
    println!(
        "refused: remote_access_refused {}, nacks_sent {:?}",
        c.remote_access_refused, c.nacks_sent
    );
    assert_eq!(c.remote_access_refused, 3);
    assert_eq!(c.nacks_sent[NackReason::RemoteAccess as usize], 3);
    assert_eq!(c.nacks_sent[NackReason::InvalidRequest as usize], 4);
    assert!(
        p.mb.region(k).unwrap().data.iter().all(|&b| b == 0),
        "placed"
    );
    assert!(p.b.poll_completion().is_none());
    // A zero-length WRITE is a valid request: it completes at the requester.
    p.a.post_send(
        p.a_conn,
        1,
        SendWr {
            wr_id: 9,
            op: SendOp::Write {
                rkey: 0,
                raddr: 0,
                imm: None,
            },
            sgl: Default::default(),
            signaled: true,
            solicited: false,
            fence: false,
        },
    )
    .unwrap();
    let done = deliver_and_complete(&mut p, &[], 1);
    assert_eq!(
        done.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        vec![(9, Status::Success)]
    );
}

// checks: [RES-2] [SEC-5]
#[test]
fn a_requester_that_never_acknowledges_responses_makes_the_responder_keep_one_window() {
    let mut p = Pair::new();
    let k =
        p.mb.register(1, DST, 4096, access::REMOTE_READ | access::REMOTE_ATOMIC);
    // Four windows and a bit of READs and atomics, in order, each complete at once; the
    // crafted requester acknowledges none of B's responses (they are dropped here).
    const N: u32 = 4 * 1024 + 7;
    for msn in 0..N {
        let nacks = if msn % 5 == 4 {
            p.send_b(
                flags::LAST,
                msg(msn, 0, 8),
                DataOp::FetchAdd {
                    rkey: k,
                    raddr: DST + 8,
                    add: 1,
                },
                &[],
            )
        } else {
            p.send_b(
                flags::LAST,
                msg(msn, 0, 64),
                DataOp::ReadReq {
                    rkey: k,
                    raddr: DST,
                },
                &[],
            )
        };
        assert!(nacks.is_empty(), "MSN {msn} refused: {nacks:?}");
    }
    let c = p.b.connection(ConnId(p.to_b)).unwrap();
    assert_eq!(c.state, ConnState::Open);
    // Every request executed (B's window moved on), but only the responses of the last
    // window are kept: MSN n acknowledged everything at or before n - 1024.
    assert_eq!(c.counters().messages_completed_rx, N as u64);
    assert_eq!(c.responses_held(), 1024);
    assert_eq!(c.counters().responses_retired_unacked, (N - 1024) as u64);
    // Each atomic executed once.
    let adds = (0..N).filter(|m| m % 5 == 4).count() as u64;
    let r = p.mb.region(k).unwrap();
    assert_eq!(u64::from_ne_bytes(r.data[8..16].try_into().unwrap()), adds);
    // A copy of a retired READ is acknowledged and ignored, not executed again.
    let held = c.responses_held();
    assert!(p
        .send_b(
            flags::LAST,
            msg(3, 0, 64),
            DataOp::ReadReq {
                rkey: k,
                raddr: DST
            },
            &[]
        )
        .is_empty());
    assert_eq!(
        p.b.connection(ConnId(p.to_b)).unwrap().responses_held(),
        held
    );
}
