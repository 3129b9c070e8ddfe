//! Cold start between two native endpoints on a scripted wire (no simulator): the hint request
//! and its pilot, the receiver holding the pilot's ACK with the answer, and the pacing that
//! follows from the pilot's arrival (spec/transport.md §5.8, §6.2, §6.3).

use ferroce_transport::mem::{access, Regions};
use ferroce_transport::wire::{flags, Body, Opcode, Packet};
use ferroce_transport::*;
use std::net::Ipv4Addr;

const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const MSG: u32 = 64 * 1024;

struct Pair {
    a: Endpoint,
    b: Endpoint,
    ma: Regions,
    mb: Regions,
    conn: ConnId,
    buf: Vec<u8>,
}

/// One datagram: (sender is A, UDP source port, bytes).
type Dgram = (bool, u16, Vec<u8>);

impl Pair {
    /// A connected to B with one stream, an idle ACK exchange long past (cold again).
    fn new(cfg: impl Fn(&mut EndpointConfig)) -> (Pair, u64) {
        let mut ca = EndpointConfig {
            seed: 11,
            ..EndpointConfig::default()
        };
        cfg(&mut ca);
        let mut cb = ca.clone();
        cb.seed = 12;
        let mut p = Pair {
            a: Endpoint::new(ca),
            b: Endpoint::new(cb),
            ma: Regions::new(),
            mb: Regions::new(),
            conn: ConnId(0),
            buf: vec![0u8; 9000],
        };
        p.conn = p.a.connect(B);
        let mut now = 1_000;
        for _ in 0..8 {
            for d in p.drain(now) {
                p.deliver(now, d);
            }
            now += 1_000;
        }
        assert!(p.a.connection(p.conn).unwrap().state == ConnState::Open);
        let peer = p.b.connections().next().unwrap().id;
        p.a.create_stream(p.conn, 1, 1, 1).unwrap();
        p.b.create_stream(peer, 1, 1, 1).unwrap();
        (p, now)
    }

    /// Everything both endpoints send at `now`.
    fn drain(&mut self, now: u64) -> Vec<Dgram> {
        let mut out = Vec::new();
        while let Some(t) = self.a.poll_transmit(now, &mut self.buf, &mut self.ma) {
            out.push((true, t.src_port, self.buf[..t.len].to_vec()));
        }
        while let Some(t) = self.b.poll_transmit(now, &mut self.buf, &mut self.mb) {
            out.push((false, t.src_port, self.buf[..t.len].to_vec()));
        }
        out
    }

    fn deliver(&mut self, now: u64, (from_a, port, bytes): Dgram) {
        if from_a {
            self.b
                .handle_datagram(now, A, port, false, &bytes, &mut self.mb);
        } else {
            self.a
                .handle_datagram(now, B, port, false, &bytes, &mut self.ma);
        }
    }

    /// Posts one WRITE of `MSG` bytes from A into B.
    fn write(&mut self) {
        let lkey = self
            .ma
            .register(1, 0x1000, MSG as usize, access::LOCAL_WRITE);
        let rkey = self
            .mb
            .register(1, 0x9000, MSG as usize, access::REMOTE_WRITE);
        self.a
            .post_send(
                self.conn,
                1,
                SendWr {
                    wr_id: 7,
                    op: SendOp::Write {
                        rkey,
                        raddr: 0x9000,
                        imm: None,
                    },
                    sgl: [Sge {
                        lkey,
                        addr: 0x1000,
                        len: MSG,
                    }]
                    .into_iter()
                    .collect(),
                    signaled: true,
                    solicited: false,
                    fence: false,
                },
            )
            .unwrap();
    }

