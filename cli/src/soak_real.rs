//! `ferroce soak real`: real packets between two DPDK engine processes (this program's
//! `dataplane run`) in two network namespaces joined by a veth pair (net_af_packet), each
//! with the engine's fault injector on its transmit side, its mix drawn anew from the seed
//! every epoch (the engine's `[[fault.schedule]]`), while one connection carries a verified
//! mixed workload. The workload has a fixed number of messages, so the soak runs the pair
//! again until the time is up: a short first run measures the rate, the next is sized to fill
//! the rest. Both processes report what they verified (JSON on stdout); the soak samples both
//! processes' RSS while they run. Native mode only: the engine's workload driver has no RoCEv2
//! mode.

use crate::format;
use crate::soak::{mib, rss_of, write_json, MemReport, MemSample, SoakArgs};
use clap::Args;
use ferroce_dataplane::netns::{is_root, VethPair};
use ferroce_sim::Rng;
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Args, Debug, Clone)]
pub struct RealSoakArgs {
    /// Seconds between two fault mixes.
    #[arg(long, default_value_t = 20.0)]
    pub epoch_s: f64,
    /// No injected faults.
    #[arg(long)]
    pub no_faults: bool,
    /// Idle connections the client opens beside the workload's, each run (each READs 4 KiB
    /// once, verified, then idles until the run ends): both engines report their process's
    /// heap per idle connection.
    #[arg(long, default_value_t = 0)]
    pub idle_connections: u32,
}

/// The kernel's and the engines' addresses: a /24 of 198.18.0.0/15 no other test uses; the
/// namespaces are this process's own (named after its pid), so nothing leaves them.
const KERNEL: [&str; 2] = ["198.19.81.1", "198.19.81.2"];
const ENGINE: [&str; 2] = ["198.19.81.11", "198.19.81.12"];
const OPS: &str = r#"["send", "send_imm", "write", "write_imm", "read", "fetch_add", "cmp_swap"]"#;
/// (The engine's workload takes no zero-length messages; the simulator soak has them.)
const SIZES: &str = "[1, 64, 1000, 1408, 1409, 4097, 20000, 65536, 1048576]";
/// How long one engine of the pair may outlive the other (the server closes a few seconds
/// after its client in a good run).
const EXIT_GRACE: Duration = Duration::from_secs(30);
/// Streams (QPs) of the one connection.
const STREAMS: u32 = 3;

/// One epoch's injected faults (the engine's `[fault.tx]` keys), on both engines.
#[derive(Clone, Debug, Default, Serialize)]
struct PhaseFaults {
    loss: f64,
    burst_enter: f64,
    burst_exit: f64,
    reorder: f64,
    duplicate: f64,
    corrupt: f64,
    ecn_mark: f64,
}

impl PhaseFaults {
    fn draw(rng: &mut Rng) -> Self {
        let u = |rng: &mut Rng, lo: f64, hi: f64| lo + (hi - lo) * rng.next_f64();
        let mut f = PhaseFaults::default();
        if rng.chance(0.6) {
            f.loss = u(rng, 0.001, 0.02);
        }
        if rng.chance(0.4) {
            f.burst_exit = 1.0 / u(rng, 2.0, 8.0);
            f.burst_enter = u(rng, 0.0005, 0.003);
        }
        if rng.chance(0.5) {
            f.reorder = u(rng, 0.001, 0.03);
        }
        if rng.chance(0.4) {
            f.duplicate = u(rng, 0.001, 0.02);
        }
        if rng.chance(0.4) {
            f.corrupt = u(rng, 0.0005, 0.01);
        }
        if rng.chance(0.5) {
            f.ecn_mark = u(rng, 0.001, 0.05);
        }
        f
    }

    /// The keys of one `[fault.tx]` table, inline.
    fn toml(&self) -> String {
        format!(
            "loss = {}, burst_enter = {}, burst_exit = {}, reorder = {}, reorder_depth = 3, \
             duplicate = {}, corrupt = {}, ecn_mark = {}",
            self.loss,
            self.burst_enter,
            self.burst_exit
                .max(if self.burst_enter > 0.0 { 0.01 } else { 0.0 }),
            self.reorder,
            self.duplicate,
            self.corrupt,
            self.ecn_mark
        )
    }

