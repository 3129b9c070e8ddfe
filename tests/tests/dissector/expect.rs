//! What the dissector must show for a packet, derived from ferroce's codec, and the
//! comparison of that with what tshark showed.

use super::*;

/// tshark's rendering of a value, normalised to what [`expected`] writes: numbers in decimal,
/// bytes as plain lowercase hex.
pub(super) fn normalise(key: &str, v: &str) -> String {
    if key == "ferroce.payload" || key == "ferroce.cm.private_data" {
        return v.replace(':', "").to_lowercase();
    }
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16)
            .map(|n| n.to_string())
            .unwrap_or_else(|_| v.to_string()),
        None => v.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// codec side

/// The fields a conforming dissector must show for `payload`, as far as the codec exposes them,
/// and the codec's verdict. `groups` names the groups of keys that are fully compared: a key of
/// such a group the dissector shows must be expected, and every expected key must be shown.
pub(super) struct Expected {
    pub(super) fields: Fields,
    pub(super) drop: Option<&'static str>,
    pub(super) groups: BTreeSet<&'static str>,
}

/// Keys of each comparison group: `version`/`opcode` as soon as the codec read them, `base`
/// once the structure checks passed (PacketView), `body` once `Packet::parse` succeeded.
pub(super) fn group_of(key: &str) -> Option<&'static str> {
    Some(match key {
        "ferroce.version" => "version",
        "ferroce.opcode" => "opcode",
        "ferroce.flags"
        | "ferroce.flags.ack_req"
        | "ferroce.flags.last"
        | "ferroce.flags.retx"
        | "ferroce.flags.solicited"
        | "ferroce.flags.backlog"
        | "ferroce.flags.ordered"
        | "ferroce.flags.unreliable"
        | "ferroce.flags.reserved"
        | "ferroce.path"
        | "ferroce.dst_conn"
        | "ferroce.payload"
        | "ferroce.payload_len"
        | "ferroce.crc.status"
        | "ferroce.crc.computed" => "base",
        k if k.starts_with("ferroce.expert.")
            || k.starts_with("ferroce.crc")
            || k == "ferroce.drop"
            || k == "ferroce.payload_end"
            || k == "ferroce.extra"
            || k == "ferroce.undecoded"
            || k == "ferroce.ack.sack"
            || k == "ferroce.ack_multi.reserved"
            || k == "ferroce.ack_multi.block"
            || k == "ferroce.ack_multi.block_reserved"
            || k == "ferroce.ack_multi.words"
            || k == "ferroce.ack_multi.sack"
            || k == "ferroce.nack.reserved"
            || k == "ferroce.open.reserved" =>
        {
            // Not exposed by the codec: reserved bytes, raw bitmaps, an ACK_MULTI block's word
            // count (the codec keeps the bits, not how many words carried them), derived
            // lengths; the verdict and expert info are checked separately.
            return None;
        }
        k if k.starts_with("ferroce.") => "body",
        _ => return None,
    })
}

pub(super) fn error_name(e: &WireError) -> &'static str {
    match e {
        WireError::Truncated => "TRUNCATED",
        WireError::BadVersion(_) => "BAD_VERSION",
        WireError::BadOpcode(_) => "BAD_OPCODE",
        WireError::BadCrc => "BAD_CRC",
        WireError::Malformed(_) => "MALFORMED",
        WireError::BufferTooSmall => unreachable!("parse never reports BufferTooSmall"),
    }
}

