//! Engines joined back to back by net_ring, and the helpers the benchmark and tests share;
//! the command itself is [`cli`], its kernel UDP backend runs [`udp`].

mod cli;
pub mod sharded;
pub mod udp;
pub use cli::{main, BENCH_USAGE};

use crate::app::drive;
use crate::cpu::{alloc_counts, thread_cpu_ns};
use crate::engine::{self, Engine, EngineHandle, EngineParams};
use crate::io::{DpdkIo, PacketIo};
use ferroce_dpdk_sys::{Eal, Mempool, Port, PortConfig};
use ferroce_transport::EndpointConfig;
use std::sync::atomic::{AtomicU32, Ordering};

static PAIRS: AtomicU32 = AtomicU32::new(0);

/// Data room of the mbufs for an IP MTU (plus DPDK's headroom).
pub fn data_room(mtu: u16) -> u16 {
    ((mtu as u32 + 14 + 64).max(2048) + Mempool::headroom()).min(u16::MAX as u32) as u16
}

/// Two started ports joined by a pair of rings, each with its own pool of `mbufs`.
pub fn ring_ports(eal: &Eal, mtu: u16, mbufs: u32) -> Result<(Port, Port), String> {
    let k = PAIRS.fetch_add(1, Ordering::SeqCst);
    let (a, b) = eal
        .ring_pair(&format!("fr{k}"), 4096)
        .map_err(|e| e.to_string())?;
    let mut ports = Vec::new();
    for (i, id) in [a, b].into_iter().enumerate() {
        let pool = Mempool::new(eal, &format!("frp{k}_{i}"), mbufs, 128, data_room(mtu))
            .map_err(|e| e.to_string())?;
        ports.push(Port::start(eal, id, &pool, &PortConfig::default()).map_err(|e| e.to_string())?);
    }
    let b = ports.pop().expect("two ports");
    let a = ports.pop().expect("two ports");
    Ok((a, b))
}

/// An engine and its application handle.
pub type EnginePair = (Engine, EngineHandle);

/// Two engines joined by net_ring, running the native transport.
pub fn ring_engine_pair(
    eal: &Eal,
    mtu: u16,
    mbufs: u32,
    pa: EngineParams,
    pb: EngineParams,
    ecfg: EndpointConfig,
) -> Result<(EnginePair, EnginePair), String> {
    let (a, b) = ring_ports(eal, mtu, mbufs)?;
    let [ca, cb] = pair_endpoints(ecfg);
    let ea = Engine::new(
        a,
        engine::native_transport(mtu, ca).map_err(|e| e.to_string())?,
        pa,
        eal.tsc_hz(),
    )
    .map_err(|e| e.to_string())?;
    let eb = Engine::new(
        b,
        engine::native_transport(mtu, cb).map_err(|e| e.to_string())?,
        pb,
        eal.tsc_hz(),
    )
    .map_err(|e| e.to_string())?;
    Ok((ea, eb))
}

use crate::app::{PairDriver, WorkloadResult};
use crate::fault::FaultConfig;
use crate::net::{self, UdpHeader};
use ferroce_workload::{fill_pattern, OpKind, WorkloadSpec};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// Bytes a native WRITE/SEND data packet adds to its payload (base 8 + headers + CRC 4);
/// SEND carries 4 fewer header bytes than WRITE, we size raw frames like WRITE.
pub const DATA_OVERHEAD: usize = 8 + 40 + 4;

