//! A peer dies and comes back (spec/transport.md §2.6), on the sans-IO core where the wire is
//! the point: A dies in the middle of B's WRITE and restarts with the same seed but a new
//! incarnation. B's old WRITE fails with RetryExceeded within its retry time and never
//! reports success; packets of the old incarnation (captured before the death and replayed)
//! find no connection in the new one (dropped, counted, nothing placed); a fresh transfer
//! between the new A and B succeeds.

use ferroce_transport::mem::{access, Regions};
use ferroce_transport::*;
use std::net::Ipv4Addr;

const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const DST: u64 = 0x9000;
const LEN: usize = 4096;

fn cfg(seed: u64, incarnation: u64) -> EndpointConfig {
    let mut c = EndpointConfig {
        seed,
        incarnation,
        ..EndpointConfig::default()
    };
    c.conn.mtu = 1024;
    c.conn.paths = 2;
    c
}

struct Host {
    ep: Endpoint,
    mem: Regions,
}

impl Host {
    fn new(seed: u64, incarnation: u64) -> Host {
        Host {
            ep: Endpoint::new(cfg(seed, incarnation)),
            mem: Regions::new(),
        }
    }
}

/// Everything `from` sends now, as datagrams.
fn drain(from: &mut Host, now: u64) -> Vec<Vec<u8>> {
    let mut buf = vec![0; 65_536];
    let mut out = Vec::new();
    while let Some(t) = from.ep.poll_transmit(now, &mut buf, &mut from.mem) {
        out.push(buf[..t.len].to_vec());
    }
    out
}

/// One round: timers, then both directions delivered (A's to B unless `a_dead`).
fn step(a: Option<&mut Host>, b: &mut Host, now: u64) {
    if let Some(t) = b.ep.poll_timeout().filter(|&t| t <= now) {
        let _ = t;
        b.ep.handle_timeout(now);
    }
    match a {
        Some(a) => {
            if a.ep.poll_timeout().is_some_and(|t| t <= now) {
                a.ep.handle_timeout(now);
            }
            for d in drain(a, now) {
                b.ep.handle_datagram(now, A, 40_000, false, &d, &mut b.mem);
            }
            for d in drain(b, now) {
                a.ep.handle_datagram(now, B, 40_000, false, &d, &mut a.mem);
            }
        }
        None => {
            drain(b, now); // into the void: A is dead
        }
    }
}

fn write_wr(wr_id: u64, lkey: u32, rkey: u32) -> SendWr {
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
            len: LEN as u32,
        }]
        .into_iter()
        .collect(),
        signaled: true,
        solicited: false,
        fence: false,
    }
}

/// A connected to B (A opened), one stream (id 1 both sides); returns (A's conn, B's conn).
fn connect(a: &mut Host, b: &mut Host, now: &mut u64) -> (ConnId, ConnId) {
    let before: Vec<ConnId> = b.ep.connections().map(|c| c.id).collect();
    let ca = a.ep.connect(B);
    for _ in 0..6 {
        step(Some(a), b, *now);
        *now += 1_000;
    }
    let cb =
        b.ep.connections()
            .map(|c| c.id)
            .find(|id| !before.contains(id))
            .expect("B accepted a new connection");
    a.ep.create_stream(ca, 1, 1, 1).unwrap();
    b.ep.create_stream(cb, 1, 1, 1).unwrap();
    (ca, cb)
}

