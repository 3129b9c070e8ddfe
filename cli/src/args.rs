//! Command-line arguments (clap derive) and their translation into harness runs.

use clap::{Args, Parser, Subcommand, ValueEnum};
use ferroce_harness::{Fabric, TwoHostRun, WorkloadSpec};
use ferroce_sim::{FaultConfig, GilbertElliott};
use std::path::PathBuf;

/// ferroce: an open RDMA-style multipath transport, run here on a deterministic simulated fabric.
#[derive(Parser, Debug)]
#[command(name = "ferroce", version)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Two hosts move 64 MiB of verified WRITEs over a leaf-spine fabric, lossless and lossy,
    /// then a short mixed-operation run at the same loss.
    Demo(DemoArgs),
    /// One configurable two-host run on the simulated fabric.
    Sim(SimArgs),
    /// Benchmarks on the simulated reference fabric (128-host fat tree, 100 Gb/s, 1 µs/hop):
    /// loss tolerance vs. RoCEv2, incast, permutation, multipath. Prints tables, writes CSV
    /// and SVG plots.
    Bench(Box<BenchArgs>),
    /// The DPDK poll-mode engine: run it from a TOML config, print a default config, etc.
    /// (`ferroce dataplane --help` for its own options).
    Dataplane {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Print the counters a running engine writes to its `[counters] json` file.
    Stats { file: PathBuf },
    /// Run verified traffic under a changing mix of faults for as long as asked (`--minutes`),
    /// on the simulator (`soak sim`) or with real packets between two DPDK engines (`soak
    /// real`, root): progress every few seconds, a JSON summary with memory over time.
    Soak(crate::soak::SoakArgs),
    /// Interop with Linux soft-RoCE: `ferroce interop rxe` boots rxe VMs (qemu) and runs the
    /// verbs programs against ferroce's RoCEv2 mode (needs root; `ferroce interop rxe --help`).
    Interop {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Test any native implementation against the spec over UDP: `ferroce compliance --target
    /// IP[:PORT] --rkeys KEYS [--json]` (spec/compliance.md; `ferroce compliance --help`).
    Compliance {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Subcommand, Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchWhich {
    /// Goodput against random and bursty loss: native with 1/4/8/32 paths vs. RoCEv2
    /// go-back-N (two ACK timeouts).
    Loss,
    /// N senders -> 1 receiver (N = 8, 32, 64, 127): settle time, queue, drops, fairness,
    /// completion spread, late joiner; rate hints on and off.
    Incast,
    /// Every host sends 16 MiB to another (random permutation): 1 path vs. spraying.
    Permutation,
    /// 1/2/4/8 planes; a plane failing and returning; 4,000 and 16,000 connections.
    Multipath,
    /// Collectives on 128 hosts: all-to-all and ring all-reduce, S = 64 KiB - 16 MiB
    /// (--quick: 64 KiB), native / native 1 path / RoCEv2, lossless, 1 % loss, a core link
    /// down; completion time against the ideal. Not part of `all` (full mode takes hours).
    Collective,
    /// The far end of `bench loss --real --peer` on a second host: listens for the sweep's
    /// control connection (`--listen IP:PORT`) and runs, for each point it is told, the
    /// `ib_write_bw` server over the shim with its own engine, then reports that engine's
    /// counters back (needs perftest and a built shim; root for DPDK).
    LossPeer,
    /// Many idle connections: 64,000 between distinct host pairs of 256 hosts (--quick: 8,000
    /// of 128), one WRITE each, then idle: 0 lost, wall time, and the transport's heap per
    /// idle connection (counting allocator). Not part of `all`.
    Scale,
    /// Scale-across: two fat trees joined by long-haul links (0.5 and 5 ms one-way, loss 0,
    /// 0.01 %, 0.1 %): a lone long flow's goodput (native default, native configured for the
    /// RTT, RoCEv2) and a long and a short flow on one bottleneck (Jain's index). Not part of
    /// `all`.
    Across,
    /// All four, then the thresholds in one list.
    All,
    /// The sans-IO core alone: two endpoints exchanging WRITEs in memory (fake clock), CPU
    /// ns per data packet, ACKs and allocations per packet, next to the floor (one payload
    /// copy + one CRC-32) in the same run. A few seconds; `--packets N` for longer.
    Core,
    /// Raw DPDK packet rate vs ferroce's rate on the same PMD (net_ring, net_af_packet/veth);
    /// needs root and DPDK; its own options follow (`ferroce bench dataplane --help`).
    Dataplane,
    /// Unmodified `ib_write_bw`/`ib_write_lat` over the verbs shim next to the engine's own
    /// goodput and round trip on the same veth (needs root, perftest and a built shim:
    /// `cargo build --release -p ferroce-verbs`); own options follow (`--help`).
    Verbs,
}

#[derive(Args, Debug, Clone, PartialEq)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub which: BenchWhich,
    /// The same scenarios with less data per run (the whole suite in under 2 minutes).
    #[arg(long, global = true)]
    pub quick: bool,
    /// Seed of every random choice (faults, host choice, permutation, connection ids, entropy).
    #[arg(long, default_value_t = 1, global = true)]
    pub seed: u64,
    /// Congestion controllers to run, each in turn (comma-separated: aimd, delay); with more
    /// than one, a table shows their figures side by side [default: aimd].
    #[arg(long, value_delimiter = ',', value_name = "CC,...", global = true,
          value_parser = ferroce_transport::CcAlgorithm::parse)]
    pub cc: Vec<ferroce_transport::CcAlgorithm>,
    /// Directory for the CSV files and SVG plots.
    #[arg(long, value_name = "DIR", default_value = "out", global = true)]
    pub out: PathBuf,
    /// Also print per-run details (every loss run, wall times, simulator events).
    #[arg(long, short, global = true)]
    pub verbose: bool,
    /// Loss only: the curve on real packets instead of the simulator's. Unmodified
    /// `ib_write_bw` over the verbs shim, two processes and their DPDK engines in a network
    /// namespace, native and RoCEv2, the simulator's share beside each point (needs root,
    /// perftest and a built shim). Writes loss_real.csv and loss_real.svg.
    #[arg(long, global = true)]
    pub real: bool,
    /// Loss --real only: loss rates in percent (comma-separated; 0 is always added)
    /// [default: 0,0.1,0.5,1,2,5; --quick 0,1].
    #[arg(long, value_delimiter = ',', value_name = "PCT,...", global = true)]
    pub rates: Vec<f64>,
    /// Loss --real only: what joins the two processes: af_packet (a veth pair) or memif.
    #[arg(long, default_value = "af_packet", global = true)]
    pub pmd: String,
    /// Loss --real only: seconds of each ib_write_bw run (-D) [default: 5; --quick 2].
    #[arg(long, value_name = "S", global = true,
          value_parser = clap::value_parser!(u32).range(1..=600))]
    pub seconds: Option<u32>,
    /// Loss --real only: the directory holding the shim's libibverbs.so [default: next to
    /// this program, or $FERROCE_VERBS_LIB].
    #[arg(long, value_name = "DIR", global = true)]
    pub lib: Option<PathBuf>,
    /// Loss --real only: run across two hosts: the control address `HOST:PORT` of `ferroce
    /// bench loss-peer --listen` on the other host (which runs the ib_write_bw servers;
    /// perftest's own exchange goes to HOST too). Needs --local-pmd and --local-ip.
    #[arg(long, value_name = "HOST:PORT", global = true)]
    pub peer: Option<String>,
    /// Loss-peer only: the control channel's listening address.
    #[arg(long, value_name = "IP:PORT", global = true)]
    pub listen: Option<String>,
    /// Loss-peer only: serve one sweep, then exit.
    #[arg(long, global = true)]
    pub once: bool,
    /// Loss --real --peer and loss-peer: this host's engine port, as the shim's FERROCE_PMD
    /// (e.g. `net_af_packet0,iface=eth1,framecnt=8192`, or a PCI device's EAL name).
    #[arg(long, value_name = "VDEV", global = true)]
    pub local_pmd: Option<String>,
    /// Loss --real --peer and loss-peer: this host's engine address (FERROCE_IP), one the
    /// kernel does not have, on the link the engine's port is on.
    #[arg(long, value_name = "IP", global = true)]
    pub local_ip: Option<String>,
    /// Loss --real --peer only: the peer's engine port (FERROCE_PMD there) [default: its own
    /// --local-pmd].
    #[arg(long, value_name = "VDEV", global = true)]
    pub peer_pmd: Option<String>,
    /// Loss --real --peer only: the peer's engine address [default: its own --local-ip].
    #[arg(long, value_name = "IP", global = true)]
    pub peer_ip: Option<String>,
    /// Incast only: run just these sender counts (comma-separated, e.g. `64` or `8,64`); at
    /// most the fat tree's hosts less one (127 on the reference fabric, 1,023 with --k 16).
    #[arg(long, value_delimiter = ',', value_name = "N,...", global = true,
          value_parser = clap::value_parser!(u16).range(1..=1023))]
    pub senders: Vec<u16>,
    /// Core only: data packets in each row's measured window [default: 100000, --quick 20000].
    #[arg(long, value_name = "N", global = true,
          value_parser = clap::value_parser!(u64).range(100..))]
    pub packets: Option<u64>,
    /// Core only: packet payloads in bytes (comma-separated) [default: 64,1024,1408,4096].
    #[arg(long, value_delimiter = ',', value_name = "B,...", global = true,
          value_parser = clap::value_parser!(u32).range(64..=9000))]
    pub payloads: Vec<u32>,
    /// Core: path counts (comma-separated) [default: 1,16]. Permutation: the rows' path
    /// counts [default: 1 and the transport's default]; the default count is its row.
    #[arg(long, value_delimiter = ',', value_name = "N,...", global = true,
          value_parser = clap::value_parser!(u8).range(1..))]
    pub paths: Vec<u8>,
    /// Core only: packets per WRITE message [default: 16; 1 for single-packet messages].
    #[arg(long, value_name = "N", global = true,
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub msg_packets: Option<u32>,
    /// Core only: packets the pacer releases together [default: 16, the DPDK engine's; 1:
    /// packet by packet, as the simulator paces].
    #[arg(long, value_name = "N", global = true,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub pace_burst: Option<u32>,
    /// Collective only: run just these patterns (comma-separated: all-to-all, ring-allreduce,
    /// storage-kv).
    #[arg(long, value_delimiter = ',', value_name = "P,...", global = true,
          value_parser = ferroce_benches::collective::Pattern::parse)]
    pub patterns: Vec<ferroce_benches::collective::Pattern>,
    /// Collective only: run just these engines (comma-separated: native, native-1path, rocev2).
    #[arg(long, value_delimiter = ',', value_name = "E,...", global = true,
          value_parser = ferroce_benches::collective::Engine::parse)]
    pub engines: Vec<ferroce_benches::collective::Engine>,
    /// Collective only: run just these conditions (comma-separated: lossless, loss-1%,
    /// core-link-down).
    #[arg(long, value_delimiter = ',', value_name = "C,...", global = true,
          value_parser = ferroce_benches::collective::Condition::parse)]
    pub conditions: Vec<ferroce_benches::collective::Condition>,
    /// Collective only: sizes S in KiB (comma-separated) [default: 64,256,1024,4096,16384;
    /// --quick 64].
    #[arg(long, value_delimiter = ',', value_name = "KIB,...", global = true,
          value_parser = clap::value_parser!(u64).range(1..=(1 << 20)))]
    pub sizes_kib: Vec<u64>,
    /// Permutation, collective and incast only: arity of the fat tree (even, 4-80; k^3/4
    /// hosts: 16 gives 1,024 hosts and 320 switches, and incasts up to 1,023:1) [default: 8,
    /// the 128-host reference fabric]. The collective's storage-kv pattern runs on k = 8 only.
    #[arg(long = "k", value_name = "K", global = true, value_parser = parse_fat_tree_k)]
    pub fat_tree_k: Option<usize>,
    /// Permutation only: bytes per flow in KiB [default: 16384 (16 MiB), also with --quick].
    #[arg(long, value_name = "KIB", global = true,
          value_parser = clap::value_parser!(u64).range(1..=(1 << 22)))]
    pub flow_kib: Option<u64>,
    /// Permutation only, diagnostic: also write traces of the default-paths row (per flow,
    /// path and switch queue; samples every 10 µs) into `--out`/permutation[-CC]-trace/.
    #[arg(long, global = true)]
    pub trace: bool,
    /// Core only: print the report as JSON instead of the table.
    #[arg(long, global = true)]
    pub json: bool,
    /// Core only, diagnostic: flush subnormal floats to zero (x86-64 FTZ/DAZ) in the bench
    /// thread, to show what subnormal arithmetic in the core costs.
    #[arg(long, global = true)]
    pub ftz: bool,
}

