//! The kernel UDP backend: a [`PacketIo`] over ordinary UDP sockets, so the engine runs
//! without a DPDK device, hugepages or root (docs/design.md, "The kernel UDP backend").
//!
//! The engine above is unchanged: it still builds and parses Ethernet/IPv4/UDP frames in
//! mbufs (from a DPDK mempool, which EAL gives without a device or hugepages). This layer
//! strips the frames on transmit and builds them on receive:
//!
//! - transmit: the destination comes from the frame's IP/UDP header, the TOS (ECN) and TTL
//!   go along as per-message control data, and the UDP source port (the path's entropy)
//!   picks the socket: one socket bound to each source port in use, created on demand (up to
//!   `max_sockets`, the oldest closed first), so the kernel sends each path's datagrams from
//!   its own port and ECMP in the network keeps spreading paths. A burst is grouped by source
//!   port (stable, so each path keeps its order) and each group leaves in `sendmmsg` calls,
//!   runs of equal-sized datagrams to one destination as one GSO message each (UDP_SEGMENT:
//!   one trip through the kernel's stack per run; off for good if the kernel refuses it).
//! - receive: every peer sends to the well-known port (the transport's `udp_port`), so one
//!   socket bound to it receives everything, straight into mbufs behind room for the headers
//!   (`recvmmsg`); the source address comes from the kernel, the destination from
//!   IP_PKTINFO, the TOS (a CE mark) from IP_RECVTOS, and the headers are written in front.
//!   The kernel already checked the UDP checksum; the rebuilt header carries 0 (none).
//!
//! There is no link layer: the engine is told so ([`IoCaps::link_layer`]) and sends no ARP;
//! the kernel's routing and neighbour tables decide where datagrams go.

mod sys;

use crate::io::{IoCaps, PacketIo, TxCount};
use crate::net::{self, UdpHeader};
use ferroce_dpdk_sys::{Mbuf, Mempool};
use rustc_hash::FxHashMap as HashMap;
use serde::Serialize;
use serde_json::{Map, Value};
use std::collections::VecDeque;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use sys::{RecvMeta, SendItem, Sock};
pub use sys::{SockBufs, MAX_BATCH};

/// The MAC the engine is given (locally administered; it is never on a wire).
pub const UDP_MAC: [u8; 6] = [0x02, 0x66, 0x72, 0x75, 0x64, 0x70];
/// The source MAC of the frames built from received datagrams.
const PEER_MAC: [u8; 6] = [0x02, 0x66, 0x72, 0x75, 0x64, 0x71];

/// Settings of the UDP backend.
#[derive(Clone, Debug)]
pub struct UdpParams {
    /// The local address: an address of this host's kernel (the sockets bind to it).
    pub addr: Ipv4Addr,
    /// The port peers send to (the transport's `udp_port`).
    pub port: u16,
    /// Source-port sockets kept open at most.
    pub max_sockets: usize,
    pub bufs: SockBufs,
}

/// The backend's counters (JSON field `udp` of the engine's counters).
#[derive(Clone, Debug, Default, Serialize)]
pub struct UdpCounters {
    pub rx_datagrams: u64,
    pub rx_bytes: u64,
    pub rx_calls: u64,
    pub rx_truncated: u64,
    pub rx_no_mbuf: u64,
    pub rx_errors: u64,
    /// Datagrams the kernel dropped before the engine read them (the receive buffer was
    /// full: the engine was not scheduled, or the rate exceeded it), from SO_RXQ_OVFL.
    pub rx_kernel_dropped: u64,
    pub tx_datagrams: u64,
    pub tx_bytes: u64,
    pub tx_calls: u64,
    /// The kernel's buffer was full (EAGAIN/ENOBUFS): the frames stay queued.
    pub tx_busy: u64,
    /// Frames the kernel refused (unreachable, too big, ...): dropped, the error counted.
    pub tx_errors: u64,
    /// Frames that were not IPv4/UDP (nothing to send them as): dropped.
    pub tx_not_udp: u64,
    pub sockets_opened: u64,
    pub sockets_closed: u64,
    /// A source port could not be bound (in use by another socket): its datagrams left from
    /// the well-known port's socket instead (same path, less entropy).
    pub src_port_fallback: u64,
    /// The kernel refused a GSO send (UDP_SEGMENT): datagrams go one message each since.
    pub gso_off: bool,
    pub last_error: Option<String>,
}

