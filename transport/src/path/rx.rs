//! The receiving side of a path: its cumulative PSN and 256-bit window.

use super::SACK_SPAN;
use crate::wire::{psn_diff, Sack256};

/// Receiver-side state of a path: cumulative PSN and the 256 PSNs above it.
#[derive(Debug, Default)]
pub struct RxPath {
    /// Next PSN expected: every PSN before it was received or abandoned by the sender.
    pub cum: u32,
    /// Bit i: PSN cum + 1 + i received.
    pub sack: Sack256,
    /// Cumulative count of CE-marked packets received.
    pub ce_count: u32,
    /// Packets received since the last ACK.
    pub unacked: u32,
    /// When the oldest unacknowledged packet arrived.
    pub first_unacked_at: Option<u64>,
    /// tsval of the packet that most recently asked for an ACK.
    pub ts_echo: u32,
    pub ts_arrival: u64,
    pub ack_now: bool,
    /// UDP source port of the latest packet on this path: ACKs and NACKs go back with it.
    pub reply_port: u16,
    /// A cold-start hint request is answered (with an ACK) at this time.
    pub hint_ack_at: Option<u64>,
    /// NIC port (plane) the latest packet of this path arrived on: answers leave on it.
    pub reply_plane: u8,
    /// Acknowledged early, as a rider of an ACK_MULTI, and not acknowledged again since: it
    /// rides the next ACK datagram too (or its delayed-ACK timer sends it), so one lost
    /// ACK_MULTI does not leave it silent.
    pub rode: bool,
    /// A LAST packet with BACKLOG arrived and is not yet acknowledged: it rides the next ACK
    /// datagram of its plane (spec/transport.md §6.2) instead of costing one of its own.
    pub held_last: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RxVerdict {
    New { in_order: bool },
    Duplicate,
    OutOfWindow,
}

impl RxPath {
    /// The sender abandoned every PSN below `floor`.
    pub(crate) fn apply_floor(&mut self, floor: u32) {
        let k = psn_diff(floor, self.cum);
        if k <= 0 {
            return;
        }
        let k = k as u32;
        let floor_received = k <= SACK_SPAN && self.sack.get(k - 1);
        self.sack.shift_down(k);
        self.cum = floor;
        if floor_received {
            self.step();
        }
    }

    fn step(&mut self) {
        let run = self.sack.leading_run();
        self.cum = self.cum.wrapping_add(1 + run);
        self.sack.shift_down(1 + run);
    }

    /// Would `psn` be accepted as new (without recording it)?
    pub(crate) fn classify(&self, psn: u32) -> RxVerdict {
        let d = psn_diff(psn, self.cum);
        if d < 0 {
            RxVerdict::Duplicate
        } else if d == 0 {
            // In order unless it fills a hole below packets already received.
            RxVerdict::New {
                in_order: self.sack.is_empty(),
            }
        } else if d as u32 <= SACK_SPAN {
            if self.sack.get(d as u32 - 1) {
                RxVerdict::Duplicate
            } else {
                RxVerdict::New { in_order: false }
            }
        } else {
            RxVerdict::OutOfWindow
        }
    }

    /// Record `psn` as received (the caller classified it as New).
    pub(crate) fn record(&mut self, psn: u32) {
        let d = psn_diff(psn, self.cum);
        if d == 0 {
            self.step();
        } else if d > 0 && d as u32 <= SACK_SPAN {
            self.sack.set(d as u32 - 1);
        }
    }
}
