//! The RoCEv2 RC engine end to end on the simulator: verified mixed workloads (every byte
//! checked by the harness) lossless and under random loss, go-back-N in the counters, RNR,
//! PSN wrap-around, a wrong-rkey access, and goodput next to the native protocol.
//!
//! `cargo test --release -p ferroce-tests --test roce_sim -- --nocapture` prints the numbers;
//! `-- --ignored goodput_table` prints the RoCE vs native goodput table.

use ferroce_harness::scenario::report;
use ferroce_harness::workload::{OpKind, CLIENT_PD, SERVER_PD, WRITE_ACCESS};
use ferroce_harness::{Fabric, NodeHost, RunReport, WorkloadSpec};
use ferroce_sim::topology::{self, TopologyConfig};
use ferroce_sim::{Dir, FaultConfig, HostId, Node, Sim};
use ferroce_transport::mem::access;
use ferroce_transport::roce::{RoceConfig, RoceCounters, RoceEndpoint};
use ferroce_transport::*;
use std::net::Ipv4Addr;

/// A RoCE run and what it did.
struct RoceRun {
    report: RunReport,
    client: RoceCounters,
    server: RoceCounters,
    client_totals: TransportTotals,
    /// Packets the fabric dropped client → server and server → client.
    drops_c2s: u64,
    drops_s2c: u64,
}

fn build(
    fabric: Fabric,
    seed: u64,
    cfg: &dyn Fn(&mut RoceConfig),
) -> (Sim<NodeHost>, HostId, HostId) {
    let topo = TopologyConfig::default().with_seed(seed);
    let t = match fabric {
        Fabric::BackToBack => topology::back_to_back(&topo),
        Fabric::LeafSpine { spines } => topology::leaf_spine(&topo, 2, spines, 1),
    };
    let sim = t.build_with(|_, ip| {
        let mut c = RoceConfig::new(Ipv4Addr::from(ip));
        cfg(&mut c);
        NodeHost::with_engine(ip, Box::new(RoceEndpoint::new(c)))
    });
    let s = HostId(sim.num_hosts() as u32 - 1);
    (sim, HostId(0), s)
}

fn counters(sim: &Sim<NodeHost>, h: HostId) -> RoceCounters {
    *sim.host(h)
        .ep
        .engine()
        .roce()
        .expect("a RoCE host")
        .counters()
}

/// Loss on both directions of every host uplink (like `LossPlacement::HostUplinks`).
fn set_uplink_faults(sim: &mut Sim<NodeHost>, hosts: [HostId; 2], f: FaultConfig) {
    for h in hosts {
        for l in sim.host_links(h) {
            let dir = sim.link_dir_from(l, Node::Host(h)).unwrap_or(Dir::AtoB);
            sim.set_link_faults(l, dir, f);
        }
    }
}

fn drops_from(sim: &Sim<NodeHost>, h: HostId) -> u64 {
    sim.host_links(h)
        .into_iter()
        .map(|l| {
            let dir = sim.link_dir_from(l, Node::Host(h)).unwrap_or(Dir::AtoB);
            sim.stats().link(l, dir).dropped()
        })
        .sum()
}

fn run_roce(
    fabric: Fabric,
    spec: &WorkloadSpec,
    loss: f64,
    seed: u64,
    limit_ns: u64,
    cfg: &dyn Fn(&mut RoceConfig),
) -> RoceRun {
    run_roce_faults(fabric, spec, FaultConfig::loss(loss), seed, limit_ns, cfg)
}

fn run_roce_faults(
    fabric: Fabric,
    spec: &WorkloadSpec,
    faults: FaultConfig,
    seed: u64,
    limit_ns: u64,
    cfg: &dyn Fn(&mut RoceConfig),
) -> RoceRun {
    let (mut sim, c, s) = build(fabric, seed, cfg);
    set_uplink_faults(&mut sim, [c, s], faults);
    let cip = sim.host_ip(c);
    let keys = sim.host_mut(s).make_server_for(spec, &[cip]);
    // Let the server create its QPs and post its receives before the first request arrives.
    sim.wake(s);
    let sip = sim.host_ip(s);
    let now = sim.now();
    sim.host_mut(c).start_client(spec, sip, keys, now);
    sim.wake(c);
    let completed = sim.run_while(limit_ns, |sim| !sim.host(c).client_done());
    let settle = sim.now() + 200_000;
    sim.run_until(settle);
    let report = report(&sim, c, s, completed);
    // With a single-hop back-to-back fabric the host uplink drops are all the drops.
    let drops_c2s = drops_from(&sim, c);
    let drops_s2c = drops_from(&sim, s);
    RoceRun {
        client: counters(&sim, c),
        server: counters(&sim, s),
        client_totals: sim.host(c).ep.totals(),
        report,
        drops_c2s,
        drops_s2c,
    }
}

