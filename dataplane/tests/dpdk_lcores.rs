//! An engine on two lcores (engine::shard): a client engine and a server engine of two shards
//! each, joined by net_ring, shard k of both on worker lcore k+1. Six connections opened
//! through the sharded handle (three per shard) move verified SENDs; the test checks that
//! each shard owns the connections its id class says, that both shards of both engines
//! carried and completed transfers, that the dispatcher really forwarded frames to shard 1,
//! and that no command was refused (a command routed to the wrong shard is: unknown
//! connection).

use ferroce_dataplane::bench::ring_ports;
use ferroce_dataplane::config::default_eal_args;
use ferroce_dataplane::dpdk::Eal;
use ferroce_dataplane::engine::{run_together, sharded, EngineParams, Output, ShardedHandle};
use ferroce_dataplane::io::DpdkIo;
use ferroce_transport::mem::{access, Memory};
use ferroce_transport::{
    CompletionOp, ConnId, EndpointConfig, Event, RecvWr, SendOp, SendWr, Sge, Status,
};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

const IP_A: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 41);
const IP_B: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 42);
const CONNS: usize = 6;
const MSGS: u32 = 40;
const SIZE: usize = 3000;
const PD: u32 = 1;
const BASE: u64 = 0x10_0000;

/// EAL with two worker lcores (the shared test EAL has one).
fn eal() -> Eal {
    let mut args = vec!["ferroce-test-lcores".to_string()];
    for a in default_eal_args() {
        if a.starts_with("--lcores=") {
            let set = a
                .split_once('(')
                .and_then(|(_, r)| r.split_once(')'))
                .map(|(s, _)| s.to_string())
                .unwrap_or_else(|| "0".into());
            args.push(format!("--lcores=0@({set}),1@({set}),2@({set})"));
        } else if a == "256" {
            args.push("512".into());
        } else {
            args.push(a);
        }
    }
    Eal::init(args).expect("EAL init")
}

/// The bytes of message `m` of connection slot `c`: identity first, then a pattern of both.
fn pattern(c: u32, m: u32) -> Vec<u8> {
    let mut v: Vec<u8> = (0..SIZE)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(c * 7 + m * 13) as u8)
        .collect();
    v[..4].copy_from_slice(&c.to_be_bytes());
    v[4..8].copy_from_slice(&m.to_be_bytes());
    v
}

fn sge(lkey: u32, addr: u64) -> Sge {
    Sge {
        lkey,
        addr,
        len: SIZE as u32,
    }
}

fn snapshots(h: &ShardedHandle) -> Vec<Value> {
    h.shards()
        .iter()
        .map(|s| s.snapshot().expect("snapshot"))
        .collect()
}

