//! The application's side of an engine: commands in, outputs (completions, events,
//! refusals) out, over two batched rings ([`super::ring`]), and the shared registered
//! memory. A batch of commands ([`EngineHandle::submit`]) is one doorbell; the outputs of an
//! engine poll are one batch, drained by the application in bulk ([`EngineHandle::drain`]).

use super::*;

/// What the application asks of the engine.
#[derive(Debug)]
pub enum Command {
    Connect {
        peer: Ipv4Addr,
        reply: Sender<ConnId>,
    },
    /// Streams to create on every accepted connection before any of its data is processed
    /// (local, remote, pd): the peer may send on them at once.
    Listen {
        streams: Vec<(u32, u32, u32)>,
    },
    CreateStream {
        conn: ConnId,
        local: u32,
        remote: u32,
        pd: u32,
    },
    PostSend {
        conn: ConnId,
        stream: u32,
        wr: SendWr,
    },
    PostRecv {
        conn: ConnId,
        stream: u32,
        wr: RecvWr,
    },
    Close {
        conn: ConnId,
    },
    Snapshot {
        reply: Sender<Value>,
    },
    /// Send these raw frames as they are (tests, tools); they pass the I/O stack like any
    /// frame the engine sends (a fault layer, if any, included).
    Inject {
        frames: Vec<Vec<u8>>,
    },
    /// Run a closure with the transport on the engine's thread, in command order (for
    /// embedders that need calls the commands above do not name, e.g. the verbs shim's
    /// RoCEv2 QPs with the PSNs the application chose).
    Exec(TransportFn),
}

/// A closure for [`Command::Exec`].
pub struct TransportFn(pub TransportCall);

/// What a [`TransportFn`] holds.
pub type TransportCall = Box<dyn FnOnce(&mut dyn Transport) + Send>;

impl std::fmt::Debug for TransportFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TransportFn")
    }
}

/// Receives every output on the engine's thread instead of the output queue (see
/// [`Engine::set_output_sink`]); it may call the transport.
pub type OutputSink = Box<dyn FnMut(Output, &mut dyn Transport) + Send>;

/// What the engine tells the application.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    Completion(Completion),
    Event(Event),
    /// A command the transport refused (`wr_id` of the work request, 0 for others).
    Refused {
        what: &'static str,
        wr_id: u64,
        err: PostError,
    },
}

