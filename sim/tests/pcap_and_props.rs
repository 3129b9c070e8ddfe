//! pcap output, and property tests: no input makes the simulator panic or lose track of packets.

mod common;

use common::{Flow, TestHost};
use ferroce_sim::{
    host_ip, topology, Datagram, Dir, Ecn, FaultConfig, GilbertElliott, Host, HostId, LinkId,
    Nanos, TopologyConfig,
};
use proptest::prelude::*;

fn u16_at(b: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([b[i], b[i + 1]])
}
fn u32_le(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

#[test]
fn pcap_records_what_a_host_sends_and_receives() {
    let dir = std::env::temp_dir().join(format!("ferroce-sim-pcap-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("h0.pcap");
    let cfg = TopologyConfig::default();
    let mut sim = topology::back_to_back(&cfg).build_with(|id, ip| {
        let h = TestHost::new(ip);
        let peer = host_ip(HostId(1 - id.0));
        if id.0 == 0 {
            h.with_flow(Flow::new(peer, 1111, 3, 100).ect())
        } else {
            h.with_flow(Flow::new(peer, 2222, 2, 50))
                .starting_at(10_000)
        }
    });
    sim.enable_pcap(HostId(0), &path).unwrap();
    sim.run_until(100_000);
    sim.flush_pcaps().unwrap();
    let data = std::fs::read(&path).unwrap();
    assert_eq!(u32_le(&data, 0), 0xa1b2_3c4d, "nanosecond pcap magic");
    assert_eq!(u32_le(&data, 20), 1, "LINKTYPE_ETHERNET");
    let mut off = 24;
    let mut recs = Vec::new();
    while off < data.len() {
        let ts = u64::from(u32_le(&data, off)) * 1_000_000_000 + u64::from(u32_le(&data, off + 4));
        let incl = u32_le(&data, off + 8) as usize;
        assert_eq!(incl, u32_le(&data, off + 12) as usize);
        recs.push((ts, data[off + 16..off + 16 + incl].to_vec()));
        off += 16 + incl;
    }
    assert_eq!(off, data.len());
    assert_eq!(recs.len(), 5, "3 sent + 2 received");
    for (ts, f) in &recs {
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        let ip = &f[14..34];
        // A valid IPv4 header sums to 0xffff.
        let mut sum: u32 = (0..10).map(|i| u32::from(u16_at(ip, 2 * i))).sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff);
        assert_eq!(ip[9], 17);
        assert_eq!(usize::from(u16_at(ip, 2)), f.len() - 14);
        let sport = u16_at(f, 34);
        if sport == 1111 {
            assert!(*ts < 10_000);
            assert_eq!(ip[1] & 3, Ecn::Ect0.bits());
            assert_eq!(&ip[12..16], &host_ip(HostId(0)));
            assert_eq!(f.len(), 14 + 20 + 8 + 100);
        } else {
            assert_eq!(sport, 2222);
            assert!(*ts > 10_000);
            assert_eq!(f.len(), 14 + 20 + 8 + 50);
        }
        assert_eq!(u16_at(f, 36), 4791);
    }
    sim.disable_pcap(HostId(0)).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A host that sends arbitrary datagrams (garbage addresses, empty and large payloads).
struct Chaos {
    out: Vec<Datagram>,
    timer: Option<Nanos>,
    got: u64,
}

impl Host for Chaos {
    fn handle_datagram(&mut self, _now: Nanos, _port: usize, _d: Datagram) {
        self.got += 1;
    }
    fn poll_transmit(&mut self, _now: Nanos) -> Option<Datagram> {
        self.out.pop()
    }
    fn poll_timeout(&mut self) -> Option<Nanos> {
        self.timer
    }
    fn handle_timeout(&mut self, now: Nanos) {
        // Deadlines in the past (now / 2) until now hits a multiple of 3.
        self.timer = match now % 3 {
            0 => None,
            _ => Some(now / 2),
        };
    }
}

fn any_prob() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.0),
        Just(1.0),
        Just(f64::NAN),
        Just(-1.0),
        Just(f64::INFINITY),
        0.0..1.0f64,
    ]
}

