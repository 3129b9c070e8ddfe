//! What `ferroce bench dataplane` measures besides rates: CPU time of the calling thread
//! (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`, user + system time of that thread only) and,
//! when the program installed a counting allocator, allocation counts.

use std::sync::OnceLock;

/// Nanoseconds of CPU time this thread has used (0 if the clock is unavailable).
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable `timespec` that outlives the call, and
    // `CLOCK_THREAD_CPUTIME_ID` is a clock id every Linux kernel accepts.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if r != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Short sleeps for this thread: a timer slack of 1 µs instead of Linux's default 50 µs, so a
/// polling thread that sleeps a few microseconds to let another run on a shared core wakes
/// after about that long, not after ~55 µs (what each idle sleep used to add to a verbs
/// round trip). Once per thread; a refused call leaves the default.
pub fn short_sleeps() {
    use std::cell::Cell;
    thread_local!(static DONE: Cell<bool> = const { Cell::new(false) });
    if DONE.with(|d| d.replace(true)) {
        return;
    }
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument (ns) and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong, 0, 0, 0);
    }
}

/// Process-wide (allocation calls, bytes asked for) since start, from the program's
/// allocator.
pub type AllocCounter = fn() -> Option<(u64, u64)>;

static ALLOC_COUNTER: OnceLock<AllocCounter> = OnceLock::new();

/// The program's allocation counter (the `ferroce` program passes its counting allocator's,
/// `ferroce_benches::alloc::counts`); without one, allocation figures are not reported.
pub fn set_alloc_counter(f: AllocCounter) {
    let _ = ALLOC_COUNTER.set(f);
}

/// (allocation calls, bytes) so far, if a counter was set.
pub fn alloc_counts() -> Option<(u64, u64)> {
    ALLOC_COUNTER.get().and_then(|f| f())
}

/// Live heap bytes of the whole process, from the program's allocator.
pub type HeapCounter = fn() -> Option<i64>;

static HEAP_COUNTER: OnceLock<HeapCounter> = OnceLock::new();

/// The program's live-heap counter (the `ferroce` program passes
/// `ferroce_benches::alloc::live_bytes`); without one, memory per connection is not reported.
pub fn set_heap_counter(f: HeapCounter) {
    let _ = HEAP_COUNTER.set(f);
}

/// Live heap bytes of the process now, if a counter was set.
pub fn heap_live_bytes() -> Option<i64> {
    HEAP_COUNTER.get().and_then(|f| f())
}

#[cfg(test)]
mod tests {
    #[test]
    fn thread_cpu_time_moves_forward() {
        let a = super::thread_cpu_ns();
        let mut x = 0u64;
        for i in 0..1_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        std::hint::black_box(x);
        assert!(super::thread_cpu_ns() > a);
    }
}
