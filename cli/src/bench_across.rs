//! `ferroce bench across`: table, CSV and targets of the scale-across benchmark.

use crate::bench::{files_line, header, lines, opt, render_checks_body, write_csv, Bar};
use crate::format::{count, Table};
use ferroce_benches::across::{self, AcrossConfig, AcrossReport};
use ferroce_benches::checks;
use ferroce_benches::Opts;
use std::path::Path;

pub fn render(r: &AcrossReport, verbose: bool) -> String {
    let mut out = header(
        "ferroce bench across: two fat trees joined by long-haul links",
        &r.setup,
        r.config.opts,
    );
    let mut cols = vec![
        "scenario",
        "mode",
        "flow",
        "one-way ms",
        "loss %",
        "paths",
        "Gb/s",
        "of line",
        "jain",
        "retx",
        "RTOs",
        "ack B/B",
    ];
    if verbose {
        cols.extend(["events", "wall s"]);
    }
    let mut t = Table::new(cols.iter().map(|s| s.to_string()).collect());
    for x in &r.rows {
        let mut row = vec![
            x.scenario.into(),
            x.mode.name().into(),
            x.flow.into(),
            format!("{}", x.one_way_ms),
            format!("{}", x.loss_pct),
            x.paths.to_string(),
            format!("{:.2}", x.goodput_gbps),
            format!("{:.3}", x.of_line),
            opt(x.jain, 3),
            count(x.retransmits),
            count(x.timeouts),
            opt(x.ack_overhead, 4),
        ];
        if verbose {
            row.push(count(x.events));
            row.push(format!("{:.1}", x.wall_s));
        }
        t.row(row);
    }
    out.push_str(&t.render());
    let errs: Vec<String> = r
        .rows
        .iter()
        .flat_map(|x| x.errors.iter().take(3).cloned())
        .take(5)
        .collect();
    if !errs.is_empty() {
        out.push('\n');
        out.push_str(&lines("PROBLEMS:", &errs));
    }
    out.push('\n');
    out.push_str(&lines("definitions:", &r.definitions));
    out
}

/// Runs the benchmark, prints its table and targets, writes across.csv. Returns whether
/// every run was free of verification errors.
pub fn run(opts: Opts, out: &Path, suffix: &str, verbose: bool) -> Result<bool, String> {
    let r = across::run(&AcrossConfig::new(opts), &Bar::new());
    let csv = out.join(format!("across{suffix}.csv"));
    write_csv(&across::csv(&r), &csv)?;
    print!("{}", render(&r, verbose));
    print!(
        "\nissue 18 scale-across targets:\n{}",
        render_checks_body(&checks::across(&r))
    );
    print!("{}", files_line(&[&csv]));
    println!("wall time: {:.1} s\n", r.wall_s);
    Ok(r.rows.iter().all(|x| x.errors.is_empty()))
}
