//! Batched hand-over between the application and the engine: one single-producer,
//! single-consumer ring each way (`rtrb`, see docs/design.md "Rings between application and
//! engine"), and a doorbell beside it.
//!
//! A producer moves a whole batch into its ring and publishes it with one store of the ring's
//! tail, then rings the doorbell once: one atomic add (the count the other side may sleep
//! on) and one load (is anybody asleep?) per batch, not per item. The consumer takes all that
//! is there with one load of the tail and gives the slots back with one store of the head.
//!
//! No lost wake-up: the doorbell's count is added after the items are published, and the
//! sleeper announces its sleep before it reads the count ([`Waiter::sleep`]); both are SeqCst,
//! so either the sleeper sees the count or the producer sees the sleeper and wakes it.
//! A full ring is back-pressure: what does not fit stays with the producer (its caller
//! retries or refuses), nothing is dropped.

use crate::wake::Waiter;
use rtrb::{Consumer, Producer, RingBuffer};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

/// The doorbell of one ring: how many items are published and not yet taken, how often it
/// was rung, and the consumer's sleep.
#[derive(Debug)]
pub struct Bell {
    /// Published minus taken. May dip below zero for a moment (the consumer took items whose
    /// producer has not counted them yet): then the producer's add, and its wake, follow.
    pending: AtomicI64,
    rings: AtomicU64,
    pub waiter: Arc<Waiter>,
}

impl Bell {
    pub fn new(waiter: Arc<Waiter>) -> Self {
        Bell {
            pending: AtomicI64::new(0),
            rings: AtomicU64::new(0),
            waiter,
        }
    }

    /// Items are waiting (for a sleeper's `ready` check: call it after announcing the sleep).
    pub fn pending(&self) -> bool {
        self.pending.load(Ordering::SeqCst) > 0
    }

    /// How many times the producer rang (batches published).
    pub fn rings(&self) -> u64 {
        self.rings.load(Ordering::Relaxed)
    }

    fn ring(&self, n: usize, quiet: bool) {
        self.pending.fetch_add(n as i64, Ordering::SeqCst);
        self.rings.fetch_add(1, Ordering::Relaxed);
        if !quiet {
            self.waiter.wake();
        }
    }
}

/// A ring of `capacity` items whose consumer sleeps on `waiter`.
pub fn ring<T>(capacity: usize, waiter: Arc<Waiter>) -> (RingTx<T>, RingRx<T>) {
    let (p, c) = RingBuffer::new(capacity.max(1));
    let bell = Arc::new(Bell::new(waiter));
    (
        RingTx {
            p,
            bell: bell.clone(),
        },
        RingRx { c, bell },
    )
}

/// The producing end.
pub struct RingTx<T> {
    p: Producer<T>,
    bell: Arc<Bell>,
}

impl<T> std::fmt::Debug for RingTx<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingTx")
            .field("free", &self.p.slots())
            .field("bell", &self.bell)
            .finish()
    }
}

impl<T> RingTx<T> {
    pub fn bell(&self) -> &Arc<Bell> {
        &self.bell
    }

    /// The consumer is gone (its engine or application ended).
    pub fn closed(&self) -> bool {
        self.p.is_abandoned()
    }

    /// Move as many items as fit from the front of `items` into the ring, publish them with
    /// one store and ring once (without waking the consumer if `quiet`: for a caller that
    /// runs the consumer itself next). Returns how many went in; the rest stay in `items`.
    pub fn push_batch(&mut self, items: &mut Vec<T>, quiet: bool) -> usize {
        let n = items.len().min(self.p.slots());
        if n == 0 {
            return 0;
        }
        let Ok(chunk) = self.p.write_chunk_uninit(n) else {
            return 0; // cannot happen: n free slots were just seen and only we fill them
        };
        let moved = chunk.fill_from_iter(items.drain(..n));
        self.bell.ring(moved, quiet);
        moved
    }

    /// One item, with its own doorbell; gives it back when the ring is full.
    pub fn push(&mut self, item: T, quiet: bool) -> Result<(), T> {
        match self.p.push(item) {
            Ok(()) => {
                self.bell.ring(1, quiet);
                Ok(())
            }
            Err(rtrb::PushError::Full(item)) => Err(item),
        }
    }
}

/// The consuming end.
pub struct RingRx<T> {
    c: Consumer<T>,
    bell: Arc<Bell>,
}

impl<T> std::fmt::Debug for RingRx<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingRx")
            .field("queued", &self.c.slots())
            .field("bell", &self.bell)
            .finish()
    }
}

impl<T> RingRx<T> {
    pub fn bell(&self) -> &Arc<Bell> {
        &self.bell
    }

    /// The producer is gone and nothing is left.
    pub fn closed(&self) -> bool {
        self.c.is_abandoned() && self.c.is_empty()
    }

