//! Every packet of a message must be exactly its chunk of that message (spec/transport.md §7
//! step 2): a crafted peer sends chunks that are too long, too short, or that name another
//! key, base address or receive than the message's other chunks. Each is refused with NACK
//! InvalidRequest, places nothing, and the message never completes on the strength of it.
//! On the requester side, a READ response chunk of the wrong size fails the READ with
//! BadResponse instead of completing it with a hole.

mod common;

use common::*;
use ferroce_transport::mem::access;
use ferroce_transport::wire::{flags, DataOp, NackReason};
use ferroce_transport::*;

/// B's target region (at `DST`, its key `p.rkey()`), 256 bytes of 0xee, and one
/// receive posted for WRITE_IMM / SEND.
fn setup() -> Pair {
    let mut p = Pair::new();
    let k = p.mb.register(
        1,
        DST,
        256,
        access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ,
    );
    assert_eq!(k, p.rkey());
    p.mb.region_mut(k).unwrap().data.fill(0xee);
    let rk = p.mb.register(1, 0x20_000, 512, access::LOCAL_WRITE);
    let conn = ConnId(p.to_b);
    p.b.post_recv(
        conn,
        1,
        RecvWr {
            wr_id: 5,
            sgl: [Sge {
                lkey: rk,
                addr: 0x20_000,
                len: 512,
            }]
            .into_iter()
            .collect(),
        },
    )
    .unwrap();
    p
}

fn write_imm(rkey: u32, raddr: u64) -> DataOp {
    DataOp::WriteImm {
        rkey,
        raddr,
        rsn: 0,
        imm: 9,
    }
}

// checks: [PLACE-2]
#[test]
fn a_chunk_longer_than_its_share_is_refused_and_places_nothing() {
    let mut p = setup();
    let rkey = p.rkey();
    // Chunk 0 of a 128-byte message carrying all 128 bytes (its share is 64).
    let n = p.send_b(
        flags::LAST,
        msg(0, 0, 2 * P),
        write_imm(rkey, DST),
        &[1; 2 * P as usize],
    );
    assert_eq!(n, vec![NackReason::InvalidRequest]);
    assert!(p.dst().iter().all(|&b| b == 0xee), "nothing placed");
    assert!(
        p.b.poll_completion().is_none(),
        "the message did not complete"
    );
}

// checks: [PLACE-2]
#[test]
fn a_short_non_final_chunk_is_refused_and_the_message_does_not_complete() {
    let mut p = setup();
    let rkey = p.rkey();
    // Chunk 0 with 10 bytes, then a proper chunk 1: without the rule chunk 0 would count as
    // placed and the WRITE_IMM would complete with 54 bytes never written.
    let n = p.send_b(0, msg(0, 0, 2 * P), write_imm(rkey, DST), &[1; 10]);
    assert_eq!(n, vec![NackReason::InvalidRequest]);
    let n = p.send_b(
        flags::LAST,
        msg(0, P, 2 * P),
        write_imm(rkey, DST + P as u64),
        &[2; P as usize],
    );
    assert!(n.is_empty());
    assert!(p.dst()[..P as usize].iter().all(|&b| b == 0xee));
    assert!(
        p.b.poll_completion().is_none(),
        "completed without its data"
    );
}

// checks: [PLACE-2]
#[test]
fn chunks_naming_another_key_base_or_receive_are_refused() {
    // A second region the attacker would like to reach through the first's message.
    for case in ["rkey", "base", "rsn", "opcode"] {
        let mut p = setup();
        let rkey = p.rkey();
        let other = p.mb.register(1, 0x50_000, 256, access::REMOTE_WRITE);
        let n = p.send_b(0, msg(0, 0, 2 * P), write_imm(rkey, DST), &[1; P as usize]);
        assert!(n.is_empty(), "{case}: chunk 0 accepted");
        let op = match case {
            "rkey" => write_imm(other, 0x50_000 + P as u64),
            "base" => write_imm(rkey, DST + 3 * P as u64),
            "rsn" => DataOp::WriteImm {
                rkey,
                raddr: DST + P as u64,
                rsn: 1,
                imm: 9,
            },
            _ => DataOp::Write {
                rkey,
                raddr: DST + P as u64,
            },
        };
        let n = p.send_b(flags::LAST, msg(0, P, 2 * P), op, &[2; P as usize]);
        assert_eq!(n, vec![NackReason::InvalidRequest], "{case}");
        assert!(
            p.mb.region(other).unwrap().data.iter().all(|&b| b == 0),
            "{case}: the other region was written"
        );
        assert!(
            p.dst()[P as usize..].iter().all(|&b| b == 0xee),
            "{case}: chunk 1 placed"
        );
        assert!(p.b.poll_completion().is_none(), "{case}: completed");
    }
}

// checks: [PLACE-1]
#[test]
fn a_zero_length_write_with_key_zero_succeeds() {
    let mut p = setup();
    p.a.post_send(
        p.a_conn,
        1,
        SendWr {
            wr_id: 3,
            op: SendOp::Write {
                rkey: 0,
                raddr: 0,
                imm: None,
            },
            sgl: SgList::new(),
            signaled: true,
            solicited: false,
            fence: false,
        },
    )
    .unwrap();
    for _ in 0..50 {
        p.exchange();
    }
    let c = p.a.poll_completion().expect("completion");
    assert_eq!((c.wr_id, c.status), (3, Status::Success));
}

// checks: [PLACE-3]
#[test]
fn a_read_response_chunk_of_the_wrong_size_fails_the_read() {
    for short in [true, false] {
        let mut p = setup();
        let lkey = p.ma.register(1, 0x1000, 256, access::LOCAL_WRITE);
        p.a.post_send(
            p.a_conn,
            1,
            SendWr {
                wr_id: 4,
                op: SendOp::Read {
                    rkey: 0x777,
                    raddr: 0x5000,
                },
                sgl: [Sge {
                    lkey,
                    addr: 0x1000,
                    len: 2 * P,
                }]
                .into_iter()
                .collect(),
                signaled: true,
                solicited: false,
                fence: false,
            },
        )
        .unwrap();
        // A sends its READ_REQ (dropped here: B is played by the test).
        while p.a.poll_transmit(p.now, &mut p.buf, &mut p.ma).is_some() {}
        // The crafted responder answers chunk 0 with 10 bytes (or 2 chunks' worth) and
        // chunk 1 properly.
        let len0 = if short { 10 } else { 2 * P as usize };
        let to_a = p.to_a;
        for (off, len, fl) in [(0, len0, 0), (P, P as usize, flags::LAST)] {
            let d = p.data(
                to_a,
                fl,
                msg(0, off, 2 * P),
                DataOp::ReadResp,
                &vec![7; len],
            );
            p.a.handle_datagram(p.now, B, 40_000, false, &d, &mut p.ma);
        }
        let c = p.a.poll_completion().expect("completion");
        assert_eq!(
            (c.wr_id, c.status),
            (4, Status::BadResponse),
            "short chunk: {short}"
        );
    }
}
