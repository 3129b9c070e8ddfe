//! Engines joined back to back by net_ring, and the helpers the benchmark and tests share.

use crate::app::drive;
use crate::cpu::{alloc_counts, thread_cpu_ns};
use crate::engine::{self, Engine, EngineHandle, EngineParams};
use ferroce_dpdk_sys::{Eal, Mempool, Port, PortConfig};
use ferroce_transport::{Endpoint, EndpointConfig};
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
    let mut ca = ecfg.clone();
    ca.seed ^= 0xa;
    let mut cb = ecfg;
    cb.seed ^= 0xb;
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
use crate::netns::{self, Hugepages, VethLoop};
use ferroce_workload::{fill_pattern, OpKind, WorkloadSpec};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

pub const BENCH_USAGE: &str = "\
usage: ferroce bench dataplane [--quick] [--pmd ring|af_packet|all] [--payloads 64,1024,mtu]
                               [--seconds S] [--loss P] [--csv FILE] [--no-huge]

  For each PMD and payload size: the raw DPDK packet rate of the same PMD with frames the
  size of the transport's data frames (one lcore sending on one port and receiving on the
  other), then ferroce's rate moving verified SENDs of that payload between two engines on
  the same PMD; prints the ratio transport/raw and the Gbit/s of verified goodput.
  Both runs use ONE worker lcore: the raw loop sends and receives on it; the transport run
  polls both engines and both applications (client and server) on it. Per row it also
  prints the thread CPU time of that lcore per data packet (raw: per frame received;
  ferroce: per data packet the server's transport received, over the window from 10 % to
  90 % of the work requests), ACKs per data packet and allocations per data packet (when
  the program counts them: `ferroce bench dataplane` does, `ferroce-dp bench` does not).
  ring: net_ring ports joined back to back in this process. af_packet: net_af_packet on the
  two ends of a veth pair in a network namespace the benchmark creates (needs root).
  --quick: short runs (0.25 s), net_ring only unless --pmd says otherwise.
  --loss P adds transport runs with P (e.g. 0.01) injected loss on both directions.
  Hugepages: 512 (1 GiB) are reserved for the run and released after (root), unless --no-huge.
  CSV columns: pmd,payload,raw_mpps,ferroce_mpps,ratio,goodput_gbps,loss,frame_bytes,retx_pkts,
  raw_cpu_ns_per_pkt,ferroce_cpu_ns_per_pkt,cpu_ratio,acks_per_pkt,allocs_per_pkt,
  alloc_bytes_per_pkt,verify_ns_per_msg,window_data_pkts";

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
            let n = net::write_udp(room, &hdr, payload);
            m.set_len(n);
            txq.push(m);
        }
        a.tx_burst(&mut txq);
        b.rx_burst(&mut rxq, 64);
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
        b.rx_burst(&mut rxq, 64);
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
    let Some(ep) = e.transport().as_any().downcast_ref::<Endpoint>() else {
        return (0, 0, 0);
    };
    ep.connections().fold((0, 0, 0), |(r, a, t), c| {
        (
            r + c.counters.rx_pkts,
            a + c.counters.acks_sent,
            t + c.counters.tx_pkts,
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
    let t0 = Instant::now();
    let (lo, hi) = (total / 10, total - total / 10);
    let mut start: Option<Mark> = None;
    let mut w = TransportWindow::default();
    let mut n = 0u32;
    loop {
        for e in engines.iter_mut() {
            e.poll();
        }
        d.step();
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

/// Two engines on `a`/`b`, the workload's SENDs of `payload` bytes for about `secs`.
fn transport_rate(
    eal: &Eal,
    a: Port,
    b: Port,
    payload: u32,
    loss: f64,
    secs: f64,
    line_rate_mbps: u32,
) -> Result<(WorkloadResult, u64, TransportWindow), String> {
    transport_run_spec(
        eal,
        a,
        b,
        payload,
        loss,
        secs,
        line_rate_mbps,
        bench_spec,
        None,
    )
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
    let streams = spec(payload, 1).streams.max(1) as f64;
    let ipa = Ipv4Addr::new(198, 18, 1, 11);
    let ipb = Ipv4Addr::new(198, 18, 1, 12);
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
    let ecfg = bench_endpoint(line_rate_mbps);
    let mut ca = ecfg.clone();
    ca.seed ^= 0xa;
    let mut cb = ecfg;
    cb.seed ^= 0xb;
    let (ea, ha) = Engine::new(
        a,
        engine::native_transport(mtu, ca).map_err(|e| e.to_string())?,
        pa,
        eal.tsc_hz(),
    )
    .map_err(|e| e.to_string())?;
    let (eb, hb) = Engine::new(
        b,
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

struct Args {
    pmds: Vec<String>,
    payloads: Vec<u32>,
    secs: f64,
    loss: Option<f64>,
    csv: Option<String>,
    huge: bool,
    quick: bool,
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        pmds: vec!["ring".into(), "af_packet".into()],
        payloads: vec![64, 1024, engine::payload_mtu(1500) as u32],
        secs: 1.0,
        loss: None,
        csv: None,
        huge: true,
        quick: false,
    };
    let (mut pmd_set, mut secs_set) = (false, false);
    let mut it = args.iter();
    while let Some(x) = it.next() {
        let mut val = || it.next().cloned().ok_or(format!("{x} needs a value"));
        match x.as_str() {
            "--pmd" => {
                let v = val()?;
                pmd_set = true;
                a.pmds = match v.as_str() {
                    "all" => vec!["ring".into(), "af_packet".into()],
                    "ring" | "net_ring" => vec!["ring".into()],
                    "af_packet" | "net_af_packet" | "veth" => vec!["af_packet".into()],
                    _ => return Err(format!("--pmd: unknown {v:?} (ring, af_packet, all)")),
                }
            }
            "--payloads" => {
                a.payloads = val()?
                    .split(',')
                    .map(|p| {
                        if p == "mtu" {
                            Ok(engine::payload_mtu(1500) as u32)
                        } else {
                            p.parse::<u32>()
                                .map_err(|_| format!("--payloads: bad size {p:?}"))
                        }
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--seconds" => {
                secs_set = true;
                a.secs = val()?
                    .parse()
                    .map_err(|_| "--seconds: not a number".to_string())?
            }
            "--loss" => {
                a.loss = Some(
                    val()?
                        .parse()
                        .map_err(|_| "--loss: not a number".to_string())?,
                )
            }
            "--csv" => a.csv = Some(val()?),
            "--no-huge" => a.huge = false,
            "--quick" => a.quick = true,
            "-h" | "--help" => return Err(String::new()),
            _ => return Err(format!("unknown argument {x:?}")),
        }
    }
    if a.quick {
        if !pmd_set {
            a.pmds = vec!["ring".into()];
        }
        if !secs_set {
            a.secs = 0.25;
        }
    }
    Ok(a)
}

/// `ferroce bench dataplane`.
pub fn main(args: &[String]) -> i32 {
    let a = match parse_args(args) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("ferroce bench dataplane: {e}");
            }
            eprintln!("{BENCH_USAGE}");
            return if e.is_empty() { 0 } else { 2 };
        }
    };
    match run(&a) {
        Ok(rows) => {
            if rows.iter().all(|r| r.ok) {
                0
            } else {
                1
            }
        }
        Err(e) => {
            eprintln!("ferroce bench dataplane: {e}");
            1
        }
    }
}

fn run(a: &Args) -> Result<Vec<BenchRow>, String> {
    let root = netns::is_root();
    if !root {
        return Err("needs root (DPDK, hugepages, network namespaces)".into());
    }
    let veth = if a.pmds.iter().any(|p| p == "af_packet") {
        let v = VethLoop::create("bn").map_err(|e| format!("veth set-up: {e}"))?;
        netns::enter_netns(&v.ns).map_err(|e| format!("setns {}: {e}", v.ns))?;
        Some(v)
    } else {
        None
    };
    let _huge = if a.huge {
        match Hugepages::reserve(512) {
            Ok(h) => Some(h),
            Err(e) => {
                eprintln!("ferroce bench dataplane: no hugepages ({e}); running with --no-huge");
                None
            }
        }
    } else {
        None
    };
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let set = if cpus > 1 {
        format!("0-{}", cpus - 1)
    } else {
        "0".into()
    };
    let mut eal_args = vec![
        "ferroce-bench".to_string(),
        "--no-pci".into(),
        format!("--lcores=0@({set}),1@({set})"),
        "--log-level=warning".into(),
        format!("--file-prefix=ferroce-bench-{}", std::process::id()),
    ];
    if _huge.is_some() {
        eal_args.push("--in-memory".into());
    } else {
        eal_args.extend([
            "--no-huge".into(),
            "--no-shconf".into(),
            "-m".into(),
            "1024".into(),
        ]);
    }
    let eal = Eal::init(&eal_args).map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    let mut k = 0u32;
    eprintln!(
        "{} on {} cpus, {}",
        ferroce_dpdk_sys::version(),
        cpus,
        if _huge.is_some() {
            "hugepages"
        } else {
            "no hugepages"
        }
    );
    println!(
        "both runs on one worker lcore: raw = one loop sending and receiving; ferroce = both \
         engines and both applications (client, server) polled in turn{}",
        if a.quick { "; --quick" } else { "" }
    );
    println!(
        "{:<10} {:>7} {:>7} {:>10} {:>12} {:>7} {:>13} {:>6} {:>11} {:>11} {:>9} {:>9} {:>10} {:>7} {:>6}",
        "pmd",
        "payload",
        "frame",
        "raw Mpps",
        "ferroce Mpps",
        "ratio",
        "goodput Gb/s",
        "loss",
        "raw ns/pkt",
        "fer ns/pkt",
        "cpu ratio",
        "ACKs/pkt",
        "allocs/pkt",
        "B/pkt",
        "ok"
    );
    let mut verify: Vec<(u32, f64)> = Vec::new();
    for pmd in &a.pmds {
        for &p in &a.payloads {
            let frame = net::HDRS_LEN + DATA_OVERHEAD + p as usize;
            let mk = |k: &mut u32| -> Result<(Port, Port), String> {
                *k += 1;
                if pmd == "ring" {
                    ring_ports(&eal, 1500, 8191)
                } else {
                    let v = veth.as_ref().expect("veth made");
                    let mut ports = Vec::new();
                    for (i, ifn) in v.ifname.iter().enumerate() {
                        let id = eal
                            .vdev(
                                &format!("net_af_packet{}{i}", *k),
                                &format!("iface={ifn},framecnt=8192"),
                            )
                            .map_err(|e| e.to_string())?;
                        let pool = Mempool::new(
                            &eal,
                            &format!("fbp{}_{i}", *k),
                            16383,
                            256,
                            data_room(1500),
                        )
                        .map_err(|e| e.to_string())?;
                        ports.push(
                            Port::start(&eal, id, &pool, &PortConfig::default())
                                .map_err(|e| e.to_string())?,
                        );
                    }
                    let b = ports.pop().expect("2");
                    let a = ports.pop().expect("2");
                    Ok((a, b))
                }
            };
            let (mut pa, mut pb) = mk(&mut k)?;
            let lcore = eal.worker_lcores()[0];
            let secs = a.secs;
            let job = eal
                .launch(lcore, move || {
                    let r = raw_run(&mut pa, &mut pb, frame, secs);
                    (r, pa, pb)
                })
                .map_err(|e| e.to_string())?;
            let (raw_run, pa, pb) = job.join();
            let raw = raw_run.mpps;
            let vns = match verify.iter().find(|(q, _)| *q == p) {
                Some(&(_, v)) => v,
                None => {
                    let v = verification_ns(p);
                    verify.push((p, v));
                    v
                }
            };
            let line_rate: u32 = std::env::var("FERROCE_BENCH_LINE_RATE")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(if pmd == "ring" { 40_000 } else { 4_000 });
            let mut losses = vec![0.0];
            if let Some(l) = a.loss {
                losses.push(l);
            }
            let mut ports = Some((pa, pb));
            for loss in losses {
                let (pa, pb) = match ports.take() {
                    Some(pp) => pp,
                    None => mk(&mut k)?,
                };
                let (r, retx, w) = transport_rate(&eal, pa, pb, p, loss, a.secs, line_rate)?;
                let pkts_per_msg = (p as u64).div_ceil(engine::payload_mtu(1500) as u64).max(1);
                let mpps = r.msgs_per_s * pkts_per_msg as f64 / 1e6;
                let wp = w.data_pkts.max(1) as f64;
                let fer_ns = w.cpu_ns_per_pkt();
                let raw_ns = raw_run.cpu_ns_per_pkt();
                let row = BenchRow {
                    pmd: if pmd == "ring" {
                        "net_ring".into()
                    } else {
                        "net_af_packet".into()
                    },
                    payload: p,
                    raw_mpps: raw,
                    ferroce_mpps: mpps,
                    ratio: if raw > 0.0 { mpps / raw } else { 0.0 },
                    goodput_gbps: r.goodput_gbps,
                    loss,
                    frame_bytes: frame,
                    retx_pkts: retx,
                    raw_cpu_ns_per_pkt: raw_ns,
                    ferroce_cpu_ns_per_pkt: fer_ns,
                    cpu_ratio: if fer_ns > 0.0 { raw_ns / fer_ns } else { 0.0 },
                    acks_per_pkt: w.acks_per_pkt(),
                    allocs_per_pkt: w.allocs.map(|(n, _)| n as f64 / wp),
                    alloc_bytes_per_pkt: w.allocs.map(|(_, b)| b as f64 / wp),
                    verify_ns_per_msg: vns,
                    window_data_pkts: w.data_pkts,
                    ok: r.ok,
                };
                let o = |v: Option<f64>, d: usize| match v {
                    Some(x) => format!("{x:.d$}"),
                    None => "-".into(),
                };
                println!(
                    "{:<10} {:>7} {:>7} {:>10.3} {:>12.3} {:>7.3} {:>13.3} {:>6} {:>11.0} {:>11.0} {:>9.4} {:>9.3} {:>10} {:>7} {:>6}",
                    if pmd == "ring" {
                        "net_ring"
                    } else {
                        "af_packet"
                    },
                    p,
                    frame,
                    raw,
                    mpps,
                    row.ratio,
                    r.goodput_gbps,
                    loss,
                    raw_ns,
                    fer_ns,
                    row.cpu_ratio,
                    row.acks_per_pkt,
                    o(row.allocs_per_pkt, 2),
                    o(row.alloc_bytes_per_pkt, 0),
                    if row.ok { "ok" } else { "FAIL" }
                );
                if w.data_pkts == 0 {
                    eprintln!("  the run ended before its measuring window closed");
                }
                if !r.ok {
                    eprintln!("  errors: {:?}", &r.errors[..r.errors.len().min(5)]);
                }
                rows.push(row);
            }
        }
    }
    println!(
        "benchmark's own verification (client fill + server check of every byte, vector code), \
         measured apart; it is included in fer ns/pkt:"
    );
    for (p, v) in &verify {
        println!("  {p:>5} B: {v:.0} ns per message");
    }
    if alloc_counts().is_none() {
        println!("allocations not counted: this program has no counting allocator");
    }
    let mut csv = String::from(
        "pmd,payload,raw_mpps,ferroce_mpps,ratio,goodput_gbps,loss,frame_bytes,retx_pkts,\
         raw_cpu_ns_per_pkt,ferroce_cpu_ns_per_pkt,cpu_ratio,acks_per_pkt,allocs_per_pkt,\
         alloc_bytes_per_pkt,verify_ns_per_msg,window_data_pkts\n",
    );
    let o = |v: Option<f64>, d: usize| v.map(|x| format!("{x:.d$}")).unwrap_or_default();
    for r in &rows {
        csv.push_str(&format!(
            "{},{},{:.4},{:.4},{:.4},{:.4},{},{},{},{:.1},{:.1},{:.5},{:.4},{},{},{:.1},{}\n",
            r.pmd,
            r.payload,
            r.raw_mpps,
            r.ferroce_mpps,
            r.ratio,
            r.goodput_gbps,
            r.loss,
            r.frame_bytes,
            r.retx_pkts,
            r.raw_cpu_ns_per_pkt,
            r.ferroce_cpu_ns_per_pkt,
            r.cpu_ratio,
            r.acks_per_pkt,
            o(r.allocs_per_pkt, 3),
            o(r.alloc_bytes_per_pkt, 1),
            r.verify_ns_per_msg,
            r.window_data_pkts
        ));
    }
    match &a.csv {
        Some(f) if f == "-" => print!("{csv}"),
        Some(f) => std::fs::write(f, &csv).map_err(|e| format!("--csv {f}: {e}"))?,
        None => print!("\n{csv}"),
    }
    drop(veth);
    Ok(rows)
}
