//! `ferroce bench verbs`: unmodified `ib_write_bw` and `ib_write_lat` over the shim, next to
//! the engine's own goodput and round trip on the same PMD in the same run.
//!
//! One network namespace holds both ends of a veth pair (`VethLoop`); every party uses DPDK's
//! `net_af_packet` on those two ends with `framecnt=8192`:
//! 1. the perftest programs, two processes in the namespace with the shim on
//!    `LD_LIBRARY_PATH` (engine addresses 198.18.0.11/.12, TCP exchange over `lo`), per mode
//!    (`-d ferroce0` native, `-d ferroce0_rocev2` RoCEv2);
//! 2. then, in this process, two native engines on the same two veth ends (the dataplane
//!    benchmark's run, `ferroce_dataplane::bench::transport_rate_spec`): verified SENDs of
//!    the same size, 4 streams × depth 32, for goodput; one stream at depth 1 with 2-byte
//!    SENDs for the round trip (median time from post to completion = data + ACK). SENDs,
//!    not WRITEs, as the dataplane benchmark measures (a SEND moves the same packets as a
//!    WRITE of its size, 4 header bytes fewer); one run sized for about `secs` at
//!    af_packet's packet rate, no calibration run.
//!
//! `ib_write_lat` reports half a round trip (t_typical); the table doubles it. Ratios:
//! bandwidth = shim / engine (the share of the engine's goodput an unmodified program gets),
//! round trip = shim / engine (how many engine round trips one verbs round trip costs).
//! Both parties share the machine's cores: the perftest pair runs two application threads
//! and two engine lcores, the engine run one lcore for both engines and their applications.

use ferroce_dataplane::bench::{data_room, transport_rate_spec};
use ferroce_dataplane::netns::{self, VethLoop};
use ferroce_dpdk_sys::{Eal, Mempool, Port, PortConfig};
use ferroce_workload::{OpKind, WorkloadSpec};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

pub const USAGE: &str = "\
usage: ferroce bench verbs [--size B] [--iters N] [--lat-iters N] [--modes native,rocev2]
                           [--pmd af_packet|memif] [--seconds S] [--loss P] [--csv FILE|-]
                           [--lib DIR]

  Runs the unmodified perftest programs ib_write_bw (-s B -n N) and ib_write_lat (-n N)
  over the verbs shim (libibverbs.so.1 from --lib, $FERROCE_VERBS_LIB or next to this
  program), two processes joined by the PMD (af_packet: the two ends of a veth pair;
  memif: one shared-memory interface, server and client), for each mode; then the engine's
  own goodput (B-byte SENDs, 4 streams x depth 32, about S seconds) and round trip (2-byte
  SENDs at depth 1) on the same PMD, and a raw DPDK ping-pong of 64-byte frames on it.
  --loss P injects P loss on every transmit of every party. Needs root and perftest.
  CSV columns: metric,mode,size,verbs,engine,unit,ratio,ok";

struct Args {
    size: u32,
    iters: u32,
    lat_iters: u32,
    modes: Vec<(&'static str, &'static str)>,
    secs: f64,
    loss: f64,
    csv: Option<String>,
    lib: Option<PathBuf>,
    pmd: Pmd,
}

/// What joins the two parties.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pmd {
    /// DPDK net_af_packet on the two ends of a veth pair (through the kernel).
    AfPacket,
    /// DPDK net_memif: shared memory between the two processes, no kernel on the data path.
    Memif,
}

