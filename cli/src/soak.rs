//! `ferroce soak sim` and `ferroce soak real`: run a verified workload under changing faults for
//! as long as asked, print a progress line every few seconds and a JSON summary with memory
//! over time. The simulator soak is `ferroce_harness::soak`; the real-packet soak (two DPDK
//! engine processes in two namespaces) is in `soak_real.rs`. This file has the shared parts:
//! arguments, memory samples and their slope, and the summary's common fields.

use crate::format;
use clap::{Args, Subcommand};
use ferroce_harness::soak::{SimSoak, SoakConfig, SoakStats};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Args, Debug, Clone)]
pub struct SoakArgs {
    #[command(subcommand)]
    pub which: SoakWhich,
    /// How long to run (wall clock), fractional allowed: 0.5 is 30 s.
    #[arg(long, default_value_t = 1.0, global = true)]
    pub minutes: f64,
    /// Seed of every random choice (fault mixes, connection ids, injector).
    #[arg(long, default_value_t = 1, global = true)]
    pub seed: u64,
    /// Where to write the JSON summary (default: out/soak-sim.json or out/soak-real.json).
    #[arg(long, global = true)]
    pub json: Option<PathBuf>,
    /// Seconds between two progress lines (and memory samples).
    #[arg(long, default_value_t = 5.0, global = true)]
    pub every: f64,
    /// Test only: make the run fail on purpose (sim: the first MiB of a server's READ source
    /// is changed mid-run; real: the server expects other operations and sizes than the client
    /// sends), to show that the checks catch it.
    #[arg(long, hide = true, global = true)]
    pub tamper: bool,
}

#[derive(Subcommand, Debug, Clone)]
pub enum SoakWhich {
    /// The transport core on the simulated fabric: 8 hosts, 2 planes, 16 connections of 3
    /// streams, every operation, 0 B to 2 MiB, under a fault mix drawn anew every epoch.
    Sim(SimSoakArgs),
    /// Two DPDK engine processes in two network namespaces (veth, af_packet), the engine's
    /// fault injector drawing a new mix every epoch (needs root and DPDK).
    Real(crate::soak_real::RealSoakArgs),
}

#[derive(Args, Debug, Clone)]
pub struct SimSoakArgs {
    /// Simulated hosts (every one a client and a server).
    #[arg(long, default_value_t = 8)]
    pub hosts: usize,
    /// Connections each host opens (to the next hosts in order).
    #[arg(long, default_value_t = 2)]
    pub conns: usize,
    /// Streams (QPs) per connection.
    #[arg(long, default_value_t = 3)]
    pub streams: u32,
    /// Work requests per stream per round.
    #[arg(long, default_value_t = 16)]
    pub messages: u32,
    /// Largest message (bytes); the sizes are 0, 1, 100, 4096, 4097, 65536, 300000 and this.
    #[arg(long, default_value_t = 2 << 20)]
    pub max_size: u32,
    /// Simulated milliseconds between two fault mixes.
    #[arg(long, default_value_t = 5.0)]
    pub epoch_ms: f64,
    /// No faults at all (a clean fabric, for comparison).
    #[arg(long)]
    pub no_faults: bool,
}

/// One memory sample.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct MemSample {
    pub t_s: f64,
    /// Live heap bytes of the process (the counting allocator; None without it).
    pub live_bytes: Option<i64>,
    pub rss_bytes: Option<u64>,
}

/// Memory over a run: the samples and least-squares slopes after warm-up.
#[derive(Clone, Debug, Serialize)]
pub struct MemReport {
    pub samples: Vec<MemSample>,
    /// Samples before this (seconds) are warm-up and not in the slopes.
    pub warmup_s: f64,
    pub live_slope_bytes_per_min: Option<f64>,
    pub rss_slope_bytes_per_min: Option<f64>,
    /// Whether each slope is flat: its change over the measured window is below
    /// `max(0.5 % of the mean, 4 MiB)`.
    pub live_flat: Option<bool>,
    pub rss_flat: Option<bool>,
}

