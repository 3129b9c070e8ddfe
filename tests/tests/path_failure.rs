//! A connection survives the failure of all but one path: links die mid-transfer as black
//! holes (no routing reconvergence), the transport notices, re-routes its paths onto new UDP
//! source ports until they find the live part of the fabric, and the application sees only
//! successful, verified completions.

use ferroce_harness::scenario::report;
use ferroce_harness::*;
use ferroce_sim::topology::{self, PlaneShape, TopologyConfig};
use ferroce_sim::{HostId, Node, Sim, SwitchRole};
use ferroce_transport::EndpointConfig;

fn start(sim: &mut Sim<NodeHost>, c: HostId, s: HostId, w: &WorkloadSpec) {
    let keys = sim.host_mut(s).make_server(w);
    let sip = sim.host_ip(s);
    let now = sim.now();
    sim.host_mut(c).start_client(w, sip, keys, now);
    sim.wake(c);
}

fn finish(sim: &mut Sim<NodeHost>, c: HostId, s: HostId) -> RunReport {
    let done = sim.run_while(30_000_000_000, |sim| !sim.host(c).client_done());
    let t = sim.now() + 200_000;
    sim.run_until(t);
    report(sim, c, s, done)
}

// checks: [PATH-3] [PATH-7]
#[test]
fn leaf_spine_survives_all_spines_but_one_blackholed() {
    let run = TwoHostRun {
        fabric: Fabric::LeafSpine { spines: 4 },
        workload: WorkloadSpec::bulk_write(4, 200, 65_536),
        seed: 5,
        ..TwoHostRun::default()
    };
    let (mut sim, c, s) = run.build();
    sim.set_reroute_around_down_links(false);
    start(&mut sim, c, s, &run.workload);
    sim.run_until(300_000); // traffic on all paths

    let spines: Vec<_> = sim
        .switch_ids()
        .filter(|sw| {
            sim.switch_info(*sw)
                .is_some_and(|i| i.role == SwitchRole::Spine)
        })
        .collect();
    assert_eq!(spines.len(), 4);
    for sw in &spines[1..] {
        for l in sim.switch_links(*sw) {
            sim.set_link_up(l, false);
        }
    }
    let r = finish(&mut sim, c, s);
    assert!(
        r.errors.is_empty(),
        "{:?}",
        &r.errors[..r.errors.len().min(8)]
    );
    assert!(r.completed);
    let failures: u64 = r.paths.iter().map(|p| p.failures).sum();
    let reroutes: u64 = r.paths.iter().map(|p| p.reroutes).sum();
    assert!(failures > 0 && reroutes > 0, "{:?}", r.paths);
    assert!(sim.stats().totals().dropped_link_down > 0);
    // Every path ends up re-routed through the surviving spine: probing goes on after the
    // transfer (one probe per millisecond, each on a new source port, about 1 in 16 of which
    // finds a live route in both directions).
    let t = sim.now() + 200_000_000;
    sim.run_until(t);
    let conn = sim.host(c).native().unwrap().connections().next().unwrap();
    assert!(
        conn.paths()
            .iter()
            .all(|p| p.state == ferroce_transport::PathState::Good),
        "{:?}",
        conn.paths().iter().map(|p| p.state).collect::<Vec<_>>()
    );
    eprintln!(
        "goodput {:.1} Gb/s, failures {failures}, reroutes {reroutes}",
        r.goodput_gbps
    );
}

#[test]
/// The NIC hashes the 5-tuple onto its ports (bonding): re-routing by source port is what
/// moves a path to a live plane.
fn four_planes_survive_three_plane_failures() {
    let cfg = TopologyConfig::default().with_seed(3);
    let t = topology::planes(&cfg, 4, 2, PlaneShape::SingleSwitch);
    let mut sim = t.build_with(|id, ip| {
        NodeHost::new(
            ip,
            EndpointConfig {
                seed: 100 + id.0 as u64,
                ..EndpointConfig::default()
            },
        )
    });
    sim.set_reroute_around_down_links(false);
    let (c, s) = (HostId(0), HostId(1));
    let w = WorkloadSpec::default();
    let w = WorkloadSpec { messages: 200, ..w };
    start(&mut sim, c, s, &w);
    sim.run_until(200_000);
    for plane in 1..4 {
        for l in sim.plane_links(plane) {
            sim.set_link_up(l, false);
        }
    }
    let r = finish(&mut sim, c, s);
    assert!(
        r.errors.is_empty(),
        "{:?}",
        &r.errors[..r.errors.len().min(8)]
    );
    let failures: u64 = r.paths.iter().map(|p| p.failures).sum();
    assert!(failures > 0, "{:?}", r.paths);
    // Only plane 0 is left: every path's final port must map to it, in both directions.
    let conn = sim.host(c).native().unwrap().connections().next().unwrap();
    let (cip, sip) = (sim.host_ip(c), sim.host_ip(s));
    for p in conn.paths() {
        if p.state == ferroce_transport::PathState::Good {
            assert_eq!(ferroce_sim::nic_port_for(cip, sip, p.entropy, 4792, 4), 0);
        }
    }
    let _ = Node::Host(c);
}

