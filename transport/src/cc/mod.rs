//! Congestion control, per path (spec/congestion.md §1): a [`Controller`] owns a path's
//! window and learns from what each ACK says about that path. The connection combines the
//! windows with the receiver's fair-share hint (§2) and paces at the hint (§2.1, in
//! `conn/scheduler.rs`); neither is the controller's business, so a second controller plugs
//! in here without touching the connection code.

mod dctcp;

pub use dctcp::Dctcp;

use std::fmt::Debug;

/// What one ACK told a path's controller.
#[derive(Clone, Copy, Debug, Default)]
pub struct AckSample {
    /// Packets and (MTU-sized, as the window counts) bytes newly acknowledged.
    pub acked_pkts: u64,
    pub acked_bytes: u64,
    /// CE marks newly echoed by this ACK (the ECN-CE counter's increase).
    pub new_marks: u64,
    /// The ACK's cumulative PSN, and the path's next PSN to send (the ends of a window of
    /// data in flight: per-window decisions compare them).
    pub cum_psn: u32,
    pub next_psn: u32,
    /// RTT sample this ACK gave the path, if any (ns).
    pub rtt_ns: Option<u64>,
}

/// A per-path congestion controller.
pub trait Controller: Debug + Send {
    /// Bytes the path may have in flight.
    fn window(&self) -> f64;
    /// An ACK for the path arrived. Returns whether the window was cut (counted).
    fn on_ack(&mut self, s: &AckSample) -> bool;
    /// Scale the window by `k` (the connection moving its windows to the receiver's hint),
    /// within the controller's bounds.
    fn scale(&mut self, k: f64);
}
