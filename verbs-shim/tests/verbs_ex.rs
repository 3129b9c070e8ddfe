//! The extended verbs interfaces through the system `verbs.h` inline functions, which call
//! function pointers in the shim's objects (so the C program checks their layout, rdma-core
//! 44's): `tests/c/verbs_ex.c` (`ibv_create_cq_ex`, `ibv_start_poll` / `ibv_next_poll` /
//! `ibv_end_poll`, every `ibv_wc_read_*` the standard wc_flags ask for; `ibv_create_qp_ex`
//! with send ops, `ibv_qp_to_qp_ex`, `ibv_wr_start` / `ibv_wr_send(_imm)` /
//! `ibv_wr_set_ud_addr` / `ibv_wr_set_sge` / `ibv_wr_set_inline_data` / `ibv_wr_complete` /
//! `ibv_wr_abort`), over both devices,
//! in a network namespace with the engine on `net_af_packet` (its traffic is UD to its own
//! GID, which the shim delivers itself, and flushed receives). Bounded in time.
//!
//! Needs root and DPDK's af_packet PMD; skips otherwise.

use ferroce_dataplane::netns::{is_root, VethPair};
use std::process::Command;

#[path = "verbs_abi.rs"]
#[allow(dead_code)]
mod abi;

fn modes() -> Vec<&'static str> {
    match std::env::var("FERROCE_VERBS_MODES").as_deref() {
        Ok("native") => vec!["ferroce0"],
        Ok("roce") => vec!["ferroce0_rocev2"],
        _ => vec!["ferroce0", "ferroce0_rocev2"],
    }
}