impl Pmd {
    fn name(self) -> &'static str {
        match self {
            Pmd::AfPacket => "net_af_packet",
            Pmd::Memif => "net_memif",
        }
    }

    /// Device arguments of party `k` (0 client, 1 server) after the vdev's name.
    fn args(self, k: usize, ifname: &[String; 2], socket: &Path) -> String {
        match self {
            Pmd::AfPacket => format!("iface={},framecnt=8192", ifname[k]),
            // The server end creates the socket; the client connects to it.
            Pmd::Memif => format!(
                "role={},socket={},id=0,rsize=11,bsize=2048",
                if k == 1 { "server" } else { "client" },
                socket.display()
            ),
        }
    }
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        size: 65536,
        iters: 2000,
        lat_iters: 2000,
        modes: vec![("native", "ferroce0"), ("rocev2", "ferroce0_rocev2")],
        secs: 1.0,
        loss: 0.0,
        csv: None,
        lib: None,
        pmd: Pmd::AfPacket,
    };
    let mut it = args.iter();
    while let Some(x) = it.next() {
        let mut val = || it.next().cloned().ok_or(format!("{x} needs a value"));
        let num = |v: String, what: &str| -> Result<f64, String> {
            v.parse::<f64>()
                .map_err(|_| format!("{what}: not a number: {v:?}"))
        };
        match x.as_str() {
            "--size" | "-s" => a.size = num(val()?, "--size")? as u32,
            "--iters" | "-n" => a.iters = num(val()?, "--iters")? as u32,
            "--lat-iters" => a.lat_iters = num(val()?, "--lat-iters")? as u32,
            "--seconds" => a.secs = num(val()?, "--seconds")?,
            "--loss" => a.loss = num(val()?, "--loss")?,
            "--csv" => a.csv = Some(val()?),
            "--lib" => a.lib = Some(PathBuf::from(val()?)),
            "--pmd" => {
                a.pmd = match val()?.as_str() {
                    "af_packet" | "net_af_packet" => Pmd::AfPacket,
                    "memif" | "net_memif" => Pmd::Memif,
                    p => return Err(format!("--pmd: unknown {p:?} (af_packet, memif)")),
                }
            }
            "--modes" => {
                a.modes = Vec::new();
                for m in val()?.split(',') {
                    a.modes.push(match m {
                        "native" => ("native", "ferroce0"),
                        "rocev2" | "roce" => ("rocev2", "ferroce0_rocev2"),
                        _ => return Err(format!("--modes: unknown {m:?} (native, rocev2)")),
                    });
                }
            }
            "-h" | "--help" => return Err(String::new()),
            _ => return Err(format!("unknown argument {x:?}")),
        }
    }
    if a.size == 0 || a.iters == 0 || a.lat_iters == 0 || a.secs <= 0.0 {
        return Err("sizes, counts and seconds must be positive".into());
    }
    Ok(a)
}

/// The shim library: a directory holding `libibverbs.so` (cargo's name) or `libibverbs.so.1`.
fn find_shim(lib: Option<&Path>) -> Result<PathBuf, String> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(d) = lib {
        dirs.push(d.to_path_buf());
    } else if let Some(d) = std::env::var_os("FERROCE_VERBS_LIB") {
        dirs.push(PathBuf::from(d));
    } else if let Ok(exe) = std::env::current_exe() {
        if let Some(d) = exe.parent() {
            dirs.push(d.to_path_buf());
            dirs.push(d.join("deps"));
            if let Some(p) = d.parent() {
                dirs.push(p.to_path_buf());
            }
        }
    }
    for d in &dirs {
        for n in ["libibverbs.so", "libibverbs.so.1"] {
            let p = d.join(n);
            if p.exists() {
                return p
                    .canonicalize()
                    .map_err(|e| format!("{}: {e}", p.display()));
            }
        }
    }
    Err(format!(
        "the verbs shim (libibverbs.so) is not in {dirs:?}: build it (cargo build -p \
         ferroce-verbs) and pass --lib DIR or set FERROCE_VERBS_LIB"
    ))
}

/// A directory for LD_LIBRARY_PATH: the shim as libibverbs.so.1 and the stub providers.
fn lib_dir(shim: &Path) -> Result<PathBuf, String> {
    let d = std::env::temp_dir().join(format!("ferroce-bench-verbs-{}", std::process::id()));
    std::fs::create_dir_all(&d).map_err(|e| format!("{}: {e}", d.display()))?;
    let link = |src: &Path, name: &str| -> Result<(), String> {
        let dst = d.join(name);
        let _ = std::fs::remove_file(&dst);
        std::os::unix::fs::symlink(src, &dst).map_err(|e| format!("{}: {e}", dst.display()))
    };
    link(shim, "libibverbs.so.1")?;
    for l in ["libmlx5.so.1", "libefa.so.1", "libmlx4.so.1"] {
        let p = Path::new(crate::STUB_DIR).join(l);
        if p.exists() {
            link(&p, l)?;
        }
    }
    Ok(d)
}

