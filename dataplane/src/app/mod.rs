//! A self-verifying workload over an engine, on the application side of its queues: the
//! workload's [`WorkloadSpec`] and byte [`pattern`](ferroce_workload::pattern), with
//! the client/server logic of the simulator harness's `NodeHost` (every completion checked, every
//! received and written byte compared with what the client sent).

pub mod fleet;

use crate::engine::{Command, EngineHandle, Output};
use ferroce_transport::mem::{access, Regions};
use ferroce_transport::*;
use ferroce_workload::*;
use rustc_hash::FxHashMap as HashMap;
use serde::Serialize;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// Offset of the first byte of `buf` that differs from the workload pattern of (s, i): the
/// harness's [`check_pattern`], which compares every byte 64 at a time without branches and
/// searches only when a block differs.
pub fn check_fast(buf: &[u8], s: u32, i: u32) -> Option<usize> {
    check_pattern(buf, s, i)
}

/// What a workload run found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct WorkloadResult {
    pub role: String,
    pub ok: bool,
    pub errors: Vec<String>,
    /// Work requests completed (client) or receives completed (server).
    pub completed: u64,
    /// Payload bytes of successful work requests (client) / received (server).
    pub bytes: u64,
    pub elapsed_s: f64,
    pub goodput_gbps: f64,
    pub msgs_per_s: f64,
    pub latency_p50_us: f64,
    pub latency_p99_us: f64,
    /// The idle connections beside the workload (`workload.connections`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<fleet::FleetResult>,
}

impl WorkloadResult {
    /// Count the idle connections' result in (their errors fail the run).
    fn with_fleet(mut self, f: fleet::FleetResult) -> Self {
        if !f.errors.is_empty() {
            self.ok = false;
            self.errors.extend(f.errors.iter().cloned());
        }
        self.fleet = Some(f);
        self
    }
}

fn wr_id(s: u32, i: u32) -> u64 {
    ((s as u64) << 32) | i as u64
}

/// The server's memory layout for `spec`.
pub fn server_layout(spec: &WorkloadSpec) -> ServerLayout {
    ServerLayout {
        recv_base: 0x1000_0000,
        write_base: 0x2000_0000,
        read_base: 0x3000_0000,
        atomic_base: 0x4000_0000,
        slot: spec.max_size() as u64,
    }
}

/// Register the server's regions (receive slots, write slots, READ source, atomics) in
/// `mem`; returns the keys and the receive lkey. Registration order is fixed, so
/// [`server_keys`] computes the same keys without the memory (the client in another process
/// learns them that way, as verbs applications exchange them out of band).
pub fn register_server(mem: &mut Regions, spec: &WorkloadSpec) -> (ServerKeys, u32) {
    register_server_sized(mem, spec, true)
}

fn register_server_sized(mem: &mut Regions, spec: &WorkloadSpec, real: bool) -> (ServerKeys, u32) {
    let layout = server_layout(spec);
    let ms = layout.slot;
    let n = spec.streams as u64;
    let len = |l: u64| if real { l as usize } else { 0 };
    let recv_lkey = mem.register(
        SERVER_PD,
        layout.recv_base,
        len(n * spec.recv_depth as u64 * ms),
        access::LOCAL_WRITE,
    );
    let write_rkey = mem.register(
        SERVER_PD,
        layout.write_base,
        len(n * spec.write_slots() as u64 * ms),
        WRITE_ACCESS,
    );
    let read_len = (ms * 4).max(1 << 16);
    let read_rkey = mem.register(
        SERVER_PD,
        layout.read_base,
        len(read_len),
        access::REMOTE_READ,
    );
    if let Some(r) = mem.region_mut(read_rkey) {
        for (a, b) in r.data.iter_mut().enumerate() {
            *b = read_source_byte(a as u64);
        }
    }
    let atomic_rkey = mem.register(
        SERVER_PD,
        layout.atomic_base,
        len(n * 8),
        access::REMOTE_ATOMIC | access::LOCAL_WRITE,
    );
    (
        ServerKeys {
            layout,
            write_rkey,
            read_rkey,
            read_len,
            atomic_rkey,
        },
        recv_lkey,
    )
}

