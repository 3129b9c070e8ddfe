//! Minimal CSV output: a header row, then one line per row; fields with commas or quotes are
//! quoted.

use std::fmt::Write as _;
use std::path::Path;

/// A CSV document under construction.
#[derive(Debug, Default)]
pub struct Csv {
    out: String,
}

fn field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

impl Csv {
    pub fn new(header: &[&str]) -> Self {
        let mut c = Csv::default();
        c.push(header.iter().map(|s| s.to_string()).collect());
        c
    }

    pub fn push(&mut self, cells: Vec<String>) {
        let line: Vec<String> = cells.iter().map(|c| field(c)).collect();
        let _ = writeln!(self.out, "{}", line.join(","));
    }

    pub fn as_str(&self) -> &str {
        &self.out
    }

    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, &self.out)
    }
}

/// A float with `d` decimals, or empty for NaN / missing.
pub fn num(v: Option<f64>, d: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.d$}"),
        _ => String::new(),
    }
}
