//! Remote access is checked (rkey, access rights, protection domain, bounds): a refused
//! request is NACKed, completes with an error, flushes the stream and touches no memory.

use ferroce_harness::NodeHost;
use ferroce_sim::topology::{self, TopologyConfig};
use ferroce_sim::{HostId, Sim};
use ferroce_transport::mem::access;
use ferroce_transport::wire::NackReason;
use ferroce_transport::*;
use std::net::Ipv4Addr;

const A: HostId = HostId(0);
const B: HostId = HostId(1);
const PD: u32 = 7;

struct Setup {
    sim: Sim<NodeHost>,
    conn_a: ConnId,
    conn_b: ConnId,
    local: u32,
    /// REMOTE_WRITE | LOCAL_WRITE, 8 KiB at 0x10_000
    w: u32,
    /// REMOTE_READ only, 8 KiB at 0x20_000
    r: u32,
    /// LOCAL_WRITE only, 4 KiB at 0x30_000
    x: u32,
    /// REMOTE_WRITE but another protection domain, 4 KiB at 0x40_000
    other_pd: u32,
    /// REMOTE_ATOMIC, 64 B at 0x50_000
    at: u32,
    /// REMOTE_WRITE sink for the valid request that follows each bad one (it may land before
    /// the bad one's NACK returns, so it is not part of the untouched-memory check).
    sink: u32,
}

fn setup() -> Setup {
    let t = topology::back_to_back(&TopologyConfig::default());
    let mut sim = t.build_with(|id, ip| {
        NodeHost::new(
            ip,
            EndpointConfig {
                seed: 11 + id.0 as u64,
                ..EndpointConfig::default()
            },
        )
    });
    let b_ip = Ipv4Addr::from(sim.host_ip(B));
    let (w, r, x, other_pd, at) = {
        let m = &mut sim.host_mut(B).mem;
        let w = m.register(
            PD,
            0x10_000,
            8192,
            access::REMOTE_WRITE | access::LOCAL_WRITE,
        );
        let r = m.register(PD, 0x20_000, 8192, access::REMOTE_READ);
        let x = m.register(PD, 0x30_000, 4096, access::LOCAL_WRITE);
        let o = m.register(
            9,
            0x40_000,
            4096,
            access::REMOTE_WRITE | access::LOCAL_WRITE,
        );
        let a = m.register(PD, 0x50_000, 64, access::REMOTE_ATOMIC);
        for k in [w, r, x, o, a] {
            let reg = m.region_mut(k).unwrap();
            for (i, b) in reg.data.iter_mut().enumerate() {
                *b = (i * 7 + k as usize) as u8;
            }
        }
        (w, r, x, o, a)
    };
    let sink = sim.host_mut(B).mem.register(
        PD,
        0x60_000,
        4096,
        access::REMOTE_WRITE | access::LOCAL_WRITE,
    );
    let local = {
        let h = sim.host_mut(A);
        let l = h.mem.register(3, 0x9_0000, 1 << 16, access::LOCAL_WRITE);
        for (i, b) in h.mem.region_mut(l).unwrap().data.iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        l
    };
    let conn_a = sim.host_mut(A).ep.connect(b_ip);
    sim.wake(A);
    sim.run_until(100_000);
    let conn_b = sim
        .host(B)
        .events
        .iter()
        .find_map(|e| match e {
            Event::Accepted { conn, .. } => Some(*conn),
            _ => None,
        })
        .expect("connection accepted");
    assert!(sim
        .host(A)
        .events
        .iter()
        .any(|e| matches!(e, Event::Connected { .. })));
    Setup {
        sim,
        conn_a,
        conn_b,
        local,
        w,
        r,
        x,
        other_pd,
        at,
        sink,
    }
}

fn snapshot(sim: &Sim<NodeHost>, keys: &[u32]) -> Vec<Vec<u8>> {
    keys.iter()
        .map(|k| sim.host(B).mem.region(*k).unwrap().data.clone())
        .collect()
}

fn sge(lkey: u32, addr: u64, len: u32) -> SgList {
    [Sge { lkey, addr, len }].into_iter().collect()
}

