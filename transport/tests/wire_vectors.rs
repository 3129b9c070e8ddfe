//! Byte-exact test vectors of the native wire format (spec/vectors, format in its README).
//!
//! For every valid vector: `Packet::parse` of the bytes equals the packet built from the listed
//! fields, `PacketView` agrees on the base header and payload, and `emit` of that packet gives
//! the listed bytes exactly. For every invalid vector: `parse` fails with the listed error.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use ferroce_transport::wire::{
    AckBlock, AckMultiWriter, AckRepr, Body, CloseRepr, DataOp, DataRepr, MsgHeader, NackReason,
    NackRepr, Opcode, OpenRepr, Packet, PacketView, ProbeRepr, Sack256, SeqHeader, WireError,
};

/// Minimum numbers of vectors: deleting files must not make the suite pass.
const MIN_VALID: usize = 29;
const MIN_INVALID: usize = 25;

struct Vector {
    file: PathBuf,
    name: String,
    fields: BTreeMap<String, String>,
    bytes: Vec<u8>,
    emit: Option<Vec<u8>>,
}

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec/vectors")
}

fn parse_hex(s: &str, file: &Path) -> Vec<u8> {
    s.split_whitespace()
        .map(|t| {
            assert!(t.len() == 2, "{}: bad hex byte {t:?}", file.display());
            u8::from_str_radix(t, 16)
                .unwrap_or_else(|_| panic!("{}: bad hex byte {t:?}", file.display()))
        })
        .collect()
}

fn load(file: &Path) -> Vector {
    let text = fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    let mut fields = BTreeMap::new();
    let mut bytes = Vec::new();
    let mut emit: Option<Vec<u8>> = None;
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (key, value) = line
            .split_once(':')
            .unwrap_or_else(|| panic!("{}:{}: expected `key: value`", file.display(), n + 1));
        let (key, value) = (key.trim(), value.trim());
        match key {
            "hex" => bytes.extend(parse_hex(value, file)),
            "emit" => emit
                .get_or_insert_with(Vec::new)
                .extend(parse_hex(value, file)),
            _ => {
                let old = fields.insert(key.to_string(), value.to_string());
                assert!(
                    old.is_none(),
                    "{}:{}: duplicate field {key}",
                    file.display(),
                    n + 1
                );
            }
        }
    }
    let name = fields
        .remove("name")
        .unwrap_or_else(|| panic!("{}: no `name:`", file.display()));
    let stem = file.file_stem().unwrap().to_string_lossy();
    assert_eq!(name, stem, "{}: name must equal file name", file.display());
    Vector {
        file: file.to_path_buf(),
        name,
        fields,
        bytes,
        emit,
    }
}

/// Takes fields out of a vector; every listed field must be used exactly once.
struct Fields<'v> {
    v: &'v Vector,
    left: BTreeMap<String, String>,
}

impl Fields<'_> {
    fn str(&mut self, key: &str) -> String {
        self.left
            .remove(key)
            .unwrap_or_else(|| panic!("{}: missing field `{key}`", self.v.name))
    }
    fn num(&mut self, key: &str) -> u64 {
        let s = self.str(key);
        let r = match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16),
            None => s.parse(),
        };
        r.unwrap_or_else(|_| panic!("{}: field `{key}`: not a number: {s:?}", self.v.name))
    }
    fn u8(&mut self, key: &str) -> u8 {
        let n = self.num(key);
        u8::try_from(n).unwrap_or_else(|_| panic!("{}: `{key}` too big", self.v.name))
    }
    fn u16(&mut self, key: &str) -> u16 {
        let n = self.num(key);
        u16::try_from(n).unwrap_or_else(|_| panic!("{}: `{key}` too big", self.v.name))
    }
    fn u32(&mut self, key: &str) -> u32 {
        let n = self.num(key);
        u32::try_from(n).unwrap_or_else(|_| panic!("{}: `{key}` too big", self.v.name))
    }
    fn finish(self) {
        assert!(
            self.left.is_empty(),
            "{}: fields not used by this opcode: {:?}",
            self.v.name,
            self.left.keys().collect::<Vec<_>>()
        );
    }
}

