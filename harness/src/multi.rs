//! Runs with many hosts and flows: a host can be the client of several servers and the server
//! of several clients at once (incast: N clients → 1 server; permutation: every host both),
//! clients can start together after their connections are up or join later, and the bytes each
//! connection has delivered can be sampled while the simulation runs.

use crate::host::{Client, NodeHost};
use crate::workload::WorkloadSpec;
use ferroce_sim::{Dir, FaultConfig, HostId, Node, Sim};
use ferroce_transport::{ConnId, TransportTotals};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

/// One client → server transfer.
#[derive(Clone, Debug)]
pub struct Flow {
    pub client: HostId,
    pub server: HostId,
    pub workload: WorkloadSpec,
    /// Simulated time at which the client posts its first work requests (its connection is
    /// opened at once, so a start in the future does not include the handshake).
    pub start_at: u64,
}

/// Where a started flow lives: client role `index` of host `client`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowHandle {
    pub client: HostId,
    pub index: usize,
    pub server: HostId,
}

impl FlowHandle {
    pub fn state<'a>(&self, sim: &'a Sim<NodeHost>) -> &'a Client {
        &sim.host(self.client).clients[self.index]
    }
}

/// Sets up every flow: one server role per distinct server host (all flows to one server must
/// run the same workload; they share its memory regions), and one client role per flow.
/// Connections are opened now; work is posted at each flow's `start_at`.
pub fn start_flows(sim: &mut Sim<NodeHost>, flows: &[Flow]) -> Vec<FlowHandle> {
    let now = sim.now();
    let mut by_server: BTreeMap<HostId, Vec<usize>> = BTreeMap::new();
    for (i, f) in flows.iter().enumerate() {
        by_server.entry(f.server).or_default().push(i);
    }
    let mut keys = BTreeMap::new();
    for (server, idxs) in &by_server {
        let spec = &flows[idxs[0]].workload;
        let clients: Vec<[u8; 4]> = idxs.iter().map(|&i| sim.host_ip(flows[i].client)).collect();
        let host = sim.host_mut(*server);
        let k = host.make_server_for(spec, &clients);
        keys.insert(*server, (k, host.server_streams_from()));
        sim.wake(*server);
    }
    let mut handles = Vec::with_capacity(flows.len());
    for f in flows {
        let sip = sim.host_ip(f.server);
        let (k, first) = keys[&f.server];
        let index =
            sim.host_mut(f.client)
                .start_client_to(&f.workload, sip, k, first, now, f.start_at);
        handles.push(FlowHandle {
            client: f.client,
            index,
            server: f.server,
        });
    }
    let mut woken: Vec<HostId> = flows.iter().map(|f| f.client).collect();
    woken.sort();
    woken.dedup();
    for h in woken {
        sim.wake(h);
    }
    handles
}

/// All-to-all among hosts `0..n`: host i runs `w` towards i+1, i+2, … in that order (every
/// host starts on a different peer, as collective libraries schedule them), all at `start_at`.
pub fn all_to_all_flows(n: usize, w: &WorkloadSpec, start_at: u64) -> Vec<Flow> {
    (0..n)
        .flat_map(|i| {
            (1..n).map(move |d| Flow {
                client: HostId(i as u32),
                server: HostId(((i + d) % n) as u32),
                workload: w.clone(),
                start_at,
            })
        })
        .collect()
}

/// Whether every flow has seen all its work requests complete.
pub fn all_done(sim: &Sim<NodeHost>, handles: &[FlowHandle]) -> bool {
    handles.iter().all(|h| h.state(sim).done())
}

/// Runs until every flow is done or `limit` (simulated ns), checking every `check_every` ns
/// (checking between events would cost O(flows) per event). Returns whether all finished.
pub fn run_flows(
    sim: &mut Sim<NodeHost>,
    handles: &[FlowHandle],
    limit: u64,
    check_every: u64,
) -> bool {
    let step = check_every.max(1);
    loop {
        if all_done(sim, handles) {
            return true;
        }
        if sim.now() >= limit || sim.next_event_time().is_none() {
            return all_done(sim, handles);
        }
        let t = (sim.now() + step).min(limit);
        sim.run_until(t);
    }
}

