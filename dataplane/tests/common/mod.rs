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