#[derive(Args, Debug, Clone, PartialEq)]
pub struct DemoArgs {
    /// Random packet loss on each host uplink, in percent (0-100).
    #[arg(long, default_value_t = 1.0, value_name = "PCT", value_parser = parse_percent)]
    pub loss: f64,
    /// Seed of every random choice (faults, connection ids, path entropy).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Paths per connection the endpoints ask for (1-255).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u8).range(1..))]
    pub paths: u8,
    /// Print the figures as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum FabricArg {
    /// One cable between the two hosts.
    BackToBack,
    /// Two leaves, one host each, joined by `--spines` spines (ECMP over the spines).
    LeafSpine,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkloadArg {
    /// Large one-way WRITEs (goodput).
    Bulk,
    /// SEND, SEND_IMM, WRITE, WRITE_IMM, READ, FETCH_ADD and CMP_SWAP, sizes 1 B to 64 KiB.
    Mixed,
}

#[derive(Args, Debug, Clone, PartialEq)]
pub struct SimArgs {
    /// Fabric shape.
    #[arg(long, value_enum, default_value_t = FabricArg::LeafSpine)]
    pub fabric: FabricArg,
    /// Spines of the leaf-spine fabric.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub spines: u16,
    /// Paths per connection the endpoints ask for (1-255).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u8).range(1..))]
    pub paths: u8,
    /// Per-path congestion controller of both endpoints: aimd (ECN, the default) or delay.
    #[arg(long, default_value = "aimd", value_parser = ferroce_transport::CcAlgorithm::parse)]
    pub cc: ferroce_transport::CcAlgorithm,
    /// Largest payload per packet, bytes.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u16).range(256..=9000))]
    pub mtu: u16,
    /// Independent random loss on each host uplink, in percent (0-100).
    #[arg(long, default_value_t = 0.0, value_name = "PCT", value_parser = parse_percent)]
    pub loss: f64,
    /// Gilbert-Elliott burst loss: per-packet probabilities good->bad, bad->good, and the loss
    /// probability while bad (all in 0-1), e.g. `0.001,0.25,1`.
    #[arg(long, value_name = "P_GB,P_BG,LOSS_IN_BAD", value_parser = parse_burst)]
    pub burst: Option<GilbertElliott>,
    /// Probability (0-1) that a packet is held back by `--reorder-delay`.
    #[arg(long, default_value_t = 0.0, value_name = "PROB", value_parser = parse_prob)]
    pub reorder: f64,
    /// Extra delay of a reordered packet, ns.
    #[arg(long, default_value_t = 5_000, value_name = "NS")]
    pub reorder_delay: u64,
    /// Probability (0-1) that a packet is delivered twice.
    #[arg(long, default_value_t = 0.0, value_name = "PROB", value_parser = parse_prob)]
    pub duplicate: f64,
    /// Probability (0-1) that one payload bit of a packet is flipped.
    #[arg(long, default_value_t = 0.0, value_name = "PROB", value_parser = parse_prob)]
    pub corrupt: f64,
    /// What the client sends.
    #[arg(long, value_enum, default_value_t = WorkloadArg::Bulk)]
    pub workload: WorkloadArg,
    /// Streams (QPs) on the connection [default: bulk 8, mixed 4].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub streams: Option<u32>,
    /// Work requests per stream [default: bulk 128, mixed 64].
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub messages: Option<u32>,
    /// Message size in bytes [default: bulk 65536; mixed cycles 1, 100, 4096, 4097, 20000,
    /// 65536]. Atomics are always 8 bytes.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=16 << 20))]
    pub size: Option<u32>,
    /// Seed of every random choice (faults, connection ids, path entropy).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Simulated-time limit, ms.
    #[arg(long, default_value_t = 2_000, value_name = "MS")]
    pub limit_ms: u64,
    /// Write a pcap (ns timestamps, Ethernet) of everything the client host sends and receives.
    #[arg(long, value_name = "FILE")]
    pub pcap: Option<PathBuf>,
    /// Print the figures as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Also print per-path and per-connection counters.
    #[arg(long, short)]
    pub verbose: bool,
}

/// A percentage in 0..=100, returned as a fraction in 0..=1.
pub fn parse_percent(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("`{s}` is not a number"))?;
    if !(0.0..=100.0).contains(&v) {
        return Err(format!("{v} is not a percentage in 0-100"));
    }
    Ok(v / 100.0)
}

