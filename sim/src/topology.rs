//! Fabric descriptions: a generic builder ([`Topology`]) and the standard topologies
//! (back-to-back, star, dumbbell, leaf–spine, parallel planes, k-ary fat tree, two fat trees
//! joined by long-haul links).
//!
//! A topology function returns a [`Topology`]; turn it into a running [`Sim`] with
//! [`Topology::build`] (a `Vec` of hosts, one per host slot) or [`Topology::build_with`]
//! (a closure called with each host's id and IP address).

use std::fmt;

use crate::sim::Sim;
use crate::{host_ip, Host, HostId, LinkId, Nanos, SwitchId};

/// Simulator-wide settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimConfig {
    /// Master seed of every random draw (link faults). Same seed + same host behaviour =>
    /// identical run.
    pub seed: u64,
    /// When true (default), routing reconverges instantly: whenever a link changes state the
    /// forwarding tables are recomputed over live links. When false the tables stay as built and
    /// traffic hashed onto a dead link is blackholed (counted as link-down drops).
    pub reroute_around_down_links: bool,
    /// Packets a host NIC port may hold waiting behind the one it is serialising (at least 1).
    /// The NIC stops polling the host while any port's queue is this full.
    pub nic_queue_packets: usize,
    /// Salt of the switches' ECMP hash (each switch further mixes in its own index). Kept apart
    /// from `seed` so that changing the fault seed does not move flows onto other paths.
    pub ecmp_salt: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 1,
            reroute_around_down_links: true,
            nic_queue_packets: 2,
            ecmp_salt: 0,
        }
    }
}

/// Parameters shared by the standard topologies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopologyConfig {
    /// Rate of every link, bits per second (default 100 Gb/s).
    pub link_rate_bps: u64,
    /// Propagation delay of every link (per hop), ns (default 1 µs).
    pub prop_delay: Nanos,
    /// Queue capacity of every switch output port, bytes (default 178 450 = 43 packets of
    /// 4150 B, one BDP of a 14 µs RTT at 100 Gb/s).
    pub switch_buffer_bytes: u64,
    /// ECN marking threshold K of every switch output port, bytes (default 35 690, 20 % of the
    /// default buffer).
    pub ecn_threshold_bytes: u64,
    /// Simulator settings, including the seed.
    pub sim: SimConfig,
}

impl Default for TopologyConfig {
    fn default() -> Self {
        TopologyConfig {
            link_rate_bps: 100_000_000_000,
            prop_delay: 1_000,
            switch_buffer_bytes: 43 * 4150,
            ecn_threshold_bytes: 43 * 4150 / 5,
            sim: SimConfig::default(),
        }
    }
}

impl TopologyConfig {
    /// This configuration with another seed.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.sim.seed = seed;
        self
    }

    /// The link parameters every standard topology uses.
    pub fn link_spec(&self) -> LinkSpec {
        LinkSpec {
            rate_bps: self.link_rate_bps,
            delay: self.prop_delay,
        }
    }
}

/// Rate and propagation delay of one link (both directions).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkSpec {
    /// Bits per second (0 is treated as 1).
    pub rate_bps: u64,
    /// Propagation delay, ns.
    pub delay: Nanos,
}

/// What a switch is in its topology (for tests that want to fail "all spines" and the like).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SwitchRole {
    /// The single switch of a star or of a single-switch plane.
    Star,
    /// One of the two switches of a dumbbell.
    Dumbbell,
    /// Leaf (top of rack) of a leaf–spine.
    Leaf,
    /// Spine of a leaf–spine.
    Spine,
    /// Edge switch of a fat tree.
    Edge,
    /// Aggregation switch of a fat tree.
    Aggregation,
    /// Core switch of a fat tree.
    Core,
    /// Built by hand.
    Custom,
}

/// Description of a switch: role, position, plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SwitchInfo {
    /// Role in the topology.
    pub role: SwitchRole,
    /// Index among the switches of the same role (and plane).
    pub index: usize,
    /// Fat-tree pod, if any.
    pub pod: Option<usize>,
    /// Plane, for multi-plane topologies.
    pub plane: Option<usize>,
}