/// The keys a server registering `spec` into a fresh memory gets.
pub fn server_keys(spec: &WorkloadSpec) -> ServerKeys {
    register_server_sized(&mut workload_regions(spec), spec, false).0
}

/// The memory of a workload server in another process than its client: keys from the
/// workload's seed, which both sides' configurations hold. The client "exchanges" keys
/// through the configuration, as verbs programs exchange them over TCP; such keys are
/// predictable to anyone with the configuration, which suits this self-verifying test
/// workload and nothing else (an engine's own memory has OS-random keys).
fn workload_regions(spec: &WorkloadSpec) -> Regions {
    Regions::with_keys(ferroce_transport::keys::KeyGen::deterministic(
        spec.seed ^ 0x6b65_7973,
    ))
}

#[derive(Clone, Copy, Debug)]
struct Expect {
    op: OpKind,
    s: u32,
    i: u32,
    len: u32,
    local: u64,
    raddr: u64,
    orig: u64,
    /// When it was posted, on the engine's clock (ns).
    posted: u64,
}

/// The client: posts the workload's work requests and verifies every completion.
pub struct ClientApp {
    h: EngineHandle,
    pub spec: WorkloadSpec,
    peer: Ipv4Addr,
    keys: ServerKeys,
    conn: Option<ConnId>,
    conn_reply: Option<crossbeam_channel::Receiver<ConnId>>,
    lkey: u32,
    local_base: u64,
    next_post: Vec<u32>,
    next_done: Vec<u32>,
    atomic_val: Vec<u64>,
    expect: HashMap<u64, Expect>,
    /// Completion latencies (bounded memory: a soak's client runs for many minutes).
    latencies_ns: ferroce_workload::LatencyHist,
    pub errors: Vec<String>,
    pub completed: u64,
    pub bytes: u64,
    started: Option<Instant>,
    finished: Option<Instant>,
    closed: bool,
    scratch: Vec<u8>,
    /// Commands not yet sent (see [`ClientApp::flush`]).
    staged: Vec<Command>,
    /// Sent only by [`ClientApp::flush`] (a driver that handles a batch of outputs, then
    /// rings once); otherwise at the end of each [`ClientApp::on_output`].
    pub batched: bool,
}

impl ClientApp {
    pub fn new(h: EngineHandle, spec: &WorkloadSpec, peer: Ipv4Addr, keys: ServerKeys) -> Self {
        let ms = spec.max_size() as u64;
        let local_base = 0x7000_0000;
        let lkey = h.mem.lock().expect("mem lock").register(
            CLIENT_PD,
            local_base,
            (spec.streams as u64 * spec.depth as u64 * ms) as usize,
            access::LOCAL_WRITE,
        );
        let n = spec.streams as usize;
        ClientApp {
            h,
            spec: spec.clone(),
            peer,
            keys,
            conn: None,
            conn_reply: None,
            lkey,
            local_base,
            next_post: vec![0; n],
            next_done: vec![0; n],
            atomic_val: vec![0; n],
            expect: HashMap::default(),
            latencies_ns: Default::default(),
            errors: Vec::new(),
            completed: 0,
            bytes: 0,
            started: None,
            finished: None,
            closed: false,
            scratch: Vec::new(),
            staged: Vec::new(),
            batched: false,
        }
    }

    /// Open the connection.
    pub fn start(&mut self) {
        self.conn = self.h.connect(self.peer);
        if self.conn.is_none() {
            self.errors.push("engine did not answer connect".into());
        }
    }

    /// Open the connection without waiting for the engine (for an application polled on
    /// the engine's own thread): the id is picked up from the reply later.
    pub fn start_async(&mut self) {
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.h.command(crate::engine::Command::Connect {
            peer: self.peer,
            reply: tx,
        });
        self.conn_reply = Some(rx);
    }

    fn take_reply(&mut self) {
        if self.conn.is_none() {
            if let Some(r) = &self.conn_reply {
                if let Ok(c) = r.try_recv() {
                    self.conn = Some(c);
                }
            }
        }
    }

    pub fn done(&self) -> bool {
        self.finished.is_some() || !self.errors.is_empty() && self.conn.is_none()
    }

