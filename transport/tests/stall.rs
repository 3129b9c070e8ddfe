//! A peer that goes silent for a while (its engine descheduled on a loaded host) must not fail
//! the connection: the retry limit counts rounds of back-off of a path, not RTO expiries
//! summed over paths (spec/transport.md §5.4). With 16 paths and the 100 us minimum RTO, a
//! 30 ms blackout is about 8 rounds of every path's RTO: summed over paths that was far past
//! the limit of 16 and failed the connection; counted per path it is 8, and the transfer
//! completes. A peer that stays silent still fails the connection.

use ferroce_transport::mem::{access, Regions};
use ferroce_transport::*;
use std::net::Ipv4Addr;

const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const LEN: u32 = 65_536;

struct Host {
    ep: Endpoint,
    mem: Regions,
}

fn host(seed: u64) -> Host {
    let mut c = EndpointConfig {
        seed,
        ..EndpointConfig::default()
    };
    c.conn.paths = 16;
    c.conn.mtu = 1024;
    Host {
        ep: Endpoint::new(c),
        mem: Regions::new(),
    }
}

/// One microsecond of the world: timers, then what each sends delivered to the other unless
/// the link is dark (then it is lost).
fn step(a: &mut Host, b: &mut Host, now: u64, dark: bool) {
    let mut buf = vec![0u8; 65_536];
    for h in [&mut *a, &mut *b] {
        if h.ep.poll_timeout().is_some_and(|t| t <= now) {
            h.ep.handle_timeout(now);
        }
    }
    let mut to_b = Vec::new();
    while let Some(t) = a.ep.poll_transmit(now, &mut buf, &mut a.mem) {
        to_b.push(buf[..t.len].to_vec());
    }
    let mut to_a = Vec::new();
    while let Some(t) = b.ep.poll_transmit(now, &mut buf, &mut b.mem) {
        to_a.push(buf[..t.len].to_vec());
    }
    if dark {
        return;
    }
    for d in to_b {
        b.ep.handle_datagram(now, A, 40_000, false, &d, &mut b.mem);
    }
    for d in to_a {
        a.ep.handle_datagram(now, B, 40_000, false, &d, &mut a.mem);
    }
}

/// A writes 8 x 64 KiB to B with the link dark during `dark` (ns); A's completions and
/// whether A saw its connection fail, after `limit` ns.
fn run(dark: std::ops::Range<u64>, limit: u64) -> (Vec<Status>, bool) {
    let (mut a, mut b) = (host(1), host(2));
    let src = a
        .mem
        .register(1, 0x10_0000, 8 * LEN as usize, access::LOCAL_WRITE);
    let dst = b.mem.register(
        1,
        0x20_0000,
        8 * LEN as usize,
        access::LOCAL_WRITE | access::REMOTE_WRITE,
    );
    let ca = a.ep.connect(B);
    let mut now = 0;
    for _ in 0..20 {
        step(&mut a, &mut b, now, false);
        now += 1_000;
    }
    let cb = b.ep.connections().map(|c| c.id).next().expect("B accepted");
    a.ep.create_stream(ca, 1, 1, 1).unwrap();
    b.ep.create_stream(cb, 1, 1, 1).unwrap();
    for i in 0..8u64 {
        let wr = SendWr {
            wr_id: i,
            op: SendOp::Write {
                rkey: dst,
                raddr: 0x20_0000 + i * LEN as u64,
                imm: None,
            },
            sgl: [Sge {
                lkey: src,
                addr: 0x10_0000 + i * LEN as u64,
                len: LEN,
            }]
            .into_iter()
            .collect(),
            signaled: true,
            solicited: false,
            fence: false,
        };
        a.ep.post_send(ca, 1, wr).unwrap();
    }
    let (start, mut done, mut failed) = (now, Vec::new(), false);
    while now < start + limit && done.len() < 8 && !failed {
        step(&mut a, &mut b, now, dark.contains(&(now - start)));
        while let Some(c) = a.ep.poll_completion() {
            done.push(c.status);
        }
        while let Some(e) = a.ep.poll_event() {
            failed |= matches!(e, Event::Failed { .. });
        }
        now += 1_000;
    }
    (done, failed)
}

// checks: [LOSS-3]
#[test]
fn a_30_ms_blackout_over_16_paths_does_not_fail_the_connection() {
    // Dark from 20 us after the WRITEs start (packets of every path in flight).
    let (done, failed) = run(20_000..30_020_000, 2_000_000_000);
    assert!(!failed, "the connection failed during a 30 ms blackout");
    assert_eq!(done, vec![Status::Success; 8], "every WRITE completes");
}

// checks: [LOSS-3]
#[test]
fn a_peer_that_stays_silent_still_fails_the_connection() {
    let (done, failed) = run(20_000..u64::MAX, 5_000_000_000);
    assert!(failed, "a dead peer never failed the connection");
    assert_eq!(done.first(), Some(&Status::RetryExceeded), "{done:?}");
}