/// One line of results.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BenchRow {
    pub pmd: String,
    pub payload: u32,
    pub raw_mpps: f64,
    pub ferroce_mpps: f64,
    pub ratio: f64,
    pub goodput_gbps: f64,
    pub loss: f64,
    pub frame_bytes: usize,
    pub retx_pkts: u64,
    /// Thread CPU ns per frame of the raw loop.
    pub raw_cpu_ns_per_pkt: f64,
    /// Thread CPU ns of the engines' lcore per data packet, in the window.
    pub ferroce_cpu_ns_per_pkt: f64,
    /// raw_cpu_ns_per_pkt / ferroce_cpu_ns_per_pkt.
    pub cpu_ratio: f64,
    pub acks_per_pkt: f64,
    pub allocs_per_pkt: Option<f64>,
    pub alloc_bytes_per_pkt: Option<f64>,
    /// The benchmark's own verification (fill at the client + check at the server) per
    /// message, measured apart; it is part of ferroce_cpu_ns_per_pkt.
    pub verify_ns_per_msg: f64,
    pub window_data_pkts: u64,
    /// Worker lcores of the transport run (shards per engine), and with more than one the
    /// CPU ns per data packet of each lcore (its thread's CPU over its own shard's packets).
    pub lcores: usize,
    pub lcore_cpu_ns_per_pkt: Vec<f64>,
    pub ok: bool,
}

/// CPU ns per message of the benchmark's own verification for `payload` byte messages: the
/// client's fill of the pattern plus the server's check of every byte, as the applications
/// do them (into and in registered memory), measured apart on this thread (best of 3).
pub fn verification_ns(payload: u32) -> f64 {
    let n = 20_000u32;
    let mut buf = vec![0u8; payload as usize];
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t0 = thread_cpu_ns();
        let mut bad = 0usize;
        for i in 0..n {
            fill_pattern(&mut buf, i & 3, i);
            bad += crate::app::check_fast(std::hint::black_box(&buf), i & 3, i).is_some() as usize;
        }
        let dt = thread_cpu_ns().saturating_sub(t0);
        assert_eq!(bad, 0, "the pattern check refused its own fill");
        best = best.min(dt as f64 / n as f64);
    }
    best
}

/// What a raw run measured (after its warm-up).
#[derive(Clone, Copy, Debug, Default)]
pub struct RawRun {
    /// Received frames per second of wall time, in millions.
    pub mpps: f64,
    /// Frames received.
    pub frames: u64,
    /// CPU time of the thread over the same period (ns).
    pub cpu_ns: u64,
    /// Allocation calls and bytes over the same period, if counted.
    pub allocs: Option<(u64, u64)>,
}

impl RawRun {
    pub fn cpu_ns_per_pkt(&self) -> f64 {
        self.cpu_ns as f64 / self.frames.max(1) as f64
    }
}

/// Raw rate: one thread sends `frame` byte UDP frames on `a` and receives them on `b` for
/// `secs`; returns received frames per second (in millions). Like any sender and receiver of
/// data (and like the transport, which places payloads to and from registered memory), it
/// copies each payload into its frame and out of it again; headers are written per frame.
pub fn raw_rate(a: &mut Port, b: &mut Port, frame: usize, secs: f64) -> f64 {
    raw_run(a, b, frame, secs).mpps
}

/// [`raw_rate`], with the thread's CPU time and allocations over the measured period.
pub fn raw_run(a: &mut Port, b: &mut Port, frame: usize, secs: f64) -> RawRun {
    let pool = a.pool().clone();
    let hdr = UdpHeader {
        src_mac: a.mac(),
        dst_mac: b.mac(),
        src_ip: Ipv4Addr::new(198, 18, 1, 11),
        dst_ip: Ipv4Addr::new(198, 18, 1, 12),
        ip_id: 0,
        ttl: 64,
        ecn: 0,
        src_port: 49152,
        dst_port: 4792,
    };
    raw_loop(
        &pool,
        &hdr,
        frame,
        secs,
        &mut |q| {
            a.tx_burst(q);
        },
        &mut |q| {
            b.rx_burst(q, 64);
        },
    )
}

