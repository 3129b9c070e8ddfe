//! # ferroce-sim — a deterministic fabric simulator
//!
//! Many hosts (each a transport core plus its application, behind the [`Host`] trait), full-duplex
//! links with per-direction fault injection, and output-queued switches with tail drop, ECN marking
//! and ECMP on the UDP 5-tuple. Everything is driven by one event queue keyed by
//! `(time, insertion sequence number)`, and every random draw comes from a seeded xoshiro256**
//! stream, so the same seed and the same host behaviour give a bit-for-bit identical run.
//!
//! ```
//! use ferroce_sim::{topology, Datagram, Host, Nanos, TopologyConfig};
//!
//! /// Sends one datagram to 198.18.0.2 and counts what it receives.
//! struct Pinger { ip: [u8; 4], to_send: u32, received: u32 }
//! impl Host for Pinger {
//!     fn handle_datagram(&mut self, _now: Nanos, _port: usize, _d: Datagram) { self.received += 1; }
//!     fn poll_transmit(&mut self, _now: Nanos) -> Option<Datagram> {
//!         if self.to_send == 0 { return None; }
//!         self.to_send -= 1;
//!         let peer = if self.ip == [198, 18, 0, 1] { [198, 18, 0, 2] } else { [198, 18, 0, 1] };
//!         Some(Datagram::udp(self.ip, peer, 49152, 4791, vec![0; 1000]))
//!     }
//!     fn poll_timeout(&mut self) -> Option<Nanos> { None }
//!     fn handle_timeout(&mut self, _now: Nanos) {}
//! }
//!
//! let cfg = TopologyConfig::default();
//! let mut sim = topology::back_to_back(&cfg)
//!     .build_with(|_id, ip| Pinger { ip, to_send: 1, received: 0 });
//! sim.run_until(1_000_000);
//! assert_eq!(sim.host(ferroce_sim::HostId(0)).received, 1);
//! assert_eq!(sim.host(ferroce_sim::HostId(1)).received, 1);
//! ```
//!
//! ## Host NIC model
//! A host has one or more NIC ports (one per plane in [`topology::planes`]). Each port
//! serialises one frame at a time and holds up to [`SimConfig::nic_queue_packets`] (default 2)
//! more. The NIC calls [`Host::poll_transmit`] while no port's queue is full and the host has not
//! answered `None` since its last input; each datagram goes to port [`nic_port_for`] of its
//! 5-tuple, so the transport's UDP source port picks the plane. The NIC never drops. After every
//! host input the host's timer is re-armed from [`Host::poll_timeout`] (one armed deadline per
//! host; superseded timer events are ignored). A deadline at or before `now` is handled at once,
//! at most once per event; if it is still in the past afterwards it is retried 1 ns later, so a
//! buggy host cannot freeze simulated time.
//!
//! Serialisation takes `(wire_len() + 20) * 8 / rate` and keeps the sub-nanosecond remainder
//! across back-to-back frames, so bursts run at exactly line rate; an isolated frame is rounded
//! down to whole nanoseconds.
//!
//! ## Model simplifications (deliberate)
//! - Switches are output-queued, store-and-forward, with zero processing delay; no PFC, no
//!   trimming, no shared buffer between ports.
//! - Routing is shortest-path ECMP computed from the topology. With
//!   [`SimConfig::reroute_around_down_links`] (default `true`) routing reconverges *instantly*
//!   to the live links whenever a link changes state (tables are recomputed over live links);
//!   with it off the tables stay as configured and traffic hashed onto a dead link is
//!   blackholed (counted as link-down drops).
//! - Host NICs never reroute: a datagram goes to NIC port `hash(5-tuple) % nports`
//!   ([`nic_port_for`]) even if that port's link is down; the NIC then "transmits into the void"
//!   at line rate and the packet is counted as a link-down drop.
//! - Fault decisions for a packet are drawn when it is committed to a link transmitter; a
//!   dropped packet still occupied the transmitter for its serialisation time. A duplicate arrives
//!   right after its original and uses no extra bandwidth.
//! - Queue occupancy counts a packet until its last bit has left the port.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod calendar;
mod fault;
mod pcap;
mod rng;
mod sim;
mod stats;
pub mod topology;