    pub fn finished(&self) -> bool {
        self.finished.is_some()
    }

    /// Send the staged commands as one batch (one doorbell).
    pub fn flush(&mut self) {
        if !self.staged.is_empty() {
            self.h.submit(&mut self.staged);
        }
    }

    /// Handle one output of the engine.
    pub fn on_output(&mut self, o: Output) {
        self.handle(o);
        if !self.batched {
            self.flush();
        }
    }

    fn handle(&mut self, o: Output) {
        self.take_reply();
        match o {
            Output::Event(Event::Connected { conn, .. }) if Some(conn) == self.conn => {
                self.started = Some(Instant::now());
                for s in 0..self.spec.streams {
                    self.staged.push(Command::CreateStream {
                        conn,
                        local: s + 1,
                        remote: s + 1,
                        pd: CLIENT_PD,
                    });
                }
                for s in 0..self.spec.streams {
                    for _ in 0..self.spec.depth {
                        self.post_next(s);
                    }
                }
            }
            Output::Event(Event::Failed { .. }) if self.finished.is_none() => {
                self.errors.push("connection failed".into());
                self.finished = Some(Instant::now());
            }
            Output::Event(Event::Closed { .. }) => self.closed = true,
            Output::Event(_) => {}
            Output::Refused { what, wr_id, err } => {
                self.errors
                    .push(format!("{what} wr {wr_id:#x} refused: {err}"));
            }
            Output::Completion(c) => self.on_completion(c),
        }
    }

    fn post_next(&mut self, s: u32) {
        let su = s as usize;
        let i = self.next_post[su];
        if i >= self.spec.messages {
            return;
        }
        self.next_post[su] += 1;
        let Some(conn) = self.conn else { return };
        let (op, size) = self.spec.op_at(s, i);
        let ms = self.spec.max_size() as u64;
        let local = self.local_base
            + (s as u64 * self.spec.depth as u64 + (i % self.spec.depth) as u64) * ms;
        let lay = self.keys.layout;
        if matches!(
            op,
            OpKind::Send | OpKind::SendImm | OpKind::Write | OpKind::WriteImm
        ) {
            // Straight into the send buffer, under the lock (a word-wise fill is shorter
            // than filling a scratch buffer and copying it in).
            if let Ok(mut m) = self.h.mem.lock() {
                if let Some(r) = m.region_mut(self.lkey) {
                    let off = (local - r.addr) as usize;
                    fill_pattern(&mut r.data[off..off + size as usize], s, i);
                }
            }
        }
        let slots = self.spec.write_slots();
        let write_addr = lay.write_base + ((s * slots + i % slots) as u64) * lay.slot;
        let read_addr =
            lay.read_base + ((s as u64 * 4099 + i as u64 * 64) % (self.keys.read_len - ms));
        let atomic_addr = lay.atomic_base + s as u64 * 8;
        let mut orig = 0;
        let (sop, raddr) = match op {
            OpKind::Send => (SendOp::Send { imm: None }, 0),
            OpKind::SendImm => (
                SendOp::Send {
                    imm: Some(imm_of(s, i)),
                },
                0,
            ),
            OpKind::Write | OpKind::WriteImm => (
                SendOp::Write {
                    rkey: self.keys.write_rkey,
                    raddr: write_addr,
                    imm: (op == OpKind::WriteImm).then(|| imm_of(s, i)),
                },
                write_addr,
            ),
            OpKind::Read => (
                SendOp::Read {
                    rkey: self.keys.read_rkey,
                    raddr: read_addr,
                },
                read_addr,
            ),
            OpKind::FetchAdd => {
                orig = self.atomic_val[su];
                self.atomic_val[su] = orig.wrapping_add(i as u64 + 1);
                (
                    SendOp::FetchAdd {
                        rkey: self.keys.atomic_rkey,
                        raddr: atomic_addr,
                        add: i as u64 + 1,
                    },
                    atomic_addr,
                )
            }
            OpKind::CmpSwap => {
                orig = self.atomic_val[su];
                let swap = orig.wrapping_add(1000 + i as u64);
                self.atomic_val[su] = swap;
                (
                    SendOp::CmpSwap {
                        rkey: self.keys.atomic_rkey,
                        raddr: atomic_addr,
                        compare: orig,
                        swap,
                    },
                    atomic_addr,
                )
            }
        };
        let id = wr_id(s, i);
        self.expect.insert(
            id,
            Expect {
                op,
                s,
                i,
                len: size,
                local,
                raddr,
                orig,
                posted: self.h.clock().now(),
            },
        );
        let wr = SendWr {
            wr_id: id,
            op: sop,
            sgl: [Sge {
                lkey: self.lkey,
                addr: local,
                len: size,
            }]
            .into_iter()
            .collect(),
            signaled: true,
            solicited: false,
            fence: false,
        };
        self.staged.push(Command::PostSend {
            conn,
            stream: s + 1,
            wr,
        });
    }

