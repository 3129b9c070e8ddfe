//! # ferroce benchmark suite
//!
//! Deterministic simulator benchmarks of the ferroce transport, each runnable from the
//! `ferroce bench ...` command and from tests:
//! - [`loss`]: goodput against random and bursty loss, native (1/4/8/32 paths) vs. RoCEv2
//!   go-back-N;
//! - [`incast`]: N → 1 on the 128-host fat tree: settle time, queue, drops, fairness, FCT
//!   spread, late joiner; receiver rate hints on and off;
//! - [`permutation`]: every host sends 16 MiB to another, 1 path vs. spraying;
//! - [`multipath`]: goodput over 1/2/4/8 planes, a plane failing and returning, and 4,000 /
//!   16,000 concurrent connections (memory per connection);
//! - [`across`]: scale-across, two fat trees joined by long-haul links (0.5 / 5 ms one-way):
//!   a lone long flow's goodput (native default, configured for the RTT, RoCEv2) and a long and
//!   a short flow on one bottleneck (Jain's index);
//! - [`scale`]: 64,000 connections that move one WRITE each and go idle (simulator), and the
//!   transport's heap per idle connection (counting allocator);
//! - [`sansio`] (`ferroce bench core`): the sans-IO core alone, two endpoints in memory: CPU ns, ACKs and allocations
//!   per data packet, next to the floor (one copy and one CRC per packet).
//!
//! Every benchmark takes [`Opts`] (`quick`: the same scenarios with less data; `seed`) and a
//! [`progress::Progress`], and returns a report with rows (for tables and CSV) and the
//! definitions of its figures.

pub mod across;
pub mod alloc;
pub mod checks;
pub mod collective;
pub mod cpu;
pub mod csv;
pub mod fabric;
pub mod incast;
pub mod latency;
pub mod loss;
pub mod multipath;
pub mod permutation;
pub mod plot;
pub mod profile;
pub mod progress;
pub mod rates;
pub mod roce;
pub mod sansio;
pub mod scale;

use ferroce_harness::NodeHost;
use ferroce_sim::HostId;
use ferroce_transport::{CcAlgorithm, Endpoint, EndpointConfig, Transport};

/// Options every benchmark takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Opts {
    /// The same scenarios, with less data per run (the whole suite in well under 2 minutes).
    pub quick: bool,
    /// Seed of every random choice: faults, host choice, permutation, connection ids, entropy.
    pub seed: u64,
    /// Congestion controller of every native endpoint (`ConnConfig::cc`).
    #[serde(serialize_with = "cc_name")]
    pub cc: CcAlgorithm,
}

fn cc_name<S: serde::Serializer>(cc: &CcAlgorithm, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(cc.name())
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            quick: false,
            seed: 1,
            cc: CcAlgorithm::Aimd,
        }
    }
}

/// Per-host seed derived from the run's seed.
pub fn host_seed(seed: u64, id: HostId) -> u64 {
    seed ^ (id.0 as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// A host running the native protocol with `cfg` (its seed derived from `seed` and the host).
pub fn native_host(id: HostId, ip: [u8; 4], cfg: &EndpointConfig, seed: u64) -> NodeHost {
    let mut c = cfg.clone();
    c.seed = host_seed(seed, id);
    let aware = c.nic_ports > 1;
    let mut h = engine_host(ip, Box::new(Endpoint::new(c)));
    // A native endpoint with several NIC ports picks the port (plane) of every packet itself.
    h.port_aware = aware;
    h
}

/// A host running `ep` (wrapped for profiling when `FERROCE_BENCH_PROFILE` is set).
pub fn engine_host(ip: [u8; 4], ep: Box<dyn Transport>) -> NodeHost {
    let mut h = NodeHost::with_engine(ip, profile::wrap(ep));
    h.record_events = false;
    h
}

/// A deterministic xorshift stream for the benchmarks' own random choices.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(ferroce_sim::mix64(seed ^ 0xbe7c_4a11) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        ferroce_sim::mix64(x)
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }

    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}
