//! Real packets over DPDK's net_ring PMD in one process: raw frames through the safe
//! wrappers, then two engines moving a verified workload with injected faults, and garbage
//! frames counted and dropped without disturbing the live connection.

mod common;

use common::{eal, need_root, serial};
use ferroce_dataplane::app::{run_pair, PairDriver};
use ferroce_dataplane::bench::{ring_engine_pair, ring_ports};
use ferroce_dataplane::engine::{run_together, EngineParams, SharedEngine};
use ferroce_dataplane::fault::FaultConfig;
use ferroce_dataplane::net::DropReason;
use ferroce_transport::EndpointConfig;
use ferroce_workload::{OpKind, WorkloadSpec};
use serde_json::Value;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

const IP_A: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 11);
const IP_B: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 12);

#[test]
fn dpdk_ring_raw_frames() {
    if !need_root("dpdk_ring_raw_frames") {
        return;
    }
    let _g = serial();
    let eal = eal();
    let (mut a, mut b) = ring_ports(eal, 1500, 4095).expect("ring ports");
    let pool = a.pool().clone();
    let total = 20_000u32;
    let (mut sent, mut got) = (0u32, 0u32);
    let mut txq = Vec::new();
    let mut rxq = Vec::new();
    let t0 = Instant::now();
    while got < total && t0.elapsed() < Duration::from_secs(20) {
        while sent < total && txq.len() < 32 {
            let mut m = pool.alloc().expect("mbuf");
            let len = 60 + (sent as usize * 7) % 1400;
            let room = m.room_mut();
            for (j, x) in room[..len].iter_mut().enumerate() {
                *x = (sent as usize ^ j) as u8;
            }
            room[..4].copy_from_slice(&sent.to_be_bytes());
            m.set_len(len);
            txq.push(m);
            sent += 1;
        }
        a.tx_burst(&mut txq);
        b.rx_burst(&mut rxq, 32);
        for m in rxq.drain(..) {
            let d = m.data();
            let n = u32::from_be_bytes([d[0], d[1], d[2], d[3]]);
            assert_eq!(n, got, "frames out of order");
            assert_eq!(d.len(), 60 + (n as usize * 7) % 1400);
            assert!(d[4..]
                .iter()
                .enumerate()
                .all(|(j, x)| *x == (n as usize ^ (j + 4)) as u8));
            got += 1;
        }
    }
    assert_eq!(got, total, "net_ring lost frames");
    let s = a.stats();
    assert_eq!(s.opackets, total as u64);
    assert_eq!(b.stats().ipackets, total as u64);
}

fn spec(messages: u32) -> WorkloadSpec {
    WorkloadSpec {
        streams: 3,
        messages,
        sizes: vec![1, 64, 1000, 1408, 1409, 4097, 20_000, 65_536],
        ops: OpKind::ALL.to_vec(),
        depth: 8,
        recv_depth: 16,
        seed: 3,
        ..Default::default()
    }
}

fn endpoint_cfg() -> EndpointConfig {
    let mut c = EndpointConfig {
        line_rate_mbps: 10_000,
        ..Default::default()
    };
    c.conn.min_rto_ns = 1_000_000;
    c.conn.initial_rto_ns = 2_000_000;
    c.conn.initial_rtt_ns = 50_000;
    c
}

/// Run `spec` between two engines on a ring pair with faults on both directions of both.
fn lossy_run(loss: f64, reorder: f64, extra: bool, messages: u32) -> (Value, Value) {
    let eal = eal();
    let fault = FaultConfig {
        loss,
        reorder,
        reorder_depth: Some(3),
        duplicate: if extra { 0.01 } else { 0.0 },
        corrupt: if extra { 0.005 } else { 0.0 },
        ecn_mark: if extra { 0.02 } else { 0.0 },
        ..Default::default()
    };
    let pa = EngineParams {
        ip: IP_A,
        fault_tx: fault.clone(),
        seed: 11,
        ..Default::default()
    };
    let pb = EngineParams {
        ip: IP_B,
        fault_tx: fault,
        seed: 12,
        ..Default::default()
    };
    let ((ea, ha), (eb, hb)) =
        ring_engine_pair(eal, 1500, 8191, pa, pb, endpoint_cfg()).expect("engines");
    let lcore = eal.worker_lcores()[0];
    let job = eal
        .launch(lcore, move || run_together(vec![ea, eb]))
        .expect("launch");
    let spec = spec(messages);
    let t0 = Instant::now();
    let (cr, sr) = run_pair(&ha, &hb, IP_A, IP_B, &spec, Duration::from_secs(60));
    let took = t0.elapsed();
    ha.stop();
    hb.stop();
    let mut counters = job.join();
    let cb = counters.pop().unwrap();
    let ca = counters.pop().unwrap();
    println!(
        "net_ring loss {loss} reorder {reorder}: {} WRs, {} bytes in {:.2} s ({:.3} Gbit/s), \
         retx {}, rto {}; tx faults a {} / b {}",
        cr.completed,
        cr.bytes,
        took.as_secs_f64(),
        cr.goodput_gbps,
        ca["transport"]["retx_pkts"],
        ca["transport"]["timeouts"],
        ca["fault_tx"],
        cb["fault_tx"]
    );
    assert!(cr.ok, "client: {:?}", &cr.errors[..cr.errors.len().min(10)]);
    assert!(sr.ok, "server: {:?}", &sr.errors[..sr.errors.len().min(10)]);
    assert_eq!(cr.completed, spec.streams as u64 * spec.messages as u64);
    (ca, cb)
}

