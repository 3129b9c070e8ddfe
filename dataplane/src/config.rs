//! The engine's configuration: TOML through serde, overridable by `--set a.b=v` flags and
//! `FERROCE_DP__A__B=v` environment variables (flags win), checked with errors that name the
//! field. `crate::launch` brings an engine up from it; its entry points are re-exported here.

use crate::engine::{self, EngineParams};
use crate::fault::{FaultConfig, FaultStep};
use crate::net;
use ferroce_workload::{OpKind, WorkloadSpec};
use serde::{Deserialize, Serialize};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

pub use crate::launch::{hugepages_free, pmd_dir, preflight, run_engine, vdev_driver};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub eal: EalSection,
    pub port: PortSection,
    pub net: NetSection,
    pub transport: TransportSection,
    pub fault: FaultSection,
    pub engine: EngineSection,
    pub counters: CountersSection,
    pub capture: CaptureSection,
    pub workload: WorkloadSection,
    pub udp: crate::backend::UdpSection,
}

/// EAL arguments, passed to `rte_eal_init` unchanged. Empty: [`default_eal_args`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EalSection {
    pub args: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PortSection {
    /// What carries the frames: "dpdk" (a DPDK port: the fields below) or "udp" (kernel UDP
    /// sockets bound to net.address: no device, no hugepages, no root; settings in [udp]).
    pub backend: String,
    /// A vdev to create: "<driver><n>[,<args>]", e.g.
    /// "net_af_packet0,iface=veth0,framecnt=8192" or "net_tap0,iface=ft0".
    pub vdev: Option<String>,
    /// Or a device EAL probed itself (PCI address, or a `--vdev` in eal.args).
    pub device: Option<String>,
    /// IP MTU of the link (frames up to mtu + 14 bytes).
    pub mtu: u16,
    /// Also set it on the device (rte_eth_dev_set_mtu).
    pub set_mtu: bool,
    pub rx_desc: u16,
    pub tx_desc: u16,
    pub mbufs: u32,
    pub mbuf_cache: u32,
    pub promiscuous: bool,
}

