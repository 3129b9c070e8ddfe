//! `ferroce bench core`: what the sans-IO core costs per packet, alone.
//!
//! Two [`Endpoint`]s exchange datagrams in memory: a direct loop moves every `poll_transmit`
//! output of one into the other's `handle_datagram` (no DPDK, no simulator fabric, no
//! framing), fires `poll_timeout`/`handle_timeout`, and posts WRITEs of `mem::Regions`
//! memory on one connection (A → B, 4 streams) with enough outstanding to stay backlogged.
//!
//! **Clock.** A fake clock, advanced by the wire: each direction is a link at
//! `line_rate_mbps` with a fixed one-way delay; a datagram leaves when the link is free
//! (serialisation time of its bytes plus Ethernet/IPv4/UDP framing) and arrives one delay
//! later; when neither endpoint has anything to do the clock jumps to the next arrival or
//! deadline. So the core sees a steady 100 Gbit/s data-centre link however fast or slow the
//! code is, every run makes the same packets, ACKs and timer firings (the figures of two
//! commits compare the cost of the same work), and the loop reads no clock. With the real
//! monotonic clock the protocol's decisions (pacing, ACK delay, loss timers) would depend on
//! the speed of the code being measured: this CPU is tens of times slower per packet than the
//! 100 Gbit/s pacer, timers would fire spuriously, and a faster core would do different work.
//! Reading the clock is the embedder's cost: `ferroce bench dataplane` has it.
//!
//! **Figures** (over a steady-state window: after a warm-up of data packets, for `packets`
//! data packets): thread CPU time of the whole loop (both endpoints, the loop itself, posting
//! and completions; minus the verification, timed apart) per data packet delivered; ACK
//! datagrams per data packet (counted by the opcode byte of every datagram B sends);
//! allocation calls and bytes per data packet (the counting allocator, when installed); and,
//! in the same run, the floor: one copy of the payload (registered memory into a packet
//! buffer at the WRITE header's offset) plus one CRC-32 over the packet, per packet.
//!
//! **Verification.** Every byte moved is checked: each stream's destination is a ring of
//! 2 × depth message slots, message `i` goes to slot `i mod ring`, and whenever `depth`
//! messages of a stream have completed they are compared with their source slots and the
//! slots cleared, before any later message may reuse them (a WRITE that placed nothing, or
//! placed it elsewhere, leaves zeros). Its CPU time is measured apart and printed on its own.

use crate::cpu::thread_cpu_ns;
use crate::Opts;
use crate::{alloc, csv};
use ferroce_transport::mem::{access, Regions};
use ferroce_transport::wire::Opcode;
use ferroce_transport::*;
use serde::Serialize;
use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::time::Instant;

const A_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const B_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const PD: u32 = 1;
const SRC_BASE: u64 = 0x1000_0000;
const DST_BASE: u64 = 0x8000_0000;
/// Streams (QPs) the WRITEs are spread over.
const STREAMS: u32 = 4;
/// Bytes each stream keeps outstanding (the 4 streams together: about 18 bandwidth-delay
/// products of the 100 Gbit/s, ~4.5 µs RTT link).
const OUTSTANDING_BYTES: u64 = 256 << 10;
/// Ethernet (with preamble, FCS and gap), IPv4 and UDP around a datagram on the wire.
const FRAMING: u64 = 14 + 4 + 20 + 20 + 8;
/// Bytes a native WRITE packet carries before its payload (base + sequence + message
/// headers + the WRITE's rkey/address).
pub const WRITE_HEADER: usize = 48;

/// What to run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CoreConfig {
    pub opts: Opts,
    /// Packet payloads (the connection's MTU): one row per payload and path count.
    pub payloads: Vec<u32>,
    pub paths: Vec<u8>,
    /// Data packets in each row's measured window.
    pub packets: u64,
    /// Packets per WRITE message (message = payload × this).
    pub msg_packets: u32,
    /// Both links' rate, and both endpoints' line rate (Mbit/s).
    pub line_rate_mbps: u32,
    /// One-way delay of each link (ns).
    pub one_way_ns: u64,
    /// Diagnostic: run with denormal floats flushed to zero (x86-64 MXCSR FTZ and DAZ), to
    /// show what subnormal arithmetic in the core costs.
    pub ftz: bool,
    /// Pacing batch (spec/congestion.md §2.1): the DPDK engine's by default, so the core is
    /// measured as the engine runs it; 1 paces packet by packet, as the simulator does.
    pub pace_burst: u32,
    pub pace_quantum_ns: u64,
}

