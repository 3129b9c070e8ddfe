//! EAL's runtime directory of this process: removed at exit, and those of processes gone.

use crate::ffi;
use std::ffi::{c_int, CStr};

/// EAL creates its runtime directory (`/var/run/dpdk/<file-prefix>`) in `rte_eal_init` and
/// never removes it, so every DPDK process leaves one behind (a test run left hundreds). For
/// ferroce's own per-process prefixes, `ferroce-<pid>` and `ferroce-<tag>-<pid>` (the default
/// EAL arguments and the benchmarks'), the directory is private to this process: it is
/// removed at exit, and those of processes that are gone (killed, so no exit handler ran)
/// are removed at start-up. Other prefixes may be shared with other DPDK processes and are
/// left alone.
pub(crate) fn tidy() {
    let Some(dir) = own_runtime_dir() else {
        return;
    };
    if let Some(parent) = dir.parent() {
        for e in std::fs::read_dir(parent).into_iter().flatten().flatten() {
            let name = e.file_name();
            if let Some(pid) = name.to_str().and_then(prefix_pid) {
                if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
    }
    extern "C" fn at_exit() {
        if let Some(dir) = own_runtime_dir() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    extern "C" {
        fn atexit(f: extern "C" fn()) -> c_int;
    }
    // SAFETY: registers a plain function with no captured state, run once at exit.
    unsafe {
        atexit(at_exit);
    }
}

/// The pid of a ferroce per-process prefix: `ferroce-<pid>` or `ferroce-<tag>-<pid>`.
fn prefix_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("ferroce-")?;
    rest.rsplit('-').next()?.parse().ok()
}

/// EAL's runtime directory, if it is one of ferroce's per-process ones (for this pid).
fn own_runtime_dir() -> Option<std::path::PathBuf> {
    // SAFETY: EAL is initialised (callers run after rte_eal_init); the string is EAL's own
    // static buffer.
    let dir = unsafe {
        let p = ffi::rte_eal_get_runtime_dir();
        if p.is_null() {
            return None;
        }
        CStr::from_ptr(p).to_string_lossy().into_owned()
    };
    let dir = std::path::PathBuf::from(dir);
    let pid = prefix_pid(dir.file_name()?.to_str()?)?;
    (pid == std::process::id()).then_some(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_ferroce_per_process_prefixes_name_a_pid() {
        assert_eq!(prefix_pid("ferroce-123"), Some(123));
        assert_eq!(prefix_pid("ferroce-bench-verbs-77"), Some(77));
        assert_eq!(prefix_pid("rte"), None);
        assert_eq!(prefix_pid("ferroce-x"), None);
        assert_eq!(prefix_pid("other-12"), None);
    }
}