/// The raw loop over any device: `tx` sends (what it does not take stays queued), `rx`
/// appends what arrived; frames are built from `pool` with header `hdr`.
pub fn raw_loop(
    pool: &Mempool,
    hdr: &UdpHeader,
    frame: usize,
    secs: f64,
    tx: &mut dyn FnMut(&mut Vec<Mbuf>),
    rx: &mut dyn FnMut(&mut Vec<Mbuf>),
) -> RawRun {
    let payload = frame.saturating_sub(net::HDRS_LEN);
    let src: Vec<u8> = (0..payload).map(|i| i as u8).collect();
    let mut sink = vec![0u8; payload.max(1)];
    let mut check = 0u64;
    let mut txq: Vec<Mbuf> = Vec::with_capacity(64);
    let mut rxq: Vec<Mbuf> = Vec::with_capacity(64);
    let mut got = 0u64;
    let warm = Duration::from_millis(100);
    let t0 = Instant::now();
    let mut t_start = None;
    let mut cpu0 = 0;
    let mut a0 = None;
    let end = warm + Duration::from_secs_f64(secs);
    loop {
        let el = t0.elapsed();
        if el >= end {
            break;
        }
        if t_start.is_none() && el >= warm {
            t_start = Some(Instant::now());
            got = 0;
            cpu0 = thread_cpu_ns();
            a0 = alloc_counts();
        }
        while txq.len() < 32 {
            let Some(mut m) = pool.alloc() else { break };
            let room = m.room_mut();
            room[net::HDRS_LEN..net::HDRS_LEN + payload].copy_from_slice(&src);
            let n = net::write_udp(room, hdr, payload);
            m.set_len(n);
            txq.push(m);
        }
        tx(&mut txq);
        rx(&mut rxq);
        got += rxq.len() as u64;
        for m in rxq.drain(..) {
            let d = m.data();
            let n = d.len().saturating_sub(net::HDRS_LEN).min(sink.len());
            sink[..n].copy_from_slice(&d[net::HDRS_LEN..net::HDRS_LEN + n]);
            check = check.wrapping_add(sink[n / 2] as u64);
        }
    }
    std::hint::black_box(check);
    let cpu_ns = thread_cpu_ns().saturating_sub(cpu0);
    let allocs = alloc_delta(a0, alloc_counts());
    let el = t_start.map(|t| t.elapsed().as_secs_f64()).unwrap_or(secs);
    // Let what is in flight drain so the ports can be reused.
    let t1 = Instant::now();
    while t1.elapsed() < Duration::from_millis(50) {
        rx(&mut rxq);
        rxq.clear();
    }
    drop(txq);
    RawRun {
        mpps: got as f64 / el / 1e6,
        frames: got,
        cpu_ns,
        allocs,
    }
}

fn alloc_delta(a: Option<(u64, u64)>, b: Option<(u64, u64)>) -> Option<(u64, u64)> {
    let ((a0, b0), (a1, b1)) = (a?, b?);
    Some((a1.wrapping_sub(a0), b1.wrapping_sub(b0)))
}

/// What a transport run measured over its steady-state window: from the 10 % to the 90 %
/// mark of the client's completed work requests (connection set-up, cold start and the
/// final drain left out).
#[derive(Clone, Copy, Debug, Default)]
pub struct TransportWindow {
    /// CPU time of the lcore's thread (both engines and both applications, which all run
    /// on it), ns.
    pub cpu_ns: u64,
    pub wall_s: f64,
    /// Reliable data packets the server's transport received (with any duplicates).
    pub data_pkts: u64,
    /// ACKs the server's transport sent.
    pub acks: u64,
    /// Data packets the client's transport sent (resends included).
    pub tx_pkts: u64,
    /// Work requests completed at the client.
    pub msgs: u64,
    /// Allocation calls and bytes (whole process), if counted.
    pub allocs: Option<(u64, u64)>,
}

impl TransportWindow {
    pub fn cpu_ns_per_pkt(&self) -> f64 {
        self.cpu_ns as f64 / self.data_pkts.max(1) as f64
    }
    pub fn acks_per_pkt(&self) -> f64 {
        self.acks as f64 / self.data_pkts.max(1) as f64
    }
}

