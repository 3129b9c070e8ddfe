//! Cases on reliable packets: SACK and the exact resend, duplicates and replays, PSN
//! wrap-around, the windows, NACK reasons, remote-access refusals, once-only READ and atomics.

use super::peer::{describe_all, Rx, SPORT};
use super::{check, Case, Env, Fail, Peer, Verdict};
use ferroce_transport::wire::{
    flags, Body, DataOp, MsgHeader, NackReason, Opcode, Packet, Sack256,
};
use ferroce_workload::compliance as profile;

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "sack",
            what: "holes are SACKed; a withheld ACK gets exactly that one packet resent",
            reqs: &["ACK-1", "ACK-4", "RECV-1", "LOSS-1", "LOSS-2"],
            run: case_sack,
        },
        Case {
            name: "duplicate",
            what: "a duplicate PSN is acknowledged at once, echoing its tsval; a replayed message has no effect",
            reqs: &["RECV-3", "ACK-4", "STREAM-1", "PLACE-1"],
            run: case_duplicate,
        },
        Case {
            name: "psn_wrap",
            what: "cum_psn and the SACK bitmap across 2^32 (reached by floors); an insane floor is ignored",
            reqs: &["RECV-2", "RECV-1", "ACK-4"],
            run: case_psn_wrap,
        },
        Case {
            name: "window",
            what: "PSN window (cum_psn + 256 in, + 257 NACK Sequence) and stream window (1024 MSNs)",
            reqs: &["RECV-4", "RECV-5", "STREAM-1"],
            run: case_window,
        },
        Case {
            name: "nack_reasons",
            what: "InvalidRequest, RNR, Sequence and RemoteOperation where the spec gives them",
            reqs: &["NACK-1", "PLACE-1", "PLACE-2", "STREAM-4", "STREAM-5", "WIRE-20", "WIRE-25", "WIRE-26"],
            run: case_nack_reasons,
        },
        Case {
            name: "remote_access",
            what: "bad rkey, out of bounds, missing access right: NACK RemoteAccess, memory untouched",
            reqs: &["SEC-2", "NACK-1", "NACK-2", "RECV-5"],
            run: case_remote_access,
        },
        Case {
            name: "read_once",
            what: "a READ's response is right and a duplicated READ_REQ is not executed again",
            reqs: &["PLACE-4", "RECV-3"],
            run: case_read_once,
        },
        Case {
            name: "atomic_once",
            what: "FETCH_ADD and CMP_SWAP duplicated (same and new PSN) are executed once",
            reqs: &["PLACE-4", "WIRE-21"],
            run: case_atomic_once,
        },
    ]
}

fn write_msg(msn: u32, length: u32) -> MsgHeader {
    MsgHeader {
        stream: 1,
        msn,
        offset: 0,
        length,
    }
}

/// Send a one-packet WRITE with these numbers (LAST set).
fn send_write(
    p: &Peer<'_>,
    psn: u32,
    floor: u32,
    ts: u32,
    msn: u32,
    raddr: u64,
    data: &[u8],
) -> Result<(), Fail> {
    let b = p.data_packet(
        flags::LAST,
        psn,
        floor,
        ts,
        write_msg(msn, data.len() as u32),
        DataOp::Write {
            rkey: p.env.keys.write,
            raddr,
        },
        data,
    );
    p.send(&b, SPORT)
}

/// The next ACK, required by `req`.
fn ack(p: &mut Peer<'_>, req: &str, after: &str) -> Result<(Rx, super::peer::AckInfo), Fail> {
    let r = p
        .expect(|r| r.ack().is_some() || r.nack().is_some())
        .ok_or_else(|| Fail::new(req, format!("an ACK after {after}"), "nothing"))?;
    match r.ack() {
        Some(a) => Ok((r, a)),
        None => Err(Fail::new(
            req,
            format!("an ACK after {after}"),
            r.describe(),
        )),
    }
}

fn want_ack(
    p: &mut Peer<'_>,
    req: &str,
    after: &str,
    cum: u32,
    bits: &[u32],
) -> Result<(Rx, super::peer::AckInfo), Fail> {
    let (r, a) = ack(p, req, after)?;
    check(
        req,
        a.cum_psn == cum && a.bits() == bits,
        format!("ACK cum_psn={cum} sack={bits:?} after {after}"),
        || r.describe(),
    )?;
    Ok((r, a))
}

