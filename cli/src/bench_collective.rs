//! `ferroce bench collective`: table, CSV, SVG and thresholds of the collective benchmark
//! (kept apart from bench.rs, which holds the other simulator benchmarks).

use crate::args::BenchArgs;
use crate::bench::{files_line, header, lines, opt, render_checks, write_csv, Bar};
use crate::format::{count, Table};
use ferroce_benches::checks;
use ferroce_benches::collective::{self, CollectiveConfig, CollectiveReport};
use ferroce_benches::Opts;
use std::path::Path;

fn size_name(s: u64) -> String {
    if s >= 1 << 20 {
        format!("{} MiB", s >> 20)
    } else {
        format!("{} KiB", s >> 10)
    }
}

pub fn render(r: &CollectiveReport) -> String {
    let mut out = header(
        &format!(
            "ferroce bench collective: all-to-all, ring all-reduce and storage/KV reads on {} hosts",
            r.config.hosts()
        ),
        &r.setup,
        r.config.opts,
    );
    let mut t = Table::new(
        [
            "pattern",
            "S",
            "engine",
            "condition",
            "jct µs",
            "ideal µs",
            "fraction",
            "retransmits",
            "timeouts",
            "holes",
            "time-lost",
            "TLPs",
            "RTOs",
            "redundant",
            "long holds",
            "max hold µs",
            "drops",
            "done",
            "wall s",
            "events",
            "events/s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
    );
    for x in &r.rows {
        t.row(vec![
            x.pattern.name().into(),
            size_name(x.size),
            x.engine.name().into(),
            x.condition.name(),
            opt(x.jct_ns.map(|j| j as f64 / 1e3), 1),
            format!("{:.1}", x.ideal_ns as f64 / 1e3),
            opt(x.fraction, 3),
            count(x.retransmits),
            count(x.timeouts),
            count(x.causes.sack_holes),
            count(x.causes.time_losses),
            count(x.causes.tlps),
            count(x.causes.rtos),
            count(x.causes.redundant),
            count(x.causes.long_holds),
            format!("{:.1}", x.causes.max_hold_ns as f64 / 1e3),
            count(x.drops),
            (if x.jct_ns.is_some() && x.errors.is_empty() {
                "yes"
            } else {
                "NO"
            })
            .into(),
            format!("{:.1}", x.wall_s),
            count(x.events),
            count((x.events as f64 / x.wall_s.max(1e-9)) as u64),
        ]);
    }
    out.push_str(&t.render());
    out.push_str(&render_storage(r));
    let errs: Vec<String> = r
        .rows
        .iter()
        .flat_map(|x| {
            x.errors.iter().take(3).map(move |e| {
                format!(
                    "{} {} {} {}: {e}",
                    x.pattern.name(),
                    size_name(x.size),
                    x.engine.name(),
                    x.condition.name()
                )
            })
        })
        .collect();
    if !errs.is_empty() {
        out.push('\n');
        out.push_str(&lines("PROBLEMS:", &errs));
    }
    out.push('\n');
    out.push_str(&lines("definitions:", &r.definitions));
    out
}

/// The storage rows: servers' egress utilisation, then reads by object size.
fn render_storage(r: &CollectiveReport) -> String {
    let rows: Vec<_> = r
        .rows
        .iter()
        .filter_map(|x| x.storage.as_ref().map(|st| (x, st)))
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut t = Table::new(
        [
            "engine",
            "condition",
            "object",
            "reads",
            "mean µs",
            "p99 µs",
            "alone µs",
            "mean / alone",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
    );
    let mut util = Vec::new();
    for (x, st) in rows {
        util.push(format!(
            "{} {}: {} reads, jct fraction {}, servers' egress utilisation {:.3}, drops {}",
            x.engine.name(),
            x.condition.name(),
            count(st.reads),
            opt(x.fraction, 3),
            st.egress_util,
            count(x.drops)
        ));
        for b in &st.by_size {
            t.row(vec![
                x.engine.name().into(),
                x.condition.name(),
                size_name(b.size as u64),
                count(b.reads),
                format!("{:.1}", b.mean_ns as f64 / 1e3),
                format!("{:.1}", b.p99_ns as f64 / 1e3),
                format!("{:.1}", b.alone_ns as f64 / 1e3),
                format!("{:.2}", b.mean_ns as f64 / b.alone_ns.max(1) as f64),
            ]);
        }
    }
    let mut out = String::from("\n");
    out.push_str(&lines("storage-kv:", &util));
    out.push_str(&t.render());
    out
}

/// Runs the benchmark, prints its table and thresholds, writes collective.csv/.svg.
/// Returns whether every run completed without verification errors.
pub fn run(a: &BenchArgs, opts: Opts, out: &Path, suffix: &str) -> Result<bool, String> {
    let mut cfg = CollectiveConfig::new(opts);
    if !a.patterns.is_empty() {
        cfg.patterns = a.patterns.clone();
    }
    if !a.engines.is_empty() {
        cfg.engines = a.engines.clone();
    }
    if !a.conditions.is_empty() {
        cfg.conditions = a.conditions.clone();
    }
    if !a.sizes_kib.is_empty() {
        cfg.sizes = a.sizes_kib.iter().map(|k| k << 10).collect();
    }
    if let Some(k) = a.fat_tree_k {
        cfg.k = k;
        if k != ferroce_benches::fabric::FAT_TREE_K {
            // storage-kv's servers are one per pod of the 128-host fabric.
            if a.patterns.contains(&collective::Pattern::Storage) {
                return Err(format!(
                    "storage-kv runs on the k = {} fabric only",
                    ferroce_benches::fabric::FAT_TREE_K
                ));
            }
            cfg.patterns.retain(|&p| p != collective::Pattern::Storage);
        }
    }
    let r = collective::run(&cfg, &Bar::new());
    let csv = out.join(format!("collective{suffix}.csv"));
    let svg = out.join(format!("collective{suffix}.svg"));
    write_csv(&collective::csv(&r), &csv)?;
    collective::plot(&r, &svg)?;
    let st_csv = out.join(format!("collective-storage{suffix}.csv"));
    let st_svg = out.join(format!("collective-storage{suffix}.svg"));
    let mut files = vec![csv.clone(), svg.clone()];
    if collective::storage::plot(&r, &st_svg)? {
        write_csv(&collective::storage::csv(&r), &st_csv)?;
        files.extend([st_csv, st_svg]);
    }
    print!("{}", render(&r));
    print!("\n{}", render_checks(&checks::collective(&r)));
    let files: Vec<&Path> = files.iter().map(|p| p.as_path()).collect();
    print!("{}", files_line(&files));
    println!("wall time: {:.1} s\n", r.wall_s);
    Ok(r.rows
        .iter()
        .all(|x| x.errors.is_empty() && x.jct_ns.is_some()))
}