/// Run one bad request followed by a good-looking one on a fresh stream; return the
/// statuses of both.
fn run_case(st: &mut Setup, stream: u32, op: SendOp, len: u32) -> (Status, Status) {
    st.sim
        .host_mut(A)
        .ep
        .create_stream(st.conn_a, stream, stream, 3)
        .unwrap();
    st.sim
        .host_mut(B)
        .ep
        .create_stream(st.conn_b, stream, stream, PD)
        .unwrap();
    // A receive, so WRITE with immediate is judged on its rkey, not RNR-waited.
    let (cb, x) = (st.conn_b, st.x);
    st.sim
        .host_mut(B)
        .ep
        .post_recv(
            cb,
            stream,
            RecvWr {
                wr_id: 1,
                sgl: sge(x, 0x30_000, 16),
            },
        )
        .unwrap();
    let local = st.local;
    let ep = &mut st.sim.host_mut(A).ep;
    ep.post_send(
        st.conn_a,
        stream,
        SendWr {
            wr_id: 1,
            op,
            sgl: sge(local, 0x9_0000, len),
            signaled: true,
            solicited: false,
            fence: false,
        },
    )
    .unwrap();
    ep.post_send(
        st.conn_a,
        stream,
        SendWr {
            wr_id: 2,
            op: SendOp::Write {
                rkey: st.sink,
                raddr: 0x60_000,
                imm: None,
            },
            sgl: sge(local, 0x9_0000, 64),
            signaled: true,
            solicited: false,
            fence: false,
        },
    )
    .unwrap();
    st.sim.wake(A);
    let t = st.sim.now() + 5_000_000;
    st.sim.run_until(t);
    let done: Vec<&Completion> = st
        .sim
        .host(A)
        .completions
        .iter()
        .filter(|c| c.stream == stream)
        .collect();
    assert_eq!(done.len(), 2, "stream {stream}: {done:?}");
    assert_eq!(done[0].wr_id, 1);
    assert_eq!(done[1].wr_id, 2);
    (done[0].status, done[1].status)
}

// checks: [SEC-2] [PLACE-1]
#[test]
fn bad_remote_requests_are_refused_and_touch_nothing() {
    let mut st = setup();
    let keys = [st.w, st.r, st.x, st.other_pd, st.at];
    let before = snapshot(&st.sim, &keys);
    let cases: Vec<(&str, SendOp, u32, Status)> = vec![
        (
            "write unknown rkey",
            SendOp::Write {
                rkey: 0xdead,
                raddr: 0x10_000,
                imm: None,
            },
            100,
            Status::RemoteAccess,
        ),
        (
            "write without REMOTE_WRITE",
            SendOp::Write {
                rkey: st.r,
                raddr: 0x20_000,
                imm: None,
            },
            100,
            Status::RemoteAccess,
        ),
        (
            "write local-only region",
            SendOp::Write {
                rkey: st.x,
                raddr: 0x30_000,
                imm: None,
            },
            100,
            Status::RemoteAccess,
        ),
        (
            "write other protection domain",
            SendOp::Write {
                rkey: st.other_pd,
                raddr: 0x40_000,
                imm: None,
            },
            100,
            Status::RemoteAccess,
        ),
        (
            "write below region",
            SendOp::Write {
                rkey: st.w,
                raddr: 0x0_fff0,
                imm: None,
            },
            100,
            Status::RemoteAccess,
        ),
        // Starts inside, runs 1 byte past the end over 3 packets: no packet may be placed.
        (
            "write spilling past end",
            SendOp::Write {
                rkey: st.w,
                raddr: 0x10_000 + 8192 - 9_999,
                imm: None,
            },
            10_000,
            Status::RemoteAccess,
        ),
        (
            "write address overflow",
            SendOp::Write {
                rkey: st.w,
                raddr: u64::MAX - 10,
                imm: None,
            },
            100,
            Status::RemoteAccess,
        ),
        (
            "write with imm, bad rkey",
            SendOp::Write {
                rkey: 0xbeef,
                raddr: 0x10_000,
                imm: Some(5),
            },
            100,
            Status::RemoteAccess,
        ),
        (
            "read without REMOTE_READ",
            SendOp::Read {
                rkey: st.w,
                raddr: 0x10_000,
            },
            100,
            Status::RemoteAccess,
        ),
        (
            "read past end",
            SendOp::Read {
                rkey: st.r,
                raddr: 0x20_000 + 8000,
            },
            500,
            Status::RemoteAccess,
        ),
        (
            "fetch-add without REMOTE_ATOMIC",
            SendOp::FetchAdd {
                rkey: st.w,
                raddr: 0x10_000,
                add: 1,
            },
            8,
            Status::RemoteAccess,
        ),
        (
            "cmp-swap out of bounds",
            SendOp::CmpSwap {
                rkey: st.at,
                raddr: 0x50_000 + 64,
                compare: 0,
                swap: 1,
            },
            8,
            Status::RemoteAccess,
        ),
        (
            "fetch-add misaligned",
            SendOp::FetchAdd {
                rkey: st.at,
                raddr: 0x50_004,
                add: 1,
            },
            8,
            Status::RemoteInvalidRequest,
        ),
    ];
    for (i, (name, op, len, want)) in cases.into_iter().enumerate() {
        let (first, second) = run_case(&mut st, 100 + i as u32, op, len);
        assert_eq!(first, want, "{name}");
        assert_eq!(
            second,
            Status::Flushed,
            "{name}: the stream must be in error after a refusal"
        );
    }
    assert!(
        before == snapshot(&st.sim, &keys),
        "a refused request changed remote memory"
    );
    let b = st
        .sim
        .host(B)
        .native()
        .unwrap()
        .connection(st.conn_b)
        .unwrap()
        .counters();
    let a = st
        .sim
        .host(A)
        .native()
        .unwrap()
        .connection(st.conn_a)
        .unwrap()
        .counters();
    assert!(b.remote_access_refused >= 12, "{b:?}");
    assert!(
        b.nacks_sent[NackReason::RemoteAccess as usize] >= 12,
        "{b:?}"
    );
    assert!(
        a.nacks_received[NackReason::RemoteAccess as usize] >= 12,
        "{a:?}"
    );
    assert!(
        a.nacks_received[NackReason::InvalidRequest as usize] >= 1,
        "{a:?}"
    );

    // The connection itself is healthy: a valid WRITE on a new stream lands.
    st.sim
        .host_mut(A)
        .ep
        .create_stream(st.conn_a, 1, 1, 3)
        .unwrap();
    st.sim
        .host_mut(B)
        .ep
        .create_stream(st.conn_b, 1, 1, PD)
        .unwrap();
    let (c, local, w) = (st.conn_a, st.local, st.w);
    st.sim
        .host_mut(A)
        .ep
        .post_send(
            c,
            1,
            SendWr {
                wr_id: 77,
                op: SendOp::Write {
                    rkey: w,
                    raddr: 0x10_000 + 100,
                    imm: None,
                },
                sgl: sge(local, 0x9_0000, 5000),
                signaled: true,
                solicited: false,
                fence: false,
            },
        )
        .unwrap();
    st.sim.wake(A);
    let t = st.sim.now() + 1_000_000;
    st.sim.run_until(t);
    let c = st
        .sim
        .host(A)
        .completions
        .iter()
        .find(|c| c.wr_id == 77)
        .copied();
    assert_eq!(c.map(|c| c.status), Some(Status::Success));
    let data = &st.sim.host(B).mem.region(w).unwrap().data[100..5100];
    let want: Vec<u8> = (0..5000).map(|i| (i % 251) as u8).collect();
    assert_eq!(data, &want[..]);
}