/// Least-squares slope of y over x; None with fewer than 3 points or no spread in x.
pub fn slope(pts: &[(f64, f64)]) -> Option<f64> {
    if pts.len() < 3 {
        return None;
    }
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

/// Slope per minute of the series after `warmup_s`, and whether it is flat (see [`MemReport`]).
fn series_slope(pts: &[(f64, f64)], warmup_s: f64) -> (Option<f64>, Option<bool>) {
    let after: Vec<(f64, f64)> = pts.iter().copied().filter(|p| p.0 >= warmup_s).collect();
    let Some(s) = slope(&after) else {
        return (None, None);
    };
    let span = after.last().map_or(0.0, |l| l.0) - after.first().map_or(0.0, |f| f.0);
    let mean = after.iter().map(|p| p.1).sum::<f64>() / after.len() as f64;
    let change = (s * span).abs();
    let allowed = (0.005 * mean.abs()).max(4.0 * 1024.0 * 1024.0);
    (Some(s * 60.0), Some(change <= allowed))
}

impl MemReport {
    /// Warm-up is the first quarter of the run.
    pub fn new(samples: Vec<MemSample>) -> Self {
        let end = samples.last().map_or(0.0, |s| s.t_s);
        let warmup_s = end / 4.0;
        let live: Vec<(f64, f64)> = samples
            .iter()
            .filter_map(|s| s.live_bytes.map(|b| (s.t_s, b as f64)))
            .collect();
        let rss: Vec<(f64, f64)> = samples
            .iter()
            .filter_map(|s| s.rss_bytes.map(|b| (s.t_s, b as f64)))
            .collect();
        let (live_slope, live_flat) = series_slope(&live, warmup_s);
        let (rss_slope, rss_flat) = series_slope(&rss, warmup_s);
        MemReport {
            samples,
            warmup_s,
            live_slope_bytes_per_min: live_slope,
            rss_slope_bytes_per_min: rss_slope,
            live_flat,
            rss_flat,
        }
    }

    /// One line: the slopes and whether they are flat.
    pub fn describe(&self, what: &str) -> String {
        let one = |name: &str, s: Option<f64>, flat: Option<bool>| match (s, flat) {
            (Some(s), Some(f)) => format!(
                "{name} {}{}/min{}",
                if s < 0.0 { "-" } else { "+" },
                mib(s.abs()),
                if f { " (flat)" } else { " (NOT FLAT)" }
            ),
            _ => format!("{name} not measured"),
        };
        format!(
            "{what} memory slope after {:.0} s warm-up: {}, {}",
            self.warmup_s,
            one("heap", self.live_slope_bytes_per_min, self.live_flat),
            one("RSS", self.rss_slope_bytes_per_min, self.rss_flat)
        )
    }
}

/// Bytes as MiB with two decimals (the progress lines are long enough).
pub fn mib(b: f64) -> String {
    format!("{:.2} MiB", b / (1024.0 * 1024.0))
}

/// Resident set of a process (`/proc/PID/status`, VmRSS), bytes.
pub fn rss_of(pid: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

pub fn sample_self(t0: Instant) -> MemSample {
    MemSample {
        t_s: t0.elapsed().as_secs_f64(),
        live_bytes: ferroce_benches::alloc::live_bytes(),
        rss_bytes: rss_of("self"),
    }
}

pub fn write_json<T: Serialize>(path: &Path, v: &T) -> Result<(), String> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(v).map_err(|e| e.to_string())?;
    std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))
}

pub fn run(a: &SoakArgs) -> Result<bool, String> {
    if !(a.minutes.is_finite() && a.minutes > 0.0) {
        return Err(format!(
            "--minutes {}: must be a positive number",
            a.minutes
        ));
    }
    match &a.which {
        SoakWhich::Sim(s) => run_sim(a, s),
        SoakWhich::Real(r) => crate::soak_real::run(a, r),
    }
}

#[derive(Serialize)]
struct OpsJson {
    send: u64,
    send_imm: u64,
    write: u64,
    write_imm: u64,
    read: u64,
    fetch_add: u64,
    cmp_swap: u64,
}

#[derive(Serialize)]
struct SimSoakJson {
    kind: &'static str,
    ok: bool,
    seed: u64,
    minutes: f64,
    wall_s: f64,
    sim_s: f64,
    hosts: usize,
    planes: usize,
    connections: usize,
    streams_per_connection: u32,
    sizes: Vec<u32>,
    messages_verified: u64,
    bytes_verified: u64,
    receives_verified: u64,
    write_slots_verified: u64,
    rounds: u64,
    ops: OpsJson,
    errors: u64,
    error_samples: Vec<String>,
    fault_epochs: u64,
    /// The first mixes, as printed.
    fault_mixes: Vec<String>,
    retransmits: u64,
    timeouts: u64,
    fabric_drops: u64,
    corrupted: u64,
    duplicated: u64,
    reordered: u64,
    ecn_marked: u64,
    events: u64,
    memory: MemReport,
}

/// Fault mixes kept in the summary.
const KEPT_MIXES: usize = 200;

