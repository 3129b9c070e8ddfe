//! Topologies, routing and ECMP: leaf–spine spreading, per-flow paths, fat tree reachability,
//! planes, rerouting around failures.

mod common;

use common::{Flow, TestHost};
use ferroce_sim::{
    host_ip, nic_port_for, topology, Dir, HostId, LinkId, LinkSpec, Node, PlaneShape, SwitchId,
    SwitchRole, TopologyConfig,
};

#[test]
fn leaf_spine_ecmp_spreads_flows_over_all_spines() {
    let cfg = TopologyConfig::default();
    let (leaves, spines, hpl) = (4usize, 8usize, 4usize);
    let n = leaves * hpl;
    // Every host sends 64 one-packet flows (distinct source ports) to each host on other leaves.
    let mut sim = topology::leaf_spine(&cfg, leaves, spines, hpl).build_with(|id, ip| {
        let mut h = TestHost::new(ip);
        for dst in 0..n as u32 {
            if dst as usize / hpl != id.index() / hpl {
                for f in 0..64u16 {
                    h.add_flow(Flow::new(host_ip(HostId(dst)), 10_000 + f, 1, 64));
                }
            }
        }
        h
    });
    sim.run_until(100_000_000);
    let total_flows = (n * (n - hpl) * 64) as u64;
    let rx: u64 = sim.hosts().map(|h| h.arrivals.len() as u64).sum();
    assert_eq!(rx, total_flows, "everything delivered");
    for leaf in 0..leaves {
        // Uplinks of this leaf: ports hpl.. (after its host ports).
        let mut counts = Vec::new();
        for s in 0..spines {
            let link = sim
                .link_between(
                    Node::Switch(SwitchId(leaf as u32)),
                    Node::Switch(SwitchId((leaves + s) as u32)),
                )
                .unwrap();
            counts.push(sim.stats().link(link, Dir::AtoB).tx_packets);
        }
        let per_leaf: u64 = counts.iter().sum();
        assert_eq!(per_leaf, (hpl * (n - hpl) * 64) as u64);
        let fair = per_leaf as f64 / spines as f64;
        for &c in &counts {
            assert!(
                (c as f64 - fair).abs() < 0.15 * fair,
                "leaf {leaf} uplinks {counts:?}"
            );
        }
    }
    assert_eq!(sim.stats().totals().dropped(), 0);
}

#[test]
fn one_five_tuple_takes_one_path_and_stays_in_order() {
    // Hash collisions on spines oversubscribe some links: give them room so nothing drops.
    let cfg = TopologyConfig {
        switch_buffer_bytes: 100_000_000,
        ..TopologyConfig::default()
    };
    // Host 0 (leaf 0) to host 4 (leaf 1) over 4 spines; 8 flows of 300 packets interleaved.
    let mut sim = topology::leaf_spine(&cfg, 2, 4, 4).build_with(|id, ip| {
        let mut h = TestHost::new(ip);
        if id.0 < 4 {
            for f in 0..8u16 {
                h.add_flow(Flow::new(host_ip(HostId(4 + id.0)), 500 + f, 300, 1024));
            }
        }
        h
    });
    sim.run_until(100_000_000);
    for dst in 4..8u32 {
        let rx = &sim.host(HostId(dst)).arrivals;
        assert_eq!(rx.len(), 8 * 300);
        for f in 0..8u16 {
            let seqs: Vec<u64> = rx
                .iter()
                .filter(|a| a.src_port == 500 + f)
                .map(|a| a.seq)
                .collect();
            assert_eq!(seqs, (0..300).collect::<Vec<u64>>(), "flow {f} in order");
        }
    }
    // A single flow: exactly one uplink carries it, every time.
    let mut sim = topology::leaf_spine(&cfg, 2, 4, 1).build_with(|id, ip| {
        let h = TestHost::new(ip);
        if id.0 == 0 {
            h.with_flow(Flow::new(host_ip(HostId(1)), 4242, 1000, 100))
        } else {
            h
        }
    });
    sim.run_until(10_000_000);
    let used: Vec<u64> = (0..4)
        .map(|s| {
            let l = sim
                .link_between(Node::Switch(SwitchId(0)), Node::Switch(SwitchId(2 + s)))
                .unwrap();
            sim.stats().link(l, Dir::AtoB).tx_packets
        })
        .collect();
    assert_eq!(used.iter().filter(|&&c| c == 1000).count(), 1, "{used:?}");
    assert_eq!(used.iter().filter(|&&c| c == 0).count(), 3, "{used:?}");
}