/// A fat-tree arity the benchmarks build as given: even, 4-80.
pub fn parse_fat_tree_k(s: &str) -> Result<usize, String> {
    let k: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number"))?;
    if !ferroce_benches::fabric::valid_k(k) {
        return Err(format!("k = {k}: the fat tree's arity must be even, 4-80"));
    }
    Ok(k)
}

/// A probability in 0..=1.
pub fn parse_prob(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number"))?;
    if !(0.0..=1.0).contains(&v) {
        return Err(format!("{v} is not a probability in 0-1"));
    }
    Ok(v)
}

/// `p_gb,p_bg,loss_in_bad`, each a probability in 0..=1.
pub fn parse_burst(s: &str) -> Result<GilbertElliott, String> {
    let parts: Vec<&str> = s.split(',').collect();
    if parts.len() != 3 {
        return Err(format!(
            "expected three comma-separated probabilities p_gb,p_bg,loss_in_bad, got `{s}`"
        ));
    }
    let p: Vec<f64> = parts
        .iter()
        .map(|x| parse_prob(x))
        .collect::<Result<_, _>>()?;
    Ok(GilbertElliott {
        p_good_to_bad: p[0],
        p_bad_to_good: p[1],
        loss_in_bad: p[2],
        loss_in_good: 0.0,
    })
}