impl SwitchInfo {
    /// A switch with this role and index, no pod, no plane.
    pub fn new(role: SwitchRole, index: usize) -> Self {
        SwitchInfo {
            role,
            index,
            pod: None,
            plane: None,
        }
    }
}

/// Shape of each plane of [`planes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlaneShape {
    /// Each plane is one switch connecting every host.
    SingleSwitch,
    /// Each plane is a leaf–spine; hosts are spread over the leaves in order
    /// (`ceil(hosts / leaves)` per leaf).
    LeafSpine {
        /// Leaves per plane.
        leaves: usize,
        /// Spines per plane.
        spines: usize,
    },
}

/// Why a [`Topology`] could not be turned into a [`Sim`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TopologyError {
    /// `build` was given a different number of hosts than the topology has.
    HostCount {
        /// Host slots in the topology.
        expected: usize,
        /// Hosts given.
        got: usize,
    },
}

impl fmt::Display for TopologyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TopologyError::HostCount { expected, got } => {
                write!(f, "topology has {expected} hosts but {got} were given")
            }
        }
    }
}

impl std::error::Error for TopologyError {}

/// One end of a link: a host NIC port or a switch port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum End {
    Host { host: u32, port: u16 },
    Switch { sw: u32, port: u16 },
}

#[derive(Clone, Debug)]
pub(crate) struct HostDesc {
    /// Per NIC port: the link and which end of it (0 = A) this port is.
    pub ports: Vec<Option<(u32, u8)>>,
}

#[derive(Clone, Debug)]
pub(crate) struct SwitchDesc {
    pub info: SwitchInfo,
    pub buffer_bytes: u64,
    pub ecn_threshold_bytes: u64,
    pub ports: Vec<(u32, u8)>,
}

#[derive(Clone, Debug)]
pub(crate) struct LinkDesc {
    pub ends: [End; 2],
    pub spec: LinkSpec,
    pub plane: Option<usize>,
}

/// A fabric description under construction: hosts (with NIC port counts), switches and links.
/// Host `i` gets `HostId(i)` and address [`host_ip`]`(HostId(i))`; ids are handed out in the
/// order of the `add_*`/`connect_*` calls.
#[derive(Clone, Debug)]
pub struct Topology {
    pub(crate) cfg: SimConfig,
    pub(crate) hosts: Vec<HostDesc>,
    pub(crate) switches: Vec<SwitchDesc>,
    pub(crate) links: Vec<LinkDesc>,
}

impl Topology {
    /// An empty fabric.
    pub fn new(cfg: SimConfig) -> Self {
        Topology {
            cfg,
            hosts: Vec::new(),
            switches: Vec::new(),
            links: Vec::new(),
        }
    }

    /// Adds a host with `nports` NIC ports (at most 65 535). A host with no ports is never
    /// polled for transmission.
    pub fn add_host(&mut self, nports: usize) -> HostId {
        let id = HostId(self.hosts.len() as u32);
        self.hosts.push(HostDesc {
            ports: vec![None; nports.min(u16::MAX as usize)],
        });
        id
    }

    /// Adds a switch whose output ports get the given queue capacity and ECN threshold.
    pub fn add_switch(
        &mut self,
        info: SwitchInfo,
        buffer_bytes: u64,
        ecn_threshold_bytes: u64,
    ) -> SwitchId {
        let id = SwitchId(self.switches.len() as u32);
        self.switches.push(SwitchDesc {
            info,
            buffer_bytes,
            ecn_threshold_bytes,
            ports: Vec::new(),
        });
        id
    }

    fn switch_port(&mut self, sw: SwitchId, link: u32, side: u8) -> Option<u16> {
        let s = self.switches.get_mut(sw.index())?;
        let port = u16::try_from(s.ports.len()).ok()?;
        s.ports.push((link, side));
        Some(port)
    }