pub(super) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(super) fn expected(payload: &[u8]) -> Expected {
    // Under 12 bytes nothing is shown for any opcode (check 1).
    if payload.len() >= wire::BASE_LEN + wire::TRAILER_LEN && cm::is_cm_packet(payload) {
        return expected_cm(payload);
    }
    let mut fields = Fields::new();
    let mut groups = BTreeSet::new();
    let mut put = |k: &str, v: String| fields.entry(k.to_string()).or_default().push(v);
    let result = Packet::parse(payload);
    let drop = result.as_ref().err().map(error_name);
    match PacketView::new_checked(payload) {
        Err(WireError::Truncated) if payload.len() < wire::BASE_LEN + wire::TRAILER_LEN => {}
        Err(WireError::BadVersion(v)) => {
            groups.insert("version");
            put("ferroce.version", v.to_string());
        }
        Err(WireError::BadOpcode(o)) => {
            groups.extend(["version", "opcode"]);
            put("ferroce.version", wire::VERSION.to_string());
            put("ferroce.opcode", o.to_string());
        }
        Err(_) => {
            // Truncated or too long for its opcode: version and opcode were read.
            groups.extend(["version", "opcode"]);
            put("ferroce.version", wire::VERSION.to_string());
            put("ferroce.opcode", payload[1].to_string());
        }
        Ok(view) => {
            groups.extend(["version", "opcode", "base"]);
            let op = view.opcode();
            put("ferroce.version", wire::VERSION.to_string());
            put("ferroce.opcode", (op as u8).to_string());
            let fl = view.flags();
            put_flags(&mut put, fl);
            put("ferroce.path", view.path().to_string());
            put("ferroce.dst_conn", view.dst_conn().to_string());
            if op.has_payload() {
                put("ferroce.payload_len", view.payload().len().to_string());
                if !view.payload().is_empty() {
                    put("ferroce.payload", hex(view.payload()));
                }
            }
            put("ferroce.crc.status", u8::from(view.crc_ok()).to_string());
            let n = payload.len() - wire::TRAILER_LEN;
            put(
                "ferroce.crc.computed",
                wire::crc32(&payload[..n]).to_string(),
            );
        }
    }
    if let Ok(pkt) = &result {
        groups.insert("body");
        body_fields(pkt, &mut put);
    }
    Expected {
        fields,
        drop,
        groups,
    }
}

/// As [`expected`], for a connection-manager packet (spec/cm.md; its own codec).
fn expected_cm(payload: &[u8]) -> Expected {
    let mut fields = Fields::new();
    let mut groups = BTreeSet::from(["version", "opcode"]);
    let mut put = |k: &str, v: String| fields.entry(k.to_string()).or_default().push(v);
    let result = cm::CmMsg::parse(payload);
    let drop = result.as_ref().err().map(|e| match e {
        cm::CmWireError::Truncated => "TRUNCATED",
        cm::CmWireError::BadVersion => "BAD_VERSION",
        cm::CmWireError::BadOpcode => "BAD_OPCODE",
        cm::CmWireError::Malformed(_) => "MALFORMED",
        cm::CmWireError::BadCrc => "BAD_CRC",
    });
    put("ferroce.version", wire::VERSION.to_string());
    put("ferroce.opcode", payload[1].to_string());
    let op = cm::CmOpcode::from_u8(payload[1]).expect("a CM opcode");
    let n = payload.len();
    if n >= wire::BASE_LEN + op.header_len() + wire::TRAILER_LEN {
        // The layout is known (check 4 passed): the base header and the trailer are shown.
        groups.insert("base");
        let fl = payload[2];
        put_flags(&mut put, fl);
        put("ferroce.path", payload[3].to_string());
        let be32 = |at: usize| {
            u32::from_be_bytes([
                payload[at],
                payload[at + 1],
                payload[at + 2],
                payload[at + 3],
            ])
        };
        put("ferroce.dst_conn", be32(4).to_string());
        let crc = wire::crc32(&payload[..n - 4]);
        put(
            "ferroce.crc.status",
            u8::from(crc == be32(n - 4)).to_string(),
        );
        put("ferroce.crc.computed", crc.to_string());
    }
    if let Ok(m) = &result {
        groups.insert("body");
        let mut p = |k: &str, v: u64| put(k, v.to_string());
        p("ferroce.cm.src_comm", m.src_comm.into());
        let q = |p: &mut dyn FnMut(&str, u64), q: &cm::QpInfo| {
            p("ferroce.cm.qpn", q.qpn.into());
            p("ferroce.cm.start_psn", q.start_psn.into());
            p(
                "ferroce.cm.responder_resources",
                q.responder_resources.into(),
            );
            p("ferroce.cm.initiator_depth", q.initiator_depth.into());
            p("ferroce.cm.rnr_retry_count", q.rnr_retry_count.into());
        };
        match &m.body {
            cm::CmBody::Req {
                port_space,
                dst_port,
                src_port,
                qp,
                dst_addr: _,
            } => {
                p("ferroce.cm.port_space", (*port_space).into());
                p("ferroce.cm.dst_port", (*dst_port).into());
                p("ferroce.cm.src_port", (*src_port).into());
                p("ferroce.cm.retry_count", qp.retry_count.into());
                q(&mut p, qp);
            }
            cm::CmBody::Rep { qp } => q(&mut p, qp),
            cm::CmBody::Rej { reason } => p("ferroce.cm.reason", (*reason).into()),
            cm::CmBody::SidrReq {
                port_space,
                dst_port,
                src_port,
                dst_addr: _,
            } => {
                p("ferroce.cm.port_space", (*port_space).into());
                p("ferroce.cm.dst_port", (*dst_port).into());
                p("ferroce.cm.src_port", (*src_port).into());
            }
            cm::CmBody::SidrRep { status, qpn, qkey } => {
                p("ferroce.cm.sidr_status", (*status).into());
                p("ferroce.cm.qpn", (*qpn).into());
                p("ferroce.cm.qkey", (*qkey).into());
            }
            cm::CmBody::Rtu | cm::CmBody::Dreq | cm::CmBody::Drep => {}
        }
        p("ferroce.cm.pd_len", m.private_data.len() as u64);
        if let cm::CmBody::Req { dst_addr, .. } | cm::CmBody::SidrReq { dst_addr, .. } = &m.body {
            put("ferroce.cm.dst_addr", dst_addr.to_string());
        }
        if !m.private_data.is_empty() {
            put("ferroce.cm.private_data", hex(&m.private_data));
        }
    }
    Expected {
        fields,
        drop,
        groups,
    }
}

