//! The readable summary `ferroce dataplane run` prints (the full JSON report with `--json`):
//! what moved, how much of it was verified, goodput and latency, what the transport had to
//! repair (resends, SACK holes, timeouts, NACKs) and every drop by cause, zeros left out.

use crate::config::Config;
use serde_json::Value;
use std::fmt::Write;

/// Most workload errors listed (the JSON report has them all).
const MAX_ERRORS_SHOWN: usize = 10;

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// Sum of `key` over the report's connections (a number, or an array of per-reason counts).
fn conn_sum(counters: &Value, key: &str) -> u64 {
    // The engine sums every connection (it lists only the busiest); older reports only list.
    if let Some(v) = counters["connections_all"].get(key) {
        return match v {
            Value::Array(a) => a.iter().map(u).sum(),
            v => u(v),
        };
    }
    counters["connections"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| match &c[key] {
                    Value::Array(a) => a.iter().map(u).sum(),
                    v => u(v),
                })
                .sum()
        })
        .unwrap_or(0)
}

/// `1234567` → `1,234,567`.
fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KB", "MB", "GB", "TB"];
    if n < 1000 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut unit = "B";
    for x in UNITS {
        if v < 1000.0 {
            break;
        }
        v /= 1000.0;
        unit = x;
    }
    format!("{v:.2} {unit}")
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.2} %", part as f64 * 100.0 / whole as f64)
    }
}

