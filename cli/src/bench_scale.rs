//! `ferroce bench scale`: table, CSV and thresholds of the idle-connection scale benchmark.

use crate::bench::{files_line, header, lines, opt, render_checks, write_csv, Bar};
use crate::format::{count, Table};
use ferroce_benches::checks;
use ferroce_benches::scale::{self, ScaleConfig, ScaleReport};
use ferroce_benches::Opts;
use std::path::Path;

pub fn render(r: &ScaleReport) -> String {
    let mut out = header(
        "ferroce bench scale: many connections gone idle",
        &r.setup,
        r.config.opts,
    );
    let mut t = Table::new(
        [
            "memory",
            "connections",
            "paths",
            "client B/conn",
            "server B/conn",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
    );
    for m in &r.mem {
        t.row(vec![
            m.state.into(),
            count(m.connections as u64),
            m.paths.to_string(),
            opt(m.per_conn.map(|x| x.0), 0),
            opt(m.per_conn.map(|x| x.1), 0),
        ]);
    }
    out.push_str(&t.render());
    out.push('\n');
    let mut t = Table::new(
        [
            "simulator",
            "connections",
            "paths",
            "lost",
            "done",
            "events",
            "heap B/conn",
            "peak RSS MB",
            "wall s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
    );
    t.row(vec![
        "one WRITE".into(),
        count(r.connections as u64),
        r.paths.to_string(),
        count(r.lost_msgs),
        (if r.completed && r.errors.is_empty() {
            "yes"
        } else {
            "NO"
        })
        .into(),
        count(r.events),
        opt(r.sim_heap_per_conn, 0),
        opt(r.peak_rss.map(|b| b as f64 / 1e6), 0),
        format!("{:.1}", r.sim_wall_s),
    ]);
    out.push_str(&t.render());
    if !r.errors.is_empty() {
        let errs: Vec<String> = r.errors.iter().take(5).cloned().collect();
        out.push('\n');
        out.push_str(&lines("PROBLEMS:", &errs));
    }
    out.push('\n');
    out.push_str(&lines("definitions:", &r.definitions));
    out
}

/// Runs the benchmark, prints its tables and thresholds, writes scale.csv. Returns whether
/// the simulator run completed without errors.
pub fn run(opts: Opts, out: &Path, suffix: &str) -> Result<bool, String> {
    let r = scale::run(&ScaleConfig::new(opts), &Bar::new());
    let csv = out.join(format!("scale{suffix}.csv"));
    write_csv(&scale::csv(&r), &csv)?;
    print!("{}", render(&r));
    print!("\n{}", render_checks(&checks::scale(&r)));
    print!("{}", files_line(&[&csv]));
    println!("wall time: {:.1} s\n", r.wall_s);
    Ok(r.completed && r.errors.is_empty() && r.lost_msgs == 0)
}