fn opcode_by_name(s: &str) -> Option<Opcode> {
    use Opcode::*;
    Some(match s {
        "SEND" => Send,
        "SEND_IMM" => SendImm,
        "WRITE" => Write,
        "WRITE_IMM" => WriteImm,
        "READ_REQ" => ReadReq,
        "READ_RESP" => ReadResp,
        "FETCH_ADD" => FetchAdd,
        "CMP_SWAP" => CmpSwap,
        "ATOMIC_RESP" => AtomicResp,
        "ACK" => Ack,
        "NACK" => Nack,
        "ACK_MULTI" => AckMulti,
        "OPEN" => Open,
        "OPEN_ACK" => OpenAck,
        "CLOSE" => Close,
        "CLOSE_ACK" => CloseAck,
        "PROBE" => Probe,
        "PROBE_ACK" => ProbeAck,
        _ => return None,
    })
}

fn reason_by_name(s: &str) -> Option<NackReason> {
    Some(match s {
        "REMOTE_ACCESS" => NackReason::RemoteAccess,
        "INVALID_REQUEST" => NackReason::InvalidRequest,
        "RNR" => NackReason::ReceiverNotReady,
        "SEQUENCE" => NackReason::Sequence,
        "REMOTE_OPERATION" => NackReason::RemoteOperation,
        _ => return None,
    })
}

/// The listed payload (empty when there is no `payload:` field).
fn listed_payload(v: &Vector) -> Vec<u8> {
    v.fields
        .get("payload")
        .map(|s| parse_hex(s, &v.file))
        .unwrap_or_default()
}

