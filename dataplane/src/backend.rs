//! The device an engine runs on, chosen by `port.backend`: a DPDK port ("dpdk", the
//! `[port]` fields) or kernel UDP sockets ("udp", [`crate::udp`], the `[udp]` fields).
//! Both give the engine a [`PacketIo`] and the mempool its frames live in.

use crate::config::{Config, ConfigError};
use crate::io::{DpdkIo, PacketIo};
use crate::udp::{SockBufs, UdpIo, UdpParams};
use ferroce_dpdk_sys::{Eal, Mempool, Port, PortConfig};
use serde::{Deserialize, Serialize};

/// Settings of the kernel UDP backend (`port.backend = "udp"`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UdpSection {
    /// Source-port sockets (one per path entropy in use) kept open at most; the oldest is
    /// closed when a new one is needed. 0: every datagram leaves from the well-known port
    /// (no entropy in the source port).
    pub max_sockets: usize,
    /// SO_RCVBUF of the receiving socket (bytes; 0: the system default, which
    /// net.core.rmem_max caps for non-root users).
    pub rcvbuf: u32,
    /// SO_SNDBUF of each socket (bytes; 0: the system default).
    pub sndbuf: u32,
}

impl Default for UdpSection {
    fn default() -> Self {
        UdpSection {
            max_sockets: 1024,
            rcvbuf: 4 << 20,
            sndbuf: 0,
        }
    }
}

/// Checks of `port.backend` and `[udp]`.
pub fn validate(cfg: &Config) -> Result<(), ConfigError> {
    match cfg.port.backend.as_str() {
        "dpdk" => Ok(()),
        "udp" => {
            if cfg.port.vdev.is_some() || cfg.port.device.is_some() {
                return Err(ConfigError(
                    "config field `port.backend`: \"udp\" runs on kernel sockets; remove \
                     port.vdev / port.device (they name a DPDK port)"
                        .into(),
                ));
            }
            if cfg.udp.max_sockets > 65_536 {
                return Err(ConfigError(
                    "config field `udp.max_sockets`: at most 65536".into(),
                ));
            }
            Ok(())
        }
        b => Err(ConfigError(format!(
            "config field `port.backend`: {b:?} is not one of \"dpdk\", \"udp\""
        ))),
    }
}

/// The mempool for an engine's frames: room for an MTU frame and the transport's overhead.
pub fn pool(cfg: &Config, eal: &Eal, name: &str) -> Result<Mempool, String> {
    let data_room = (cfg.port.mtu as u32 + 14 + 64).max(2048) + Mempool::headroom();
    Mempool::new(
        eal,
        name,
        cfg.port.mbufs,
        cfg.port.mbuf_cache,
        data_room.min(u16::MAX as u32) as u16,
    )
    .map_err(|e| format!("{e} (more memory: -m in eal.args, or fewer port.mbufs)"))
}

/// The kernel UDP backend on `cfg`'s address, receiving on `udp_port`.
pub fn open_udp(
    cfg: &Config,
    eal: &Eal,
    pool_name: &str,
    udp_port: u16,
) -> Result<(Box<dyn PacketIo>, Mempool), String> {
    let addr = cfg.address().map_err(|e| e.to_string())?;
    let pool = pool(cfg, eal, pool_name)?;
    let io = UdpIo::new(
        UdpParams {
            addr,
            port: udp_port,
            max_sockets: cfg.udp.max_sockets,
            bufs: SockBufs {
                rcvbuf: cfg.udp.rcvbuf,
                sndbuf: cfg.udp.sndbuf,
            },
        },
        pool.clone(),
    )
    .map_err(|e| e.to_string())?;
    Ok((Box::new(io), pool))
}

/// Open `cfg`'s device: the DPDK port it names (started), or the UDP backend.
pub fn open(
    cfg: &Config,
    eal: &Eal,
    pool_name: &str,
    udp_port: u16,
) -> Result<(Box<dyn PacketIo>, Mempool), String> {
    if cfg.port.backend == "udp" {
        return open_udp(cfg, eal, pool_name, udp_port);
    }
    let port_id = match (&cfg.port.vdev, &cfg.port.device) {
        (Some(v), _) => {
            let (name, args) = v.split_once(',').unwrap_or((v.as_str(), ""));
            eal.vdev(name, args)
                .map_err(|e| format!("config field `port.vdev` ({v}): {e}"))?
        }
        (None, Some(d)) => Port::id_by_name(d).map_err(|e| {
            format!(
                "config field `port.device`: {e} (probed: {:?})",
                crate::launch::probed(eal)
            )
        })?,
        (None, None) => {
            let ports = eal.ports();
            match ports.as_slice() {
                [p] => *p,
                [] => {
                    return Err("config field `port.vdev`: no port: set port.vdev (e.g. \
                                \"net_af_packet0,iface=veth0,framecnt=8192\") or probe one \
                                with eal.args, or use port.backend = \"udp\""
                        .into())
                }
                _ => {
                    return Err(format!(
                        "config field `port.device`: EAL probed several ports ({:?}); name one",
                        crate::launch::probed(eal)
                    ))
                }
            }
        }
    };
    let pool = pool(cfg, eal, &format!("{pool_name}_{port_id}"))?;
    let port = start_port(cfg, eal, port_id, &pool)?;
    Ok((Box::new(DpdkIo::new(port)), pool))
}

/// Start DPDK port `port_id` with `cfg`'s queue sizes and MTU.
pub fn start_port(cfg: &Config, eal: &Eal, port_id: u16, pool: &Mempool) -> Result<Port, String> {
    Port::start(
        eal,
        port_id,
        pool,
        &PortConfig {
            rx_desc: cfg.port.rx_desc,
            tx_desc: cfg.port.tx_desc,
            mtu: cfg.port.set_mtu.then_some(cfg.port.mtu),
            promiscuous: cfg.port.promiscuous,
        },
    )
    .map_err(|e| e.to_string())
}
