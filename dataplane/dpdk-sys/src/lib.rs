//! Bindings to the system DPDK (22.11, Debian's `libdpdk-dev`) and thin safe wrappers.
//!
//! - [`ffi`]: what bindgen generated from the installed headers (through the raw
//!   `pkg-config --cflags libdpdk`), plus the `ferroce_*` C shim for DPDK's static-inline
//!   functions (rx/tx burst, mbuf alloc/free/data pointer, `rte_errno`, TSC).
//! - [`Eal`], [`Mempool`], [`Port`], [`Mbuf`]: the safe layer the dataplane uses. Every
//!   `unsafe` block says why it is sound.
//!
//! PMDs are plugins EAL loads from the system driver folder, so any PMD works (net_ring,
//! net_memif, net_af_packet, net_af_xdp, net_tap, real NICs by PCI address); EAL arguments are
//! passed through unchanged.

#![allow(clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

mod runtime_dir;

/// Raw bindings (generated) and the C shim.
#[allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    dead_code,
    improper_ctypes,
    clippy::all,
    clippy::pedantic,
    rustdoc::all
)]
pub mod ffi {
    include!(concat!(env!("OUT_DIR"), "/bindings.rs"));
}

/// A failed DPDK call: what was attempted and DPDK's error number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    pub what: String,
    /// Positive errno value (DPDK's `rte_errno` or a negated return code).
    pub code: i32,
}

impl Error {
    fn new(what: impl Into<String>, code: i32) -> Self {
        Error {
            what: what.into(),
            code: code.abs(),
        }
    }

    /// The error from `rte_errno`.
    fn errno(what: impl Into<String>) -> Self {
        Error::new(what, errno())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} (errno {})",
            self.what,
            strerror(self.code),
            self.code
        )
    }
}

impl std::error::Error for Error {}

