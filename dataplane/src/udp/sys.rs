//! The kernel UDP backend's system calls: socket options, `sendmmsg` and `recvmmsg` with the
//! ancillary data the backend needs (IP_PKTINFO and IP_TOS/IP_TTL in, IP_TOS/IP_TTL out).
//! Every `unsafe` of the backend is here; the rest of it is safe code over [`Sock`].

use ferroce_dpdk_sys::Mbuf;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::os::fd::AsRawFd;

/// Most messages one `sendmmsg`/`recvmmsg` call carries (its arrays live on the stack).
pub const MAX_BATCH: usize = 64;

/// Room for the control messages of one datagram: IP_PKTINFO (12 bytes), IP_TOS and IP_TTL
/// (an int each on send; a byte and an int on receive) and SO_RXQ_OVFL (a u32), each with
/// its cmsghdr and padding (104 bytes in all on x86_64).
const CMSG_ROOM: usize = 128;
/// `UDP_SEGMENT` (linux/udp.h): the segment size of a GSO send, as a control message.
const UDP_SEGMENT: i32 = 103;
/// The kernel's limits on one GSO send: segments (UDP_MAX_SEGMENTS) and bytes (an IP
/// datagram's 64 KiB less the headers).
const GSO_MAX_SEGS: usize = 64;
const GSO_MAX_BYTES: usize = 65_000;

/// One datagram received by [`Sock::recv_batch`].
#[derive(Clone, Copy, Debug)]
pub struct RecvMeta {
    pub src: SocketAddrV4,
    /// The destination address (IP_PKTINFO), or unspecified if the kernel gave none.
    pub dst: Ipv4Addr,
    pub tos: u8,
    pub ttl: u8,
    pub len: usize,
    /// The datagram was larger than the buffer (MSG_TRUNC): its tail is lost.
    pub truncated: bool,
    /// The socket's running count of datagrams dropped for a full receive buffer
    /// (SO_RXQ_OVFL), if the kernel reported it.
    pub dropped: Option<u32>,
}

impl Default for RecvMeta {
    fn default() -> Self {
        RecvMeta {
            src: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
            dst: Ipv4Addr::UNSPECIFIED,
            tos: 0,
            ttl: 0,
            len: 0,
            truncated: false,
            dropped: None,
        }
    }
}

/// One datagram for [`Sock::send_batch`].
#[derive(Clone, Copy, Debug)]
pub struct SendItem<'a> {
    pub dst: SocketAddrV4,
    pub payload: &'a [u8],
    pub tos: u8,
    pub ttl: u8,
}

/// A nonblocking IPv4 UDP socket, closed on drop.
#[derive(Debug)]
pub struct Sock(UdpSocket);

/// Sizes of the kernel buffers (0: the system default).
#[derive(Clone, Copy, Debug, Default)]
pub struct SockBufs {
    pub rcvbuf: u32,
    pub sndbuf: u32,
}

