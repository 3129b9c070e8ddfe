//! Progress reporting: the benchmarks say what they run; the `ferroce` program shows it with
//! a progress bar on stderr (hidden when stderr is not a terminal), tests ignore it.

/// Receives progress from a running benchmark.
pub trait Progress {
    /// A benchmark with `steps` runs begins.
    fn begin(&self, bench: &str, steps: u64);
    /// The next run (`what`) starts.
    fn step(&self, what: &str);
    /// The benchmark is done.
    fn end(&self);
}

/// Ignores progress.
pub struct Silent;

impl Progress for Silent {
    fn begin(&self, _bench: &str, _steps: u64) {}
    fn step(&self, _what: &str) {}
    fn end(&self) {}
}

/// Prints one line per run to stderr (for logs and tests that want to see where time goes).
pub struct Lines;

impl Progress for Lines {
    fn begin(&self, bench: &str, steps: u64) {
        eprintln!("[{bench}] {steps} runs");
    }
    fn step(&self, what: &str) {
        eprintln!("  {what}");
    }
    fn end(&self) {}
}
