//! Service-ID resolution of the RoCEv2 CM (spec/rocev2.md §10, SIDR_REQ / SIDR_REP on QP1),
//! two sans-IO CMs exchanging MADs in memory: resolution with private data both ways and the
//! MADs' fields as Linux sends them, duplicates answered from state, reject, no listener
//! after the grace, unreachable after every retry, and a lossy channel.

use ferroce_transport::roce::cm::wire::{CmBody, CmMad, CmaHdr, MAD_LEN, PS_UDP};
use ferroce_transport::roce::cm::{
    iba_time_ns, sidr_status, RoceCm, RoceCmConfig, RoceCmError, RoceCmEvent,
};
use std::net::Ipv4Addr;

const A: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 11);
const B: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 12);
const PORT: u16 = 7174;

fn cfg(ip: Ipv4Addr) -> RoceCmConfig {
    RoceCmConfig {
        cm_response_timeout: 14,
        packet_life_time: 10,
        max_cm_retries: 3,
        timewait_ns: 500_000_000,
        listen_grace_ns: 50_000_000,
        ..RoceCmConfig::new(ip)
    }
}

fn rto() -> u64 {
    2 * iba_time_ns(10) + iba_time_ns(14)
}

fn mads(c: &mut RoceCm) -> Vec<(Ipv4Addr, [u8; MAD_LEN])> {
    std::iter::from_fn(|| c.poll_transmit()).collect()
}

fn events(c: &mut RoceCm) -> Vec<RoceCmEvent> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

/// A SIDR_REQ with the cma_hdr and the service ID; B answers with its QPN and Q_Key; A
/// takes the first SIDR_REP only; a duplicate SIDR_REQ gets the same SIDR_REP again.
// checks: [ROCE-6] [ROCE-7]
#[test]
fn sidr_resolves_and_answers_duplicates_from_state() {
    let (mut a, mut b) = (RoceCm::new(cfg(A), 3), RoceCm::new(cfg(B), 5));
    b.listen(PS_UDP, PORT).unwrap();
    let ia = a.sidr_request(0, B, PS_UDP, PORT, 40001, b"hello").unwrap();
    let out = mads(&mut a);
    assert_eq!(out.len(), 1);
    let (to, req) = out[0];
    assert_eq!(to, B);
    let m = CmMad::parse(&req).unwrap();
    let CmBody::SidrReq(r) = &m.body else {
        panic!("{m:?}")
    };
    assert_eq!(r.request_id, ia.0);
    assert_eq!(r.service_id, 0x0000_0000_0111_1c06);
    assert_eq!(r.pkey, 0xffff);
    let h = CmaHdr::parse(&r.private_data).unwrap();
    assert_eq!((h.src_port, h.src, h.dst), (40001, A, B));
    assert_eq!(&r.private_data[36..41], b"hello");

    b.handle(1, A, &req);
    let ev = events(&mut b);
    let [RoceCmEvent::SidrRequest {
        id: ib,
        peer,
        port_space,
        port,
        peer_port,
        local_addr,
        ref private_data,
    }] = ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(
        (peer, port_space, port, peer_port, local_addr),
        (A, PS_UDP, PORT, 40001, B)
    );
    assert_eq!(&private_data[..5], b"hello");
    // Duplicate before the answer: nothing.
    b.handle(2, A, &req);
    assert!(!b.has_transmit() && events(&mut b).is_empty());
    b.sidr_reply(3, ib, sidr_status::SUCCESS, 0x12, 0x0123_4567, b"world")
        .unwrap();
    assert_eq!(
        b.sidr_reply(3, ib, 0, 1, 1, b""),
        Err(RoceCmError::InvalidState)
    );
    let out = mads(&mut b);
    let (to, rep) = out[0];
    assert_eq!((out.len(), to), (1, A));
    let m = CmMad::parse(&rep).unwrap();
    let CmBody::SidrRep(r) = &m.body else {
        panic!("{m:?}")
    };
    assert_eq!(
        (r.request_id, r.status, r.qpn, r.qkey, r.service_id),
        (ia.0, 0, 0x12, 0x0123_4567, 0x0000_0000_0111_1c06)
    );
    assert_eq!(
        m.hdr.tid,
        CmMad::parse(&req).unwrap().hdr.tid,
        "the SIDR_REQ's TID"
    );
    a.handle(4, B, &rep);
    let ev = events(&mut a);
    let [RoceCmEvent::SidrResponse {
        id,
        status: 0,
        qpn: 0x12,
        qkey: 0x0123_4567,
        ref private_data,
    }] = ev[..]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(id, ia);
    assert_eq!(&private_data[..5], b"world");
    // The SIDR_REQ again: the same SIDR_REP; A takes nothing more, nor retransmits.
    b.handle(5, A, &req);
    let again = mads(&mut b);
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].1, rep);
    a.handle(6, B, &again[0].1);
    assert!(events(&mut a).is_empty());
    assert_eq!(a.counters.drop_unexpected, 0);
    a.handle_timeout(6 + rto());
    assert!(!a.has_transmit());
}

