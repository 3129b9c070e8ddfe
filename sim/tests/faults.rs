//! Fault injection: loss, Gilbert–Elliott bursts, duplication, corruption, reordering, random
//! ECN marks, link down/up.

mod common;

use common::{Arrival, Flow, TestHost};
use ferroce_sim::{
    host_ip, topology, Dir, Ecn, FaultConfig, GilbertElliott, HostId, LinkId, Sim, TopologyConfig,
};

/// Host 0 sends `n` packets of `payload` bytes to host 1 over one link with `f` on A->B.
fn one_link(n: u64, payload: usize, f: FaultConfig, seed: u64) -> Sim<TestHost> {
    one_link_flows(vec![Flow::new(host_ip(HostId(1)), 1, n, payload)], f, seed)
}

fn one_link_flows(flows: Vec<Flow>, f: FaultConfig, seed: u64) -> Sim<TestHost> {
    let cfg = TopologyConfig::default().with_seed(seed);
    let mut sim = topology::back_to_back(&cfg).build_with(|id, ip| {
        let mut h = TestHost::new(ip);
        if id.0 == 0 {
            for fl in &flows {
                h.add_flow(fl.clone());
            }
        }
        h
    });
    sim.set_link_faults(LinkId(0), Dir::AtoB, f);
    sim.run_until(u64::MAX / 4);
    sim
}

fn rx(sim: &Sim<TestHost>) -> &[Arrival] {
    &sim.host(HostId(1)).arrivals
}

#[test]
fn random_loss_rate_matches_configuration() {
    let n = 100_000;
    for p in [0.001, 0.01, 0.05, 0.2] {
        let sim = one_link(n, 64, FaultConfig::loss(p), 11);
        let st = sim.stats().link(LinkId(0), Dir::AtoB);
        assert_eq!(st.tx_packets, n);
        let measured = st.dropped_random_loss as f64 / n as f64;
        let sigma = (p * (1.0 - p) / n as f64).sqrt();
        assert!(
            (measured - p).abs() < 4.0 * sigma,
            "p {p} measured {measured}"
        );
        assert_eq!(rx(&sim).len() as u64, n - st.dropped_random_loss);
        assert_eq!(st.delivered, rx(&sim).len() as u64);
        // The other direction is clean.
        assert_eq!(sim.stats().link(LinkId(0), Dir::BtoA).dropped(), 0);
    }
}

/// Lengths of the runs of consecutive missing sequence numbers in `0..n`.
fn loss_runs(arrivals: &[Arrival], n: u64) -> Vec<u64> {
    let mut got = vec![false; n as usize];
    for a in arrivals {
        got[a.seq as usize] = true;
    }
    let mut runs = Vec::new();
    let mut cur = 0u64;
    for g in got {
        if g {
            if cur > 0 {
                runs.push(cur);
            }
            cur = 0;
        } else {
            cur += 1;
        }
    }
    if cur > 0 {
        runs.push(cur);
    }
    runs
}

#[test]
fn gilbert_elliott_losses_come_in_bursts() {
    let n = 200_000;
    let ge = GilbertElliott::bursts(0.01, 0.25);
    let f = FaultConfig {
        burst: Some(ge),
        ..FaultConfig::NONE
    };
    let sim = one_link(n, 64, f, 5);
    let st = sim.stats().link(LinkId(0), Dir::AtoB);
    let rate = st.dropped_burst_loss as f64 / n as f64;
    assert!((rate - ge.mean_loss()).abs() < 0.006, "rate {rate}");
    assert_eq!(st.dropped_random_loss, 0);
    let runs = loss_runs(rx(&sim), n);
    let mean = runs.iter().sum::<u64>() as f64 / runs.len() as f64;
    assert!((mean - 1.0 / 0.25).abs() < 0.4, "mean burst {mean}");

    // Independent loss at the same rate gives runs of about one packet.
    let sim = one_link(n, 64, FaultConfig::loss(ge.mean_loss()), 5);
    let runs = loss_runs(rx(&sim), n);
    let mean = runs.iter().sum::<u64>() as f64 / runs.len() as f64;
    assert!(mean < 1.1, "independent mean run {mean}");
}

