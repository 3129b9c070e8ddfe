//! The IBTA CM MAD codec (`roce::cm::wire`) against spec/vectors/roce_cm/*.vec, written from
//! the IBTA tables by `gen_roce_cm.py` (not by the codec). For every valid vector: parsing
//! gives exactly the listed fields, and emitting the parsed MAD gives the bytes back. For
//! every invalid one: parsing fails with the listed error.

use ferroce_transport::roce::cm::wire::{CmAttr, CmBody, CmMad, CmPath, CmaHdr, MadError};
use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const MIN_VALID: usize = 10;
const MIN_INVALID: usize = 8;

#[derive(Debug, PartialEq, Eq)]
enum Val {
    Int(u64),
    Bytes(Vec<u8>),
    Text(String),
}

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec/vectors/roce_cm")
}

fn is_bytes_key(k: &str) -> bool {
    k == "private_data" || k == "ari" || k == "info" || k.ends_with("_gid")
}

fn hex_bytes(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2), "odd hex {s:?}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

fn value(k: &str, v: &str) -> Val {
    if is_bytes_key(k) {
        return Val::Bytes(hex_bytes(v));
    }
    if let Some(h) = v.strip_prefix("0x") {
        return Val::Int(u64::from_str_radix(h, 16).expect("hex number"));
    }
    match v.parse::<u64>() {
        Ok(n) => Val::Int(n),
        Err(_) => Val::Text(v.to_string()),
    }
}

struct Vector {
    name: String,
    fields: BTreeMap<String, Val>,
    bytes: Vec<u8>,
}

fn load(file: &Path) -> Vector {
    let text = fs::read_to_string(file).unwrap();
    let mut fields = BTreeMap::new();
    let mut bytes = Vec::new();
    for line in text.lines() {
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
            let old = fields.insert(k.to_string(), value(k, v));
            assert!(old.is_none(), "{}: {k} twice", file.display());
        }
    }
    let name = match fields.remove("name") {
        Some(Val::Text(n)) => n,
        other => panic!("{}: name {other:?}", file.display()),
    };
    assert_eq!(
        file.file_stem().unwrap().to_str().unwrap(),
        name,
        "name is the file name"
    );
    Vector {
        name,
        fields,
        bytes,
    }
}

fn trimmed(pd: &[u8]) -> Vec<u8> {
    let n = pd.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    pd[..n].to_vec()
}