    /// Runs the sans-IO loop alone on A (nothing delivered) from `from` to `to` in 100 ns
    /// steps, firing its timers; returns what A sent, with the time it was sent.
    fn a_alone(&mut self, from: u64, to: u64) -> Vec<(u64, Dgram)> {
        let mut out = Vec::new();
        let mut now = from;
        while now < to {
            if self.a.poll_timeout().is_some_and(|t| t <= now) {
                self.a.handle_timeout(now);
            }
            while let Some(t) = self.a.poll_transmit(now, &mut self.buf, &mut self.ma) {
                out.push((now, (true, t.src_port, self.buf[..t.len].to_vec())));
            }
            now += 100;
        }
        out
    }
}

/// A receiver shared with other connections: its OPEN_ACK does not say SOLE, so the cold
/// start runs (these tests are about that cold start).
fn shared(c: &mut EndpointConfig) {
    c.sole_grant = false;
}

fn opcode(d: &Dgram) -> (Opcode, u8) {
    let p = Packet::parse(&d.2).expect("valid packet");
    (p.opcode(), p.flags)
}

// checks: [COLD-1] [COLD-2]
#[test]
fn a_cold_sender_sends_its_request_and_one_pilot_then_waits() {
    let (mut p, t0) = Pair::new(shared);
    p.write();
    let hold = ConnConfig::default().hint_hold_ns;
    let spread = ConnConfig::default().pilot_spread_ns;
    // 60 µs with no answer: the request at once, the pilot within the spread, then no new
    // data (the WRITE has 16 packets and the window would allow them all); only, after
    // max(2 srtt, initial_rtt) + ack_delay of silence, a tail-loss probe: the pilot again.
    let sent = p.a_alone(t0, t0 + 60_000);
    let ops: Vec<(Opcode, u8)> = sent.iter().map(|(_, d)| opcode(d)).collect();
    assert_eq!(ops.len(), 3, "request, pilot and its probe, got {ops:?}");
    assert_ne!(
        ops[2].1 & flags::RETX,
        0,
        "only the pilot's probe follows: {ops:?}"
    );
    let cfg = ConnConfig::default();
    assert!(sent[2].0 >= sent[1].0 + cfg.initial_rtt_ns + cfg.ack_delay_ns);
    assert_eq!(ops[0].0, Opcode::Probe);
    assert_ne!(
        ops[0].1 & flags::BACKLOG,
        0,
        "a hint request carries BACKLOG"
    );
    assert_eq!(sent[0].0, t0);
    assert_eq!(ops[1].0, Opcode::Write);
    assert_ne!(ops[1].1 & flags::ACK_REQ, 0, "the pilot asks for its ACK");
    let pilot_at = sent[1].0;
    assert!(pilot_at < t0 + spread, "pilot at +{} ns", pilot_at - t0);

    // The receiver gets both: it holds the pilot's ACK with the answer, hint_hold after the
    // request arrived, one ACK carrying the hint and acknowledging the pilot.
    let arrive = t0 + 61_000;
    for (_, d) in sent.into_iter().take(2) {
        p.b.handle_datagram(arrive, A, d.1, false, &d.2, &mut p.mb);
    }
    let mut acks = Vec::new();
    let mut now = arrive;
    while now <= arrive + hold {
        if p.b.poll_timeout().is_some_and(|t| t <= now) {
            p.b.handle_timeout(now);
        }
        while let Some(t) = p.b.poll_transmit(now, &mut p.buf, &mut p.mb) {
            acks.push((now, p.buf[..t.len].to_vec()));
        }
        now += 100;
    }
    assert_eq!(acks.len(), 1, "one ACK, with the answer");
    assert_eq!(acks[0].0, arrive + hold, "held hint_hold");
    let ack = Packet::parse(&acks[0].1).unwrap();
    let Body::Ack(a) = ack.body else {
        panic!("not an ACK: {ack:?}")
    };
    assert_ne!(a.rate_hint_mbps, 0, "the answer carries the hint");
    assert_eq!(a.cum_psn, 1, "the pilot is acknowledged with it");
}

