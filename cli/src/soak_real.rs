//! `ferroce soak real`: real packets between two DPDK engine processes (this program's
//! `dataplane run`) in two network namespaces joined by a veth pair (net_af_packet), each
//! with the engine's fault injector on its transmit side. The injector's settings are fixed for
//! an engine's life, so the soak runs consecutive phases: each phase draws a new fault mix
//! from the seed and runs a fresh client/server pair with a verified mixed workload sized to
//! last about one phase. Both processes report what they verified (JSON on stdout); the soak
//! samples both processes' RSS while they run. Native mode only: the engine's workload driver
//! has no RoCEv2 mode.

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
    /// Seconds per phase (each phase: a new fault mix, a new pair of engine processes).
    #[arg(long, default_value_t = 20.0)]
    pub phase_s: f64,
    /// No injected faults.
    #[arg(long)]
    pub no_faults: bool,
}

/// The kernel's and the engines' addresses: a /24 of 198.18.0.0/15 no other test uses; the
/// namespaces are this process's own (named after its pid), so nothing leaves them.
const KERNEL: [&str; 2] = ["198.19.81.1", "198.19.81.2"];
const ENGINE: [&str; 2] = ["198.19.81.11", "198.19.81.12"];
const OPS: &str = r#"["send", "send_imm", "write", "write_imm", "read", "fetch_add", "cmp_swap"]"#;
/// (The engine's workload takes no zero-length messages; the simulator soak has them.)
const SIZES: &str = "[1, 64, 1000, 1408, 1409, 4097, 20000, 65536, 1048576]";
/// Streams (QPs) of the one connection.
const STREAMS: u32 = 3;

/// One phase's injected faults (the engine's `[fault.tx]` keys), on both engines.
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

    fn toml(&self, seed: u64) -> String {
        format!(
            "[fault.tx]\nloss = {}\nburst_enter = {}\nburst_exit = {}\nreorder = {}\n\
             reorder_depth = 3\nduplicate = {}\ncorrupt = {}\necn_mark = {}\nseed = {seed}\n",
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
}

#[derive(Clone, Debug, Serialize)]
struct PhaseReport {
    phase: u32,
    faults: PhaseFaults,
    messages_per_stream: u32,
    wall_s: f64,
    client: SideReport,
    server: SideReport,
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
    /// RSS of the client engines over the whole soak (each phase's process is new: the slope
    /// is over phases' samples laid end to end).
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
        .args(["dataplane", "run", "--config"])
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
    faults: &PhaseFaults,
    seed: u64,
    messages: u32,
    timeout_s: f64,
    wl_seed: u64,
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
"#,
        iface = veth.ifname[side],
        addr = ENGINE[side],
        tseed = seed.wrapping_mul(2).wrapping_add(side as u64),
        faults = faults.toml(seed.wrapping_mul(7).wrapping_add(side as u64 + 1)),
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
    }
}