    fn host_port_free(&self, h: HostId, port: usize) -> bool {
        matches!(
            self.hosts.get(h.index()).and_then(|d| d.ports.get(port)),
            Some(None)
        )
    }

    /// Connects NIC port `port` of host `h` (end A) to a new port of switch `sw` (end B).
    /// Returns `None` if an id is unknown or the NIC port is already connected.
    pub fn connect_host(
        &mut self,
        h: HostId,
        port: usize,
        sw: SwitchId,
        spec: LinkSpec,
    ) -> Option<LinkId> {
        if !self.host_port_free(h, port) || sw.index() >= self.switches.len() {
            return None;
        }
        let link = u32::try_from(self.links.len()).ok()?;
        let sport = self.switch_port(sw, link, 1)?;
        self.hosts[h.index()].ports[port] = Some((link, 0));
        self.links.push(LinkDesc {
            ends: [
                End::Host {
                    host: h.0,
                    port: port as u16,
                },
                End::Switch {
                    sw: sw.0,
                    port: sport,
                },
            ],
            spec,
            plane: None,
        });
        Some(LinkId(link))
    }

    /// Connects a new port of switch `a` (end A) to a new port of switch `b` (end B).
    pub fn connect_switches(&mut self, a: SwitchId, b: SwitchId, spec: LinkSpec) -> Option<LinkId> {
        if a.index() >= self.switches.len() || b.index() >= self.switches.len() {
            return None;
        }
        let link = u32::try_from(self.links.len()).ok()?;
        let pa = self.switch_port(a, link, 0)?;
        let pb = match self.switch_port(b, link, 1) {
            Some(p) => p,
            None => {
                self.switches[a.index()].ports.pop();
                return None;
            }
        };
        self.links.push(LinkDesc {
            ends: [
                End::Switch { sw: a.0, port: pa },
                End::Switch { sw: b.0, port: pb },
            ],
            spec,
            plane: None,
        });
        Some(LinkId(link))
    }

    /// Connects NIC port `pa` of host `a` (end A) directly to NIC port `pb` of host `b` (end B).
    pub fn connect_hosts(
        &mut self,
        a: HostId,
        pa: usize,
        b: HostId,
        pb: usize,
        spec: LinkSpec,
    ) -> Option<LinkId> {
        if !self.host_port_free(a, pa) || !self.host_port_free(b, pb) || (a == b && pa == pb) {
            return None;
        }
        let link = u32::try_from(self.links.len()).ok()?;
        self.hosts[a.index()].ports[pa] = Some((link, 0));
        self.hosts[b.index()].ports[pb] = Some((link, 1));
        self.links.push(LinkDesc {
            ends: [
                End::Host {
                    host: a.0,
                    port: pa as u16,
                },
                End::Host {
                    host: b.0,
                    port: pb as u16,
                },
            ],
            spec,
            plane: None,
        });
        Some(LinkId(link))
    }

    /// Tags a link as belonging to a plane (see `Sim::plane_links`).
    pub fn set_link_plane(&mut self, link: LinkId, plane: usize) {
        if let Some(l) = self.links.get_mut(link.index()) {
            l.plane = Some(plane);
        }
    }

    /// Number of host slots.
    pub fn num_hosts(&self) -> usize {
        self.hosts.len()
    }

    /// Number of switches.
    pub fn num_switches(&self) -> usize {
        self.switches.len()
    }

    /// Number of links.
    pub fn num_links(&self) -> usize {
        self.links.len()
    }

    /// The simulator settings the built `Sim` will use.
    pub fn config_mut(&mut self) -> &mut SimConfig {
        &mut self.cfg
    }

    /// Builds the simulation with these hosts (`hosts[i]` becomes `HostId(i)`).
    pub fn build<H: Host>(self, hosts: Vec<H>) -> Result<Sim<H>, TopologyError> {
        if hosts.len() != self.hosts.len() {
            return Err(TopologyError::HostCount {
                expected: self.hosts.len(),
                got: hosts.len(),
            });
        }
        Ok(Sim::from_topology(self, hosts))
    }

