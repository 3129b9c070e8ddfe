//! An engine on several lcores: N shards, each an [`Engine`] with its own transport endpoint,
//! its own connections, its own registered memory and its own queues, polled by its own lcore;
//! nothing is shared between them per packet but lock-free queues of mbufs.
//!
//! **Which shard owns a packet.** Shard `k` of `N` draws its connection ids with
//! `id % N == k` (`EndpointConfig::id_shards`), so a datagram's `dst_conn` names its shard. An
//! OPEN (`dst_conn` 0) goes to shard `src_conn % N`: a duplicate OPEN finds the shard that
//! answered the first, and a peer sharded the same way has its shard `k` talk to ours. RSS
//! cannot do this: a NIC hashes the UDP source port, which the native protocol varies per path
//! (spec/transport.md §4), so one connection's paths would land on different queues.
//!
//! **Software dispatch on the first lcore.** The ports here have one queue (net_ring as the
//! benchmarks build it, net_af_packet, net_memif), so shard 0 alone polls the device
//! ([`DispatchIo`]): it reads the `dst_conn` of every received frame (its offset, no CRC) and
//! hands frames of other shards to them over a bounded queue, and it sends what the other
//! shards queued for it. An ARP reply is copied to every shard (each resolves its own next
//! hops); ARP requests and anything not for the transport stay on shard 0. Fault injection and
//! capture sit under the dispatcher, once for the whole engine. A NIC with several queues and
//! flow steering on the connection id could give each shard its own device queue instead.
//!
//! **Commands** reach the shard that owns their connection: [`ShardedHandle`] routes each by
//! its connection id, and opens new connections on the shards in turn.

use super::*;
use crate::io::{IoCaps, TxCount};
use crate::wake::Waiter;
use ferroce_transport::EndpointConfig;

/// Frames a shard's queue (either way) holds at most; more are dropped and counted.
const SHARD_QUEUE: usize = 2048;
/// Frames the dispatcher takes from the other shards' send queues per poll at most.
const FWD_TX_MAX: usize = 256;

