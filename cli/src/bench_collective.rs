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
        "ferroce bench collective: all-to-all and ring all-reduce on 128 hosts",
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
        ]);
    }
    out.push_str(&t.render());
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
    let r = collective::run(&cfg, &Bar::new());
    let csv = out.join(format!("collective{suffix}.csv"));
    let svg = out.join(format!("collective{suffix}.svg"));
    write_csv(&collective::csv(&r), &csv)?;
    collective::plot(&r, &svg)?;
    print!("{}", render(&r));
    print!("\n{}", render_checks(&checks::collective(&r)));
    print!("{}", files_line(&[&csv, &svg]));
    println!("wall time: {:.1} s\n", r.wall_s);
    Ok(r.rows
        .iter()
        .all(|x| x.errors.is_empty() && x.jct_ns.is_some()))
}
