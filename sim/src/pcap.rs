//! Minimal pcap writer: nanosecond-resolution pcap (magic `0xa1b23c4d`), LINKTYPE_ETHERNET, with
//! the Ethernet/IPv4/UDP headers the simulator does not model synthesised around each payload.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use crate::{Datagram, Nanos};

const SNAPLEN: u32 = 65_535;
const LINKTYPE_ETHERNET: u32 = 1;
const HEADERS: usize = 14 + 20 + 8;

/// Locally administered MAC derived from an IPv4 address, so frames are self-consistent.
fn mac_of(ip: [u8; 4]) -> [u8; 6] {
    [0x02, 0x00, ip[0], ip[1], ip[2], ip[3]]
}

/// RFC 1071 checksum of an IPv4 header (checksum field zero when called).
pub(crate) fn ipv4_checksum(hdr: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for chunk in hdr.chunks(2) {
        let word = u16::from_be_bytes([chunk[0], *chunk.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// The full Ethernet frame (without FCS) the simulator pretends carried `d`.
pub(crate) fn frame_bytes(d: &Datagram) -> Vec<u8> {
    let mut f = Vec::with_capacity(HEADERS + d.payload.len());
    f.extend_from_slice(&mac_of(d.dst_ip));
    f.extend_from_slice(&mac_of(d.src_ip));
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let total = u16::try_from(20 + 8 + d.payload.len()).unwrap_or(u16::MAX);
    let udp_len = u16::try_from(8 + d.payload.len()).unwrap_or(u16::MAX);
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[1] = d.ecn.bits(); // DSCP 0
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    ip[6] = 0x40; // DF
    ip[8] = 64; // TTL
    ip[9] = 17; // UDP
    ip[12..16].copy_from_slice(&d.src_ip);
    ip[16..20].copy_from_slice(&d.dst_ip);
    let csum = ipv4_checksum(&ip);
    ip[10..12].copy_from_slice(&csum.to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&d.src_port.to_be_bytes());
    f.extend_from_slice(&d.dst_port.to_be_bytes());
    f.extend_from_slice(&udp_len.to_be_bytes());
    f.extend_from_slice(&[0, 0]); // UDP checksum 0 = none (allowed over IPv4)
    f.extend_from_slice(&d.payload);
    f
}

/// Writes one host's NIC traffic to a pcap file. Write errors are remembered, not raised, so a
/// full disk cannot abort a simulation; `flush` reports them.
#[derive(Debug)]
pub(crate) struct PcapWriter {
    out: BufWriter<File>,
    error: Option<io::Error>,
}

impl PcapWriter {
    pub(crate) fn create(path: &Path) -> io::Result<Self> {
        let mut out = BufWriter::new(File::create(path)?);
        let mut hdr = Vec::with_capacity(24);
        hdr.extend_from_slice(&0xa1b2_3c4du32.to_le_bytes());
        hdr.extend_from_slice(&2u16.to_le_bytes());
        hdr.extend_from_slice(&4u16.to_le_bytes());
        hdr.extend_from_slice(&0i32.to_le_bytes());
        hdr.extend_from_slice(&0u32.to_le_bytes());
        hdr.extend_from_slice(&SNAPLEN.to_le_bytes());
        hdr.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        out.write_all(&hdr)?;
        Ok(PcapWriter { out, error: None })
    }

    pub(crate) fn record(&mut self, now: Nanos, d: &Datagram) {
        if self.error.is_some() {
            return;
        }
        let frame = frame_bytes(d);
        let orig = u32::try_from(frame.len()).unwrap_or(u32::MAX);
        let incl = orig.min(SNAPLEN);
        let mut rec = Vec::with_capacity(16);
        rec.extend_from_slice(&((now / 1_000_000_000) as u32).to_le_bytes());
        rec.extend_from_slice(&((now % 1_000_000_000) as u32).to_le_bytes());
        rec.extend_from_slice(&incl.to_le_bytes());
        rec.extend_from_slice(&orig.to_le_bytes());
        let res = self
            .out
            .write_all(&rec)
            .and_then(|_| self.out.write_all(&frame[..incl as usize]));
        if let Err(e) = res {
            self.error = Some(e);
        }
    }

    pub(crate) fn flush(&mut self) -> io::Result<()> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_known_vector() {
        // Example header from RFC 1071 discussions / Wikipedia: checksum 0xb861.
        let hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(ipv4_checksum(&hdr), 0xb861);
    }

    #[test]
    fn frame_layout() {
        let mut d = Datagram::udp([198, 18, 0, 1], [198, 18, 0, 2], 1234, 4791, vec![7; 10]);
        d.ecn = crate::Ecn::Ect0;
        let f = frame_bytes(&d);
        assert_eq!(f.len(), 14 + 20 + 8 + 10);
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        assert_eq!(f[15], 0b10);
        assert_eq!(
            ipv4_checksum(&f[14..34]),
            0,
            "checksum over a valid header is 0"
        );
        assert_eq!(&f[34..36], &1234u16.to_be_bytes());
        assert_eq!(&f[38..40], &18u16.to_be_bytes());
    }
}
