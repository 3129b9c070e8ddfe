//! Cases on connections, paths and malformed input: open and close, incarnations, PROBE,
//! hint requests, reflected source ports, datagrams that must be dropped unanswered.

use super::peer::{describe_all, Rx, SPORT};
use super::{check, Case, Env, Fail, Peer, Verdict};
use ferroce_transport::wire::{flags, Body, DataOp, MsgHeader, Opcode, Packet, ProbeRepr};
use ferroce_workload::compliance as profile;

pub fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "open",
            what: "OPEN gets OPEN_ACK; a duplicate OPEN the same one; two connections two ids",
            reqs: &["OPEN-1", "OPEN-2", "CONN-1", "WIRE-9", "WIRE-14", "WIRE-27"],
            run: case_open,
        },
        Case {
            name: "close",
            what: "CLOSE gets CLOSE_ACK reason 0, again for a duplicate; then nothing is answered",
            reqs: &["CLOSE-4", "WIRE-28", "CLOSE-6", "OPEN-7", "OPEN-1"],
            run: case_close,
        },
        Case {
            name: "incarnation",
            what: "a restarted peer (new src_conn) gets a new connection; old and unknown ids get nothing",
            reqs: &["OPEN-1", "CONN-1", "CONN-3", "CLOSE-4", "CLOSE-6"],
            run: case_incarnation,
        },
        Case {
            name: "probe",
            what: "PROBE gets PROBE_ACK echoing probe_seq and ts from its port; a PROBE on path >= N nothing",
            reqs: &["PATH-5", "PATH-8", "CONN-4", "WIRE-14"],
            run: case_probe,
        },
        Case {
            name: "hint",
            what: "a hint request gets an ACK (no PROBE_ACK) echoing its ts; the hint in ACKs",
            reqs: &["COLD-3", "ACK-4", "CC-4", "ACK-1"],
            run: case_hint,
        },
        Case {
            name: "reflection",
            what: "ACK, NACK and PROBE_ACK leave from the source port of what they answer",
            reqs: &["WIRE-31", "PATH-8", "WIRE-30", "ACK-1", "NACK-1"],
            run: case_reflection,
        },
        Case {
            name: "malformed",
            what: "truncated, bad CRC, bad version, unknown opcode: no answer, no effect, target alive",
            reqs: &["VAL-15", "VAL-1", "VAL-2", "VAL-3", "VAL-4", "VAL-6", "VAL-11"],
            run: case_malformed,
        },
    ]
}

fn open_ack_of(r: &Rx) -> Option<(u8, u8, u32, ferroce_transport::wire::OpenRepr)> {
    match r.pkt()? {
        Packet {
            flags,
            path,
            dst_conn,
            body: Body::OpenAck(o),
        } => Some((flags, path, dst_conn, o)),
        _ => None,
    }
}

/// Nothing may come during the quiet window.
fn expect_nothing(p: &mut Peer<'_>, req: &str, after: &str) -> Result<(), Fail> {
    let q = p.quiet();
    check(req, q.is_empty(), format!("no answer to {after}"), || {
        describe_all(&q)
    })
}

/// A WRITE to the profile's write region must be acknowledged (a live connection).
fn write_acked(p: &mut Peer<'_>, req: &str) -> Result<(), Fail> {
    let (psn, _) = p.write(p.env.keys.write, profile::WRITE.addr, &[1, 2, 3, 4])?;
    match p.expect_ack_past(psn) {
        Some(_) => Ok(()),
        None => Err(Fail::new(
            req,
            format!("an ACK past psn {psn} for a valid WRITE"),
            describe_all(&p.quiet()),
        )),
    }
}

