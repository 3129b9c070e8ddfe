//! Simulator speed: a 128-host k=8 fat tree at 100 Gb/s running a random permutation of
//! window-limited flows (4 KiB data packets sprayed over 8 source ports, one 64 B ACK per data
//! packet), for 10 ms of simulated time by default. Hosts recycle received payload buffers, so
//! the figure measures the simulator rather than malloc.
//!
//! `cargo run --release -p ferroce-sim --example fabric_bench [-- <sim_ms>]`

use std::io::Write;
use std::time::Instant;

use ferroce_sim::{host_ip, topology, Datagram, Ecn, Host, HostId, Nanos, Rng, TopologyConfig};

const WINDOW: u32 = 48;
const RTO: Nanos = 200_000;

struct Flowy {
    ip: [u8; 4],
    peer: [u8; 4],
    inflight: u32,
    next_sport: u16,
    acks_owed: Vec<([u8; 4], u16)>,
    last_progress: Nanos,
    data_rx: u64,
    acked: u64,
    /// Received payload buffers, reused for sending (keeps malloc out of the measurement).
    data_pool: Vec<Vec<u8>>,
    ack_pool: Vec<Vec<u8>>,
}

impl Host for Flowy {
    fn handle_datagram(&mut self, now: Nanos, _port: usize, d: Datagram) {
        if d.payload.len() > 64 {
            self.data_rx += 1;
            self.acks_owed.push((d.src_ip, d.src_port));
            self.data_pool.push(d.payload);
        } else {
            self.inflight = self.inflight.saturating_sub(1);
            self.acked += 1;
            self.last_progress = now;
            self.ack_pool.push(d.payload);
        }
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Datagram> {
        if let Some((dst, sport)) = self.acks_owed.pop() {
            let p = self.ack_pool.pop().unwrap_or_else(|| vec![0; 64]);
            return Some(Datagram::udp(self.ip, dst, sport, 4791, p));
        }
        if self.inflight >= WINDOW {
            return None;
        }
        if self.inflight == 0 {
            self.last_progress = now;
        }
        self.inflight += 1;
        self.next_sport = 49152 + (self.next_sport + 1) % 8;
        let p = self.data_pool.pop().unwrap_or_else(|| vec![0; 4096]);
        let mut d = Datagram::udp(self.ip, self.peer, self.next_sport, 4791, p);
        d.ecn = Ecn::Ect0;
        Some(d)
    }

    fn poll_timeout(&mut self) -> Option<Nanos> {
        (self.inflight > 0).then_some(self.last_progress + RTO)
    }

    fn handle_timeout(&mut self, now: Nanos) {
        // Whatever is still out is presumed lost: reopen the window.
        self.inflight = 0;
        self.last_progress = now;
    }
}

fn main() {
    let sim_ms: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let cfg = TopologyConfig::default();
    let topo = topology::fat_tree(&cfg, 8);
    let n = topo.num_hosts();
    // Random derangement-ish permutation.
    let mut perm: Vec<usize> = (0..n).collect();
    let mut rng = Rng::new(42);
    for i in (1..n).rev() {
        let j = rng.below(i as u64) as usize; // Sattolo: a single cycle, no fixed points
        perm.swap(i, j);
    }
    let mut sim = topo.build_with(|id, ip| Flowy {
        ip,
        peer: host_ip(HostId(perm[id.index()] as u32)),
        inflight: 0,
        next_sport: 0,
        acks_owed: Vec::new(),
        last_progress: 0,
        data_rx: 0,
        acked: 0,
        data_pool: Vec::new(),
        ack_pool: Vec::new(),
    });
    let t0 = Instant::now();
    let mut max_pending = 0;
    for step in 1..=sim_ms * 10 {
        sim.run_until(step * 100_000);
        max_pending = max_pending.max(sim.pending_events());
    }
    let wall = t0.elapsed().as_secs_f64();
    let ev = sim.events_processed();
    let t = sim.stats().totals();
    let data: u64 = sim.hosts().map(|h| h.data_rx).sum();
    let gbps = data as f64 * 4096.0 * 8.0 / (sim_ms as f64 * 1e-3) / n as f64 / 1e9;
    let mut out = std::io::stdout().lock();
    // Output errors (e.g. a closed pipe) are ignored: there is nothing left to do.
    let _ = writeln!(
        out,
        "fat_tree(8) {n} hosts, {sim_ms} ms simulated in {wall:.2} s: {ev} events, {:.2} M events/s",
        ev as f64 / wall / 1e6
    );
    let _ = writeln!(
        out,
        "  {} link transmissions ({:.2} M/s), {} data packets delivered, {:.1} Gb/s goodput per host",
        t.tx_packets,
        t.tx_packets as f64 / wall / 1e6,
        data,
        gbps
    );
    let _ = writeln!(
        out,
        "  pending events (sampled every 100 us): max {max_pending}"
    );
    let _ = writeln!(
        out,
        "  drops {} (queue full {}), queue ECN marks {}, max queue {} B",
        t.dropped(),
        t.dropped_queue_full,
        t.ecn_marked_queue,
        t.max_queue_bytes
    );
}
