//! libfabric (Debian's `libfabric-bin`: `fi_info`, `fi_pingpong`) and UCX (`ucx_info`) over
//! the shim and the stub vendor libraries (issue 14). libfabric's EFA provider queries every
//! verbs device with `efadv_query_device` (the stub `libefa.so.1`), and its verbs provider
//! opens every device and creates a PD, a CQ and QPs on it while listing it (`vrb_get_qp_cap`,
//! `vrb_find_max_inline`): listing starts the engine, so without a DPDK port the verbs devices
//! are left out.
//!
//! - `fi_info_over_the_shim_does_not_crash`: no engine (no `FERROCE_PMD`): `fi_info -p verbs`,
//!   `fi_info -p efa`, `fi_info` and `ucx_info -d` end without a signal (the stub's fake success
//!   made `fi_info` die of SIGFPE), `-p verbs` either lists the devices or reports no data.
//! - `fi_info_lists_the_ferroce_devices_with_an_engine`: in a network namespace with an engine
//!   on `net_af_packet`: `fi_info -p verbs` lists `ferroce0` (MSG, DGRAM, RDM over ofi_rxd),
//!   and `ferroce0_rocev2` (both devices in one process), `FI_VERBS_DEVICE_NAME=ferroce0_rocev2`
//!   the RoCEv2 device alone, and `fi_pingpong -e rdm` (no `FI_VERBS_GID_IDX`) runs 10
//!   ping-pongs between two namespaces. Both modes, with and without loss: `verbs_ucx.rs`.
//!
//! Needs `fi_info` (and root and DPDK's af_packet PMD for the second); prints SKIPPED
//! otherwise. Every run is bounded in time.

use ferroce_dataplane::netns::{is_root, VethPair};
use run::{run, Run};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

#[path = "verbs_abi.rs"]
#[allow(dead_code)]
mod abi;
#[path = "support/run.rs"]
#[allow(dead_code)]
mod run;

const FI_INFO: &str = "/usr/bin/fi_info";
const FI_PINGPONG: &str = "/usr/bin/fi_pingpong";
const UCX_INFO: &str = "/usr/bin/ucx_info";
const LIMIT: Duration = Duration::from_secs(60);

