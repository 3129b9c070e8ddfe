//! The RoCEv2 codec's XRC opcodes and XRCETH (`roce::wire`) against
//! spec/vectors/roce_xrc/*.vec, written from the IBTA layouts by `gen_roce_xrc.py` (not by
//! the codec). For every valid vector: parsing gives exactly the listed fields (a header not
//! listed must be absent), the ICRC over the canonical headers is valid, and emitting the
//! parsed packet gives the bytes back. For every invalid one: parsing fails with the listed
//! error.

use ferroce_transport::roce::wire::{Flow, Packet, PacketView, WireError, UDP_PORT, XRC_PREFIX};
use std::collections::BTreeMap;
use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec/vectors/roce_xrc")
}

struct Vector {
    file: String,
    fields: BTreeMap<String, String>,
    bytes: Vec<u8>,
}

fn load(file: &Path) -> Vector {
    let mut fields = BTreeMap::new();
    let mut bytes = Vec::new();
    for line in fs::read_to_string(file).unwrap().lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (k, v) = line.split_once(':').expect("key: value");
        let (k, v) = (k.trim(), v.trim());
        if k == "hex" {
            bytes.extend(
                v.split_whitespace()
                    .map(|t| u8::from_str_radix(t, 16).unwrap()),
            );
        } else {
            assert!(
                fields.insert(k.to_string(), v.to_string()).is_none(),
                "{}: {k} twice",
                file.display()
            );
        }
    }
    Vector {
        file: file.display().to_string(),
        fields,
        bytes,
    }
}

fn num(s: &str) -> u64 {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).unwrap(),
        None => s.parse().unwrap(),
    }
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

// checks: [ROCE-9] [ROCE-10]
#[test]
fn xrc_vectors_parse_emit_and_fail_as_listed() {
    let mut files: Vec<PathBuf> = fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "vec"))
        .collect();
    files.sort();
    let (mut valid, mut invalid) = (0, 0);
    for f in &files {
        let v = load(f);
        let name = &v.file;
        let g = |k: &str| v.fields.get(k).map(|s| num(s));
        let ip = |k: &str| v.fields[k].parse::<Ipv4Addr>().unwrap();
        let flow = Flow {
            src: ip("src"),
            dst: ip("dst"),
            src_port: g("sport").unwrap() as u16,
            dst_port: UDP_PORT,
        };
        if let Some(e) = v.fields.get("error") {
            let got = Packet::parse(&v.bytes).expect_err(name);
            let ok = matches!(
                (e.as_str(), got),
                ("UNKNOWN_OPCODE", WireError::UnknownOpcode(_))
                    | ("TRUNCATED", WireError::Truncated)
                    | ("MALFORMED", WireError::Malformed(_))
            );
            assert!(ok, "{name}: {got:?}, listed {e}");
            invalid += 1;
            continue;
        }
        let p = Packet::parse(&v.bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        let b = p.bth;
        assert!(b.xrc && !b.uc, "{name}");
        assert_eq!(
            (b.opcode as u8 | XRC_PREFIX) as u64,
            g("opcode").unwrap(),
            "{name}"
        );
        assert_eq!(b.dest_qpn as u64, g("dest_qp").unwrap(), "{name}");
        assert_eq!(b.psn as u64, g("psn").unwrap(), "{name}");
        assert_eq!(b.ack_req as u64, g("ack_req").unwrap(), "{name}");
        let e = p.ext;
        assert_eq!(
            e.xrceth.map(|x| x.srqn as u64),
            g("xrc_srqn"),
            "{name}: XRCETH"
        );
        assert_eq!(e.xrceth.map_or(0, |x| x.resv), 0);
        assert_eq!(e.reth.map(|r| r.va), g("reth_va"), "{name}");
        assert_eq!(e.reth.map(|r| r.rkey as u64), g("reth_rkey"), "{name}");
        assert_eq!(e.reth.map(|r| r.dma_len as u64), g("reth_len"), "{name}");
        assert_eq!(e.atomic.map(|a| a.va), g("atomic_va"), "{name}");
        assert_eq!(e.atomic.map(|a| a.rkey as u64), g("atomic_rkey"), "{name}");
        assert_eq!(e.atomic.map(|a| a.swap_add), g("atomic_swap_add"), "{name}");
        assert_eq!(e.atomic.map(|a| a.compare), g("atomic_compare"), "{name}");
        assert_eq!(
            e.aeth.map(|a| a.syndrome.to_u8() as u64),
            g("aeth_syndrome"),
            "{name}"
        );
        assert_eq!(e.aeth.map(|a| a.msn as u64), g("aeth_msn"), "{name}");
        assert_eq!(e.atomic_ack, g("atomic_ack"), "{name}");
        assert_eq!(e.imm.map(u64::from), g("imm"), "{name}");
        assert_eq!(e.ieth.map(u64::from), g("ieth"), "{name}");
        assert_eq!((e.deth, e.cnp), (None, None), "{name}");
        assert_eq!(p.payload, &hex(&v.fields["payload"])[..], "{name}");
        let view = PacketView::new_checked(&v.bytes[..]).unwrap();
        assert!(view.icrc_ok_canonical(&flow), "{name}: ICRC");
        let mut buf = vec![0u8; v.bytes.len() + 16];
        let n = p.emit_canonical(&mut buf, &flow).unwrap();
        assert_eq!(&buf[..n], &v.bytes[..], "{name}: emit");
        valid += 1;
    }
    assert!(
        valid >= 12 && invalid >= 4,
        "{valid} valid, {invalid} invalid"
    );
}