/// (rx data packets, ACKs sent, tx data packets) summed over an engine's connections.
fn conn_sums(e: &Engine) -> (u64, u64, u64) {
    let Some(ep) = e.transport().engine().native() else {
        return (0, 0, 0);
    };
    ep.connections().fold((0, 0, 0), |(r, a, t), c| {
        (
            r + c.counters().rx_pkts,
            a + c.counters().acks_sent,
            t + c.counters().tx_pkts,
        )
    })
}

#[derive(Clone, Copy)]
struct Mark {
    cpu_ns: u64,
    at: Instant,
    allocs: Option<(u64, u64)>,
    server: (u64, u64, u64),
    client: (u64, u64, u64),
    msgs: u64,
}

/// Start of a window: counters first (no allocation), then the clocks.
fn mark(engines: &[Engine], d: &PairDriver) -> Mark {
    let client = engines.first().map(conn_sums).unwrap_or_default();
    let server = engines.get(1).map(conn_sums).unwrap_or_default();
    Mark {
        cpu_ns: thread_cpu_ns(),
        at: Instant::now(),
        allocs: alloc_counts(),
        server,
        client,
        msgs: d.client.completed,
    }
}

/// As [`drive`], with a measured window between 10 % and 90 % of the client's `total`
/// work requests. `engines[0]` is the client's engine, `engines[1]` the server's.
fn drive_window(
    engines: &mut [Engine],
    d: &mut PairDriver,
    timeout: Duration,
    total: u64,
) -> (bool, TransportWindow) {
    drive_window_yield(engines, d, timeout, total, None)
}

/// [`drive_window`]; with `yield_after`, the thread yields its CPU after that many turns in a
/// row found nothing to do (a shard waiting for another lcore's frames, on a machine with
/// fewer cores than busy threads, would otherwise spin out its time slice).
fn drive_window_yield(
    engines: &mut [Engine],
    d: &mut PairDriver,
    timeout: Duration,
    total: u64,
    yield_after: Option<u32>,
) -> (bool, TransportWindow) {
    let t0 = Instant::now();
    let (lo, hi) = (total / 10, total - total / 10);
    let mut start: Option<Mark> = None;
    let mut w = TransportWindow::default();
    let mut n = 0u32;
    let mut idle = 0u32;
    loop {
        let mut work = false;
        for e in engines.iter_mut() {
            work |= e.poll();
        }
        work |= d.step();
        if let Some(y) = yield_after {
            idle = if work { 0 } else { idle + 1 };
            if idle >= y {
                idle = 0;
                std::thread::yield_now();
            }
        }
        n = n.wrapping_add(1);
        if n.is_multiple_of(64) {
            let done = d.client.completed;
            if start.is_none() && done >= lo {
                start = Some(mark(engines, d));
            }
            if let Some(m0) = start.filter(|_| w.cpu_ns == 0 && done >= hi) {
                let cpu1 = thread_cpu_ns();
                let a1 = alloc_counts();
                let m1 = mark(engines, d);
                w = TransportWindow {
                    cpu_ns: cpu1.saturating_sub(m0.cpu_ns).max(1),
                    wall_s: m0.at.elapsed().as_secs_f64(),
                    data_pkts: m1.server.0 - m0.server.0,
                    acks: m1.server.1 - m0.server.1,
                    tx_pkts: m1.client.2 - m0.client.2,
                    msgs: m1.msgs - m0.msgs,
                    allocs: alloc_delta(m0.allocs, a1),
                };
            }
            if n.is_multiple_of(256) {
                if d.done() {
                    return (false, w);
                }
                if t0.elapsed() > timeout {
                    return (true, w);
                }
            }
        }
    }
}

use ferroce_dpdk_sys::Mbuf;

fn bench_spec(payload: u32, messages: u32) -> WorkloadSpec {
    WorkloadSpec {
        streams: 4,
        messages,
        sizes: vec![payload],
        ops: vec![OpKind::Send],
        depth: 32,
        recv_depth: 256,
        seed: 1,
        ..Default::default()
    }
}