impl CoreConfig {
    pub fn new(opts: Opts) -> Self {
        CoreConfig {
            opts,
            payloads: vec![64, 1024, 1408, 4096],
            paths: vec![1, 16],
            packets: if opts.quick { 20_000 } else { 100_000 },
            msg_packets: 16,
            line_rate_mbps: 100_000,
            one_way_ns: 2_000,
            ftz: false,
            pace_burst: ferroce_transport::ENGINE_PACE_BURST,
            pace_quantum_ns: ferroce_transport::ENGINE_PACE_QUANTUM_NS,
        }
    }

    /// Data packets before the window opens (handshake, cold start, slow start).
    pub fn warmup(&self) -> u64 {
        (self.packets / 4).max(2_000)
    }
}

/// One row: one payload, one path count.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CoreRow {
    pub payload: u32,
    pub paths: u8,
    pub msg_bytes: u32,
    /// Outstanding WRITEs per stream.
    pub depth: u32,
    /// Data packets delivered in the window.
    pub data_pkts: u64,
    /// Thread CPU ns of the loop per data packet (verification excluded).
    pub cpu_ns_per_pkt: f64,
    /// Data packets per CPU-second, in millions (1000 / cpu_ns_per_pkt).
    pub mpps: f64,
    pub acks_per_pkt: f64,
    /// Other datagrams (probes, NACKs, ...) either way per data packet.
    pub ctrl_per_pkt: f64,
    pub allocs_per_pkt: Option<f64>,
    pub alloc_bytes_per_pkt: Option<f64>,
    /// CPU ns per data packet in each quarter of the window.
    pub quarters_ns: [f64; 4],
    /// Last quarter / first quarter: about 1 when the cost per packet is steady.
    pub drift: f64,
    /// One payload copy + one CRC-32 over the packet, ns per packet (same run).
    pub floor_ns: f64,
    /// cpu_ns_per_pkt / floor_ns.
    pub ratio: f64,
    /// Data packets that were resends, in the window.
    pub retx_pkts: u64,
    /// Turns of the embedder's loop (deliver, timers, transmit, completions) and
    /// `handle_timeout` calls per data packet: how often the core asks to be called.
    pub turns_per_pkt: f64,
    pub timer_fires_per_pkt: f64,
    /// Goodput in fake-clock time (what the core did with the simulated link).
    pub sim_gbps: f64,
    /// Verification CPU ns per message and per data packet (not in cpu_ns_per_pkt).
    pub verify_ns_per_msg: f64,
    pub verify_ns_per_pkt: f64,
    /// Bytes compared with their source over the whole row (every byte moved).
    pub verified_bytes: u64,
    /// ACKs the receiver's connection counted (`ConnCounters::acks_sent`), whole row.
    pub acks_counted: u64,
    pub errors: Vec<String>,
    pub wall_s: f64,
}

