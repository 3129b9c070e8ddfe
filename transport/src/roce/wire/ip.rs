//! The ICRC and the IPv4/UDP headers it covers: the canonical headers ferroce sends every
//! RoCEv2 datagram with (see `roce/mod.rs`).

use super::{IPV4_HEADER_LEN, UDP_HEADER_LEN};
use std::net::Ipv4Addr;

/// The ICRC (IBTA vol. 1 §7.8 and Annex A17): CRC-32 (zlib) over 8 bytes of 0xFF standing for
/// the absent LRH, the IPv4 header with TOS, TTL and header checksum set to all ones, the UDP
/// header with the checksum set to all ones, and `ib` (BTH .. pad, without the ICRC) with
/// BTH byte 4 (FECN, BECN, reserved) set to all ones. Never panics: short inputs are used as
/// they are.
pub fn icrc(ip_hdr: &[u8], udp_hdr: &[u8], ib: &[u8]) -> u32 {
    let mut h = crate::wire::crc32_hasher();
    h.update(&[0xff; 8]);
    let mut ip = [0u8; 60];
    let n = ip_hdr.len().min(60);
    ip[..n].copy_from_slice(&ip_hdr[..n]);
    for (i, v) in [(1, 0xff), (8, 0xff), (10, 0xff), (11, 0xff)] {
        if i < n {
            ip[i] = v;
        }
    }
    h.update(&ip[..n]);
    if ip_hdr.len() > 60 {
        h.update(&ip_hdr[60..]);
    }
    let mut udp = [0u8; UDP_HEADER_LEN];
    let n = udp_hdr.len().min(UDP_HEADER_LEN);
    udp[..n].copy_from_slice(&udp_hdr[..n]);
    for b in udp.iter_mut().take(n).skip(6) {
        *b = 0xff;
    }
    h.update(&udp[..n]);
    if ib.len() > 4 {
        h.update(&ib[..4]);
        h.update(&[0xff]);
        h.update(&ib[5..]);
    } else {
        h.update(ib);
    }
    h.finalize()
}

/// The addressing of one datagram: enough to build its canonical IPv4 and UDP headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Flow {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub src_port: u16,
    pub dst_port: u16,
}

impl Flow {
    /// The canonical headers for a UDP payload of `udp_payload_len` bytes.
    pub fn headers(&self, udp_payload_len: usize) -> [u8; IPV4_HEADER_LEN + UDP_HEADER_LEN] {
        ipv4_udp_headers(
            self.src,
            self.dst,
            self.src_port,
            self.dst_port,
            udp_payload_len,
        )
    }
}

/// TOS byte of the canonical IPv4 header: DSCP 0, ECN ECT(0). (TOS is masked by the ICRC, so
/// an embedder may send another DSCP/ECN value without changing the ICRC.)
pub const CANONICAL_TOS: u8 = 0x02;
/// TTL of the canonical IPv4 header (masked by the ICRC).
pub const CANONICAL_TTL: u8 = 64;
/// Flags/fragment offset of the canonical IPv4 header: DF, offset 0.
pub const CANONICAL_FLAGS_FRAG: u16 = 0x4000;
/// Identification of the canonical IPv4 header. It is *not* masked by the ICRC, so every
/// ferroce RoCEv2 datagram is sent with identification 0 (RFC 6864 allows any value on an
/// atomic datagram, which DF makes it).
pub const CANONICAL_IDENT: u16 = 0;

/// The IPv4 header (20 bytes, no options) and UDP header (8 bytes) ferroce sends a RoCEv2
/// datagram with: version 4, IHL 5, TOS [`CANONICAL_TOS`], total length 28 +
/// `udp_payload_len`, identification 0, DF, TTL 64, protocol 17, a correct header checksum,
/// the addresses; UDP ports, length 8 + `udp_payload_len`, checksum 0 (RoCEv2 sends none).
/// Lengths beyond 65 507 payload bytes saturate (such datagrams cannot be sent).
/// Deterministic: the DPDK dataplane writes exactly these bytes, and the engine computes
/// (and checks) the ICRC over them.
pub fn ipv4_udp_headers(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    src_port: u16,
    dst_port: u16,
    udp_payload_len: usize,
) -> [u8; IPV4_HEADER_LEN + UDP_HEADER_LEN] {
    let mut h = [0u8; IPV4_HEADER_LEN + UDP_HEADER_LEN];
    let udp_len = (udp_payload_len + UDP_HEADER_LEN).min(65_535 - IPV4_HEADER_LEN) as u16;
    let total = udp_len + IPV4_HEADER_LEN as u16;
    h[0] = 0x45;
    h[1] = CANONICAL_TOS;
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h[4..6].copy_from_slice(&CANONICAL_IDENT.to_be_bytes());
    h[6..8].copy_from_slice(&CANONICAL_FLAGS_FRAG.to_be_bytes());
    h[8] = CANONICAL_TTL;
    h[9] = 17;
    h[12..16].copy_from_slice(&src.octets());
    h[16..20].copy_from_slice(&dst.octets());
    let ck = ipv4_checksum(&h[..IPV4_HEADER_LEN]);
    h[10..12].copy_from_slice(&ck.to_be_bytes());
    let u = &mut h[IPV4_HEADER_LEN..];
    u[0..2].copy_from_slice(&src_port.to_be_bytes());
    u[2..4].copy_from_slice(&dst_port.to_be_bytes());
    u[4..6].copy_from_slice(&udp_len.to_be_bytes());
    h
}

/// RFC 791 header checksum of `hdr` (its checksum field taken as it is: pass it zeroed to
/// compute, or filled to verify — a valid header sums to 0).
pub fn ipv4_checksum(hdr: &[u8]) -> u16 {
    let mut s: u32 = 0;
    for c in hdr.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        s += w as u32;
    }
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}
