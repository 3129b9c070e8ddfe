//! Event engine: exact timing, determinism, timers, wake, run control.

mod common;

use common::{Flow, TestHost};
use ferroce_sim::{
    host_ip, topology, Datagram, Dir, FaultConfig, GilbertElliott, Host, HostId, LinkId, Nanos,
    Sim, TopologyConfig, PREAMBLE_IFG,
};

const RATE: u64 = 100_000_000_000;

/// Exact time the last bit of frame `i` (0-based) of a back-to-back burst started at 0 leaves.
fn burst_finish(i: u64, frame_bytes: u64) -> u64 {
    (i + 1) * frame_bytes * 8 * 1_000_000_000 / RATE
}

#[test]
fn back_to_back_blast_arrives_at_exact_line_rate() {
    let cfg = TopologyConfig::default();
    let n = 200u64;
    let payload = 4096usize;
    let mut sim = topology::back_to_back(&cfg).build_with(|id, ip| {
        let h = TestHost::new(ip);
        if id == HostId(0) {
            h.with_flow(Flow::new(host_ip(HostId(1)), 1000, n, payload))
        } else {
            h
        }
    });
    sim.run_until(1_000_000);
    let rx = &sim.host(HostId(1)).arrivals;
    assert_eq!(rx.len(), n as usize);
    let frame = (payload + 46 + PREAMBLE_IFG) as u64; // 4162 byte times = 332.96 ns
    for (i, a) in rx.iter().enumerate() {
        assert_eq!(a.seq, i as u64, "in order");
        assert_eq!(
            a.t,
            burst_finish(i as u64, frame) + cfg.prop_delay,
            "packet {i}"
        );
    }
    // 200 frames take exactly 200 * 332.96 ns: no rounding drift.
    assert_eq!(rx.last().unwrap().t, 66_592 + 1_000);
    let st = sim.stats().link(LinkId(0), Dir::AtoB);
    assert_eq!(st.tx_packets, n);
    assert_eq!(st.tx_bytes, n * (payload as u64 + 46));
    assert_eq!(st.delivered, n);
    assert_eq!(sim.stats().link(LinkId(0), Dir::BtoA).tx_packets, 0);
}

#[test]
fn single_packets_pay_serialisation_and_propagation_per_hop() {
    // 1000 B payload at 100 Gb/s: (1000 + 46 + 20) * 8 / 100 = 85.28 ns -> 85 ns per hop.
    let cfg = TopologyConfig {
        prop_delay: 700,
        ..TopologyConfig::default()
    };
    let mut sim = topology::back_to_back(&cfg).build_with(|id, ip| {
        let h = TestHost::new(ip);
        if id == HostId(0) {
            h.with_flow(Flow::new(host_ip(HostId(1)), 1, 1, 1000))
                .starting_at(5_000)
        } else {
            h
        }
    });
    sim.run_until(100_000);
    assert_eq!(sim.host(HostId(1)).arrivals[0].t, 5_000 + 85 + 700);
    assert_eq!(sim.host(HostId(0)).timeouts, vec![5_000]);

    // Through one switch: two hops, store and forward.
    let mut sim = topology::star(&cfg, 2).build_with(|id, ip| {
        let h = TestHost::new(ip);
        if id == HostId(0) {
            h.with_flow(Flow::new(host_ip(HostId(1)), 1, 1, 1000))
                .starting_at(5_000)
        } else {
            h
        }
    });
    sim.run_until(100_000);
    assert_eq!(sim.host(HostId(1)).arrivals[0].t, 5_000 + 2 * (85 + 700));
}

