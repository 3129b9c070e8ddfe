//! A delay-based controller, Swift-style (spec/congestion.md §1.1): the path's queueing
//! delay (its RTT sample above the smallest RTT it has seen) against a target. Below the
//! target the window grows by one MTU per window acknowledged; above it the window is cut,
//! at most once per window of data, in proportion to how far the RTT is over the target.
//! ECN marks are not read: the RTT is the whole signal.

use super::{AckSample, Controller};
use crate::wire::psn_lt;

/// Parameters of [`Delay`] (their defaults are in `ConnConfig`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DelayParams {
    /// Queueing delay the controller aims at: RTT above the path's smallest RTT (ns).
    pub target_ns: u64,
    /// Gain of the decrease: the cut is `beta × (rtt − target_rtt) / rtt`.
    pub beta: f64,
    /// Largest fraction one decrease takes off the window.
    pub max_mdf: f64,
}

#[derive(Debug)]
pub struct Delay {
    cwnd: f64,
    max_cwnd: f64,
    mtu: f64,
    p: DelayParams,
    /// Whether the latest RTT sample was above the target (an ACK without a sample is
    /// judged by it).
    over: bool,
    last_decrease_psn: u32,
}

impl Delay {
    pub fn new(init_cwnd: f64, max_cwnd: f64, mtu: f64, p: DelayParams) -> Delay {
        Delay {
            cwnd: init_cwnd,
            max_cwnd,
            mtu,
            p,
            over: false,
            last_decrease_psn: 0,
        }
    }
}

impl Controller for Delay {
    fn window(&self) -> f64 {
        self.cwnd
    }

    fn on_ack(&mut self, s: &AckSample) -> bool {
        if let (Some(rtt), Some(base)) = (s.rtt_ns, s.min_rtt_ns) {
            let target_rtt = base.saturating_add(self.p.target_ns);
            self.over = rtt > target_rtt;
            if self.over && !psn_lt(s.cum_psn, self.last_decrease_psn) {
                let over = (rtt - target_rtt) as f64 / rtt as f64;
                let k = (1.0 - self.p.beta * over).max(1.0 - self.p.max_mdf);
                self.cwnd = (self.cwnd * k).max(self.mtu);
                self.last_decrease_psn = s.next_psn;
                return true;
            }
        }
        if !self.over && s.acked_bytes > 0 {
            // Additive increase: one MTU per window's worth of acknowledged bytes.
            self.cwnd = (self.cwnd + self.mtu * s.acked_bytes as f64 / self.cwnd.max(self.mtu))
                .min(self.max_cwnd);
        }
        false
    }

    fn scale(&mut self, k: f64) {
        self.cwnd = (self.cwnd * k).min(self.max_cwnd);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MTU: f64 = 4096.0;
    const P: DelayParams = DelayParams {
        target_ns: 4_000,
        beta: 0.8,
        max_mdf: 0.5,
    };

    fn ack(cum: u32, next: u32, rtt: u64) -> AckSample {
        AckSample {
            acked_pkts: 1,
            acked_bytes: MTU as u64,
            new_marks: 0,
            cum_psn: cum,
            next_psn: next,
            rtt_ns: Some(rtt),
            min_rtt_ns: Some(10_000),
        }
    }

    #[test]
    fn below_target_grows_one_mtu_per_window_up_to_the_ceiling() {
        let mut c = Delay::new(10.0 * MTU, 12.0 * MTU, MTU, P);
        // Ten ACKs of one MTU each at 10 packets in flight: about one MTU more.
        for i in 0..10 {
            assert!(!c.on_ack(&ack(i + 1, 20, 13_000)));
        }
        assert!(
            (c.window() - 11.0 * MTU).abs() < 0.1 * MTU,
            "{}",
            c.window() / MTU
        );
        for i in 10..1000 {
            c.on_ack(&ack(i + 1, 2000, 10_000));
        }
        assert_eq!(c.window(), 12.0 * MTU, "capped at the ceiling");
    }

    // checks: [CC-12]
    #[test]
    fn above_target_cuts_in_proportion_once_per_window() {
        let mut c = Delay::new(100.0 * MTU, 200.0 * MTU, MTU, P);
        // RTT 20 µs against a target RTT of 14 µs: cut by 0.8 × 6/20 = 24 %.
        assert!(c.on_ack(&ack(1, 100, 20_000)));
        assert!(
            (c.window() - 76.0 * MTU).abs() < 1e-6,
            "{}",
            c.window() / MTU
        );
        // The rest of that window does not cut again, nor grow.
        for i in 2..100 {
            assert!(!c.on_ack(&ack(i, 100, 20_000)));
        }
        assert!((c.window() - 76.0 * MTU).abs() < 1e-6);
        // The next window does.
        assert!(c.on_ack(&ack(100, 180, 20_000)));
        assert!(c.window() < 76.0 * MTU);
    }

    // checks: [CC-12]
    #[test]
    fn a_cut_is_bounded_by_max_mdf_and_the_window_by_one_mtu() {
        let mut c = Delay::new(100.0 * MTU, 200.0 * MTU, MTU, P);
        // A huge RTT takes at most half.
        assert!(c.on_ack(&ack(1, 10, 10_000_000)));
        assert_eq!(c.window(), 50.0 * MTU);
        let mut next = 10;
        for _ in 0..40 {
            c.on_ack(&ack(next, next + 10, 10_000_000));
            next += 10;
        }
        assert_eq!(c.window(), MTU, "never below one packet");
    }

    #[test]
    fn an_ack_without_a_sample_follows_the_latest_one() {
        let mut c = Delay::new(10.0 * MTU, 100.0 * MTU, MTU, P);
        let mut s = ack(1, 50, 30_000);
        assert!(c.on_ack(&s));
        let w = c.window();
        s.rtt_ns = None;
        s.cum_psn = 2;
        assert!(!c.on_ack(&s));
        assert_eq!(c.window(), w, "over target: no growth without a new sample");
        let mut s = ack(3, 50, 11_000);
        c.on_ack(&s);
        let w = c.window();
        s.rtt_ns = None;
        s.cum_psn = 4;
        c.on_ack(&s);
        assert!(c.window() > w, "below target: grows");
    }

    #[test]
    fn ecn_marks_do_not_move_it() {
        let mut c = Delay::new(10.0 * MTU, 100.0 * MTU, MTU, P);
        let mut s = ack(1, 50, 11_000);
        s.new_marks = 5;
        assert!(!c.on_ack(&s));
        assert!(c.window() > 10.0 * MTU);
    }
}
