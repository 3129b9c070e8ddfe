//! The poll-mode engine: one packet I/O (a DPDK port, with faults and capture stacked on it
//! when asked: [`crate::io`]), one transport, one run loop.
//!
//! Each [`Engine::poll`]: application commands → rx burst → Ethernet/ARP/IPv4/UDP →
//! `Transport::handle_datagram` → timers → `poll_transmit` straight into mbufs → tx burst →
//! completions and events to the application.
//!
//! Copies: received payloads are handed to the transport in place (the mbuf's bytes), and the
//! transport writes each datagram straight into the mbuf it is sent from. The one copy left on
//! each side is placement itself (registered memory ↔ mbuf, done by [`Memory`]); removing it
//! needs external-buffer mbufs attached to registered memory, which DPDK allows but the
//! transport's `Memory` interface (copy in / copy out) does not express yet.
//!
//! The application side talks to the engine through two batched single-producer rings
//! ([`EngineHandle`], [`ring`]): commands in (a batch of work requests is one doorbell),
//! outputs out (one batch per poll, drained in bulk); it shares registered memory with it
//! ([`SharedMem`], locked by the engine for each access only).

mod arp;
mod handle;
mod mem;
pub mod ring;
mod shard;
mod shared;
pub use shard::{shard_of, sharded, DispatchIo, ShardIo, ShardedHandle};
pub use shared::SharedEngine;

/// What an idle engine loop does next (see [`Engine::idle_plan`]).
pub(crate) enum Idle {
    Spin,
    Yield,
    Sleep(u64),
}

pub use handle::{Command, EngineHandle, Output, OutputSink, TransportCall, TransportFn};
use mem::LockedMem;
use ring::{Bell, RingRx, RingTx};

use crate::counters::{self, PortCounters};
use crate::fault::{FaultConfig, FaultCounters, FaultInjector};
use crate::io::{DpdkIo, PacketIo};
use crate::net::{self, Arp, Frame, UdpHeader};
use crate::pcap::PcapWriter;
use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};
use ferroce_dpdk_sys::{rdtsc, Mbuf, Mempool, Port};
use ferroce_transport::mem::{AtomicOp, MemError, Memory, Regions};
use ferroce_transport::{
    Completion, ConnId, ConnState, Endpoint, Event, PostError, RecvWr, RxDatagram, SendWr,
    Transport,
};
use rustc_hash::FxHashMap as HashMap;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// RoCEv2's UDP port (IANA).
const ROCEV2_UDP_PORT: u16 = 4791;

/// Registered memory shared by the application and the engine.
pub type SharedMem = Arc<Mutex<Regions>>;

/// The most transport bytes a datagram may add around its payload (largest header + CRC),
/// rounded up: the transport's payload MTU is the IP MTU minus IPv4, UDP and this.
pub const TRANSPORT_OVERHEAD: usize = 64;

/// The transport payload MTU for an IP MTU.
pub fn payload_mtu(ip_mtu: u16) -> u16 {
    ip_mtu.saturating_sub((net::IPV4_LEN + net::UDP_LEN + TRANSPORT_OVERHEAD) as u16)
}

/// Nanoseconds from the TSC.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    t0: u64,
    /// ns per tick, as a 32.32 fixed-point number.
    mult: u128,
}

impl Clock {
    pub fn new(tsc_hz: u64) -> Self {
        Clock {
            t0: rdtsc(),
            mult: (1_000_000_000u128 << 32) / tsc_hz.max(1) as u128,
        }
    }

    #[inline]
    pub fn now(&self) -> u64 {
        ((rdtsc().wrapping_sub(self.t0) as u128 * self.mult) >> 32) as u64
    }
}

/// Engine settings (built from the TOML configuration, or by hand).
#[derive(Clone, Debug)]
pub struct EngineParams {
    pub ip: Ipv4Addr,
    /// IP MTU of the port.
    pub mtu: u16,
    pub burst: u16,
    pub ttl: u8,
    /// Send ECT(0) so the path (or the fault injector) can mark CE.
    pub ecn: bool,
    /// Static neighbours (no ARP needed for them).
    pub neighbors: Vec<(Ipv4Addr, [u8; 6])>,
    pub fault_tx: FaultConfig,
    pub fault_rx: FaultConfig,
    /// Later fault settings ([`crate::fault::FaultStep`]).
    pub fault_schedule: Vec<crate::fault::FaultStep>,
    pub seed: u64,
    pub pcap: Option<PathBuf>,
    pub snaplen: u32,
    pub counters_json: Option<PathBuf>,
    pub counters_interval_ms: u64,
    /// Connections listed one by one in each counters snapshot (the busiest); all of them
    /// are summed in `connections_all` whatever this is.
    pub counters_conns_max: usize,
    /// After this many empty polls in a row the loop sleeps (0: never sleep, pure polling).
    pub idle_polls_before_sleep: u32,
    pub idle_sleep_us: u64,
    /// Give idle connections' spare capacity back this often (`Transport::compact_idle`,
    /// a walk over every connection; 0: never).
    pub compact_interval_ms: u64,
    /// Capacity of each application ↔ engine ring (commands in, outputs out).
    pub queue_depth: usize,
    /// Stop when the link goes down (a peer leaving).
    pub stop_on_link_down: bool,
    /// Verify nonzero UDP checksums of received frames (off for kernel-backed PMDs, whose
    /// frames from the local kernel carry offload's partial checksums).
    pub verify_udp_checksum: bool,
}