/// Run until `h` has a completion (or `limit` ns pass); the completion and when it came.
fn until_completion(
    mut a: Option<&mut Host>,
    b: &mut Host,
    now: &mut u64,
    limit: u64,
    on_b: bool,
) -> Option<(Completion, u64)> {
    let end = *now + limit;
    while *now < end {
        step(a.as_deref_mut(), b, *now);
        let c = if on_b {
            b.ep.poll_completion()
        } else {
            a.as_deref_mut().and_then(|a| a.ep.poll_completion())
        };
        if let Some(c) = c {
            return Some((c, *now));
        }
        // Jump to the next timer when nothing else is due (a dead peer: only timers).
        let next = [
            b.ep.poll_timeout(),
            a.as_deref().and_then(|a| a.ep.poll_timeout()),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(*now + 1_000);
        *now = next.max(*now + 1_000);
    }
    None
}

// checks: [CONN-5] [LOSS-3]
#[test]
fn a_restarted_peer_is_a_new_incarnation_and_the_old_one_fails_cleanly() {
    let mut now = 1_000u64;
    let mut a = Host::new(1, 0x1111_2222_3333_4444);
    let mut b = Host::new(2, 0x5555_6666_7777_8888);
    let (ca, cb) = connect(&mut a, &mut b, &mut now);
    let old_a_id = ca.0;

    // A first WRITE from B to A succeeds (the connection is warm: RTT sampled, hint held).
    let a_rkey = a.mem.register(1, DST, LEN, access::REMOTE_WRITE);
    let b_lkey = b.mem.register(1, 0x1000, LEN, access::LOCAL_WRITE);
    b.mem.region_mut(b_lkey).unwrap().data.fill(0x11);
    b.ep.post_send(cb, 1, write_wr(6, b_lkey, a_rkey)).unwrap();
    let (c, _) = until_completion(Some(&mut a), &mut b, &mut now, 10_000_000, true)
        .expect("the first WRITE did not complete");
    assert_eq!((c.wr_id, c.status), (6, Status::Success), "{c:?}");

    // The second WRITE's packets leave B but A dies before they arrive (captured, to be
    // replayed into A's next incarnation later).
    b.mem.region_mut(b_lkey).unwrap().data.fill(0xab);
    b.ep.post_send(cb, 1, write_wr(7, b_lkey, a_rkey)).unwrap();
    drop(a); // SIGKILL: no CLOSE, nothing more from A
    let killed_at = now;
    let mut old_packets = Vec::new();
    for _ in 0..50 {
        if b.ep.poll_timeout().is_some_and(|t| t <= now) {
            b.ep.handle_timeout(now);
        }
        old_packets.extend(drain(&mut b, now));
        now += 200; // B's pacing spreads the 4 packets
    }
    assert!(old_packets.len() >= 4, "{} packets", old_packets.len());

    // B's WRITE fails with RetryExceeded within its retry time, and no success before.
    let retry = b.ep.config().conn.clone();
    let bound = retry.retry_limit as u64 * retry.max_rto_ns;
    let (c, at) = until_completion(None, &mut b, &mut now, 2 * bound, true)
        .expect("B's WRITE never completed: hang");
    assert_eq!((c.wr_id, c.status), (7, Status::RetryExceeded), "{c:?}");
    let took = at - killed_at;
    println!(
        "INCARNATION sans-IO: B's WRITE to the dead peer failed RetryExceeded after {:.1} ms \
         (retry_limit {} RTOs, min_rto {} us, max_rto {} ms; bound {} ms)",
        took as f64 / 1e6,
        retry.retry_limit,
        retry.min_rto_ns / 1000,
        retry.max_rto_ns / 1_000_000,
        bound / 1_000_000
    );
    assert!(took <= bound, "took {took} ns, more than {bound} ns");
    assert_eq!(
        b.ep.connection(cb).map(|c| c.state),
        Some(ConnState::Failed)
    );

    // A restarts: same seed, another incarnation, same memory layout.
    let mut a = Host::new(1, 0x9999_aaaa_bbbb_cccc);
    let a_rkey2 = a.mem.register(1, DST, LEN, access::REMOTE_WRITE);
    let (ca2, cb2) = connect(&mut a, &mut b, &mut now);
    assert_ne!(
        ca2.0, old_a_id,
        "the new incarnation reused the old connection id"
    );
    assert_ne!(cb2, cb, "B glued the new incarnation to the old connection");

    // The old incarnation's packets, replayed into the new one: no connection takes them.
    let dropped = a.ep.counters.drop_unknown_conn;
    for d in &old_packets {
        a.ep.handle_datagram(now, B, 40_000, false, d, &mut a.mem);
    }
    assert_eq!(
        a.ep.counters.drop_unknown_conn - dropped,
        old_packets.len() as u64,
        "old-incarnation packets reached a connection"
    );
    assert!(drain(&mut a, now).is_empty(), "answered an old packet");
    assert!(
        a.mem.region(a_rkey2).unwrap().data.iter().all(|&x| x == 0),
        "old data placed in the new incarnation"
    );
    assert!(a.ep.poll_completion().is_none());

    // A fresh transfer between the new A and B succeeds, byte for byte.
    let b_lkey2 = b.mem.register(1, 0x1000, LEN, access::LOCAL_WRITE);
    b.mem.region_mut(b_lkey2).unwrap().data.fill(0xcd);
    b.ep.post_send(cb2, 1, write_wr(8, b_lkey2, a_rkey2))
        .unwrap();
    let (c, _) = until_completion(Some(&mut a), &mut b, &mut now, 10_000_000, true)
        .expect("the fresh WRITE did not complete");
    assert_eq!((c.wr_id, c.status), (8, Status::Success), "{c:?}");
    assert!(a
        .mem
        .region(a_rkey2)
        .unwrap()
        .data
        .iter()
        .all(|&x| x == 0xcd));
}

// checks: [CONN-5]
#[test]
fn without_an_incarnation_a_restarted_peer_reuses_its_connection_id() {
    // Why the incarnation exists: the same seed alone gives the same first id, so the old
    // incarnation's packets would be addressed to the new one.
    let a1 = Endpoint::new(cfg(1, 0)).connect(B);
    let a2 = Endpoint::new(cfg(1, 0)).connect(B);
    assert_eq!(a1, a2);
    let a3 = Endpoint::new(cfg(1, 0x1234)).connect(B);
    assert_ne!(a1, a3);
}