pub use fault::{FaultConfig, GilbertElliott};
pub use rng::{mix64, Rng};
pub use sim::Sim;
pub use stats::{FabricStats, FabricTotals, LinkDirStats, SwitchPortStats};
pub use topology::{
    LinkSpec, PlaneShape, SimConfig, SwitchInfo, SwitchRole, Topology, TopologyConfig,
    TopologyError,
};

/// Simulated time in nanoseconds since the start of the run.
pub type Nanos = u64;

/// The two ECN bits of the IPv4 TOS byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ecn {
    /// `00`: not ECN-capable.
    NotEct,
    /// `10`: ECN-capable transport (0).
    Ect0,
    /// `01`: ECN-capable transport (1).
    Ect1,
    /// `11`: congestion experienced.
    Ce,
}

impl Ecn {
    /// True for ECT(0) and ECT(1): the packets a switch may mark instead of dropping.
    pub fn is_ect(self) -> bool {
        matches!(self, Ecn::Ect0 | Ecn::Ect1)
    }

    /// The two-bit codepoint as it appears in the low bits of the IPv4 TOS byte.
    pub fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0b00,
            Ecn::Ect1 => 0b01,
            Ecn::Ect0 => 0b10,
            Ecn::Ce => 0b11,
        }
    }

    /// Decodes the low two bits of a TOS byte (higher bits are ignored).
    pub fn from_bits(tos: u8) -> Ecn {
        match tos & 0b11 {
            0b00 => Ecn::NotEct,
            0b01 => Ecn::Ect1,
            0b10 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }
}

/// Bytes a frame carries on the wire beyond the UDP payload: UDP 8 + IPv4 20 + Ethernet 14 + FCS 4.
pub const FRAME_OVERHEAD: usize = 8 + 20 + 14 + 4;
/// Per-frame line overhead that occupies the link but is not part of the frame: preamble+SFD 8 +
/// inter-frame gap 12.
pub const PREAMBLE_IFG: usize = 20;
/// The IANA UDP port of RoCEv2.
pub const ROCEV2_PORT: u16 = 4791;

/// A UDP/IPv4 datagram as the fabric sees it: the headers the fabric routes and marks on, plus the
/// UDP payload (everything the transport puts on the wire after the UDP header).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Datagram {
    /// IPv4 source address.
    pub src_ip: [u8; 4],
    /// IPv4 destination address; switches forward on it.
    pub dst_ip: [u8; 4],
    /// UDP source port = ECMP entropy chosen by the transport.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// ECN codepoint; switches and the `ecn_mark` fault may turn ECT into CE.
    pub ecn: Ecn,
    /// The UDP payload.
    pub payload: Vec<u8>,
}

impl Datagram {
    /// A datagram with ECN `NotEct`.
    pub fn udp(
        src_ip: [u8; 4],
        dst_ip: [u8; 4],
        src_port: u16,
        dst_port: u16,
        payload: Vec<u8>,
    ) -> Self {
        Datagram {
            src_ip,
            dst_ip,
            src_port,
            dst_port,
            ecn: Ecn::NotEct,
            payload,
        }
    }

    /// Frame length on the wire: payload + 8 UDP + 20 IPv4 + 14 Ethernet + 4 FCS. Serialisation on
    /// a link takes `wire_len() + PREAMBLE_IFG` byte times.
    pub fn wire_len(&self) -> usize {
        self.payload.len().saturating_add(FRAME_OVERHEAD)
    }
}

