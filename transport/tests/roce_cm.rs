//! The IBTA CM on QP1 of the RoCEv2 engine (spec/rocev2.md §10), two endpoints in memory:
//! connect (REQ → REP → RTU) and data over the RC QPs it set up, reject with private data,
//! no listener → REJ, lost REQ / REP / RTU retried on the REQ's timers, MRA on a duplicate
//! REQ, unreachable after every retry, disconnect (DREQ/DREP), and bad MADs counted.

use ferroce_transport::mem::{access, Regions};
use ferroce_transport::roce::cm::wire::{
    self as cmw, CmAttr, CmBody, CmMad, GSI_QKEY, GSI_QPN, MAD_LEN, PS_TCP,
};
use ferroce_transport::roce::cm::{
    iba_time_ns, CmQp, ConnectParams, RoceCmConfig, RoceCmEvent, RoceCmId,
};
use ferroce_transport::roce::wire::{Opcode, Packet};
use ferroce_transport::roce::{RoceConfig, RoceEndpoint};
use ferroce_transport::*;
use std::net::Ipv4Addr;

const A: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 1);
const B: Ipv4Addr = Ipv4Addr::new(198, 18, 7, 2);
const QA: u32 = 0x00_0111;
const QB: u32 = 0x00_0222;
const PSN_A: u32 = 0x00_1000;
const PSN_B: u32 = 0x00_2000;
const PD: u32 = 1;
const PORT: u16 = 7174;

struct Side {
    ip: Ipv4Addr,
    ep: RoceEndpoint,
    mem: Regions,
    key: u32,
}

fn cm_cfg(ip: Ipv4Addr) -> RoceCmConfig {
    RoceCmConfig {
        // 2 × 4 ms + 67 ms per try, four tries: quick tests.
        cm_response_timeout: 14,
        packet_life_time: 10,
        max_cm_retries: 3,
        mra_service_timeout: 18,
        timewait_ns: 500_000_000,
        // Below one try's wait: the first retransmission of a REQ nobody serves is REJ'd.
        listen_grace_ns: 50_000_000,
        ..RoceCmConfig::new(ip)
    }
}

fn side(ip: Ipv4Addr, seed: u32) -> Side {
    let mut ep = RoceEndpoint::new(RoceConfig::new(ip));
    ep.enable_cm(cm_cfg(ip), seed);
    let mut mem = Regions::new();
    let key = mem.register(PD, 0, 8192, access::LOCAL_WRITE);
    Side { ip, ep, mem, key }
}

/// One try's wait: 2 × packet lifetime + the response timeout.
fn rto() -> u64 {
    2 * iba_time_ns(10) + iba_time_ns(14)
}

fn qp(qpn: u32, psn: u32) -> CmQp {
    CmQp {
        qpn,
        starting_psn: psn,
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
    }
}

impl Side {
    fn cm(&mut self) -> &mut ferroce_transport::roce::cm::RoceCm {
        self.ep.cm_mut().unwrap()
    }
    fn events(&mut self) -> Vec<RoceCmEvent> {
        std::iter::from_fn(|| self.cm().poll_event()).collect()
    }
    /// Every datagram this side sends now: (bytes, UDP source port, destination).
    fn drain(&mut self, now: u64) -> Vec<(Vec<u8>, u16, Ipv4Addr)> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 9000];
        while let Some(t) = self.ep.poll_transmit(now, &mut buf, &mut self.mem) {
            out.push((buf[..t.len].to_vec(), t.src_port, t.dst));
        }
        out
    }
    fn connect(&mut self, now: u64, to: Ipv4Addr, pd: &[u8]) -> RoceCmId {
        let p = ConnectParams {
            peer: to,
            port_space: PS_TCP,
            port: PORT,
            src_port: 40001,
            qp: qp(QA, PSN_A),
            mtu: 1024,
            local_ack_timeout: 14,
            private_data: pd.to_vec(),
        };
        self.cm().connect(now, &p).unwrap()
    }
}

