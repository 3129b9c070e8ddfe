//! Paths are built when first used (issue 18 item 4): an idle connection's state does not
//! grow with its configured path count.

mod common;

use common::*;
use ferroce_transport::mem::access;
use ferroce_transport::*;

/// 16 paths agreed; the open builds none of them, and one single-packet WRITE builds the
/// one path it went on (the hint request, the pilot and its ACK all use path 0).
#[test]
fn one_write_builds_one_path_of_sixteen() {
    let mut p = Pair::with(|c| c.conn.paths = 16);
    let a = p.a.connection(p.a_conn).unwrap();
    assert_eq!(a.num_paths(), 16);
    assert_eq!(a.built_paths(), 0, "the open built paths");
    let b_conn = p.b.connections().next().unwrap().id;
    assert_eq!(p.b.connection(b_conn).unwrap().built_paths(), 0);
    let rkey = p.mb.register(1, DST, 4096, access::REMOTE_WRITE);
    let lkey = p.ma.register(1, 0x1000, 4096, access::LOCAL_WRITE);
    let op = SendOp::Write {
        rkey,
        raddr: DST,
        imm: None,
    };
    p.a.post_send(p.a_conn, 1, wr(1, op, sge(lkey, 0x1000, P)))
        .unwrap();
    let done = run_until(&mut p, 1, |_| false);
    assert_eq!(done[0].status, Status::Success);
    for _ in 0..100 {
        p.exchange();
    }
    let a = p.a.connection(p.a_conn).unwrap();
    assert_eq!(a.built_paths(), 1, "sender paths built");
    // Every agreed path is still there to query, the unbuilt ones as they start.
    for i in 0..16 {
        let (idx, st, inflight) = a
            .with_path(i, |t| (t.index as usize, t.state, t.inflight_bytes))
            .unwrap();
        assert_eq!((idx, st, inflight), (i, PathState::Good, 0));
    }
    assert!(a.with_path(16, |_| ()).is_none());
}