    fn on_completion(&mut self, c: Completion) {
        let Some(x) = self.expect.remove(&c.wr_id) else {
            self.errors
                .push(format!("unexpected or duplicate completion {c:?}"));
            return;
        };
        let su = x.s as usize;
        if self.next_done[su] != x.i {
            self.errors.push(format!(
                "stream {} completed wr {} before wr {}",
                x.s, x.i, self.next_done[su]
            ));
        }
        self.next_done[su] = x.i + 1;
        if c.status != Status::Success {
            self.errors.push(format!(
                "stream {} wr {} ({:?}) failed: {:?}",
                x.s, x.i, x.op, c.status
            ));
        } else {
            if matches!(x.op, OpKind::Read | OpKind::FetchAdd | OpKind::CmpSwap) {
                self.scratch.resize(x.len as usize, 0);
                if let Ok(m) = self.h.mem.lock() {
                    if let Some(r) = m.region(self.lkey) {
                        let off = (x.local - r.addr) as usize;
                        self.scratch
                            .copy_from_slice(&r.data[off..off + x.len as usize]);
                    }
                }
                let buf = &self.scratch;
                if x.op == OpKind::Read {
                    let base = x.raddr - self.keys.layout.read_base;
                    if let Some(j) =
                        (0..buf.len()).find(|&j| buf[j] != read_source_byte(base + j as u64))
                    {
                        self.errors
                            .push(format!("stream {} read {}: byte {j} wrong", x.s, x.i));
                    }
                } else {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&buf[..8]);
                    let got = u64::from_ne_bytes(b);
                    if got != x.orig {
                        self.errors.push(format!(
                            "stream {} atomic {}: original {got}, expected {}",
                            x.s, x.i, x.orig
                        ));
                    }
                }
            }
            if !x.op.is_atomic() {
                self.bytes += x.len as u64;
            }
            self.completed += 1;
        }
        self.latencies_ns
            .record(self.h.clock().now().saturating_sub(x.posted));
        self.post_next(x.s);
        if self.next_done.iter().all(|&d| d >= self.spec.messages) && self.finished.is_none() {
            self.finished = Some(Instant::now());
            if let Some(conn) = self.conn {
                self.staged.push(Command::Close { conn });
            }
        }
    }

    pub fn result(&self) -> WorkloadResult {
        let elapsed = match (self.started, self.finished) {
            (Some(a), Some(b)) => b.duration_since(a).as_secs_f64(),
            (Some(a), None) => a.elapsed().as_secs_f64(),
            _ => 0.0,
        };
        let q = |f: f64| self.latencies_ns.quantile(f) as f64 / 1000.0;
        let total = self.spec.streams as u64 * self.spec.messages as u64;
        let mut errors = self.errors.clone();
        if self.completed != total && errors.is_empty() {
            errors.push(format!(
                "only {} of {total} work requests completed",
                self.completed
            ));
        }
        WorkloadResult {
            role: "client".into(),
            ok: errors.is_empty() && self.completed == total,
            errors,
            completed: self.completed,
            bytes: self.bytes,
            elapsed_s: elapsed,
            goodput_gbps: if elapsed > 0.0 {
                self.bytes as f64 * 8.0 / elapsed / 1e9
            } else {
                0.0
            },
            msgs_per_s: if elapsed > 0.0 {
                self.completed as f64 / elapsed
            } else {
                0.0
            },
            latency_p50_us: q(0.5),
            latency_p99_us: q(0.99),
            fleet: None,
        }
    }
}