/// DPDK's text for an error number (`rte_strerror`, which knows DPDK's own codes).
pub fn strerror(code: i32) -> String {
    // SAFETY: rte_strerror returns a pointer to a NUL-terminated string in a static or
    // thread-local buffer that stays valid until the next call on this thread; we copy it
    // out at once.
    unsafe {
        let p = ffi::rte_strerror(code as c_int);
        if p.is_null() {
            return format!("error {code}");
        }
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// The calling thread's `rte_errno`.
pub fn errno() -> i32 {
    // SAFETY: reads a thread-local int; no preconditions.
    unsafe { ffi::ferroce_errno() }
}

/// The time-stamp counter.
#[inline]
pub fn rdtsc() -> u64 {
    // SAFETY: executes rdtsc; no memory is touched.
    unsafe { ffi::ferroce_rdtsc() }
}

/// The installed DPDK's version string, e.g. "DPDK 22.11.11".
pub fn version() -> String {
    // SAFETY: rte_version returns a pointer to a static NUL-terminated string.
    unsafe {
        CStr::from_ptr(ffi::rte_version())
            .to_string_lossy()
            .into_owned()
    }
}

static EAL_UP: AtomicBool = AtomicBool::new(false);

/// The initialised Environment Abstraction Layer. DPDK allows one initialisation per process;
/// a second [`Eal::init`] fails with a clear error instead of DPDK's `EALREADY`.
#[derive(Debug)]
pub struct Eal {
    tsc_hz: u64,
    /// Arguments EAL did not consume (after a `--`), for the caller.
    pub rest: Vec<String>,
}

impl Eal {
    /// Initialise EAL with `args`, exactly as a DPDK program's `argv` (the first is the program
    /// name). The arguments are passed through unchanged.
    pub fn init<I, S>(args: I) -> Result<Eal, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let args: Vec<String> = args.into_iter().map(|s| s.as_ref().to_owned()).collect();
        if EAL_UP.swap(true, Ordering::SeqCst) {
            return Err(Error::new(
                "rte_eal_init: EAL is already initialised in this process (DPDK allows one \
                 initialisation per process)",
                114, // EALREADY
            ));
        }
        let mut cstrs = Vec::with_capacity(args.len());
        for a in &args {
            match CString::new(a.as_str()) {
                Ok(c) => cstrs.push(c),
                Err(_) => {
                    EAL_UP.store(false, Ordering::SeqCst);
                    return Err(Error::new(format!("EAL argument {a:?} contains NUL"), 22));
                }
            }
        }
        // EAL may keep pointers into argv (it does for some options), so the strings and the
        // array live for the rest of the process.
        let mut argv: Vec<*mut c_char> = cstrs.into_iter().map(|c| c.into_raw()).collect();
        argv.push(std::ptr::null_mut());
        let argv: &'static mut [*mut c_char] = Box::leak(argv.into_boxed_slice());
        let argc = (argv.len() - 1) as c_int;
        // SAFETY: argv is a NULL-terminated array of argc valid, NUL-terminated, writable
        // strings leaked for the life of the process (EAL may permute and keep them).
        let n = unsafe { ffi::rte_eal_init(argc, argv.as_mut_ptr()) };
        if n < 0 {
            // EAL cannot be initialised twice even after a failure.
            return Err(Error::errno(format!("rte_eal_init({})", args.join(" "))));
        }
        let rest = args.iter().skip(n as usize + 1).cloned().collect();
        runtime_dir::tidy();
        // SAFETY: EAL is initialised; rte_get_tsc_hz reads a global set by it.
        let tsc_hz = unsafe { ffi::ferroce_tsc_hz() };
        Ok(Eal { tsc_hz, rest })
    }

    /// Whether EAL was initialised in this process.
    pub fn is_initialised() -> bool {
        EAL_UP.load(Ordering::SeqCst)
    }

    pub fn tsc_hz(&self) -> u64 {
        self.tsc_hz
    }

    /// Ids of the worker lcores (every enabled lcore but the main one).
    pub fn worker_lcores(&self) -> Vec<u32> {
        let mut v = Vec::new();
        // rte_get_next_lcore returns RTE_MAX_LCORE and above once past the last enabled lcore:
        // stop at the number of workers EAL has (every enabled lcore but the main one).
        // SAFETY: EAL is initialised; both only read the lcore configuration.
        let workers = unsafe { ffi::rte_lcore_count() }.saturating_sub(1) as usize;
        // SAFETY: as above.
        let mut i = unsafe { ffi::rte_get_next_lcore(u32::MAX, 1, 0) };
        while v.len() < workers && (i as usize) < 1024 {
            v.push(i);
            // SAFETY: as above.
            i = unsafe { ffi::rte_get_next_lcore(i, 1, 0) };
        }
        v
    }

    /// The lcore id of the calling thread (`u32::MAX` for a non-EAL thread).
    pub fn current_lcore() -> u32 {
        // SAFETY: reads a thread-local; no preconditions.
        unsafe { ffi::ferroce_lcore_id() }
    }

    /// Run `f` on worker lcore `lcore` (which must be idle). Join with [`LcoreJob::join`].
    pub fn launch<F, T>(&self, lcore: u32, f: F) -> Result<LcoreJob<T>, Error>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let slot: Arc<Mutex<Option<std::thread::Result<T>>>> = Arc::new(Mutex::new(None));
        let s2 = slot.clone();
        let job: Box<dyn FnOnce() + Send> = Box::new(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            if let Ok(mut g) = s2.lock() {
                *g = Some(r);
            }
        });
        let raw = Box::into_raw(Box::new(job)) as *mut c_void;
        unsafe extern "C" fn trampoline(arg: *mut c_void) -> c_int {
            // SAFETY: arg is the Box<Box<dyn FnOnce>> leaked by `launch`, handed to exactly
            // one lcore, so we own it here.
            let job = unsafe { Box::from_raw(arg as *mut Box<dyn FnOnce() + Send>) };
            job();
            0
        }
        // SAFETY: trampoline has the lcore_function_t signature; `raw` stays valid until the
        // trampoline takes it back; on failure we take it back ourselves.
        let rc = unsafe { ffi::rte_eal_remote_launch(Some(trampoline), raw, lcore) };
        if rc != 0 {
            // SAFETY: the launch failed, so nobody else owns `raw`.
            drop(unsafe { Box::from_raw(raw as *mut Box<dyn FnOnce() + Send>) });
            return Err(Error::new(
                format!("rte_eal_remote_launch(lcore {lcore})"),
                rc,
            ));
        }
        Ok(LcoreJob { lcore, slot })
    }

    /// Create a vdev (`rte_vdev_init`), e.g. ("net_ring0", "") or
    /// ("net_af_packet0", "iface=veth0,framecnt=8192"); returns its port id.
    pub fn vdev(&self, name: &str, args: &str) -> Result<u16, Error> {
        let n = CString::new(name).map_err(|_| Error::new("vdev name has NUL", 22))?;
        let a = CString::new(args).map_err(|_| Error::new("vdev args have NUL", 22))?;
        // SAFETY: both are valid NUL-terminated strings that outlive the call (DPDK copies).
        let rc = unsafe { ffi::rte_vdev_init(n.as_ptr(), a.as_ptr()) };
        if rc != 0 {
            return Err(Error::new(format!("rte_vdev_init({name}, {args})"), rc));
        }
        Port::id_by_name(name)
    }

    /// Two net_ring ports joined back to back: what one sends the other receives. `name` is
    /// short (at most 17 bytes): the ports are "net_ring_<name>_0" and "net_ring_<name>_1".
    pub fn ring_pair(&self, name: &str, size: u32) -> Result<(u16, u16), Error> {
        let mk = |suffix: &str| -> Result<*mut ffi::rte_ring, Error> {
            let rn = CString::new(format!("{name}_{suffix}")).expect("no NUL");
            // SAFETY: valid name; EAL initialised; single producer / single consumer rings
            // since each side has one tx and one rx queue used by one thread.
            let r = unsafe {
                ffi::rte_ring_create(
                    rn.as_ptr(),
                    size,
                    ffi::rte_socket_id() as c_int,
                    ffi::RING_F_SP_ENQ | ffi::RING_F_SC_DEQ,
                )
            };
            if r.is_null() {
                Err(Error::errno(format!("rte_ring_create({name}_{suffix})")))
            } else {
                Ok(r)
            }
        };
        let ab = mk("ab")?;
        let ba = mk("ba")?;
        let mut ports = [0u16; 2];
        for (k, (rx, tx)) in [(ba, ab), (ab, ba)].into_iter().enumerate() {
            // rte_eth_from_rings names the port "net_ring_<name>" (at most 28 bytes in all).
            let pn = format!("{name}_{k}");
            let cn = CString::new(pn.clone()).expect("no NUL");
            let rxq = [rx];
            let txq = [tx];
            // SAFETY: the arrays hold one valid ring each; rte_eth_from_rings copies them;
            // the rings are never freed while the ports exist (they live for the process).
            let rc = unsafe {
                ffi::rte_eth_from_rings(
                    cn.as_ptr(),
                    rxq.as_ptr(),
                    1,
                    txq.as_ptr(),
                    1,
                    ffi::rte_socket_id(),
                )
            };
            if rc < 0 {
                return Err(Error::errno(format!("rte_eth_from_rings({pn})")));
            }
            ports[k] = rc as u16;
        }
        Ok((ports[0], ports[1]))
    }

    /// Port ids of every probed port.
    pub fn ports(&self) -> Vec<u16> {
        let mut v = Vec::new();
        // SAFETY: rte_eth_find_next only reads the port table.
        let mut p = unsafe { ffi::rte_eth_find_next(0) } as u32;
        while p < ffi::RTE_MAX_ETHPORTS {
            v.push(p as u16);
            // SAFETY: as above.
            p = unsafe { ffi::rte_eth_find_next((p + 1) as u16) } as u32;
        }
        v
    }
}

