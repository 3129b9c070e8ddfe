//! The shim's process-wide state and its engine: CQs, QPs, work requests in flight, the
//! connection map, and the DPDK engine (ferroce-dataplane) that runs them.
//!
//! Threads: the application's threads post work (commands to the engine's bounded queue) and
//! poll CQs; the engine's lcore runs the dataplane loop and, through its output sink, puts
//! completions into CQs and signals completion channels. Everything that creates streams or
//! connections runs on the engine's thread (in `Command::Exec` closures and in the sink), so
//! a connection accepted from a peer and a QP reaching RTR cannot race.

use crate::mr::{MrTable, SharedMrs, ShimMemory};
use crate::sys;
use ferroce_dataplane::engine::{self, Command, Engine, EngineHandle, Output, TransportFn};
use ferroce_dpdk_sys::Mempool;
use ferroce_transport::roce::{QpParams, RoceConfig, RoceEndpoint};
use ferroce_transport::{
    Completion, CompletionOp, ConnId, Event, PostError, RecvWr, SendWr, Status, Transport,
};
use std::collections::{HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, RwLock};

/// Which transport a device speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// ferroce's own protocol (UDP 4792): each RC QP is a stream of the one connection to the
    /// peer host.
    Native,
    /// IBTA RC over RoCEv2 (UDP 4791), go-back-N.
    Roce,
}

impl Mode {
    /// Slot of the mode's engine and connections in [`Global`].
    pub fn index(self) -> usize {
        match self {
            Mode::Native => 0,
            Mode::Roce => 1,
        }
    }
}

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

macro_rules! dbg_log {
    ($($t:tt)*) => {
        if $crate::config::debug() {
            eprintln!("ferroce verbs: {}", format!($($t)*));
        }
    };
}
pub(crate) use dbg_log;

/// A completion channel's shared part: an eventfd (EFD_SEMAPHORE, one count per event) and
/// the CQs that fired, in order.
#[derive(Debug)]
pub struct ChannelState {
    pub fd: i32,
    pub fired: Mutex<VecDeque<usize>>,
}

impl ChannelState {
    pub fn signal(&self, cq: usize) {
        lock(&self.fired).push_back(cq);
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd.
        let _ = unsafe { libc::write(self.fd, &one as *const u64 as *const libc::c_void, 8) };
    }
}

/// A CQ's shared part (the engine pushes, the application polls).
/// A device context's asynchronous events (`ibv_get_async_event`): what happened and to
/// which object (the application's pointer), signalled on the context's `async_fd` eventfd.
pub struct AsyncEvents {
    q: Mutex<VecDeque<(sys::ibv_event_type, usize)>>,
    fd: i32,
}

impl AsyncEvents {
    pub fn new(fd: i32) -> Self {
        AsyncEvents {
            q: Mutex::new(VecDeque::new()),
            fd,
        }
    }

    /// Queue an event about the object at `element` (an `ibv_cq *` or `ibv_qp *`).
    pub fn raise(&self, kind: sys::ibv_event_type, element: usize) {
        lock(&self.q).push_back((kind, element));
        self.signal();
    }

    /// The oldest event; the fd stays readable while more are queued.
    pub fn pop(&self) -> Option<(sys::ibv_event_type, usize)> {
        let mut q = lock(&self.q);
        let e = q.pop_front();
        if e.is_some() && !q.is_empty() {
            self.signal();
        }
        e
    }

    fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd (it stays open while the
        // context, which holds this, lives).
        unsafe { libc::write(self.fd, &one as *const u64 as *const libc::c_void, 8) };
    }
}

pub struct CqState {
    pub q: Mutex<VecDeque<sys::ibv_wc>>,
    /// Completions it holds at most (`cqe`); one more overruns it (IBV_EVENT_CQ_ERR).
    pub cap: AtomicUsize,
    pub overrun: AtomicBool,
    /// Its context's asynchronous events (none for the shim's internal CQs).
    pub events: Option<Arc<AsyncEvents>>,
    pub n: AtomicUsize,
    pub armed: AtomicBool,
    pub channel: Option<Arc<ChannelState>>,
    /// The application's `ibv_cq *` (for `ibv_get_cq_event`).
    pub cq_ptr: AtomicUsize,
    pub dead: AtomicBool,
    /// The application thread sleeping in an empty poll of this CQ; a completion wakes it.
    pub waiter: ferroce_dataplane::wake::Waiter,
}

// SAFETY: ibv_wc holds only integers (its union too); the raw-pointer-free queue is guarded
// by the mutex.
unsafe impl Send for CqState {}
// SAFETY: as above: every field is a lock, an atomic or immutable after creation.
unsafe impl Sync for CqState {}