impl Default for EngineParams {
    fn default() -> Self {
        EngineParams {
            ip: Ipv4Addr::new(198, 18, 1, 11),
            mtu: 1500,
            burst: 32,
            ttl: 64,
            ecn: true,
            neighbors: Vec::new(),
            fault_tx: FaultConfig::default(),
            fault_rx: FaultConfig::default(),
            fault_schedule: Vec::new(),
            seed: 1,
            pcap: None,
            snaplen: 256,
            counters_json: None,
            counters_interval_ms: 200,
            counters_conns_max: 256,
            idle_polls_before_sleep: 2000,
            idle_sleep_us: 20,
            compact_interval_ms: 1000,
            queue_depth: 4096,
            stop_on_link_down: false,
            verify_udp_checksum: true,
        }
    }
}

/// Connection states as the counters name them, indexed by [`state_index`].
const STATE_NAMES: [&str; 5] = ["opening", "open", "closing", "closed", "failed"];

fn state_index(s: ConnState) -> usize {
    match s {
        ConnState::Opening => 0,
        ConnState::Open => 1,
        ConnState::Closing => 2,
        ConnState::Closed => 3,
        ConnState::Failed => 4,
    }
}

/// Frames queued for an address being resolved.
const ARP_QUEUE_MAX: usize = 1024;
/// ARP requests for one address at most this often.
const ARP_RETRY_NS: u64 = 20_000_000;
/// Unsent frames kept when the PMD is full before new ones are dropped.
const TX_BACKLOG_MAX: usize = 4096;

/// The engine. Build it on the main lcore, move it to the lcore that runs [`Engine::run`].
pub struct Engine {
    io: Box<dyn PacketIo>,
    /// Name and id of the device under the I/O stack, for the counters.
    io_name: String,
    io_id: u16,
    pool: Mempool,
    mac: [u8; 6],
    p: EngineParams,
    transport: Box<dyn Transport + Send>,
    mem: SharedMem,
    neighbors: HashMap<Ipv4Addr, [u8; 6]>,
    arp_queue: VecDeque<(Ipv4Addr, Mbuf, u64)>,
    arp_last_req: HashMap<Ipv4Addr, u64>,
    pub counters: PortCounters,
    ip_id: u16,
    clock: Clock,
    rx: Vec<Mbuf>,
    txq: Vec<Mbuf>,
    tx_out: Vec<Mbuf>,
    spare: Option<Mbuf>,
    cmd_rx: RingRx<Command>,
    /// Commands taken off the ring in this poll (reused).
    cmd_buf: Vec<Command>,
    out_tx: RingTx<Output>,
    /// Outputs of this poll, published to the application as one batch.
    outputs: Vec<Output>,
    accept_streams: Vec<(u32, u32, u32)>,
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<Value>>,
    waker: Arc<crate::wake::Waiter>,
    next_publish: u64,
    next_compact: u64,
    next_link_check: u64,
    udp_port: u16,
    /// The I/O has a link layer (ARP, MACs); without one (the UDP backend) every
    /// destination counts as resolved.
    link_layer: bool,
    payload_room: usize,
    /// The transport's next deadline, refreshed only after the transport was called (asking
    /// it every poll costs a scan of its connections).
    next_timer: Option<u64>,
    timer_dirty: bool,
    /// Embedder hooks: outputs delivered by a call instead of the queue, and registered
    /// memory other than the shared [`Regions`].
    sink: Option<OutputSink>,
    ext_mem: Option<Box<dyn Memory + Send>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("io", &self.io_name)
            .field("ip", &self.p.ip)
            .finish()
    }
}

/// Pacing catch-up of a connection this engine runs: it reads its clock once per poll, and a
/// poll (a burst in, a burst out, the applications' commands) can last longer than one
/// packet's gap at the hinted rate; without credit the rate would be one packet per poll.
pub const ENGINE_PACE_CATCH_UP: u32 = 16;

