//! A compliance target for tests that is not the DPDK engine: the transport's `Endpoint` on a
//! kernel UDP socket, with the profile of spec/compliance.md, and a switch that makes it
//! misbehave on the wire in one specific way (test-only: each [`Broken`] is a real wrong
//! packet a faulty implementation could send, or a check it could skip).

use ferroce_transport::mem::Regions;
use ferroce_transport::wire::{Body, NackReason, Packet};
use ferroce_transport::*;
use ferroce_workload::compliance as profile;
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the peer misbehaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broken {
    /// Conforming (the transport's own behaviour).
    None,
    /// CLOSE_ACK echoes a nonzero reason (WIRE-28 wants 0).
    CloseAckReason,
    /// Skips the CRC check: every datagram's trailer is recomputed before the endpoint sees
    /// it, so a corrupted packet is processed (VAL-6).
    NoCrcCheck,
    /// PROBE_ACK leaves from the peer's own port instead of the PROBE's (PATH-8).
    ProbeAckOwnPort,
    /// ACKs carry ts_echo 0 (ACK-4).
    NoTsEcho,
    /// ACKs carry an empty SACK bitmap (ACK-1: the hole is not reported).
    NoSack,
    /// NACK RemoteAccess is sent as InvalidRequest (SEC-2's refusal reason).
    WrongNackReason,
    /// An out-of-window PSN is dropped silently, without its NACK Sequence (RECV-4).
    NoSequenceNack,
}

/// What becomes of an outgoing datagram.
enum Fate {
    /// Sent from the port the endpoint chose.
    Keep,
    /// Sent from this port instead.
    From(u16),
    Drop,
}

fn reseal(b: &mut [u8]) {
    let n = b.len() - 4;
    let c = crc32fast::hash(&b[..n]);
    b[n..].copy_from_slice(&c.to_be_bytes());
}

/// Rewrite an outgoing datagram as the misbehaviour says.
fn mangle(broken: Broken, b: &mut [u8], own_port: u16) -> Fate {
    let Ok(p) = Packet::parse(b) else {
        return Fate::Keep;
    };
    match (broken, p.body) {
        (Broken::CloseAckReason, Body::CloseAck(_)) => {
            b[12..16].copy_from_slice(&7u32.to_be_bytes());
        }
        (Broken::ProbeAckOwnPort, Body::ProbeAck(_)) => return Fate::From(own_port),
        (Broken::NoSequenceNack, Body::Nack(n)) if n.reason == NackReason::Sequence => {
            return Fate::Drop
        }
        (Broken::NoTsEcho, Body::Ack(_)) => b[52..56].fill(0),
        (Broken::NoSack, Body::Ack(_)) => b[12..44].fill(0),
        (Broken::WrongNackReason, Body::Nack(n)) if n.reason == NackReason::RemoteAccess => {
            b[20] = NackReason::InvalidRequest as u8;
        }
        _ => return Fate::Keep,
    }
    reseal(b);
    Fate::Keep
}

/// The peer, running on its own thread in the namespace it was started in; stopped on drop.
pub struct BrokenPeer {
    pub keys: profile::ProfileKeys,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BrokenPeer {
    /// Start it in network namespace `ns`, at `ip`:4792.
    pub fn start(ns: &str, ip: Ipv4Addr, broken: Broken) -> BrokenPeer {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let st = stop.clone();
        let ns = ns.to_string();
        let thread = std::thread::spawn(move || {
            ferroce_dataplane::netns::enter_netns(&ns).expect("enter the namespace");
            let mut mem = Regions::new();
            let keys = profile::register(&mut mem);
            let sock = UdpSocket::bind(SocketAddrV4::new(ip, wire::NATIVE_UDP_PORT))
                .expect("bind the peer's socket");
            sock.set_read_timeout(Some(Duration::from_micros(200)))
                .unwrap();
            tx.send(keys).unwrap();
            run(sock, ip, mem, keys, broken, &st);
        });
        let keys = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the peer started");
        BrokenPeer {
            keys,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for BrokenPeer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(
    sock: UdpSocket,
    ip: Ipv4Addr,
    mut mem: Regions,
    keys: profile::ProfileKeys,
    broken: Broken,
    stop: &AtomicBool,
) {
    let mut cfg = EndpointConfig {
        seed: 0xc0ff_ee00 ^ std::process::id() as u64,
        incarnation: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
        line_rate_mbps: 10_000,
        ..EndpointConfig::default()
    };
    cfg.conn.paths = 1;
    cfg.conn.mtu = 1024;
    // RTOs well above the suite's answer time, as spec/compliance.md asks of a target.
    cfg.conn.min_rto_ns = 10_000_000;
    cfg.conn.initial_rto_ns = 10_000_000;
    let mut ep = Endpoint::new(cfg);
    let t0 = Instant::now();
    let now = || t0.elapsed().as_nanos() as u64 + 1;
    let own_port = wire::NATIVE_UDP_PORT;
    // Sockets by UDP source port, as the endpoint picks them (reflected or its entropy).
    let mut tx: HashMap<u16, UdpSocket> = HashMap::new();
    let mut buf = vec![0u8; 65_536];
    let mut out = vec![0u8; 65_536];
    while !stop.load(Ordering::SeqCst) {
        if let Ok((n, std::net::SocketAddr::V4(from))) = sock.recv_from(&mut buf) {
            if broken == Broken::NoCrcCheck && n >= 12 {
                reseal(&mut buf[..n]);
            }
            ep.handle_datagram(now(), *from.ip(), from.port(), false, &buf[..n], &mut mem);
        }
        if ep.poll_timeout().is_some_and(|t| t <= now()) {
            ep.handle_timeout(now());
        }
        while let Some(ev) = ep.poll_event() {
            if let Event::Accepted { conn, .. } = ev {
                let _ = ep.create_stream(conn, profile::STREAM, profile::STREAM, profile::PD);
                for slot in 0..profile::RECVS {
                    let _ = ep.post_recv(conn, profile::STREAM, profile::recv_wr(&keys, slot));
                }
            }
        }
        while let Some(c) = ep.poll_completion() {
            if c.status == Status::Success
                && matches!(c.op, CompletionOp::Recv | CompletionOp::RecvWriteImm)
            {
                let _ = ep.post_recv(
                    c.conn,
                    profile::STREAM,
                    profile::recv_wr(&keys, c.wr_id as u32),
                );
            }
        }
        while let Some(t) = ep.poll_transmit(now(), &mut out, &mut mem) {
            let b = &mut out[..t.len];
            let port = match mangle(broken, b, own_port) {
                Fate::Keep => t.src_port,
                Fate::From(p) => p,
                Fate::Drop => continue,
            };
            let s = match tx.entry(port) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    let s = if port == own_port {
                        sock.try_clone().expect("clone the peer's socket")
                    } else {
                        match UdpSocket::bind(SocketAddrV4::new(ip, port)) {
                            Ok(s) => s,
                            Err(_) => continue,
                        }
                    };
                    e.insert(s)
                }
            };
            let _ = s.send_to(b, SocketAddrV4::new(t.dst, t.dst_port));
        }
    }
}