/// The CM MAD in a datagram, checking it is a UD SEND from QP1 to QP1 with the GSI Q_Key.
fn mad_of(p: &[u8]) -> Option<CmMad> {
    let pkt = Packet::parse(p).ok()?;
    if pkt.bth.opcode != Opcode::UdSendOnly || pkt.bth.dest_qpn != GSI_QPN {
        return None;
    }
    let d = pkt.ext.deth?;
    assert_eq!((d.qkey, d.src_qpn), (GSI_QKEY, GSI_QPN));
    assert_eq!(pkt.payload.len(), MAD_LEN);
    Some(CmMad::parse(pkt.payload).expect("a CM MAD"))
}

/// Move `from`'s datagrams to `to`, except those `drop` refuses; the CM attributes moved
/// (dropped ones included), in order.
fn pump(
    from: &mut Side,
    to: &mut Side,
    now: u64,
    drop: &mut dyn FnMut(Option<CmAttr>) -> bool,
) -> Vec<CmAttr> {
    let mut seen = Vec::new();
    for (p, sport, dst) in from.drain(now) {
        assert_eq!(dst, to.ip);
        let attr = mad_of(&p).map(|m| m.attr());
        seen.extend(attr);
        if !drop(attr) {
            to.ep
                .handle_datagram(now, from.ip, sport, false, &p, &mut to.mem);
        }
    }
    seen
}

fn keep() -> impl FnMut(Option<CmAttr>) -> bool {
    |_| false
}

/// Drop the first `n` MADs of kind `what`.
fn drop_first(what: CmAttr, mut n: usize) -> impl FnMut(Option<CmAttr>) -> bool {
    move |a| {
        if a == Some(what) && n > 0 {
            n -= 1;
            return true;
        }
        false
    }
}

fn fire(s: &mut Side, now: u64) {
    if s.ep.poll_timeout().is_some_and(|t| t <= now) {
        s.ep.handle_timeout(now);
    }
}

/// Passive side: take the ConnectRequest, create the RC QP, accept.
fn accept(b: &mut Side, now: u64, pd: &[u8]) -> (RoceCmId, CmQp) {
    let ev = b.events();
    accept_ev(b, now, ev, pd)
}

fn accept_ev(b: &mut Side, now: u64, ev: Vec<RoceCmEvent>, pd: &[u8]) -> (RoceCmId, CmQp) {
    let [RoceCmEvent::ConnectRequest {
        id,
        peer,
        qp: q,
        mtu,
        ..
    }] = ev.as_slice()
    else {
        panic!("expected one ConnectRequest, got {ev:?}");
    };
    assert_eq!((*peer, *mtu), (A, 1024));
    b.ep.create_cm_qp(A, QB, PD, PSN_B, q, *mtu)
        .expect("passive QP");
    b.cm().accept(now, *id, qp(QB, PSN_B), pd).unwrap();
    (*id, *q)
}

/// Active side: take the ConnectResponse, create the RC QP, send the RTU.
fn establish(a: &mut Side) -> (RoceCmId, ConnId) {
    let ev = a.events();
    let [RoceCmEvent::ConnectResponse { id, qp: q, .. }] = ev.as_slice() else {
        panic!("expected one ConnectResponse, got {ev:?}");
    };
    assert_eq!((q.qpn, q.starting_psn), (QB, PSN_B));
    let c = a.ep.create_cm_qp(B, QA, PD, PSN_A, q, 1024).unwrap();
    a.cm().establish(*id, b"").unwrap();
    (*id, c)
}

fn sge(key: u32, addr: u64, len: u32) -> SgList {
    let mut s = SgList::new();
    s.push(Sge {
        lkey: key,
        addr,
        len,
    });
    s
}

