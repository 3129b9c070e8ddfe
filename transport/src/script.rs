//! The behavioural vectors' script language (spec/vectors/behaviour/README.md): the lines,
//! the packets a `send:` line describes, a received packet as the fields an `expect:` line
//! names, and whether they match. Shared by the transport's own replay (against an
//! `Endpoint` in memory) and `ferroce compliance --vectors` (against a target over UDP).

use crate::wire::{
    AckRepr, Body, CloseRepr, DataOp, DataRepr, MsgHeader, NackReason, OpenRepr, Packet, ProbeRepr,
    Sack256, SeqHeader,
};
use std::collections::BTreeMap;

/// The UDP source port of a `send:` without `sport=`.
pub const PEER_PORT: u16 = 50_000;

/// A packet description: opcode and `key=value` fields.
pub type Fields = (String, BTreeMap<String, String>);

/// What the symbols of a script stand for in one replay (`CONN`, `R0`, ...).
pub trait Values {
    /// The value of field `k` written `v`.
    fn value(&self, k: &str, v: &str) -> Result<u64, String>;
    /// The endpoint's id of the connection (the default `dst_conn`), 0 before its OPEN_ACK.
    fn conn(&self) -> u32;
}

/// One line of a script, with its (1-based) line number.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Name(String),
    Ignore(Vec<String>),
    /// `region:` fields (`len`, `access`, `addr`).
    Region(BTreeMap<String, String>),
    Recv(u64),
    Send(String),
    Wait(u64),
    /// `expect:`; None is `expect: nothing`.
    Expect(Option<Fields>),
}

/// A parsed script: its steps and the requirements its `# checks:` lines name.
#[derive(Clone, Debug, PartialEq)]
pub struct Script {
    pub name: String,
    pub checks: Vec<String>,
    pub steps: Vec<(usize, Step)>,
}

/// Parse a script; `Err` names the line.
pub fn parse(text: &str) -> Result<Script, String> {
    let mut s = Script {
        name: String::new(),
        checks: Vec::new(),
        steps: Vec::new(),
    };
    for (n, raw) in text.lines().enumerate() {
        if let Some(c) = raw.trim().strip_prefix("# checks:") {
            for id in c.split(|ch: char| ch == '[' || ch == ']' || ch.is_whitespace()) {
                if !id.is_empty() && !s.checks.iter().any(|x| x == id) {
                    s.checks.push(id.to_string());
                }
            }
        }
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = |e: String| format!("line {}: {e}", n + 1);
        let (key, rest) = line
            .split_once(':')
            .ok_or_else(|| at("want key: value".into()))?;
        let rest = rest.trim();
        let step = match key {
            "name" => {
                s.name = rest.to_string();
                Step::Name(rest.to_string())
            }
            "ignore" => Step::Ignore(rest.split_whitespace().map(String::from).collect()),
            "region" => Step::Region(fields(&format!("REGION {rest}")).map_err(at)?.1),
            "recv" => Step::Recv(num(rest.strip_prefix("len=").unwrap_or(rest)).map_err(at)?),
            "send" => Step::Send(rest.to_string()),
            "wait" => Step::Wait(num(rest.trim_end_matches("ns")).map_err(at)?),
            "expect" if rest == "nothing" => Step::Expect(None),
            "expect" => Step::Expect(Some(fields(rest).map_err(at)?)),
            k => return Err(at(format!("unknown key {k:?}"))),
        };
        s.steps.push((n + 1, step));
    }
    if s.name.is_empty() {
        return Err("no name: line".into());
    }
    Ok(s)
}

pub fn num(v: &str) -> Result<u64, String> {
    let v = v.trim();
    let r = match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(&h.replace('_', ""), 16),
        None => v.replace('_', "").parse(),
    };
    r.map_err(|_| format!("not a number: {v:?}"))
}

/// `OPCODE k=v k=v ...` → (opcode, fields).
pub fn fields(line: &str) -> Result<(String, BTreeMap<String, String>), String> {
    let mut it = line.split_whitespace();
    let op = it.next().ok_or("empty packet description")?.to_string();
    let mut m = BTreeMap::new();
    for kv in it {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("{kv:?}: want key=value"))?;
        if m.insert(k.to_string(), v.to_string()).is_some() {
            return Err(format!("{k} given twice"));
        }
    }
    Ok((op, m))
}

pub fn flag_bits(v: &str) -> Result<u8, String> {
    let mut b = 0u8;
    for f in v.split('|').filter(|f| !f.is_empty()) {
        b |= match f {
            "ACK_REQ" => 0x01,
            "LAST" => 0x02,
            "RETX" => 0x04,
            "SOLICITED" => 0x08,
            "BACKLOG" => 0x10,
            "ORDERED" => 0x20,
            "UNRELIABLE" => 0x40,
            x => num(x)? as u8,
        };
    }
    Ok(b)
}