/// A function running on a worker lcore.
#[derive(Debug)]
pub struct LcoreJob<T> {
    lcore: u32,
    slot: Arc<Mutex<Option<std::thread::Result<T>>>>,
}

impl<T> LcoreJob<T> {
    pub fn lcore(&self) -> u32 {
        self.lcore
    }

    /// Wait for it to return; a panic in it is resumed here.
    pub fn join(self) -> T {
        // rte_eal_wait_lcore spins; wait for the result politely first (a core is precious
        // when the job shares the machine with the kernel's packet processing).
        while self.slot.lock().map(|g| g.is_none()).unwrap_or(false) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // SAFETY: waits for the lcore we launched on; no memory is shared through the call.
        unsafe { ffi::rte_eal_wait_lcore(self.lcore) };
        let r = self
            .slot
            .lock()
            .ok()
            .and_then(|mut g| g.take())
            .expect("lcore job finished without a result");
        match r {
            Ok(v) => v,
            Err(p) => std::panic::resume_unwind(p),
        }
    }
}

struct PoolInner(NonNull<ffi::rte_mempool>);

// SAFETY: DPDK mempools are multi-producer/multi-consumer safe (get/put from any thread; the
// per-lcore caches are per thread).
unsafe impl Send for PoolInner {}
// SAFETY: as above; &PoolInner only hands out the pointer to thread-safe DPDK calls.
unsafe impl Sync for PoolInner {}

