//! UD through the unmodified verbs ABI (issue 13, item 3): `tests/c/ud_grh.c`, built against
//! the system `infiniband/verbs.h`, run on both devices in a network namespace of its own
//! (one engine on `net_af_packet`; the two UD QPs talk through the device's own GID, so the
//! datagrams loop back inside the engine as on a NIC). It checks the work completion of a UD
//! receive (src_qp, IBV_WC_GRH, IBV_WC_WITH_IMM, byte_len with the 40-byte GRH area), the GRH
//! area itself (IPv4 header in its last 20 bytes), `ibv_create_ah_from_wc`, the Q_Key rules
//! and the payload limit (RoCEv2: the port's MTU, 1024 on this 1500-byte link, a longer
//! message completing without a packet; native: 4096, a longer one refused).
//! The wire side (IBTA UD to another host) is `verbs_apps.rs`'s `ibv_ud_pingpong` and the rxe
//! interop matrix.
//!
//! Needs root, a C compiler, libibverbs-dev and DPDK's af_packet PMD; prints SKIP otherwise.

use ferroce_dataplane::netns::{is_root, VethPair};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

#[path = "verbs_abi.rs"]
#[allow(dead_code)]
mod abi;
#[path = "support/run.rs"]
#[allow(dead_code)]
mod run;

#[test]
fn ud_completion_grh_and_ah_from_wc_on_both_devices() {
    if !is_root()
        || !Path::new("/usr/include/infiniband/verbs.h").exists()
        || ferroce_dataplane::config::pmd_dir().is_none()
        || Command::new("cc").arg("--version").output().is_err()
    {
        eprintln!("SKIP: needs root, cc, libibverbs-dev and DPDK's af_packet PMD");
        return;
    }
    let libs = abi::lib_dir("ud_grh");
    let bin = abi::build_c(&libs, "ud_grh");
    let pair = VethPair::create("u", ["198.18.0.1", "198.18.0.2"], 24).expect("veth pair");
    let mut failures = Vec::new();
    // RoCEv2: a message above the port's MTU completes as nothing (IBTA C10-93.1.1, rxe);
    // native UD refuses one above 4096 bytes.
    for (dev, args) in [
        ("ferroce0_rocev2", ["-m", "1024", "-s"].as_slice()),
        ("ferroce0", ["-m", "4096"].as_slice()),
    ] {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &pair.ns[0], "timeout", "-k", "5", "60"])
            .arg(&bin)
            .args(["-d", dev])
            .args(args)
            .env("LD_LIBRARY_PATH", &libs)
            .env("FERROCE_IP", "198.18.0.11")
            .env(
                "FERROCE_PMD",
                format!("net_af_packet0,iface={},framecnt=4096", pair.ifname[0]),
            );
        let (r, _) = run::start(c, &format!("ud_grh-{dev}")).finish(Duration::from_secs(70));
        let r = r.expect("ud_grh within its time limit");
        eprintln!("{dev}: {}\n{}", r.describe(), r.out);
        if r.code != Some(0) || !r.out.contains("RESULT ok") || r.out.matches(": ok").count() != 4 {
            failures.push(format!("{dev}: {}\n{}", r.describe(), r.out));
        }
    }
    drop(pair);
    std::fs::remove_dir_all(&libs).ok();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
