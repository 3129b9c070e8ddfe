//! UCX (`ucx-utils` 1.13: `ucx_perftest`) and libfabric (`libfabric-bin` 1.17: `fi_pingpong`)
//! over the shim, unchanged (issue 14, item 2): two processes in two network namespaces, each
//! with its engines on `net_af_packet`, on each device, with and without 1 % loss
//! (`FERROCE_LOSS=0.01` on both sides). Nothing is set beyond naming the device (and, for
//! UCP, the transport): no GID index, no UCX or libfabric tuning.
//!
//! Each case starts the server in namespace 1, waits for it to listen on its TCP port (both
//! tools exchange addresses over TCP), runs the client in namespace 0 and checks both exit
//! statuses and the client's report:
//! - `ucx_perftest -x rc_verbs -t put_bw` (RDMA WRITE) and `-t am_lat`; `-x ud_verbs -t am_lat`
//!   (UCT: the transport and device named with `-x`/`-d`);
//! - `ucx_perftest -t tag_bw` over `UCX_TLS=rc_verbs,ud_verbs:aux` (UCP's wire-up rides UD) and
//!   over `UCX_TLS=ud_verbs`, and `-t ucp_put_bw` over `ud_verbs` (UD has no RDMA: UCP's put
//!   over active messages); the log must show the endpoint on that transport and device;
//! - `fi_pingpong -p verbs -e rdm` (libfabric's RDM over verbs DGRAM, `ofi_rxd`) with
//!   `FI_VERBS_DEVICE_NAME`.
//!
//! `ucx_info_lists_rc_and_ud_on_both_devices`: `ucx_info -d` with engines lists both
//! transports on both devices.
//!
//! Both tools open every device, so every case also runs the other device's engine in the
//! same process (the RoCEv2 device beside the native one on a pcap port, see
//! `verbs-shim/src/engines.rs`). Needs root, DPDK's af_packet and pcap PMDs, the tools and the
//! uverbs nodes `scripts/setup.sh` creates; prints SKIPPED without the first three and fails
//! with a pointer to the set-up without the nodes. Every child is bounded in time; the cases
//! of this file run one at a time (a static lock: two cores, shared).

use ferroce_dataplane::netns::{is_root, VethPair};
use run::{start, Run};
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[path = "verbs_abi.rs"]
#[allow(dead_code)]
mod abi;
#[path = "support/run.rs"]
#[allow(dead_code)]
mod run;

const PERFTEST: &str = "/usr/bin/ucx_perftest";
const PINGPONG: &str = "/usr/bin/fi_pingpong";
/// Per child: a case takes seconds; this only bounds a hang.
const LIMIT: Duration = Duration::from_secs(60);
/// Kernel addresses of the two namespaces (the tools' TCP exchange) and the engines'.
const KERNEL: [&str; 2] = ["198.18.14.1", "198.18.14.2"];
const ENGINE: [&str; 2] = ["198.18.14.11", "198.18.14.12"];

static SERIAL: Mutex<()> = Mutex::new(());