/// What perftest prints when its clock calibration fails: its cycles-per-µs regression
/// (get_clock.c) met a preemption and it falls back to 0 MHz, so with `-F` it reports a
/// bandwidth of 0.00 (a CI run here: `write_bw native 0.0000`). A busy-polling engine on
/// each side and two programs on two cores make that preemption likely enough to matter.
const PERFTEST_CLOCK_FAILED: &str = "Correlation coefficient r^2";

/// How many times a perftest pair is run when perftest's own clock calibration failed.
const PERFTEST_TRIES: u32 = 3;

/// One perftest measurement (server on end 1, client on end 0): the client's result row.
/// A run whose report perftest itself could not time is run again, and said so.
#[allow(clippy::too_many_arguments)]
fn perftest(
    ns: &str,
    ifname: &[String; 2],
    pmd: Pmd,
    socket: &Path,
    libs: &Path,
    prog: &str,
    args: &[String],
    loss: f64,
) -> Result<Vec<String>, String> {
    let mk = |k: usize, client: bool| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, "timeout", "-k", "5", "120"])
            .arg(format!("/usr/bin/{prog}"))
            .args(args);
        if client {
            c.arg("127.0.0.1");
        }
        c.env("LD_LIBRARY_PATH", libs)
            .env("FERROCE_IP", format!("198.18.0.{}", 11 + k))
            .env(
                "FERROCE_PMD",
                format!("{}0,{}", pmd.name(), pmd.args(k, ifname, socket)),
            )
            .env("FERROCE_LOSS", format!("{loss}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    // One run of the pair: the client's row, or why there is none.
    let once = || -> Result<Vec<String>, String> {
        let server = mk(1, false).spawn().map_err(|e| format!("{prog}: {e}"))?;
        std::thread::sleep(Duration::from_millis(700));
        let client = mk(0, true).spawn().map_err(|e| format!("{prog}: {e}"))?;
        let co = client.wait_with_output().map_err(|e| e.to_string())?;
        let so = server.wait_with_output().map_err(|e| e.to_string())?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&co.stdout),
            String::from_utf8_lossy(&co.stderr)
        );
        let server_err = String::from_utf8_lossy(&so.stderr);
        // Either side's report is meaningless once its calibration failed (the server's
        // matters to ib_write_lat, whose round trips both sides time).
        let clock_ok =
            !text.contains(PERFTEST_CLOCK_FAILED) && !server_err.contains(PERFTEST_CLOCK_FAILED);
        match perftest_row(&text) {
            Some(r) if co.status.success() && so.status.success() && clock_ok => Ok(r),
            _ => Err(format!(
                "{prog} failed (client {:?}, server {:?}):\n{text}\n{}",
                co.status.code(),
                so.status.code(),
                server_err
            )),
        }
    };
    let mut tries = 0;
    loop {
        tries += 1;
        // A memif server that exited may leave its socket behind.
        std::fs::remove_file(socket).ok();
        match once() {
            Err(e) if e.contains(PERFTEST_CLOCK_FAILED) && tries < PERFTEST_TRIES => {
                eprintln!("{prog}: perftest could not calibrate its clock (try {tries}), again");
            }
            r => return r,
        }
    }
}

/// The result row of a perftest program's output (bytes, iterations, then the figures).
pub fn perftest_row(text: &str) -> Option<Vec<String>> {
    text.lines()
        .map(|l| l.split_whitespace().map(str::to_string).collect::<Vec<_>>())
        .find(|f| f.len() >= 5 && f[0].parse::<u64>().is_ok() && f[1].parse::<u64>().is_ok())
}

