//! A QP created before it knew its send PSN (verbs RTR: the verbs shim creates a QP that
//! stays in RTR as a responder only, with sq_psn 0) and given it at RTS: its requests start
//! at that PSN, which is what the peer's responder expects; a QP that already queued a
//! request keeps its PSNs.

mod roce_common;

use ferroce_transport::roce::QpParams;
use ferroce_transport::*;
use roce_common::*;

#[test]
fn the_send_psn_set_at_rts_is_the_one_the_peer_expects() {
    let mut w = Wire::new(&|_| {});
    let k = setup(&mut w, 8192);
    // B's responder expects A's requests from 0x1234; A's QP was made with sq_psn 0.
    for (s, sq, rq) in [(&mut w.a, 0u32, 0x500u32), (&mut w.b, 0x500, 0x1234)] {
        s.ep.destroy_qp(s.conn, QP).unwrap();
        let p = QpParams {
            local_qpn: QP,
            remote_qpn: QP,
            pd: 1,
            sq_psn: sq,
            rq_psn: rq,
            mtu: 0,
        };
        s.ep.create_qp(s.conn, p).unwrap();
    }
    w.a.ep.set_sq_psn(w.a.conn, QP, 0x1234).unwrap();
    let write = |id| {
        wr(
            id,
            SendOp::Write {
                rkey: k.b_rkey,
                raddr: 0x8000,
                imm: None,
            },
            sge(k.a_lkey, 0x1000, 2000),
        )
    };
    w.a.ep.post_send(w.a.conn, QP, write(1)).unwrap();
    w.run(50_000_000);
    let a: Vec<_> = w.a.done.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(a, vec![(1, Status::Success)]);
    // Idle again, but its PSNs were on the wire: they stay.
    assert_eq!(
        w.a.ep.set_sq_psn(w.a.conn, QP, 7),
        Err(PostError::Unsupported)
    );
    assert_eq!(
        w.log.first().map(|l| l.2),
        Some(0x1234),
        "first request PSN"
    );
    assert_eq!(w.b.ep.counters().rx_out_of_sequence, 0);
    // Once a request is queued the PSNs are on their way: no more changes.
    w.a.ep.post_send(w.a.conn, QP, write(2)).unwrap();
    assert_eq!(
        w.a.ep.set_sq_psn(w.a.conn, QP, 7),
        Err(PostError::Unsupported)
    );
    w.run(50_000_000);
    assert_eq!(w.a.done.len(), 2);
    assert_eq!(w.a.done[1].status, Status::Success);
}