impl Drop for PoolInner {
    fn drop(&mut self) {
        // SAFETY: the pool is valid; we free it only when no mbuf is out of it (an mbuf alive
        // after the free would be a use after free), otherwise it is left for process exit.
        unsafe {
            if ffi::rte_mempool_in_use_count(self.0.as_ptr()) == 0 {
                ffi::rte_mempool_free(self.0.as_ptr());
            }
        }
    }
}

/// A packet-mbuf pool (`rte_pktmbuf_pool_create`), shared by reference counting.
#[derive(Clone)]
pub struct Mempool(Arc<PoolInner>);

impl fmt::Debug for Mempool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Mempool({:p})", self.0 .0.as_ptr())
    }
}

impl Mempool {
    /// `n` mbufs with `data_room` bytes each (including DPDK's headroom), `cache` per lcore.
    pub fn new(_eal: &Eal, name: &str, n: u32, cache: u32, data_room: u16) -> Result<Self, Error> {
        let cn = CString::new(name).map_err(|_| Error::new("pool name has NUL", 22))?;
        // SAFETY: EAL is initialised (we hold &Eal); the name is a valid C string DPDK copies.
        let p = unsafe {
            ffi::rte_pktmbuf_pool_create(
                cn.as_ptr(),
                n,
                cache,
                0,
                data_room,
                ffi::rte_socket_id() as c_int,
            )
        };
        match NonNull::new(p) {
            Some(p) => Ok(Mempool(Arc::new(PoolInner(p)))),
            None => Err(Error::errno(format!(
                "rte_pktmbuf_pool_create({name}, {n} mbufs of {data_room} B)"
            ))),
        }
    }

    pub fn as_ptr(&self) -> *mut ffi::rte_mempool {
        self.0 .0.as_ptr()
    }

    /// One mbuf, empty, with its data pointer after the headroom.
    #[inline]
    pub fn alloc(&self) -> Option<Mbuf> {
        // SAFETY: the pool is valid while self lives; the mbuf returned is ours.
        NonNull::new(unsafe { ffi::ferroce_pktmbuf_alloc(self.as_ptr()) }).map(Mbuf)
    }

    /// Free mbufs available.
    pub fn available(&self) -> u32 {
        // SAFETY: reads counters of a valid pool.
        unsafe { ffi::rte_mempool_avail_count(self.as_ptr()) }
    }

    /// Bytes of headroom DPDK leaves in front of a fresh mbuf's data.
    pub fn headroom() -> u32 {
        // SAFETY: returns a compile-time constant.
        unsafe { ffi::ferroce_pktmbuf_headroom() }
    }
}

/// An owned single mbuf (chain). Dropping it frees it back to its pool.
#[repr(transparent)]
pub struct Mbuf(NonNull<ffi::rte_mbuf>);

// SAFETY: an mbuf is plain memory owned by whoever holds the pointer; freeing it from another
// thread is allowed (mempool put is thread-safe).
unsafe impl Send for Mbuf {}

impl fmt::Debug for Mbuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Mbuf({} B)", self.len())
    }
}

impl Drop for Mbuf {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: we own the mbuf and never use the pointer again.
        unsafe { ffi::ferroce_pktmbuf_free(self.0.as_ptr()) }
    }
}