fn any_faults() -> impl Strategy<Value = FaultConfig> {
    (
        any_prob(),
        proptest::option::of((any_prob(), any_prob(), any_prob(), any_prob())),
        any_prob(),
        prop_oneof![Just(0u64), Just(u64::MAX), 0..100_000u64],
        any_prob(),
        any_prob(),
        any_prob(),
    )
        .prop_map(
            |(loss, ge, reorder, reorder_delay, duplicate, corrupt, ecn_mark)| FaultConfig {
                loss,
                burst: ge.map(|(a, b, c, d)| GilbertElliott {
                    p_good_to_bad: a,
                    p_bad_to_good: b,
                    loss_in_bad: c,
                    loss_in_good: d,
                }),
                reorder,
                reorder_delay,
                duplicate,
                corrupt,
                ecn_mark,
            },
        )
}

fn any_datagram() -> impl Strategy<Value = Datagram> {
    let ip = prop_oneof![(0u32..6).prop_map(|i| host_ip(HostId(i))), any::<[u8; 4]>(),];
    (
        ip.clone(),
        ip,
        any::<u16>(),
        any::<u16>(),
        0u8..4,
        prop_oneof![Just(0usize), 1..64usize, Just(9000usize)],
    )
        .prop_map(|(s, d, sp, dp, ecn, len)| Datagram {
            src_ip: s,
            dst_ip: d,
            src_port: sp,
            dst_port: dp,
            ecn: Ecn::from_bits(ecn),
            payload: vec![0xab; len],
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn arbitrary_faults_and_datagrams_never_panic(
        faults in proptest::collection::vec(any_faults(), 1..4),
        dgrams in proptest::collection::vec(any_datagram(), 0..40),
        timer in proptest::option::of(0u64..10_000),
        seed in any::<u64>(),
        rate in prop_oneof![Just(0u64), Just(1_000_000u64), Just(u64::MAX), Just(100_000_000_000u64)],
        flap in any::<bool>(),
        reroute in any::<bool>(),
        buffer in prop_oneof![Just(0u64), Just(1u64), Just(100_000u64)],
    ) {
        let mut cfg = TopologyConfig::default().with_seed(seed);
        cfg.link_rate_bps = rate;
        cfg.switch_buffer_bytes = buffer;
        cfg.sim.reroute_around_down_links = reroute;
        let mut sim = topology::leaf_spine(&cfg, 2, 2, 3).build_with(|id, _| Chaos {
            out: if id.0 == 0 { dgrams.clone() } else { Vec::new() },
            timer,
            got: 0,
        });
        for (i, l) in (0..sim.num_links() as u32).enumerate() {
            sim.set_link_faults(LinkId(l), Dir::AtoB, faults[i % faults.len()]);
            sim.set_link_faults(LinkId(l), Dir::BtoA, faults[(i + 1) % faults.len()]);
        }
        if flap {
            sim.set_link_up(LinkId(6), false);
        }
        sim.run_until(1_000_000);
        if flap {
            sim.set_link_up(LinkId(6), true);
        }
        sim.run_until(2_000_000);
        // Nothing is invented: hosts never receive more than was sent plus duplicates.
        let got: u64 = sim.hosts().map(|h| h.got).sum();
        let t = sim.stats().totals();
        prop_assert!(got <= dgrams.len() as u64 + t.duplicated);
        prop_assert_eq!(got, t.delivered_to_hosts);
    }

    #[test]
    fn clean_fabric_conserves_packets(
        n_flows in 1usize..6,
        pkts in 1u64..50,
        payload in 0usize..3000,
        buffer_pkts in 1u64..30,
    ) {
        let cfg = TopologyConfig {
            switch_buffer_bytes: buffer_pkts * (payload as u64 + 46),
            ..TopologyConfig::default()
        };
        let mut sim = topology::leaf_spine(&cfg, 2, 2, 3).build_with(|id, ip| {
            let mut h = TestHost::new(ip);
            if id.0 != 0 {
                for f in 0..n_flows {
                    h.add_flow(Flow::new(host_ip(HostId(0)), f as u16, pkts, payload));
                }
            }
            h
        });
        sim.run_until(1_000_000_000);
        let sent: u64 = sim.hosts().map(|h| h.sent).sum();
        prop_assert_eq!(sent, 5 * n_flows as u64 * pkts);
        let got = sim.host(HostId(0)).arrivals.len() as u64;
        let t = sim.stats().totals();
        prop_assert_eq!(got + t.dropped(), sent);
        prop_assert_eq!(t.dropped(), t.dropped_queue_full);
        prop_assert!(t.max_queue_bytes <= cfg.switch_buffer_bytes);
    }
}