/// A host attached to the fabric: the transport core plus its application, wrapped by the embedder.
///
/// The simulator calls these methods only from inside [`Sim`] event processing (or from
/// [`Sim::wake`]); after any of `handle_datagram`, `handle_timeout` or a wake it polls
/// `poll_transmit` while the NIC has room and then `poll_timeout` to (re)arm the host's timer.
pub trait Host {
    /// A datagram addressed to this host arrived on NIC port `port`.
    fn handle_datagram(&mut self, now: Nanos, port: usize, d: Datagram);
    /// The NIC can take a packet: return the next one to send, if any. Returning `None` means
    /// "nothing until my next input": the NIC will not ask again before the next
    /// `handle_datagram`, `handle_timeout` or wake.
    fn poll_transmit(&mut self, now: Nanos) -> Option<Datagram>;
    /// Multi-port hosts: the next packet for one of the NIC ports whose bit is set in
    /// `ready` (they have room), and the port to send it on. A host that answers with a port
    /// is polled whenever any port has room, so a busy plane never blocks the others; `None`
    /// as the port means "hash the 5-tuple" (the default, which asks `poll_transmit`).
    fn poll_transmit_ports(&mut self, now: Nanos, ready: u64) -> Option<(Datagram, Option<usize>)> {
        let _ = ready;
        self.poll_transmit(now).map(|d| (d, None))
    }
    /// Earliest time the host wants `handle_timeout` called (None = no timer).
    fn poll_timeout(&mut self) -> Option<Nanos>;
    /// The deadline returned by `poll_timeout` has been reached.
    fn handle_timeout(&mut self, now: Nanos);
}

/// Index of a host in a [`Sim`] (0-based, in topology order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostId(pub u32);

/// Index of a link in a [`Sim`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkId(pub u32);

/// Index of a switch in a [`Sim`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SwitchId(pub u32);

macro_rules! id_index {
    ($t:ty) => {
        impl $t {
            /// The id as a `usize` index.
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }
    };
}
id_index!(HostId);
id_index!(LinkId);
id_index!(SwitchId);

/// A direction on a link. For links built by [`Topology`], end A is the first argument of the
/// `connect_*` call: for host–switch links A is the host, for switch–switch links A is the lower
/// tier (leaf→spine, edge→aggregation, aggregation→core are `AtoB`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dir {
    /// From end A to end B.
    AtoB,
    /// From end B to end A.
    BtoA,
}

impl Dir {
    /// 0 for `AtoB`, 1 for `BtoA`.
    pub fn index(self) -> usize {
        match self {
            Dir::AtoB => 0,
            Dir::BtoA => 1,
        }
    }

    /// The opposite direction.
    pub fn reverse(self) -> Dir {
        match self {
            Dir::AtoB => Dir::BtoA,
            Dir::BtoA => Dir::AtoB,
        }
    }

    /// Both directions, `AtoB` first.
    pub const BOTH: [Dir; 2] = [Dir::AtoB, Dir::BtoA];
}

/// A node of the fabric: a host or a switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Node {
    /// A host.
    Host(HostId),
    /// A switch.
    Switch(SwitchId),
}

/// First address of the host range: hosts get `198.18.0.0 + index + 1` (inside 198.18.0.0/15).
const HOST_IP_BASE: u32 = u32::from_be_bytes([198, 18, 0, 0]);
/// Largest number of hosts the address scheme can name (198.18.0.1 ..= 198.19.255.254).
pub const MAX_HOSTS: usize = (1 << 17) - 2;

/// The IPv4 address of host `id`: `198.18.0.0 + id + 1`, so host 0 is 198.18.0.1, host 255 is
/// 198.18.1.0 and host 256 is 198.18.1.1.
pub fn host_ip(id: HostId) -> [u8; 4] {
    HOST_IP_BASE
        .wrapping_add(id.0)
        .wrapping_add(1)
        .to_be_bytes()
}

/// Inverse of [`host_ip`] (without checking how many hosts exist).
pub fn host_index_of_ip(ip: [u8; 4]) -> Option<HostId> {
    let v = u32::from_be_bytes(ip);
    if v & 0xFFFE_0000 != HOST_IP_BASE {
        return None;
    }
    let off = v - HOST_IP_BASE;
    if off == 0 || off as usize > MAX_HOSTS {
        return None;
    }
    Some(HostId(off - 1))
}

