//! Command-line entry points, so any front end (the `ferroce` program, `ferroce-dp`) can
//! wire them: [`main_dataplane`] (`ferroce dataplane ...`) and [`main_bench`]
//! (`ferroce bench dataplane ...`). Both take the arguments after the subcommand and return
//! the process exit code.

use crate::config::{default_eal_args_for, Config};
use std::io::Write as _;
use std::path::PathBuf;

/// The EAL arguments `run` uses: DPDK's start-up chatter (EAL, TELEMETRY lines) stays out of
/// the way unless asked for. An `eal.args` with its own `--log-level` is left as it is.
fn eal_args_for(cfg: &Config, dpdk_log: bool) -> Vec<String> {
    let mut args = if cfg.eal.args.is_empty() {
        default_eal_args_for(cfg.engine.lcores)
    } else {
        cfg.eal.args.clone()
    };
    let level = if dpdk_log { "info" } else { "error" };
    let own = !cfg.eal.args.is_empty() && args.iter().any(|a| a.starts_with("--log-level"));
    if !own {
        args.retain(|a| !a.starts_with("--log-level"));
        args.push(format!("--log-level={level}"));
    }
    args
}

pub const DATAPLANE_USAGE: &str = "\
usage: ferroce dataplane [run] [--config FILE] [--set KEY=VALUE]... [--json] [-v|--dpdk-log]
       ferroce dataplane print-config
       ferroce dataplane stats FILE

  run            bring up EAL, the port and the engine from the TOML configuration and run it
                 (with [workload] role = \"server\" or \"client\": a verified transfer); prints
                 a short summary (what moved, verified bytes, goodput, latency, resends, SACK
                 holes, drops by cause) on stdout
  --json         print the full JSON report instead (workload result and every counter), one
                 line on stdout
  -v, --dpdk-log show DPDK's own start-up log (EAL lines; with the default eal.args its
                 level is raised to info); without it DPDK logs errors only, unless eal.args
                 sets its own --log-level
  --config FILE  TOML configuration (see print-config); fields can also be set with
                 FERROCE_DP__SECTION__KEY=VALUE in the environment (flags win)
  --set KEY=VAL  override one field, e.g. --set fault.tx.loss=0.01 --set net.address=198.18.1.11
  print-config   print a commented example configuration
  stats FILE     print the counters an engine writes to [counters] json = FILE";

pub const EXAMPLE_CONFIG: &str = r#"# ferroce dataplane configuration (every field optional except net.address)
[eal]
# Passed to rte_eal_init unchanged. Empty: --no-huge --no-pci --no-shconf -m 256
# --file-prefix=ferroce-<pid> --lcores=0@(all cpus),1@(all cpus) --log-level=warning
# With hugepages: echo 256 > /proc/sys/vm/nr_hugepages, then e.g.
# args = ["--in-memory", "--no-pci", "--lcores=0@(0-1),1@(0-1)"]
args = []

[port]
vdev = "net_af_packet0,iface=veth0,framecnt=8192"   # or device = "0000:01:00.0"
# Or no DPDK device: kernel UDP sockets bound to net.address (then the kernel's own
# address), no hugepages, no root; native protocol only:
# backend = "udp"             # and, optional: [udp] max_sockets = 1024, rcvbuf, sndbuf
mtu = 1500
mbufs = 16383

[net]
address = "198.18.1.11"      # the engine's own address, not the kernel's
# neighbors = [{ ip = "198.18.1.12", mac = "02:00:00:00:00:02" }]

[transport]
line_rate_mbps = 10000
min_rto_us = 2000
pace_burst = 16              # paced packets released together (1: one by one)
pace_quantum_ns = 2000       # none held longer than this to fill a batch

[fault.tx]                   # also [fault.rx]
loss = 0.0                   # 0.01 = 1 %
reorder = 0.0
# burst_enter = 0.001, burst_exit = 0.2, duplicate, corrupt, ecn_mark, seed

# [[fault.schedule]]         # later settings of both directions (a soak's changing faults)
# at_s = 30.0                # seconds after the first frame
# tx = { loss = 0.02 }
# rx = {}

[engine]
burst = 32
idle_sleep_us = 20           # 0 with idle_polls_before_sleep = 0: pure polling
compact_interval_ms = 1000   # idle connections give spare capacity back (0: never)

[counters]
# json = "/tmp/ferroce-counters.json"
interval_ms = 200

[capture]
# pcap = "/tmp/ferroce.pcap"
snaplen = 256

[workload]
role = "none"                # "server" or "client" (then peer = "198.18.1.12"), or
                             # "compliance" (a target for `ferroce compliance`)
streams = 2
messages = 200
sizes = [1, 64, 1000, 1408, 4097, 20000]
timeout_s = 60
"#;