/// `name count, name count` for the nonzero entries, or `none`.
fn nonzero(items: &[(String, u64)]) -> String {
    let v: Vec<String> = items
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{k} {}", count(*n)))
        .collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// `label:` padded to a column, or the blank column of a continuation line (empty label).
fn line(out: &mut String, label: &str, text: impl std::fmt::Display) {
    let label = if label.is_empty() {
        String::new()
    } else {
        format!("{label}:")
    };
    let _ = writeln!(out, "{label:<12} {text}");
}

/// The summary of one `run`: `cfg` is what was run, `report` what `run_engine` returned.
pub fn render(cfg: &Config, report: &Value) -> String {
    let mut out = String::new();
    let c = &report["counters"];
    let w = &cfg.workload;
    let port = &c["port"];
    let _ = writeln!(
        out,
        "ferroce dataplane run: {} on {} ({})",
        port["ip"].as_str().unwrap_or(&cfg.net.address),
        port["name"].as_str().unwrap_or("?"),
        port["mac"].as_str().unwrap_or("?")
    );
    let sizes = match (w.sizes.iter().min(), w.sizes.iter().max()) {
        (Some(a), Some(b)) if a != b => format!("sizes {a} … {b} B"),
        (Some(a), _) => format!("size {a} B"),
        _ => "no sizes".into(),
    };
    let ops = if w.ops.is_empty() {
        String::new()
    } else {
        format!(", ops {}", w.ops.join("/"))
    };
    match w.role.as_str() {
        "client" => line(
            &mut out,
            "workload",
            format!(
                "client of {}: {} streams × {} messages, {sizes}{ops}",
                w.peer.as_deref().unwrap_or("?"),
                w.streams,
                w.messages
            ),
        ),
        "server" => line(
            &mut out,
            "workload",
            format!(
                "server: {} streams × {} messages, {sizes}{ops}",
                w.streams, w.messages
            ),
        ),
        "compliance" => line(
            &mut out,
            "workload",
            "compliance target (spec/compliance.md): the profile on every connection",
        ),
        _ => line(&mut out, "workload", "none (the engine only answered)"),
    }
    let r = &report["workload"];
    if r.is_object() && w.role == "compliance" {
        // Nothing is verified here: the suite at the other end judges what the engine sent.
        line(
            &mut out,
            "result",
            format!(
                "answered for {:.3} s; {} receives completed",
                r["elapsed_s"].as_f64().unwrap_or(0.0),
                count(u(&r["completed"]))
            ),
        );
    } else if r.is_object() {
        let errors = r["errors"].as_array().cloned().unwrap_or_default();
        let ok = r["ok"].as_bool() == Some(true);
        let done = u(&r["completed"]);
        let moved = u(&r["bytes"]);
        let what = if w.role == "server" {
            "receives"
        } else {
            "work requests"
        };
        line(
            &mut out,
            "result",
            if ok {
                "ok: every completion succeeded and every byte matched".to_string()
            } else {
                format!("FAILED ({} errors)", errors.len())
            },
        );
        line(
            &mut out,
            "moved",
            format!(
                "{} {what}, {} {} in {:.3} s",
                count(done),
                bytes(moved),
                if ok { "verified" } else { "(not all verified)" },
                r["elapsed_s"].as_f64().unwrap_or(0.0)
            ),
        );
        if w.role == "server" {
            line(
                &mut out,
                "goodput",
                "measured by the client (the server counts receives and their bytes only)",
            );
        } else {
            line(
                &mut out,
                "goodput",
                format!(
                    "{:.3} Gbit/s, {:.0} messages/s",
                    r["goodput_gbps"].as_f64().unwrap_or(0.0),
                    r["msgs_per_s"].as_f64().unwrap_or(0.0)
                ),
            );
            line(
                &mut out,
                "latency",
                format!(
                    "p50 {:.1} µs, p99 {:.1} µs (post to completion)",
                    r["latency_p50_us"].as_f64().unwrap_or(0.0),
                    r["latency_p99_us"].as_f64().unwrap_or(0.0)
                ),
            );
        }
        for e in errors.iter().take(MAX_ERRORS_SHOWN) {
            let _ = writeln!(out, "  error: {}", e.as_str().unwrap_or("?"));
        }
        if errors.len() > MAX_ERRORS_SHOWN {
            let _ = writeln!(
                out,
                "  ... {} more (--json lists them all)",
                errors.len() - MAX_ERRORS_SHOWN
            );
        }
    }
    let sent = conn_sum(c, "tx_pkts");
    let resent = conn_sum(c, "retx_pkts");
    line(
        &mut out,
        "packets",
        format!(
            "{} sent ({} payload), {} received; {} connection(s)",
            count(sent),
            bytes(conn_sum(c, "tx_payload_bytes")),
            count(conn_sum(c, "rx_pkts")),
            c["connections_total"]
                .as_u64()
                .unwrap_or_else(|| c["connections"].as_array().map_or(0, |a| a.len() as u64))
        ),
    );
    line(
        &mut out,
        "repairs",
        format!(
            "{} resent ({}; {} of them spurious), SACK holes {}, time losses {}, RTOs {}, path failures {}, NACKs sent {} / received {}, duplicates received {}",
            count(resent),
            pct(resent, sent),
            count(conn_sum(c, "acks_redundant")),
            count(conn_sum(c, "sack_holes")),
            count(conn_sum(c, "time_losses")),
            count(conn_sum(c, "rtos")),
            count(conn_sum(c, "path_failures")),
            count(conn_sum(c, "nacks_sent")),
            count(conn_sum(c, "nacks_received")),
            count(conn_sum(c, "rx_duplicates")),
        ),
    );
    // Resends with nothing lost are the peer's ACKs held past this end's timers (a
    // descheduled engine): the longest hold the peers reported says so.
    let listed = c["connections"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|k| u(&k["rx_ack_hold_max_ns"]));
    let hold_max = listed
        .chain(c["connections_all"]["rx_ack_hold_max_ns"].as_u64())
        .max()
        .unwrap_or(0);
    if hold_max > 0 {
        line(
            &mut out,
            "ACK holds",
            format!(
                "{} ACK block(s) reported a hold longer than ack_delay, the longest {:.1} µs",
                count(conn_sum(c, "rx_ack_holds_long")),
                hold_max as f64 / 1000.0
            ),
        );
    }
    // Drops, by who dropped and why.
    let mut frames: Vec<(String, u64)> = c["engine"]["rx_drops"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), u(v))).collect())
        .unwrap_or_default();
    let e = &c["engine"];
    for k in [
        "rx_multiseg",
        "tx_no_mbuf",
        "tx_dropped_full",
        "tx_oversize",
        "arp_queue_dropped",
    ] {
        frames.push((k.to_string(), u(&e[k])));
    }
    let d = &c["driver"];
    for k in ["imissed", "ierrors", "oerrors", "rx_nombuf"] {
        frames.push((format!("driver {k}"), u(&d[k])));
    }
    // The kernel UDP backend's (docs/design.md, "The kernel UDP backend").
    let udp = &c["udp"];
    for k in [
        "rx_kernel_dropped",
        "rx_truncated",
        "rx_no_mbuf",
        "tx_errors",
        "tx_not_udp",
    ] {
        frames.push((format!("udp {k}"), u(&udp[k])));
    }
    line(&mut out, "drops", format!("frames: {}", nonzero(&frames)));
    let ep = &c["endpoint"];
    let transport: Vec<(String, u64)> = [
        "drop_truncated",
        "drop_bad_version",
        "drop_bad_opcode",
        "drop_bad_crc",
        "drop_malformed",
        "drop_unknown_conn",
        "drop_open_limit",
    ]
    .iter()
    .map(|k| (k.trim_start_matches("drop_").to_string(), u(&ep[*k])))
    .chain(
        ["rx_not_open", "rx_bad_path", "rx_out_of_window"]
            .iter()
            .map(|k| (k.trim_start_matches("rx_").to_string(), conn_sum(c, k))),
    )
    .collect();
    line(&mut out, "", format!("transport: {}", nonzero(&transport)));
    let mut faults = Vec::new();
    for (dir, key) in [("tx", "fault_tx"), ("rx", "fault_rx")] {
        let f = &c[key];
        for k in [
            "dropped_random",
            "dropped_burst",
            "reordered",
            "duplicated",
            "corrupted",
            "ecn_marked",
        ] {
            faults.push((format!("{dir} {k}"), u(&f[k])));
        }
    }
    line(
        &mut out,
        "",
        format!("injected faults: {}", nonzero(&faults)),
    );
    out.push_str("(--json prints the full report: every counter of every connection)\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cfg(role: &str) -> Config {
        let mut c = Config::from_toml(
            "[net]\naddress = \"198.18.1.11\"\n[port]\nvdev = \"net_ring0\"\n",
            "x.toml",
        )
        .unwrap();
        c.workload.role = role.into();
        c.workload.peer = Some("198.18.1.12".into());
        c
    }

    fn report(ok: bool, errors: usize) -> Value {
        json!({
            "workload": {
                "role": "client", "ok": ok,
                "errors": (0..errors).map(|i| format!("wr {i}: bad byte")).collect::<Vec<_>>(),
                "completed": 1200, "bytes": 4_567_000, "elapsed_s": 1.5,
                "goodput_gbps": 0.0243, "msgs_per_s": 800.0,
                "latency_p50_us": 61.25, "latency_p99_us": 410.0,
            },
            "counters": {
                "port": {"ip": "198.18.1.11", "name": "net_af_packet0", "mac": "02:00:00:00:00:01"},
                "engine": {"rx_drops": {"udp_port": 3, "other_mac": 0}, "tx_no_mbuf": 0},
                "driver": {"imissed": 2},
                "udp": {"rx_kernel_dropped": 4, "tx_errors": 0},
                "endpoint": {"drop_bad_crc": 5, "drop_unknown_conn": 0},
                "fault_tx": {"dropped_random": 12, "corrupted": 0},
                "fault_rx": {},
                "connections": [
                    {"tx_pkts": 1000, "retx_pkts": 10, "rx_pkts": 900, "tx_payload_bytes": 2_000_000,
                     "sack_holes": 7, "rtos": 1, "nacks_sent": [0, 1, 0, 0, 0, 0],
                     "acks_redundant": 3, "time_losses": 2, "rx_ack_holds_long": 5,
                     "rx_ack_hold_max_ns": 1_250_000,
                     "nacks_received": [0, 0, 0, 0, 0, 0], "rx_out_of_window": 4},
                    {"tx_pkts": 1000, "retx_pkts": 2, "rx_pkts": 100, "tx_payload_bytes": 1_000_000,
                     "sack_holes": 1, "rtos": 0},
                ],
            },
        })
    }

    #[test]
    fn summary_says_what_moved_and_every_nonzero_drop_by_cause() {
        let s = render(&cfg("client"), &report(true, 0));
        for want in [
            "198.18.1.11 on net_af_packet0",
            "client of 198.18.1.12: 2 streams × 200 messages, sizes 1 … 20000 B",
            "ok: every completion succeeded",
            "1,200 work requests, 4.57 MB verified in 1.500 s",
            "0.024 Gbit/s, 800 messages/s",
            "p50 61.2 µs, p99 410.0 µs",
            "2,000 sent (3.00 MB payload), 1,000 received; 2 connection(s)",
            "12 resent (0.60 %; 3 of them spurious), SACK holes 8, time losses 2, RTOs 1",
            "5 ACK block(s) reported a hold longer than ack_delay, the longest 1250.0 µs",
            "NACKs sent 1 / received 0",
            "frames: udp_port 3, driver imissed 2, udp rx_kernel_dropped 4",
            "transport: bad_crc 5, out_of_window 4",
            "injected faults: tx dropped_random 12",
        ] {
            assert!(s.contains(want), "missing {want:?} in\n{s}");
        }
        assert!(
            !s.contains("other_mac"),
            "a zero drop counter is listed:\n{s}"
        );
        assert!(s.lines().count() < 16, "not short:\n{s}");
    }

    #[test]
    fn a_server_counts_receives_and_leaves_goodput_to_the_client() {
        let s = render(&cfg("server"), &report(true, 0));
        assert!(s.contains("server: 2 streams × 200 messages"), "{s}");
        assert!(s.contains("1,200 receives, 4.57 MB verified"), "{s}");
        assert!(s.contains("goodput:     measured by the client"), "{s}");
        assert!(!s.contains("latency:"), "{s}");
    }

    #[test]
    fn a_compliance_target_claims_no_verification() {
        let s = render(&cfg("compliance"), &report(true, 0));
        assert!(s.contains("compliance target"), "{s}");
        assert!(
            s.contains("answered for 1.500 s; 1,200 receives completed"),
            "{s}"
        );
        assert!(!s.contains("verified"), "{s}");
    }

    #[test]
    fn a_failed_run_says_so_and_lists_its_first_errors() {
        let s = render(&cfg("client"), &report(false, 13));
        assert!(s.contains("FAILED (13 errors)"), "{s}");
        assert!(s.contains("(not all verified)"), "{s}");
        assert_eq!(s.matches("  error: ").count(), MAX_ERRORS_SHOWN, "{s}");
        assert!(s.contains("3 more (--json lists them all)"), "{s}");
    }

    #[test]
    fn an_engine_without_workload_and_counters_still_renders() {
        let s = render(&cfg("none"), &json!({"workload": null, "counters": {}}));
        assert!(s.contains("workload:    none"), "{s}");
        assert!(s.contains("frames: none"), "{s}");
        assert_eq!(
            (count(0), count(999), count(1000)),
            ("0".into(), "999".into(), "1,000".into())
        );
        assert_eq!(
            (bytes(999), bytes(1000), bytes(2_500_000)),
            ("999 B".into(), "1.00 KB".into(), "2.50 MB".into())
        );
    }
}