/// The ECMP hash of a datagram's 5-tuple (src_ip, dst_ip, proto = 17, src_port, dst_port) mixed
/// with `salt`. Switches use a per-switch salt so different layers choose independently.
#[inline]
pub fn flow_hash(d: &Datagram, salt: u64) -> u64 {
    flow_hash_tuple(d.src_ip, d.dst_ip, d.src_port, d.dst_port, salt)
}

/// [`flow_hash`] on the bare 5-tuple fields.
#[inline]
pub fn flow_hash_tuple(
    src_ip: [u8; 4],
    dst_ip: [u8; 4],
    src_port: u16,
    dst_port: u16,
    salt: u64,
) -> u64 {
    let a = (u64::from(u32::from_be_bytes(src_ip)) << 32) | u64::from(u32::from_be_bytes(dst_ip));
    let b = (17u64 << 32) | (u64::from(src_port) << 16) | u64::from(dst_port);
    mix64(mix64(a ^ salt) ^ b)
}

/// Maps a 64-bit hash onto `0..n` using its high bits (multiply-shift; `n == 0` gives 0).
#[inline]
pub fn hash_to_index(h: u64, n: usize) -> usize {
    ((u128::from(h) * n as u128) >> 64) as usize
}

/// Salt of the host NIC's port choice (fixed, so a transport can precompute which source ports
/// land on which plane).
pub const NIC_SALT: u64 = 0x6e69_635f_706f_7274; // "nic_port"

/// The NIC port a host with `nports` ports uses for a datagram with this 5-tuple:
/// `hash(5-tuple) % nports`. The transport's choice of UDP source port thereby picks the plane.
pub fn nic_port_for(
    src_ip: [u8; 4],
    dst_ip: [u8; 4],
    src_port: u16,
    dst_port: u16,
    nports: usize,
) -> usize {
    if nports <= 1 {
        return 0;
    }
    hash_to_index(
        flow_hash_tuple(src_ip, dst_ip, src_port, dst_port, NIC_SALT),
        nports,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_scheme_roundtrips() {
        for i in [0u32, 1, 254, 255, 256, 1000, (MAX_HOSTS - 1) as u32] {
            let ip = host_ip(HostId(i));
            assert_eq!(ip[0], 198);
            assert!(ip[1] == 18 || ip[1] == 19);
            assert_eq!(host_index_of_ip(ip), Some(HostId(i)));
        }
        assert_eq!(host_ip(HostId(0)), [198, 18, 0, 1]);
        assert_eq!(host_index_of_ip([198, 18, 0, 0]), None);
        assert_eq!(host_index_of_ip([198, 20, 0, 1]), None);
        assert_eq!(host_index_of_ip([10, 0, 0, 1]), None);
        assert_eq!(host_index_of_ip([198, 19, 255, 255]), None);
    }

    #[test]
    fn ecn_bits_roundtrip() {
        for e in [Ecn::NotEct, Ecn::Ect0, Ecn::Ect1, Ecn::Ce] {
            assert_eq!(Ecn::from_bits(e.bits()), e);
        }
        assert!(Ecn::Ect0.is_ect() && Ecn::Ect1.is_ect());
        assert!(!Ecn::Ce.is_ect() && !Ecn::NotEct.is_ect());
    }

    #[test]
    fn wire_len_counts_headers() {
        let d = Datagram::udp([1; 4], [2; 4], 1, 2, vec![0; 4096]);
        assert_eq!(d.wire_len(), 4096 + 46);
    }

    #[test]
    fn nic_port_spreads_over_ports() {
        let mut counts = [0u32; 4];
        for sp in 0..4000u16 {
            counts[nic_port_for([1; 4], [2; 4], 49152 + sp, 4791, 4)] += 1;
        }
        for c in counts {
            assert!((800..1200).contains(&c), "{counts:?}");
        }
        assert_eq!(nic_port_for([1; 4], [2; 4], 5, 4791, 1), 0);
        assert_eq!(nic_port_for([1; 4], [2; 4], 5, 4791, 0), 0);
    }
}
