//! Misused verbs calls through the unmodified ABI (issue 15, item 4): `tests/c/misuse.c`,
//! compiled against the system `<infiniband/verbs.h>`, run over each device in a network
//! namespace with the engine on `net_af_packet`; the veth's far end reflects every frame (a
//! hairpin) so the program's two RC QPs reach each other. Bad arguments, wrong QP states,
//! memory of another protection domain, MRs deregistered and QPs destroyed with work
//! outstanding: each must get the answer rdma-core documents, and the process must neither
//! crash nor hang (every run is bounded by `timeout`).
//!
//! Needs root and DPDK's PMDs; prints SKIPPED otherwise. `FERROCE_VERBS_MODES=native|roce`
//! limits the devices.

use ferroce_dataplane::netns::{is_root, VethPair};
use std::process::Command;

#[path = "verbs_abi.rs"]
#[allow(dead_code)]
mod abi;

#[test]
fn misused_calls_get_their_documented_answers() {
    if !is_root() || ferroce_dataplane::config::pmd_dir().is_none() {
        eprintln!("SKIPPED: needs root and DPDK's PMDs");
        return;
    }
    let libs = abi::lib_dir("misuse");
    let bin = abi::build_c(&libs, "misuse");
    let pair = VethPair::create("mu", ["198.18.0.1", "198.18.0.2"], 24).expect("veth pair");
    if !abi::hairpin(&pair.ns[1], &pair.ifname[1]) {
        eprintln!("SKIPPED: no hairpin");
        return;
    }
    let modes: Vec<&str> = match std::env::var("FERROCE_VERBS_MODES").as_deref() {
        Ok("native") => vec!["ferroce0"],
        Ok("roce") => vec!["ferroce0_rocev2"],
        _ => vec!["ferroce0", "ferroce0_rocev2"],
    };
    let mut failures = Vec::new();
    for dev in modes {
        let out = Command::new("ip")
            .args(["netns", "exec", &pair.ns[0], "timeout", "-k", "5", "90"])
            .arg(&bin)
            .args(["-d", dev])
            .env("LD_LIBRARY_PATH", &libs)
            .env("FERROCE_IP", "198.18.0.11")
            .env(
                "FERROCE_PMD",
                format!("net_af_packet0,iface={},framecnt=8192", pair.ifname[0]),
            )
            .env_remove("FERROCE_LOSS")
            .output()
            .expect("run misuse");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let checks = text.lines().filter(|l| l.ends_with(": ok")).count();
        let bad: Vec<&str> = text.lines().filter(|l| l.ends_with(": FAIL")).collect();
        eprintln!(
            "misuse over {dev}: {checks} checks ok, {} failed",
            bad.len()
        );
        if !out.status.success() || !text.contains("RESULT ok") {
            failures.push(format!(
                "over {dev}: exit {:?} (124: timed out; a signal: crashed), failed: {bad:?}\n{text}",
                out.status.code()
            ));
        }
    }
    drop(pair);
    std::fs::remove_dir_all(&libs).ok();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