/// The packet the listed fields describe; `payload` is [`listed_payload`].
fn expected<'p>(v: &Vector, payload: &'p [u8]) -> Packet<'p> {
    let mut f = Fields {
        v,
        left: v.fields.clone(),
    };
    let op_name = f.str("opcode");
    let op = opcode_by_name(&op_name)
        .unwrap_or_else(|| panic!("{}: unknown opcode name {op_name}", v.name));
    let flags = f.u8("flags");
    let path = f.u8("path");
    let dst_conn = f.u32("dst_conn");
    let body = if op.is_sequenced() {
        let seq = SeqHeader {
            psn: f.u32("psn"),
            floor: f.u32("floor"),
            tsval: f.u32("tsval"),
        };
        let msg = MsgHeader {
            stream: f.u32("stream"),
            msn: f.u32("msn"),
            offset: f.u32("offset"),
            length: f.u32("length"),
        };
        let dop = match op {
            Opcode::Send => DataOp::Send { rsn: f.u32("rsn") },
            Opcode::SendImm => DataOp::SendImm {
                rsn: f.u32("rsn"),
                imm: f.u32("imm"),
            },
            Opcode::Write => DataOp::Write {
                rkey: f.u32("rkey"),
                raddr: f.num("raddr"),
            },
            Opcode::WriteImm => DataOp::WriteImm {
                rkey: f.u32("rkey"),
                raddr: f.num("raddr"),
                rsn: f.u32("rsn"),
                imm: f.u32("imm"),
            },
            Opcode::ReadReq => DataOp::ReadReq {
                rkey: f.u32("rkey"),
                raddr: f.num("raddr"),
            },
            Opcode::ReadResp => DataOp::ReadResp,
            Opcode::FetchAdd => DataOp::FetchAdd {
                rkey: f.u32("rkey"),
                raddr: f.num("raddr"),
                add: f.num("add"),
            },
            Opcode::CmpSwap => DataOp::CmpSwap {
                rkey: f.u32("rkey"),
                raddr: f.num("raddr"),
                compare: f.num("compare"),
                swap: f.num("swap"),
            },
            Opcode::AtomicResp => DataOp::AtomicResp {
                orig: f.num("orig"),
            },
            _ => unreachable!(),
        };
        if op.has_payload() {
            f.str("payload"); // parsed by `listed_payload`; required here
        }
        f.finish();
        Body::Data(DataRepr {
            seq,
            msg,
            op: dop,
            payload,
        })
    } else {
        let body = match op {
            Opcode::Ack => {
                let cum_psn = f.u32("cum_psn");
                let mut sack = Sack256::default();
                for t in f.str("sack").split_whitespace() {
                    let i: u32 = t
                        .parse()
                        .unwrap_or_else(|_| panic!("{}: bad SACK bit {t:?}", v.name));
                    assert!(i < 256, "{}: SACK bit {i} out of range", v.name);
                    sack.set(i);
                }
                Body::Ack(AckRepr {
                    cum_psn,
                    sack,
                    ecn_ce: f.u32("ecn_ce"),
                    rate_hint_mbps: f.u32("rate_hint_mbps"),
                    ts_echo: f.u32("ts_echo"),
                    ack_delay_ns: f.u32("ack_delay_ns"),
                })
            }
            Opcode::AckMulti => {
                let hint = f.u32("rate_hint_mbps");
                let n = f.u8("blocks");
                let blocks: Vec<AckBlock> = (0..n)
                    .map(|i| parse_block(v, &f.str(&format!("block{i}"))))
                    .collect();
                f.finish();
                // The codec's own writer lays the blocks out; what is compared is the decoded
                // content (the bytes are compared with `hex:`/`emit:` by the caller).
                let buf = Box::leak(vec![0u8; 16 + blocks.len() * 52 + 4].into_boxed_slice());
                let mut w = AckMultiWriter::new(buf, dst_conn, hint).expect("buffer");
                for b in &blocks {
                    assert!(w.push(b), "{}: block does not fit", v.name);
                }
                let len = w.finish().expect("at least one block");
                let parsed = Packet::parse(&buf[..len]).expect("writer output parses");
                return Packet {
                    flags,
                    path,
                    dst_conn,
                    body: parsed.body,
                };
            }
            Opcode::Nack => {
                let psn = f.u32("psn");
                let stream = f.u32("stream");
                let msn = f.u32("msn");
                let r = f.str("reason");
                let reason = reason_by_name(&r)
                    .unwrap_or_else(|| panic!("{}: unknown reason name {r}", v.name));
                Body::Nack(NackRepr {
                    psn,
                    stream,
                    msn,
                    reason,
                    rnr_delay: f.u8("rnr_delay"),
                })
            }
            Opcode::Open | Opcode::OpenAck => {
                let o = OpenRepr {
                    src_conn: f.u32("src_conn"),
                    paths: f.u8("paths"),
                    crowd: f.u8("crowd"),
                    mtu: f.u16("mtu"),
                    line_rate_mbps: f.u32("line_rate_mbps"),
                };
                if op == Opcode::Open {
                    Body::Open(o)
                } else {
                    Body::OpenAck(o)
                }
            }
            Opcode::Close | Opcode::CloseAck => {
                let c = CloseRepr {
                    src_conn: f.u32("src_conn"),
                    reason: f.u32("reason"),
                };
                if op == Opcode::Close {
                    Body::Close(c)
                } else {
                    Body::CloseAck(c)
                }
            }
            Opcode::Probe | Opcode::ProbeAck => {
                let p = ProbeRepr {
                    probe_seq: f.u32("probe_seq"),
                    ts: f.u32("ts"),
                };
                if op == Opcode::Probe {
                    Body::Probe(p)
                } else {
                    Body::ProbeAck(p)
                }
            }
            _ => unreachable!(),
        };
        f.finish();
        body
    };
    Packet {
        flags,
        path,
        dst_conn,
        body,
    }
}

