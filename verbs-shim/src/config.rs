//! Engine configuration for an application's process, from its environment.
//!
//! | variable | meaning |
//! |---|---|
//! | `FERROCE_CONFIG` | a dataplane TOML file (`ferroce dataplane --config` format); optional |
//! | `FERROCE_IP` | the engine's own IPv4 address (`net.address`), e.g. `198.18.0.11`; required unless the file sets it |
//! | `FERROCE_PMD` | the DPDK port as a vdev (`port.vdev`), e.g. `net_af_packet0,iface=veth0,framecnt=8192`; or `udp`: the kernel UDP backend (`port.backend = "udp"`: sockets bound to `FERROCE_IP`, which must then be the kernel's own address; no DPDK device, hugepages or root; native device only) |
//! | `FERROCE_EAL` | EAL arguments, whitespace-separated (default: no hugepages, no PCI, per-process prefix) |
//! | `FERROCE_LOSS` | injected loss probability on transmit (`fault.tx.loss`), e.g. `0.01` |
//! | `FERROCE_ROCE_TIMEOUT` | RoCEv2 device: local ACK timeout exponent (4.096 µs × 2^t), default 14 |
//! | `FERROCE_ROCE_RETRY` | RoCEv2 device: `forever` (default, rxe's reading of retry_cnt 7) or `ibta` (7 retries, as a NIC: a dead peer ends in IBV_WC_RETRY_EXC_ERR) |
//! | `FERROCE_CM_RESPONSE_TIMEOUT` | RoCEv2 device's CM: the CM response timeout exponent its REQs and SIDR_REQs carry and wait by (4.096 µs × 2^t), 0..=31, default 20 as Linux's rdma_cm |
//! | `FERROCE_CM_RETRIES` | RoCEv2 device's CM: `max_cm_retries` of its REQs and SIDR_REQs, 0..=15, default 15 as Linux's rdma_cm (each wait is 2 × the packet lifetime, 1.07 s, + 4.096 µs × 2^timeout: with both defaults a peer that never answers is UNREACHABLE after 16 × 6.4 s ≈ 100 s; tests set 16 and 1 for ~5 s) |
//! | `FERROCE_DP__A__B=v` | any other field `a.b` of the dataplane configuration |
//! | `FERROCE_VERBS_DEBUG=1` | log the shim's decisions to stderr, and the engines' counters every 2 s |
//! | `FERROCE_APP_PROGRESS=0` | posts and empty `ibv_poll_cq` calls no longer run engine turns on the application's thread (default on; `dataplane/src/engine/shared.rs`) |
//! | `FERROCE_POLL_SLEEP_US`, `FERROCE_POLL_SLEEP_EVERY` | an empty `ibv_poll_cq` whose engine is busy on its own thread sleeps this long (default 20 µs) every this many calls (default 2) |
//!
//! Only `FERROCE_IP` is needed to list and query devices; creating a device's first queue pair
//! starts that device's engine and needs the rest. With both devices in use, the second engine
//! opens a `net_pcap` port on the `FERROCE_PMD` af_packet port's interface (`engines.rs`).

use ferroce_dataplane::config::Config;
use std::net::Ipv4Addr;

pub const ENV_CONFIG: &str = "FERROCE_CONFIG";
pub const ENV_IP: &str = "FERROCE_IP";
pub const ENV_PMD: &str = "FERROCE_PMD";
pub const ENV_EAL: &str = "FERROCE_EAL";
pub const ENV_LOSS: &str = "FERROCE_LOSS";
pub const ENV_ROCE_TIMEOUT: &str = "FERROCE_ROCE_TIMEOUT";
pub const ENV_ROCE_RETRY: &str = "FERROCE_ROCE_RETRY";
pub const ENV_CM_RESPONSE_TIMEOUT: &str = "FERROCE_CM_RESPONSE_TIMEOUT";
pub const ENV_CM_RETRIES: &str = "FERROCE_CM_RETRIES";

/// Whether `FERROCE_VERBS_DEBUG` is set.
pub fn debug() -> bool {
    std::env::var_os("FERROCE_VERBS_DEBUG").is_some_and(|v| v != "0")
}

