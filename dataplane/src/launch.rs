//! Bringing an engine up from a [`Config`]: the checks before EAL (hugepages, the PMD
//! plugin, the interface), then EAL, the port, the engine (one shard or many) and an optional
//! workload ([`run_engine`], what `ferroce dataplane --config FILE` runs).

use crate::app::{self, WorkloadResult};
use crate::config::{field, Config, ConfigError};
use crate::engine::{self, Engine};
use crate::net;
use ferroce_dpdk_sys::{Eal, Port};
use serde_json::{json, Value};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where Debian's DPDK keeps its PMD plugins.
pub fn pmd_dir() -> Option<PathBuf> {
    for lib in [
        "/usr/lib/x86_64-linux-gnu/dpdk",
        "/usr/lib/aarch64-linux-gnu/dpdk",
        "/usr/lib/dpdk",
        "/usr/local/lib/dpdk",
    ] {
        if let Ok(rd) = std::fs::read_dir(lib) {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().starts_with("pmds-") {
                    return Some(e.path());
                }
            }
        }
    }
    None
}

/// The driver of a vdev name: "net_af_packet0" → "net_af_packet".
pub fn vdev_driver(name: &str) -> &str {
    name.trim_end_matches(|c: char| c.is_ascii_digit())
}

/// Checks before EAL, each failure with its fix: hugepages, the PMD plugin, the interface.
pub fn preflight(cfg: &Config) -> Result<(), ConfigError> {
    let args = cfg.eal_argv();
    if !args.iter().any(|a| a == "--no-huge") {
        let free = hugepages_free();
        if free == Some(0) {
            return Err(ConfigError(
                "no hugepages are reserved (HugePages_Free is 0 in /proc/meminfo) and eal.args \
                 has no --no-huge.\n  fix: echo 256 > /proc/sys/vm/nr_hugepages  (as root; add \
                 --in-memory to eal.args if no hugetlbfs is mounted), or run without hugepages: \
                 add \"--no-huge\" to eal.args"
                    .into(),
            ));
        }
    }
    if cfg.port.backend == "udp" {
        return Ok(());
    }
    if let Some(v) = &cfg.port.vdev {
        let (name, rest) = v.split_once(',').unwrap_or((v.as_str(), ""));
        let drv = vdev_driver(name);
        match pmd_dir() {
            None => {
                return Err(ConfigError(format!(
                    "DPDK's PMD folder (/usr/lib/<arch>/dpdk/pmds-*) is missing, so no PMD can \
                     load (port.vdev wants {drv}).\n  fix: apt-get install dpdk"
                )))
            }
            Some(dir) => {
                let so = dir.join(format!("librte_{drv}.so"));
                let alt = dir.join(format!("librte_{}.so", drv.replacen("eth_", "net_", 1)));
                if !so.exists() && !alt.exists() {
                    return Err(ConfigError(format!(
                        "config field `port.vdev`: the PMD `{drv}` is not installed (no {} in \
                         {}).\n  fix: apt-get install dpdk (Debian ships each PMD as \
                         librte-{}23), or check the driver name (net_ring, net_af_packet, \
                         net_memif, net_tap, net_af_xdp, ...)",
                        so.file_name()
                            .map(|f| f.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                        dir.display(),
                        drv.replace('_', "-")
                    )));
                }
            }
        }
        for kv in rest.split(',') {
            if let Some(iface) = kv.strip_prefix("iface=") {
                if !Path::new("/sys/class/net").join(iface).exists() {
                    return Err(field(
                        "port.vdev",
                        format!(
                            "interface `{iface}` does not exist in this network namespace (see \
                             `ip link show`; run inside the right one with `ip netns exec`)"
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}

pub fn hugepages_free() -> Option<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    m.lines()
        .find(|l| l.starts_with("HugePages_Free:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

static SIGNALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_signal(_sig: std::ffi::c_int) {
    SIGNALLED.store(true, std::sync::atomic::Ordering::SeqCst);
}

extern "C" {
    fn signal(sig: std::ffi::c_int, handler: extern "C" fn(std::ffi::c_int)) -> usize;
}

fn install_signal_handlers() {
    // SAFETY: `signal` from libc with a handler that only stores to an atomic (async-signal
    // safe). SIGINT = 2, SIGTERM = 15 on Linux.
    unsafe {
        signal(2, on_signal);
        signal(15, on_signal);
    }
}

/// Bring everything up from `cfg` and run: the engine on its lcore, the workload (if any) on
/// this thread. Returns a JSON report: the workload's result and the final counters.
pub fn run_engine(cfg: &Config) -> Result<Value, String> {
    cfg.validate().map_err(|e| e.to_string())?;
    preflight(cfg).map_err(|e| e.to_string())?;
    let eal = Eal::init(cfg.eal_argv()).map_err(|e| eal_hint(cfg, &e.to_string()))?;
    if cfg.engine.lcores > 1 {
        return run_sharded(cfg, &eal);
    }
    let transport = engine::native_transport(cfg.port.mtu, cfg.endpoint_config())
        .map_err(|e| format!("no OS randomness for the transport: {e}"))?;
    let (device, pool) = crate::backend::open(cfg, &eal, "ferroce", transport.udp_port())?;
    let params = cfg.engine_params().map_err(|e| e.to_string())?;
    let (engine, h) = Engine::on_device(device, pool, transport, params, eal.tsc_hz())
        .map_err(|e| format!("engine: {e}"))?;
    eprintln!(
        "ferroce dataplane: {} on {} ({}), {} {}",
        cfg.net.address,
        engine.io_name(),
        net::fmt_mac(engine.mac()),
        ferroce_dpdk_sys::version(),
        if cfg.eal_argv().iter().any(|a| a == "--no-huge") {
            "no hugepages"
        } else {
            "hugepages"
        }
    );
    install_signal_handlers();
    let timeout = Duration::from_secs_f64(cfg.workload.timeout_s);
    let spec = cfg.workload_spec().ok();
    // A server listens before its engine runs: its first turn takes the listen command
    // before any packet, so an early client's OPEN never finds a listener without streams.
    let settle = Duration::from_secs_f64(cfg.workload.idle_settle_s);
    let server = (cfg.workload.role == "server").then(|| {
        app::ServerApp::new(h.clone(), spec.as_ref().expect("validated"))
            .with_fleet(cfg.workload.connections, settle)
    });
    let lcore = cfg
        .engine
        .lcore
        .or_else(|| eal.worker_lcores().first().copied());
    let job: Box<dyn FnOnce() -> Value> = match lcore {
        Some(l) => {
            let j = eal
                .launch(l, move || engine.run())
                .map_err(|e| format!("config field `engine.lcore`: {e}"))?;
            Box::new(move || j.join())
        }
        None => {
            let t = std::thread::spawn(move || engine.run());
            Box::new(move || t.join().unwrap_or(Value::Null))
        }
    };
    let result: Option<WorkloadResult> = match cfg.workload.role.as_str() {
        "server" => server.map(|s| app::serve(s, &h, timeout)),
        "client" => {
            let peer: Ipv4Addr = cfg
                .workload
                .peer
                .as_deref()
                .and_then(|p| p.parse().ok())
                .expect("validated");
            let spec = spec.expect("validated");
            let keys = app::server_keys(&spec);
            Some(app::run_client_fleet(
                &h,
                &spec,
                peer,
                keys,
                timeout,
                cfg.workload.connections,
                settle + Duration::from_secs(1),
            ))
        }
        "compliance" => Some(crate::compliance_target::run(&h, timeout, || {
            SIGNALLED.load(std::sync::atomic::Ordering::SeqCst)
        })),
        _ => {
            let t0 = Instant::now();
            let limit = cfg.engine.duration_s.map(Duration::from_secs_f64);
            while !SIGNALLED.load(std::sync::atomic::Ordering::SeqCst)
                && limit.is_none_or(|l| t0.elapsed() < l)
                && !h.stopped()
            {
                while h.try_next().is_some() {}
                std::thread::sleep(Duration::from_millis(10));
            }
            None
        }
    };
    // A server lingers a little so its last ACKs reach the client.
    if cfg.workload.role == "server" {
        std::thread::sleep(Duration::from_millis(100));
    }
    h.stop();
    let counters = job();
    let report = json!({
        "workload": result,
        "counters": counters,
    });
    if let Some(p) = &cfg.workload.result_json {
        engine::write_json_atomic(p, &report);
    }
    Ok(report)
}

/// [`run_engine`] with `engine.lcores` > 1: the shards on the first worker lcores, until a
/// signal or `engine.duration_s` (validated: no workload).
fn run_sharded(cfg: &Config, eal: &Eal) -> Result<Value, String> {
    let n = cfg.engine.lcores;
    let workers = eal.worker_lcores();
    if workers.len() < n {
        return Err(format!(
            "config field `engine.lcores`: {n} shards need {n} worker lcores, the EAL has {} \
             (eal.args `--lcores`)",
            workers.len()
        ));
    }
    let (device, pool) = crate::backend::open(
        cfg,
        eal,
        "ferroce",
        ferroce_transport::wire::NATIVE_UDP_PORT,
    )?;
    let params = cfg.engine_params().map_err(|e| e.to_string())?;
    let (engines, h) = engine::sharded(
        device,
        pool,
        n,
        cfg.port.mtu,
        cfg.endpoint_config(),
        params,
        eal.tsc_hz(),
    )
    .map_err(|e| format!("engine: {e}"))?;
    eprintln!(
        "ferroce dataplane: {} on {} ({}), {n} shards on lcores {:?}",
        cfg.net.address,
        engines[0].io_name(),
        net::fmt_mac(engines[0].mac()),
        &workers[..n]
    );
    install_signal_handlers();
    let mut jobs = Vec::new();
    for (e, &l) in engines.into_iter().zip(&workers) {
        let j = eal.launch(l, move || e.run()).map_err(|e| {
            h.stop();
            format!("config field `engine.lcores`: lcore {l}: {e}")
        })?;
        jobs.push(j);
    }
    let t0 = Instant::now();
    let limit = cfg.engine.duration_s.map(Duration::from_secs_f64);
    while !SIGNALLED.load(std::sync::atomic::Ordering::SeqCst)
        && limit.is_none_or(|l| t0.elapsed() < l)
        && !h.stopped()
    {
        for s in h.shards() {
            while s.try_next().is_some() {}
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    h.stop();
    let shards: Vec<Value> = jobs.into_iter().map(|j| j.join()).collect();
    let report = json!({ "workload": null, "counters": shards[0].clone(), "shards": shards });
    if let Some(p) = &cfg.workload.result_json {
        engine::write_json_atomic(p, &report);
    }
    Ok(report)
}

pub(crate) fn probed(eal: &Eal) -> Vec<String> {
    eal.ports().into_iter().filter_map(Port::name_of).collect()
}

fn eal_hint(cfg: &Config, e: &str) -> String {
    let args = cfg.eal_argv();
    let mut s = format!("EAL failed: {e}");
    if !args.iter().any(|a| a == "--no-huge") {
        s.push_str(
            "\n  with hugepages: reserve them (echo 256 > /proc/sys/vm/nr_hugepages) and add \
             --in-memory, or use --no-huge",
        );
    }
    if args.iter().any(|a| a == "--no-huge") && args.iter().any(|a| a == "--in-memory") {
        s.push_str("\n  --no-huge with --in-memory fails on DPDK 22.11: use --no-shconf instead");
    }
    s
}