impl CoreRow {
    pub fn ok(&self) -> bool {
        self.errors.is_empty()
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct CoreReport {
    pub config: CoreConfig,
    pub rows: Vec<CoreRow>,
    pub setup: Vec<String>,
    pub definitions: Vec<String>,
    /// Whether allocations were counted (the counting allocator is installed).
    pub allocs_measured: bool,
    pub wall_s: f64,
}

/// A datagram on a link.
struct Dgram {
    at: u64,
    port: u16,
    len: usize,
    buf: Vec<u8>,
}

/// One direction: a FIFO link with serialisation at the line rate and a fixed delay.
#[derive(Default)]
struct Link {
    q: VecDeque<Dgram>,
    free_at: u64,
}

/// Datagram counts of one direction, by kind.
#[derive(Clone, Copy, Debug, Default)]
struct Kinds {
    data: u64,
    acks: u64,
    other: u64,
}

fn classify(k: &mut Kinds, bytes: &[u8]) {
    // Byte 1 of every native packet is its opcode (spec/wire.md); no parse, no CRC.
    match bytes.get(1).copied().and_then(Opcode::from_u8) {
        Some(Opcode::Ack | Opcode::AckMulti) => k.acks += 1,
        Some(op) if (Opcode::Send as u8..=Opcode::AtomicResp as u8).contains(&(op as u8)) => {
            k.data += 1
        }
        _ => k.other += 1,
    }
}

/// A snapshot at a window edge.
#[derive(Clone, Copy, Debug, Default)]
struct Mark {
    cpu_ns: u64,
    verify_ns: u64,
    allocs: Option<alloc::AllocCounts>,
    now: u64,
    ab: Kinds,
    ba: Kinds,
    retx: u64,
    bytes_done: u64,
    turns: u64,
    timer_fires: u64,
}

struct Stream {
    posted: u32,
    completed: u32,
    verified: u32,
}

/// The two endpoints, their memory, the links and the workload.
struct Pair {
    a: Endpoint,
    b: Endpoint,
    ma: Regions,
    mb: Regions,
    src_key: u32,
    dst_key: u32,
    conn: Option<ConnId>,
    peer_conn: Option<ConnId>,
    now: u64,
    ab: Link,
    ba: Link,
    ta: Option<u64>,
    tb: Option<u64>,
    pool: Vec<Vec<u8>>,
    buf_len: usize,
    /// ns per wire byte, as 32.32 fixed point.
    ns_per_byte: u64,
    one_way: u64,
    sent_ab: Kinds,
    sent_ba: Kinds,
    delivered_ab: Kinds,
    msg: u32,
    depth: u32,
    ring: u32,
    per_stream: u32,
    streams: Vec<Stream>,
    msgs_done: u64,
    bytes_done: u64,
    verify_ns: u64,
    verified_bytes: u64,
    errors: Vec<String>,
    pool_grew: u64,
    /// Loop turns and `handle_timeout` calls (both endpoints).
    turns: u64,
    timer_fires: u64,
}

impl Pair {
    fn new(cfg: &CoreConfig, payload: u32, paths: u8) -> Pair {
        let mut ca = EndpointConfig {
            line_rate_mbps: cfg.line_rate_mbps,
            seed: cfg.opts.seed ^ 0xa11ce,
            ..EndpointConfig::default()
        };
        ca.conn.paths = paths;
        ca.conn.mtu = payload.clamp(64, u16::MAX as u32) as u16;
        ca.conn.pace_burst = cfg.pace_burst.max(1);
        ca.conn.pace_quantum_ns = cfg.pace_quantum_ns;
        let mut cb = ca.clone();
        cb.seed = cfg.opts.seed ^ 0xb0b;
        let msg = payload * cfg.msg_packets.max(1);
        let depth = (OUTSTANDING_BYTES / msg as u64).clamp(4, 512) as u32;
        let ring = 2 * depth;
        // Posting must not stop before the window closes: it runs ahead of delivery by what
        // is outstanding, so twice that goes past the window's end.
        let outstanding = STREAMS as u64 * depth as u64 * cfg.msg_packets.max(1) as u64;
        let total_pkts = cfg.warmup() + cfg.packets + 2 * outstanding;
        let per_stream = total_pkts
            .div_ceil(cfg.msg_packets.max(1) as u64 * STREAMS as u64)
            .max(ring as u64) as u32;
        let area = STREAMS as usize * ring as usize * msg as usize;
        let mut ma = Regions::new();
        let mut mb = Regions::new();
        let src_key = ma.register(PD, SRC_BASE, area, access::LOCAL_WRITE);
        let dst_key = mb.register(PD, DST_BASE, area, access::REMOTE_WRITE);
        if let Some(r) = ma.region_mut(src_key) {
            fill_random(&mut r.data, cfg.opts.seed);
        }
        let buf_len = payload as usize + 256;
        let pool = (0..4096).map(|_| vec![0u8; buf_len]).collect();
        let mut p = Pair {
            a: Endpoint::new(ca),
            b: Endpoint::new(cb),
            ma,
            mb,
            src_key,
            dst_key,
            conn: None,
            peer_conn: None,
            now: 1_000,
            ab: Link::default(),
            ba: Link::default(),
            ta: None,
            tb: None,
            pool,
            buf_len,
            ns_per_byte: (8_000u64 << 32) / cfg.line_rate_mbps.max(1) as u64,
            one_way: cfg.one_way_ns,
            sent_ab: Kinds::default(),
            sent_ba: Kinds::default(),
            delivered_ab: Kinds::default(),
            msg,
            depth,
            ring,
            per_stream,
            streams: (0..STREAMS)
                .map(|_| Stream {
                    posted: 0,
                    completed: 0,
                    verified: 0,
                })
                .collect(),
            msgs_done: 0,
            bytes_done: 0,
            verify_ns: 0,
            verified_bytes: 0,
            errors: Vec::new(),
            pool_grew: 0,
            turns: 0,
            timer_fires: 0,
        };
        p.conn = Some(p.a.connect(B_IP));
        p.ab.q.reserve(8192);
        p.ba.q.reserve(8192);
        p
    }

    fn wire_ns(&self, len: usize) -> u64 {
        ((len as u64 + FRAMING) * self.ns_per_byte) >> 32
    }

    fn take_buf(&mut self) -> Vec<u8> {
        self.pool.pop().unwrap_or_else(|| {
            self.pool_grew += 1;
            vec![0u8; self.buf_len]
        })
    }

    /// Everything `a` (or `b`) sends now, onto its link.
    fn transmit(&mut self, from_a: bool) -> bool {
        let mut any = false;
        loop {
            let mut buf = self.take_buf();
            let t = if from_a {
                self.a.poll_transmit(self.now, &mut buf, &mut self.ma)
            } else {
                self.b.poll_transmit(self.now, &mut buf, &mut self.mb)
            };
            let Some(t) = t else {
                self.pool.push(buf);
                return any;
            };
            any = true;
            let ser = self.wire_ns(t.len);
            let (link, kinds) = if from_a {
                (&mut self.ab, &mut self.sent_ab)
            } else {
                (&mut self.ba, &mut self.sent_ba)
            };
            classify(kinds, &buf[..t.len]);
            let start = link.free_at.max(self.now);
            link.free_at = start + ser;
            link.q.push_back(Dgram {
                at: start + ser + self.one_way,
                port: t.src_port,
                len: t.len,
                buf,
            });
        }
    }

    /// Delivers what has arrived by now on both links; true if anything did.
    fn deliver(&mut self) -> bool {
        let mut any = false;
        while self.ab.q.front().is_some_and(|d| d.at <= self.now) {
            let d = self.ab.q.pop_front().expect("front");
            classify(&mut self.delivered_ab, &d.buf[..d.len]);
            self.b
                .handle_datagram(self.now, A_IP, d.port, false, &d.buf[..d.len], &mut self.mb);
            self.pool.push(d.buf);
            any = true;
        }
        while self.ba.q.front().is_some_and(|d| d.at <= self.now) {
            let d = self.ba.q.pop_front().expect("front");
            self.a
                .handle_datagram(self.now, B_IP, d.port, false, &d.buf[..d.len], &mut self.ma);
            self.pool.push(d.buf);
            any = true;
        }
        any
    }

    fn post(&mut self, s: u32) {
        let Some(conn) = self.conn else { return };
        let st = &self.streams[s as usize];
        let (i, ring, depth) = (st.posted, self.ring, self.depth);
        if i >= self.per_stream || i >= st.completed + depth || i >= st.verified + ring {
            return;
        }
        let off = (s as u64 * ring as u64 + (i % ring) as u64) * self.msg as u64;
        let wr = SendWr {
            wr_id: ((s as u64) << 32) | i as u64,
            op: SendOp::Write {
                rkey: self.dst_key,
                raddr: DST_BASE + off,
                imm: None,
            },
            sgl: [Sge {
                lkey: self.src_key,
                addr: SRC_BASE + off,
                len: self.msg,
            }]
            .into_iter()
            .collect(),
            signaled: true,
            solicited: false,
            fence: false,
        };
        match self.a.post_send(conn, s + 1, wr) {
            Ok(()) => self.streams[s as usize].posted += 1,
            Err(e) => self
                .errors
                .push(format!("post_send stream {s} wr {i}: {e}")),
        }
    }

    /// Posts what stream `s` may post now.
    fn post_all(&mut self, s: u32) {
        loop {
            let before = self.streams[s as usize].posted;
            self.post(s);
            if self.streams[s as usize].posted == before {
                break;
            }
        }
    }

    /// Compares messages `[from, to)` of stream `s` with their source and clears them.
    fn verify(&mut self, s: u32, from: u32, to: u32) {
        let t0 = thread_cpu_ns();
        let (Some(src), Some(dst)) = (
            self.ma.region(self.src_key),
            self.mb.region_mut(self.dst_key),
        ) else {
            self.errors.push("regions missing".into());
            return;
        };
        let msg = self.msg as usize;
        for i in from..to {
            let off = (s as usize * self.ring as usize + (i % self.ring) as usize) * msg;
            let (a, b) = (&src.data[off..off + msg], &mut dst.data[off..off + msg]);
            if a != &b[..] {
                let j = a
                    .iter()
                    .zip(b.iter())
                    .position(|(x, y)| x != y)
                    .unwrap_or(0);
                if self.errors.len() < 8 {
                    self.errors.push(format!(
                        "stream {s} message {i}: byte {j} differs from its source"
                    ));
                }
            }
            b.fill(0);
            self.verified_bytes += msg as u64;
        }
        self.verify_ns += thread_cpu_ns().saturating_sub(t0);
    }

    /// Completions and events of both endpoints.
    fn reap(&mut self) {
        while let Some(ev) = self.b.poll_event() {
            match ev {
                Event::Accepted { conn, .. } => {
                    self.peer_conn = Some(conn);
                    for s in 0..STREAMS {
                        if let Err(e) = self.b.create_stream(conn, s + 1, s + 1, PD) {
                            self.errors.push(format!("B create_stream: {e}"));
                        }
                    }
                }
                Event::Failed { .. } => self.errors.push("B: connection failed".into()),
                _ => {}
            }
        }
        while let Some(c) = self.b.poll_completion() {
            self.errors
                .push(format!("unexpected completion at the receiver: {c:?}"));
        }
        while let Some(ev) = self.a.poll_event() {
            match ev {
                Event::Connected { conn, .. } => {
                    for s in 0..STREAMS {
                        if let Err(e) = self.a.create_stream(conn, s + 1, s + 1, PD) {
                            self.errors.push(format!("A create_stream: {e}"));
                        }
                    }
                    for s in 0..STREAMS {
                        self.post_all(s);
                    }
                }
                Event::Failed { .. } => self.errors.push("A: connection failed".into()),
                _ => {}
            }
        }
        while let Some(c) = self.a.poll_completion() {
            let s = (c.wr_id >> 32) as u32;
            let i = c.wr_id as u32;
            let Some(st) = self.streams.get_mut(s as usize) else {
                self.errors.push(format!("unknown completion {c:?}"));
                continue;
            };
            if c.status != Status::Success || i != st.completed {
                self.errors.push(format!(
                    "stream {s}: completion of wr {i} ({:?}), expected wr {}",
                    c.status, st.completed
                ));
                continue;
            }
            st.completed += 1;
            self.msgs_done += 1;
            self.bytes_done += self.msg as u64;
            let (done, v) = (st.completed, st.verified);
            if done >= v + self.depth || done == self.per_stream {
                self.verify(s, v, done);
                self.streams[s as usize].verified = done;
            }
            self.post_all(s);
        }
    }

    fn finished(&self) -> bool {
        self.streams.iter().all(|s| s.verified == self.per_stream)
    }

    fn mark(&self) -> Mark {
        Mark {
            cpu_ns: thread_cpu_ns(),
            verify_ns: self.verify_ns,
            allocs: alloc::counts(),
            now: self.now,
            ab: self.delivered_ab,
            ba: self.sent_ba,
            retx: self.a.totals().retx_pkts,
            bytes_done: self.bytes_done,
            turns: self.turns,
            timer_fires: self.timer_fires,
        }
    }

    /// Runs the loop until `stop_at_data` data packets were delivered (`None`: until every
    /// message is verified), or an error.
    fn run(&mut self, stop_at_data: Option<u64>) {
        let mut idle_spins = 0u32;
        while self.errors.is_empty() && !self.finished() {
            if stop_at_data.is_some_and(|n| self.delivered_ab.data >= n) {
                return;
            }
            self.turns += 1;
            let mut busy = self.deliver();
            if self.ta.is_some_and(|t| t <= self.now) {
                self.timer_fires += 1;
                self.a.handle_timeout(self.now);
            }
            if self.tb.is_some_and(|t| t <= self.now) {
                self.timer_fires += 1;
                self.b.handle_timeout(self.now);
            }
            self.reap();
            busy |= self.transmit(true);
            busy |= self.transmit(false);
            self.reap();
            self.ta = self.a.poll_timeout();
            self.tb = self.b.poll_timeout();
            if busy {
                idle_spins = 0;
                continue;
            }
            let next = [
                self.ab.q.front().map(|d| d.at),
                self.ba.q.front().map(|d| d.at),
                self.ta,
                self.tb,
            ]
            .into_iter()
            .flatten()
            .min();
            match next {
                Some(t) if t > self.now => {
                    self.now = t;
                    idle_spins = 0;
                }
                Some(_) => {
                    // A deadline that handling did not clear: step past it rather than spin.
                    idle_spins += 1;
                    self.now += 1;
                    if idle_spins > 1_000_000 {
                        self.errors
                            .push(format!("stuck at {} ns: a deadline never clears", self.now));
                    }
                }
                None => {
                    let st: Vec<String> = self
                        .streams
                        .iter()
                        .map(|s| format!("{}/{}/{}", s.posted, s.completed, s.verified))
                        .collect();
                    self.errors.push(format!(
                        "stalled at {} ns: nothing in flight and no deadline (posted/completed/verified per stream: {})",
                        self.now,
                        st.join(" ")
                    ));
                }
            }
        }
    }
}

/// Sets this thread's SSE control register to flush subnormal results to zero and treat
/// subnormal inputs as zero (FTZ | DAZ); nothing on other architectures.
fn flush_denormals() {
    #[cfg(target_arch = "x86_64")]
    {
        let mut csr: u32 = 0;
        // SAFETY: `stmxcsr` stores the 4-byte MXCSR register to the address given, which is
        // `csr`, a live, aligned, writable u32; it touches nothing else.
        unsafe { std::arch::asm!("stmxcsr [{}]", in(reg) &mut csr, options(nostack)) };
        csr |= 0x8040;
        // SAFETY: `ldmxcsr` loads MXCSR from `csr`, a live aligned u32 holding the previous
        // value with only the FTZ (bit 15) and DAZ (bit 6) bits added: no reserved bit is set
        // (that would fault) and no exception is unmasked. Only this thread's float rounding of
        // subnormals changes, which is the point of the diagnostic.
        unsafe { std::arch::asm!("ldmxcsr [{}]", in(reg) &csr, options(nostack)) };
    }
}

/// Fills `buf` with xorshift words (the source of every WRITE).
fn fill_random(buf: &mut [u8], seed: u64) {
    let mut x = crate::Rng::new(seed).next_u64() | 1;
    for c in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        c.copy_from_slice(&b[..c.len()]);
    }
}

/// The floor: per packet, one copy of `payload` bytes from a source area of `area` bytes
/// (walked in order, as the sender reads its messages) into a packet buffer at the WRITE
/// header's offset, then one CRC-32 over the packet (header + payload). Best of 3, CPU ns
/// per packet.
pub fn floor_ns(payload: u32, area: usize, packets: u64) -> f64 {
    let p = payload as usize;
    let area = area.max(p);
    let mut src = vec![0u8; area];
    fill_random(&mut src, 7);
    let mut pkt = vec![0u8; WRITE_HEADER + p + 64];
    let n = packets.clamp(1_000, 200_000);
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let mut off = 0usize;
        let mut acc = 0u32;
        let t0 = thread_cpu_ns();
        for _ in 0..n {
            if off + p > area {
                off = 0;
            }
            pkt[WRITE_HEADER..WRITE_HEADER + p].copy_from_slice(&src[off..off + p]);
            acc ^= crc32fast::hash(std::hint::black_box(&pkt[..WRITE_HEADER + p]));
            off += p;
        }
        let dt = thread_cpu_ns().saturating_sub(t0);
        std::hint::black_box(acc);
        best = best.min(dt as f64 / n as f64);
    }
    best
}

