//! The SIDR exchange (spec/cm.md §2.5).

use super::tests::{events, never, pump, Rng, A, B};
use super::*;

const PS_UDP: u16 = 0x0111;

/// Resolution with private data both ways; a duplicate SIDR_REQ (after the reply) gets the
/// same SIDR_REP again, and the initiator takes only the first.
// checks: [CM-3] [CM-5]
#[test]
fn sidr_resolves_qpn_and_qkey_and_answers_duplicates_from_state() {
    let cfg = CmConfig::default();
    let (mut a, mut b) = (Cm::new(cfg, 7), Cm::new(cfg, 9));
    b.listen(PS_UDP, 7174).unwrap();
    let ia = a.sidr_request(0, B, PS_UDP, 7174, 40000, b"hello").unwrap();
    let req = {
        let mut buf = [0u8; 512];
        let (to, n) = a.poll_transmit(&mut buf).unwrap();
        assert_eq!(to, B);
        buf[..n].to_vec()
    };
    b.handle(1, A, &req);
    let ev = events(&mut b);
    let [CmEvent::SidrRequest {
        id: ib,
        peer,
        port_space,
        port,
        peer_port,
        local_addr,
        ref private_data,
    }] = ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(
        (
            peer,
            port_space,
            port,
            peer_port,
            local_addr,
            &private_data[..]
        ),
        (A, PS_UDP, 7174, 40000, B, &b"hello"[..])
    );
    // A duplicate before the application answers: nothing.
    b.handle(2, A, &req);
    assert!(!b.has_transmit() && events(&mut b).is_empty());
    b.sidr_reply(3, ib, sidr_status::SUCCESS, 0x321, 0x0123_4567, b"world")
        .unwrap();
    assert_eq!(
        b.sidr_reply(3, ib, sidr_status::SUCCESS, 1, 1, b""),
        Err(CmError::InvalidState)
    );
    pump(&mut b, B, &mut a, 4, &mut never());
    assert_eq!(
        events(&mut a),
        vec![CmEvent::SidrResponse {
            id: ia,
            status: 0,
            qpn: 0x321,
            qkey: 0x0123_4567,
            private_data: b"world".to_vec(),
        }]
    );
    // The SIDR_REQ again (say our retransmission crossed the reply): the same SIDR_REP
    // again, and A reports nothing more.
    b.handle(5, A, &req);
    assert!(b.has_transmit());
    pump(&mut b, B, &mut a, 6, &mut never());
    assert!(events(&mut a).is_empty());
    assert_eq!(a.counters.drop_unexpected, 0);
    assert!(!a.is_live(ia) && !b.is_live(ib));
    // Both sides forget the exchange after the time-wait: no timer left.
    let t = 6 + cfg.timewait_ns;
    a.handle_timeout(t);
    b.handle_timeout(t);
    assert!(a.poll_timeout().is_none() && b.poll_timeout().is_none());
}

/// A refused resolution, a port nobody listens on (after the grace), a silent peer, and
/// private data over the limit.
// checks: [CM-2] [CM-4] [CM-5]
#[test]
fn sidr_reject_no_listener_and_unreachable() {
    let cfg = CmConfig::default();
    let (mut a, mut b) = (Cm::new(cfg, 1), Cm::new(cfg, 50));
    b.listen(PS_UDP, 9).unwrap();
    let i1 = a.sidr_request(0, B, PS_UDP, 9, 2, b"").unwrap();
    pump(&mut a, A, &mut b, 0, &mut never());
    let ev = events(&mut b);
    let [CmEvent::SidrRequest { id: ib, .. }] = ev[..] else {
        panic!("{ev:?}")
    };
    b.sidr_reply(0, ib, sidr_status::REJECT, 0, 0, b"no")
        .unwrap();
    pump(&mut b, B, &mut a, 0, &mut never());
    assert_eq!(
        events(&mut a),
        vec![CmEvent::SidrResponse {
            id: i1,
            status: sidr_status::REJECT,
            qpn: 0,
            qkey: 0,
            private_data: b"no".to_vec(),
        }]
    );
    // Nobody listens on port 10 in the UD space (a TCP listener on it does not count): no
    // answer within the grace, then status 1.
    b.listen(0x0106, 10).unwrap();
    let i2 = a.sidr_request(0, B, PS_UDP, 10, 2, b"").unwrap();
    pump(&mut a, A, &mut b, 0, &mut never());
    assert!(!b.has_transmit(), "answered within the listen grace");
    let mut now;
    let ev = loop {
        now = a.poll_timeout().unwrap();
        a.handle_timeout(now);
        pump(&mut a, A, &mut b, now, &mut never());
        pump(&mut b, B, &mut a, now, &mut never());
        let ev = events(&mut a);
        if !ev.is_empty() {
            break ev;
        }
    };
    assert!(now >= cfg.listen_grace_ns, "refused at {now} ns");
    assert!(matches!(
        ev[..],
        [CmEvent::SidrResponse { id, status: sidr_status::UNSUPPORTED, qpn: 0, .. }] if id == i2
    ));
    assert!(
        events(&mut b).is_empty(),
        "the TCP listener was offered a SIDR_REQ"
    );
    // A silent peer: 1 + max_retries copies, then Unreachable.
    let i3 = a
        .sidr_request(0, Ipv4Addr::new(198, 18, 0, 99), PS_UDP, 5, 3, b"")
        .unwrap();
    let mut buf = [0u8; 256];
    let mut sent = 0;
    now = 0;
    while let Some(t) = a.poll_timeout() {
        while a.poll_transmit(&mut buf).is_some() {
            sent += 1;
        }
        now = t;
        a.handle_timeout(now);
        if let Some(e) = a.poll_event() {
            assert_eq!(e, CmEvent::Unreachable { id: i3 });
            break;
        }
    }
    assert_eq!(sent, 1 + cfg.max_retries);
    assert!(now < 10_000_000_000, "gave up after {now} ns");
    assert_eq!(
        a.sidr_request(0, B, PS_UDP, 9, 2, &[0; 181]),
        Err(CmError::PrivateDataTooLong)
    );
}