/// The engine's address as far as the environment names it (for GID queries before the
/// engine runs): `FERROCE_IP`, else `net.address` of `FERROCE_CONFIG`.
pub fn local_ip() -> Option<Ipv4Addr> {
    if let Ok(v) = std::env::var(ENV_IP) {
        return v.trim().parse().ok();
    }
    let path = std::env::var_os(ENV_CONFIG)?;
    let text = std::fs::read_to_string(path).ok()?;
    let cfg = Config::from_toml(&text, "FERROCE_CONFIG").ok()?;
    cfg.net.address.parse().ok()
}

/// Build the dataplane configuration from `vars` (the process environment), with errors
/// that name the variable to set.
pub fn load(vars: &[(String, String)]) -> Result<Config, String> {
    let get = |k: &str| {
        vars.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.trim().to_string())
    };
    let path = get(ENV_CONFIG).filter(|p| !p.is_empty());
    let mut sets = Vec::new();
    if let Some(ip) = get(ENV_IP) {
        if ip.parse::<Ipv4Addr>().is_err() {
            return Err(format!(
                "{ENV_IP}={ip:?} is not an IPv4 address (the engine's own address, e.g. \
                 {ENV_IP}=198.18.0.11)"
            ));
        }
        sets.push(format!("net.address=\"{ip}\""));
    }
    if let Some(pmd) = get(ENV_PMD) {
        if pmd == "udp" {
            sets.push("port.backend=\"udp\"".into());
        } else {
            sets.push(format!("port.vdev=\"{}\"", pmd.replace('"', "")));
        }
    }
    if let Some(eal) = get(ENV_EAL) {
        let args: Vec<String> = eal
            .split_whitespace()
            .map(|a| format!("\"{}\"", a.replace('"', "")))
            .collect();
        sets.push(format!("eal.args=[{}]", args.join(",")));
    }
    if let Some(loss) = get(ENV_LOSS) {
        let l: f64 = loss
            .parse()
            .map_err(|_| format!("{ENV_LOSS}={loss:?} is not a number (e.g. 0.01 for 1 %)"))?;
        sets.push(format!("fault.tx.loss={l}"));
    }
    // Shared-core defaults for an engine living beside a polling application: sleep soon
    // when idle, and briefly (the kernel's packet work needs the CPU too).
    for (k, v) in [
        (
            "FERROCE_DP__ENGINE__IDLE_POLLS_BEFORE_SLEEP",
            "engine.idle_polls_before_sleep=50",
        ),
        (
            "FERROCE_DP__ENGINE__IDLE_SLEEP_US",
            "engine.idle_sleep_us=10",
        ),
    ] {
        if get(k).is_none() {
            sets.insert(0, v.to_string());
        }
    }
    let has_file = path.is_some();
    let cfg = Config::load(
        path.as_deref().map(std::path::Path::new),
        &sets,
        vars.iter().cloned(),
    )
    .map_err(|e| {
        let mut s = format!("ferroce verbs: engine configuration: {e}");
        if e.0.contains("net.address") && get(ENV_IP).is_none() {
            s.push_str(&format!(
                "\n  set {ENV_IP} to the engine's own IPv4 address (not the kernel's address on \
                 the same link), e.g. {ENV_IP}=198.18.0.11"
            ));
        }
        s
    })?;
    if cfg.port.vdev.is_none()
        && cfg.port.device.is_none()
        && cfg.port.backend != "udp"
        && !has_file
    {
        return Err(format!(
            "ferroce verbs: no DPDK port: set {ENV_PMD} (e.g. \
             {ENV_PMD}=net_af_packet0,iface=veth0,framecnt=8192, or {ENV_PMD}=udp for kernel \
             UDP sockets) or {ENV_CONFIG} to a dataplane configuration file"
        ));
    }
    Ok(cfg)
}

/// The RoCEv2 ACK timeout exponent from the environment.
pub fn roce_timeout(vars: &[(String, String)]) -> Result<u8, String> {
    env_u8(vars, ENV_ROCE_TIMEOUT, 14, 31)
}

/// Variable `name` of `vars` as a number 0..=`max`, `default` when unset.
fn env_u8(vars: &[(String, String)], name: &str, default: u8, max: u8) -> Result<u8, String> {
    match vars.iter().find(|(n, _)| n == name) {
        None => Ok(default),
        Some((_, v)) => v
            .trim()
            .parse::<u8>()
            .ok()
            .filter(|t| *t <= max)
            .ok_or_else(|| format!("{name}={v:?}: expected 0..={max}")),
    }
}