#[test]
fn connect_rtu_data_and_disconnect_over_qp1() {
    let (mut a, mut b) = (side(A, 7), side(B, 9));
    b.cm().listen(PS_TCP, PORT).unwrap();
    let ia = a.connect(0, B, b"hello");

    // The REQ on the wire: what Linux rdma_cm sends for rdma_connect over RoCEv2.
    let pkts = a.drain(0);
    assert_eq!(pkts.len(), 1);
    let (p, sport, _) = &pkts[0];
    let m = mad_of(p).unwrap();
    let CmBody::Req(req) = &m.body else {
        panic!("{m:?}")
    };
    assert_eq!(req.service_id, 0x0000_0000_0106_1c06);
    assert_eq!(
        cmw::parse_ip_service_id(req.service_id),
        Some((PS_TCP, PORT))
    );
    assert_eq!((req.local_qpn, req.starting_psn), (QA, PSN_A));
    assert_eq!(
        (req.path_mtu, req.pkey, req.transport_service_type),
        (3, 0xffff, 0)
    );
    assert_eq!(cmw::gid_ipv4(&req.primary.local_gid), Some(A));
    assert_eq!(cmw::gid_ipv4(&req.primary.remote_gid), Some(B));
    assert_eq!(req.alternate, Default::default(), "no alternate path");
    let h = cmw::CmaHdr::parse(&req.private_data).unwrap();
    assert_eq!((h.src, h.dst, h.src_port), (A, B, 40001));
    assert_eq!(&req.private_data[36..41], b"hello");
    b.ep.handle_datagram(0, A, *sport, false, p, &mut b.mem);

    let ev = b.events();
    let RoceCmEvent::ConnectRequest {
        port_space,
        port,
        peer_port,
        local_addr,
        private_data,
        qp: q,
        ..
    } = &ev[0]
    else {
        panic!("{ev:?}")
    };
    assert_eq!(
        (*port_space, *port, *peer_port, *local_addr),
        (PS_TCP, PORT, 40001, B)
    );
    assert_eq!(private_data.len(), 56);
    assert_eq!(&private_data[..5], b"hello");
    assert_eq!(*q, qp(QA, PSN_A));
    let (ib, _) = accept_ev(&mut b, 1, ev, b"world");
    assert_eq!(pump(&mut b, &mut a, 2, &mut keep()), vec![CmAttr::Rep]);
    let (ia2, c) = establish(&mut a);
    assert_eq!(ia2, ia);
    assert_eq!(pump(&mut a, &mut b, 3, &mut keep()), vec![CmAttr::Rtu]);
    assert_eq!(b.events(), vec![RoceCmEvent::Established { id: ib }]);

    // Starting PSNs as Linux uses them: each side sends from the PSN the other announced
    // and expects the one it announced itself.
    assert_eq!(
        a.ep.qp_psns(c, QA).map(|p| (p.0, p.2)),
        Some((PSN_B, PSN_A))
    );
    assert_eq!(
        b.ep.qp_psns(ConnId(1), QB).map(|p| (p.0, p.2)),
        Some((PSN_A, PSN_B))
    );
    // The RC QPs the exchange set up carry a SEND.
    b.mem.region_mut(b.key).unwrap().data[..4].fill(0);
    let cb = ConnId(1);
    b.ep.post_recv(
        cb,
        QB,
        RecvWr {
            wr_id: 5,
            sgl: sge(b.key, 0, 64),
        },
    )
    .unwrap();
    a.mem.region_mut(a.key).unwrap().data[100..104].copy_from_slice(b"ping");
    a.ep.post_send(
        c,
        QA,
        SendWr {
            wr_id: 6,
            op: SendOp::Send { imm: None },
            sgl: sge(a.key, 100, 4),
            signaled: true,
            solicited: false,
            fence: false,
        },
    )
    .unwrap();
    pump(&mut a, &mut b, 4, &mut keep());
    let got: Vec<Completion> = std::iter::from_fn(|| b.ep.poll_completion()).collect();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0].wr_id, got[0].status, got[0].byte_len),
        (5, Status::Success, 4)
    );
    assert_eq!(&b.mem.region(b.key).unwrap().data[..4], b"ping");
    pump(&mut b, &mut a, 5, &mut keep());

    // Disconnect: DREQ naming B's QPN, DREP back, both sides told.
    a.cm().disconnect(6, ia, b"").unwrap();
    let dreq = a.drain(6);
    let CmBody::Dreq(d) = mad_of(&dreq[0].0).unwrap().body else {
        panic!()
    };
    assert_eq!(d.remote_qpn_eecn, QB);
    b.ep.handle_datagram(6, A, dreq[0].1, false, &dreq[0].0, &mut b.mem);
    assert_eq!(b.events(), vec![RoceCmEvent::Disconnected { id: ib }]);
    assert_eq!(pump(&mut b, &mut a, 7, &mut keep()), vec![CmAttr::Drep]);
    assert_eq!(a.events(), vec![RoceCmEvent::Disconnected { id: ia }]);
    let (ka, kb) = (a.ep.counters(), b.ep.counters());
    assert_eq!((ka.gsi_mads_sent, ka.gsi_mads_received), (3, 2));
    assert_eq!((kb.gsi_mads_sent, kb.gsi_mads_received), (2, 3));
    assert_eq!(a.cm().counters.retransmits + b.cm().counters.retransmits, 0);
}

