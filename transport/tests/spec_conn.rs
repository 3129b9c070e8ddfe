//! Connection rules the spec settled for a stranger who must interoperate (issue 16, item 2):
//! what a closing connection still does and when it sends CLOSE, the CLOSE_ACK reason, a
//! duplicate OPEN for a closed connection, an Opening initiator, connection ids. Each test
//! names the requirements it checks (spec/requirements.md). The receiver, responder and
//! sender rules are in spec_rules.rs.

mod common;

use common::*;
use ferroce_transport::mem::{access, Regions};
use ferroce_transport::wire::{flags, Body, CloseRepr, DataOp, DataRepr, Opcode, OpenRepr, Packet};
use ferroce_transport::*;

// checks: [CLOSE-2] [CLOSE-3]
#[test]
fn a_graceful_close_waits_for_the_atomic_response_it_owes() {
    let mut p = Pair::new();
    let rkey = p.mb.register(1, DST, 8, access::REMOTE_ATOMIC);
    p.mb.region_mut(rkey)
        .unwrap()
        .data
        .copy_from_slice(&40u64.to_ne_bytes());
    let lkey = p.ma.register(1, 0x1000, 8, access::LOCAL_WRITE);
    let op = SendOp::FetchAdd {
        rkey,
        raddr: DST,
        add: 2,
    };
    p.a.post_send(p.a_conn, 1, wr(7, op, sge(lkey, 0x1000, 8)))
        .unwrap();
    let b_conn = ConnId(p.to_b);
    let mut closed = false;
    let mut done = Vec::new();
    for _ in 0..2_000 {
        for e in [&mut p.a, &mut p.b] {
            if e.poll_timeout().is_some_and(|t| t <= p.now) {
                e.handle_timeout(p.now);
            }
        }
        while let Some(t) = p.a.poll_transmit(p.now, &mut p.buf, &mut p.ma) {
            let d = p.buf[..t.len].to_vec();
            p.b.handle_datagram(p.now, A, t.src_port, false, &d, &mut p.mb);
            let is_atomic = matches!(
                Packet::parse(&d),
                Ok(Packet {
                    body: Body::Data(DataRepr {
                        op: DataOp::FetchAdd { .. },
                        ..
                    }),
                    ..
                })
            );
            if is_atomic && !closed {
                // B has executed the atomic and owes its answer: close now, with no send work
                // of B's own outstanding.
                p.b.close(b_conn).unwrap();
                closed = true;
            }
        }
        while let Some(t) = p.b.poll_transmit(p.now, &mut p.buf, &mut p.mb) {
            let d = p.buf[..t.len].to_vec();
            p.a.handle_datagram(p.now, B, t.src_port, false, &d, &mut p.ma);
        }
        while let Some(c) = p.a.poll_completion() {
            done.push(c);
        }
        let b_state = p.b.connection(b_conn).map(|c| c.state);
        if !done.is_empty() && b_state == Some(ConnState::Closed) {
            break;
        }
        p.now += 1_000;
    }
    assert!(closed, "the atomic never reached B");
    let got = u64::from_ne_bytes(p.mb.region(rkey).unwrap().data[..8].try_into().unwrap());
    assert_eq!(got, 42, "the atomic ran once at B");
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(
        done[0].status,
        Status::Success,
        "B's CLOSE cut off the answer of an atomic it had applied: {done:?}"
    );
    let orig = u64::from_ne_bytes(p.ma.region(lkey).unwrap().data[..8].try_into().unwrap());
    assert_eq!(orig, 40, "A got the original value");
    assert_eq!(
        p.b.connection(b_conn).map(|c| c.state),
        Some(ConnState::Closed),
        "B closed once its answer was acknowledged"
    );
    assert_eq!(
        p.a.connection(p.a_conn).map(|c| c.state),
        Some(ConnState::Closed)
    );
}

// checks: [WIRE-28] [CLOSE-4]
#[test]
fn close_ack_carries_reason_zero_and_a_duplicate_close_gets_another() {
    let mut p = Pair::new();
    let a_conn = p.a_conn;
    let lkey = p.ma.register(1, 0x1000, 64, access::LOCAL_WRITE);
    p.a.post_recv(
        a_conn,
        1,
        RecvWr {
            wr_id: 9,
            sgl: sge(lkey, 0x1000, 64),
        },
    )
    .unwrap();
    let close = crafted(
        p.to_a,
        0,
        0,
        Body::Close(CloseRepr {
            src_conn: p.to_b,
            reason: 7,
        }),
    );
    for round in 0..2 {
        p.a.handle_datagram(p.now, B, 40_000, false, &close, &mut p.ma);
        let mut answers = Vec::new();
        while let Some(t) = p.a.poll_transmit(p.now, &mut p.buf, &mut p.ma) {
            answers.push(p.buf[..t.len].to_vec());
        }
        let close_acks: Vec<u32> = answers
            .iter()
            .filter_map(|d| match Packet::parse(d) {
                Ok(Packet {
                    body: Body::CloseAck(c),
                    ..
                }) => Some(c.reason),
                _ => None,
            })
            .collect();
        assert_eq!(close_acks, vec![0], "round {round}");
        assert_eq!(
            p.a.connection(a_conn).map(|c| c.state),
            Some(ConnState::Closed)
        );
    }
    let c =
        p.a.poll_completion()
            .expect("the posted receive is flushed");
    assert_eq!((c.wr_id, c.status), (9, Status::Flushed));
}

