//! Property tests: under random loss (0–30 %, on data and ACKs), bursts, reordering,
//! duplication and corruption, every work request completes exactly once, in order per
//! stream, with the right bytes (the harness checks every completion and the server's
//! memory; see harness/src/host.rs).

use ferroce_harness::*;
use ferroce_sim::{FaultConfig, GilbertElliott};
use proptest::prelude::*;

fn faults() -> impl Strategy<Value = FaultConfig> {
    (
        0.0..0.30f64,
        0.0..0.2f64,
        0.0..0.1f64,
        0.0..0.05f64,
        prop::option::of((0.001..0.05f64, 0.25..0.9f64)),
    )
        .prop_map(|(loss, reorder, duplicate, corrupt, burst)| FaultConfig {
            loss,
            burst: burst.map(|(gb, bg)| GilbertElliott::bursts(gb, bg)),
            reorder,
            reorder_delay: 3_000,
            duplicate,
            corrupt,
            ..FaultConfig::NONE
        })
}

/// The strategy's rates are end to end per direction; with faults on every link of a path of
/// `hops` links, each link gets the rate that compounds to it.
fn per_link(mut f: FaultConfig, hops: i32) -> FaultConfig {
    let root = |p: f64| 1.0 - (1.0 - p).powf(1.0 / hops as f64);
    f.loss = root(f.loss);
    f.corrupt = root(f.corrupt);
    f.duplicate = root(f.duplicate);
    f.reorder = root(f.reorder);
    if let Some(b) = f.burst.as_mut() {
        b.p_good_to_bad /= hops as f64;
    }
    f
}

fn run_case(
    f: FaultConfig,
    seed: u64,
    paths: u8,
    streams: u32,
    leaf_spine: bool,
    everywhere: bool,
) -> RunReport {
    run_case_slots(f, seed, paths, streams, leaf_spine, everywhere, 0)
}

/// `write_slots` > 0: the server's WRITE targets are reused round robin over that many slots
/// per stream, so WRITEs in flight together overlap (the end-of-run check holds each slot to
/// its last WRITE, the WRITE_IMM completion check to that WRITE or a later one of the slot).
fn run_case_slots(
    f: FaultConfig,
    seed: u64,
    paths: u8,
    streams: u32,
    leaf_spine: bool,
    everywhere: bool,
    write_slots: u32,
) -> RunReport {
    let hops = if leaf_spine { 4 } else { 1 };
    let f = if everywhere { per_link(f, hops) } else { f };
    let mut run = TwoHostRun {
        fabric: if leaf_spine {
            Fabric::LeafSpine { spines: 4 }
        } else {
            Fabric::BackToBack
        },
        faults: f,
        placement: if everywhere {
            LossPlacement::Everywhere
        } else {
            LossPlacement::HostUplinks
        },
        seed,
        workload: WorkloadSpec {
            streams,
            messages: 40,
            sizes: vec![1, 700, 4096, 9000, 30_000],
            depth: 6,
            recv_depth: 4,
            seed,
            max_write_slots: write_slots,
            ..WorkloadSpec::default()
        },
        limit_ns: 20_000_000_000,
        ..TwoHostRun::default()
    };
    run.endpoint.conn.paths = paths;
    run.run()
}

proptest! {
    // A fixed seed keeps CI reproducible; set PROPTEST_RNG_SEED to explore other cases.
    #![proptest_config(ProptestConfig {
        cases: 160,
        rng_seed: proptest::test_runner::RngSeed::Fixed(
            std::env::var("PROPTEST_RNG_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed),
        ),
        ..ProptestConfig::default()
    })]

    // checks: [PLACE-4] [PLACE-6]
    #[test]
    fn every_message_exactly_once_with_right_bytes(
        f in faults(),
        seed in any::<u64>(),
        paths in 1u8..=8,
        streams in 1u32..=3,
        leaf_spine in any::<bool>(),
        everywhere in any::<bool>(),
    ) {
        let r = run_case(f, seed, paths, streams, leaf_spine, everywhere);
        prop_assert!(r.errors.is_empty(), "faults {:?}: {:?}", f, &r.errors[..r.errors.len().min(8)]);
        prop_assert!(r.completed);
    }
}

proptest! {
    // Until this property existed no simulated run reused a WRITE target while WRITEs were in
    // flight: every WRITE had a slot of its own and was checked on its own, so a resent older
    // WRITE landing on a newer one (the stale-data bug of issue 11) could not show.
    #![proptest_config(ProptestConfig {
        cases: 96,
        rng_seed: proptest::test_runner::RngSeed::Fixed(
            std::env::var("PROPTEST_RNG_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x0e7),
        ),
        ..ProptestConfig::default()
    })]

    // checks: [PLACE-6]
    #[test]
    fn overlapping_writes_leave_the_last_one(
        f in faults(),
        seed in any::<u64>(),
        paths in 1u8..=8,
        streams in 1u32..=3,
        slots in 1u32..=3,
        leaf_spine in any::<bool>(),
    ) {
        let r = run_case_slots(f, seed, paths, streams, leaf_spine, false, slots);
        prop_assert!(r.errors.is_empty(), "faults {:?}: {:?}", f, &r.errors[..r.errors.len().min(8)]);
        prop_assert!(r.completed);
    }
}

/// The same faults at their maxima at once, on every link, one path and eight.
#[test]
fn worst_case_mix_completes() {
    for paths in [1u8, 8] {
        let f = FaultConfig {
            loss: 0.30,
            reorder: 0.2,
            reorder_delay: 5_000,
            duplicate: 0.1,
            corrupt: 0.05,
            ..FaultConfig::NONE
        };
        let r = run_case(f, 99, paths, 3, true, false);
        assert!(
            r.errors.is_empty(),
            "paths {paths}: {:?}",
            &r.errors[..r.errors.len().min(8)]
        );
        assert!(
            r.client.retx_pkts > 0 && r.server.rx_duplicates > 0,
            "{:?}",
            r.client
        );
    }
}
