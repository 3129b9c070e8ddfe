//! Running the Debian programs the shim's tests drive: each child bounded in time, its output
//! through files (a large listing cannot fill a pipe). Shared by the test files that include
//! it (`#[path = "support/run.rs"] mod run;`).

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How a run ended and what it printed (stdout then stderr).
pub struct Run {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub out: String,
}

impl Run {
    pub fn describe(&self) -> String {
        match (self.code, self.signal) {
            (Some(c), _) => format!("exit {c}"),
            (_, Some(s)) => format!("signal {s}"),
            _ => "no status".into(),
        }
    }
}

/// A started child whose output goes to files.
pub struct Started {
    child: Child,
    out: std::path::PathBuf,
    err: std::path::PathBuf,
    tag: String,
    t0: Instant,
}

/// Start `c` with its output in files named by `tag`.
pub fn start(mut c: Command, tag: &str) -> Started {
    let dir = std::env::temp_dir();
    let (out, err) = (
        dir.join(format!("ferroce-run-{}-{tag}.out", std::process::id())),
        dir.join(format!("ferroce-run-{}-{tag}.err", std::process::id())),
    );
    c.stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap());
    let child = c.spawn().expect("spawn");
    Started {
        child,
        out,
        err,
        tag: tag.to_string(),
        t0: Instant::now(),
    }
}

impl Started {
    /// Wait for the end, killing the child once `limit` has passed since it started.
    /// `None` when it had to be killed (the output is in the `Run` all the same).
    pub fn finish(mut self, limit: Duration) -> (Option<Run>, String) {
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break Some(s);
            }
            if self.t0.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let out = format!(
            "{}{}",
            std::fs::read_to_string(&self.out).unwrap_or_default(),
            std::fs::read_to_string(&self.err).unwrap_or_default()
        );
        let _ = std::fs::remove_file(&self.out);
        let _ = std::fs::remove_file(&self.err);
        let run = status.map(|s| Run {
            code: s.code(),
            signal: s.signal(),
            out: out.clone(),
        });
        (run, out)
    }

    /// As [`finish`](Self::finish), panicking when the child outlived `limit`.
    pub fn wait(self, limit: Duration) -> Run {
        let tag = self.tag.clone();
        match self.finish(limit) {
            (Some(r), _) => r,
            (None, out) => panic!("{tag}: still running after {limit:?}:\n{out}"),
        }
    }
}

/// Runs `c` to its end or until `limit` (then kills it and panics with its output).
pub fn run(c: Command, limit: Duration, tag: &str) -> Run {
    start(c, tag).wait(limit)
}