/// A native-protocol transport sized for `ip_mtu`, in an incarnation of its own: its
/// connection ids are mixed with 64 bits from the OS, so a restarted process (same seed)
/// never takes the previous run's packets for its own (spec/transport.md §2.6).
pub fn native_transport(
    ip_mtu: u16,
    mut cfg: ferroce_transport::EndpointConfig,
) -> std::io::Result<Box<dyn Transport + Send>> {
    cfg.conn.mtu = payload_mtu(ip_mtu);
    cfg.conn.pace_catch_up = cfg.conn.pace_catch_up.max(ENGINE_PACE_CATCH_UP);
    // The core's defaults (the simulator's packet-by-packet pacing) get the engine's batch;
    // a configuration that chose its own keeps it.
    if cfg.conn.pace_burst <= 1 && cfg.conn.pace_quantum_ns == 0 {
        cfg.conn.pace_burst = ferroce_transport::ENGINE_PACE_BURST;
        cfg.conn.pace_quantum_ns = ferroce_transport::ENGINE_PACE_QUANTUM_NS;
    }
    let s = crate::entropy::os_secret()?;
    let mut b = [0u8; 8];
    b.copy_from_slice(&s[..8]);
    cfg.incarnation = u64::from_le_bytes(b);
    Ok(Box::new(Endpoint::new(cfg)))
}

impl Engine {
    /// An engine on a started port, with the fault injectors and the capture `p` asks for
    /// stacked on it. `tsc_hz` comes from [`ferroce_dpdk_sys::Eal::tsc_hz`].
    pub fn new(
        port: Port,
        transport: Box<dyn Transport + Send>,
        p: EngineParams,
        tsc_hz: u64,
    ) -> std::io::Result<(Engine, EngineHandle)> {
        let pool = port.pool().clone();
        Engine::on_device(Box::new(DpdkIo::new(port)), pool, transport, p, tsc_hz)
    }

    /// An engine on a device (a DPDK port, the kernel UDP backend), with the fault injectors
    /// and the capture `p` asks for stacked on it; `pool` gives the mbufs it builds frames in.
    pub fn on_device(
        device: Box<dyn PacketIo>,
        pool: Mempool,
        transport: Box<dyn Transport + Send>,
        p: EngineParams,
        tsc_hz: u64,
    ) -> std::io::Result<(Engine, EngineHandle)> {
        let (pcap, faults) = capture_and_faults(&p)?;
        let io = stack(device, pool.clone(), pcap, Some(faults));
        Engine::with_io(io, pool, transport, p, tsc_hz)
    }