/// One row.
pub fn run_one(cfg: &CoreConfig, payload: u32, paths: u8, floor: f64) -> CoreRow {
    let t_wall = Instant::now();
    if cfg.ftz {
        flush_denormals();
    }
    let mut p = Pair::new(cfg, payload, paths);
    let warm = cfg.warmup();
    p.run(Some(warm));
    let m0 = p.mark();
    // The window in quarters, to show whether the cost per packet is steady.
    let mut q = [0f64; 4];
    let mut prev = m0;
    for (k, qk) in q.iter_mut().enumerate() {
        p.run(Some(warm + cfg.packets * (k as u64 + 1) / 4));
        let m = p.mark();
        let cpu = (m.cpu_ns - prev.cpu_ns).saturating_sub(m.verify_ns - prev.verify_ns);
        *qk = cpu as f64 / m.ab.data.saturating_sub(prev.ab.data).max(1) as f64;
        prev = m;
    }
    let m1 = prev;
    p.run(None);
    let mut row = CoreRow {
        quarters_ns: q,
        drift: if q[0] > 0.0 { q[3] / q[0] } else { 0.0 },
        payload,
        paths,
        msg_bytes: p.msg,
        depth: p.depth,
        floor_ns: floor,
        verified_bytes: p.verified_bytes,
        ..CoreRow::default()
    };
    let data = m1.ab.data.saturating_sub(m0.ab.data);
    row.data_pkts = data;
    let pk = data.max(1) as f64;
    let verify = m1.verify_ns - m0.verify_ns;
    let cpu = (m1.cpu_ns - m0.cpu_ns).saturating_sub(verify);
    row.cpu_ns_per_pkt = cpu as f64 / pk;
    row.mpps = if cpu > 0 {
        data as f64 * 1e3 / cpu as f64
    } else {
        0.0
    };
    row.acks_per_pkt = (m1.ba.acks - m0.ba.acks) as f64 / pk;
    row.ctrl_per_pkt = ((m1.ba.other - m0.ba.other)
        + (m1.ab.other - m0.ab.other)
        + (m1.ba.data - m0.ba.data)) as f64
        / pk;
    if let (Some(a0), Some(a1)) = (m0.allocs, m1.allocs) {
        let d = a1.since(a0);
        row.allocs_per_pkt = Some(d.allocs as f64 / pk);
        row.alloc_bytes_per_pkt = Some(d.bytes as f64 / pk);
    }
    row.ratio = if floor > 0.0 {
        row.cpu_ns_per_pkt / floor
    } else {
        0.0
    };
    row.retx_pkts = m1.retx - m0.retx;
    row.turns_per_pkt = (m1.turns - m0.turns) as f64 / pk;
    row.timer_fires_per_pkt = (m1.timer_fires - m0.timer_fires) as f64 / pk;
    let dt = m1.now.saturating_sub(m0.now);
    row.sim_gbps = if dt > 0 {
        (m1.bytes_done - m0.bytes_done) as f64 * 8.0 / dt as f64
    } else {
        0.0
    };
    let msgs_in_window = (m1.bytes_done - m0.bytes_done) as f64 / p.msg as f64;
    row.verify_ns_per_pkt = verify as f64 / pk;
    row.verify_ns_per_msg = verify as f64 / msgs_in_window.max(1.0);
    row.acks_counted = p
        .peer_conn
        .and_then(|c| p.b.connection(c))
        .map(|c| c.counters().acks_sent)
        .unwrap_or(0);
    row.errors = std::mem::take(&mut p.errors);
    let want = STREAMS as u64 * p.per_stream as u64 * p.msg as u64;
    if row.errors.is_empty() && p.verified_bytes != want {
        row.errors
            .push(format!("verified {} of {want} bytes", p.verified_bytes));
    }
    if data < cfg.packets {
        row.errors.push(format!(
            "the window saw {data} of {} data packets",
            cfg.packets
        ));
    }
    if p.pool_grew > 0 {
        row.errors.push(format!(
            "the bench's datagram pool grew {} times (its allocations would count)",
            p.pool_grew
        ));
    }
    row.wall_s = t_wall.elapsed().as_secs_f64();
    row
}

