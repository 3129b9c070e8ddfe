//! The Wireshark dissector (spec/wireshark/ferroce.lua) against ferroce's own codec
//! (`ferroce_transport::wire`), field by field, on four captures:
//! - every test vector of spec/vectors, each wrapped into an Ethernet/IPv4/UDP-4792 frame by the
//!   simulator's pcap writer (a host that sends the vectors' bytes as datagrams);
//! - ~10,000 mutations of the valid vectors (bit flips, bytes off by one, truncations), the same
//!   way, so that every check of wire.md §3 fails alone and in combination;
//! - a simulator run: a mixed verified workload over 4 paths with loss, corruption, ECN marks
//!   and RNR, as the client host sent and received it;
//! - a DPDK run (two engines over net_ring in this process, needs root), as engine A's own
//!   capture wrote it.
//!
//! Each capture goes through `tshark -X lua_script:... -T json` and every native packet in it
//! through `Packet::parse` / `PacketView`; for every field the codec exposes the two must give
//! the same values, the dissector's verdict (`ferroce.drop`) must be the codec's error (with its
//! expert info), valid packets must carry no expert error, and no Lua error may appear.
//!
//! Without tshark the test says so and passes, except under CI (`CI` set), where it fails.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use ferroce_harness::{Fabric, OpKind, TwoHostRun, WorkloadSpec};
use ferroce_sim::{topology, Datagram, FaultConfig, Host, HostId, Nanos, TopologyConfig};
use ferroce_transport::cm;
use ferroce_transport::wire::{self, Body, DataOp, Opcode, Packet, PacketView, WireError};
use serde_json::Value;

mod expect;
use expect::*;

/// Field name -> values (in tree order), from tshark or expected from the codec.
type Fields = BTreeMap<String, Vec<String>>;

fn lua_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec/wireshark/ferroce.lua")
}

fn vectors_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec/vectors")
}

/// A directory under /tmp removed on drop, also when the test fails, unless
/// `FERROCE_WS_KEEP` is set (to look at the captures with Wireshark).
struct TempDir(PathBuf);

