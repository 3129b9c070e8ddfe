//! Send deadlines behind a full NIC: an embedder whose NIC queue is full stops asking for
//! transmits while events keep coming. A pilot (spec/transport.md COLD-2) or an ACK (delayed
//! or holding a hint answer) that comes due meanwhile must cost one connection timer pass,
//! not one per later event, and must go out once transmits are asked for again.

use ferroce_transport::mem::{access, Regions};
use ferroce_transport::wire::{self, flags, Body, Packet};
use ferroce_transport::*;
use std::collections::BTreeSet;
use std::net::Ipv4Addr;

const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const CONNS: usize = 100;
/// Event spacing while the NIC is held full: each step is one event on the endpoint.
const STEP: u64 = 10;

/// (sender is A, UDP source port, bytes)
type Dgram = (bool, u16, Vec<u8>);

fn drain(e: &mut Endpoint, from_a: bool, now: u64, m: &mut Regions, buf: &mut [u8]) -> Vec<Dgram> {
    let mut out = Vec::new();
    while let Some(t) = e.poll_transmit(now, buf, m) {
        out.push((from_a, t.src_port, buf[..t.len].to_vec()));
    }
    out
}

/// Events on `e` from `from` to `to` while its NIC is full: timers fire, nothing is polled
/// for transmit. Returns the connection timer passes and the endpoint timeouts it took;
/// checks that no deadline is left in the past by a timeout (it would fire on every event).
fn hold_full(e: &mut Endpoint, from: u64, to: u64) -> (u64, u64) {
    let before = e.counters.conn_timeouts;
    let mut fired = 0;
    let mut now = from;
    while now < to {
        if e.poll_timeout().is_some_and(|t| t <= now) {
            e.handle_timeout(now);
            fired += 1;
            let next = e.poll_timeout();
            assert!(
                next.is_none_or(|t| t > now),
                "deadline {next:?} still due at {now} after the timeout"
            );
        }
        now += STEP;
    }
    (e.counters.conn_timeouts - before, fired)
}

fn parse(d: &Dgram) -> Packet<'_> {
    Packet::parse(&d.2).expect("valid packet")
}