/// `(cm_response_timeout, max_cm_retries)` of the RoCEv2 device's CM from the environment
/// (Linux's rdma_cm has them fixed at 20 and 15: `CMA_CM_RESPONSE_TIMEOUT`,
/// `CMA_MAX_CM_RETRIES` in cma.c).
pub fn roce_cm_timers(vars: &[(String, String)]) -> Result<(u8, u8), String> {
    Ok((
        env_u8(vars, ENV_CM_RESPONSE_TIMEOUT, 20, 31)?,
        env_u8(vars, ENV_CM_RETRIES, 15, 15)?,
    ))
}

/// Whether retry_cnt 7 means "forever" (rxe, the default) or seven retries (`ibta`).
pub fn roce_retry_forever(vars: &[(String, String)]) -> Result<bool, String> {
    match vars.iter().find(|(n, _)| n == ENV_ROCE_RETRY) {
        None => Ok(true),
        Some((_, v)) => match v.trim() {
            "forever" => Ok(true),
            "ibta" => Ok(false),
            _ => Err(format!("{ENV_ROCE_RETRY}={v:?}: expected forever or ibta")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn roce_retry_reading_from_the_environment() {
        assert_eq!(roce_retry_forever(&v(&[])), Ok(true));
        assert_eq!(
            roce_retry_forever(&v(&[(ENV_ROCE_RETRY, "forever")])),
            Ok(true)
        );
        assert_eq!(
            roce_retry_forever(&v(&[(ENV_ROCE_RETRY, "ibta")])),
            Ok(false)
        );
        assert!(roce_retry_forever(&v(&[(ENV_ROCE_RETRY, "7")]))
            .unwrap_err()
            .contains(ENV_ROCE_RETRY));
    }

    #[test]
    fn roce_cm_timers_from_the_environment() {
        assert_eq!(roce_cm_timers(&v(&[])), Ok((20, 15)));
        assert_eq!(
            roce_cm_timers(&v(&[
                (ENV_CM_RESPONSE_TIMEOUT, "16"),
                (ENV_CM_RETRIES, "3")
            ])),
            Ok((16, 3))
        );
        for (k, bad) in [
            (ENV_CM_RESPONSE_TIMEOUT, "32"),
            (ENV_CM_RETRIES, "16"),
            (ENV_CM_RETRIES, "-1"),
            (ENV_CM_RESPONSE_TIMEOUT, "x"),
        ] {
            let e = roce_cm_timers(&v(&[(k, bad)])).unwrap_err();
            assert!(e.contains(k), "{e}");
        }
    }

    #[test]
    fn env_builds_the_config_and_names_what_is_missing() {
        let c = load(&v(&[
            (ENV_IP, "198.18.0.11"),
            (ENV_PMD, "net_af_packet0,iface=x,framecnt=8192"),
            (ENV_EAL, "--no-huge --no-pci"),
            (ENV_LOSS, "0.01"),
        ]))
        .unwrap();
        assert_eq!(c.net.address, "198.18.0.11");
        assert_eq!(
            c.port.vdev.as_deref(),
            Some("net_af_packet0,iface=x,framecnt=8192")
        );
        assert_eq!(c.eal.args, vec!["--no-huge", "--no-pci"]);
        assert_eq!(c.fault.tx.loss, 0.01);
        assert_eq!(c.port.backend, "dpdk");
        let u = load(&v(&[(ENV_IP, "198.18.0.1"), (ENV_PMD, "udp")])).unwrap();
        assert_eq!(
            (u.port.backend.as_str(), u.port.vdev.as_deref()),
            ("udp", None)
        );
        let e = load(&v(&[(ENV_PMD, "net_ring0")])).unwrap_err();
        assert!(e.contains(ENV_IP), "{e}");
        let e = load(&v(&[(ENV_IP, "198.18.0.11")])).unwrap_err();
        assert!(e.contains(ENV_PMD), "{e}");
        let e = load(&v(&[(ENV_IP, "1.2.3")])).unwrap_err();
        assert!(e.contains("not an IPv4"), "{e}");
        let e = load(&v(&[
            (ENV_IP, "198.18.0.11"),
            (ENV_PMD, "net_ring0"),
            (ENV_LOSS, "lots"),
        ]))
        .unwrap_err();
        assert!(e.contains(ENV_LOSS), "{e}");
        assert_eq!(roce_timeout(&v(&[(ENV_ROCE_TIMEOUT, "5")])), Ok(5));
        assert!(roce_timeout(&v(&[(ENV_ROCE_TIMEOUT, "40")])).is_err());
    }
}