    /// An engine over any packet I/O; `pool` gives the mbufs it builds frames in. `p.pcap`
    /// and the fault settings are not looked at: stack those layers into `io`.
    pub fn with_io(
        io: Box<dyn PacketIo>,
        pool: Mempool,
        transport: Box<dyn Transport + Send>,
        p: EngineParams,
        tsc_hz: u64,
    ) -> std::io::Result<(Engine, EngineHandle)> {
        let caps = io.caps();
        let mut mac = caps.mac;
        if mac == [0; 6] {
            // net_ring ports have no address: a locally administered one from the port id.
            mac = [0x02, 0x66, 0x72, 0x63, (caps.id >> 8) as u8, caps.id as u8];
        }
        let burst = p.burst.min(caps.max_burst).max(1);
        let waker = Arc::new(crate::wake::Waiter::new());
        let (cmd_tx, cmd_rx) = ring::ring(p.queue_depth.max(1), waker.clone());
        let (out_tx, out_rx) =
            ring::ring(p.queue_depth.max(1), Arc::new(crate::wake::Waiter::new()));
        let out_bell = out_rx.bell().clone();
        // Unpredictable keys: a peer that saw one rkey cannot guess another.
        let mem: SharedMem = Arc::new(Mutex::new(Regions::with_keys(crate::entropy::os_keys()?)));
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(Value::Null));
        // Probe how much room a fresh mbuf has for the transport's datagram.
        let payload_room = pool
            .alloc()
            .map(|mut m| m.room_mut().len().saturating_sub(net::HDRS_LEN))
            .unwrap_or(0);
        let udp_port = transport.udp_port();
        if !caps.link_layer && udp_port == ROCEV2_UDP_PORT {
            // docs/design.md, "The kernel UDP backend": the ICRC covers IPv4 fields a
            // kernel socket neither lets us set nor shows us.
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                format!(
                    "RoCEv2 cannot run over the kernel UDP backend ({}): its ICRC covers the \
                     IPv4 identification and flags, which a UDP socket neither sets as asked \
                     nor reports on receive; use the native protocol, or a DPDK port \
                     (port.backend = \"dpdk\")",
                    caps.name
                ),
            ));
        }
        let e = Engine {
            mac,
            neighbors: p.neighbors.iter().copied().collect(),
            arp_queue: VecDeque::new(),
            arp_last_req: HashMap::default(),
            counters: PortCounters::default(),
            ip_id: (p.seed as u16).wrapping_mul(7919),
            clock: Clock::new(tsc_hz),
            rx: Vec::with_capacity(burst as usize),
            txq: Vec::with_capacity(burst as usize * 2),
            tx_out: Vec::with_capacity(burst as usize * 4),
            spare: None,
            cmd_rx,
            cmd_buf: Vec::with_capacity(256),
            out_tx,
            outputs: Vec::new(),
            accept_streams: Vec::new(),
            stop: stop.clone(),
            stats: stats.clone(),
            waker: waker.clone(),
            next_publish: 0,
            next_compact: 0,
            next_link_check: 0,
            udp_port,
            link_layer: caps.link_layer,
            payload_room,
            next_timer: None,
            timer_dirty: true,
            sink: None,
            ext_mem: None,
            io,
            io_name: caps.name,
            io_id: caps.id,
            pool,
            transport,
            mem: mem.clone(),
            p: EngineParams { burst, ..p },
        };
        let h = EngineHandle {
            cmd: Arc::new(Mutex::new(cmd_tx)),
            out: Arc::new(Mutex::new(out_rx)),
            mem,
            stop,
            stats,
            waker,
            out_bell,
            clock: e.clock,
        };
        Ok((e, h))
    }

    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Deliver every completion, event and refusal to `sink`, called on the engine's thread
    /// with the transport, instead of the output queue (the verbs shim routes completions to
    /// its CQs this way, and creates streams on accepted connections before their data).
    pub fn set_output_sink(&mut self, sink: OutputSink) {
        self.sink = Some(sink);
    }

    /// Use `mem` as the registered memory instead of the shared [`Regions`] (the verbs shim's
    /// table over application memory).
    pub fn set_memory(&mut self, mem: Box<dyn Memory + Send>) {
        self.ext_mem = Some(mem);
    }

    pub fn ip(&self) -> Ipv4Addr {
        self.p.ip
    }

    /// Name of the device under the I/O stack.
    pub fn io_name(&self) -> &str {
        &self.io_name
    }

    pub fn transport(&self) -> &dyn Transport {
        &*self.transport
    }

    /// Engine time (ns since the engine was created).
    pub fn now(&self) -> u64 {
        self.clock.now()
    }

    pub fn stop_requested(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Run until stopped; returns the final counters.
    pub fn run(mut self) -> Value {
        let mut idle = 0u32;
        while !self.stop_requested() {
            if self.poll() {
                idle = 0;
            } else {
                idle += 1;
                self.idle(&mut idle);
            }
        }
        self.shutdown()
    }

    /// Sleep a little after many empty polls (shared cores), never past the next timer.
    pub fn idle(&mut self, idle: &mut u32) {
        match self.idle_plan(*idle, false) {
            Idle::Spin => {}
            Idle::Yield => std::thread::yield_now(),
            Idle::Sleep(us) => {
                // Until the next timer, a packet's chance to arrive (the PMD is polled), or
                // a command from the application, which wakes the engine at once.
                let (cmds, io) = (self.cmd_rx.bell(), &self.io);
                self.waker.sleep(us, || cmds.pending() || io.rx_ready());
            }
        }
    }

    /// What to do after `idle` empty polls in a row: keep polling, yield, or sleep up to
    /// the next timer (at most `idle_sleep_us`). `soon`: sleep now, whatever the count.
    pub(crate) fn idle_plan(&mut self, idle: u32, soon: bool) -> Idle {
        let n = self.p.idle_polls_before_sleep;
        if n == 0 || (idle < n && !soon) {
            return Idle::Spin;
        }
        let now = self.clock.now();
        let mut us = self.p.idle_sleep_us;
        if let Some(t) = self.next_timer {
            us = us.min(t.saturating_sub(now) / 1000);
        }
        if us > 0 {
            self.counters.idle_sleeps += 1;
            Idle::Sleep(us)
        } else {
            Idle::Yield
        }
    }

    /// One turn of the loop; true if anything happened.
    pub fn poll(&mut self) -> bool {
        self.counters.polls += 1;
        let now = self.clock.now();
        let mut work = false;
        // Registered memory is locked once per phase (the receive burst, the transmit
        // batch), never across the whole poll, so the application's own accesses wait at
        // most one burst.
        let mem_arc = self.mem.clone();
        let mut locked = LockedMem::new(&mem_arc);
        let mut ext = self.ext_mem.take();
        macro_rules! mem {
            () => {
                match ext.as_mut() {
                    Some(m) => &mut **m as &mut dyn Memory,
                    None => &mut locked as &mut dyn Memory,
                }
            };
        }

        // Application commands, before the packets: what the application asked for came
        // first (a listen command must be in place before the OPEN it is for is read, or
        // the connection is accepted without the streams it should get).
        // One batch off the ring (what was published by now, at most 256).
        let mut cmds = std::mem::take(&mut self.cmd_buf);
        let n = self.cmd_rx.drain(256, |c| cmds.push(c));
        if n > 0 {
            work = true;
            self.counters.commands += n as u64;
            self.counters.command_batches += 1;
            for c in cmds.drain(..) {
                self.command(c);
            }
        }
        self.cmd_buf = cmds;

        // Receive.
        let n = self.io.rx_burst(now, &mut self.rx, self.p.burst);
        if n > 0 {
            work = true;
            let mut rx = std::mem::take(&mut self.rx);
            for m in rx.drain(..) {
                self.counters.rx_frames += 1;
                self.counters.rx_bytes += m.len() as u64;
                self.handle_frame(now, &m, mem!());
            }
            self.rx = rx;
            locked.release();
        }

        // Timers.
        if work || self.timer_dirty {
            self.next_timer = self.transport.poll_timeout();
            self.timer_dirty = false;
        }
        if let Some(t) = self.next_timer {
            if t <= now {
                self.transport.handle_timeout(now);
                self.collect(false);
                work = true;
            }
        }

        // Transmit.
        if self.transmit(now, mem!()) {
            work = true;
        }
        locked.release();
        if work {
            self.timer_dirty = true;
        }
        if self.flush_tx(now) {
            work = true;
        }
        // A sharded engine's dispatcher moving other shards' frames is busy too.
        if self.io.take_moved() {
            work = true;
        }

        // Completions and events to the application.
        if self.deliver() {
            work = true;
        }

        if now >= self.next_publish {
            self.publish(now);
        }
        if now >= self.next_compact && self.p.compact_interval_ms > 0 {
            // The first turn only schedules: nothing is idle yet.
            if self.next_compact > 0 {
                self.transport.compact_idle();
                self.counters.compactions += 1;
                self.timer_dirty = true;
            }
            self.next_compact = now + self.p.compact_interval_ms * 1_000_000;
        }
        if self.p.stop_on_link_down && now >= self.next_link_check {
            self.next_link_check = now + 100_000_000;
            if !self.io.link_up() {
                self.stop.store(true, Ordering::SeqCst);
            }
        }
        self.ext_mem = ext;
        work
    }

    fn command(&mut self, c: Command) {
        let refused = |what, wr_id, err| Output::Refused { what, wr_id, err };
        match c {
            Command::Connect { peer, reply } => {
                let id = self.transport.connect(peer);
                let _ = reply.send(id);
                self.collect(false);
            }
            Command::Listen { streams } => self.accept_streams = streams,
            Command::CreateStream {
                conn,
                local,
                remote,
                pd,
            } => {
                if let Err(e) = self.transport.create_stream(conn, local, remote, pd) {
                    self.counters.post_errors += 1;
                    self.outputs.push(refused("create_stream", 0, e));
                }
            }
            Command::PostSend { conn, stream, wr } => {
                let id = wr.wr_id;
                if let Err(e) = self.transport.post_send(conn, stream, wr) {
                    self.counters.post_errors += 1;
                    self.outputs.push(refused("post_send", id, e));
                }
            }
            Command::PostRecv { conn, stream, wr } => {
                let id = wr.wr_id;
                if let Err(e) = self.transport.post_recv(conn, stream, wr) {
                    self.counters.post_errors += 1;
                    self.outputs.push(refused("post_recv", id, e));
                }
            }
            Command::Close { conn } => {
                if let Err(e) = self.transport.close(conn) {
                    self.outputs.push(refused("close", 0, e));
                }
            }
            Command::Snapshot { reply } => {
                let now = self.clock.now();
                let _ = reply.send(self.snapshot(now));
            }
            Command::Exec(f) => {
                (f.0)(&mut *self.transport);
                self.collect(false);
            }
            Command::Inject { frames } => {
                for f in frames {
                    let Some(mut mb) = self.pool.alloc() else {
                        self.counters.tx_no_mbuf += 1;
                        break;
                    };
                    let n = f.len().min(mb.room_mut().len());
                    mb.room_mut()[..n].copy_from_slice(&f[..n]);
                    mb.set_len(n);
                    self.counters.injected += 1;
                    self.tx_out.push(mb);
                }
            }
        }
    }

    /// Move the transport's events (acting on accepts at once) and, unless `events_only`,
    /// its completions to the output queue.
    fn collect(&mut self, events_only: bool) {
        while let Some(ev) = self.transport.poll_event() {
            if let Event::Accepted { conn, .. } = ev {
                for &(local, remote, pd) in &self.accept_streams {
                    if let Err(e) = self.transport.create_stream(conn, local, remote, pd) {
                        self.counters.post_errors += 1;
                        self.outputs.push(Output::Refused {
                            what: "create_stream (listen)",
                            wr_id: 0,
                            err: e,
                        });
                    }
                }
            }
            self.counters.events += 1;
            self.outputs.push(Output::Event(ev));
        }
        if !events_only {
            while let Some(c) = self.transport.poll_completion() {
                self.counters.completions += 1;
                self.outputs.push(Output::Completion(c));
            }
        }
    }

    fn deliver(&mut self) -> bool {
        self.collect(false);
        if let Some(mut sink) = self.sink.take() {
            let mut any = false;
            // The sink may call the transport, which may produce more.
            while !self.outputs.is_empty() {
                let mut outs = std::mem::take(&mut self.outputs);
                for o in outs.drain(..) {
                    any = true;
                    sink(o, &mut *self.transport);
                }
                // Keep the allocation unless the sink produced more meanwhile.
                if self.outputs.is_empty() {
                    self.outputs = outs;
                }
                self.collect(false);
            }
            self.sink = Some(sink);
            return any;
        }
        if self.outputs.is_empty() {
            return false;
        }
        if self.out_tx.closed() {
            self.outputs.clear();
            return false;
        }
        // One batch, one doorbell; what does not fit waits for the next poll (never dropped).
        let n = self.out_tx.push_batch(&mut self.outputs, false);
        if n > 0 {
            self.counters.output_batches += 1;
        }
        n > 0
    }

    fn handle_frame(&mut self, now: u64, m: &Mbuf, mem: &mut dyn Memory) {
        if m.segments() != 1 {
            self.counters.rx_multiseg += 1;
            return;
        }
        let f = m.data();
        match net::parse_with(
            f,
            self.mac,
            self.p.ip,
            self.udp_port,
            self.p.verify_udp_checksum,
        ) {
            Ok(Frame::Udp(u)) => {
                self.counters.rx_datagrams += 1;
                // The real IPv4 and UDP headers go along: RoCEv2's ICRC covers them.
                let udp_start = u.payload.0 - 8;
                let ip_start = if f[12..14] == [0x81, 0x00] { 18 } else { 14 };
                if let Some(d) = RxDatagram::from_headers(
                    &f[ip_start..udp_start],
                    &f[udp_start..u.payload.0],
                    &f[u.payload.0..u.payload.1],
                ) {
                    self.transport.receive(now, &d, mem);
                }
                // Accepts must create their streams before the next datagram.
                self.collect(true);
            }
            Ok(Frame::Arp(a)) => self.handle_arp(now, &a),
            Err(r) => self.counters.drop(r),
        }
    }

    /// Pull datagrams out of the transport into mbufs.
    fn transmit(&mut self, now: u64, mem: &mut dyn Memory) -> bool {
        let mut any = false;
        let limit = self.p.burst as usize;
        let max_len = self.payload_room;
        // Backpressure: while the PMD has not taken what we gave it, produce nothing new.
        if self.tx_out.len() >= limit * 2 {
            return false;
        }
        while self.txq.len() < limit {
            let mut mb = match self.spare.take().or_else(|| self.pool.alloc()) {
                Some(m) => m,
                None => {
                    self.counters.tx_no_mbuf += 1;
                    break;
                }
            };
            let room = mb.room_mut();
            let Some(t) = self.transport.transmit(
                now,
                &mut room[net::HDRS_LEN..net::HDRS_LEN + max_len],
                mem,
                u64::MAX,
            ) else {
                self.spare = Some(mb);
                break;
            };
            any = true;
            if t.len + net::IPV4_LEN + net::UDP_LEN > self.p.mtu as usize {
                self.counters.tx_oversize += 1;
                self.spare = Some(mb);
                continue;
            }
            self.ip_id = self.ip_id.wrapping_add(1);
            let dst_mac = if self.link_layer {
                self.neighbors.get(&t.dst).copied()
            } else {
                Some([0; 6])
            };
            let h = UdpHeader {
                src_mac: self.mac,
                dst_mac: dst_mac.unwrap_or([0; 6]),
                src_ip: self.p.ip,
                dst_ip: t.dst,
                // RoCEv2's ICRC covers the identification: send the canonical 0
                // (transport/src/roce/mod.rs, "The IPv4/UDP header rule").
                ip_id: if self.udp_port == ROCEV2_UDP_PORT {
                    0
                } else {
                    self.ip_id
                },
                ttl: self.p.ttl,
                ecn: if self.p.ecn { net::ecn::ECT0 } else { 0 },
                src_port: t.src_port,
                dst_port: t.dst_port,
            };
            let n = net::write_udp(room, &h, t.len);
            mb.set_len(n);
            self.counters.tx_datagrams += 1;
            if dst_mac.is_some() {
                self.txq.push(mb);
            } else {
                self.counters.arp_queued += 1;
                if self.arp_queue.len() >= ARP_QUEUE_MAX {
                    self.arp_queue.pop_front();
                    self.counters.arp_queue_dropped += 1;
                }
                self.arp_queue.push_back((t.dst, mb, now));
                self.arp_request(now, t.dst);
            }
        }
        // Re-ask for addresses still unresolved.
        if let Some(&(ip, _, _)) = self.arp_queue.front() {
            self.arp_request(now, ip);
        }
        self.collect(false);
        any
    }

    /// Hand the queued frames to the I/O (its fault and capture layers included).
    fn flush_tx(&mut self, now: u64) -> bool {
        let mut any = false;
        if !self.txq.is_empty() {
            any = true;
            self.tx_out.append(&mut self.txq);
        }
        // Called with an empty queue too: a fault layer may release frames it delayed.
        let sent = self.io.tx_burst(now, &mut self.tx_out);
        if sent.frames > 0 {
            any = true;
        }
        self.counters.tx_frames += sent.frames as u64;
        self.counters.tx_bytes += sent.bytes;
        if !self.tx_out.is_empty() {
            self.counters.tx_busy += 1;
            while self.tx_out.len() > TX_BACKLOG_MAX {
                self.tx_out.pop();
                self.counters.tx_dropped_full += 1;
            }
        }
        any
    }

    fn publish(&mut self, now: u64) {
        self.next_publish = now + self.p.counters_interval_ms.max(1) * 1_000_000;
        let v = self.snapshot(now);
        if let Some(path) = &self.p.counters_json {
            write_json_atomic(path, &v);
        }
        if let Ok(mut g) = self.stats.lock() {
            *g = v;
        }
        self.io.flush();
    }

    /// Every counter, as JSON.
    pub fn snapshot(&self, now: u64) -> Value {
        let mut conns = Vec::new();
        let endpoint;
        let mut all = Value::Null;
        let mut by_state = Value::Null;
        let mut total = 0usize;
        match self.transport.engine() {
            ferroce_transport::EngineRef::Native(ep) => {
                endpoint = counters::endpoint_json(&ep.counters);
                // Every connection is summed; only the busiest few are listed: a snapshot of
                // thousands of connections' JSON, every `counters_interval_ms`, cost the engine
                // ~5 KB of heap per connection and the CPU time to build it.
                let mut sum = ferroce_transport::ConnCounters::default();
                let mut states = [0u64; 5];
                let mut busy: Vec<(u64, &ferroce_transport::Connection)> = Vec::new();
                for c in ep.connections() {
                    let k = c.counters();
                    sum.add(&k);
                    states[state_index(c.state)] += 1;
                    busy.push((k.tx_pkts + k.rx_pkts, c));
                }
                total = busy.len();
                let max = self.p.counters_conns_max;
                if busy.len() > max {
                    busy.select_nth_unstable_by(max, |a, b| b.0.cmp(&a.0));
                    busy.truncate(max);
                }
                busy.sort_unstable_by_key(|(_, c)| c.id);
                for (_, c) in busy {
                    let st = STATE_NAMES[state_index(c.state)];
                    conns.push(counters::conn_json(c.id.0, c.peer, st, &c.counters()));
                }
                all = counters::counters_json(&sum);
                by_state = Value::Object(
                    STATE_NAMES
                        .iter()
                        .zip(states)
                        .map(|(n, k)| (n.to_string(), k.into()))
                        .collect(),
                );
            }
            ferroce_transport::EngineRef::Roce(ep) => {
                endpoint = counters::roce_json(ep.counters());
            }
        }
        let mut v = json!({
            "time_ns": now,
            "port": {
                "id": self.io_id,
                "name": self.io_name,
                "mac": net::fmt_mac(self.mac),
                "ip": self.p.ip.to_string(),
                "link_up": self.io.link_up(),
            },
            "engine": self.counters,
            // Present whatever the I/O stack: zero without a fault or capture layer.
            "fault_tx": FaultCounters::default(),
            "fault_rx": FaultCounters::default(),
            "pcap_frames": 0,
            "mbufs_free": self.pool.available(),
            "transport": counters::totals_json(&self.transport.totals()),
            "endpoint": endpoint,
            "connections": conns,
            "connections_total": total,
            "connections_by_state": by_state,
            "connections_all": all,
        });
        if let Some(m) = v.as_object_mut() {
            self.io.stats(m);
        }
        v
    }

    /// Stop: release held frames, drain the tx queue (af_packet loses what is left in it at
    /// exit), write the last counters. Returns them.
    pub fn shutdown(mut self) -> Value {
        let now = self.clock.now();
        self.io.release(&mut self.tx_out);
        let deadline = now + 200_000_000;
        while !(self.tx_out.is_empty() && self.txq.is_empty()) && self.clock.now() < deadline {
            let _ = self.flush_tx(self.clock.now());
            std::thread::yield_now();
        }
        let now = self.clock.now();
        self.publish(now);
        self.snapshot(now)
    }
}

