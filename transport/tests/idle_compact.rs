//! A connection that went idle and was compacted (`Endpoint::compact_idle`: counters folded,
//! the timer table and empty queues dropped, spare capacity given back) behaves exactly as
//! one that was not: two identical pairs, one compacted at every idle moment, send the same
//! datagrams at the same times, complete the same work and end with the same state.

use ferroce_transport::mem::{access, Regions, Sge};
use ferroce_transport::*;
use std::net::Ipv4Addr;

const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const LEN: u32 = 64 * 1024;
/// One-way wire delay (ns).
const DELAY: u64 = 3_000;

struct Run {
    a: Endpoint,
    b: Endpoint,
    ma: Regions,
    mb: Regions,
    conn: ConnId,
    now: u64,
    buf: Vec<u8>,
    /// Everything observable: (time, from A, UDP source port, datagram), completions,
    /// events.
    log: Vec<String>,
    sent_a: u64,
    compact: bool,
    /// Datagrams on the wire: (arrival, to B, UDP source port, bytes), in arrival order.
    wire: std::collections::VecDeque<(u64, bool, u16, Vec<u8>)>,
    lkey: u32,
    rkey: u32,
}

impl Run {
    fn new(compact: bool) -> Run {
        let cfg = |seed| {
            let mut c = EndpointConfig {
                seed,
                ..EndpointConfig::default()
            };
            c.conn.paths = 16;
            c
        };
        let mut r = Run {
            a: Endpoint::new(cfg(1)),
            b: Endpoint::new(cfg(2)),
            ma: Regions::new(),
            mb: Regions::new(),
            conn: ConnId(0),
            now: 1_000,
            buf: vec![0; 65_536],
            log: Vec::new(),
            sent_a: 0,
            compact,
            wire: Default::default(),
            lkey: 0,
            rkey: 0,
        };
        r.lkey =
            r.ma.register(1, 0x10_0000, LEN as usize, access::LOCAL_WRITE);
        r.rkey = r.mb.register(
            1,
            0x20_0000,
            LEN as usize,
            access::REMOTE_WRITE | access::REMOTE_READ,
        );
        r.conn = r.a.connect(B);
        // A second connection between the hosts: neither end is then alone with its peer
        // (no SOLE), so a cold start asks for a hint and sends a pilot.
        r.a.connect(B);
        r.settle();
        let b_conn =
            r.b.connections()
                .find(|c| c.peer_conn == r.conn.0)
                .unwrap()
                .id;
        r.a.create_stream(r.conn, 1, 1, 1).unwrap();
        r.b.create_stream(b_conn, 1, 1, 1).unwrap();
        r.settle();
        r
    }

    /// Until nothing is left to send or in flight and no timer is armed; then compact, if
    /// this run does. The wire takes `DELAY` each way and loses every 23rd data packet from A
    /// (so recovery runs too).
    fn settle(&mut self) {
        for _ in 0..1_000_000 {
            let mut moved = false;
            while let Some(t) = self.a.poll_transmit(self.now, &mut self.buf, &mut self.ma) {
                moved = true;
                let d = self.buf[..t.len].to_vec();
                self.log
                    .push(format!("{} A {} {:?}", self.now, t.src_port, d));
                self.sent_a += 1;
                if d.len() > 200 && self.sent_a.is_multiple_of(23) {
                    continue;
                }
                self.wire.push_back((self.now + DELAY, true, t.src_port, d));
            }
            while let Some(t) = self.b.poll_transmit(self.now, &mut self.buf, &mut self.mb) {
                moved = true;
                let d = self.buf[..t.len].to_vec();
                self.log
                    .push(format!("{} B {} {:?}", self.now, t.src_port, d));
                self.wire
                    .push_back((self.now + DELAY, false, t.src_port, d));
            }
            while self.wire.front().is_some_and(|w| w.0 <= self.now) {
                moved = true;
                let (_, to_b, port, d) = self.wire.pop_front().unwrap();
                if to_b {
                    self.b
                        .handle_datagram(self.now, A, port, false, &d, &mut self.mb);
                } else {
                    self.a
                        .handle_datagram(self.now, B, port, false, &d, &mut self.ma);
                }
            }
            while let Some(c) = self.a.poll_completion() {
                self.log.push(format!("{} A {c:?}", self.now));
            }
            while let Some(c) = self.b.poll_completion() {
                self.log.push(format!("{} B {c:?}", self.now));
            }
            while let Some(e) = self.a.poll_event() {
                self.log.push(format!("{} A {e:?}", self.now));
            }
            while let Some(e) = self.b.poll_event() {
                self.log.push(format!("{} B {e:?}", self.now));
            }
            if moved {
                continue;
            }
            let next = [
                self.a.poll_timeout(),
                self.b.poll_timeout(),
                self.wire.front().map(|w| w.0),
            ]
            .into_iter()
            .flatten()
            .min();
            match next {
                None => {
                    if self.compact {
                        self.a.compact_idle();
                        self.b.compact_idle();
                    }
                    return;
                }
                Some(t) => self.now = t.max(self.now + 1),
            }
            for e in [&mut self.a, &mut self.b] {
                if e.poll_timeout().is_some_and(|t| t <= self.now) {
                    e.handle_timeout(self.now);
                }
            }
        }
        panic!("never idle");
    }

