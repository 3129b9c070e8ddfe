//! Behavioural vectors (spec/vectors/behaviour/*.vec, format in its README.md): scripted packet
//! exchanges with the responses a conforming endpoint gives, replayed against a real
//! `Endpoint` (the implementation under test) by a scripted peer.

use ferroce_transport::mem::{access, Regions};
use ferroce_transport::wire::{
    AckRepr, Body, CloseRepr, DataOp, DataRepr, MsgHeader, NackReason, OpenRepr, Packet, ProbeRepr,
    Sack256, SeqHeader,
};
use ferroce_transport::*;
use std::collections::BTreeMap;
use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

/// The scripted peer's address and UDP source port; the endpoint under test's id is learnt
/// from its OPEN_ACK.
const PEER: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
const PEER_PORT: u16 = 50_000;
/// Time between two steps of a script: 1 µs.
const STEP_NS: u64 = 1_000;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec/vectors/behaviour")
}

fn num(v: &str) -> Result<u64, String> {
    let v = v.trim();
    let r = match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(&h.replace('_', ""), 16),
        None => v.replace('_', "").parse(),
    };
    r.map_err(|_| format!("not a number: {v:?}"))
}

/// `OPCODE k=v k=v ...` → (opcode, fields).
fn fields(line: &str) -> Result<(String, BTreeMap<String, String>), String> {
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

fn flag_bits(v: &str) -> Result<u8, String> {
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

fn reason(v: &str) -> Result<NackReason, String> {
    Ok(match v {
        "REMOTE_ACCESS" => NackReason::RemoteAccess,
        "INVALID_REQUEST" => NackReason::InvalidRequest,
        "RNR" => NackReason::ReceiverNotReady,
        "SEQUENCE" => NackReason::Sequence,
        "REMOTE_OPERATION" => NackReason::RemoteOperation,
        x => return Err(format!("unknown NACK reason {x}")),
    })
}

fn reason_name(r: NackReason) -> &'static str {
    match r {
        NackReason::RemoteAccess => "REMOTE_ACCESS",
        NackReason::InvalidRequest => "INVALID_REQUEST",
        NackReason::ReceiverNotReady => "RNR",
        NackReason::Sequence => "SEQUENCE",
        NackReason::RemoteOperation => "REMOTE_OPERATION",
    }
}

fn hex(v: &str) -> Result<Vec<u8>, String> {
    if !v.len().is_multiple_of(2) {
        return Err(format!("odd hex {v:?}"));
    }
    (0..v.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&v[i..i + 2], 16).map_err(|_| format!("bad hex {v:?}")))
        .collect()
}

/// The replay of one script: the endpoint under test, its memory, the connection ids.
struct Replay {
    ep: Endpoint,
    mem: Regions,
    now: u64,
    /// The endpoint's own id of the connection (learnt from OPEN_ACK), 0 before.
    conn: u32,
    /// Region keys in registration order (`R0`, `R1`, ...).
    keys: Vec<u32>,
    /// Address of the next region.
    next_addr: u64,
    buf: Vec<u8>,
    /// Opcodes the script does not want to see (e.g. hint requests).
    ignore: Vec<String>,
}

impl Replay {
    fn value(&self, k: &str, v: &str) -> Result<u64, String> {
        match v {
            "CONN" => Ok(self.conn as u64),
            _ if k == "rkey" && v.starts_with('R') => {
                let i = num(&v[1..])? as usize;
                self.keys
                    .get(i)
                    .map(|k| *k as u64)
                    .ok_or_else(|| format!("no region {v}"))
            }
            _ => num(v),
        }
    }

    /// Build the packet a `send:` line describes; also returns its UDP source port.
    fn packet(&self, line: &str) -> Result<(Vec<u8>, u16), String> {
        let (op, f) = fields(line)?;
        let g = |k: &str, d: u64| -> Result<u64, String> {
            f.get(k).map_or(Ok(d), |v| self.value(k, v))
        };
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
            dst_conn: g("dst_conn", self.conn as u64)? as u32,
            body,
        };
        let mut buf = vec![0; 4096];
        let n = pkt.emit(&mut buf).map_err(|e| format!("emit: {e:?}"))?;
        buf.truncate(n);
        Ok((buf, g("sport", PEER_PORT as u64)? as u16))
    }

    /// The endpoint's packets until it has nothing more to send, described as fields.
    fn drain(&mut self) -> Vec<(String, BTreeMap<String, String>)> {
        let mut out = Vec::new();
        while let Some(t) = self
            .ep
            .poll_transmit(self.now, &mut self.buf, &mut self.mem)
        {
            let Ok(p) = Packet::parse(&self.buf[..t.len]) else {
                out.push(("UNPARSEABLE".into(), BTreeMap::new()));
                continue;
            };
            let (op, mut m) = describe(&p);
            m.insert("path".into(), p.path.to_string());
            m.insert("dst_conn".into(), p.dst_conn.to_string());
            m.insert("flags".into(), p.flags.to_string());
            m.insert("sport".into(), t.src_port.to_string());
            if op == "OPEN_ACK" && self.conn == 0 {
                self.conn = num(&m["src_conn"]).unwrap_or(0) as u32;
                self.on_connected();
            }
            if !self.ignore.contains(&op) {
                out.push((op, m));
            }
        }
        out
    }

    fn on_connected(&mut self) {
        // One stream, id 1 at both ends, protection domain 1.
        self.ep
            .create_stream(ConnId(self.conn), 1, 1, 1)
            .expect("create stream 1");
    }
}

