//! Model-based test of RC memory semantics (spec/transport.md §7.2), native and RoCEv2 mode.
//!
//! Two engines on a scripted wire that loses (randomly and in bursts), reorders with long
//! delays, duplicates and so provokes spurious resends. A random sequence of WRITE,
//! WRITE_IMM, SEND, READ, FETCH_ADD and CMP_SWAP per stream aims at a small remote area, so
//! targets overlap on purpose (same address, partial overlaps, adjacent ranges). A sequential
//! model executes each stream's requests one after another in posting order; then:
//! - at every completion (requester or responder) of request `k`, every byte of the
//!   responder's area holds the model's value after `k`, or the value a request posted after
//!   `k` that writes that byte gives it (later requests may be placed early, earlier ones never
//!   late);
//! - every READ result and atomic original value equals the model's value before it;
//! - every SEND's receive buffer holds its payload;
//! - at the end every request completed successfully, in order, and the area equals the
//!   model exactly.
//!
//! `FERROCE_RC_MODEL_CASES` sets the number of cases (default 5,000).

use ferroce_sim::{mix64, Rng};
use ferroce_transport::mem::{access, Regions};
use ferroce_transport::roce::{RoceConfig, RoceEndpoint};
use ferroce_transport::*;
use proptest::prelude::*;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::Ipv4Addr;

const IP_A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const IP_B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// Remote target area per stream (bytes), small so that requests overlap.
const AREA: usize = 320;
const REMOTE_BASE: u64 = 0x10_0000;
/// Per-request local slot (source of WRITE/SEND, destination of READ and atomic results).
const SLOT: u64 = 512;
const LOCAL_BASE: u64 = 0x20_0000;
const RECV_BASE: u64 = 0x40_0000;
const PD: u32 = 1;

#[derive(Clone, Copy, Debug)]
enum Op {
    Write {
        off: u16,
        len: u16,
    },
    WriteImm {
        off: u16,
        len: u16,
    },
    Send {
        len: u16,
    },
    Read {
        off: u16,
        len: u16,
    },
    FetchAdd {
        word: u8,
        add: u64,
    },
    /// `hit`: compare with the model's current value (the swap happens), else a value that
    /// misses.
    CmpSwap {
        word: u8,
        hit: bool,
        swap: u64,
    },
    /// A zero-length WRITE with rkey 0 and address 0: no memory is touched, so no key is
    /// checked (IBTA; UCX flushes with it).
    ZeroWriteNoKey,
}

impl Op {
    /// Bytes of the remote area the request may modify.
    fn writes(&self) -> Option<(usize, usize)> {
        match *self {
            Op::Write { off, len } | Op::WriteImm { off, len } if len > 0 => {
                Some((off as usize, off as usize + len as usize))
            }
            Op::FetchAdd { word, .. } | Op::CmpSwap { word, .. } => {
                Some((word as usize * 8, word as usize * 8 + 8))
            }
            _ => None,
        }
    }
}

#[derive(Clone, Debug)]
struct Faults {
    loss: f64,
    /// Bursts: each packet starts one with this chance, and every packet of its direction
    /// is lost until the burst ends, up to the given length later (ns). Bursts are in time,
    /// not in packets, so a sparse sender (OPEN retries) is not cut off for good.
    burst: Option<(f64, u64)>,
    reorder: f64,
    /// Longest extra delay of a reordered packet (ns).
    reorder_max_ns: u64,
    duplicate: f64,
}

#[derive(Clone, Debug)]
struct Case {
    roce: bool,
    paths: u8,
    mtu: u16,
    depth: usize,
    streams: usize,
    ops: Vec<(usize, Op)>,
    faults: Faults,
    seed: u64,
}

fn pattern(g: usize, i: usize) -> u8 {
    (mix64((g as u64) << 20 | i as u64) >> 56) as u8
}

fn initial_area(s: usize) -> Vec<u8> {
    (0..AREA)
        .map(|i| (i as u8) ^ (s as u8 * 37) ^ 0xa5)
        .collect()
}

/// The sequential model of one stream: the area after each of its requests.
struct Model {
    /// `snaps[j]`: the area before the stream's request `j` (`snaps[n]`: after all).
    snaps: Vec<Vec<u8>>,
    /// Global index of each request of the stream, and the op.
    ops: Vec<(usize, Op)>,
    /// Compare values of CMP_SWAPs, from the model.
    compares: Vec<u64>,
}