/// The server: streams ready on accept, receives kept posted, every arrival verified; the
/// write area is verified when the client closes.
pub struct ServerApp {
    h: EngineHandle,
    pub spec: WorkloadSpec,
    pub keys: ServerKeys,
    recv_lkey: u32,
    consuming: Vec<Vec<u32>>,
    next_recv: Vec<u32>,
    pub errors: Vec<String>,
    pub recvs_done: u64,
    pub bytes: u64,
    pub conns: Vec<ConnId>,
    closed: bool,
    started: Option<Instant>,
    /// The client's idle connections (`workload.connections`), accepted before the
    /// workload's own.
    pub fleet: Option<fleet::FleetServer>,
    /// Receives not yet posted (see [`ServerApp::flush`]).
    staged: Vec<Command>,
    /// As [`ClientApp::batched`].
    pub batched: bool,
}

impl ServerApp {
    pub fn new(h: EngineHandle, spec: &WorkloadSpec) -> Self {
        // The keys are this registration's (in-process clients take them from `keys`); a client
        // in another process predicts them with `server_keys`, which holds only for a server
        // whose engine memory is fresh, as `ferroce-dp` servers are (it then takes the
        // workload's keys, see `workload_regions`).
        let (keys, recv_lkey) = {
            let mut mem = h.mem.lock().expect("mem lock");
            if mem.iter().next().is_none() {
                *mem = workload_regions(spec);
            }
            register_server(&mut mem, spec)
        };
        h.listen(
            (0..spec.streams)
                .map(|s| (s + 1, s + 1, SERVER_PD))
                .collect(),
        );
        ServerApp {
            h,
            spec: spec.clone(),
            keys,
            recv_lkey,
            consuming: (0..spec.streams).map(|s| spec.consuming(s)).collect(),
            next_recv: vec![0; spec.streams as usize],
            errors: Vec::new(),
            recvs_done: 0,
            bytes: 0,
            conns: Vec::new(),
            closed: false,
            started: None,
            fleet: None,
            staged: Vec::new(),
            batched: false,
        }
    }

    /// Expect `n` idle connections before the workload's (see [`fleet`]); their memory is
    /// sampled `settle` after the last is accepted.
    pub fn with_fleet(mut self, n: u32, settle: Duration) -> Self {
        if n > 0 {
            self.fleet = Some(fleet::FleetServer::new(n, settle));
        }
        self
    }

    /// The client closed its connection (its work is all done), and its idle ones.
    pub fn closed(&self) -> bool {
        self.closed && self.fleet.as_ref().is_none_or(|f| f.all_closed())
    }

    /// Post the staged receives as one batch (one doorbell).
    pub fn flush(&mut self) {
        if !self.staged.is_empty() {
            self.h.submit(&mut self.staged);
        }
    }

    pub fn on_output(&mut self, o: Output) {
        self.handle(o);
        if !self.batched {
            self.flush();
        }
    }

    fn handle(&mut self, o: Output) {
        match o {
            Output::Event(Event::Accepted { conn, .. })
                if self.fleet.as_mut().is_some_and(|f| f.accepted(conn)) => {}
            Output::Event(Event::Closed { conn })
                if self.fleet.as_mut().is_some_and(|f| f.closed(conn)) => {}
            Output::Event(Event::Accepted { conn, .. }) => {
                self.started = Some(Instant::now());
                self.conns.push(conn);
                for s in 0..self.spec.streams {
                    for _ in 0..self.spec.recv_depth {
                        self.post_recv(conn, s);
                    }
                }
            }
            Output::Event(Event::Closed { .. }) => self.closed = true,
            Output::Event(Event::Failed { .. }) => {
                self.errors.push("connection failed".into());
                self.closed = true;
            }
            Output::Event(_) => {}
            Output::Refused { what, wr_id, err } => {
                self.errors
                    .push(format!("{what} wr {wr_id:#x} refused: {err}"));
            }
            Output::Completion(c) => self.on_completion(c),
        }
    }