#[test]
fn after_the_answer_the_next_packet_keeps_one_gap_from_the_pilots_arrival() {
    // A receiver shared by others: the hint gives this sender 1 Gbit/s, a gap of ~33.7 µs
    // per 4 KiB packet, far longer than the RTT here.
    let (mut p, t0) = Pair::new(shared);
    p.write();
    let sent = p.a_alone(t0, t0 + 20_000);
    assert_eq!(sent.len(), 2);
    let pilot_at = sent[1].0;
    // The request is answered promptly; the pilot queued 15 µs behind other senders' pilots.
    let one_way = 2_000;
    let queued = 15_000;
    let (req, pilot) = (&sent[0].1, &sent[1].1);
    p.b.handle_datagram(t0 + one_way, A, req.1, false, &req.2, &mut p.mb);
    let hold = ConnConfig::default().hint_hold_ns;
    let mut now = t0 + one_way;
    let mut answer = None;
    while answer.is_none() {
        if p.b.poll_timeout().is_some_and(|t| t <= now) {
            p.b.handle_timeout(now);
        }
        if let Some(t) = p.b.poll_transmit(now, &mut p.buf, &mut p.mb) {
            answer = Some((t.src_port, p.buf[..t.len].to_vec()));
        }
        now += 100;
        assert!(now < t0 + one_way + 2 * hold, "no answer");
    }
    let (port, bytes) = answer.unwrap();
    // Let the receiver's hint be 1 Gbit/s in the answer, as if 9 others were active.
    let mut ack = bytes.clone();
    {
        let pk = Packet::parse(&ack).unwrap();
        let Body::Ack(mut a) = pk.body else { panic!() };
        a.rate_hint_mbps = 1_000;
        let out = Packet {
            body: Body::Ack(a),
            ..pk
        };
        let n = out.buffer_len();
        ack = vec![0u8; n];
        out.emit(&mut ack).unwrap();
    }
    let answer_at = now + one_way;
    p.a.handle_datagram(answer_at, B, port, false, &ack, &mut p.ma);
    // The pilot's own ACK comes later: it queued.
    let pilot_arrival = pilot_at + one_way + queued;
    p.b.handle_datagram(pilot_arrival, A, pilot.1, false, &pilot.2, &mut p.mb);
    let mut pilot_ack = None;
    let mut now = pilot_arrival;
    while pilot_ack.is_none() {
        if p.b.poll_timeout().is_some_and(|t| t <= now) {
            p.b.handle_timeout(now);
        }
        if let Some(t) = p.b.poll_transmit(now, &mut p.buf, &mut p.mb) {
            pilot_ack = Some((now, t.src_port, p.buf[..t.len].to_vec()));
        }
        now += 100;
        assert!(now < pilot_arrival + 20_000, "pilot not acknowledged");
    }
    let (acked_at, port, bytes) = pilot_ack.unwrap();
    let mut ack = bytes.clone();
    {
        let pk = Packet::parse(&ack).unwrap();
        let Body::Ack(mut a) = pk.body else { panic!() };
        assert_eq!(a.cum_psn, 1);
        a.rate_hint_mbps = 1_000;
        let out = Packet {
            body: Body::Ack(a),
            ..pk
        };
        ack = vec![0u8; out.buffer_len()];
        out.emit(&mut ack).unwrap();
    }
    // Between the answer and the pilot's ACK A sends nothing: it waits for the pilot's ACK.
    let quiet = p.a_alone(answer_at, acked_at + one_way);
    assert!(
        quiet.is_empty(),
        "sent before the pilot's ACK: {}",
        quiet.len()
    );
    p.a.handle_datagram(acked_at + one_way, B, port, false, &ack, &mut p.ma);
    let next = p.a_alone(acked_at + one_way, acked_at + one_way + 100_000);
    let first_data = next
        .iter()
        .find(|(_, d)| opcode(d).0 == Opcode::Write)
        .expect("data after the pilot's ACK")
        .0;
    // One gap after the pilot arrived (as the sender can tell it: its send time plus its
    // queueing, less up to 6 hops of one packet's serialisation at 100 Gbit/s, 2 µs, and the
    // 100 ns steps of this loop).
    let gap = (4096 + 118) * 8000 / 1_000;
    let want = pilot_at + queued + gap;
    assert!(
        first_data <= want && first_data + 2_500 >= want,
        "next packet at pilot + {} ns, want about pilot + {} ns",
        first_data - pilot_at,
        want - pilot_at
    );
}

