//! Both devices in one process. Each device mode has its own engine (native over UDP 4792,
//! RoCEv2 over UDP 4791: different transports, connection maps and QP numbering), started by
//! the device's first QP. They share what a process has once: EAL, and the link.
//!
//! The link: the engine that starts first takes the configured DPDK port. The second needs a
//! port of its own on the same link, which the shim can only open itself beside an af_packet
//! port: a `net_pcap` vdev on the same interface, same MAC and address ([`second_vdev`]).
//! Each engine sees every frame and keeps its own UDP port's (the other's are counted as
//! `udp_port` drops); both answer ARP for the address, alike. Any other port (a PCI NIC, a
//! ring) serves one device per process, and the second device's QPs fail with an error that
//! says so.
//!
//! UCX and libfabric open every device they list, so a process that uses ferroce0_rocev2
//! has usually created QPs on ferroce0 first.

use crate::state::Mode;
use ferroce_dataplane::config::Config;
use ferroce_dpdk_sys::{Eal, Port};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

static EAL: OnceLock<Result<Eal, String>> = OnceLock::new();
static LCORES_TAKEN: AtomicUsize = AtomicUsize::new(0);

/// EAL, initialised by the first engine with its configuration's arguments; it lives for the
/// rest of the process (DPDK initialises once).
pub fn eal(cfg: &Config) -> Result<&'static Eal, String> {
    EAL.get_or_init(|| Eal::init(cfg.eal_argv()).map_err(|e| format!("ferroce verbs: EAL: {e}")))
        .as_ref()
        .map_err(|e| e.clone())
}

/// The next worker lcore no engine runs on yet (`None`: the engine runs on a thread).
pub fn lcore(eal: &Eal) -> Option<u32> {
    let n = LCORES_TAKEN.fetch_add(1, Ordering::SeqCst);
    eal.worker_lcores().get(n).copied()
}

fn tag(mode: Mode) -> &'static str {
    match mode {
        Mode::Native => "native",
        Mode::Roce => "rocev2",
    }
}

/// The vdev (name, arguments) for `mode`'s engine when the other device's engine already has
/// the configured vdev `v`: a pcap port on the same interface, with the interface's MAC.
/// (Not a second af_packet port: DPDK puts every af_packet socket a process opens on one
/// interface into one fanout group, `getpid() ^ ifindex`, which deals the frames out between
/// them by flow hash instead of giving each all of them.)
pub fn second_vdev(v: &str, mode: Mode) -> Result<(String, String), String> {
    let (name, args) = v.split_once(',').unwrap_or((v, ""));
    let iface = args.split(',').find_map(|a| a.strip_prefix("iface="));
    match iface {
        Some(i) if name.starts_with("net_af_packet") && !i.is_empty() => Ok((
            format!("net_pcap_{}", tag(mode)),
            format!("iface={i},phy_mac=1"),
        )),
        _ => Err(format!(
            "ferroce verbs: the other ferroce device already runs on port {v}; a second \
             device in the same process needs a port of its own on the same link, which the \
             shim opens itself only beside a net_af_packet port (use one device per process \
             with this port)"
        )),
    }
}

/// The DPDK port for `mode`'s engine; `second`: the other mode's engine runs already.
pub fn port(eal: &Eal, cfg: &Config, mode: Mode, second: bool) -> Result<u16, String> {
    match (&cfg.port.vdev, &cfg.port.device) {
        (Some(v), _) if second => {
            let (name, args) = second_vdev(v, mode)?;
            eal.vdev(&name, &args)
                .map_err(|e| format!("ferroce verbs: port {name},{args}: {e}"))
        }
        (Some(v), _) => {
            let (name, args) = v.split_once(',').unwrap_or((v.as_str(), ""));
            eal.vdev(name, args)
                .map_err(|e| format!("ferroce verbs: port {v}: {e}"))
        }
        (None, _) if second => Err(format!(
            "ferroce verbs: the other ferroce device already runs on this process's DPDK port; \
             a second device needs a port of its own, which the shim opens itself only for \
             a net_af_packet port (FERROCE_PMD), so {mode:?} is not available here"
        )),
        (None, Some(d)) => Port::id_by_name(d).map_err(|e| format!("ferroce verbs: port {d}: {e}")),
        (None, None) => eal
            .ports()
            .first()
            .copied()
            .ok_or_else(|| "ferroce verbs: no DPDK port (set FERROCE_PMD)".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_second_engine_opens_the_af_packet_interface_again() {
        assert_eq!(
            second_vdev("net_af_packet0,iface=veth0,framecnt=8192", Mode::Roce).unwrap(),
            (
                "net_pcap_rocev2".to_string(),
                "iface=veth0,phy_mac=1".to_string()
            )
        );
        assert_eq!(
            second_vdev("net_af_packet3,framecnt=64,iface=x", Mode::Native)
                .unwrap()
                .1,
            "iface=x,phy_mac=1"
        );
        for v in ["net_ring0", "net_af_packet0", "net_af_packet0,iface="] {
            let e = second_vdev(v, Mode::Roce).unwrap_err();
            assert!(e.contains("net_af_packet"), "{v}: {e}");
        }
    }
}