impl TempDir {
    fn new(what: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("ws-dissector-{}-{what}", std::process::id()));
        std::fs::create_dir_all(&d).expect("temp dir");
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("FERROCE_WS_KEEP").is_some() {
            eprintln!("kept {}", self.0.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether tshark runs here; without it the test is skipped, but never under CI.
fn have_tshark() -> bool {
    let ok = Command::new("tshark")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        let why = "tshark not found (scripts/setup.sh installs it: apt-get install tshark)";
        assert!(std::env::var_os("CI").is_none(), "{why}; CI is set");
        eprintln!("SKIPPED dissector tests: {why}");
    }
    ok
}

// ---------------------------------------------------------------------------------------------
// tshark side

/// Collect every key with a string value under `v` (`ferroce.*`, expert info), wherever the
/// tree nests it; the comparison picks the keys it knows.
fn flatten(v: &Value, out: &mut Fields) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match x {
                    Value::String(s) => out.entry(k.clone()).or_default().push(s.clone()),
                    Value::Array(a) => {
                        for e in a {
                            match e {
                                Value::String(s) => {
                                    out.entry(k.clone()).or_default().push(s.clone())
                                }
                                other => flatten(other, out),
                            }
                        }
                    }
                    other => flatten(other, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|e| flatten(e, out)),
        _ => {}
    }
}

/// tshark with the dissector loaded and `home` (one of the test's directories) as its home, so
/// the user's Wireshark preferences and personal plugins (an older copy of the script, another
/// `udp_port`) cannot change what it shows.
fn tshark_with_script(home: &Path) -> Command {
    let mut c = Command::new("tshark");
    c.env("HOME", home)
        .env("XDG_CONFIG_HOME", home)
        .env_remove("WIRESHARK_CONFIG_DIR")
        .env_remove("WIRESHARK_PLUGIN_DIR")
        .arg("-X")
        .arg(format!("lua_script:{}", lua_script().display()));
    c
}

/// The dissector's fields of every frame (index = frame number - 1); `None` where tshark shows
/// no ferroce layer.
fn tshark_decode(pcap: &Path, home: &Path) -> Vec<Option<Fields>> {
    let out = tshark_with_script(home)
        .arg("-r")
        .arg(pcap)
        .args(["-T", "json", "--no-duplicate-keys"])
        .output()
        .expect("run tshark");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tshark failed: {stderr}");
    // The Lua script failing to load or to run is reported on stderr, not in the status.
    for l in stderr.lines() {
        assert!(
            !l.contains("Lua") && !l.contains("rror"),
            "tshark stderr: {stderr}"
        );
    }
    let v: Value = serde_json::from_slice(&out.stdout).expect("tshark JSON");
    let mut frames = Vec::new();
    for (i, pkt) in v.as_array().expect("JSON array").iter().enumerate() {
        let layers = &pkt["_source"]["layers"];
        let num: usize = layers["frame"]["frame.number"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .expect("frame.number");
        assert_eq!(num, i + 1, "tshark frame order");
        let text = layers.to_string();
        if let Some(at) = text.find("Lua Error") {
            panic!(
                "frame {num}: Lua error in the dissector: {}",
                &text[at..text.len().min(at + 200)]
            );
        }
        assert!(!text.contains("_ws.lua.error"), "frame {num}: Lua error");
        frames.push(layers.get("ferroce").map(|l| {
            let mut f = Fields::new();
            flatten(l, &mut f);
            f
        }));
    }
    frames
}

// ---------------------------------------------------------------------------------------------
// captures

/// What a frame is to the comparison.
enum Native<'a> {
    /// Not IPv4/UDP to or from port 4792.
    No,
    /// Native, but the capture holds less than the UDP length says (snaplen).
    Cut,
    /// The UDP payload, as the receiver gets it.
    Payload(&'a [u8]),
}

fn native_payload(f: &[u8]) -> Native<'_> {
    let parse = || {
        let mut at = 12;
        let mut ethertype = u16::from_be_bytes([*f.get(at)?, *f.get(at + 1)?]);
        while ethertype == 0x8100 {
            at += 4;
            ethertype = u16::from_be_bytes([*f.get(at)?, *f.get(at + 1)?]);
        }
        let ip = f.get(at + 2..)?;
        if ethertype != 0x0800 || ip.len() < 20 || ip[0] >> 4 != 4 || ip[9] != 17 {
            return None;
        }
        let udp = ip.get(usize::from(ip[0] & 0x0f) * 4..)?;
        if udp.len() < 8 {
            return None;
        }
        let port = |i: usize| u16::from_be_bytes([udp[i], udp[i + 1]]);
        if port(0) != wire::NATIVE_UDP_PORT && port(2) != wire::NATIVE_UDP_PORT {
            return None;
        }
        Some(match udp.get(8..usize::from(port(4)).max(8)) {
            Some(p) => Native::Payload(p),
            None => Native::Cut,
        })
    };
    parse().unwrap_or(Native::No)
}

/// Compare every frame of `pcap`; `label(i)` names frame `i` in messages. Returns the opcode
/// names the dissector decoded (valid packets), with counts, and the verdicts seen.
fn check_capture(
    what: &str,
    pcap: &Path,
    label: &dyn Fn(usize) -> String,
) -> (BTreeMap<String, u32>, BTreeMap<String, u32>) {
    let frames = ferroce_dataplane::pcap::read(pcap).expect("read pcap");
    let decoded = tshark_decode(pcap, pcap.parent().expect("pcap in a test directory"));
    assert_eq!(decoded.len(), frames.len(), "{what}: tshark frame count");
    let mut opcodes = BTreeMap::new();
    let mut verdicts = BTreeMap::new();
    let mut failures = Vec::new();
    for (i, ((_, frame), shown)) in frames.iter().zip(&decoded).enumerate() {
        let (payload, shown) = match (native_payload(frame), shown) {
            (Native::Payload(p), Some(s)) => (p, s),
            (Native::No, None) => continue,
            // Bytes missing from the capture: nothing to compare, but the dissector says so.
            (Native::Cut, Some(s)) if s.contains_key("ferroce.expert.snaplen") => {
                *verdicts.entry("CUT".to_string()).or_insert(0) += 1;
                continue;
            }
            (n, s) => {
                failures.push(format!(
                    "{}: native frame {}, ferroce layer {:?}",
                    label(i),
                    match n {
                        Native::No => "no",
                        Native::Cut => "cut short by the capture",
                        Native::Payload(_) => "yes",
                    },
                    s
                ));
                continue;
            }
        };
        let exp = expected(payload);
        let diffs = compare(shown, &exp);
        if !diffs.is_empty() {
            failures.push(format!(
                "{} ({} B): {}",
                label(i),
                payload.len(),
                diffs.join("; ")
            ));
        }
        *verdicts
            .entry(exp.drop.unwrap_or("OK").to_string())
            .or_insert(0) += 1;
        if let Ok(p) = Packet::parse(payload) {
            *opcodes.entry(format!("{:?}", p.opcode())).or_insert(0) += 1;
        } else if let Ok(m) = cm::CmMsg::parse(payload) {
            let name = format!("CM_{:?}", m.opcode()).to_uppercase();
            *opcodes.entry(name).or_insert(0) += 1;
        }
    }
    println!(
        "{what}: {} frames; valid opcodes {opcodes:?}; verdicts {verdicts:?}",
        frames.len()
    );
    assert!(
        failures.is_empty(),
        "{what}: dissector and codec disagree on {} frames:\n{}",
        failures.len(),
        failures[..failures.len().min(20)].join("\n")
    );
    (opcodes, verdicts)
}

/// One vector file: its name, the UDP payload and the `error:` it lists, if any.
struct Vector {
    name: String,
    bytes: Vec<u8>,
    error: Option<String>,
}

fn load_vectors() -> Vec<Vector> {
    load_vectors_from(vectors_dir())
}

fn load_vectors_from(dir: PathBuf) -> Vec<Vector> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("spec/vectors")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "vec"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(file).expect("read vector");
            let mut v = Vector {
                name: file.file_stem().unwrap().to_string_lossy().into_owned(),
                bytes: Vec::new(),
                error: None,
            };
            for line in text.lines() {
                let line = line.split('#').next().unwrap_or("").trim();
                match line.split_once(':').map(|(k, x)| (k.trim(), x.trim())) {
                    Some(("hex", h)) => v.bytes.extend(h.split_whitespace().map(|b| {
                        u8::from_str_radix(b, 16).unwrap_or_else(|_| panic!("{}: hex", v.name))
                    })),
                    Some(("error", e)) => {
                        v.error = Some(e.split_whitespace().next().unwrap_or("").to_string())
                    }
                    _ => {}
                }
            }
            v
        })
        .collect()
}