pub fn reason(v: &str) -> Result<NackReason, String> {
    Ok(match v {
        "REMOTE_ACCESS" => NackReason::RemoteAccess,
        "INVALID_REQUEST" => NackReason::InvalidRequest,
        "RNR" => NackReason::ReceiverNotReady,
        "SEQUENCE" => NackReason::Sequence,
        "REMOTE_OPERATION" => NackReason::RemoteOperation,
        x => return Err(format!("unknown NACK reason {x}")),
    })
}

pub fn reason_name(r: NackReason) -> &'static str {
    match r {
        NackReason::RemoteAccess => "REMOTE_ACCESS",
        NackReason::InvalidRequest => "INVALID_REQUEST",
        NackReason::ReceiverNotReady => "RNR",
        NackReason::Sequence => "SEQUENCE",
        NackReason::RemoteOperation => "REMOTE_OPERATION",
    }
}

pub fn hex(v: &str) -> Result<Vec<u8>, String> {
    if !v.len().is_multiple_of(2) {
        return Err(format!("odd hex {v:?}"));
    }
    (0..v.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&v[i..i + 2], 16).map_err(|_| format!("bad hex {v:?}")))
        .collect()
}

/// The access bits a `region:` line names.
pub fn access_bits(v: &str) -> Result<u32, String> {
    let mut acc = 0;
    for a in v.split('|') {
        acc |= match a {
            "LOCAL_WRITE" => crate::mem::access::LOCAL_WRITE,
            "REMOTE_WRITE" => crate::mem::access::REMOTE_WRITE,
            "REMOTE_READ" => crate::mem::access::REMOTE_READ,
            "REMOTE_ATOMIC" => crate::mem::access::REMOTE_ATOMIC,
            "" => 0,
            x => return Err(format!("unknown access {x}")),
        };
    }
    Ok(acc)
}

/// Build the packet a `send:` line describes; also returns its UDP source port.
pub fn packet(vals: &dyn Values, line: &str) -> Result<(Vec<u8>, u16), String> {
    let (op, f) = fields(line)?;
    let g =
        |k: &str, d: u64| -> Result<u64, String> { f.get(k).map_or(Ok(d), |v| vals.value(k, v)) };
    let payload = match f.get("payload") {
        Some(p) => hex(p)?,
        None => Vec::new(),
    };
    let seq = SeqHeader {
        psn: g("psn", 0)? as u32,
        floor: g("floor", 0)? as u32,
        tsval: g("tsval", 1)? as u32,
    };
    let msg = MsgHeader {
        stream: g("stream", 1)? as u32,
        msn: g("msn", 0)? as u32,
        offset: g("offset", 0)? as u32,
        length: g("length", payload.len() as u64)? as u32,
    };
    let (rkey, raddr) = (g("rkey", 0)? as u32, g("raddr", 0)?);
    let data = |op: DataOp| {
        Body::Data(DataRepr {
            seq,
            msg,
            op,
            payload: &payload,
        })
    };
    let body = match op.as_str() {
        "SEND" => data(DataOp::Send {
            rsn: g("rsn", 0)? as u32,
        }),
        "SEND_IMM" => data(DataOp::SendImm {
            rsn: g("rsn", 0)? as u32,
            imm: g("imm", 0)? as u32,
        }),
        "WRITE" => data(DataOp::Write { rkey, raddr }),
        "WRITE_IMM" => data(DataOp::WriteImm {
            rkey,
            raddr,
            rsn: g("rsn", 0)? as u32,
            imm: g("imm", 0)? as u32,
        }),
        "READ_REQ" => data(DataOp::ReadReq { rkey, raddr }),
        "FETCH_ADD" => data(DataOp::FetchAdd {
            rkey,
            raddr,
            add: g("add", 0)?,
        }),
        "CMP_SWAP" => data(DataOp::CmpSwap {
            rkey,
            raddr,
            compare: g("compare", 0)?,
            swap: g("swap", 0)?,
        }),
        "ACK" => {
            let mut sack = Sack256::default();
            for b in f.get("sack").map(|s| s.as_str()).unwrap_or("").split(',') {
                if !b.is_empty() {
                    sack.set(num(b)? as u32);
                }
            }
            Body::Ack(AckRepr {
                cum_psn: g("cum_psn", 0)? as u32,
                sack,
                ecn_ce: g("ecn_ce", 0)? as u32,
                rate_hint_mbps: g("rate_hint_mbps", 0)? as u32,
                ts_echo: g("ts_echo", 0)? as u32,
                ack_delay_ns: g("ack_delay_ns", 0)? as u32,
            })
        }
        "OPEN" | "OPEN_ACK" => {
            let o = OpenRepr {
                src_conn: g("src_conn", 0)? as u32,
                paths: g("paths", 1)? as u8,
                crowd: g("crowd", 0)? as u8,
                mtu: g("mtu", 64)? as u16,
                line_rate_mbps: g("line_rate_mbps", 0)? as u32,
            };
            if op == "OPEN" {
                Body::Open(o)
            } else {
                Body::OpenAck(o)
            }
        }
        "CLOSE" => Body::Close(CloseRepr {
            src_conn: g("src_conn", 0)? as u32,
            reason: g("reason", 0)? as u32,
        }),
        "PROBE" => Body::Probe(ProbeRepr {
            probe_seq: g("probe_seq", 0)? as u32,
            ts: g("ts", 0)? as u32,
        }),
        x => return Err(format!("cannot send {x}")),
    };
    let flags = f.get("flags").map_or(Ok(0), |v| flag_bits(v))?;
    let pkt = Packet {
        flags,
        path: g("path", 0)? as u8,
        dst_conn: g("dst_conn", vals.conn() as u64)? as u32,
        body,
    };
    let mut buf = vec![0; 4096];
    let n = pkt.emit(&mut buf).map_err(|e| format!("emit: {e:?}"))?;
    buf.truncate(n);
    Ok((buf, g("sport", PEER_PORT as u64)? as u16))
}

