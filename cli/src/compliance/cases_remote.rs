//! Cases on what requests may do: every NACK reason the suite can provoke, remote-access
//! refusals, READ and atomics executed once only.

use super::cases_data::{nothing_more, send_past_rnr, send_write, want_ack, want_nack, write_msg};
use super::peer::{describe_all, Rx, SPORT};
use super::{check, Case, Env, Fail, Peer, Verdict};
use ferroce_transport::wire::{flags, DataOp, MsgHeader, NackReason};
use ferroce_workload::compliance as profile;

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "nack_reasons",
            what: "InvalidRequest (4 causes), RNR and RemoteOperation as the spec gives them",
            reqs: &[
                "NACK-1", "PLACE-1", "PLACE-2", "STREAM-4", "STREAM-5", "WIRE-20", "WIRE-25",
                "WIRE-26",
            ],
            run: case_nack_reasons,
        },
        Case {
            name: "remote_access",
            what:
                "bad rkey, out of bounds, missing access right: NACK RemoteAccess, memory untouched",
            reqs: &["SEC-2", "NACK-1", "RECV-5"],
            run: case_remote_access,
        },
        Case {
            name: "read_once",
            what: "a READ's response is right and a duplicated READ_REQ is not executed again",
            reqs: &["PLACE-4", "RECV-3", "PLACE-1"],
            run: case_read_once,
        },
        Case {
            name: "atomic_once",
            what: "FETCH_ADD and CMP_SWAP duplicated (same and new PSN) are executed once",
            reqs: &["PLACE-4", "WIRE-21", "PLACE-1"],
            run: case_atomic_once,
        },
    ]
}

// checks: [NACK-1] [PLACE-1] [PLACE-2] [STREAM-4] [STREAM-5] [WIRE-20] [WIRE-25] [WIRE-26]
fn case_nack_reasons(env: &Env) -> Result<Verdict, Fail> {
    let mut p = Peer::open(env)?;
    let keys = env.keys;
    let send = |p: &Peer<'_>, psn: u32, msg: MsgHeader, op: DataOp, payload: &[u8]| {
        let b = p.data_packet(flags::LAST, psn, 0, 5, msg, op, payload);
        p.send(&b, SPORT)
    };
    // Unknown stream: InvalidRequest, the NACK echoing the stream id.
    send(
        &p,
        0,
        MsgHeader {
            stream: 77,
            ..write_msg(0, 4)
        },
        DataOp::Write {
            rkey: keys.write,
            raddr: profile::WRITE.addr,
        },
        &[1; 4],
    )?;
    let r = want_nack(
        &mut p,
        "PLACE-1",
        "a WRITE on unknown stream 77",
        NackReason::InvalidRequest,
        0,
        0,
    )?;
    check(
        "NACK-1",
        r.nack().is_some_and(|n| n.stream == 77),
        "the NACK echoing stream 77",
        || r.describe(),
    )?;
    // Misaligned atomic.
    send(
        &p,
        0,
        write_msg(0, 8),
        DataOp::FetchAdd {
            rkey: keys.atomic,
            raddr: profile::ATOMIC.addr + 4,
            add: 1,
        },
        &[],
    )?;
    want_nack(
        &mut p,
        "WIRE-20",
        "FETCH_ADD at an address not a multiple of 8",
        NackReason::InvalidRequest,
        0,
        0,
    )?;
    // An offset that is not a multiple of P.
    let msg = MsgHeader {
        offset: 1,
        length: 5,
        ..write_msg(0, 5)
    };
    send(
        &p,
        0,
        msg,
        DataOp::Write {
            rkey: keys.write,
            raddr: profile::WRITE.addr + 1,
        },
        &[1; 4],
    )?;
    want_nack(
        &mut p,
        "PLACE-2",
        "a WRITE chunk at offset 1",
        NackReason::InvalidRequest,
        0,
        0,
    )?;
    // A receive far beyond those posted: RNR.
    send(&p, 0, write_msg(0, 4), DataOp::Send { rsn: 1000 }, &[1; 4])?;
    let r = want_nack(
        &mut p,
        "STREAM-4",
        "a SEND naming rsn 1000 (8 receives posted)",
        NackReason::ReceiverNotReady,
        0,
        0,
    )?;
    let rnr_delay = r.nack().map(|n| n.rnr_delay).unwrap_or(0);
    // A receive already consumed: InvalidRequest, not RNR.
    let b = p.data_packet(
        flags::LAST,
        0,
        0,
        5,
        write_msg(0, 4),
        DataOp::Send { rsn: 0 },
        &[1; 4],
    );
    send_past_rnr(&mut p, &b)?;
    want_ack(&mut p, "STREAM-4", "a SEND into receive 0", 1, &[])?;
    send(&p, 1, write_msg(1, 4), DataOp::Send { rsn: 0 }, &[1; 4])?;
    want_nack(
        &mut p,
        "STREAM-5",
        "a SEND naming consumed receive 0",
        NackReason::InvalidRequest,
        1,
        1,
    )?;
    nothing_more(&mut p, "NACK-1", "the refusals")?;
    // A SEND longer than the receive: InvalidRequest and a responder error, after which every
    // later message of the stream gets RemoteOperation (a fresh connection: its stream ends
    // in Error).
    let mut q = Peer::open(env)?;
    let len = profile::RECV_LEN * 2;
    let chunk = q.p.min(len);
    let b = q.data_packet(
        0,
        0,
        0,
        5,
        write_msg(0, len),
        DataOp::Send { rsn: 0 },
        &vec![7; chunk as usize],
    );
    send_past_rnr(&mut q, &b)?;
    want_nack(
        &mut q,
        "PLACE-1",
        &format!("a {len} B SEND into a {} B receive", profile::RECV_LEN),
        NackReason::InvalidRequest,
        0,
        0,
    )?;
    let b = q.data_packet(
        flags::LAST,
        1,
        0,
        6,
        write_msg(1, 4),
        DataOp::Send { rsn: 1 },
        &[1; 4],
    );
    q.send(&b, SPORT)?;
    want_nack(
        &mut q,
        "PLACE-1",
        "a SEND after the stream's responder error",
        NackReason::RemoteOperation,
        1,
        1,
    )?;
    Ok(Verdict::Pass(vec![format!(
        "RNR delay {rnr_delay} x 10 us"
    )]))
}

