//! A hostile peer on real packets (spec/security.md §3.1): a `ferroce-dp` engine in one
//! namespace (veth, net_af_packet, 198.18.9.12), and a kernel UDP socket in the other
//! (198.18.9.1, port 4792) sending native packets the test crafts: an OPEN flood (500 OPENs,
//! distinct connection ids, one address), packets for unknown connections, and ACKs naming
//! PSNs never sent on the connections it did get. The engine keeps at most its configured
//! connections, answers only the OPENs it accepts, and counts every refusal.

mod common;

use common::{need_root, serial, Dir, Proc};
use ferroce_dataplane::netns::VethPair;
use ferroce_transport::wire::{AckRepr, Body, OpenRepr, Packet, Sack256};
use serde_json::Value;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_ferroce-dp");
const KERNEL: [&str; 2] = ["198.18.9.1", "198.18.9.2"];
const ENGINE: &str = "198.18.9.12";
const PER_PEER: u64 = 16;
const OPENS: u64 = 500;

/// Sends hex datagrams (stdin, one a line) from port 4792 to the engine, then prints every
/// datagram received for `wait` seconds, as hex.
const SOCKET_PY: &str = r#"
import socket, sys, time
dst, wait = sys.argv[1], float(sys.argv[2])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("", 4792))
for line in sys.stdin:
    line = line.strip()
    if line:
        s.sendto(bytes.fromhex(line), (dst, 4792))
        time.sleep(0.0002)
s.settimeout(0.2)
end = time.time() + wait
while time.time() < end:
    try:
        d, _ = s.recvfrom(65536)
        print(d.hex(), flush=True)
    except socket.timeout:
        pass
"#;

fn emit(dst_conn: u32, body: Body<'_>) -> String {
    let mut buf = vec![0; 2048];
    let n = Packet {
        flags: 0,
        path: 0,
        dst_conn,
        body,
    }
    .emit(&mut buf)
    .unwrap();
    buf[..n].iter().map(|b| format!("{b:02x}")).collect()
}

/// Send `lines` from the kernel socket in namespace `ns`; the datagrams that came back.
fn socket_send(ns: &str, lines: &[String], wait_s: f64) -> Vec<Vec<u8>> {
    let mut c = Command::new("ip")
        .args([
            "netns",
            "exec",
            ns,
            "timeout",
            "60",
            "/usr/bin/python3",
            "-c",
            SOCKET_PY,
        ])
        .args([ENGINE, &wait_s.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    {
        let mut i = c.stdin.take().unwrap();
        for l in lines {
            writeln!(i, "{l}").unwrap();
        }
    }
    let out = c.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "socket script: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            (0..l.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(l.get(i..i + 2)?, 16).ok())
                .collect()
        })
        .collect()
}

fn counters(path: &Path) -> Value {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null)
}

// checks: [SEC-1] [SEC-3] [ACK-6]
#[test]
fn dpdk_hostile_socket_open_flood_unknown_conns_and_bogus_acks() {
    if !need_root("dpdk_hostile_socket_open_flood_unknown_conns_and_bogus_acks") {
        return;
    }
    let _g = serial();
    let veth = VethPair::create("h", KERNEL, 24).expect("veth pair in two namespaces");
    let dir = Dir(std::env::temp_dir().join(format!("ferroce-hostile-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let cpath = dir.0.join("counters.json");
    let cfg = dir.0.join("engine.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
[port]
vdev = "net_af_packet1,iface={iface},framecnt=4096"
mtu = 1500

[net]
address = "{ENGINE}"

[transport]
paths = 1
max_accepted = 64
max_accepted_per_peer = {PER_PEER}

[engine]
duration_s = 30

[counters]
json = "{c}"
interval_ms = 20
"#,
            iface = veth.ifname[1],
            c = cpath.display()
        ),
    )
    .unwrap();
    let _engine = Proc(Some(
        Command::new("ip")
            .args(["netns", "exec", &veth.ns[1], BIN, "run", "--config"])
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("ferroce-dp"),
    ));
    let t = Instant::now();
    while !cpath.exists() && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(cpath.exists(), "the engine did not start");

    // 1. The OPEN flood, plus packets for connection ids that do not exist.
    let mut lines: Vec<String> = (0..OPENS as u32)
        .map(|i| {
            emit(
                0,
                Body::Open(OpenRepr {
                    src_conn: 0x1000 + i,
                    paths: 1,
                    crowd: 0,
                    mtu: 1408,
                    line_rate_mbps: 1000,
                }),
            )
        })
        .collect();
    let ack = |cum_psn| {
        Body::Ack(AckRepr {
            cum_psn,
            sack: Sack256::default(),
            ecn_ce: 0,
            rate_hint_mbps: 0,
            ts_echo: 0,
            ack_delay_ns: 0,
        })
    };
    lines.extend((0..100u32).map(|i| emit(0xdead_0000 + i, ack(0))));
    let replies = socket_send(&veth.ns[0], &lines, 1.0);
    let accepted: Vec<u32> = replies
        .iter()
        .filter_map(|d| match Packet::parse(d) {
            Ok(Packet {
                body: Body::OpenAck(o),
                ..
            }) => Some(o.src_conn),
            _ => None,
        })
        .collect();
    // The first connection accepted was the endpoint's only one, so its OPEN_ACK said SOLE
    // if it left before the second OPEN arrived; then the second withdrew it with a repeated
    // OPEN_ACK (spec/transport.md COLD-4). At most that one connection is answered twice.
    let answers = accepted.len();
    let mut accepted = accepted;
    accepted.sort_unstable();
    accepted.dedup();
    assert!(
        answers - accepted.len() <= 1,
        "OPEN_ACKs: {answers} for {} connections (one repeat at most, the SOLE withdrawal)",
        accepted.len()
    );
    // 2. ACKs for PSNs never sent, on every connection it accepted.
    let bogus: Vec<String> = accepted.iter().map(|&id| emit(id, ack(5000))).collect();
    socket_send(&veth.ns[0], &bogus, 0.3);
    std::thread::sleep(Duration::from_millis(200));
    let c = counters(&cpath);
    let ep = &c["endpoint"];
    let conns = c["connections"].as_array().cloned().unwrap_or_default();
    let bogus_counted: u64 = conns
        .iter()
        .map(|x| x["rx_acks_bogus"].as_u64().unwrap_or(0))
        .sum();
    println!(
        "HOSTILE socket: {OPENS} OPENs -> {} OPEN_ACKs, {} connections, drop_open_limit {}; \
         100 unknown-connection packets -> drop_unknown_conn {}; {} bogus ACKs -> rx_acks_bogus {}",
        accepted.len(),
        conns.len(),
        ep["drop_open_limit"],
        ep["drop_unknown_conn"],
        bogus.len(),
        bogus_counted
    );
    assert_eq!(accepted.len() as u64, PER_PEER, "OPEN_ACKs");
    assert_eq!(conns.len() as u64, PER_PEER, "connections kept");
    assert_eq!(ep["drop_open_limit"].as_u64(), Some(OPENS - PER_PEER));
    assert!(ep["drop_unknown_conn"].as_u64().unwrap_or(0) >= 100, "{ep}");
    assert_eq!(bogus_counted, PER_PEER, "{conns:?}");
}
