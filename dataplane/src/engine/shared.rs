//! An engine driven from two sides: its own thread, and the application's own calls.
//!
//! On a machine with fewer cores than busy threads (this one: two cores for two engines and
//! two spinning applications), an engine thread that must win the CPU from its application
//! before each packet moves adds a scheduler's time slice to every round trip. So an
//! application that waits for completions (the verbs shim's `ibv_poll_cq` finding nothing, or
//! a post) runs one turn of the engine itself when nobody else is running it, and while an
//! application does so the engine's own thread sleeps after its first empty poll instead of
//! spinning. An application that waits without calling in (ib_write_lat spins on memory) is
//! served by the engine thread as before. One mutex decides who polls; the application only
//! ever tries it, so it never waits for the engine thread.

use super::{Engine, Idle};
use serde_json::Value;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How long after an application's last turn its engine thread still treats it as driving.
const APP_DRIVES_NS: u64 = 200_000;

pub struct SharedEngine {
    eng: Mutex<Option<Engine>>,
    stop: Arc<AtomicBool>,
    waker: Arc<crate::wake::Waiter>,
    /// The command ring's doorbell: a sleeping engine thread wakes for a batch.
    cmds: Arc<super::Bell>,
    /// Engine time of the application's last turn (0: never).
    app_at: AtomicU64,
    /// Turns the application took, and turns that found work.
    app_turns: AtomicU64,
    app_work: AtomicU64,
}

impl SharedEngine {
    pub fn new(e: Engine) -> Arc<Self> {
        Arc::new(SharedEngine {
            stop: e.stop.clone(),
            waker: e.waker.clone(),
            cmds: e.cmd_rx.bell().clone(),
            eng: Mutex::new(Some(e)),
            app_at: AtomicU64::new(0),
            app_turns: AtomicU64::new(0),
            app_work: AtomicU64::new(0),
        })
    }

    /// The application's turn: one poll if nobody is polling now. `Some(true)` if it did
    /// anything (sent, received, completed), `None` if the engine was busy elsewhere. Never
    /// waits.
    pub fn drive(&self) -> Option<bool> {
        let Ok(mut g) = self.eng.try_lock() else {
            return None;
        };
        let e = g.as_mut()?;
        let work = e.poll();
        self.app_at.store(e.now().max(1), Ordering::Relaxed);
        self.app_turns.fetch_add(1, Ordering::Relaxed);
        if work {
            self.app_work.fetch_add(1, Ordering::Relaxed);
        }
        Some(work)
    }

    /// Turns the application took and how many of them found work.
    pub fn app_turns(&self) -> (u64, u64) {
        (
            self.app_turns.load(Ordering::Relaxed),
            self.app_work.load(Ordering::Relaxed),
        )
    }

    /// The engine's own thread: poll until stopped, then shut the engine down; its final
    /// counters.
    pub fn run(&self) -> Value {
        let mut idle = 0u32;
        while !self.stop.load(Ordering::Relaxed) {
            let plan = match self.eng.lock() {
                Ok(mut g) => match g.as_mut() {
                    Some(e) => {
                        if e.poll() {
                            idle = 0;
                            Idle::Spin
                        } else {
                            idle += 1;
                            let at = self.app_at.load(Ordering::Relaxed);
                            let driving = at != 0 && e.now().saturating_sub(at) < APP_DRIVES_NS;
                            e.idle_plan(idle, driving)
                        }
                    }
                    None => break,
                },
                Err(_) => break,
            };
            // The lock is free while this thread sleeps: the application may poll meanwhile.
            match plan {
                Idle::Spin => {}
                Idle::Yield => std::thread::yield_now(),
                Idle::Sleep(us) => {
                    let cmds = &self.cmds;
                    self.waker.sleep(us, || cmds.pending());
                }
            }
        }
        let e = self.eng.lock().ok().and_then(|mut g| g.take());
        e.map(|e| e.shutdown()).unwrap_or(Value::Null)
    }
}