fn progress_line(t: f64, st: &SoakStats, mix: &str, m: &MemSample) -> String {
    format!(
        "[{:>6.1} s] sim {:.3} s  msgs {}  bytes {}  errors {}  rounds {}  heap {}  rss {}  faults: {mix}",
        t,
        st.sim_ns as f64 / 1e9,
        st.messages_verified,
        mib(st.bytes_verified as f64),
        st.errors,
        st.rounds,
        m.live_bytes.map_or("-".into(), |b| mib(b as f64)),
        m.rss_bytes.map_or("-".into(), |b| mib(b as f64)),
    )
}

fn run_sim(a: &SoakArgs, s: &SimSoakArgs) -> Result<bool, String> {
    let mut sizes: Vec<u32> = vec![0, 1, 100, 4096, 4097, 65_536, 300_000];
    sizes.retain(|&x| x < s.max_size);
    sizes.push(s.max_size);
    let cfg = SoakConfig {
        seed: a.seed,
        hosts: s.hosts.clamp(2, 64),
        conns_per_host: s.conns.max(1),
        streams: s.streams.clamp(1, 64),
        messages: s.messages.clamp(1, 4096),
        sizes: sizes.clone(),
        planes: 2,
        epoch_ns: (s.epoch_ms.max(0.05) * 1e6) as u64,
        faults: !s.no_faults,
    };
    let need = registered_bytes(&cfg);
    if need > MAX_REGISTERED_BYTES {
        return Err(format!(
            "the soak would register {} of simulated host memory (limit {}): use a smaller \
             --max-size, fewer --streams, --messages, --conns or --hosts",
            format::bytes(need),
            format::bytes(MAX_REGISTERED_BYTES)
        ));
    }
    let t0 = Instant::now();
    let budget = Duration::from_secs_f64(a.minutes * 60.0);
    let every = Duration::from_secs_f64(a.every.max(0.5));
    eprintln!(
        "ferroce soak sim: {} hosts, {} connections x {} streams, sizes {:?}, seed {}, {:.1} min",
        cfg.hosts,
        cfg.hosts * cfg.conns_per_host.min(cfg.hosts - 1),
        cfg.streams,
        sizes,
        a.seed,
        a.minutes
    );
    let mut soak = SimSoak::new(cfg.clone());
    let mut samples = vec![sample_self(t0)];
    let mut mixes: Vec<String> = Vec::new();
    let mut last_epoch = u64::MAX;
    let mut next_print = t0 + every;
    let mut tampered = false;
    while t0.elapsed() < budget {
        soak.run_for(100_000);
        if soak.mix.epoch != last_epoch {
            last_epoch = soak.mix.epoch;
            if mixes.len() < KEPT_MIXES {
                mixes.push(format!("epoch {}: {}", soak.mix.epoch, soak.mix));
            }
        }
        if a.tamper && !tampered && t0.elapsed() >= budget / 2 {
            tampered = tamper_read_source(&mut soak);
        }
        if Instant::now() >= next_print {
            next_print += every;
            let m = sample_self(t0);
            samples.push(m);
            eprintln!(
                "{}",
                progress_line(m.t_s, &soak.stats(), &soak.mix.to_string(), &m)
            );
        }
    }
    eprintln!("ferroce soak sim: time is up; healing the fabric and finishing the last rounds");
    soak.finish(5_000_000_000);
    samples.push(sample_self(t0));
    let st = soak.stats();
    let memory = MemReport::new(samples);
    let ok = st.errors == 0 && st.messages_verified > 0;
    let j = SimSoakJson {
        kind: "sim",
        ok,
        seed: a.seed,
        minutes: a.minutes,
        wall_s: t0.elapsed().as_secs_f64(),
        sim_s: st.sim_ns as f64 / 1e9,
        hosts: cfg.hosts,
        planes: cfg.planes,
        connections: soak.connections(),
        streams_per_connection: cfg.streams,
        sizes,
        messages_verified: st.messages_verified,
        bytes_verified: st.bytes_verified,
        receives_verified: st.receives_verified,
        write_slots_verified: st.write_slots_verified,
        rounds: st.rounds,
        ops: OpsJson {
            send: st.ops[0],
            send_imm: st.ops[1],
            write: st.ops[2],
            write_imm: st.ops[3],
            read: st.ops[4],
            fetch_add: st.ops[5],
            cmp_swap: st.ops[6],
        },
        errors: st.errors,
        error_samples: soak.errors.iter().take(20).cloned().collect(),
        fault_epochs: st.epochs,
        fault_mixes: mixes,
        retransmits: st.retransmits,
        timeouts: st.timeouts,
        fabric_drops: st.fabric_drops,
        corrupted: st.corrupted,
        duplicated: st.duplicated,
        reordered: st.reordered,
        ecn_marked: st.ecn_marked,
        events: st.events,
        memory,
    };
    let path = a
        .json
        .clone()
        .unwrap_or_else(|| PathBuf::from("out/soak-sim.json"));
    write_json(&path, &j)?;
    println!(
        "ferroce soak sim: {}: {:.1} s wall, {:.3} s simulated, {} connections, {} messages and {} \
         verified ({} receives, {} write slots, {} rounds), {} errors, {} fault epochs; \
         {} retransmits, {} fabric drops, {} corrupted, {} duplicated, {} reordered, {} ECN marks",
        if ok { "PASS" } else { "FAIL" },
        j.wall_s,
        j.sim_s,
        j.connections,
        j.messages_verified,
        format::bytes(j.bytes_verified),
        j.receives_verified,
        j.write_slots_verified,
        j.rounds,
        j.errors,
        j.fault_epochs,
        j.retransmits,
        j.fabric_drops,
        j.corrupted,
        j.duplicated,
        j.reordered,
        j.ecn_marked
    );
    for e in &j.error_samples {
        println!("  error: {e}");
    }
    println!("{}", j.memory.describe("process"));
    println!("summary written to {}", path.display());
    Ok(ok)
}