fn assert_clean(r: &RoceRun, what: &str) {
    assert!(
        r.report.errors.is_empty(),
        "{what}: {:#?}",
        &r.report.errors[..r.report.errors.len().min(20)]
    );
    assert!(r.report.completed, "{what}: did not complete");
}

fn show(what: &str, r: &RoceRun) {
    let k = &r.client;
    eprintln!(
        "{what}: {:.2} Gb/s, {} us, drops c2s {} s2c {}, client tx {} retx {} gbn {} timeouts {} \
         seq-naks rx {} implicit {} read-gap {}; server tx {} retx {} naks sent {} rnr {} dup {}",
        r.report.goodput_gbps,
        r.report.elapsed_ns / 1000,
        r.drops_c2s,
        r.drops_s2c,
        k.tx_pkts,
        k.retx_pkts,
        k.go_back_n,
        k.timeouts,
        k.seq_naks_received,
        k.implicit_naks,
        k.read_gap_retries,
        r.server.tx_pkts,
        r.server.retx_pkts,
        r.server.seq_naks_sent,
        r.server.rnr_naks_sent,
        r.server.rx_duplicates,
    );
}

/// Local ACK timeout 2^6 * 4.096 us = 262 us: aggressive enough for simulated tail losses.
fn fast(c: &mut RoceConfig) {
    c.timeout = 6;
}

#[test]
fn mixed_workload_lossless_back_to_back() {
    let spec = WorkloadSpec::default();
    let r = run_roce(Fabric::BackToBack, &spec, 0.0, 1, 2_000_000_000, &|_| {});
    show("lossless", &r);
    assert_clean(&r, "lossless");
    assert_eq!(r.report.bytes, spec.total_bytes());
    let k = &r.client;
    assert_eq!((k.retx_pkts, k.timeouts, k.go_back_n), (0, 0, 0));
    assert_eq!(r.server.seq_naks_sent + r.server.rnr_naks_sent, 0);
    assert_eq!(k.rx_bad_icrc + r.server.rx_bad_icrc, 0);
    assert_eq!(k.completions_err + r.server.completions_err, 0);
    // Every operation of the mix ran (the harness verified the bytes of each).
    let ops: std::collections::HashSet<OpKind> = (0..spec.streams)
        .flat_map(|s| (0..spec.messages).map(move |i| (s, i)))
        .map(|(s, i)| spec.op_at(s, i).0)
        .collect();
    assert_eq!(ops.len(), 7);
    assert!(r.server.read_responses_sent > 0 && r.server.atomic_acks_sent > 0);
}

#[test]
fn mixed_workload_mtu_4096_and_leaf_spine() {
    let spec = WorkloadSpec::default();
    let r = run_roce(Fabric::BackToBack, &spec, 0.0, 2, 2_000_000_000, &|c| {
        c.mtu = 4096
    });
    show("mtu 4096", &r);
    assert_clean(&r, "mtu 4096");
    let r = run_roce(
        Fabric::LeafSpine { spines: 4 },
        &spec,
        0.0,
        3,
        2_000_000_000,
        &|_| {},
    );
    show("leaf-spine", &r);
    assert_clean(&r, "leaf-spine");
}

#[test]
fn mixed_workload_one_percent_loss() {
    let spec = WorkloadSpec::default();
    let r = run_roce(Fabric::BackToBack, &spec, 0.01, 11, 20_000_000_000, &fast);
    show("1% loss", &r);
    assert_clean(&r, "1% loss");
    assert!(r.drops_c2s + r.drops_s2c > 0);
    let k = &r.client;
    // Every request packet the fabric dropped had to be sent again (go-back-N sends more).
    assert!(
        k.retx_pkts >= r.drops_c2s,
        "{} < {}",
        k.retx_pkts,
        r.drops_c2s
    );
    assert!(k.go_back_n > 0);
    assert_eq!(r.client_totals.retx_pkts, k.retx_pkts);
    assert_eq!(r.client_totals.timeouts, k.timeouts);
}