/// The next NACK, which must have `reason`, `psn` and `msn`.
fn want_nack(
    p: &mut Peer<'_>,
    req: &str,
    what: &str,
    reason: NackReason,
    psn: u32,
    msn: u32,
) -> Result<Rx, Fail> {
    let r = p
        .expect(|r| r.ack().is_some() || r.nack().is_some())
        .ok_or_else(|| Fail::new(req, format!("NACK {reason:?} for {what}"), "nothing"))?;
    let ok = r
        .nack()
        .is_some_and(|n| n.reason == reason && n.psn == psn && n.msn == msn);
    check(
        req,
        ok,
        format!("NACK {reason:?} psn={psn} msn={msn} for {what}"),
        || r.describe(),
    )?;
    let n = r.nack().expect("a NACK");
    check(
        "WIRE-25",
        reason == NackReason::ReceiverNotReady || n.rnr_delay == 0,
        "rnr_delay 0 in a NACK other than RNR",
        || r.describe(),
    )?;
    check(
        "WIRE-26",
        r.raw[22] == 0 && r.raw[23] == 0,
        "NACK reserved bytes 0",
        || format!("{:02x?}", &r.raw[22..24]),
    )?;
    Ok(r)
}

fn nothing_more(p: &mut Peer<'_>, req: &str, after: &str) -> Result<(), Fail> {
    let q = p.quiet();
    check(
        req,
        q.is_empty(),
        format!("nothing more after {after}"),
        || describe_all(&q),
    )
}

// checks: [ACK-1] [ACK-4] [RECV-1] [LOSS-1] [LOSS-2]
fn case_sack(env: &Env) -> Result<Verdict, Fail> {
    let mut p = Peer::open(env)?;
    let a = profile::WRITE.addr;
    // As receiver: PSNs 0, 2, 3 (1 missing), then 1.
    send_write(&p, 0, 0, 10, 0, a, &[1; 4])?;
    want_ack(&mut p, "ACK-1", "psn 0", 1, &[])?;
    send_write(&p, 2, 0, 12, 2, a + 8, &[3; 4])?;
    want_ack(&mut p, "ACK-1", "psn 2 (psn 1 missing)", 1, &[0])?;
    send_write(&p, 3, 0, 13, 3, a + 12, &[4; 4])?;
    let (r, x) = want_ack(&mut p, "ACK-4", "psn 3", 1, &[0, 1])?;
    check("ACK-4", x.ts_echo == 13, "ts_echo 13", || r.describe())?;
    send_write(&p, 1, 0, 11, 1, a + 4, &[2; 4])?;
    want_ack(&mut p, "RECV-1", "psn 1 filling the hole", 4, &[])?;
    nothing_more(&mut p, "ACK-1", "the hole was filled")?;
    p.next_psn = 4;
    p.next_msn = 4;
    // As sender: a READ of 4 chunks. The suite acknowledges every packet but those of the
    // second chunk (offset P); once a later PSN is acknowledged that chunk is lost (LOSS-1)
    // and must be resent at once under a new PSN (LOSS-2), and nothing else once the target
    // has shown it processed the SACK (by that resend). Copies of other chunks before it are
    // tail-loss probes the suite may have been too slow to prevent (their timers are µs).
    let len = (4 * p.p).min(profile::READ.len as u32);
    let chunks = len.div_ceil(p.p);
    if chunks < 2 {
        return Ok(Verdict::NotApplicable(format!(
            "P = {}: a READ of one chunk",
            p.p
        )));
    }
    let withheld = p.p;
    let msn = p.msn();
    p.auto = false;
    p.request(
        msn,
        len,
        DataOp::ReadReq {
            rkey: env.keys.read,
            raddr: profile::READ.addr,
        },
        &[],
    )?;
    let is_resp = |r: &Rx| {
        r.data()
            .is_some_and(|d| matches!(d.3, DataOp::ReadResp) && d.2.msn == msn)
    };
    let mut acked: Vec<u32> = Vec::new();
    let mut held: Vec<u32> = Vec::new(); // PSNs of the withheld chunk not acknowledged
    let mut offsets = std::collections::BTreeSet::new();
    let mut early_copies = 0;
    let resend = loop {
        let Some(r) = p.expect(|r| is_resp(r) || r.is(Opcode::Probe)) else {
            return Err(Fail::new(
                "LOSS-2",
                format!("the chunk at offset {withheld} resent once later PSNs were acknowledged"),
                format!("chunks at offsets {offsets:?}, then nothing"),
            ));
        };
        if let Some(Packet {
            flags: fl,
            path,
            body: Body::Probe(x),
            ..
        }) = r.pkt()
        {
            // Hint requests and PROBEs, answered by hand (auto is off).
            let b = if fl & flags::BACKLOG != 0 {
                p.state_ack(x.ts)
            } else {
                p.control(0, path, Body::ProbeAck(x))
            };
            p.send(&b, SPORT)?;
            continue;
        }
        let (fl, seq, m, _, payload) = r.data().expect("a READ_RESP");
        let want: Vec<u8> = (m.offset as u64..m.offset as u64 + payload.len() as u64)
            .map(profile::read_byte)
            .collect();
        check(
            "PLACE-1",
            payload == want,
            format!("READ_RESP bytes of the read region at offset {}", m.offset),
            || r.describe(),
        )?;
        if m.offset == withheld {
            // A copy of the withheld chunk after a later PSN was acknowledged is the resend.
            let later = acked
                .iter()
                .any(|a| (a.wrapping_sub(*held.first().unwrap_or(&seq.psn)) as i32) > 0);
            if later && !held.is_empty() && fl & flags::RETX != 0 && !held.contains(&seq.psn) {
                break (r, seq.psn);
            }
            held.push(seq.psn);
            continue;
        }
        if !offsets.insert(m.offset) {
            early_copies += 1;
        }
        acked.push(seq.psn);
        let ack = p.record(seq);
        p.send(&ack, SPORT)?;
    };
    let (r, psn) = resend;
    check(
        "LOSS-2",
        r.data().is_some_and(|d| d.0 & flags::RETX != 0),
        "the resend marked RETX",
        || r.describe(),
    )?;
    // Everything acknowledged now (the resend's floor settles the withheld PSNs).
    let ack = p.record(r.data().expect("a READ_RESP").1);
    p.send(&ack, SPORT)?;
    let mut everything = p.rx_cum_above_max();
    everything = everything.max(psn.wrapping_add(1));
    p.send(&p.ack_packet(everything, Sack256::default(), 1), SPORT)?;
    p.auto = true;
    let q: Vec<Rx> = p.quiet().into_iter().filter(|r| is_resp(r)).collect();
    let other: Vec<&Rx> = q
        .iter()
        .filter(|r| r.data().is_some_and(|d| d.2.offset != withheld))
        .collect();
    check(
        "LOSS-1",
        other.is_empty(),
        format!("no chunk but offset {withheld} resent after the SACK was processed"),
        || describe_all(&q),
    )?;
    Ok(Verdict::Pass(vec![format!(
        "{chunks} chunks of {} B; offset {withheld} withheld ({} copies) and resent as psn {psn}; {early_copies} early copies (TLPs)",
        p.p,
        held.len()
    )]))
}

