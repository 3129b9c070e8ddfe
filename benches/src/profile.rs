//! Optional profiling of the transport engines: with `FERROCE_BENCH_PROFILE=1` every engine is
//! wrapped so the time spent in each `Transport` method is counted. The totals show where a
//! benchmark's wall time goes (transport vs. simulator and harness) without `perf`.

use ferroce_transport::mem::Memory;
use ferroce_transport::*;
use std::cell::RefCell;
use std::net::Ipv4Addr;
use std::time::Instant;

/// The methods measured.
pub const METHODS: [&str; 8] = [
    "handle_datagram",
    "poll_transmit",
    "poll_timeout",
    "handle_timeout",
    "post_send",
    "post_recv",
    "poll_completion",
    "poll_event",
];

thread_local! {
    static STATS: RefCell<[(u64, u64); 8]> = const { RefCell::new([(0, 0); 8]) };
}

/// Whether profiling was asked for (`FERROCE_BENCH_PROFILE` set to anything but `0`).
pub fn enabled() -> bool {
    std::env::var("FERROCE_BENCH_PROFILE").is_ok_and(|v| v != "0" && !v.is_empty())
}

/// (method, calls, total ns) for this thread, and resets the counters.
pub fn take() -> Vec<(&'static str, u64, u64)> {
    STATS.with(|s| {
        let mut s = s.borrow_mut();
        let out = METHODS
            .iter()
            .zip(s.iter())
            .map(|(m, (c, ns))| (*m, *c, *ns))
            .collect();
        *s = [(0, 0); 8];
        out
    })
}

#[inline]
fn timed<R>(i: usize, f: impl FnOnce() -> R) -> R {
    let t = Instant::now();
    let r = f();
    let ns = t.elapsed().as_nanos() as u64;
    STATS.with(|s| {
        let mut s = s.borrow_mut();
        s[i].0 += 1;
        s[i].1 += ns;
    });
    r
}

/// An engine that times every call into the engine it wraps.
pub struct Profiled(pub Box<dyn Transport>);

/// Wraps `ep` when profiling is enabled.
pub fn wrap(ep: Box<dyn Transport>) -> Box<dyn Transport> {
    if enabled() {
        Box::new(Profiled(ep))
    } else {
        ep
    }
}

impl Transport for Profiled {
    fn connect(&mut self, peer: Ipv4Addr) -> ConnId {
        self.0.connect(peer)
    }
    fn create_stream(&mut self, c: ConnId, l: u32, r: u32, pd: u32) -> Result<(), PostError> {
        self.0.create_stream(c, l, r, pd)
    }
    fn destroy_stream(&mut self, c: ConnId, l: u32) -> Result<(), PostError> {
        self.0.destroy_stream(c, l)
    }
    fn post_send(&mut self, c: ConnId, s: u32, wr: SendWr) -> Result<(), PostError> {
        timed(4, || self.0.post_send(c, s, wr))
    }
    fn post_recv(&mut self, c: ConnId, s: u32, wr: RecvWr) -> Result<(), PostError> {
        timed(5, || self.0.post_recv(c, s, wr))
    }
    fn receive(&mut self, now: u64, d: &RxDatagram<'_>, mem: &mut dyn Memory) {
        // The whole datagram goes through: NIC port and real headers included.
        timed(0, || self.0.receive(now, d, mem))
    }
    fn transmit(
        &mut self,
        now: u64,
        buf: &mut [u8],
        mem: &mut dyn Memory,
        ready: u64,
    ) -> Option<Transmit> {
        timed(1, || self.0.transmit(now, buf, mem, ready))
    }
    fn close(&mut self, c: ConnId) -> Result<(), PostError> {
        self.0.close(c)
    }
    fn poll_timeout(&self) -> Option<u64> {
        timed(2, || self.0.poll_timeout())
    }
    fn handle_timeout(&mut self, now: u64) {
        timed(3, || self.0.handle_timeout(now))
    }
    fn poll_completion(&mut self) -> Option<Completion> {
        timed(6, || self.0.poll_completion())
    }
    fn poll_event(&mut self) -> Option<Event> {
        timed(7, || self.0.poll_event())
    }
    fn compact_idle(&mut self) {
        self.0.compact_idle()
    }
    fn totals(&self) -> TransportTotals {
        self.0.totals()
    }
    fn udp_port(&self) -> u16 {
        self.0.udp_port()
    }
    fn accepts_connections(&self) -> bool {
        self.0.accepts_connections()
    }
    fn engine(&self) -> ferroce_transport::EngineRef<'_> {
        self.0.engine()
    }
    fn engine_mut(&mut self) -> ferroce_transport::EngineMut<'_> {
        self.0.engine_mut()
    }
}