    fn post_recv(&mut self, conn: ConnId, s: u32) {
        let k = self.next_recv[s as usize];
        if k as usize >= self.consuming[s as usize].len() {
            return;
        }
        self.next_recv[s as usize] += 1;
        let slot = (s * self.spec.recv_depth + k % self.spec.recv_depth) as u64;
        let wr = RecvWr {
            wr_id: wr_id(s, k),
            sgl: [Sge {
                lkey: self.recv_lkey,
                addr: self.keys.layout.recv_base + slot * self.keys.layout.slot,
                len: self.keys.layout.slot as u32,
            }]
            .into_iter()
            .collect(),
        };
        self.staged.push(Command::PostRecv {
            conn,
            stream: s + 1,
            wr,
        });
    }

    fn on_completion(&mut self, c: Completion) {
        let s = (c.wr_id >> 32) as u32;
        let k = c.wr_id as u32;
        let Some(&i) = self
            .consuming
            .get(s as usize)
            .and_then(|v| v.get(k as usize))
        else {
            self.errors
                .push(format!("unexpected receive completion {c:?}"));
            return;
        };
        if c.status != Status::Success {
            self.errors
                .push(format!("stream {s} receive {k} failed: {:?}", c.status));
            return;
        }
        self.recvs_done += 1;
        let (op, size) = self.spec.op_at(s, i);
        self.bytes += c.byte_len as u64;
        if c.byte_len != size {
            self.errors.push(format!(
                "stream {s} recv {k}: {} bytes, expected {size}",
                c.byte_len
            ));
        }
        let want_imm = matches!(op, OpKind::SendImm | OpKind::WriteImm).then(|| imm_of(s, i));
        if c.imm != want_imm {
            self.errors.push(format!(
                "stream {s} recv {k}: imm {:?}, expected {want_imm:?}",
                c.imm
            ));
        }
        let lay = self.keys.layout;
        let slots = self.spec.write_slots();
        let (key, addr) = if op == OpKind::WriteImm {
            (
                self.keys.write_rkey,
                lay.write_base + ((s * slots + i % slots) as u64) * lay.slot,
            )
        } else {
            (
                self.recv_lkey,
                lay.recv_base
                    + ((s * self.spec.recv_depth + k % self.spec.recv_depth) as u64) * lay.slot,
            )
        };
        // Checked in place, under the lock (no copy out first).
        let wrong = match self.h.mem.lock() {
            Ok(m) => match m.region(key) {
                Some(r) => {
                    let off = (addr - r.addr) as usize;
                    check_fast(&r.data[off..off + size as usize], s, i)
                }
                None => Some(0),
            },
            Err(_) => Some(0),
        };
        if let Some(j) = wrong {
            self.errors
                .push(format!("stream {s} message {i} ({op:?}): byte {j} wrong"));
        }
        let conn = c.conn;
        self.post_recv(conn, s);
    }

    /// Check the write area against the last write to each slot (after the client is done).
    pub fn verify_writes(&mut self) {
        let spec = &self.spec;
        let m = match self.h.mem.lock() {
            Ok(m) => m,
            Err(p) => p.into_inner(),
        };
        let Some(region) = m.region(self.keys.write_rkey) else {
            self.errors.push("write region missing".into());
            return;
        };
        let slots = spec.write_slots();
        for s in 0..spec.streams {
            let mut last: HashMap<u32, (u32, u32)> = HashMap::default();
            for i in 0..spec.messages {
                let (op, size) = spec.op_at(s, i);
                if matches!(op, OpKind::Write | OpKind::WriteImm) {
                    last.insert(i % slots, (i, size));
                }
            }
            for (slot, (i, size)) in last {
                let off = ((s * slots + slot) as u64 * self.keys.layout.slot) as usize;
                if let Some(j) = check_fast(&region.data[off..off + size as usize], s, i) {
                    self.errors.push(format!(
                        "stream {s} write {i}: byte {j} wrong in server memory"
                    ));
                }
            }
        }
    }

    /// Receives the workload makes the server complete.
    pub fn expected_recvs(&self) -> u64 {
        self.consuming.iter().map(|v| v.len() as u64).sum()
    }