impl CqState {
    /// Queue a completion; false if the CQ was full (the completion is lost, the CQ is in
    /// error: IBV_EVENT_CQ_ERR once, as a NIC reports a CQ overrun).
    pub fn push(&self, wc: sys::ibv_wc) -> bool {
        if self.dead.load(Ordering::Relaxed) {
            return true;
        }
        {
            let mut q = lock(&self.q);
            if q.len() >= self.cap.load(Ordering::Relaxed) {
                drop(q);
                if !self.overrun.swap(true, Ordering::AcqRel) {
                    dbg_log!("CQ {:#x} overrun", self.cq_ptr.load(Ordering::Relaxed));
                    if let Some(ev) = &self.events {
                        ev.raise(sys::IBV_EVENT_CQ_ERR, self.cq_ptr.load(Ordering::Relaxed));
                    }
                }
                return false;
            }
            q.push_back(wc);
            self.n.fetch_add(1, Ordering::Release);
        }
        self.waiter.wake();
        if self.armed.swap(false, Ordering::AcqRel) {
            if let Some(ch) = &self.channel {
                ch.signal(self.cq_ptr.load(Ordering::Relaxed));
            }
        }
        true
    }
}

/// Posted work waiting for its stream (QP before RTR/RTS, or an accepted connection not yet
/// seen).
#[derive(Debug)]
pub enum Pending {
    Send(SendWr),
    /// A request of an XRC initiator on the RoCEv2 device, for the target's SRQ (its XRCETH).
    XrcSend(u32, SendWr),
    Recv(RecvWr),
}

/// A QP's mutable part.
#[derive(Debug)]
pub struct QpInner {
    pub state: u32,
    pub peer: Option<Ipv4Addr>,
    pub remote_qpn: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    /// Path MTU in bytes from `modify_qp` (0: not set, the engine's default).
    pub path_mtu: u32,
    /// The connection once the stream exists in the engine.
    pub conn: Option<ConnId>,
    pub pending: Vec<Pending>,
    /// The stream was asked for (RTR native / RTS RoCEv2).
    pub requested: bool,
}

/// A QP's shared part.
pub struct QpShared {
    pub qpn: u32,
    /// The PD the transport knows the stream by: the QP's own domain in the MR table (its
    /// PD and qp_access_flags, see `mr.rs`), 0 for the shim's UD streams.
    pub pd: u32,
    pub sq_sig_all: bool,
    pub send_cq: Arc<CqState>,
    pub recv_cq: Arc<CqState>,
    pub mode: Mode,
    pub max_inline: u32,
    pub inner: Mutex<QpInner>,
    /// The application's `ibv_qp *`, for its `state` field.
    pub qp_ptr: AtomicUsize,
    /// The SRQ its receives come from (RC QPs created with one).
    pub srq: Option<Arc<crate::srq::SrqState>>,
    /// UD QPs: their receive queue and Q_Key (see `ud.rs`).
    pub ud: Option<crate::ud::UdQp>,
    /// A UC QP (`uc.rs`).
    pub uc: bool,
    /// An XRC QP (`xrc.rs`): initiator, or target in a domain.
    pub xrc: Option<crate::xrc::XrcRole>,
    /// Its work requests in flight and where their ids come from (`inflight.rs`).
    pub wrs: Mutex<crate::inflight::QpWrs>,
    pub ids: crate::inflight::WrIds,
}

/// A work request the engine holds: what its completion must become.
pub struct WrMeta {
    pub app_wr_id: u64,
    pub qp: Arc<QpShared>,
    pub recv: bool,
    pub signaled: bool,
    /// A shim-owned copy (inline send) to free with the completion.
    pub owned_key: u32,
    /// What else the completion means (SRQ receives, UD traffic).
    pub ext: Ext,
}

/// Work requests the shim posts on the application's behalf.
#[derive(Default)]
pub enum Ext {
    #[default]
    Plain,
    /// A receive of an SRQ-attached QP's stream that lands in whichever SRQ entry is next
    /// when its first byte arrives (`srq.rs`).
    SrqSlot(u32),
    /// A UD send of the application's `app` QP, carried on the host pair's UD stream.
    UdSend(Arc<QpShared>),
    /// One of the UD stream's shim-owned receive buffers (key of the owned region).
    UdBounce(u32),
    /// A send or receive of a RoCEv2 UD QP, which is the engine's own (`ud_roce.rs`); a
    /// send to the device's own address tells the poster when its completion is in the CQ.
    UdIbta(Option<crossbeam_channel::Sender<()>>),
}

/// The connection map: one connection per peer host (native), one peer record per peer
/// (RoCEv2); QPs waiting for a peer's connection to be accepted.
///
/// Native mode to this host's own address (two QPs of the process connected to each other,
/// over a fabric that brings the packets back): the connection the engine opens to itself
/// and the one it accepts from itself are its two ends, so the QP of such a pair with the
/// lower QPN takes the opened end (`by_peer`) and the other the accepted end (`self_in`);
/// each end must hold its stream before the other end's first request arrives.
#[derive(Default)]
pub struct Conns {
    pub by_peer: HashMap<Ipv4Addr, ConnId>,
    pub waiting: HashMap<Ipv4Addr, Vec<Arc<QpShared>>>,
    pub self_in: Option<ConnId>,
}

/// A running engine.
pub struct EngineCtl {
    pub h: EngineHandle,
    /// The engine itself, for turns the application's calls take (`drive`).
    pub shared: Arc<ferroce_dataplane::engine::SharedEngine>,
    pub mode: Mode,
    pub ip: Ipv4Addr,
    /// Native: the connections' MTU. RoCEv2: the largest path MTU the port can carry.
    pub mtu: u32,
    /// Joins the engine's lcore or thread; held, never called: the engine runs until the
    /// process ends (see [`last_context_closed`]).
    pub job: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    /// The process whose thread runs the engine: a forked child has a copy of this record
    /// but no engine thread to ask.
    pub pid: u32,
}