// checks: [COLD-5]
#[test]
fn a_sole_peer_lets_a_cold_sender_start_at_line_rate() {
    // B has no other connection: its OPEN_ACK said SOLE, so A's first WRITE goes at once,
    // at line rate: no hint request, no pilot waiting for an answer.
    let (mut p, t0) = Pair::new(|_| {});
    p.write();
    let sent = p.a_alone(t0, t0 + 5_000);
    let ops: Vec<(Opcode, u8)> = sent.iter().map(|(_, d)| opcode(d)).collect();
    assert!(
        !ops.iter().any(|&(o, _)| o == Opcode::Probe),
        "no hint request: {ops:?}"
    );
    assert_eq!(sent[0].0, t0, "the first packet goes at once");
    let writes = ops.iter().filter(|&&(o, _)| o == Opcode::Write).count();
    // 100 Gbit/s: a 4 KiB packet every ~0.34 µs, ~14 in 5 µs.
    assert!(
        writes >= 12,
        "line rate before any ACK: {writes} packets in 5 µs"
    );
}

// checks: [COLD-4] [COLD-5]
#[test]
fn a_second_connection_withdraws_sole() {
    // B opens a second connection (to C): it withdraws A's SOLE with a repeated OPEN_ACK,
    // and A's next cold start asks for the hint again.
    const C: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 3);
    let (mut p, mut now) = Pair::new(|_| {});
    p.b.connect(C);
    let mut to_a = 0;
    while let Some(t) = p.b.poll_transmit(now, &mut p.buf, &mut p.mb) {
        if t.dst == A {
            to_a += 1;
            let d = p.buf[..t.len].to_vec();
            let pkt = Packet::parse(&d).unwrap();
            assert!(matches!(pkt.body, Body::OpenAck(_)), "{pkt:?}");
            assert_eq!(pkt.flags & flags::SOLE, 0, "the repeat says no SOLE");
            p.a.handle_datagram(now, B, t.src_port, false, &d, &mut p.ma);
        }
    }
    assert_eq!(to_a, 1, "one OPEN_ACK withdraws SOLE");
    // A confirms (OPEN-3: its sole peer's OPEN_ACK had not asked for it), once.
    let mut confirms = 0;
    while let Some(t) = p.a.poll_transmit(now, &mut p.buf, &mut p.ma) {
        let d = p.buf[..t.len].to_vec();
        assert!(matches!(Packet::parse(&d).unwrap().body, Body::OpenAck(_)));
        confirms += 1;
        p.b.handle_datagram(now, A, t.src_port, false, &d, &mut p.mb);
    }
    assert_eq!(confirms, 1, "one confirmation");
    assert!(
        p.b.poll_transmit(now, &mut p.buf, &mut p.mb)
            .is_none_or(|t| t.dst != A),
        "the confirmation is not answered"
    );
    now += 1_000;
    p.write();
    let sent = p.a_alone(now, now + 5_000);
    let ops: Vec<(Opcode, u8)> = sent.iter().map(|(_, d)| opcode(d)).collect();
    assert_eq!(ops[0].0, Opcode::Probe, "a hint request first: {ops:?}");
    assert_ne!(ops[0].1 & flags::BACKLOG, 0);
    assert!(ops.len() <= 2, "request and pilot only: {ops:?}");
}