/// A simulated host that sends the given UDP payloads to port 4792, one datagram each, in order.
struct Replayer {
    ip: [u8; 4],
    out: std::vec::IntoIter<Vec<u8>>,
}

impl Host for Replayer {
    fn handle_datagram(&mut self, _now: Nanos, _port: usize, _d: Datagram) {}
    fn poll_transmit(&mut self, _now: Nanos) -> Option<Datagram> {
        let peer = [198, 18, 0, 2];
        let p = self.out.next()?;
        Some(Datagram::udp(
            self.ip,
            peer,
            49152,
            wire::NATIVE_UDP_PORT,
            p,
        ))
    }
    fn poll_timeout(&mut self) -> Option<Nanos> {
        None
    }
    fn handle_timeout(&mut self, _now: Nanos) {}
}

/// A pcap of `payloads` as UDP datagrams to port 4792, one frame each, in order, written by
/// the simulator's capture of a host that sends them.
fn replay_pcap(dir: &TempDir, name: &str, payloads: &[Vec<u8>]) -> PathBuf {
    let pcap = dir.0.join(format!("{name}.pcap"));
    let mut sim =
        topology::back_to_back(&TopologyConfig::default()).build_with(|id, ip| Replayer {
            ip,
            out: if id.0 == 0 {
                payloads.to_vec()
            } else {
                Vec::new()
            }
            .into_iter(),
        });
    sim.enable_pcap(HostId(0), &pcap).expect("pcap");
    sim.run_until(1_000_000_000);
    sim.flush_pcaps().expect("flush pcap");
    // The frames are the payloads, in order (the replaying host sends, nothing else does).
    let frames = ferroce_dataplane::pcap::read(&pcap).expect("read pcap");
    assert_eq!(frames.len(), payloads.len(), "{name}: frames");
    for (i, (p, (_, f))) in payloads.iter().zip(&frames).enumerate() {
        match native_payload(f) {
            Native::Payload(sent) => assert_eq!(sent, &p[..], "{name}: frame {}", i + 1),
            _ => panic!("{name}: frame {} is not the datagram sent", i + 1),
        }
    }
    pcap
}