impl DemoArgs {
    fn base(&self) -> TwoHostRun {
        let mut run = TwoHostRun {
            fabric: Fabric::LeafSpine { spines: 8 },
            seed: self.seed,
            ..TwoHostRun::default()
        };
        run.endpoint.conn.paths = self.paths;
        run
    }

    /// The 64 MiB bulk run, with `loss` (a fraction) on the host uplinks.
    pub fn bulk_run(&self, loss: f64) -> TwoHostRun {
        TwoHostRun {
            workload: WorkloadSpec::bulk_write(8, 128, 65_536),
            faults: FaultConfig::loss(loss),
            ..self.base()
        }
    }

    /// The mixed-operation run at the demo's loss.
    pub fn mixed_run(&self) -> TwoHostRun {
        TwoHostRun {
            workload: WorkloadSpec::default(),
            faults: FaultConfig::loss(self.loss),
            ..self.base()
        }
    }
}

impl SimArgs {
    pub fn faults(&self) -> FaultConfig {
        FaultConfig {
            loss: self.loss,
            burst: self.burst,
            reorder: self.reorder,
            reorder_delay: if self.reorder > 0.0 {
                self.reorder_delay
            } else {
                0
            },
            duplicate: self.duplicate,
            corrupt: self.corrupt,
            ..FaultConfig::NONE
        }
    }