/// Reject (status 2), no listener (status 1 after the grace), a silent peer (UNREACHABLE
/// after max_cm_retries + 1 sends), private data over 180 bytes.
// checks: [ROCE-6] [ROCE-7]
#[test]
fn sidr_reject_no_listener_unreachable() {
    let (mut a, mut b) = (RoceCm::new(cfg(A), 3), RoceCm::new(cfg(B), 5));
    b.listen(PS_UDP, PORT).unwrap();
    let i1 = a.sidr_request(0, B, PS_UDP, PORT, 1, b"").unwrap();
    for (_, m) in mads(&mut a) {
        b.handle(0, A, &m);
    }
    let ev = events(&mut b);
    let [RoceCmEvent::SidrRequest { id: ib, .. }] = ev[..] else {
        panic!("{ev:?}")
    };
    b.sidr_reply(0, ib, sidr_status::REJECT, 0, 0, b"no")
        .unwrap();
    for (_, m) in mads(&mut b) {
        a.handle(0, B, &m);
    }
    let ev = events(&mut a);
    assert!(
        matches!(ev[..], [RoceCmEvent::SidrResponse { id, status: 2, .. }] if id == i1),
        "{ev:?}"
    );
    // Nobody listens on PORT + 1 (a TCP listener there does not count).
    b.listen(0x0106, PORT + 1).unwrap();
    let i2 = a.sidr_request(0, B, PS_UDP, PORT + 1, 1, b"").unwrap();
    for (_, m) in mads(&mut a) {
        b.handle(0, A, &m);
    }
    assert!(!b.has_transmit(), "answered within the listen grace");
    let t = a.poll_timeout().unwrap();
    assert!(t >= 50_000_000);
    a.handle_timeout(t);
    for (_, m) in mads(&mut a) {
        b.handle(t, A, &m);
    }
    assert!(events(&mut b).is_empty());
    for (_, m) in mads(&mut b) {
        a.handle(t, B, &m);
    }
    let ev = events(&mut a);
    assert!(
        matches!(ev[..], [RoceCmEvent::SidrResponse { id, status: 1, qpn: 0, .. }] if id == i2),
        "{ev:?}"
    );
    // Silent peer.
    let i3 = a
        .sidr_request(0, Ipv4Addr::new(198, 18, 7, 99), PS_UDP, 5, 1, b"")
        .unwrap();
    let mut sent = mads(&mut a).len();
    let mut got = Vec::new();
    while let Some(t) = a.poll_timeout() {
        a.handle_timeout(t);
        sent += mads(&mut a).len();
        got.extend(events(&mut a));
        if !got.is_empty() {
            break;
        }
    }
    assert_eq!(got, vec![RoceCmEvent::Unreachable { id: i3 }]);
    assert_eq!(sent, 4, "max_cm_retries 3: four sends");
    assert_eq!(
        a.sidr_request(0, B, PS_UDP, PORT, 1, &[0; 181]),
        Err(RoceCmError::PrivateDataTooLong)
    );
}

/// Loss and duplication (deterministic), 200 seeds at 20 %: exactly one SidrRequest at B
/// and one SidrResponse at A per resolution, or (every copy lost) one Unreachable.
// checks: [ROCE-6] [ROCE-7]
#[test]
fn sidr_over_a_lossy_channel_resolves_once() {
    let mut resolved = 0;
    for seed in 1..=200u64 {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut chance = |p: f64| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64 <= p
        };
        let (mut a, mut b) = (
            RoceCm::new(cfg(A), seed as u32),
            RoceCm::new(cfg(B), !(seed as u32)),
        );
        b.listen(PS_UDP, PORT).unwrap();
        let ia = a.sidr_request(0, B, PS_UDP, PORT, 1, b"x").unwrap();
        let (mut ev_a, mut ev_b) = (Vec::new(), Vec::new());
        let mut now = 0;
        for _ in 0..1000 {
            let (to_b, to_a) = (mads(&mut a), mads(&mut b));
            let moved = !to_b.is_empty() || !to_a.is_empty();
            for (to_b, (_, m)) in to_b
                .into_iter()
                .map(|m| (true, m))
                .chain(to_a.into_iter().map(|m| (false, m)))
            {
                if chance(0.2) {
                    continue;
                }
                let n = if chance(0.1) { 2 } else { 1 };
                for _ in 0..n {
                    if to_b {
                        b.handle(now, A, &m);
                    } else {
                        a.handle(now, B, &m);
                    }
                }
            }
            for e in events(&mut b) {
                if let RoceCmEvent::SidrRequest { id, .. } = e {
                    b.sidr_reply(now, id, 0, 0x44, 0x1111_2222, b"").unwrap();
                }
                ev_b.push(e);
            }
            ev_a.extend(events(&mut a));
            if moved {
                continue;
            }
            let Some(t) = [a.poll_timeout(), b.poll_timeout()]
                .into_iter()
                .flatten()
                .min()
            else {
                break;
            };
            now = now.max(t);
            a.handle_timeout(now);
            b.handle_timeout(now);
        }
        assert_eq!(ev_a.len(), 1, "seed {seed}: A {ev_a:?}");
        match &ev_a[0] {
            RoceCmEvent::SidrResponse { id, qpn, qkey, .. } => {
                assert_eq!((*id, *qpn, *qkey), (ia, 0x44, 0x1111_2222));
                assert_eq!(ev_b.len(), 1, "seed {seed}: B {ev_b:?}");
                resolved += 1;
            }
            RoceCmEvent::Unreachable { id } => assert_eq!(*id, ia),
            e => panic!("seed {seed}: {e:?}"),
        }
        assert!(a.poll_timeout().is_none() && b.poll_timeout().is_none());
    }
    assert!(resolved >= 190, "{resolved} of 200 resolved");
}
