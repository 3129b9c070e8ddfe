//! Ethernet II, ARP, IPv4 and UDP: parsing received frames (every length and field checked,
//! nothing panics on any bytes) and writing the headers of frames we send.

use std::net::Ipv4Addr;

pub const ETH_LEN: usize = 14;
pub const IPV4_LEN: usize = 20;
pub const UDP_LEN: usize = 8;
/// Ethernet + IPv4 (no options) + UDP: where the transport's datagram starts in a frame.
pub const HDRS_LEN: usize = ETH_LEN + IPV4_LEN + UDP_LEN;
pub const ARP_LEN: usize = 28;
pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_ARP: u16 = 0x0806;
pub const IPPROTO_UDP: u8 = 17;
pub const BROADCAST: [u8; 6] = [0xff; 6];
/// Ethernet frames shorter than this are padded by us (the minimum without the FCS).
pub const MIN_FRAME: usize = 60;

/// ECN codepoints (the two low bits of the IPv4 TOS byte).
pub mod ecn {
    pub const NOT_ECT: u8 = 0;
    pub const ECT1: u8 = 1;
    pub const ECT0: u8 = 2;
    pub const CE: u8 = 3;
}

/// Why a received frame was not handed to the transport. Each has its counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Shorter than an Ethernet header, or than the headers it announces.
    Truncated,
    /// Destination MAC neither ours nor broadcast.
    OtherMac,
    /// Neither IPv4 nor ARP (IPv6, LLDP, ...).
    EtherType,
    /// IPv4 version or header length field wrong.
    IpHeader,
    IpChecksum,
    /// IPv4 total length larger than the frame or smaller than the header.
    IpLength,
    /// A fragment (we never send any; reassembly is not supported).
    Fragment,
    /// Not UDP (ICMP, TCP, ...).
    NotUdp,
    /// IPv4 destination is not our address.
    OtherIp,
    /// UDP length field inconsistent with the IPv4 length.
    UdpLength,
    UdpChecksum,
    /// UDP destination port is not the transport's.
    UdpPort,
    /// ARP we do not handle (not Ethernet/IPv4, or an unknown operation).
    Arp,
}

impl DropReason {
    pub const ALL: [DropReason; 13] = [
        DropReason::Truncated,
        DropReason::OtherMac,
        DropReason::EtherType,
        DropReason::IpHeader,
        DropReason::IpChecksum,
        DropReason::IpLength,
        DropReason::Fragment,
        DropReason::NotUdp,
        DropReason::OtherIp,
        DropReason::UdpLength,
        DropReason::UdpChecksum,
        DropReason::UdpPort,
        DropReason::Arp,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DropReason::Truncated => "truncated",
            DropReason::OtherMac => "other_mac",
            DropReason::EtherType => "ethertype",
            DropReason::IpHeader => "ip_header",
            DropReason::IpChecksum => "ip_checksum",
            DropReason::IpLength => "ip_length",
            DropReason::Fragment => "fragment",
            DropReason::NotUdp => "not_udp",
            DropReason::OtherIp => "other_ip",
            DropReason::UdpLength => "udp_length",
            DropReason::UdpChecksum => "udp_checksum",
            DropReason::UdpPort => "udp_port",
            DropReason::Arp => "arp",
        }
    }
}

/// An ARP packet (Ethernet / IPv4 only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arp {
    /// 1 request, 2 reply.
    pub op: u16,
    pub sender_mac: [u8; 6],
    pub sender_ip: Ipv4Addr,
    pub target_mac: [u8; 6],
    pub target_ip: Ipv4Addr,
}

/// A UDP datagram for us: the payload is `frame[payload.0 .. payload.1]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Udp {
    pub src_mac: [u8; 6],
    pub src_ip: Ipv4Addr,
    pub dst_ip: Ipv4Addr,
    pub src_port: u16,
    pub dst_port: u16,
    pub ecn: u8,
    pub payload: (usize, usize),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frame {
    Arp(Arp),
    Udp(Udp),
}

#[inline]
fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

#[inline]
fn ip_at(b: &[u8], at: usize) -> Ipv4Addr {
    Ipv4Addr::new(b[at], b[at + 1], b[at + 2], b[at + 3])
}

fn mac_at(b: &[u8], at: usize) -> [u8; 6] {
    let mut m = [0u8; 6];
    m.copy_from_slice(&b[at..at + 6]);
    m
}

/// One's-complement sum of 16-bit big-endian words (odd tail padded with 0).
pub fn csum_add(mut sum: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    if let [last] = chunks.remainder() {
        sum += (*last as u32) << 8;
    }
    sum
}

