//! Engines joined back to back by net_ring, and the helpers the benchmark and tests share.

use crate::engine::{self, drive, Engine, EngineHandle, EngineParams};
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
    let mut ca = ecfg.clone();
    ca.seed ^= 0xa;
    let mut cb = ecfg;
    cb.seed ^= 0xb;
    let ea = Engine::new(a, engine::native_transport(mtu, ca), pa, eal.tsc_hz())
        .map_err(|e| e.to_string())?;
    let eb = Engine::new(b, engine::native_transport(mtu, cb), pb, eal.tsc_hz())
        .map_err(|e| e.to_string())?;
    Ok((ea, eb))
}

use crate::app::{PairDriver, WorkloadResult};
use crate::fault::FaultConfig;
use crate::net::{self, UdpHeader};
use crate::netns::{self, Hugepages, VethLoop};
use ferroce_harness::workload::{OpKind, WorkloadSpec};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

pub const BENCH_USAGE: &str = "\
usage: ferroce bench dataplane [--pmd ring|af_packet|all] [--payloads 64,1024,mtu]
                               [--seconds S] [--loss P] [--csv FILE] [--no-huge]

  For each PMD and payload size: the raw DPDK packet rate of the same PMD with frames the
  size of the transport's data frames (one lcore sending on one port and receiving on the
  other), then ferroce's rate moving verified SENDs of that payload between two engines on
  the same PMD; prints the ratio transport/raw and the Gbit/s of verified goodput.
  ring: net_ring ports joined back to back in this process. af_packet: net_af_packet on the
  two ends of a veth pair in a network namespace the benchmark creates (needs root).
  --loss P adds transport runs with P (e.g. 0.01) injected loss on both directions.
  Hugepages: 512 (1 GiB) are reserved for the run and released after (root), unless --no-huge.
  CSV columns: pmd,payload,raw_mpps,ferroce_mpps,ratio,goodput_gbps,loss,frame_bytes,retx_pkts";

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
    pub ok: bool,
}

/// Raw rate: one thread sends `frame` byte UDP frames on `a` and receives them on `b` for
/// `secs`; returns received frames per second (in millions). Like any sender and receiver of
/// data (and like the transport, which places payloads to and from registered memory), it
/// copies each payload into its frame and out of it again; headers are written per frame.
pub fn raw_rate(a: &mut Port, b: &mut Port, frame: usize, secs: f64) -> f64 {
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
    let end = warm + Duration::from_secs_f64(secs);
    loop {
        let el = t0.elapsed();
        if el >= end {
            break;
        }
        if t_start.is_none() && el >= warm {
            t_start = Some(Instant::now());
            got = 0;
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
    // Let what is in flight drain so the ports can be reused.
    let t1 = Instant::now();
    while t1.elapsed() < Duration::from_millis(50) {
        b.rx_burst(&mut rxq, 64);
        rxq.clear();
    }
    drop(txq);
    let el = t_start.map(|t| t.elapsed().as_secs_f64()).unwrap_or(secs);
    got as f64 / el / 1e6
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
) -> Result<(WorkloadResult, u64), String> {
    transport_rate_spec(
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
    let (ea, ha) = Engine::new(a, engine::native_transport(mtu, ca), pa, eal.tsc_hz())
        .map_err(|e| e.to_string())?;
    let (eb, hb) = Engine::new(b, engine::native_transport(mtu, cb), pb, eal.tsc_hz())
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
                let mut d = PairDriver::new(&ha, &hb, ipb, &spec);
                let to = drive(
                    &mut engines,
                    &mut d,
                    Duration::from_secs_f64(secs * 10.0 + 10.0),
                );
                let (cr, sr) = d.finish(to);
                let counters: Vec<_> = engines.into_iter().map(|e| e.shutdown()).collect();
                return (cr.clone(), cr, sr, counters);
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
            let mut d = PairDriver::new(&ha, &hb, ipb, &spec);
            let to = drive(
                &mut engines,
                &mut d,
                Duration::from_secs_f64(secs * 10.0 + 10.0),
            );
            let (cr, sr) = d.finish(to);
            let counters: Vec<_> = engines.into_iter().map(|e| e.shutdown()).collect();
            (c0, cr, sr, counters)
        })
        .map_err(|e| e.to_string())?;
    let (c0, cr, sr, counters) = job.join();
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
    Ok((cr, retx))
}

struct Args {
    pmds: Vec<String>,
    payloads: Vec<u32>,
    secs: f64,
    loss: Option<f64>,
    csv: Option<String>,
    huge: bool,
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        pmds: vec!["ring".into(), "af_packet".into()],
        payloads: vec![64, 1024, engine::payload_mtu(1500) as u32],
        secs: 1.0,
        loss: None,
        csv: None,
        huge: true,
    };
    let mut it = args.iter();
    while let Some(x) = it.next() {
        let mut val = || it.next().cloned().ok_or(format!("{x} needs a value"));
        match x.as_str() {
            "--pmd" => {
                let v = val()?;
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
            "-h" | "--help" => return Err(String::new()),
            _ => return Err(format!("unknown argument {x:?}")),
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
        "{:<10} {:>7} {:>7} {:>10} {:>12} {:>7} {:>13} {:>6} {:>6}",
        "pmd",
        "payload",
        "frame",
        "raw Mpps",
        "ferroce Mpps",
        "ratio",
        "goodput Gb/s",
        "loss",
        "ok"
    );
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
                    let r = raw_rate(&mut pa, &mut pb, frame, secs);
                    (r, pa, pb)
                })
                .map_err(|e| e.to_string())?;
            let (raw, pa, pb) = job.join();
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
                let (r, retx) = transport_rate(&eal, pa, pb, p, loss, a.secs, line_rate)?;
                let pkts_per_msg = (p as u64).div_ceil(engine::payload_mtu(1500) as u64).max(1);
                let mpps = r.msgs_per_s * pkts_per_msg as f64 / 1e6;
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
                    ok: r.ok,
                };
                println!(
                    "{:<10} {:>7} {:>7} {:>10.3} {:>12.3} {:>7.3} {:>13.3} {:>6} {:>6}",
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
                    if r.ok { "ok" } else { "FAIL" }
                );
                if !r.ok {
                    eprintln!("  errors: {:?}", &r.errors[..r.errors.len().min(5)]);
                }
                rows.push(row);
            }
        }
    }
    let mut csv = String::from(
        "pmd,payload,raw_mpps,ferroce_mpps,ratio,goodput_gbps,loss,frame_bytes,retx_pkts\n",
    );
    for r in &rows {
        csv.push_str(&format!(
            "{},{},{:.4},{:.4},{:.4},{:.4},{},{},{}\n",
            r.pmd,
            r.payload,
            r.raw_mpps,
            r.ferroce_mpps,
            r.ratio,
            r.goodput_gbps,
            r.loss,
            r.frame_bytes,
            r.retx_pkts
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
