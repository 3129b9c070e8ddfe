//! `ferroce bench dataplane`: arguments, the run over each PMD and payload, the table and
//! the CSV.

use super::*;
use crate::netns::{self, Hugepages, VethLoop};

pub const BENCH_USAGE: &str = "\
usage: ferroce bench dataplane [--quick] [--pmd ring|af_packet|udp|all] [--payloads 64,1024,mtu]
                               [--seconds S] [--loss P] [--csv FILE] [--no-huge]
                               [--lcores 1,2]

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
  udp: the kernel UDP backend (no DPDK device), two addresses on that namespace's loopback;
  its raw rate is the same sockets' sendmmsg/recvmmsg loop.
  --quick: short runs (0.25 s), net_ring only unless --pmd says otherwise.
  --loss P adds transport runs with P (e.g. 0.01) injected loss on both directions.
  --lcores N[,M...]: the transport run with engines of N shards on N worker lcores (one
  client/server pair of shards and applications per lcore; shard 0 of each engine polls the
  port and dispatches to the others), each count a row; adds the columns lcores and
  lcore_ns_per_pkt (CPU ns per data packet of each lcore, over its own shard's packets).
  fer ns/pkt is then all lcores' CPU over all data packets. Default 1 (one lcore, as above).
  Hugepages: 512 (1 GiB) are reserved for the run and released after (root), unless --no-huge.
  CSV columns: pmd,payload,raw_mpps,ferroce_mpps,ratio,goodput_gbps,loss,frame_bytes,retx_pkts,
  raw_cpu_ns_per_pkt,ferroce_cpu_ns_per_pkt,cpu_ratio,acks_per_pkt,allocs_per_pkt,
  alloc_bytes_per_pkt,verify_ns_per_msg,window_data_pkts";

struct Args {
    pmds: Vec<String>,
    payloads: Vec<u32>,
    secs: f64,
    loss: Option<f64>,
    csv: Option<String>,
    huge: bool,
    quick: bool,
    lcores: Vec<usize>,
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
        lcores: vec![1],
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
                    "all" => vec!["ring".into(), "af_packet".into(), "udp".into()],
                    "ring" | "net_ring" => vec!["ring".into()],
                    "af_packet" | "net_af_packet" | "veth" => vec!["af_packet".into()],
                    "udp" | "kernel_udp" => vec!["udp".into()],
                    _ => return Err(format!("--pmd: unknown {v:?} (ring, af_packet, udp, all)")),
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
            "--lcores" => {
                a.lcores = val()?
                    .split(',')
                    .map(|n| match n.parse::<usize>() {
                        Ok(n @ 1..=8) => Ok(n),
                        _ => Err(format!("--lcores: bad count {n:?} (1 to 8)")),
                    })
                    .collect::<Result<_, _>>()?;
            }
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

/// The name a PMD's rows carry in the table (the CSV says net_af_packet).
fn pmd_label(pmd: &str) -> &'static str {
    match pmd {
        "ring" => "net_ring",
        "udp" => "kernel_udp",
        _ => "af_packet",
    }
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
    let veth = if a.pmds.iter().any(|p| p == "af_packet" || p == "udp") {
        let v = VethLoop::create("bn").map_err(|e| format!("veth set-up: {e}"))?;
        netns::enter_netns(&v.ns).map_err(|e| format!("setns {}: {e}", v.ns))?;
        if a.pmds.iter().any(|p| p == "udp") {
            // The UDP backend's two engines: kernel addresses on the namespace's loopback.
            for ip in udp::ADDRS {
                v.add_addr(&format!("{ip}/32"), "lo")
                    .map_err(|e| format!("udp set-up: {e}"))?;
            }
        }
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
        {
            // The main lcore and as many workers as the largest --lcores (at least one).
            let n = a.lcores.iter().copied().max().unwrap_or(1);
            let l: Vec<String> = (0..=n).map(|i| format!("{i}@({set})")).collect();
            format!("--lcores={}", l.join(","))
        },
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
    let multi = a.lcores != [1];
    let lw = if multi { 13 } else { 6 };
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
    if multi {
        println!(
            "rows with lcores N > 1: engines of N shards, shard k of both engines and one \
             client/server pair on worker lcore k; fer ns/pkt = all lcores' CPU / all data packets"
        );
    }
    println!(
        "{:<10} {:>7} {:>7} {:>10} {:>12} {:>7} {:>13} {:>lw$} {:>11} {:>11} {:>9} {:>9} {:>10} {:>7} {:>6}",
        "pmd",
        "payload",
        "frame",
        "raw Mpps",
        "ferroce Mpps",
        "ratio",
        "goodput Gb/s",
        if multi { "loss lcores" } else { "loss" },
        "raw ns/pkt",
        "fer ns/pkt",
        "cpu ratio",
        "ACKs/pkt",
        "allocs/pkt",
        "B/pkt",
        "ok",
        lw = lw
    );
    let mut verify: Vec<(u32, f64)> = Vec::new();
    let mut lcore_lines = Vec::new();
    for pmd in &a.pmds {
        for &p in &a.payloads {
            // The transport cuts a payload past the MTU into MTU-sized packets: the raw loop
            // sends frames the size of the largest of them (a bigger frame fits no mbuf).
            let frame = net::HDRS_LEN
                + DATA_OVERHEAD
                + (p as usize).min(engine::payload_mtu(1500) as usize);
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
            let dev = |p: Port| -> Device {
                let pool = p.pool().clone();
                (Box::new(DpdkIo::new(p)), pool)
            };
            let (raw_run, mut devs) = if pmd == "udp" {
                k += 1;
                (udp::raw(&eal, k, frame, a.secs)?, None)
            } else {
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
                (raw_run, Some([dev(pa), dev(pb)]))
            };
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
            for (loss, nl) in losses
                .iter()
                .flat_map(|&l| a.lcores.iter().map(move |&n| (l, n)))
            {
                let d = match devs.take() {
                    Some(d) => d,
                    None if pmd == "udp" => {
                        k += 1;
                        udp::devices(&eal, k)?
                    }
                    None => {
                        let (pa, pb) = mk(&mut k)?;
                        [dev(pa), dev(pb)]
                    }
                };
                let ips = if pmd == "udp" {
                    udp::ADDRS
                } else {
                    [Ipv4Addr::new(198, 18, 1, 11), Ipv4Addr::new(198, 18, 1, 12)]
                };
                let (r, retx, w, per_lcore) = if nl == 1 {
                    let (r, retx, w) = transport_run_devices(
                        &eal, d, ips, p, loss, a.secs, line_rate, bench_spec, None,
                    )?;
                    (r, retx, w, Vec::new())
                } else {
                    let (runs, retx) = sharded::transport_run_sharded(
                        &eal, d, ips, p, loss, a.secs, line_rate, bench_spec, nl,
                    )?;
                    let (r, w) = sharded::combine(&runs);
                    (r, retx, w, runs)
                };
                let pkts_per_msg = (p as u64).div_ceil(engine::payload_mtu(1500) as u64).max(1);
                let mpps = r.msgs_per_s * pkts_per_msg as f64 / 1e6;
                let wp = w.data_pkts.max(1) as f64;
                let fer_ns = w.cpu_ns_per_pkt();
                let raw_ns = raw_run.cpu_ns_per_pkt();
                let row = BenchRow {
                    pmd: match pmd.as_str() {
                        "af_packet" => "net_af_packet".into(),
                        _ => pmd_label(pmd).into(),
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
                    lcores: nl,
                    lcore_cpu_ns_per_pkt: per_lcore
                        .iter()
                        .map(|l| l.window.cpu_ns_per_pkt())
                        .collect(),
                    ok: r.ok,
                };
                let o = |v: Option<f64>, d: usize| match v {
                    Some(x) => format!("{x:.d$}"),
                    None => "-".into(),
                };
                println!(
                    "{:<10} {:>7} {:>7} {:>10.3} {:>12.3} {:>7.3} {:>13.3} {:>lw$} {:>11.0} {:>11.0} {:>9.4} {:>9.3} {:>10} {:>7} {:>6}",
                    pmd_label(pmd),
                    p,
                    frame,
                    raw,
                    mpps,
                    row.ratio,
                    r.goodput_gbps,
                    if multi {
                        format!("{loss:<6} {nl:>6}")
                    } else {
                        format!("{loss}")
                    },
                    raw_ns,
                    fer_ns,
                    row.cpu_ratio,
                    row.acks_per_pkt,
                    o(row.allocs_per_pkt, 2),
                    o(row.alloc_bytes_per_pkt, 0),
                    if row.ok { "ok" } else { "FAIL" },
                    lw = lw
                );
                if w.data_pkts == 0 {
                    eprintln!("  the run ended before its measuring window closed");
                }
                if !per_lcore.is_empty() {
                    lcore_lines.push(sharded::lcore_line(pmd_label(pmd), p, loss, &per_lcore));
                }
                if !r.ok {
                    eprintln!("  errors: {:?}", &r.errors[..r.errors.len().min(5)]);
                    if std::env::var_os("FERROCE_BENCH_DEBUG").is_some() {
                        eprintln!(
                            "  all errors: {:?}",
                            r.errors
                                .iter()
                                .filter(|e| !e.contains("Flushed"))
                                .collect::<Vec<_>>()
                        );
                    }
                }
                rows.push(row);
            }
        }
    }
    if !lcore_lines.is_empty() {
        println!(
            "per lcore (thread CPU over its own shard's data packets; shard 0 also polls the \
             port and dispatches for the others; busy = CPU time / wall time of its window):"
        );
        for l in &lcore_lines {
            println!("{l}");
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
    let mut csv = format!(
        "pmd,payload,raw_mpps,ferroce_mpps,ratio,goodput_gbps,loss,frame_bytes,retx_pkts,\
         raw_cpu_ns_per_pkt,ferroce_cpu_ns_per_pkt,cpu_ratio,acks_per_pkt,allocs_per_pkt,\
         alloc_bytes_per_pkt,verify_ns_per_msg,window_data_pkts{}\n",
        if multi {
            ",lcores,lcore_ns_per_pkt"
        } else {
            ""
        }
    );
    let o = |v: Option<f64>, d: usize| v.map(|x| format!("{x:.d$}")).unwrap_or_default();
    for r in &rows {
        csv.push_str(&format!(
            "{},{},{:.4},{:.4},{:.4},{:.4},{},{},{},{:.1},{:.1},{:.5},{:.4},{},{},{:.1},{}{}\n",
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
            r.window_data_pkts,
            if multi {
                let l: Vec<String> = r
                    .lcore_cpu_ns_per_pkt
                    .iter()
                    .map(|x| format!("{x:.1}"))
                    .collect();
                format!(",{},{}", r.lcores, l.join(";"))
            } else {
                String::new()
            }
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
