//! ACK_MULTI (spec/wire.md §2.10.1, transport.md §5.3 and §6.2): a burst sprayed over many
//! paths is acknowledged by one datagram, the sender completes everything from it, and a
//! block naming a path the connection does not have is counted and skipped, not fatal; a path
//! acknowledged early as a rider is acknowledged once more, so a lost ACK_MULTI does not
//! silence it.

mod common;

use common::*;
use ferroce_transport::mem::access;
use ferroce_transport::wire::{
    flags, AckBlock, AckMultiWriter, Body, DataOp, DataRepr, MsgHeader, Opcode, Packet, SeqHeader,
};
use ferroce_transport::*;

const PATHS: u8 = 16;

fn write_wr(id: u64, lkey: u32, rkey: u32, slot: u64) -> SendWr {
    SendWr {
        wr_id: id,
        op: SendOp::Write {
            rkey,
            raddr: DST + slot * P as u64,
            imm: None,
        },
        sgl: [Sge {
            lkey,
            addr: 0x1000 + slot * P as u64,
            len: P,
        }]
        .into_iter()
        .collect(),
        signaled: true,
        solicited: false,
        fence: false,
    }
}

/// A and B with `PATHS` paths, warmed up (hint, RTT samples) by 2·PATHS single-packet
/// WRITEs; returns the pair and the keys.
fn warm_pair(f: impl Fn(&mut EndpointConfig)) -> (Pair, u32, u32) {
    let mut p = Pair::with(|c| {
        c.conn.paths = PATHS;
        f(c);
    });
    let lkey =
        p.ma.register(1, 0x1000, 64 * P as usize, access::LOCAL_WRITE);
    let rkey = p.mb.register(
        1,
        DST,
        64 * P as usize,
        access::LOCAL_WRITE | access::REMOTE_WRITE,
    );
    for i in 0..2 * PATHS as u64 {
        p.a.post_send(p.a_conn, 1, write_wr(i, lkey, rkey, i))
            .unwrap();
    }
    let mut done = 0;
    for _ in 0..10_000 {
        p.exchange();
        while p.a.poll_completion().is_some() {
            done += 1;
        }
        if done == 2 * PATHS as usize {
            break;
        }
    }
    assert_eq!(done, 2 * PATHS as usize, "warm-up did not complete");
    // Let every delayed ACK and timer settle.
    for _ in 0..50 {
        p.exchange();
    }
    (p, lkey, rkey)
}

/// A's next `n` data packets, collected (not delivered) as A's pacing releases them.
fn burst(p: &mut Pair, n: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for _ in 0..100_000 {
        if p.a.poll_timeout().is_some_and(|t| t <= p.now) {
            p.a.handle_timeout(p.now);
        }
        while let Some(t) = p.a.poll_transmit(p.now, &mut p.buf, &mut p.ma) {
            let d = p.buf[..t.len].to_vec();
            let op = Packet::parse(&d).unwrap().opcode();
            assert!(op.is_sequenced(), "unexpected {op:?} from A");
            out.push(d);
        }
        if out.len() >= n {
            return out;
        }
        p.now += 10;
    }
    panic!("A released only {} of {n} packets", out.len());
}

/// Deliver `pkts` to B at one instant, then take everything B sends.
fn deliver_burst(p: &mut Pair, pkts: &[Vec<u8>]) -> Vec<Vec<u8>> {
    for d in pkts {
        p.b.handle_datagram(p.now, A, 50_000, false, d, &mut p.mb);
    }
    let mut out = Vec::new();
    while let Some(t) = p.b.poll_transmit(p.now, &mut p.buf, &mut p.mb) {
        out.push(p.buf[..t.len].to_vec());
    }
    out
}