#[test]
fn mixed_workload_five_percent_loss() {
    let spec = WorkloadSpec::default();
    let r = run_roce(Fabric::BackToBack, &spec, 0.05, 12, 60_000_000_000, &fast);
    show("5% loss", &r);
    assert_clean(&r, "5% loss");
    let k = &r.client;
    assert!(
        k.retx_pkts >= r.drops_c2s,
        "{} < {}",
        k.retx_pkts,
        r.drops_c2s
    );
    // Go-back-N: far more resent than lost.
    assert!(
        k.retx_pkts > 2 * r.drops_c2s,
        "{} vs {}",
        k.retx_pkts,
        r.drops_c2s
    );
    assert!(k.seq_naks_received > 0);
    // Tail losses (last packet, its ACK, or a NAK) are only recovered by the timer.
    assert!(k.timeouts > 0);
    assert!(r.server.seq_naks_sent > 0 && r.server.rx_duplicates > 0);
}

#[test]
fn reordering_duplication_and_corruption_are_survived() {
    let spec = WorkloadSpec::default();
    for seed in [51, 52, 53] {
        let faults = FaultConfig {
            loss: 0.01,
            reorder: 0.02,
            reorder_delay: 3_000,
            duplicate: 0.02,
            corrupt: 0.01,
            ..FaultConfig::NONE
        };
        let r = run_roce_faults(
            Fabric::BackToBack,
            &spec,
            faults,
            seed,
            20_000_000_000,
            &fast,
        );
        show("reorder/dup/corrupt", &r);
        assert_clean(&r, "reorder/dup/corrupt");
        // Corrupted packets fail the ICRC; reordered ones look like losses to go-back-N.
        assert!(r.client.rx_bad_icrc + r.server.rx_bad_icrc > 0);
        assert!(r.server.rx_duplicates > 0 && r.server.rx_out_of_sequence > 0);
    }
}

#[test]
fn bulk_writes_with_loss_and_psn_wrap() {
    // Start every PSN just below 2^24 so all QPs wrap during the run.
    let spec = WorkloadSpec::bulk_write(4, 64, 65536);
    let r = run_roce(Fabric::BackToBack, &spec, 0.02, 21, 20_000_000_000, &|c| {
        c.timeout = 6;
        c.initial_psn = Some(0xff_ff00);
    });
    show("bulk 2% wrap", &r);
    assert_clean(&r, "bulk 2% wrap");
    assert!(r.client.tx_pkts > 256 * 4);
    assert!(r.client.retx_pkts >= r.drops_c2s);
}

#[test]
fn receiver_not_ready_is_retried_until_receives_are_posted() {
    // The harness's server re-posts a receive the moment one completes, so in-order delivery
    // never finds its queue empty: drive two hosts by hand and post the receives late.
    let (mut sim, c, s) = build(Fabric::BackToBack, 31, &|c| c.min_rnr_timer = 1);
    let (cip, sip) = (sim.host_ip(c), sim.host_ip(s));
    let sh = sim.host_mut(s);
    let recv = sh
        .mem
        .register(SERVER_PD, 0x1000_0000, 3 * 8192, access::LOCAL_WRITE);
    let sconn = sh.ep.connect(Ipv4Addr::from(cip));
    sh.ep.create_stream(sconn, 5, 9, SERVER_PD).unwrap();
    let ch = sim.host_mut(c);
    let lkey = ch
        .mem
        .register(CLIENT_PD, 0x7000_0000, 8192, access::LOCAL_WRITE);
    ch.mem.region_mut(lkey).unwrap().data.fill(0x42);
    let conn = ch.ep.connect(Ipv4Addr::from(sip));
    ch.ep.create_stream(conn, 9, 5, CLIENT_PD).unwrap();
    for id in 0..3u64 {
        ch.ep
            .post_send(
                conn,
                9,
                SendWr {
                    wr_id: id,
                    op: SendOp::Send {
                        imm: Some(id as u32),
                    },
                    sgl: [Sge {
                        lkey,
                        addr: 0x7000_0000,
                        len: 5000,
                    }]
                    .into_iter()
                    .collect(),
                    signaled: true,
                    solicited: false,
                    fence: false,
                },
            )
            .unwrap();
    }
    sim.wake(s);
    sim.wake(c);
    sim.run_until(200_000);
    assert!(sim.host(c).completions.is_empty());
    let rnr_early = counters(&sim, s).rnr_naks_sent;
    assert!(rnr_early >= 5, "RNR NAK every 10 us: {rnr_early}");
    let sh = sim.host_mut(s);
    for k in 0..3u64 {
        sh.ep
            .post_recv(
                sconn,
                5,
                RecvWr {
                    wr_id: 100 + k,
                    sgl: [Sge {
                        lkey: recv,
                        addr: 0x1000_0000 + k * 8192,
                        len: 8192,
                    }]
                    .into_iter()
                    .collect(),
                },
            )
            .unwrap();
    }
    sim.wake(s);
    sim.run_until(1_000_000);
    let got: Vec<(u64, Status)> = sim
        .host(c)
        .completions
        .iter()
        .map(|x| (x.wr_id, x.status))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, Status::Success),
            (1, Status::Success),
            (2, Status::Success)
        ]
    );
    let rx: Vec<(u64, u32, Option<u32>)> = sim
        .host(s)
        .completions
        .iter()
        .map(|x| (x.wr_id, x.byte_len, x.imm))
        .collect();
    assert_eq!(
        rx,
        vec![
            (100, 5000, Some(0)),
            (101, 5000, Some(1)),
            (102, 5000, Some(2))
        ]
    );
    let data = &sim.host(s).mem.region(recv).unwrap().data;
    for k in 0..3 {
        assert!(data[k * 8192..k * 8192 + 5000].iter().all(|&b| b == 0x42));
    }
    let (cc, sc) = (counters(&sim, c), counters(&sim, s));
    assert_eq!(cc.rnr_naks_received, sc.rnr_naks_sent);
    assert!(cc.rnr_waits >= 5);
    assert_eq!(cc.timeouts, 0);
    assert_eq!(sim.host(c).ep.totals().nacks_received, sc.rnr_naks_sent);
}

