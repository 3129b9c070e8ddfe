//! Unit tests of the send and receive paths.

use super::*;
use crate::conn::splitmix64;
use std::collections::HashSet;

/// spec/transport.md §5.3 step 4: an ACK may credit a PSN the sender already abandoned
/// (declared lost, timed out or NACKed). That is only sound if every PSN an ACK covers,
/// cumulatively or in its bitmap, while the sender still tracks it, really arrived: the
/// receiver's `cum_psn` also passes PSNs below the sender's floor that never arrived.
/// Random sends, losses, NACK refusals, RTOs and stale, reordered, lost ACKs: every
/// chunk an ACK credits must have reached the receiver under some PSN.
#[test]
fn an_ack_credits_only_chunks_the_receiver_got() {
    let cfg = ConnConfig::default();
    for seed in 1..=300u64 {
        let mut r = seed;
        let mut rand = |n: u64| {
            r = splitmix64(r);
            r % n
        };
        let mut tx = TxPath::new(0, 1, &cfg, 1e12, 1e12);
        let mut rx = RxPath::default();
        let mut pending: Vec<ChunkRef> = (0..300)
            .map(|msn| ChunkRef::Req {
                stream: 1,
                msn,
                chunk: 0,
            })
            .collect();
        pending.reverse();
        let mut wire: Vec<(u32, u32, ChunkRef)> = Vec::new();
        let mut acks: Vec<(u32, Sack256)> = Vec::new();
        let mut received: HashSet<ChunkRef> = HashSet::new();
        let mut credited: HashSet<ChunkRef> = HashSet::new();
        let mut now = 1_000u64;
        for _ in 0..20_000 {
            now += 100;
            match rand(10) {
                0..=2 => {
                    if let Some(c) = pending.pop() {
                        if tx.in_span() {
                            let psn = tx.on_send(c, 100, now, false);
                            wire.push((psn, tx.floor(), c));
                        } else {
                            pending.push(c);
                        }
                    }
                }
                3..=5 if !wire.is_empty() => {
                    // Mostly in order, sometimes any packet (a reordering fabric).
                    let i = if rand(4) == 0 {
                        rand(wire.len() as u64) as usize
                    } else {
                        0
                    };
                    let (psn, floor, c) = wire.remove(i);
                    match rand(10) {
                        0 => {} // lost
                        1 => {
                            // Refused (NACK): not recorded, the sender forgets the PSN.
                            if let Some(c) = tx.forget(psn) {
                                pending.push(c);
                            }
                        }
                        _ => {
                            let below = psn_diff(psn, floor);
                            if (0..=SACK_SPAN as i32).contains(&below) {
                                rx.apply_floor(floor);
                            }
                            if let RxVerdict::New { .. } = rx.classify(psn) {
                                rx.record(psn);
                                received.insert(c);
                            }
                            acks.push((rx.cum, rx.sack));
                        }
                    }
                }
                6..=8 if !acks.is_empty() => {
                    let i = rand(acks.len() as u64) as usize;
                    let (cum, sack) = acks.swap_remove(i);
                    if rand(5) == 0 {
                        continue; // lost ACK
                    }
                    let mut out = AckOutcome::default();
                    tx.on_ack(now, cum, &sack, 0, None, u64::MAX, &cfg, &mut out);
                    for c in out.acked {
                        assert!(
                            received.contains(&c),
                            "seed {seed}: {c:?} credited but never received"
                        );
                        credited.insert(c);
                    }
                    pending.extend(out.lost);
                }
                9 if rand(20) == 0 => pending.extend(tx.on_rto(now, &cfg)),
                _ => {}
            }
        }
        assert!(
            !credited.is_empty(),
            "seed {seed}: nothing was acknowledged"
        );
    }
}

fn chunk(msn: u32) -> ChunkRef {
    ChunkRef::Req {
        stream: 1,
        msn,
        chunk: 0,
    }
}

/// PATH-13: a route whose windows stay half marked is left (after the average has
/// built up, not at the first marked window); one without marks is kept.
// checks: [PATH-13]
#[test]
fn a_path_leaves_a_route_whose_marks_last() {
    let cfg = ConnConfig::default();
    for (marked_every, expect) in [(2u32, true), (0, false)] {
        let mut tx = TxPath::new(0, 1, &cfg, 1e12, 1e12);
        let mut out = AckOutcome::default();
        let (mut ce, mut windows, mut congested_at) = (0u32, 0, None);
        let mut now = 1_000;
        for psn in 0..400u32 {
            tx.on_send(chunk(psn), 1000, now, false);
            now += 1_000;
            // One packet per window: each ACK ends one.
            if marked_every != 0 && psn % marked_every == 0 {
                ce += 1;
            }
            tx.on_ack(
                now,
                psn + 1,
                &Sack256::default(),
                ce,
                None,
                u64::MAX,
                &cfg,
                &mut out,
            );
            windows += 1;
            if out.congested && congested_at.is_none() {
                congested_at = Some(windows);
            }
        }
        assert_eq!(
            congested_at.is_some(),
            expect,
            "marked every {marked_every}"
        );
        if let Some(w) = congested_at {
            assert!(w > 1, "left after {w} windows");
        }
    }
}

/// PATH-13, LOSS-1, LOSS-4: after a move, an ACK of the new route does not declare the
/// old route's outstanding packets lost; an ACK of a later old-route packet does, and so
/// does time, although the path hears ACKs.
// checks: [PATH-13] [LOSS-1] [LOSS-4]
#[test]
fn holes_of_a_left_route_are_judged_on_their_own() {
    let cfg = ConnConfig::default();
    let mut tx = TxPath::new(0, 1, &cfg, 1e12, 1e12);
    let mut out = AckOutcome::default();
    for psn in 0..4 {
        tx.on_send(chunk(psn), 1000, 1_000, false);
    }
    tx.reroute(2);
    assert!(tx.moving());
    for psn in 4..8 {
        tx.on_send(chunk(psn), 1000, 2_000, false);
    }
    // PSN 4 (new route) arrives first: 0..=3 are still on their way.
    let mut s = Sack256::default();
    s.set(3);
    tx.on_ack(3_000, 0, &s, 0, None, u64::MAX, &cfg, &mut out);
    assert!(out.lost.is_empty(), "{:?}", out.lost);
    // PSN 1 of the old route arrives: PSN 0 below it is lost, 2 and 3 are not.
    s.set(0);
    tx.on_ack(3_100, 0, &s, 0, None, u64::MAX, &cfg, &mut out);
    assert_eq!(out.lost, vec![chunk(0)]);
    // Time: the old route's 2 and 3 go once they are a loss delay old, ACKs or not.
    assert!(tx.detect_time_losses(3_200, 2_000, 10_000).is_empty());
    assert_eq!(
        tx.detect_time_losses(11_500, 2_000, 10_000),
        vec![chunk(2), chunk(3)]
    );
    assert!(!tx.moving());
}