// checks: [RECV-3] [ACK-4] [STREAM-1] [PLACE-1]
fn case_duplicate(env: &Env) -> Result<Verdict, Fail> {
    let mut p = Peer::open(env)?;
    let a = profile::WRITE.addr + 64;
    send_write(&p, 0, 0, 500, 0, a, b"AAAA")?;
    let (r, x) = want_ack(&mut p, "ACK-1", "a WRITE with LAST", 1, &[])?;
    check("ACK-4", x.ts_echo == 500, "ts_echo 500", || r.describe())?;
    // The same PSN again: a duplicate, acknowledged at once with its own tsval.
    send_write(&p, 0, 0, 600, 0, a, b"AAAA")?;
    let (r, x) = want_ack(&mut p, "RECV-3", "a duplicate PSN", 1, &[])?;
    check(
        "ACK-4",
        x.ts_echo == 600,
        "ts_echo 600 (the duplicate's tsval)",
        || r.describe(),
    )?;
    // Message 1 overwrites; a replay of message 0 under a new PSN is acknowledged and ignored.
    send_write(&p, 1, 0, 601, 1, a, b"BBBB")?;
    want_ack(&mut p, "ACK-1", "message 1", 2, &[])?;
    send_write(&p, 2, 0, 602, 0, a, b"AAAA")?;
    want_ack(
        &mut p,
        "STREAM-1",
        "a replayed completed message under a new PSN",
        3,
        &[],
    )?;
    p.next_psn = 3;
    p.next_msn = 2;
    let back = p.read(env.keys.write, a, 4)?;
    check(
        "STREAM-1",
        &back == b"BBBB",
        "BBBB in memory: the replay of message 0 had no effect",
        || String::from_utf8_lossy(&back).into_owned(),
    )?;
    nothing_more(&mut p, "RECV-3", "the replay")?;
    Ok(Verdict::Pass(vec![]))
}