pub fn run(a: &SoakArgs, r: &RealSoakArgs) -> Result<bool, String> {
    if !is_root() {
        return Err("soak real needs root (network namespaces, DPDK's af_packet)".into());
    }
    let t0 = Instant::now();
    let budget = Duration::from_secs_f64(a.minutes * 60.0);
    let phase_s = r.phase_s.clamp(5.0, 600.0);
    let every = Duration::from_secs_f64(a.every.max(0.5));
    let veth = VethPair::create("sk", KERNEL, 24).map_err(|e| format!("veth pair: {e}"))?;
    let dir = std::env::temp_dir().join(format!("ferroce-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let _cleanup = RemoveDir(dir.clone());
    eprintln!(
        "ferroce soak real: two engines in namespaces {} and {} (veth {}/{}), phases of {phase_s:.0} s, \
         seed {}, {:.1} min, native mode",
        veth.ns[0], veth.ns[1], veth.ifname[0], veth.ifname[1], a.seed, a.minutes
    );
    let mut rng = Rng::derive(a.seed, 0x5ea1);
    let mut phases: Vec<PhaseReport> = Vec::new();
    let mut self_samples = vec![crate::soak::sample_self(t0)];
    let (mut c_rss, mut s_rss) = (Vec::new(), Vec::new());
    // Messages per stream for the first phase; later phases scale by the last phase's rate.
    let mut messages: u32 = 400;
    let mut next_print = Instant::now() + every;
    let mut phase = 0u32;
    while t0.elapsed() < budget || phases.is_empty() {
        let left = budget.saturating_sub(t0.elapsed()).as_secs_f64();
        let this_phase = phase_s.min(left.max(5.0));
        let faults = if r.no_faults {
            PhaseFaults::default()
        } else {
            PhaseFaults::draw(&mut rng)
        };
        let seed = a.seed.wrapping_mul(1000).wrapping_add(phase as u64);
        let timeout = this_phase * 3.0 + 30.0;
        let mut files = Vec::new();
        for side in 0..2 {
            // --tamper: the server runs another workload seed, so other operations and sizes
            // than the client sends: its checks must report them.
            let wl_seed = if a.tamper && side == 1 { 2 } else { 1 };
            let text = config_text(side, &veth, &faults, seed, messages, timeout, wl_seed);
            let p = dir.join(format!("phase{phase}-{side}.toml"));
            std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
            files.push((
                p,
                dir.join(format!("phase{phase}-{side}.out")),
                dir.join(format!("phase{phase}-{side}.err")),
            ));
        }
        eprintln!(
            "[{:>6.1} s] phase {phase}: {} messages per stream, faults: {}",
            t0.elapsed().as_secs_f64(),
            messages,
            faults.describe()
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
        loop {
            let c_done = client.exited();
            let s_done = server.exited();
            if c_done && s_done {
                break;
            }
            if pt.elapsed() > hard_limit {
                break;
            }
            if Instant::now() >= sample_at {
                sample_at += Duration::from_secs(1);
                let t = t0.elapsed().as_secs_f64();
                if let Some(p) = client.pid() {
                    cs.push(MemSample {
                        t_s: t,
                        live_bytes: None,
                        rss_bytes: rss_of(&p),
                    });
                }
                if let Some(p) = server.pid() {
                    ss.push(MemSample {
                        t_s: t,
                        live_bytes: None,
                        rss_bytes: rss_of(&p),
                    });
                }
            }
            if Instant::now() >= next_print {
                next_print += every;
                let m = crate::soak::sample_self(t0);
                self_samples.push(m);
                let (mv, bv, ev) = totals(&phases);
                eprintln!(
                    "[{:>6.1} s] phase {phase} ({:.0} s in): before it {mv} messages, {} verified, \
                     {ev} errors; rss client {} server {}; faults: {}",
                    m.t_s,
                    pt.elapsed().as_secs_f64(),
                    format::bytes(bv),
                    cs.last()
                        .and_then(|s| s.rss_bytes)
                        .map_or("-".into(), |b| mib(b as f64)),
                    ss.last()
                        .and_then(|s| s.rss_bytes)
                        .map_or("-".into(), |b| mib(b as f64)),
                    faults.describe()
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
        c_rss.extend(cs.iter().copied());
        s_rss.extend(ss.iter().copied());
        let c = side_report(&last_json(&files[0].1), c_ok, &files[0].2, cs);
        let s = side_report(&last_json(&files[1].1), s_ok, &files[1].2, ss);
        eprintln!(
            "[{:>6.1} s] phase {phase} done in {wall:.1} s: client {} ({} WRs, {}), server {} ({} receives), \
             retransmits {}",
            t0.elapsed().as_secs_f64(),
            if c.ok { "ok" } else { "FAILED" },
            c.completed,
            format::bytes(c.bytes),
            if s.ok { "ok" } else { "FAILED" },
            s.completed,
            c.retx_pkts.unwrap_or(0) + s.retx_pkts.unwrap_or(0)
        );
        let this_messages = messages;
        // Size the next phase from this one's rate (work requests per second).
        let active = (wall - 0.5).max(0.5);
        if c.ok && c.completed > 0 {
            let per_stream_rate = c.completed as f64 / STREAMS as f64 / active;
            messages = (per_stream_rate * phase_s * 0.8).clamp(50.0, 200_000.0) as u32;
        }
        phases.push(PhaseReport {
            phase,
            faults,
            messages_per_stream: this_messages,
            wall_s: wall,
            client: c,
            server: s,
        });
        phase += 1;
        let failed = phases.last().is_some_and(|p| !(p.client.ok && p.server.ok));
        if failed {
            eprintln!("ferroce soak real: phase {} failed; stopping", phase - 1);
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
        client_rss: MemReport::new(c_rss),
        server_rss: MemReport::new(s_rss),
        phases,
    };
    let path = a
        .json
        .clone()
        .unwrap_or_else(|| PathBuf::from("out/soak-real.json"));
    write_json(&path, &j)?;
    println!(
        "ferroce soak real: {}: {:.1} s, {} phases, {} messages and {} verified ({} receives), {} errors",
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
    println!("{}", j.client_rss.describe("client engine"));
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