/// Resolution over a channel that loses, duplicates and delays packets, 300 seeds per loss
/// rate: each ends with exactly one request at B and one reply at A, whatever was lost.
// checks: [CM-2] [CM-3] [CM-5]
#[test]
fn sidr_over_a_lossy_duplicating_channel_resolves_once() {
    for loss in [0.05, 0.2] {
        for seed in 1..=300u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let cfg = CmConfig::default();
            let (mut a, mut b) = (Cm::new(cfg, seed as u32), Cm::new(cfg, !(seed as u32)));
            b.listen(PS_UDP, 9).unwrap();
            let ia = a.sidr_request(0, B, PS_UDP, 9, 1, b"x").unwrap();
            let mut wire: Vec<(u64, bool, Vec<u8>)> = Vec::new();
            let (mut ev_a, mut ev_b) = (Vec::new(), Vec::new());
            let mut now = 0u64;
            let mut buf = [0u8; 512];
            for _ in 0..10_000 {
                for (side, to_b) in [(&mut a, true), (&mut b, false)] {
                    while let Some((_, n)) = side.poll_transmit(&mut buf) {
                        if rng.chance(loss) {
                            continue;
                        }
                        let copies = if rng.chance(loss / 2.0) { 2 } else { 1 };
                        for _ in 0..copies {
                            let delay = 10_000 + rng.next() % 2_000_000;
                            wire.push((now + delay, to_b, buf[..n].to_vec()));
                        }
                    }
                }
                while let Some(e) = b.poll_event() {
                    if let CmEvent::SidrRequest { id, .. } = e {
                        b.sidr_reply(now, id, 0, 0x44, 0x1111_2222, b"y").unwrap();
                    }
                    ev_b.push(e);
                }
                ev_a.extend(std::iter::from_fn(|| a.poll_event()));
                let next_wire = wire.iter().map(|w| w.0).min();
                let next = [next_wire, a.poll_timeout(), b.poll_timeout()]
                    .into_iter()
                    .flatten()
                    .min();
                let Some(t) = next else { break };
                now = now.max(t);
                let (due, rest): (Vec<_>, Vec<_>) = wire.drain(..).partition(|w| w.0 <= now);
                wire = rest;
                for (_, to_b, p) in due {
                    if to_b {
                        b.handle(now, A, &p);
                    } else {
                        a.handle(now, B, &p);
                    }
                }
                a.handle_timeout(now);
                b.handle_timeout(now);
            }
            assert_eq!(ev_b.len(), 1, "seed {seed} loss {loss}: B {ev_b:?}");
            assert_eq!(
                ev_a,
                vec![CmEvent::SidrResponse {
                    id: ia,
                    status: 0,
                    qpn: 0x44,
                    qkey: 0x1111_2222,
                    private_data: b"y".to_vec(),
                }],
                "seed {seed} loss {loss}"
            );
            assert!(a.poll_timeout().is_none() && b.poll_timeout().is_none());
        }
    }
}
