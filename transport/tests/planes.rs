//! A connection restricted to a subset of its host's planes (`Connection::set_plane_mask`,
//! what the verbs shim's `ferrocedv_set_planes` calls): with 2 NIC ports and 4 paths, every
//! plane carries data; restricted to plane 1, every packet of the connection (data, ACKs,
//! probes) leaves on plane 1, the paths are all on it, and the WRITEs still complete; the
//! restriction lifted, plane 0 carries data again. A mask with no plane of the host is refused
//! and changes nothing.

use ferroce_transport::mem::{access, Regions};
use ferroce_transport::*;
use std::net::Ipv4Addr;

const A: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
const LEN: u32 = 65_536;
const PLANES: u8 = 2;

struct Host {
    ep: Endpoint,
    mem: Regions,
}

fn host(seed: u64) -> Host {
    let mut c = EndpointConfig {
        seed,
        nic_ports: PLANES,
        ..EndpointConfig::default()
    };
    c.conn.paths = 4;
    c.conn.mtu = 1024;
    Host {
        ep: Endpoint::new(c),
        mem: Regions::new(),
    }
}

/// One microsecond: timers, then every datagram delivered on the plane it was sent on.
/// Returns A's datagrams per plane.
fn step(a: &mut Host, b: &mut Host, now: u64) -> [u64; PLANES as usize] {
    let mut buf = vec![0u8; 65_536];
    for h in [&mut *a, &mut *b] {
        if h.ep.poll_timeout().is_some_and(|t| t <= now) {
            h.ep.handle_timeout(now);
        }
    }
    let mut sent = [0u64; PLANES as usize];
    let mut to_b = Vec::new();
    while let Some(t) =
        a.ep.poll_transmit_ports(now, &mut buf, &mut a.mem, u64::MAX)
    {
        sent[t.port as usize] += 1;
        to_b.push((buf[..t.len].to_vec(), t.src_port, t.port));
    }
    let mut to_a = Vec::new();
    while let Some(t) =
        b.ep.poll_transmit_ports(now, &mut buf, &mut b.mem, u64::MAX)
    {
        to_a.push((buf[..t.len].to_vec(), t.src_port, t.port));
    }
    for (d, sp, port) in to_b {
        b.ep.handle_datagram_port(now, A, sp, false, &d, &mut b.mem, port);
    }
    for (d, sp, port) in to_a {
        a.ep.handle_datagram_port(now, B, sp, false, &d, &mut a.mem, port);
    }
    sent
}

fn write(i: u64, rkey: u32, lkey: u32) -> SendWr {
    SendWr {
        wr_id: i,
        op: SendOp::Write {
            rkey,
            raddr: 0x20_0000 + (i % 8) * LEN as u64,
            imm: None,
        },
        sgl: [Sge {
            lkey,
            addr: 0x10_0000 + (i % 8) * LEN as u64,
            len: LEN,
        }]
        .into_iter()
        .collect(),
        signaled: true,
        solicited: false,
        fence: false,
    }
}

/// Post 8 WRITEs from A and run until they complete; A's datagrams per plane meanwhile.
fn burst(
    a: &mut Host,
    b: &mut Host,
    ca: ConnId,
    now: &mut u64,
    first: u64,
    keys: (u32, u32),
) -> [u64; PLANES as usize] {
    for i in first..first + 8 {
        a.ep.post_send(ca, 1, write(i, keys.0, keys.1)).unwrap();
    }
    let (mut done, mut sent, limit) = (0, [0u64; PLANES as usize], *now + 1_000_000_000);
    while done < 8 && *now < limit {
        let s = step(a, b, *now);
        sent[0] += s[0];
        sent[1] += s[1];
        while let Some(c) = a.ep.poll_completion() {
            assert_eq!(c.status, Status::Success, "{c:?}");
            done += 1;
        }
        *now += 1_000;
    }
    assert_eq!(done, 8, "the WRITEs complete");
    sent
}

// checks: [PATH-11]
#[test]
fn a_connection_restricted_to_one_plane_sends_only_on_it() {
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
        step(&mut a, &mut b, now);
        now += 1_000;
    }
    let cb = b.ep.connections().map(|c| c.id).next().expect("B accepted");
    a.ep.create_stream(ca, 1, 1, 1).unwrap();
    b.ep.create_stream(cb, 1, 1, 1).unwrap();
    let keys = (dst, src);

    let before = burst(&mut a, &mut b, ca, &mut now, 0, keys);
    assert!(
        before[0] > 0 && before[1] > 0,
        "unrestricted, both planes carry: {before:?}"
    );

    let c = a.ep.connection_mut(ca).unwrap();
    assert_eq!(c.nic_ports(), PLANES);
    assert_eq!(c.plane_mask(), 0b11);
    assert_eq!(c.set_plane_mask(0), Err(conn::NoSuchPlane));
    assert_eq!(
        c.set_plane_mask(0b100),
        Err(conn::NoSuchPlane),
        "no plane 2"
    );
    assert_eq!(c.plane_mask(), 0b11, "a refused mask changes nothing");
    assert_eq!(
        c.set_plane_mask(0b110),
        Ok(0b10),
        "bits past the planes ignored"
    );
    assert!(c.paths().iter().all(|p| p.plane == 1 && p.home_plane == 1));
    a.ep.refresh(ca);
    let tx_before: Vec<u64> =
        a.ep.connection(ca)
            .unwrap()
            .paths()
            .iter()
            .map(|p| p.counters().tx_pkts)
            .collect();

    let only1 = burst(&mut a, &mut b, ca, &mut now, 8, keys);
    assert_eq!(
        only1[0], 0,
        "restricted to plane 1, plane 0 carried {only1:?}"
    );
    assert!(only1[1] > 0);
    let c = a.ep.connection(ca).unwrap();
    for (p, t0) in c.paths().iter().zip(&tx_before) {
        assert_eq!(p.plane, 1, "path {} on plane {}", p.index, p.plane);
        assert!(
            p.counters().tx_pkts > *t0,
            "path {} still carries data",
            p.index
        );
    }

    let c = a.ep.connection_mut(ca).unwrap();
    assert_eq!(c.set_plane_mask(u64::MAX), Ok(0b11));
    a.ep.refresh(ca);
    // The paths of plane 0 go home by their home probes, then carry data there again.
    let mut again = [0u64; 2];
    for round in 0..20 {
        let s = burst(&mut a, &mut b, ca, &mut now, 16 + round * 8, keys);
        again = s;
        if s[0] > 0 {
            break;
        }
    }
    assert!(again[0] > 0, "lifted, plane 0 carries again: {again:?}");
}