/// Random loss (or any fault) on the uplink of each of these hosts (host → first switch, every
/// NIC port): every packet a host sends crosses exactly one faulty hop.
pub fn set_uplink_faults(sim: &mut Sim<NodeHost>, hosts: &[HostId], f: FaultConfig) {
    for &h in hosts {
        for l in sim.host_links(h) {
            let dir = sim.link_dir_from(l, Node::Host(h)).unwrap_or(Dir::AtoB);
            sim.set_link_faults(l, dir, f);
        }
    }
}

/// Payload bytes each native connection of `host` has received (new data only: duplicates
/// are not counted), with the peer's address. Empty for engines other than the native one.
pub fn rx_bytes_by_conn(host: &NodeHost) -> Vec<(ConnId, Ipv4Addr, u64)> {
    match host.native() {
        Some(ep) => ep
            .connections()
            .map(|c| (c.id, c.peer, c.counters().rx_payload_bytes))
            .collect(),
        None => Vec::new(),
    }
}

/// Sum of every host's engine totals.
pub fn totals(sim: &Sim<NodeHost>) -> TransportTotals {
    let mut t = TransportTotals::default();
    for h in sim.hosts() {
        let x = h.ep.totals();
        t.tx_pkts += x.tx_pkts;
        t.tx_payload_bytes += x.tx_payload_bytes;
        t.retx_pkts += x.retx_pkts;
        t.rx_pkts += x.rx_pkts;
        t.rx_duplicates += x.rx_duplicates;
        t.timeouts += x.timeouts;
        t.nacks_sent += x.nacks_sent;
        t.nacks_received += x.nacks_received;
    }
    t
}

/// Every verification error the hosts saw while running (completions, received data), without
/// the end-of-run memory check (which only makes sense once every flow has completed).
pub fn host_errors(sim: &Sim<NodeHost>) -> Vec<String> {
    let mut errs = Vec::new();
    for (i, h) in sim.hosts().enumerate() {
        for e in &h.errors {
            errs.push(format!("host {i}: {e}"));
        }
    }
    errs
}

/// Every verification error of every host, plus the end-of-run check of server memory.
pub fn all_errors(sim: &Sim<NodeHost>) -> Vec<String> {
    let mut errs = Vec::new();
    for (i, h) in sim.hosts().enumerate() {
        for e in &h.errors {
            errs.push(format!("host {i}: {e}"));
        }
        for e in h.verify_server_writes() {
            errs.push(format!("host {i}: {e}"));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::OpKind;
    use ferroce_sim::topology::{self, TopologyConfig};
    use ferroce_transport::roce::{RoceConfig, RoceEndpoint};

    /// A RoCEv2 all-to-all, one QP per ordered host pair: every host is the client and the
    /// server of every other. With the server streams numbered apart from the client
    /// streams every pair's data arrives; with both numbered 1 (the default) each host's
    /// second role towards a peer fails to create its QP (`StreamExists`) and no pair runs.
    #[test]
    fn rocev2_all_to_all_delivers_every_pair() {
        let n = 4usize;
        let mut sim = topology::star(&TopologyConfig::default(), n).build_with(|_, ip| {
            NodeHost::with_engine(ip, Box::new(RoceEndpoint::new(RoceConfig::new(ip.into()))))
        });
        for i in 0..n as u32 {
            sim.host_mut(HostId(i)).set_server_streams_from(0x100);
        }
        let messages = 6;
        let w = WorkloadSpec {
            streams: 1,
            messages,
            sizes: vec![3000, 5000],
            ops: vec![OpKind::WriteImm, OpKind::Write],
            depth: 2,
            recv_depth: 4,
            seed: 1,
            max_write_slots: 0,
        };
        let flows = all_to_all_flows(n, &w, 0);
        let h = start_flows(&mut sim, &flows);
        assert!(
            run_flows(&mut sim, &h, 5_000_000, 10_000),
            "all-to-all stuck"
        );
        assert_eq!(all_errors(&sim), Vec::<String>::new());
        let imm_per_client = w.consuming(0).len() as u64;
        for i in 0..n as u32 {
            let host = sim.host(HostId(i));
            let sv = host.server().expect("every host serves");
            // Every other host's WRITE_WITH_IMMs arrived here, checked byte by byte.
            assert_eq!(sv.recvs_done, (n as u64 - 1) * imm_per_client, "host {i}");
            for cl in &host.clients {
                assert_eq!(cl.completed_ok(), messages as u64, "host {i} → {}", cl.peer);
            }
        }
    }
}