// checks: [OPEN-7]
#[test]
fn a_duplicate_open_for_a_closed_connection_gets_the_same_open_ack_and_creates_nothing() {
    let mut p = Pair::new();
    p.a.close(p.a_conn).unwrap();
    for _ in 0..20 {
        p.exchange();
    }
    let b_conn = ConnId(p.to_b);
    assert_eq!(
        p.b.connection(b_conn).map(|c| c.state),
        Some(ConnState::Closed)
    );
    let n = p.b.connections().count();
    let open = crafted(
        0,
        0,
        0,
        Body::Open(OpenRepr {
            src_conn: p.to_a,
            paths: 1,
            crowd: 0,
            mtu: P as u16,
            line_rate_mbps: 0,
        }),
    );
    let out = to_b_all(&mut p, &open);
    let open_acks: Vec<(u32, u32)> = out
        .iter()
        .filter_map(|d| match Packet::parse(d) {
            Ok(Packet {
                dst_conn,
                body: Body::OpenAck(o),
                ..
            }) => Some((dst_conn, o.src_conn)),
            _ => None,
        })
        .collect();
    assert_eq!(open_acks, vec![(p.to_a, p.to_b)]);
    assert_eq!(p.b.connections().count(), n, "a connection was created");
    assert_eq!(
        p.b.connection(b_conn).map(|c| c.state),
        Some(ConnState::Closed)
    );
}

// checks: [OPEN-5] [OPEN-6]
#[test]
fn an_opening_initiator_sends_only_open_and_drops_data_that_overtakes_the_open_ack() {
    let mut cfg = EndpointConfig {
        seed: 11,
        ..EndpointConfig::default()
    };
    cfg.conn.mtu = P as u16;
    cfg.conn.paths = 1;
    let mut a = Endpoint::new(cfg);
    let mut ma = Regions::new();
    let conn = a.connect(B);
    a.create_stream(conn, 1, 1, 1).unwrap();
    let lkey = ma.register(1, 0x1000, 64, access::LOCAL_WRITE);
    let rkey = ma.register(1, DST, 64, access::REMOTE_WRITE);
    // Work posted while Opening waits for Open.
    let op = SendOp::Write {
        rkey: 5,
        raddr: 0,
        imm: None,
    };
    let posted = a.post_send(conn, 1, wr(1, op, sge(lkey, 0x1000, 8)));
    let mut buf = vec![0; 4096];
    let mut now = 1_000;
    let mut opcodes = Vec::new();
    for _ in 0..3_000 {
        if a.poll_timeout().is_some_and(|t| t <= now) {
            a.handle_timeout(now);
        }
        while let Some(t) = a.poll_transmit(now, &mut buf, &mut ma) {
            opcodes.push(Packet::parse(&buf[..t.len]).unwrap().opcode());
        }
        now += 1_000;
    }
    assert!(!opcodes.is_empty());
    assert!(
        opcodes.iter().all(|o| *o == Opcode::Open),
        "an Opening connection sent {opcodes:?} (post: {posted:?})"
    );
    // B's data overtakes its OPEN_ACK: dropped, counted NOT_OPEN, unanswered.
    let d = data_at(
        conn.0,
        0,
        1,
        flags::LAST,
        msg(0, 0, 4),
        DataOp::Write { rkey, raddr: DST },
        &[9; 4],
    );
    a.handle_datagram(now, B, 40_000, false, &d, &mut ma);
    assert!(
        a.poll_transmit(now, &mut buf, &mut ma).is_none(),
        "answered"
    );
    let c = a.connection(conn).unwrap();
    assert_eq!((c.state, c.counters().rx_not_open), (ConnState::Opening, 1));
    assert!(
        ma.region(rkey).unwrap().data.iter().all(|&b| b == 0),
        "placed"
    );
}

// checks: [CONN-1]
#[test]
fn connection_ids_are_nonzero_and_unique() {
    let mut e = Endpoint::new(EndpointConfig {
        seed: 0,
        ..EndpointConfig::default()
    });
    let mut ids = std::collections::BTreeSet::new();
    for i in 0..5_000u32 {
        let peer = std::net::Ipv4Addr::from(0xc612_0000 + i);
        let c = e.connect(peer);
        assert_ne!(c.0, 0);
        assert!(ids.insert(c.0), "id {:#x} given twice", c.0);
    }
}

// checks: [CLOSE-1]
#[test]
fn a_closing_connection_still_accepts_and_acknowledges_the_peers_requests() {
    let mut p = Pair::new();
    let rkey = p.ma.register(1, DST, 64, access::REMOTE_WRITE);
    p.a.close(p.a_conn).unwrap();
    assert_eq!(
        p.a.connection(p.a_conn).map(|c| c.state),
        Some(ConnState::Closing)
    );
    // A's CLOSE is out (nothing of A's is outstanding) but not yet acknowledged: B's WRITE
    // still lands and is acknowledged.
    let d = data_at(
        p.to_a,
        0,
        3,
        flags::LAST,
        msg(0, 0, 4),
        DataOp::Write { rkey, raddr: DST },
        &[7; 4],
    );
    p.a.handle_datagram(p.now, B, 40_000, false, &d, &mut p.ma);
    let mut out = Vec::new();
    while let Some(t) = p.a.poll_transmit(p.now, &mut p.buf, &mut p.ma) {
        out.push(p.buf[..t.len].to_vec());
    }
    assert_eq!(acks(&out), vec![(1, 3)], "{out:?}");
    assert_eq!(&p.ma.region(rkey).unwrap().data[..4], &[7; 4]);
    assert_eq!(
        p.a.connection(p.a_conn).map(|c| c.state),
        Some(ConnState::Closing)
    );
}
