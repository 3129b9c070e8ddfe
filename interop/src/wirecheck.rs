//! Wire checks of interop captures: every RoCEv2 packet is decoded by ferroce's codec
//! (`ferroce_transport::roce::wire`) and by `tshark` (its InfiniBand dissector on UDP 4791);
//! both must agree on opcode, destination QP and PSN (and, for UD, the DETH's Q_Key and source
//! QP; for a CM MAD on QP1, its management class, attribute and TID, which ferroce's CM codec
//! `roce::cm::wire` must parse; for an XRC request, its XRCETH, which Wireshark 4.0 does not
//! dissect but shows first in the bytes it leaves undecoded), and every ICRC must be valid over the
//! packet's real IPv4/UDP headers. The report also counts packets whose ICRC would fail the
//! canonical-header check (IPv4 identification 0), which is what ferroce's
//! `RoceEndpoint::handle_datagram` applies.

use crate::util::cmd_output;
use ferroce_transport::roce::cm::wire::{self as cmw, CmAttr};
use ferroce_transport::roce::wire::{self, Flow, PacketView};

fn attr_name(a: CmAttr) -> &'static str {
    match a {
        CmAttr::Req => "REQ",
        CmAttr::Mra => "MRA",
        CmAttr::Rej => "REJ",
        CmAttr::Rep => "REP",
        CmAttr::Rtu => "RTU",
        CmAttr::Dreq => "DREQ",
        CmAttr::Drep => "DREP",
        CmAttr::SidrReq => "SIDR_REQ",
        CmAttr::SidrRep => "SIDR_REP",
    }
}
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Ethernet frames of a pcap or pcapng file (Ethernet link type assumed).
pub fn read_frames(path: &Path) -> Result<Vec<Vec<u8>>, String> {
    let d = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let u32le = |b: &[u8], i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    if d.len() < 24 {
        return Err(format!("{}: not a capture", path.display()));
    }
    let mut out = Vec::new();
    match u32le(&d, 0) {
        0x0a0d_0d0a => {
            let mut i = 0;
            while i + 12 <= d.len() {
                let (bt, bl) = (u32le(&d, i), u32le(&d, i + 4) as usize);
                if bl < 12 || i + bl > d.len() {
                    break;
                }
                if bt == 6 && bl >= 28 {
                    let cl = u32le(&d, i + 20) as usize;
                    out.push(d[i + 28..(i + 28 + cl).min(i + bl)].to_vec());
                }
                i += bl;
            }
        }
        0xa1b2_c3d4 | 0xa1b2_3c4d => {
            let mut i = 24;
            while i + 16 <= d.len() {
                let cl = u32le(&d, i + 8) as usize;
                let end = (i + 16 + cl).min(d.len());
                out.push(d[i + 16..end].to_vec());
                i += 16 + cl;
            }
        }
        m => return Err(format!("{}: unknown capture magic {m:#x}", path.display())),
    }
    Ok(out)
}

/// One RoCEv2 packet as ferroce's codec sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub ip_id: u16,
    pub opcode: u8,
    pub dest_qpn: u32,
    pub psn: u32,
    /// UD: the DETH's (Q_Key, source QP).
    pub deth: Option<(u32, u32)>,
    /// XRC request: the XRCETH's 4 bytes.
    pub xrceth: Option<[u8; 4]>,
    /// A MAD to QP1 (UD): (management class, attribute ID, TID) of its header, and what
    /// ferroce's CM codec made of it (`Err` for a CM MAD it rejects).
    pub mad: Option<(u8, u16, u64)>,
    pub cm: Option<Result<&'static str, String>>,
    /// ICRC valid over the real IPv4/UDP headers.
    pub icrc_ok: bool,
    /// ICRC valid over ferroce's canonical headers (identification 0, DF).
    pub icrc_canonical_ok: bool,
    /// The codec rejected it (the error), or `None`.
    pub error: Option<String>,
}