#[test]
fn fat_tree_8_has_128_hosts_and_all_pairs_connect() {
    let cfg = TopologyConfig::default();
    let topo = topology::fat_tree(&cfg, 8);
    assert_eq!(topo.num_hosts(), 128);
    assert_eq!(topo.num_switches(), 8 * 8 + 16);
    // 128 host links + 8 pods * 16 edge-agg + 8 pods * 16 agg-core.
    assert_eq!(topo.num_links(), 128 + 128 + 128);
    let mut sim = topo.build_with(|id, ip| {
        let mut h = TestHost::new(ip);
        for k in 1..128u32 {
            let dst = HostId((id.0 + k) % 128);
            h.add_flow(Flow::new(host_ip(dst), 7000, 1, 64));
        }
        h
    });
    sim.run_until(10_000_000);
    for h in sim.host_ids() {
        let mut from: Vec<[u8; 4]> = sim.host(h).arrivals.iter().map(|a| a.src_ip).collect();
        from.sort();
        from.dedup();
        assert_eq!(from.len(), 127, "host {h:?} heard from everyone");
        assert!(!from.contains(&host_ip(h)));
    }
    assert_eq!(sim.stats().totals().dropped(), 0);
    // ECMP groups: an edge switch has k/2 = 4 ways up towards another pod, an aggregation
    // switch 4 cores, a core exactly one way down.
    let far = HostId(127);
    let edge0 = SwitchId(0);
    assert_eq!(sim.switch_info(edge0).unwrap().role, SwitchRole::Edge);
    assert_eq!(sim.routes(edge0, far).len(), 4);
    assert_eq!(
        sim.routes(edge0, HostId(1)).len(),
        1,
        "same edge: straight down"
    );
    assert_eq!(
        sim.routes(edge0, HostId(5)).len(),
        4,
        "same pod: via any agg"
    );
    let agg0 = SwitchId(32);
    assert_eq!(sim.switch_info(agg0).unwrap().role, SwitchRole::Aggregation);
    assert_eq!(sim.routes(agg0, far).len(), 4);
    let core0 = SwitchId(64);
    assert_eq!(sim.switch_info(core0).unwrap().role, SwitchRole::Core);
    assert_eq!(sim.routes(core0, far).len(), 1);
}