// checks: [OPEN-1] [OPEN-2] [CONN-1] [WIRE-9] [WIRE-14] [WIRE-27]
fn case_open(env: &Env) -> Result<Verdict, Fail> {
    let mut p = Peer::new(env);
    let me = p.me;
    let r = p.open_exchange(me)?;
    let (fl, path, dst, o) = open_ack_of(&r).expect("an OPEN_ACK");
    check(
        "OPEN-1",
        dst == me && path == 0,
        format!("OPEN_ACK on path 0 with dst_conn {me:#x}"),
        || r.describe(),
    )?;
    check("CONN-1", o.src_conn != 0, "a nonzero src_conn", || {
        r.describe()
    })?;
    check(
        "WIRE-9",
        o.mtu >= 64 && o.paths >= 1,
        "mtu >= 64 and paths >= 1",
        || r.describe(),
    )?;
    // SOLE is defined on OPEN_ACK (COLD-4): a target with no other connection sets it.
    check(
        "WIRE-14",
        fl & !flags::SOLE == 0,
        "OPEN_ACK flags 0 (SOLE allowed)",
        || format!("{fl:#04x}"),
    )?;
    // The target's crowd: unknown (0), or its connection count (this one at least) on the
    // level grid.
    let crowd = r.raw[13];
    check(
        "WIRE-27",
        crowd == 0 || crowd == ferroce_transport::wire::crowd_level(crowd as usize),
        "OPEN_ACK crowd 0 or a level of the grid",
        || format!("{crowd}"),
    )?;
    // A duplicate OPEN: the same OPEN_ACK, the same id, no second connection.
    p.send(&p.open_packet(me), SPORT)?;
    let r2 = p
        .expect(|r| r.is(Opcode::OpenAck))
        .ok_or_else(|| Fail::new("OPEN-2", "an OPEN_ACK to a duplicate OPEN", "nothing"))?;
    let (_, _, _, o2) = open_ack_of(&r2).expect("an OPEN_ACK");
    check(
        "OPEN-2",
        o2 == o,
        format!("the same OPEN_ACK ({o:?})"),
        || r2.describe(),
    )?;
    p.accept_open_ack(&r)?;
    write_acked(&mut p, "OPEN-1")?;
    // A second connection from the same address: another id.
    let q = Peer::open(env)?;
    check(
        "CONN-1",
        q.them != p.them,
        format!("an id other than {:#x}", p.them),
        || format!("{:#x}", q.them),
    )?;
    Ok(Verdict::Pass(vec![format!(
        "target mtu {} (agreed P {}), paths {}, line rate {} Mbit/s",
        o.mtu, p.p, o.paths, o.line_rate_mbps
    )]))
}

// checks: [CLOSE-4] [WIRE-28] [CLOSE-6] [OPEN-7] [OPEN-1]
fn case_close(env: &Env) -> Result<Verdict, Fail> {
    let mut p = Peer::open(env)?;
    write_acked(&mut p, "OPEN-1")?;
    let close_ack = |p: &mut Peer<'_>| p.expect(|r| r.is(Opcode::CloseAck));
    p.send(&p.close_packet(7), SPORT)?;
    let r =
        close_ack(&mut p).ok_or_else(|| Fail::new("CLOSE-4", "CLOSE_ACK to CLOSE", "nothing"))?;
    let Some(Packet {
        body: Body::CloseAck(c),
        ..
    }) = r.pkt()
    else {
        unreachable!("matched CLOSE_ACK")
    };
    check(
        "WIRE-28",
        c.reason == 0,
        "CLOSE_ACK reason 0 (a CLOSE's reason 7 is not echoed)",
        || r.describe(),
    )?;
    check(
        "CLOSE-4",
        c.src_conn == p.them,
        format!("CLOSE_ACK src_conn {:#x}", p.them),
        || r.describe(),
    )?;
    p.send(&p.close_packet(0), SPORT)?;
    check(
        "CLOSE-4",
        close_ack(&mut p).is_some(),
        "CLOSE_ACK to a duplicate CLOSE",
        || "nothing".into(),
    )?;
    // A reliable packet to the closed connection: dropped, unanswered.
    p.write(env.keys.write, profile::WRITE.addr, &[9; 4])?;
    expect_nothing(&mut p, "CLOSE-6", "a WRITE to a Closed connection")?;
    // The same OPEN again: a duplicate of the closed connection, which it must not reopen.
    p.send(&p.open_packet(p.me), SPORT)?;
    let r = p.expect(|r| r.is(Opcode::OpenAck)).ok_or_else(|| {
        Fail::new(
            "OPEN-7",
            "OPEN_ACK to an OPEN naming a Closed connection",
            "nothing",
        )
    })?;
    let (_, _, _, o) = open_ack_of(&r).expect("an OPEN_ACK");
    check(
        "OPEN-7",
        o.src_conn == p.them,
        format!("the closed connection's id {:#x}", p.them),
        || r.describe(),
    )?;
    p.write(env.keys.write, profile::WRITE.addr, &[9; 4])?;
    expect_nothing(
        &mut p,
        "OPEN-7",
        "a WRITE after a duplicate OPEN of a Closed connection",
    )?;
    Ok(Verdict::Pass(vec![]))
}