impl Model {
    fn new(s: usize, ops: Vec<(usize, Op)>) -> Model {
        let mut mem = initial_area(s);
        let mut snaps = vec![mem.clone()];
        let mut compares = Vec::new();
        for &(g, op) in &ops {
            let mut cmp = 0;
            match op {
                Op::Write { off, len } | Op::WriteImm { off, len } => {
                    for i in 0..len as usize {
                        mem[off as usize + i] = pattern(g, i);
                    }
                }
                Op::FetchAdd { word, add } => {
                    let w = word as usize * 8;
                    let v = u64::from_ne_bytes(mem[w..w + 8].try_into().unwrap());
                    mem[w..w + 8].copy_from_slice(&v.wrapping_add(add).to_ne_bytes());
                }
                Op::CmpSwap { word, hit, swap } => {
                    let w = word as usize * 8;
                    let v = u64::from_ne_bytes(mem[w..w + 8].try_into().unwrap());
                    cmp = if hit { v } else { !v };
                    if v == cmp {
                        mem[w..w + 8].copy_from_slice(&swap.to_ne_bytes());
                    }
                }
                Op::Send { .. } | Op::Read { .. } | Op::ZeroWriteNoKey => {}
            }
            compares.push(cmp);
            snaps.push(mem.clone());
        }
        Model {
            snaps,
            ops,
            compares,
        }
    }

    /// Checks `area` as seen once request `k` (index within the stream) has completed, with
    /// requests up to `posted` (exclusive) posted.
    fn check_after(&self, k: usize, posted: usize, area: &[u8], what: &str) -> Result<(), String> {
        for (b, &v) in area.iter().enumerate() {
            if v == self.snaps[k + 1][b] {
                continue;
            }
            let later = (k + 1..posted).any(|j| {
                self.ops[j]
                    .1
                    .writes()
                    .is_some_and(|(lo, hi)| (lo..hi).contains(&b))
                    && self.snaps[j + 1][b] == v
            });
            if !later {
                let who = (0..self.ops.len())
                    .filter(|&j| self.snaps[j + 1][b] == v && self.snaps[j][b] != v)
                    .collect::<Vec<_>>();
                return Err(format!(
                    "{what}: after request {k} (posted {posted}) byte {b} is {v:#04x}, \
                     model {:#04x}; the value was written by request(s) {who:?}",
                    self.snaps[k + 1][b]
                ));
            }
        }
        Ok(())
    }
}

enum Engine {
    Native(Endpoint),
    Roce(RoceEndpoint),
}

impl Engine {
    fn t(&mut self) -> &mut dyn Transport {
        match self {
            Engine::Native(e) => e,
            Engine::Roce(e) => e,
        }
    }
}

struct Side {
    eng: Engine,
    mem: Regions,
    ip: Ipv4Addr,
    conn: Option<ConnId>,
}

/// A datagram on the wire: (arrival time, sequence), from A?, source port, bytes.
type InFlight = (Reverse<(u64, u64)>, bool, u16, Vec<u8>);

struct Wire {
    rng: Rng,
    f: Faults,
    bad_until: [u64; 2],
    q: BinaryHeap<InFlight>,
    seq: u64,
}

impl Wire {
    fn send(&mut self, now: u64, from_a: bool, port: u16, bytes: &[u8]) {
        let d = from_a as usize;

        if let Some((start, len)) = self.f.burst {
            if now < self.bad_until[d] {
                return;
            }
            if self.rng.chance(start) {
                self.bad_until[d] = now + 1 + self.rng.below(len);
                return;
            }
        }
        if self.rng.chance(self.f.loss) {
            return;
        }
        let copies = if self.rng.chance(self.f.duplicate) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut at = now + 2_000 + self.rng.below(500);
            if self.rng.chance(self.f.reorder) {
                at += self.rng.below(self.f.reorder_max_ns.max(1));
            }
            self.seq += 1;
            self.q
                .push((Reverse((at, self.seq)), from_a, port, bytes.to_vec()));
        }
    }

    fn next_at(&self) -> Option<u64> {
        self.q.peek().map(|e| e.0 .0 .0)
    }
}