/// A and B connected (B listening), at time 3.
fn connected() -> (Side, Side, RoceCmId, RoceCmId) {
    let (mut a, mut b) = (side(A, 7), side(B, 9));
    b.cm().listen(PS_TCP, PORT).unwrap();
    let ia = a.connect(0, B, b"");
    pump(&mut a, &mut b, 0, &mut keep());
    let (ib, _) = accept(&mut b, 1, b"");
    pump(&mut b, &mut a, 2, &mut keep());
    establish(&mut a);
    pump(&mut a, &mut b, 3, &mut keep());
    assert_eq!(b.events(), vec![RoceCmEvent::Established { id: ib }]);
    (a, b, ia, ib)
}

#[test]
fn reject_carries_reason_and_private_data() {
    let (mut a, mut b) = (side(A, 7), side(B, 9));
    b.cm().listen(PS_TCP, PORT).unwrap();
    let ia = a.connect(0, B, b"let me in");
    pump(&mut a, &mut b, 0, &mut keep());
    let ev = b.events();
    let RoceCmEvent::ConnectRequest { id, .. } = ev[0] else {
        panic!("{ev:?}")
    };
    b.cm()
        .reject(1, id, cmw::rej_reason::CONSUMER, b"busy")
        .unwrap();
    assert_eq!(pump(&mut b, &mut a, 1, &mut keep()), vec![CmAttr::Rej]);
    let ev = a.events();
    let [RoceCmEvent::Rejected {
        id,
        reason,
        private_data,
    }] = ev.as_slice()
    else {
        panic!("{ev:?}")
    };
    assert_eq!((*id, *reason), (ia, 28));
    assert_eq!(&private_data[..4], b"busy");
    // Over: no retransmission later.
    fire(&mut a, 10 * rto());
    assert!(a.drain(10 * rto()).is_empty());
    assert!(a.events().is_empty());
}

#[test]
fn no_listener_is_rejected_with_invalid_service_id() {
    let (mut a, mut b) = (side(A, 7), side(B, 9));
    let ia = a.connect(0, B, b"");
    // The first copy falls in the listen grace: no answer (a listener may be coming).
    pump(&mut a, &mut b, 0, &mut keep());
    assert!(b.events().is_empty());
    assert!(b.drain(0).is_empty());
    // The retransmission, past the grace, still finds none: REJ, invalid service ID.
    let t = a.ep.poll_timeout().unwrap();
    fire(&mut a, t);
    pump(&mut a, &mut b, t, &mut keep());
    let rej = b.drain(t);
    assert_eq!(rej.len(), 1);
    let CmBody::Rej(r) = mad_of(&rej[0].0).unwrap().body else {
        panic!()
    };
    assert_eq!(
        (r.local_comm_id, r.remote_comm_id, r.message_rejected),
        (0, ia.0, 0)
    );
    a.ep.handle_datagram(t, B, rej[0].1, false, &rej[0].0, &mut a.mem);
    assert!(matches!(
        a.events().as_slice(),
        [RoceCmEvent::Rejected { id, reason: 8, .. }] if *id == ia
    ));
    assert_eq!(b.cm().counters.rej_sent_by_cm, 1);
}

#[test]
fn a_listener_that_appears_within_the_grace_gets_the_retransmitted_req() {
    let (mut a, mut b) = (side(A, 7), side(B, 9));
    a.connect(0, B, b"");
    pump(&mut a, &mut b, 0, &mut keep());
    assert!(b.drain(0).is_empty(), "no REJ within the grace");
    b.cm().listen(PS_TCP, PORT).unwrap();
    let t = a.ep.poll_timeout().unwrap();
    fire(&mut a, t);
    pump(&mut a, &mut b, t, &mut keep());
    accept(&mut b, t, b"");
    pump(&mut b, &mut a, t, &mut keep());
    establish(&mut a);
}