#[test]
fn burst_through_a_switch_keeps_line_rate() {
    let cfg = TopologyConfig::default();
    let n = 1000u64;
    let mut sim = topology::star(&cfg, 2).build_with(|id, ip| {
        let h = TestHost::new(ip);
        if id == HostId(0) {
            h.with_flow(Flow::new(host_ip(HostId(1)), 1, n, 4096))
        } else {
            h
        }
    });
    sim.run_until(10_000_000);
    let rx = &sim.host(HostId(1)).arrivals;
    assert_eq!(rx.len(), n as usize);
    let frame = 4096 + 46 + 20;
    let last = rx.last().unwrap().t;
    // Last bit leaves the host at burst_finish(n-1); the switch forwards with one extra frame
    // time and one extra propagation delay, within a nanosecond of rounding.
    let ideal = burst_finish(n - 1, frame) + 332 + 2 * cfg.prop_delay;
    assert!(last.abs_diff(ideal) <= 2, "last {last} ideal {ideal}");
    // No queue beyond the packet in service plus the one arriving.
    assert!(sim.stats().max_queue_bytes() <= 2 * (4096 + 46));
}

fn faulty_run(seed: u64) -> (ferroce_sim::FabricStats, Vec<Vec<common::Arrival>>, u64) {
    let mut cfg = TopologyConfig::default().with_seed(seed);
    cfg.switch_buffer_bytes = 12 * 4142;
    cfg.ecn_threshold_bytes = 3 * 4142;
    let n_hosts = 16u32;
    let mut sim = topology::leaf_spine(&cfg, 4, 2, 4).build_with(|id, ip| {
        let mut h = TestHost::new(ip);
        for f in 0..4u16 {
            let dst = host_ip(HostId((id.0 + 5 + u32::from(f)) % n_hosts));
            h.add_flow(Flow::new(dst, 2000 + f * 17 + id.0 as u16, 60, 4096).ect());
        }
        h
    });
    sim.set_all_link_faults(FaultConfig {
        loss: 0.01,
        burst: Some(GilbertElliott::bursts(0.002, 0.3)),
        reorder: 0.01,
        reorder_delay: 3_000,
        duplicate: 0.01,
        corrupt: 0.01,
        ecn_mark: 0.02,
    });
    sim.run_until(2_000_000);
    let arrivals = sim.hosts().map(|h| h.arrivals.clone()).collect();
    (sim.stats().clone(), arrivals, sim.events_processed())
}

#[test]
fn same_seed_same_run_different_seed_different_run() {
    let a = faulty_run(7);
    let b = faulty_run(7);
    assert_eq!(a.0, b.0, "stats identical");
    assert_eq!(a.1, b.1, "every arrival identical (time, port, content)");
    assert_eq!(a.2, b.2, "same number of events");
    let t = a.0.totals();
    assert!(t.dropped_random_loss > 0 && t.duplicated > 0 && t.corrupted > 0);
    assert!(t.reordered > 0 && t.dropped_burst_loss > 0);
    let c = faulty_run(8);
    assert_ne!(a.0, c.0, "a different seed draws different faults");
}

#[test]
fn faults_on_one_link_do_not_shift_draws_on_another() {
    // Link streams are independent: adding faults on the host-1 uplink leaves the loss pattern
    // on the host-0 uplink unchanged.
    let run = |extra: bool| {
        let cfg = TopologyConfig::default().with_seed(3);
        let mut sim = topology::star(&cfg, 3).build_with(|id, ip| {
            let h = TestHost::new(ip);
            match id.0 {
                0 => h.with_flow(Flow::new(host_ip(HostId(2)), 1, 500, 100)),
                1 => h.with_flow(Flow::new(host_ip(HostId(2)), 2, 500, 100)),
                _ => h,
            }
        });
        sim.set_link_faults(LinkId(0), Dir::AtoB, FaultConfig::loss(0.1));
        if extra {
            sim.set_link_faults(LinkId(1), Dir::AtoB, FaultConfig::loss(0.3));
        }
        sim.run_until(10_000_000);
        let seqs: Vec<u64> = sim
            .host(HostId(2))
            .arrivals
            .iter()
            .filter(|a| a.src_port == 1)
            .map(|a| a.seq)
            .collect();
        seqs
    };
    let a = run(false);
    let b = run(true);
    assert!(a.len() < 500 && a.len() > 400);
    assert_eq!(a, b);
}