    /// `[fault.tx]` with the first mix, then one `[[fault.schedule]]` per later epoch.
    fn schedule_toml(mixes: &[PhaseFaults], epoch_s: f64, seed: u64) -> String {
        let mut t = String::new();
        if let Some(m) = mixes.first() {
            t += &format!("[fault]\ntx = {{ {}, seed = {seed} }}\n", m.toml());
        }
        for (k, m) in mixes.iter().enumerate().skip(1) {
            t += &format!(
                "[[fault.schedule]]\nat_s = {}\ntx = {{ {} }}\n",
                k as f64 * epoch_s,
                m.toml()
            );
        }
        t
    }

    fn describe(&self) -> String {
        let mut p = Vec::new();
        let pct = |x: f64| format!("{:.2}%", x * 100.0);
        if self.loss > 0.0 {
            p.push(format!("loss {}", pct(self.loss)));
        }
        if self.burst_enter > 0.0 {
            p.push(format!(
                "bursts enter {} len {:.1}",
                pct(self.burst_enter),
                1.0 / self.burst_exit
            ));
        }
        if self.reorder > 0.0 {
            p.push(format!("reorder {}", pct(self.reorder)));
        }
        if self.duplicate > 0.0 {
            p.push(format!("dup {}", pct(self.duplicate)));
        }
        if self.corrupt > 0.0 {
            p.push(format!("corrupt {}", pct(self.corrupt)));
        }
        if self.ecn_mark > 0.0 {
            p.push(format!("ecn {}", pct(self.ecn_mark)));
        }
        if p.is_empty() {
            "clean".into()
        } else {
            p.join(", ")
        }
    }
}

#[derive(Clone, Debug, Serialize)]
struct SideReport {
    ok: bool,
    completed: u64,
    bytes: u64,
    errors: Vec<String>,
    retx_pkts: Option<u64>,
    fault_tx: Value,
    rss_samples: Vec<MemSample>,
    /// The idle connections (`--idle-connections`): opened, READs verified, closed, heap
    /// per idle connection.
    #[serde(skip_serializing_if = "Value::is_null")]
    fleet: Value,
}

/// One run of the engine pair.
#[derive(Clone, Debug, Serialize)]
struct PhaseReport {
    phase: u32,
    /// The fault mix of each epoch of this run (epoch k starts k * epoch_s after the first
    /// frame); the engines' `fault_tx.changes` counters say how many came into force.
    faults: Vec<PhaseFaults>,
    messages_per_stream: u32,
    wall_s: f64,
    client: SideReport,
    server: SideReport,
    client_rss: MemReport,
    server_rss: MemReport,
}

#[derive(Serialize)]
struct RealSoakJson {
    kind: &'static str,
    mode: &'static str,
    ok: bool,
    seed: u64,
    minutes: f64,
    wall_s: f64,
    phases: Vec<PhaseReport>,
    messages_verified: u64,
    bytes_verified: u64,
    receives_verified: u64,
    errors: u64,
    error_samples: Vec<String>,
    /// This (controlling) process's memory.
    memory: MemReport,
    epoch_s: f64,
    /// RSS of the client and server engines of the longest run (every run's own figures are
    /// in `phases`).
    client_rss: MemReport,
    server_rss: MemReport,
}

/// A child killed (SIGKILL) and reaped when dropped, so an early return leaves none behind.
struct Proc(Option<Child>);

impl Proc {
    fn pid(&self) -> Option<String> {
        self.0.as_ref().map(|c| c.id().to_string())
    }