    /// Builds the simulation, making each host with `make(id, ip)`.
    pub fn build_with<H: Host>(self, mut make: impl FnMut(HostId, [u8; 4]) -> H) -> Sim<H> {
        let hosts = (0..self.hosts.len() as u32)
            .map(|i| make(HostId(i), host_ip(HostId(i))))
            .collect();
        Sim::from_topology(self, hosts)
    }
}

/// Two hosts joined by one link (`LinkId(0)`, host 0 is end A); no switch.
pub fn back_to_back(cfg: &TopologyConfig) -> Topology {
    let mut t = Topology::new(cfg.sim.clone());
    let a = t.add_host(1);
    let b = t.add_host(1);
    let _ = t.connect_hosts(a, 0, b, 0, cfg.link_spec());
    t
}

/// `n` hosts on one switch (`SwitchId(0)`); host `i` uses `LinkId(i)` and switch port `i`.
pub fn star(cfg: &TopologyConfig, n: usize) -> Topology {
    let mut t = Topology::new(cfg.sim.clone());
    let s = t.add_switch(
        SwitchInfo::new(SwitchRole::Star, 0),
        cfg.switch_buffer_bytes,
        cfg.ecn_threshold_bytes,
    );
    for _ in 0..n {
        let h = t.add_host(1);
        let _ = t.connect_host(h, 0, s, cfg.link_spec());
    }
    t
}

/// Two switches joined by one bottleneck link, `left` hosts on switch 0 and `right` hosts on
/// switch 1. Hosts 0..left are on the left; host links come first (`LinkId(i)` for host `i`),
/// the bottleneck is the last link (switch 0 is its end A).
pub fn dumbbell(cfg: &TopologyConfig, left: usize, right: usize) -> Topology {
    let mut t = Topology::new(cfg.sim.clone());
    let s0 = t.add_switch(
        SwitchInfo::new(SwitchRole::Dumbbell, 0),
        cfg.switch_buffer_bytes,
        cfg.ecn_threshold_bytes,
    );
    let s1 = t.add_switch(
        SwitchInfo::new(SwitchRole::Dumbbell, 1),
        cfg.switch_buffer_bytes,
        cfg.ecn_threshold_bytes,
    );
    for i in 0..left + right {
        let h = t.add_host(1);
        let _ = t.connect_host(h, 0, if i < left { s0 } else { s1 }, cfg.link_spec());
    }
    let _ = t.connect_switches(s0, s1, cfg.link_spec());
    t
}

/// Size of one leaf–spine.
#[derive(Clone, Copy)]
struct LeafSpineShape {
    leaves: usize,
    spines: usize,
    hosts_per_leaf: usize,
}

/// Adds a leaf–spine to `t`: leaves then spines as switches, each leaf linked once to every
/// spine; `hosts[i]`'s NIC port `host_port` goes to leaf `i / hosts_per_leaf`.
fn add_leaf_spine(
    t: &mut Topology,
    cfg: &TopologyConfig,
    hosts: &[HostId],
    host_port: usize,
    shape: LeafSpineShape,
    plane: Option<usize>,
) {
    let LeafSpineShape {
        leaves,
        spines,
        hosts_per_leaf,
    } = shape;
    let mk = |role, index| SwitchInfo {
        role,
        index,
        pod: None,
        plane,
    };
    let leaf_ids: Vec<SwitchId> = (0..leaves)
        .map(|i| {
            t.add_switch(
                mk(SwitchRole::Leaf, i),
                cfg.switch_buffer_bytes,
                cfg.ecn_threshold_bytes,
            )
        })
        .collect();
    let spine_ids: Vec<SwitchId> = (0..spines)
        .map(|i| {
            t.add_switch(
                mk(SwitchRole::Spine, i),
                cfg.switch_buffer_bytes,
                cfg.ecn_threshold_bytes,
            )
        })
        .collect();
    let hpl = hosts_per_leaf.max(1);
    for (i, &h) in hosts.iter().enumerate() {
        if let Some(&leaf) = leaf_ids.get(i / hpl) {
            if let Some(l) = t.connect_host(h, host_port, leaf, cfg.link_spec()) {
                if let Some(p) = plane {
                    t.set_link_plane(l, p);
                }
            }
        }
    }
    for &leaf in &leaf_ids {
        for &spine in &spine_ids {
            if let Some(l) = t.connect_switches(leaf, spine, cfg.link_spec()) {
                if let Some(p) = plane {
                    t.set_link_plane(l, p);
                }
            }
        }
    }
}