/// The two ends' configurations from one: the same settings, distinct seeds (the same in
/// every benchmark, so runs on one lcore and on several draw the same connection ids).
fn pair_endpoints(ecfg: EndpointConfig) -> [EndpointConfig; 2] {
    let mut ca = ecfg.clone();
    ca.seed ^= 0xa;
    let mut cb = ecfg;
    cb.seed ^= 0xb;
    [ca, cb]
}

fn bench_endpoint(line_rate_mbps: u32) -> EndpointConfig {
    let mut c = EndpointConfig {
        line_rate_mbps,
        ..Default::default()
    };
    c.conn.min_rto_ns = 2_000_000;
    c.conn.initial_rto_ns = 5_000_000;
    c.conn.initial_rtt_ns = 50_000;
    if let Some(p) = std::env::var("FERROCE_BENCH_PATHS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        c.conn.paths = p;
    }
    c
}

/// As the benchmark's own run, with the workload `spec(payload, messages per stream)` (hook
/// for `ferroce bench verbs` in verbs-shim, which compares the verbs shim with the engine's
/// own goodput and round trip on the same PMD): two engines on `a`/`b` on one worker lcore,
/// calibrated with 500 messages per stream, then sized to about `secs`; with `messages`,
/// one run of that many messages per stream instead (no calibration: a second driver on the
/// same engines registers the server's regions again under other keys, which the driver's
/// key check refuses in debug builds).
#[allow(clippy::too_many_arguments)]
pub fn transport_rate_spec(
    eal: &Eal,
    a: Port,
    b: Port,
    payload: u32,
    loss: f64,
    secs: f64,
    line_rate_mbps: u32,
    spec: fn(u32, u32) -> WorkloadSpec,
    messages: Option<u32>,
) -> Result<(WorkloadResult, u64), String> {
    transport_run_spec(
        eal,
        a,
        b,
        payload,
        loss,
        secs,
        line_rate_mbps,
        spec,
        messages,
    )
    .map(|(r, retx, _)| (r, retx))
}

/// [`transport_rate_spec`], with what the measured run's steady-state window cost
/// ([`TransportWindow`]).
#[allow(clippy::too_many_arguments)]
pub fn transport_run_spec(
    eal: &Eal,
    a: Port,
    b: Port,
    payload: u32,
    loss: f64,
    secs: f64,
    line_rate_mbps: u32,
    spec: fn(u32, u32) -> WorkloadSpec,
    messages: Option<u32>,
) -> Result<(WorkloadResult, u64, TransportWindow), String> {
    let dev = |p: Port| -> Device {
        let pool = p.pool().clone();
        (Box::new(DpdkIo::new(p)), pool)
    };
    transport_run_devices(
        eal,
        [dev(a), dev(b)],
        [Ipv4Addr::new(198, 18, 1, 11), Ipv4Addr::new(198, 18, 1, 12)],
        payload,
        loss,
        secs,
        line_rate_mbps,
        spec,
        messages,
    )
}

/// A device for an engine and the pool its frames come from.
pub type Device = (Box<dyn PacketIo>, Mempool);

