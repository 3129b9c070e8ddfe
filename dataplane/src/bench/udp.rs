//! `ferroce bench dataplane --pmd udp`: the kernel UDP backend ([`crate::udp`]) between two
//! addresses on the loopback of the benchmark's own network namespace: the raw rate of the
//! same sockets (a loop sending datagrams with `sendmmsg` from one `UdpIo` and receiving them
//! with `recvmmsg` on the other, copying each payload in and out like the DPDK raw loop),
//! then the transport's rate on two engines over them.

use super::{data_room, raw_loop, Device, RawRun};
use crate::io::PacketIo;
use crate::net::UdpHeader;
use crate::udp::{SockBufs, UdpIo, UdpParams, UDP_MAC};
use ferroce_dpdk_sys::{Eal, Mempool};
use std::net::Ipv4Addr;

/// The two engines' addresses, put on the namespace's loopback by the benchmark.
pub const ADDRS: [Ipv4Addr; 2] = [
    Ipv4Addr::new(198, 18, 201, 1),
    Ipv4Addr::new(198, 18, 201, 2),
];

/// Two UDP backends on [`ADDRS`], each with its own pool of `mbufs`.
pub fn pair(eal: &Eal, k: u32, port: u16, mbufs: u32) -> Result<[(UdpIo, Mempool); 2], String> {
    let mk = |i: usize| -> Result<(UdpIo, Mempool), String> {
        let pool = Mempool::new(eal, &format!("fbu{k}_{i}"), mbufs, 256, data_room(1500))
            .map_err(|e| e.to_string())?;
        let io = UdpIo::new(
            UdpParams {
                addr: ADDRS[i],
                port,
                max_sockets: 1024,
                bufs: SockBufs {
                    rcvbuf: 4 << 20,
                    sndbuf: 0,
                },
            },
            pool.clone(),
        )
        .map_err(|e| e.to_string())?;
        Ok((io, pool))
    };
    Ok([mk(0)?, mk(1)?])
}

/// Two engines' devices for a transport run.
pub fn devices(eal: &Eal, k: u32) -> Result<[Device; 2], String> {
    let [(a, pa), (b, pb)] = pair(eal, k, 4792, 16383)?;
    Ok([(Box::new(a), pa), (Box::new(b), pb)])
}

/// The raw rate of `frame`-byte frames (UDP payload `frame` − 42) through the sockets, on
/// the worker lcore.
pub fn raw(eal: &Eal, k: u32, frame: usize, secs: f64) -> Result<RawRun, String> {
    let [(mut a, pool), (mut b, _pb)] = pair(eal, k, 4792, 8191)?;
    let lcore = *eal
        .worker_lcores()
        .first()
        .ok_or("the benchmark needs a worker lcore")?;
    let hdr = UdpHeader {
        src_mac: UDP_MAC,
        dst_mac: UDP_MAC,
        src_ip: ADDRS[0],
        dst_ip: ADDRS[1],
        ip_id: 0,
        ttl: 64,
        ecn: 0,
        src_port: 49152,
        dst_port: 4792,
    };
    let job = eal
        .launch(lcore, move || {
            let r = raw_loop(
                &pool,
                &hdr,
                frame,
                secs,
                &mut |q| {
                    a.tx_burst(0, q);
                    // A full socket buffer: what the kernel did not take is dropped, as a
                    // PMD's full ring would refuse it, and counted as not received.
                    q.clear();
                },
                &mut |q| {
                    b.rx_burst(0, q, 64);
                },
            );
            (r, a, b)
        })
        .map_err(|e| e.to_string())?;
    let (r, _a, _b) = job.join();
    Ok(r)
}
