//! `ferroce-dp` as a user runs it: an engine from a TOML file with hugepages (reserved by the
//! test and released after), the clear errors for bad configuration and for a missing
//! hugepage reservation, and a short `bench` run producing the CSV.

mod common;

use common::{need_root, serial};
use ferroce_dataplane::netns::Hugepages;
use serde_json::Value;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_ferroce-dp");

fn run(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut c = Command::new("timeout");
    c.arg("120").arg(BIN).args(args).stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().expect("run ferroce-dp");
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn dpdk_config_errors_name_the_field() {
    let (ok, _, err) = run(&["run", "--set", "net.address=198.18.1.300"], &[]);
    assert!(!ok);
    assert!(err.contains("net.address"), "{err}");
    let (ok, _, err) = run(
        &["run", "--set", "net.address=198.18.1.11"],
        &[("FERROCE_DP__FAULT__TX__LOSS", "1.5")],
    );
    assert!(!ok);
    assert!(err.contains("fault.tx.loss"), "{err}");
    let (ok, _, err) = run(
        &[
            "run",
            "--set",
            "net.address=198.18.1.11",
            "--set",
            "port.vdev=net_nosuch0",
        ],
        &[],
    );
    assert!(!ok);
    assert!(
        err.contains("net_nosuch") && err.contains("apt-get install dpdk"),
        "{err}"
    );
}

#[test]
fn dpdk_engine_from_config_with_hugepages_and_bench() {
    if !need_root("dpdk_engine_from_config_with_hugepages_and_bench") {
        return;
    }
    let _g = serial();
    let dir = std::env::temp_dir().join(format!("ferroce-cfg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cfg = dir.join("ring.toml");
    std::fs::write(
        &cfg,
        r#"
[eal]
args = ["--in-memory", "--no-pci", "--lcores=0@(0-1),1@(0-1)", "--log-level=warning"]
[port]
vdev = "net_ring0"
mbufs = 4095
[net]
address = "198.18.1.11"
[engine]
duration_s = 0.5
"#,
    )
    .unwrap();
    // Without a reservation the error says how to make one.
    let free = ferroce_dataplane::config::hugepages_free().unwrap_or(0);
    if free == 0 {
        let (ok, _, err) = run(&["run", "--config", cfg.to_str().unwrap()], &[]);
        assert!(!ok);
        assert!(
            err.contains("nr_hugepages") && err.contains("--no-huge"),
            "{err}"
        );
    }
    {
        let _huge = Hugepages::reserve(128).expect("reserve hugepages");
        let (ok, out, err) = run(&["run", "--json", "--config", cfg.to_str().unwrap()], &[]);
        assert!(ok, "engine with hugepages failed: {err}");
        let v: Value = serde_json::from_str(out.lines().last().unwrap_or("")).expect("json");
        assert_eq!(v["counters"]["port"]["name"], "net_ring0");
        assert!(err.contains("hugepages"), "{err}");
        // A short benchmark on net_ring (hugepages come from this reservation).
        let (ok, out, err) = run(
            &[
                "bench",
                "--pmd",
                "ring",
                "--seconds",
                "0.2",
                "--payloads",
                "64,1408",
                "--csv",
                "-",
            ],
            &[],
        );
        assert!(ok, "bench failed: {out}\n{err}");
        let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("net_ring,")).collect();
        assert!(
            out.contains("pmd,payload,raw_mpps,ferroce_mpps,ratio,goodput_gbps"),
            "{out}"
        );
        assert_eq!(lines.len(), 2, "{out}");
        println!("{out}");
    }
    // Released: back to what it was.
    assert_eq!(
        ferroce_dataplane::config::hugepages_free().unwrap_or(0),
        free
    );
    std::fs::remove_dir_all(&dir).ok();
}