/// Every field of a parsed MAD, named as the vectors name them.
fn fields_of(m: &CmMad) -> BTreeMap<String, Val> {
    let mut f = BTreeMap::new();
    let mut int = |k: &str, v: u64| {
        f.insert(k.to_string(), Val::Int(v));
    };
    int("tid", m.hdr.tid);
    int("status", m.hdr.status as u64);
    int("attr_mod", m.hdr.attr_mod as u64);
    let mut out: Vec<(String, Val)> = Vec::new();
    let mut i = |k: &str, v: u64| out.push((k.to_string(), Val::Int(v)));
    let attr = match m.attr() {
        CmAttr::Req => "REQ",
        CmAttr::Mra => "MRA",
        CmAttr::Rej => "REJ",
        CmAttr::Rep => "REP",
        CmAttr::Rtu => "RTU",
        CmAttr::Dreq => "DREQ",
        CmAttr::Drep => "DREP",
        CmAttr::SidrReq => "SIDR_REQ",
        CmAttr::SidrRep => "SIDR_REP",
    };
    let mut gids: Vec<(String, Val)> = Vec::new();
    match &m.body {
        CmBody::Req(r) => {
            i("local_comm_id", r.local_comm_id as u64);
            i("service_id", r.service_id);
            i("local_ca_guid", r.local_ca_guid);
            i("local_qkey", r.local_qkey as u64);
            i("local_qpn", r.local_qpn as u64);
            i("responder_resources", r.responder_resources as u64);
            i("local_eecn", r.local_eecn as u64);
            i("initiator_depth", r.initiator_depth as u64);
            i("remote_eecn", r.remote_eecn as u64);
            i(
                "remote_cm_response_timeout",
                r.remote_cm_response_timeout as u64,
            );
            i("transport_service_type", r.transport_service_type as u64);
            i("end_to_end_flow_control", r.end_to_end_flow_control as u64);
            i("starting_psn", r.starting_psn as u64);
            i(
                "local_cm_response_timeout",
                r.local_cm_response_timeout as u64,
            );
            i("retry_count", r.retry_count as u64);
            i("pkey", r.pkey as u64);
            i("path_mtu", r.path_mtu as u64);
            i("rdc_exists", r.rdc_exists as u64);
            i("rnr_retry_count", r.rnr_retry_count as u64);
            i("max_cm_retries", r.max_cm_retries as u64);
            i("srq", r.srq as u64);
            i("extended_transport_type", r.extended_transport_type as u64);
            for (p, path) in [("primary_", &r.primary), ("alternate_", &r.alternate)] {
                let CmPath {
                    local_lid,
                    remote_lid,
                    local_gid,
                    remote_gid,
                    flow_label,
                    packet_rate,
                    traffic_class,
                    hop_limit,
                    sl,
                    subnet_local,
                    local_ack_timeout,
                } = *path;
                i(&format!("{p}local_lid"), local_lid as u64);
                i(&format!("{p}remote_lid"), remote_lid as u64);
                gids.push((format!("{p}local_gid"), Val::Bytes(local_gid.to_vec())));
                gids.push((format!("{p}remote_gid"), Val::Bytes(remote_gid.to_vec())));
                i(&format!("{p}flow_label"), flow_label as u64);
                i(&format!("{p}packet_rate"), packet_rate as u64);
                i(&format!("{p}traffic_class"), traffic_class as u64);
                i(&format!("{p}hop_limit"), hop_limit as u64);
                i(&format!("{p}sl"), sl as u64);
                i(&format!("{p}subnet_local"), subnet_local as u64);
                i(&format!("{p}local_ack_timeout"), local_ack_timeout as u64);
            }
            i("sap_supported", r.sap_supported as u64);
            if let Ok(h) = CmaHdr::parse(&r.private_data) {
                i("cma_version", 0);
                i("cma_ip_version", 4);
                i("cma_src_port", h.src_port as u64);
                gids.push(("cma_src_ip".into(), Val::Text(h.src.to_string())));
                gids.push(("cma_dst_ip".into(), Val::Text(h.dst.to_string())));
            }
        }
        CmBody::Mra(r) => {
            i("local_comm_id", r.local_comm_id as u64);
            i("remote_comm_id", r.remote_comm_id as u64);
            i("message_mraed", r.message_mraed as u64);
            i("service_timeout", r.service_timeout as u64);
        }
        CmBody::Rej(r) => {
            i("local_comm_id", r.local_comm_id as u64);
            i("remote_comm_id", r.remote_comm_id as u64);
            i("message_rejected", r.message_rejected as u64);
            i("rejected_info_length", r.ari.len() as u64);
            i("reason", r.reason as u64);
            gids.push(("ari".into(), Val::Bytes(r.ari.clone())));
        }
        CmBody::Rep(r) => {
            i("local_comm_id", r.local_comm_id as u64);
            i("remote_comm_id", r.remote_comm_id as u64);
            i("local_qkey", r.local_qkey as u64);
            i("local_qpn", r.local_qpn as u64);
            i("local_eecn", r.local_eecn as u64);
            i("starting_psn", r.starting_psn as u64);
            i("responder_resources", r.responder_resources as u64);
            i("initiator_depth", r.initiator_depth as u64);
            i("target_ack_delay", r.target_ack_delay as u64);
            i("failover_accepted", r.failover_accepted as u64);
            i("end_to_end_flow_control", r.end_to_end_flow_control as u64);
            i("rnr_retry_count", r.rnr_retry_count as u64);
            i("srq", r.srq as u64);
            i("local_ca_guid", r.local_ca_guid);
        }
        CmBody::Rtu(r) | CmBody::Drep(r) => {
            i("local_comm_id", r.local_comm_id as u64);
            i("remote_comm_id", r.remote_comm_id as u64);
        }
        CmBody::Dreq(r) => {
            i("local_comm_id", r.local_comm_id as u64);
            i("remote_comm_id", r.remote_comm_id as u64);
            i("remote_qpn_eecn", r.remote_qpn_eecn as u64);
        }
        CmBody::SidrReq(r) => {
            i("request_id", r.request_id as u64);
            i("pkey", r.pkey as u64);
            i("service_id", r.service_id);
            if let Ok(h) = CmaHdr::parse(&r.private_data) {
                i("cma_version", 0);
                i("cma_ip_version", 4);
                i("cma_src_port", h.src_port as u64);
                gids.push(("cma_src_ip".into(), Val::Text(h.src.to_string())));
                gids.push(("cma_dst_ip".into(), Val::Text(h.dst.to_string())));
            }
        }
        CmBody::SidrRep(r) => {
            i("request_id", r.request_id as u64);
            i("sidr_status", r.status as u64);
            i("info_length", r.info.len() as u64);
            i("qpn", r.qpn as u64);
            i("service_id", r.service_id);
            i("qkey", r.qkey as u64);
            gids.push(("info".into(), Val::Bytes(r.info.clone())));
        }
    }
    f.extend(out);
    f.extend(gids);
    f.insert("attr".into(), Val::Text(attr.into()));
    f.insert("private_data".into(), Val::Bytes(trimmed(m.private_data())));
    f
}