// checks: [COLD-6] [COLD-7]
#[test]
fn a_crowded_receiver_spreads_the_pilots() {
    // B opens 126 more connections (127 in all, never answered): A hears B's crowd rise,
    // level by level of the grid, in repeated OPEN_ACKs, and its cold start's pilot then
    // falls in a span of (128 − 24) × 337 ns ≈ 35 µs instead of pilot_spread (12 µs).
    let mut offsets = Vec::new();
    for k in 0..12 {
        let (mut p, mut now) = Pair::new(|c| c.seed = 100 + k);
        let mut crowds = Vec::new();
        for i in 0..126u32 {
            p.b.connect(Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 1, 0)) + i));
            while let Some(t) = p.b.poll_transmit(now, &mut p.buf, &mut p.mb) {
                if t.dst == A {
                    let d = p.buf[..t.len].to_vec();
                    let pkt = Packet::parse(&d).unwrap();
                    let Body::OpenAck(o) = pkt.body else {
                        panic!("only OPEN_ACKs go to A: {pkt:?}");
                    };
                    crowds.push(o.crowd);
                    p.a.handle_datagram(now, B, t.src_port, false, &d, &mut p.ma);
                }
            }
            // A's confirmation of the SOLE withdrawal (OPEN-3) lets B send the refreshes.
            while let Some(t) = p.a.poll_transmit(now, &mut p.buf, &mut p.ma) {
                let d = p.buf[..t.len].to_vec();
                assert!(matches!(Packet::parse(&d).unwrap().body, Body::OpenAck(_)));
                p.b.handle_datagram(now, A, t.src_port, false, &d, &mut p.mb);
            }
            now += 100;
        }
        // 2..=8, then four levels per doubling up to 128: 23 repeats, each one level up.
        let levels: Vec<u8> = (2..=8)
            .chain([
                10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80, 96, 112, 128,
            ])
            .collect();
        assert_eq!(crowds, levels, "one OPEN_ACK per level");
        now += 1_000;
        p.write();
        let sent = p.a_alone(now, now + 60_000);
        let ops: Vec<(Opcode, u8)> = sent.iter().map(|(_, d)| opcode(d)).collect();
        assert_eq!(ops[0].0, Opcode::Probe, "a hint request first: {ops:?}");
        // The pilot; later only its tail-loss probe (RETX), no answer having come.
        assert_eq!(ops[1].0, Opcode::Write, "{ops:?}");
        assert!(
            ops[2..].iter().all(|&(_, f)| f & flags::RETX != 0),
            "{ops:?}"
        );
        offsets.push(sent[1].0 - sent[0].0);
    }
    let span = 104 * ((4096 + 118) * 8000 / 100_000);
    assert!(
        offsets.iter().all(|&o| o < span),
        "{offsets:?} within {span} ns"
    );
    let past = offsets.iter().filter(|&&o| o > 12_000).count();
    assert!(past >= 4, "the span is wider than 12 µs: {offsets:?}");
}