/// Decode every IPv4/UDP-4791 frame with ferroce's codec.
pub fn decode(frames: &[Vec<u8>]) -> Vec<Decoded> {
    let mut v = Vec::new();
    for f in frames {
        if f.len() < 14 + 20 + 8 || f[12..14] != [0x08, 0x00] || f[14] >> 4 != 4 || f[23] != 17 {
            continue;
        }
        let ihl = (f[14] & 0x0f) as usize * 4;
        let (ip, rest) = (&f[14..14 + ihl], &f[14 + ihl..]);
        if rest.len() < 8 || u16::from_be_bytes([rest[2], rest[3]]) != wire::UDP_PORT {
            continue;
        }
        let udp = &rest[..8];
        let ulen = (u16::from_be_bytes([udp[4], udp[5]]) as usize).min(rest.len());
        let payload = &rest[8..ulen.max(8)];
        let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
        let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
        let ip_id = u16::from_be_bytes([ip[4], ip[5]]);
        let mut d = Decoded {
            src,
            dst,
            ip_id,
            opcode: 0,
            dest_qpn: 0,
            psn: 0,
            deth: None,
            xrceth: None,
            mad: None,
            cm: None,
            icrc_ok: false,
            icrc_canonical_ok: false,
            error: None,
        };
        match PacketView::new_checked(payload) {
            Ok(p) => {
                // The byte on the wire, transport prefix included (UC's 0x20, XRC's 0xa0),
                // as tshark reports it.
                d.opcode = if p.is_xrc() {
                    p.opcode() as u8 | wire::XRC_PREFIX
                } else {
                    p.opcode().encode(p.is_uc())
                };
                d.dest_qpn = p.dest_qpn();
                d.psn = p.psn();
                let parsed = wire::Packet::parse(payload).ok();
                d.deth = parsed
                    .as_ref()
                    .and_then(|q| q.ext.deth)
                    .map(|x| (x.qkey, x.src_qpn));
                d.xrceth = parsed
                    .as_ref()
                    .and_then(|q| q.ext.xrceth)
                    .map(|x| x.to_bytes());
                if let Some(q) = parsed.filter(|q| q.ext.deth.is_some() && q.bth.dest_qpn == 1) {
                    let m = q.payload;
                    if m.len() >= 24 {
                        let tid = u64::from_be_bytes(m[8..16].try_into().unwrap_or_default());
                        d.mad = Some((m[1], u16::from_be_bytes([m[16], m[17]]), tid));
                        if m[1] == cmw::MGMT_CLASS_CM {
                            d.cm = Some(
                                cmw::CmMad::parse(m)
                                    .map(|c| attr_name(c.attr()))
                                    .map_err(|e| format!("{e:?}")),
                            );
                        }
                    }
                }
                d.icrc_ok = p.icrc_ok(ip, udp);
                let flow = Flow {
                    src,
                    dst,
                    src_port: u16::from_be_bytes([udp[0], udp[1]]),
                    dst_port: wire::UDP_PORT,
                };
                d.icrc_canonical_ok = p.icrc_ok_canonical(&flow);
            }
            Err(e) => d.error = Some(format!("{e:?}")),
        }
        v.push(d);
    }
    v
}

/// One packet as tshark's InfiniBand dissector decodes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TsharkPacket {
    pub opcode: u8,
    pub dest_qpn: u32,
    pub psn: u32,
    /// DETH (Q_Key, source QP) when the dissector found one.
    pub deth: Option<(u32, u32)>,
    /// MAD header (management class, attribute ID, TID) when the dissector found one.
    pub mad: Option<(u8, u16, u64)>,
    /// The first 4 bytes of what the dissector left undecoded ("Unknown/Vendor Specific
    /// Data": Wireshark 4.0 leaves everything after an XRC packet's BTH so).
    pub undecoded: Option<[u8; 4]>,
}

/// Every InfiniBand packet per tshark, in capture order.
pub fn tshark_decode(path: &Path) -> Result<Vec<TsharkPacket>, String> {
    let out = cmd_output(
        Command::new("tshark")
            .arg("-r")
            .arg(path)
            .args([
                "-d",
                "udp.port==4791,infiniband",
                "-Y",
                "infiniband",
                "-T",
                "fields",
            ])
            .args([
                "-e",
                "infiniband.bth.opcode",
                "-e",
                "infiniband.bth.destqp",
                "-e",
                "infiniband.bth.psn",
                "-e",
                "infiniband.deth.q_key",
                "-e",
                "infiniband.deth.srcqp",
                "-e",
                "infiniband.mad.mgmtclass",
                "-e",
                "infiniband.mad.attributeid",
                "-e",
                "infiniband.mad.transactionid",
                "-e",
                "infiniband.vendor",
            ]),
        Duration::from_secs(60),
    )?;
    let num = |s: &str| -> Option<u32> {
        let s = s.trim();
        s.strip_prefix("0x")
            .map(|h| u32::from_str_radix(h, 16).ok())
            .unwrap_or_else(|| s.parse().ok())
    };
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            let deth = match (f.get(3).and_then(|x| num(x)), f.get(4).and_then(|x| num(x))) {
                (Some(k), Some(s)) => Some((k, s)),
                _ => None,
            };
            let tid = f.get(7).and_then(|x| {
                let x = x.trim();
                x.strip_prefix("0x")
                    .map_or_else(|| x.parse().ok(), |h| u64::from_str_radix(h, 16).ok())
            });
            let mad = match (
                f.get(5).and_then(|x| num(x)),
                f.get(6).and_then(|x| num(x)),
                tid,
            ) {
                (Some(c), Some(a), Some(t)) => Some((c as u8, a as u16, t)),
                _ => None,
            };
            match (
                f.first().and_then(|x| num(x)),
                f.get(1).and_then(|x| num(x)),
                f.get(2).and_then(|x| num(x)),
            ) {
                (Some(o), Some(q), Some(p)) => Ok(TsharkPacket {
                    opcode: o as u8,
                    dest_qpn: q,
                    psn: p,
                    deth,
                    mad,
                    undecoded: f.get(8).and_then(|x| first4_hex(x)),
                }),
                _ => Err(format!("tshark line {l:?}")),
            }
        })
        .collect()
}

