//! Issue 2's acceptance figure: two hosts, 100 Gb/s links, 8 paths sprayed over a leaf–spine
//! with 8 spines, 1 % random loss on data and ACKs (each host's uplink), every byte verified:
//! goodput at least 94 % of the lossless run with the same seed.

use ferroce_harness::*;
use ferroce_sim::FaultConfig;

fn run(loss: f64) -> RunReport {
    let r = TwoHostRun {
        workload: WorkloadSpec::bulk_write(8, 128, 65_536),
        faults: FaultConfig::loss(loss),
        ..TwoHostRun::default()
    }
    .run();
    assert!(
        r.errors.is_empty(),
        "loss {loss}: {:?}",
        &r.errors[..r.errors.len().min(5)]
    );
    eprintln!(
        "loss {:>4.1} %: {:6.2} Gb/s, resent {} pkts, SACK holes {}, time losses {}, RTOs {}",
        loss * 100.0,
        r.goodput_gbps,
        r.client.retx_pkts,
        r.client.sack_holes,
        r.client.time_losses,
        r.client.rtos
    );
    r
}

#[test]
fn one_percent_loss_keeps_94_percent_of_lossless_goodput() {
    let lossless = run(0.0);
    let lossy = run(0.01);
    let ratio = lossy.goodput_gbps / lossless.goodput_gbps;
    eprintln!("ratio {ratio:.4}");
    assert!(
        lossless.goodput_gbps > 90.0,
        "lossless {:.2} Gb/s",
        lossless.goodput_gbps
    );
    assert!(ratio >= 0.94, "ratio {ratio:.4}");
    // Selective repeat: nothing but the lost packets (and a handful of tail probes) is resent.
    assert!(
        lossy.client.retx_pkts <= lossy.fabric_drops + 16,
        "{:?}",
        lossy.client
    );
}

#[test]
fn ten_percent_loss_still_moves_most_data() {
    let lossless = run(0.0);
    let lossy = run(0.10);
    let ratio = lossy.goodput_gbps / lossless.goodput_gbps;
    eprintln!("ratio {ratio:.4}");
    assert!(ratio >= 0.80, "ratio {ratio:.4}");
}
