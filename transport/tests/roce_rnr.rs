//! RNR with more than one request in flight (spec/rocev2.md §6): the responder NAKs the
//! first SEND that finds no receive and drops what follows it; once receives are posted the
//! requester's resend from the NAKed PSN completes them all.

mod roce_common;

use ferroce_transport::*;
use roce_common::*;

#[test]
fn rnr_with_several_sends_in_flight_recovers() {
    for (sends, len, recv_at) in [(2u64, 1024u32, 5_000u64), (2, 1024, 0), (4, 3000, 5_000)] {
        let mut w = Wire::new(&|c| c.min_rnr_timer = 1); // 10 µs
        let k = setup(&mut w, 65536);
        for i in 0..sends {
            w.a.ep
                .post_send(
                    w.a.conn,
                    QP,
                    wr(i, SendOp::Send { imm: None }, sge(k.a_lkey, 0x1000, len)),
                )
                .unwrap();
        }
        w.run(recv_at);
        for i in 0..sends {
            w.b.ep
                .post_recv(
                    w.b.conn,
                    QP,
                    RecvWr {
                        wr_id: 100 + i,
                        sgl: sge(k.b_recv, 0x40000 + i * 4096, 4096),
                    },
                )
                .unwrap();
        }
        w.run(1_000_000_000);
        let a: Vec<_> = w.a.done.iter().map(|c| (c.wr_id, c.status)).collect();
        assert_eq!(
            a,
            (0..sends).map(|i| (i, Status::Success)).collect::<Vec<_>>(),
            "{sends} x {len} B, receives at {recv_at} ns: {:?} / {:?}",
            w.a.ep.counters(),
            w.b.ep.counters()
        );
    }
}
