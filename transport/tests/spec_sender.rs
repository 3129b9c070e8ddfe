//! Sender rules the spec settled (issue 16, item 2): probing and failing a path, resending a
//! SACK hole, RNR waits, and what every packet a busy pair sends keeps to (flags, offsets,
//! tsval, rnr_delay). Each test names the requirements it checks (spec/requirements.md).

mod common;

use common::*;
use ferroce_transport::mem::access;
use ferroce_transport::wire::{flags, Body, DataOp, NackReason, Packet};
use ferroce_transport::*;

/// A posts one WRITE of four packets to B's region at `DST`.
fn post_write(p: &mut Pair) {
    let rkey = p.mb.register(1, DST, 4096, access::REMOTE_WRITE);
    let lkey = p.ma.register(1, 0x1000, 4096, access::LOCAL_WRITE);
    let op = SendOp::Write {
        rkey,
        raddr: DST,
        imm: None,
    };
    p.a.post_send(p.a_conn, 1, wr(1, op, sge(lkey, 0x1000, 4 * P)))
        .unwrap();
}

// checks: [PATH-3] [PATH-4]
#[test]
fn a_path_made_suspect_by_an_rto_sends_one_probe_then_fails_and_probe_seq_starts_at_one() {
    // A receiver shared with others (no SOLE, COLD-4): the cold start's hint request runs.
    let mut p = Pair::with(|c| c.sole_grant = false);
    post_write(&mut p);
    // Everything A sends from now on is lost: (time, source port, flags, packet).
    let mut sent: Vec<(u64, u16, u8, Body<'static>)> = Vec::new();
    let mut data_port = None;
    for _ in 0..50_000 {
        if p.a.poll_timeout().is_some_and(|t| t <= p.now) {
            p.a.handle_timeout(p.now);
        }
        while let Some(t) = p.a.poll_transmit(p.now, &mut p.buf, &mut p.ma) {
            let pkt = Packet::parse(&p.buf[..t.len]).unwrap();
            match pkt.body {
                Body::Data(_) => {
                    data_port.get_or_insert(t.src_port);
                }
                Body::Probe(x) => sent.push((p.now, t.src_port, pkt.flags, Body::Probe(x))),
                _ => {}
            }
        }
        let probes = sent.iter().filter(|s| s.2 & flags::BACKLOG == 0).count();
        if probes >= 3 {
            break;
        }
        p.now += 1_000;
    }
    // A hint request repeats the path's current probe_seq: 0 before its first PROBE.
    let (mut current, mut hint_requests) = (0, 0);
    for s in &sent {
        let Body::Probe(x) = s.3 else { unreachable!() };
        if s.2 & flags::BACKLOG != 0 {
            assert_eq!(x.probe_seq, current, "hint request {sent:?}");
            hint_requests += 1;
        } else {
            current = x.probe_seq;
        }
    }
    assert!(hint_requests > 0, "no hint request");
    assert!(
        matches!(sent[0].3, Body::Probe(x) if x.probe_seq == 0) && sent[0].2 & flags::BACKLOG != 0
    );
    let probes: Vec<(u64, u16, u32)> = sent
        .iter()
        .filter(|s| s.2 & flags::BACKLOG == 0)
        .map(|s| match s.3 {
            Body::Probe(x) => (s.0, s.1, x.probe_seq),
            _ => unreachable!(),
        })
        .collect();
    assert!(probes.len() >= 3, "{probes:?}");
    let data_port = data_port.expect("A sent data");
    // Suspect (by the RTO, which counts): a PROBE on the path's own port at once, probe_seq 1,
    // and one `rto` later (200 µs: the expiry doubled it) a second, with which the path fails.
    assert_eq!((probes[0].1, probes[0].2), (data_port, 1), "{probes:?}");
    assert_eq!((probes[1].1, probes[1].2), (data_port, 2), "{probes:?}");
    assert_eq!(probes[1].0 - probes[0].0, 200_000, "{probes:?}");
    // Probing re-routes at once: a fresh port, probe_seq counting on.
    assert_ne!(
        probes[2].1, data_port,
        "a third PROBE on the old route: {probes:?}"
    );
    assert_eq!(probes[2].2, 3);
    assert!(probes[2].0 - probes[1].0 <= 1_000, "{probes:?}");
    let conn = p.a.connection(p.a_conn).unwrap();
    assert_eq!(conn.counters().path_failures, 1, "{:?}", conn.counters());
}

// checks: [PATH-12] [PATH-3]
#[test]
fn a_probing_path_searches_128_routes_then_doubles_its_wait_up_to_max_rto() {
    let mut p = Pair::new();
    post_write(&mut p);
    // Everything A sends from now on is lost. PROBEs (not hint requests): (time, port, seq).
    let mut probes: Vec<(u64, u16, u32)> = Vec::new();
    let limit = p.now + 2_000_000_000;
    while p.now < limit && probes.len() < 139 {
        if p.a.poll_timeout().is_some_and(|t| t <= p.now) {
            p.a.handle_timeout(p.now);
        }
        while let Some(t) = p.a.poll_transmit(p.now, &mut p.buf, &mut p.ma) {
            let pkt = Packet::parse(&p.buf[..t.len]).unwrap();
            if let Body::Probe(x) = pkt.body {
                if pkt.flags & flags::BACKLOG == 0 {
                    probes.push((p.now, t.src_port, x.probe_seq));
                }
            }
        }
        // Straight to the next deadline: the waits grow to 100 ms.
        p.now =
            p.a.poll_timeout()
                .map_or(p.now + 1_000, |t| t.max(p.now + 1));
    }
    assert_eq!(probes.len(), 139, "{probes:?}");
    // Suspect PROBEs on the data route, then Probing: one at once on failing (the first on
    // another port), then waits of 1, 2, 4, ... ms, each PROBE on a new port, up to max_rto.
    let f = probes
        .iter()
        .position(|x| x.1 != probes[0].1)
        .expect("the path failed and re-routed");
    let gaps: Vec<u64> = probes[f..].windows(2).map(|w| w[1].0 - w[0].0).collect();
    let cfg = EndpointConfig::default().conn;
    // 128 waits of probe_interval, then doubling: 2, 4, ... up to max_rto.
    let want: Vec<u64> = (0..gaps.len() as u32)
        .map(|n| (cfg.probe_interval_ns << n.saturating_sub(127)).min(cfg.max_rto_ns))
        .collect();
    assert!(gaps.len() >= 128 + 7, "{gaps:?}");
    assert_eq!(gaps, want, "{probes:?}");
    assert_eq!(*gaps.last().unwrap(), cfg.max_rto_ns);
    for w in probes[f..].windows(2) {
        assert_ne!(
            w[0].1, w[1].1,
            "a Probing PROBE on the previous route: {probes:?}"
        );
    }
}

// checks: [PATH-12] [PATH-6]
#[test]
fn a_probing_path_whose_answers_come_late_backs_off_until_one_is_in_time() {
    // B's answers to PROBEs take 5 ms (a peer behind a long queue); everything else of A's is
    // lost until the path has failed. At 1 ms per PROBE every answer would be stale for good.
    let mut p = Pair::new();
    post_write(&mut p);
    const LATE: u64 = 5_000_000;
    let mut late: Vec<(u64, u16, Vec<u8>)> = Vec::new();
    let mut failed = false;
    let (mut done, mut probes) = (false, 0u32);
    let end = p.now + 2_000_000_000;
    while p.now < end && !done {
        for e in [&mut p.a, &mut p.b] {
            if e.poll_timeout().is_some_and(|t| t <= p.now) {
                e.handle_timeout(p.now);
            }
        }
        while let Some(t) = p.a.poll_transmit(p.now, &mut p.buf, &mut p.ma) {
            let d = p.buf[..t.len].to_vec();
            let pkt = Packet::parse(&d).unwrap();
            let probe = matches!(pkt.body, Body::Probe(_)) && pkt.flags & flags::BACKLOG == 0;
            failed |= p.a.connection(p.a_conn).unwrap().counters().path_failures > 0;
            if probe {
                probes += 1;
            }
            if failed {
                p.b.handle_datagram(p.now, A, t.src_port, false, &d, &mut p.mb);
            }
        }
        while let Some(t) = p.b.poll_transmit(p.now, &mut p.buf, &mut p.mb) {
            let d = p.buf[..t.len].to_vec();
            if matches!(Packet::parse(&d).map(|x| x.body), Ok(Body::ProbeAck(_))) {
                late.push((p.now + LATE, t.src_port, d));
            } else {
                p.a.handle_datagram(p.now, B, t.src_port, false, &d, &mut p.ma);
            }
        }
        while late.first().is_some_and(|l| l.0 <= p.now) {
            let (_, port, d) = late.remove(0);
            p.a.handle_datagram(p.now, B, port, false, &d, &mut p.ma);
        }
        done =
            p.a.poll_completion()
                .is_some_and(|c| c.status == Status::Success);
        let next = [
            p.a.poll_timeout(),
            p.b.poll_timeout(),
            late.first().map(|l| l.0),
        ]
        .into_iter()
        .flatten()
        .min();
        p.now = next.map_or(p.now + 1_000, |t| t.clamp(p.now + 1, p.now + 1_000_000));
    }
    assert!(failed, "the path never failed");
    assert!(done, "the path never came back ({probes} PROBEs)");
    // The first late answer arrives 5 ms into the search: from there the waits double
    // (2, 4, 8 ms) and the PROBE after the 8 ms wait is answered in time.
    assert!(probes < 20, "{probes} PROBEs: no back-off on late answers");
}

// checks: [CMPL-1] [LOSS-1] [LOSS-2]
#[test]
fn a_sack_hole_is_resent_under_a_new_psn_and_completions_stay_in_msn_order() {
    let mut p = Pair::new();
    let rkey = p.mb.register(1, DST, 256, access::REMOTE_WRITE);
    let lkey = p.ma.register(1, 0x1000, 256, access::LOCAL_WRITE);
    for (i, off) in [(1u64, 0u64), (2, 64)] {
        let op = SendOp::Write {
            rkey,
            raddr: DST + off,
            imm: None,
        };
        p.a.post_send(p.a_conn, 1, wr(i, op, sge(lkey, 0x1000 + off, P)))
            .unwrap();
    }
    let sent = held_data(&mut p);
    assert_eq!(
        sent.len(),
        2,
        "{:?}",
        sent.iter().map(|s| s.0).collect::<Vec<_>>()
    );
    // Only the second arrives: B's SACK shows the first as a hole.
    p.b.handle_datagram(p.now, A, 40_000, false, &sent[1].1, &mut p.mb);
    while let Some(t) = p.b.poll_transmit(p.now, &mut p.buf, &mut p.mb) {
        let d = p.buf[..t.len].to_vec();
        p.a.handle_datagram(p.now, B, 40_000, false, &d, &mut p.ma);
    }
    assert!(
        p.a.poll_completion().is_none(),
        "WR 2 completed before WR 1, which comes first in MSN order"
    );
    let c = p.a.connection(p.a_conn).unwrap().counters();
    assert_eq!(c.sack_holes, 1, "{c:?}");
    // The hole is resent at once, under a new PSN.
    let resent = held_data(&mut p);
    assert!(!resent.is_empty(), "nothing resent");
    assert!(
        resent.iter().all(|(psn, _)| *psn > sent[1].0),
        "a resend reused a PSN: {:?} after {:?}",
        resent.iter().map(|r| r.0).collect::<Vec<_>>(),
        sent.iter().map(|s| s.0).collect::<Vec<_>>()
    );
    let mut done = Vec::new();
    for (_, d) in &resent {
        p.b.handle_datagram(p.now, A, 40_000, false, d, &mut p.mb);
    }
    for _ in 0..50 {
        p.exchange();
        while let Some(c) = p.a.poll_completion() {
            done.push((c.wr_id, c.status));
        }
    }
    assert_eq!(done, vec![(1, Status::Success), (2, Status::Success)]);
}

// checks: [WIRE-11] [WIRE-12] [WIRE-13] [WIRE-14] [WIRE-16] [WIRE-17] [WIRE-25]
#[test]
fn every_packet_a_busy_pair_sends_keeps_the_flag_offset_tsval_and_rnr_delay_rules() {
    let mut p = Pair::with(|c| c.conn.paths = 4);
    let rkey = p.mb.register(
        1,
        DST,
        4096,
        access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC,
    );
    let lkey = p.ma.register(1, 0x1000, 8192, access::LOCAL_WRITE);
    let rk = p.mb.register(1, 0x40_000, 8192, access::LOCAL_WRITE);
    for i in 0..8 {
        p.b.post_recv(
            ConnId(p.to_b),
            1,
            RecvWr {
                wr_id: i,
                sgl: sge(rk, 0x40_000 + i * 1024, 1024),
            },
        )
        .unwrap();
    }
    let mut id = 0;
    let mut post = |p: &mut Pair, op: SendOp, len: u32| {
        id += 1;
        p.a.post_send(p.a_conn, 1, wr(id, op, sge(lkey, 0x1000, len)))
            .unwrap();
    };
    for k in 0..8u64 {
        // Overlapping WRITEs (ORDERED), READs, atomics, SENDs.
        post(
            &mut p,
            SendOp::Write {
                rkey,
                raddr: DST,
                imm: None,
            },
            3 * P,
        );
        post(
            &mut p,
            SendOp::Read {
                rkey,
                raddr: DST + 64 * k,
            },
            2 * P,
        );
        post(
            &mut p,
            SendOp::FetchAdd {
                rkey,
                raddr: DST + 1024,
                add: 1,
            },
            8,
        );
        post(
            &mut p,
            SendOp::Send {
                imm: Some(k as u32),
            },
            P + 5,
        );
        post(
            &mut p,
            SendOp::Write {
                rkey,
                raddr: DST + 8,
                imm: Some(7),
            },
            2 * P,
        );
    }
    // And one refused (a key B does not have): a NACK RemoteAccess.
    post(
        &mut p,
        SendOp::Write {
            rkey: rkey ^ 0x55,
            raddr: DST,
            imm: None,
        },
        4,
    );
    // Run across a clock that reads 0 mod 2^32, so some packet is sent at that instant.
    p.now = (1u64 << 32) - 40_000;
    let (mut seen, mut at_wrap, mut nacks) = (0, 0, 0);
    for _ in 0..400 {
        for e in [&mut p.a, &mut p.b] {
            if e.poll_timeout().is_some_and(|t| t <= p.now) {
                e.handle_timeout(p.now);
            }
        }
        let mut out = Vec::new();
        while let Some(t) = p.a.poll_transmit(p.now, &mut p.buf, &mut p.ma) {
            out.push((true, p.buf[..t.len].to_vec(), t.src_port));
        }
        while let Some(t) = p.b.poll_transmit(p.now, &mut p.buf, &mut p.mb) {
            out.push((false, p.buf[..t.len].to_vec(), t.src_port));
        }
        for (from_a, d, port) in out {
            let pkt = Packet::parse(&d).unwrap();
            let f = pkt.flags;
            seen += 1;
            assert_eq!(f & 0x80, 0, "reserved flag 0x80 sent: {pkt:?}");
            match &pkt.body {
                Body::Data(x) => {
                    assert_ne!(x.seq.tsval, 0, "tsval 0: {pkt:?}");
                    assert_eq!(x.msg.offset % P, 0, "offset not k·P: {pkt:?}");
                    let write = matches!(x.op, DataOp::Write { .. } | DataOp::WriteImm { .. });
                    let uc_capable =
                        write || matches!(x.op, DataOp::Send { .. } | DataOp::SendImm { .. });
                    assert!(write || f & flags::ORDERED == 0, "ORDERED on {pkt:?}");
                    assert!(
                        uc_capable || f & flags::UNRELIABLE == 0,
                        "UNRELIABLE on {pkt:?}"
                    );
                    if p.now & 0xffff_ffff == 0 {
                        at_wrap += 1;
                        assert_eq!(x.seq.tsval, 1, "the clock read 0: tsval must be 1");
                    }
                }
                Body::Probe(x) => {
                    assert_eq!(f & !flags::BACKLOG, 0, "flags {f:#x} on a PROBE");
                    if f & flags::BACKLOG != 0 {
                        assert_ne!(x.ts, 0, "a hint request with ts 0");
                    }
                }
                Body::Nack(n) => {
                    nacks += 1;
                    assert_eq!(f, 0);
                    if n.reason != NackReason::ReceiverNotReady {
                        assert_eq!(n.rnr_delay, 0, "rnr_delay on {n:?}");
                    }
                }
                _ => assert_eq!(f, 0, "flags {f:#x} on {pkt:?}"),
            }
            if from_a {
                p.b.handle_datagram(p.now, A, port, false, &d, &mut p.mb);
            } else {
                p.a.handle_datagram(p.now, B, port, false, &d, &mut p.ma);
            }
        }
        while p.a.poll_completion().is_some() {}
        p.now += 1_000;
    }
    assert!(seen > 100, "only {seen} packets");
    assert!(nacks > 0, "the refused WRITE was not NACKed");
    assert!(
        at_wrap > 0,
        "no data packet was sent while the clock read 0 mod 2^32"
    );
}

// checks: [NACK-5]
#[test]
fn an_rnr_nack_holds_the_chunk_for_its_delay_then_resends_it_under_a_new_psn() {
    let mut p = Pair::new();
    let lkey = p.ma.register(1, 0x1000, 64, access::LOCAL_WRITE);
    let op = SendOp::Send { imm: None };
    p.a.post_send(p.a_conn, 1, wr(1, op, sge(lkey, 0x1000, 4)))
        .unwrap();
    // (time, PSN) of every SEND A sends; B has no receive posted for the first 500 µs.
    let mut sends: Vec<(u64, u32)> = Vec::new();
    let mut rnr_at = Vec::new();
    let mut done = None;
    for step in 0..2_000 {
        if step == 500 {
            let rk = p.mb.register(1, 0x40_000, 64, access::LOCAL_WRITE);
            post_recv(&mut p, 9, rk, 0x40_000);
        }
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
                sends.push((p.now, x.seq.psn));
            }
            p.b.handle_datagram(p.now, A, t.src_port, false, &d, &mut p.mb);
        }
        while let Some(t) = p.b.poll_transmit(p.now, &mut p.buf, &mut p.mb) {
            let d = p.buf[..t.len].to_vec();
            if let Ok(Packet {
                body: Body::Nack(n),
                ..
            }) = Packet::parse(&d)
            {
                assert_eq!((n.reason, n.rnr_delay), (NackReason::ReceiverNotReady, 0));
                rnr_at.push(p.now);
            }
            p.a.handle_datagram(p.now, B, t.src_port, false, &d, &mut p.ma);
        }
        if let Some(c) = p.a.poll_completion() {
            done = Some(c);
            break;
        }
        p.now += 1_000;
    }
    let done = done.expect("the SEND never completed");
    assert_eq!(
        done.status,
        Status::Success,
        "RNR retries are infinite by default"
    );
    assert!(rnr_at.len() >= 2, "{rnr_at:?}");
    // Each resend follows its RNR NACK by the default delay (100 µs: rnr_delay 0), not sooner,
    // and takes a new PSN.
    for w in sends.windows(2) {
        assert!(w[1].1 > w[0].1, "a resend reused PSN {}: {sends:?}", w[0].1);
    }
    for (i, nack) in rnr_at.iter().enumerate() {
        let next = sends
            .iter()
            .find(|s| s.0 > *nack)
            .expect("no resend after an RNR NACK");
        assert!(
            next.0 - nack >= 100_000,
            "resend {} µs after RNR NACK {i}: {sends:?} {rnr_at:?}",
            (next.0 - nack) / 1000
        );
    }
}