// checks: [PLACE-1]
#[test]
fn request_to_unknown_stream_is_invalid() {
    let mut st = setup();
    // Stream 5 exists only at A (peer id 55 is unknown at B).
    st.sim
        .host_mut(A)
        .ep
        .create_stream(st.conn_a, 5, 55, 3)
        .unwrap();
    let (c, local, w) = (st.conn_a, st.local, st.w);
    st.sim
        .host_mut(A)
        .ep
        .post_send(
            c,
            5,
            SendWr {
                wr_id: 9,
                op: SendOp::Write {
                    rkey: w,
                    raddr: 0x10_000,
                    imm: None,
                },
                sgl: sge(local, 0x9_0000, 10),
                signaled: true,
                solicited: false,
                fence: false,
            },
        )
        .unwrap();
    st.sim.wake(A);
    st.sim.run_until(2_000_000);
    let got = st
        .sim
        .host(A)
        .completions
        .iter()
        .find(|c| c.wr_id == 9)
        .map(|c| c.status);
    assert_eq!(got, Some(Status::RemoteInvalidRequest));
}

// checks: [PLACE-1]
#[test]
fn send_too_long_for_receive_buffer_is_refused() {
    let mut st = setup();
    st.sim
        .host_mut(A)
        .ep
        .create_stream(st.conn_a, 2, 2, 3)
        .unwrap();
    st.sim
        .host_mut(B)
        .ep
        .create_stream(st.conn_b, 2, 2, PD)
        .unwrap();
    let (ca, cb, local, x) = (st.conn_a, st.conn_b, st.local, st.x);
    st.sim
        .host_mut(B)
        .ep
        .post_recv(
            cb,
            2,
            RecvWr {
                wr_id: 1,
                sgl: sge(x, 0x30_000, 100),
            },
        )
        .unwrap();
    let before = snapshot(&st.sim, &[x]);
    st.sim
        .host_mut(A)
        .ep
        .post_send(
            ca,
            2,
            SendWr {
                wr_id: 3,
                op: SendOp::Send { imm: None },
                sgl: sge(local, 0x9_0000, 101),
                signaled: true,
                solicited: false,
                fence: false,
            },
        )
        .unwrap();
    st.sim.wake(A);
    st.sim.run_until(2_000_000);
    let got = st
        .sim
        .host(A)
        .completions
        .iter()
        .find(|c| c.wr_id == 3)
        .map(|c| c.status);
    assert_eq!(got, Some(Status::RemoteInvalidRequest));
    assert!(
        before == snapshot(&st.sim, &[x]),
        "a refused SEND changed the receive buffer"
    );
    // The responder's receive completes with a local length error and its stream is in
    // Error (IBTA: the QP goes to the error state).
    let recv = st
        .sim
        .host(B)
        .completions
        .iter()
        .find(|c| c.wr_id == 1)
        .map(|c| c.status);
    assert_eq!(recv, Some(Status::LocalLength));
    let again = st.sim.host_mut(B).ep.post_recv(
        cb,
        2,
        RecvWr {
            wr_id: 2,
            sgl: sge(x, 0x30_000, 100),
        },
    );
    assert!(again.is_err(), "a stream in Error accepted a receive");
}