pub struct Global {
    pub mrs: SharedMrs,
    pub next_qpn: AtomicU32,
    pub next_pd: AtomicU32,
    /// Per mode ([`Mode::index`]): each device has its own engine, so its own connections.
    pub conns: [Mutex<Conns>; 2],
    pub engine: [OnceLock<Result<EngineCtl, String>>; 2],
    pub engine_init: Mutex<()>,
    pub open_contexts: AtomicUsize,
    pub srq: crate::srq::SrqGlobal,
    pub ud: crate::ud::UdGlobal,
}

fn seed() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    std::process::id().wrapping_mul(2_654_435_761) ^ t
}

pub fn global() -> &'static Global {
    static G: OnceLock<Global> = OnceLock::new();
    G.get_or_init(|| {
        let s = seed();
        // Memory keys from an OS secret (spec/security.md §1.1). Without one every key would
        // be guessable; no Linux this runs on lacks getrandom(2) or /dev/urandom, and std's
        // own hash maps abort in the same case.
        let keys = ferroce_dataplane::entropy::os_keys().unwrap_or_else(|e| {
            eprintln!("ferroce verbs: no OS randomness for memory keys: {e}");
            std::process::abort()
        });
        Global {
            mrs: Arc::new(RwLock::new(MrTable::new(keys))),
            // QPNs: 24 bits, unique per host: a per-process start (pid and time), QPN 0 and
            // 1 reserved as in IB.
            next_qpn: AtomicU32::new((s >> 8) & 0x00ff_f000 | 0x10),
            next_pd: AtomicU32::new(1),
            conns: Default::default(),
            engine: Default::default(),
            engine_init: Mutex::new(()),
            open_contexts: AtomicUsize::new(0),
            srq: Default::default(),
            ud: Default::default(),
        }
    })
}

pub fn new_qpn() -> u32 {
    loop {
        let q = global().next_qpn.fetch_add(1, Ordering::Relaxed) & 0x00ff_ffff;
        if q > 1 && q != crate::ud::UD_STREAM {
            return q;
        }
    }
}

/// The engine of a device mode, started on first use (the device's first QP) with the
/// configuration from the environment. Each device has its own engine (see `engines.rs`).
pub fn engine(mode: Mode) -> Result<&'static EngineCtl, String> {
    let g = global();
    let _guard = lock(&g.engine_init);
    match g.engine[mode.index()].get_or_init(|| start_engine(mode)) {
        Ok(e) => Ok(e),
        Err(s) => Err(s.clone()),
    }
}

/// The engine of `mode` if it runs.
pub fn running(mode: Mode) -> Option<&'static EngineCtl> {
    global().engine[mode.index()]
        .get()
        .and_then(|r| r.as_ref().ok())
}

/// Whether application calls take engine turns (`FERROCE_APP_PROGRESS`, default on).
pub fn app_progress() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("FERROCE_APP_PROGRESS").map_or(true, |v| v != "0"))
}

/// After a post whose commands went in without waking the engine: one turn on this thread,
/// so the work leaves now; if the engine's thread is polling instead, it takes the commands
/// before it next sleeps (it checks for them after announcing the sleep).
pub fn drive_after_post() {
    if app_progress() {
        let _ = drive_engines();
    }
}

/// Give every running engine one turn on the application's thread, if nobody is running it
/// now (`ibv_poll_cq` finding nothing, a post): `Some(work done)` if any turn was taken,
/// `None` if every engine was busy on its own thread (or `FERROCE_APP_PROGRESS=0` leaves all
/// the work to the engines' threads).
pub fn drive_engines() -> Option<bool> {
    if !app_progress() {
        return None;
    }
    let mut r = None;
    for m in [Mode::Native, Mode::Roce] {
        if let Some(e) = running(m) {
            if let Some(w) = e.shared.drive() {
                r = Some(r.unwrap_or(false) | w);
            }
        }
    }
    r
}

/// Some running engine, for what both share (the host's address); work goes to
/// [`running`]`(qp.mode)`.
pub fn engine_if_running() -> Option<&'static EngineCtl> {
    running(Mode::Native).or_else(|| running(Mode::Roce))
}

/// The connections of `mode`'s engine.
pub fn conns(mode: Mode) -> MutexGuard<'static, Conns> {
    lock(&global().conns[mode.index()])
}

/// The largest path MTU a RoCEv2 port of IP MTU `port_mtu` carries: payload plus the
/// biggest headers a packet of it has (IPv4 20, UDP 8, BTH 12, RETH 16, ImmDt 4, ICRC 4)
/// within the port's IP MTU. 1024 on a 1500-byte link, 4096 on a jumbo one.
pub fn roce_port_mtu(port_mtu: u16) -> u32 {
    let room = (port_mtu as u32).saturating_sub(64).clamp(256, 4096);
    1 << (31 - room.leading_zeros())
}