pub fn csum_fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The IPv4 header checksum of `hdr` (with its checksum field as it is).
pub fn ipv4_checksum(hdr: &[u8]) -> u16 {
    csum_fold(csum_add(0, hdr))
}

fn udp_checksum(src: Ipv4Addr, dst: Ipv4Addr, udp: &[u8]) -> u16 {
    let mut s = csum_add(0, &src.octets());
    s = csum_add(s, &dst.octets());
    s += IPPROTO_UDP as u32;
    s += udp.len() as u32;
    s = csum_add(s, udp);
    csum_fold(s)
}

/// Parse a received frame for `our_mac` / `our_ip`, accepting UDP to `udp_port` only.
pub fn parse(
    f: &[u8],
    our_mac: [u8; 6],
    our_ip: Ipv4Addr,
    udp_port: u16,
) -> Result<Frame, DropReason> {
    parse_with(f, our_mac, our_ip, udp_port, true)
}

/// [`parse`], optionally without verifying nonzero UDP checksums: frames from a kernel over
/// a veth (af_packet, tap) carry only the partial checksum of checksum offload.
pub fn parse_with(
    f: &[u8],
    our_mac: [u8; 6],
    our_ip: Ipv4Addr,
    udp_port: u16,
    verify_udp_checksum: bool,
) -> Result<Frame, DropReason> {
    if f.len() < ETH_LEN {
        return Err(DropReason::Truncated);
    }
    let dst = mac_at(f, 0);
    if dst != our_mac && dst != BROADCAST {
        return Err(DropReason::OtherMac);
    }
    let src_mac = mac_at(f, 6);
    match be16(f, 12) {
        ETHERTYPE_ARP => parse_arp(&f[ETH_LEN..]).map(Frame::Arp),
        ETHERTYPE_IPV4 => {
            let ip = &f[ETH_LEN..];
            if ip.len() < IPV4_LEN {
                return Err(DropReason::Truncated);
            }
            let ihl = (ip[0] & 0x0f) as usize * 4;
            if ip[0] >> 4 != 4 || ihl < IPV4_LEN {
                return Err(DropReason::IpHeader);
            }
            if ip.len() < ihl {
                return Err(DropReason::Truncated);
            }
            let total = be16(ip, 2) as usize;
            if total < ihl || total > ip.len() {
                return Err(DropReason::IpLength);
            }
            if ipv4_checksum(&ip[..ihl]) != 0 {
                return Err(DropReason::IpChecksum);
            }
            // More-fragments flag or a fragment offset: a fragment.
            if be16(ip, 6) & 0x3fff != 0 {
                return Err(DropReason::Fragment);
            }
            if ip[9] != IPPROTO_UDP {
                return Err(DropReason::NotUdp);
            }
            let dst_ip = ip_at(ip, 16);
            if dst_ip != our_ip {
                return Err(DropReason::OtherIp);
            }
            let src_ip = ip_at(ip, 12);
            let udp = &ip[ihl..total];
            if udp.len() < UDP_LEN {
                return Err(DropReason::Truncated);
            }
            let ulen = be16(udp, 4) as usize;
            if ulen < UDP_LEN || ulen > udp.len() {
                return Err(DropReason::UdpLength);
            }
            let udp = &udp[..ulen];
            if verify_udp_checksum && be16(udp, 6) != 0 && udp_checksum(src_ip, dst_ip, udp) != 0 {
                return Err(DropReason::UdpChecksum);
            }
            let dst_port = be16(udp, 2);
            if dst_port != udp_port {
                return Err(DropReason::UdpPort);
            }
            let start = ETH_LEN + ihl + UDP_LEN;
            Ok(Frame::Udp(Udp {
                src_mac,
                src_ip,
                dst_ip,
                src_port: be16(udp, 0),
                dst_port,
                ecn: ip[1] & 3,
                payload: (start, ETH_LEN + ihl + ulen),
            }))
        }
        _ => Err(DropReason::EtherType),
    }
}

fn parse_arp(a: &[u8]) -> Result<Arp, DropReason> {
    if a.len() < ARP_LEN {
        return Err(DropReason::Truncated);
    }
    // Hardware Ethernet (1), protocol IPv4, lengths 6 and 4.
    if be16(a, 0) != 1 || be16(a, 2) != ETHERTYPE_IPV4 || a[4] != 6 || a[5] != 4 {
        return Err(DropReason::Arp);
    }
    let op = be16(a, 6);
    if op != 1 && op != 2 {
        return Err(DropReason::Arp);
    }
    Ok(Arp {
        op,
        sender_mac: mac_at(a, 8),
        sender_ip: ip_at(a, 14),
        target_mac: mac_at(a, 18),
        target_ip: ip_at(a, 24),
    })
}