/// `path=2 cum_psn=42 sack=0,5 ecn_ce=3 ts_echo=1000000 ack_delay_ns=2500`
fn parse_block(v: &Vector, s: &str) -> AckBlock {
    let mut b = AckBlock::default();
    let mut seen = BTreeSet::new();
    for kv in s.split_whitespace() {
        let (k, val) = kv
            .split_once('=')
            .unwrap_or_else(|| panic!("{}: bad block item {kv:?}", v.name));
        let num = |x: &str| -> u32 {
            x.parse()
                .unwrap_or_else(|_| panic!("{}: block `{k}`: not a number: {x:?}", v.name))
        };
        match k {
            "path" => b.path = u8::try_from(num(val)).expect("path < 256"),
            "cum_psn" => b.cum_psn = num(val),
            "ecn_ce" => b.ecn_ce = num(val),
            "ts_echo" => b.ts_echo = num(val),
            "ack_delay_ns" => b.ack_delay_ns = num(val),
            "sack" => {
                for t in val.split(',').filter(|t| !t.is_empty()) {
                    let i = num(t);
                    assert!(i < 256, "{}: SACK bit {i} out of range", v.name);
                    b.sack.set(i);
                }
            }
            _ => panic!("{}: unknown block item {k}", v.name),
        }
        seen.insert(k.to_string());
    }
    assert_eq!(
        seen.len(),
        6,
        "{}: a block lists all six items: {s:?}",
        v.name
    );
    b
}

fn error_matches(want: &str, got: &WireError) -> bool {
    let mut it = want.split_whitespace();
    let kind = it.next().unwrap_or("");
    let arg = it.next().map(|s| match s.strip_prefix("0x") {
        Some(h) => u8::from_str_radix(h, 16).expect("error argument"),
        None => s.parse::<u8>().expect("error argument"),
    });
    match (kind, got) {
        ("TRUNCATED", WireError::Truncated) => true,
        ("BAD_CRC", WireError::BadCrc) => true,
        ("MALFORMED", WireError::Malformed(_)) => true,
        ("BAD_VERSION", WireError::BadVersion(v)) => arg == Some(*v),
        ("BAD_OPCODE", WireError::BadOpcode(o)) => arg == Some(*o),
        _ => false,
    }
}

fn check_valid(v: &Vector) -> Result<Opcode, String> {
    let payload = listed_payload(v);
    let want = expected(v, &payload);
    let got = Packet::parse(&v.bytes).map_err(|e| format!("parse failed: {e:?}"))?;
    if got != want {
        return Err(format!("parsed\n  {got:?}\nexpected\n  {want:?}"));
    }
    let view = PacketView::new_checked(&v.bytes[..])
        .map_err(|e| format!("PacketView::new_checked failed: {e:?}"))?;
    if view.opcode() != want.opcode()
        || view.flags() != want.flags
        || view.path() != want.path
        || view.dst_conn() != want.dst_conn
        || !view.crc_ok()
        || view.payload() != payload.as_slice()
    {
        return Err("PacketView disagrees with the listed fields".into());
    }
    let canonical = v.emit.as_deref().unwrap_or(&v.bytes);
    if want.buffer_len() != canonical.len() {
        return Err(format!(
            "buffer_len {} != {} bytes listed",
            want.buffer_len(),
            canonical.len()
        ));
    }
    let mut out = vec![0u8; canonical.len()];
    let n = want
        .emit(&mut out)
        .map_err(|e| format!("emit failed: {e:?}"))?;
    if &out[..n] != canonical {
        return Err(format!(
            "emit differs:\n  got  {}\n  want {}",
            hex(&out[..n]),
            hex(canonical)
        ));
    }
    // One byte less of buffer must be refused, never a panic or a short write.
    if want.emit(&mut out[..n - 1]) != Err(WireError::BufferTooSmall) {
        return Err("emit into a buffer one byte short did not fail".into());
    }
    if v.emit.is_some() && Packet::parse(canonical) != Ok(want) {
        return Err("the emitted bytes do not parse back to the same packet".into());
    }
    Ok(want.opcode())
}