// checks: [PLACE-1]
/// A SEND whose receive names memory of another protection domain (e.g. a region moved by
/// `ibv_rereg_mr`): a remote operational error at the requester, a local protection error on
/// the responder's receive, the memory untouched, both streams in Error, and the WRs after it
/// flushed (rdma-core's test_mr_rereg_pd / test_mr_rereg_addr, spec/transport.md §7.1).
#[test]
fn receive_outside_its_domain_is_a_remote_operational_error() {
    for lossy in [false, true] {
        let mut st = setup();
        if lossy {
            // NACKs are unreliable: a lost one is answered again when the SEND is resent.
            st.sim
                .set_all_link_faults(ferroce_sim::FaultConfig::loss(0.3));
        }
        st.sim
            .host_mut(A)
            .ep
            .create_stream(st.conn_a, 2, 2, 3)
            .unwrap();
        st.sim
            .host_mut(B)
            .ep
            .create_stream(st.conn_b, 2, 2, PD)
            .unwrap();
        let (ca, cb, local, o, x) = (st.conn_a, st.conn_b, st.local, st.other_pd, st.x);
        let b = &mut st.sim.host_mut(B).ep;
        b.post_recv(
            cb,
            2,
            RecvWr {
                wr_id: 1,
                sgl: sge(o, 0x40_000, 3000),
            },
        )
        .unwrap();
        b.post_recv(
            cb,
            2,
            RecvWr {
                wr_id: 2,
                sgl: sge(x, 0x30_000, 3000),
            },
        )
        .unwrap();
        let before = snapshot(&st.sim, &[o, x]);
        for (id, len) in [(3u64, 2500u32), (4, 100)] {
            st.sim
                .host_mut(A)
                .ep
                .post_send(
                    ca,
                    2,
                    SendWr {
                        wr_id: id,
                        op: SendOp::Send { imm: None },
                        sgl: sge(local, 0x9_0000, len),
                        signaled: true,
                        solicited: false,
                        fence: false,
                    },
                )
                .unwrap();
        }
        st.sim.wake(A);
        st.sim.run_until(200_000_000);
        let status = |h: HostId, id: u64| {
            st.sim
                .host(h)
                .completions
                .iter()
                .find(|c| c.wr_id == id)
                .map(|c| c.status)
        };
        assert_eq!(status(A, 3), Some(Status::RemoteOperation), "lossy {lossy}");
        assert_eq!(status(A, 4), Some(Status::Flushed), "lossy {lossy}");
        assert_eq!(status(B, 1), Some(Status::LocalProtection), "lossy {lossy}");
        assert_eq!(status(B, 2), Some(Status::Flushed), "lossy {lossy}");
        assert!(
            before == snapshot(&st.sim, &[o, x]),
            "lossy {lossy}: memory changed"
        );
        let c = st
            .sim
            .host(B)
            .native()
            .unwrap()
            .connection(cb)
            .unwrap()
            .counters();
        assert_eq!(c.rx_local_errors, 1, "lossy {lossy}");
        assert!(c.nacks_sent[NackReason::RemoteOperation as usize] >= 1);
    }
}