/// The RoCEv2 port's MTU: the running engine's, else what the environment configures.
pub fn roce_active_mtu() -> u32 {
    if let Some(e) = running(Mode::Roce) {
        return e.mtu;
    }
    let vars: Vec<(String, String)> = std::env::vars().collect();
    crate::config::load(&vars).map_or(1024, |c| roce_port_mtu(c.port.mtu))
}

fn start_engine(mode: Mode) -> Result<EngineCtl, String> {
    let vars: Vec<(String, String)> = std::env::vars().collect();
    let cfg = crate::config::load(&vars)?;
    let roce_timeout = crate::config::roce_timeout(&vars)?;
    let roce_retry_forever = crate::config::roce_retry_forever(&vars)?;
    let cm_timers = crate::config::roce_cm_timers(&vars)?;
    ferroce_dataplane::config::preflight(&cfg).map_err(|e| format!("ferroce verbs: {e}"))?;
    let ip = cfg.address().map_err(|e| e.to_string())?;
    let eal = crate::engines::eal(&cfg)?;
    let (transport, mtu): (Box<dyn Transport + Send>, u32) = match mode {
        Mode::Native => {
            let ec = cfg.endpoint_config();
            let m = ec.conn.mtu as u32;
            // The connection manager rides beside the endpoint (cm.rs).
            (
                crate::cm::wrap(
                    engine::native_transport(cfg.port.mtu, ec)
                        .map_err(|e| format!("ferroce verbs: OS randomness: {e}"))?,
                ),
                m,
            )
        }
        Mode::Roce => {
            let mut rc = RoceConfig::new(ip);
            rc.mtu = 1024;
            rc.timeout = roce_timeout;
            // rxe's "retry_cnt 7 = forever" unless FERROCE_ROCE_RETRY=ibta: then, as on a
            // NIC, a peer that died fails the QP's work with IBV_WC_RETRY_EXC_ERR after 7
            // retries. (IBTA's reading by default made perftest and srq_pingpong runs fail
            // on this loaded machine: stalls of a few hundred ms exhaust 7 retries.)
            rc.retry_forever_at_7 = roce_retry_forever;
            let m = roce_port_mtu(cfg.port.mtu);
            rc.ud_mtu = m;
            // QP1 serves the IBTA CM (cm_roce.rs).
            (
                crate::cm_roce::wrap(RoceEndpoint::new(rc), crate::cm::seed(), cm_timers),
                m,
            )
        }
    };
    let (device, pool): (Box<dyn ferroce_dataplane::io::PacketIo>, Mempool) = if cfg.port.backend
        == "udp"
    {
        // Kernel UDP sockets on FERROCE_IP (dataplane/src/udp); the engine refuses
        // RoCEv2 over them with an error that says why.
        ferroce_dataplane::backend::open_udp(
            &cfg,
            eal,
            &format!("ferroce_verbs_udp_{mode:?}"),
            transport.udp_port(),
        )
        .map_err(|e| format!("ferroce verbs: {e}"))?
    } else {
        let other = match mode {
            Mode::Native => Mode::Roce,
            Mode::Roce => Mode::Native,
        };
        let port_id = crate::engines::port(eal, &cfg, mode, running(other).is_some())?;
        let pool = ferroce_dataplane::backend::pool(&cfg, eal, &format!("ferroce_verbs_{port_id}"))
            .map_err(|e| format!("ferroce verbs: mempool: {e}"))?;
        let port = ferroce_dataplane::backend::start_port(&cfg, eal, port_id, &pool)
            .map_err(|e| format!("ferroce verbs: port start: {e}"))?;
        (Box::new(ferroce_dataplane::io::DpdkIo::new(port)), pool)
    };
    let params = cfg.engine_params().map_err(|e| e.to_string())?;
    let (mut eng, h) = Engine::on_device(device, pool, transport, params, eal.tsc_hz())
        .map_err(|e| format!("ferroce verbs: engine: {e}"))?;
    eng.set_memory(Box::new(ShimMemory(global().mrs.clone())));
    eng.set_output_sink(Box::new(move |o, t| on_output(mode, o, t)));
    dbg_log!(
        "{mode:?} engine on {} ({}), {ip}, MTU {mtu}",
        eng.io_name(),
        ferroce_dataplane::net::fmt_mac(eng.mac())
    );
    // The application's own verbs calls run the engine too when it is free (shared.rs).
    let shared = ferroce_dataplane::engine::SharedEngine::new(eng);
    let runner = shared.clone();
    let job: Box<dyn FnOnce() + Send> = match crate::engines::lcore(eal) {
        Some(l) => {
            let j = eal
                .launch(l, move || {
                    runner.run();
                })
                .map_err(|e| format!("ferroce verbs: lcore {l}: {e}"))?;
            Box::new(move || j.join())
        }
        None => {
            let t = std::thread::spawn(move || {
                runner.run();
            });
            Box::new(move || {
                let _ = t.join();
            })
        }
    };
    if crate::config::debug() {
        // With FERROCE_VERBS_DEBUG the engine's counters go to stderr every 2 s, so a stuck
        // program shows whether its engine still sends, receives or resends.
        let hs = h.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(std::time::Duration::from_secs(2));
            if hs.stopped() {
                break;
            }
            eprintln!("ferroce verbs: {mode:?} counters {}", hs.stats());
        });
    }
    Ok(EngineCtl {
        h,
        shared,
        mode,
        ip,
        mtu,
        job: Mutex::new(Some(job)),
        pid: std::process::id(),
    })
}