#[test]
fn dpdk_ring_transfer_1pct_loss() {
    if !need_root("dpdk_ring_transfer_1pct_loss") {
        return;
    }
    let _g = serial();
    let (ca, _) = lossy_run(0.01, 0.01, false, 300);
    assert!(ca["fault_tx"]["dropped_random"].as_u64().unwrap() > 0);
}

#[test]
fn dpdk_ring_transfer_10pct_loss_reorder_dup_corrupt_ecn() {
    if !need_root("dpdk_ring_transfer_10pct_loss_reorder_dup_corrupt_ecn") {
        return;
    }
    let _g = serial();
    let (ca, cb) = lossy_run(0.10, 0.05, true, 200);
    for c in [&ca, &cb] {
        let f = &c["fault_tx"];
        for k in [
            "dropped_random",
            "reordered",
            "duplicated",
            "corrupted",
            "ecn_marked",
        ] {
            assert!(f[k].as_u64().unwrap() > 0, "no {k} injected: {f}");
        }
    }
    // Corrupted frames were caught (IP checksum or the transport's CRC), not delivered.
    let caught = |c: &Value| {
        c["endpoint"]["drop_bad_crc"].as_u64().unwrap()
            + c["endpoint"]["drop_malformed"].as_u64().unwrap()
            + c["endpoint"]["drop_bad_version"].as_u64().unwrap()
            + c["endpoint"]["drop_bad_opcode"].as_u64().unwrap()
            + c["endpoint"]["drop_truncated"].as_u64().unwrap()
            + c["engine"]["rx_drops"]["udp_length"].as_u64().unwrap()
            + c["engine"]["rx_drops"]["ip_length"].as_u64().unwrap()
            + c["engine"]["rx_drops"]["udp_port"].as_u64().unwrap()
    };
    assert!(caught(&ca) + caught(&cb) > 0, "corruption went unnoticed");
}

/// Garbage frames of every kind, sent raw from engine A's port to engine B during a live
/// transfer: all counted under the right reason, none disturbs the connection.
#[test]
fn dpdk_ring_garbage_frames_counted_and_dropped() {
    if !need_root("dpdk_ring_garbage_frames_counted_and_dropped") {
        return;
    }
    let _g = serial();
    let eal = eal();
    let pa = EngineParams {
        ip: IP_A,
        seed: 21,
        ..Default::default()
    };
    let pb = EngineParams {
        ip: IP_B,
        seed: 22,
        ..Default::default()
    };
    let ((ea, ha), (eb, hb)) =
        ring_engine_pair(eal, 1500, 8191, pa, pb, endpoint_cfg()).expect("engines");
    let mac_b = eb.mac();
    let mac_a = ea.mac();
    let garbage = ferroce_dataplane::net::garbage_frames(mac_a, mac_b, IP_A, IP_B, 4792, 7);
    let n_garbage = garbage.len();
    ha.inject(garbage.clone());
    let lcore = eal.worker_lcores()[0];
    let job = eal
        .launch(lcore, move || run_together(vec![ea, eb]))
        .expect("launch");
    // Garbage before, during (injected from this thread while the workload runs) and after.
    let spec = spec(120);
    let h2 = ha.clone();
    let g2 = garbage.clone();
    let injector = std::thread::spawn(move || {
        for _ in 0..5 {
            std::thread::sleep(Duration::from_millis(20));
            h2.inject(g2.clone());
        }
    });
    let (cr, sr) = run_pair(&ha, &hb, IP_A, IP_B, &spec, Duration::from_secs(60));
    injector.join().unwrap();
    std::thread::sleep(Duration::from_millis(50));
    ha.stop();
    hb.stop();
    let mut counters = job.join();
    let cb = counters.pop().unwrap();
    assert!(cr.ok, "client: {:?}", cr.errors);
    assert!(sr.ok, "server: {:?}", sr.errors);
    let drops = &cb["engine"]["rx_drops"];
    let ep = &cb["endpoint"];
    println!("garbage: engine drops {drops}, endpoint {ep}");
    let by = |r: DropReason| drops[r.name()].as_u64().unwrap();
    for r in [
        DropReason::Truncated,
        DropReason::OtherMac,
        DropReason::EtherType,
        DropReason::IpHeader,
        DropReason::IpChecksum,
        DropReason::IpLength,
        DropReason::Fragment,
        DropReason::NotUdp,
        DropReason::OtherIp,
        DropReason::UdpLength,
        DropReason::UdpChecksum,
        DropReason::UdpPort,
        DropReason::Arp,
    ] {
        assert!(by(r) >= 6, "{} drops: {}", r.name(), by(r));
    }
    let transport_drops = ep["drop_truncated"].as_u64().unwrap()
        + ep["drop_bad_version"].as_u64().unwrap()
        + ep["drop_bad_crc"].as_u64().unwrap()
        + ep["drop_bad_opcode"].as_u64().unwrap()
        + ep["drop_unknown_conn"].as_u64().unwrap()
        + ep["drop_malformed"].as_u64().unwrap();
    assert!(
        transport_drops >= 6 * 3,
        "transport-level garbage not counted: {ep}"
    );
    assert!(n_garbage >= 16);
}

