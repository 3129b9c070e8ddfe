use ferroce_harness::*;
use ferroce_sim::FaultConfig;

#[test]
fn probe_goodput() {
    for loss in [0.0, 0.01, 0.10] {
        let run = TwoHostRun {
            workload: WorkloadSpec::bulk_write(8, 128, 65536),
            faults: FaultConfig::loss(loss),
            ..TwoHostRun::default()
        };
        let r = run.run();
        eprintln!(
            "loss {loss}: {:.2} Gb/s elapsed {} us errors {} retx {} holes {} rtos {} events {}",
            r.goodput_gbps,
            r.elapsed_ns / 1000,
            r.errors.len(),
            r.client.retx_pkts,
            r.client.sack_holes,
            r.client.rtos,
            r.events
        );
        for p in &r.paths {
            eprintln!("   {:?}", p);
        }
    }
}