#[test]
fn dpdk_two_lcores_shard_connections() {
    if !ferroce_dataplane::netns::is_root() {
        eprintln!("SKIPPED dpdk_two_lcores_shard_connections: needs root (DPDK)");
        return;
    }
    let eal = eal();
    let workers = eal.worker_lcores();
    assert!(workers.len() >= 2, "two worker lcores: {workers:?}");
    let (pa, pb) = ring_ports(&eal, 1500, 8191).expect("ring ports");
    let mut ecfg = EndpointConfig {
        line_rate_mbps: 10_000,
        ..Default::default()
    };
    ecfg.conn.paths = 4;
    let mk = |port: ferroce_dataplane::dpdk::Port, ip, seed| {
        let pool = port.pool().clone();
        let p = EngineParams {
            ip,
            seed,
            ..Default::default()
        };
        let mut c = ecfg.clone();
        c.seed ^= seed;
        sharded(
            Box::new(DpdkIo::new(port)),
            pool,
            2,
            1500,
            c,
            p,
            eal.tsc_hz(),
        )
        .expect("sharded engine")
    };
    let (mut ce, client) = mk(pa, IP_A, 1);
    let (mut se, server) = mk(pb, IP_B, 2);
    assert_eq!((ce.len(), se.len()), (2, 2));
    // Before any engine runs: every accepted connection gets stream 1 at once.
    server.listen(vec![(1, 1, PD)]);
    // Receive areas on each server shard (its own memory), one slot per message.
    let slots = CONNS as u64 * MSGS as u64;
    let srv_keys: Vec<u32> = server
        .shards()
        .iter()
        .map(|h| {
            h.mem
                .lock()
                .unwrap()
                .register(PD, BASE, (slots as usize) * SIZE, access::LOCAL_WRITE)
        })
        .collect();
    let mut jobs = Vec::new();
    for k in (0..2).rev() {
        let engines = vec![ce.pop().unwrap(), se.pop().unwrap()];
        jobs.push(
            eal.launch(workers[k], move || run_together(engines))
                .expect("launch"),
        );
    }

    let t0 = Instant::now();
    let limit = Duration::from_secs(30);
    let mut conns = Vec::new();
    for _ in 0..CONNS {
        conns.push(client.connect(IP_B).expect("connect"));
    }
    // Connection slot by id, and each connection on the shard its id names.
    let slot: HashMap<ConnId, u32> = conns
        .iter()
        .enumerate()
        .map(|(i, c)| (*c, i as u32))
        .collect();
    let per_shard: Vec<usize> = (0..2)
        .map(|k| conns.iter().filter(|c| c.0 as usize % 2 == k).count())
        .collect();
    assert_eq!(
        per_shard,
        vec![3, 3],
        "round-robin over the shards: {conns:?}"
    );
    // Source areas: each connection's messages in its shard's memory.
    let cli_keys: Vec<u32> = client
        .shards()
        .iter()
        .map(|h| {
            h.mem
                .lock()
                .unwrap()
                .register(PD, BASE, (slots as usize) * SIZE, access::LOCAL_WRITE)
        })
        .collect();
    for (&c, &s) in &slot {
        let k = client.shard_of(c);
        let mut m = client.for_conn(c).mem.lock().unwrap();
        for i in 0..MSGS {
            let at = BASE + (s as u64 * MSGS as u64 + i as u64) * SIZE as u64;
            m.write_local(PD, cli_keys[k], at, &pattern(s, i)).unwrap();
        }
        drop(m);
        client.create_stream(c, 1, 1, PD);
    }

    // Wait for every connection: the client's Connected, the server's Accepted (then its
    // receives, MSGS per connection, in the accepting shard's memory).
    let mut connected = HashSet::new();
    let mut accepted: Vec<Vec<ConnId>> = vec![Vec::new(); 2];
    let mut refused = Vec::new();
    let mut srv_done = [0u32; 2];
    let mut cli_done = [0u32; 2];
    let mut received = HashSet::new();
    let mut bad = Vec::new();
    let mut posted = false;
    while t0.elapsed() < limit {
        let mut any = false;
        for (k, h) in client.shards().iter().enumerate() {
            while let Some(o) = h.try_next() {
                any = true;
                match o {
                    Output::Event(Event::Connected { conn, .. }) => {
                        assert_eq!(conn.0 as usize % 2, k, "Connected on another shard");
                        connected.insert(conn);
                    }
                    Output::Completion(x) => {
                        assert_eq!(x.conn.0 as usize % 2, k, "completion on another shard");
                        assert_eq!(x.status, Status::Success, "{x:?}");
                        cli_done[k] += 1;
                    }
                    Output::Refused { .. } => refused.push(format!("client {k}: {o:?}")),
                    _ => {}
                }
            }
        }
        for (k, h) in server.shards().iter().enumerate() {
            while let Some(o) = h.try_next() {
                any = true;
                match o {
                    Output::Event(Event::Accepted { conn, .. }) => {
                        let n = accepted.iter().map(|a| a.len()).sum::<usize>() as u64;
                        accepted[k].push(conn);
                        for i in 0..MSGS as u64 {
                            let at = BASE + (n * MSGS as u64 + i) * SIZE as u64;
                            h.post_recv(
                                conn,
                                1,
                                RecvWr {
                                    wr_id: at,
                                    sgl: [sge(srv_keys[k], at)].into_iter().collect(),
                                },
                            );
                        }
                    }
                    Output::Completion(x) if x.op == CompletionOp::Recv => {
                        assert_eq!(x.status, Status::Success, "{x:?}");
                        assert_eq!(x.conn.0 as usize % 2, k, "receive on another shard");
                        let mut buf = vec![0u8; SIZE];
                        h.mem
                            .lock()
                            .unwrap()
                            .read_local(PD, srv_keys[k], x.wr_id, &mut buf)
                            .unwrap();
                        let c = u32::from_be_bytes(buf[..4].try_into().unwrap());
                        let m = u32::from_be_bytes(buf[4..8].try_into().unwrap());
                        if x.byte_len as usize != SIZE || buf != pattern(c, m) {
                            bad.push((k, c, m));
                        }
                        received.insert((c, m));
                        srv_done[k] += 1;
                    }
                    Output::Refused { .. } => refused.push(format!("server {k}: {o:?}")),
                    _ => {}
                }
            }
        }
        let all_accepted = accepted.iter().map(|a| a.len()).sum::<usize>() == CONNS;
        if !posted && connected.len() == CONNS && all_accepted {
            // Receives are posted (commands queue in order ahead of any data): send.
            std::thread::sleep(Duration::from_millis(20));
            for (&c, &s) in &slot {
                let k = client.shard_of(c);
                for i in 0..MSGS {
                    let at = BASE + (s as u64 * MSGS as u64 + i as u64) * SIZE as u64;
                    client.post_send(
                        c,
                        1,
                        SendWr {
                            wr_id: i as u64,
                            op: SendOp::Send { imm: None },
                            sgl: [sge(cli_keys[k], at)].into_iter().collect(),
                            signaled: true,
                            solicited: false,
                            fence: false,
                        },
                    );
                }
            }
            posted = true;
        }
        if !refused.is_empty() {
            break;
        }
        let total = CONNS as u32 * MSGS;
        if srv_done.iter().sum::<u32>() == total && cli_done.iter().sum::<u32>() == total {
            break;
        }
        if !any {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    let cs = snapshots(&client);
    let ss = snapshots(&server);
    client.stop();
    server.stop();
    for j in jobs {
        j.join();
    }
    assert!(refused.is_empty(), "refused commands: {refused:?}");
    assert!(
        bad.is_empty(),
        "corrupt receives (shard, conn, msg): {bad:?}"
    );
    let total = CONNS as u32 * MSGS;
    assert_eq!(
        srv_done.iter().sum::<u32>(),
        total,
        "server receives per shard {srv_done:?}, client completions {cli_done:?}, after {:?}",
        t0.elapsed()
    );
    assert_eq!(received.len(), total as usize, "every message once");
    // The client's shard k had three connections; a peer sharded the same way puts them on
    // its shard k too (OPENs go to shard src_conn % 2).
    assert_eq!(
        cli_done,
        [3 * MSGS, 3 * MSGS],
        "client completions per shard"
    );
    assert_eq!(srv_done, [3 * MSGS, 3 * MSGS], "server receives per shard");
    assert_eq!(accepted[0].len(), 3, "{accepted:?}");
    for (name, snaps) in [("client", &cs), ("server", &ss)] {
        for (k, v) in snaps.iter().enumerate() {
            let list = v["connections"].as_array().expect("connections");
            assert_eq!(list.len(), 3, "{name} shard {k}: {list:?}");
            for c in list {
                let id = c["conn"].as_u64().unwrap();
                assert_eq!(id % 2, k as u64, "{name} shard {k} owns conn {id}");
                let done = if name == "client" {
                    &c["messages_completed_tx"]
                } else {
                    &c["messages_completed_rx"]
                };
                assert_eq!(done.as_u64(), Some(MSGS as u64), "{name} {k}: {c}");
            }
        }
        // Shard 0 polled the port and forwarded shard 1's frames both ways: its data (three
        // connections' 3 × MSGS messages of 3 packets) one way, and at least one ACK per
        // connection the other (ACKs are coalesced: how many depends on timing).
        let lane = &snaps[0]["dispatch"]["lanes"][0];
        let (data, acks) = if name == "client" {
            ("tx_forwarded", "rx_forwarded")
        } else {
            ("rx_forwarded", "tx_forwarded")
        };
        assert!(
            lane[data].as_u64().unwrap() >= 3 * MSGS as u64,
            "{name}: {data}: {lane}"
        );
        assert!(lane[acks].as_u64().unwrap() >= 3, "{name}: {acks}: {lane}");
        assert_eq!(lane["rx_dropped_full"].as_u64(), Some(0), "{name}: {lane}");
        assert_eq!(snaps[1]["shard"]["shard"].as_u64(), Some(1), "{name}");
    }
}

/// `ferroce-dp run` with `engine.lcores = 2`: two shards on two worker lcores (the default EAL
/// arguments make them), each reporting its counters, shard 0 with the dispatcher's.
#[test]
fn dpdk_config_runs_two_shards() {
    if !ferroce_dataplane::netns::is_root() {
        eprintln!("SKIPPED dpdk_config_runs_two_shards: needs root (DPDK)");
        return;
    }
    let o = std::process::Command::new("timeout")
        .args(["60", env!("CARGO_BIN_EXE_ferroce-dp"), "run", "--json"])
        .args([
            "--set",
            "net.address=198.18.1.43",
            "--set",
            "port.vdev=net_ring0",
        ])
        .args(["--set", "port.mbufs=4095", "--set", "engine.lcores=2"])
        .args(["--set", "engine.duration_s=0.3"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run ferroce-dp");
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{out}\n{err}");
    assert!(err.contains("2 shards on lcores"), "{err}");
    let v: Value = serde_json::from_str(out.lines().last().unwrap_or("")).expect("json");
    let shards = v["shards"].as_array().expect("shards");
    assert_eq!(shards.len(), 2, "{v}");
    assert_eq!(shards[0]["dispatch"]["shards"].as_u64(), Some(2), "{v}");
    assert_eq!(shards[1]["shard"]["shard"].as_u64(), Some(1), "{v}");
    assert!(
        shards[1]["engine"]["polls"].as_u64().unwrap_or(0) > 0,
        "{v}"
    );
    // More shards than worker lcores: a clear error naming the field.
    let o = std::process::Command::new("timeout")
        .args(["60", env!("CARGO_BIN_EXE_ferroce-dp"), "run"])
        .args(["--set", "net.address=198.18.1.43", "--set", "port.vdev=net_ring0"])
        .args(["--set", "engine.lcores=2", "--set", "engine.duration_s=0.3"])
        .args(["--set", "eal.args=[\"--no-huge\",\"--no-pci\",\"--no-shconf\",\"-m\",\"256\",\"--lcores=0@(0-1),1@(0-1)\"]"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run ferroce-dp");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("engine.lcores") && err.contains("worker lcores"),
        "{err}"
    );
}