pub(super) fn body_fields(pkt: &Packet<'_>, put: &mut impl FnMut(&str, String)) {
    let mut p = |k: &str, v: u64| put(k, v.to_string());
    match &pkt.body {
        Body::Data(d) => {
            p("ferroce.psn", d.seq.psn.into());
            p("ferroce.floor", d.seq.floor.into());
            p("ferroce.tsval", d.seq.tsval.into());
            p("ferroce.stream", d.msg.stream.into());
            p("ferroce.msn", d.msg.msn.into());
            p("ferroce.offset", d.msg.offset.into());
            p("ferroce.length", d.msg.length.into());
            match d.op {
                DataOp::Send { rsn } => p("ferroce.rsn", rsn.into()),
                DataOp::SendImm { rsn, imm } => {
                    p("ferroce.rsn", rsn.into());
                    p("ferroce.imm", imm.into());
                }
                DataOp::Write { rkey, raddr } | DataOp::ReadReq { rkey, raddr } => {
                    p("ferroce.rkey", rkey.into());
                    p("ferroce.raddr", raddr);
                }
                DataOp::WriteImm {
                    rkey,
                    raddr,
                    rsn,
                    imm,
                } => {
                    p("ferroce.rkey", rkey.into());
                    p("ferroce.raddr", raddr);
                    p("ferroce.rsn", rsn.into());
                    p("ferroce.imm", imm.into());
                }
                DataOp::ReadResp => {}
                DataOp::FetchAdd { rkey, raddr, add } => {
                    p("ferroce.rkey", rkey.into());
                    p("ferroce.raddr", raddr);
                    p("ferroce.add", add);
                }
                DataOp::CmpSwap {
                    rkey,
                    raddr,
                    compare,
                    swap,
                } => {
                    p("ferroce.rkey", rkey.into());
                    p("ferroce.raddr", raddr);
                    p("ferroce.compare", compare);
                    p("ferroce.swap", swap);
                }
                DataOp::AtomicResp { orig } => p("ferroce.orig", orig),
            }
        }
        Body::Ack(a) => {
            p("ferroce.ack.cum_psn", a.cum_psn.into());
            // The dissector lists the PSNs the bitmap acknowledges: bit i is cum_psn + 1 + i.
            for i in 0..wire::Sack256::BITS {
                if a.sack.get(i) {
                    p(
                        "ferroce.ack.sacked_psn",
                        a.cum_psn.wrapping_add(1 + i).into(),
                    );
                }
            }
            p("ferroce.ack.sack_count", a.sack.count().into());
            p("ferroce.ack.ecn_ce", a.ecn_ce.into());
            p("ferroce.ack.rate_hint_mbps", a.rate_hint_mbps.into());
            p("ferroce.ack.ts_echo", a.ts_echo.into());
            p("ferroce.ack.ack_delay_ns", a.ack_delay_ns.into());
        }
        Body::AckMulti(m) => {
            p("ferroce.ack_multi.rate_hint_mbps", m.rate_hint_mbps.into());
            p("ferroce.ack_multi.count", m.count() as u64);
            // Per block, in wire order: the dissector's blocks are subtrees of one field, which
            // tshark's JSON keeps in order, so each key's values line up block by block (the
            // per-block count pins which block each SACKed PSN belongs to).
            for b in m.blocks() {
                p("ferroce.ack_multi.path", b.path.into());
                p("ferroce.ack_multi.cum_psn", b.cum_psn.into());
                p("ferroce.ack_multi.ecn_ce", b.ecn_ce.into());
                p("ferroce.ack_multi.ts_echo", b.ts_echo.into());
                p("ferroce.ack_multi.ack_delay_ns", b.ack_delay_ns.into());
                for i in (0..wire::Sack256::BITS).filter(|&i| b.sack.get(i)) {
                    p(
                        "ferroce.ack_multi.sacked_psn",
                        b.cum_psn.wrapping_add(1 + i).into(),
                    );
                }
                p("ferroce.ack_multi.sack_count", b.sack.count().into());
            }
        }
        Body::Nack(n) => {
            p("ferroce.nack.psn", n.psn.into());
            p("ferroce.nack.stream", n.stream.into());
            p("ferroce.nack.msn", n.msn.into());
            p("ferroce.nack.reason", (n.reason as u8).into());
            p("ferroce.nack.rnr_delay", n.rnr_delay.into());
            if pkt.path == 255 {
                p("ferroce.nack.late", 1);
            }
        }
        Body::Open(o) | Body::OpenAck(o) => {
            p("ferroce.open.src_conn", o.src_conn.into());
            p("ferroce.open.paths", o.paths.into());
            p("ferroce.open.mtu", o.mtu.into());
            p("ferroce.open.line_rate_mbps", o.line_rate_mbps.into());
        }
        Body::Close(c) | Body::CloseAck(c) => {
            p("ferroce.close.src_conn", c.src_conn.into());
            p("ferroce.close.reason", c.reason.into());
        }
        Body::Probe(pr) | Body::ProbeAck(pr) => {
            p("ferroce.probe.probe_seq", pr.probe_seq.into());
            p("ferroce.probe.ts", pr.ts.into());
            if pkt.opcode() == Opcode::Probe && pkt.flags & wire::flags::BACKLOG != 0 {
                p("ferroce.probe.hint_request", 1);
            }
        }
    }
}