// checks: [OPEN-1] [CONN-1] [CONN-3] [CLOSE-4] [CLOSE-6]
fn case_incarnation(env: &Env) -> Result<Verdict, Fail> {
    // The "old incarnation" closes; a restarted peer opens with a new src_conn.
    let mut old = Peer::open(env)?;
    write_acked(&mut old, "OPEN-1")?;
    old.send(&old.close_packet(0), SPORT)?;
    old.expect(|r| r.is(Opcode::CloseAck))
        .ok_or_else(|| Fail::new("CLOSE-4", "CLOSE_ACK to CLOSE", "nothing"))?;
    let mut new = Peer::open(env)?;
    check(
        "OPEN-1",
        new.them != old.them,
        format!("a new connection (an id other than {:#x})", old.them),
        || format!("{:#x}", new.them),
    )?;
    // The new connection starts afresh: PSN 0 and MSN 0 are new on it.
    write_acked(&mut new, "OPEN-1")?;
    // The old incarnation's connection answers nothing any more.
    old.write(env.keys.write, profile::WRITE.addr, &[8; 4])?;
    expect_nothing(
        &mut old,
        "CLOSE-6",
        "a WRITE to the old incarnation's closed connection",
    )?;
    // A packet naming an id the target never gave: dropped, unanswered.
    let mut ghost = Peer::new(env);
    ghost.them = new.them ^ 0x5a5a_0001;
    ghost.write(env.keys.write, profile::WRITE.addr, &[7; 4])?;
    ghost.send(&ghost.probe_packet(0, 0, 1, 99), SPORT)?;
    // Its answers would name `ghost.me`... or the id it was sent with; watch both.
    expect_nothing(&mut ghost, "CONN-3", "packets for an unknown connection id")?;
    expect_nothing(&mut new, "CONN-3", "packets for an unknown connection id")?;
    Ok(Verdict::Pass(vec![]))
}

fn probe_ack_of(r: &Rx) -> Option<(u8, u8, ProbeRepr)> {
    match r.pkt()? {
        Packet {
            flags,
            path,
            body: Body::ProbeAck(x),
            ..
        } => Some((flags, path, x)),
        _ => None,
    }
}

// checks: [PATH-5] [PATH-8] [CONN-4] [WIRE-14]
fn case_probe(env: &Env) -> Result<Verdict, Fail> {
    let mut p = Peer::open(env)?;
    let sport = SPORT + 7;
    p.send(&p.probe_packet(0, 0, 7, 0x1234_5678), sport)?;
    let r = p
        .expect(|r| r.is(Opcode::ProbeAck))
        .ok_or_else(|| Fail::new("PATH-5", "PROBE_ACK to PROBE", describe_all(&p.quiet())))?;
    let (fl, path, x) = probe_ack_of(&r).expect("a PROBE_ACK");
    check(
        "PATH-5",
        path == 0 && x.probe_seq == 7 && x.ts == 0x1234_5678,
        "PROBE_ACK path 0 probe_seq 7 ts 0x12345678",
        || r.describe(),
    )?;
    check(
        "PATH-8",
        r.sport == sport,
        format!("PROBE_ACK from UDP source port {sport}"),
        || r.describe(),
    )?;
    check("WIRE-14", fl == 0, "PROBE_ACK flags 0", || r.describe())?;
    // A PROBE naming a path the connection does not have: dropped, unanswered.
    let bad = p.paths.max(1);
    p.send(&p.probe_packet(0, bad, 8, 77), SPORT)?;
    let what = format!("a PROBE on path {bad} (N = {})", p.paths);
    expect_nothing(&mut p, "CONN-4", &what)?;
    // A second probe: each is answered.
    p.send(&p.probe_packet(0, 0, 9, 0x0bad_cafe), SPORT)?;
    let r = p.expect(|r| r.is(Opcode::ProbeAck));
    check(
        "PATH-5",
        r.as_ref()
            .and_then(probe_ack_of)
            .is_some_and(|(_, _, x)| x.probe_seq == 9 && x.ts == 0x0bad_cafe),
        "PROBE_ACK probe_seq 9",
        || r.map(|r| r.describe()).unwrap_or("nothing".into()),
    )?;
    Ok(Verdict::Pass(vec![]))
}