/// The 1,024-host fabric (k = 16) the scale runs use: its shape, its ECMP fan-out at each
/// layer, and one packet from every host to a host in another pod and back arriving.
#[test]
fn fat_tree_16_has_1024_hosts_320_switches_and_every_host_reaches_another_pod() {
    let cfg = TopologyConfig::default();
    let topo = topology::fat_tree(&cfg, 16);
    assert_eq!(topo.num_hosts(), 1024);
    // 16 pods of 8 edge and 8 aggregation switches, 64 cores.
    assert_eq!(topo.num_switches(), 16 * 16 + 64);
    // 1,024 host links + 16 pods * 64 edge-agg + 16 pods * 64 agg-core.
    assert_eq!(topo.num_links(), 1024 + 1024 + 1024);
    // Host i sends to the host half the fabric away (pod p to pod p + 8), a few flows each
    // on distinct source ports so they spread over the ECMP groups.
    let far = |i: u32| (i + 512) % 1024;
    let mut sim = topo.build_with(|id, ip| {
        let mut h = TestHost::new(ip);
        for sp in 0..4u16 {
            h.add_flow(Flow::new(host_ip(HostId(far(id.0))), 9000 + sp, 2, 512));
        }
        h
    });
    let mut roles = [0usize; 3];
    for s in sim.switch_ids() {
        match sim.switch_info(s).unwrap().role {
            SwitchRole::Edge => roles[0] += 1,
            SwitchRole::Aggregation => roles[1] += 1,
            SwitchRole::Core => roles[2] += 1,
            r => panic!("{r:?} in a fat tree"),
        }
    }
    assert_eq!(roles, [128, 128, 64]);
    let dst = HostId(1023);
    assert_eq!(sim.routes(SwitchId(0), dst).len(), 8, "edge: any of 8 aggs");
    assert_eq!(sim.routes(SwitchId(0), HostId(1)).len(), 1, "same edge");
    assert_eq!(
        sim.routes(SwitchId(128), dst).len(),
        8,
        "agg: any of 8 cores"
    );
    assert_eq!(
        sim.routes(SwitchId(256), dst).len(),
        1,
        "core: one way down"
    );
    sim.run_until(1_000_000);
    for h in sim.host_ids() {
        let a = &sim.host(h).arrivals;
        assert_eq!(
            a.len(),
            8,
            "host {h:?}: 4 flows x 2 packets from its far peer"
        );
        let src = host_ip(HostId(far(h.0)));
        assert!(a.iter().all(|x| x.src_ip == src && x.intact), "host {h:?}");
    }
    assert_eq!(sim.stats().totals().dropped(), 0);
    // Cross-pod traffic crossed the cores: every core link carried some of it.
    let core_links = (2048..3072).filter(|&l| {
        Dir::BOTH
            .iter()
            .any(|&d| sim.stats().link(LinkId(l), d).tx_packets > 0)
    });
    assert!(core_links.count() > 900, "ECMP left many core links unused");
}

#[test]
fn fat_tree_path_lengths_are_2_4_6_hops() {
    let cfg = TopologyConfig::default();
    // Host 0 sends one packet each to host 1 (same edge), 4 (same pod), 16 (other pod).
    let mut sim = topology::fat_tree(&cfg, 8).build_with(|id, ip| {
        let mut h = TestHost::new(ip);
        if id.0 == 0 {
            for dst in [1u32, 4, 16] {
                h.add_flow(Flow::new(host_ip(HostId(dst)), 1, 1, 1000));
            }
        }
        h
    });
    sim.run_until(1_000_000);
    // Per hop 85 ns serialisation (85.28 rounded down at each idle start) + 1000 ns.
    // The three frames leave host 0 back to back, at 85, 170 and 255 ns.
    assert_eq!(sim.host(HostId(1)).arrivals[0].t, 85 + 1000 + 85 + 1000);
    assert_eq!(sim.host(HostId(4)).arrivals[0].t, 170 + 1000 + 3 * 1085);
    assert_eq!(sim.host(HostId(16)).arrivals[0].t, 255 + 1000 + 5 * 1085);
}