/// Differences between what the dissector showed and what the codec expects; empty = agree.
pub(super) fn compare(got: &Fields, exp: &Expected) -> Vec<String> {
    let mut diffs = Vec::new();
    let keys: BTreeSet<&String> = got.keys().chain(exp.fields.keys()).collect();
    for k in keys {
        let Some(g) = group_of(k) else { continue };
        if !exp.groups.contains(g) {
            continue;
        }
        let shown: Option<Vec<String>> = got
            .get(k)
            .map(|v| v.iter().map(|x| normalise(k, x)).collect());
        if shown.as_ref() != exp.fields.get(k) {
            diffs.push(format!(
                "{k}: dissector {shown:?}, codec {:?}",
                exp.fields.get(k)
            ));
        }
    }
    let verdict = got.get("ferroce.drop").and_then(|v| v.first()).cloned();
    if verdict.as_deref() != exp.drop {
        diffs.push(format!(
            "verdict: dissector {verdict:?}, codec {:?}",
            exp.drop
        ));
    }
    // The verdict carries its expert info; a packet the codec accepts carries no expert error
    // (notes about ignored reserved bits are fine).
    let errors: Vec<&String> = got
        .keys()
        .filter(|k| {
            k.starts_with("ferroce.expert.")
                && !matches!(
                    k.as_str(),
                    "ferroce.expert.ignored" | "ferroce.expert.snaplen"
                )
        })
        .collect();
    match exp.drop {
        Some(d) => {
            let want = format!("ferroce.expert.{}", d.to_lowercase());
            if !got.contains_key(&want) {
                diffs.push(format!("no expert info {want} (has {errors:?})"));
            }
        }
        None if !errors.is_empty() => {
            diffs.push(format!("expert errors {errors:?} on a valid packet"))
        }
        None => {}
    }
    diffs
}

/// The base header's flags byte as the dissector shows it: the byte, one field per flag, and
/// the reserved bits (spec/wire.md §2.3).
fn put_flags(put: &mut impl FnMut(&str, String), fl: u8) {
    put("ferroce.flags", fl.to_string());
    for (k, m) in [
        ("ferroce.flags.ack_req", wire::flags::ACK_REQ),
        ("ferroce.flags.last", wire::flags::LAST),
        ("ferroce.flags.retx", wire::flags::RETX),
        ("ferroce.flags.solicited", wire::flags::SOLICITED),
        ("ferroce.flags.backlog", wire::flags::BACKLOG),
        ("ferroce.flags.ordered", wire::flags::ORDERED),
        ("ferroce.flags.unreliable", wire::flags::UNRELIABLE),
    ] {
        put(k, u8::from(fl & m != 0).to_string());
    }
    put(
        "ferroce.flags.reserved",
        ((fl & !wire::flags::DEFINED) >> 7).to_string(),
    );
}