    pub fn workload(&self) -> WorkloadSpec {
        let mut w = match self.workload {
            WorkloadArg::Bulk => WorkloadSpec::bulk_write(8, 128, 65_536),
            WorkloadArg::Mixed => WorkloadSpec::default(),
        };
        if let Some(s) = self.streams {
            w.streams = s;
        }
        if let Some(m) = self.messages {
            w.messages = m;
        }
        if let Some(sz) = self.size {
            w.sizes = vec![sz];
        }
        w
    }

    /// Rough memory the two simulated hosts register for the workload (bytes): per stream, the
    /// server's write slots and receive buffers and the client's send buffers, each of the
    /// largest message size.
    pub fn registered_bytes(&self) -> u64 {
        let w = self.workload();
        let per_stream = w.write_slots() as u64 + w.recv_depth as u64 + w.depth as u64;
        w.streams as u64 * per_stream * w.max_size() as u64
    }

    pub fn run(&self) -> TwoHostRun {
        let mut run = TwoHostRun {
            fabric: match self.fabric {
                FabricArg::BackToBack => Fabric::BackToBack,
                FabricArg::LeafSpine => Fabric::LeafSpine {
                    spines: self.spines as usize,
                },
            },
            workload: self.workload(),
            faults: self.faults(),
            seed: self.seed,
            limit_ns: self.limit_ms.saturating_mul(1_000_000),
            ..TwoHostRun::default()
        };
        run.endpoint.conn.paths = self.paths;
        run.endpoint.conn.mtu = self.mtu;
        run.endpoint.conn.cc = self.cc;
        run
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferroce_harness::OpKind;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("ferroce").chain(args.iter().copied()))
    }

    #[test]
    fn demo_defaults() {
        let Command::Demo(d) = parse(&["demo"]).unwrap().cmd else {
            panic!("not demo")
        };
        assert_eq!(d.loss, 0.01);
        assert_eq!(d.seed, 1);
        assert_eq!(d.paths, 8);
        assert!(!d.json);
        let bulk = d.bulk_run(0.0);
        assert_eq!(bulk.fabric, Fabric::LeafSpine { spines: 8 });
        assert_eq!(bulk.workload.total_bytes(), 64 << 20);
        assert_eq!(bulk.faults, FaultConfig::NONE);
        assert_eq!(bulk.endpoint.conn.paths, 8);
        let lossy = d.bulk_run(d.loss);
        assert_eq!(lossy.faults.loss, 0.01);
        assert_eq!(lossy.seed, bulk.seed);
        let mixed = d.mixed_run();
        assert_eq!(mixed.workload.ops, OpKind::ALL.to_vec());
        assert_eq!(mixed.faults.loss, 0.01);
    }

    #[test]
    fn demo_flags() {
        let Command::Demo(d) = parse(&[
            "demo", "--loss", "5", "--seed", "7", "--paths", "4", "--json",
        ])
        .unwrap()
        .cmd
        else {
            panic!("not demo")
        };
        assert_eq!(
            d,
            DemoArgs {
                loss: 0.05,
                seed: 7,
                paths: 4,
                json: true
            }
        );
        assert_eq!(d.bulk_run(d.loss).endpoint.conn.paths, 4);
        assert_eq!(d.bulk_run(d.loss).seed, 7);
    }

    #[test]
    fn rejects_bad_values() {
        assert!(parse(&["demo", "--loss", "101"]).is_err());
        assert!(parse(&["demo", "--loss", "-1"]).is_err());
        assert!(parse(&["demo", "--loss", "x"]).is_err());
        assert!(parse(&["demo", "--paths", "0"]).is_err());
        assert!(parse(&["demo", "--paths", "256"]).is_err());
        assert!(parse(&["sim", "--fabric", "torus"]).is_err());
        assert!(parse(&["sim", "--reorder", "1.5"]).is_err());
        assert!(parse(&["sim", "--burst", "0.1,0.2"]).is_err());
        assert!(parse(&["sim", "--burst", "0.1,0.2,2"]).is_err());
        assert!(parse(&["sim", "--workload", "stream"]).is_err());
        assert!(parse(&["sim", "--streams", "0"]).is_err());
        assert!(parse(&["bogus"]).is_err());
    }

    #[test]
    fn sim_defaults() {
        let Command::Sim(s) = parse(&["sim"]).unwrap().cmd else {
            panic!("not sim")
        };
        let run = s.run();
        assert_eq!(run.fabric, Fabric::LeafSpine { spines: 8 });
        assert_eq!(run.faults, FaultConfig::NONE);
        assert_eq!(run.workload.total_bytes(), 64 << 20);
        assert_eq!(run.limit_ns, 2_000_000_000);
        assert!(s.pcap.is_none() && !s.json && !s.verbose);
        // 8 streams x (128 write slots, one per WRITE + 16 receives + 16 sends) x 64 KiB.
        assert_eq!(s.registered_bytes(), 8 * 160 * 65_536);
    }

    #[test]
    fn sim_flags() {
        let cli = parse(&[
            "sim",
            "--fabric",
            "back-to-back",
            "--paths",
            "2",
            "--mtu",
            "1024",
            "--loss",
            "2.5",
            "--burst",
            "0.001,0.25,1",
            "--reorder",
            "0.01",
            "--duplicate",
            "0.02",
            "--corrupt",
            "0.03",
            "--workload",
            "mixed",
            "--streams",
            "3",
            "--messages",
            "10",
            "--size",
            "777",
            "--seed",
            "9",
            "--pcap",
            "/tmp/x.pcap",
            "--json",
            "-v",
        ])
        .unwrap();
        let Command::Sim(s) = cli.cmd else {
            panic!("not sim")
        };
        let run = s.run();
        assert_eq!(run.fabric, Fabric::BackToBack);
        assert_eq!(run.endpoint.conn.paths, 2);
        assert_eq!(run.endpoint.conn.mtu, 1024);
        assert_eq!(run.seed, 9);
        let f = run.faults;
        assert_eq!(f.loss, 0.025);
        let b = f.burst.unwrap();
        assert_eq!(
            (
                b.p_good_to_bad,
                b.p_bad_to_good,
                b.loss_in_bad,
                b.loss_in_good
            ),
            (0.001, 0.25, 1.0, 0.0)
        );
        assert_eq!(f.reorder, 0.01);
        assert_eq!(f.reorder_delay, 5_000);
        assert_eq!(f.duplicate, 0.02);
        assert_eq!(f.corrupt, 0.03);
        assert_eq!(run.workload.ops, OpKind::ALL.to_vec());
        assert_eq!((run.workload.streams, run.workload.messages), (3, 10));
        assert_eq!(run.workload.sizes, vec![777]);
        assert_eq!(s.pcap.as_deref(), Some(std::path::Path::new("/tmp/x.pcap")));
        assert!(s.json && s.verbose);
    }

    #[test]
    fn cc_is_chosen_on_the_command_line_and_a_bad_name_is_an_error() {
        let Command::Sim(s) = parse(&["sim", "--cc", "delay"]).unwrap().cmd else {
            panic!("not sim")
        };
        assert_eq!(
            s.run().endpoint.conn.cc,
            ferroce_transport::CcAlgorithm::Delay
        );
        let Command::Sim(s) = parse(&["sim"]).unwrap().cmd else {
            panic!("not sim")
        };
        assert_eq!(
            s.run().endpoint.conn.cc,
            ferroce_transport::CcAlgorithm::Aimd
        );
        assert!(parse(&["sim", "--cc", "cubic"]).is_err());
        let Command::Bench(b) = parse(&["bench", "loss", "--cc", "aimd,delay"]).unwrap().cmd else {
            panic!("not bench")
        };
        use ferroce_transport::CcAlgorithm::*;
        assert_eq!(b.cc, vec![Aimd, Delay]);
    }

    #[test]
    fn sim_leaf_spine_spines() {
        let Command::Sim(s) = parse(&["sim", "--spines", "4"]).unwrap().cmd else {
            panic!("not sim")
        };
        assert_eq!(s.run().fabric, Fabric::LeafSpine { spines: 4 });
    }

    #[test]
    fn bench_flags() {
        let Command::Bench(b) = parse(&["bench", "loss"]).unwrap().cmd else {
            panic!("not bench")
        };
        assert_eq!(b.which, BenchWhich::Loss);
        assert!(!b.quick);
        assert_eq!(b.seed, 1);
        assert_eq!(b.out, PathBuf::from("out"));
        let Command::Bench(b) =
            parse(&["bench", "all", "--quick", "--seed", "5", "--out", "/tmp/o"])
                .unwrap()
                .cmd
        else {
            panic!("not bench")
        };
        assert_eq!(b.which, BenchWhich::All);
        assert!(b.quick);
        assert_eq!(b.seed, 5);
        assert_eq!(b.out, PathBuf::from("/tmp/o"));
        let Command::Bench(b) = parse(&["bench", "--quick", "incast"]).unwrap().cmd else {
            panic!("not bench")
        };
        assert!(b.quick && b.which == BenchWhich::Incast);
        let Command::Bench(b) = parse(&["bench", "across", "--quick", "--seed", "3"])
            .unwrap()
            .cmd
        else {
            panic!("not bench")
        };
        assert!(b.quick && b.seed == 3 && b.which == BenchWhich::Across);
        assert!(parse(&["bench"]).is_err());
        assert!(parse(&["bench", "bogus"]).is_err());
        let Command::Bench(b) = parse(&[
            "bench",
            "core",
            "--packets",
            "500",
            "--payloads",
            "64,4096",
            "--paths",
            "1,16",
            "--msg-packets",
            "1",
            "--json",
        ])
        .unwrap()
        .cmd
        else {
            panic!("not bench")
        };
        assert_eq!(b.which, BenchWhich::Core);
        assert_eq!(b.packets, Some(500));
        assert_eq!(b.payloads, vec![64, 4096]);
        assert_eq!(b.paths, vec![1, 16]);
        assert_eq!(b.msg_packets, Some(1));
        assert!(b.json);
        assert!(parse(&["bench", "core", "--payloads", "32"]).is_err());
        assert!(parse(&["bench", "core", "--paths", "0"]).is_err());
        let Command::Bench(b) = parse(&["bench", "permutation", "--k", "16", "--flow-kib", "64"])
            .unwrap()
            .cmd
        else {
            panic!("not bench")
        };
        assert_eq!((b.fat_tree_k, b.flow_kib), (Some(16), Some(64)));
        let Command::Bench(b) = parse(&["bench", "permutation"]).unwrap().cmd else {
            panic!("not bench")
        };
        assert_eq!((b.fat_tree_k, b.flow_kib), (None, None));
        for bad in ["7", "2", "82", "x"] {
            assert!(
                parse(&["bench", "collective", "--k", bad]).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn percent_and_prob_parsers() {
        assert_eq!(parse_percent("1"), Ok(0.01));
        assert_eq!(parse_percent("0.5%"), Ok(0.005));
        assert_eq!(parse_percent("100"), Ok(1.0));
        assert!(parse_percent("NaN").is_err());
        assert_eq!(parse_prob("0"), Ok(0.0));
        assert!(parse_prob("1.01").is_err());
    }
}
