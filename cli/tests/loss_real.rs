//! `ferroce bench loss --real --quick`: the loss sweep on real packets runs end to end
//! (unmodified ib_write_bw over the shim, both modes, lossless and 1 %), prints its table and
//! writes its CSV and plot with a measured goodput for every point and the simulator's share
//! beside it. Root, perftest and the built shim only (skips otherwise). No speed threshold:
//! this machine is shared; the figures are for the closing note, not for a test.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_ferroce");

#[test]
fn loss_real_quick_sweeps_both_modes_and_writes_table_csv_and_plot() {
    let lib = PathBuf::from(BIN).parent().unwrap().to_path_buf();
    if !ferroce_dataplane::netns::is_root()
        || !std::path::Path::new("/usr/bin/ib_write_bw").exists()
        || !lib.join("libibverbs.so").exists()
    {
        eprintln!("SKIPPED: needs root, perftest and the built shim next to {BIN}");
        return;
    }
    let out = std::env::temp_dir().join(format!("ferroce-loss-real-{}", std::process::id()));
    let mut c = Command::new(BIN)
        .args([
            "bench",
            "loss",
            "--real",
            "--quick",
            "--seconds",
            "1",
            "--out",
        ])
        .arg(&out)
        .arg("--lib")
        .arg(&lib)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn ferroce");
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = c.try_wait().unwrap() {
            break Some(s);
        }
        if t0.elapsed() > Duration::from_secs(300) {
            let _ = c.kill();
            let _ = c.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut stdout = String::new();
    if let Some(mut o) = c.stdout.take() {
        use std::io::Read;
        let _ = o.read_to_string(&mut stdout);
    }
    let csv = std::fs::read_to_string(out.join("loss_real.csv")).unwrap_or_default();
    let svg = std::fs::metadata(out.join("loss_real.svg")).map(|m| m.len());
    let _ = std::fs::remove_dir_all(&out);
    println!("{stdout}");
    assert!(
        status.is_some_and(|s| s.success()),
        "exit {status:?}\n{stdout}"
    );
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 4, "{csv}");
    for (r, (mode, loss)) in rows.iter().zip([
        ("native", 0.0),
        ("native", 0.01),
        ("rocev2", 0.0),
        ("rocev2", 0.01),
    ]) {
        assert_eq!((r[0], r[1].parse::<f64>().unwrap()), (mode, loss), "{csv}");
        let gbps: f64 = r[2].parse().unwrap_or(0.0);
        let share: f64 = r[3].parse().unwrap_or(-1.0);
        let sim: f64 = r[4].parse().unwrap_or(-1.0);
        assert!(gbps > 0.0 && gbps.is_finite(), "no goodput: {csv}");
        // Any positive share: one-second runs on a shared machine can even make the lossy
        // run the faster one (seen: 1.66).
        assert!(share > 0.0 && share.is_finite(), "share {share}: {csv}");
        assert!((0.0..=1.05).contains(&sim), "sim share {sim}: {csv}");
        assert_eq!(r[5], "1", "{csv}");
    }
    assert!(svg.is_ok_and(|n| n > 1000), "no plot");
    assert!(stdout.contains("sim share") && stdout.contains("native at 1 % loss keeps"));
}
