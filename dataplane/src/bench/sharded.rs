//! The transport run of `bench dataplane --lcores N` with N > 1: a client engine and a
//! server engine of N shards each (engine::shard), shard k of both and a client/server pair of
//! applications on worker lcore k. Client shard k's connection lands on server shard k (its
//! id is ≡ k mod N), so each lcore drives one connection end to end; shard 0 of each engine
//! also polls its port and dispatches the other shards' frames.

use super::*;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

/// Empty turns in a row after which a shard's lcore yields its CPU (see
/// [`drive_window_yield`]); the single-lcore run never yields (it waits for nobody).
const IDLE_TURNS_BEFORE_YIELD: u32 = 64;

/// What one lcore of a sharded run measured.
#[derive(Clone, Debug, Default)]
pub struct LcoreRun {
    pub lcore: u32,
    pub window: TransportWindow,
    pub client: WorkloadResult,
    pub server: WorkloadResult,
    /// Frames the dispatchers (shard 0 of both engines) dropped because a shard's queue was
    /// full (counted on lcore 0's row only), and forwarded to other shards either way.
    pub dispatch_drops: u64,
    pub dispatched: u64,
    /// The client's repairs on this shard: RTOs, resends whose original arrived too, and
    /// the longest ACK hold the server reported (ns). Resends with no frame lost are holds
    /// longer than the client's timers allow (a descheduled lcore).
    pub rtos: u64,
    pub spurious: u64,
    pub hold_max_ns: u64,
}

/// Poll `engines` and `d` until every one of `n` lcores has counted itself into `gate`: no
/// lcore stops polling while another still needs it (shard 0 carries every shard's frames).
fn wait_all(engines: &mut [Engine], d: &mut PairDriver, gate: &AtomicUsize, n: usize) {
    gate.fetch_add(1, Ordering::SeqCst);
    let t0 = Instant::now();
    while gate.load(Ordering::SeqCst) < n && t0.elapsed() < Duration::from_secs(60) {
        let mut work = false;
        for e in engines.iter_mut() {
            work |= e.poll();
        }
        if !(d.step() || work) {
            std::thread::yield_now();
        }
    }
}

/// [`transport_run_devices`] with `lcores` shards per engine, one worker lcore per shard
/// pair: calibrated together (500 messages per stream on every lcore), then each lcore's
/// measured run sized to about `secs`, started together. Returns the lcores' results.
#[allow(clippy::too_many_arguments)]
pub fn transport_run_sharded(
    eal: &Eal,
    devs: [Device; 2],
    ips: [Ipv4Addr; 2],
    payload: u32,
    loss: f64,
    secs: f64,
    line_rate_mbps: u32,
    spec: fn(u32, u32) -> WorkloadSpec,
    lcores: usize,
) -> Result<(Vec<LcoreRun>, u64), String> {
    let workers = eal.worker_lcores();
    if workers.len() < lcores {
        return Err(format!(
            "{lcores} lcores asked, the EAL has {} worker lcores",
            workers.len()
        ));
    }
    let [a, b] = devs;
    let [ipa, ipb] = ips;
    let fault = FaultConfig {
        loss,
        ..Default::default()
    };
    let params = |ip, seed| EngineParams {
        ip,
        fault_tx: fault.clone(),
        seed,
        ..Default::default()
    };
    let [ca, cb] = pair_endpoints(bench_endpoint(line_rate_mbps));
    let tsc = eal.tsc_hz();
    let (ce, ch) = engine::sharded(a.0, a.1, lcores, 1500, ca, params(ipa, 1), tsc)
        .map_err(|e| e.to_string())?;
    let (se, sh) = engine::sharded(b.0, b.1, lcores, 1500, cb, params(ipb, 2), tsc)
        .map_err(|e| e.to_string())?;
    let streams = spec(payload, 1).streams.max(1) as f64;
    let gates: Arc<[AtomicUsize; 3]> = Arc::new(Default::default());
    let mut jobs = Vec::new();
    for (k, (c, s)) in ce.into_iter().zip(se).enumerate() {
        let (ha, hb) = (ch.shards()[k].clone(), sh.shards()[k].clone());
        let gates = gates.clone();
        let lcore = workers[k];
        let job = eal
            .launch(lcore, move || {
                let mut engines = vec![c, s];
                let cal = spec(payload, 500);
                let mut d0 = PairDriver::new(&ha, &hb, ipb, &cal);
                let t0 = drive(&mut engines, &mut d0, Duration::from_secs(20));
                wait_all(&mut engines, &mut d0, &gates[0], lcores);
                let (c0, _) = d0.finish(t0);
                let rate = if c0.elapsed_s > 0.0 {
                    c0.completed as f64 / c0.elapsed_s
                } else {
                    10_000.0
                };
                let per_stream = ((rate * secs) / streams).clamp(500.0, 4_000_000.0) as u32;
                let spec = spec(payload, per_stream);
                let total = spec.streams as u64 * spec.messages as u64;
                let mut d = PairDriver::new(&ha, &hb, ipb, &spec);
                wait_all(&mut engines, &mut d, &gates[1], lcores);
                let (to, w) = drive_window_yield(
                    &mut engines,
                    &mut d,
                    Duration::from_secs_f64(secs * 10.0 + 10.0),
                    total,
                    Some(IDLE_TURNS_BEFORE_YIELD),
                );
                wait_all(&mut engines, &mut d, &gates[2], lcores);
                let (mut cr, sr) = d.finish(to);
                if !c0.ok {
                    cr.errors
                        .extend(c0.errors.iter().map(|e| format!("calibration: {e}")));
                    cr.ok = false;
                }
                let counters: Vec<_> = engines.into_iter().map(|e| e.shutdown()).collect();
                let retx = counters
                    .first()
                    .and_then(|c| c["transport"]["retx_pkts"].as_u64())
                    .unwrap_or(0);
                let lane_sum = |f: &str| -> u64 {
                    counters
                        .iter()
                        .filter_map(|c| c["dispatch"]["lanes"].as_array())
                        .flatten()
                        .filter_map(|l| l[f].as_u64())
                        .sum()
                };
                let conn_fold = |f: &str, max: bool| -> u64 {
                    let it = counters
                        .first()
                        .and_then(|c| c["connections"].as_array())
                        .into_iter()
                        .flatten()
                        .filter_map(|k| k[f].as_u64());
                    if max {
                        it.max().unwrap_or(0)
                    } else {
                        it.sum()
                    }
                };
                let dispatch_drops = lane_sum("rx_dropped_full");
                let dispatched = lane_sum("rx_forwarded") + lane_sum("tx_forwarded");
                (
                    LcoreRun {
                        lcore,
                        window: w,
                        client: cr,
                        server: sr,
                        dispatch_drops,
                        dispatched,
                        rtos: conn_fold("rtos", false),
                        spurious: conn_fold("acks_redundant", false),
                        hold_max_ns: conn_fold("rx_ack_hold_max_ns", true),
                    },
                    retx,
                )
            })
            .map_err(|e| e.to_string())?;
        jobs.push(job);
    }
    let mut runs = Vec::new();
    let mut retx = 0;
    for j in jobs {
        let (r, x) = j.join();
        retx += x;
        runs.push(r);
    }
    Ok((runs, retx))
}