/// The burst's ACK datagrams, the paths it used, the pair, and A's and B's counters from
/// before the burst (the warm-up's ACKs may be ACK_MULTIs too).
fn run_burst(ack_multi: bool) -> (Vec<Vec<u8>>, usize, Pair, ConnCounters, ConnCounters) {
    let (mut p, lkey, rkey) = warm_pair(|c| c.conn.ack_multi = ack_multi);
    let a0 = p.a.connection(p.a_conn).unwrap().counters();
    let b0 = p.b.connections().next().unwrap().counters();
    let base = 2 * PATHS as u64;
    for i in 0..PATHS as u64 {
        p.a.post_send(p.a_conn, 1, write_wr(base + i, lkey, rkey, base + i))
            .unwrap();
    }
    let pkts = burst(&mut p, PATHS as usize);
    let paths: std::collections::BTreeSet<u8> = pkts
        .iter()
        .map(|d| Packet::parse(d).unwrap().path)
        .collect();
    let acks = deliver_burst(&mut p, &pkts);
    for d in &acks {
        p.a.handle_datagram(p.now, B, 50_000, false, d, &mut p.ma);
    }
    let mut done = 0;
    while let Some(c) = p.a.poll_completion() {
        assert_eq!(c.status, Status::Success);
        done += 1;
    }
    assert_eq!(done, PATHS as usize, "the burst's ACKs did not complete it");
    (acks, paths.len(), p, a0, b0)
}

// checks: [ACK-3] [ACK-5]
#[test]
fn a_burst_over_many_paths_is_acknowledged_by_one_datagram() {
    let (acks, paths, p, a0, b0) = run_burst(true);
    // Spraying puts the burst's packets on (nearly) as many paths as there are packets.
    assert!(
        paths >= PATHS as usize / 2,
        "the burst used only {paths} path(s)"
    );
    assert_eq!(acks.len(), 1, "one ACK datagram for the whole burst");
    let pkt = Packet::parse(&acks[0]).unwrap();
    let Body::AckMulti(m) = pkt.body else {
        panic!("not an ACK_MULTI: {:?}", pkt.opcode());
    };
    assert_eq!(m.count(), paths, "one block per path of the burst");
    let mut seen: Vec<u8> = m.blocks().map(|b| b.path).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), paths);
    // In-order paths carry no SACK words: 20 bytes each.
    assert_eq!(acks[0].len(), 20 + 20 * paths);
    let a = p.a.connection(p.a_conn).unwrap().counters();
    assert_eq!(a.ack_multi_received - a0.ack_multi_received, 1);
    let b = p.b.connections().next().unwrap().counters();
    assert_eq!(b.ack_multi_sent - b0.ack_multi_sent, 1);
    assert_eq!(b.ack_blocks_sent - b0.ack_blocks_sent, paths as u64);
}

// checks: [ACK-5]
#[test]
fn without_ack_multi_every_path_gets_its_own_ack() {
    let (acks, paths, ..) = run_burst(false);
    assert_eq!(acks.len(), paths);
    for d in &acks {
        assert_eq!(Packet::parse(d).unwrap().opcode(), Opcode::Ack);
    }
}

// checks: [ACK-7]
#[test]
fn a_block_for_an_unknown_path_is_counted_and_the_others_are_processed() {
    let (mut p, lkey, rkey) = warm_pair(|_| {});
    let base = 2 * PATHS as u64;
    p.a.post_send(p.a_conn, 1, write_wr(base, lkey, rkey, base))
        .unwrap();
    let pkts = burst(&mut p, 1);
    let first = Packet::parse(&pkts[0]).unwrap();
    let Body::Data(d) = first.body else {
        unreachable!()
    };
    // B's answer, crafted: a block for path 200 (the connection has 16), then the real one.
    let mut buf = [0u8; 256];
    let mut w = AckMultiWriter::new(&mut buf, p.to_a, 0).unwrap();
    assert!(w.push(&AckBlock {
        path: 200,
        cum_psn: 7,
        ..AckBlock::default()
    }));
    assert!(w.push(&AckBlock {
        path: first.path,
        cum_psn: d.seq.psn.wrapping_add(1),
        ts_echo: d.seq.tsval,
        ..AckBlock::default()
    }));
    let n = w.finish().unwrap();
    let before = p.a.connection(p.a_conn).unwrap().counters().rx_bad_path;
    p.a.handle_datagram(p.now, B, 50_000, false, &buf[..n], &mut p.ma);
    let c =
        p.a.poll_completion()
            .expect("the good block completes the WRITE");
    assert_eq!((c.wr_id, c.status), (base, Status::Success));
    let after = p.a.connection(p.a_conn).unwrap().counters().rx_bad_path;
    assert_eq!(after, before + 1);
}

