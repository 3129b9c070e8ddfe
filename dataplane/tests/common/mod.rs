//! Shared by the DPDK tests: one EAL per test process, tests in a file run one at a time.
#![allow(dead_code)]

use ferroce_dataplane::config::default_eal_args;
use ferroce_dataplane::dpdk::Eal;
use std::sync::{Mutex, MutexGuard, OnceLock};

static EAL: OnceLock<Eal> = OnceLock::new();
static SERIAL: Mutex<()> = Mutex::new(());

/// Run one DPDK test at a time (they share the EAL and its worker lcore).
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// EAL for this test process (no hugepages, no PCI, two lcores on any CPU).
pub fn eal() -> &'static Eal {
    EAL.get_or_init(|| {
        let mut args = vec!["ferroce-test".to_string()];
        args.extend(default_eal_args().into_iter().map(|a| {
            if a == "256" {
                "512".to_string()
            } else {
                a
            }
        }));
        // Extra EAL arguments for debugging, e.g. FERROCE_TEST_EAL="--log-level=debug".
        if let Ok(extra) = std::env::var("FERROCE_TEST_EAL") {
            args.extend(extra.split_whitespace().map(str::to_owned));
        }
        Eal::init(args).expect("EAL init")
    })
}

/// Skip (loudly) when not root: DPDK, namespaces and hugepages need it.
pub fn need_root(test: &str) -> bool {
    if ferroce_dataplane::netns::is_root() {
        true
    } else {
        eprintln!("SKIPPED {test}: needs root (DPDK, network namespaces); run as root");
        false
    }
}

/// A child process killed (SIGKILL) and reaped when dropped, so a failing test leaves none
/// behind.
pub struct Proc(pub Option<std::process::Child>);

impl Proc {
    /// SIGKILL now (the process gets no chance to send anything more).
    pub fn kill(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.0 = None;
    }

    /// Wait up to `limit` (then kill it); (exited successfully, stdout, stderr, exited in
    /// time).
    pub fn wait(mut self, limit: std::time::Duration) -> (bool, String, String, bool) {
        use std::io::Read;
        let mut c = self.0.take().expect("child");
        let t0 = std::time::Instant::now();
        let status = loop {
            if let Ok(Some(s)) = c.try_wait() {
                break Some(s);
            }
            if t0.elapsed() > limit {
                let _ = c.kill();
                let _ = c.wait();
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        let (mut out, mut err) = (String::new(), String::new());
        if let Some(mut o) = c.stdout.take() {
            let _ = o.read_to_string(&mut out);
        }
        if let Some(mut e) = c.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        (
            status.is_some_and(|s| s.success()),
            out,
            err,
            status.is_some(),
        )
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A directory removed with everything in it when dropped.
pub struct Dir(pub std::path::PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The last line of a program's output that is a JSON object (`ferroce-dp run --json`'s
/// report), or null.
pub fn last_json(out: &str) -> serde_json::Value {
    out.lines()
        .rev()
        .find_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .unwrap_or(serde_json::Value::Null)
}
