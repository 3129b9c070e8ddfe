//! Unmodified rdma_cm programs (rping, ucmatose, rdma_server/rdma_client, qperf -cm1,
//! every perftest program with `-R`, and tests/c/cm_private.c) over ferroce's
//! librdmacm.so.1 and verbs shim: two processes in two network namespaces joined by a veth pair, each with
//! its own DPDK engine on `net_af_packet` (engine addresses 198.18.0.11/.12, which the
//! programs name; ucmatose names the kernel address 198.18.0.2 and reaches the engine
//! through `FERROCE_CM_MAP`), native mode, without and with 1 % injected loss on every
//! transmit. The `_rocev2` tests run rping, rdma_server/rdma_client, `ib_write_bw -R`,
//! `ib_send_lat -R`, cm_private.c and the failures over the RoCEv2 device and its IBTA CM on QP1 (`FERROCE_CM_DEVICE=ferroce0_rocev2`). Exit statuses and output are checked; every run is bounded in time. Also the
//! failures a program sees: no listener (REJECTED, 8), nobody there (UNREACHABLE, -110), an
//! unusable address (ADDR_ERROR).
//!
//! Needs root, rdmacm-utils, perftest and DPDK's af_packet PMD; skips otherwise. Both
//! libraries must be built: `cargo test --release -p ferroce-verbs -p ferroce-rdmacm --test
//! rdmacm_apps` builds them (the whole-workspace suite does too).

use ferroce_dataplane::netns::{is_root, VethPair};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// One test at a time: the namespaces' names and the two shared cores.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn prerequisites() -> Result<(), &'static str> {
    if !is_root() {
        return Err("needs root (network namespaces)");
    }
    for b in [
        "/usr/bin/rping",
        "/usr/bin/ucmatose",
        "/usr/bin/udaddy",
        "/usr/bin/ib_write_bw",
    ] {
        if !Path::new(b).exists() {
            return Err("install rdmacm-utils and perftest (scripts/setup.sh does)");
        }
    }
    if ferroce_dataplane::config::pmd_dir().is_none() {
        return Err("DPDK PMDs not installed");
    }
    Ok(())
}