/// Runs one case; returns how many packets the native responder held for their turn.
fn run(case: &Case) -> Result<u64, String> {
    let streams = case.streams;
    // Per-stream request lists (global index, op) and models.
    let per: Vec<Vec<(usize, Op)>> = (0..streams)
        .map(|s| {
            case.ops
                .iter()
                .enumerate()
                .filter(|(_, (st, _))| *st == s)
                .map(|(g, (_, op))| (g, *op))
                .collect()
        })
        .collect();
    let models: Vec<Model> = per
        .iter()
        .enumerate()
        .map(|(s, ops)| Model::new(s, ops.clone()))
        .collect();
    let n_ops = case.ops.len();

    let mk = |ip: Ipv4Addr, peer: Ipv4Addr, seed: u64| -> Side {
        let eng = if case.roce {
            let mut cfg = RoceConfig::new(ip);
            cfg.mtu = case.mtu as u32;
            cfg.timeout = 5;
            Engine::Roce(RoceEndpoint::new(cfg))
        } else {
            let mut cfg = EndpointConfig {
                seed,
                ..EndpointConfig::default()
            };
            cfg.conn.paths = case.paths;
            cfg.conn.mtu = case.mtu;
            Engine::Native(Endpoint::new(cfg))
        };
        let _ = peer;
        Side {
            eng,
            mem: Regions::new(),
            ip,
            conn: None,
        }
    };
    let mut a = mk(IP_A, IP_B, case.seed ^ 1);
    let mut b = mk(IP_B, IP_A, case.seed ^ 2);

    // Memory: A's local slots, B's target areas and receive buffers.
    let lkey = a.mem.register(
        PD,
        LOCAL_BASE,
        (n_ops as u64 * SLOT) as usize,
        access::LOCAL_WRITE,
    );
    for (g, (_, op)) in case.ops.iter().enumerate() {
        let len = match *op {
            Op::Write { len, .. } | Op::WriteImm { len, .. } | Op::Send { len } => len as usize,
            _ => 0,
        };
        let r = a.mem.region_mut(lkey).unwrap();
        for i in 0..len {
            r.data[g * SLOT as usize + i] = pattern(g, i);
        }
    }
    let rkey = b.mem.register(
        PD,
        REMOTE_BASE,
        streams * AREA,
        access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC,
    );
    for s in 0..streams {
        b.mem.region_mut(rkey).unwrap().data[s * AREA..(s + 1) * AREA]
            .copy_from_slice(&initial_area(s));
    }
    let recv_key = b.mem.register(
        PD,
        RECV_BASE,
        (n_ops as u64 * SLOT) as usize,
        access::LOCAL_WRITE,
    );

    let mut wire = Wire {
        rng: Rng::new(case.seed),
        f: case.faults.clone(),
        bad_until: [0; 2],
        q: BinaryHeap::new(),
        seq: 0,
    };
    let mut buf = vec![0u8; 16 * 1024];
    let mut now: u64 = 1_000;

    // Connect.
    if case.roce {
        a.conn = Some(a.eng.t().connect(IP_B));
        b.conn = Some(b.eng.t().connect(IP_A));
    } else {
        a.conn = Some(a.eng.t().connect(IP_B));
    }
    let qpn = |side_a: bool, s: usize| -> u32 {
        if case.roce {
            if side_a {
                0x100 + s as u32
            } else {
                0x200 + s as u32
            }
        } else {
            s as u32 + 1
        }
    };

    // Per stream: next request to post, requests completed at the requester, receives
    // posted (in RSN order: the stream's SEND and WRITE_IMM requests), receives completed.
    let mut next = vec![0usize; streams];
    let mut done = vec![0usize; streams];
    let recv_ops: Vec<Vec<usize>> = per
        .iter()
        .map(|ops| {
            ops.iter()
                .enumerate()
                .filter(|(_, (_, op))| matches!(op, Op::Send { .. } | Op::WriteImm { .. }))
                .map(|(j, _)| j)
                .collect()
        })
        .collect();
    let mut recv_done = vec![0usize; streams];
    let mut ready = false;
    let mut streams_made = false;

    let area = |b: &Side, s: usize| -> Vec<u8> {
        b.mem.region(rkey).unwrap().data[s * AREA..(s + 1) * AREA].to_vec()
    };

    let mut steps = 0u64;
    loop {
        steps += 1;
        if steps > 3_000_000 || now > 20_000_000_000 {
            return Err(format!(
                "stuck at {now} ns: requester done {done:?} of {:?}, receives {recv_done:?}",
                per.iter().map(|p| p.len()).collect::<Vec<_>>()
            ));
        }
        // Events: the native responder learns of the connection.
        for side_a in [true, false] {
            let side = if side_a { &mut a } else { &mut b };
            while let Some(ev) = side.eng.t().poll_event() {
                match ev {
                    Event::Accepted { conn, .. } => side.conn = Some(conn),
                    Event::Connected { .. } => {}
                    Event::Failed { .. } | Event::Closed { .. } => {
                        return Err(format!("connection ended: {ev:?}"));
                    }
                }
            }
        }
        if let (false, Some(ca), Some(cb)) = (streams_made, a.conn, b.conn) {
            streams_made = true;
            for s in 0..streams {
                a.eng
                    .t()
                    .create_stream(ca, qpn(true, s), qpn(false, s), PD)
                    .map_err(|e| format!("create_stream A: {e}"))?;
                b.eng
                    .t()
                    .create_stream(cb, qpn(false, s), qpn(true, s), PD)
                    .map_err(|e| format!("create_stream B: {e}"))?;
                for &j in &recv_ops[s] {
                    let g = per[s][j].0;
                    b.eng
                        .t()
                        .post_recv(
                            cb,
                            qpn(false, s),
                            RecvWr {
                                wr_id: g as u64,
                                sgl: [Sge {
                                    lkey: recv_key,
                                    addr: RECV_BASE + g as u64 * SLOT,
                                    len: AREA as u32,
                                }]
                                .into_iter()
                                .collect(),
                            },
                        )
                        .map_err(|e| format!("post_recv: {e}"))?;
                }
            }
            ready = true;
        }
        // Post up to `depth` outstanding requests per stream.
        if ready {
            let ca = a.conn.unwrap();
            for s in 0..streams {
                while next[s] < per[s].len() && next[s] - done[s] < case.depth {
                    let j = next[s];
                    let (g, op) = per[s][j];
                    let slot = LOCAL_BASE + g as u64 * SLOT;
                    let sge = |len: u32| -> SgList {
                        if len == 0 {
                            SgList::new()
                        } else {
                            [Sge {
                                lkey,
                                addr: slot,
                                len,
                            }]
                            .into_iter()
                            .collect()
                        }
                    };
                    let raddr = |off: u16| REMOTE_BASE + (s * AREA) as u64 + off as u64;
                    let (op, sgl) = match op {
                        Op::Write { off, len } => (
                            SendOp::Write {
                                rkey,
                                raddr: raddr(off),
                                imm: None,
                            },
                            sge(len as u32),
                        ),
                        Op::WriteImm { off, len } => (
                            SendOp::Write {
                                rkey,
                                raddr: raddr(off),
                                imm: Some(g as u32),
                            },
                            sge(len as u32),
                        ),
                        Op::Send { len } => (
                            SendOp::Send {
                                imm: (g % 2 == 0).then_some(g as u32),
                            },
                            sge(len as u32),
                        ),
                        Op::Read { off, len } => (
                            SendOp::Read {
                                rkey,
                                raddr: raddr(off),
                            },
                            sge(len as u32),
                        ),
                        Op::FetchAdd { word, add } => (
                            SendOp::FetchAdd {
                                rkey,
                                raddr: raddr(word as u16 * 8),
                                add,
                            },
                            sge(8),
                        ),
                        Op::CmpSwap { word, swap, .. } => (
                            SendOp::CmpSwap {
                                rkey,
                                raddr: raddr(word as u16 * 8),
                                compare: models[s].compares[j],
                                swap,
                            },
                            sge(8),
                        ),
                        Op::ZeroWriteNoKey => (
                            SendOp::Write {
                                rkey: 0,
                                raddr: 0,
                                imm: None,
                            },
                            SgList::new(),
                        ),
                    };
                    a.eng
                        .t()
                        .post_send(
                            ca,
                            qpn(true, s),
                            SendWr {
                                wr_id: g as u64,
                                op,
                                sgl,
                                signaled: true,
                                solicited: false,
                                fence: false,
                            },
                        )
                        .map_err(|e| format!("post_send {g}: {e}"))?;
                    next[s] += 1;
                }
            }
        }
        // Transmit.
        for side_a in [true, false] {
            let side = if side_a { &mut a } else { &mut b };
            while let Some(t) = side
                .eng
                .t()
                .transmit(now, &mut buf, &mut side.mem, u64::MAX)
            {
                wire.send(now, side_a, t.src_port, &buf[..t.len]);
            }
        }
        // Completions, each checked against the model.
        let stream_of = |g: usize| case.ops[g].0;
        let index_of = |g: usize| per[stream_of(g)].iter().position(|&(x, _)| x == g).unwrap();
        while let Some(c) = a.eng.t().poll_completion() {
            let g = c.wr_id as usize;
            let (s, j) = (stream_of(g), index_of(g));
            if c.status != Status::Success {
                return Err(format!(
                    "request {g} ({:?}) completed with {:?}",
                    per[s][j].1, c.status
                ));
            }
            if j != done[s] {
                return Err(format!(
                    "stream {s}: request {j} completed before {}",
                    done[s]
                ));
            }
            done[s] += 1;
            let m = &models[s];
            let local = &a.mem.region(lkey).unwrap().data[g * SLOT as usize..];
            match per[s][j].1 {
                Op::Read { off, len } => {
                    let want = &m.snaps[j][off as usize..off as usize + len as usize];
                    if &local[..len as usize] != want {
                        let bad = (0..len as usize).find(|&i| local[i] != want[i]).unwrap();
                        return Err(format!(
                            "READ {g} (stream {s} #{j}, off {off} len {len}): byte {bad} is \
                             {:#04x}, model {:#04x}",
                            local[bad], want[bad]
                        ));
                    }
                }
                Op::FetchAdd { word, .. } | Op::CmpSwap { word, .. } => {
                    let w = word as usize * 8;
                    let want = u64::from_ne_bytes(m.snaps[j][w..w + 8].try_into().unwrap());
                    let got = u64::from_ne_bytes(local[..8].try_into().unwrap());
                    if got != want {
                        return Err(format!(
                            "atomic {g} (stream {s} #{j}) returned {got:#x}, model {want:#x}"
                        ));
                    }
                }
                _ => {}
            }
            m.check_after(
                j,
                next[s],
                &area(&b, s),
                &format!("requester completion of {g}"),
            )?;
        }
        while let Some(c) = b.eng.t().poll_completion() {
            let g = c.wr_id as usize;
            let (s, j) = (stream_of(g), index_of(g));
            if c.status != Status::Success {
                return Err(format!("receive for {g} completed with {:?}", c.status));
            }
            let want_j = recv_ops[s].get(recv_done[s]).copied();
            if want_j != Some(j) {
                return Err(format!(
                    "stream {s}: receive for #{j} out of order ({want_j:?})"
                ));
            }
            recv_done[s] += 1;
            if let Op::Send { len } = per[s][j].1 {
                let data = &b.mem.region(recv_key).unwrap().data[g * SLOT as usize..];
                if c.byte_len != len as u32 || (0..len as usize).any(|i| data[i] != pattern(g, i)) {
                    return Err(format!(
                        "SEND {g}: receive buffer does not hold its payload"
                    ));
                }
            }
            models[s].check_after(
                j,
                next[s],
                &area(&b, s),
                &format!("receive completion of {g}"),
            )?;
        }
        let all_done =
            (0..streams).all(|s| done[s] == per[s].len() && recv_done[s] == recv_ops[s].len());
        if ready && all_done {
            break;
        }
        // Advance to the next event.
        let mut t = wire.next_at();
        for side in [&mut a, &mut b] {
            if let Some(x) = side.eng.t().poll_timeout() {
                t = Some(t.map_or(x, |y| y.min(x)));
            }
        }
        now = match t {
            Some(x) if x > now => x,
            _ => now + 100,
        };
        while wire.next_at().is_some_and(|x| x <= now) {
            let (_, from_a, port, bytes) = wire.q.pop().unwrap();
            let (dst, src_ip) = if from_a {
                (&mut b, IP_A)
            } else {
                (&mut a, IP_B)
            };
            let d = RxDatagram::new(src_ip, port, false, &bytes);
            dst.eng.t().receive(now, &d, &mut dst.mem);
        }
        for side in [&mut a, &mut b] {
            if side.eng.t().poll_timeout().is_some_and(|x| x <= now) {
                side.eng.t().handle_timeout(now);
            }
        }
        let _ = (a.ip, b.ip);
    }
    for (s, m) in models.iter().enumerate() {
        let got = area(&b, s);
        let want = m.snaps.last().unwrap();
        if let Some(bad) = (0..AREA).find(|&i| got[i] != want[i]) {
            return Err(format!(
                "end: stream {s} byte {bad} is {:#04x}, model {:#04x}",
                got[bad], want[bad]
            ));
        }
    }
    Ok(match &b.eng {
        Engine::Native(e) => e.connections().map(|c| c.counters().rx_ordered_held).sum(),
        Engine::Roce(_) => 0,
    })
}