/// A sender whose NIC stays full (its embedder offers no transmit): the pilots a timeout
/// found due wait for a transmit, not for another timeout. Before, their deadlines stayed
/// in the past, so every event on the host re-ran the timeout of every such connection
/// (hundreds per host in an all-to-all on 1,024 hosts). Once a transmit is offered, every
/// pilot goes.
#[test]
fn due_pilots_wait_for_a_transmit_not_another_timeout() {
    let (mut p, mut now) = Pair::new(shared);
    let mut conns = vec![p.conn];
    for _ in 0..15 {
        conns.push(p.a.connect(B));
    }
    for _ in 0..8 {
        for d in p.drain(now) {
            p.deliver(now, d);
        }
        now += 1_000;
    }
    let lkey = p.ma.register(1, 0x1000, MSG as usize, access::LOCAL_WRITE);
    let rkey = p.mb.register(1, 0x9000, MSG as usize, access::REMOTE_WRITE);
    let peers: Vec<ConnId> = p.b.connections().map(|c| c.id).collect();
    assert_eq!(peers.len(), conns.len());
    for &c in &conns[1..] {
        p.a.create_stream(c, 1, 1, 1).unwrap();
    }
    // `Pair::new` made the first connection's stream (B lists its connections by id).
    for &peer in &peers {
        match p.b.create_stream(peer, 1, 1, 1) {
            Ok(()) | Err(PostError::StreamExists) => {}
            Err(e) => panic!("{e:?}"),
        }
    }
    for (i, &c) in conns.iter().enumerate() {
        assert_eq!(p.a.connection(c).unwrap().state, ConnState::Open);
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
                len: MSG,
            }]
            .into_iter()
            .collect(),
            signaled: true,
            solicited: false,
            fence: false,
        };
        p.a.post_send(c, 1, wr).unwrap();
    }
    // The hint requests go at once; each pilot is due within the spread.
    let mut requests = 0;
    while let Some(t) = p.a.poll_transmit(now, &mut p.buf, &mut p.ma) {
        assert_eq!(
            Packet::parse(&p.buf[..t.len]).unwrap().opcode(),
            Opcode::Probe
        );
        requests += 1;
    }
    assert_eq!(requests, conns.len());
    let due = now + ConnConfig::default().pilot_spread_ns;
    assert!(p.a.poll_timeout().is_some_and(|t| t <= due));
    p.a.handle_timeout(due);
    // The NIC is full: no transmit. Nothing is due until the requests' own timers.
    let next = p.a.poll_timeout();
    assert!(
        next.is_none_or(|t| t > due),
        "deadline {next:?} still at or before {due}: the timeout would run again"
    );
    // A transmit is offered: every pilot goes (one data packet per connection).
    let mut pilots = 0;
    while let Some(t) = p.a.poll_transmit(due + 100, &mut p.buf, &mut p.ma) {
        assert_eq!(
            Packet::parse(&p.buf[..t.len]).unwrap().opcode(),
            Opcode::Write
        );
        pilots += 1;
    }
    assert_eq!(pilots, conns.len());
}

/// A cold sender whose pilot carried its whole message and whose hint answer does not come
/// (here: nothing reaches it): once the request's `initial_rto` has passed there is nothing
/// to resend it with (COLD-1 wants data queued) and the pilot's loss is the TLP's and RTO's
/// business, so no deadline may stay in the past. It did, until an ACK came, and every
/// later event ran the connection's timeout again: 1,023 such connections per host kept the
/// 1,024-host all-to-all from finishing.
#[test]
fn a_hint_request_with_nothing_left_to_send_sets_no_past_deadline() {
    let (mut p, mut now) = Pair::new(shared);
    let lkey = p.ma.register(1, 0x1000, 1024, access::LOCAL_WRITE);
    let wr = SendWr {
        wr_id: 1,
        op: SendOp::Write {
            rkey: 0,
            raddr: 0x9000,
            imm: None,
        },
        sgl: [Sge {
            lkey,
            addr: 0x1000,
            len: 1024,
        }]
        .into_iter()
        .collect(),
        signaled: true,
        solicited: false,
        fence: false,
    };
    p.a.post_send(p.conn, 1, wr).unwrap();
    let start = p.a.counters.conn_timeouts;
    let (mut sent, mut data) = (0, 0);
    // 300 µs of events every 100 ns; A's datagrams are lost, so no answer ever comes. (Later,
    // at ~315 µs, the blacked-out path's own PROBE deadline is left in the past: a separate
    // matter, not this test's.)
    for _ in 0..3_000 {
        if p.a.poll_timeout().is_some_and(|t| t <= now) {
            p.a.handle_timeout(now);
        }
        while let Some(t) = p.a.poll_transmit(now, &mut p.buf, &mut p.ma) {
            sent += 1;
            if Packet::parse(&p.buf[..t.len]).unwrap().opcode() == Opcode::Write {
                data += 1;
            }
        }
        let next = p.a.poll_timeout();
        assert!(
            next.is_none_or(|t| t > now),
            "deadline {next:?} still due at {now} after the timeout and a transmit"
        );
        now += 100;
    }
    let passes = p.a.counters.conn_timeouts - start;
    assert!(data >= 1, "the pilot did not go");
    // The pilot's timers (TLPs, the RTO) and the request's: a few dozen, not one per event.
    assert!(passes < 100, "{passes} timeout passes for {sent} datagrams");
}