/// Write an ARP frame into `buf` (at least 60 bytes); returns its length.
pub fn write_arp(buf: &mut [u8], eth_dst: [u8; 6], eth_src: [u8; 6], arp: &Arp) -> usize {
    buf[0..6].copy_from_slice(&eth_dst);
    buf[6..12].copy_from_slice(&eth_src);
    buf[12..14].copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
    let a = &mut buf[ETH_LEN..ETH_LEN + ARP_LEN];
    a[0..2].copy_from_slice(&1u16.to_be_bytes());
    a[2..4].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    a[4] = 6;
    a[5] = 4;
    a[6..8].copy_from_slice(&arp.op.to_be_bytes());
    a[8..14].copy_from_slice(&arp.sender_mac);
    a[14..18].copy_from_slice(&arp.sender_ip.octets());
    a[18..24].copy_from_slice(&arp.target_mac);
    a[24..28].copy_from_slice(&arp.target_ip.octets());
    buf[ETH_LEN + ARP_LEN..MIN_FRAME].fill(0);
    MIN_FRAME
}

/// The IPv4/UDP parameters of a frame we send.
#[derive(Clone, Copy, Debug)]
pub struct UdpHeader {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src_ip: Ipv4Addr,
    pub dst_ip: Ipv4Addr,
    pub ip_id: u16,
    pub ttl: u8,
    pub ecn: u8,
    pub src_port: u16,
    pub dst_port: u16,
}