/// One client/server run.
struct Case {
    name: String,
    bin: &'static str,
    server: Vec<String>,
    client: Vec<String>,
    env: Vec<(String, String)>,
    /// What the client's output must contain.
    expect: Vec<String>,
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

fn cases(dev: &str) -> Vec<Case> {
    let port = format!("{dev}:1");
    let uct = |tl: &str, test: &str, n: &str| Case {
        name: format!("{tl} {test}"),
        bin: PERFTEST,
        server: s(&["-d", &port, "-x", tl]),
        client: s(&[KERNEL[1], "-d", &port, "-x", tl, "-t", test, "-n", n]),
        env: vec![],
        expect: vec![format!("Final: {n} ")],
    };
    let ucp = |tls: &str, tl: &str, test: &str, n: &str| Case {
        name: format!("UCX_TLS={tls} {test}"),
        bin: PERFTEST,
        server: vec![],
        client: s(&[KERNEL[1], "-t", test, "-n", n, "-s", "4096"]),
        env: vec![
            ("UCX_NET_DEVICES".into(), port.clone()),
            ("UCX_TLS".into(), tls.into()),
            // The endpoint configuration lines (which transport carries the traffic).
            ("UCX_LOG_LEVEL".into(), "info".into()),
        ],
        expect: vec![format!("Final: {n} "), format!("({tl}/{port})")],
    };
    vec![
        uct("rc_verbs", "put_bw", "1000"),
        uct("rc_verbs", "am_lat", "300"),
        ucp("rc_verbs,ud_verbs:aux", "rc_verbs", "tag_bw", "500"),
        uct("ud_verbs", "am_lat", "300"),
        ucp("ud_verbs", "ud_verbs", "tag_bw", "500"),
        ucp("ud_verbs", "ud_verbs", "ucp_put_bw", "500"),
        Case {
            name: "fi_pingpong -e rdm".into(),
            bin: PINGPONG,
            server: s(&["-p", "verbs", "-e", "rdm", "-I", "50", "-S", "64"]),
            client: s(&[
                "-p", "verbs", "-e", "rdm", "-I", "50", "-S", "64", KERNEL[1],
            ]),
            env: vec![("FI_VERBS_DEVICE_NAME".into(), dev.into())],
            expect: vec!["64 50 =50 ".into()],
        },
    ]
}

/// The lines worth showing of a report.
fn report(out: &str) -> String {
    out.lines()
        .filter(|l| {
            l.starts_with("Final:")
                || l.starts_with("64 ")
                || l.contains("ep_cfg")
                || l.contains("ERROR")
                || l.contains("ferroce verbs")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether anything listens on TCP in namespace `ns` (the server is the only process there).
fn listening(ns: &str) -> bool {
    Command::new("ip")
        .args(["netns", "exec", ns, "ss", "-Htln"])
        .output()
        .map(|o| !o.stdout.is_empty())
        .unwrap_or(false)
}

/// `r` (the `who` side) exited cleanly and printed `expect`; `other` is the other side's run,
/// shown with a failure (one side's error is often only in the other's output).
fn check(r: &Run, who: &str, other: &Run, case: &Case, dev: &str, loss: &str, expect: &[String]) {
    let what = format!("{dev}, loss {loss}, {}: {who}", case.name);
    assert!(
        r.signal.is_none() && r.code == Some(0),
        "{what}: {}:\n{}\n-- the other side ({}):\n{}",
        r.describe(),
        r.out,
        other.describe(),
        other.out
    );
    // Columns are padded: compare with each run of blanks as one space.
    let flat: String = r
        .out
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") + "\n")
        .collect();
    for e in expect {
        assert!(flat.contains(e.as_str()), "{what}: no {e:?} in:\n{}", r.out);
    }
}

/// Every case on device `dev` with loss probability `loss` on both engines.
fn matrix(dev: &str, loss: &str, tag: &str) {
    if !is_root() {
        eprintln!("SKIPPED: needs root (network namespaces)");
        return;
    }
    if !Path::new(PERFTEST).exists() || !Path::new(PINGPONG).exists() {
        eprintln!(
            "SKIPPED: no {PERFTEST} or {PINGPONG} (apt-get install ucx-utils libfabric-bin; \
             scripts/setup.sh does)"
        );
        return;
    }
    let Some(pmds) = ferroce_dataplane::config::pmd_dir() else {
        eprintln!("SKIPPED: DPDK PMDs not installed");
        return;
    };
    let has_pcap = std::fs::read_dir(&pmds)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("librte_net_pcap")
        });
    if !has_pcap {
        eprintln!(
            "SKIPPED: no DPDK pcap PMD in {} (the second device's port)",
            pmds.display()
        );
        return;
    }
    for i in 0..2 {
        let n = format!("/dev/infiniband/ferroce_uverbs{i}");
        assert!(
            Path::new(&n).exists(),
            "{n} is missing: UCX skips a device without its uverbs node; run \
             (. scripts/setup.sh; ferroce_setup test)"
        );
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let libs = abi::lib_dir(&format!("ucx-{tag}"));
    let pair = VethPair::create(tag, KERNEL, 24).expect("veth pair");
    let cmd = |k: usize, case: &Case, args: &[String]| {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &pair.ns[k], case.bin])
            .args(args)
            .env("LD_LIBRARY_PATH", &libs)
            .env("FERROCE_IP", ENGINE[k])
            .env(
                "FERROCE_PMD",
                format!("net_af_packet0,iface={},framecnt=8192", pair.ifname[k]),
            )
            .env("FERROCE_LOSS", loss);
        for (n, v) in &case.env {
            c.env(n, v);
        }
        c
    };
    let mut summary = Vec::new();
    for (i, case) in cases(dev).iter().enumerate() {
        let t0 = Instant::now();
        let server = start(cmd(1, case, &case.server), &format!("{tag}{i}s"));
        let t_listen = Instant::now();
        while !listening(&pair.ns[1]) && t_listen.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(100));
        }
        let client = start(cmd(0, case, &case.client), &format!("{tag}{i}c")).finish(LIMIT);
        let server = server.finish(LIMIT);
        let ((Some(client), _), (Some(server), _)) = (&client, &server) else {
            panic!(
                "{dev}, loss {loss}, {}: still running after {LIMIT:?}, killed:\n-- client:\n{}\n\
                 -- server:\n{}",
                case.name, client.1, server.1
            );
        };
        eprintln!(
            "{dev}, loss {loss}, {}: client {}, server {}, {:.1} s\n{}",
            case.name,
            client.describe(),
            server.describe(),
            t0.elapsed().as_secs_f64(),
            report(&client.out)
        );
        check(client, "client", server, case, dev, loss, &case.expect);
        check(server, "server", client, case, dev, loss, &[]);
        summary.push(format!(
            "{}: {:.1} s",
            case.name,
            t0.elapsed().as_secs_f64()
        ));
    }
    eprintln!("{dev}, loss {loss}: all passed: {}", summary.join("; "));
    drop(pair);
    std::fs::remove_dir_all(&libs).ok();
}