/// A [`PacketIo`] over kernel UDP sockets.
pub struct UdpIo {
    p: UdpParams,
    pool: Mempool,
    main: Sock,
    by_port: HashMap<u16, Sock>,
    /// Source ports in the order their sockets were opened (the oldest is closed first).
    opened: VecDeque<u16>,
    /// Ports that could not be bound, not tried again.
    unbindable: HashMap<u16, ()>,
    c: UdpCounters,
    // Reused per burst (no allocation in steady state).
    rx_bufs: Vec<Mbuf>,
    rx_meta: Vec<RecvMeta>,
    order: Vec<(u16, u32)>,
    fate: Vec<Fate>,
    /// What each frame of the burst being sent says (index: its place in the burst).
    outs: Vec<Out>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Fate {
    Keep,
    Gone,
}

/// What a frame to send says about its datagram.
#[derive(Clone)]
struct Out {
    dst: SocketAddrV4,
    src_port: u16,
    tos: u8,
    ttl: u8,
    payload: std::ops::Range<usize>,
}

/// Read an Ethernet/IPv4/UDP frame the engine built; None if it is not one.
fn parse_out(f: &[u8]) -> Option<Out> {
    if f.len() < net::HDRS_LEN || f[12..14] != net::ETHERTYPE_IPV4.to_be_bytes() {
        return None;
    }
    let ip = &f[net::ETH_LEN..];
    let ihl = (ip[0] & 0x0f) as usize * 4;
    if ip[0] >> 4 != 4 || ihl < net::IPV4_LEN || ip[9] != net::IPPROTO_UDP {
        return None;
    }
    let total = u16::from_be_bytes([ip[2], ip[3]]) as usize;
    if total < ihl + net::UDP_LEN || total > ip.len() {
        return None;
    }
    let u = &ip[ihl..];
    let ulen = u16::from_be_bytes([u[4], u[5]]) as usize;
    if ulen < net::UDP_LEN || ihl + ulen > total {
        return None;
    }
    let start = net::ETH_LEN + ihl + net::UDP_LEN;
    Some(Out {
        dst: SocketAddrV4::new(
            Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]),
            u16::from_be_bytes([u[2], u[3]]),
        ),
        src_port: u16::from_be_bytes([u[0], u[1]]),
        tos: ip[1],
        ttl: ip[8],
        payload: start..start + ulen - net::UDP_LEN,
    })
}

fn is_busy(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock || e.raw_os_error() == Some(libc::ENOBUFS)
}

impl UdpIo {
    /// Bind the well-known port's socket; `pool` gives the mbufs received datagrams land in.
    pub fn new(p: UdpParams, pool: Mempool) -> io::Result<UdpIo> {
        let main = Sock::bind(SocketAddrV4::new(p.addr, p.port), p.bufs).map_err(|e| {
            let hint = match e.kind() {
                io::ErrorKind::AddrNotAvailable => {
                    " (the UDP backend binds to net.address: it must be an address of this \
                     host's kernel, see `ip addr`)"
                }
                io::ErrorKind::AddrInUse => {
                    " (another process, or another ferroce engine, has this port on this \
                     address)"
                }
                _ => "",
            };
            io::Error::new(
                e.kind(),
                format!("UDP backend: bind {}:{}: {e}{hint}", p.addr, p.port),
            )
        })?;
        Ok(UdpIo {
            main,
            by_port: HashMap::default(),
            opened: VecDeque::new(),
            unbindable: HashMap::default(),
            c: UdpCounters::default(),
            rx_bufs: Vec::with_capacity(MAX_BATCH),
            rx_meta: vec![RecvMeta::default(); MAX_BATCH],
            order: Vec::with_capacity(MAX_BATCH * 4),
            fate: Vec::with_capacity(MAX_BATCH * 4),
            outs: Vec::with_capacity(MAX_BATCH * 4),
            pool,
            p,
        })
    }

