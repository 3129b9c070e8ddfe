//! `ferroce bench ...`: runs the benchmark suite (crate `ferroce-benches`), prints tables,
//! writes CSV and SVG files, and checks the figures against issue 3's thresholds.

use crate::args::{BenchArgs, BenchWhich};
use crate::format::{count, trim_float, Table};
use ferroce_benches::checks::{self, Check};
use ferroce_benches::incast::{self, IncastConfig, IncastReport};
use ferroce_benches::loss::{self, LossConfig, LossModel, LossReport, Mode};
use ferroce_benches::multipath::{self, MultipathConfig, MultipathReport};
use ferroce_benches::permutation::{self, PermutationConfig, PermutationReport};
use ferroce_benches::progress::Progress;
use ferroce_benches::sansio::{self, CoreConfig, CoreReport};
use ferroce_benches::{profile, Opts};
use ferroce_transport::CcAlgorithm;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::cell::RefCell;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

/// A progress bar on stderr; indicatif draws nothing when stderr is not a terminal.
pub(crate) struct Bar {
    pb: RefCell<Option<(ProgressBar, bool)>>,
}

impl Bar {
    pub(crate) fn new() -> Self {
        Bar {
            pb: RefCell::new(None),
        }
    }
}

impl Progress for Bar {
    fn begin(&self, bench: &str, steps: u64) {
        let pb = ProgressBar::with_draw_target(Some(steps), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template(
            "{prefix:>12.bold} [{bar:28}] {pos}/{len} {elapsed:>4} {wide_msg}",
        ) {
            pb.set_style(style.progress_chars("=> "));
        }
        pb.set_prefix(bench.to_string());
        pb.enable_steady_tick(std::time::Duration::from_millis(250));
        *self.pb.borrow_mut() = Some((pb, false));
    }

    fn step(&self, what: &str) {
        if let Some((pb, started)) = self.pb.borrow_mut().as_mut() {
            if *started {
                pb.inc(1);
            }
            *started = true;
            pb.set_message(what.to_string());
        }
    }

    fn end(&self) {
        if let Some((pb, _)) = self.pb.borrow_mut().take() {
            pb.finish_and_clear();
        }
    }
}

pub(crate) fn opt(v: Option<f64>, d: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.d$}"),
        _ => "-".into(),
    }
}

pub(crate) fn header(title: &str, setup: &[String], opts: Opts) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{title}");
    for s in setup {
        let _ = writeln!(out, "  {s}");
    }
    let _ = writeln!(
        out,
        "  seed {}, congestion controller {}{} (deterministic: the same seed gives the same figures)",
        opts.seed,
        opts.cc,
        if opts.quick {
            ", --quick (less data per run)"
        } else {
            ""
        }
    );
    out.push('\n');
    out
}

pub(crate) fn lines(title: &str, v: &[String]) -> String {
    let mut out = format!("{title}\n");
    for s in v {
        let _ = writeln!(out, "  {s}");
    }
    out
}

pub(crate) fn render_checks(c: &[Check]) -> String {
    format!("issue 3 thresholds:\n{}", render_checks_body(c))
}

/// One line per check: verdict, what, threshold, measured.
pub(crate) fn render_checks_body(c: &[Check]) -> String {
    let mut out = String::new();
    for x in c {
        let _ = writeln!(
            out,
            "  {:<12} {} (needs {}): {}",
            x.verdict(),
            x.what,
            x.threshold,
            x.measured
        );
    }
    out
}

pub(crate) fn files_line(paths: &[&Path]) -> String {
    let v: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    format!("written: {}\n", v.join(", "))
}