#[test]
fn dissector_agrees_with_codec_on_every_vector() {
    if !have_tshark() {
        return;
    }
    let dir = TempDir::new("vectors");
    let vectors = load_vectors();
    assert!(vectors.len() >= 54, "only {} vectors", vectors.len());
    let payloads: Vec<Vec<u8>> = vectors.iter().map(|v| v.bytes.clone()).collect();
    let pcap = replay_pcap(&dir, "vectors", &payloads);
    let (opcodes, verdicts) = check_capture("vectors", &pcap, &|i| vectors[i].name.clone());

    // The vectors' own verdicts: the codec agrees with them (transport/tests/wire_vectors.rs
    // checks that in depth), so each invalid vector was flagged under its listed error.
    let shown = tshark_decode(&pcap, &dir.0);
    for (v, s) in vectors.iter().zip(&shown) {
        let drop = s
            .as_ref()
            .and_then(|f| f.get("ferroce.drop"))
            .and_then(|d| d.first())
            .cloned();
        assert_eq!(
            drop, v.error,
            "{}: dissector verdict vs the vector's error",
            v.name
        );
    }
    // The same frames cut to 64 bytes by the capture (editcap, tshark's companion): what is
    // missing from the capture is not missing from the packet, so the dissector must say the
    // capture is short rather than call them TRUNCATED; the frames that fit are compared.
    let cut = dir.0.join("vectors-snaplen.pcap");
    let st = Command::new("editcap")
        .args(["-F", "nsecpcap", "-s", "64"])
        .arg(&pcap)
        .arg(&cut)
        .status()
        .expect("run editcap");
    assert!(st.success(), "editcap failed");
    let (_, cut_verdicts) = check_capture("vectors cut to 64 bytes", &cut, &|i| {
        format!("{} cut by the capture", vectors[i].name)
    });
    assert!(cut_verdicts.contains_key("CUT"), "{cut_verdicts:?}");

    // RoCEv2 (UDP 4791) stays with Wireshark's InfiniBand dissector when the script is loaded.
    let rxe = vectors_dir().join("rxe-sample.pcap");
    assert!(tshark_decode(&rxe, &dir.0).iter().all(Option::is_none));
    let out = tshark_with_script(&dir.0)
        .arg("-r")
        .arg(&rxe)
        .args(["-T", "fields", "-e", "frame.protocols"])
        .output()
        .expect("run tshark");
    let protocols = String::from_utf8_lossy(&out.stdout);
    assert_eq!(protocols.lines().count(), 84, "rxe-sample.pcap frames");
    for l in protocols.lines() {
        assert!(l.contains(":udp:infiniband"), "rxe-sample.pcap frame {l}");
    }

    // Every opcode decoded from a valid packet and every error kind flagged.
    let assigned = (0..=255u8)
        .filter(|&v| Opcode::from_u8(v).is_some())
        .count();
    assert_eq!(opcodes.len(), assigned, "opcodes covered: {opcodes:?}");
    for k in [
        "OK",
        "TRUNCATED",
        "BAD_VERSION",
        "BAD_OPCODE",
        "BAD_CRC",
        "MALFORMED",
    ] {
        assert!(verdicts.contains_key(k), "no {k} among {verdicts:?}");
    }
}

