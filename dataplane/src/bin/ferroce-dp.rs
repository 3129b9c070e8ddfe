//! `ferroce-dp`: the dataplane on its own (the `ferroce` program offers the same as
//! `ferroce dataplane` and `ferroce bench dataplane`).
//!
//!   ferroce-dp [run] --config FILE [--set KEY=VALUE]...
//!   ferroce-dp bench [--pmd ring|af_packet|all] [--csv FILE] ...

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = if args.first().map(String::as_str) == Some("bench") {
        ferroce_dataplane::main_bench(&args[1..])
    } else {
        ferroce_dataplane::main_dataplane(&args)
    };
    std::process::exit(code);
}