pub(crate) fn write_csv(c: &ferroce_benches::csv::Csv, path: &Path) -> Result<(), String> {
    c.write(path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn render_loss(r: &LossReport, verbose: bool) -> String {
    let mut out = header(
        "ferroce bench loss: goodput against packet loss, native multipath vs. RoCEv2 go-back-N",
        &r.setup,
        r.config.opts,
    );
    let modes = r.config.modes();
    let mut head = vec!["loss".to_string()];
    head.extend(modes.iter().map(|m| m.label()));
    let mut t = Table::new(head);
    let mut models: Vec<LossModel> = Vec::new();
    for x in &r.rows {
        if !models.contains(&x.model) {
            models.push(x.model);
        }
    }
    for m in &models {
        let name = match m {
            LossModel::Random(p) => format!("{} %", trim_float(p * 100.0, 2)),
            LossModel::Bursty(ge) => format!("{} % bursty", trim_float(ge.mean_loss() * 100.0, 2)),
        };
        let mut row = vec![name];
        for &mode in &modes {
            let cell = r
                .rows
                .iter()
                .find(|x| x.mode == mode && x.model == *m)
                .map(|x| {
                    format!(
                        "{:.3} ({:.1}){}",
                        x.ratio_to_lossless,
                        x.goodput_gbps,
                        if x.completed { "" } else { "*" }
                    )
                })
                .unwrap_or_else(|| "-".into());
            row.push(cell);
        }
        t.row(row);
    }
    out.push_str("goodput / lossless goodput (goodput in Gb/s); * = stopped at the time limit\n");
    out.push_str(&t.render());
    if let (Some(v), Some(n), Some(rc)) = (
        r.native_over_roce_lossless(),
        r.row(Mode::Native { paths: 8 }, 0.0),
        r.best_roce(0.0),
    ) {
        out.push_str(&format!(
            "lossless: native (8 paths) / RoCEv2 = {v:.4} ({:.2} / {:.2} Gb/s); the per-packet headers alone allow {:.4} (native WRITE header 52 B on every packet, RoCEv2 BTH + ICRC 16 B and a RETH per message); native starts at line rate at once (its receiver has no other connection: SOLE, spec/transport.md COLD-5)\n",
            n.goodput_gbps,
            rc.goodput_gbps,
            r.header_ceiling()
        ));
    }
    out.push('\n');
    let mut d = Table::new(
        [
            "mode",
            "paths",
            "loss",
            "model",
            "goodput Gb/s",
            "ratio",
            "retransmits",
            "timeouts",
            "msg p50 µs",
            "msg p99 µs",
            "done",
            "wall s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
    );
    for x in &r.rows {
        if !verbose && !matches!(x.model, LossModel::Random(p) if p == 0.01 || p == 0.10) {
            continue;
        }
        d.row(vec![
            x.mode.name().into(),
            x.mode.paths().to_string(),
            format!("{} %", trim_float(x.loss_pct, 2)),
            x.model.name().into(),
            format!("{:.2}", x.goodput_gbps),
            format!("{:.4}", x.ratio_to_lossless),
            count(x.retransmits),
            count(x.timeouts),
            format!("{:.1}", x.msg_p50_us),
            format!("{:.1}", x.msg_p99_us),
            (if x.completed { "yes" } else { "no" }).into(),
            format!("{:.2}", x.wall_s),
        ]);
    }
    out.push_str(if verbose {
        "every run:\n"
    } else {
        "at 1 % and 10 % loss (-v for every run; the CSV has all):\n"
    });
    out.push_str(&d.render());
    let errs: Vec<String> = r
        .rows
        .iter()
        .filter(|x| !x.errors.is_empty())
        .map(|x| {
            format!(
                "{} at {} %: {} verification errors, first: {}",
                x.mode.label(),
                trim_float(x.loss_pct, 2),
                x.errors.len(),
                x.errors[0]
            )
        })
        .collect();
    if !errs.is_empty() {
        out.push('\n');
        out.push_str(&lines("VERIFICATION ERRORS:", &errs));
    }
    out.push('\n');
    out.push_str(&lines("definitions:", &r.notes));
    out
}

fn render_incast(r: &IncastReport) -> String {
    let mut out = header(
        &format!(
            "ferroce bench incast: N senders -> 1 receiver on the {}-host fat tree",
            ferroce_benches::fabric::fat_tree_hosts(r.config.k)
        ),
        &r.setup,
        r.config.opts,
    );
    let mut t = Table::new(
        [
            "senders",
            "hints",
            "settle RTTs",
            "(agg / fair)",
            "max queue BDP",
            "drops",
            "Jain",
            "FCT max/min",
            "join RTTs",
            "utilisation",
            "retransmits",
            "timeouts",
            "join: queue BDP / drops",
            "wall s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
    );
    for x in &r.rows {
        t.row(vec![
            x.senders.to_string(),
            (if x.hints { "on" } else { "off" }).into(),
            opt(x.settle_rtts, 2),
            format!("({} / {})", opt(x.agg_rtts, 2), opt(x.fair_rtts, 2)),
            format!("{:.2}", x.max_queue_bdp),
            count(x.drops),
            format!("{:.4}", x.jain),
            opt(Some(x.fct_max_min), 3),
            opt(x.join_rtts, 2),
            format!("{:.3}", x.utilisation),
            count(x.retransmits),
            count(x.timeouts),
            format!("{:.2} / {}", x.join_max_queue_bdp, count(x.join_drops)),
            format!("{:.2}", x.wall_s),
        ]);
    }
    out.push_str(&t.render());
    let errs: Vec<String> = r
        .rows
        .iter()
        .filter(|x| !x.errors.is_empty() || !x.completed)
        .map(|x| {
            format!(
                "{} senders, hints {}: completed {}, {} errors{}",
                x.senders,
                x.hints,
                x.completed,
                x.errors.len(),
                x.errors
                    .first()
                    .map(|e| format!(", first: {e}"))
                    .unwrap_or_default()
            )
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

/// The incast's settings with `--k` and `--senders` applied; a fan-in the fat tree cannot
/// hold (the receiver is one of its hosts) is refused.
fn incast_config(a: &BenchArgs, opts: Opts) -> Result<IncastConfig, String> {
    let mut cfg = IncastConfig::new(opts);
    if let Some(k) = a.fat_tree_k {
        cfg.k = k;
    }
    if !a.senders.is_empty() {
        cfg.senders = a.senders.iter().map(|&n| n as usize).collect();
    }
    let hosts = ferroce_benches::fabric::fat_tree_hosts(cfg.k);
    // (--senders is at least 1: clap's range.)
    if let Some(n) = cfg.senders.iter().find(|&&n| n >= hosts) {
        return Err(format!(
            "incast: {n} senders on a {hosts}-host fat tree (k = {}): 1 to {} (--k 16 for more)",
            cfg.k,
            hosts - 1
        ));
    }
    Ok(cfg)
}

/// The permutation's settings with `--k`, `--flow-kib` and `--paths` applied.
fn permutation_config(a: &BenchArgs, opts: Opts) -> PermutationConfig {
    let mut cfg = PermutationConfig::new(opts);
    if let Some(k) = a.fat_tree_k {
        cfg.k = k;
    }
    if let Some(kib) = a.flow_kib {
        cfg.bytes_per_flow = kib << 10;
    }
    if !a.paths.is_empty() {
        // The transport's default count is the default row (0), as without --paths.
        let default = ferroce_transport::EndpointConfig::default().conn.paths;
        cfg.paths = a
            .paths
            .iter()
            .map(|&p| if p == default { 0 } else { p })
            .collect();
        cfg.paths.dedup();
    }
    cfg
}

fn render_permutation(r: &PermutationReport) -> String {
    let mut out = header(
        &format!(
            "ferroce bench permutation: {} hosts, each sends to another",
            r.config.hosts()
        ),
        &r.setup,
        r.config.opts,
    );
    let mut t = Table::new(
        [
            "paths",
            "mean rate",
            "worst rate",
            "p10 rate",
            "best rate",
            "retransmits",
            "timeouts",
            "drops",
            "max queue BDP",
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
            if x.default_paths {
                format!("{} (default)", x.paths)
            } else {
                x.paths.to_string()
            },
            format!("{:.3}", x.mean_rate),
            format!("{:.3}", x.worst_rate),
            format!("{:.3}", x.p10_rate),
            format!("{:.3}", x.best_rate),
            count(x.retransmits),
            count(x.timeouts),
            count(x.drops),
            format!("{:.2}", x.max_queue_bdp),
            (if x.completed && x.errors.is_empty() {
                "yes"
            } else {
                "NO"
            })
            .into(),
            format!("{:.2}", x.wall_s),
            count(x.events),
            count((x.events as f64 / x.wall_s.max(1e-9)) as u64),
        ]);
    }
    out.push_str(&t.render());
    if r.config.k == ferroce_benches::fabric::FAT_TREE_K {
        out.push_str(
            "reference (UEC htsim, same fabric): 1 path 0.54/0.24 mean/worst, oblivious spraying 0.87/0.67, UET best 0.91/0.86\n",
        );
    }
    out.push('\n');
    out.push_str(&lines("definitions:", &r.definitions));
    out
}

fn render_multipath(r: &MultipathReport) -> String {
    let mut out = header(
        "ferroce bench multipath: planes, a plane failure, many connections",
        &r.setup,
        r.config.opts,
    );
    let mut t = Table::new(
        [
            "planes",
            "event",
            "paths",
            "goodput Gb/s",
            "scaling",
            "recover RTTs",
            "lost msgs",
            "dip",
            "connections",
            "mem/idle conn (client/server)",
            "retransmits",
            "timeouts",
            "wall s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
    );
    for x in &r.rows {
        t.row(vec![
            x.planes.to_string(),
            x.event.into(),
            x.paths.to_string(),
            format!("{:.2}", x.goodput_gbps),
            opt(x.scaling, 3),
            opt(x.recover_rtts, 2),
            count(x.lost_msgs),
            opt(x.dip, 3),
            count(x.connections as u64),
            x.mem_per_conn
                .map(|(c, s)| format!("{c:.0} B / {s:.0} B"))
                .unwrap_or_else(|| "-".into()),
            count(x.retransmits),
            count(x.timeouts),
            format!("{:.2}", x.wall_s),
        ]);
    }
    out.push_str(&t.render());
    let errs: Vec<String> = r
        .rows
        .iter()
        .filter(|x| !x.errors.is_empty())
        .map(|x| {
            format!(
                "{} planes, {}: {} errors, first: {}",
                x.planes,
                x.event,
                x.errors.len(),
                x.errors[0]
            )
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

fn render_core(r: &CoreReport, verbose: bool) -> String {
    let mut out = header(
        "ferroce bench core: the sans-IO core alone, two endpoints in memory",
        &r.setup,
        r.config.opts,
    );
    let mut t = Table::new(
        [
            "payload",
            "paths",
            "msg",
            "data pkts",
            "CPU ns/pkt",
            "Mpps",
            "ACKs/pkt",
            "ctrl/pkt",
            "allocs/pkt",
            "B/pkt",
            "floor ns",
            "core/floor",
            "retx",
            "sim Gb/s",
            "drift",
            "ok",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
    );
    for x in &r.rows {
        t.row(vec![
            x.payload.to_string(),
            x.paths.to_string(),
            x.msg_bytes.to_string(),
            count(x.data_pkts),
            format!("{:.0}", x.cpu_ns_per_pkt),
            format!("{:.3}", x.mpps),
            format!("{:.3}", x.acks_per_pkt),
            format!("{:.3}", x.ctrl_per_pkt),
            opt(x.allocs_per_pkt, 2),
            opt(x.alloc_bytes_per_pkt, 0),
            format!("{:.1}", x.floor_ns),
            format!("{:.1}", x.ratio),
            count(x.retx_pkts),
            format!("{:.1}", x.sim_gbps),
            format!("{:.2}", x.drift),
            (if x.ok() { "ok" } else { "FAIL" }).into(),
        ]);
    }
    out.push_str(&t.render());
    if verbose {
        out.push_str(
            "CPU ns/pkt by quarter of the window; loop turns and timer firings per packet:\n",
        );
        for x in &r.rows {
            let q: Vec<String> = x.quarters_ns.iter().map(|v| format!("{v:.0}")).collect();
            let _ = writeln!(
                out,
                "  {:>5} B {:>3} paths: {}; {:.2} turns, {:.3} timer firings",
                x.payload,
                x.paths,
                q.join(" "),
                x.turns_per_pkt,
                x.timer_fires_per_pkt
            );
        }
    }
    if !r.allocs_measured {
        out.push_str("allocations not measured: the counting allocator is not installed\n");
    }
    out.push_str("verification (every byte moved compared with its source and cleared; not in CPU ns/pkt):\n");
    for x in &r.rows {
        let _ = writeln!(
            out,
            "  {:>5} B {:>3} paths: {:.0} ns per message, {:.1} ns per data packet, {} verified",
            x.payload,
            x.paths,
            x.verify_ns_per_msg,
            x.verify_ns_per_pkt,
            crate::format::bytes(x.verified_bytes)
        );
    }
    let errs: Vec<String> = r
        .rows
        .iter()
        .filter(|x| !x.ok())
        .map(|x| {
            format!(
                "{} B, {} paths: {}",
                x.payload,
                x.paths,
                x.errors.join("; ")
            )
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

/// `ferroce bench core`.
fn run_core(a: &BenchArgs, opts: Opts, bar: &Bar) -> Result<bool, String> {
    let mut cfg = CoreConfig::new(opts);
    if let Some(n) = a.packets {
        cfg.packets = n;
    }
    if !a.payloads.is_empty() {
        cfg.payloads = a.payloads.clone();
    }
    if !a.paths.is_empty() {
        cfg.paths = a.paths.clone();
    }
    if let Some(m) = a.msg_packets {
        cfg.msg_packets = m;
    }
    cfg.ftz = a.ftz;
    if let Some(b) = a.pace_burst {
        cfg.pace_burst = b;
    }
    let r = sansio::run(&cfg, bar);
    let csv = a.out.join("core.csv");
    write_csv(&sansio::csv(&r), &csv)?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?
        );
    } else {
        print!("{}", render_core(&r, a.verbose));
        print!("{}", files_line(&[&csv]));
        println!("wall time: {:.1} s\n", r.wall_s);
    }
    Ok(r.rows.iter().all(|x| x.ok()))
}

fn profile_lines() -> String {
    if !profile::enabled() {
        return String::new();
    }
    let mut t = Table::new(vec![
        "transport method".into(),
        "calls".into(),
        "total s".into(),
        "ns/call".into(),
    ]);
    for (m, calls, ns) in profile::take() {
        t.row(vec![
            m.into(),
            count(calls),
            format!("{:.3}", ns as f64 / 1e9),
            format!("{:.0}", ns as f64 / calls.max(1) as f64),
        ]);
    }
    format!(
        "\nFERROCE_BENCH_PROFILE: time inside the transport\n{}",
        t.render()
    )
}

/// Runs `ferroce bench ...`; Ok(false) when a run failed verification. With several
/// controllers (`--cc aimd,delay`) every benchmark runs once per controller, its files get the
/// controller's name as a suffix, and a table puts their key figures side by side.
pub fn run(a: &BenchArgs) -> Result<bool, String> {
    let ccs = if a.cc.is_empty() {
        vec![CcAlgorithm::Aimd]
    } else {
        let mut v = a.cc.clone();
        v.dedup();
        v
    };
    let which = a.which;
    if which == BenchWhich::Core {
        let opts = Opts {
            quick: a.quick,
            seed: a.seed,
            cc: ccs[0],
        };
        return run_core(a, opts, &Bar::new());
    }
    if which == BenchWhich::Loss && a.real {
        let opts = Opts {
            quick: a.quick,
            seed: a.seed,
            cc: ccs[0],
        };
        return crate::loss_real::run(a, opts, &Bar::new());
    }
    let t0 = Instant::now();
    let mut ok = true;
    let mut all_checks: Vec<Check> = Vec::new();
    let mut summaries: Vec<(CcAlgorithm, Summary)> = Vec::new();
    // Permutation reports of every controller, for one CDF picture with all of them.
    let mut perms: Vec<(String, PermutationReport)> = Vec::new();
    for &cc in &ccs {
        let opts = Opts {
            quick: a.quick,
            seed: a.seed,
            cc,
        };
        let suffix = if ccs.len() > 1 {
            println!("=== congestion controller: {cc} ===\n");
            format!("-{cc}")
        } else {
            String::new()
        };
        let (k, checks, sum) = run_benches(a, opts, &suffix, &mut perms)?;
        ok &= k;
        all_checks.extend(checks.into_iter().map(|mut c| {
            if ccs.len() > 1 {
                c.what = format!("[{cc}] {}", c.what);
            }
            c
        }));
        summaries.push((cc, sum));
    }
    if !perms.is_empty() {
        let svg = a.out.join("permutation.svg");
        let runs: Vec<(String, &PermutationReport)> =
            perms.iter().map(|(cc, r)| (cc.clone(), r)).collect();
        permutation::plot(&runs, &svg)?;
        print!("{}", files_line(&[&svg]));
    }
    if ccs.len() > 1 {
        print!("{}", render_side_by_side(&summaries));
    }
    if which == BenchWhich::All {
        println!("ferroce bench all: every threshold of issue 3");
        print!("{}", render_checks(&all_checks));
        let pass = all_checks.iter().filter(|c| c.pass == Some(true)).count();
        println!(
            "{pass} of {} thresholds met; total wall time {:.1} s",
            all_checks.len(),
            t0.elapsed().as_secs_f64()
        );
    }
    Ok(ok)
}

/// Key figures of one controller's runs, in the order they were measured: (figure, value).
type Summary = Vec<(String, String)>;

/// One column per controller, one row per figure (figures missing from a run show `-`).
fn render_side_by_side(s: &[(CcAlgorithm, Summary)]) -> String {
    let mut header = vec!["figure".to_string()];
    header.extend(s.iter().map(|(cc, _)| cc.to_string()));
    let mut t = Table::new(header);
    let mut names: Vec<&String> = Vec::new();
    for (_, sum) in s {
        for (n, _) in sum {
            if !names.contains(&n) {
                names.push(n);
            }
        }
    }
    for n in names {
        let mut row = vec![n.clone()];
        for (_, sum) in s {
            row.push(
                sum.iter()
                    .find(|(m, _)| m == n)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_else(|| "-".into()),
            );
        }
        t.row(row);
    }
    format!("congestion controllers side by side\n{}\n", t.render())
}

fn run_benches(
    a: &BenchArgs,
    opts: Opts,
    suffix: &str,
    perms: &mut Vec<(String, PermutationReport)>,
) -> Result<(bool, Vec<Check>, Summary), String> {
    let bar = Bar::new();
    let mut all_checks: Vec<Check> = Vec::new();
    let mut sum: Summary = Vec::new();
    let mut ok = true;
    let out = &a.out;
    let which = a.which;
    let all = which == BenchWhich::All;
    if all || which == BenchWhich::Loss {
        let r = loss::run(&LossConfig::new(opts), &bar);
        let csv = out.join(format!("loss{suffix}.csv"));
        let svg = out.join(format!("loss{suffix}.svg"));
        write_csv(&loss::csv(&r), &csv)?;
        loss::plot(&r, &svg)?;
        print!("{}", render_loss(&r, a.verbose));
        let c = checks::loss(&r);
        print!("\n{}", render_checks(&c));
        print!("{}", files_line(&[&csv, &svg]));
        println!("wall time: {:.1} s{}\n", r.wall_s, profile_lines());
        ok &= r.rows.iter().all(|x| x.errors.is_empty());
        all_checks.extend(c);
        sum.extend(summary_loss(&r));
    }
    if all || which == BenchWhich::Incast {
        let cfg = incast_config(a, opts)?;
        let r = incast::run(&cfg, &bar);
        let csv = out.join(format!("incast{suffix}.csv"));
        write_csv(&incast::csv(&r), &csv)?;
        let mut svgs = Vec::new();
        for x in &r.rows {
            let hints = if x.hints { "on" } else { "off" };
            let svg = out.join(format!("incast-{}-hints-{hints}{suffix}.svg", x.senders));
            incast::plot(&r, x, &svg)?;
            svgs.push(svg);
        }
        print!("{}", render_incast(&r));
        let c = checks::incast(&r);
        print!("\n{}", render_checks(&c));
        // Issue 17's targets, shown but not part of the pass/fail verdict: not all are met
        // yet (see docs/performance.md).
        let c17 = checks::incast_fan_in(&r);
        print!("\nissue 17 incast targets (not yet all met; not counted in the verdict):\n");
        print!("{}", render_checks_body(&c17));
        let mut files: Vec<&Path> = vec![&csv];
        files.extend(svgs.iter().map(|p| p.as_path()));
        print!("{}", files_line(&files));
        println!("wall time: {:.1} s{}\n", r.wall_s, profile_lines());
        ok &= r.rows.iter().all(|x| x.errors.is_empty() && x.completed);
        all_checks.extend(c);
        for x in r.rows.iter().filter(|x| x.hints) {
            let n = x.senders;
            sum.push((format!("incast {n}:1 settle RTTs"), opt(x.settle_rtts, 2)));
            sum.push((
                format!("incast {n}:1 max queue BDP"),
                format!("{:.3}", x.max_queue_bdp),
            ));
            sum.push((format!("incast {n}:1 drops"), x.drops.to_string()));
            sum.push((
                format!("incast {n}:1 FCT max/min"),
                format!("{:.4}", x.fct_max_min),
            ));
            sum.push((
                format!("incast {n}:1 late joiner RTTs"),
                opt(x.join_rtts, 2),
            ));
        }
    }
    if all || which == BenchWhich::Permutation {
        let mut cfg = permutation_config(a, opts);
        if a.trace {
            cfg.trace = Some(out.join(format!("permutation{suffix}-trace")));
        }
        let r = permutation::run(&cfg, &bar);
        let csv = out.join(format!("permutation{suffix}.csv"));
        write_csv(&permutation::csv(&r), &csv)?;
        print!("{}", render_permutation(&r));
        let c = checks::permutation(&r);
        print!("\n{}", render_checks(&c));
        print!("{}", files_line(&[&csv]));
        println!("wall time: {:.1} s{}\n", r.wall_s, profile_lines());
        ok &= r.rows.iter().all(|x| x.errors.is_empty() && x.completed);
        all_checks.extend(c);
        for x in &r.rows {
            let p = x.paths;
            sum.push((
                format!("permutation {p} paths: mean rate"),
                format!("{:.4}", x.mean_rate),
            ));
            sum.push((
                format!("permutation {p} paths: worst rate"),
                format!("{:.4}", x.worst_rate),
            ));
            sum.push((format!("permutation {p} paths: drops"), x.drops.to_string()));
        }
        perms.push((opts.cc.to_string(), r));
    }
    if which == BenchWhich::Collective {
        ok &= crate::bench_collective::run(a, opts, out, suffix)?;
    }
    if which == BenchWhich::Scale {
        ok &= crate::bench_scale::run(opts, out, suffix)?;
    }
    if which == BenchWhich::Across {
        ok &= crate::bench_across::run(opts, out, suffix, a.verbose)?;
    }
    if all || which == BenchWhich::Multipath {
        let r = multipath::run(&MultipathConfig::new(opts), &bar);
        let csv = out.join(format!("multipath{suffix}.csv"));
        let svg = out.join(format!("multipath{suffix}.svg"));
        write_csv(&multipath::csv(&r), &csv)?;
        multipath::plot(&r, &svg)?;
        print!("{}", render_multipath(&r));
        let c = checks::multipath(&r);
        print!("\n{}", render_checks(&c));
        print!("{}", files_line(&[&csv, &svg]));
        println!("wall time: {:.1} s{}\n", r.wall_s, profile_lines());
        ok &= r.rows.iter().all(|x| x.errors.is_empty());
        all_checks.extend(c);
        for x in &r.rows {
            let what = format!("multipath {} planes {}", x.planes, x.event);
            sum.push((
                format!("{what}: goodput Gb/s"),
                format!("{:.2}", x.goodput_gbps),
            ));
            if x.event.starts_with("plane-") {
                sum.push((format!("{what}: recover RTTs"), opt(x.recover_rtts, 2)));
                sum.push((format!("{what}: lost msgs"), x.lost_msgs.to_string()));
            }
        }
    }
    Ok((ok, all_checks, sum))
}

/// Loss: goodput and ratio of every native path count at 0, 1 and 10 %, and native (8 paths)
/// against the best RoCEv2 goodput at 0 %.
fn summary_loss(r: &LossReport) -> Summary {
    let mut sum = Summary::new();
    let mut modes: Vec<Mode> = Vec::new();
    for x in &r.rows {
        if matches!(x.mode, Mode::Native { .. }) && !modes.contains(&x.mode) {
            modes.push(x.mode);
        }
    }
    for p in [0.0, 0.01, 0.10] {
        for &m in &modes {
            if let Some(x) = r.row(m, p) {
                sum.push((
                    format!(
                        "loss {} paths {} %: goodput Gb/s (ratio)",
                        m.paths(),
                        p * 100.0
                    ),
                    format!("{:.2} ({:.4})", x.goodput_gbps, x.ratio_to_lossless),
                ));
            }
        }
    }
    if let Some(v) = r.native_over_roce_lossless() {
        sum.push((
            "loss 0 %: native 8 paths / RoCEv2".into(),
            format!("{v:.4}"),
        ));
        sum.push((
            "loss 0 %: native / RoCEv2 allowed by per-packet headers".into(),
            format!("{:.4}", r.header_ceiling()),
        ));
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{Cli, Command};
    use clap::Parser;

    fn bench_args(args: &[&str]) -> BenchArgs {
        let it = ["ferroce", "bench"].into_iter().chain(args.iter().copied());
        match Cli::try_parse_from(it).expect("parses").cmd {
            Command::Bench(b) => *b,
            _ => panic!("not bench"),
        }
    }

    #[test]
    fn incast_fan_in_is_bounded_by_the_fat_tree() {
        let opts = Opts::default();
        let c = incast_config(&bench_args(&["incast"]), opts).unwrap();
        assert_eq!((c.k, c.senders.clone()), (8, vec![8, 32, 64, 127]));
        let c = incast_config(
            &bench_args(&["incast", "--k", "16", "--senders", "255"]),
            opts,
        );
        assert_eq!(c.map(|c| (c.k, c.senders)), Ok((16, vec![255])));
        let e = incast_config(&bench_args(&["incast", "--senders", "255"]), opts).unwrap_err();
        assert!(e.contains("255 senders on a 128-host fat tree"), "{e}");
        let e = incast_config(
            &bench_args(&["incast", "--k", "4", "--senders", "16"]),
            opts,
        );
        assert!(e.unwrap_err().contains("1 to 15"));
    }
}