/// A crafted single-chunk-or-more WRITE packet from A's side on `path`.
fn write_on(p: &mut Pair, path: u8, psn: u32, fl: u8, msg: MsgHeader, rkey: u32) -> Vec<u8> {
    let pkt = Packet {
        flags: fl,
        path,
        dst_conn: p.to_b,
        body: Body::Data(DataRepr {
            seq: SeqHeader {
                psn,
                floor: 0,
                tsval: 1,
            },
            msg,
            op: DataOp::Write {
                rkey,
                raddr: DST + msg.offset as u64,
            },
            payload: &[7; P as usize],
        }),
    };
    let mut buf = vec![0; 512];
    let n = pkt.emit(&mut buf).unwrap();
    buf.truncate(n);
    buf
}

/// The paths B acknowledges in everything it sends now.
fn acked_paths(p: &mut Pair) -> Vec<u8> {
    let mut paths = Vec::new();
    while let Some(t) = p.b.poll_transmit(p.now, &mut p.buf, &mut p.mb) {
        match Packet::parse(&p.buf[..t.len]).unwrap().body {
            Body::Ack(_) => paths.push(Packet::parse(&p.buf[..t.len]).unwrap().path),
            Body::AckMulti(m) => paths.extend(m.blocks().map(|b| b.path)),
            _ => {}
        }
    }
    paths.sort();
    paths
}

#[test]
fn a_rider_is_acknowledged_again_if_its_ack_multi_is_lost() {
    let mut p = Pair::with(|c| c.conn.paths = 4);
    let rkey =
        p.mb.register(1, DST, 4096, access::LOCAL_WRITE | access::REMOTE_WRITE);
    // Message 0: three chunks, two of them arrive in order on path 1 (no ACK due yet: fewer
    // than ack_every, not LAST), then message 1's only chunk on path 2 (LAST: due).
    let m0 = |off| msg(0, off, 3 * P);
    for (psn, off) in [(0, 0), (1, P)] {
        let d = write_on(&mut p, 1, psn, 0, m0(off), rkey);
        p.b.handle_datagram(p.now, A, 50_000, false, &d, &mut p.mb);
    }
    let d = write_on(&mut p, 2, 0, flags::LAST, msg(1, 0, P), rkey);
    p.b.handle_datagram(p.now, A, 50_000, false, &d, &mut p.mb);
    // One ACK_MULTI: path 2 (due) and path 1 riding. It is lost.
    assert_eq!(acked_paths(&mut p), vec![1, 2]);
    // No new packet on path 1: its packets are acknowledged again when its delayed-ACK
    // timer fires (without the repeat nothing would: the ride cleared its pending state).
    let delay = EndpointConfig::default().conn.ack_delay_ns;
    p.now += delay;
    if p.b.poll_timeout().is_some_and(|t| t <= p.now) {
        p.b.handle_timeout(p.now);
    }
    assert_eq!(
        acked_paths(&mut p),
        vec![1],
        "the rider was not acknowledged again"
    );
    // And only once: nothing is due any more.
    p.now += 10 * delay;
    if p.b.poll_timeout().is_some_and(|t| t <= p.now) {
        p.b.handle_timeout(p.now);
    }
    assert!(acked_paths(&mut p).is_empty());
}