/// Write Ethernet/IPv4/UDP headers in front of the `payload_len` bytes already at
/// `buf[HDRS_LEN..]`; pads the frame to the Ethernet minimum; returns the frame length.
/// The UDP checksum is 0 (none), as RoCEv2 sends it: the transport has its own CRC.
pub fn write_udp(buf: &mut [u8], h: &UdpHeader, payload_len: usize) -> usize {
    buf[0..6].copy_from_slice(&h.dst_mac);
    buf[6..12].copy_from_slice(&h.src_mac);
    buf[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
    let ip = &mut buf[ETH_LEN..ETH_LEN + IPV4_LEN];
    let total = (IPV4_LEN + UDP_LEN + payload_len) as u16;
    ip[0] = 0x45;
    ip[1] = h.ecn & 3;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[4..6].copy_from_slice(&h.ip_id.to_be_bytes());
    // Don't fragment.
    ip[6..8].copy_from_slice(&0x4000u16.to_be_bytes());
    ip[8] = h.ttl;
    ip[9] = IPPROTO_UDP;
    ip[10..12].fill(0);
    ip[12..16].copy_from_slice(&h.src_ip.octets());
    ip[16..20].copy_from_slice(&h.dst_ip.octets());
    let c = ipv4_checksum(ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    let u = &mut buf[ETH_LEN + IPV4_LEN..HDRS_LEN];
    u[0..2].copy_from_slice(&h.src_port.to_be_bytes());
    u[2..4].copy_from_slice(&h.dst_port.to_be_bytes());
    u[4..6].copy_from_slice(&((UDP_LEN + payload_len) as u16).to_be_bytes());
    u[6..8].fill(0);
    let len = HDRS_LEN + payload_len;
    if len < MIN_FRAME {
        buf[len..MIN_FRAME].fill(0);
        MIN_FRAME
    } else {
        len
    }
}

/// Set the ECN field of an IPv4 frame to `cp`, fixing the header checksum. Returns false
/// when the frame is not IPv4.
pub fn set_ecn(frame: &mut [u8], cp: u8) -> bool {
    if frame.len() < HDRS_LEN || be16(frame, 12) != ETHERTYPE_IPV4 {
        return false;
    }
    let ihl = (frame[ETH_LEN] & 0x0f) as usize * 4;
    if ihl < IPV4_LEN || frame.len() < ETH_LEN + ihl {
        return false;
    }
    frame[ETH_LEN + 1] = (frame[ETH_LEN + 1] & !3) | (cp & 3);
    frame[ETH_LEN + 10] = 0;
    frame[ETH_LEN + 11] = 0;
    let c = ipv4_checksum(&frame[ETH_LEN..ETH_LEN + ihl]);
    frame[ETH_LEN + 10..ETH_LEN + 12].copy_from_slice(&c.to_be_bytes());
    true
}

/// ECN field of an IPv4 frame, if it is one.
pub fn ecn_of(frame: &[u8]) -> Option<u8> {
    (frame.len() >= HDRS_LEN && be16(frame, 12) == ETHERTYPE_IPV4).then(|| frame[ETH_LEN + 1] & 3)
}

pub fn fmt_mac(m: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut parts = s.split(':');
    for b in m.iter_mut() {
        *b = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(m)
}

/// Frames that must all be refused, at least one for every [`DropReason`] and several that
/// reach the transport (UDP to `port` with bad contents); for tests and tools.
pub fn garbage_frames(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src_ip: Ipv4Addr,
    dst_ip: Ipv4Addr,
    port: u16,
    seed: u64,
) -> Vec<Vec<u8>> {
    let mut rng = crate::fault::Rng::new(seed);
    let hdr = UdpHeader {
        src_mac,
        dst_mac,
        src_ip,
        dst_ip,
        ip_id: 1,
        ttl: 64,
        ecn: 0,
        src_port: 50_000,
        dst_port: port,
    };
    let good = |h: &UdpHeader, payload: &[u8]| {
        let mut b = vec![0u8; HDRS_LEN + payload.len() + MIN_FRAME];
        b[HDRS_LEN..HDRS_LEN + payload.len()].copy_from_slice(payload);
        let n = write_udp(&mut b, h, payload.len());
        b.truncate(n);
        b
    };
    let fix_ip = |b: &mut Vec<u8>| {
        b[ETH_LEN + 10] = 0;
        b[ETH_LEN + 11] = 0;
        let c = ipv4_checksum(&b[ETH_LEN..ETH_LEN + IPV4_LEN]);
        b[ETH_LEN + 10..ETH_LEN + 12].copy_from_slice(&c.to_be_bytes());
    };
    let payload: Vec<u8> = (0..100).map(|_| rng.next_u64() as u8).collect();
    let base = good(&hdr, &payload);
    let mut v = Vec::new();
    // Truncated: shorter than Ethernet, and an IPv4 frame cut inside its header.
    v.push(base[..10].to_vec());
    v.push(base[..ETH_LEN + 12].to_vec());
    // Another host's MAC.
    let mut f = base.clone();
    f[0..6].copy_from_slice(&[0x02, 0, 0, 0, 0x99, 0x99]);
    v.push(f);
    // IPv6 ethertype.
    let mut f = base.clone();
    f[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
    v.push(f);
    // IP version 6 / header length 3 under the IPv4 ethertype.
    let mut f = base.clone();
    f[ETH_LEN] = 0x65;
    v.push(f);
    let mut f = base.clone();
    f[ETH_LEN] = 0x43;
    v.push(f);
    // Wrong IP checksum.
    let mut f = base.clone();
    f[ETH_LEN + 8] ^= 0x55;
    v.push(f);
    // IP total length beyond the frame, and below the header.
    let mut f = base.clone();
    f[ETH_LEN + 2..ETH_LEN + 4].copy_from_slice(&2000u16.to_be_bytes());
    fix_ip(&mut f);
    v.push(f);
    let mut f = base.clone();
    f[ETH_LEN + 2..ETH_LEN + 4].copy_from_slice(&10u16.to_be_bytes());
    fix_ip(&mut f);
    v.push(f);
    // A fragment (more-fragments flag).
    let mut f = base.clone();
    f[ETH_LEN + 6] = 0x20;
    fix_ip(&mut f);
    v.push(f);
    // TCP.
    let mut f = base.clone();
    f[ETH_LEN + 9] = 6;
    fix_ip(&mut f);
    v.push(f);
    // Another IP.
    v.push(good(
        &UdpHeader {
            dst_ip: Ipv4Addr::new(198, 18, 200, 99),
            ..hdr
        },
        &payload,
    ));
    // UDP length beyond the IP payload, and below 8.
    let mut f = base.clone();
    f[ETH_LEN + IPV4_LEN + 4..ETH_LEN + IPV4_LEN + 6].copy_from_slice(&1000u16.to_be_bytes());
    v.push(f);
    let mut f = base.clone();
    f[ETH_LEN + IPV4_LEN + 4..ETH_LEN + IPV4_LEN + 6].copy_from_slice(&4u16.to_be_bytes());
    v.push(f);
    // A wrong UDP checksum.
    let mut f = base.clone();
    f[ETH_LEN + IPV4_LEN + 6..ETH_LEN + IPV4_LEN + 8].copy_from_slice(&0x1234u16.to_be_bytes());
    v.push(f);
    // Foreign UDP ports (DNS, RoCEv2 when we speak native).
    for p in [53u16, 4791] {
        v.push(good(&UdpHeader { dst_port: p, ..hdr }, &payload));
    }
    // ARP that is not Ethernet/IPv4, and an unknown ARP operation.
    let arp = Arp {
        op: 1,
        sender_mac: src_mac,
        sender_ip: src_ip,
        target_mac: [0; 6],
        target_ip: dst_ip,
    };
    let mut f = vec![0u8; MIN_FRAME];
    write_arp(&mut f, dst_mac, src_mac, &arp);
    f[ETH_LEN + 1] = 6; // hardware type 6
    v.push(f);
    let mut f = vec![0u8; MIN_FRAME];
    write_arp(&mut f, dst_mac, src_mac, &Arp { op: 9, ..arp });
    v.push(f);
    // For the transport: empty, 3 bytes, random bytes, a bad version, a valid-looking header
    // with a broken CRC.
    v.push(good(&hdr, &[]));
    v.push(good(&hdr, &[1, 2, 3]));
    v.push(good(&hdr, &payload));
    let mut p2 = payload.clone();
    p2[0] = 0x7f;
    v.push(good(&hdr, &p2));
    let mut p3 = payload.clone();
    p3[0] = 1; // version 1
    p3[1] = 0x03; // WRITE
    v.push(good(&hdr, &p3));
    // Pure random bytes addressed to us.
    for _ in 0..4 {
        let mut f: Vec<u8> = (0..(20 + rng.below(200)))
            .map(|_| rng.next_u64() as u8)
            .collect();
        f[0..6].copy_from_slice(&dst_mac);
        v.push(f);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 2];

    fn frame(payload: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; HDRS_LEN + payload.len() + 64];
        buf[HDRS_LEN..HDRS_LEN + payload.len()].copy_from_slice(payload);
        let h = UdpHeader {
            src_mac: A,
            dst_mac: B,
            src_ip: Ipv4Addr::new(198, 18, 1, 11),
            dst_ip: Ipv4Addr::new(198, 18, 1, 12),
            ip_id: 7,
            ttl: 64,
            ecn: ecn::ECT0,
            src_port: 49152,
            dst_port: 4792,
        };
        let n = write_udp(&mut buf, &h, payload.len());
        buf.truncate(n);
        buf
    }

    #[test]
    fn udp_roundtrip_and_checks() {
        let f = frame(b"hello world, this is a payload");
        let Ok(Frame::Udp(u)) = parse(&f, B, Ipv4Addr::new(198, 18, 1, 12), 4792) else {
            panic!("parse failed")
        };
        assert_eq!(
            &f[u.payload.0..u.payload.1],
            b"hello world, this is a payload"
        );
        assert_eq!(u.src_port, 49152);
        assert_eq!(u.ecn, ecn::ECT0);
        let me = Ipv4Addr::new(198, 18, 1, 12);
        assert_eq!(parse(&f, A, me, 4792), Err(DropReason::OtherMac));
        assert_eq!(parse(&f, B, me, 4791), Err(DropReason::UdpPort));
        assert_eq!(
            parse(&f, B, Ipv4Addr::new(1, 2, 3, 4), 4792),
            Err(DropReason::OtherIp)
        );
        let mut bad = f.clone();
        bad[ETH_LEN + 8] ^= 1; // TTL: checksum now wrong
        assert_eq!(parse(&bad, B, me, 4792), Err(DropReason::IpChecksum));
        let mut m = f.clone();
        assert!(set_ecn(&mut m, ecn::CE));
        let Ok(Frame::Udp(u)) = parse(&m, B, me, 4792) else {
            panic!()
        };
        assert_eq!(u.ecn, ecn::CE);
        for n in 0..f.len() {
            // Every truncation is refused without a panic.
            let _ = parse(&f[..n], B, me, 4792);
        }
        // Short payloads are padded to 60 bytes but the UDP length still rules.
        let s = frame(b"x");
        assert_eq!(s.len(), MIN_FRAME);
        let Ok(Frame::Udp(u)) = parse(&s, B, me, 4792) else {
            panic!()
        };
        assert_eq!(u.payload.1 - u.payload.0, 1);
    }

    #[test]
    fn arp_roundtrip() {
        let mut buf = [0u8; 64];
        let a = Arp {
            op: 1,
            sender_mac: A,
            sender_ip: Ipv4Addr::new(198, 18, 1, 11),
            target_mac: [0; 6],
            target_ip: Ipv4Addr::new(198, 18, 1, 12),
        };
        let n = write_arp(&mut buf, BROADCAST, A, &a);
        assert_eq!(
            parse(&buf[..n], B, Ipv4Addr::new(0, 0, 0, 0), 1),
            Ok(Frame::Arp(a))
        );
        assert_eq!(parse_mac("02:00:00:00:00:01"), Some(A));
        assert_eq!(fmt_mac(A), "02:00:00:00:00:01");
    }
}
