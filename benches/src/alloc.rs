//! A counting global allocator, for measuring transport memory honestly: a binary that wants
//! memory figures installs it with
//! `#[global_allocator] static A: ferroce_benches::alloc::Counting = ferroce_benches::alloc::Counting;`
//! and the benchmarks then read live heap bytes before and after creating connections.
//! Without it, [`live_bytes`] returns `None` and memory figures are reported as not measured.
//!
//! It also counts allocation calls and the bytes they asked for ([`counts`]), so the
//! performance benchmarks (`ferroce bench core`, `ferroce bench dataplane`) can report
//! allocations per packet over a steady-state window: take [`counts`] before and after and
//! subtract ([`AllocCounts::since`]). The counters are process-wide.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};

/// Forwards to the system allocator and keeps a count of live heap bytes.
pub struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Calls of `alloc`, `alloc_zeroed` and `realloc` that succeeded.
static ALLOCS: AtomicU64 = AtomicU64::new(0);
/// Bytes those calls asked for (`realloc`: the new size).
static ALLOC_BYTES: AtomicU64 = AtomicU64::new(0);

#[inline]
fn counted(size: usize) {
    ALLOCS.fetch_add(1, Ordering::Relaxed);
    ALLOC_BYTES.fetch_add(size as u64, Ordering::Relaxed);
}

// SAFETY: every method forwards to `System` with the caller's own arguments, so `Counting`
// upholds exactly the `GlobalAlloc` contract `System` does; the counters are plain atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's `layout` contract is passed through unchanged.
        let p = System.alloc(layout);
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
            INSTALLED.store(true, Ordering::Relaxed);
            counted(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
            INSTALLED.store(true, Ordering::Relaxed);
            counted(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from this allocator, i.e. from `System`, with this `layout`.
        System.dealloc(ptr, layout);
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr`/`layout` came from `System` through this allocator; `new_size` is the
        // caller's, under the same contract.
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
            counted(new_size);
        }
        p
    }
}

/// Live heap bytes of the whole process, when [`Counting`] is the global allocator.
pub fn live_bytes() -> Option<i64> {
    INSTALLED
        .load(Ordering::Relaxed)
        .then(|| LIVE.load(Ordering::Relaxed))
}

/// Allocation calls and the bytes they asked for, since the process started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocCounts {
    /// `alloc`, `alloc_zeroed` and `realloc` calls.
    pub allocs: u64,
    /// Bytes asked for (a `realloc` counts its new size).
    pub bytes: u64,
}

impl AllocCounts {
    /// What happened between `earlier` and `self`.
    pub fn since(self, earlier: AllocCounts) -> AllocCounts {
        AllocCounts {
            allocs: self.allocs.wrapping_sub(earlier.allocs),
            bytes: self.bytes.wrapping_sub(earlier.bytes),
        }
    }
}

/// The process's allocation counts, when [`Counting`] is the global allocator.
pub fn counts() -> Option<AllocCounts> {
    INSTALLED.load(Ordering::Relaxed).then(|| AllocCounts {
        allocs: ALLOCS.load(Ordering::Relaxed),
        bytes: ALLOC_BYTES.load(Ordering::Relaxed),
    })
}
