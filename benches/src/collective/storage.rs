//! The storage / KV-cache pattern of `bench collective`: a few servers (one per pod), every
//! other host a client reading objects of mixed sizes (4 KiB – 4 MiB, a fixed seeded draw)
//! from one of them with RDMA READs, all clients at once. The servers' egress is the
//! bottleneck: job completion time against the busiest server's bytes at line rate, the
//! servers' egress utilisation, and each read's completion time by object size.

use super::{CollectiveConfig, T0};
use crate::fabric::{self, LINK_BPS};
use crate::Rng;
use ferroce_harness::multi::{Flow, FlowHandle};
use ferroce_harness::{NodeHost, OpKind, WorkloadSpec};
use ferroce_sim::{HostId, Sim};

/// Servers: one per pod of the k = 8 fat tree (hosts 0, 16, 32, ...).
pub const SERVERS: usize = 8;
/// Smallest and largest object (powers of two in between, log-uniform).
pub const MIN_OBJECT: u32 = 4 << 10;
pub const MAX_OBJECT: u32 = 4 << 20;
/// Length of the size table the clients read through (prime, so the workload's stride of 7
/// visits every entry).
const TABLE: usize = 61;
/// READs in flight per client.
pub const DEPTH: u32 = 2;

/// Objects each client reads: 16 (`--quick`: 4).
pub fn objects(cfg: &CollectiveConfig) -> u32 {
    if cfg.opts.quick {
        4
    } else {
        16
    }
}

/// The object size table: `TABLE` draws, log-uniform over the powers of two from
/// [`MIN_OBJECT`] to [`MAX_OBJECT`], seeded; its last entry is [`MAX_OBJECT`] so every
/// server's regions are sized for the largest object whatever the seed.
pub fn object_sizes(seed: u64) -> Vec<u32> {
    let steps = (MAX_OBJECT / MIN_OBJECT).ilog2() as usize + 1;
    let mut rng = Rng::new(seed ^ 0x5707);
    let mut v: Vec<u32> = (0..TABLE - 1)
        .map(|_| MIN_OBJECT << rng.below(steps))
        .collect();
    v.push(MAX_OBJECT);
    v
}

/// Whether host `h` is a server.
pub fn is_server(h: usize, n: usize) -> bool {
    h.is_multiple_of(n / SERVERS)
}

/// Client `j`-th (in host order) reads from server `j % SERVERS`: 15 clients per server,
/// spread over the pods. Each client starts at its own place in the size table.
pub fn flows(cfg: &CollectiveConfig, n: usize) -> Vec<Flow> {
    let sizes = object_sizes(cfg.opts.seed);
    let stride = n / SERVERS;
    (0..n)
        .filter(|&h| !is_server(h, n))
        .enumerate()
        .map(|(j, h)| Flow {
            client: HostId(h as u32),
            server: HostId(((j % SERVERS) * stride) as u32),
            workload: WorkloadSpec {
                streams: 1,
                messages: objects(cfg),
                sizes: sizes.clone(),
                ops: vec![OpKind::Read],
                depth: DEPTH,
                recv_depth: 1,
                seed: j as u64,
                max_write_slots: 1,
            },
            start_at: T0,
        })
        .collect()
}

/// Payload bytes each server must send: the READ responses of its clients.
pub fn server_bytes(flows: &[Flow]) -> Vec<(HostId, u64)> {
    let mut v: Vec<(HostId, u64)> = Vec::new();
    for f in flows {
        let b = f.workload.total_bytes();
        match v.iter_mut().find(|(s, _)| *s == f.server) {
            Some(x) => x.1 += b,
            None => v.push((f.server, b)),
        }
    }
    v
}

/// The busiest server's bytes at line rate (ns).
pub fn ideal_ns(flows: &[Flow]) -> u64 {
    let max = server_bytes(flows)
        .into_iter()
        .map(|(_, b)| b)
        .max()
        .unwrap_or(0);
    max * 8 * 1_000_000_000 / LINK_BPS
}

