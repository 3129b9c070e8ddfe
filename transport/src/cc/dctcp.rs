//! The default controller: DCTCP-style ECN AIMD per path (spec/congestion.md §1). Marks cut
//! the window at most once per window of data, by the smoothed marked fraction; random loss
//! never does; otherwise one MTU of growth per window acknowledged.

use super::{AckSample, Controller};
use crate::wire::psn_lt;

#[derive(Debug)]
pub struct Dctcp {
    cwnd: f64,
    max_cwnd: f64,
    mtu: f64,
    /// Gain of the marked-fraction average and floor of the decrease factor.
    g: f64,
    md_floor: f64,
    /// Marked-fraction average and the current observation window.
    alpha: f64,
    win_end_psn: u32,
    win_pkts: u64,
    win_marked: u64,
    last_decrease_psn: u32,
}

impl Dctcp {
    pub fn new(init_cwnd: f64, max_cwnd: f64, mtu: f64, g: f64, md_floor: f64) -> Dctcp {
        Dctcp {
            cwnd: init_cwnd,
            max_cwnd,
            mtu,
            g,
            md_floor,
            alpha: 0.0,
            win_end_psn: 0,
            win_pkts: 0,
            win_marked: 0,
            last_decrease_psn: 0,
        }
    }
}

impl Controller for Dctcp {
    fn window(&self) -> f64 {
        self.cwnd
    }

    fn on_ack(&mut self, s: &AckSample) -> bool {
        self.win_pkts += s.acked_pkts;
        self.win_marked += s.new_marks;
        if !psn_lt(s.cum_psn, self.win_end_psn) {
            // One window of data has been acknowledged: update alpha.
            // F: fraction of this window's packets that were marked (the ACK counts packets).
            let f = if self.win_pkts > 0 {
                (self.win_marked as f64 / self.win_pkts as f64).min(1.0)
            } else {
                0.0
            };
            self.alpha = no_subnormal((1.0 - self.g) * self.alpha + self.g * f);
            self.win_pkts = 0;
            self.win_marked = 0;
            self.win_end_psn = s.next_psn;
        }
        if s.new_marks > 0 {
            if !psn_lt(s.cum_psn, self.last_decrease_psn) {
                let alpha = self.alpha.max(self.g);
                self.cwnd = (self.cwnd * (1.0 - alpha / 2.0).max(self.md_floor)).max(self.mtu);
                self.last_decrease_psn = s.next_psn;
                return true;
            }
        } else if s.acked_bytes > 0 {
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

/// DCTCP's alpha decays geometrically without marks and would end in subnormal floats,
/// whose arithmetic takes a microcode assist on x86 (~100x slower); values this small change
/// nothing (`1 − alpha/2` rounds to 1), so they become 0.
fn no_subnormal(x: f64) -> f64 {
    if x < 1e-20 {
        0.0
    } else {
        x
    }
}