/// Which shard a received frame is for (see the module comment). `None`: an ARP reply, for
/// every shard.
pub fn shard_of(frame: &[u8], udp_port: u16, shards: u32) -> Option<u32> {
    let shards = shards.max(1);
    let eth = if frame.get(12..14) == Some(&[0x81, 0x00]) {
        18
    } else {
        14
    };
    let Some(et) = frame.get(eth - 2..eth) else {
        return Some(0);
    };
    if et == [0x08, 0x06] {
        // ARP: the operation is at offset 6 of its header; 2 is a reply.
        return match frame.get(eth + 6..eth + 8) {
            Some([0, 2]) => None,
            _ => Some(0),
        };
    }
    if et != [0x08, 0x00] {
        return Some(0);
    }
    let Some(&vihl) = frame.get(eth) else {
        return Some(0);
    };
    let udp = eth + ((vihl & 0x0f) as usize) * 4;
    if frame.get(eth + 9) != Some(&17)
        || frame.get(udp + 2..udp + 4) != Some(&udp_port.to_be_bytes()[..])
    {
        return Some(0);
    }
    let t = udp + net::UDP_LEN;
    let be32 = |at: usize| {
        frame
            .get(t + at..t + at + 4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    };
    match be32(4) {
        Some(0) if frame.get(t + 1) == Some(&(ferroce_transport::wire::Opcode::Open as u8)) => {
            be32(8).map(|src| src % shards).or(Some(0))
        }
        Some(dst) if dst != 0 => Some(dst % shards),
        _ => Some(0),
    }
}

/// The two queues between the dispatcher and shard `k ≥ 1`.
struct Lane {
    rx: (Sender<Mbuf>, Receiver<Mbuf>),
    tx: (Sender<Mbuf>, Receiver<Mbuf>),
}

impl Lane {
    fn new() -> Self {
        Lane {
            rx: bounded(SHARD_QUEUE),
            tx: bounded(SHARD_QUEUE),
        }
    }
}

/// The dispatcher's end of one lane.
struct DispatchLane {
    rx: Sender<Mbuf>,
    tx: Receiver<Mbuf>,
    /// Wakes the shard's engine when it idles in a sleep.
    waker: Arc<Waiter>,
    rx_forwarded: u64,
    rx_dropped_full: u64,
    tx_forwarded: u64,
}

/// Shard 0's I/O: the device, with the frames of the other shards dispatched to them.
pub struct DispatchIo {
    inner: Box<dyn PacketIo>,
    pool: Mempool,
    udp_port: u16,
    lanes: Vec<DispatchLane>,
    scratch: Vec<Mbuf>,
    fwd: Vec<Mbuf>,
    moved: bool,
    arp_copies: u64,
    link: Arc<AtomicBool>,
}

impl PacketIo for DispatchIo {
    fn rx_burst(&mut self, now: u64, out: &mut Vec<Mbuf>, max: u16) -> usize {
        let n0 = out.len();
        if self.inner.rx_burst(now, &mut self.scratch, max) == 0 {
            return 0;
        }
        let shards = self.lanes.len() as u32 + 1;
        let mut woken = 0u64;
        for m in self.scratch.drain(..) {
            match shard_of(m.data(), self.udp_port, shards) {
                Some(0) => out.push(m),
                Some(k) => {
                    let l = &mut self.lanes[k as usize - 1];
                    match l.rx.try_send(m) {
                        Ok(()) => l.rx_forwarded += 1,
                        Err(_) => l.rx_dropped_full += 1,
                    }
                    woken |= 1 << (k - 1).min(63);
                    self.moved = true;
                }
                None => {
                    for l in self.lanes.iter_mut() {
                        let Some(mut c) = self.pool.alloc() else {
                            l.rx_dropped_full += 1;
                            continue;
                        };
                        let d = m.data();
                        let n = d.len().min(c.room_mut().len());
                        c.room_mut()[..n].copy_from_slice(&d[..n]);
                        c.set_len(n);
                        if l.rx.try_send(c).is_err() {
                            l.rx_dropped_full += 1;
                        }
                        self.arp_copies += 1;
                    }
                    woken = u64::MAX;
                    out.push(m);
                }
            }
        }
        for (i, l) in self.lanes.iter().enumerate() {
            if woken & (1 << i.min(63)) != 0 {
                l.waker.wake();
            }
        }
        out.len() - n0
    }

    fn tx_burst(&mut self, now: u64, pkts: &mut Vec<Mbuf>) -> TxCount {
        for l in self.lanes.iter_mut() {
            while self.fwd.len() < FWD_TX_MAX {
                let Ok(m) = l.tx.try_recv() else { break };
                l.tx_forwarded += 1;
                self.moved = true;
                self.fwd.push(m);
            }
        }
        // The other shards' frames first: they waited in a queue already.
        if !self.fwd.is_empty() {
            let _ = self.inner.tx_burst(now, &mut self.fwd);
        }
        self.inner.tx_burst(now, pkts)
    }

    fn caps(&self) -> IoCaps {
        self.inner.caps()
    }

    fn link_up(&self) -> bool {
        let up = self.inner.link_up();
        self.link.store(up, Ordering::Relaxed);
        up
    }

    fn stats(&self, out: &mut serde_json::Map<String, Value>) {
        let lanes: Vec<Value> = self
            .lanes
            .iter()
            .enumerate()
            .map(|(i, l)| {
                json!({
                    "shard": i + 1,
                    "rx_forwarded": l.rx_forwarded,
                    "rx_dropped_full": l.rx_dropped_full,
                    "tx_forwarded": l.tx_forwarded,
                })
            })
            .collect();
        out.insert(
            "dispatch".into(),
            json!({ "shards": self.lanes.len() + 1, "arp_copies": self.arp_copies,
                    "lanes": lanes, "tx_waiting": self.fwd.len() }),
        );
        self.inner.stats(out);
    }

    fn release(&mut self, out: &mut Vec<Mbuf>) {
        out.append(&mut self.fwd);
        for l in self.lanes.iter_mut() {
            while let Ok(m) = l.tx.try_recv() {
                out.push(m);
            }
        }
        self.inner.release(out);
    }

    fn flush(&mut self) {
        self.inner.flush();
    }

    fn rx_ready(&self) -> bool {
        self.lanes.iter().any(|l| !l.tx.is_empty())
    }

    fn take_moved(&mut self) -> bool {
        std::mem::take(&mut self.moved)
    }
}

/// The I/O of shard `k ≥ 1`: what the dispatcher handed it, and a queue to the device.
pub struct ShardIo {
    shard: usize,
    rx: Receiver<Mbuf>,
    tx: Sender<Mbuf>,
    /// Wakes shard 0 (the dispatcher) when it idles in a sleep.
    dispatcher: Arc<Waiter>,
    caps: IoCaps,
    link: Arc<AtomicBool>,
    rest: Vec<Mbuf>,
    tx_dropped_full: u64,
}

impl PacketIo for ShardIo {
    fn rx_burst(&mut self, _now: u64, out: &mut Vec<Mbuf>, max: u16) -> usize {
        let mut n = 0;
        while n < max as usize {
            let Ok(m) = self.rx.try_recv() else { break };
            out.push(m);
            n += 1;
        }
        n
    }

    fn tx_burst(&mut self, _now: u64, pkts: &mut Vec<Mbuf>) -> TxCount {
        let mut c = TxCount::default();
        let mut full = false;
        for m in pkts.drain(..) {
            if full {
                self.rest.push(m);
                continue;
            }
            let len = m.len() as u64;
            match self.tx.try_send(m) {
                Ok(()) => {
                    c.frames += 1;
                    c.bytes += len;
                }
                Err(TrySendError::Full(m)) => {
                    full = true;
                    self.rest.push(m);
                }
                // The dispatcher is gone (shutting down): nothing will carry it.
                Err(TrySendError::Disconnected(_)) => self.tx_dropped_full += 1,
            }
        }
        pkts.append(&mut self.rest);
        if c.frames > 0 {
            self.dispatcher.wake();
        }
        c
    }

    fn caps(&self) -> IoCaps {
        self.caps.clone()
    }

    fn link_up(&self) -> bool {
        self.link.load(Ordering::Relaxed)
    }

    fn stats(&self, out: &mut serde_json::Map<String, Value>) {
        out.insert(
            "shard".into(),
            json!({ "shard": self.shard, "rx_waiting": self.rx.len(),
                    "tx_waiting": self.tx.len(), "tx_dropped": self.tx_dropped_full }),
        );
    }

    fn release(&mut self, _out: &mut Vec<Mbuf>) {}

    fn flush(&mut self) {}

    fn rx_ready(&self) -> bool {
        !self.rx.is_empty()
    }
}

/// The application's side of a sharded engine: one [`EngineHandle`] per shard, and routing by
/// connection id.
#[derive(Debug)]
pub struct ShardedHandle {
    shards: Vec<EngineHandle>,
    next: std::sync::atomic::AtomicUsize,
}

impl ShardedHandle {
    /// The handles of the shards, shard 0 first (each with its own outputs and memory).
    pub fn shards(&self) -> &[EngineHandle] {
        &self.shards
    }

    /// The shard that owns connection `c`.
    pub fn shard_of(&self, c: ConnId) -> usize {
        c.0 as usize % self.shards.len()
    }

    /// The handle of the shard that owns connection `c`: its commands, outputs and memory.
    pub fn for_conn(&self, c: ConnId) -> &EngineHandle {
        &self.shards[self.shard_of(c)]
    }

    /// Open a connection on the next shard in turn; waits for it to be created.
    pub fn connect(&self, peer: Ipv4Addr) -> Option<ConnId> {
        let k = self.next.fetch_add(1, Ordering::Relaxed) % self.shards.len();
        self.shards[k].connect(peer)
    }

    /// Streams for every accepted connection, on every shard.
    pub fn listen(&self, streams: Vec<(u32, u32, u32)>) {
        for h in &self.shards {
            h.listen(streams.clone());
        }
    }

    pub fn create_stream(&self, conn: ConnId, local: u32, remote: u32, pd: u32) {
        self.for_conn(conn).create_stream(conn, local, remote, pd);
    }

    pub fn post_send(&self, conn: ConnId, stream: u32, wr: SendWr) {
        self.for_conn(conn).post_send(conn, stream, wr);
    }

    pub fn post_recv(&self, conn: ConnId, stream: u32, wr: RecvWr) {
        self.for_conn(conn).post_recv(conn, stream, wr);
    }

    pub fn close(&self, conn: ConnId) {
        self.for_conn(conn).close(conn);
    }

    /// Stop every shard.
    pub fn stop(&self) {
        for h in &self.shards {
            h.stop();
        }
    }

    pub fn stopped(&self) -> bool {
        self.shards.iter().all(|h| h.stopped())
    }
}

/// An engine of `shards` shards over `device` running the native transport (RoCEv2 QPs are not
/// sharded: one lcore), each shard's endpoint configured by `ecfg` with its own id class and
/// seed. The engines come back shard 0 (the dispatcher) first; run each on its own lcore
/// ([`Engine::run`]) or several on one ([`run_together`]). With one shard this is
/// [`Engine::on_device`] with [`native_transport`], exactly.
pub fn sharded(
    device: Box<dyn PacketIo>,
    pool: Mempool,
    shards: usize,
    ip_mtu: u16,
    ecfg: EndpointConfig,
    p: EngineParams,
    tsc_hz: u64,
) -> std::io::Result<(Vec<Engine>, ShardedHandle)> {
    let shards = shards.max(1);
    let transport = |k: usize| {
        let mut c = ecfg.clone();
        if shards > 1 {
            c.id_shards = shards as u32;
            c.id_shard = k as u32;
            c.seed ^= (k as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        native_transport(ip_mtu, c)
    };
    if shards == 1 {
        let (e, h) = Engine::on_device(device, pool, transport(0)?, p, tsc_hz)?;
        return Ok((vec![e], ShardedHandle::from_handles(vec![h])));
    }
    let (pcap, faults) = capture_and_faults(&p)?;
    let io = stack(device, pool.clone(), pcap, Some(faults));
    let caps = io.caps();
    let link = Arc::new(AtomicBool::new(true));
    let dispatcher = Arc::new(Waiter::new());
    // Shard k ≥ 1 first: the dispatcher needs their queues and wakers.
    let mut rest = Vec::new();
    let mut lanes = Vec::new();
    for k in 1..shards {
        let lane = Lane::new();
        let sio = ShardIo {
            shard: k,
            rx: lane.rx.1.clone(),
            tx: lane.tx.0.clone(),
            dispatcher: dispatcher.clone(),
            caps: caps.clone(),
            link: link.clone(),
            rest: Vec::new(),
            tx_dropped_full: 0,
        };
        let pk = shard_params(&p, k);
        let (e, h) = Engine::with_io(Box::new(sio), pool.clone(), transport(k)?, pk, tsc_hz)?;
        lanes.push(DispatchLane {
            rx: lane.rx.0,
            tx: lane.tx.1,
            waker: h.waker.clone(),
            rx_forwarded: 0,
            rx_dropped_full: 0,
            tx_forwarded: 0,
        });
        rest.push((e, h));
    }
    let t0 = transport(0)?;
    let dio = DispatchIo {
        inner: io,
        pool: pool.clone(),
        udp_port: t0.udp_port(),
        lanes,
        scratch: Vec::with_capacity(p.burst as usize),
        fwd: Vec::with_capacity(FWD_TX_MAX),
        moved: false,
        arp_copies: 0,
        link,
    };
    let (mut e0, mut h0) = Engine::with_io(Box::new(dio), pool, t0, p, tsc_hz)?;
    // The other shards wake the dispatcher through this one.
    e0.waker = dispatcher.clone();
    h0.waker = dispatcher;
    let mut engines = vec![e0];
    let mut handles = vec![h0];
    for (e, h) in rest {
        engines.push(e);
        handles.push(h);
    }
    Ok((engines, ShardedHandle::from_handles(handles)))
}

impl ShardedHandle {
    fn from_handles(shards: Vec<EngineHandle>) -> Self {
        ShardedHandle {
            shards,
            next: std::sync::atomic::AtomicUsize::new(0),
        }
    }
}

/// Shard `k`'s settings: its own counters file next to shard 0's, no capture or faults (the
/// dispatcher's I/O has them), another IPv4 id sequence.
fn shard_params(p: &EngineParams, k: usize) -> EngineParams {
    let mut q = p.clone();
    q.pcap = None;
    q.fault_tx = FaultConfig::default();
    q.fault_rx = FaultConfig::default();
    q.fault_schedule = Vec::new();
    q.seed = p.seed ^ ((k as u64) << 32);
    q.counters_json = p.counters_json.as_ref().map(|f| {
        let stem = f.file_stem().map(|s| s.to_string_lossy().into_owned());
        f.with_file_name(format!("{}.shard{k}.json", stem.unwrap_or_default()))
    });
    q
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp_frame(dst_port: u16, transport: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; net::HDRS_LEN + transport.len()];
        f[net::HDRS_LEN..].copy_from_slice(transport);
        let h = UdpHeader {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src_ip: Ipv4Addr::new(198, 18, 1, 41),
            dst_ip: Ipv4Addr::new(198, 18, 1, 42),
            ip_id: 0,
            ttl: 64,
            ecn: 0,
            src_port: 49152,
            dst_port,
        };
        let n = net::write_udp(&mut f, &h, transport.len());
        f.truncate(n);
        f
    }

    /// Native header: version, opcode, flags, path, dst_conn; an OPEN's src_conn follows.
    fn native(op: u8, dst: u32, src: u32) -> Vec<u8> {
        let mut t = vec![1, op, 0, 0];
        t.extend(dst.to_be_bytes());
        t.extend(src.to_be_bytes());
        t.extend([0u8; 16]);
        t
    }

    #[test]
    fn frames_go_to_the_shard_their_connection_id_names() {
        let port = ferroce_transport::wire::NATIVE_UDP_PORT;
        let open = ferroce_transport::wire::Opcode::Open as u8;
        for n in [2u32, 3, 4] {
            for id in [1u32, 6, 7, 0x8000_0001, u32::MAX] {
                let f = udp_frame(port, &native(0x03, id, 0));
                assert_eq!(shard_of(&f, port, n), Some(id % n));
                // An OPEN: by the initiator's id.
                let f = udp_frame(port, &native(open, 0, id));
                assert_eq!(shard_of(&f, port, n), Some(id % n));
            }
            // Not the transport's port, or dst_conn 0 without OPEN: shard 0 (which counts it).
            assert_eq!(shard_of(&udp_frame(53, &native(3, 5, 0)), port, n), Some(0));
            assert_eq!(
                shard_of(&udp_frame(port, &native(3, 0, 5)), port, n),
                Some(0)
            );
        }
        let mut arp = vec![0u8; 64];
        let a = Arp {
            op: 2,
            sender_mac: [2, 0, 0, 0, 0, 2],
            sender_ip: Ipv4Addr::new(198, 18, 1, 42),
            target_mac: [2, 0, 0, 0, 0, 1],
            target_ip: Ipv4Addr::new(198, 18, 1, 41),
        };
        let len = net::write_arp(&mut arp, [2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], &a);
        assert_eq!(
            shard_of(&arp[..len], 4792, 2),
            None,
            "a reply is for every shard"
        );
        let len = net::write_arp(
            &mut arp,
            net::BROADCAST,
            [2, 0, 0, 0, 0, 2],
            &Arp { op: 1, ..a },
        );
        assert_eq!(shard_of(&arp[..len], 4792, 2), Some(0), "requests: shard 0");
        // Any truncation of a frame is classified without a panic.
        let f = udp_frame(port, &native(open, 0, 9));
        for cut in 0..f.len() {
            let k = shard_of(&f[..cut], port, 2);
            assert!(matches!(k, Some(0) | Some(1)), "{cut}: {k:?}");
        }
    }
}