/// The I/O stack of an engine over `port`: capture if `pcap` is given, faults if either
/// direction's injector is active, nothing else.
pub fn io_stack(
    port: Port,
    pcap: Option<crate::pcap::PcapWriter>,
    faults: Option<(crate::fault::FaultInjector, crate::fault::FaultInjector)>,
) -> Box<dyn PacketIo> {
    let pool = port.pool().clone();
    stack(Box::new(DpdkIo::new(port)), pool, pcap, faults)
}

/// The I/O stack over any device (see [`io_stack`]); `pool` gives the fault layer's copies.
pub fn stack(
    device: Box<dyn PacketIo>,
    pool: Mempool,
    pcap: Option<crate::pcap::PcapWriter>,
    faults: Option<(crate::fault::FaultInjector, crate::fault::FaultInjector)>,
) -> Box<dyn PacketIo> {
    let mut io = device;
    if let Some(w) = pcap {
        io = Box::new(crate::pcap::PcapIo::new(io, w));
    }
    if let Some((tx, rx)) = faults {
        if tx.may_fault() || rx.may_fault() {
            io = Box::new(crate::fault::FaultIo::new(io, tx, rx, pool));
        }
    }
    io
}

/// Write JSON to `path` through a temporary file and a rename, so readers never see half.
pub fn write_json_atomic(path: &std::path::Path, v: &Value) {
    let tmp = path.with_extension("json.tmp");
    if let Ok(s) = serde_json::to_string_pretty(v) {
        if std::fs::write(&tmp, s).is_ok() {
            let _ = std::fs::rename(&tmp, path);
        }
    }
}