#[test]
fn extended_cq_and_qp_through_the_inline_verbs() {
    if !is_root() || ferroce_dataplane::config::pmd_dir().is_none() {
        eprintln!("SKIPPED: needs root and DPDK's PMDs");
        return;
    }
    let libs = abi::lib_dir("cqex");
    let bin = abi::build_c(&libs, "verbs_ex");
    let pair = VethPair::create("x", ["198.18.0.1", "198.18.0.2"], 24).expect("veth pair");
    let mut failures = Vec::new();
    for dev in modes() {
        let out = Command::new("ip")
            .args(["netns", "exec", &pair.ns[0], "timeout", "-k", "5", "30"])
            .arg(&bin)
            .args(["-d", dev])
            .env("LD_LIBRARY_PATH", &libs)
            .env("FERROCE_IP", "198.18.0.11")
            .env(
                "FERROCE_PMD",
                format!("net_af_packet0,iface={},framecnt=8192", pair.ifname[0]),
            )
            .output()
            .expect("run verbs_ex");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let checks = text.lines().filter(|l| l.ends_with(": ok")).count();
        eprintln!("verbs_ex over {dev}: {checks} checks ok");
        if out.status.code() != Some(0) || !text.contains("RESULT ok") || text.contains(": FAIL") {
            failures.push(format!(
                "over {dev} (exit {:?}):\n{text}",
                out.status.code()
            ));
        }
    }
    drop(pair);
    std::fs::remove_dir_all(&libs).ok();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// XRC domains, SRQs and QPs through verbs.h's inline functions (`tests/c/xrc.c`): open /
/// close semantics (O_CREAT, O_EXCL, sharing through a file's inode, EBUSY while SRQs or
/// QPs use it), `ibv_create_srq_ex` with IBV_SRQT_XRC, `ibv_get_srq_num`, XRC_RECV and
/// XRC_SEND QPs, IBV_DEVICE_XRC; `ibv_open_qp` (a second handle keeps the QP and the domain
/// busy after the creator's handle is destroyed). Both devices pass the same
/// checks. No traffic (the engine starts with the first QP: a namespace).
#[test]
fn xrc_domains_srqs_and_qps_through_the_inline_verbs() {
    if !is_root() || ferroce_dataplane::config::pmd_dir().is_none() {
        eprintln!("SKIPPED: needs root and DPDK's PMDs");
        return;
    }
    let libs = abi::lib_dir("xrc");
    let bin = abi::build_c(&libs, "xrc");
    let file = libs.join("xrc_domain");
    let pair = VethPair::create("xr", ["198.18.0.1", "198.18.0.2"], 24).expect("veth pair");
    let mut failures = Vec::new();
    for dev in modes() {
        let out = Command::new("ip")
            .args(["netns", "exec", &pair.ns[0], "timeout", "-k", "5", "30"])
            .arg(&bin)
            .args(["-d", dev, "-f"])
            .arg(&file)
            .env("LD_LIBRARY_PATH", &libs)
            .env("FERROCE_IP", "198.18.0.11")
            .env(
                "FERROCE_PMD",
                format!("net_af_packet0,iface={},framecnt=8192", pair.ifname[0]),
            )
            .output()
            .expect("run xrc");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let checks = text.lines().filter(|l| l.ends_with(": ok")).count();
        eprintln!("xrc over {dev}: {checks} checks ok");
        // Every device runs the whole program (none stops early as unsupported).
        const XRC_CHECKS: usize = 43;
        if out.status.code() != Some(0)
            || !text.contains("RESULT ok")
            || text.contains(": FAIL")
            || checks != XRC_CHECKS
        {
            failures.push(format!(
                "over {dev} (exit {:?}):\n{text}",
                out.status.code()
            ));
        }
    }
    drop(pair);
    std::fs::remove_dir_all(&libs).ok();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// XRC traffic through the unmodified ABI (`tests/c/xrc_rdma.c`): an XRC_SEND QP and an
/// XRC_RECV QP of one process (the veth's far end reflects every frame, a hairpin), SENDs to
/// two XRC SRQs, RDMA WRITE, READ, FETCH_ADD and CMP_SWAP into the target's memory, a WRITE
/// to memory of a PD with no SRQ in the domain refused, WRITE with immediate EOPNOTSUPP.
// checks: [XRC-1] [XRC-2] [XRC-3] [ROCE-11]
#[test]
fn xrc_send_write_read_and_atomics_through_the_abi() {
    if !is_root() || ferroce_dataplane::config::pmd_dir().is_none() {
        eprintln!("SKIPPED: needs root and DPDK's PMDs");
        return;
    }
    let libs = abi::lib_dir("xrc_rdma");
    let bin = abi::build_c(&libs, "xrc_rdma");
    run_over_hairpin("xrc_rdma", "xd", &bin, &libs, |_| 13);
}

/// The ferrocedv extension API (`include/ferrocedv.h`, `tests/c/ferrocedv.c`): two RC QPs of
/// one process (the veth's far end reflects every frame, a hairpin), RDMA WRITEs, then the
/// sender's connection and paths queried (state, planes, source ports, RTT, window, counters
/// that carried the bytes written), the plane restriction (the engine has one port: masks with
/// no plane of it are EINVAL, plane 0 is accepted and the next WRITEs stay on it), bad
/// arguments EINVAL, before RTR ENOTCONN, UD EOPNOTSUPP; on the RoCEv2 device EOPNOTSUPP.
#[test]
fn ferrocedv_queries_paths_and_planes_over_the_shim() {
    if !is_root() || ferroce_dataplane::config::pmd_dir().is_none() {
        eprintln!("SKIPPED: needs root and DPDK's PMDs");
        return;
    }
    let libs = abi::lib_dir("ferrocedv");
    let bin = abi::build_c_shim(&libs, "ferrocedv");
    // Native runs every check; RoCEv2 stops after its EOPNOTSUPP check.
    run_over_hairpin("ferrocedv", "dv", &bin, &libs, |dev| {
        if dev.ends_with("rocev2") {
            7
        } else {
            18
        }
    });
}

/// A RoCEv2 QP that stays in RTR past the shim's grace period (created then as a responder
/// only, send PSN 0) and then moves to RTS sends from the sq_psn RTS names
/// (`tests/c/late_rts.c`): before the fix its WRITE never completed on `ferroce0_rocev2`
/// (every request out of sequence at the peer). It also WRITEs to a QP just moved to RTR,
/// which must answer at once (67 ms, a resend after the requester's ACK timeout, while the
/// shim created RoCEv2 RTR QPs 2 ms late on a thread). Both devices.
#[test]
fn a_qp_late_to_rts_sends_from_its_sq_psn() {
    if !is_root() || ferroce_dataplane::config::pmd_dir().is_none() {
        eprintln!("SKIPPED: needs root and DPDK's PMDs");
        return;
    }
    let libs = abi::lib_dir("late_rts");
    let bin = abi::build_c(&libs, "late_rts");
    run_over_hairpin("late_rts", "lr", &bin, &libs, |_| 8);
}

/// Run C test `bin` once per device in a namespace whose veth's far end reflects every frame
/// (two QPs of one process reach each other through it), and require exit 0, `RESULT ok`, no
/// `: FAIL` line and `want(device)` checks ok. Removes `libs` afterwards.
fn run_over_hairpin(
    name: &str,
    tag: &str,
    bin: &std::path::Path,
    libs: &std::path::Path,
    want: impl Fn(&str) -> usize,
) {
    let pair = VethPair::create(tag, ["198.18.0.1", "198.18.0.2"], 24).expect("veth pair");
    if !abi::hairpin(&pair.ns[1], &pair.ifname[1]) {
        eprintln!("SKIPPED: no hairpin");
        return;
    }
    let mut failures = Vec::new();
    for dev in modes() {
        let out = Command::new("ip")
            .args(["netns", "exec", &pair.ns[0], "timeout", "-k", "5", "60"])
            .arg(bin)
            .args(["-d", dev])
            .env("LD_LIBRARY_PATH", libs)
            .env("FERROCE_IP", "198.18.0.11")
            .env(
                "FERROCE_PMD",
                format!("net_af_packet0,iface={},framecnt=8192", pair.ifname[0]),
            )
            .env_remove("FERROCE_LOSS")
            .output()
            .unwrap_or_else(|e| panic!("run {name}: {e}"));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let checks = text.lines().filter(|l| l.ends_with(": ok")).count();
        let want = want(dev);
        eprintln!("{name} over {dev}: {checks} checks ok");
        if out.status.code() != Some(0)
            || !text.contains("RESULT ok")
            || text.contains(": FAIL")
            || checks != want
        {
            failures.push(format!(
                "over {dev} (exit {:?}; 124: timed out; {checks} checks ok, {want} wanted):\n{text}",
                out.status.code()
            ));
        }
    }
    drop(pair);
    std::fs::remove_dir_all(libs).ok();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