#[test]
fn four_planes_survive_three_plane_failures_port_aware() {
    let cfg = TopologyConfig::default().with_seed(3);
    let t = topology::planes(&cfg, 4, 2, PlaneShape::SingleSwitch);
    let mut sim = t.build_with(|id, ip| {
        NodeHost::new(
            ip,
            EndpointConfig {
                seed: 100 + id.0 as u64,
                nic_ports: 4,
                line_rate_mbps: 400_000,
                ..EndpointConfig::default()
            },
        )
    });
    sim.set_reroute_around_down_links(false);
    let (c, s) = (HostId(0), HostId(1));
    let w = WorkloadSpec::default();
    let w = WorkloadSpec { messages: 200, ..w };
    start(&mut sim, c, s, &w);
    sim.run_until(200_000);
    for plane in 1..4 {
        for l in sim.plane_links(plane) {
            sim.set_link_up(l, false);
        }
    }
    let r = finish(&mut sim, c, s);
    assert!(
        r.errors.is_empty(),
        "{:?}",
        &r.errors[..r.errors.len().min(8)]
    );
    let failures: u64 = r.paths.iter().map(|p| p.failures).sum();
    assert!(failures > 0, "{:?}", r.paths);
    // The transport owns one NIC port per plane: paths that lost their plane moved on (a
    // path that carried nothing after the failure has had no reason to notice it).
    let conn = sim.host(c).native().unwrap().connections().next().unwrap();
    let moved = conn
        .paths()
        .iter()
        .filter(|p| p.plane != p.home_plane)
        .count();
    assert!(
        moved > 0,
        "{:?}",
        conn.paths()
            .iter()
            .map(|p| (p.plane, p.state))
            .collect::<Vec<_>>()
    );
}

/// Plane 3 of four fails at 200 µs for `outage` ns while a long transfer runs; returns how
/// long after its return every path was home again (checked every 10 µs) and the
/// connection's smallest path RTT. The transfer must outlast the check and then complete.
fn home_after_outage(outage: u64, messages: u32) -> (u64, u64) {
    let cfg = TopologyConfig::default().with_seed(5);
    let t = topology::planes(&cfg, 4, 2, PlaneShape::SingleSwitch);
    let mut sim = t.build_with(|id, ip| {
        NodeHost::new(
            ip,
            EndpointConfig {
                seed: 300 + id.0 as u64,
                nic_ports: 4,
                line_rate_mbps: 400_000,
                ..EndpointConfig::default()
            },
        )
    });
    sim.set_reroute_around_down_links(false);
    let (c, s) = (HostId(0), HostId(1));
    let w = WorkloadSpec {
        messages,
        ..WorkloadSpec::default()
    };
    start(&mut sim, c, s, &w);
    let (fail_at, back_at) = (200_000, 200_000 + outage);
    sim.run_until(fail_at);
    let links = sim.plane_links(3);
    for &l in &links {
        sim.set_link_up(l, false);
    }
    sim.run_until(back_at);
    let away = |sim: &Sim<NodeHost>| {
        let conn = sim.host(c).native().unwrap().connections().next().unwrap();
        conn.paths()
            .iter()
            .filter(|p| p.plane != p.home_plane)
            .count()
    };
    assert!(away(&sim) > 0, "no path left the failed plane");
    for &l in &links {
        sim.set_link_up(l, true);
    }
    let mut home_at = None;
    while sim.now() < back_at + 2_000_000 {
        let t = sim.now() + 10_000;
        sim.run_until(t);
        if away(&sim) == 0 {
            home_at = Some(sim.now());
            break;
        }
    }
    assert!(
        !sim.host(c).client_done(),
        "the transfer ended before the check"
    );
    let home_at = home_at.expect("paths never came home");
    let conn = sim.host(c).native().unwrap().connections().next().unwrap();
    let rtt = conn.paths().iter().map(|p| p.min_rtt_ns).min().unwrap();
    let r = finish(&mut sim, c, s);
    assert!(
        r.errors.is_empty(),
        "{:?}",
        &r.errors[..r.errors.len().min(8)]
    );
    (home_at - back_at, rtt)
}

/// A plane that fails and comes back is taken up again soon: the paths that left it probe
/// their home plane with a backing-off timer (first after `probe_interval` / 32, at most 4
/// base RTTs apart while the transfer runs), so after a 600 µs outage they are all home
/// within one `probe_interval` (1 ms) of its return (30 µs here; 650 µs before the cap and
/// the Probing PROBE's own plane; with a fixed 1 ms home-probe period, 1620 µs).
#[test]
fn paths_return_to_a_plane_soon_after_it_comes_back() {
    let (home, _) = home_after_outage(600_000, 20_000);
    eprintln!("all paths home {} us after the plane returned", home / 1000);
    assert!(
        home < 1_000_000,
        "home {} us after the plane returned",
        home / 1000
    );
}

/// However long the outage, a busy connection probes home at least every 4 base RTTs
/// (spec/transport.md §4.6): after 3 ms down (the back-off alone has reached 1 ms by then)
/// every path is home within a few RTTs of the plane's return, plus the 10 µs of the check.
/// It also needs a Probing path's PROBE to leave on the path's own plane: sent on the lowest
/// free port (the dead plane's, which drains into nothing) it went unanswered, and the path
/// stayed Probing on a live plane until its next re-route, 1 ms later (220 µs after return).
// checks: [PATH-9] [PATH-10]
#[test]
fn paths_return_within_a_few_rtts_after_a_long_outage() {
    let (home, rtt) = home_after_outage(3_000_000, 100_000);
    eprintln!(
        "all paths home {} us after the plane returned (base RTT {} ns)",
        home / 1000,
        rtt
    );
    assert!(
        home <= 6 * rtt + 10_000,
        "home {} us after the plane returned, base RTT {rtt} ns",
        home / 1000
    );
}