/// Every row of `cfg`.
pub fn run(cfg: &CoreConfig, progress: &dyn crate::progress::Progress) -> CoreReport {
    let t0 = Instant::now();
    progress.begin("core", (cfg.payloads.len() * (cfg.paths.len() + 1)) as u64);
    let mut rows = Vec::new();
    for &payload in &cfg.payloads {
        progress.step(&format!("floor {payload} B"));
        let msg = payload * cfg.msg_packets.max(1);
        let depth = (OUTSTANDING_BYTES / msg as u64).clamp(4, 512) as usize;
        let area = STREAMS as usize * 2 * depth * msg as usize;
        let floor = floor_ns(payload, area, cfg.packets);
        for &paths in &cfg.paths {
            progress.step(&format!("{payload} B, {paths} paths"));
            rows.push(run_one(cfg, payload, paths, floor));
        }
    }
    progress.end();
    CoreReport {
        config: cfg.clone(),
        rows,
        setup: setup(cfg),
        definitions: definitions(),
        allocs_measured: alloc::counts().is_some(),
        wall_s: t0.elapsed().as_secs_f64(),
    }
}

fn setup(cfg: &CoreConfig) -> Vec<String> {
    let mut v = vec![
        format!(
            "two Endpoints in one thread, one connection A -> B, {STREAMS} streams of WRITEs ({} packets per message), Regions memory",
            cfg.msg_packets
        ),
        format!(
            "fake clock: two links of {} Gbit/s with {} ns one-way delay, time advanced by the wire (no clock reads)",
            cfg.line_rate_mbps as f64 / 1000.0,
            cfg.one_way_ns
        ),
        format!(
            "window: {} data packets after a warm-up of {} (--packets N for more)",
            cfg.packets,
            cfg.warmup()
        ),
        if cfg.pace_burst > 1 {
            format!(
                "pacing: batches of up to {} packets, none held over {} ns (the DPDK engine's; --pace-burst 1: packet by packet, as the simulator)",
                cfg.pace_burst, cfg.pace_quantum_ns
            )
        } else {
            "pacing: packet by packet (--pace-burst 1, the simulator's)".into()
        },
    ];
    if cfg.ftz {
        v.push("--ftz: subnormal floats flushed to zero in this thread (diagnostic)".into());
    }
    v
}