/// Variants of every valid vector, to reach the §3 checks in every combination: each byte
/// with one bit flipped (all 8 bits in the base header, bit `offset % 8` elsewhere), once as
/// is (a bad CRC, or an earlier check when the header breaks) and once with the trailer
/// recomputed (so the flipped field meets checks 7-12); each byte plus and minus one, resealed
/// (the boundaries: a length one short of offset + payload, mtu 63, paths 0, reason 0 and 6);
/// every shorter length; and ACK_MULTI blocks with more than 4 SACK words.
#[test]
fn dissector_agrees_with_codec_on_mutated_vectors() {
    if !have_tshark() {
        return;
    }
    let dir = TempDir::new("mutated");
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    for v in load_vectors().iter().filter(|v| v.error.is_none()) {
        let n = v.bytes.len();
        let reseal = |b: &mut Vec<u8>| {
            let c = wire::crc32(&b[..n - wire::TRAILER_LEN]);
            b[n - wire::TRAILER_LEN..].copy_from_slice(&c.to_be_bytes());
        };
        for at in 0..n {
            let bits: Vec<u8> = if at < wire::BASE_LEN {
                (0..8).collect()
            } else {
                vec![(at % 8) as u8]
            };
            for bit in bits {
                let mut b = v.bytes.clone();
                b[at] ^= 1 << bit;
                cases.push((format!("{} byte {at} bit {bit}", v.name), b.clone()));
                if at < n - wire::TRAILER_LEN {
                    reseal(&mut b);
                    cases.push((format!("{} byte {at} bit {bit} resealed", v.name), b));
                }
            }
        }
        for at in 0..n - wire::TRAILER_LEN {
            for (d, what) in [(1u8, "+1"), (255, "-1")] {
                let mut b = v.bytes.clone();
                b[at] = b[at].wrapping_add(d);
                reseal(&mut b);
                cases.push((format!("{} byte {at} {what} resealed", v.name), b));
            }
        }
        for len in 0..n {
            cases.push((format!("{} cut to {len}", v.name), v.bytes[..len].to_vec()));
        }
        // ACK_MULTI: each block claiming 5..=8 SACK words with that many present, so only the
        // `words <= 4` rule of check 13 refuses it (the other mutations also break a length).
        if v.bytes.get(1) == Some(&(Opcode::AckMulti as u8)) {
            let mut at = wire::BASE_LEN + wire::ACK_MULTI_HEADER_LEN;
            while at + wire::ACK_BLOCK_LEN <= n - wire::TRAILER_LEN {
                let words = usize::from(v.bytes[at + 1]);
                let sack_end = at + wire::ACK_BLOCK_LEN + 8 * words;
                for w in 5..=8u8 {
                    let mut b = v.bytes[..sack_end].to_vec();
                    b[at + 1] = w;
                    b.resize(at + wire::ACK_BLOCK_LEN + 8 * usize::from(w), 0);
                    b.extend_from_slice(&v.bytes[sack_end..]);
                    let c = wire::crc32(&b[..b.len() - wire::TRAILER_LEN]);
                    let t = b.len() - wire::TRAILER_LEN;
                    b[t..].copy_from_slice(&c.to_be_bytes());
                    cases.push((format!("{} block at {at} with {w} words", v.name), b));
                }
                at = sack_end;
            }
        }
    }
    let payloads: Vec<Vec<u8>> = cases.iter().map(|(_, b)| b.clone()).collect();
    let pcap = replay_pcap(&dir, "mutated", &payloads);
    let (_, verdicts) = check_capture("mutated vectors", &pcap, &|i| cases[i].0.clone());
    for k in [
        "OK",
        "TRUNCATED",
        "BAD_VERSION",
        "BAD_OPCODE",
        "BAD_CRC",
        "MALFORMED",
    ] {
        assert!(verdicts.contains_key(k), "no {k} among {verdicts:?}");
    }
}

