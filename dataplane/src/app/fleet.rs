//! Many idle connections beside the workload (`workload.connections`, issue 18 item 4): the
//! client opens them before its workload, READs 4 KiB once on each (every byte verified),
//! holds them open and idle through the workload and closes them at its end. Each side
//! states its whole process's heap growth per idle connection, sampled after the engine has
//! compacted them (`engine.compact_interval_ms`): the transport's state, the engine's tables
//! and the application's bookkeeping together, which is what a user pays.

use super::{ServerKeys, CLIENT_PD};
use crate::engine::{Command, EngineHandle, Output};
use ferroce_transport::mem::access;
use ferroce_transport::*;
use ferroce_workload::read_source_byte;
use rustc_hash::FxHashMap as HashMap;
use serde::Serialize;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// Bytes each idle connection READs once before it goes idle.
pub const FLEET_READ: u32 = 4096;
/// Where those READs land in the client (one buffer: every READ brings the same bytes).
const FLEET_BASE: u64 = 0x6000_0000;
/// Work request ids of the fleet's READs (the workload's own ids are stream << 32 | index,
/// with streams far below this bit).
const FLEET_WR: u64 = 1 << 63;

/// What the idle connections did and cost.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FleetResult {
    pub connections: u32,
    /// Established (client) or accepted (server).
    pub opened: u32,
    /// READs completed with every byte right (client).
    pub reads_ok: u32,
    /// Closed at the end.
    pub closed: u32,
    /// From the first connect to the last READ's completion (client), from the first
    /// accept to the last (server).
    pub open_s: f64,
    /// Live heap of the process before the first connection and once they were idle.
    pub heap_before: Option<i64>,
    pub heap_idle: Option<i64>,
    /// (heap_idle - heap_before) / connections.
    pub heap_per_conn: Option<f64>,
    pub errors: Vec<String>,
}

impl FleetResult {
    fn new(n: u32) -> Self {
        FleetResult {
            connections: n,
            heap_before: crate::cpu::heap_live_bytes(),
            ..Default::default()
        }
    }

    fn sample_idle(&mut self) {
        self.heap_idle = crate::cpu::heap_live_bytes();
        if let (Some(a), Some(b)) = (self.heap_before, self.heap_idle) {
            self.heap_per_conn = Some((b - a) as f64 / self.connections.max(1) as f64);
        }
    }
}

/// The client's idle connections.
pub struct FleetClient {
    h: EngineHandle,
    conns: Vec<ConnId>,
    index: HashMap<ConnId, u32>,
    lkey: u32,
    pub res: FleetResult,
}

impl FleetClient {
    /// Open `n` connections to `peer`, READ once on each and wait until all are done, then
    /// `settle` more (the engine compacts them meanwhile) and sample the heap.
    pub fn open(
        h: &EngineHandle,
        n: u32,
        peer: Ipv4Addr,
        keys: ServerKeys,
        settle: Duration,
        timeout: Duration,
    ) -> FleetClient {
        let lkey = h.mem.lock().expect("mem lock").register(
            CLIENT_PD,
            FLEET_BASE,
            FLEET_READ as usize,
            access::LOCAL_WRITE,
        );
        // The bookkeeping is sized before the heap is read: it is the test's, not a cost of
        // the connections.
        let mut f = FleetClient {
            h: h.clone(),
            conns: Vec::with_capacity(n as usize),
            index: HashMap::with_capacity_and_hasher(n as usize, Default::default()),
            lkey,
            res: FleetResult::default(),
        };
        f.res = FleetResult::new(n);
        let t0 = Instant::now();
        let mut done = 0u32;
        for _ in 0..n {
            match h.connect(peer) {
                Some(c) => {
                    f.index.insert(c, f.conns.len() as u32);
                    f.conns.push(c);
                }
                None => {
                    f.res.errors.push("engine did not answer connect".into());
                    break;
                }
            }
            while let Some(o) = h.try_next() {
                done += f.on_output(o, &keys);
            }
        }
        while done < f.conns.len() as u32 && t0.elapsed() < timeout && !h.stopped() {
            if let Some(o) = h.next(Duration::from_millis(5)) {
                done += f.on_output(o, &keys);
            }
        }
        f.res.open_s = t0.elapsed().as_secs_f64();
        if done < n {
            f.res.errors.push(format!(
                "{done} of {n} idle connections done after {:.1} s ({} established, {} READs \
                 right)",
                f.res.open_s, f.res.opened, f.res.reads_ok
            ));
            return f;
        }
        let t1 = Instant::now();
        while t1.elapsed() < settle {
            if let Some(o) = h.next(Duration::from_millis(5)) {
                f.on_output(o, &keys);
            }
        }
        f.res.sample_idle();
        f
    }

