//! The reference fabric every benchmark uses unless it says otherwise: the UEC simulator's
//! (uet-htsim) 128-host, 3-tier, full-bisection fat tree (k = 8), 100 Gb/s links, 1 µs per hop,
//! switch queues of one BDP (43 packets of 4150 B), ECN marking above 20 % of the queue.

use ferroce_harness::NodeHost;
use ferroce_sim::topology::{self, PlaneShape, TopologyConfig};
use ferroce_sim::{HostId, Sim, FRAME_OVERHEAD, PREAMBLE_IFG};
use ferroce_transport::wire::{Opcode, ACK_BODY_LEN, BASE_LEN, TRAILER_LEN};

/// Link rate of the reference fabric, bits per second.
pub const LINK_BPS: u64 = 100_000_000_000;
/// Largest payload per packet used by every benchmark (native and RoCEv2 alike).
pub const MTU: u16 = 4096;
/// One BDP of the reference fabric as the UEC simulator sizes its queues: 43 × 4150 B.
pub const BDP_BYTES: u64 = 43 * 4150;
/// Fat-tree arity of the reference fabric (k = 8: 128 hosts, 80 switches).
pub const FAT_TREE_K: usize = 8;
/// Hosts of the reference fabric.
pub const FAT_TREE_HOSTS: usize = FAT_TREE_K * FAT_TREE_K * FAT_TREE_K / 4;
/// Links crossed between hosts in different pods (host–edge–agg–core–agg–edge–host).
pub const FAT_TREE_HOPS: u32 = 6;

/// The reference fabric's settings with this seed.
pub fn reference_config(seed: u64) -> TopologyConfig {
    TopologyConfig::default().with_seed(seed)
}

/// Wire bytes (frame + preamble + inter-frame gap) of a native WRITE packet with `payload`.
pub fn data_frame_bytes(payload: u32) -> u64 {
    (BASE_LEN + Opcode::Write.header_len() + TRAILER_LEN + FRAME_OVERHEAD + PREAMBLE_IFG) as u64
        + payload as u64
}

/// Wire bytes of a RoCEv2 RDMA WRITE of `payload` bytes per packet, averaged over a message
/// of `packets` packets: BTH and ICRC on every packet, the RETH on the first only.
pub fn roce_frame_bytes(payload: u32, packets: u32) -> f64 {
    use ferroce_transport::roce::wire::{BTH_LEN, ICRC_LEN, RETH_LEN};
    (BTH_LEN + ICRC_LEN + FRAME_OVERHEAD + PREAMBLE_IFG) as f64
        + payload as f64
        + RETH_LEN as f64 / packets.max(1) as f64
}

/// Wire bytes of a native ACK.
pub fn ack_frame_bytes() -> u64 {
    (BASE_LEN + ACK_BODY_LEN + TRAILER_LEN + FRAME_OVERHEAD + PREAMBLE_IFG) as u64
}

/// Base RTT over `hops` store-and-forward links: propagation both ways plus the serialisation of
/// one full data packet going and its ACK coming back, on every hop. On the reference fabric
/// (6 hops) this is 14.09 µs, the ~14 µs of the UEC simulator.
pub fn base_rtt_ns(cfg: &TopologyConfig, hops: u32, mtu: u16) -> u64 {
    let ser = |bytes: u64| bytes * 8 * 1_000_000_000 / cfg.link_rate_bps.max(1);
    hops as u64 * (2 * cfg.prop_delay + ser(data_frame_bytes(mtu as u32)) + ser(ack_frame_bytes()))
}

/// Base RTT of the reference fabric between hosts in different pods.
pub fn reference_rtt_ns() -> u64 {
    base_rtt_ns(&reference_config(1), FAT_TREE_HOPS, MTU)
}

/// Largest goodput one 100 Gb/s link can carry with full packets (payload / wire bytes).
pub fn payload_efficiency(mtu: u16) -> f64 {
    mtu as f64 / data_frame_bytes(mtu as u32) as f64
}

/// The 128-host fat tree, each host made by `make`.
pub fn fat_tree(
    cfg: &TopologyConfig,
    make: impl FnMut(HostId, [u8; 4]) -> NodeHost,
) -> Sim<NodeHost> {
    fat_tree_k(cfg, FAT_TREE_K, make)
}

/// The reference fabric's links and queues as a k-ary fat tree (`k` even, 4 ..= 80;
/// k = 16: 1,024 hosts, 320 switches), each host made by `make`.
pub fn fat_tree_k(
    cfg: &TopologyConfig,
    k: usize,
    make: impl FnMut(HostId, [u8; 4]) -> NodeHost,
) -> Sim<NodeHost> {
    debug_assert!(valid_k(k), "fat-tree arity {k}");
    topology::fat_tree(cfg, k).build_with(make)
}

/// Whether `k` is an arity `fat_tree_k` builds as asked (`topology::fat_tree` would round
/// an odd one down and clamp to 2 ..= 80; k = 2 has one core and no ECMP worth the name).
pub fn valid_k(k: usize) -> bool {
    (4..=80).contains(&k) && k.is_multiple_of(2)
}

/// Hosts of the k-ary fat tree: k³/4.
pub fn fat_tree_hosts(k: usize) -> usize {
    k * k * k / 4
}

/// Switches of the k-ary fat tree: k²/2 edge, k²/2 aggregation, k²/4 core.
pub fn fat_tree_switches(k: usize) -> usize {
    k * k + k * k / 4
}

/// Shape of each plane in the multipath benchmark: a 2-tier leaf-spine per plane.
pub fn plane_shape(hosts: usize) -> PlaneShape {
    if hosts <= 2 {
        PlaneShape::LeafSpine {
            leaves: 2,
            spines: 4,
        }
    } else {
        // Full bisection: 16 hosts per leaf, as many spines as hosts per leaf.
        let leaves = hosts.div_ceil(16).max(2);
        PlaneShape::LeafSpine {
            leaves,
            spines: hosts.div_ceil(leaves),
        }
    }
}

/// Hops between hosts on different leaves of a leaf-spine plane.
pub const PLANE_HOPS: u32 = 4;

/// One-line description of the reference fabric.
pub fn describe_reference(rtt_ns: u64) -> String {
    describe_fat_tree(FAT_TREE_K, rtt_ns)
}

/// One-line description of the reference fabric's links and queues as a k-ary fat tree (the
/// base RTT across pods is the same 6 hops whatever k).
pub fn describe_fat_tree(k: usize, rtt_ns: u64) -> String {
    format!(
        "{}-host 3-tier fat tree (k = {k}, full bisection), {} Gb/s links, \
         1 µs per hop, switch queues of 1 BDP = 43 x 4150 B = {BDP_BYTES} B, ECN above 20 %; \
         base RTT {:.2} µs across pods; MTU {MTU} B",
        fat_tree_hosts(k),
        LINK_BPS / 1_000_000_000,
        rtt_ns as f64 / 1e3
    )
}