/// `ucx_info -d` in a namespace with engines: `rc_verbs` and `ud_verbs` on both devices (UCX
/// skips a device without its uverbs node, and one whose QPs fail).
#[test]
fn ucx_info_lists_rc_and_ud_on_both_devices() {
    if !is_root()
        || !Path::new("/usr/bin/ucx_info").exists()
        || ferroce_dataplane::config::pmd_dir().is_none()
    {
        eprintln!("SKIPPED: needs root, ucx_info and DPDK's PMDs");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let libs = abi::lib_dir("ucx-info");
    let pair = VethPair::create("ui", KERNEL, 24).expect("veth pair");
    let mut c = Command::new("ip");
    c.args(["netns", "exec", &pair.ns[0], "/usr/bin/ucx_info", "-d"])
        .env("LD_LIBRARY_PATH", &libs)
        .env("FERROCE_IP", ENGINE[0])
        .env(
            "FERROCE_PMD",
            format!("net_af_packet0,iface={},framecnt=8192", pair.ifname[0]),
        );
    let r = start(c, "ucx-info").wait(LIMIT);
    assert_eq!(r.code, Some(0), "ucx_info -d: {}:\n{}", r.describe(), r.out);
    // "# Transport: <tl>" then "# Device: <dev>".
    let mut found = Vec::new();
    let mut tl = "";
    for l in r.out.lines() {
        let l = l.trim_start_matches('#').trim();
        if let Some(t) = l.strip_prefix("Transport: ") {
            tl = t;
        } else if let Some(d) = l.strip_prefix("Device: ") {
            found.push(format!("{tl} {d}"));
        }
    }
    eprintln!("ucx_info -d: {found:?}");
    for want in [
        "rc_verbs ferroce0:1",
        "ud_verbs ferroce0:1",
        "rc_verbs ferroce0_rocev2:1",
        "ud_verbs ferroce0_rocev2:1",
    ] {
        assert!(
            found.iter().any(|f| f == want),
            "ucx_info -d lacks {want} (UCX skips a device without its node \
             /dev/infiniband/ferroce_uverbsN, made by scripts/setup.sh): {found:?}\n{}",
            r.out
        );
    }
    drop(pair);
    std::fs::remove_dir_all(&libs).ok();
}

#[test]
fn ucx_and_libfabric_on_ferroce0() {
    matrix("ferroce0", "0", "un");
}

#[test]
fn ucx_and_libfabric_on_ferroce0_with_loss() {
    matrix("ferroce0", "0.01", "ul");
}

#[test]
fn ucx_and_libfabric_on_ferroce0_rocev2() {
    matrix("ferroce0_rocev2", "0", "ur");
}

#[test]
fn ucx_and_libfabric_on_ferroce0_rocev2_with_loss() {
    matrix("ferroce0_rocev2", "0.01", "uq");
}