/// A two-tier leaf–spine: `leaves * hosts_per_leaf` hosts, host `i` on leaf `i / hosts_per_leaf`,
/// every leaf linked once to every spine. Switches: leaves are `SwitchId(0..leaves)`, spines
/// follow. Links: host links first (`LinkId(i)` for host `i`), then leaf-major leaf–spine links
/// (leaf `l` to spine `s` is `LinkId(hosts + l * spines + s)`, leaf is end A).
pub fn leaf_spine(
    cfg: &TopologyConfig,
    leaves: usize,
    spines: usize,
    hosts_per_leaf: usize,
) -> Topology {
    let mut t = Topology::new(cfg.sim.clone());
    let hosts: Vec<HostId> = (0..leaves * hosts_per_leaf)
        .map(|_| t.add_host(1))
        .collect();
    add_leaf_spine(
        &mut t,
        cfg,
        &hosts,
        0,
        LeafSpineShape {
            leaves,
            spines,
            hosts_per_leaf,
        },
        None,
    );
    t
}

/// `k` parallel, independent planes. Every host has `k` NIC ports; port `i` attaches to plane `i`.
/// Each plane is one switch or a leaf–spine (see [`PlaneShape`]); switches and links are tagged
/// with their plane (`Sim::plane_links`, `Sim::switch_info`). Planes are built one after the other,
/// so plane `i`'s switches and links have consecutive ids.
pub fn planes(cfg: &TopologyConfig, k: usize, hosts: usize, shape: PlaneShape) -> Topology {
    let mut t = Topology::new(cfg.sim.clone());
    let k = k.min(u16::MAX as usize);
    let ids: Vec<HostId> = (0..hosts).map(|_| t.add_host(k)).collect();
    for plane in 0..k {
        match shape {
            PlaneShape::SingleSwitch => {
                let s = t.add_switch(
                    SwitchInfo {
                        role: SwitchRole::Star,
                        index: 0,
                        pod: None,
                        plane: Some(plane),
                    },
                    cfg.switch_buffer_bytes,
                    cfg.ecn_threshold_bytes,
                );
                for &h in &ids {
                    if let Some(l) = t.connect_host(h, plane, s, cfg.link_spec()) {
                        t.set_link_plane(l, plane);
                    }
                }
            }
            PlaneShape::LeafSpine { leaves, spines } => {
                let leaves = leaves.max(1);
                let hpl = hosts.div_ceil(leaves);
                add_leaf_spine(
                    &mut t,
                    cfg,
                    &ids,
                    plane,
                    LeafSpineShape {
                        leaves,
                        spines,
                        hosts_per_leaf: hpl,
                    },
                    Some(plane),
                );
            }
        }
    }
    t
}

/// The classic 3-tier k-ary fat tree (Al-Fares et al.): `k` pods of `k/2` edge and `k/2`
/// aggregation switches, `(k/2)^2` core switches, `k^3/4` hosts (k = 8 gives 128), full bisection.
/// Routing is shortest-path ECMP, which here means ECMP over all aggregation switches at the edge
/// and over all reachable cores at aggregation going up, and a single path going down.
///
/// `k` is rounded down to an even number and clamped to `2..=80`. Ids: hosts in pod order
/// (host `i` is on edge switch `i / (k/2)`); switches are all edges (pod-major), then all
/// aggregations (pod-major), then cores; links are host links (`LinkId(i)` for host `i`), then
/// edge–aggregation (edge is end A), then aggregation–core (aggregation is end A). Aggregation
/// switch `j` of every pod connects to cores `j*k/2 .. (j+1)*k/2`.
pub fn fat_tree(cfg: &TopologyConfig, k: usize) -> Topology {
    let mut t = Topology::new(cfg.sim.clone());
    let _ = add_fat_tree(&mut t, cfg, k, None);
    t
}