#[test]
fn pilots_and_acks_due_behind_a_full_nic_fire_once_and_go_out_after() {
    for seed in [3u64, 17, 40] {
        let cfg = |s| {
            let mut c = EndpointConfig {
                seed: s,
                ..EndpointConfig::default()
            };
            // Several connections to one peer: its OPEN_ACKs do not say SOLE, so every
            // connection starts cold with a hint request and a pilot.
            c.sole_grant = false;
            c
        };
        let (mut a, mut b) = (Endpoint::new(cfg(seed)), Endpoint::new(cfg(seed + 1000)));
        let (mut ma, mut mb) = (Regions::new(), Regions::new());
        let mut buf = vec![0u8; 9000];
        let conns: Vec<ConnId> = (0..CONNS).map(|_| a.connect(B)).collect();
        let mut now = 1_000;
        for _ in 0..8 {
            for e in [&mut a, &mut b] {
                if e.poll_timeout().is_some_and(|t| t <= now) {
                    e.handle_timeout(now);
                }
            }
            let mut sent = drain(&mut a, true, now, &mut ma, &mut buf);
            sent.extend(drain(&mut b, false, now, &mut mb, &mut buf));
            for (from_a, port, d) in sent {
                if from_a {
                    b.handle_datagram(now, A, port, false, &d, &mut mb);
                } else {
                    a.handle_datagram(now, B, port, false, &d, &mut ma);
                }
            }
            now += 1_000;
        }
        assert!(conns
            .iter()
            .all(|&c| a.connection(c).unwrap().state == ConnState::Open));
        let accepted: Vec<ConnId> = b.connections().map(|c| c.id).collect();
        assert_eq!(accepted.len(), CONNS);
        for &c in &conns {
            a.create_stream(c, 1, 1, 1).unwrap();
        }
        for &c in &accepted {
            b.create_stream(c, 1, 1, 1).unwrap();
        }
        let lkey = ma.register(1, 0x1000, 1000, access::LOCAL_WRITE);
        let rkey = mb.register(1, 0x9000, 1000, access::REMOTE_WRITE);
        for (i, &c) in conns.iter().enumerate() {
            let wr = SendWr {
                wr_id: i as u64,
                op: SendOp::Write {
                    rkey,
                    raddr: 0x9000,
                    imm: None,
                },
                sgl: [Sge {
                    lkey,
                    addr: 0x1000,
                    len: 1000,
                }]
                .into_iter()
                .collect(),
                signaled: true,
                solicited: false,
                fence: false,
            };
            a.post_send(c, 1, wr).unwrap();
        }

        // A sends its hint requests, then its NIC is full for twice the pilot spread: every
        // pilot comes due in that time.
        let requests = drain(&mut a, true, now, &mut ma, &mut buf);
        assert_eq!(requests.len(), CONNS, "one hint request per connection");
        assert!(requests
            .iter()
            .all(|d| parse(d).flags & flags::BACKLOG != 0));
        // B has CONNS connections: its crowd stretches the pilots' span past pilot_spread
        // (COLD-7; 4 KiB packets at 100 Gbit/s).
        let cc = ConnConfig::default();
        let over = (wire::crowd_level(CONNS) as u64).saturating_sub(cc.pilot_absorb as u64);
        let spread = cc
            .pilot_spread_ns
            .max(over * ((4096 + 118) * 8000 / 100_000));
        let (passes, fired) = hold_full(&mut a, now, now + 2 * spread);
        let steps = 2 * spread / STEP;
        // A pilot each (a few may share a time): O(connections), not O(events x connections)
        // as when every due pilot fired again at each of the `steps` events.
        assert!(
            passes >= CONNS as u64 && passes <= 2 * CONNS as u64,
            "seed {seed}: {passes} connection timer passes ({fired} endpoint timeouts, {steps} events)"
        );
        now += 2 * spread;
        let pilots = drain(&mut a, true, now, &mut ma, &mut buf);
        let pilot_conns: BTreeSet<u32> = pilots
            .iter()
            .filter(|d| matches!(parse(d).body, Body::Data(_)))
            .map(|d| parse(d).dst_conn)
            .collect();
        assert_eq!(pilots.len(), CONNS, "seed {seed}: only the pilots go");
        assert_eq!(
            pilot_conns.len(),
            CONNS,
            "seed {seed}: a pilot per connection"
        );

        // B gets requests and pilots together; its NIC is full while their ACKs (held for
        // the hint answer, then due) come due.
        now += 1_000;
        for (_, port, d) in requests.iter().chain(&pilots) {
            b.handle_datagram(now, A, *port, false, d, &mut mb);
        }
        let cc = ConnConfig::default();
        let span = 2 * (cc.hint_hold_ns + cc.ack_delay_ns);
        let (passes, fired) = hold_full(&mut b, now, now + span);
        assert!(
            passes >= CONNS as u64 && passes <= 2 * CONNS as u64,
            "seed {seed}: {passes} connection timer passes on B ({fired} endpoint timeouts, {} events)",
            span / STEP
        );
        now += span;
        let acks = drain(&mut b, false, now, &mut mb, &mut buf);
        let ack_conns: BTreeSet<u32> = acks
            .iter()
            .filter(|d| matches!(parse(d).body, Body::Ack(_) | Body::AckMulti(_)))
            .map(|d| parse(d).dst_conn)
            .collect();
        assert_eq!(ack_conns.len(), CONNS, "seed {seed}: an ACK per connection");

        // Then the WRITEs finish as usual.
        let mut wire: Vec<Dgram> = acks;
        let mut done = 0;
        let end = now + 10_000_000;
        while done < CONNS && now < end {
            now += 1_000;
            for (from_a, port, d) in wire.drain(..) {
                if from_a {
                    b.handle_datagram(now, A, port, false, &d, &mut mb);
                } else {
                    a.handle_datagram(now, B, port, false, &d, &mut ma);
                }
            }
            for e in [&mut a, &mut b] {
                if e.poll_timeout().is_some_and(|t| t <= now) {
                    e.handle_timeout(now);
                }
            }
            wire.extend(drain(&mut a, true, now, &mut ma, &mut buf));
            wire.extend(drain(&mut b, false, now, &mut mb, &mut buf));
            while let Some(c) = a.poll_completion() {
                assert_eq!(c.status, Status::Success, "seed {seed}");
                done += 1;
            }
            while b.poll_completion().is_some() {}
        }
        assert_eq!(done, CONNS, "seed {seed}: WRITEs complete");
    }
}