/// Reads of one object size.
#[derive(Clone, Debug, PartialEq)]
pub struct SizeStat {
    pub size: u32,
    pub reads: u64,
    /// Completion time of a read (post to completion, behind the client's other read in
    /// flight), mean and 99th percentile (ns).
    pub mean_ns: u64,
    pub p99_ns: u64,
    /// The object alone on an idle fabric: its bytes at line rate plus one base RTT (ns).
    pub alone_ns: u64,
}

/// The storage pattern's own figures.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StorageStats {
    pub reads: u64,
    pub by_size: Vec<SizeStat>,
    /// Bytes the servers sent as READ responses over (servers × line rate × job time).
    pub egress_util: f64,
}

/// Per-read completion times by size, from the clients' latencies (completions come in
/// order, so the k-th latency is read k's).
pub fn stats(
    sim: &Sim<NodeHost>,
    h: &[FlowHandle],
    flows: &[Flow],
    jct_ns: Option<u64>,
) -> StorageStats {
    let rtt = fabric::reference_rtt_ns();
    let mut per: Vec<(u32, Vec<u64>)> = Vec::new();
    for (fh, f) in h.iter().zip(flows) {
        let cl = fh.state(sim);
        for (k, &lat) in cl.latencies.iter().enumerate() {
            let (_, size) = f.workload.op_at(0, k as u32);
            match per.iter_mut().find(|(s, _)| *s == size) {
                Some(x) => x.1.push(lat),
                None => per.push((size, vec![lat])),
            }
        }
    }
    per.sort_by_key(|x| x.0);
    let by_size: Vec<SizeStat> = per
        .into_iter()
        .map(|(size, mut v)| {
            v.sort_unstable();
            let n = v.len() as u64;
            let p99 = v[((v.len() * 99).div_ceil(100)).saturating_sub(1)];
            SizeStat {
                size,
                reads: n,
                mean_ns: v.iter().sum::<u64>() / n.max(1),
                p99_ns: p99,
                alone_ns: size as u64 * 8 * 1_000_000_000 / LINK_BPS + rtt,
            }
        })
        .collect();
    let served: u64 = server_bytes(flows).iter().map(|x| x.1).sum();
    let egress_util = jct_ns.map_or(0.0, |j| {
        served as f64 * 8.0 / (SERVERS as f64 * LINK_BPS as f64 * j.max(1) as f64 / 1e9)
    });
    StorageStats {
        reads: by_size.iter().map(|s| s.reads).sum(),
        by_size,
        egress_util,
    }
}

/// CSV of the storage rows' reads by object size (header row first).
pub fn csv(r: &super::CollectiveReport) -> crate::csv::Csv {
    use crate::csv::num;
    let mut c = crate::csv::Csv::new(&[
        "engine",
        "condition",
        "object_bytes",
        "reads",
        "mean_us",
        "p99_us",
        "alone_us",
        "mean_over_alone",
    ]);
    for x in &r.rows {
        let Some(st) = &x.storage else { continue };
        for b in &st.by_size {
            c.push(vec![
                x.engine.name().into(),
                x.condition.name(),
                b.size.to_string(),
                b.reads.to_string(),
                num(Some(b.mean_ns as f64 / 1e3), 1),
                num(Some(b.p99_ns as f64 / 1e3), 1),
                num(Some(b.alone_ns as f64 / 1e3), 1),
                num(Some(b.mean_ns as f64 / b.alone_ns.max(1) as f64), 2),
            ]);
        }
    }
    c
}