    fn post(&mut self, wr_id: u64, read: bool, len: u32) {
        let op = if read {
            SendOp::Read {
                rkey: self.rkey,
                raddr: 0x20_0000,
            }
        } else {
            SendOp::Write {
                rkey: self.rkey,
                raddr: 0x20_0000,
                imm: None,
            }
        };
        let wr = SendWr {
            wr_id,
            op,
            sgl: [Sge {
                lkey: self.lkey,
                addr: 0x10_0000,
                len,
            }]
            .into_iter()
            .collect(),
            signaled: true,
            solicited: false,
            fence: false,
        };
        self.a.post_send(self.conn, 1, wr).unwrap();
    }

    /// The state that must survive idleness, as text.
    fn state(&self) -> String {
        let mut s = String::new();
        for e in [&self.a, &self.b] {
            for c in e.connections() {
                s += &format!("{:?} {:?}\n", c.state, c.counters());
                for p in c.paths() {
                    s += &format!(
                        "  {} {:?} psn {} gen {} cwnd {} srtt {:?} rttvar {} min {} rto {} {:?}\n",
                        p.index,
                        p.state,
                        p.next_psn,
                        p.generation,
                        p.cwnd(),
                        p.srtt_ns,
                        p.rttvar_ns,
                        p.min_rtt_ns,
                        p.rto_ns,
                        p.counters()
                    );
                }
            }
        }
        s
    }
}

#[test]
fn a_compacted_idle_connection_resumes_exactly() {
    let mut x = Run::new(true);
    let mut y = Run::new(false);
    assert_eq!(x.log, y.log);
    // Bursts with idle gaps: short (still warm), long (cold again), READs and WRITEs.
    let mut id = 0;
    for (gap, read, n, len) in [
        (0, false, 1, 4096),
        (2_000, false, 4, LEN),
        (5_000_000, true, 2, LEN / 2),
        (50_000, false, 8, 8192),
        (100_000_000, false, 3, LEN),
        (1_000, true, 1, 100),
    ] {
        for r in [&mut x, &mut y] {
            r.now += gap;
            for k in 0..n {
                r.post(id + k, read, len);
            }
            r.settle();
        }
        id += n;
        assert_eq!(x.log.len(), y.log.len(), "log lengths after wr {id}");
        for (i, (l, m)) in x.log.iter().zip(&y.log).enumerate() {
            assert_eq!(l, m, "entry {i} after wr {id}");
        }
        assert_eq!(x.state(), y.state());
        assert_eq!(x.now, y.now);
    }
    // The run did what it should: every WR completed, losses were recovered.
    let done = x.log.iter().filter(|l| l.contains("Success")).count();
    assert_eq!(done as u64, id);
    let a = x.a.connection(x.conn).unwrap();
    assert!(a.counters().retx_pkts > 0, "no loss was recovered");
    assert!(a.built_paths() > 1);
}
