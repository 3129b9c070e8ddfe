//! Switch queues: tail drop, ECN marking threshold, max occupancy.

mod common;

use common::{Flow, TestHost};
use ferroce_sim::{host_ip, topology, Ecn, HostId, Sim, SwitchId, TopologyConfig};

const PKT: u64 = 4096 + 46;

/// `senders` hosts each blast `per_sender` packets at line rate into host 0 of a star.
fn incast(senders: u32, per_sender: u64, buffer: u64, ecn_k: u64, ect: bool) -> Sim<TestHost> {
    let cfg = TopologyConfig {
        switch_buffer_bytes: buffer,
        ecn_threshold_bytes: ecn_k,
        ..TopologyConfig::default()
    };
    let mut sim = topology::star(&cfg, senders as usize + 1).build_with(|id, ip| {
        let h = TestHost::new(ip);
        if id.0 == 0 {
            return h;
        }
        let f = Flow::new(host_ip(HostId(0)), 3000 + id.0 as u16, per_sender, 4096);
        h.with_flow(if ect { f.ect() } else { f })
    });
    sim.run_until(50_000_000);
    sim
}

#[test]
fn incast_overflows_a_small_buffer_and_counts_drops() {
    let cap = 20 * PKT;
    let sim = incast(8, 50, cap, 5 * PKT, true);
    let sent: u64 = sim.hosts().map(|h| h.sent).sum();
    assert_eq!(sent, 400);
    let port = sim.stats().switch_port(SwitchId(0), 0); // port 0 faces host 0
    assert!(port.dropped_queue_full > 0, "{port:?}");
    assert!(port.max_queue_bytes <= cap);
    assert!(port.max_queue_bytes > cap - PKT, "the queue did fill up");
    assert_eq!(sim.stats().max_queue_bytes(), port.max_queue_bytes);
    // Conservation: every packet is either delivered or tail-dropped.
    let rx = sim.host(HostId(0)).arrivals.len() as u64;
    assert_eq!(rx + port.dropped_queue_full, sent);
    assert_eq!(rx, port.enqueued);
    assert_eq!(sim.stats().totals().dropped(), port.dropped_queue_full);
    // Marks were made and counted; the receiver sees exactly those.
    let ce = sim
        .host(HostId(0))
        .arrivals
        .iter()
        .filter(|a| a.ecn == Ecn::Ce)
        .count() as u64;
    assert!(ce > 0);
    assert_eq!(ce, port.ecn_marked);
    assert_eq!(sim.stats().totals().ecn_marked_queue, ce);
}

#[test]
fn ecn_marks_appear_above_the_threshold_and_not_below() {
    // Big buffer, no marking: find how deep the queue gets.
    let cap = 1_000 * PKT;
    let sim = incast(3, 40, cap, u64::MAX, true);
    let depth = sim.stats().max_queue_bytes();
    assert_eq!(sim.stats().switch_port(SwitchId(0), 0).ecn_marked, 0);
    assert!(depth > 10 * PKT, "3:1 incast builds a queue ({depth})");
    // Threshold at the maximum depth: the queue never holds *more* than K when a packet
    // arrives, so nothing is marked.
    let sim = incast(3, 40, cap, depth, true);
    assert_eq!(sim.stats().switch_port(SwitchId(0), 0).ecn_marked, 0);
    // A threshold a little below: some packets, and only late ones, are marked.
    let sim = incast(3, 40, cap, depth - 2 * PKT, true);
    let marked = sim.stats().switch_port(SwitchId(0), 0).ecn_marked;
    assert!(marked > 0 && marked < 10, "{marked}");
    let rx = &sim.host(HostId(0)).arrivals;
    let first_ce = rx.iter().position(|a| a.ecn == Ecn::Ce).unwrap();
    assert!(first_ce > rx.len() / 2, "marks only once the queue is deep");
    // Same queue, but packets are not ECN-capable: never marked.
    let sim = incast(3, 40, cap, 0, false);
    assert_eq!(sim.stats().switch_port(SwitchId(0), 0).ecn_marked, 0);
    assert!(sim
        .host(HostId(0))
        .arrivals
        .iter()
        .all(|a| a.ecn == Ecn::NotEct));
}

#[test]
fn threshold_zero_marks_everything_that_queues_behind_another() {
    let sim = incast(2, 20, 1_000 * PKT, 0, true);
    let port = sim.stats().switch_port(SwitchId(0), 0);
    // Only packets that find the port empty escape; with two senders nearly all queue.
    assert!(port.ecn_marked >= 30, "{port:?}");
    assert!(port.ecn_marked < port.enqueued);
}

#[test]
fn queue_capacity_can_be_changed_at_run_time() {
    let cfg = TopologyConfig::default();
    let mut sim = topology::star(&cfg, 3).build_with(|id, ip| {
        let h = TestHost::new(ip);
        if id.0 == 0 {
            h
        } else {
            h.with_flow(Flow::new(host_ip(HostId(0)), id.0 as u16, 200, 4096))
        }
    });
    sim.set_switch_queue(SwitchId(0), 5 * PKT, u64::MAX);
    sim.run_until(50_000_000);
    let port = sim.stats().switch_port(SwitchId(0), 0);
    assert!(port.max_queue_bytes <= 5 * PKT);
    assert!(port.dropped_queue_full > 0);
}