/// A host whose timer is driven from outside.
#[derive(Default)]
struct TimerHost {
    deadline: Option<Nanos>,
    fired: Vec<Nanos>,
    /// If set, `handle_timeout` does not clear the deadline (a buggy host).
    stuck: bool,
    /// On each timeout, set the next deadline this far ahead.
    rearm: Option<Nanos>,
    polls: u64,
}

impl Host for TimerHost {
    fn handle_datagram(&mut self, _now: Nanos, _port: usize, _d: Datagram) {}
    fn poll_transmit(&mut self, _now: Nanos) -> Option<Datagram> {
        self.polls += 1;
        None
    }
    fn poll_timeout(&mut self) -> Option<Nanos> {
        self.deadline
    }
    fn handle_timeout(&mut self, now: Nanos) {
        self.fired.push(now);
        if !self.stuck {
            self.deadline = self.rearm.map(|d| now + d);
        }
    }
}

fn timer_sim() -> Sim<TimerHost> {
    topology::back_to_back(&TopologyConfig::default()).build_with(|_, _| TimerHost::default())
}

#[test]
fn timers_fire_at_their_deadline_and_stale_ones_are_ignored() {
    let mut sim = timer_sim();
    sim.run_until(10);
    sim.host_mut(HostId(0)).deadline = Some(1_000);
    sim.wake(HostId(0));
    // Move the deadline later: the 1 µs event must not fire the host.
    sim.run_until(500);
    sim.host_mut(HostId(0)).deadline = Some(2_000);
    sim.wake(HostId(0));
    sim.run_until(1_500);
    assert!(sim.host(HostId(0)).fired.is_empty());
    // Move it earlier than the pending event.
    sim.host_mut(HostId(0)).deadline = Some(1_800);
    sim.wake(HostId(0));
    sim.run_until(10_000);
    assert_eq!(sim.host(HostId(0)).fired, vec![1_800]);
    assert_eq!(sim.now(), 10_000);

    // Periodic re-arming.
    sim.host_mut(HostId(1)).rearm = Some(100);
    sim.host_mut(HostId(1)).deadline = Some(10_050);
    sim.wake(HostId(1));
    sim.run_until(10_400);
    assert_eq!(
        sim.host(HostId(1)).fired,
        vec![10_050, 10_150, 10_250, 10_350]
    );
}

#[test]
fn a_deadline_in_the_past_fires_now_and_a_stuck_one_cannot_hang_the_sim() {
    let mut sim = timer_sim();
    sim.run_until(5_000);
    sim.host_mut(HostId(0)).deadline = Some(10);
    sim.wake(HostId(0));
    assert_eq!(
        sim.host(HostId(0)).fired,
        vec![5_000],
        "fired at once, at now"
    );

    sim.host_mut(HostId(1)).stuck = true;
    sim.host_mut(HostId(1)).deadline = Some(4_000);
    sim.wake(HostId(1));
    sim.run_until(5_100);
    let fired = &sim.host(HostId(1)).fired;
    // Once at 5000 inside wake, then at most once per nanosecond.
    assert_eq!(fired.len(), 101);
    assert!(fired.windows(2).all(|w| w[1] == w[0] + 1));
}

#[test]
fn run_while_stops_on_condition_or_limit() {
    let cfg = TopologyConfig::default();
    let mut sim = topology::back_to_back(&cfg).build_with(|id, ip| {
        let h = TestHost::new(ip);
        if id == HostId(0) {
            h.with_flow(Flow::new(host_ip(HostId(1)), 1, 100, 1000))
        } else {
            h
        }
    });
    let done = sim.run_while(1_000_000, |s| s.host(HostId(1)).arrivals.len() < 10);
    assert!(done);
    assert_eq!(sim.host(HostId(1)).arrivals.len(), 10);
    assert_eq!(sim.now(), sim.host(HostId(1)).arrivals[9].t);
    let done = sim.run_while(50_000, |s| s.host(HostId(1)).arrivals.len() < 1_000);
    assert!(!done);
    assert_eq!(sim.now(), 50_000);
    assert_eq!(sim.host(HostId(1)).arrivals.len(), 100);
    // An already-false condition returns at once.
    assert!(sim.run_while(60_000, |_| false));
    assert_eq!(sim.now(), 50_000);
}

