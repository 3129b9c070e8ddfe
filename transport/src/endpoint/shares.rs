//! The receiver's fair-share allocation (spec/congestion.md §3): the immediate share of a
//! new sender and the max–min level recomputed every `share_interval`.

use super::Endpoint;

impl Endpoint {
    /// Capacity the hints divide (Mbit/s): the whole line rate while at most one connection
    /// sends to us and, for `active_timeout`, no connection joined, no computation counted
    /// two or more and no CE mark arrived (nobody to share with and no queue to keep short:
    /// the headroom would only tax a lone sender), else `share_target` of it
    /// (spec/congestion.md §3, CC-13). A join counts because others may follow it: senders
    /// that start together join one by one.
    pub(super) fn share_capacity(&self, now: u64) -> f64 {
        let line = self.cfg.line_rate_mbps as f64;
        let contested = self
            .contested_at
            .is_none_or(|t| now.saturating_sub(t) <= self.cfg.active_timeout_ns);
        if self.rx_active.len() <= 1 && !contested && self.cfg.full_rate_alone {
            line
        } else {
            line * self.cfg.share_target
        }
    }

    /// A connection started sending to us: give it (and everyone) the share that includes
    /// it now, instead of a stale hint from its last busy period.
    pub(super) fn on_new_sender(&mut self, now: u64, id: u32) {
        if !self.cfg.rate_hints {
            return;
        }
        self.contested_at = Some(now);
        let cap = self.share_capacity(now);
        let n = self.rx_active.len().max(1) as f64;
        let level = if self.last_level_mbps > 0.0 {
            self.last_level_mbps.min(cap / n)
        } else {
            cap / n
        };
        let hint = level.clamp(1.0, u32::MAX as f64) as u32;
        self.last_level_mbps = level;
        // Everyone's share just shrank: tell them in their next ACK, not an interval later.
        // Recorded once here and applied to each active sender before it next transmits
        // (`settle_hint`): writing it into every one made each join O(active senders), and
        // an all-to-all start quadratic (1,023 joins of up to 2,046 senders per host).
        self.join_epoch += 1;
        self.join_cap_mbps = hint;
        let epoch = self.join_epoch;
        if let Some(c) = self.conns.get_mut(&id) {
            c.hint_for_peer_mbps = hint;
            c.hint_epoch = epoch;
        }
    }

    /// Applies the joins `c` has not seen yet: while it was an active sender, each one
    /// capped its hint at that join's share. Between two fair-share computations the joins'
    /// shares only fall (`last_level_mbps` is their running minimum), so the last one is the
    /// minimum of those it missed; a computation settles every sender it looks at.
    pub(super) fn settle_hint(epoch: u64, cap: u32, c: &mut crate::conn::Connection) {
        if c.hint_epoch < epoch {
            if c.in_rx_active {
                c.hint_for_peer_mbps = c.hint_for_peer_mbps.min(cap).max(1);
            }
            c.hint_epoch = epoch;
        }
    }

    /// Receiver-driven fair share: max-min over the connections that sent recently;
    /// demand-limited ones (no BACKLOG flag lately) count at their measured rate.
    ///
    /// A sender stays in the active set until it has been silent for `active_timeout`
    /// (several intervals): at a fair share of a few Gbit/s a sender delivers one packet
    /// every few tens of microseconds, so counting only those seen in the last interval
    /// would miscount the senders and make the hint jump.
    pub(super) fn update_shares(&mut self, now: u64) {
        let interval = self.cfg.share_interval_ns.max(1);
        let elapsed = if self.next_share_at == 0 {
            interval
        } else {
            now - (self.next_share_at - interval)
        };
        self.next_share_at = now + interval;
        if !self.cfg.rate_hints {
            return;
        }
        let timeout = self.cfg.active_timeout_ns;
        let mut active = std::mem::replace(
            &mut self.rx_active,
            std::mem::take(&mut self.rx_active_spare),
        );
        // (demand in Mbit/s or infinity, conn id)
        let mut demands = std::mem::take(&mut self.demands);
        demands.clear();
        for id in active.drain(..) {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            Self::settle_hint(self.join_epoch, self.join_cap_mbps, c);
            if now.saturating_sub(c.last_rx_at) > timeout {
                c.in_rx_active = false;
                c.rx_bytes_window = 0;
                continue;
            }
            let rate = c.rx_bytes_window as f64 * 8000.0 / elapsed.max(1) as f64;
            let backlogged = now.saturating_sub(c.backlog_at) <= timeout && c.backlog_at > 0;
            demands.push((if backlogged { f64::INFINITY } else { rate }, id));
            c.rx_bytes_window = 0;
            self.rx_active.push(id);
        }
        if demands.len() > 1 {
            self.contested_at = Some(now);
        }
        let cap = self.share_capacity(now);
        self.rx_active_spare = active;
        if demands.is_empty() {
            self.demands = demands;
            return;
        }
        demands.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut left = cap;
        let mut n = demands.len();
        let mut level = cap / n as f64;
        for (d, _) in &demands {
            level = left / n as f64;
            if *d >= level {
                break;
            }
            left -= d;
            n -= 1;
        }
        self.last_level_mbps = level;
        let hint = level.clamp(1.0, u32::MAX as f64) as u32;
        for &(_, id) in &demands {
            if let Some(c) = self.conns.get_mut(&id) {
                c.hint_for_peer_mbps = hint;
            }
        }
        self.demands = demands;
    }
}
