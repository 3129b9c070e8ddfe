//! Readable rendering of run summaries: a header, one table column per run, and the
//! verification verdicts.

use crate::format::{bytes, count, duration_ns, percent, trim_float, Table};
use crate::run::RunSummary;
use std::fmt::Write;

/// Most verification errors listed per run (JSON output lists them all).
const MAX_ERRORS_SHOWN: usize = 10;

fn faults_line(s: &RunSummary) -> String {
    let f = &s.faults;
    let mut parts = Vec::new();
    if f.loss > 0.0 {
        parts.push(format!("random loss {}", percent(f.loss)));
    }
    if let (Some([gb, bg, lb]), Some(mean)) = (f.burst, f.burst_mean_loss) {
        parts.push(format!(
            "Gilbert-Elliott bursts (p_gb {gb}, p_bg {bg}, loss in bad {lb}; mean loss {})",
            percent(mean)
        ));
    }
    if f.reorder > 0.0 {
        parts.push(format!(
            "reorder {} (+{})",
            percent(f.reorder),
            duration_ns(f.reorder_delay_ns)
        ));
    }
    if f.duplicate > 0.0 {
        parts.push(format!("duplicate {}", percent(f.duplicate)));
    }
    if f.corrupt > 0.0 {
        parts.push(format!("corrupt {}", percent(f.corrupt)));
    }
    if parts.is_empty() {
        "none".into()
    } else {
        format!("{}; on {}", parts.join(", "), f.placement)
    }
}

fn opt_ns(v: Option<u64>) -> String {
    v.map(duration_ns).unwrap_or_else(|| "-".into())
}

/// Header lines shared by all runs (taken from the first), then the table, then verdicts.
pub fn render(title: &str, runs: &[RunSummary], verbose: bool) -> String {
    let mut out = String::new();
    let Some(first) = runs.first() else {
        return out;
    };
    let _ = writeln!(out, "{title}");
    let w = runs
        .iter()
        .map(|r| r.label.chars().count() + 1)
        .max()
        .unwrap_or(0)
        .max("fabric:".len());
    let _ = writeln!(
        out,
        "{:<w$} {}; links {} Gb/s, {} per hop",
        "fabric:",
        first.fabric,
        trim_float(first.link_rate_gbps, 1),
        duration_ns(first.hop_delay_ns)
    );
    let _ = writeln!(
        out,
        "{:<w$} {} (the simulation is deterministic: same seed, same run)",
        "seed:", first.seed
    );
    for r in runs {
        let _ = writeln!(out, "{:<w$} {}", format!("{}:", r.label), r.workload);
    }
    out.push('\n');

    let mut header = vec![String::new()];
    header.extend(runs.iter().map(|r| r.label.clone()));
    let mut t = Table::new(header);
    let mut row = |name: &str, f: &dyn Fn(&RunSummary) -> String| {
        let mut cells = vec![name.to_string()];
        cells.extend(runs.iter().map(f));
        t.row(cells);
    };
    row("paths (agreed/asked)", &|r| {
        format!("{}/{}", r.paths, r.paths_requested)
    });
    row("MTU", &|r| format!("{} B", r.mtu_bytes));
    row("loss (random, per uplink)", &|r| percent(r.faults.loss));
    row("data moved", &|r| bytes(r.bytes));
    row("work requests done", &|r| {
        format!("{}/{}", count(r.ops_completed), count(r.ops_expected))
    });
    row("simulated time", &|r| duration_ns(r.sim_time_ns));
    row("goodput", &|r| format!("{:.2} Gb/s", r.goodput_gbps));
    if runs.iter().any(|r| r.ratio_to_lossless.is_some()) {
        row("vs lossless", &|r| {
            r.ratio_to_lossless
                .map(|x| format!("{:.1} %", x * 100.0))
                .unwrap_or_else(|| "-".into())
        });
    }
    row("data pkts sent (both ends)", &|r| count(r.pkts_sent));
    row("  of which resent", &|r| {
        if r.pkts_sent > 0 {
            format!(
                "{} ({:.2} %)",
                count(r.pkts_resent),
                r.pkts_resent as f64 * 100.0 / r.pkts_sent as f64
            )
        } else {
            count(r.pkts_resent)
        }
    });
    row("SACK holes (pkts)", &|r| count(r.sack_holes));
    row("RTOs", &|r| count(r.rtos));
    row("path failures", &|r| count(r.path_failures));
    row("fabric drops (pkts)", &|r| count(r.fabric_drops));
    row("WR latency p50", &|r| opt_ns(r.latency.p50_ns));
    row("WR latency p99", &|r| opt_ns(r.latency.p99_ns));
    row("WR latency max", &|r| opt_ns(r.latency.max_ns));
    row("wall clock", &|r| format!("{:.2} s", r.wall_time_s));
    out.push_str(&t.render());

    let mut notes = Vec::new();
    for r in runs {
        let f = &r.faults;
        if f.burst.is_some() || f.reorder > 0.0 || f.duplicate > 0.0 || f.corrupt > 0.0 {
            notes.push(format!("faults ({}): {}", r.label, faults_line(r)));
        }
    }
    if let Some(r) = runs.iter().find(|r| r.faults.loss > 0.0) {
        notes.push(format!("loss is applied on {}", r.faults.placement));
    }
    notes.push(
        "goodput: payload bytes of completed work requests (both directions: READ data flows \
         server->client) / simulated time"
            .to_string(),
    );
    notes.push(
        "WR latency: post to completion, including time queued behind earlier work requests"
            .to_string(),
    );
    notes.push("data pkts: packets carrying payload or requests; ACKs not counted".to_string());
    out.push('\n');
    for n in notes {
        let _ = writeln!(out, "{n}");
    }

    if verbose {
        for r in runs {
            out.push('\n');
            out.push_str(&render_counters(r));
        }
    }

    out.push('\n');
    for r in runs {
        out.push_str(&verdict(r));
    }
    out
}