/// A directory for LD_LIBRARY_PATH with librdmacm.so.1, libibverbs.so.1 and the stub
/// providers, all from this build.
fn lib_dir(tag: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let find = |name: &str| {
        [deps, deps.parent().unwrap()]
            .iter()
            .map(|d| d.join(name))
            .find(|p| p.exists())
            .unwrap_or_else(|| {
                panic!(
                    "{name} not built next to {}: run cargo test --release -p ferroce-verbs \
                     -p ferroce-rdmacm --test rdmacm_apps",
                    exe.display()
                )
            })
    };
    let d = std::env::temp_dir().join(format!("cm-libs-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    let link = |src: &Path, name: &str| {
        let dst = d.join(name);
        let _ = std::fs::remove_file(&dst);
        std::os::unix::fs::symlink(src, &dst).unwrap();
    };
    link(&find("librdmacm.so"), "librdmacm.so.1");
    link(&find("libibverbs.so"), "libibverbs.so.1");
    for l in ["libmlx5.so.1", "libefa.so.1", "libmlx4.so.1"] {
        let p = Path::new(ibverbs::STUB_DIR).join(l);
        if p.exists() {
            link(&p, l);
        }
    }
    d
}

struct Env {
    pair: VethPair,
    libs: PathBuf,
    /// `FERROCE_CM_DEVICE` of both sides: whose CM (and device) the programs use.
    device: &'static str,
}

impl Env {
    fn on(tag: &str, device: &'static str) -> Env {
        Env {
            pair: VethPair::create(tag, ["198.18.0.1", "198.18.0.2"], 24).expect("veth pair"),
            libs: lib_dir(tag),
            device,
        }
    }

    /// `cmd` in namespace `k` with engine k (198.18.0.11 + k) and `loss` on transmit.
    fn side(&self, k: usize, cmd: &str, loss: f64, map: &str, limit: Duration) -> Command {
        let mut c = Command::new("ip");
        // Line-buffered stdout (stdbuf): a program the time limit ends keeps what it printed
        // (rping's ~75-byte lines sit in a 4 KiB pipe buffer: a client cut off in its
        // teardown showed only its first 55 pings, whether or not it made the rest).
        c.args(["netns", "exec", &self.pair.ns[k], "timeout", "-k", "5"])
            .arg(format!("{}", limit.as_secs()))
            .args(["stdbuf", "-oL"])
            .args(cmd.split_whitespace());
        c.env("LD_LIBRARY_PATH", &self.libs)
            .env("LD_BIND_NOW", "1")
            .env("FERROCE_IP", format!("198.18.0.{}", 11 + k))
            .env(
                "FERROCE_PMD",
                format!("net_af_packet0,iface={},framecnt=8192", self.pair.ifname[k]),
            )
            .env("FERROCE_LOSS", format!("{loss}"))
            .env("FERROCE_CM_MAP", map)
            .env("FERROCE_CM_DEVICE", self.device)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.libs).ok();
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Server in namespace 1, then the client in namespace 0: (output, exit) of each.
fn run_two(
    env: &Env,
    server: &str,
    client: &str,
    loss: f64,
    map: &str,
) -> ((String, Option<i32>), (String, Option<i32>)) {
    let limit = Duration::from_secs(40);
    let s = env
        .side(1, server, loss, map, limit)
        .spawn()
        .expect("spawn server");
    std::thread::sleep(Duration::from_millis(1500));
    let c = env
        .side(0, client, loss, map, limit)
        .output()
        .expect("client");
    let s = s.wait_with_output().expect("server");
    ((text(&c), c.status.code()), (text(&s), s.status.code()))
}

/// Run a program pair lossless and at 1 % loss; `check(client, server)` says what is wrong.
fn pair_test(
    tag: &str,
    server: &str,
    client: &str,
    map: &str,
    check: impl Fn(&str, &str) -> Result<(), String>,
) {
    pair_test_on("ferroce0", tag, server, client, map, check)
}

/// [`pair_test`] with the CM of `device` (`ferroce0_rocev2`: the IBTA CM on QP1).
fn pair_test_on(
    device: &'static str,
    tag: &str,
    server: &str,
    client: &str,
    map: &str,
    check: impl Fn(&str, &str) -> Result<(), String>,
) {
    pair_test_at(device, tag, &[0.0, 0.01], server, client, map, check)
}

/// [`pair_test_on`] at the given loss rates.
fn pair_test_at(
    device: &'static str,
    tag: &str,
    losses: &[f64],
    server: &str,
    client: &str,
    map: &str,
    check: impl Fn(&str, &str) -> Result<(), String>,
) {
    if let Err(why) = prerequisites() {
        eprintln!("SKIP: {why}");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let env = Env::on(tag, device);
    let mut failures = Vec::new();
    for &loss in losses {
        let t0 = Instant::now();
        let mut tries = 0;
        let (r, ct, st) = loop {
            tries += 1;
            let ((ct, cc), (st, sc)) = run_two(&env, server, client, loss, map);
            let r = if cc != Some(0) || sc != Some(0) {
                Err(format!("exit: client {cc:?}, server {sc:?}"))
            } else {
                check(&ct, &st)
            };
            // Under loss, a program whose last exchange is a SEND and whose partner exits
            // as soon as that SEND completes can lose the final ACK with nobody left to
            // answer the retry (perftest's closing handshake): the client fails after its
            // results, on any RDMA device. Run such a case once more; twice is a failure.
            let teardown_race =
                loss > 0.0 && sc == Some(0) && cc != Some(0) && check(&ct, &st).is_ok();
            // perftest could not calibrate its clock (a loaded machine): its figures, which
            // the server may print from the client's report, are not measurements.
            let uncalibrated = [&ct, &st]
                .iter()
                .any(|o| o.contains("Correlation coefficient r^2"));
            if r.is_ok() || !(teardown_race || uncalibrated) || tries == 2 {
                break (r, ct, st);
            }
            eprintln!(
                "| {client:<50} | {:>4.1} % | {} (exit {cc:?}): once more",
                loss * 100.0,
                if uncalibrated {
                    "perftest's clock uncalibrated"
                } else {
                    "client failed after its results"
                }
            );
        };
        eprintln!(
            "| {client:<50} | {:>4.1} % | {} ({:.1} s)",
            loss * 100.0,
            if r.is_ok() { "pass" } else { "FAIL" },
            t0.elapsed().as_secs_f64()
        );
        if let Err(why) = r {
            failures.push(format!(
                "{client} at {loss}: {why}\nclient:\n{ct}\nserver:\n{st}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The `count` lines rping -v prints with `prefix`, in order, with rping's pattern.
fn rping_lines(out: &str, prefix: &str, count: usize) -> Result<(), String> {
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with(prefix)).collect();
    if lines.len() != count {
        return Err(format!("{} {prefix:?} lines, want {count}", lines.len()));
    }
    for (i, l) in lines.iter().enumerate() {
        // rping's buffer: "rdma-ping-%d: " then characters from 'A' + i, cycling
        // through 'A'..='z' (58 of them).
        let want = format!("{prefix}rdma-ping-{i}: ");
        let start = (b'A' + (i % 58) as u8) as char;
        if !l.starts_with(&want) || !l[want.len()..].starts_with(start) {
            return Err(format!("line {i} is {l:?}"));
        }
    }
    Ok(())
}

#[test]
fn rping_100_pings() {
    pair_test(
        "r",
        "rping -s -v -C 100 -a 198.18.0.12",
        "rping -c -v -C 100 -a 198.18.0.12",
        "",
        |c, s| {
            rping_lines(c, "ping data: ", 100)?;
            rping_lines(s, "server ping data: ", 100)
        },
    );
}

/// rping over the RoCEv2 device: the IBTA CM on QP1 (spec/rocev2.md §10) and IBTA RC.
#[test]
fn rping_100_pings_rocev2() {
    pair_test_on(
        "ferroce0_rocev2",
        "R",
        "rping -s -v -C 100 -a 198.18.0.12",
        "rping -c -v -C 100 -a 198.18.0.12",
        "",
        |c, s| {
            rping_lines(c, "ping data: ", 100)?;
            rping_lines(s, "server ping data: ", 100)
        },
    );
}

#[test]
fn ucmatose_through_the_address_map() {
    let ok = |t: &str| t.contains("data transfers complete") && t.contains("return status 0");
    for (device, tag) in [("ferroce0", "u"), ("ferroce0_rocev2", "u2")] {
        pair_test_on(
            device,
            tag,
            "ucmatose -c 4 -C 50",
            "ucmatose -s 198.18.0.2 -c 4 -C 50",
            "198.18.0.2=198.18.0.12",
            |c, s| match (ok(c), ok(s)) {
                (true, true) => Ok(()),
                _ => Err("no \"data transfers complete\" / \"return status 0\"".into()),
            },
        );
    }
}

/// udaddy: RDMA_PS_UDP ids, UD QPs from rdma_create_qp, SIDR on connect (spec/cm.md §2.5,
/// spec/rocev2.md §10), `event->param.ud` for ibv_create_ah, and UD sends both ways
/// (the server answers from ibv_create_ah_from_wc), through the address map like ucmatose.
#[test]
fn udaddy_through_the_address_map() {
    let ok = |t: &str| t.contains("data transfers complete") && t.contains("return status 0");
    let check = |c: &str, s: &str| match (ok(c), ok(s)) {
        (true, true) => Ok(()),
        _ => Err("no \"data transfers complete\" / \"return status 0\"".into()),
    };
    let (server, client) = ("udaddy -c 4 -C 50", "udaddy -s 198.18.0.2 -c 4 -C 50");
    let map = "198.18.0.2=198.18.0.12";
    pair_test_on("ferroce0", "ud", server, client, map, check);
    pair_test_at("ferroce0_rocev2", "ud2", &[0.0], server, client, map, check);
    // RoCEv2's UD is IBTA UD: a lost datagram stays lost and udaddy waits for it forever, so
    // at 1 % loss only the resolution (SIDR, retransmitted) runs: 4 ids, no messages.
    let resolved =
        |c: &str, s: &str| match (c.contains("return status 0"), s.contains("return status 0")) {
            (true, true) => Ok(()),
            _ => Err("no \"return status 0\"".into()),
        };
    pair_test_at(
        "ferroce0_rocev2",
        "ud3",
        &[0.01],
        "udaddy -c 4 -C 0",
        "udaddy -s 198.18.0.2 -c 4 -C 0",
        map,
        resolved,
    );
}

#[test]
fn rdma_server_and_rdma_client() {
    rdma_server_client("ferroce0", "s");
}

/// rdma_server / rdma_client over the RoCEv2 device's IBTA CM: rdma_create_ep, rdma_getaddrinfo
/// and the inline rdma_verbs.h calls.
#[test]
fn rdma_server_and_rdma_client_rocev2() {
    rdma_server_client("ferroce0_rocev2", "S");
}

fn rdma_server_client(device: &'static str, tag: &str) {
    pair_test_on(
        device,
        tag,
        "rdma_server",
        "rdma_client -s 198.18.0.12",
        "",
        |c, s| match (
            c.contains("rdma_client: end 0"),
            s.contains("rdma_server: end 0"),
        ) {
            (true, true) => Ok(()),
            _ => Err("no \"end 0\"".into()),
        },
    );
}

/// perftest's result row: "#bytes #iterations figures..." with positive figures (the client's
/// all of them; a server's may show a peak of 0.00, perftest's receiving side does).
fn perftest_row(out: &str, bytes: u64) -> Result<Vec<f64>, String> {
    row(out, bytes, |v| v.iter().all(|x| *x > 0.0))
}

fn server_row(out: &str, bytes: u64) -> Result<(), String> {
    row(out, bytes, |v| v.iter().any(|x| *x > 0.0)).map(|_| ())
}

fn row(out: &str, bytes: u64, ok: impl Fn(&[f64]) -> bool) -> Result<Vec<f64>, String> {
    // perftest prints this when it cannot calibrate its cycle counter against the clock (a
    // loaded VM): its figures are then not measurements (often 0.00), but the run itself,
    // the row with every iteration and exit status 0, still shows the transfers completed.
    let uncalibrated = out.contains("Correlation coefficient r^2");
    out.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() >= 4 && f[0].parse::<u64>() == Ok(bytes) && f[1] == "1000")
        .map(|f| f[2..].iter().filter_map(|x| x.parse().ok()).collect())
        .filter(|v: &Vec<f64>| !v.is_empty() && (uncalibrated || ok(v)))
        .ok_or_else(|| format!("no result row for {bytes} B with positive figures"))
}

/// Known to fail about one run in eight with IBV_WC_RETRY_EXC_ERR (the writes stop being
/// acknowledged) from a bug outside the CM: plain `ib_write_bw -x 1 -q 2` (two RC QPs on one
/// native connection, no rdma_cm) fails the same way; `-R` always uses two QPs (its
/// handshake QP and the test QP).
#[test]
fn perftest_write_bw_over_rdma_cm() {
    pair_test(
        "w",
        "ib_write_bw -R -d ferroce0 -F -n 1000",
        "ib_write_bw -R -d ferroce0 -F -n 1000 198.18.0.12",
        "",
        |c, s| {
            perftest_row(c, 65536)?;
            server_row(s, 65536)
        },
    );
}

/// ib_write_bw -R over the RoCEv2 device and its CM.
#[test]
fn perftest_write_bw_over_rdma_cm_rocev2() {
    pair_test_on(
        "ferroce0_rocev2",
        "W",
        "ib_write_bw -R -d ferroce0_rocev2 -F -n 1000",
        "ib_write_bw -R -d ferroce0_rocev2 -F -n 1000 198.18.0.12",
        "",
        |c, s| {
            perftest_row(c, 65536)?;
            server_row(s, 65536)
        },
    );
}

#[test]
fn perftest_send_lat_over_rdma_cm() {
    send_lat("ferroce0", "l");
}

/// ib_send_lat -R over the RoCEv2 device and its CM.
#[test]
fn perftest_send_lat_over_rdma_cm_rocev2() {
    send_lat("ferroce0_rocev2", "L");
}

fn send_lat(device: &'static str, tag: &str) {
    pair_test_on(
        device,
        tag,
        &format!("ib_send_lat -R -d {device} -F -n 1000"),
        &format!("ib_send_lat -R -d {device} -F -n 1000 198.18.0.12"),
        "",
        |c, s| {
            perftest_row(c, 2)?;
            server_row(s, 2)
        },
    );
}

/// What rping prints when connecting fails: REJECTED (no listener: reason 8), UNREACHABLE
/// (nobody at the address: -ETIMEDOUT) and ADDR_ERROR (0.0.0.0); and udaddy (a UD id) with
/// nobody listening: UNREACHABLE with the SIDR status 1, as Linux's rdma_cm reports it.
#[test]
fn connection_failures_are_the_documented_events() {
    connection_failures(
        "ferroce0",
        "f",
        &[
            (RPING_TO_12, "cma event RDMA_CM_EVENT_REJECTED, error 8"),
            (
                "rping -c -a 198.18.0.13 -C 1",
                "cma event RDMA_CM_EVENT_UNREACHABLE, error -110",
            ),
            (
                "rping -c -a 0.0.0.0 -C 1",
                "cma event RDMA_CM_EVENT_ADDR_ERROR, error -99",
            ),
            // A UD id: the SIDR_REP's status 1 (nobody serves the port), as Linux reports.
            (
                UDADDY_TO_12,
                "udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1",
            ),
        ],
    );
}

/// The same over the RoCEv2 device's IBTA CM: REJECTED 8 (at the REQ's first retransmission,
/// after the listen grace), UNREACHABLE -110 (-ETIMEDOUT, as Linux's cma.c reports
/// IB_CM_REQ_ERROR) when the REQ's retries run out, ADDR_ERROR, and udaddy's UNREACHABLE 1
/// (SIDR_REP status 1). With rdma_cm's timers (16 REQs about 6.4 s apart, as Linux) nobody
/// answering takes some 100 s: these clients' REQs carry a response timeout of 16 and
/// max_cm_retries 1 (`FERROCE_CM_RESPONSE_TIMEOUT`, `FERROCE_CM_RETRIES`), two REQs 2.4 s
/// apart.
#[test]
fn connection_failures_are_the_documented_events_rocev2() {
    connection_failures(
        "ferroce0_rocev2",
        "F",
        &[
            (RPING_TO_12, "cma event RDMA_CM_EVENT_REJECTED, error 8"),
            (
                "rping -c -a 198.18.0.13 -C 1",
                "cma event RDMA_CM_EVENT_UNREACHABLE, error -110",
            ),
            (
                "rping -c -a 0.0.0.0 -C 1",
                "cma event RDMA_CM_EVENT_ADDR_ERROR, error -99",
            ),
            (
                UDADDY_TO_12,
                "udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1",
            ),
        ],
    );
}

const RPING_TO_12: &str = "rping -c -a 198.18.0.12 -C 1";
const UDADDY_TO_12: &str = "udaddy -s 198.18.0.12 -C 1";

/// Each client command of `cases` must fail and print its message.
fn connection_failures(device: &'static str, tag: &str, cases: &[(&str, &str)]) {
    if let Err(why) = prerequisites() {
        eprintln!("SKIP: {why}");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let env = Env::on(tag, device);
    let limit = Duration::from_secs(30);
    // The peer's engine runs (an idle server on another port) but nobody listens on 7174;
    // it outlives every case (ended below), or a slow case leaves the next with no peer.
    let idle = env
        .side(
            1,
            "rping -s -a 198.18.0.12 -p 9999 -C 1",
            0.0,
            "",
            limit * (cases.len() as u32 + 1),
        )
        .spawn()
        .expect("spawn idle server");
    std::thread::sleep(Duration::from_millis(1500));
    let mut failures = Vec::new();
    for &(cmd, want) in cases {
        let t0 = Instant::now();
        let mut c = env.side(0, cmd, 0.0, "", limit);
        if device == "ferroce0_rocev2" {
            c.env("FERROCE_CM_RESPONSE_TIMEOUT", "16")
                .env("FERROCE_CM_RETRIES", "1");
        }
        let o = c.output().expect("client");
        let t = text(&o);
        let ok = o.status.code() != Some(0) && t.contains(want);
        eprintln!(
            "| {cmd:<30} | {} | {want} ({:.1} s)",
            if ok { "pass" } else { "FAIL" },
            t0.elapsed().as_secs_f64()
        );
        if !ok {
            failures.push(format!("{cmd}: want {want:?}, exit {:?}:\n{t}", o.status));
        }
    }
    // SIGTERM to the one process this test started (timeout passes it on to rping).
    let _ = Command::new("kill").arg(idle.id().to_string()).status();
    let _ = idle.wait_with_output();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// tests/c/cm_private.c, built against the system rdma_cma.h and linked with -lrdmacm (ours
/// at run time): private data in REQ and REP, a consumer REJ with private data (status 28),
/// DISCONNECTED on both sides, RDMA_PS_IPOIB and rdma_join_multicast refused (an RDMA_PS_UDP
/// id created as UD), the channel fd readable exactly when an event waits, and a connection
/// the client leaves open at exit disconnected by its CM (DISCONNECTED at the server), and
/// rdma_destroy_id waiting for (not hanging on) an event another thread acknowledges late.
#[test]
fn private_data_reject_and_refusals_from_c() {
    private_data_from_c("ferroce0", "p");
}

/// The same over the RoCEv2 device's IBTA CM (private data in the MADs' fixed areas: REQ
/// after the cma_hdr, REP, REJ with consumer reason 28).
#[test]
fn private_data_reject_and_refusals_from_c_rocev2() {
    private_data_from_c("ferroce0_rocev2", "P");
}

fn private_data_from_c(device: &'static str, tag: &str) {
    if let Err(why) = prerequisites() {
        eprintln!("SKIP: {why}");
        return;
    }
    let bin = std::env::temp_dir().join(format!("cm-private-{tag}-{}", std::process::id()));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/cm_private.c");
    let cc = Command::new("cc")
        .args(["-O1", "-Wall", "-Werror", "-o"])
        .arg(&bin)
        .arg(&src)
        .args(["-lrdmacm", "-libverbs"])
        .output()
        .expect("run cc");
    assert!(
        cc.status.success(),
        "cc cm_private.c failed (librdmacm-dev installed?):\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let b = bin.display();
    pair_test_on(
        device,
        tag,
        &format!("{b} server 7000"),
        &format!("{b} client 198.18.0.12 7000"),
        "",
        |c, s| {
            let want = [
                (c, "client: REP private data \"ferroce-rep-data\""),
                (c, "client: REJ status 28, private data \"go-away\""),
                (
                    c,
                    "client: rdma_destroy_id waited for the event another thread held",
                ),
                (s, "server: REQ private data \"ferroce-req\""),
                (
                    s,
                    "server: DISCONNECTED for the connection the client left open at exit",
                ),
                (c, "RESULT ok"),
                (s, "RESULT ok"),
            ];
            match want.iter().find(|(t, w)| !t.contains(w)) {
                Some((_, w)) => Err(format!("no {w:?}")),
                None => Ok(()),
            }
        },
    );
    std::fs::remove_file(&bin).ok();
}

/// The rest of perftest over rdma_cm: SEND, READ and atomic bandwidth, WRITE, READ and
/// atomic latency (a result row with positive figures; on the server too where perftest
/// prints one: its READ and atomic latency servers are passive and print none).
#[test]
fn perftest_other_tests_over_rdma_cm() {
    for (prog, bytes, server_reports) in [
        ("ib_send_bw", 65536, true),
        ("ib_read_bw", 65536, true),
        ("ib_atomic_bw", 8, true),
        ("ib_write_lat", 2, true),
        ("ib_read_lat", 2, false),
        ("ib_atomic_lat", 8, false),
    ] {
        pair_test(
            "o",
            &format!("{prog} -R -d ferroce0 -F -n 1000"),
            &format!("{prog} -R -d ferroce0 -F -n 1000 198.18.0.12"),
            "",
            |c, s| {
                perftest_row(c, bytes)?;
                if server_reports {
                    server_row(s, bytes)?;
                }
                Ok(())
            },
        );
    }
}

/// `qperf -cm1`: qperf's RC tests with their connections made through rdma_cm, the server
/// (`qperf`, which serves until it is ended) in namespace 1, one client run per test naming
/// the server's kernel address, which `FERROCE_CM_MAP` maps to its engine; each at 0 and 1 %
/// loss. A test passes when qperf exits 0 and prints its figure with a positive value.
#[test]
fn qperf_rc_tests_over_rdma_cm() {
    if let Err(why) = prerequisites() {
        eprintln!("SKIP: {why}");
        return;
    }
    if !Path::new("/usr/bin/qperf").exists() {
        eprintln!("SKIP: install qperf (scripts/setup.sh does)");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let map = "198.18.0.2=198.18.0.12";
    let mut failures = Vec::new();
    for (device, loss) in [
        ("ferroce0", 0.0),
        ("ferroce0", 0.01),
        ("ferroce0_rocev2", 0.0),
        ("ferroce0_rocev2", 0.01),
    ] {
        let env = Env::on("q", device);
        let mut server = env
            .side(1, "qperf", loss, map, Duration::from_secs(200))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the qperf server");
        std::thread::sleep(Duration::from_millis(1000));
        for (test, what) in [
            ("rc_bw", "bw"),
            ("rc_lat", "latency"),
            ("rc_rdma_write_bw", "bw"),
            ("rc_rdma_read_lat", "latency"),
            ("rc_compare_swap_mr", "msg_rate"),
        ] {
            let t0 = Instant::now();
            let cmd = format!("qperf -cm1 -t 2 198.18.0.2 {test}");
            let o = env
                .side(0, &cmd, loss, map, Duration::from_secs(40))
                .output()
                .expect("qperf client");
            let out = text(&o);
            // e.g. "    bw  =  1.2 GB/sec" / "latency  =  85.3 us" / "msg_rate  =  12 K/sec"
            let value = out
                .lines()
                .find(|l| l.trim_start().starts_with(what) && l.contains('='))
                .and_then(|l| l.split('=').nth(1))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<f64>().ok());
            let ok = o.status.success() && value.is_some_and(|v| v > 0.0);
            eprintln!(
                "| {cmd:<50} | {device:<15} | {:>4.1} % | {} ({:.1} s) {value:?}",
                loss * 100.0,
                if ok { "pass" } else { "FAIL" },
                t0.elapsed().as_secs_f64()
            );
            if !ok {
                failures.push(format!(
                    "{cmd} on {device} at {loss}: {:?}\n{out}",
                    o.status.code()
                ));
            }
        }
        end_server(&mut server);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The qperf server serves until it is ended: ours, by its pid. SIGTERM, not SIGKILL: the pid
/// is `timeout`'s (ip netns exec execs it), which passes the signal on to qperf and the
/// children it forked per client; killed outright it would leave them serving on.
fn end_server(server: &mut std::process::Child) {
    // SAFETY: kill(2) on the pid of a child we spawned and have not yet waited for.
    unsafe { libc::kill(server.id() as libc::pid_t, libc::SIGTERM) };
    let _ = server.wait();
}

/// The shim's CM lives in the process (Linux's lives in the kernel and outlives it): a
/// process that exits right after `rdma_disconnect` must see its DREQ answered, and repeat
/// the DREP it answered with, before it goes, or the peer retries its DREQ into nothing for
/// the CM's full retry budget (16 x 6.4 s). The server loses 30 % of what it sends (the
/// client nothing). Which frames the loss hits depends on timing too: before the exiting
/// process hastened its DREQ and repeated its DREP, 2 to 3 of every 8 such runs hung the
/// client past its 40 s limit (2026-12-02, old and new libraries side by side).
#[test]
fn qperf_rc_bw_ends_when_the_servers_disconnect_messages_are_lost() {
    if let Err(why) = prerequisites() {
        eprintln!("SKIP: {why}");
        return;
    }
    if !Path::new("/usr/bin/qperf").exists() {
        eprintln!("SKIP: install qperf (scripts/setup.sh does)");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let map = "198.18.0.2=198.18.0.12";
    let mut failures = Vec::new();
    // The native device's qperf survived the same loss (8 of 8 runs) before the change too;
    // RoCEv2's CM is the one whose DREQ retries outlived the peer.
    let device = "ferroce0_rocev2";
    let env = Env::on("qd", device);
    for seed in 1..=6 {
        let mut server = env.side(1, "qperf", 0.3, map, Duration::from_secs(200));
        let mut server = server
            .env("FERROCE_DP__FAULT__TX__SEED", format!("{seed}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the qperf server");
        std::thread::sleep(Duration::from_millis(1000));
        let t0 = Instant::now();
        let cmd = "qperf -cm1 -t 2 198.18.0.2 rc_bw";
        let o = env
            .side(0, cmd, 0.0, map, Duration::from_secs(40))
            .output()
            .expect("qperf client");
        let out = text(&o);
        let ok = o.status.success() && out.lines().any(|l| l.trim_start().starts_with("bw"));
        eprintln!(
            "| {cmd} | {device:<15} | server loss 30 %, seed {seed} | {} ({:.1} s)",
            if ok { "pass" } else { "FAIL" },
            t0.elapsed().as_secs_f64()
        );
        if !ok {
            failures.push(format!(
                "{device}, seed {seed}: {:?}\n{out}",
                o.status.code()
            ));
        }
        end_server(&mut server);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// libfabric's verbs provider with connected (`-e msg`) endpoints, whose connections and
/// event queue are rdma_cm's (both devices, 0 and 1 % loss), and with datagram (`-e dgram`)
/// endpoints.
/// `fi_pingpong` names the server's kernel address, mapped to its engine by
/// `FERROCE_CM_MAP` (its own control connection is TCP to that address).
#[test]
fn fi_pingpong_msg_and_dgram_endpoints() {
    if !Path::new("/usr/bin/fi_pingpong").exists() {
        eprintln!("SKIP: install libfabric-bin (scripts/setup.sh does)");
        return;
    }
    let ok = |t: &str| t.lines().any(|l| l.contains("=10") && l.starts_with("64 "));
    pair_test(
        "f",
        "fi_pingpong -p verbs -e msg -d ferroce0 -I 10 -S 64",
        "fi_pingpong -p verbs -e msg -d ferroce0 -I 10 -S 64 198.18.0.2",
        "198.18.0.2=198.18.0.12",
        |c, _| {
            if ok(c) {
                Ok(())
            } else {
                Err("no result line \"64 ... =10\"".into())
            }
        },
    );
    pair_test_on(
        "ferroce0_rocev2",
        "f2",
        "fi_pingpong -p verbs -e msg -d ferroce0_rocev2 -I 10 -S 64",
        "fi_pingpong -p verbs -e msg -d ferroce0_rocev2 -I 10 -S 64 198.18.0.2",
        "198.18.0.2=198.18.0.12",
        |c, _| {
            if ok(c) {
                Ok(())
            } else {
                Err("no result line \"64 ... =10\"".into())
            }
        },
    );
    // Datagram endpoints (libfabric names a device's datagram domain `<device>-dgram`),
    // with data checks (-c). fi_pingpong sends each datagram once and waits for the answer
    // without a timeout (libfabric 1.17's util/pingpong.c: timeout_sec -1, no resend), so one
    // lost datagram stalls both sides for good, on a NIC as here: it needs a lossless
    // fabric. The native device's UD rides a reliable stream per host pair (spec/rocev2.md
    // §6), which resends what the 1 % loss drops: it must pass at both rates. The RoCEv2
    // device's UD is IBTA UD (a lost datagram stays lost, as on rxe): lossless only; at 1 %
    // a run that loses one of its 22 datagrams (about one in five) hangs (docs/verbs-devices.md).
    // 500 round trips natively: ~1,000 datagrams, so the 1 % run loses some (P(none) ~ e^-10).
    let dgram = |c: &str, _: &str| {
        if ok(c)
            || c.lines()
                .any(|l| l.contains("=500") && l.starts_with("64 "))
        {
            Ok(())
        } else {
            Err("no result line \"64 ... =10\" / \"=500\"".into())
        }
    };
    pair_test_on(
        "ferroce0",
        "g",
        "fi_pingpong -p verbs -e dgram -d ferroce0-dgram -I 500 -S 64 -c",
        "fi_pingpong -p verbs -e dgram -d ferroce0-dgram -I 500 -S 64 -c 198.18.0.2",
        "198.18.0.2=198.18.0.12",
        dgram,
    );
    pair_test_at(
        "ferroce0_rocev2",
        "g2",
        &[0.0],
        "fi_pingpong -p verbs -e dgram -d ferroce0_rocev2-dgram -I 10 -S 64 -c",
        "fi_pingpong -p verbs -e dgram -d ferroce0_rocev2-dgram -I 10 -S 64 -c 198.18.0.2",
        "198.18.0.2=198.18.0.12",
        dgram,
    );
}