pub fn describe(p: &Packet<'_>) -> (String, BTreeMap<String, String>) {
    let mut m = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        m.insert(k.to_string(), v);
    };
    let op = match &p.body {
        Body::Data(d) => {
            put("psn", d.seq.psn.to_string());
            put("stream", d.msg.stream.to_string());
            put("msn", d.msg.msn.to_string());
            put("offset", d.msg.offset.to_string());
            put("length", d.msg.length.to_string());
            put(
                "payload",
                d.payload.iter().map(|b| format!("{b:02x}")).collect(),
            );
            match d.op {
                DataOp::ReadResp => "READ_RESP",
                DataOp::AtomicResp { orig } => {
                    put("orig", orig.to_string());
                    "ATOMIC_RESP"
                }
                _ => "REQUEST",
            }
        }
        Body::Ack(a) => {
            put("cum_psn", a.cum_psn.to_string());
            let bits: Vec<String> = (0..256)
                .filter(|i| a.sack.get(*i))
                .map(|i| i.to_string())
                .collect();
            put("sack", bits.join(","));
            put("ts_echo", a.ts_echo.to_string());
            "ACK"
        }
        Body::AckMulti(_) => "ACK_MULTI",
        Body::Nack(n) => {
            put("psn", n.psn.to_string());
            put("stream", n.stream.to_string());
            put("msn", n.msn.to_string());
            put("reason", reason_name(n.reason).to_string());
            put("rnr_delay", n.rnr_delay.to_string());
            "NACK"
        }
        Body::Open(o) | Body::OpenAck(o) => {
            put("src_conn", o.src_conn.to_string());
            put("paths", o.paths.to_string());
            put("mtu", o.mtu.to_string());
            if matches!(p.body, Body::Open(_)) {
                "OPEN"
            } else {
                "OPEN_ACK"
            }
        }
        Body::Close(c) | Body::CloseAck(c) => {
            put("src_conn", c.src_conn.to_string());
            put("reason", c.reason.to_string());
            if matches!(p.body, Body::Close(_)) {
                "CLOSE"
            } else {
                "CLOSE_ACK"
            }
        }
        Body::Probe(x) | Body::ProbeAck(x) => {
            put("probe_seq", x.probe_seq.to_string());
            put("ts", x.ts.to_string());
            if matches!(p.body, Body::Probe(_)) {
                "PROBE"
            } else {
                "PROBE_ACK"
            }
        }
    };
    (op.to_string(), m)
}

/// A packet the endpoint sent from UDP port `sport`, as fields: [`describe`] plus `path`,
/// `dst_conn`, `flags` and `sport`.
pub fn describe_sent(p: &Packet<'_>, sport: u16) -> Fields {
    let (op, mut m) = describe(p);
    m.insert("path".into(), p.path.to_string());
    m.insert("dst_conn".into(), p.dst_conn.to_string());
    m.insert("flags".into(), p.flags.to_string());
    m.insert("sport".into(), sport.to_string());
    (op, m)
}

/// Does `got` match the expectation `want` (every field it names, with the same value)?
pub fn matches(
    r: &dyn Values,
    want: &(String, BTreeMap<String, String>),
    got: &(String, BTreeMap<String, String>),
) -> Result<(), String> {
    if want.0 != got.0 {
        return Err(format!("opcode {} (want {})", got.0, want.0));
    }
    for (k, v) in &want.1 {
        let have = got
            .1
            .get(k)
            .ok_or_else(|| format!("{} has no field {k}", got.0))?;
        let same = match k.as_str() {
            "reason" if got.0 == "NACK" => reason_name(reason(v)?) == have,
            "sack" | "payload" => v == have,
            "flags" => flag_bits(v)? as u64 == num(have)?,
            _ => r.value(k, v)? == num(have)?,
        };
        if !same {
            return Err(format!("{} {k} = {have}, want {v}", got.0));
        }
    }
    Ok(())
}