fn definitions() -> Vec<String> {
    [
        "CPU ns/pkt: thread CPU time (CLOCK_THREAD_CPUTIME_ID) of the whole loop over the window, both endpoints, minus the verification, per data packet delivered",
        "Mpps: data packets per CPU-second of that loop (1000 / CPU ns/pkt), one core",
        "ACKs/pkt: ACK datagrams the receiver sent per data packet; ctrl/pkt: all other datagrams either way",
        "allocs/pkt, B/pkt: allocation calls (alloc, realloc) and bytes asked for per data packet in the window (counting allocator; '-' when not installed)",
        "floor ns: one payload copy (source memory -> packet buffer at the WRITE header offset) + one CRC-32 over the packet, per packet, same run; the loop runs both ends, which copy and CRC twice",
        "ratio: CPU ns/pkt / floor ns",
        "sim Gb/s: goodput in fake-clock time (the protocol's behaviour, not the code's speed)",
        "drift: CPU ns/pkt of the window's last quarter / its first (about 1: steady; above: the cost grows during the run, -v prints the quarters)",
        "verify: every byte moved compared with its source, timed apart (printed below the table)",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

pub const CSV_HEADER: [&str; 23] = [
    "payload",
    "paths",
    "msg_bytes",
    "depth",
    "data_pkts",
    "cpu_ns_per_pkt",
    "mpps",
    "acks_per_pkt",
    "ctrl_per_pkt",
    "allocs_per_pkt",
    "alloc_bytes_per_pkt",
    "floor_ns",
    "ratio",
    "retx_pkts",
    "sim_gbps",
    "verify_ns_per_msg",
    "verify_ns_per_pkt",
    "verified_bytes",
    "acks_counted",
    "turns_per_pkt",
    "timer_fires_per_pkt",
    "drift",
    "ok",
];

pub fn csv(r: &CoreReport) -> csv::Csv {
    let mut c = csv::Csv::new(&CSV_HEADER);
    for x in &r.rows {
        c.push(vec![
            x.payload.to_string(),
            x.paths.to_string(),
            x.msg_bytes.to_string(),
            x.depth.to_string(),
            x.data_pkts.to_string(),
            csv::num(Some(x.cpu_ns_per_pkt), 1),
            csv::num(Some(x.mpps), 4),
            csv::num(Some(x.acks_per_pkt), 4),
            csv::num(Some(x.ctrl_per_pkt), 4),
            csv::num(x.allocs_per_pkt, 3),
            csv::num(x.alloc_bytes_per_pkt, 1),
            csv::num(Some(x.floor_ns), 1),
            csv::num(Some(x.ratio), 2),
            x.retx_pkts.to_string(),
            csv::num(Some(x.sim_gbps), 2),
            csv::num(Some(x.verify_ns_per_msg), 1),
            csv::num(Some(x.verify_ns_per_pkt), 1),
            x.verified_bytes.to_string(),
            x.acks_counted.to_string(),
            csv::num(Some(x.turns_per_pkt), 3),
            csv::num(Some(x.timer_fires_per_pkt), 3),
            csv::num(Some(x.drift), 3),
            x.ok().to_string(),
        ]);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_run_verifies_every_byte_and_fills_every_column() {
        let mut cfg = CoreConfig::new(Opts {
            quick: true,
            seed: 3,
            ..Opts::default()
        });
        cfg.payloads = vec![1024];
        cfg.paths = vec![2];
        cfg.packets = 3_000;
        let r = run(&cfg, &crate::progress::Silent);
        assert_eq!(r.rows.len(), 1);
        let x = &r.rows[0];
        assert!(x.ok(), "{:?}", x.errors);
        assert!(x.data_pkts >= 3_000, "{x:?}");
        assert!(x.verified_bytes >= x.data_pkts * 1024, "{x:?}");
        assert!(x.acks_per_pkt > 0.0 && x.acks_counted > 0, "{x:?}");
        assert!(x.cpu_ns_per_pkt > 0.0 && x.floor_ns > 0.0, "{x:?}");
        assert!(x.sim_gbps > 1.0, "{x:?}");
        let c = csv(&r);
        assert_eq!(c.as_str().lines().count(), 2);
        assert!(c.as_str().starts_with("payload,paths,msg_bytes"));
    }
}