// checks: [SEC-2] [NACK-1] [RECV-5]
fn case_remote_access(env: &Env) -> Result<Verdict, Fail> {
    let mut p = Peer::open(env)?;
    let k = env.keys;
    let (w, rd, at) = (profile::WRITE, profile::READ, profile::ATOMIC);
    let bad = k.write ^ k.read ^ k.atomic ^ k.recv ^ 0x5a5a_5a5a;
    let data = [0xab; 8];
    // (what, op, length, payload): each refused with RemoteAccess, all under PSN 0 / MSN 0,
    // which refusals leave unrecorded.
    let tries: Vec<(String, DataOp, u32, &[u8])> = vec![
        (
            format!("a WRITE under unknown key {bad:#x}"),
            DataOp::Write {
                rkey: bad,
                raddr: w.addr,
            },
            8,
            &data,
        ),
        (
            "a WRITE running past its region's end".into(),
            DataOp::Write {
                rkey: k.write,
                raddr: w.addr + w.len - 4,
            },
            8,
            &data,
        ),
        (
            "a WRITE below its region".into(),
            DataOp::Write {
                rkey: k.write,
                raddr: w.addr - 8,
            },
            8,
            &data,
        ),
        (
            "a WRITE to a REMOTE_READ-only region".into(),
            DataOp::Write {
                rkey: k.read,
                raddr: rd.addr,
            },
            8,
            &data,
        ),
        (
            "a WRITE under a key with no remote access (LOCAL_WRITE only)".into(),
            DataOp::Write {
                rkey: k.recv,
                raddr: profile::RECV.addr,
            },
            8,
            &data,
        ),
        (
            "a READ of a REMOTE_ATOMIC-only region".into(),
            DataOp::ReadReq {
                rkey: k.atomic,
                raddr: at.addr,
            },
            8,
            &[],
        ),
        (
            "a READ past its region's end".into(),
            DataOp::ReadReq {
                rkey: k.read,
                raddr: rd.addr + rd.len - 4,
            },
            8,
            &[],
        ),
        (
            "a FETCH_ADD on a region without REMOTE_ATOMIC".into(),
            DataOp::FetchAdd {
                rkey: k.write,
                raddr: w.addr,
                add: 1,
            },
            8,
            &[],
        ),
        (
            "a CMP_SWAP past its region's end".into(),
            DataOp::CmpSwap {
                rkey: k.atomic,
                raddr: at.addr + at.len,
                compare: 0,
                swap: 1,
            },
            8,
            &[],
        ),
    ];
    for (what, op, len, payload) in &tries {
        let b = p.data_packet(flags::LAST, 0, 0, 9, write_msg(0, *len), *op, payload);
        p.send(&b, SPORT)?;
        want_nack(&mut p, "SEC-2", what, NackReason::RemoteAccess, 0, 0)?;
    }
    nothing_more(&mut p, "NACK-1", "the refusals (one NACK each, no ACK)")?;
    // Refused packets are not recorded: PSN 0 is still new.
    send_write(&p, 0, 0, 10, 0, w.addr + 1024, &[1; 4])?;
    want_ack(
        &mut p,
        "RECV-5",
        "a valid WRITE under the refused packets' PSN 0",
        1,
        &[],
    )?;
    p.next_psn = 1;
    p.next_msn = 1;
    // Nothing was written: the READ region keeps its pattern, the write region's last 8 bytes
    // are untouched by the WRITE that ran past them.
    let back = p.read(k.read, rd.addr, 16)?;
    let want: Vec<u8> = (0..16).map(profile::read_byte).collect();
    check(
        "SEC-2",
        back == want,
        format!("the read region's pattern {want:02x?}"),
        || format!("{back:02x?}"),
    )?;
    let tail = p.read(k.write, w.addr + w.len - 4, 4)?;
    check(
        "SEC-2",
        tail != [0xab; 4],
        "no byte of a refused WRITE in memory",
        || format!("{tail:02x?}"),
    )?;
    Ok(Verdict::Pass(vec![format!("{} refusals", tries.len())]))
}