#[test]
fn duplicates_are_made_and_counted() {
    let n = 50_000;
    let f = FaultConfig {
        duplicate: 0.02,
        ..FaultConfig::NONE
    };
    let sim = one_link(n, 64, f, 9);
    let st = sim.stats().link(LinkId(0), Dir::AtoB);
    let dup_rate = st.duplicated as f64 / n as f64;
    assert!((dup_rate - 0.02).abs() < 0.003, "{dup_rate}");
    let r = rx(&sim);
    assert_eq!(r.len() as u64, n + st.duplicated);
    let twins = r.windows(2).filter(|w| w[0].seq == w[1].seq).count() as u64;
    assert_eq!(
        twins, st.duplicated,
        "a copy arrives right after its original"
    );
    assert!(r.windows(2).all(|w| w[1].seq >= w[0].seq));
}

#[test]
fn corruption_flips_exactly_one_bit() {
    let n = 50_000;
    let f = FaultConfig {
        corrupt: 0.01,
        ..FaultConfig::NONE
    };
    let sim = one_link(n, 256, f, 13);
    let st = sim.stats().link(LinkId(0), Dir::AtoB);
    let r = rx(&sim);
    assert_eq!(r.len() as u64, n, "corruption does not drop");
    let mut bad = 0u64;
    for (i, a) in r.iter().enumerate() {
        if a.seq != i as u64 {
            bad += 1; // the flipped bit is in the sequence number
        } else if !a.intact {
            bad += 1;
            assert_eq!(a.flipped_bits, 1);
        }
    }
    assert_eq!(bad, st.corrupted);
    let rate = st.corrupted as f64 / n as f64;
    assert!((rate - 0.01).abs() < 0.002, "{rate}");
}

#[test]
fn reordering_delays_some_packets_past_later_ones() {
    let n = 20_000;
    let delay = 10_000;
    let f = FaultConfig {
        reorder: 0.01,
        reorder_delay: delay,
        ..FaultConfig::NONE
    };
    let sim = one_link(n, 256, f, 17);
    let st = sim.stats().link(LinkId(0), Dir::AtoB);
    let r = rx(&sim);
    assert_eq!(r.len() as u64, n);
    let mut max_seen = None;
    let mut late = 0u64;
    for a in r {
        if max_seen.is_some_and(|m| a.seq < m) {
            late += 1;
        }
        max_seen = max_seen.max(Some(a.seq));
    }
    assert!(late > 0);
    assert!(late <= st.reordered && late + 2 >= st.reordered);
    let rate = st.reordered as f64 / n as f64;
    assert!((rate - 0.01).abs() < 0.003, "{rate}");
    // A held-back packet arrives exactly `delay` after its normal time: frame i's normal
    // arrival is floor((i+1) * 25.76) + 1000 for 256 B payloads ((256+66)*8/100 ns).
    for a in r {
        let normal = (a.seq + 1) * 2576 / 100 + 1000;
        assert!(a.t == normal || a.t == normal + delay, "{a:?}");
    }

    // Without the fault, never out of order.
    let sim = one_link(n, 256, FaultConfig::NONE, 17);
    assert!(rx(&sim).windows(2).all(|w| w[0].seq < w[1].seq));
}

#[test]
fn random_ecn_marks_only_touch_ect_packets() {
    let n = 20_000;
    let f = FaultConfig {
        ecn_mark: 0.1,
        ..FaultConfig::NONE
    };
    let flows = vec![
        Flow::new(host_ip(HostId(1)), 1, n, 64).ect(),
        Flow::new(host_ip(HostId(1)), 2, n, 64),
    ];
    let sim = one_link_flows(flows, f, 21);
    let r = rx(&sim);
    let ce = r.iter().filter(|a| a.ecn == Ecn::Ce).count() as u64;
    assert!(r
        .iter()
        .filter(|a| a.src_port == 2)
        .all(|a| a.ecn == Ecn::NotEct));
    assert!(r
        .iter()
        .filter(|a| a.src_port == 1)
        .all(|a| a.ecn == Ecn::Ce || a.ecn == Ecn::Ect0));
    let st = sim.stats().link(LinkId(0), Dir::AtoB);
    assert_eq!(st.ecn_marked, ce);
    let rate = ce as f64 / n as f64;
    assert!((rate - 0.1).abs() < 0.01, "{rate}");
}

