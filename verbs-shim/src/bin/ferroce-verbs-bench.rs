//! `ferroce bench verbs` as a program of its own (see `ibverbs::bench`).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(ibverbs::bench::main_bench(&args));
}