/// `ferroce dataplane ...`: returns the exit code.
pub fn main_dataplane(args: &[String]) -> i32 {
    let mut it = args.iter().peekable();
    let mut cmd = "run".to_string();
    if let Some(a) = it.peek() {
        if !a.starts_with('-') {
            cmd = it.next().cloned().unwrap_or_default();
        }
    }
    match cmd.as_str() {
        "print-config" => {
            print!("{EXAMPLE_CONFIG}");
            0
        }
        "stats" => {
            let Some(f) = it.next() else {
                eprintln!("{DATAPLANE_USAGE}");
                return 2;
            };
            match std::fs::read_to_string(f) {
                Ok(s) => {
                    print!("{}", render_stats(&s));
                    0
                }
                Err(e) => {
                    eprintln!("ferroce dataplane stats: cannot read {f}: {e}");
                    1
                }
            }
        }
        "run" => {
            let mut config: Option<PathBuf> = None;
            let mut sets = Vec::new();
            let (mut json, mut dpdk_log) = (false, false);
            while let Some(a) = it.next() {
                match a.as_str() {
                    "--config" | "-c" => config = it.next().map(PathBuf::from),
                    "--set" => {
                        if let Some(v) = it.next() {
                            sets.push(v.clone())
                        }
                    }
                    "--json" => json = true,
                    "-v" | "--verbose" | "--dpdk-log" => dpdk_log = true,
                    "-h" | "--help" => {
                        // Not println!: a closed pipe (`| head`) is no reason to panic.
                        let _ = writeln!(std::io::stdout(), "{DATAPLANE_USAGE}");
                        return 0;
                    }
                    s if s.starts_with("--set=") => sets.push(s["--set=".len()..].to_string()),
                    s => {
                        eprintln!("ferroce dataplane: unknown argument {s:?}\n{DATAPLANE_USAGE}");
                        return 2;
                    }
                }
            }
            let mut cfg = match Config::load(config.as_deref(), &sets, std::env::vars()) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("ferroce dataplane: {e}");
                    return 2;
                }
            };
            cfg.eal.args = eal_args_for(&cfg, dpdk_log);
            match crate::config::run_engine(&cfg) {
                Ok(report) => {
                    if json {
                        println!(
                            "{}",
                            serde_json::to_string(&report).unwrap_or_else(|_| "{}".into())
                        );
                    } else {
                        print!("{}", crate::summary::render(&cfg, &report));
                    }
                    let ok = report["workload"].is_null()
                        || report["workload"]["ok"].as_bool() == Some(true);
                    if ok {
                        0
                    } else {
                        1
                    }
                }
                Err(e) => {
                    eprintln!("ferroce dataplane: {e}");
                    1
                }
            }
        }
        "-h" | "--help" | "help" => {
            // Not println!: a closed pipe (`| head`) is no reason to panic.
            let _ = writeln!(std::io::stdout(), "{DATAPLANE_USAGE}");
            0
        }
        c => {
            eprintln!("ferroce dataplane: unknown command {c:?}\n{DATAPLANE_USAGE}");
            2
        }
    }
}

/// A readable table of a counters JSON file.
pub fn render_stats(json: &str) -> String {
    let v: serde_json::Value = match serde_json::from_str(json) {
        Ok(v) => v,
        Err(e) => return format!("not a counters file: {e}\n"),
    };
    let mut out = String::new();
    fn walk(out: &mut String, prefix: &str, v: &serde_json::Value) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(out, &p, x);
                }
            }
            serde_json::Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    walk(out, &format!("{prefix}[{i}]"), x);
                }
            }
            serde_json::Value::Number(n) if n.as_u64() == Some(0) => {}
            x => out.push_str(&format!("{prefix:<48} {x}\n")),
        }
    }
    walk(&mut out, "", &v);
    out
}

/// `ferroce bench dataplane ...`: returns the exit code.
pub fn main_bench(args: &[String]) -> i32 {
    crate::bench::main(args)
}

/// Print the counters an engine publishes (for `ferroce stats`).
pub fn print_stats_file(path: &std::path::Path) -> std::io::Result<()> {
    let s = std::fs::read_to_string(path)?;
    print!("{}", render_stats(&s));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(eal: &[&str]) -> Config {
        let mut c = Config::from_toml(
            "[net]\naddress = \"198.18.1.11\"\n[port]\nvdev = \"net_ring0\"\n",
            "x.toml",
        )
        .unwrap();
        c.eal.args = eal.iter().map(|s| s.to_string()).collect();
        c
    }

    #[test]
    fn dpdk_start_up_log_is_quiet_unless_asked_and_an_own_level_is_kept() {
        let level = |v: &[String]| -> Vec<String> {
            v.iter()
                .filter(|a| a.starts_with("--log-level"))
                .cloned()
                .collect()
        };
        // Default arguments: errors only, or info with -v; the rest unchanged.
        let quiet = eal_args_for(&cfg(&[]), false);
        assert_eq!(level(&quiet), vec!["--log-level=error"]);
        assert!(quiet.iter().any(|a| a == "--no-huge"));
        assert_eq!(
            level(&eal_args_for(&cfg(&[]), true)),
            vec!["--log-level=info"]
        );
        // The user's arguments without a level get one; with one, they are kept as they are.
        let own = eal_args_for(&cfg(&["--in-memory"]), false);
        assert_eq!(own, vec!["--in-memory", "--log-level=error"]);
        let own = eal_args_for(&cfg(&["--in-memory", "--log-level=debug"]), false);
        assert_eq!(own, vec!["--in-memory", "--log-level=debug"]);
    }
}