fn hex(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

// checks: [VEC-1] [VEC-2] [VAL-14]
#[test]
fn wire_vectors() {
    let dir = vectors_dir();
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "vec"))
        .collect();
    files.sort();

    let mut failures = Vec::new();
    let (mut valid, mut invalid) = (0, 0);
    let mut opcodes = BTreeSet::new();
    let mut reasons = BTreeSet::new();
    let mut errors = BTreeSet::new();
    let mut sack_words = BTreeSet::new();
    let mut multi_words = BTreeSet::new();
    for file in &files {
        let v = load(file);
        if let Some(want) = v.fields.get("error") {
            invalid += 1;
            assert_eq!(
                v.fields.len(),
                1,
                "{}: an invalid vector lists only `error`",
                v.name
            );
            errors.insert(want.split_whitespace().next().unwrap_or("").to_string());
            match Packet::parse(&v.bytes) {
                Ok(p) => failures.push(format!("{}: parsed as {p:?}, want {want}", v.name)),
                Err(e) if !error_matches(want, &e) => {
                    failures.push(format!("{}: error {e:?}, want {want}", v.name))
                }
                Err(_) => {}
            }
            if want == "BAD_CRC" {
                match PacketView::new_checked(&v.bytes[..]) {
                    Ok(view) if !view.crc_ok() => {}
                    _ => failures.push(format!(
                        "{}: PacketView should accept it, crc_ok false",
                        v.name
                    )),
                }
            }
        } else {
            valid += 1;
            match check_valid(&v) {
                Ok(op) => {
                    opcodes.insert(op as u8);
                    if let Ok(Packet {
                        body: Body::Nack(n),
                        ..
                    }) = Packet::parse(&v.bytes)
                    {
                        reasons.insert(n.reason as u8);
                    }
                    if let Ok(Packet {
                        body: Body::Ack(a), ..
                    }) = Packet::parse(&v.bytes)
                    {
                        let words = a.sack.0.iter().filter(|w| **w != 0).count();
                        sack_words.insert(words);
                    }
                    if let Ok(Packet {
                        body: Body::AckMulti(m),
                        ..
                    }) = Packet::parse(&v.bytes)
                    {
                        multi_words.extend(m.blocks().map(|b| b.words()));
                    }
                }
                Err(e) => failures.push(format!("{}: {e}", v.name)),
            }
        }
    }
    eprintln!(
        "wire vectors: {valid} valid, {invalid} invalid, from {}",
        dir.display()
    );
    assert!(
        failures.is_empty(),
        "{} vector(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        valid >= MIN_VALID && invalid >= MIN_INVALID,
        "too few vectors in {}: {valid} valid (want >= {MIN_VALID}), {invalid} invalid (want >= {MIN_INVALID})",
        dir.display()
    );
    let all_ops: BTreeSet<u8> = (0..=255u8)
        .filter(|&b| Opcode::from_u8(b).is_some())
        .collect();
    assert_eq!(all_ops.len(), 18);
    assert_eq!(opcodes, all_ops, "every opcode needs a valid vector");
    assert_eq!(
        reasons,
        (1..=255u8)
            .filter(|&r| NackReason::from_u8(r).is_some())
            .collect::<BTreeSet<u8>>(),
        "every NACK reason needs a vector"
    );
    for e in [
        "TRUNCATED",
        "BAD_VERSION",
        "BAD_OPCODE",
        "BAD_CRC",
        "MALFORMED",
    ] {
        assert!(errors.contains(e), "no invalid vector with error {e}");
    }
    assert!(
        sack_words.contains(&4),
        "need an ACK with SACK bits in all four words"
    );
    for w in [0, 1, 4] {
        assert!(
            multi_words.contains(&w),
            "need an ACK_MULTI block with {w} SACK words"
        );
    }
}