fn error_name(e: MadError) -> &'static str {
    match e {
        MadError::Truncated => "TRUNCATED",
        MadError::BadBaseVersion(_) => "BAD_BASE_VERSION",
        MadError::NotCm(_) => "NOT_CM",
        MadError::BadClassVersion(_) => "BAD_CLASS_VERSION",
        MadError::BadMethod(_) => "BAD_METHOD",
        MadError::UnsupportedAttribute(_) => "UNSUPPORTED_ATTRIBUTE",
        MadError::Malformed(_) => "MALFORMED",
    }
}

#[test]
fn roce_cm_vectors() {
    let mut files: Vec<PathBuf> = fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "vec"))
        .collect();
    files.sort();
    let (mut valid, mut invalid) = (0, 0);
    let mut attrs = BTreeSet::new();
    let mut errors = BTreeSet::new();
    for file in &files {
        let mut v = load(file);
        let parsed = CmMad::parse(&v.bytes);
        if let Some(err) = v.fields.remove("error") {
            let Val::Text(err) = err else {
                panic!("{}: error {err:?}", v.name)
            };
            match parsed {
                Ok(m) => panic!("{}: parsed, expected {err}: {m:?}", v.name),
                Err(e) => assert_eq!(error_name(e), err, "{}: {e:?}", v.name),
            }
            errors.insert(err);
            invalid += 1;
            continue;
        }
        let m = parsed.unwrap_or_else(|e| panic!("{}: {e:?}", v.name));
        let got = fields_of(&m);
        assert_eq!(got, v.fields, "{}: fields", v.name);
        assert_eq!(
            m.emit().expect("emit").as_slice(),
            v.bytes.as_slice(),
            "{}: emit",
            v.name
        );
        attrs.insert(m.attr() as u16);
        valid += 1;
    }
    assert!(
        valid >= MIN_VALID && invalid >= MIN_INVALID,
        "{valid} valid, {invalid} invalid"
    );
    assert_eq!(
        attrs.len(),
        9,
        "every attribute has a valid vector: {attrs:?}"
    );
    for e in [
        "TRUNCATED",
        "BAD_BASE_VERSION",
        "NOT_CM",
        "BAD_CLASS_VERSION",
        "BAD_METHOD",
        "UNSUPPORTED_ATTRIBUTE",
        "MALFORMED",
    ] {
        assert!(errors.contains(e), "no vector for {e}");
    }
}

/// Every prefix of every valid vector and every byte flipped: an error or a MAD, never a panic.
#[test]
fn truncations_and_flips_never_panic() {
    for e in fs::read_dir(dir()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "vec") {
            continue;
        }
        let v = load(&p);
        for n in 0..v.bytes.len() {
            assert!(CmMad::parse(&v.bytes[..n]).is_err());
        }
        for i in 0..v.bytes.len() {
            let mut b = v.bytes.clone();
            b[i] ^= 0xff;
            if let Ok(m) = CmMad::parse(&b) {
                let _ = m.emit();
            }
        }
    }
}

#[test]
fn service_id_gid_and_cma_hdr() {
    use ferroce_transport::roce::cm::wire::*;
    use std::net::Ipv4Addr;
    assert_eq!(ip_service_id(PS_TCP, 7174), 0x0000_0000_0106_1c06);
    assert_eq!(
        parse_ip_service_id(0x0000_0000_0106_1c06),
        Some((PS_TCP, 7174))
    );
    assert_eq!(parse_ip_service_id(0x0002_c903_0000_0001), None);
    let a = Ipv4Addr::new(198, 18, 0, 11);
    assert_eq!(gid_ipv4(&ipv4_gid(a)), Some(a));
    assert_eq!(gid_ipv4(&[0xfe; 16]), None);
    let h = CmaHdr {
        src_port: 40001,
        src: a,
        dst: Ipv4Addr::new(198, 18, 0, 12),
    };
    assert_eq!(CmaHdr::parse(&h.emit()), Ok(h));
    let mut bad = h.emit();
    bad[1] = 0x60;
    assert!(CmaHdr::parse(&bad).is_err());
    assert!(CmaHdr::parse(&bad[..35]).is_err());
}