/// Adds one k-ary fat tree to `t` (ids as [`fat_tree`] describes them, after whatever `t`
/// already holds; `site` tags its switches' `plane`) and returns its core switches.
fn add_fat_tree(
    t: &mut Topology,
    cfg: &TopologyConfig,
    k: usize,
    site: Option<usize>,
) -> Vec<SwitchId> {
    let k = (k & !1).clamp(2, 80);
    let half = k / 2;
    let nhosts = k * half * half;
    let hosts: Vec<HostId> = (0..nhosts).map(|_| t.add_host(1)).collect();
    let sw = |t: &mut Topology, role, index, pod| {
        t.add_switch(
            SwitchInfo {
                role,
                index,
                pod,
                plane: site,
            },
            cfg.switch_buffer_bytes,
            cfg.ecn_threshold_bytes,
        )
    };
    let edges: Vec<SwitchId> = (0..k * half)
        .map(|i| sw(t, SwitchRole::Edge, i, Some(i / half)))
        .collect();
    let aggs: Vec<SwitchId> = (0..k * half)
        .map(|i| sw(t, SwitchRole::Aggregation, i, Some(i / half)))
        .collect();
    let cores: Vec<SwitchId> = (0..half * half)
        .map(|i| sw(t, SwitchRole::Core, i, None))
        .collect();
    for (i, &h) in hosts.iter().enumerate() {
        let _ = t.connect_host(h, 0, edges[i / half], cfg.link_spec());
    }
    for pod in 0..k {
        for e in 0..half {
            for a in 0..half {
                let _ = t.connect_switches(
                    edges[pod * half + e],
                    aggs[pod * half + a],
                    cfg.link_spec(),
                );
            }
        }
    }
    for pod in 0..k {
        for a in 0..half {
            for c in 0..half {
                let _ =
                    t.connect_switches(aggs[pod * half + a], cores[a * half + c], cfg.link_spec());
            }
        }
    }
    cores
}

/// Scale-across: two k-ary fat trees (two sites, each exactly a [`fat_tree`]) whose core
/// switches are joined pairwise by long-haul links (`long_haul`: rate and one-way delay;
/// loss is the caller's, with `Sim::set_link_faults` on those links). Core `i` of site 0
/// is linked to core `i` of site 1, so a flow between sites has `(k/2)^2` equal-cost paths,
/// one per long-haul link, of 7 links (host–edge–agg–core ~ core–agg–edge–host).
///
/// Ids: site 0's hosts, switches and links as [`fat_tree`] numbers them, then site 1's
/// (hosts `k^3/4..`, and so on), then the `(k/2)^2` long-haul links, core `i` of site 0 as
/// end A; [`across_long_haul_links`] gives their ids. Switches carry their site as `plane`.
pub fn across(cfg: &TopologyConfig, k: usize, long_haul: LinkSpec) -> Topology {
    let mut t = Topology::new(cfg.sim.clone());
    let a = add_fat_tree(&mut t, cfg, k, Some(0));
    let b = add_fat_tree(&mut t, cfg, k, Some(1));
    for (&ca, &cb) in a.iter().zip(&b) {
        let _ = t.connect_switches(ca, cb, long_haul);
    }
    t
}

/// Ids of the long-haul links of [`across`] with this `k`.
pub fn across_long_haul_links(k: usize) -> impl Iterator<Item = LinkId> {
    let k = (k & !1).clamp(2, 80);
    let half = k / 2;
    // Per site: host links, edge-agg and agg-core links.
    let per_site = k * half * half + 2 * k * half * half;
    let cores = half * half;
    (2 * per_site..2 * per_site + cores).map(|i| LinkId(i as u32))
}