// checks: [COLD-3] [ACK-4] [CC-4] [ACK-1]
fn case_hint(env: &Env) -> Result<Verdict, Fail> {
    let mut p = Peer::open(env)?;
    let ts = 0x00c0_ffee;
    p.send(&p.probe_packet(flags::BACKLOG, 0, 0, ts), SPORT)?;
    let r = p
        .expect(|r| r.ack().is_some() || r.is(Opcode::ProbeAck))
        .ok_or_else(|| {
            Fail::new(
                "COLD-3",
                "an ACK answering the hint request",
                describe_all(&p.quiet()),
            )
        })?;
    check(
        "COLD-3",
        !r.is(Opcode::ProbeAck),
        "an ACK, not a PROBE_ACK, to a hint request",
        || r.describe(),
    )?;
    let a = r.ack().expect("an ACK");
    check(
        "COLD-3",
        a.path == 0 && a.ts_echo == ts && a.cum_psn == 0,
        format!("ACK path 0 cum_psn 0 ts_echo {ts:#x}"),
        || r.describe(),
    )?;
    let more = p.quiet();
    check(
        "COLD-3",
        more.iter().all(|r| r.ack().is_some()),
        "nothing but ACKs after a hint request",
        || describe_all(&more),
    )?;
    let mut hints = vec![a.hint];
    // Data with BACKLOG: the sender is backlogged; its ACK carries the hint too.
    let psn = p.psn();
    let tsv = p.tsval();
    let msn = p.msn();
    let msg = MsgHeader {
        stream: 1,
        msn,
        offset: 0,
        length: 4,
    };
    let b = p.data_packet(
        flags::LAST | flags::BACKLOG,
        psn,
        0,
        tsv,
        msg,
        DataOp::Write {
            rkey: env.keys.write,
            raddr: profile::WRITE.addr,
        },
        &[5; 4],
    );
    p.send(&b, SPORT)?;
    let r = p
        .expect_ack_past(psn)
        .ok_or_else(|| Fail::new("ACK-1", format!("an ACK of psn {psn} (LAST)"), "nothing"))?;
    let a = r.ack().expect("an ACK");
    check("ACK-4", a.ts_echo == tsv, format!("ts_echo {tsv}"), || {
        r.describe()
    })?;
    hints.push(a.hint);
    if hints.iter().all(|h| *h == 0) {
        return Ok(Verdict::NotApplicable(
            "hints disabled (all 0, CC-1): the hint request's ACK checked, hint values not".into(),
        ));
    }
    // C = line rate x 0.97; a single sender's hint is at most that, and never 0 once given.
    let c = (p.line_rate as f64 * 0.97).floor() as u32;
    check(
        "CC-4",
        hints
            .iter()
            .all(|h| *h >= 1 && (p.line_rate == 0 || *h <= c.max(1))),
        format!(
            "hints in [1, {c}] Mbit/s (0.97 x the line rate {})",
            p.line_rate
        ),
        || format!("{hints:?}"),
    )?;
    Ok(Verdict::Pass(vec![format!("hints {hints:?} Mbit/s")]))
}

// checks: [WIRE-31] [PATH-8] [WIRE-30] [ACK-1] [NACK-1]
fn case_reflection(env: &Env) -> Result<Verdict, Fail> {
    let mut p = Peer::open(env)?;
    let (s1, s2, s3) = (SPORT + 11, SPORT + 12, SPORT + 13);
    // An ACK leaves from the port of the packet it answers.
    let psn = p.psn();
    let ts = p.tsval();
    let msn = p.msn();
    let w = |p: &Peer<'_>, psn, msn, ts, rkey| {
        p.data_packet(
            flags::LAST,
            psn,
            0,
            ts,
            MsgHeader {
                stream: 1,
                msn,
                offset: 0,
                length: 4,
            },
            DataOp::Write {
                rkey,
                raddr: profile::WRITE.addr,
            },
            &[3; 4],
        )
    };
    p.send(&w(&p, psn, msn, ts, env.keys.write), s1)?;
    let r = p
        .expect_ack_past(psn)
        .ok_or_else(|| Fail::new("ACK-1", "an ACK of a LAST packet", "nothing"))?;
    check(
        "WIRE-31",
        r.sport == s1,
        format!("ACK from UDP source port {s1}"),
        || r.describe(),
    )?;
    // The same path from another port (a re-route): the connection is the same (WIRE-30) and
    // the answers follow the new port.
    let psn = p.psn();
    let ts = p.tsval();
    let msn = p.msn();
    p.send(&w(&p, psn, msn, ts, env.keys.write), s2)?;
    let r = p.expect_ack_past(psn).ok_or_else(|| {
        Fail::new(
            "WIRE-30",
            "an ACK of a packet of the same connection from another source port",
            "nothing",
        )
    })?;
    check(
        "WIRE-31",
        r.sport == s2,
        format!("ACK from UDP source port {s2}"),
        || r.describe(),
    )?;
    // A NACK: the refused packet's port.
    let psn = p.psn();
    let ts = p.tsval();
    let msn = p.msn();
    p.send(&w(&p, psn, msn, ts, env.keys.write ^ 0x8000_0001), s3)?;
    let r = p
        .expect(|r| r.nack().is_some())
        .ok_or_else(|| Fail::new("NACK-1", "NACK RemoteAccess for a bad rkey", "nothing"))?;
    check(
        "WIRE-31",
        r.sport == s3,
        format!("NACK from UDP source port {s3}"),
        || r.describe(),
    )?;
    Ok(Verdict::Pass(vec![]))
}

