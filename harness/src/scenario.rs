//! Ready-made runs: two hosts moving a verified workload over a simulated fabric.

use crate::host::NodeHost;
use crate::workload::WorkloadSpec;
use ferroce_sim::topology::{self, TopologyConfig};
use ferroce_sim::{Dir, FaultConfig, HostId, Sim};
use ferroce_transport::{ConnCounters, EndpointConfig, PathCounters};

/// Fabric shapes for two-host runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fabric {
    /// One cable between the two hosts.
    BackToBack,
    /// Two leaves, `spines` spines, one host per leaf: paths spread over the spines by ECMP.
    LeafSpine { spines: usize },
}

/// Where random loss is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossPlacement {
    /// Each host's uplink (host → first switch), so every data packet and every ACK crosses
    /// exactly one lossy hop.
    HostUplinks,
    /// Every link, both directions.
    Everywhere,
}

#[derive(Clone, Debug)]
pub struct TwoHostRun {
    pub fabric: Fabric,
    pub topo: TopologyConfig,
    pub endpoint: EndpointConfig,
    pub workload: WorkloadSpec,
    pub faults: FaultConfig,
    pub placement: LossPlacement,
    pub seed: u64,
    /// Simulated time limit (ns).
    pub limit_ns: u64,
}

impl Default for TwoHostRun {
    fn default() -> Self {
        TwoHostRun {
            fabric: Fabric::LeafSpine { spines: 8 },
            topo: TopologyConfig::default(),
            endpoint: EndpointConfig::default(),
            workload: WorkloadSpec::default(),
            faults: FaultConfig::NONE,
            placement: LossPlacement::HostUplinks,
            seed: 1,
            limit_ns: 2_000_000_000,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct RunReport {
    pub completed: bool,
    /// Simulated time from the first work request to the last completion (ns).
    pub elapsed_ns: u64,
    pub bytes: u64,
    pub goodput_gbps: f64,
    pub errors: Vec<String>,
    pub client: ConnCounters,
    pub server: ConnCounters,
    pub paths: Vec<PathCounters>,
    pub latencies_ns: Vec<u64>,
    pub fabric_drops: u64,
    pub events: u64,
}

pub const CLIENT: HostId = HostId(0);

impl TwoHostRun {
    /// Build the fabric with the client on host 0 and the server on the last host.
    pub fn build(&self) -> (Sim<NodeHost>, HostId, HostId) {
        let topo = self.topo.clone().with_seed(self.seed);
        let t = match self.fabric {
            Fabric::BackToBack => topology::back_to_back(&topo),
            Fabric::LeafSpine { spines } => topology::leaf_spine(&topo, 2, spines, 1),
        };
        let mut ep = self.endpoint.clone();
        let seed = self.seed;
        let mut sim = t.build_with(|id, ip| {
            ep.seed = seed ^ (id.0 as u64 + 1).wrapping_mul(0x9e37_79b9);
            NodeHost::new(ip, ep.clone())
        });
        let server = HostId(sim.num_hosts() as u32 - 1);
        match self.placement {
            LossPlacement::Everywhere => sim.set_all_link_faults(self.faults),
            LossPlacement::HostUplinks => {
                for h in [CLIENT, server] {
                    for l in sim.host_links(h) {
                        let dir = sim
                            .link_dir_from(l, ferroce_sim::Node::Host(h))
                            .unwrap_or(Dir::AtoB);
                        sim.set_link_faults(l, dir, self.faults);
                    }
                }
            }
        }
        (sim, CLIENT, server)
    }

    /// Run the workload to completion (or the time limit) and verify every byte.
    pub fn run(&self) -> RunReport {
        let (mut sim, c, s) = self.build();
        let cip = sim.host_ip(c);
        let keys = sim.host_mut(s).make_server_for(&self.workload, &[cip]);
        let sip = sim.host_ip(s);
        let now = sim.now();
        sim.host_mut(c).start_client(&self.workload, sip, keys, now);
        sim.wake(c);
        let completed = sim.run_while(self.limit_ns, |sim| !sim.host(c).client_done());
        // Let the last ACKs drain so counters settle (and nothing is left half-done).
        let settle = sim.now() + 200_000;
        sim.run_until(settle);
        report(&sim, c, s, completed)
    }
}

pub fn report(sim: &Sim<NodeHost>, c: HostId, s: HostId, completed: bool) -> RunReport {
    let ch = sim.host(c);
    let sh = sim.host(s);
    let mut errors: Vec<String> = ch.errors.iter().chain(sh.errors.iter()).cloned().collect();
    errors.extend(sh.verify_server_writes());
    let cl = ch.client();
    let (bytes, elapsed, lat) = cl
        .map(|cl| {
            let end = cl.finished_at.unwrap_or(sim.now());
            (
                cl.bytes_done,
                end.saturating_sub(cl.started_at),
                cl.latencies.clone(),
            )
        })
        .unwrap_or((0, 0, Vec::new()));
    if !completed {
        errors.push(format!(
            "workload did not complete within the time limit ({} ns)",
            sim.now()
        ));
    }
    let conn_of = |h: &NodeHost| {
        h.native().and_then(|ep| ep.connections().next()).map(|c| {
            (
                c.counters(),
                c.paths().iter().map(|p| p.counters()).collect::<Vec<_>>(),
            )
        })
    };
    let (client, paths) = conn_of(ch).unwrap_or_default();
    let server = conn_of(sh).map(|x| x.0).unwrap_or_default();
    let t = sim.stats().totals();
    let fabric_drops = t.dropped_random_loss
        + t.dropped_burst_loss
        + t.dropped_link_down
        + t.dropped_queue_full
        + t.dropped_no_route;
    RunReport {
        completed,
        elapsed_ns: elapsed,
        bytes,
        goodput_gbps: if elapsed > 0 {
            bytes as f64 * 8.0 / elapsed as f64
        } else {
            0.0
        },
        errors,
        client,
        server,
        paths,
        latencies_ns: lat,
        fabric_drops,
        events: sim.events_processed(),
    }
}