fn describe(p: &Packet<'_>) -> (String, BTreeMap<String, String>) {
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

/// Does `got` match the expectation `want` (every field it names, with the same value)?
fn matches(
    r: &Replay,
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

/// Replay one script; `Err` says which line failed and why.
fn replay(text: &str) -> Result<(), String> {
    let mut cfg = EndpointConfig {
        seed: 7,
        ..EndpointConfig::default()
    };
    cfg.conn.paths = 1;
    cfg.conn.mtu = 64;
    let mut r = Replay {
        ep: Endpoint::new(cfg),
        mem: Regions::new(),
        now: 1_000_000,
        conn: 0,
        keys: Vec::new(),
        next_addr: 0x10_000,
        buf: vec![0; 4096],
        ignore: Vec::new(),
    };
    let mut pending: Vec<(String, BTreeMap<String, String>)> = Vec::new();
    let mut seen_name = false;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = |e: String| format!("line {}: {e}", n + 1);
        let (key, rest) = line
            .split_once(':')
            .ok_or_else(|| at("want key: value".into()))?;
        let rest = rest.trim();
        match key {
            "name" => seen_name = true,
            "ignore" => r.ignore = rest.split_whitespace().map(String::from).collect(),
            "region" => {
                let (_, f) = fields(&format!("REGION {rest}")).map_err(at)?;
                let len = num(f.get("len").map(String::as_str).unwrap_or("64")).map_err(at)?;
                let mut acc = 0;
                for a in f.get("access").map(String::as_str).unwrap_or("").split('|') {
                    acc |= match a {
                        "LOCAL_WRITE" => access::LOCAL_WRITE,
                        "REMOTE_WRITE" => access::REMOTE_WRITE,
                        "REMOTE_READ" => access::REMOTE_READ,
                        "REMOTE_ATOMIC" => access::REMOTE_ATOMIC,
                        "" => 0,
                        x => return Err(at(format!("unknown access {x}"))),
                    };
                }
                let addr = f
                    .get("addr")
                    .map(|a| num(a))
                    .transpose()
                    .map_err(at)?
                    .unwrap_or(r.next_addr);
                r.next_addr = (addr + len + 0xfff) & !0xfff;
                let k = r.mem.register(1, addr, len as usize, acc);
                r.keys.push(k);
            }
            "recv" => {
                let len = num(rest.strip_prefix("len=").unwrap_or(rest)).map_err(at)?;
                let addr = r.next_addr;
                r.next_addr = (addr + len + 0xfff) & !0xfff;
                let lkey = r.mem.register(1, addr, len as usize, access::LOCAL_WRITE);
                let wr = RecvWr {
                    wr_id: addr,
                    sgl: [Sge {
                        lkey,
                        addr,
                        len: len as u32,
                    }]
                    .into_iter()
                    .collect(),
                };
                r.ep.post_recv(ConnId(r.conn), 1, wr)
                    .map_err(|e| at(format!("post_recv: {e:?}")))?;
            }
            "send" => {
                if !pending.is_empty() {
                    return Err(at(format!(
                        "unexpected output before this send: {pending:?}"
                    )));
                }
                let (d, sport) = r.packet(rest).map_err(at)?;
                r.ep.handle_datagram(r.now, PEER, sport, false, &d, &mut r.mem);
                pending = r.drain();
                r.now += STEP_NS;
            }
            "wait" => {
                let ns = num(rest.trim_end_matches("ns")).map_err(at)?;
                let until = r.now + ns;
                while let Some(t) = r.ep.poll_timeout().filter(|t| *t <= until) {
                    r.now = t.max(r.now);
                    r.ep.handle_timeout(r.now);
                    pending.extend(r.drain());
                }
                r.now = until;
            }
            "expect" => {
                if rest == "nothing" {
                    if !pending.is_empty() {
                        return Err(at(format!("want nothing, got {pending:?}")));
                    }
                    continue;
                }
                let want = fields(rest).map_err(at)?;
                if pending.is_empty() {
                    return Err(at(format!("want {}, got nothing", want.0)));
                }
                let got = pending.remove(0);
                matches(&r, &want, &got).map_err(|e| at(format!("{e}; got {got:?}")))?;
            }
            "checks" => {}
            k => return Err(at(format!("unknown key {k:?}"))),
        }
    }
    if !seen_name {
        return Err("no name: line".into());
    }
    if !pending.is_empty() {
        return Err(format!("output left unexpected at the end: {pending:?}"));
    }
    Ok(())
}

// checks: [VEC-3]
#[test]
fn behaviour_vectors() {
    let mut files: Vec<PathBuf> = fs::read_dir(dir())
        .expect("spec/vectors/behaviour")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "vec"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 14,
        "only {} behavioural vectors",
        files.len()
    );
    let mut failures = Vec::new();
    for f in &files {
        let text = fs::read_to_string(f).unwrap();
        let name = f.file_stem().unwrap().to_string_lossy().to_string();
        if !text.lines().any(|l| l.trim() == format!("name: {name}")) {
            failures.push(format!("{name}: its name: line is not the file name"));
        }
        if let Err(e) = replay(&text) {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The runner itself: a script whose expectation is wrong must fail.
#[test]
fn a_wrong_expectation_fails() {
    let good =
        "name: x\nsend: OPEN src_conn=0x0a0a0a0a\nexpect: OPEN_ACK dst_conn=0x0a0a0a0a paths=1\n";
    replay(good).unwrap();
    for bad in [
        "name: x\nsend: OPEN src_conn=0x0a0a0a0a\nexpect: OPEN_ACK paths=2\n",
        "name: x\nsend: OPEN src_conn=0x0a0a0a0a\nexpect: nothing\n",
        "name: x\nsend: OPEN src_conn=0x0a0a0a0a\n",
        "name: x\nsend: OPEN src_conn=0x0a0a0a0a\nexpect: CLOSE_ACK\n",
    ] {
        assert!(replay(bad).is_err(), "passed: {bad}");
    }
}