/// The last context closed: give the engine a moment to send the last ACKs (an application
/// usually exits right after), but keep it running. EAL initialises once per process and the
/// engine lives in a `OnceLock`, so a stopped engine could never come back: a process that
/// opens a device again (rdma-core's tests open and close contexts in every test) would post
/// work to an engine that no longer runs, and wait forever. The engine ends with the process.
///
/// Disconnects still outstanding are seen through first: the CM lives in this process (on
/// Linux it is the kernel's and outlives the process), so a DREQ lost on the way out would
/// leave the peer retrying into a process that is gone, 16 response timeouts of ~6.4 s with
/// rdma_cm's defaults, before it learns the connection ended (qperf's client hung so on a
/// lossy link). The DREQs are retransmitted every [`LINGER_RESEND`] until answered, for at
/// most [`LINGER_MAX`]; the DREPs that answered peers' DREQs go [`DREP_REPEATS`] more
/// times (a lost one leaves the peer retrying the same way).
pub fn last_context_closed() {
    let here = |m: Mode| running(m).filter(|e| e.pid == std::process::id());
    if here(Mode::Native).is_none() && here(Mode::Roce).is_none() {
        return;
    }
    let t0 = std::time::Instant::now();
    let mut repeats = 0u32;
    loop {
        let repeat = repeats < DREP_REPEATS && t0.elapsed() >= LINGER_RESEND * repeats;
        repeats += repeat as u32;
        let mut pending = 0;
        if here(Mode::Native).is_some() {
            pending += crate::cm::hasten_disconnects(LINGER_RESEND, repeat);
        }
        if here(Mode::Roce).is_some() {
            pending += crate::cm_roce::hasten_disconnects(LINGER_RESEND, repeat);
        }
        let t = t0.elapsed();
        if (pending == 0 && t >= LINGER_MIN) || t >= LINGER_MAX {
            dbg_log!("exit: {pending} DREQs unanswered after {t:?}, {repeats} DREP rounds");
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The least time the last close leaves the engine for its last ACKs.
const LINGER_MIN: std::time::Duration = std::time::Duration::from_millis(150);
/// How often an exiting process's unanswered DREQs are sent again.
const LINGER_RESEND: std::time::Duration = std::time::Duration::from_millis(20);
/// How many more times an exiting process sends each DREP it answered a DREQ with, one
/// every [`LINGER_RESEND`] inside [`LINGER_MIN`]: a DREP is 256 bytes, and at 30 % loss all
/// of 1 + 8 copies are lost once in 50,000 exits (1 + 3: once in 120).
const DREP_REPEATS: u32 = 8;
/// The longest an exiting process waits for DREPs.
const LINGER_MAX: std::time::Duration = std::time::Duration::from_millis(1500);

pub fn wc_status(s: Status) -> u32 {
    match s {
        Status::Success => sys::IBV_WC_SUCCESS,
        Status::LocalProtection => sys::IBV_WC_LOC_PROT_ERR,
        Status::LocalLength => sys::IBV_WC_LOC_LEN_ERR,
        Status::RemoteAccess => sys::IBV_WC_REM_ACCESS_ERR,
        Status::RemoteInvalidRequest => sys::IBV_WC_REM_INV_REQ_ERR,
        Status::RemoteOperation => sys::IBV_WC_REM_OP_ERR,
        Status::RetryExceeded => sys::IBV_WC_RETRY_EXC_ERR,
        Status::RnrRetryExceeded => sys::IBV_WC_RNR_RETRY_EXC_ERR,
        Status::Flushed => sys::IBV_WC_WR_FLUSH_ERR,
        Status::BadResponse => sys::IBV_WC_BAD_RESP_ERR,
    }
}

fn wc_opcode(op: CompletionOp) -> u32 {
    match op {
        CompletionOp::Send => sys::IBV_WC_SEND,
        CompletionOp::Write => sys::IBV_WC_RDMA_WRITE,
        CompletionOp::Read => sys::IBV_WC_RDMA_READ,
        CompletionOp::FetchAdd => sys::IBV_WC_FETCH_ADD,
        CompletionOp::CmpSwap => sys::IBV_WC_COMP_SWAP,
        CompletionOp::Recv => sys::IBV_WC_RECV,
        CompletionOp::RecvWriteImm => sys::IBV_WC_RECV_RDMA_WITH_IMM,
    }
}

/// Build the `ibv_wc` of a finished work request.
pub fn make_wc(
    meta: &WrMeta,
    status: u32,
    opcode: u32,
    byte_len: u32,
    imm: Option<u32>,
) -> sys::ibv_wc {
    let mut wc = sys::ibv_wc {
        wr_id: meta.app_wr_id,
        status,
        opcode,
        byte_len,
        qp_num: meta.qp.qpn,
        src_qp: lock(&meta.qp.inner).remote_qpn,
        ..Default::default()
    };
    if let Some(i) = imm {
        // The transport carries the immediate as a host number whose big-endian bytes are
        // the wire bytes; verbs hands applications the wire bytes (__be32).
        wc.__bindgen_anon_1.imm_data = i.to_be();
        wc.wc_flags |= sys::IBV_WC_WITH_IMM;
    }
    wc
}

/// Put the QP in the error state (the application sees it in `ibv_qp.state`).
pub fn set_qp_error(qp: &QpShared) {
    lock(&qp.inner).state = sys::IBV_QPS_ERR;
    let p = qp.qp_ptr.load(Ordering::Relaxed) as *mut sys::ibv_qp;
    if !p.is_null() {
        // SAFETY: qp_ptr is the live `ibv_qp` this QpShared belongs to (cleared by
        // ibv_destroy_qp before it is freed); `state` is a plain u32 field the application
        // reads, as it would read what a provider writes.
        unsafe { std::ptr::addr_of_mut!((*p).state).write_volatile(sys::IBV_QPS_ERR) };
    }
}

fn complete(c: Completion, t: &mut dyn Transport) {
    let g = global();
    let Some(meta) = crate::inflight::take(c.wr_id) else {
        // Flushed by the shim already, or its QP was destroyed; an inline copy the stream
        // could still resend from is no longer needed.
        if let Some(key) = crate::inflight::take_orphan(c.wr_id) {
            g.mrs
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .deregister(key);
        }
        return;
    };
    match &meta.ext {
        Ext::Plain => {}
        Ext::SrqSlot(slot) => return crate::srq::complete(&meta, *slot, c, t),
        Ext::UdSend(_) | Ext::UdBounce(_) => return crate::ud::complete(meta, c, t),
        Ext::UdIbta(_) => return crate::ud_roce::complete(meta, c),
    }
    if meta.owned_key != 0 {
        g.mrs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .deregister(meta.owned_key);
    }
    if c.status != Status::Success {
        dbg_log!(
            "QP {:#x}: work request {} completed with {:?} ({:?})",
            meta.qp.qpn,
            meta.app_wr_id,
            c.status,
            c.op
        );
        set_qp_error(&meta.qp);
    }
    if c.status == Status::Success && !meta.signaled {
        return;
    }
    let wc = make_wc(
        &meta,
        wc_status(c.status),
        wc_opcode(c.op),
        c.byte_len,
        c.imm,
    );
    let cq = if meta.recv {
        &meta.qp.recv_cq
    } else {
        &meta.qp.send_cq
    };
    if !cq.push(wc) {
        // Its completion is lost: the QP cannot go on (as a NIC moves it to error), and its
        // application hears so (IBV_EVENT_QP_FATAL), besides the CQ's own event.
        set_qp_error(&meta.qp);
        if let Some(ev) = &cq.events {
            let qp = meta.qp.qp_ptr.load(Ordering::Relaxed);
            if qp != 0 {
                ev.raise(sys::IBV_EVENT_QP_FATAL, qp);
            }
        }
    }
}

/// A work request the engine refused at post time: an error completion.
pub fn refused(wr_id: u64, err: PostError) {
    let Some(meta) = crate::inflight::take(wr_id) else {
        return;
    };
    if !matches!(meta.ext, Ext::Plain) {
        dbg_log!("QP {:#x}: shim work request refused: {err}", meta.qp.qpn);
        return;
    }
    dbg_log!("QP {:#x}: work request refused: {err}", meta.qp.qpn);
    set_qp_error(&meta.qp);
    let status = match err {
        PostError::StreamInError | PostError::ConnectionClosed => sys::IBV_WC_WR_FLUSH_ERR,
        PostError::InvalidLength => sys::IBV_WC_LOC_LEN_ERR,
        _ => sys::IBV_WC_LOC_QP_OP_ERR,
    };
    let opcode = if meta.recv {
        sys::IBV_WC_RECV
    } else {
        sys::IBV_WC_SEND
    };
    let wc = make_wc(&meta, status, opcode, 0, None);
    if meta.recv {
        meta.qp.recv_cq.push(wc);
    } else {
        meta.qp.send_cq.push(wc);
    }
}

/// The output sink of `mode`'s engine (engine thread).
fn on_output(mode: Mode, o: Output, t: &mut dyn Transport) {
    match o {
        Output::Completion(c) => complete(c, t),
        Output::Refused { wr_id, err, what } => {
            if wr_id != 0 {
                refused(wr_id, err);
            } else {
                dbg_log!("engine refused {what}: {err}");
            }
        }
        Output::Event(Event::Accepted { conn, peer }) => {
            dbg_log!("accepted connection {} from {peer}", conn.0);
            let to_self = running(mode).is_some_and(|e| e.ip == peer);
            let waiting = {
                let mut c = conns(mode);
                if to_self {
                    // The far end of the connection this engine opened to itself.
                    c.self_in = Some(conn);
                } else {
                    c.by_peer.insert(peer, conn);
                }
                c.waiting.remove(&peer).unwrap_or_default()
            };
            for qp in waiting {
                create_stream(t, &qp, conn);
            }
            if !to_self {
                crate::ud::on_accepted(t, conn, peer, mode);
            }
        }
        Output::Event(Event::Failed { conn }) => {
            dbg_log!("connection {} failed", conn.0);
            // A connection to itself that failed will never be accepted (nothing brings
            // the packets back): the QPs waiting for its far end go to the error state.
            let stranded = running(mode).and_then(|e| {
                let mut c = conns(mode);
                (c.by_peer.get(&e.ip) == Some(&conn))
                    .then(|| c.waiting.remove(&e.ip))
                    .flatten()
            });
            forget_conn(mode, conn);
            for qp in stranded.unwrap_or_default() {
                set_qp_error(&qp);
                flush_qp(&qp);
            }
        }
        Output::Event(Event::Closed { conn }) => forget_conn(mode, conn),
        Output::Event(Event::Connected { conn, peer }) => {
            dbg_log!("connection {} to {peer} established", conn.0);
        }
    }
}

/// Create the QP's stream on `conn` and post what waited for it (engine thread).
pub fn create_stream(t: &mut dyn Transport, qp: &Arc<QpShared>, conn: ConnId) {
    let mut inner = lock(&qp.inner);
    let r = match qp.mode {
        _ if qp.uc => crate::uc::create_stream(t, qp, &inner, conn),
        Mode::Native => t.create_stream(conn, qp.qpn, inner.remote_qpn, qp.pd),
        Mode::Roce => match t.engine_mut().roce() {
            Some(ep) => {
                let p = QpParams {
                    local_qpn: qp.qpn,
                    remote_qpn: inner.remote_qpn,
                    pd: qp.pd,
                    sq_psn: inner.sq_psn,
                    rq_psn: inner.rq_psn,
                    mtu: inner.path_mtu,
                };
                // An XRC QP is the engine's XRC initiator or target (spec/rocev2.md §6.10).
                match &qp.xrc {
                    Some(crate::xrc::XrcRole::Send) => {
                        ep.create_xrc_qp(conn, p, ferroce_transport::roce::XrcRole::Initiator)
                    }
                    Some(crate::xrc::XrcRole::Recv(_)) => {
                        ep.create_xrc_qp(conn, p, ferroce_transport::roce::XrcRole::Target)
                    }
                    None => ep.create_qp(conn, p),
                }
            }
            None => Err(PostError::UnknownConnection),
        },
    };
    dbg_log!(
        "QP {:#x} -> {:?} QP {:#x} on connection {}: {r:?}",
        qp.qpn,
        inner.peer,
        inner.remote_qpn,
        conn.0
    );
    inner.conn = Some(conn);
    let pending = std::mem::take(&mut inner.pending);
    drop(inner);
    for p in pending {
        let (id, res) = match p {
            Pending::Send(wr) => (wr.wr_id, t.post_send(conn, qp.qpn, wr)),
            Pending::XrcSend(srqn, wr) => {
                post_xrc_send(t, conn, qp.qpn, srqn, wr);
                continue;
            }
            Pending::Recv(wr) => (wr.wr_id, t.post_recv(conn, qp.qpn, wr)),
        };
        if let Err(e) = res {
            refused(id, e);
        }
    }
}

/// Post an XRC initiator's request on the RoCEv2 engine (engine thread); a refusal fails the
/// work request as a refused `post_send` does.
pub fn post_xrc_send(t: &mut dyn Transport, conn: ConnId, qpn: u32, srqn: u32, wr: SendWr) {
    let id = wr.wr_id;
    let r = match t.engine_mut().roce() {
        Some(ep) => ep.post_xrc_send(conn, qpn, srqn, wr),
        None => Err(PostError::Unsupported),
    };
    if let Err(e) = r {
        refused(id, e);
    }
}

fn forget_conn(mode: Mode, conn: ConnId) {
    let mut c = conns(mode);
    c.by_peer.retain(|_, x| *x != conn);
    if c.self_in == Some(conn) {
        c.self_in = None;
    }
}

/// Ask the engine to give the QP its stream: RTR (native) or RTS (RoCEv2). The receiver
/// gets `()` once the engine has run the request: the stream exists then, or (native, the
/// side that accepts) the QP is registered to get it when the peer's connection arrives, so a
/// request from the peer can no longer find no stream. `ibv_modify_qp` waits for it.
/// A RoCEv2 QP (created at RTR, a responder only until now) moved to RTS: start its send queue at
/// `sq_psn`. Nothing to do if its engine QP does not exist yet (its creation reads the
/// sq_psn RTS stored) or it has no connection.
pub fn set_sq_psn(
    e: &EngineCtl,
    qp: Arc<QpShared>,
    sq_psn: u32,
) -> crossbeam_channel::Receiver<()> {
    let (done, rx) = crossbeam_channel::bounded(1);
    e.h.command(Command::Exec(TransportFn(Box::new(move |t| {
        let conn = lock(&qp.inner).conn;
        if let (Some(c), Some(ep)) = (conn, t.engine_mut().roce()) {
            let r = ep.set_sq_psn(c, qp.qpn, sq_psn);
            dbg_log!("QP {:#x}: sq_psn {sq_psn:#x} at RTS: {r:?}", qp.qpn);
        }
        let _ = done.send(());
    }))));
    rx
}

pub fn request_stream(
    e: &EngineCtl,
    qp: Arc<QpShared>,
    peer: Ipv4Addr,
) -> crossbeam_channel::Receiver<()> {
    let my_ip = e.ip;
    let (done, rx) = crossbeam_channel::bounded(1);
    e.h.command(Command::Exec(TransportFn(Box::new(move |t| {
        // Native, to itself: the higher QPN of the pair takes the accepted end (see Conns).
        let accepted_end =
            qp.mode == Mode::Native && my_ip == peer && qp.qpn > lock(&qp.inner).remote_qpn;
        let conn = {
            let c = conns(qp.mode);
            if accepted_end {
                c.self_in
            } else {
                c.by_peer.get(&peer).copied()
            }
        };
        let conn = match conn {
            None if accepted_end => None,
            Some(c) => Some(c),
            // RoCEv2 has no handshake: a peer record on both sides. Native: the host with
            // the lower address opens the one connection, the other accepts it.
            None if qp.mode == Mode::Roce || my_ip < peer || my_ip == peer => {
                let c = t.connect(peer);
                dbg_log!("connection {} to {peer} opened", c.0);
                conns(qp.mode).by_peer.insert(peer, c);
                Some(c)
            }
            None => None,
        };
        match conn {
            Some(c) => create_stream(t, &qp, c),
            None => {
                dbg_log!("QP {:#x} waits for {peer} to connect", qp.qpn);
                conns(qp.mode).waiting.entry(peer).or_default().push(qp);
            }
        }
        let _ = done.send(());
    }))));
    rx
}

/// An RC QP moved to RESET: its stream (native) or engine QP (RoCEv2) goes, with every
/// sequence number and error state it held, so the next RTR/RTS starts a fresh one (verbs:
/// RESET forgets the QP's state; both ends of a connection are reset and re-connected).
/// `ibv_destroy_qp` does not call this: it leaves streams in place so a peer's
/// retransmissions are still answered.
pub fn reset_stream(qp: &Arc<QpShared>) {
    let conn = {
        let mut inner = lock(&qp.inner);
        inner.requested = false;
        inner.conn.take()
    };
    // Not yet connected: it must not get a stream when the peer's connection arrives.
    for w in conns(qp.mode).waiting.values_mut() {
        w.retain(|q| !Arc::ptr_eq(q, qp));
    }
    let (Some(conn), Some(e)) = (conn, running(qp.mode)) else {
        return;
    };
    let qpn = qp.qpn;
    let (done, rx) = crossbeam_channel::bounded(1);
    e.h.command(Command::Exec(TransportFn(Box::new(move |t| {
        let r = t.destroy_stream(conn, qpn);
        dbg_log!(
            "QP {qpn:#x} reset: stream on connection {} destroyed: {r:?}",
            conn.0
        );
        let _ = done.send(());
    }))));
    // The next RTR must not race the engine's removal (it would find the old stream).
    if rx.recv_timeout(std::time::Duration::from_secs(5)).is_err() {
        dbg_log!("QP {qpn:#x}: the engine did not reset the stream within 5 s");
    }
}

/// Flush every outstanding work request of `qp` (state ERR): WR_FLUSH_ERR completions.
pub fn flush_qp(qp: &Arc<QpShared>) {
    forget_wrs(qp, true);
}

/// `qp` moved to RESET: its outstanding work requests are dropped without completions and
/// the completions of it not yet polled leave its CQs (what mlx4/mlx5 do with
/// `mlx5_cq_clean` on RESET; rdma-core's tests rely on it when they restate a failed QP).
pub fn discard_qp(qp: &Arc<QpShared>) {
    forget_wrs(qp, false);
    let qpn = qp.qpn;
    for cq in [&qp.send_cq, &qp.recv_cq] {
        let mut q = lock(&cq.q);
        let before = q.len();
        q.retain(|wc| wc.qp_num != qpn);
        let gone = before - q.len();
        if gone > 0 {
            cq.n.fetch_sub(gone, Ordering::AcqRel);
        }
    }
}

fn forget_wrs(qp: &Arc<QpShared>, complete: bool) {
    let g = global();
    let metas = crate::inflight::drain(qp);
    let pending = std::mem::take(&mut lock(&qp.inner).pending);
    drop(pending);
    for (_, m) in metas {
        // SRQ entries not yet taken stay in the SRQ (verbs does not flush an SRQ with a QP).
        let m = if let Ext::SrqSlot(slot) = m.ext {
            match crate::srq::take_slot(slot) {
                Some(app_wr_id) => WrMeta {
                    app_wr_id,
                    ext: Ext::Plain,
                    ..m
                },
                None => continue,
            }
        } else {
            m
        };
        if m.owned_key != 0 {
            g.mrs
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .deregister(m.owned_key);
        }
        if !complete {
            continue;
        }
        let opcode = if m.recv {
            sys::IBV_WC_RECV
        } else {
            sys::IBV_WC_SEND
        };
        let wc = make_wc(&m, sys::IBV_WC_WR_FLUSH_ERR, opcode, 0, None);
        if m.recv {
            qp.recv_cq.push(wc);
        } else {
            qp.send_cq.push(wc);
        }
    }
}
