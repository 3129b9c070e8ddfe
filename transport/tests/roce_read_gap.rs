//! RoCEv2 READ requester recovery from lost READ responses (IBTA vol. 1 §9.7.5.1, §10.8.3):
//! a response beyond the next expected one re-issues the READ at once from the first missing
//! PSN (not after the local ACK timeout, not the whole READ), once per gap; responses already
//! on their way when the re-issue left are discarded without another restart.

mod roce_common;

use ferroce_transport::roce::wire::{psn, Opcode};
use ferroce_transport::*;
use roce_common::*;

const MTU: u32 = 1024;
/// Bytes of each READ: 9 responses (the last one short).
const LEN: u32 = 8 * 1024 + 100;
const READS: u64 = 4;

/// Post `READS` READs of `LEN` bytes from B's region into consecutive slices of A's buffer.
fn post_reads(w: &mut Wire, k: &Keys) {
    for i in 0..READS {
        let off = i * LEN as u64;
        w.a.ep
            .post_send(
                w.a.conn,
                QP,
                wr(
                    i,
                    SendOp::Read {
                        rkey: k.b_rkey,
                        raddr: 0x8000 + off,
                    },
                    sge(k.a_lkey, 0x1000 + off, LEN),
                ),
            )
            .unwrap();
    }
}

fn check_data(w: &Wire, k: &Keys) {
    assert_eq!(w.a.done.len(), READS as usize, "{:?}", w.a.done);
    for (i, c) in w.a.done.iter().enumerate() {
        assert_eq!(
            (c.wr_id, c.status, c.byte_len),
            (i as u64, Status::Success, LEN)
        );
    }
    let n = (READS * LEN as u64) as usize;
    let a = &w.a.mem.region(k.a_lkey).unwrap().data;
    assert!(a[..n] == pattern(65536, 0x33)[..n], "READ data differs");
}

/// The PSN of the first READ request.
fn first_read_psn(w: &Wire) -> u32 {
    w.reads[0].0
}

/// Drop the first `times` transmissions of response PSN first+2 (of the first READ).
fn drop_response(times: u32) -> Dropper {
    let mut first = None;
    let mut left = times;
    Box::new(move |from_a, op, p, _| {
        if from_a && op == Opcode::ReadRequest && first.is_none() {
            first = Some(p);
        }
        let hit = !from_a
            && left > 0
            && first.is_some_and(|f| p == psn::add(f, 2))
            && op != Opcode::Acknowledge;
        if hit {
            left -= 1;
        }
        hit
    })
}

#[test]
fn one_lost_response_reissues_once_from_the_missing_psn_with_later_reads_outstanding() {
    let mut w = Wire::new(&|_| {});
    let k = setup(&mut w, 65536);
    w.drop = drop_response(1);
    post_reads(&mut w, &k);
    w.run(50_000_000);
    check_data(&w, &k);
    let c = *w.a.ep.counters();
    assert_eq!(c.timeouts, 0, "{c:?}");
    // One re-issue in all: the later READs' responses that were already on their way are
    // discarded without another go-back.
    assert_eq!((c.read_gap_retries, c.go_back_n), (1, 1), "{c:?}");
    assert!(c.rx_out_of_order_responses >= 30, "{c:?}");
    // Four READs, then the first from its missing response (VA and length of the rest) and
    // the three later ones again (their responses were discarded out of order).
    let f = first_read_psn(&w);
    assert_eq!(w.reads.len(), 8, "{:?}", w.reads);
    assert_eq!(
        w.reads[4],
        (psn::add(f, 2), 0x8000 + 2 * MTU as u64, LEN - 2 * MTU)
    );
    for i in 1..READS as usize {
        assert_eq!(w.reads[4 + i], w.reads[i], "later READ {i} re-issued whole");
    }
    // Responses on the wire: 36 first, then 7 + 27 after the re-issue.
    let responses = w.log.iter().filter(|x| !x.0).count();
    assert_eq!(responses, 36 + 7 + 27, "{c:?}");
}

#[test]
fn a_lost_reissued_response_is_reissued_again_without_waiting_for_the_timeout() {
    let mut w = Wire::new(&|_| {});
    let k = setup(&mut w, 65536);
    // The re-issue's own first response is lost too: once the responses sent before the
    // re-issue have passed, the next gap is news and re-issues at once.
    w.drop = drop_response(2);
    post_reads(&mut w, &k);
    w.run(50_000_000);
    check_data(&w, &k);
    let c = *w.a.ep.counters();
    assert_eq!(c.timeouts, 0, "{c:?}");
    assert_eq!((c.read_gap_retries, c.go_back_n), (2, 2), "{c:?}");
    let f = first_read_psn(&w);
    let from_gap: Vec<_> = w.reads.iter().filter(|r| r.0 == psn::add(f, 2)).collect();
    assert_eq!(from_gap.len(), 2, "{:?}", w.reads);
}