    pub fn result(&self) -> WorkloadResult {
        let mut errors = self.errors.clone();
        if self.recvs_done != self.expected_recvs() && errors.is_empty() {
            errors.push(format!(
                "{} of {} receives completed",
                self.recvs_done,
                self.expected_recvs()
            ));
        }
        let elapsed = self
            .started
            .map(|t| t.elapsed().as_secs_f64())
            .unwrap_or(0.0);
        WorkloadResult {
            role: "server".into(),
            ok: errors.is_empty(),
            errors,
            completed: self.recvs_done,
            bytes: self.bytes,
            elapsed_s: elapsed,
            ..Default::default()
        }
    }
}

/// Run a client to the end (or `timeout`); its memory is the engine's.
pub fn run_client(
    h: &EngineHandle,
    spec: &WorkloadSpec,
    peer: Ipv4Addr,
    keys: ServerKeys,
    timeout: Duration,
) -> WorkloadResult {
    run_client_fleet(h, spec, peer, keys, timeout, 0, Duration::ZERO)
}

/// [`run_client`] with `fleet` idle connections opened first, held through the workload and
/// closed after it (see [`fleet`]); their memory is sampled `settle` after the last READ.
pub fn run_client_fleet(
    h: &EngineHandle,
    spec: &WorkloadSpec,
    peer: Ipv4Addr,
    keys: ServerKeys,
    timeout: Duration,
    fleet: u32,
    settle: Duration,
) -> WorkloadResult {
    let fleet =
        (fleet > 0).then(|| fleet::FleetClient::open(h, fleet, peer, keys, settle, timeout));
    if let Some(f) = fleet.as_ref().filter(|f| !f.res.errors.is_empty()) {
        let r = WorkloadResult {
            role: "client".into(),
            ..Default::default()
        };
        return r.with_fleet(f.res.clone());
    }
    let r = run_workload_client(h, spec, peer, keys, timeout);
    match fleet {
        Some(f) => r.with_fleet(f.close(Duration::from_secs(5))),
        None => r,
    }
}

fn run_workload_client(
    h: &EngineHandle,
    spec: &WorkloadSpec,
    peer: Ipv4Addr,
    keys: ServerKeys,
    timeout: Duration,
) -> WorkloadResult {
    let mut c = ClientApp::new(h.clone(), spec, peer, keys);
    c.start();
    let t0 = Instant::now();
    while !c.finished() && t0.elapsed() < timeout && !h.stopped() {
        if let Some(o) = h.next(Duration::from_millis(5)) {
            c.on_output(o);
        }
    }
    // Let the CLOSE handshake finish so the server sees it.
    let t1 = Instant::now();
    while !c.closed && t1.elapsed() < Duration::from_millis(500) && c.finished() {
        if let Some(o) = h.next(Duration::from_millis(5)) {
            c.on_output(o);
        }
    }
    if !c.finished() {
        c.errors.push(format!(
            "timed out after {:.1} s with {} of {} work requests done",
            timeout.as_secs_f64(),
            c.completed,
            spec.streams as u64 * spec.messages as u64
        ));
    }
    c.result()
}

/// Run a server until the client closes (or `timeout`), then verify its write area.
pub fn run_server(h: &EngineHandle, spec: &WorkloadSpec, timeout: Duration) -> WorkloadResult {
    serve(ServerApp::new(h.clone(), spec), h, timeout)
}

/// Run a server made beforehand (`ferroce dataplane run` makes it before its engine starts,
/// so the listen command is queued before any OPEN can arrive) until its client closed.
pub fn serve(mut s: ServerApp, h: &EngineHandle, timeout: Duration) -> WorkloadResult {
    let t0 = Instant::now();
    if let Some(f) = s.fleet.as_mut() {
        f.start();
    }
    while !s.closed() && t0.elapsed() < timeout && !h.stopped() {
        if let Some(o) = h.next(Duration::from_millis(5)) {
            s.on_output(o);
        }
        let others = !s.conns.is_empty();
        if let Some(f) = s.fleet.as_mut() {
            f.poll(others);
        }
    }
    if !s.closed() {
        s.errors.push(format!(
            "timed out after {:.1} s: the client never closed ({} receives done)",
            timeout.as_secs_f64(),
            s.recvs_done
        ));
    }
    s.verify_writes();
    let r = s.result();
    match s.fleet.take() {
        Some(f) => r.with_fleet(f.res),
        None => r,
    }
}