#[test]
fn wrong_rkey_write_fails_with_remote_access_and_leaves_memory_untouched() {
    let (mut sim, c, s) = build(Fabric::BackToBack, 41, &fast);
    let (cip, sip) = (sim.host_ip(c), sim.host_ip(s));
    // Server: one writable region filled with a marker, one receive buffer.
    let sh = sim.host_mut(s);
    let rkey = sh.mem.register(SERVER_PD, 0x2000_0000, 65536, WRITE_ACCESS);
    sh.mem.region_mut(rkey).unwrap().data.fill(0xee);
    let recv = sh
        .mem
        .register(SERVER_PD, 0x1000_0000, 4096, access::LOCAL_WRITE);
    let sconn = sh.ep.connect(Ipv4Addr::from(cip));
    sh.ep.create_stream(sconn, 1, 1, SERVER_PD).unwrap();
    sh.ep
        .post_recv(
            sconn,
            1,
            RecvWr {
                wr_id: 77,
                sgl: [Sge {
                    lkey: recv,
                    addr: 0x1000_0000,
                    len: 4096,
                }]
                .into_iter()
                .collect(),
            },
        )
        .unwrap();
    // Client: a source buffer; a WRITE with a wrong rkey, then a SEND behind it.
    let ch = sim.host_mut(c);
    let lkey = ch
        .mem
        .register(CLIENT_PD, 0x7000_0000, 65536, access::LOCAL_WRITE);
    ch.mem.region_mut(lkey).unwrap().data.fill(0x11);
    let conn = ch.ep.connect(Ipv4Addr::from(sip));
    ch.ep.create_stream(conn, 1, 1, CLIENT_PD).unwrap();
    let sgl = |len| -> SgList {
        [Sge {
            lkey,
            addr: 0x7000_0000,
            len,
        }]
        .into_iter()
        .collect()
    };
    for (id, op, len) in [
        (
            1,
            SendOp::Write {
                rkey: rkey.wrapping_add(1),
                raddr: 0x2000_0000,
                imm: None,
            },
            10_000,
        ),
        (2, SendOp::Send { imm: None }, 100),
    ] {
        ch.ep
            .post_send(
                conn,
                1,
                SendWr {
                    wr_id: id,
                    op,
                    sgl: sgl(len),
                    signaled: true,
                    solicited: false,
                    fence: false,
                },
            )
            .unwrap();
    }
    sim.wake(s);
    sim.wake(c);
    sim.run_until(10_000_000);
    let got: Vec<(u64, Status)> = sim
        .host(c)
        .completions
        .iter()
        .map(|x| (x.wr_id, x.status))
        .collect();
    assert_eq!(got, vec![(1, Status::RemoteAccess), (2, Status::Flushed)]);
    let sh = sim.host(s);
    assert!(sh.mem.region(rkey).unwrap().data.iter().all(|&b| b == 0xee));
    assert!(sh.mem.region(recv).unwrap().data.iter().all(|&b| b == 0));
    let srv: Vec<(u64, Status)> = sh.completions.iter().map(|x| (x.wr_id, x.status)).collect();
    assert_eq!(srv, vec![(77, Status::Flushed)]);
    let (cc, sc) = (counters(&sim, c), counters(&sim, s));
    assert_eq!((cc.fatal_naks_received, sc.fatal_naks_sent), (1, 1));
    assert_eq!(sc.rx_payload_bytes, 0);
    let rt = sim.host(c).ep.totals();
    assert_eq!(rt.nacks_received, 1);
}