/// The application's side of an engine: bounded rings, shared memory, a stop flag and the
/// latest counters. Clones share the rings: each end is a single-producer (single-consumer)
/// ring behind a mutex that a poster (drainer) holds for one batch.
#[derive(Clone, Debug)]
pub struct EngineHandle {
    pub(super) cmd: Arc<Mutex<RingTx<Command>>>,
    pub(super) out: Arc<Mutex<RingRx<Output>>>,
    pub mem: SharedMem,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) stats: Arc<Mutex<Value>>,
    /// Wakes the engine when it idles in a sleep: a command is work.
    pub(super) waker: Arc<crate::wake::Waiter>,
    /// The output ring's doorbell, which the application sleeps on in [`Self::next`].
    pub(super) out_bell: Arc<Bell>,
    /// The engine's clock (the TSC): an application timing its work requests reads it for
    /// a few ns where `Instant::now` is a vDSO `clock_gettime` (~25 ns in these VMs).
    pub(super) clock: super::Clock,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl EngineHandle {
    /// The engine's clock: ns since the engine started, from the TSC.
    pub fn clock(&self) -> super::Clock {
        self.clock
    }

    /// Send a command; waits while the ring is full (the engine drains it every poll).
    /// False if the engine is gone.
    pub fn command(&self, c: Command) -> bool {
        self.push_one(c, false)
    }

    /// Send a command without waking a sleeping engine: for a caller that takes a turn of
    /// the engine itself right after (`SharedEngine::drive`), which either runs the command
    /// or finds the engine's thread polling (it checks for commands before it sleeps).
    pub fn command_quiet(&self, c: Command) -> bool {
        self.push_one(c, true)
    }

    fn push_one(&self, c: Command, quiet: bool) -> bool {
        let mut c = c;
        loop {
            {
                let mut tx = lock(&self.cmd);
                if tx.closed() {
                    return false;
                }
                match tx.push(c, quiet) {
                    Ok(()) => return true,
                    Err(back) => c = back,
                }
            }
            self.wait_for_room();
        }
    }

    /// Send every command of `cmds` (emptied) in order, as one batch: one doorbell for all
    /// of them while they fit in the ring (more, one per ringful, waiting for room between).
    /// False if the engine is gone (the rest are dropped with it).
    pub fn submit(&self, cmds: &mut Vec<Command>) -> bool {
        self.submit_with(cmds, false, || {})
    }

    /// As [`Self::submit`], without waking a sleeping engine (see [`Self::command_quiet`]),
    /// calling `on_full` (e.g. a turn of the engine on this thread) while the ring is full.
    pub fn submit_with(
        &self,
        cmds: &mut Vec<Command>,
        quiet: bool,
        mut on_full: impl FnMut(),
    ) -> bool {
        while !cmds.is_empty() {
            {
                let mut tx = lock(&self.cmd);
                if tx.closed() {
                    cmds.clear();
                    return false;
                }
                tx.push_batch(cmds, quiet);
            }
            if !cmds.is_empty() {
                on_full();
                self.wait_for_room();
            }
        }
        true
    }

    /// Move as many of `cmds` as fit now into the ring, as one batch, never waiting; the
    /// rest stay in `cmds` (back-pressure for a poster that refuses instead of waiting).
    pub fn try_submit(&self, cmds: &mut Vec<Command>, quiet: bool) -> usize {
        lock(&self.cmd).push_batch(cmds, quiet)
    }

    /// The ring is full: make sure a sleeping engine knows, and give it the core a moment.
    fn wait_for_room(&self) {
        self.waker.wake();
        std::thread::yield_now();
    }

    /// Open a connection; waits for the engine to create it.
    pub fn connect(&self, peer: Ipv4Addr) -> Option<ConnId> {
        let (tx, rx) = bounded(1);
        self.command(Command::Connect { peer, reply: tx });
        rx.recv_timeout(Duration::from_secs(5)).ok()
    }

    pub fn listen(&self, streams: Vec<(u32, u32, u32)>) {
        self.command(Command::Listen { streams });
    }

    pub fn create_stream(&self, conn: ConnId, local: u32, remote: u32, pd: u32) {
        self.command(Command::CreateStream {
            conn,
            local,
            remote,
            pd,
        });
    }

    pub fn post_send(&self, conn: ConnId, stream: u32, wr: SendWr) {
        self.command(Command::PostSend { conn, stream, wr });
    }

    pub fn post_recv(&self, conn: ConnId, stream: u32, wr: RecvWr) {
        self.command(Command::PostRecv { conn, stream, wr });
    }

    pub fn close(&self, conn: ConnId) {
        self.command(Command::Close { conn });
    }

    /// Send raw frames out of the engine's port, as they are.
    pub fn inject(&self, frames: Vec<Vec<u8>>) {
        self.command(Command::Inject { frames });
    }

    /// The next completion or event, waiting up to `timeout`.
    pub fn next(&self, timeout: Duration) -> Option<Output> {
        let t0 = std::time::Instant::now();
        loop {
            {
                let mut rx = lock(&self.out);
                if let Some(o) = rx.pop() {
                    return Some(o);
                }
                if rx.closed() {
                    return None;
                }
            }
            let left = timeout.saturating_sub(t0.elapsed());
            if left.is_zero() {
                return None;
            }
            // Woken by the engine's next batch of outputs. At most 1 ms at a time: the
            // waiter wakes one sleeper, and clones of this handle may wait on other threads.
            let bell = &self.out_bell;
            let us = (left.as_micros() as u64).clamp(1, 1000);
            bell.waiter.sleep(us, || bell.pending());
        }
    }

    pub fn try_next(&self) -> Option<Output> {
        lock(&self.out).pop()
    }

    /// Take up to `max` outputs in one go (one batch off the ring), each through `f`;
    /// how many.
    pub fn drain(&self, max: usize, f: impl FnMut(Output)) -> usize {
        lock(&self.out).drain(max, f)
    }

    /// Batches of commands sent so far (doorbells rung), over all clones of this handle.
    pub fn doorbells(&self) -> u64 {
        lock(&self.cmd).bell().rings()
    }

    /// Ask the engine to stop (it drains its tx queue and returns from its run loop).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.waker.wake();
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// The counters as last published (every `counters_interval_ms`).
    pub fn stats(&self) -> Value {
        self.stats.lock().map(|v| v.clone()).unwrap_or(Value::Null)
    }

    /// Fresh counters, taken by the engine now (waits up to a second).
    pub fn snapshot(&self) -> Option<Value> {
        let (tx, rx) = bounded(1);
        self.command(Command::Snapshot { reply: tx });
        rx.recv_timeout(Duration::from_secs(1)).ok()
    }
}