#[test]
fn planes_put_port_i_on_plane_i_and_entropy_picks_the_plane() {
    let cfg = TopologyConfig::default();
    let k = 4;
    let mut sim = topology::planes(&cfg, k, 8, PlaneShape::SingleSwitch).build_with(|id, ip| {
        let mut h = TestHost::new(ip);
        if id.0 == 0 {
            for sp in 0..400u16 {
                h.add_flow(Flow::new(host_ip(HostId(1)), 20_000 + sp, 2, 256));
            }
        }
        h
    });
    assert_eq!(sim.host_num_ports(HostId(0)), 4);
    for p in 0..k {
        let l = sim.host_port_link(HostId(0), p).unwrap();
        let (a, b) = sim.link_ends(l).unwrap();
        assert_eq!(a, Node::Host(HostId(0)));
        let Node::Switch(s) = b else { panic!() };
        assert_eq!(sim.switch_info(s).unwrap().plane, Some(p));
        assert!(sim.plane_links(p).contains(&l));
    }
    assert_eq!(sim.plane_links(2).len(), 8);
    // Fail all of plane 2.
    for l in sim.plane_links(2) {
        sim.set_link_up(l, false);
    }
    sim.run_until(10_000_000);
    let rx = &sim.host(HostId(1)).arrivals;
    let src = host_ip(HostId(0));
    let dst = host_ip(HostId(1));
    let on_plane = |sp: u16| nic_port_for(src, dst, sp, ferroce_sim::ROCEV2_PORT, k);
    let mut per_plane = [0u64; 4];
    for sp in 0..400u16 {
        per_plane[on_plane(20_000 + sp)] += 2;
    }
    for a in rx {
        assert_eq!(
            a.port,
            on_plane(a.src_port),
            "arrives on the plane it was sent on"
        );
        assert_ne!(a.port, 2);
    }
    assert_eq!(rx.len() as u64, 800 - per_plane[2]);
    let plane2_up = sim.host_port_link(HostId(0), 2).unwrap();
    assert_eq!(
        sim.stats().link(plane2_up, Dir::AtoB).dropped_link_down,
        per_plane[2]
    );
    for (p, &c) in per_plane.iter().enumerate() {
        assert!((150..250).contains(&c), "plane {p}: {per_plane:?}");
    }
}

#[test]
fn planes_of_leaf_spines_connect_everyone() {
    let cfg = TopologyConfig::default();
    let shape = PlaneShape::LeafSpine {
        leaves: 4,
        spines: 2,
    };
    let mut sim = topology::planes(&cfg, 2, 16, shape).build_with(|id, ip| {
        let mut h = TestHost::new(ip);
        for k in 1..16u32 {
            for sp in 0..4u16 {
                h.add_flow(Flow::new(host_ip(HostId((id.0 + k) % 16)), 100 + sp, 1, 64));
            }
        }
        h
    });
    assert_eq!(sim.num_switches(), 2 * 6);
    sim.run_until(10_000_000);
    for h in sim.host_ids() {
        let rx = &sim.host(h).arrivals;
        assert_eq!(rx.len(), 15 * 4);
        assert!(rx.iter().any(|a| a.port == 0) && rx.iter().any(|a| a.port == 1));
    }
}

fn two_leaf_sim(reroute: bool) -> ferroce_sim::Sim<TestHost> {
    let cfg = TopologyConfig {
        sim: ferroce_sim::SimConfig {
            reroute_around_down_links: reroute,
            ..Default::default()
        },
        ..TopologyConfig::default()
    };
    topology::leaf_spine(&cfg, 2, 4, 1).build_with(|id, ip| {
        let mut h = TestHost::new(ip);
        if id.0 == 0 {
            for sp in 0..200u16 {
                h.add_flow(Flow::new(host_ip(HostId(1)), 1000 + sp, 5, 512));
            }
            h.start_at = 10_000;
        }
        h
    })
}

#[test]
fn routing_reconverges_around_a_dead_spine_link() {
    // The spine 0 -> leaf 1 link dies: leaf 0 must stop using spine 0 for leaf 1's hosts.
    let mut sim = two_leaf_sim(true);
    let l = sim
        .link_between(Node::Switch(SwitchId(1)), Node::Switch(SwitchId(2)))
        .unwrap();
    sim.set_link_up(l, false);
    assert!(!sim.link_is_up(l));
    assert_eq!(sim.routes(SwitchId(0), HostId(1)).len(), 3);
    sim.run_until(10_000_000);
    assert_eq!(sim.host(HostId(1)).arrivals.len(), 1000);
    assert_eq!(sim.stats().totals().dropped(), 0);
}