/// `SharedEngine` (the verbs shim's progress from application calls), on real packets: the
/// client's engine has no thread of its own and moves only in the turns the test's thread
/// takes (`drive`), while the server's engine runs its own thread *and* is driven by the test
/// thread too, so the two contend for it. The verified workload must complete either way,
/// and the turns taken must be counted (a `drive` that did nothing would leave the client
/// stuck: the run times out).
#[test]
fn dpdk_ring_shared_engine_moves_on_application_turns() {
    if !need_root("dpdk_ring_shared_engine_moves_on_application_turns") {
        return;
    }
    let _g = serial();
    let eal = eal();
    let pa = EngineParams {
        ip: IP_A,
        seed: 21,
        ..Default::default()
    };
    let pb = EngineParams {
        ip: IP_B,
        seed: 22,
        ..Default::default()
    };
    let ((ea, ha), (eb, hb)) =
        ring_engine_pair(eal, 1500, 8191, pa, pb, endpoint_cfg()).expect("engines");
    let sa = SharedEngine::new(ea);
    let sb = SharedEngine::new(eb);
    let sb_thread = sb.clone();
    let lcore = eal.worker_lcores()[0];
    let job = eal.launch(lcore, move || sb_thread.run()).expect("launch");
    let spec = spec(200);
    let mut d = PairDriver::new(&ha, &hb, IP_B, &spec);
    let t0 = Instant::now();
    let mut busy = 0u64;
    while !d.done() && t0.elapsed() < Duration::from_secs(60) {
        let _ = sa.drive();
        if sb.drive().is_none() {
            busy += 1;
        }
        d.step();
    }
    let timed_out = !d.done();
    // A short transfer can finish while the server's own lcore held its engine at every
    // try; once idle, that lcore leaves it free between its naps: the test thread must then
    // get its turns too (bounded).
    let t1 = Instant::now();
    while sb.app_turns().0 == 0 && t1.elapsed() < Duration::from_secs(5) {
        if sb.drive().is_none() {
            busy += 1;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    let (cr, sr) = d.finish(timed_out);
    ha.stop();
    hb.stop();
    // The client's engine is stopped but has no thread: its final counters come from here.
    let _ = sa.run();
    let _ = job.join();
    let (a_turns, a_work) = sa.app_turns();
    let (b_turns, _) = sb.app_turns();
    println!(
        "shared engines: client {a_turns} turns ({a_work} with work), server {b_turns} turns \
         from the test thread, {busy} found it busy on its own lcore; {} WRs in {:.2} s",
        cr.completed,
        t0.elapsed().as_secs_f64()
    );
    assert!(cr.ok, "client: {:?}", &cr.errors[..cr.errors.len().min(10)]);
    assert!(sr.ok, "server: {:?}", &sr.errors[..sr.errors.len().min(10)]);
    assert_eq!(cr.completed, spec.streams as u64 * spec.messages as u64);
    assert!(
        a_work > 0 && a_turns >= a_work,
        "client turns {a_turns}/{a_work}"
    );
    assert!(
        b_turns > 0,
        "the server's engine was never driven from the test thread"
    );
}