impl Mbuf {
    /// Bytes of the first segment (`data_len`).
    #[inline]
    pub fn len(&self) -> usize {
        // SAFETY: a valid mbuf we own.
        unsafe { ffi::ferroce_pktmbuf_data_len(self.0.as_ptr()) as usize }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Total packet length over all segments (`pkt_len`).
    pub fn pkt_len(&self) -> usize {
        // SAFETY: a valid mbuf we own.
        unsafe { ffi::ferroce_pktmbuf_pkt_len(self.0.as_ptr()) as usize }
    }

    /// Number of segments (1 for everything ferroce builds).
    pub fn segments(&self) -> u16 {
        // SAFETY: a valid mbuf we own.
        unsafe { ffi::ferroce_pktmbuf_nb_segs(self.0.as_ptr()) }
    }

    /// The first segment's data.
    #[inline]
    pub fn data(&self) -> &[u8] {
        // SAFETY: data pointer and data_len describe initialised bytes inside the mbuf's
        // buffer, which we own for as long as &self lives.
        unsafe {
            std::slice::from_raw_parts(ffi::ferroce_pktmbuf_data(self.0.as_ptr()), self.len())
        }
    }

    /// The first segment's data, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let len = self.len();
        // SAFETY: as in `data`, and &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(ffi::ferroce_pktmbuf_data(self.0.as_ptr()), len) }
    }

    /// Everything from the data pointer to the end of the buffer, to build a packet in; then
    /// [`Mbuf::set_len`]. Bytes past the current length may hold old data.
    #[inline]
    pub fn room_mut(&mut self) -> &mut [u8] {
        // SAFETY: data pointer .. buf_len is inside the mbuf's buffer (mbuf memory is
        // allocated and was initialised by DPDK when the pool was created); exclusive via
        // &mut self.
        unsafe {
            let room = ffi::ferroce_pktmbuf_room(self.0.as_ptr()) as usize;
            std::slice::from_raw_parts_mut(ffi::ferroce_pktmbuf_data(self.0.as_ptr()), room)
        }
    }

    /// Set the (single-segment) length; panics if it exceeds the room.
    #[inline]
    pub fn set_len(&mut self, len: usize) {
        // SAFETY: a valid mbuf we own; the pointer is not kept.
        let room = unsafe { ffi::ferroce_pktmbuf_room(self.0.as_ptr()) } as usize;
        assert!(len <= room, "mbuf length {len} > room {room}");
        // SAFETY: len fits the buffer (checked), and the mbuf is ours.
        unsafe { ffi::ferroce_pktmbuf_set_len(self.0.as_ptr(), len as u16) }
    }

    /// Give up ownership (the pointer goes to DPDK, which frees it).
    pub fn into_raw(self) -> *mut ffi::rte_mbuf {
        let p = self.0.as_ptr();
        std::mem::forget(self);
        p
    }

    /// Take ownership of a raw mbuf.
    ///
    /// # Safety
    /// `p` must be a valid mbuf nobody else owns or frees.
    pub unsafe fn from_raw(p: *mut ffi::rte_mbuf) -> Option<Mbuf> {
        NonNull::new(p).map(Mbuf)
    }
}

/// How to set a port up.
#[derive(Clone, Debug)]
pub struct PortConfig {
    pub rx_desc: u16,
    pub tx_desc: u16,
    /// Set the port MTU (IP MTU); None keeps the driver's.
    pub mtu: Option<u16>,
    pub promiscuous: bool,
}

impl Default for PortConfig {
    fn default() -> Self {
        PortConfig {
            rx_desc: 1024,
            tx_desc: 1024,
            mtu: None,
            promiscuous: false,
        }
    }
}

/// Link state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    pub up: bool,
    pub speed_mbps: u32,
}

/// Driver-level port statistics (`rte_eth_stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    pub ipackets: u64,
    pub opackets: u64,
    pub ibytes: u64,
    pub obytes: u64,
    pub imissed: u64,
    pub ierrors: u64,
    pub oerrors: u64,
    pub rx_nombuf: u64,
}

/// A started ethdev port with one rx and one tx queue. Dropping it stops and closes it.
pub struct Port {
    id: u16,
    pool: Mempool,
    name: String,
}

impl fmt::Debug for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Port({} {})", self.id, self.name)
    }
}