#[test]
fn lost_req_and_lost_rep_are_retried_on_the_req_timers() {
    let (mut a, mut b) = (side(A, 7), side(B, 9));
    b.cm().listen(PS_TCP, PORT).unwrap();
    a.connect(0, B, b"");
    assert_eq!(
        pump(&mut a, &mut b, 0, &mut drop_first(CmAttr::Req, 1)),
        vec![CmAttr::Req]
    );
    // Nothing before the timer, the REQ again at it.
    let t = a.ep.poll_timeout().unwrap();
    assert_eq!(t, rto());
    fire(&mut a, t - 1);
    assert!(a.drain(t - 1).is_empty());
    fire(&mut a, t);
    assert_eq!(pump(&mut a, &mut b, t, &mut keep()), vec![CmAttr::Req]);
    accept(&mut b, t, b"");
    // The REP lost once: B sends it again after its wait (from the REQ's local timeout).
    assert_eq!(
        pump(&mut b, &mut a, t, &mut drop_first(CmAttr::Rep, 1)),
        vec![CmAttr::Rep]
    );
    let t2 = b.ep.poll_timeout().unwrap();
    assert_eq!(t2, t + rto());
    fire(&mut b, t2);
    assert_eq!(pump(&mut b, &mut a, t2, &mut keep()), vec![CmAttr::Rep]);
    establish(&mut a);
    // The RTU lost: B sends the REP again, A (established) answers with the RTU again.
    assert_eq!(
        pump(&mut a, &mut b, t2, &mut drop_first(CmAttr::Rtu, 1)),
        vec![CmAttr::Rtu]
    );
    let t3 = b.ep.poll_timeout().unwrap();
    fire(&mut b, t3);
    assert_eq!(pump(&mut b, &mut a, t3, &mut keep()), vec![CmAttr::Rep]);
    assert!(a.events().is_empty(), "a duplicate REP is no new event");
    assert_eq!(pump(&mut a, &mut b, t3, &mut keep()), vec![CmAttr::Rtu]);
    assert!(matches!(
        b.events().as_slice(),
        [RoceCmEvent::Established { .. }]
    ));
    assert_eq!(a.cm().counters.retransmits, 2, "REQ, RTU");
    assert_eq!(b.cm().counters.retransmits, 2, "REP twice");
}

#[test]
fn unreachable_after_max_cm_retries() {
    let (mut a, _b) = (side(A, 7), side(B, 9));
    let ia = a.connect(0, B, b"");
    let mut sent = a.drain(0).len();
    let mut now = 0;
    for _ in 0..20 {
        let Some(t) = a.ep.poll_timeout() else { break };
        now = t;
        fire(&mut a, now);
        sent += a.drain(now).len();
        if !a.events().is_empty() {
            break;
        }
    }
    // max_cm_retries 3: the REQ four times, then UNREACHABLE at the fourth wait's end.
    assert_eq!(sent, 4);
    assert_eq!(now, 4 * rto());
    assert!(!a.cm().is_live(ia));
    assert_eq!(a.cm().counters.timeouts, 1);
}

#[test]
fn duplicate_req_while_undecided_gets_an_mra_that_stretches_the_wait() {
    let (mut a, mut b) = (side(A, 7), side(B, 9));
    b.cm().listen(PS_TCP, PORT).unwrap();
    a.connect(0, B, b"");
    pump(&mut a, &mut b, 0, &mut keep());
    let ev = b.events();
    assert_eq!(ev.len(), 1);
    // The application takes its time: the REQ comes again, B answers with an MRA.
    let t = rto();
    fire(&mut a, t);
    assert_eq!(pump(&mut a, &mut b, t, &mut keep()), vec![CmAttr::Req]);
    assert!(b.events().is_empty(), "no second ConnectRequest");
    assert_eq!(pump(&mut b, &mut a, t, &mut keep()), vec![CmAttr::Mra]);
    // A now waits the MRA's service timeout (18) plus the trip, without retransmitting.
    let next = a.ep.poll_timeout().unwrap();
    assert_eq!(next, t + iba_time_ns(18) + 2 * iba_time_ns(10));
    fire(&mut a, next - 1);
    assert!(a.drain(next - 1).is_empty());
    accept_ev(&mut b, next - 1, ev, b"");
    pump(&mut b, &mut a, next - 1, &mut keep());
    establish(&mut a);
    assert_eq!(a.cm().counters.mra_received, 1);
    assert_eq!(b.cm().counters.mra_sent, 1);
}

