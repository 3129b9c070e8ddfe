//! Running a [`TwoHostRun`] and condensing its [`RunReport`] into the figures the program prints.

use crate::format::percentile;
use ferroce_harness::scenario::{report, RunReport};
use ferroce_harness::{Fabric, LossPlacement, OpKind, TwoHostRun, WorkloadSpec};
use ferroce_transport::{ConnCounters, PathCounters};
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

/// Faults as configured (probabilities as fractions, 0-1).
#[derive(Clone, Debug, Serialize)]
pub struct FaultSummary {
    pub loss: f64,
    /// `[p_good_to_bad, p_bad_to_good, loss_in_bad]`.
    pub burst: Option<[f64; 3]>,
    /// Long-run loss rate of the burst model.
    pub burst_mean_loss: Option<f64>,
    pub reorder: f64,
    pub reorder_delay_ns: u64,
    pub duplicate: f64,
    pub corrupt: f64,
    pub placement: &'static str,
}

/// Nearest-rank percentiles of the per-work-request latency (post to completion).
#[derive(Clone, Debug, Serialize)]
pub struct LatencySummary {
    pub samples: usize,
    pub p50_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    pub max_ns: Option<u64>,
}

impl LatencySummary {
    pub fn of(lat: &[u64]) -> Self {
        let mut v = lat.to_vec();
        v.sort_unstable();
        LatencySummary {
            samples: v.len(),
            p50_ns: percentile(&v, 50.0),
            p99_ns: percentile(&v, 99.0),
            max_ns: v.last().copied(),
        }
    }
}

/// Sender counters of one path of the client's connection.
#[derive(Clone, Debug, Serialize)]
pub struct PathSummary {
    pub path: usize,
    pub tx_pkts: u64,
    pub tx_bytes: u64,
    pub retx_pkts: u64,
    pub acked_pkts: u64,
    pub sack_holes: u64,
    pub rtos: u64,
    pub ecn_echoed: u64,
    pub cwnd_decreases: u64,
    pub probes_sent: u64,
    pub failures: u64,
    pub reroutes: u64,
}

impl PathSummary {
    fn of(path: usize, c: &PathCounters) -> Self {
        PathSummary {
            path,
            tx_pkts: c.tx_pkts,
            tx_bytes: c.tx_bytes,
            retx_pkts: c.retx_pkts,
            acked_pkts: c.acked_pkts,
            sack_holes: c.sack_holes,
            rtos: c.rtos,
            ecn_echoed: c.ecn_echoed,
            cwnd_decreases: c.cwnd_decreases,
            probes_sent: c.probes_sent,
            failures: c.failures,
            reroutes: c.reroutes,
        }
    }
}

/// Counters of one end's connection.
#[derive(Clone, Debug, Serialize)]
pub struct ConnSummary {
    pub tx_pkts: u64,
    pub tx_payload_bytes: u64,
    pub retx_pkts: u64,
    pub rx_pkts: u64,
    pub rx_payload_bytes: u64,
    pub rx_duplicates: u64,
    pub rx_out_of_window: u64,
    pub acks_sent: u64,
    pub acks_received: u64,
    pub sack_holes: u64,
    pub rtos: u64,
    pub ecn_ce_received: u64,
    pub nacks_sent: [u64; 6],
    pub nacks_received: [u64; 6],
    pub remote_access_refused: u64,
    pub rnr_waits: u64,
    pub messages_completed_tx: u64,
    pub messages_completed_rx: u64,
    pub path_failures: u64,
}

impl ConnSummary {
    fn of(c: &ConnCounters) -> Self {
        ConnSummary {
            tx_pkts: c.tx_pkts,
            tx_payload_bytes: c.tx_payload_bytes,
            retx_pkts: c.retx_pkts,
            rx_pkts: c.rx_pkts,
            rx_payload_bytes: c.rx_payload_bytes,
            rx_duplicates: c.rx_duplicates,
            rx_out_of_window: c.rx_out_of_window,
            acks_sent: c.acks_sent,
            acks_received: c.acks_received,
            sack_holes: c.sack_holes,
            rtos: c.rtos,
            ecn_ce_received: c.ecn_ce_received,
            nacks_sent: c.nacks_sent,
            nacks_received: c.nacks_received,
            remote_access_refused: c.remote_access_refused,
            rnr_waits: c.rnr_waits,
            messages_completed_tx: c.messages_completed_tx,
            messages_completed_rx: c.messages_completed_rx,
            path_failures: c.path_failures,
        }
    }
}