/// The first 4 bytes of tshark's hex dump of a bytes field ("00:00:01:23:…" or "00000123…").
fn first4_hex(s: &str) -> Option<[u8; 4]> {
    let h: String = s
        .chars()
        .filter(|c| c.is_ascii_hexdigit())
        .take(8)
        .collect();
    if h.len() < 8 {
        return None;
    }
    let v = u32::from_str_radix(&h, 16).ok()?;
    Some(v.to_be_bytes())
}

/// Result of checking one capture.
#[derive(Clone, Debug, Default)]
pub struct WireReport {
    pub packets: usize,
    pub icrc_bad: usize,
    /// Packets whose ICRC fails over canonical headers (non-zero IPv4 identification, ...).
    pub canonical_mismatch: usize,
    pub nonzero_ip_id: usize,
    /// Opcodes seen (by name), with counts.
    pub opcodes: Vec<(String, usize)>,
    /// UD packets whose DETH both decoders read alike.
    pub ud_deth_checked: usize,
    /// XRC requests whose XRCETH ferroce's codec read as the bytes tshark left undecoded
    /// begin with.
    pub xrc_xrceth_checked: usize,
    /// CM MADs on QP1 that both decoders read alike (class, attribute, TID) and ferroce's
    /// CM codec parsed, by attribute.
    pub cm_mads: Vec<(String, usize)>,
    /// The same MADs by sender: ((attribute, source address), count), to tell the two
    /// directions apart (e.g. DREQ and DREP sent by ferroce and by rxe).
    pub cm_mads_from: Vec<((String, Ipv4Addr), usize)>,
    /// Disagreements between ferroce's codec and tshark, or codec errors.
    pub problems: Vec<String>,
}

impl WireReport {
    /// Codec and tshark agree on every packet and every ICRC is valid.
    pub fn ok(&self) -> bool {
        self.packets > 0 && self.icrc_bad == 0 && self.problems.is_empty()
    }

    /// CM MADs with attribute `attr` that `src` sent.
    pub fn cm_mads_sent(&self, attr: &str, src: Ipv4Addr) -> usize {
        self.cm_mads_from
            .iter()
            .find(|((a, s), _)| a == attr && *s == src)
            .map_or(0, |(_, n)| *n)
    }
}

