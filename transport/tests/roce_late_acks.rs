//! Responses that arrive after the requester's local ACK timer fired (a descheduled engine,
//! a slow path): the requester has resent, the responder sees duplicates, and the late
//! originals and the answers to the resends both arrive. Every request must still complete
//! once, successfully, with its data (spec/rocev2.md §6). The pyverbs suite on a loaded
//! machine hit this: RC QPs over one engine stalled for good.

mod roce_common;

use ferroce_transport::roce::wire::Opcode;
use ferroce_transport::*;
use roce_common::*;
use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;

/// Run like `Wire::run`, but every response B sends whose index `late(n)` picks reaches A
/// `hold` ns later than it would.
fn run_with_late(w: &mut Wire, limit: u64, hold: u64, late: Rc<RefCell<HashSet<u64>>>) {
    let end = w.now + limit;
    let mut held: Vec<(u64, Vec<u8>)> = Vec::new();
    let mut sport_b = None;
    let mut seen = 0usize;
    loop {
        w.pump_tx();
        // What B sent and the dropper held back: deliver it later.
        for (n, (from_a, bytes)) in w.frames.iter().enumerate().skip(seen) {
            if !from_a && late.borrow().contains(&(n as u64)) {
                held.push((w.now + DELAY + hold, bytes.clone()));
            }
        }
        seen = w.frames.len();
        if sport_b.is_none() {
            sport_b = w.q.iter().find(|f| !f.to_b).map(|f| f.sport);
        }
        w.collect();
        let next_pkt = w.q.front().map(|f| f.at);
        let next_held = held.iter().map(|h| h.0).min();
        let next_timer = [w.a.ep.poll_timeout(), w.b.ep.poll_timeout()]
            .into_iter()
            .flatten()
            .min();
        let Some(next) = [next_pkt, next_held, next_timer]
            .into_iter()
            .flatten()
            .min()
        else {
            return;
        };
        if next > end {
            return;
        }
        w.now = w.now.max(next);
        if next_held == Some(next) {
            let i = held.iter().position(|h| h.0 == next).unwrap();
            let (_, bytes) = held.remove(i);
            let sport = sport_b.expect("B's source port seen");
            w.a.ep
                .handle_datagram(w.now, B, sport, false, &bytes, &mut w.a.mem);
        } else if next_pkt == Some(next) {
            let f = w.q.pop_front().unwrap();
            let s = if f.to_b { &mut w.b } else { &mut w.a };
            s.ep.handle_datagram(w.now, f.src, f.sport, false, &f.bytes, &mut s.mem);
        } else {
            w.a.ep.handle_timeout(w.now);
            w.b.ep.handle_timeout(w.now);
        }
    }
}

#[test]
fn late_responses_after_resends_complete_every_request_once() {
    for (seed, every) in [(1u64, 12u64), (2, 16), (3, 20), (4, 8)] {
        let mut w = Wire::new(&|c| c.timeout = 1); // ~8 µs, the wire's RTT is 2 µs
        w.keep_frames = true;
        let k = setup(&mut w, 65536);
        let mut recvs = 0u64;
        for i in 0..24u64 {
            let len = [100u32, 1024, 1500, 3000, 8][((i + seed) % 5) as usize];
            let op = match (i + seed) % 4 {
                0 => SendOp::Send { imm: None },
                1 => SendOp::Write {
                    rkey: k.b_rkey,
                    raddr: 0x8000 + i * 512,
                    imm: None,
                },
                2 => SendOp::Read {
                    rkey: k.b_rkey,
                    raddr: 0x8000 + i * 256,
                },
                _ => SendOp::FetchAdd {
                    rkey: k.b_rkey,
                    raddr: 0xf000 + (i % 8) * 8,
                    add: 1,
                },
            };
            let len = if matches!(op, SendOp::FetchAdd { .. }) {
                8
            } else {
                len
            };
            if matches!(op, SendOp::Send { .. }) {
                w.b.ep
                    .post_recv(
                        w.b.conn,
                        QP,
                        RecvWr {
                            wr_id: 1000 + i,
                            sgl: sge(k.b_recv, 0x40000 + recvs * 4096, 4096),
                        },
                    )
                    .unwrap();
                recvs += 1;
            }
            let at = 0x1000 + (i % 8) * 4096;
            w.a.ep
                .post_send(w.a.conn, QP, wr(i, op, sge(k.a_lkey, at, len)))
                .unwrap();
        }
        // B's packets (ACKs, READ responses, atomic ACKs) go late in runs of `every` in a
        // row, one run in every 24 packets, by about 4 timeouts' worth: nothing reaches the
        // requester for that long, so its timer fires and it resends.
        let late = Rc::new(RefCell::new(HashSet::new()));
        let l2 = late.clone();
        let mut b_count = 0u64;
        w.drop = Box::new(move |from_a, op, _, n| {
            if from_a || op == Opcode::Cnp {
                return false;
            }
            b_count += 1;
            let hold = b_count % 24 < every;
            if hold {
                l2.borrow_mut().insert(n);
            }
            hold
        });
        run_with_late(&mut w, 2_000_000_000, 30_000, late);
        let a: Vec<_> = w.a.done.iter().map(|c| (c.wr_id, c.status)).collect();
        assert_eq!(
            a,
            (0..24).map(|i| (i, Status::Success)).collect::<Vec<_>>(),
            "seed {seed}, every {every}: A {:?}\nB {:?}",
            w.a.ep.counters(),
            w.b.ep.counters()
        );
        assert!(
            w.a.ep.counters().timeouts > 0,
            "the test made no timer fire"
        );
    }
}