#[test]
fn without_rerouting_a_dead_link_is_a_blackhole() {
    let mut sim = two_leaf_sim(false);
    let l = sim
        .link_between(Node::Switch(SwitchId(1)), Node::Switch(SwitchId(2)))
        .unwrap();
    sim.set_link_up(l, false);
    assert_eq!(sim.routes(SwitchId(0), HostId(1)).len(), 4);
    sim.run_until(10_000_000);
    let got = sim.host(HostId(1)).arrivals.len() as u64;
    // Flows hashed through spine 0 are lost at spine 0 (whose only way to leaf 1 is dead).
    let lost = sim.stats().link(l, Dir::BtoA).dropped_link_down;
    assert!(lost > 100 && lost < 500, "{lost}");
    assert_eq!(got + lost, 1000);
    // Bring it back: traffic flows again.
    sim.set_link_up(l, true);
    sim.host_mut(HostId(0))
        .add_flow(Flow::new(host_ip(HostId(1)), 1, 100, 512));
    sim.wake(HostId(0));
    sim.run_until(20_000_000);
    assert_eq!(sim.host(HostId(1)).arrivals.len() as u64, got + 100);
}

#[test]
fn link_queries() {
    let cfg = TopologyConfig::default();
    let sim = topology::leaf_spine(&cfg, 2, 3, 2).build_with(|_, ip| TestHost::new(ip));
    assert_eq!(sim.num_hosts(), 4);
    assert_eq!(sim.num_links(), 4 + 6);
    assert_eq!(sim.host_links(HostId(3)), vec![LinkId(3)]);
    assert_eq!(sim.switch_links(SwitchId(0)).len(), 2 + 3);
    assert_eq!(sim.switch_links(SwitchId(2)).len(), 2);
    assert_eq!(
        sim.link_between(Node::Host(HostId(2)), Node::Switch(SwitchId(1))),
        Some(LinkId(2))
    );
    assert_eq!(
        sim.link_dir_from(LinkId(2), Node::Switch(SwitchId(1))),
        Some(Dir::BtoA)
    );
    assert_eq!(
        sim.link_between(Node::Host(HostId(0)), Node::Switch(SwitchId(1))),
        None
    );
    assert_eq!(sim.host_by_ip(host_ip(HostId(3))), Some(HostId(3)));
    assert_eq!(sim.host_by_ip(host_ip(HostId(4))), None);
    assert_eq!(
        sim.switch_info(SwitchId(4)).unwrap().role,
        SwitchRole::Spine
    );
    assert_eq!(sim.switch_info(SwitchId(5)), None);
}

#[test]
fn fat_tree_layers_hash_independently_and_use_every_core() {
    // If edge and aggregation switches hashed alike, an edge's choice of aggregation switch j
    // would fix the core too and only k/2 of the (k/2)^2 cores would carry traffic.
    let cfg = TopologyConfig {
        switch_buffer_bytes: 100_000_000,
        ..TopologyConfig::default()
    };
    let mut sim = topology::fat_tree(&cfg, 8).build_with(|id, ip| {
        let mut h = TestHost::new(ip);
        h.record = false;
        // Each host: 64 one-packet flows to the host with the same index in the next pod.
        let dst = HostId((id.0 + 16) % 128);
        for f in 0..64u16 {
            h.add_flow(Flow::new(host_ip(dst), 30_000 + f, 1, 64));
        }
        h
    });
    sim.run_until(10_000_000);
    let total = 128 * 64;
    let rx: u64 = sim.hosts().map(|h| h.received).sum();
    assert_eq!(rx, total);
    // Packets entering each core (from aggregation, direction A->B of agg-core links).
    let mut per_core = Vec::new();
    for s in sim.switch_ids() {
        if sim.switch_info(s).unwrap().role != SwitchRole::Core {
            continue;
        }
        let n: u64 = sim
            .switch_links(s)
            .iter()
            .map(|&l| sim.stats().link(l, Dir::AtoB).tx_packets)
            .sum();
        per_core.push(n);
    }
    assert_eq!(per_core.len(), 16);
    assert_eq!(per_core.iter().sum::<u64>(), total);
    let fair = total as f64 / 16.0;
    for &c in &per_core {
        assert!((c as f64 - fair).abs() < 0.2 * fair, "{per_core:?}");
    }
}

