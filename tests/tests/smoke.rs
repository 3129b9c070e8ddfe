//! First end-to-end checks: the core moves a verified mixed workload over the simulator.
use ferroce_harness::*;
use ferroce_sim::FaultConfig;

#[test]
fn mixed_workload_lossless_back_to_back() {
    let run = TwoHostRun {
        fabric: Fabric::BackToBack,
        ..TwoHostRun::default()
    };
    let r = run.run();
    assert!(
        r.errors.is_empty(),
        "{:#?}",
        &r.errors[..r.errors.len().min(20)]
    );
    assert!(r.completed);
    eprintln!("{:?} {:?}", r.goodput_gbps, r.client);
}

#[test]
fn mixed_workload_with_loss_leaf_spine() {
    let run = TwoHostRun {
        faults: FaultConfig::loss(0.05),
        ..TwoHostRun::default()
    };
    let r = run.run();
    assert!(
        r.errors.is_empty(),
        "{:#?}",
        &r.errors[..r.errors.len().min(20)]
    );
    eprintln!("{:?} {:?}", r.goodput_gbps, r.client);
}