#[test]
fn dreq_lost_is_retried_and_a_dreq_for_another_qp_is_dropped() {
    let (mut a, mut b, ia, ib) = connected();
    // A DREQ naming a QPN that is not B's: dropped, nothing answered.
    let bad = CmMad {
        hdr: Default::default(),
        body: CmBody::Dreq(cmw::Dreq {
            local_comm_id: ia.0,
            remote_comm_id: ib.0,
            remote_qpn_eecn: QB + 1,
            private_data: Vec::new(),
        }),
    };
    let before = b.cm().counters.drop_unexpected;
    inject(&mut b, A, &bad);
    assert!(b.events().is_empty());
    assert_eq!(b.cm().counters.drop_unexpected, before + 1);
    b.drain(10);

    a.cm().disconnect(10, ia, b"").unwrap();
    assert_eq!(
        pump(&mut a, &mut b, 10, &mut drop_first(CmAttr::Dreq, 1)),
        vec![CmAttr::Dreq]
    );
    let t = a.ep.poll_timeout().unwrap();
    fire(&mut a, t);
    assert_eq!(pump(&mut a, &mut b, t, &mut keep()), vec![CmAttr::Dreq]);
    assert_eq!(b.events(), vec![RoceCmEvent::Disconnected { id: ib }]);
    // The DREP lost too: the next DREQ is answered from B's time-wait, no new event.
    assert_eq!(
        pump(&mut b, &mut a, t, &mut drop_first(CmAttr::Drep, 1)),
        vec![CmAttr::Drep]
    );
    let t2 = a.ep.poll_timeout().unwrap();
    fire(&mut a, t2);
    pump(&mut a, &mut b, t2, &mut keep());
    assert!(b.events().is_empty());
    assert_eq!(pump(&mut b, &mut a, t2, &mut keep()), vec![CmAttr::Drep]);
    assert_eq!(a.events(), vec![RoceCmEvent::Disconnected { id: ia }]);
}

/// A MAD from `from` handed to `to`'s engine as a UD SEND to QP1.
fn inject(to: &mut Side, from: Ipv4Addr, m: &CmMad) {
    inject_raw(to, from, &m.emit().unwrap(), GSI_QKEY);
}

fn inject_raw(to: &mut Side, from: Ipv4Addr, mad: &[u8], qkey: u32) {
    // Build the datagram with a throwaway endpoint at `from` sending on a UD QP to QP1.
    let mut ep = RoceEndpoint::new(RoceConfig::new(from));
    let mut mem = Regions::new();
    let key = mem.register(PD, 0, 4096, access::LOCAL_WRITE);
    mem.region_mut(key).unwrap().data[..mad.len()].copy_from_slice(mad);
    ep.create_ud_qp(GSI_QPN, PD, qkey, 0).unwrap();
    ep.post_ud_send(
        GSI_QPN,
        ferroce_transport::roce::UdDest {
            ip: to.ip,
            qpn: GSI_QPN,
            qkey,
        },
        SendWr {
            wr_id: 1,
            op: SendOp::Send { imm: None },
            sgl: sge(key, 0, mad.len() as u32),
            signaled: false,
            solicited: false,
            fence: false,
        },
    )
    .unwrap();
    let mut buf = vec![0u8; 2048];
    let t = ep.poll_transmit(0, &mut buf, &mut mem).unwrap();
    to.ep
        .handle_datagram(0, from, t.src_port, false, &buf[..t.len], &mut to.mem);
}