#[test]
fn link_down_drops_and_link_up_recovers() {
    let cfg = TopologyConfig::default();
    let n = 2_000u64;
    let mut sim = topology::back_to_back(&cfg).build_with(|id, ip| {
        let h = TestHost::new(ip);
        if id.0 == 0 {
            h.with_flow(Flow::new(host_ip(HostId(1)), 1, n, 4096))
        } else {
            h
        }
    });
    sim.run_until(100_000);
    sim.set_link_up(LinkId(0), false);
    sim.run_until(200_000);
    let sent_while_down = sim.host(HostId(0)).sent;
    sim.set_link_up(LinkId(0), true);
    sim.run_until(10_000_000);
    let r = rx(&sim);
    let st = sim.stats().link(LinkId(0), Dir::AtoB);
    assert_eq!(sim.host(HostId(0)).sent, n);
    assert_eq!(r.len() as u64 + st.dropped_link_down, n, "conservation");
    // ~100 µs of 333 ns frames lost, plus the few in flight or queued at the transitions.
    assert!((300..=315).contains(&st.dropped_link_down), "{st:?}");
    assert!(r.iter().all(|a| a.t <= 100_000 || a.t > 200_000));
    assert!(r.iter().any(|a| a.t > 200_000), "recovered");
    assert!(sent_while_down > 300);
    // Order is kept across the outage.
    assert!(r.windows(2).all(|w| w[0].seq < w[1].seq));
}

#[test]
fn switch_queue_is_flushed_when_its_link_dies() {
    let cfg = TopologyConfig {
        switch_buffer_bytes: 1_000 * 4142,
        ..TopologyConfig::default()
    };
    let n = 500;
    // 3:1 incast into host 0 builds a queue on switch port 0; then host 0's link dies.
    let mut sim = topology::star(&cfg, 4).build_with(|id, ip| {
        let h = TestHost::new(ip);
        if id.0 == 0 {
            h
        } else {
            h.with_flow(Flow::new(host_ip(HostId(0)), id.0 as u16, n, 4096))
        }
    });
    sim.run_until(50_000);
    assert!(sim.switch_queue_bytes(ferroce_sim::SwitchId(0), 0) > 50 * 4142);
    sim.set_link_up(LinkId(0), false);
    sim.run_until(60_000);
    assert_eq!(sim.switch_queue_bytes(ferroce_sim::SwitchId(0), 0), 0);
    sim.set_link_up(LinkId(0), true);
    sim.run_until(100_000_000);
    let st = sim.stats();
    let t = st.totals();
    let got = rx_of(&sim, 0);
    assert!(st.link(LinkId(0), Dir::BtoA).dropped_link_down > 50);
    assert!(
        t.dropped_no_route > 0,
        "with rerouting, host 0 was unreachable"
    );
    assert_eq!(got + t.dropped(), 3 * n, "conservation");
    assert!(got > 0);
}

fn rx_of(sim: &Sim<TestHost>, h: u32) -> u64 {
    sim.host(HostId(h)).arrivals.len() as u64
}

#[test]
fn faults_can_be_set_everywhere_and_cleared() {
    let cfg = TopologyConfig::default();
    let mut sim = topology::star(&cfg, 2).build_with(|id, ip| {
        let h = TestHost::new(ip);
        if id.0 == 0 {
            h.with_flow(Flow::new(host_ip(HostId(1)), 1, 1000, 64))
        } else {
            h
        }
    });
    sim.set_all_link_faults(FaultConfig::loss(1.0));
    assert_eq!(
        sim.link_faults(LinkId(1), Dir::BtoA),
        Some(FaultConfig::loss(1.0))
    );
    sim.run_until(5_000);
    assert_eq!(rx_of(&sim, 1), 0);
    sim.set_all_link_faults(FaultConfig::NONE);
    sim.run_until(10_000_000);
    let got = rx_of(&sim, 1);
    let lost = sim.stats().totals().dropped_random_loss;
    assert!(lost > 0 && got > 0);
    assert_eq!(got + lost, 1000);
}
