//! The receiver's ACK policy in a bulk transfer (spec/transport.md §6.2): a LAST packet with
//! BACKLOG is acknowledged by the count, not by an ACK of its own, so 3-packet WRITEs cost one
//! ACK per 4 packets, not one per message; the flight's final packet (no BACKLOG) is still
//! acknowledged at once, so the last WR completes without waiting for `ack_delay`.

mod common;

use common::*;
use ferroce_transport::mem::access;
use ferroce_transport::wire::{flags, Packet};
use ferroce_transport::*;

const WRS: u64 = 40;
const CHUNKS: u32 = 3;

/// Posts `WRS` WRITEs of `CHUNKS` packets each and delivers A's packets to B one at a time,
/// taking B's output after each (as a wire that spaces packets would). Returns the number of
/// data packets, B's ACK datagrams, and the time from the final data packet's arrival to the
/// last completion.
fn bulk() -> (u64, u64, u64) {
    let mut p = Pair::new();
    let len = CHUNKS * P;
    let lkey =
        p.ma.register(1, 0x1000, (WRS as u32 * len) as usize, access::LOCAL_WRITE);
    let rkey = p.mb.register(
        1,
        DST,
        (WRS as u32 * len) as usize,
        access::LOCAL_WRITE | access::REMOTE_WRITE,
    );
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
    let acks0 = p.b.connections().next().unwrap().counters().acks_sent;
    let (mut data, mut done, mut final_at) = (0u64, 0u64, None);
    for _ in 0..20_000 {
        for e in [&mut p.a, &mut p.b] {
            if e.poll_timeout().is_some_and(|t| t <= p.now) {
                e.handle_timeout(p.now);
            }
        }
        while let Some(t) = p.a.poll_transmit(p.now, &mut p.buf, &mut p.ma) {
            let d = p.buf[..t.len].to_vec();
            let pkt = Packet::parse(&d).unwrap();
            if pkt.opcode().is_sequenced() {
                data += 1;
                if pkt.flags & flags::BACKLOG == 0 {
                    final_at = Some(p.now);
                }
            }
            p.b.handle_datagram(p.now, A, t.src_port, false, &d, &mut p.mb);
            while let Some(t) = p.b.poll_transmit(p.now, &mut p.buf, &mut p.mb) {
                let d = p.buf[..t.len].to_vec();
                p.a.handle_datagram(p.now, B, t.src_port, false, &d, &mut p.ma);
            }
        }
        while let Some(c) = p.a.poll_completion() {
            assert_eq!(c.status, Status::Success);
            done += 1;
        }
        if done == WRS {
            let acks = p.b.connections().next().unwrap().counters().acks_sent - acks0;
            return (data, acks, p.now - final_at.expect("no final packet"));
        }
        p.now += 100;
    }
    panic!("only {done} of {WRS} WRITEs completed");
}

// checks: [ACK-1] [ACK-8]
#[test]
fn a_bulk_transfer_costs_an_ack_per_four_packets_not_one_per_message() {
    let (data, acks, tail) = bulk();
    assert_eq!(data, WRS * CHUNKS as u64, "resends in a lossless run");
    // One per `ack_every` = 4 packets, plus the flight's last; an ACK per LAST would be 40.
    assert!(
        acks <= data / 4 + 2,
        "{acks} ACKs for {data} data packets (one per message would be {WRS})"
    );
    // The final packet carries no BACKLOG and is acknowledged at once: the last WR completes
    // in the step its packet arrived, not `ack_delay` (5 µs) later.
    assert_eq!(tail, 0, "the last WR waited {tail} ns for its ACK");
}