/// The lines of a listing that say what it found (provider, domain, endpoint type) and its
/// errors, each distinct line once with its count.
fn summary(out: &str) -> String {
    let mut seen: Vec<(String, usize)> = Vec::new();
    for l in out.lines() {
        let t = l.trim();
        if t.starts_with("provider:")
            || t.starts_with("domain:")
            || t.starts_with("type:")
            || t.starts_with("fi_getinfo")
            || t.starts_with("ferroce verbs")
            || t.contains("rror")
        {
            match seen.iter_mut().find(|(s, _)| s == t) {
                Some((_, n)) => *n += 1,
                None => seen.push((t.to_string(), 1)),
            }
        }
    }
    seen.iter()
        .map(|(s, n)| format!("  {n:>3} × {s}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn no_signal(r: &Run, what: &str) {
    assert!(
        r.signal.is_none(),
        "{what} died of signal {:?} (8 = SIGFPE, 11 = SIGSEGV):\n{}",
        r.signal,
        r.out
    );
    for bad in [
        "symbol lookup error",
        "error while loading",
        "no version information",
    ] {
        assert!(!r.out.contains(bad), "{what}: {bad}:\n{}", r.out);
    }
}

#[test]
fn fi_info_over_the_shim_does_not_crash() {
    if !Path::new(FI_INFO).exists() {
        eprintln!("SKIPPED: no {FI_INFO} (apt-get install libfabric-bin; scripts/setup.sh does)");
        return;
    }
    let libs = abi::lib_dir("fabric");
    let cmd = |bin: &str, args: &[&str]| {
        let mut c = Command::new(bin);
        c.args(args)
            .env("LD_LIBRARY_PATH", &libs)
            .env("FERROCE_IP", "198.18.0.11")
            .env_remove("FERROCE_PMD")
            .env_remove("FERROCE_CONFIG");
        c
    };

    let r = run(cmd(FI_INFO, &["-p", "verbs"]), LIMIT, "verbs");
    eprintln!(
        "fi_info -p verbs (no engine): {}\n{}",
        r.describe(),
        summary(&r.out)
    );
    no_signal(&r, "fi_info -p verbs");
    // Without a DPDK port QP creation fails, so the verbs provider drops both devices and
    // fi_getinfo returns -FI_ENODATA (61); a listing, if QPs could be created, is fine too.
    let listed = r.code == Some(0) && r.out.contains("provider: verbs");
    let no_data = r.code == Some(61) && r.out.contains("fi_getinfo: -61");
    assert!(
        listed || no_data,
        "fi_info -p verbs: {}:\n{}",
        r.describe(),
        r.out
    );

    let r = run(cmd(FI_INFO, &["-p", "efa"]), LIMIT, "efa");
    eprintln!(
        "fi_info -p efa (no engine): {}\n{}",
        r.describe(),
        summary(&r.out)
    );
    no_signal(&r, "fi_info -p efa");
    // No device is EFA: the provider skips them all (efadv_query_device: EOPNOTSUPP).
    assert!(
        r.code == Some(61) && !r.out.contains("provider: efa"),
        "fi_info -p efa: {}:\n{}",
        r.describe(),
        r.out
    );

    let r = run(cmd(FI_INFO, &[]), LIMIT, "all");
    let providers: std::collections::BTreeSet<&str> = r
        .out
        .lines()
        .filter_map(|l| l.strip_prefix("provider: "))
        .collect();
    eprintln!(
        "fi_info (no engine): {}, providers: {providers:?}",
        r.describe()
    );
    no_signal(&r, "fi_info");
    assert!(
        r.code == Some(0) && !providers.is_empty(),
        "fi_info:\n{}",
        r.out
    );

    if Path::new(UCX_INFO).exists() {
        let r = run(cmd(UCX_INFO, &["-d"]), LIMIT, "ucx");
        let transports: Vec<&str> = r
            .out
            .lines()
            .filter_map(|l| l.trim_start_matches('#').trim().strip_prefix("Transport: "))
            .collect();
        eprintln!("ucx_info -d: {}, transports: {transports:?}", r.describe());
        no_signal(&r, "ucx_info -d");
        assert_eq!(r.code, Some(0), "ucx_info -d:\n{}", r.out);
    }
    std::fs::remove_dir_all(&libs).ok();
}

#[test]
fn fi_info_lists_the_ferroce_devices_with_an_engine() {
    if !is_root() {
        eprintln!("SKIPPED: needs root (network namespaces)");
        return;
    }
    if !Path::new(FI_INFO).exists() || !Path::new(FI_PINGPONG).exists() {
        eprintln!("SKIPPED: no fi_info/fi_pingpong (apt-get install libfabric-bin; scripts/setup.sh does)");
        return;
    }
    if ferroce_dataplane::config::pmd_dir().is_none() {
        eprintln!("SKIPPED: DPDK PMDs not installed");
        return;
    }
    let libs = abi::lib_dir("fabric-eng");
    let pair = VethPair::create("fi", ["198.18.0.1", "198.18.0.2"], 24).expect("veth pair");
    // In namespace k with engine k (address 198.18.0.11 + k on the namespace's veth end).
    let side = |k: usize, bin: &str, args: &[&str], env: &[(&str, &str)]| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &pair.ns[k], bin])
            .args(args)
            .env("LD_LIBRARY_PATH", &libs)
            .env("FERROCE_IP", format!("198.18.0.{}", 11 + k))
            .env(
                "FERROCE_PMD",
                format!("net_af_packet0,iface={},framecnt=8192", pair.ifname[k]),
            );
        for (n, v) in env {
            c.env(n, v);
        }
        c
    };

    let r = run(side(0, FI_INFO, &["-p", "verbs"], &[]), LIMIT, "eng-verbs");
    eprintln!(
        "fi_info -p verbs (engine): {}\n{}",
        r.describe(),
        summary(&r.out)
    );
    no_signal(&r, "fi_info -p verbs");
    assert_eq!(r.code, Some(0), "fi_info -p verbs:\n{}", r.out);
    for want in [
        "domain: ferroce0\n",
        "domain: ferroce0-dgram",
        "type: FI_EP_MSG",
        "type: FI_EP_DGRAM",
        "provider: verbs;ofi_rxd",
    ] {
        assert!(
            r.out.contains(want),
            "fi_info -p verbs lacks {want:?}:\n{}",
            r.out
        );
    }
    // Both devices in one listing: the verbs provider creates QPs on each (one engine per
    // device in one process).
    for want in ["domain: ferroce0_rocev2\n", "domain: ferroce0_rocev2-dgram"] {
        assert!(
            r.out.contains(want),
            "fi_info -p verbs lacks {want:?}:\n{}",
            r.out
        );
    }

    let r = run(
        side(
            0,
            FI_INFO,
            &["-p", "verbs"],
            &[("FI_VERBS_DEVICE_NAME", "ferroce0_rocev2")],
        ),
        LIMIT,
        "eng-roce",
    );
    eprintln!(
        "FI_VERBS_DEVICE_NAME=ferroce0_rocev2 fi_info -p verbs: {}\n{}",
        r.describe(),
        summary(&r.out)
    );
    no_signal(&r, "fi_info -p verbs (RoCEv2)");
    assert!(
        r.code == Some(0) && r.out.contains("domain: ferroce0_rocev2"),
        "{}",
        r.out
    );

    // fi_pingpong, RDM over verbs DGRAM (ofi_rxd): server in namespace 1, client in 0, with
    // libfabric's default GID index (0, the link-local GID: it names the host too).
    let env: [(&str, &str); 0] = [];
    let args = ["-p", "verbs", "-e", "rdm", "-I", "10", "-S", "64"];
    let server = std::thread::scope(|s| {
        let server = s.spawn(|| run(side(1, FI_PINGPONG, &args, &env), LIMIT, "pp-server"));
        std::thread::sleep(Duration::from_millis(1500));
        let mut cargs = args.to_vec();
        cargs.push("198.18.0.2");
        let client = run(side(0, FI_PINGPONG, &cargs, &env), LIMIT, "pp-client");
        let server = server.join().unwrap();
        eprintln!(
            "fi_pingpong -e rdm: client {}, server {}\n{}",
            client.describe(),
            server.describe(),
            client
                .out
                .lines()
                .filter(|l| l.starts_with("bytes") || l.starts_with("64 "))
                .collect::<Vec<_>>()
                .join("\n")
        );
        no_signal(&client, "fi_pingpong client");
        assert!(
            client.code == Some(0) && client.out.contains("=10"),
            "fi_pingpong client: {}:\n{}",
            client.describe(),
            client.out
        );
        server
    });
    no_signal(&server, "fi_pingpong server");
    assert_eq!(server.code, Some(0), "fi_pingpong server:\n{}", server.out);
    drop(pair);
    std::fs::remove_dir_all(&libs).ok();
}