fn offset() -> impl Strategy<Value = u16> {
    // Mostly a few hot spots, so requests hit the same and adjacent bytes.
    prop_oneof![
        3 => prop::sample::select(vec![0u16, 8, 56, 64, 120, 128]),
        2 => 0..AREA as u16,
    ]
}

fn span() -> impl Strategy<Value = (u16, u16)> {
    (offset(), 0..=200u16).prop_map(|(off, len)| (off, len.min(AREA as u16 - off)))
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => span().prop_map(|(off, len)| Op::Write { off, len }),
        2 => span().prop_map(|(off, len)| Op::WriteImm { off, len }),
        2 => (0..=200u16).prop_map(|len| Op::Send { len }),
        3 => span().prop_map(|(off, len)| Op::Read { off, len }),
        2 => (0..(AREA / 8) as u8, any::<u64>()).prop_map(|(word, add)| Op::FetchAdd { word, add }),
        2 => (0..(AREA / 8) as u8, any::<bool>(), any::<u64>())
            .prop_map(|(word, hit, swap)| Op::CmpSwap { word, hit, swap }),
        1 => Just(Op::ZeroWriteNoKey),
    ]
}

fn faults() -> impl Strategy<Value = Faults> {
    (
        prop_oneof![Just(0.0), 0.0..0.25f64],
        prop::option::of((0.002..0.03f64, 1_000..50_000u64)),
        prop_oneof![Just(0.0), 0.0..0.3f64],
        1_000..200_000u64,
        prop_oneof![Just(0.0), 0.0..0.1f64],
    )
        .prop_map(|(loss, burst, reorder, reorder_max_ns, duplicate)| Faults {
            loss,
            burst,
            reorder,
            reorder_max_ns,
            duplicate,
        })
}