/// Wait (up to 5 s) until every port's link is up: a memif client connects asynchronously.
fn wait_link(ports: &[Port]) -> Result<(), String> {
    let t0 = std::time::Instant::now();
    while !ports.iter().all(|p| p.link().up) {
        if t0.elapsed() > Duration::from_secs(5) {
            return Err("the ports' links did not come up within 5 s".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Raw DPDK ping-pong on one thread: a 64-byte frame from `a` to `b`, sent back by `b`, `n`
/// times; the median round trip in µs (what the PMD itself costs a verbs round trip).
fn raw_pingpong(a: &mut Port, b: &mut Port, n: u32) -> Result<f64, String> {
    let pool = a.pool().clone();
    let pool_b = b.pool().clone();
    let (mut txq, mut rxq, mut back) = (Vec::new(), Vec::new(), Vec::new());
    let mut rtts = Vec::with_capacity(n as usize);
    for i in 0..n + 100 {
        let mut m = pool.alloc().ok_or("no mbuf")?;
        m.room_mut()[..64].fill(0xa5);
        m.room_mut()[..4].copy_from_slice(&i.to_be_bytes());
        m.set_len(64);
        txq.push(m);
        let t0 = std::time::Instant::now();
        let deadline = t0 + Duration::from_secs(1);
        while !txq.is_empty() {
            a.tx_burst(&mut txq);
            if std::time::Instant::now() > deadline {
                return Err(format!("raw ping {i}: the port takes no frame"));
            }
        }
        // b echoes the frame back.
        loop {
            if b.rx_burst(&mut rxq, 1) > 0 {
                // A fresh mbuf of b's own pool, as an engine would send its answer.
                for r in rxq.drain(..) {
                    let mut m = pool_b.alloc().ok_or("no mbuf")?;
                    m.room_mut()[..r.len()].copy_from_slice(r.data());
                    m.set_len(r.len());
                    txq.push(m);
                }
                while !txq.is_empty() {
                    b.tx_burst(&mut txq);
                    // memif: a receiver posts its ring's buffers when it polls, so a polls.
                    if !txq.is_empty() {
                        a.rx_burst(&mut back, 1);
                    }
                    if std::time::Instant::now() > deadline {
                        return Err(format!("raw pong {i}: the port takes no frame"));
                    }
                }
                break;
            }
            if std::time::Instant::now() > deadline {
                return Err(format!("raw ping {i} lost"));
            }
        }
        loop {
            if !back.is_empty() || a.rx_burst(&mut back, 1) > 0 {
                let d = back[0].data();
                if d[..4] != i.to_be_bytes() {
                    return Err(format!("raw ping {i}: another frame came back"));
                }
                back.clear();
                break;
            }
            if std::time::Instant::now() > deadline {
                return Err(format!("raw pong {i} lost"));
            }
        }
        if i >= 100 {
            rtts.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    rtts.sort_by(f64::total_cmp);
    Ok(rtts[rtts.len() / 2])
}

fn bw_spec(payload: u32, messages: u32) -> WorkloadSpec {
    WorkloadSpec {
        streams: 4,
        messages,
        sizes: vec![payload],
        ops: vec![OpKind::Send],
        depth: 32,
        recv_depth: 32,
        seed: 1,
        ..Default::default()
    }
}

fn lat_spec(payload: u32, messages: u32) -> WorkloadSpec {
    WorkloadSpec {
        streams: 1,
        messages: messages.min(20_000),
        sizes: vec![payload],
        ops: vec![OpKind::Send],
        depth: 1,
        recv_depth: 1,
        seed: 1,
        ..Default::default()
    }
}

struct Row {
    metric: &'static str,
    mode: String,
    size: u32,
    verbs: f64,
    engine: f64,
    unit: &'static str,
    ok: bool,
}

impl Row {
    fn ratio(&self) -> f64 {
        if self.engine > 0.0 {
            self.verbs / self.engine
        } else {
            0.0
        }
    }
}

/// `ferroce bench verbs`.
pub fn main_bench(args: &[String]) -> i32 {
    let a = match parse(args) {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("ferroce bench verbs: {e}");
            }
            eprintln!("{USAGE}");
            return if e.is_empty() { 0 } else { 2 };
        }
    };
    match run(&a) {
        Ok(rows) if rows.iter().all(|r| r.ok) => 0,
        Ok(_) => 1,
        Err(e) => {
            eprintln!("ferroce bench verbs: {e}");
            1
        }
    }
}

fn run(a: &Args) -> Result<Vec<Row>, String> {
    if !netns::is_root() {
        return Err("needs root (network namespaces, DPDK)".into());
    }
    for p in ["ib_write_bw", "ib_write_lat"] {
        if !Path::new("/usr/bin").join(p).exists() {
            return Err(format!("/usr/bin/{p} missing: install perftest"));
        }
    }
    let shim = find_shim(a.lib.as_deref())?;
    let libs = lib_dir(&shim)?;
    // The directory of links is this run's alone: removed however the run ends.
    struct RemoveDir(PathBuf);
    impl Drop for RemoveDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _libs_guard = RemoveDir(libs.clone());
    let veth = VethLoop::create("bv").map_err(|e| format!("veth set-up: {e}"))?;
    let socket = std::env::temp_dir().join(format!("ferroce-bv-{}.sock", std::process::id()));
    let mut shim_bw = Vec::new();
    let mut shim_lat = Vec::new();
    for (mode, dev) in &a.modes {
        let bw_args: Vec<String> = format!("-d {dev} -x 1 -F -s {} -n {}", a.size, a.iters)
            .split_whitespace()
            .map(str::to_string)
            .collect();
        // A fresh memif socket per run: a server that exited may leave its socket behind.
        let bw_sock = socket.with_extension(format!("{mode}-bw.sock"));
        let bw = perftest(
            &veth.ns,
            &veth.ifname,
            a.pmd,
            &bw_sock,
            &libs,
            "ib_write_bw",
            &bw_args,
            a.loss,
        );
        // BW average [MB/sec] (perftest's MB = 2^20 bytes) as Gbit/s.
        let gbps = bw
            .as_ref()
            .ok()
            .and_then(|r| r[3].parse::<f64>().ok())
            .map(mb_to_gbps);
        if let Err(e) = &bw {
            eprintln!("{e}");
        }
        eprintln!("ib_write_bw  {mode:<7} {:?} Gbit/s", gbps);
        shim_bw.push((mode.to_string(), gbps));
        let lat_args: Vec<String> = format!("-d {dev} -x 1 -F -n {}", a.lat_iters)
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let lat_sock = socket.with_extension(format!("{mode}-lat.sock"));
        let lat = perftest(
            &veth.ns,
            &veth.ifname,
            a.pmd,
            &lat_sock,
            &libs,
            "ib_write_lat",
            &lat_args,
            a.loss,
        );
        // t_typical is half a round trip.
        let rtt = lat
            .as_ref()
            .ok()
            .and_then(|r| r[4].parse::<f64>().ok())
            .map(|t| 2.0 * t);
        if let Err(e) = &lat {
            eprintln!("{e}");
        }
        eprintln!("ib_write_lat {mode:<7} {:?} us round trip", rtt);
        shim_lat.push((mode.to_string(), rtt));
        std::fs::remove_file(&bw_sock).ok();
        std::fs::remove_file(&lat_sock).ok();
    }

    // The engine's own runs, in this process, on the same veth ends.
    netns::enter_netns(&veth.ns).map_err(|e| format!("setns {}: {e}", veth.ns))?;
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let set = if cpus > 1 {
        format!("0-{}", cpus - 1)
    } else {
        "0".into()
    };
    let eal_args = vec![
        "ferroce-bench-verbs".to_string(),
        "--no-pci".into(),
        format!("--lcores=0@({set}),1@({set})"),
        "--log-level=warning".into(),
        format!("--file-prefix=ferroce-bench-verbs-{}", std::process::id()),
        "--no-huge".into(),
        "--no-shconf".into(),
        "-m".into(),
        "1024".into(),
    ];
    let eal = Eal::init(&eal_args).map_err(|e| format!("EAL: {e}"))?;
    let mut k = 0u32;
    let mut ports = || -> Result<(Port, Port), String> {
        k += 1;
        let mut v = Vec::new();
        // memif: the server (port b) first, so the client finds its socket.
        let sock = socket.with_extension(format!("{k}.sock"));
        let order: [usize; 2] = if a.pmd == Pmd::Memif { [1, 0] } else { [0, 1] };
        let mut got: Vec<(usize, Port)> = Vec::new();
        for i in order {
            let id = eal
                .vdev(
                    &format!("{}{k}{i}", a.pmd.name()),
                    &a.pmd.args(i, &veth.ifname, &sock),
                )
                .map_err(|e| e.to_string())?;
            let pool = Mempool::new(&eal, &format!("fbv{k}_{i}"), 16383, 256, data_room(1500))
                .map_err(|e| e.to_string())?;
            got.push((
                i,
                Port::start(&eal, id, &pool, &PortConfig::default()).map_err(|e| e.to_string())?,
            ));
        }
        got.sort_by_key(|(i, _)| *i);
        v.extend(got.into_iter().map(|(_, p)| p));
        wait_link(&v)?;
        let b = v.pop().expect("two ports");
        let pa = v.pop().expect("two ports");
        Ok((pa, b))
    };
    let line_rate: u32 = std::env::var("FERROCE_BENCH_LINE_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4_000);
    let (pa, pb) = ports()?;
    // Sized for about `secs` at af_packet's ~200 kpps (no calibration run, see the hook).
    let pkts = (a.size as f64 / 1400.0).ceil().max(1.0);
    let per_stream = ((a.secs * 200_000.0 / pkts / 4.0) as u32).clamp(200, 1_000_000);
    let (gb, _) = transport_rate_spec(
        &eal,
        pa,
        pb,
        a.size,
        a.loss,
        a.secs,
        line_rate,
        bw_spec,
        Some(per_stream),
    )?;
    if !gb.ok {
        eprintln!(
            "engine goodput run: {:?}",
            &gb.errors[..gb.errors.len().min(5)]
        );
    }
    let (pa, pb) = ports()?;
    let (lt, _) = transport_rate_spec(
        &eal,
        pa,
        pb,
        2,
        a.loss,
        a.secs,
        line_rate,
        lat_spec,
        Some(a.lat_iters),
    )?;
    if !lt.ok {
        eprintln!(
            "engine round-trip run: {:?}",
            &lt.errors[..lt.errors.len().min(5)]
        );
    }
    eprintln!(
        "engine: SEND goodput {:.3} Gbit/s, round trip p50 {:.1} us",
        gb.goodput_gbps, lt.latency_p50_us
    );
    let (mut pa, mut pb) = ports()?;
    let raw = raw_pingpong(&mut pa, &mut pb, a.lat_iters.min(20_000));
    drop((pa, pb));
    match &raw {
        Ok(r) => eprintln!("raw DPDK ping-pong ({}): p50 {r:.1} us", a.pmd.name()),
        Err(e) => eprintln!("raw DPDK ping-pong: {e}"),
    }

    let mut rows = Vec::new();
    for (mode, g) in shim_bw {
        rows.push(Row {
            metric: "write_bw",
            mode,
            size: a.size,
            verbs: g.unwrap_or(0.0),
            engine: gb.goodput_gbps,
            unit: "Gbit/s",
            ok: g.is_some() && gb.ok,
        });
    }
    for (mode, r) in shim_lat {
        rows.push(Row {
            metric: "write_lat_rtt",
            mode: mode.clone(),
            size: 2,
            verbs: r.unwrap_or(0.0),
            engine: lt.latency_p50_us,
            unit: "us",
            ok: r.is_some() && lt.ok,
        });
        // The same verbs round trip against the PMD's own (a raw frame there and back).
        rows.push(Row {
            metric: "lat_vs_raw_rtt",
            mode,
            size: 2,
            verbs: r.unwrap_or(0.0),
            engine: *raw.as_ref().unwrap_or(&0.0),
            unit: "us",
            ok: r.is_some() && raw.is_ok(),
        });
    }
    println!(
        "{:<14} {:<7} {:>7} {:>12} {:>12} {:<7} {:>7} {:>4}   (loss {}, {})",
        "metric",
        "mode",
        "size",
        "verbs shim",
        "engine/raw",
        "unit",
        "ratio",
        "ok",
        a.loss,
        a.pmd.name()
    );
    let mut csv = String::from("metric,mode,size,verbs,engine,unit,ratio,ok\n");
    for r in &rows {
        println!(
            "{:<14} {:<7} {:>7} {:>12.3} {:>12.3} {:<7} {:>7.3} {:>4}",
            r.metric,
            r.mode,
            r.size,
            r.verbs,
            r.engine,
            r.unit,
            r.ratio(),
            if r.ok { "ok" } else { "FAIL" }
        );
        csv.push_str(&format!(
            "{},{},{},{:.4},{:.4},{},{:.4},{}\n",
            r.metric,
            r.mode,
            r.size,
            r.verbs,
            r.engine,
            r.unit,
            r.ratio(),
            r.ok
        ));
    }
    match &a.csv {
        Some(f) if f == "-" => print!("{csv}"),
        Some(f) => std::fs::write(f, &csv).map_err(|e| format!("--csv {f}: {e}"))?,
        None => print!("\n{csv}"),
    }
    drop(eal);
    drop(veth);
    for k in 0..=3 {
        std::fs::remove_file(socket.with_extension(format!("{k}.sock"))).ok();
    }
    std::fs::remove_file(&socket).ok();
    std::fs::remove_dir_all(&libs).ok();
    Ok(rows)
}

/// perftest's "BW average [MB/sec]" (its MB = 2^20 bytes) as Gbit/s.
pub fn mb_to_gbps(mb: f64) -> f64 {
    mb * 8.0 * 1.048_576 / 1000.0
}

/// A directory for `LD_LIBRARY_PATH` with the shim (from `lib`, as `--lib`) as
/// `libibverbs.so.1`, for one perftest program run on this host alone (`ferroce bench loss
/// --real --peer`); removed when dropped.
pub struct ShimLibs(pub PathBuf);

impl ShimLibs {
    pub fn new(lib: Option<&Path>) -> Result<ShimLibs, String> {
        if !Path::new("/usr/bin/ib_write_bw").exists() {
            return Err("/usr/bin/ib_write_bw missing: install perftest".into());
        }
        Ok(ShimLibs(lib_dir(&find_shim(lib)?)?))
    }
}

impl Drop for ShimLibs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `ib_write_bw` over the shim on one veth loop, run again and again (for `ferroce bench loss
/// --real`, which sweeps the loss rate): the namespace, the veth pair and the directory of
/// libraries are made once and removed when this is dropped.
pub struct WriteBw {
    veth: VethLoop,
    libs: PathBuf,
    pmd: Pmd,
    runs: u32,
}

impl WriteBw {
    /// `pmd`: `af_packet` or `memif`; `lib`: where the shim is (as `--lib`).
    pub fn new(pmd: &str, lib: Option<&Path>) -> Result<WriteBw, String> {
        if !netns::is_root() {
            return Err("needs root (network namespaces, DPDK)".into());
        }
        if !Path::new("/usr/bin/ib_write_bw").exists() {
            return Err("/usr/bin/ib_write_bw missing: install perftest".into());
        }
        let pmd = match pmd {
            "af_packet" | "net_af_packet" => Pmd::AfPacket,
            "memif" | "net_memif" => Pmd::Memif,
            p => return Err(format!("unknown PMD {p:?} (af_packet, memif)")),
        };
        let shim = find_shim(lib)?;
        let libs = lib_dir(&shim)?;
        let veth = VethLoop::create("bl").map_err(|e| {
            let _ = std::fs::remove_dir_all(&libs);
            format!("veth set-up: {e}")
        })?;
        Ok(WriteBw {
            veth,
            libs,
            pmd,
            runs: 0,
        })
    }

    /// What joins the two processes, for the report.
    pub fn pmd_name(&self) -> &'static str {
        self.pmd.name()
    }

    /// One `ib_write_bw -s size -D secs` between two processes on device `dev` (`ferroce0`
    /// native, `ferroce0_rocev2`), every party's transmit losing `loss`: perftest's average
    /// bandwidth in Gbit/s.
    pub fn run(&mut self, dev: &str, size: u32, secs: u32, loss: f64) -> Result<f64, String> {
        self.runs += 1;
        let args: Vec<String> = format!("-d {dev} -x 1 -F -s {size} -D {}", secs.max(1))
            .split_whitespace()
            .map(str::to_string)
            .collect();
        let sock = std::env::temp_dir().join(format!(
            "ferroce-bl-{}-{}.sock",
            std::process::id(),
            self.runs
        ));
        let r = perftest(
            &self.veth.ns,
            &self.veth.ifname,
            self.pmd,
            &sock,
            &self.libs,
            "ib_write_bw",
            &args,
            loss,
        );
        std::fs::remove_file(&sock).ok();
        let r = r?;
        r[3].parse::<f64>()
            .map(mb_to_gbps)
            .map_err(|_| format!("ib_write_bw printed {r:?}"))
    }
}

impl Drop for WriteBw {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.libs);
    }
}