    /// The socket that sends from `port`, opened now if there is none yet (None: use the
    /// well-known port's socket).
    fn sock_for(&mut self, port: u16) -> Option<&Sock> {
        if port == self.p.port || self.unbindable.contains_key(&port) {
            return None;
        }
        if !self.by_port.contains_key(&port) {
            if self.p.max_sockets == 0 {
                return None;
            }
            match Sock::bind(SocketAddrV4::new(self.p.addr, port), self.p.bufs) {
                Ok(s) => {
                    while self.by_port.len() >= self.p.max_sockets {
                        let Some(old) = self.opened.pop_front() else {
                            break;
                        };
                        if self.by_port.remove(&old).is_some() {
                            self.c.sockets_closed += 1;
                        }
                    }
                    self.c.sockets_opened += 1;
                    self.by_port.insert(port, s);
                    self.opened.push_back(port);
                }
                Err(e) => {
                    self.c.last_error = Some(format!("bind source port {port}: {e}"));
                    self.unbindable.insert(port, ());
                    return None;
                }
            }
        }
        self.by_port.get(&port)
    }

    /// Send `idx` (frames of `pkts` with the same source port) from `port`'s socket, marking
    /// each frame's fate. Returns (frames, bytes) taken; stops at a full buffer.
    fn send_group(&mut self, pkts: &[Mbuf], port: u16, idx: &[(u16, u32)]) -> (usize, u64) {
        let fallback = self.sock_for(port).is_none() && port != self.p.port;
        if fallback {
            self.c.src_port_fallback += idx.len() as u64;
        }
        let sock = match self.by_port.get(&port) {
            Some(s) => s,
            None => &self.main,
        };
        let (mut frames, mut bytes) = (0usize, 0u64);
        let mut at = 0;
        let empty = SendItem {
            dst: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
            payload: &[],
            tos: 0,
            ttl: 0,
        };
        let mut list = [empty; MAX_BATCH];
        let gso_errno = [libc::EINVAL, libc::EOPNOTSUPP, libc::EIO];
        while at < idx.len() {
            let chunk = &idx[at..(at + MAX_BATCH).min(idx.len())];
            let mut n = 0;
            for &(_, i) in chunk {
                let f = pkts[i as usize].data();
                let o = &self.outs[i as usize];
                list[n] = SendItem {
                    dst: o.dst,
                    payload: &f[o.payload.clone()],
                    tos: o.tos,
                    ttl: o.ttl,
                };
                n += 1;
            }
            self.c.tx_calls += 1;
            match sock.send_batch(&list[..n], !self.c.gso_off) {
                Ok(k) => {
                    for (j, &(_, i)) in chunk[..k].iter().enumerate() {
                        self.fate[i as usize] = Fate::Gone;
                        frames += 1;
                        bytes += pkts[i as usize].len() as u64;
                        self.c.tx_bytes += list[j].payload.len() as u64;
                    }
                    self.c.tx_datagrams += k as u64;
                    if k < n {
                        // The kernel stopped early; the next call tells why (or sends them).
                        at += k;
                        if k == 0 {
                            break;
                        }
                        continue;
                    }
                    at += n;
                }
                Err(e) if is_busy(&e) => {
                    self.c.tx_busy += 1;
                    break;
                }
                Err(e) if !self.c.gso_off && gso_errno.contains(&e.raw_os_error().unwrap_or(0)) => {
                    // A kernel or device without UDP GSO: send the same chunk again, plainly.
                    self.c.gso_off = true;
                    self.c.last_error = Some(format!("UDP_SEGMENT refused ({e}): GSO off"));
                }
                Err(e) => {
                    // The first datagram was refused: drop it (counted), go on with the rest.
                    self.c.tx_errors += 1;
                    self.c.last_error = Some(format!("sendmmsg to {}: {e}", list[0].dst));
                    self.fate[chunk[0].1 as usize] = Fate::Gone;
                    frames += 1;
                    bytes += pkts[chunk[0].1 as usize].len() as u64;
                    at += 1;
                }
            }
        }
        (frames, bytes)
    }
}

