//! Formatting helpers: percentiles, numbers with units, and a plain-text table.

/// Nearest-rank percentile of an ascending-sorted slice: the smallest value such that at least
/// `p` percent of the samples are less than or equal to it. `None` for an empty slice.
pub fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let p = if p.is_nan() { 0.0 } else { p.clamp(0.0, 100.0) };
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.saturating_sub(1).min(sorted.len() - 1)])
}

/// A duration given in ns, in the largest unit that keeps it at or above 1.
pub fn duration_ns(ns: u64) -> String {
    let f = ns as f64;
    if ns < 1_000 {
        format!("{ns} ns")
    } else if ns < 1_000_000 {
        format!("{:.1} µs", f / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.3} ms", f / 1e6)
    } else {
        format!("{:.3} s", f / 1e9)
    }
}

/// A byte count in binary units, with the exact count when it is not a round number.
pub fn bytes(b: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    const GIB: u64 = 1024 * 1024 * 1024;
    let (unit, div) = if b >= GIB {
        ("GiB", GIB)
    } else if b >= MIB {
        ("MiB", MIB)
    } else if b >= KIB {
        ("KiB", KIB)
    } else {
        return format!("{b} B");
    };
    if b.is_multiple_of(div) {
        format!("{} {unit}", b / div)
    } else {
        format!("{:.2} {unit} ({b} B)", b as f64 / div as f64)
    }
}

/// An integer with thousands separators (`1 234 567`).
pub fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// A probability (0..=1) as a percentage.
pub fn percent(frac: f64) -> String {
    let p = frac * 100.0;
    if p == 0.0 {
        "0 %".into()
    } else if p >= 1.0 {
        format!("{} %", trim_float(p, 2))
    } else {
        format!("{} %", trim_float(p, 4))
    }
}

/// `v` with at most `decimals` decimals and no trailing zeros.
pub fn trim_float(v: f64, decimals: usize) -> String {
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// A plain-text table with a rule under the header row: the first column left-aligned, the
/// others right-aligned.
#[derive(Debug, Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: Vec<String>) -> Self {
        Table { rows: vec![header] }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let ncol = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut w = vec![0usize; ncol];
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let total = w.iter().sum::<usize>() + 2 * ncol.saturating_sub(1);
        let mut out = String::new();
        for (ri, r) in self.rows.iter().enumerate() {
            let mut line = String::new();
            for (i, width) in w.iter().enumerate() {
                let c = r.get(i).map(String::as_str).unwrap_or("");
                let pad = width - c.chars().count();
                if i > 0 {
                    line.push_str("  ");
                }
                if i == 0 {
                    line.push_str(c);
                    line.push_str(&" ".repeat(pad));
                } else {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(c);
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
            if ri == 0 && self.rows.len() > 1 {
                out.push_str(&"-".repeat(total));
                out.push('\n');
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_nearest_rank() {
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[7], 0.0), Some(7));
        assert_eq!(percentile(&[7], 99.0), Some(7));
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&v, 0.0), Some(1));
        assert_eq!(percentile(&v, 0.5), Some(1));
        assert_eq!(percentile(&v, 150.0), Some(100));
        let v = [10, 20, 30, 40];
        assert_eq!(percentile(&v, 50.0), Some(20));
        assert_eq!(percentile(&v, 51.0), Some(30));
        assert_eq!(percentile(&v, 99.0), Some(40));
        assert_eq!(percentile(&v, f64::NAN), Some(10));
        // 1000 samples: p99 is the 990th smallest.
        let v: Vec<u64> = (0..1000).collect();
        assert_eq!(percentile(&v, 99.0), Some(989));
    }

    #[test]
    fn units() {
        assert_eq!(duration_ns(999), "999 ns");
        assert_eq!(duration_ns(1_500), "1.5 µs");
        assert_eq!(duration_ns(5_368_709), "5.369 ms");
        assert_eq!(duration_ns(2_000_000_000), "2.000 s");
        assert_eq!(bytes(100), "100 B");
        assert_eq!(bytes(64 << 20), "64 MiB");
        assert_eq!(bytes(1536), "1.50 KiB (1536 B)");
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(1000), "1 000");
        assert_eq!(count(1_234_567), "1 234 567");
        assert_eq!(percent(0.01), "1 %");
        assert_eq!(percent(0.0), "0 %");
        assert_eq!(percent(0.001), "0.1 %");
        assert_eq!(percent(0.125), "12.5 %");
    }

    #[test]
    fn table_aligns() {
        let mut t = Table::new(vec!["a".into(), "bb".into()]);
        t.row(vec!["long name".into(), "1".into()]);
        t.row(vec!["x".into(), "12345".into()]);
        let s = t.render();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "a             bb");
        assert_eq!(lines[1], "----------------");
        assert_eq!(lines[2], "long name      1");
        assert_eq!(lines[3], "x          12345");
    }
}
