//! CPU time of the calling thread (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`): what the
//! performance benchmarks divide by packets. Unlike wall-clock rates it does not count time
//! the thread was not running (the other core's work, the hypervisor, sleeps), so it compares
//! well between runs on shared cores.

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
        let b = super::thread_cpu_ns();
        assert!(a > 0 && b > a, "{a} -> {b}");
    }
}