fn setsockopt_int(fd: i32, level: i32, name: i32, v: i32) -> io::Result<()> {
    // SAFETY: `v` lives for the call and its size is passed; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &v as *const i32 as *const libc::c_void,
            size_of::<i32>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl Sock {
    /// Bind to `addr` (the port must be free: no SO_REUSEADDR, so two engines never share
    /// one), nonblocking, with the destination address and TOS/TTL reported on receive and
    /// Don't Fragment set on send (the transport sizes its datagrams to the path MTU).
    pub fn bind(addr: SocketAddrV4, bufs: SockBufs) -> io::Result<Sock> {
        let s = UdpSocket::bind(addr)?;
        s.set_nonblocking(true)?;
        let fd = s.as_raw_fd();
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_PKTINFO, 1)?;
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVTOS, 1)?;
        setsockopt_int(fd, libc::IPPROTO_IP, libc::IP_RECVTTL, 1)?;
        // The socket's count of datagrams the kernel dropped (a full buffer) comes along.
        setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1)?;
        setsockopt_int(
            fd,
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DO,
        )?;
        if bufs.rcvbuf > 0 {
            setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, bufs.rcvbuf as i32)?;
        }
        if bufs.sndbuf > 0 {
            setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, bufs.sndbuf as i32)?;
        }
        Ok(Sock(s))
    }

    pub fn local_port(&self) -> u16 {
        self.0.local_addr().map(|a| a.port()).unwrap_or(0)
    }

    /// Send up to [`MAX_BATCH`] datagrams in one `sendmmsg`, each with its own TOS and TTL.
    /// With `gso`, a run of datagrams to the same destination with the same TOS and TTL and
    /// the same length (the run's last may be shorter) goes as one message of several iovecs
    /// (no copy) with `UDP_SEGMENT`: the kernel cuts it into those datagrams after one trip
    /// through its stack instead of one per datagram. Returns how many datagrams the kernel
    /// took (from the front); an error only if it took none.
    pub fn send_batch(&self, items: &[SendItem<'_>], gso: bool) -> io::Result<usize> {
        let n = items.len().min(MAX_BATCH);
        if n == 0 {
            return Ok(0);
        }
        // Runs: (first item, count). A run never spans more than the kernel's 64 segments
        // or 64 KiB.
        let mut runs = [(0usize, 0usize); MAX_BATCH];
        let mut nruns = 0;
        let mut i = 0;
        while i < n {
            let a = &items[i];
            let mut k = 1;
            let mut total = a.payload.len();
            while gso && i + k < n && k < GSO_MAX_SEGS {
                let b = &items[i + k];
                let same = b.dst == a.dst && b.tos == a.tos && b.ttl == a.ttl;
                let prev_full = items[i + k - 1].payload.len() == a.payload.len();
                if !same || !prev_full || b.payload.len() > a.payload.len() || b.payload.is_empty()
                {
                    break;
                }
                if total + b.payload.len() > GSO_MAX_BYTES {
                    break;
                }
                total += b.payload.len();
                k += 1;
            }
            runs[nruns] = (i, k);
            nruns += 1;
            i += k;
        }
        // SAFETY: all-zero is a valid value of these plain C structs (null pointers, zero
        // lengths).
        let mut hdrs: [libc::mmsghdr; MAX_BATCH] = unsafe { zeroed() };
        // SAFETY: as above.
        let mut addrs: [libc::sockaddr_in; MAX_BATCH] = unsafe { zeroed() };
        // SAFETY: as above.
        let mut iovs: [libc::iovec; MAX_BATCH] = unsafe { zeroed() };
        let mut cmsgs = [[0u64; CMSG_ROOM / 8]; MAX_BATCH];
        for (j, it) in items[..n].iter().enumerate() {
            iovs[j] = libc::iovec {
                // The kernel only reads from it (sendmmsg).
                iov_base: it.payload.as_ptr() as *mut libc::c_void,
                iov_len: it.payload.len(),
            };
        }
        for (m, &(first, count)) in runs[..nruns].iter().enumerate() {
            let it = &items[first];
            addrs[m] = sockaddr(it.dst);
            let h = &mut hdrs[m].msg_hdr;
            h.msg_name = &mut addrs[m] as *mut libc::sockaddr_in as *mut libc::c_void;
            h.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
            h.msg_iov = &mut iovs[first];
            h.msg_iovlen = count as _;
            h.msg_control = cmsgs[m].as_mut_ptr() as *mut libc::c_void;
            h.msg_controllen = CMSG_ROOM as _;
            let seg = (count > 1).then_some(it.payload.len() as u16);
            // SAFETY: msg_control points at CMSG_ROOM bytes, 8-aligned, that outlive the
            // call; two int-sized control messages and one u16 (3 × CMSG_SPACE(4) = 48
            // bytes) fit, so CMSG_FIRSTHDR/NXTHDR return pointers inside it, not null.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(h);
                let mut used = 0usize;
                for (ty, v) in [(libc::IP_TOS, it.tos as i32), (libc::IP_TTL, it.ttl as i32)] {
                    (*c).cmsg_level = libc::IPPROTO_IP;
                    (*c).cmsg_type = ty;
                    (*c).cmsg_len = libc::CMSG_LEN(size_of::<i32>() as u32) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut i32, v);
                    used += libc::CMSG_SPACE(size_of::<i32>() as u32) as usize;
                    c = libc::CMSG_NXTHDR(h, c);
                }
                if let Some(seg) = seg {
                    (*c).cmsg_level = libc::SOL_UDP;
                    (*c).cmsg_type = UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c) as *mut u16, seg);
                    used += libc::CMSG_SPACE(size_of::<u16>() as u32) as usize;
                }
                h.msg_controllen = used as _;
            }
        }
        // SAFETY: `hdrs[..nruns]` are valid msghdrs whose pointers (address, a run of iovecs
        // over borrowed payloads, control buffer) all live until the call returns; the socket
        // fd is open (owned by self).
        let rc = unsafe {
            libc::sendmmsg(
                self.0.as_raw_fd(),
                hdrs.as_mut_ptr(),
                nruns as u32,
                libc::MSG_DONTWAIT,
            )
        };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(runs[..rc as usize].iter().map(|r| r.1).sum())
        }
    }

    /// Receive up to `min(mbufs.len(), MAX_BATCH)` datagrams in one `recvmmsg`, datagram `i`
    /// into `mbufs[i]`'s room from byte `offset` on; its addresses and lengths into `meta[i]`.
    /// Returns how many arrived (0 if none was waiting).
    pub fn recv_batch(
        &self,
        mbufs: &mut [Mbuf],
        offset: usize,
        meta: &mut [RecvMeta],
    ) -> io::Result<usize> {
        let n = mbufs.len().min(meta.len()).min(MAX_BATCH);
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: all-zero is a valid value of these plain C structs.
        let mut hdrs: [libc::mmsghdr; MAX_BATCH] = unsafe { zeroed() };
        // SAFETY: as above.
        let mut addrs: [libc::sockaddr_in; MAX_BATCH] = unsafe { zeroed() };
        // SAFETY: as above.
        let mut iovs: [libc::iovec; MAX_BATCH] = unsafe { zeroed() };
        let mut cmsgs = [[0u64; CMSG_ROOM / 8]; MAX_BATCH];
        for (i, m) in mbufs[..n].iter_mut().enumerate() {
            let room = m.room_mut();
            let at = offset.min(room.len());
            let room = &mut room[at..];
            iovs[i] = libc::iovec {
                iov_base: room.as_mut_ptr() as *mut libc::c_void,
                iov_len: room.len(),
            };
            let h = &mut hdrs[i].msg_hdr;
            h.msg_name = &mut addrs[i] as *mut libc::sockaddr_in as *mut libc::c_void;
            h.msg_namelen = size_of::<libc::sockaddr_in>() as libc::socklen_t;
            h.msg_iov = &mut iovs[i];
            h.msg_iovlen = 1;
            h.msg_control = cmsgs[i].as_mut_ptr() as *mut libc::c_void;
            h.msg_controllen = CMSG_ROOM as _;
        }
        // SAFETY: `hdrs[..n]` point at address, iovec (each over a distinct mbuf's room,
        // exclusively borrowed through `mbufs`) and control buffers that live until the call
        // returns; the kernel writes at most the lengths given. No timeout pointer: with
        // MSG_DONTWAIT the call never blocks.
        let rc = unsafe {
            libc::recvmmsg(
                self.0.as_raw_fd(),
                hdrs.as_mut_ptr(),
                n as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        let got = rc as usize;
        for i in 0..got {
            let h = &hdrs[i].msg_hdr;
            let a = &addrs[i];
            let mut r = RecvMeta {
                src: SocketAddrV4::new(
                    Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                    u16::from_be(a.sin_port),
                ),
                len: hdrs[i].msg_len as usize,
                truncated: h.msg_flags & libc::MSG_TRUNC != 0,
                ..RecvMeta::default()
            };
            // SAFETY: the kernel filled msg_control with msg_controllen bytes of well-formed
            // control messages inside our buffer; CMSG_FIRSTHDR/NXTHDR stay within it (they
            // return null at its end), and each payload read is bounds-checked by its
            // cmsg_len before an unaligned read of its type's size.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(h);
                while !c.is_null() {
                    let data = libc::CMSG_DATA(c);
                    let dlen = ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize);
                    if (*c).cmsg_level == libc::SOL_SOCKET
                        && (*c).cmsg_type == libc::SO_RXQ_OVFL
                        && dlen >= size_of::<u32>()
                    {
                        r.dropped = Some(std::ptr::read_unaligned(data as *const u32));
                    }
                    if (*c).cmsg_level == libc::IPPROTO_IP {
                        match (*c).cmsg_type {
                            libc::IP_PKTINFO if dlen >= size_of::<libc::in_pktinfo>() => {
                                let p = std::ptr::read_unaligned(data as *const libc::in_pktinfo);
                                r.dst = Ipv4Addr::from(u32::from_be(p.ipi_addr.s_addr));
                            }
                            libc::IP_TOS if dlen >= 1 => r.tos = *data,
                            libc::IP_TTL if dlen >= size_of::<i32>() => {
                                r.ttl = std::ptr::read_unaligned(data as *const i32) as u8;
                            }
                            _ => {}
                        }
                    }
                    c = libc::CMSG_NXTHDR(h, c);
                }
            }
            meta[i] = r;
        }
        Ok(got)
    }
}

fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    // SAFETY: all-zero is a valid sockaddr_in (the padding must be zero).
    let mut s: libc::sockaddr_in = unsafe { zeroed() };
    s.sin_family = libc::AF_INET as libc::sa_family_t;
    s.sin_port = a.port().to_be();
    s.sin_addr = libc::in_addr {
        s_addr: u32::from(*a.ip()).to_be(),
    };
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::netns;

    /// GSO sends give the receiver exactly the datagrams asked for, in order, whether a run
    /// ends in a shorter one, the destination changes or the TOS does; and the plain path the
    /// same. Root (a namespace of its own, its loopback carrying 198.18.x addresses).
    #[test]
    fn gso_runs_arrive_as_the_datagrams_they_were() {
        if !netns::is_root() {
            eprintln!("SKIPPED gso_runs_arrive_as_the_datagrams_they_were: needs root");
            return;
        }
        let ns = netns::VethLoop::create("gs").expect("namespace");
        let third = 100 + (std::process::id() % 100) as u8;
        let ip = move |h: u8| Ipv4Addr::new(198, 18, third, h);
        for h in [1, 2, 3] {
            ns.add_addr(&format!("{}/32", ip(h)), "lo")
                .expect("address");
        }
        let name = ns.ns.clone();
        std::thread::spawn(move || {
            netns::enter_netns(&name).expect("enter");
            let tx = Sock::bind(SocketAddrV4::new(ip(1), 0), SockBufs::default()).unwrap();
            let rx = [2, 3].map(|h| {
                let s = UdpSocket::bind(SocketAddrV4::new(ip(h), 0)).unwrap();
                s.set_read_timeout(Some(std::time::Duration::from_millis(500)))
                    .unwrap();
                s
            });
            let dst = |k: usize| match rx[k].local_addr().unwrap() {
                std::net::SocketAddr::V4(a) => a,
                _ => unreachable!(),
            };
            // (receiver, length, tos): a run of 5, a shorter tail, another destination, a
            // different TOS, then a run longer than one call's worth of segments would be.
            let mut plan = vec![(0, 100, 0); 5];
            plan.extend([(0, 40, 0), (1, 100, 0), (1, 100, 0), (0, 100, 2)]);
            plan.extend(vec![(0, 8, 0); 20]);
            let bufs: Vec<Vec<u8>> = plan
                .iter()
                .enumerate()
                .map(|(i, &(_, len, _))| vec![i as u8; len])
                .collect();
            for gso in [true, false] {
                let items: Vec<SendItem<'_>> = plan
                    .iter()
                    .zip(&bufs)
                    .map(|(&(k, _, tos), b)| SendItem {
                        dst: dst(k),
                        payload: b,
                        tos,
                        ttl: 64,
                    })
                    .collect();
                assert_eq!(tx.send_batch(&items, gso).unwrap(), plan.len(), "gso {gso}");
                for (k, r) in rx.iter().enumerate() {
                    let mut buf = [0u8; 2048];
                    for (i, &(want_k, len, _)) in plan.iter().enumerate() {
                        if want_k != k {
                            continue;
                        }
                        let (n, _) = r.recv_from(&mut buf).expect("a datagram");
                        assert_eq!(&buf[..n], &bufs[i][..], "gso {gso}: datagram {i} ({len} B)");
                    }
                }
            }
        })
        .join()
        .expect("the test thread");
    }
}