// checks: [RECV-2] [RECV-1] [ACK-4]
fn case_psn_wrap(env: &Env) -> Result<Verdict, Fail> {
    let mut p = Peer::open(env)?;
    let a = profile::WRITE.addr + 128;
    let mut msn = 0;
    let mut w = |p: &mut Peer<'_>,
                 psn: u32,
                 floor: u32,
                 what: &str,
                 cum: u32,
                 bits: &[u32]|
     -> Result<(), Fail> {
        send_write(p, psn, floor, 1000 + msn, msn, a, &msn.to_be_bytes())?;
        msn += 1;
        want_ack(p, "RECV-2", what, cum, bits).map(|_| ())
    };
    w(&mut p, 0, 0, "psn 0", 1, &[])?;
    // A floor after psn cannot come from a conforming sender: ignored, psn processed as usual.
    w(
        &mut p,
        1,
        1000,
        "psn 1 with floor 1000 (after psn: ignored)",
        2,
        &[],
    )?;
    // Floors jump the window toward the wrap (each within 2^31 of cum_psn, psn = floor).
    w(
        &mut p,
        0x7fff_ff00,
        0x7fff_ff00,
        "psn = floor = 0x7fffff00",
        0x7fff_ff01,
        &[],
    )?;
    w(
        &mut p,
        0xffff_fe00,
        0xffff_fe00,
        "psn = floor = 0xfffffe00",
        0xffff_fe01,
        &[],
    )?;
    w(
        &mut p,
        0xffff_fffe,
        0xffff_fffe,
        "psn = floor = 0xfffffffe",
        0xffff_ffff,
        &[],
    )?;
    // Across the wrap: PSN 0 ahead of the hole at 0xffffffff, then the hole filled.
    w(
        &mut p,
        0,
        0xffff_ffff,
        "psn 0 (0xffffffff missing)",
        0xffff_ffff,
        &[0],
    )?;
    w(&mut p, 1, 0xffff_ffff, "psn 1", 0xffff_ffff, &[0, 1])?;
    w(
        &mut p,
        0xffff_ffff,
        0xffff_ffff,
        "psn 0xffffffff filling the hole",
        2,
        &[],
    )?;
    w(&mut p, 2, 2, "psn 2", 3, &[])?;
    p.next_psn = 3;
    p.next_msn = msn;
    nothing_more(&mut p, "RECV-1", "the wrap")?;
    Ok(Verdict::Pass(vec!["wrapped past 2^32 on path 0".into()]))
}

// checks: [RECV-4] [RECV-5] [STREAM-1]
fn case_window(env: &Env) -> Result<Verdict, Fail> {
    let mut p = Peer::open(env)?;
    let a = profile::WRITE.addr + 256;
    send_write(&p, 257, 0, 77, 1, a, &[1; 4])?;
    want_nack(
        &mut p,
        "RECV-4",
        "psn 257 with cum_psn 0 (out of window)",
        NackReason::Sequence,
        257,
        1,
    )?;
    nothing_more(&mut p, "RECV-5", "an out-of-window packet (no ACK)")?;
    send_write(&p, 256, 0, 78, 1, a, &[1; 4])?;
    let (r, x) = want_ack(
        &mut p,
        "RECV-4",
        "psn 256 (the window's last PSN)",
        0,
        &[255],
    )?;
    check(
        "RECV-5",
        x.ts_echo == 78,
        "ts_echo 78 (never the out-of-window packet's 77)",
        || r.describe(),
    )?;
    send_write(&p, 0, 0, 79, 0, a, &[0; 4])?;
    want_ack(&mut p, "RECV-4", "psn 0", 1, &[254])?;
    // MSNs 0 and 1 are complete: base 2; 2 + 1024 is beyond the stream window, 2 + 1023 in.
    send_write(&p, 1, 0, 80, 2 + 1024, a, &[2; 4])?;
    want_nack(
        &mut p,
        "STREAM-1",
        "msn 1026 (base 2, window 1024)",
        NackReason::Sequence,
        1,
        2 + 1024,
    )?;
    send_write(&p, 1, 0, 81, 2 + 1023, a, &[2; 4])?;
    want_ack(
        &mut p,
        "STREAM-1",
        "msn 1025 (the stream window's last)",
        2,
        &[253],
    )?;
    nothing_more(&mut p, "RECV-5", "the window checks")?;
    Ok(Verdict::Pass(vec![]))
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
    send(&p, 0, write_msg(0, 4), DataOp::Send { rsn: 0 }, &[1; 4])?;
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
    q.send(&b, SPORT)?;
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

// checks: [SEC-2] [NACK-1] [NACK-2] [RECV-5]
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

// checks: [PLACE-4] [RECV-3]
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
                matches!(d.3, DataOp::ReadResp) && d.4.len() as u32 == len && d.0 & flags::RETX == 0
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

// checks: [PLACE-4] [WIRE-21]
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
        .filter(|r| r.data().is_some_and(|d| d.0 & flags::RETX == 0))
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
        .filter(|r| r.data().is_some_and(|d| d.0 & flags::RETX == 0))
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