/// A packet with its CRC trailer recomputed (so only the intended fault is in it).
fn seal(mut b: Vec<u8>) -> Vec<u8> {
    let n = b.len() - 4;
    let c = crc32fast::hash(&b[..n]);
    b[n..].copy_from_slice(&c.to_be_bytes());
    b
}

// checks: [VAL-15] [VAL-1] [VAL-2] [VAL-3] [VAL-4] [VAL-6] [VAL-11]
fn case_malformed(env: &Env) -> Result<Verdict, Fail> {
    let mut p = Peer::open(env)?;
    let key = env.keys.write;
    let addr = profile::WRITE.addr + 512;
    let msg = MsgHeader {
        stream: 1,
        msn: 0,
        offset: 0,
        length: 4,
    };
    let write = |p: &Peer<'_>, data: &[u8]| {
        p.data_packet(
            flags::LAST | flags::ACK_REQ,
            0,
            0,
            1,
            msg,
            DataOp::Write {
                rkey: key,
                raddr: addr,
            },
            data,
        )
    };
    let good = write(&p, &[0xee; 4]);
    let mut bad_crc = good.clone();
    let n = bad_crc.len();
    bad_crc[n - 1] ^= 0x01;
    let mut payload_flip = good.clone();
    payload_flip[n - 6] ^= 0x40;
    let mut bad_version = good.clone();
    bad_version[0] = 2;
    let mut bad_opcode = good.clone();
    bad_opcode[1] = 0x7e;
    let nack = p.control(
        0,
        0,
        Body::Nack(ferroce_transport::wire::NackRepr {
            psn: 0,
            stream: 1,
            msn: 0,
            reason: ferroce_transport::wire::NackReason::Sequence,
            rnr_delay: 0,
        }),
    );
    let mut nack_reason = nack.clone();
    nack_reason[20] = 9;
    let cases: Vec<(&str, &str, Vec<u8>)> = vec![
        ("VAL-1", "a 5-byte datagram", good[..5].to_vec()),
        ("VAL-1", "an empty datagram", Vec::new()),
        (
            "VAL-4",
            "a WRITE cut inside its headers (CRC over what is left)",
            seal(good[..30].to_vec()),
        ),
        ("VAL-6", "a WRITE with a wrong CRC trailer", bad_crc),
        ("VAL-6", "a WRITE with a payload bit flipped", payload_flip),
        ("VAL-2", "version 2 (CRC correct)", seal(bad_version)),
        (
            "VAL-3",
            "unknown opcode 0x7e (CRC correct)",
            seal(bad_opcode),
        ),
        (
            "VAL-11",
            "a NACK with reason 9 (CRC correct)",
            seal(nack_reason),
        ),
    ];
    for (req, what, bytes) in &cases {
        p.send(bytes, SPORT)?;
        let q = p.quiet();
        check(
            req,
            q.is_empty(),
            format!("no answer to {what} (VAL-15)"),
            || describe_all(&q),
        )?;
    }
    // Alive: PROBE answered; the corrupted WRITEs (PSN 0) were not recorded: the good one is
    // new and acknowledged, and only it landed.
    p.send(&p.probe_packet(0, 0, 1, 42), SPORT)?;
    check(
        "VAL-15",
        p.expect(|r| r.is(Opcode::ProbeAck)).is_some(),
        "the target alive after malformed input (PROBE_ACK)",
        || "nothing".into(),
    )?;
    p.write(key, addr, &[0x11; 4])?;
    let r = p.expect(|r| r.ack().is_some());
    check(
        "VAL-6",
        r.as_ref()
            .and_then(|r| r.ack())
            .is_some_and(|a| a.cum_psn == 1 && a.sack.is_empty()),
        "ACK cum_psn 1: PSN 0 new (the corrupted copies were dropped, not recorded)",
        || r.map(|r| r.describe()).unwrap_or("nothing".into()),
    )?;
    let back = p.read(env.keys.write, addr, 4)?;
    check(
        "VAL-6",
        back == [0x11; 4],
        "the region holding the valid WRITE's bytes 11111111",
        || format!("{back:02x?}"),
    )?;
    Ok(Verdict::Pass(vec![format!(
        "{} malformed datagrams unanswered",
        cases.len()
    )]))
}