/// A bulk transfer over `PATHS` paths with the packets spaced as on a 100 Gbit/s wire at
/// 4 KiB payloads (one per 340 ns): each path sees a packet only every 5.4 µs, longer than
/// `ack_delay`, so no path ever reaches `ack_every` and every ACK is a delayed one. Those ACKs
/// must take every other path with a packet unacknowledged along as riders: one ACK datagram
/// per delayed-ACK period for all paths, not one per path (when riders needed two packets:
/// 0.95 ACK datagrams per data packet here, and 191 spurious resends of 1,280 packets).
// checks: [ACK-3]
#[test]
fn spaced_packets_over_many_paths_share_their_delayed_acks() {
    const WRS: u64 = 96;
    const CHUNKS: u32 = 16;
    const GAP_NS: u64 = 340;
    let mut p = Pair::with(|c| c.conn.paths = PATHS);
    let len = CHUNKS * P;
    let bytes = (WRS as u32 * len) as usize;
    let lkey = p.ma.register(1, 0x1000, bytes, access::LOCAL_WRITE);
    let rkey =
        p.mb.register(1, DST, bytes, access::LOCAL_WRITE | access::REMOTE_WRITE);
    for i in 0..WRS {
        let off = i * len as u64;
        let op = SendOp::Write {
            rkey,
            raddr: DST + off,
            imm: None,
        };
        p.a.post_send(p.a_conn, 1, wr(i, op, sge(lkey, 0x1000 + off, len)))
            .unwrap();
    }
    // Counted after the cold start and the first flight (steady state).
    const SKIP: u64 = 256;
    let (mut data, mut done) = (0u64, 0u64);
    let mut acks0 = None;
    let mut paths = std::collections::BTreeSet::new();
    for _ in 0..200_000 {
        for e in [&mut p.a, &mut p.b] {
            if e.poll_timeout().is_some_and(|t| t <= p.now) {
                e.handle_timeout(p.now);
            }
        }
        // One packet of A's per wire slot; A's control packets go along unspaced.
        while let Some(t) = p.a.poll_transmit(p.now, &mut p.buf, &mut p.ma) {
            let d = p.buf[..t.len].to_vec();
            let pkt = Packet::parse(&d).unwrap();
            let is_data = pkt.opcode().is_sequenced();
            if is_data {
                data += 1;
                if data == SKIP {
                    acks0 = Some(p.b.connections().next().unwrap().counters().acks_sent);
                }
                if data > SKIP {
                    paths.insert(pkt.path);
                }
            }
            p.b.handle_datagram(p.now, A, t.src_port, false, &d, &mut p.mb);
            if is_data {
                break;
            }
        }
        while let Some(t) = p.b.poll_transmit(p.now, &mut p.buf, &mut p.mb) {
            let d = p.buf[..t.len].to_vec();
            p.a.handle_datagram(p.now, B, t.src_port, false, &d, &mut p.ma);
        }
        while let Some(c) = p.a.poll_completion() {
            assert_eq!(c.status, Status::Success);
            done += 1;
        }
        if done == WRS {
            break;
        }
        p.now += GAP_NS;
    }
    assert_eq!(done, WRS, "only {done} of {WRS} WRITEs completed");
    let acks = p.b.connections().next().unwrap().counters().acks_sent - acks0.unwrap();
    let per_pkt = acks as f64 / (data - SKIP) as f64;
    eprintln!(
        "{} data packets over {} paths, {acks} ACK datagrams: {per_pkt:.3} per packet",
        data - SKIP,
        paths.len()
    );
    assert_eq!(paths.len(), PATHS as usize, "the transfer did not spray");
    // Nothing is lost on this wire: a resend is spurious (an ACK came too late).
    assert_eq!(data, WRS * CHUNKS as u64, "packets were resent");
    assert!(
        per_pkt <= 0.25,
        "{per_pkt:.3} ACK datagrams per data packet"
    );
}
