//! Bounded subprocesses and logging.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    // SAFETY: geteuid takes no arguments, cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() == 0 }
}

pub fn log(msg: &str) {
    eprintln!("ferroce interop: {msg}");
}

/// Put the child in its own process group and have it killed if this thread exits.
pub fn own_group(cmd: &mut Command) -> &mut Command {
    // SAFETY: the closure runs in the forked child before exec and only makes two
    // async-signal-safe system calls (setpgid, prctl); it allocates nothing and takes no locks.
    unsafe {
        cmd.pre_exec(|| {
            libc::setpgid(0, 0);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd
}

/// Kill the process group of a child this process started (its pid is the group id).
pub fn kill_group(child: &mut Child) {
    let pid = child.id() as i32;
    // SAFETY: kill(2) only sends signals; `pid` is a child this process spawned and has not
    // reaped yet (`wait` below reaps it), so neither the pid nor its group id can have been
    // reused by an unrelated process.
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
        libc::kill(pid, libc::SIGKILL);
    }
    let _ = child.wait();
}

/// Outcome of a bounded run.
#[derive(Debug, Clone)]
pub struct Out {
    /// Exit code; `None` when killed (also on time-out).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
    pub elapsed: Duration,
}

impl Out {
    pub fn ok(&self) -> bool {
        self.code == Some(0)
    }
    pub fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// A spawned bounded child whose output is collected by two threads.
pub struct Bounded {
    child: Child,
    t0: Instant,
    limit: Duration,
    out: Option<std::thread::JoinHandle<Vec<u8>>>,
    err: Option<std::thread::JoinHandle<Vec<u8>>>,
}

impl Bounded {
    pub fn spawn(cmd: &mut Command, limit: Duration) -> Result<Bounded, String> {
        own_group(cmd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("{:?}: {e}", cmd.get_program()))?;
        let mut so = child.stdout.take().unwrap();
        let mut se = child.stderr.take().unwrap();
        let out = std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = so.read_to_end(&mut v);
            v
        });
        let err = std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = se.read_to_end(&mut v);
            v
        });
        Ok(Bounded {
            child,
            t0: Instant::now(),
            limit,
            out: Some(out),
            err: Some(err),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wait until it exits or its time is up (then its process group is killed).
    pub fn wait(mut self) -> Out {
        let mut timed_out = false;
        let code = loop {
            match self.child.try_wait() {
                Ok(Some(st)) => break st.code(),
                Ok(None) if self.t0.elapsed() >= self.limit => {
                    timed_out = true;
                    kill_group(&mut self.child);
                    break None;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(_) => break None,
            }
        };
        // Children of the child may hold the pipes: end the group either way.
        // SAFETY: kill(2) only sends a signal. The group id is the pid of our (now reaped)
        // child; while any of its members lives Linux hands that number to no new process,
        // and an empty group makes this a harmless ESRCH.
        unsafe {
            libc::kill(-(self.child.id() as i32), libc::SIGKILL);
        }
        let s = |h: Option<std::thread::JoinHandle<Vec<u8>>>| {
            String::from_utf8_lossy(&h.unwrap().join().unwrap_or_default()).to_string()
        };
        Out {
            code,
            stdout: s(self.out.take()),
            stderr: s(self.err.take()),
            timed_out,
            elapsed: self.t0.elapsed(),
        }
    }
}

impl Drop for Bounded {
    fn drop(&mut self) {
        if self.out.is_some() {
            kill_group(&mut self.child);
        }
    }
}

pub fn run_out(cmd: &mut Command, limit: Duration) -> Result<Out, String> {
    Ok(Bounded::spawn(cmd, limit)?.wait())
}

/// Run to completion within `limit`; error (with its output) unless it exits 0.
pub fn run_bounded(cmd: &mut Command, limit: Duration) -> Result<(), String> {
    let desc = format!("{:?}", cmd);
    let o = run_out(cmd, limit)?;
    if o.ok() {
        Ok(())
    } else {
        Err(format!(
            "{desc}: {} after {:.1} s\n{}",
            if o.timed_out {
                "timed out".to_string()
            } else {
                format!("exit {:?}", o.code)
            },
            o.elapsed.as_secs_f64(),
            o.text().trim_end()
        ))
    }
}

/// Its standard output, if it exits 0 within `limit`.
pub fn cmd_output(cmd: &mut Command, limit: Duration) -> Result<String, String> {
    let desc = format!("{:?}", cmd);
    let o = run_out(cmd, limit)?;
    if o.ok() {
        Ok(o.stdout)
    } else {
        Err(format!("{desc}: exit {:?}: {}", o.code, o.stderr.trim()))
    }
}