/// Decode `path` with ferroce's codec and with tshark and compare.
pub fn check(path: &Path) -> Result<WireReport, String> {
    let ours = decode(&read_frames(path)?);
    let theirs = tshark_decode(path)?;
    let mut r = WireReport {
        packets: ours.len(),
        ..Default::default()
    };
    let mut ops: std::collections::BTreeMap<String, usize> = Default::default();
    for d in &ours {
        if let Some(e) = &d.error {
            r.problems
                .push(format!("{}->{} psn?: ferroce codec: {e}", d.src, d.dst));
            continue;
        }
        r.icrc_bad += usize::from(!d.icrc_ok);
        r.canonical_mismatch += usize::from(!d.icrc_canonical_ok);
        r.nonzero_ip_id += usize::from(d.ip_id != 0);
        let name = match wire::Opcode::decode_full(d.opcode) {
            Some((o, true, _)) => format!("UC {}", o.name()),
            Some((o, _, true)) => format!("XRC {}", o.name()),
            Some((o, false, false)) => o.name().to_string(),
            None => "?".to_string(),
        };
        *ops.entry(name).or_default() += 1;
    }
    r.opcodes = ops.into_iter().collect();
    if theirs.len() != ours.len() {
        r.problems.push(format!(
            "tshark decoded {} packets, ferroce {}",
            theirs.len(),
            ours.len()
        ));
    }
    let mut cm: std::collections::BTreeMap<String, usize> = Default::default();
    let mut cm_from: std::collections::BTreeMap<(String, Ipv4Addr), usize> = Default::default();
    for (i, (d, t)) in ours.iter().zip(&theirs).enumerate() {
        if (d.opcode, d.dest_qpn, d.psn) != (t.opcode, t.dest_qpn, t.psn) {
            r.problems.push(format!(
                "packet {i}: ferroce (op {:#x}, qp {:#x}, psn {:#x}) vs tshark (op {:#x}, qp {:#x}, psn {:#x})",
                d.opcode, d.dest_qpn, d.psn, t.opcode, t.dest_qpn, t.psn
            ));
        }
        if d.deth != t.deth {
            r.problems.push(format!(
                "packet {i}: ferroce DETH {:x?} vs tshark DETH {:x?}",
                d.deth, t.deth
            ));
        } else if d.deth.is_some() {
            r.ud_deth_checked += 1;
        }
        if d.mad != t.mad {
            r.problems.push(format!(
                "packet {i}: ferroce MAD header {:x?} vs tshark {:x?}",
                d.mad, t.mad
            ));
        }
        if let (Some(x), Some(u)) = (d.xrceth, t.undecoded) {
            if x == u {
                r.xrc_xrceth_checked += 1;
            } else {
                r.problems.push(format!(
                    "packet {i}: ferroce XRCETH {x:02x?} vs tshark's undecoded bytes {u:02x?}"
                ));
            }
        }
        match &d.cm {
            Some(Ok(a)) if d.mad == t.mad => {
                *cm.entry(a.to_string()).or_default() += 1;
                *cm_from.entry((a.to_string(), d.src)).or_default() += 1;
            }
            Some(Err(e)) => r
                .problems
                .push(format!("packet {i}: ferroce CM codec: {e}")),
            _ => {}
        }
    }
    r.cm_mads = cm.into_iter().collect();
    r.cm_mads_from = cm_from.into_iter().collect();
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::{Bth, Deth, ExtHeaders, Opcode, Packet};

    /// A classic pcap of Ethernet frames, each IPv4/UDP 4791 with the canonical headers.
    fn pcap_of(packets: &[(Ipv4Addr, Ipv4Addr, Vec<u8>)]) -> Vec<u8> {
        // magic, version 2.4, thiszone, sigfigs, snaplen, Ethernet
        let mut d = Vec::new();
        d.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        d.extend_from_slice(&2u16.to_le_bytes());
        d.extend_from_slice(&4u16.to_le_bytes());
        d.extend_from_slice(&[0; 8]);
        d.extend_from_slice(&65535u32.to_le_bytes());
        d.extend_from_slice(&1u32.to_le_bytes());
        for (src, dst, p) in packets {
            let h = wire::ipv4_udp_headers(*src, *dst, 0xc123, wire::UDP_PORT, p.len());
            let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2, 0x08, 0x00];
            f.extend_from_slice(&h);
            f.extend_from_slice(p);
            for v in [0u32, 0, f.len() as u32, f.len() as u32] {
                d.extend_from_slice(&v.to_le_bytes());
            }
            d.extend_from_slice(&f);
        }
        d
    }

    /// spec/vectors/roce_xrc's sample (gen_roce_xrc.py): 13 XRC packets, 9 of them requests.
    // checks: [ROCE-9] [ROCE-10]
    #[test]
    fn tshark_and_the_codec_agree_on_xrc_packets() {
        if Command::new("tshark").arg("--version").output().is_err() {
            eprintln!("SKIP: no tshark");
            return;
        }
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../spec/vectors/roce_xrc/roce-xrc-sample.pcap");
        let r = check(&path).unwrap();
        assert!(r.ok(), "{r:?}");
        assert_eq!(r.packets, 13, "{r:?}");
        assert!(
            r.opcodes.iter().all(|(n, _)| n.starts_with("XRC ")),
            "{r:?}"
        );
        assert_eq!(r.opcodes.len(), 13, "{r:?}");
        assert_eq!(r.xrc_xrceth_checked, 9, "{r:?}");
    }

    #[test]
    fn tshark_and_the_codec_agree_on_ud_packets() {
        if Command::new("tshark").arg("--version").output().is_err() {
            eprintln!("SKIP: no tshark");
            return;
        }
        let (a, b) = (Ipv4Addr::new(198, 18, 9, 1), Ipv4Addr::new(198, 18, 9, 2));
        let mut pkts = Vec::new();
        for (i, op) in [Opcode::UdSendOnly, Opcode::UdSendOnlyImm]
            .into_iter()
            .enumerate()
        {
            let payload = vec![0x5a; 13];
            let mut bth = Bth::new(op, 0x00ab_c010 + i as u32, 0x7f_0000 + i as u32);
            bth.pad = wire::pad_for(payload.len());
            let p = Packet {
                bth,
                ext: ExtHeaders {
                    deth: Some(Deth {
                        qkey: 0x1111_1111 + i as u32,
                        src_qpn: 0x00de_f010,
                        resv: 0,
                    }),
                    imm: op.has_imm().then_some(0xfeed),
                    ..Default::default()
                },
                payload: &payload,
            };
            let flow = Flow {
                src: a,
                dst: b,
                src_port: 0xc123,
                dst_port: wire::UDP_PORT,
            };
            let mut buf = vec![0u8; 128];
            let n = p.emit_canonical(&mut buf, &flow).unwrap();
            buf.truncate(n);
            pkts.push((a, b, buf));
        }
        let dir = std::env::temp_dir().join(format!("ferroce-wirecheck-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ud.pcap");
        std::fs::write(&path, pcap_of(&pkts)).unwrap();
        let r = check(&path);
        std::fs::remove_dir_all(&dir).ok();
        let r = r.unwrap();
        assert!(r.ok(), "{r:?}");
        assert_eq!(r.packets, 2);
        assert_eq!(r.ud_deth_checked, 2, "{r:?}");
        assert_eq!(
            r.opcodes,
            vec![("UD_SEND_ONLY".into(), 1), ("UD_SEND_ONLY_IMM".into(), 1)]
        );
    }
    #[test]
    fn cm_mads_are_counted_by_sender() {
        if Command::new("tshark").arg("--version").output().is_err() {
            eprintln!("SKIP: no tshark");
            return;
        }
        let (a, b) = (Ipv4Addr::new(198, 18, 9, 1), Ipv4Addr::new(198, 18, 9, 2));
        let short = |l, r| cmw::Short {
            local_comm_id: l,
            remote_comm_id: r,
            private_data: Vec::new(),
        };
        let dreq = |l, r| {
            cmw::CmBody::Dreq(cmw::Dreq {
                local_comm_id: l,
                remote_comm_id: r,
                remote_qpn_eecn: 0x11,
                private_data: Vec::new(),
            })
        };
        // a's DREQ and b's DREP, then b's DREQ: a sent no DREP.
        let mads = [
            (a, b, dreq(1, 2)),
            (b, a, cmw::CmBody::Drep(short(2, 1))),
            (b, a, dreq(3, 4)),
        ];
        let mut pkts = Vec::new();
        for (i, (src, dst, body)) in mads.into_iter().enumerate() {
            let m = cmw::CmMad {
                hdr: cmw::MadHeader {
                    tid: 0x100 + i as u64,
                    ..Default::default()
                },
                body,
            }
            .emit()
            .unwrap();
            let mut bth = Bth::new(Opcode::UdSendOnly, 1, i as u32);
            bth.pad = wire::pad_for(m.len());
            let p = Packet {
                bth,
                ext: ExtHeaders {
                    deth: Some(Deth {
                        qkey: 0x8001_0000,
                        src_qpn: 1,
                        resv: 0,
                    }),
                    ..Default::default()
                },
                payload: &m,
            };
            let flow = Flow {
                src,
                dst,
                src_port: 0xc123,
                dst_port: wire::UDP_PORT,
            };
            let mut buf = vec![0u8; 512];
            let n = p.emit_canonical(&mut buf, &flow).unwrap();
            buf.truncate(n);
            pkts.push((src, dst, buf));
        }
        let dir = std::env::temp_dir().join(format!("ferroce-wirecheck-cm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cm.pcap");
        std::fs::write(&path, pcap_of(&pkts)).unwrap();
        let r = check(&path);
        std::fs::remove_dir_all(&dir).ok();
        let r = r.unwrap();
        assert!(r.ok(), "{r:?}");
        assert_eq!(r.cm_mads_sent("DREQ", a), 1, "{r:?}");
        assert_eq!(r.cm_mads_sent("DREQ", b), 1, "{r:?}");
        assert_eq!(r.cm_mads_sent("DREP", b), 1, "{r:?}");
        assert_eq!(r.cm_mads_sent("DREP", a), 0, "{r:?}");
    }
}