/// Poll several engines from one thread until all are stopped (used where cores are few:
/// two engines joined by net_ring on one lcore). Returns their final counters.
pub fn run_together(mut engines: Vec<Engine>) -> Vec<Value> {
    let mut idle = 0u32;
    loop {
        let mut work = false;
        let mut all_stopped = true;
        for e in engines.iter_mut() {
            if !e.stop_requested() {
                all_stopped = false;
                work |= e.poll();
            }
        }
        if all_stopped {
            break;
        }
        if work {
            idle = 0;
        } else {
            idle += 1;
            if let Some(e) = engines.iter_mut().find(|e| !e.stop_requested()) {
                e.idle(&mut idle);
            }
        }
    }
    engines.into_iter().map(|e| e.shutdown()).collect()
}

/// The capture and the two fault injectors `p` asks for, which every engine (one shard or
/// many) stacks on its device.
pub(super) fn capture_and_faults(
    p: &EngineParams,
) -> std::io::Result<(Option<PcapWriter>, (FaultInjector, FaultInjector))> {
    let pcap = match &p.pcap {
        Some(path) => Some(PcapWriter::create(path, p.snaplen).map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!("config field `capture.pcap` ({}): {e}", path.display()),
            )
        })?),
        None => None,
    };
    let faults = (
        FaultInjector::new(&p.fault_tx, p.seed ^ 0x7478)
            .with_schedule(p.fault_schedule.iter().map(|s| (s.at_s, s.tx.clone()))),
        FaultInjector::new(&p.fault_rx, p.seed ^ 0x7278)
            .with_schedule(p.fault_schedule.iter().map(|s| (s.at_s, s.rx.clone()))),
    );
    Ok((pcap, faults))
}