impl Port {
    /// The port id of a device name (e.g. "net_af_packet0", "0000:01:00.0").
    pub fn id_by_name(name: &str) -> Result<u16, Error> {
        let cn = CString::new(name).map_err(|_| Error::new("port name has NUL", 22))?;
        let mut id = 0u16;
        // SAFETY: valid C string and out-pointer.
        let rc = unsafe { ffi::rte_eth_dev_get_port_by_name(cn.as_ptr(), &mut id) };
        if rc != 0 {
            return Err(Error::new(format!("no DPDK port named {name:?}"), rc));
        }
        Ok(id)
    }

    /// The device name of a port id.
    pub fn name_of(id: u16) -> Option<String> {
        let mut buf = [0 as c_char; 64];
        // SAFETY: buf is large enough (RTE_ETH_NAME_MAX_LEN is 64) and NUL-terminated by DPDK.
        let rc = unsafe { ffi::rte_eth_dev_get_name_by_port(id, buf.as_mut_ptr()) };
        if rc != 0 {
            return None;
        }
        // SAFETY: DPDK wrote a NUL-terminated string into buf.
        Some(
            unsafe { CStr::from_ptr(buf.as_ptr()) }
                .to_string_lossy()
                .into_owned(),
        )
    }

    /// Configure port `id` with one rx and one tx queue receiving into `pool`, and start it.
    pub fn start(_eal: &Eal, id: u16, pool: &Mempool, cfg: &PortConfig) -> Result<Port, Error> {
        let name = Port::name_of(id).unwrap_or_else(|| format!("port {id}"));
        // SAFETY: rte_eth_conf is a plain C struct for which all-zero is the default
        // configuration.
        let conf: ffi::rte_eth_conf = unsafe { std::mem::zeroed() };
        // SAFETY: valid port id (checked by DPDK) and a valid conf pointer.
        let rc = unsafe { ffi::rte_eth_dev_configure(id, 1, 1, &conf) };
        if rc != 0 {
            return Err(Error::new(format!("rte_eth_dev_configure({name})"), rc));
        }
        if let Some(mtu) = cfg.mtu {
            // SAFETY: valid port; plain value argument.
            let rc = unsafe { ffi::rte_eth_dev_set_mtu(id, mtu) };
            if rc != 0 && rc != -95 {
                // -ENOTSUP: the PMD has no MTU setting (net_ring); frames are sized by us.
                return Err(Error::new(
                    format!("rte_eth_dev_set_mtu({name}, {mtu})"),
                    rc,
                ));
            }
        }
        let mut rxd = cfg.rx_desc;
        let mut txd = cfg.tx_desc;
        // SAFETY: valid port and out-pointers.
        let rc = unsafe { ffi::rte_eth_dev_adjust_nb_rx_tx_desc(id, &mut rxd, &mut txd) };
        if rc != 0 {
            return Err(Error::new(
                format!("rte_eth_dev_adjust_nb_rx_tx_desc({name})"),
                rc,
            ));
        }
        // SAFETY: valid port; NULL rx/tx conf means the driver's defaults; the pool outlives
        // the port (the Port holds a clone of it).
        let rc = unsafe {
            ffi::rte_eth_rx_queue_setup(
                id,
                0,
                rxd,
                ffi::rte_eth_dev_socket_id(id) as c_uint,
                std::ptr::null(),
                pool.as_ptr(),
            )
        };
        if rc != 0 {
            return Err(Error::new(format!("rte_eth_rx_queue_setup({name})"), rc));
        }
        // SAFETY: as above.
        let rc = unsafe {
            ffi::rte_eth_tx_queue_setup(
                id,
                0,
                txd,
                ffi::rte_eth_dev_socket_id(id) as c_uint,
                std::ptr::null(),
            )
        };
        if rc != 0 {
            return Err(Error::new(format!("rte_eth_tx_queue_setup({name})"), rc));
        }
        // SAFETY: configured port.
        let rc = unsafe { ffi::rte_eth_dev_start(id) };
        // A net_memif client fails to start while its server is not listening yet; it is
        // left configured and down, to be connected by `restart` (the order in which two
        // programs start must not matter).
        if rc != 0 && !name.starts_with("net_memif") {
            return Err(Error::new(format!("rte_eth_dev_start({name})"), rc));
        }
        if cfg.promiscuous {
            // SAFETY: started port. Failure (unsupported) is harmless.
            unsafe { ffi::rte_eth_promiscuous_enable(id) };
        }
        Ok(Port {
            id,
            pool: pool.clone(),
            name,
        })
    }