/// The connection manager's packets (spec/cm.md, opcodes 0x40-0x47): every vector of
/// spec/vectors/cm and mutations of the valid ones (every bit flipped, as is and resealed;
/// every byte +1 and -1, resealed; every truncation) through the dissector and the CM codec
/// (`transport::cm`), which must agree on every field and verdict.
#[test]
fn dissector_agrees_with_the_cm_codec() {
    if !have_tshark() {
        return;
    }
    let dir = TempDir::new("cm");
    let vectors = load_vectors_from(vectors_dir().join("cm"));
    assert!(vectors.len() >= 15, "only {} CM vectors", vectors.len());
    let mut cases: Vec<(String, Vec<u8>)> = vectors
        .iter()
        .map(|v| (v.name.clone(), v.bytes.clone()))
        .collect();
    for v in vectors.iter().filter(|v| v.error.is_none()) {
        let n = v.bytes.len();
        let reseal = |b: &mut Vec<u8>| {
            let c = wire::crc32(&b[..n - wire::TRAILER_LEN]);
            b[n - wire::TRAILER_LEN..].copy_from_slice(&c.to_be_bytes());
        };
        for at in 0..n {
            for bit in 0..8 {
                let mut b = v.bytes.clone();
                b[at] ^= 1 << bit;
                cases.push((format!("{} byte {at} bit {bit}", v.name), b.clone()));
                if at < n - wire::TRAILER_LEN {
                    reseal(&mut b);
                    cases.push((format!("{} byte {at} bit {bit} resealed", v.name), b));
                }
            }
        }
        for at in 0..n - wire::TRAILER_LEN {
            for (d, what) in [(1u8, "+1"), (255, "-1")] {
                let mut b = v.bytes.clone();
                b[at] = b[at].wrapping_add(d);
                reseal(&mut b);
                cases.push((format!("{} byte {at} {what} resealed", v.name), b));
            }
        }
        for len in 0..n {
            cases.push((format!("{} cut to {len}", v.name), v.bytes[..len].to_vec()));
        }
    }
    let payloads: Vec<Vec<u8>> = cases.iter().map(|(_, b)| b.clone()).collect();
    let pcap = replay_pcap(&dir, "cm", &payloads);
    let (opcodes, verdicts) = check_capture("CM vectors", &pcap, &|i| cases[i].0.clone());
    let shown = tshark_decode(&pcap, &dir.0);
    for (v, s) in vectors.iter().zip(&shown) {
        let drop = s
            .as_ref()
            .and_then(|f| f.get("ferroce.drop"))
            .and_then(|d| d.first())
            .cloned();
        assert_eq!(
            drop, v.error,
            "{}: dissector verdict vs the vector's error",
            v.name
        );
    }
    for name in [
        "CM_REQ",
        "CM_REP",
        "CM_RTU",
        "CM_REJ",
        "CM_DREQ",
        "CM_DREP",
        "CM_SIDRREQ",
        "CM_SIDRREP",
    ] {
        assert!(
            opcodes.contains_key(name),
            "{name} not decoded: {opcodes:?}"
        );
    }
    for k in [
        "OK",
        "TRUNCATED",
        "BAD_VERSION",
        "BAD_OPCODE",
        "BAD_CRC",
        "MALFORMED",
    ] {
        assert!(verdicts.contains_key(k), "no {k} among {verdicts:?}");
    }
}

#[test]
fn dissector_agrees_with_codec_on_a_simulator_capture() {
    if !have_tshark() {
        return;
    }
    let dir = TempDir::new("sim");
    let pcap = dir.0.join("sim.pcap");
    let mut endpoint = ferroce_transport::EndpointConfig::default();
    endpoint.conn.paths = 4;
    let run = TwoHostRun {
        fabric: Fabric::LeafSpine { spines: 4 },
        endpoint,
        workload: WorkloadSpec {
            streams: 2,
            messages: 80,
            sizes: vec![1, 100, 4096, 4097, 20_000],
            ops: OpKind::ALL.to_vec(),
            depth: 8,
            // One receive posted at a time: a SEND that overtakes its predecessor on another
            // path finds none (RNR NACK).
            recv_depth: 1,
            ..Default::default()
        },
        // Loss (resends, SACK holes, probes), corruption (bad CRCs and worse on the wire) and
        // CE marks, on both hosts' uplinks.
        faults: FaultConfig {
            loss: 0.02,
            corrupt: 0.02,
            ecn_mark: 0.05,
            ..FaultConfig::NONE
        },
        seed: 5,
        ..Default::default()
    };
    let (mut sim, c, s) = run.build();
    sim.enable_pcap(c, &pcap).expect("pcap");
    let keys = sim.host_mut(s).make_server(&run.workload);
    let sip = sim.host_ip(s);
    let now = sim.now();
    sim.host_mut(c).start_client(&run.workload, sip, keys, now);
    sim.wake(c);
    let done = sim.run_while(run.limit_ns, |sim| !sim.host(c).client_done());
    let settle = sim.now() + 200_000;
    sim.run_until(settle);
    sim.flush_pcaps().expect("flush pcap");
    assert!(done, "simulated workload did not complete");

    let (opcodes, verdicts) =
        check_capture("simulator", &pcap, &|i| format!("sim frame {}", i + 1));
    for op in [
        "Open",
        "OpenAck",
        "Send",
        "SendImm",
        "Write",
        "WriteImm",
        "ReadReq",
        "ReadResp",
        "FetchAdd",
        "CmpSwap",
        "AtomicResp",
        "Ack",
        "Nack",
    ] {
        assert!(opcodes.contains_key(op), "no {op} in the simulator capture");
    }
    // Corruption flips one bit of a payload: mostly BAD_CRC, sometimes an earlier check.
    assert!(
        verdicts.keys().any(|k| k != "OK"),
        "no corrupted packet captured: {verdicts:?}"
    );
}