fn case() -> impl Strategy<Value = Case> {
    (
        prop::bool::weighted(0.2),
        prop::sample::select(vec![1u8, 2, 4]),
        1..=16usize,
        1..=3usize,
        prop::collection::vec((0..3usize, op()), 1..48),
        faults(),
        any::<u64>(),
    )
        .prop_map(|(roce, paths, depth, streams, ops, faults, seed)| Case {
            roce,
            paths,
            // Native: 64-byte chunks so small requests span several packets; RoCEv2's
            // smallest path MTU is 256.
            mtu: if roce { 256 } else { 64 },
            depth,
            streams,
            ops: ops.into_iter().map(|(s, op)| (s % streams, op)).collect(),
            faults,
            seed,
        })
}

fn cases() -> u32 {
    std::env::var("FERROCE_RC_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    // checks: [PLACE-6]
    #[test]
    fn memory_equals_the_sequential_model(c in case()) {
        if let Err(e) = run(&c) {
            prop_assert!(false, "{e}");
        }
    }
}

// checks: [PLACE-6]
/// The pattern of the original report: many WRITEs to one address, last write wins, under
/// loss and reordering, over several seeds (no shrinking needed to read a failure).
#[test]
fn many_writes_to_one_address_last_one_wins() {
    let mut held = 0;
    for seed in 1..=20u64 {
        for roce in [false, true] {
            let c = Case {
                roce,
                paths: 4,
                mtu: if roce { 256 } else { 64 },
                depth: 16,
                streams: 1,
                ops: (0..200)
                    .map(|i| {
                        (
                            0,
                            Op::Write {
                                off: 0,
                                len: if i % 3 == 0 { 8 } else { 200 },
                            },
                        )
                    })
                    .collect(),
                faults: Faults {
                    loss: 0.05,
                    burst: None,
                    reorder: 0.1,
                    reorder_max_ns: 20_000,
                    duplicate: 0.02,
                },
                seed,
            };
            match run(&c) {
                Ok(h) => held += h,
                Err(e) => panic!("seed {seed}, roce {roce}: {e}"),
            }
        }
    }
    // The native responder really had to hold overlapping writes back.
    assert!(held > 0);
    println!("ORDERED packets held over 20 seeds: {held}");
}