/// Largest simulated host memory the soak registers (the default soak needs about 1.6 GiB).
const MAX_REGISTERED_BYTES: u64 = 8 << 30;

/// Simulated memory the soak's hosts register: per server its write slots, per connection
/// its receive buffers at the server and its send buffers at the client (harness::host; the
/// soak posts 4 work requests and 4 receives per stream).
fn registered_bytes(cfg: &SoakConfig) -> u64 {
    let spec = ferroce_harness::WorkloadSpec {
        streams: cfg.streams,
        messages: cfg.messages,
        sizes: cfg.sizes.clone(),
        ..Default::default()
    };
    let max = spec.max_size() as u64;
    let streams = cfg.streams as u64;
    let conns = (cfg.hosts * cfg.conns_per_host.min(cfg.hosts - 1)) as u64;
    cfg.hosts as u64 * streams * spec.write_slots() as u64 * max + conns * streams * 8 * max
}

/// `--tamper`: flip a bit in the first MiB of the first server's READ source, so the next
/// READs over it must be reported wrong. Returns whether anything was changed.
fn tamper_read_source(soak: &mut SimSoak) -> bool {
    let Some(f) = soak.flows.first().copied() else {
        return false;
    };
    let host = soak.sim.host_mut(f.server);
    let Some(key) = host.server().map(|s| s.keys.read_rkey) else {
        return false;
    };
    let Some(r) = host.mem.region_mut(key) else {
        return false;
    };
    // Every READ's source range starts within the first 64 KiB and covers its start.
    let n = r.data.len().min(1 << 20);
    for b in &mut r.data[..n] {
        *b ^= 0x40;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples(f: impl Fn(f64) -> u64) -> Vec<MemSample> {
        (0..=60)
            .map(|i| {
                let t = i as f64 * 10.0;
                MemSample {
                    t_s: t,
                    live_bytes: Some(f(t) as i64),
                    rss_bytes: Some(f(t)),
                }
            })
            .collect()
    }

    #[test]
    fn the_slope_is_least_squares_per_minute_after_warm_up() {
        assert_eq!(slope(&[(0.0, 1.0), (1.0, 3.0)]), None);
        let s = slope(&[(0.0, 1.0), (1.0, 3.0), (2.0, 5.0), (3.0, 7.0)]).unwrap();
        assert!((s - 2.0).abs() < 1e-12);
        // 100 MiB, growing 1 MiB/s during the first 2 of 10 minutes, then flat with noise.
        let base = 100u64 << 20;
        let warm = MemReport::new(samples(|t| {
            base + ((t.min(120.0)) as u64 * (1 << 20)) + (t as u64 % 3) * 4096
        }));
        assert_eq!(warm.warmup_s, 150.0);
        assert!(warm.rss_slope_bytes_per_min.unwrap().abs() < 10_000.0);
        assert_eq!(warm.rss_flat, Some(true));
        // A leak of 2 MiB per minute over 10 minutes is not flat.
        let leak = MemReport::new(samples(|t| base + (t / 60.0 * 2.0 * 1048576.0) as u64));
        let s = leak.live_slope_bytes_per_min.unwrap();
        assert!((s - 2.0 * 1048576.0).abs() < 1000.0, "{s}");
        assert_eq!(leak.live_flat, Some(false));
    }
}