    /// Take up to `max` items in one go (one load of the tail, one store of the head), each
    /// through `f`. Returns how many.
    pub fn drain(&mut self, max: usize, mut f: impl FnMut(T)) -> usize {
        let n = self.c.slots().min(max);
        if n == 0 {
            return 0;
        }
        let Ok(chunk) = self.c.read_chunk(n) else {
            return 0; // cannot happen: n items were just seen and only we take them
        };
        // The iterator gives the slots back (one store) when it is dropped.
        for x in chunk.into_iter() {
            f(x);
        }
        self.bell.pending.fetch_sub(n as i64, Ordering::SeqCst);
        n
    }

    /// The next item alone.
    pub fn pop(&mut self) -> Option<T> {
        let x = self.c.pop().ok()?;
        self.bell.pending.fetch_sub(1, Ordering::SeqCst);
        Some(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A full ring keeps what does not fit with the producer (nothing dropped), and takes it
    /// once the consumer made room; the order is kept.
    #[test]
    fn a_full_ring_pushes_back_and_loses_nothing() {
        let (mut tx, mut rx) = ring::<u32>(4, Arc::new(Waiter::new()));
        let mut v: Vec<u32> = (0..6).collect();
        assert_eq!(tx.push_batch(&mut v, true), 4);
        assert_eq!(v, vec![4, 5]);
        assert_eq!(tx.push(9, true), Err(9));
        let mut got = Vec::new();
        assert_eq!(rx.drain(usize::MAX, |x| got.push(x)), 4);
        assert_eq!(tx.push_batch(&mut v, true), 2);
        assert!(v.is_empty());
        rx.drain(usize::MAX, |x| got.push(x));
        assert_eq!(got, (0..6).collect::<Vec<_>>());
        assert!(!rx.bell().pending());
    }

    /// A batch is one doorbell, however many items it holds; the consumer takes a batch in
    /// one drain, bounded by what it asks for.
    #[test]
    fn a_batch_is_one_doorbell_and_one_drain() {
        let (mut tx, mut rx) = ring::<u32>(64, Arc::new(Waiter::new()));
        let mut v: Vec<u32> = (0..20).collect();
        assert_eq!(tx.push_batch(&mut v, false), 20);
        assert_eq!(tx.bell().rings(), 1);
        assert!(rx.bell().pending());
        let mut got = Vec::new();
        assert_eq!(rx.drain(16, |x| got.push(x)), 16);
        assert!(rx.bell().pending());
        assert_eq!(rx.drain(16, |x| got.push(x)), 4);
        assert!(!rx.bell().pending());
        assert_eq!(got, (0..20).collect::<Vec<_>>());
        assert_eq!(rx.drain(16, |_| {}), 0);
    }

    /// A consumer that sleeps (for up to 3 s each time) whenever its ring is empty is woken
    /// by every batch: thousands of racing batches, each published at an arbitrary moment
    /// of the consumer's cycle, finish in far less than one lost wake-up would cost.
    #[test]
    fn no_lost_wake_up_under_a_racing_producer() {
        const BATCHES: u64 = 3000;
        let waiter = Arc::new(Waiter::new());
        let (mut tx, mut rx) = ring::<u64>(8, waiter.clone());
        let t0 = Instant::now();
        let consumer = std::thread::spawn(move || {
            let (mut next, mut sleeps) = (0u64, 0u64);
            // Bounded: a lost wake-up fails the test below instead of hanging it.
            while next < BATCHES * 3 && t0.elapsed() < Duration::from_secs(8) {
                let n = rx.drain(usize::MAX, |x| {
                    assert_eq!(x, next);
                    next += 1;
                });
                if n == 0 {
                    sleeps += 1;
                    let bell = rx.bell().clone();
                    bell.waiter.sleep(3_000_000, || bell.pending());
                }
            }
            sleeps
        });
        let mut x = 0u64;
        let mut spin = 1u32;
        for _ in 0..BATCHES {
            let mut v = vec![x, x + 1, x + 2];
            x += 3;
            while !v.is_empty() && !tx.closed() {
                if tx.push_batch(&mut v, false) == 0 {
                    std::thread::yield_now();
                }
            }
            // Vary the moment of the next batch relative to the consumer's sleep.
            spin = spin.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            for _ in 0..(spin >> 22) {
                std::hint::spin_loop();
            }
            if spin & 7 == 0 {
                std::thread::yield_now();
            }
        }
        let sleeps = consumer.join().unwrap();
        let took = t0.elapsed();
        assert!(
            took < Duration::from_secs(8),
            "{took:?} for {BATCHES} batches ({sleeps} sleeps): a wake-up was lost"
        );
        assert!(
            sleeps > 0,
            "the consumer never slept: the race was not tested"
        );
    }
}