    /// Whether it has exited (reaped then).
    fn exited(&mut self) -> bool {
        match &mut self.0 {
            Some(c) => !matches!(c.try_wait(), Ok(None)),
            None => true,
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn(ns: &str, cfg: &Path, out: &Path, err: &Path) -> Result<Proc, String> {
    let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
    let o = std::fs::File::create(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let e = std::fs::File::create(err).map_err(|e| format!("{}: {e}", err.display()))?;
    // `ip netns exec` execs the program, so the child's pid is the engine's (for its RSS).
    let c = Command::new("ip")
        .args(["netns", "exec", ns])
        .arg(exe)
        .args(["dataplane", "run", "--json", "--config"])
        .arg(cfg)
        .stdin(Stdio::null())
        .stdout(o)
        .stderr(e)
        .spawn()
        .map_err(|e| format!("spawn the engine: {e}"))?;
    Ok(Proc(Some(c)))
}

#[allow(clippy::too_many_arguments)]
fn config_text(
    side: usize,
    veth: &VethPair,
    faults: &str,
    messages: u32,
    timeout_s: f64,
    wl_seed: u64,
    idle_connections: u32,
) -> String {
    let role = if side == 0 { "client" } else { "server" };
    format!(
        r#"[port]
vdev = "net_af_packet{side},iface={iface},framecnt=8192"
mtu = 1500

[net]
address = "{addr}"

[transport]
paths = 1
seed = {tseed}
line_rate_mbps = 2000
min_rto_us = 10000
initial_rto_us = 10000

{faults}
[workload]
role = "{role}"
peer = "{peer}"
streams = {STREAMS}
messages = {messages}
sizes = {SIZES}
ops = {OPS}
depth = 8
recv_depth = 32
seed = {wl_seed}
timeout_s = {timeout_s}
connections = {idle_connections}
"#,
        iface = veth.ifname[side],
        addr = ENGINE[side],
        tseed = wl_seed.wrapping_mul(2).wrapping_add(side as u64),
        peer = ENGINE[1],
    )
}

fn last_json(path: &Path) -> Value {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<Value>(l).ok())
        .unwrap_or(Value::Null)
}

fn side_report(v: &Value, exited_ok: bool, err_file: &Path, rss: Vec<MemSample>) -> SideReport {
    let w = &v["workload"];
    let mut errors: Vec<String> = w["errors"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| e.as_str().unwrap_or("?").to_string())
                .collect()
        })
        .unwrap_or_default();
    let ok = exited_ok && w["ok"] == true;
    if !ok && errors.is_empty() {
        let tail: String = std::fs::read_to_string(err_file)
            .unwrap_or_default()
            .lines()
            .rev()
            .take(3)
            .collect::<Vec<_>>()
            .join(" | ");
        errors.push(format!(
            "engine process failed (no workload errors reported): {tail}"
        ));
    }
    SideReport {
        ok,
        completed: w["completed"].as_u64().unwrap_or(0),
        bytes: w["bytes"].as_u64().unwrap_or(0),
        errors,
        retx_pkts: v["counters"]["transport"]["retx_pkts"].as_u64(),
        fault_tx: v["counters"]["fault_tx"].clone(),
        rss_samples: rss,
        fleet: w["fleet"].clone(),
    }
}

pub fn run(a: &SoakArgs, r: &RealSoakArgs) -> Result<bool, String> {
    if !is_root() {
        return Err("soak real needs root (network namespaces, DPDK's af_packet)".into());
    }
    let t0 = Instant::now();
    let budget = Duration::from_secs_f64(a.minutes * 60.0);
    let epoch_s = r.epoch_s.clamp(1.0, 600.0);
    let every = Duration::from_secs_f64(a.every.max(0.5));
    let veth = VethPair::create("sk", KERNEL, 24).map_err(|e| format!("veth pair: {e}"))?;
    let dir = std::env::temp_dir().join(format!("ferroce-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let _cleanup = RemoveDir(dir.clone());
    eprintln!(
        "ferroce soak real: two engines in namespaces {} and {} (veth {}/{}), a new fault mix every {epoch_s:.0} s, \
         seed {}, {:.1} min, native mode",
        veth.ns[0], veth.ns[1], veth.ifname[0], veth.ifname[1], a.seed, a.minutes
    );
    let mut rng = Rng::derive(a.seed, 0x5ea1);
    let mut phases: Vec<PhaseReport> = Vec::new();
    let mut self_samples = vec![crate::soak::sample_self(t0)];
    // Messages per stream of the first (short) run; the next is sized by its rate to fill the
    // time left.
    let mut messages: u32 = 300;
    let mut next_print = Instant::now() + every;
    let mut phase = 0u32;
    while t0.elapsed() < budget || phases.is_empty() {
        let left = budget.saturating_sub(t0.elapsed()).as_secs_f64();
        if !phases.is_empty() && left < 10.0 {
            break;
        }
        let expect_s = if phases.is_empty() {
            15.0
        } else {
            left.max(5.0)
        };
        let timeout = expect_s * 3.0 + 30.0;
        // Mixes for as long as the run can last (its timeout), one per epoch.
        let epochs = (timeout / epoch_s).ceil() as usize + 1;
        let mixes: Vec<PhaseFaults> = (0..epochs)
            .map(|_| {
                if r.no_faults {
                    PhaseFaults::default()
                } else {
                    PhaseFaults::draw(&mut rng)
                }
            })
            .collect();
        let seed = a.seed.wrapping_mul(1000).wrapping_add(phase as u64);
        let mut files = Vec::new();
        for side in 0..2 {
            // --tamper: the server runs another workload seed, so other operations and sizes
            // than the client sends: its checks must report them.
            let wl_seed = if a.tamper && side == 1 { 2 } else { 1 };
            let faults = PhaseFaults::schedule_toml(&mixes, epoch_s, seed * 7 + side as u64 + 1);
            let text = config_text(
                side,
                &veth,
                &faults,
                messages,
                timeout,
                wl_seed,
                r.idle_connections,
            );
            let p = dir.join(format!("phase{phase}-{side}.toml"));
            std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
            files.push((
                p,
                dir.join(format!("phase{phase}-{side}.out")),
                dir.join(format!("phase{phase}-{side}.err")),
            ));
        }
        eprintln!(
            "[{:>6.1} s] run {phase}: {} messages per stream, faults: {}",
            t0.elapsed().as_secs_f64(),
            messages,
            mixes[0].describe()
        );
        let pt = Instant::now();
        let mut server = spawn(&veth.ns[1], &files[1].0, &files[1].1, &files[1].2)?;
        // The server answers ARP and accepts once its port is up; the client's OPEN is
        // retried anyway, so a short head start is enough.
        std::thread::sleep(Duration::from_millis(300));
        let mut client = spawn(&veth.ns[0], &files[0].0, &files[0].1, &files[0].2)?;
        let (mut cs, mut ss) = (Vec::new(), Vec::new());
        let hard_limit = Duration::from_secs_f64(timeout + 30.0);
        let mut sample_at = Instant::now();
        let mut one_exited: Option<Instant> = None;
        loop {
            let c_done = client.exited();
            let s_done = server.exited();
            if c_done && s_done {
                break;
            }
            if pt.elapsed() > hard_limit {
                break;
            }
            // A server whose client is gone waits for its timeout (minutes): after a grace
            // period the pair is over (what is still running is killed and reported failed).
            if c_done || s_done {
                let t = *one_exited.get_or_insert_with(Instant::now);
                if t.elapsed() > EXIT_GRACE {
                    break;
                }
            }
            if Instant::now() >= sample_at {
                sample_at += Duration::from_secs(1);
                let t = t0.elapsed().as_secs_f64();
                // A process that has just exited has no RSS to read: no sample then (a
                // sample without its RSS would be a hole in the memory series).
                if let Some(rss) = client.pid().and_then(|p| rss_of(&p)) {
                    cs.push(MemSample {
                        t_s: t,
                        live_bytes: None,
                        rss_bytes: Some(rss),
                    });
                }
                if let Some(rss) = server.pid().and_then(|p| rss_of(&p)) {
                    ss.push(MemSample {
                        t_s: t,
                        live_bytes: None,
                        rss_bytes: Some(rss),
                    });
                }
            }
            if Instant::now() >= next_print {
                next_print += every;
                let m = crate::soak::sample_self(t0);
                self_samples.push(m);
                let (mv, bv, ev) = totals(&phases);
                let epoch = (pt.elapsed().as_secs_f64() / epoch_s) as usize;
                eprintln!(
                    "[{:>6.1} s] run {phase} ({:.0} s in): before it {mv} messages, {} verified, \
                     {ev} errors; rss client {} server {}; faults (epoch {epoch}): {}",
                    m.t_s,
                    pt.elapsed().as_secs_f64(),
                    mib(bv as f64),
                    cs.last()
                        .and_then(|s| s.rss_bytes)
                        .map_or("-".into(), |b| mib(b as f64)),
                    ss.last()
                        .and_then(|s| s.rss_bytes)
                        .map_or("-".into(), |b| mib(b as f64)),
                    mixes[epoch.min(mixes.len() - 1)].describe()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let exit_ok = |p: &mut Proc| {
            p.0.as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
                .is_some_and(|s| s.success())
        };
        let (c_ok, s_ok) = (exit_ok(&mut client), exit_ok(&mut server));
        drop(client);
        drop(server);
        let wall = pt.elapsed().as_secs_f64();
        let to_run_time = |v: &[MemSample]| -> Vec<MemSample> {
            let start = v.first().map_or(0.0, |s| s.t_s);
            v.iter()
                .map(|s| MemSample {
                    t_s: s.t_s - start,
                    ..*s
                })
                .collect()
        };
        let (client_rss, server_rss) = (
            MemReport::new(to_run_time(&cs)),
            MemReport::new(to_run_time(&ss)),
        );
        let c = side_report(&last_json(&files[0].1), c_ok, &files[0].2, cs);
        let s = side_report(&last_json(&files[1].1), s_ok, &files[1].2, ss);
        eprintln!(
            "[{:>6.1} s] run {phase} done in {wall:.1} s: client {} ({} WRs, {}), server {} ({} receives), \
             retransmits {}",
            t0.elapsed().as_secs_f64(),
            if c.ok { "ok" } else { "FAILED" },
            c.completed,
            mib(c.bytes as f64),
            if s.ok { "ok" } else { "FAILED" },
            s.completed,
            c.retx_pkts.unwrap_or(0) + s.retx_pkts.unwrap_or(0)
        );
        for (name, side) in [("client", &c), ("server", &s)] {
            let f = &side.fleet;
            if !f.is_null() {
                eprintln!(
                    "[{:>6.1} s] run {phase}: {name}'s idle connections: {} of {} open in {:.2} s, \
                     {} READs verified, {} closed, heap per idle connection {}",
                    t0.elapsed().as_secs_f64(),
                    f["opened"],
                    f["connections"],
                    f["open_s"].as_f64().unwrap_or(0.0),
                    f["reads_ok"],
                    f["closed"],
                    f["heap_per_conn"]
                        .as_f64()
                        .map_or("not measured".into(), |b| format!("{b:.0} B"))
                );
            }
        }
        let this_messages = messages;
        // Size the next run from this one's rate (work requests per second) to fill the time
        // left (a little less: faults of later epochs may be harder).
        let active = (wall - 0.5).max(0.5);
        if c.ok && c.completed > 0 {
            let per_stream_rate = c.completed as f64 / STREAMS as f64 / active;
            let left = budget.saturating_sub(t0.elapsed()).as_secs_f64();
            messages = (per_stream_rate * left * 0.85).clamp(50.0, 5_000_000.0) as u32;
        }
        phases.push(PhaseReport {
            phase,
            faults: mixes,
            messages_per_stream: this_messages,
            wall_s: wall,
            client: c,
            server: s,
            client_rss,
            server_rss,
        });
        phase += 1;
        let failed = phases.last().is_some_and(|p| !(p.client.ok && p.server.ok));
        if failed {
            eprintln!("ferroce soak real: run {} failed; stopping", phase - 1);
            break;
        }
    }
    self_samples.push(crate::soak::sample_self(t0));
    let (mv, bv, errors) = totals(&phases);
    let receives: u64 = phases.iter().map(|p| p.server.completed).sum();
    let error_samples: Vec<String> = phases
        .iter()
        .flat_map(|p| {
            p.client
                .errors
                .iter()
                .map(move |e| format!("phase {} client: {e}", p.phase))
                .chain(
                    p.server
                        .errors
                        .iter()
                        .map(move |e| format!("phase {} server: {e}", p.phase)),
                )
        })
        .take(20)
        .collect();
    let ok = errors == 0 && mv > 0 && phases.iter().all(|p| p.client.ok && p.server.ok);
    let longest = phases
        .iter()
        .max_by(|x, y| x.wall_s.total_cmp(&y.wall_s))
        .cloned()
        .ok_or("no run")?;
    let j = RealSoakJson {
        kind: "real",
        mode: "native",
        ok,
        seed: a.seed,
        minutes: a.minutes,
        wall_s: t0.elapsed().as_secs_f64(),
        messages_verified: mv,
        bytes_verified: bv,
        receives_verified: receives,
        errors,
        error_samples,
        memory: MemReport::new(self_samples),
        epoch_s,
        client_rss: longest.client_rss,
        server_rss: longest.server_rss,
        phases,
    };
    let path = a
        .json
        .clone()
        .unwrap_or_else(|| PathBuf::from("out/soak-real.json"));
    write_json(&path, &j)?;
    println!(
        "ferroce soak real: {}: {:.1} s, {} runs of the engine pair, {} messages and {} verified ({} receives), {} errors",
        if ok { "PASS" } else { "FAIL" },
        j.wall_s,
        j.phases.len(),
        j.messages_verified,
        format::bytes(j.bytes_verified),
        j.receives_verified,
        j.errors
    );
    for e in &j.error_samples {
        println!("  error: {e}");
    }
    println!(
        "{} (longest run, {:.0} s)",
        j.client_rss.describe("client engine"),
        longest.wall_s
    );
    println!("{}", j.server_rss.describe("server engine"));
    println!("summary written to {}", path.display());
    Ok(ok)
}

/// (messages verified, bytes verified, errors) over finished phases. A failed side with no
/// error list still counts as one error.
fn totals(phases: &[PhaseReport]) -> (u64, u64, u64) {
    let mut t = (0, 0, 0);
    for p in phases {
        if p.client.ok {
            t.0 += p.client.completed;
            t.1 += p.client.bytes;
        }
        t.2 += p.client.errors.len() as u64 + p.server.errors.len() as u64;
    }
    t
}

struct RemoveDir(PathBuf);

impl Drop for RemoveDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
