//! Latency percentiles from an HDR histogram (3 significant digits).

use hdrhistogram::Histogram;

/// Percentiles of a latency sample, in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Latency {
    pub samples: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

/// Summarises latencies given in nanoseconds.
pub fn summarise(ns: impl IntoIterator<Item = u64>) -> Latency {
    let mut h =
        Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds");
    for v in ns {
        h.saturating_record(v.max(1));
    }
    if h.is_empty() {
        return Latency::default();
    }
    Latency {
        samples: h.len(),
        p50_us: h.value_at_quantile(0.50) as f64 / 1e3,
        p99_us: h.value_at_quantile(0.99) as f64 / 1e3,
        max_us: h.max() as f64 / 1e3,
    }
}