/// A client and a server application polled together, without blocking: for running them
/// on the engines' own thread (no hand-off between threads at all).
pub struct PairDriver {
    pub client: ClientApp,
    pub server: ServerApp,
    ch: EngineHandle,
    sh: EngineHandle,
}

impl PairDriver {
    pub fn new(
        client: &EngineHandle,
        server: &EngineHandle,
        server_ip: Ipv4Addr,
        spec: &WorkloadSpec,
    ) -> Self {
        let mut sv = ServerApp::new(server.clone(), spec);
        let mut cl = ClientApp::new(client.clone(), spec, server_ip, sv.keys);
        // Each step drains a batch of outputs and answers it with one batch of posts.
        cl.batched = true;
        sv.batched = true;
        cl.start_async();
        PairDriver {
            client: cl,
            server: sv,
            ch: client.clone(),
            sh: server.clone(),
        }
    }

    /// Handle what the engines produced, each side's outputs as one batch answered by one
    /// batch of posts; true if anything was.
    pub fn step(&mut self) -> bool {
        let (cl, sv) = (&mut self.client, &mut self.server);
        let mut n = self.ch.drain(usize::MAX, |o| cl.on_output(o));
        n += self.sh.drain(usize::MAX, |o| sv.on_output(o));
        cl.flush();
        sv.flush();
        n > 0
    }

    pub fn done(&self) -> bool {
        self.client.finished() && self.server.closed()
    }

    /// Final results (verifies the server's write area).
    pub fn finish(mut self, timed_out: bool) -> (WorkloadResult, WorkloadResult) {
        if timed_out && !self.client.finished() {
            let spec = &self.client.spec;
            let msg = format!(
                "timed out with {} of {} work requests done",
                self.client.completed,
                spec.streams as u64 * spec.messages as u64
            );
            self.client.errors.push(msg);
        }
        self.server.verify_writes();
        (self.client.result(), self.server.result())
    }
}

/// Run a client and a server (two engines, e.g. joined by net_ring) from one thread.
pub fn run_pair(
    client: &EngineHandle,
    server: &EngineHandle,
    client_ip: Ipv4Addr,
    server_ip: Ipv4Addr,
    spec: &WorkloadSpec,
    timeout: Duration,
) -> (WorkloadResult, WorkloadResult) {
    let _ = client_ip;
    let mut sv = ServerApp::new(server.clone(), spec);
    let mut cl = ClientApp::new(client.clone(), spec, server_ip, sv.keys);
    cl.start();
    let t0 = Instant::now();
    // Poll both queues; yield while there is traffic, sleep only after ~1 ms of silence.
    let mut quiet = 0u32;
    while !(cl.finished() && sv.closed()) && t0.elapsed() < timeout {
        let mut any = false;
        while let Some(o) = client.try_next() {
            cl.on_output(o);
            any = true;
        }
        while let Some(o) = server.try_next() {
            sv.on_output(o);
            any = true;
        }
        if any {
            quiet = 0;
        } else {
            quiet += 1;
            if quiet > 5_000 {
                std::thread::sleep(Duration::from_micros(20));
            } else {
                std::thread::yield_now();
            }
        }
    }
    if !cl.finished() {
        cl.errors.push(format!(
            "timed out after {:.1} s with {} of {} work requests done",
            timeout.as_secs_f64(),
            cl.completed,
            spec.streams as u64 * spec.messages as u64
        ));
    }
    sv.verify_writes();
    (cl.result(), sv.result())
}

/// Poll `engines` and a [`PairDriver`] on this one thread until the workload is
/// done or `timeout`; true if it timed out.
pub fn drive(
    engines: &mut [crate::engine::Engine],
    app: &mut PairDriver,
    timeout: Duration,
) -> bool {
    let t0 = std::time::Instant::now();
    let mut n = 0u32;
    loop {
        for e in engines.iter_mut() {
            e.poll();
        }
        app.step();
        n = n.wrapping_add(1);
        if n.is_multiple_of(256) {
            if app.done() {
                return false;
            }
            if t0.elapsed() > timeout {
                return true;
            }
        }
    }
}