    /// Stop and start the port again, keeping its configuration and queues. A net_memif
    /// client connects to its server's socket only when started and never retries, so a
    /// client started before its server stays down until restarted.
    pub fn restart(&mut self) -> Result<(), Error> {
        // SAFETY: a started port owned by this Port; stop then start keeps the queues set up
        // by `Port::start` (the pool they receive into is held by this Port).
        let rc = unsafe {
            ffi::rte_eth_dev_stop(self.id);
            ffi::rte_eth_dev_start(self.id)
        };
        if rc != 0 {
            return Err(Error::new(format!("rte_eth_dev_start({})", self.name), rc));
        }
        Ok(())
    }

    pub fn id(&self) -> u16 {
        self.id
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pool(&self) -> &Mempool {
        &self.pool
    }

    /// The port's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        let mut a = ffi::rte_ether_addr::default();
        // SAFETY: valid port and out-pointer.
        unsafe { ffi::rte_eth_macaddr_get(self.id, &mut a) };
        a.addr_bytes
    }

    pub fn link(&self) -> Link {
        let mut l = ffi::rte_eth_link::default();
        // SAFETY: valid port and out-pointer; the nowait variant does not block.
        unsafe { ffi::rte_eth_link_get_nowait(self.id, &mut l) };
        Link {
            up: l.link_status() != 0,
            speed_mbps: l.link_speed,
        }
    }

    pub fn stats(&self) -> PortStats {
        let mut s = ffi::rte_eth_stats::default();
        // SAFETY: valid port and out-pointer.
        unsafe { ffi::rte_eth_stats_get(self.id, &mut s) };
        PortStats {
            ipackets: s.ipackets,
            opackets: s.opackets,
            ibytes: s.ibytes,
            obytes: s.obytes,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        }
    }

    /// Receive up to `max` packets, appended to `out`; returns how many.
    #[inline]
    pub fn rx_burst(&mut self, out: &mut Vec<Mbuf>, max: u16) -> usize {
        out.reserve(max as usize);
        let len = out.len();
        // SAFETY: `out` has room for `max` more pointers; Mbuf is repr(transparent) over a
        // non-null rte_mbuf pointer, and the driver writes only valid, owned mbufs (n of them)
        // which we then own through the Vec. &mut self: one thread per queue.
        unsafe {
            let p = out.as_mut_ptr().add(len) as *mut *mut ffi::rte_mbuf;
            let n = ffi::ferroce_rx_burst(self.id, 0, p, max) as usize;
            out.set_len(len + n);
            n
        }
    }

    /// Send packets from the front of `pkts`; the ones sent are removed (the driver owns them
    /// now), the rest stay in order. Returns how many were sent.
    #[inline]
    pub fn tx_burst(&mut self, pkts: &mut Vec<Mbuf>) -> usize {
        let len = pkts.len();
        if len == 0 {
            return 0;
        }
        let n = len.min(u16::MAX as usize) as u16;
        // SAFETY: the Vec holds `len` valid owned mbufs; the driver takes ownership of the
        // first `sent`, so we drop them from the Vec without freeing (set_len after moving
        // the unsent ones to the front; Mbuf pointers are plain Copy data).
        unsafe {
            let p = pkts.as_mut_ptr() as *mut *mut ffi::rte_mbuf;
            let sent = ffi::ferroce_tx_burst(self.id, 0, p, n) as usize;
            std::ptr::copy(p.add(sent), p, len - sent);
            pkts.set_len(len - sent);
            sent
        }
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        // SAFETY: we started this port and nobody else uses it; stop then close releases its
        // queues (mbufs held in rx rings go back to the pool).
        unsafe {
            ffi::rte_eth_dev_stop(self.id);
            ffi::rte_eth_dev_close(self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shim_constants() {
        // SAFETY: constant-returning shim calls.
        let (sz, head) = unsafe {
            (
                ffi::ferroce_mbuf_struct_size(),
                ffi::ferroce_pktmbuf_headroom(),
            )
        };
        assert_eq!(sz, 128);
        assert_eq!(head, 128);
        assert!(version().starts_with("DPDK 22.11"), "{}", version());
    }
}
