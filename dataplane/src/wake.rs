//! Sleeping without missing work: a polling thread that has found nothing to do for a while
//! sleeps briefly to give a shared core to the others (engines and applications share this
//! machine's two cores), and whoever hands it work wakes it at once instead of letting the
//! sleep run out. The engine sleeps on one (commands wake it); the verbs shim's completion
//! queues have one each (completions wake the application polling them).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::thread::Thread;
use std::time::Duration;

/// One sleeper (the latest thread to sleep on it) and any number of wakers.
#[derive(Debug, Default)]
pub struct Waiter {
    sleeping: AtomicBool,
    thread: Mutex<Option<Thread>>,
}

impl Waiter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sleep up to `us` microseconds, unless `ready()` (checked after announcing the sleep, so
    /// work handed over meanwhile is seen or wakes it) says there is work; returns early when
    /// woken.
    pub fn sleep(&self, us: u64, ready: impl Fn() -> bool) {
        crate::cpu::short_sleeps();
        {
            let mut t = self.thread.lock().unwrap_or_else(|p| p.into_inner());
            let me = std::thread::current();
            if t.as_ref().map(|t| t.id()) != Some(me.id()) {
                *t = Some(me);
            }
        }
        self.sleeping.store(true, Ordering::SeqCst);
        if !ready() {
            std::thread::park_timeout(Duration::from_micros(us));
        }
        self.sleeping.store(false, Ordering::SeqCst);
    }

    /// Wake the sleeper, if one sleeps (one atomic load otherwise).
    pub fn wake(&self) {
        if self.sleeping.load(Ordering::SeqCst) {
            if let Some(t) = &*self.thread.lock().unwrap_or_else(|p| p.into_inner()) {
                t.unpark();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    /// A sleeper woken by another thread returns long before its timeout; work announced
    /// before it sleeps is seen without sleeping.
    #[test]
    fn a_wake_ends_the_sleep_and_ready_work_skips_it() {
        let w = Arc::new(Waiter::new());
        let t0 = Instant::now();
        w.sleep(5_000_000, || true);
        assert!(t0.elapsed() < Duration::from_secs(1));
        let w2 = w.clone();
        let waker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            for _ in 0..200 {
                w2.wake();
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let t0 = Instant::now();
        w.sleep(5_000_000, || false); // 5 s unless woken
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        waker.join().unwrap();
    }
}