// checks: [PLACE-4] [RECV-3] [PLACE-1]
fn case_read_once(env: &Env) -> Result<Verdict, Fail> {
    let mut p = Peer::open(env)?;
    let rd = profile::READ;
    let (off, len) = (100u64, 64u32);
    let back = p.read(env.keys.read, rd.addr + off, len)?;
    let want: Vec<u8> = (off..off + len as u64).map(profile::read_byte).collect();
    check(
        "PLACE-1",
        back == want,
        "the read region's bytes 100..164",
        || format!("{back:02x?}"),
    )?;
    // The same READ_REQ again (same PSN: a duplicate), and under a new PSN (a completed message).
    let msg = write_msg(0, len);
    let op = DataOp::ReadReq {
        rkey: env.keys.read,
        raddr: rd.addr + off,
    };
    p.send(&p.data_packet(flags::LAST, 0, 0, 50, msg, op, &[]), SPORT)?;
    p.send(&p.data_packet(flags::LAST, 1, 0, 51, msg, op, &[]), SPORT)?;
    let got = p.quiet();
    let again: Vec<&Rx> = got
        .iter()
        .filter(|r| {
            r.data().is_some_and(|d| {
                matches!(d.3, DataOp::ReadResp)
                    && d.4.len() as u32 == len
                    && d.0 & flags::RETX == 0
                    && !r.dup
            })
        })
        .collect();
    check(
        "PLACE-4",
        again.is_empty(),
        "no new READ_RESP for a duplicated READ_REQ",
        || describe_all(&got),
    )?;
    let acked = got.iter().filter_map(|r| r.ack()).any(|a| a.cum_psn == 2);
    check(
        "RECV-3",
        acked,
        "the duplicates acknowledged (cum_psn 2)",
        || describe_all(&got),
    )?;
    Ok(Verdict::Pass(vec![]))
}