#[test]
fn bad_mads_on_qp1_are_counted_and_dropped() {
    let mut b = side(B, 9);
    b.cm().listen(PS_TCP, PORT).unwrap();
    let good = CmMad {
        hdr: Default::default(),
        body: CmBody::Rtu(cmw::Short {
            local_comm_id: 1,
            remote_comm_id: 2,
            private_data: Vec::new(),
        }),
    }
    .emit()
    .unwrap();
    // Wrong Q_Key: the engine drops it before the CM.
    inject_raw(&mut b, A, &good, 0x1234);
    assert_eq!(b.ep.counters().ud_bad_qkey, 1);
    assert_eq!(b.cm().counters.rx, 0);
    // Another class, a short MAD, an unknown attribute, an RTU for no exchange.
    let mut other = good;
    other[1] = 0x04;
    inject_raw(&mut b, A, &other, GSI_QKEY);
    inject_raw(&mut b, A, &good[..100], GSI_QKEY);
    let mut lap = good;
    lap[16..18].copy_from_slice(&0x0019u16.to_be_bytes());
    inject_raw(&mut b, A, &lap, GSI_QKEY);
    inject_raw(&mut b, A, &good, GSI_QKEY);
    let k = b.cm().counters;
    assert_eq!(
        (
            k.rx,
            k.drop_not_cm,
            k.drop_truncated,
            k.drop_unsupported,
            k.drop_unexpected
        ),
        (4, 1, 1, 1, 1)
    );
    assert!(b.events().is_empty());
    assert!(b.drain(0).is_empty(), "nothing answered");
}

/// Run `s` alone for `ms` milliseconds from `t0` (ns): its timers fire, whatever it sends is
/// lost. Returns its completions.
fn run_alone(s: &mut Side, t0: u64, ms: u64) -> Vec<Completion> {
    let mut got = Vec::new();
    for k in 0..ms {
        let now = t0 + k * 1_000_000;
        if s.ep.poll_timeout().is_some_and(|t| t <= now) {
            s.ep.handle_timeout(now);
        }
        s.drain(now);
        got.extend(std::iter::from_fn(|| s.ep.poll_completion()));
    }
    got
}

fn post_ping(a: &mut Side, wr_id: u64) {
    a.ep.post_send(
        ConnId(1),
        QA,
        SendWr {
            wr_id,
            op: SendOp::Send { imm: None },
            sgl: sge(a.key, 100, 4),
            signaled: true,
            solicited: false,
            fence: false,
        },
    )
    .unwrap();
}

/// rxe's "retry_cnt 7 = forever" (the default) keeps a SEND the peer never acknowledges
/// going as long as the connection lives; once the peer's DREQ has ended the connection, the
/// QP's retries count and the SEND fails with RETRY_EXC_ERR (a peer whose process exited
/// right after its last ACK was lost would otherwise hang its partner forever).
// checks: [ROCE-8]
#[test]
fn after_the_peers_dreq_retries_are_counted_not_forever() {
    // Connected, B's side never answers again.
    let (mut a, _b, _, _) = connected();
    post_ping(&mut a, 1);
    let got = run_alone(&mut a, 10_000_000, 3_000);
    assert!(got.is_empty(), "retried forever while connected: {got:?}");

    // The same, but B disconnects first (its DREQ reaches A; A's DREP and all else is lost).
    let (mut a, mut b, ia, ib) = connected();
    b.cm().disconnect(4, ib, b"").unwrap();
    pump(&mut b, &mut a, 4, &mut keep());
    assert_eq!(a.events(), vec![RoceCmEvent::Disconnected { id: ia }]);
    post_ping(&mut a, 2);
    let got = run_alone(&mut a, 10_000_000, 3_000);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].wr_id, got[0].status), (2, Status::RetryExceeded));
}

/// An id destroyed while connected (rdma_destroy_id without rdma_disconnect) sends a DREQ,
/// as Linux's CM does, so the peer is told and no event reaches the released id.
#[test]
fn releasing_a_connected_id_sends_a_dreq() {
    let (mut a, mut b, ia, ib) = connected();
    b.cm().release(4, ib);
    assert_eq!(pump(&mut b, &mut a, 4, &mut keep()), vec![CmAttr::Dreq]);
    assert_eq!(a.events(), vec![RoceCmEvent::Disconnected { id: ia }]);
    assert_eq!(pump(&mut a, &mut b, 5, &mut keep()), vec![CmAttr::Drep]);
    assert_eq!(b.events(), vec![]);
}

