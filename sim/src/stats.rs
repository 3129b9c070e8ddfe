//! Fabric counters: per link direction, per switch port, and global.

use crate::{Dir, LinkId, SwitchId};

/// Counters of one direction of one link.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkDirStats {
    /// Packets committed to the transmitter while the link was up (including ones that the
    /// fault injector then dropped, and ones later lost because the link went down).
    pub tx_packets: u64,
    /// Wire bytes (`Datagram::wire_len`) of `tx_packets`.
    pub tx_bytes: u64,
    /// Packets that reached the far end (duplicates included).
    pub delivered: u64,
    /// Dropped by the independent random loss fault.
    pub dropped_random_loss: u64,
    /// Dropped by the Gilbert–Elliott burst loss fault.
    pub dropped_burst_loss: u64,
    /// Dropped because the link was down: sent while down, queued or in flight when it went
    /// down.
    pub dropped_link_down: u64,
    /// Packets that had one payload bit flipped.
    pub corrupted: u64,
    /// Extra copies made by the duplication fault.
    pub duplicated: u64,
    /// Packets given the extra reordering delay.
    pub reordered: u64,
    /// ECT packets marked CE by the random `ecn_mark` fault.
    pub ecn_marked: u64,
}

impl LinkDirStats {
    /// All-zero counters (usable in `const` context).
    pub const ZERO: LinkDirStats = LinkDirStats {
        tx_packets: 0,
        tx_bytes: 0,
        delivered: 0,
        dropped_random_loss: 0,
        dropped_burst_loss: 0,
        dropped_link_down: 0,
        corrupted: 0,
        duplicated: 0,
        reordered: 0,
        ecn_marked: 0,
    };

    /// All drops on this link direction.
    pub fn dropped(&self) -> u64 {
        self.dropped_random_loss + self.dropped_burst_loss + self.dropped_link_down
    }
}

/// Counters of one switch output port.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SwitchPortStats {
    /// Packets accepted into the queue.
    pub enqueued: u64,
    /// Wire bytes of `enqueued`.
    pub enqueued_bytes: u64,
    /// Packets tail-dropped because the queue was full.
    pub dropped_queue_full: u64,
    /// ECT packets marked CE because the queue held more than the ECN threshold.
    pub ecn_marked: u64,
    /// Largest queue occupancy seen, in wire bytes (the packet being serialised included).
    pub max_queue_bytes: u64,
}

impl SwitchPortStats {
    /// All-zero counters (usable in `const` context).
    pub const ZERO: SwitchPortStats = SwitchPortStats {
        enqueued: 0,
        enqueued_bytes: 0,
        dropped_queue_full: 0,
        ecn_marked: 0,
        max_queue_bytes: 0,
    };
}

/// All counters of a simulation. Two runs with the same seed and host behaviour produce equal
/// `FabricStats`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FabricStats {
    /// Per link, indexed by `LinkId`, then by `Dir::index()`.
    pub links: Vec<[LinkDirStats; 2]>,
    /// Per switch, indexed by `SwitchId`, then by port.
    pub switch_ports: Vec<Vec<SwitchPortStats>>,
    /// Packets a switch could not forward: unknown destination, or no live route.
    pub dropped_no_route: u64,
    /// Packets that reached a host whose address is not their destination (possible only on
    /// host-to-host links) and were discarded by its NIC.
    pub dropped_misaddressed: u64,
    /// Packets a host sent on a NIC port that has no link.
    pub dropped_unconnected: u64,
    /// Datagrams handed to `Host::handle_datagram`.
    pub delivered_to_hosts: u64,
}

/// Fabric-wide sums of [`FabricStats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FabricTotals {
    /// Sum of link `tx_packets` (a packet crossing 4 links counts 4 times).
    pub tx_packets: u64,
    /// Sum of link `tx_bytes`.
    pub tx_bytes: u64,
    /// Datagrams handed to hosts.
    pub delivered_to_hosts: u64,
    /// Random-loss drops on all links.
    pub dropped_random_loss: u64,
    /// Burst-loss drops on all links.
    pub dropped_burst_loss: u64,
    /// Link-down drops on all links.
    pub dropped_link_down: u64,
    /// Tail drops at all switch ports.
    pub dropped_queue_full: u64,
    /// Packets without a route.
    pub dropped_no_route: u64,
    /// Misaddressed packets discarded by a NIC.
    pub dropped_misaddressed: u64,
    /// Packets sent on unconnected NIC ports.
    pub dropped_unconnected: u64,
    /// Corrupted packets.
    pub corrupted: u64,
    /// Duplicates made.
    pub duplicated: u64,
    /// Reordered packets.
    pub reordered: u64,
    /// CE marks made by the random link fault.
    pub ecn_marked_random: u64,
    /// CE marks made by switch queues above their threshold.
    pub ecn_marked_queue: u64,
    /// Largest queue occupancy of any switch port.
    pub max_queue_bytes: u64,
}

impl FabricTotals {
    /// Every packet the fabric dropped, whatever the reason.
    pub fn dropped(&self) -> u64 {
        self.dropped_random_loss
            + self.dropped_burst_loss
            + self.dropped_link_down
            + self.dropped_queue_full
            + self.dropped_no_route
            + self.dropped_misaddressed
            + self.dropped_unconnected
    }
}

static ZERO_LINK: LinkDirStats = LinkDirStats::ZERO;
static ZERO_PORT: SwitchPortStats = SwitchPortStats::ZERO;

impl FabricStats {
    /// Counters of one link direction (all zero for an unknown link).
    pub fn link(&self, link: LinkId, dir: Dir) -> &LinkDirStats {
        self.links
            .get(link.index())
            .map_or(&ZERO_LINK, |l| &l[dir.index()])
    }

    /// Counters of one switch port (all zero for an unknown port).
    pub fn switch_port(&self, sw: SwitchId, port: usize) -> &SwitchPortStats {
        self.switch_ports
            .get(sw.index())
            .and_then(|p| p.get(port))
            .unwrap_or(&ZERO_PORT)
    }

    /// Largest queue occupancy seen at any switch port, in bytes.
    pub fn max_queue_bytes(&self) -> u64 {
        self.switch_ports
            .iter()
            .flatten()
            .map(|p| p.max_queue_bytes)
            .max()
            .unwrap_or(0)
    }

    /// Fabric-wide sums.
    pub fn totals(&self) -> FabricTotals {
        let mut t = FabricTotals {
            delivered_to_hosts: self.delivered_to_hosts,
            dropped_no_route: self.dropped_no_route,
            dropped_misaddressed: self.dropped_misaddressed,
            dropped_unconnected: self.dropped_unconnected,
            ..FabricTotals::default()
        };
        for d in self.links.iter().flatten() {
            t.tx_packets += d.tx_packets;
            t.tx_bytes += d.tx_bytes;
            t.dropped_random_loss += d.dropped_random_loss;
            t.dropped_burst_loss += d.dropped_burst_loss;
            t.dropped_link_down += d.dropped_link_down;
            t.corrupted += d.corrupted;
            t.duplicated += d.duplicated;
            t.reordered += d.reordered;
            t.ecn_marked_random += d.ecn_marked;
        }
        for p in self.switch_ports.iter().flatten() {
            t.dropped_queue_full += p.dropped_queue_full;
            t.ecn_marked_queue += p.ecn_marked;
            t.max_queue_bytes = t.max_queue_bytes.max(p.max_queue_bytes);
        }
        t
    }
}
