//! `ferroce`: the command-line entry point. Runs the real transport core on the deterministic
//! fabric simulator and prints what happened (a readable table, or JSON with `--json`).

mod args;
mod bench;
mod bench_across;
mod bench_collective;
mod bench_scale;
mod compliance;
mod format;
mod loss_peer;
mod loss_real;
mod output;
mod run;
mod soak;
mod soak_real;

use args::{Cli, Command, DemoArgs, SimArgs};

/// Counts live heap bytes, so `ferroce bench multipath` can state the transport's memory per
/// connection (see `ferroce_benches::alloc`).
#[global_allocator]
static ALLOC: ferroce_benches::alloc::Counting = ferroce_benches::alloc::Counting;
use clap::Parser;
use run::{execute, RunSummary};
use serde::Serialize;
use std::process::ExitCode;

/// Exit status when a run failed verification or did not complete.
const EXIT_VERIFY_FAILED: u8 = 1;
/// Exit status when the program could not do what was asked (e.g. cannot write the pcap).
const EXIT_ERROR: u8 = 2;

/// Allocation counts for `ferroce bench dataplane` (the dataplane crate cannot see the
/// allocator).
fn alloc_counts() -> Option<(u64, u64)> {
    ferroce_benches::alloc::counts().map(|c| (c.allocs, c.bytes))
}

fn main() -> ExitCode {
    ferroce_dataplane::cpu::set_alloc_counter(alloc_counts);
    ferroce_dataplane::cpu::set_heap_counter(ferroce_benches::alloc::live_bytes);
    // `bench dataplane` takes the dataplane's own options: hand them over unparsed.
    let argv: Vec<String> = std::env::args().collect();
    if argv.len() >= 3 && argv[1] == "bench" && argv[2] == "dataplane" {
        let code = ferroce_dataplane::main_bench(&argv[3..]);
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    // `dataplane` too (its `-v` is not clap's).
    if argv.len() >= 2 && argv[1] == "dataplane" {
        let code = ferroce_dataplane::main_dataplane(&argv[2..]);
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    if argv.len() >= 2 && argv[1] == "compliance" {
        let code = compliance::main(&argv[2..]);
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    if argv.len() >= 2 && argv[1] == "interop" {
        let code = ferroce_interop::main_interop(&argv[2..]);
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    if argv.len() >= 3 && argv[1] == "bench" && argv[2] == "verbs" {
        let code = ibverbs::bench::main_bench(&argv[3..]);
        return ExitCode::from(code.clamp(0, 255) as u8);
    }
    let cli = Cli::parse();
    let res = match cli.cmd {
        Command::Demo(a) => demo(&a),
        Command::Sim(a) => sim(&a),
        Command::Bench(a) if a.which == args::BenchWhich::Dataplane => {
            Ok(ferroce_dataplane::main_bench(&[]) == 0)
        }
        Command::Bench(a) if a.which == args::BenchWhich::Verbs => {
            Ok(ibverbs::bench::main_bench(&[]) == 0)
        }
        Command::Bench(a) if a.which == args::BenchWhich::LossPeer => {
            loss_peer::serve(&a).map(|()| true)
        }
        Command::Bench(a) => bench::run(&a),
        Command::Dataplane { args } => {
            let code = ferroce_dataplane::main_dataplane(&args);
            return ExitCode::from(code.clamp(0, 255) as u8);
        }
        // Handled before parsing; here only when clap saw it (e.g. `ferroce interop`).
        Command::Compliance { args } => {
            let code = compliance::main(&args);
            return ExitCode::from(code.clamp(0, 255) as u8);
        }
        Command::Interop { args } => {
            let code = ferroce_interop::main_interop(&args);
            return ExitCode::from(code.clamp(0, 255) as u8);
        }
        Command::Soak(a) => soak::run(&a),
        Command::Stats { file } => ferroce_dataplane::cli::print_stats_file(&file)
            .map(|_| true)
            .map_err(|e| format!("{}: {e}", file.display())),
    };
    match res {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(EXIT_VERIFY_FAILED),
        Err(e) => {
            eprintln!("ferroce: {e}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

fn progress(what: &str) {
    eprintln!("ferroce: running {what} ...");
}

#[derive(Serialize)]
struct DemoJson<'a> {
    ok: bool,
    bulk_lossless: &'a RunSummary,
    bulk_lossy: &'a RunSummary,
    mixed_lossy: &'a RunSummary,
}

fn demo(a: &DemoArgs) -> Result<bool, String> {
    let loss = format::percent(a.loss);
    progress("bulk WRITE, lossless");
    let clean = execute("lossless", &a.bulk_run(0.0), None)?;
    progress(&format!("bulk WRITE, {loss} loss"));
    let mut lossy = execute(&format!("{loss} loss"), &a.bulk_run(a.loss), None)?;
    if clean.goodput_gbps > 0.0 {
        lossy.ratio_to_lossless = Some(lossy.goodput_gbps / clean.goodput_gbps);
    }
    progress(&format!("mixed operations, {loss} loss"));
    let mixed = execute(&format!("mixed, {loss} loss"), &a.mixed_run(), None)?;
    let ok = clean.ok() && lossy.ok() && mixed.ok();
    if a.json {
        let j = DemoJson {
            ok,
            bulk_lossless: &clean,
            bulk_lossy: &lossy,
            mixed_lossy: &mixed,
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&j).map_err(|e| e.to_string())?
        );
    } else {
        let title = "ferroce demo: two hosts, the ferroce transport core on a simulated fabric";
        print!("{}", output::render(title, &[clean, lossy, mixed], false));
    }
    Ok(ok)
}

/// Largest memory `ferroce sim` lets the simulated hosts register.
const MAX_REGISTERED_BYTES: u64 = 4 << 30;

fn sim(a: &SimArgs) -> Result<bool, String> {
    let need = a.registered_bytes();
    if need > MAX_REGISTERED_BYTES {
        return Err(format!(
            "the workload would register {} of simulated host memory (limit {}): \
             use fewer --streams or a smaller --size",
            format::bytes(need),
            format::bytes(MAX_REGISTERED_BYTES)
        ));
    }
    let run = a.run();
    let label = match a.workload {
        args::WorkloadArg::Bulk => "bulk",
        args::WorkloadArg::Mixed => "mixed",
    };
    progress(&format!("{label} workload"));
    let s = execute(label, &run, a.pcap.as_deref())?;
    let ok = s.ok();
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&s).map_err(|e| e.to_string())?
        );
    } else {
        let mut out = output::render(
            "ferroce sim: one two-host run",
            std::slice::from_ref(&s),
            a.verbose,
        );
        if let Some(p) = &a.pcap {
            out.push_str(&format!(
                "pcap of the client host written to {}\n",
                p.display()
            ));
        }
        print!("{out}");
    }
    Ok(ok)
}