/// The EAL's runtime directory of this process, removed (only if empty) on drop.
struct EalRuntimeDir(PathBuf);

impl Drop for EalRuntimeDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn dissector_agrees_with_codec_on_a_dpdk_capture() {
    if !have_tshark() {
        return;
    }
    if !ferroce_dataplane::netns::is_root() {
        eprintln!("SKIPPED dissector_agrees_with_codec_on_a_dpdk_capture: DPDK needs root");
        return;
    }
    use ferroce_dataplane::{app, bench, config, dpdk::Eal, engine};
    use std::net::Ipv4Addr;
    use std::time::Duration;

    let dir = TempDir::new("dpdk");
    let pcap = dir.0.join("dpdk.pcap");
    // The dataplane tests' EAL: no hugepages, no PCI, no shared config, this process only;
    // without telemetry its runtime directory (/var/run/dpdk/<file prefix>) stays empty, so
    // it can be removed at the end.
    let mut args = vec!["ferroce-dissector-test".to_string()];
    args.extend(config::default_eal_args());
    args.push("--no-telemetry".into());
    let _runtime_dir =
        EalRuntimeDir(Path::new("/var/run/dpdk").join(format!("ferroce-{}", std::process::id())));
    let eal = Eal::init(args).expect("EAL init");
    let (ip_a, ip_b) = (Ipv4Addr::new(198, 18, 1, 11), Ipv4Addr::new(198, 18, 1, 12));
    let pa = engine::EngineParams {
        ip: ip_a,
        pcap: Some(pcap.clone()),
        // Whole frames (the engine's default keeps 256 bytes), so every payload is compared.
        snaplen: 65_535,
        seed: 11,
        ..Default::default()
    };
    let pb = engine::EngineParams {
        ip: ip_b,
        seed: 12,
        ..Default::default()
    };
    let mut ecfg = ferroce_transport::EndpointConfig {
        line_rate_mbps: 10_000,
        ..Default::default()
    };
    ecfg.conn.min_rto_ns = 1_000_000;
    ecfg.conn.initial_rto_ns = 2_000_000;
    let ((ea, ha), (eb, hb)) =
        bench::ring_engine_pair(&eal, 1500, 8191, pa, pb, ecfg).expect("engines");
    let job = eal
        .launch(eal.worker_lcores()[0], move || {
            engine::run_together(vec![ea, eb])
        })
        .expect("launch engines");
    let spec = WorkloadSpec {
        streams: 2,
        messages: 20,
        sizes: vec![1, 1000, 1409, 4097],
        ops: OpKind::ALL.to_vec(),
        depth: 4,
        recv_depth: 8,
        ..Default::default()
    };
    let (cr, sr) = app::run_pair(&ha, &hb, ip_a, ip_b, &spec, Duration::from_secs(30));
    ha.stop();
    hb.stop();
    let _ = job.join();
    assert!(
        cr.ok && sr.ok,
        "DPDK workload: {:?} {:?}",
        cr.errors,
        sr.errors
    );

    let (opcodes, _) = check_capture("dpdk", &pcap, &|i| format!("dpdk frame {}", i + 1));
    for op in [
        "Open", "OpenAck", "Send", "Write", "ReadReq", "ReadResp", "Ack",
    ] {
        assert!(opcodes.contains_key(op), "no {op} in the DPDK capture");
    }
}