// checks: [PLACE-4] [WIRE-21] [PLACE-1]
fn case_atomic_once(env: &Env) -> Result<Verdict, Fail> {
    let mut p = Peer::open(env)?;
    // A target slot of its own (the connection id picks one of the eight).
    let addr = profile::ATOMIC.addr + 8 * (p.me as u64 % 8);
    let rkey = env.keys.atomic;
    let fa = |add| DataOp::FetchAdd {
        rkey,
        raddr: addr,
        add,
    };
    let v0 = atomic(&mut p, 0, 0, fa(5))?;
    // Duplicates: the same PSN, then message 0 under a new PSN. Acknowledged, not executed.
    let b = p.data_packet(flags::LAST, 0, 0, 90, write_msg(0, 8), fa(5), &[]);
    p.send(&b, SPORT)?;
    let b = p.data_packet(flags::LAST, 1, 0, 91, write_msg(0, 8), fa(5), &[]);
    p.send(&b, SPORT)?;
    let got = p.quiet();
    let resp = got
        .iter()
        .filter(|r| !r.dup && r.data().is_some_and(|d| d.0 & flags::RETX == 0))
        .count();
    check(
        "PLACE-4",
        resp == 0,
        "no new ATOMIC_RESP for duplicated FETCH_ADDs",
        || describe_all(&got),
    )?;
    let v1 = atomic(&mut p, 2, 1, fa(0))?;
    check(
        "PLACE-4",
        v1 == v0.wrapping_add(5),
        format!(
            "{} after one FETCH_ADD of 5 to {v0} (the duplicates not executed)",
            v0.wrapping_add(5)
        ),
        || v1.to_string(),
    )?;
    let cs = DataOp::CmpSwap {
        rkey,
        raddr: addr,
        compare: v1,
        swap: v1.wrapping_add(100),
    };
    let v2 = atomic(&mut p, 3, 2, cs)?;
    check(
        "PLACE-4",
        v2 == v1,
        format!("CMP_SWAP's original value {v1}"),
        || v2.to_string(),
    )?;
    // CMP_SWAP again under a new PSN: its compare no longer matches; were it executed again it
    // would still answer, and the value would be unchanged either way, so check the answer.
    p.send(
        &p.data_packet(flags::LAST, 4, 0, 95, write_msg(2, 8), cs, &[]),
        SPORT,
    )?;
    let got = p.quiet();
    let resp = got
        .iter()
        .filter(|r| !r.dup && r.data().is_some_and(|d| d.0 & flags::RETX == 0))
        .count();
    check(
        "PLACE-4",
        resp == 0,
        "no new ATOMIC_RESP for a duplicated CMP_SWAP",
        || describe_all(&got),
    )?;
    let v3 = atomic(&mut p, 5, 3, fa(0))?;
    check(
        "PLACE-4",
        v3 == v1.wrapping_add(100),
        format!("{} after the CMP_SWAP", v1.wrapping_add(100)),
        || v3.to_string(),
    )?;
    Ok(Verdict::Pass(vec![]))
}

/// An atomic with the numbers given; its ATOMIC_RESP's original value.
fn atomic(p: &mut Peer<'_>, psn: u32, msn: u32, op: DataOp) -> Result<u64, Fail> {
    p.send(
        &p.data_packet(flags::LAST, psn, 0, 70 + psn, write_msg(msn, 8), op, &[]),
        SPORT,
    )?;
    let r = p
        .expect(|r| {
            r.nack().is_some()
                || r.data()
                    .is_some_and(|d| d.2.msn == msn && matches!(d.3, DataOp::AtomicResp { .. }))
        })
        .ok_or_else(|| Fail::new("PLACE-1", format!("ATOMIC_RESP for msn {msn}"), "nothing"))?;
    match r.data() {
        Some((_, _, m, DataOp::AtomicResp { orig }, _)) => {
            check(
                "WIRE-21",
                m.offset == 0 && m.length == 8 && m.stream == 1,
                "ATOMIC_RESP stream 1 offset 0 length 8",
                || r.describe(),
            )?;
            Ok(orig)
        }
        _ => Err(Fail::new(
            "PLACE-1",
            format!("ATOMIC_RESP for msn {msn}"),
            r.describe(),
        )),
    }
}