impl Default for PortSection {
    fn default() -> Self {
        PortSection {
            backend: "dpdk".into(),
            vdev: None,
            device: None,
            mtu: 1500,
            set_mtu: false,
            rx_desc: 1024,
            tx_desc: 1024,
            mbufs: 16383,
            mbuf_cache: 256,
            promiscuous: false,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Neighbor {
    pub ip: String,
    pub mac: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetSection {
    /// The engine's own IPv4 address. With net_af_packet/net_tap the kernel sees every
    /// frame too: use an address the kernel does not have (design.md §4).
    pub address: String,
    /// Static neighbours (ARP resolves the others).
    pub neighbors: Vec<Neighbor>,
    pub ttl: u8,
    /// Send ECT(0), so CE marks can be set on the way.
    pub ecn: bool,
    /// Verify nonzero UDP checksums. Default: yes, except on kernel-backed PMDs
    /// (net_af_packet, net_tap, net_af_xdp), where frames from the local kernel carry only
    /// checksum offload's partial sum.
    pub verify_udp_checksum: Option<bool>,
}

impl Default for NetSection {
    fn default() -> Self {
        NetSection {
            address: String::new(),
            neighbors: Vec::new(),
            ttl: 64,
            ecn: true,
            verify_udp_checksum: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransportSection {
    pub seed: u64,
    /// The link's rate (Mbit/s): the receiver's fair share and the initial window use it.
    pub line_rate_mbps: u32,
    pub paths: u8,
    pub initial_rtt_us: u64,
    pub min_rto_us: u64,
    pub max_rto_us: u64,
    pub initial_rto_us: u64,
    pub ack_every: u32,
    pub ack_delay_us: u64,
    /// Pacing batch (spec/congestion.md §2.1): packets released together at most, and the
    /// longest one is held to fill a batch. `pace_burst = 1` paces packet by packet.
    pub pace_burst: u32,
    pub pace_quantum_ns: u64,
    /// Connections accepted at most, in total and from one address (spec/security.md §3.1).
    pub max_accepted: u32,
    pub max_accepted_per_peer: u32,
    /// Tell a lone peer it may start at line rate (spec/transport.md COLD-4). Turn it off
    /// when several engines share one physical link (e.g. one per process on VFs of a NIC).
    pub sole_grant: bool,
}

impl Default for TransportSection {
    fn default() -> Self {
        TransportSection {
            seed: 1,
            line_rate_mbps: 10_000,
            paths: 8,
            initial_rtt_us: 50,
            min_rto_us: 2_000,
            max_rto_us: 200_000,
            initial_rto_us: 5_000,
            ack_every: 4,
            ack_delay_us: 20,
            pace_burst: ferroce_transport::ENGINE_PACE_BURST,
            pace_quantum_ns: ferroce_transport::ENGINE_PACE_QUANTUM_NS,
            max_accepted: 65_536,
            max_accepted_per_peer: 65_536,
            sole_grant: true,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaultSection {
    /// Faults on frames the engine sends.
    pub tx: FaultConfig,
    /// Faults on frames the engine receives.
    pub rx: FaultConfig,
    /// Later settings of both directions, by time since the first frame.
    pub schedule: Vec<FaultStep>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineSection {
    pub burst: u16,
    pub idle_polls_before_sleep: u32,
    pub idle_sleep_us: u64,
    /// Give idle connections' spare queue capacity back this often (0: never).
    pub compact_interval_ms: u64,
    pub queue_depth: usize,
    /// Worker lcore to run the loop on (default: the first worker; a thread if none).
    pub lcore: Option<u32>,
    /// Shards of the engine, one worker lcore each (docs/design.md, "An engine on several
    /// lcores"); 1 (the default) is the single-lcore engine.
    pub lcores: usize,
    pub stop_on_link_down: bool,
    /// Without a workload: run this long (default: until SIGINT/SIGTERM).
    pub duration_s: Option<f64>,
}

impl Default for EngineSection {
    fn default() -> Self {
        EngineSection {
            burst: 32,
            idle_polls_before_sleep: 2000,
            idle_sleep_us: 20,
            compact_interval_ms: 1000,
            queue_depth: 4096,
            lcore: None,
            lcores: 1,
            stop_on_link_down: false,
            duration_s: None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CountersSection {
    /// Write the counters (JSON) here every `interval_ms` and at exit (`ferroce stats` reads it).
    pub json: Option<PathBuf>,
    pub interval_ms: u64,
    /// Connections listed one by one (the busiest); all are summed in `connections_all`.
    pub connections_max: usize,
}

impl Default for CountersSection {
    fn default() -> Self {
        CountersSection {
            json: None,
            interval_ms: 200,
            connections_max: 256,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CaptureSection {
    /// Capture what the engine sends and receives (pcap, ns timestamps).
    pub pcap: Option<PathBuf>,
    pub snaplen: u32,
}

impl Default for CaptureSection {
    fn default() -> Self {
        CaptureSection {
            pcap: None,
            snaplen: 256,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkloadSection {
    /// "none", "server", "client" or "compliance" (the target of `ferroce compliance`,
    /// spec/compliance.md: answers any peer until `timeout_s`).
    pub role: String,
    /// The server's address (client).
    pub peer: Option<String>,
    pub streams: u32,
    pub messages: u32,
    pub sizes: Vec<u32>,
    /// send, send_imm, write, write_imm, read, fetch_add, cmp_swap.
    pub ops: Vec<String>,
    pub depth: u32,
    pub recv_depth: u32,
    pub seed: u64,
    pub timeout_s: f64,
    /// Idle connections beside the workload (client and server must agree): the client
    /// opens them first, READs 4 KiB once on each, holds them idle through the workload and
    /// closes them after it; both sides report the heap per idle connection
    /// (`app::fleet`). 0: none.
    pub connections: u32,
    /// How long after the last idle connection was used each side samples its heap (the
    /// client waits one second longer, so the server samples before the workload's own
    /// connection opens).
    pub idle_settle_s: f64,
    /// Also write the result (JSON) here.
    pub result_json: Option<PathBuf>,
}

impl Default for WorkloadSection {
    fn default() -> Self {
        WorkloadSection {
            role: "none".into(),
            peer: None,
            streams: 2,
            messages: 200,
            sizes: vec![1, 64, 1000, 1408, 4097, 20_000],
            ops: vec![
                "send".into(),
                "send_imm".into(),
                "write".into(),
                "write_imm".into(),
                "read".into(),
                "fetch_add".into(),
                "cmp_swap".into(),
            ],
            depth: 8,
            recv_depth: 16,
            seed: 1,
            timeout_s: 60.0,
            connections: 0,
            idle_settle_s: 2.0,
            result_json: None,
        }
    }
}

/// A configuration error, naming the field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

pub(crate) fn field(name: &str, msg: impl std::fmt::Display) -> ConfigError {
    ConfigError(format!("config field `{name}`: {msg}"))
}

/// EAL arguments used when `eal.args` is empty: no hugepages, no PCI scan, no shared
/// config, a per-process file prefix, two lcores that may run on any CPU (so two processes on
/// a small machine do not pin onto the same core), quiet logs.
pub fn default_eal_args() -> Vec<String> {
    default_eal_args_for(1)
}

/// [`default_eal_args`] with `workers` worker lcores (at least one).
pub fn default_eal_args_for(workers: usize) -> Vec<String> {
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let set = if cpus > 1 {
        format!("0-{}", cpus - 1)
    } else {
        "0".into()
    };
    vec![
        "--no-huge".into(),
        "--no-pci".into(),
        "--no-shconf".into(),
        "-m".into(),
        "256".into(),
        format!("--file-prefix=ferroce-{}", std::process::id()),
        {
            let l: Vec<String> = (0..=workers.max(1))
                .map(|i| format!("{i}@({set})"))
                .collect();
            format!("--lcores={}", l.join(","))
        },
        "--log-level=warning".into(),
    ]
}

fn parse_value(v: &str) -> toml::Value {
    match format!("x = {v}").parse::<toml::Table>() {
        Ok(mut t) => t
            .remove("x")
            .unwrap_or_else(|| toml::Value::String(v.into())),
        Err(_) => toml::Value::String(v.into()),
    }
}

fn set_path(doc: &mut toml::Table, path: &str, v: toml::Value) -> Result<(), ConfigError> {
    let parts: Vec<&str> = path.split('.').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return Err(ConfigError(format!("override `{path}`: empty key")));
    }
    let mut t = doc;
    for p in &parts[..parts.len() - 1] {
        let e = t
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        t = match e {
            toml::Value::Table(t) => t,
            _ => {
                return Err(ConfigError(format!(
                    "override `{path}`: `{p}` is not a table"
                )))
            }
        };
    }
    t.insert(parts[parts.len() - 1].to_string(), v);
    Ok(())
}

impl Config {
    /// Parse TOML text (errors show the line and name the key).
    pub fn from_toml(text: &str, source: &str) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError(format!("{source}: {e}")))
    }

    /// Load `path` (or the defaults), apply environment overrides (`FERROCE_DP__A__B=v`, from
    /// `env`) and then `sets` (`a.b=v`), and validate.
    pub fn load(
        path: Option<&Path>,
        sets: &[String],
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let (text, source) = match path {
            Some(p) => (
                std::fs::read_to_string(p).map_err(|e| {
                    ConfigError(format!("cannot read config file {}: {e}", p.display()))
                })?,
                p.display().to_string(),
            ),
            None => (String::new(), "defaults".to_string()),
        };
        let mut overrides: Vec<(String, String)> = Vec::new();
        for (k, v) in env {
            if let Some(rest) = k.strip_prefix("FERROCE_DP__") {
                overrides.push((rest.to_lowercase().replace("__", "."), v));
            }
        }
        for s in sets {
            let Some((k, v)) = s.split_once('=') else {
                return Err(ConfigError(format!(
                    "override `{s}`: expected KEY=VALUE, e.g. fault.tx.loss=0.01"
                )));
            };
            overrides.push((k.trim().to_string(), v.trim().to_string()));
        }
        let cfg = if overrides.is_empty() {
            Config::from_toml(&text, &source)?
        } else {
            let mut doc: toml::Table = text
                .parse()
                .map_err(|e| ConfigError(format!("{source}: {e}")))?;
            let mut names = Vec::new();
            for (k, v) in &overrides {
                set_path(&mut doc, k, parse_value(v))?;
                names.push(k.clone());
            }
            let merged = toml::to_string(&doc)
                .map_err(|e| ConfigError(format!("{source} with overrides: {e}")))?;
            Config::from_toml(
                &merged,
                &format!("{source} with overrides {}", names.join(", ")),
            )?
        };
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn address(&self) -> Result<Ipv4Addr, ConfigError> {
        if self.net.address.is_empty() {
            return Err(field(
                "net.address",
                "required: the engine's own IPv4 address (not the kernel's address on the \
                 same link), e.g. address = \"198.18.1.11\"",
            ));
        }
        let a: Ipv4Addr = self.net.address.parse().map_err(|_| {
            field(
                "net.address",
                format!("{:?} is not an IPv4 address", self.net.address),
            )
        })?;
        if a.is_unspecified() || a.is_broadcast() || a.is_multicast() {
            return Err(field(
                "net.address",
                format!("{a} cannot be a host's address"),
            ));
        }
        Ok(a)
    }

    pub fn neighbors(&self) -> Result<Vec<(Ipv4Addr, [u8; 6])>, ConfigError> {
        self.net
            .neighbors
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let ip = n.ip.parse().map_err(|_| {
                    field(
                        &format!("net.neighbors[{i}].ip"),
                        format!("{:?} is not an IPv4 address", n.ip),
                    )
                })?;
                let mac = net::parse_mac(&n.mac).ok_or_else(|| {
                    field(
                        &format!("net.neighbors[{i}].mac"),
                        format!("{:?} is not a MAC address (aa:bb:cc:dd:ee:ff)", n.mac),
                    )
                })?;
                Ok((ip, mac))
            })
            .collect()
    }

    /// The workload, if a role is set.
    pub fn workload_spec(&self) -> Result<WorkloadSpec, ConfigError> {
        let w = &self.workload;
        let mut ops = Vec::new();
        for (i, o) in w.ops.iter().enumerate() {
            ops.push(match o.as_str() {
                "send" => OpKind::Send,
                "send_imm" => OpKind::SendImm,
                "write" => OpKind::Write,
                "write_imm" => OpKind::WriteImm,
                "read" => OpKind::Read,
                "fetch_add" => OpKind::FetchAdd,
                "cmp_swap" => OpKind::CmpSwap,
                _ => {
                    return Err(field(
                        &format!("workload.ops[{i}]"),
                        format!(
                            "unknown operation {o:?} (send, send_imm, write, write_imm, read, \
                             fetch_add, cmp_swap)"
                        ),
                    ))
                }
            });
        }
        if ops.is_empty() {
            return Err(field("workload.ops", "needs at least one operation"));
        }
        if w.sizes.is_empty() || w.sizes.contains(&0) {
            return Err(field("workload.sizes", "needs sizes > 0"));
        }
        if w.streams == 0 || w.messages == 0 || w.depth == 0 || w.recv_depth == 0 {
            return Err(field(
                "workload",
                "streams, messages, depth and recv_depth must all be > 0",
            ));
        }
        Ok(WorkloadSpec {
            streams: w.streams,
            messages: w.messages,
            sizes: w.sizes.clone(),
            ops,
            depth: w.depth,
            recv_depth: w.recv_depth,
            seed: w.seed,
            ..Default::default()
        })
    }

    /// Semantic checks beyond types.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.address()?;
        self.neighbors()?;
        let p = &self.port;
        crate::backend::validate(self)?;
        if !(576..=9600).contains(&p.mtu) {
            return Err(field(
                "port.mtu",
                format!("{} is outside 576..=9600", p.mtu),
            ));
        }
        if p.vdev.is_some() && p.device.is_some() {
            return Err(field(
                "port.vdev",
                "set either port.vdev or port.device, not both",
            ));
        }
        if let Some(v) = &p.vdev {
            if v.is_empty() || v.starts_with(',') {
                return Err(field(
                    "port.vdev",
                    "empty device name (e.g. \"net_af_packet0,iface=veth0\")",
                ));
            }
        }
        if p.mbufs < 512 {
            return Err(field(
                "port.mbufs",
                format!("{} is too few (at least 512)", p.mbufs),
            ));
        }
        if self.engine.burst == 0 || self.engine.burst > 512 {
            return Err(field("engine.burst", "must be in 1..=512"));
        }
        if self.engine.lcores == 0 || self.engine.lcores > 64 {
            return Err(field("engine.lcores", "must be in 1..=64"));
        }
        if self.engine.lcores > 1 {
            if self.port.backend != "dpdk" {
                return Err(field(
                    "engine.lcores",
                    "more than one lcore needs port.backend = \"dpdk\"",
                ));
            }
            if self.workload.role != "none" || self.engine.lcore.is_some() {
                return Err(field(
                    "engine.lcores",
                    "more than one lcore runs the engine alone (workload.role = \"none\", \
                     no engine.lcore): the workload apps drive one connection on one shard",
                ));
            }
        }
        if self.engine.queue_depth == 0 {
            return Err(field("engine.queue_depth", "must be > 0"));
        }
        if self.transport.paths == 0 {
            return Err(field("transport.paths", "must be > 0"));
        }
        if self.transport.line_rate_mbps == 0 {
            return Err(field("transport.line_rate_mbps", "must be > 0"));
        }
        self.fault.tx.validate("fault.tx").map_err(ConfigError)?;
        self.fault.rx.validate("fault.rx").map_err(ConfigError)?;
        crate::fault::validate_schedule(&self.fault.schedule).map_err(ConfigError)?;
        match self.workload.role.as_str() {
            "none" | "compliance" => {}
            "server" => {
                self.workload_spec()?;
            }
            "client" => {
                self.workload_spec()?;
                let Some(peer) = &self.workload.peer else {
                    return Err(field(
                        "workload.peer",
                        "required for role = \"client\" (the server's address)",
                    ));
                };
                peer.parse::<Ipv4Addr>().map_err(|_| {
                    field("workload.peer", format!("{peer:?} is not an IPv4 address"))
                })?;
            }
            r => {
                return Err(field(
                    "workload.role",
                    format!("{r:?} is not one of \"none\", \"server\", \"client\", \"compliance\""),
                ))
            }
        }
        if self.workload.timeout_s.is_nan() || self.workload.timeout_s <= 0.0 {
            return Err(field("workload.timeout_s", "must be > 0"));
        }
        let w = &self.workload;
        if w.connections > 0 {
            if !matches!(w.role.as_str(), "client" | "server") {
                return Err(field(
                    "workload.connections",
                    "idle connections need role \"client\" or \"server\"",
                ));
            }
            if !(w.idle_settle_s.is_finite() && w.idle_settle_s > 0.0) {
                return Err(field("workload.idle_settle_s", "must be > 0"));
            }
            if w.role == "server" && w.connections >= self.transport.max_accepted_per_peer {
                return Err(field(
                    "workload.connections",
                    format!(
                        "{} idle connections and the workload's need more than \
                         transport.max_accepted_per_peer = {}",
                        w.connections, self.transport.max_accepted_per_peer
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The EAL arguments to use (program name first).
    pub fn eal_argv(&self) -> Vec<String> {
        let mut v = vec!["ferroce".to_string()];
        if self.eal.args.is_empty() {
            v.extend(default_eal_args_for(self.engine.lcores));
        } else {
            v.extend(self.eal.args.iter().cloned());
        }
        v
    }

    pub fn engine_params(&self) -> Result<EngineParams, ConfigError> {
        Ok(EngineParams {
            ip: self.address()?,
            mtu: self.port.mtu,
            burst: self.engine.burst,
            ttl: self.net.ttl,
            ecn: self.net.ecn,
            neighbors: self.neighbors()?,
            fault_tx: self.fault.tx.clone(),
            fault_rx: self.fault.rx.clone(),
            fault_schedule: self.fault.schedule.clone(),
            seed: self.transport.seed,
            pcap: self.capture.pcap.clone(),
            snaplen: self.capture.snaplen,
            counters_json: self.counters.json.clone(),
            counters_interval_ms: self.counters.interval_ms,
            counters_conns_max: self.counters.connections_max,
            idle_polls_before_sleep: self.engine.idle_polls_before_sleep,
            idle_sleep_us: self.engine.idle_sleep_us,
            compact_interval_ms: self.engine.compact_interval_ms,
            queue_depth: self.engine.queue_depth,
            stop_on_link_down: self.engine.stop_on_link_down,
            verify_udp_checksum: self.net.verify_udp_checksum.unwrap_or_else(|| {
                let drv = self
                    .port
                    .vdev
                    .as_deref()
                    .map(|v| vdev_driver(v.split(',').next().unwrap_or("")));
                !matches!(
                    drv,
                    Some("net_af_packet" | "eth_af_packet" | "net_tap" | "net_af_xdp")
                )
            }),
        })
    }

    pub fn endpoint_config(&self) -> ferroce_transport::EndpointConfig {
        let t = &self.transport;
        let mut c = ferroce_transport::EndpointConfig {
            line_rate_mbps: t.line_rate_mbps,
            seed: t.seed,
            max_accepted: t.max_accepted,
            max_accepted_per_peer: t.max_accepted_per_peer,
            sole_grant: t.sole_grant,
            ..Default::default()
        };
        c.conn.paths = t.paths;
        c.conn.initial_rtt_ns = t.initial_rtt_us * 1000;
        c.conn.min_rto_ns = t.min_rto_us * 1000;
        c.conn.max_rto_ns = t.max_rto_us * 1000;
        c.conn.initial_rto_ns = t.initial_rto_us * 1000;
        c.conn.ack_every = t.ack_every;
        c.conn.ack_delay_ns = t.ack_delay_us * 1000;
        c.conn.pace_burst = t.pace_burst.max(1);
        // Not 0: that would read as "the core's default" and get the engine's batch.
        c.conn.pace_quantum_ns = t.pace_quantum_ns.max(1);
        c.conn.mtu = engine::payload_mtu(self.port.mtu);
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> String {
        "[net]\naddress = \"198.18.1.11\"\n[port]\nvdev = \"net_ring0\"\n".to_string()
    }

    #[test]
    fn sole_grant_reaches_the_endpoint_and_can_be_turned_off() {
        let on = Config::from_toml(&base(), "x.toml").unwrap();
        assert!(on.endpoint_config().sole_grant);
        let off =
            Config::from_toml(&(base() + "[transport]\nsole_grant = false\n"), "x.toml").unwrap();
        assert!(!off.endpoint_config().sole_grant);
    }

    #[test]
    fn defaults_and_overrides() {
        let dir = std::env::temp_dir().join(format!("ferroce-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("a.toml");
        std::fs::write(&p, base()).unwrap();
        let c = Config::load(Some(&p), &[], []).unwrap();
        assert_eq!(c.port.mtu, 1500);
        let c = Config::load(
            Some(&p),
            &["fault.tx.loss=0.01".into(), "port.mtu=9000".into()],
            [(
                "FERROCE_DP__FAULT__RX__REORDER".to_string(),
                "0.5".to_string(),
            )],
        )
        .unwrap();
        assert_eq!(c.fault.tx.loss, 0.01);
        assert_eq!(c.fault.rx.reorder, 0.5);
        assert_eq!(c.port.mtu, 9000);
        // Flags win over the environment.
        let c = Config::load(
            Some(&p),
            &["port.mtu=1400".into()],
            [("FERROCE_DP__PORT__MTU".to_string(), "9000".to_string())],
        )
        .unwrap();
        assert_eq!(c.port.mtu, 1400);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn the_backend_is_checked() {
        let c = Config::from_toml(
            "[net]\naddress = \"198.18.1.11\"\n[port]\nbackend = \"udp\"\n",
            "t",
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.udp.max_sockets, 1024);
        let bad = |t: &str| {
            Config::from_toml(t, "t")
                .and_then(|c| c.validate().map(|_| c))
                .unwrap_err()
                .to_string()
        };
        let e = bad("[net]\naddress = \"198.18.1.11\"\n[port]\nbackend = \"xdp\"\n");
        assert!(e.contains("port.backend") && e.contains("\"udp\""), "{e}");
        let e = bad(&format!("{}backend = \"udp\"\n", base()));
        assert!(e.contains("port.backend") && e.contains("port.vdev"), "{e}");
        let e = bad(
            "[net]\naddress = \"198.18.1.11\"\n[port]\nbackend = \"udp\"\n[udp]\nmax_sockets = 70000\n",
        );
        assert!(e.contains("udp.max_sockets"), "{e}");
    }

    #[test]
    fn errors_name_the_field() {
        let e = Config::from_toml(&(base() + "[fault.tx]\nlos = 0.1\n"), "x.toml").unwrap_err();
        assert!(e.0.contains("los"), "{e}");
        let e =
            Config::from_toml(&(base() + "[engine]\nburst = \"many\"\n"), "x.toml").unwrap_err();
        assert!(e.0.contains("burst"), "{e}");
        let c = Config::from_toml(&base().replace("198.18.1.11", "198.18.1.300"), "x").unwrap();
        assert!(c.validate().unwrap_err().0.contains("net.address"));
        let c = Config::from_toml(&(base() + "[fault.rx]\nloss = 2.0\n"), "x").unwrap();
        assert!(c.validate().unwrap_err().0.contains("fault.rx.loss"));
        let c = Config::from_toml(&(base() + "[workload]\nrole = \"client\"\n"), "x").unwrap();
        assert!(c.validate().unwrap_err().0.contains("workload.peer"));
        let c = Config::from_toml(
            &(base() + "[workload]\nrole = \"server\"\nops = [\"jump\"]\n"),
            "x",
        )
        .unwrap();
        assert!(c.validate().unwrap_err().0.contains("workload.ops[0]"));
        let c = Config::from_toml(&(base() + "[workload]\nrole = \"compliance\"\n"), "x").unwrap();
        assert!(
            c.validate().is_ok(),
            "a compliance target needs no peer nor ops"
        );
        let c = Config::from_toml(&(base() + "[workload]\nrole = \"judge\"\n"), "x").unwrap();
        assert!(c.validate().unwrap_err().0.contains("\"compliance\""));
        let e = Config::load(None, &[], []).unwrap_err();
        assert!(e.0.contains("net.address"), "{e}");
        // Idle connections need a workload side, a settle time and room at the server.
        let c = Config::from_toml(&(base() + "[workload]\nconnections = 10\n"), "x").unwrap();
        assert!(c.validate().unwrap_err().0.contains("workload.connections"));
        let c = Config::from_toml(
            &(base() + "[workload]\nrole = \"server\"\nconnections = 10\nidle_settle_s = 0\n"),
            "x",
        )
        .unwrap();
        assert!(c
            .validate()
            .unwrap_err()
            .0
            .contains("workload.idle_settle_s"));
        let c = Config::from_toml(
            &(base()
                + "[transport]\nmax_accepted_per_peer = 10\n[workload]\nrole = \"server\"\n\
                   connections = 10\n"),
            "x",
        )
        .unwrap();
        assert!(c
            .validate()
            .unwrap_err()
            .0
            .contains("max_accepted_per_peer"));
        let c = Config::from_toml(
            &(base() + "[workload]\nrole = \"server\"\nconnections = 4000\n"),
            "x",
        )
        .unwrap();
        assert!(c.validate().is_ok());
    }

    #[test]
    fn lcores_are_checked_and_get_workers() {
        let c = Config::from_toml(&(base() + "[engine]\nlcores = 2\n"), "x").unwrap();
        c.validate().unwrap();
        let lc = |c: &Config| {
            c.eal_argv()
                .into_iter()
                .find(|a| a.starts_with("--lcores="))
                .unwrap()
        };
        assert_eq!(
            lc(&c).matches('@').count(),
            3,
            "main + 2 workers: {}",
            lc(&c)
        );
        let one = Config::from_toml(&base(), "x").unwrap();
        assert_eq!(lc(&one).matches('@').count(), 2, "{}", lc(&one));
        for bad in [
            "[engine]\nlcores = 0\n",
            "[engine]\nlcores = 2\n[workload]\nrole = \"server\"\n",
            "[engine]\nlcores = 2\nlcore = 1\n",
        ] {
            let c = Config::from_toml(&(base() + bad), "x").unwrap();
            let e = c.validate().unwrap_err();
            assert!(e.0.contains("engine.lcores"), "{bad}: {e}");
        }
    }

    #[test]
    fn preflight_reports_missing_pmd_and_iface() {
        let mut c = Config::from_toml(&base(), "x").unwrap();
        c.port.vdev = Some("net_nosuchpmd0".into());
        c.eal.args = vec!["--no-huge".into()];
        let e = preflight(&c).unwrap_err();
        assert!(e.0.contains("net_nosuchpmd"), "{e}");
        c.port.vdev = Some("net_af_packet0,iface=ferroce-nope0".into());
        if pmd_dir().is_some() {
            let e = preflight(&c).unwrap_err();
            assert!(e.0.contains("ferroce-nope0"), "{e}");
        }
        c.eal.args = vec!["--in-memory".into()];
        c.port.vdev = None;
        if hugepages_free() == Some(0) {
            assert!(preflight(&c).unwrap_err().0.contains("nr_hugepages"));
        }
    }
}