    /// Handle an output of the fleet phase; 1 when a connection is done (READ right, or
    /// failed).
    fn on_output(&mut self, o: Output, keys: &ServerKeys) -> u32 {
        match o {
            Output::Event(Event::Connected { conn, .. }) => {
                let Some(&k) = self.index.get(&conn) else {
                    return 0;
                };
                self.res.opened += 1;
                let wr = SendWr {
                    wr_id: FLEET_WR | k as u64,
                    op: SendOp::Read {
                        rkey: keys.read_rkey,
                        raddr: keys.layout.read_base,
                    },
                    sgl: [Sge {
                        lkey: self.lkey,
                        addr: FLEET_BASE,
                        len: FLEET_READ,
                    }]
                    .into_iter()
                    .collect(),
                    signaled: true,
                    solicited: false,
                    fence: false,
                };
                let mut cmds = vec![
                    Command::CreateStream {
                        conn,
                        local: 1,
                        remote: 1,
                        pd: CLIENT_PD,
                    },
                    Command::PostSend {
                        conn,
                        stream: 1,
                        wr,
                    },
                ];
                self.h.submit(&mut cmds);
                0
            }
            Output::Event(Event::Failed { conn }) if self.index.contains_key(&conn) => {
                self.res
                    .errors
                    .push(format!("idle connection {} failed", conn.0));
                1
            }
            Output::Completion(c) if c.wr_id & FLEET_WR != 0 => {
                if c.status != Status::Success {
                    self.res
                        .errors
                        .push(format!("idle connection {}: READ {:?}", c.conn.0, c.status));
                    return 1;
                }
                let wrong = match self.h.mem.lock() {
                    Ok(m) => m.region(self.lkey).and_then(|r| {
                        r.data[..FLEET_READ as usize]
                            .iter()
                            .enumerate()
                            .position(|(j, &b)| b != read_source_byte(j as u64))
                    }),
                    Err(_) => Some(0),
                };
                match wrong {
                    Some(j) => self
                        .res
                        .errors
                        .push(format!("idle connection {}: READ byte {j} wrong", c.conn.0)),
                    None => self.res.reads_ok += 1,
                }
                1
            }
            Output::Refused { what, wr_id, err } => {
                self.res.errors.push(format!(
                    "idle connections: {what} {wr_id:#x} refused: {err:?}"
                ));
                0
            }
            _ => 0,
        }
    }

    /// Close them all and wait (at most `wait`) for the closes to finish.
    pub fn close(mut self, wait: Duration) -> FleetResult {
        let mut cmds: Vec<Command> = self
            .conns
            .iter()
            .map(|&conn| Command::Close { conn })
            .collect();
        self.h.submit(&mut cmds);
        let t0 = Instant::now();
        while self.res.closed < self.conns.len() as u32 && t0.elapsed() < wait {
            match self.h.next(Duration::from_millis(5)) {
                Some(Output::Event(Event::Closed { conn })) if self.index.contains_key(&conn) => {
                    self.res.closed += 1
                }
                Some(Output::Event(Event::Failed { conn })) if self.index.contains_key(&conn) => {
                    self.res
                        .errors
                        .push(format!("idle connection {} failed while closing", conn.0));
                    self.res.closed += 1;
                }
                _ => {}
            }
        }
        if self.res.closed < self.conns.len() as u32 {
            self.res.errors.push(format!(
                "{} of {} idle connections closed",
                self.res.closed,
                self.conns.len()
            ));
        }
        self.res
    }
}

/// The server's side: the first `connections` accepted are the client's idle ones (it opens
/// them before its workload's); their memory is sampled `settle` after the last was accepted.
pub struct FleetServer {
    conns: HashMap<ConnId, ()>,
    first: Option<Instant>,
    last: Option<Instant>,
    settle: Duration,
    pub res: FleetResult,
}

impl FleetServer {
    pub fn new(n: u32, settle: Duration) -> Self {
        FleetServer {
            conns: HashMap::with_capacity_and_hasher(n as usize, Default::default()),
            first: None,
            last: None,
            settle,
            res: FleetResult::new(n),
        }
    }

    /// Read the heap before any connection (when the engine runs).
    pub fn start(&mut self) {
        self.res.heap_before = crate::cpu::heap_live_bytes();
    }

    /// An accepted connection: true if it is one of the idle ones.
    pub fn accepted(&mut self, conn: ConnId) -> bool {
        if self.res.opened >= self.res.connections {
            return false;
        }
        let now = Instant::now();
        self.first.get_or_insert(now);
        self.last = Some(now);
        self.res.opened += 1;
        self.conns.insert(conn, ());
        if self.res.opened == self.res.connections {
            self.res.open_s = now.duration_since(self.first.unwrap_or(now)).as_secs_f64();
        }
        true
    }

    /// A connection closed: true if it is one of the idle ones.
    pub fn closed(&mut self, conn: ConnId) -> bool {
        if self.conns.contains_key(&conn) {
            self.res.closed += 1;
            true
        } else {
            false
        }
    }

    pub fn all_closed(&self) -> bool {
        self.res.closed >= self.res.connections
    }

    /// Sample the heap once all are open and `settle` passed; `others`: connections beyond
    /// the idle ones exist already (the sample would count them: an error).
    pub fn poll(&mut self, others: bool) {
        if self.res.heap_idle.is_some() || self.res.opened < self.res.connections {
            return;
        }
        if self.last.is_some_and(|t| t.elapsed() >= self.settle) {
            if others {
                self.res.errors.push(
                    "the workload's connection opened before the idle connections' memory \
                     was sampled (the client's settle must exceed the server's)"
                        .into(),
                );
            }
            self.res.sample_idle();
        }
    }
}