/// A DREQ reaching an id that ended without a DREP of its own to repeat (its own DREQ went
/// unanswered) is answered with a DREP, as Linux answers in time-wait.
#[test]
fn a_dreq_in_time_wait_with_nothing_to_repeat_gets_a_drep() {
    let (mut a, mut b, ia, ib) = connected();
    // A's DREQ and every retry are lost: A gives up (Disconnected) and waits in time-wait.
    a.cm().disconnect(4, ia, b"").unwrap();
    let mut t = 4;
    let mut ev = Vec::new();
    for _ in 0..20 {
        a.drain(t);
        t += rto();
        fire(&mut a, t);
        ev = a.events();
        if !ev.is_empty() {
            break;
        }
    }
    assert_eq!(ev, vec![RoceCmEvent::Disconnected { id: ia }]);
    a.drain(t);
    // Still in time-wait (not forgotten, which would answer anyway).
    t += 1;
    // B's DREQ now gets a DREP, and B is told at once rather than after its own retries.
    b.cm().disconnect(t, ib, b"").unwrap();
    assert_eq!(pump(&mut b, &mut a, t, &mut keep()), vec![CmAttr::Dreq]);
    assert_eq!(pump(&mut a, &mut b, t, &mut keep()), vec![CmAttr::Drep]);
    assert_eq!(b.events(), vec![RoceCmEvent::Disconnected { id: ib }]);
}

/// A process on its way out (the shim's CM lives in it) hastens its unanswered DREQs: the
/// lost one is sent again within the given interval, not a response timeout later, and
/// once the DREP is in nothing is outstanding (the process may go).
#[test]
fn an_exiting_process_resends_its_lost_dreq_within_the_hastened_interval() {
    let (mut a, mut b, ia, ib) = connected();
    b.cm().release(4, ib);
    assert_eq!(
        pump(&mut b, &mut a, 4, &mut drop_first(CmAttr::Dreq, 1)),
        vec![CmAttr::Dreq]
    );
    assert!(a.events().is_empty());
    let t = b.ep.poll_timeout().unwrap();
    assert!(t >= 4 + rto(), "the normal wait is a response timeout");
    const EVERY: u64 = 20_000_000;
    assert_eq!(b.cm().hasten_disconnects(10, EVERY), 1);
    assert_eq!(b.ep.poll_timeout(), Some(10 + EVERY));
    fire(&mut b, 10 + EVERY);
    assert_eq!(
        pump(&mut b, &mut a, 10 + EVERY, &mut keep()),
        vec![CmAttr::Dreq]
    );
    assert_eq!(a.events(), vec![RoceCmEvent::Disconnected { id: ia }]);
    assert_eq!(
        b.cm().hasten_disconnects(11 + EVERY, EVERY),
        1,
        "DREP not in yet"
    );
    assert_eq!(
        pump(&mut a, &mut b, 11 + EVERY, &mut keep()),
        vec![CmAttr::Drep]
    );
    assert_eq!(b.cm().hasten_disconnects(12 + EVERY, EVERY), 0);
    assert_eq!(b.events(), vec![], "released: no event");
}

/// A process on its way out sends the DREPs it answered its peers' DREQs with once more: the
/// first was lost, the repeat ends the peer's DREQ without its response-timeout retry.
#[test]
fn an_exiting_process_repeats_the_drep_it_answered_with() {
    let (mut a, mut b, ia, ib) = connected();
    a.cm().disconnect(4, ia, b"").unwrap();
    assert_eq!(pump(&mut a, &mut b, 4, &mut keep()), vec![CmAttr::Dreq]);
    assert_eq!(b.events(), vec![RoceCmEvent::Disconnected { id: ib }]);
    assert_eq!(
        pump(&mut b, &mut a, 4, &mut drop_first(CmAttr::Drep, 1)),
        vec![CmAttr::Drep]
    );
    assert!(a.events().is_empty());
    assert_eq!(b.cm().repeat_dreps(), 1);
    assert_eq!(pump(&mut b, &mut a, 5, &mut keep()), vec![CmAttr::Drep]);
    assert_eq!(a.events(), vec![RoceCmEvent::Disconnected { id: ia }]);
    assert_eq!(a.cm().hasten_disconnects(6, 1), 0, "nothing outstanding");
    // A's own end (no DREQ answered) has no DREP to repeat.
    assert_eq!(a.cm().repeat_dreps(), 0);
}
