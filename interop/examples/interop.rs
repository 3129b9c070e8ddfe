//! `ferroce interop rxe` without the CLI: `cargo run --release -p ferroce-interop --example
//! interop -- rxe [--programs a,b] [--mtu 1024,4096] [--csv FILE] ...`.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(ferroce_interop::main_interop(&args));
}
