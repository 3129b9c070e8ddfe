//! The application's side of an engine: commands in, outputs (completions, events,
//! refusals) out, over bounded queues, and the shared registered memory.

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

/// The application's side of an engine: bounded queues, shared memory, a stop flag and the
/// latest counters.
#[derive(Clone, Debug)]
pub struct EngineHandle {
    pub(super) cmd: Sender<Command>,
    pub(super) out: Receiver<Output>,
    pub mem: SharedMem,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) stats: Arc<Mutex<Value>>,
    /// Wakes the engine when it idles in a sleep: a command is work.
    pub(super) waker: Arc<crate::wake::Waiter>,
}

impl EngineHandle {
    /// Send a command; blocks while the queue is full (the engine drains it every poll).
    pub fn command(&self, c: Command) -> bool {
        let ok = self.cmd.send(c).is_ok();
        self.waker.wake();
        ok
    }

    /// Send a command without waking a sleeping engine: for a caller that takes a turn of
    /// the engine itself right after (`SharedEngine::drive`), which either runs the command
    /// or finds the engine's thread polling (it checks for commands before it sleeps).
    pub fn command_quiet(&self, c: Command) -> bool {
        self.cmd.send(c).is_ok()
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
        match self.out.try_recv() {
            Ok(o) => Some(o),
            Err(TryRecvError::Empty) => self.out.recv_timeout(timeout).ok(),
            Err(TryRecvError::Disconnected) => None,
        }
    }

    pub fn try_next(&self) -> Option<Output> {
        self.out.try_recv().ok()
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
