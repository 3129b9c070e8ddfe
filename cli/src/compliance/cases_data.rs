//! Cases on reliable packets: SACK and the exact resend, duplicates and replays, PSN
//! wrap-around, the windows; and the helpers the cases on requests share.

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
            reqs: &["ACK-1", "ACK-4", "RECV-1", "LOSS-1", "LOSS-2", "PLACE-1"],
            run: case_sack,
        },
        Case {
            name: "duplicate",
            what: "a duplicate PSN is acknowledged at once, echoing its tsval; a replayed message has no effect",
            reqs: &["RECV-3", "ACK-4", "STREAM-1", "PLACE-1", "ACK-1"],
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
    ]
}

pub(super) fn write_msg(msn: u32, length: u32) -> MsgHeader {
    MsgHeader {
        stream: 1,
        msn,
        offset: 0,
        length,
    }
}

/// Send a one-packet WRITE with these numbers (LAST set).
pub(super) fn send_write(
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
pub(super) fn ack(
    p: &mut Peer<'_>,
    req: &str,
    after: &str,
) -> Result<(Rx, super::peer::AckInfo), Fail> {
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

pub(super) fn want_ack(
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
pub(super) fn want_nack(
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

/// Send `b` (a SEND or WRITE_IMM) and leave its answer pending for the caller, sending it
/// again while the answer is NACK RNR: a target may post its receives a moment after the
/// connection opened (they are the application's, STREAM-4), and a requester retries RNR.
pub(super) fn send_past_rnr(p: &mut Peer<'_>, b: &[u8]) -> Result<(), Fail> {
    let t0 = std::time::Instant::now();
    loop {
        p.send(b, SPORT)?;
        let Some(r) = p.expect(|r| r.ack().is_some() || r.nack().is_some()) else {
            return Ok(());
        };
        let rnr = r
            .nack()
            .filter(|n| n.reason == NackReason::ReceiverNotReady);
        match rnr {
            Some(n) if t0.elapsed() < p.env.answer => {
                let us = (n.rnr_delay as u64 * 10).max(1000);
                std::thread::sleep(std::time::Duration::from_micros(us));
            }
            _ => {
                p.unget(r);
                return Ok(());
            }
        }
    }
}

pub(super) fn nothing_more(p: &mut Peer<'_>, req: &str, after: &str) -> Result<(), Fail> {
    let q = p.quiet();
    check(
        req,
        q.is_empty(),
        format!("nothing more after {after}"),
        || describe_all(&q),
    )
}

// checks: [ACK-1] [ACK-4] [RECV-1] [LOSS-1] [LOSS-2] [PLACE-1]
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
    let q: Vec<Rx> = p.quiet_all().into_iter().filter(|r| is_resp(r)).collect();
    let other: Vec<&Rx> = q
        .iter()
        .filter(|r| r.data().is_some_and(|d| d.2.offset != withheld))
        .collect();
    check(
        "LOSS-1",
        other.is_empty(),
        format!(
            "no chunk but offset {withheld} resent after the SACK was processed \
             (a target RTO below the suite's answer time resends too: spec/compliance.md)"
        ),
        || describe_all(&q),
    )?;
    Ok(Verdict::Pass(vec![format!(
        "{chunks} chunks of {} B; offset {withheld} withheld ({} copies) and resent as psn {psn}; {early_copies} early copies (TLPs)",
        p.p,
        held.len()
    )]))
}

// checks: [RECV-3] [ACK-4] [STREAM-1] [PLACE-1] [ACK-1]
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
