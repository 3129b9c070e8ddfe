//! Congestion control, per path (spec/congestion.md §1): a [`Controller`] owns a path's
//! window and learns from what each ACK says about that path. The connection combines the
//! windows with the receiver's fair-share hint (§2) and paces at the hint (§2.1, in
//! `conn/scheduler.rs`); neither is the controller's business, so a second controller plugs
//! in here without touching the connection code. Which one a path gets is
//! `ConnConfig::cc` ([`Algorithm`]).

mod dctcp;
mod delay;

pub use dctcp::Dctcp;
pub use delay::{Delay, DelayParams};

use crate::config::ConnConfig;
use std::fmt::Debug;

/// The per-path congestion controller a connection runs (spec/congestion.md §1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// ECN-driven AIMD, DCTCP-style (§1): the default.
    #[default]
    Aimd,
    /// Delay-based, Swift-style: queueing delay against a target (§1.1).
    Delay,
}

impl Algorithm {
    pub const ALL: [Algorithm; 2] = [Algorithm::Aimd, Algorithm::Delay];

    /// The name used in configurations and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Aimd => "aimd",
            Algorithm::Delay => "delay",
        }
    }

    /// Parse a name (`aimd`/`dctcp`, `delay`/`swift`); a clear error otherwise.
    pub fn parse(s: &str) -> Result<Algorithm, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "aimd" | "dctcp" | "ecn" => Ok(Algorithm::Aimd),
            "delay" | "swift" => Ok(Algorithm::Delay),
            other => Err(format!(
                "unknown congestion controller `{other}` (expected aimd or delay)"
            )),
        }
    }
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A new controller of the configured kind for one path.
pub fn new_controller(cfg: &ConnConfig, init_cwnd: f64, max_cwnd: f64) -> Box<dyn Controller> {
    let mtu = cfg.mtu as f64;
    match cfg.cc {
        Algorithm::Aimd => Box::new(Dctcp::new(
            init_cwnd,
            max_cwnd,
            mtu,
            cfg.dctcp_g,
            cfg.md_floor,
        )),
        Algorithm::Delay => Box::new(Delay::new(
            init_cwnd,
            max_cwnd,
            mtu,
            DelayParams {
                target_ns: cfg.delay_target_ns,
                beta: cfg.delay_beta,
                max_mdf: cfg.delay_max_mdf,
            },
        )),
    }
}

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
    /// The smallest RTT sample of the path's connection so far, this one included (ns).
    pub min_rtt_ns: Option<u64>,
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

#[cfg(test)]
mod tests {
    use super::*;

    // checks: [CC-11]
    #[test]
    fn the_configured_controller_is_the_one_a_path_gets() {
        let mut cfg = ConnConfig::default();
        let w = 100.0 * cfg.mtu as f64;
        // A marked ACK with a queueing RTT: AIMD cuts on the mark, delay on the RTT;
        // a marked ACK with the base RTT: only AIMD cuts; an unmarked, queued one: only delay.
        let s = |marks: u64, rtt: u64| AckSample {
            acked_pkts: 1,
            acked_bytes: cfg.mtu as u64,
            new_marks: marks,
            cum_psn: 1,
            next_psn: 100,
            rtt_ns: Some(rtt),
            min_rtt_ns: Some(10_000),
        };
        let cuts =
            |cfg: &ConnConfig, marks, rtt| new_controller(cfg, w, 2.0 * w).on_ack(&s(marks, rtt));
        assert_eq!(Algorithm::parse("aimd"), Ok(Algorithm::Aimd));
        assert!(cuts(&cfg, 1, 10_000));
        assert!(!cuts(&cfg, 0, 50_000));
        cfg.cc = Algorithm::parse("delay").unwrap();
        assert!(!cuts(&cfg, 1, 10_000));
        assert!(cuts(&cfg, 0, 50_000));
        assert!(Algorithm::parse("cubic").is_err());
    }
}