/// SVG chart: mean read completion time against object size, one curve per engine ×
/// condition. Ok(false) when there are no storage rows (nothing written).
pub fn plot(r: &super::CollectiveReport, path: &std::path::Path) -> Result<bool, String> {
    use super::Engine;
    use crate::plot::{self, Axes, Series, GREY, NATIVE_COLORS, ROCE_COLORS};
    let mut series = Vec::new();
    let mut top: f64 = 0.0;
    for (ci, &c) in r.config.conditions.iter().enumerate() {
        for &e in &r.config.engines {
            let Some(st) = r
                .rows
                .iter()
                .find(|x| x.engine == e && x.condition == c)
                .and_then(|x| x.storage.as_ref())
            else {
                continue;
            };
            let pts: Vec<(f64, f64)> = st
                .by_size
                .iter()
                .map(|b| (b.size as f64 / 1024.0, b.mean_ns as f64 / 1e3))
                .collect();
            top = pts.iter().map(|p| p.1).fold(top, f64::max);
            let color = match e {
                Engine::Native => NATIVE_COLORS[2 - ci.min(2)],
                Engine::NativeOnePath => NATIVE_COLORS[3],
                Engine::Roce => ROCE_COLORS[ci.min(1)],
            };
            let mut s = Series::line(format!("{} {}", e.name(), c.name()), color, pts);
            s.markers_only = ci >= 2;
            series.push(s);
        }
    }
    if series.is_empty() {
        return Ok(false);
    }
    let rtt = fabric::reference_rtt_ns();
    let mut alone = Vec::new();
    let mut size = MIN_OBJECT;
    while size <= MAX_OBJECT {
        alone.push((
            size as f64 / 1024.0,
            (size as u64 * 8 * 1_000_000_000 / LINK_BPS + rtt) as f64 / 1e3,
        ));
        size <<= 1;
    }
    let mut s = Series::line("object alone at line rate + RTT", GREY, alone);
    s.dashed = true;
    series.push(s);
    let axes = Axes {
        title: format!(
            "storage/KV reads: {} servers, {} clients, mean read completion time",
            SERVERS,
            fabric::FAT_TREE_HOSTS - SERVERS
        ),
        x_desc: "object size (KiB)".into(),
        y_desc: "read completion time (µs)".into(),
        x: (
            MIN_OBJECT as f64 / 1024.0 / 1.5,
            MAX_OBJECT as f64 / 1024.0 * 1.5,
        ),
        y: (0.0, top * 1.1),
        log_x: true,
    };
    plot::chart(path, &axes, &series)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Opts;

    /// The pattern's shape: 8 servers, one per pod, 15 clients each, every object a power
    /// of two in 4 KiB – 4 MiB, the table the same for a seed and different across seeds,
    /// and the ideal the busiest server's bytes.
    #[test]
    fn storage_flows_have_the_stated_shape() {
        let n = fabric::FAT_TREE_HOSTS;
        let cfg = CollectiveConfig::new(Opts::default());
        let fl = flows(&cfg, n);
        assert_eq!(fl.len(), n - SERVERS);
        let bytes = server_bytes(&fl);
        assert_eq!(bytes.len(), SERVERS);
        for (s, _) in &bytes {
            assert!(is_server(s.0 as usize, n));
            assert_eq!(fl.iter().filter(|f| f.server == *s).count(), 15);
        }
        let pods: std::collections::BTreeSet<usize> = bytes
            .iter()
            .map(|(s, _)| s.0 as usize / (n / SERVERS))
            .collect();
        assert_eq!(pods.len(), SERVERS, "one server per pod");
        assert!(fl.iter().all(|f| !is_server(f.client.0 as usize, n)));
        let t = object_sizes(1);
        assert!(t
            .iter()
            .all(|&s| s.is_power_of_two() && (MIN_OBJECT..=MAX_OBJECT).contains(&s)));
        assert!(t.contains(&MIN_OBJECT) && t.contains(&MAX_OBJECT));
        assert_eq!(t, object_sizes(1));
        assert_ne!(t, object_sizes(2));
        let max = bytes.iter().map(|b| b.1).max().unwrap();
        assert_eq!(ideal_ns(&fl), max * 8 * 1_000_000_000 / LINK_BPS);
    }
}