/// The lcores' runs as one: rates and packets summed (the runs are concurrent), CPU summed
/// over all lcores, the longest window. Allocations are not given: the counter is the whole
/// process's, so the lcores' overlapping windows would count each allocation several times.
pub fn combine(runs: &[LcoreRun]) -> (WorkloadResult, TransportWindow) {
    let mut r = WorkloadResult {
        role: "client".into(),
        ok: !runs.is_empty(),
        ..Default::default()
    };
    let mut w = TransportWindow::default();
    for (k, l) in runs.iter().enumerate() {
        r.ok &= l.client.ok && l.server.ok;
        for (who, x) in [("client", &l.client), ("server", &l.server)] {
            r.errors
                .extend(x.errors.iter().map(|e| format!("lcore {k} {who}: {e}")));
        }
        r.completed += l.client.completed;
        r.bytes += l.client.bytes;
        r.elapsed_s = r.elapsed_s.max(l.client.elapsed_s);
        r.goodput_gbps += l.client.goodput_gbps;
        r.msgs_per_s += l.client.msgs_per_s;
        let x = &l.window;
        w.cpu_ns += x.cpu_ns;
        w.wall_s = w.wall_s.max(x.wall_s);
        w.data_pkts += x.data_pkts;
        w.acks += x.acks;
        w.tx_pkts += x.tx_pkts;
        w.msgs += x.msgs;
    }
    (r, w)
}

/// One line per sharded row: each lcore's CPU ns per data packet, its packets, how busy it
/// was.
pub fn lcore_line(pmd: &str, payload: u32, loss: f64, runs: &[LcoreRun]) -> String {
    let mut s = format!("  {pmd} {payload:>5} B loss {loss}:");
    for (k, l) in runs.iter().enumerate() {
        let w = &l.window;
        let busy = if w.wall_s > 0.0 {
            w.cpu_ns as f64 / 1e9 / w.wall_s * 100.0
        } else {
            0.0
        };
        s.push_str(&format!(
            "  lcore {} (shard {k}): {:.0} ns/pkt, {} pkts, {:.3} Mpps, busy {busy:.0} %;",
            l.lcore,
            w.cpu_ns_per_pkt(),
            w.data_pkts,
            if w.wall_s > 0.0 {
                w.data_pkts as f64 / w.wall_s / 1e6
            } else {
                0.0
            }
        ));
    }
    s.pop();
    let (fwd, drops) = runs
        .iter()
        .fold((0, 0), |(f, d), l| (f + l.dispatched, d + l.dispatch_drops));
    s.push_str(&format!(
        "\n      dispatch: {fwd} frames forwarded between shards, {drops} dropped (shard queue full)"
    ));
    for (k, l) in runs.iter().enumerate() {
        if l.rtos + l.spurious > 0 {
            s.push_str(&format!(
                "\n      shard {k} repairs: {} RTOs, {} resends spurious, longest ACK hold reported {:.1} µs",
                l.rtos,
                l.spurious,
                l.hold_max_ns as f64 / 1000.0
            ));
        }
    }
    s
}