impl PacketIo for UdpIo {
    fn rx_burst(&mut self, _now: u64, out: &mut Vec<Mbuf>, max: u16) -> usize {
        let want = (max as usize).min(MAX_BATCH);
        while self.rx_bufs.len() < want {
            match self.pool.alloc() {
                Some(m) => self.rx_bufs.push(m),
                None => {
                    self.c.rx_no_mbuf += 1;
                    break;
                }
            }
        }
        let n = self.rx_bufs.len().min(want);
        if n == 0 {
            return 0;
        }
        self.c.rx_calls += 1;
        let got =
            match self
                .main
                .recv_batch(&mut self.rx_bufs[..n], net::HDRS_LEN, &mut self.rx_meta)
            {
                Ok(g) => g,
                Err(e) => {
                    self.c.rx_errors += 1;
                    self.c.last_error = Some(format!("recvmmsg: {e}"));
                    return 0;
                }
            };
        let before = out.len();
        for (i, mut m) in self.rx_bufs.drain(..got).enumerate() {
            let r = self.rx_meta[i];
            if let Some(d) = r.dropped {
                self.c.rx_kernel_dropped = d as u64;
            }
            if r.truncated {
                self.c.rx_truncated += 1;
                continue;
            }
            self.c.rx_datagrams += 1;
            self.c.rx_bytes += r.len as u64;
            let dst = if r.dst.is_unspecified() {
                self.p.addr
            } else {
                r.dst
            };
            let h = UdpHeader {
                src_mac: PEER_MAC,
                dst_mac: UDP_MAC,
                src_ip: *r.src.ip(),
                dst_ip: dst,
                ip_id: 0,
                ttl: if r.ttl == 0 { 64 } else { r.ttl },
                ecn: r.tos & 3,
                src_port: r.src.port(),
                dst_port: self.p.port,
            };
            let len = net::write_udp(m.room_mut(), &h, r.len);
            // The DSCP bits ride along too (write_udp sets only ECN).
            m.room_mut()[net::ETH_LEN + 1] = r.tos;
            let ip = &mut m.room_mut()[net::ETH_LEN..net::ETH_LEN + net::IPV4_LEN];
            ip[10] = 0;
            ip[11] = 0;
            let c = net::ipv4_checksum(ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
            m.set_len(len);
            out.push(m);
        }
        out.len() - before
    }

    fn tx_burst(&mut self, _now: u64, pkts: &mut Vec<Mbuf>) -> TxCount {
        if pkts.is_empty() {
            return TxCount::default();
        }
        self.order.clear();
        self.fate.clear();
        self.fate.resize(pkts.len(), Fate::Keep);
        self.outs.clear();
        let mut dropped = (0usize, 0u64);
        for (i, m) in pkts.iter().enumerate() {
            let o = parse_out(m.data());
            self.outs.push(o.clone().unwrap_or(Out {
                dst: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
                src_port: 0,
                tos: 0,
                ttl: 0,
                payload: 0..0,
            }));
            match o {
                Some(o) => self.order.push((o.src_port, i as u32)),
                None => {
                    self.c.tx_not_udp += 1;
                    self.fate[i] = Fate::Gone;
                    dropped.0 += 1;
                    dropped.1 += m.len() as u64;
                }
            }
        }
        // Stable: each source port's (each path's) frames keep their order.
        self.order.sort_by_key(|&(p, _)| p);
        let order = std::mem::take(&mut self.order);
        let mut sent = TxCount {
            frames: dropped.0,
            bytes: dropped.1,
        };
        let mut g = 0;
        while g < order.len() {
            let port = order[g].0;
            let end = g + order[g..].iter().take_while(|&&(p, _)| p == port).count();
            let (f, b) = self.send_group(pkts, port, &order[g..end]);
            sent.frames += f;
            sent.bytes += b;
            g = end;
        }
        self.order = order;
        let mut k = 0;
        let fate = &self.fate;
        pkts.retain(|_| {
            k += 1;
            fate[k - 1] == Fate::Keep
        });
        sent
    }

    fn caps(&self) -> IoCaps {
        IoCaps {
            id: self.main.local_port(),
            name: format!("udp:{}:{}", self.p.addr, self.p.port),
            mac: UDP_MAC,
            max_burst: MAX_BATCH as u16,
            link_layer: false,
        }
    }

    fn link_up(&self) -> bool {
        true
    }

    fn stats(&self, out: &mut Map<String, Value>) {
        let mut v = serde_json::to_value(&self.c).unwrap_or(Value::Null);
        if let Some(o) = v.as_object_mut() {
            o.insert(
                "sockets_open".into(),
                (self.by_port.len() as u64 + 1).into(),
            );
        }
        out.insert("udp".into(), v);
    }

    fn release(&mut self, _out: &mut Vec<Mbuf>) {}

    fn flush(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(payload: usize, tos: u8) -> Vec<u8> {
        let mut b = vec![0u8; net::HDRS_LEN + payload.max(net::MIN_FRAME)];
        for (i, x) in b[net::HDRS_LEN..net::HDRS_LEN + payload]
            .iter_mut()
            .enumerate()
        {
            *x = i as u8;
        }
        let h = UdpHeader {
            src_mac: UDP_MAC,
            dst_mac: [0; 6],
            src_ip: Ipv4Addr::new(198, 18, 3, 1),
            dst_ip: Ipv4Addr::new(198, 18, 3, 2),
            ip_id: 7,
            ttl: 33,
            ecn: tos & 3,
            src_port: 50_001,
            dst_port: 4792,
        };
        let n = net::write_udp(&mut b, &h, payload);
        b.truncate(n);
        b
    }

    #[test]
    fn a_frame_the_engine_built_gives_its_datagram() {
        for payload in [0usize, 1, 17, 1400] {
            let f = frame(payload, net::ecn::CE);
            let o = parse_out(&f).expect("an IPv4/UDP frame");
            assert_eq!(o.dst, "198.18.3.2:4792".parse().unwrap());
            assert_eq!(o.src_port, 50_001);
            assert_eq!((o.tos, o.ttl), (net::ecn::CE, 33));
            // The payload, not the padding of a short frame.
            assert_eq!(o.payload.len(), payload, "payload {payload}");
            assert_eq!(
                f[o.payload.start..o.payload.end].first(),
                (payload > 0).then_some(&0)
            );
        }
    }

    #[test]
    fn what_is_not_an_ipv4_udp_frame_is_refused() {
        let good = frame(100, 0);
        let mut arp = good.clone();
        arp[12..14].copy_from_slice(&net::ETHERTYPE_ARP.to_be_bytes());
        let mut tcp = good.clone();
        tcp[net::ETH_LEN + 9] = 6;
        let mut long = good.clone();
        long[net::ETH_LEN + 2..net::ETH_LEN + 4].copy_from_slice(&2000u16.to_be_bytes());
        let mut udp_long = good.clone();
        udp_long[net::ETH_LEN + 24..net::ETH_LEN + 26].copy_from_slice(&500u16.to_be_bytes());
        let mut udp_short = good.clone();
        udp_short[net::ETH_LEN + 24..net::ETH_LEN + 26].copy_from_slice(&4u16.to_be_bytes());
        let mut v6 = good.clone();
        v6[net::ETH_LEN] = 0x65;
        for (what, f) in [
            ("arp", &arp[..]),
            ("tcp", &tcp[..]),
            ("ip length past the frame", &long[..]),
            ("udp length past the ip packet", &udp_long[..]),
            ("udp length below its header", &udp_short[..]),
            ("not ipv4", &v6[..]),
            ("truncated", &good[..30]),
        ] {
            assert!(parse_out(f).is_none(), "{what}");
        }
    }
}