/// Everything printed about one run.
#[derive(Clone, Debug, Serialize)]
pub struct RunSummary {
    pub label: String,
    pub fabric: String,
    pub link_rate_gbps: f64,
    pub hop_delay_ns: u64,
    pub workload: String,
    pub seed: u64,
    pub paths_requested: u8,
    /// Paths the client's connection ended up with.
    pub paths: usize,
    pub mtu_bytes: u16,
    pub faults: FaultSummary,
    pub completed: bool,
    /// Payload bytes of successfully completed work requests (SEND/WRITE/READ data).
    pub bytes: u64,
    pub ops_expected: u64,
    pub ops_completed: u64,
    /// Simulated time from the first work request to the last completion.
    pub sim_time_ns: u64,
    pub goodput_gbps: f64,
    /// Goodput relative to the lossless run of the same workload (demo only).
    pub ratio_to_lossless: Option<f64>,
    /// Data packets sent by both ends (requests and READ/atomic responses; no ACKs).
    pub pkts_sent: u64,
    /// Of those, packets that carried a chunk sent before.
    pub pkts_resent: u64,
    pub sack_holes: u64,
    pub rtos: u64,
    pub path_failures: u64,
    /// Every packet the fabric dropped (random and burst loss, link down, full queues, no route).
    pub fabric_drops: u64,
    pub latency: LatencySummary,
    /// Payload bytes whose content was compared with the expected pattern (what arrived in
    /// receive buffers, what READs returned, and the final content of the server's write slots;
    /// writes later overwritten in the same slot are checked only through their completion).
    pub content_checked_bytes: u64,
    pub errors: Vec<String>,
    pub events: u64,
    pub wall_time_s: f64,
    pub client: ConnSummary,
    pub server: ConnSummary,
    pub client_paths: Vec<PathSummary>,
}

impl RunSummary {
    pub fn ok(&self) -> bool {
        self.completed && self.errors.is_empty()
    }
}

/// Runs `run`, optionally capturing the client host's traffic to `pcap`.
pub fn execute(label: &str, run: &TwoHostRun, pcap: Option<&Path>) -> Result<RunSummary, String> {
    let t0 = Instant::now();
    let rep = match pcap {
        None => run.run(),
        Some(path) => run_with_pcap(run, path)?,
    };
    let wall = t0.elapsed().as_secs_f64();
    Ok(summarise(label, run, &rep, wall))
}

/// [`TwoHostRun::run`], with a pcap of the client host.
fn run_with_pcap(run: &TwoHostRun, path: &Path) -> Result<RunReport, String> {
    let (mut sim, c, s) = run.build();
    sim.enable_pcap(c, path)
        .map_err(|e| format!("cannot write pcap {}: {e}", path.display()))?;
    let keys = sim.host_mut(s).make_server(&run.workload);
    let sip = sim.host_ip(s);
    let now = sim.now();
    sim.host_mut(c).start_client(&run.workload, sip, keys, now);
    sim.wake(c);
    let completed = sim.run_while(run.limit_ns, |sim| !sim.host(c).client_done());
    let settle = sim.now() + 200_000;
    sim.run_until(settle);
    sim.flush_pcaps()
        .map_err(|e| format!("writing pcap {}: {e}", path.display()))?;
    Ok(report(&sim, c, s, completed))
}

fn summarise(label: &str, run: &TwoHostRun, rep: &RunReport, wall: f64) -> RunSummary {
    let f = &run.faults;
    let fabric = match run.fabric {
        Fabric::BackToBack => "back-to-back (one cable)".to_string(),
        Fabric::LeafSpine { spines } => {
            format!("leaf-spine: 2 leaves x {spines} spines, 1 host per leaf")
        }
    };
    let both = |f: fn(&ConnCounters) -> u64| f(&rep.client) + f(&rep.server);
    RunSummary {
        label: label.to_string(),
        fabric,
        link_rate_gbps: run.topo.link_rate_bps as f64 / 1e9,
        hop_delay_ns: run.topo.prop_delay,
        workload: describe_workload(&run.workload),
        seed: run.seed,
        paths_requested: run.endpoint.conn.paths,
        paths: rep.paths.len(),
        mtu_bytes: run.endpoint.conn.mtu,
        faults: FaultSummary {
            loss: f.loss,
            burst: f
                .burst
                .map(|b| [b.p_good_to_bad, b.p_bad_to_good, b.loss_in_bad]),
            burst_mean_loss: f.burst.map(|b| b.mean_loss()),
            reorder: f.reorder,
            reorder_delay_ns: f.reorder_delay,
            duplicate: f.duplicate,
            corrupt: f.corrupt,
            placement: match run.placement {
                LossPlacement::HostUplinks => "host uplinks (host->switch, both hosts)",
                LossPlacement::Everywhere => "every link, both directions",
            },
        },
        completed: rep.completed,
        bytes: rep.bytes,
        ops_expected: run.workload.streams as u64 * run.workload.messages as u64,
        ops_completed: rep.latencies_ns.len() as u64,
        sim_time_ns: rep.elapsed_ns,
        goodput_gbps: rep.goodput_gbps,
        ratio_to_lossless: None,
        pkts_sent: both(|c| c.tx_pkts),
        pkts_resent: both(|c| c.retx_pkts),
        sack_holes: both(|c| c.sack_holes),
        rtos: both(|c| c.rtos),
        path_failures: both(|c| c.path_failures),
        fabric_drops: rep.fabric_drops,
        latency: LatencySummary::of(&rep.latencies_ns),
        content_checked_bytes: if rep.completed {
            content_checked_bytes(&run.workload)
        } else {
            0
        },
        errors: rep.errors.clone(),
        events: rep.events,
        wall_time_s: wall,
        client: ConnSummary::of(&rep.client),
        server: ConnSummary::of(&rep.server),
        client_paths: rep
            .paths
            .iter()
            .enumerate()
            .map(|(i, c)| PathSummary::of(i, c))
            .collect(),
    }
}