/// B takes `more` connections besides A's (never answered), and A hears B's crowd rise in
/// repeated OPEN_ACKs (COLD-6), all at `now`.
fn crowd_b(p: &mut Pair, now: u64, more: u32) -> u8 {
    let mut crowd = 0;
    for i in 0..more {
        p.b.connect(Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 1, 0)) + i));
        while let Some(t) = p.b.poll_transmit(now, &mut p.buf, &mut p.mb) {
            if t.dst == A {
                let d = p.buf[..t.len].to_vec();
                if let Body::OpenAck(o) = Packet::parse(&d).unwrap().body {
                    crowd = o.crowd;
                }
                p.a.handle_datagram(now, B, t.src_port, false, &d, &mut p.ma);
            }
        }
        while let Some(t) = p.a.poll_transmit(now, &mut p.buf, &mut p.ma) {
            let d = p.buf[..t.len].to_vec();
            p.b.handle_datagram(now, A, t.src_port, false, &d, &mut p.mb);
        }
    }
    crowd
}

// checks: [COLD-8]
#[test]
fn a_settled_small_crowd_starts_at_its_share_without_waiting() {
    // B has 8 connections (crowd 8). Line rate 100 Gb/s: the crowd's share is 12.5 Gb/s, one
    // 4 KiB packet every (4096 + 118) × 8000 / 12,500 ≈ 2,697 ns.
    let gap = (4096 + 118) * 8000 / 12_500;
    let run = |settle: u64, max: u32| {
        let (mut p, now) = Pair::new(|c| {
            shared(c);
            c.conn.crowd_start_max = max;
        });
        assert_eq!(crowd_b(&mut p, now, 7), 8);
        let now = now + settle;
        p.write();
        p.a_alone(now, now + 30_000)
    };
    let data = |sent: &[(u64, Dgram)]| -> Vec<u64> {
        sent.iter()
            .filter(|(_, d)| opcode(d) == (Opcode::Write, opcode(d).1))
            .filter(|(_, d)| opcode(d).1 & flags::RETX == 0)
            .map(|(t, _)| *t)
            .collect()
    };
    // Settled for 100 µs: the hint request, then data at once, paced at the share, before
    // any answer (none comes here).
    let sent = run(100_000, 48);
    let ops: Vec<Opcode> = sent.iter().map(|(_, d)| opcode(d).0).collect();
    assert_eq!(ops[0], Opcode::Probe, "the hint request first: {ops:?}");
    // One request: the next may go only once `initial_rto` (100 µs) has passed unanswered.
    assert_eq!(
        ops.iter().filter(|&&o| o == Opcode::Probe).count(),
        1,
        "{ops:?}"
    );
    let t = data(&sent);
    assert!(t.len() >= 4, "data flows before the answer: {t:?}");
    assert!(
        t[0] - sent[0].0 <= 100,
        "8 is within pilot_absorb: at once: {t:?}"
    );
    for w in t.windows(2) {
        assert!(
            w[1] - w[0] >= gap - 200 && w[1] - w[0] <= gap + 200,
            "paced at line rate / 8: {t:?}"
        );
    }
    // A crowd heard 50 µs ago may be stale at B's other connections; one above
    // crowd_start_max settles sooner behind pilots: both wait for the answer with one pilot.
    for (settle, max) in [(50_000, 48), (100_000, 4)] {
        let sent = run(settle, max);
        assert_eq!(opcode(&sent[0].1).0, Opcode::Probe);
        assert_eq!(
            data(&sent).len(),
            1,
            "one pilot only ({settle} ns, max {max})"
        );
    }
}