#[test]
fn across_joins_two_fat_trees_core_to_core_over_long_haul_links() {
    let cfg = TopologyConfig::default();
    let long = LinkSpec {
        rate_bps: 100_000_000_000,
        delay: 500_000,
    };
    let topo = topology::across(&cfg, 4, long);
    // Per site: 16 hosts, 8 edge + 8 agg + 4 core, 16 + 16 + 16 links; 4 long-haul links.
    assert_eq!(topo.num_hosts(), 32);
    assert_eq!(topo.num_switches(), 40);
    assert_eq!(topo.num_links(), 2 * 48 + 4);
    // Host 0 sends one packet each to host 1 (same edge), 16 (other site, first pod) and
    // 31 (other site, last pod), on 16 source ports for the cross-site ones.
    let mut sim = topo.build_with(|id, ip| {
        let mut h = TestHost::new(ip);
        if id.0 == 0 {
            h.add_flow(Flow::new(host_ip(HostId(1)), 1, 1, 1000));
            for dst in [16u32, 31] {
                for sp in 0..16u16 {
                    h.add_flow(Flow::new(host_ip(HostId(dst)), 100 + sp, 1, 1000));
                }
            }
        }
        h
    });
    let long_links: Vec<LinkId> = topology::across_long_haul_links(4).collect();
    assert_eq!(long_links.len(), 4);
    for (i, &l) in long_links.iter().enumerate() {
        let (a, b) = sim.link_ends(l).unwrap();
        // Core i of site 0 (switches 16..20) to core i of site 1 (switches 36..40).
        assert_eq!(a, Node::Switch(SwitchId(16 + i as u32)));
        assert_eq!(b, Node::Switch(SwitchId(36 + i as u32)));
        for n in [a, b] {
            let Node::Switch(s) = n else { unreachable!() };
            let info = sim.switch_info(s).unwrap();
            assert_eq!(info.role, SwitchRole::Core);
            assert_eq!(info.plane, Some(s.0 as usize / 20));
        }
    }
    sim.run_until(10_000_000);
    assert_eq!(sim.stats().totals().dropped(), 0);
    // Same edge: 2 hops of 85 ns + 1 µs. Across: 7 hops, 6 of 1 µs and the long haul.
    assert_eq!(sim.host(HostId(1)).arrivals[0].t, 85 + 1000 + 85 + 1000);
    for dst in [16u32, 31] {
        let first = sim.host(HostId(dst)).arrivals.iter().map(|a| a.t).min();
        // The 33 frames leave host 0 back to back, 85.28 ns each (rounded down only when the
        // port goes idle); the first to `dst` is the 2nd (done at 170) or the 18th (1535).
        let sent = if dst == 16 { 170 } else { 1535 };
        assert_eq!(first, Some(sent + 6 * 1085 + 500_000), "to {dst}");
        assert_eq!(sim.host(HostId(dst)).arrivals.len(), 16);
    }
    // Every long-haul link carried some of the 32 cross-site packets (ECMP over 4 cores).
    for &l in &long_links {
        assert!(sim.stats().link(l, Dir::AtoB).tx_packets > 0, "{l:?}");
    }
    // Nothing crosses a long-haul link within a site.
    assert_eq!(
        long_links
            .iter()
            .map(|&l| sim.stats().link(l, Dir::AtoB).tx_packets)
            .sum::<u64>(),
        32
    );
}