// checks: [PATH-6] [PATH-4]
#[test]
fn a_probe_ack_with_probe_seq_zero_vouches_for_nothing_before_the_first_probe() {
    use ferroce_transport::wire::ProbeRepr;
    let mut p = Pair::new();
    post_write(&mut p);
    // Everything A sends is lost, until its RTO makes the path Suspect: its first PROBE is
    // queued then, and until it goes out the path's probe_seq is still 0.
    let path = |p: &Pair| {
        // Built or not yet (a path is built when first used).
        let c = p.a.connection(p.a_conn).unwrap();
        c.with_path(0, |x| (x.state, x.probe_seq)).unwrap()
    };
    let mut suspect = false;
    for _ in 0..50_000 {
        if p.a.poll_timeout().is_some_and(|t| t <= p.now) {
            p.a.handle_timeout(p.now);
        }
        if path(&p) == (PathState::Suspect, 0) {
            suspect = true;
            break;
        }
        while p.a.poll_transmit(p.now, &mut p.buf, &mut p.ma).is_some() {}
        p.now += 1_000;
    }
    assert!(
        suspect,
        "the path never became Suspect before its first PROBE"
    );
    // A PROBE_ACK echoing 0 (a forged one, or the answer to a hint request) answers no PROBE.
    let forged = crafted(
        p.to_a,
        0,
        0,
        Body::ProbeAck(ProbeRepr {
            probe_seq: 0,
            ts: 1,
        }),
    );
    p.a.handle_datagram(p.now, B, 40_000, false, &forged, &mut p.ma);
    assert_eq!(path(&p), (PathState::Suspect, 0), "accepted");
    // The PROBE goes out with probe_seq 1, and its answer is accepted.
    while p.a.poll_transmit(p.now, &mut p.buf, &mut p.ma).is_some() {}
    assert_eq!(path(&p), (PathState::Suspect, 1));
    let answer = crafted(
        p.to_a,
        0,
        0,
        Body::ProbeAck(ProbeRepr {
            probe_seq: 1,
            ts: 1,
        }),
    );
    p.a.handle_datagram(p.now, B, 40_000, false, &answer, &mut p.ma);
    assert_eq!(path(&p).0, PathState::Good);
}
