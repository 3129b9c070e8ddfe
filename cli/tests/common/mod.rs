//! Shared by the compliance tests: a namespace guard, child processes with a time limit.
#![allow(dead_code)]

pub mod broken_peer;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Skip (loudly) when not root: namespaces and DPDK need it.
pub fn need_root(test: &str) -> bool {
    if ferroce_dataplane::netns::is_root() {
        true
    } else {
        eprintln!("SKIPPED {test}: needs root (network namespaces); run as root");
        false
    }
}

/// An address block of 198.19.0.0/16 for this process: `198.19.(160 + pid % 40).host`.
pub fn addr(host: u8) -> String {
    format!("198.19.{}.{host}", 160 + std::process::id() % 40)
}

fn ip(args: &[&str]) {
    let st = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .status()
        .expect("run ip");
    assert!(st.success(), "ip {}", args.join(" "));
}

/// One namespace with `lo` up and the given /32 addresses on it; deleted on drop.
pub struct LoNs(pub String);

impl LoNs {
    pub fn create(tag: &str, addrs: &[&str]) -> LoNs {
        ferroce_dataplane::netns::cleanup_stale();
        let name = format!(
            "{}{}{tag}",
            ferroce_dataplane::netns::PREFIX,
            std::process::id()
        );
        ip(&["netns", "add", &name]);
        let g = LoNs(name.clone());
        ip(&["-n", &name, "link", "set", "lo", "up"]);
        for a in addrs {
            ip(&["-n", &name, "addr", "add", &format!("{a}/32"), "dev", "lo"]);
        }
        g
    }
}

impl Drop for LoNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// A child killed and reaped when dropped.
pub struct Proc(pub Option<Child>);

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Run `cmd` to its end or `limit` (then kill it): (exit code, stdout, stderr).
pub fn run_limited(cmd: &mut Command, limit: Duration) -> (Option<i32>, String, String) {
    use std::io::Read;
    let c = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut p = Proc(Some(c));
    let c = p.0.as_mut().unwrap();
    // Read the pipes on threads so a chatty child cannot block on a full pipe.
    let mut so = c.stdout.take().unwrap();
    let mut se = c.stderr.take().unwrap();
    let to = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let te = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let t0 = Instant::now();
    let code = loop {
        if let Ok(Some(s)) = c.try_wait() {
            break s.code();
        }
        if t0.elapsed() > limit {
            let _ = c.kill();
            let _ = c.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    p.0 = None;
    (
        code,
        to.join().unwrap_or_default(),
        te.join().unwrap_or_default(),
    )
}