/// [`transport_run_spec`] on any two devices, the engines at addresses `ips`.
#[allow(clippy::too_many_arguments)]
pub fn transport_run_devices(
    eal: &Eal,
    devs: [Device; 2],
    ips: [Ipv4Addr; 2],
    payload: u32,
    loss: f64,
    secs: f64,
    line_rate_mbps: u32,
    spec: fn(u32, u32) -> WorkloadSpec,
    messages: Option<u32>,
) -> Result<(WorkloadResult, u64, TransportWindow), String> {
    let [a, b] = devs;
    let streams = spec(payload, 1).streams.max(1) as f64;
    let [ipa, ipb] = ips;
    let fault = FaultConfig {
        loss,
        ..Default::default()
    };
    let mtu = 1500;
    let idle = std::env::var("FERROCE_BENCH_IDLE_POLLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let pa = EngineParams {
        ip: ipa,
        fault_tx: fault.clone(),
        seed: 1,
        idle_polls_before_sleep: idle,
        ..Default::default()
    };
    let pb = EngineParams {
        ip: ipb,
        fault_tx: fault,
        seed: 2,
        idle_polls_before_sleep: idle,
        ..Default::default()
    };
    let [ca, cb] = pair_endpoints(bench_endpoint(line_rate_mbps));
    let (ea, ha) = Engine::on_device(
        a.0,
        a.1,
        engine::native_transport(mtu, ca).map_err(|e| e.to_string())?,
        pa,
        eal.tsc_hz(),
    )
    .map_err(|e| e.to_string())?;
    let (eb, hb) = Engine::on_device(
        b.0,
        b.1,
        engine::native_transport(mtu, cb).map_err(|e| e.to_string())?,
        pb,
        eal.tsc_hz(),
    )
    .map_err(|e| e.to_string())?;
    let lcore = eal
        .worker_lcores()
        .first()
        .copied()
        .ok_or("the benchmark needs a worker lcore (--lcores with two)")?;
    // The applications run on the engines' lcore (polled between engine turns), as DPDK
    // applications usually do: no hand-off between threads on the data path.
    let job = eal
        .launch(lcore, move || {
            let mut engines = vec![ea, eb];
            if let Some(n) = messages {
                let spec = spec(payload, n);
                let total = spec.streams as u64 * spec.messages as u64;
                let mut d = PairDriver::new(&ha, &hb, ipb, &spec);
                let (to, w) = drive_window(
                    &mut engines,
                    &mut d,
                    Duration::from_secs_f64(secs * 10.0 + 10.0),
                    total,
                );
                let (cr, sr) = d.finish(to);
                let counters: Vec<_> = engines.into_iter().map(|e| e.shutdown()).collect();
                return (cr.clone(), cr, sr, counters, w);
            }
            // Calibrate with a short run, then size the measured one to `secs`.
            let cal = spec(payload, 500);
            let mut d0 = PairDriver::new(&ha, &hb, ipb, &cal);
            let t0 = drive(&mut engines, &mut d0, Duration::from_secs(20));
            let (c0, _) = d0.finish(t0);
            let rate = if c0.elapsed_s > 0.0 {
                c0.completed as f64 / c0.elapsed_s
            } else {
                10_000.0
            };
            let per_stream = ((rate * secs) / streams).clamp(500.0, 4_000_000.0) as u32;
            let spec = spec(payload, per_stream);
            let total = spec.streams as u64 * spec.messages as u64;
            let mut d = PairDriver::new(&ha, &hb, ipb, &spec);
            let (to, w) = drive_window(
                &mut engines,
                &mut d,
                Duration::from_secs_f64(secs * 10.0 + 10.0),
                total,
            );
            let (cr, sr) = d.finish(to);
            let counters: Vec<_> = engines.into_iter().map(|e| e.shutdown()).collect();
            (c0, cr, sr, counters, w)
        })
        .map_err(|e| e.to_string())?;
    let (c0, cr, sr, counters, w) = job.join();
    if std::env::var_os("FERROCE_BENCH_DEBUG").is_some() {
        eprintln!("client: {cr:?}");
        for c in &counters {
            eprintln!("{}", serde_json::to_string_pretty(c).unwrap_or_default());
        }
    }
    let retx = counters
        .first()
        .and_then(|c| c["transport"]["retx_pkts"].as_u64())
        .unwrap_or(0);
    let mut cr = cr;
    if !c0.ok {
        cr.errors
            .extend(c0.errors.iter().map(|e| format!("calibration: {e}")));
        cr.ok = false;
    }
    if !sr.ok {
        cr.errors
            .extend(sr.errors.iter().map(|e| format!("server: {e}")));
        cr.ok = false;
    }
    Ok((cr, retx, w))
}
