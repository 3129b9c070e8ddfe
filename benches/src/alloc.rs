//! A counting global allocator, for measuring transport memory honestly: a binary that wants
//! memory figures installs it with
//! `#[global_allocator] static A: ferroce_benches::alloc::Counting = ferroce_benches::alloc::Counting;`
//! and the benchmarks then read live heap bytes before and after creating connections.
//! Without it, [`live_bytes`] returns `None` and memory figures are reported as not measured.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// Forwards to the system allocator and keeps a count of live heap bytes.
pub struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

// SAFETY: every method forwards to `System` with the caller's own arguments, so `Counting`
// upholds exactly the `GlobalAlloc` contract `System` does; the counters are plain atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's `layout` contract is passed through unchanged.
        let p = System.alloc(layout);
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
            INSTALLED.store(true, Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
            INSTALLED.store(true, Ordering::Relaxed);
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