#[test]
fn wake_after_posting_work_sends_it() {
    let cfg = TopologyConfig::default();
    let mut sim = topology::back_to_back(&cfg).build_with(|_, ip| TestHost::new(ip));
    sim.run_until(1_000);
    assert_eq!(sim.next_event_time(), None, "idle hosts leave no events");
    sim.host_mut(HostId(1))
        .add_flow(Flow::new(host_ip(HostId(0)), 9, 3, 100));
    sim.wake(HostId(1));
    sim.run_until(10_000);
    let rx = &sim.host(HostId(0)).arrivals;
    assert_eq!(rx.len(), 3);
    assert_eq!(rx[0].t, 1_000 + 13 + 1_000); // (100+46+20)*8/100 = 13.28 ns
}

#[test]
fn nic_queue_is_small_and_never_drops() {
    // A host with 10 000 packets: the NIC pulls them one by one, the host keeps the rest.
    let cfg = TopologyConfig::default();
    let mut sim = topology::back_to_back(&cfg).build_with(|id, ip| {
        let h = TestHost::new(ip);
        if id == HostId(0) {
            h.with_flow(Flow::new(host_ip(HostId(1)), 1, 10_000, 1000))
        } else {
            h
        }
    });
    sim.run_until(1_000);
    // ~1000 ns / 85.28 ns per frame = 11 sent + 1 serialising + 2 queued.
    let sent = sim.host(HostId(0)).sent;
    assert!((12..=15).contains(&sent), "{sent}");
    sim.run_until(10_000_000);
    assert_eq!(sim.host(HostId(1)).arrivals.len(), 10_000);
}

#[test]
fn build_with_wrong_host_count_is_an_error() {
    let cfg = TopologyConfig::default();
    let err = topology::star(&cfg, 3)
        .build(vec![TestHost::new([0; 4])])
        .unwrap_err();
    assert_eq!(
        err,
        ferroce_sim::TopologyError::HostCount {
            expected: 3,
            got: 1
        }
    );
    let hosts = (0..3).map(|i| TestHost::new(host_ip(HostId(i)))).collect();
    let sim = topology::star(&cfg, 3).build(hosts).unwrap();
    assert_eq!(sim.num_hosts(), 3);
}

/// Sends one 1000 B datagram to host 1 every `period` ns, `left` times.
struct Pacer {
    ip: [u8; 4],
    next: Nanos,
    period: Nanos,
    left: u32,
    due: bool,
    rx: Vec<Nanos>,
}

impl Host for Pacer {
    fn handle_datagram(&mut self, now: Nanos, _port: usize, _d: Datagram) {
        self.rx.push(now);
    }
    fn poll_transmit(&mut self, _now: Nanos) -> Option<Datagram> {
        if !self.due {
            return None;
        }
        self.due = false;
        Some(Datagram::udp(
            self.ip,
            host_ip(HostId(1)),
            1,
            2,
            vec![0; 1000],
        ))
    }
    fn poll_timeout(&mut self) -> Option<Nanos> {
        (self.left > 0).then_some(self.next)
    }
    fn handle_timeout(&mut self, now: Nanos) {
        self.due = true;
        self.left -= 1;
        self.next = now + self.period;
    }
}

#[test]
fn idle_gaps_do_not_accumulate_rounding() {
    // 85.28 ns per frame: every isolated frame takes 85 ns; the 0.28 ns remainders of frames
    // separated by idle time must not add up.
    let cfg = TopologyConfig::default();
    let mut sim = topology::back_to_back(&cfg).build_with(|id, ip| Pacer {
        ip,
        next: 10_000,
        period: 10_000,
        left: if id.0 == 0 { 20 } else { 0 },
        due: false,
        rx: Vec::new(),
    });
    sim.run_until(1_000_000);
    let want: Vec<Nanos> = (1..=20).map(|i| i * 10_000 + 85 + 1_000).collect();
    assert_eq!(sim.host(HostId(1)).rx, want);
}