fn op_name(op: OpKind) -> &'static str {
    match op {
        OpKind::Send => "SEND",
        OpKind::SendImm => "SEND_IMM",
        OpKind::Write => "WRITE",
        OpKind::WriteImm => "WRITE_IMM",
        OpKind::Read => "READ",
        OpKind::FetchAdd => "FETCH_ADD",
        OpKind::CmpSwap => "CMP_SWAP",
    }
}

/// E.g. `8 streams x 128 WRITE of 65536 B`.
pub fn describe_workload(w: &WorkloadSpec) -> String {
    let ops: Vec<&str> = w.ops.iter().map(|&o| op_name(o)).collect();
    let sizes: Vec<String> = w.sizes.iter().map(|s| s.to_string()).collect();
    format!(
        "{} streams x {} {} of {} B",
        w.streams,
        w.messages,
        ops.join("/"),
        sizes.join("/")
    )
}

/// Payload bytes of a completed workload whose content the harness compares with the expected
/// pattern: receive-consuming messages (SEND, SEND_IMM, WRITE_IMM) at the server, READ data at
/// the client, and for plain WRITEs only the last write to each server slot (the end-of-run
/// memory check; earlier writes to a slot are overwritten).
pub fn content_checked_bytes(w: &WorkloadSpec) -> u64 {
    let mut total = 0u64;
    for s in 0..w.streams {
        let mut last_write: HashMap<u32, (OpKind, u32)> = HashMap::new();
        for i in 0..w.messages {
            let (op, size) = w.op_at(s, i);
            if op.consumes_recv() || op == OpKind::Read {
                total += size as u64;
            }
            if matches!(op, OpKind::Write | OpKind::WriteImm) {
                last_write.insert(i % w.write_slots(), (op, size));
            }
        }
        total += last_write
            .values()
            .filter(|(op, _)| *op == OpKind::Write)
            .map(|&(_, size)| size as u64)
            .sum::<u64>();
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_checks_every_write() {
        // 128 writes per stream, each with its own slot: every byte is checked in memory.
        let w = WorkloadSpec::bulk_write(8, 128, 65_536);
        assert_eq!(content_checked_bytes(&w), 8 * 128 * 65_536);
        // Past the 256 MiB write area slots are reused and only the last writes are checked.
        let w = WorkloadSpec::bulk_write(8, 1024, 65_536);
        assert_eq!(content_checked_bytes(&w), 8 * 512 * 65_536);
        let w = WorkloadSpec::bulk_write(2, 10, 100);
        assert_eq!(content_checked_bytes(&w), 2 * 10 * 100);
    }

    #[test]
    fn mixed_counts_received_and_read_bytes() {
        let w = WorkloadSpec::default();
        let c = content_checked_bytes(&w);
        assert!(c > 0 && c <= w.total_bytes(), "{c} of {}", w.total_bytes());
    }

    #[test]
    fn workload_description() {
        assert_eq!(
            describe_workload(&WorkloadSpec::bulk_write(8, 128, 65_536)),
            "8 streams x 128 WRITE of 65536 B"
        );
    }

    #[test]
    fn latency_summary() {
        let l = LatencySummary::of(&[5, 1, 3, 2, 4]);
        assert_eq!(l.samples, 5);
        assert_eq!((l.p50_ns, l.p99_ns, l.max_ns), (Some(3), Some(5), Some(5)));
        let l = LatencySummary::of(&[]);
        assert_eq!((l.p50_ns, l.max_ns), (None, None));
    }
}