/// `verified: ...` line(s) of one run.
pub fn verdict(r: &RunSummary) -> String {
    let mut out = String::new();
    let ops = if r.ops_expected != r.ops_completed || r.label.contains("mixed") {
        format!(
            "{}/{} work requests, ",
            count(r.ops_completed),
            count(r.ops_expected)
        )
    } else {
        String::new()
    };
    let _ = writeln!(
        out,
        "{} ({}): {}{} bytes completed, {} bytes content-checked, {} errors",
        if r.ok() { "verified" } else { "FAILED" },
        r.label,
        ops,
        count(r.bytes),
        count(r.content_checked_bytes),
        r.errors.len()
    );
    if !r.completed {
        let _ = writeln!(
            out,
            "  the workload did not complete within the simulated-time limit"
        );
    }
    for e in r.errors.iter().take(MAX_ERRORS_SHOWN) {
        let _ = writeln!(out, "  error: {e}");
    }
    if r.errors.len() > MAX_ERRORS_SHOWN {
        let _ = writeln!(
            out,
            "  ... and {} more (--json lists all)",
            r.errors.len() - MAX_ERRORS_SHOWN
        );
    }
    out
}

/// Per-path and per-connection counters of one run.
pub fn render_counters(r: &RunSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "per-path sender counters, client ({}):", r.label);
    let mut t = Table::new(
        [
            "path",
            "tx pkts",
            "tx bytes",
            "resent",
            "acked",
            "SACK holes",
            "RTOs",
            "ECN echoed",
            "cwnd cuts",
            "probes",
            "failures",
            "reroutes",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
    );
    for p in &r.client_paths {
        t.row(vec![
            p.path.to_string(),
            count(p.tx_pkts),
            count(p.tx_bytes),
            count(p.retx_pkts),
            count(p.acked_pkts),
            count(p.sack_holes),
            count(p.rtos),
            count(p.ecn_echoed),
            count(p.cwnd_decreases),
            count(p.probes_sent),
            count(p.failures),
            count(p.reroutes),
        ]);
    }
    out.push_str(&t.render());
    out.push('\n');
    let _ = writeln!(out, "connection counters ({}):", r.label);
    let mut t = Table::new(vec![String::new(), "client".into(), "server".into()]);
    let (c, s) = (&r.client, &r.server);
    let mut row = |name: &str, a: u64, b: u64| t.row(vec![name.into(), count(a), count(b)]);
    row("data pkts sent", c.tx_pkts, s.tx_pkts);
    row("payload bytes sent", c.tx_payload_bytes, s.tx_payload_bytes);
    row("pkts resent", c.retx_pkts, s.retx_pkts);
    row("pkts received", c.rx_pkts, s.rx_pkts);
    row(
        "payload bytes received",
        c.rx_payload_bytes,
        s.rx_payload_bytes,
    );
    row("duplicates received", c.rx_duplicates, s.rx_duplicates);
    row("out of window", c.rx_out_of_window, s.rx_out_of_window);
    row("ACKs sent", c.acks_sent, s.acks_sent);
    row("ACKs received", c.acks_received, s.acks_received);
    row("SACK holes", c.sack_holes, s.sack_holes);
    row("RTOs", c.rtos, s.rtos);
    row("ECN CE received", c.ecn_ce_received, s.ecn_ce_received);
    row(
        "NACKs sent",
        c.nacks_sent.iter().sum(),
        s.nacks_sent.iter().sum(),
    );
    row(
        "NACKs received",
        c.nacks_received.iter().sum(),
        s.nacks_received.iter().sum(),
    );
    row(
        "remote access refused",
        c.remote_access_refused,
        s.remote_access_refused,
    );
    row("RNR waits", c.rnr_waits, s.rnr_waits);
    row(
        "messages completed (tx)",
        c.messages_completed_tx,
        s.messages_completed_tx,
    );
    row(
        "messages completed (rx)",
        c.messages_completed_rx,
        s.messages_completed_rx,
    );
    row("path failures", c.path_failures, s.path_failures);
    out.push_str(&t.render());
    let _ = writeln!(out, "simulator events: {}", count(r.events));
    out
}
