//! Loss recovery and timers: RACK time losses, tail-loss probes, RTOs, path probing, and the connection's next deadline (spec/transport.md §4.4, §5.4, §5.6, §5.7).

use super::*;

impl Connection {
    /// Packets older than their path's loss delay, with a later packet acknowledged on any
    /// path, are lost: resend them now rather than at the RTO.
    pub(super) fn detect_time_losses(&mut self, now: u64) {
        let t = self.timer_basis();
        for i in 0..self.paths.len() {
            if !self.paths[i].has_in_flight() {
                continue; // nothing of this path can be lost (zero-byte packets count)
            }
            let d = self.paths[i].loss_delay(t.base, t.ack_allowance, t.conn_srtt);
            let before = self.paths[i].inflight_bytes;
            let lost = self.paths[i].detect_time_losses(now, self.rack_time, d);
            self.path_changed(i, before);
            if !lost.is_empty() {
                self.mark_path(i);
            }
            self.counters.live().time_losses += lost.len() as u64;
            for c in lost {
                self.retx.push_back((c, i as u8));
            }
        }
    }

    pub(super) fn on_probe_ack(&mut self, path: u8, pr: &ProbeRepr) {
        self.mark_path(path as usize);
        if let Some(tp) = self.paths.get_mut(path as usize) {
            if tp.home_probe_seq == Some(pr.probe_seq) {
                // The home plane answers again: go back, so every plane carries its share.
                tp.plane = tp.home_plane;
                tp.home_probe_seq = None;
                tp.home_probe_at = None;
                return;
            }
            // Only the latest probe vouches for the current route: an older one may have
            // travelled on a port the path has since left. Before the path's first PROBE
            // there is none (probe_seq 0 is what hint requests carry, PATH-4).
            if tp.state != PathState::Good && tp.probe_seq != 0 && pr.probe_seq == tp.probe_seq {
                self.no_progress_rtos = 0;
                tp.state = PathState::Good;
                tp.probe_at = None;
                tp.rto_count = 0;
                tp.rto_ns = tp
                    .srtt_ns
                    .map(|s| (s as u64 * 2).max(self.cfg.min_rto_ns))
                    .unwrap_or(self.cfg.initial_rto_ns);
            } else if tp.state == PathState::Probing && pr.probe_seq != 0 {
                // An answer to an older PROBE: the route search is not the problem, the
                // answers' round trip is longer than the wait (PATH-12). Back off now.
                tp.probing_sent = tp.probing_sent.max(PROBE_SEARCH);
            }
        }
    }

    // ---- timers -------------------------------------------------------------------------

    /// One row of the timer table, from path `i`'s state.
    pub(super) fn path_times(&self, i: usize, t: &TimerBasis) -> PathTimes {
        let p = &self.paths[i];
        // u64::MAX for none, so the minimum is four compares (a `flatten().min()` over the
        // options compiled to a loop with branches, a third of this function's time).
        let none = u64::MAX;
        let own = p
            .probe_at
            .unwrap_or(none)
            .min(p.home_probe_at.unwrap_or(none))
            .min(
                p.rto_deadline(t.rto_extra(self.cfg.ack_delay_ns))
                    .unwrap_or(none),
            )
            .min(self.tlp_at(p, t).unwrap_or(none));
        PathTimes {
            own,
            oldest: p.oldest_in_flight().unwrap_or(u64::MAX),
            time_loss: p
                .time_loss_deadline(u64::MAX, p.loss_delay(t.base, t.ack_allowance, t.conn_srtt))
                .unwrap_or(u64::MAX),
        }
    }

    /// The connection's next deadline. With the timer table up to date (the endpoint
    /// refreshes it), a pass over its compact rows; otherwise from the paths themselves.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.deadlines().0
    }

    /// The next deadline, and the next one other than the pacer's (which, at a paced rate,
    /// comes once per packet and needs none of `handle_timeout`'s passes over the paths).
    pub(crate) fn deadlines(&self) -> (Option<u64>, Option<u64>) {
        self.deadlines_with(self.timers_clean())
    }

    /// `deadlines` right after `refresh_timers`, which leaves the table clean: the check
    /// (a `timer_basis` and its key compare) is not made twice per re-arm.
    pub(crate) fn refreshed_deadlines(&mut self) -> (Option<u64>, Option<u64>) {
        self.refresh_timers();
        self.deadlines_with(true)
    }

    fn deadlines_with(&self, clean: bool) -> (Option<u64>, Option<u64>) {
        debug_assert_eq!(clean, self.timers_clean());
        let mut t: Option<u64> = self.ctrl_at.get();
        let mut min = |x: Option<u64>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        #[cfg(any(test, debug_assertions))]
        if clean {
            // The table must say what the paths say (checked in debug builds and in the
            // crate's own tests, which run in CI's release build too).
            let key = self.timers.as_deref().map(|t| t.key).unwrap_or_default();
            for (i, e) in self.timer_rows().iter().enumerate() {
                let f = self.path_times(i, &key);
                assert!(
                    (e.own, e.oldest, e.time_loss) == (f.own, f.oldest, f.time_loss),
                    "timer table row {i} stale: {e:?} vs {f:?}"
                );
            }
        }
        if clean {
            // Branch-free over the compact rows (u64::MAX: none), so it compiles to a few
            // instructions per row; the pass runs once per batch of events.
            let rack = self.rack_time;
            let m = self.timer_rows().iter().fold(u64::MAX, |m, e| {
                let tl = if e.oldest < rack {
                    e.time_loss
                } else {
                    u64::MAX
                };
                m.min(e.own).min(tl)
            });
            if m != u64::MAX {
                min(Some(m));
            }
        } else {
            let t = self.timer_basis();
            for p in &self.paths {
                min(p.probe_at);
                min(p.home_probe_at);
                if !p.has_in_flight() {
                    continue;
                }
                min(p.rto_deadline(t.rto_extra(self.cfg.ack_delay_ns)));
                let delay = p.loss_delay(t.base, t.ack_allowance, t.conn_srtt);
                min(p.time_loss_deadline(self.rack_time, delay));
                min(self.tlp_at(p, &t));
            }
        }
        #[cfg(any(test, debug_assertions))]
        for (r, &d) in self.rx_paths.iter().zip(&self.rx_due) {
            // The receive side's own delay (`rx_timer`), not the peer's hold.
            let f = r
                .first_unacked_at
                .map_or(u64::MAX, |f| f + self.cfg.ack_delay_ns);
            assert_eq!(d, r.hint_ack_at.unwrap_or(f), "rx timer row stale");
        }
        // Send deadlines already found due wait for a transmit (`send_due_at`), not a timer.
        min(self.send_deadline_after(self.send_due_at.get()));
        for (at, _) in &self.rnr_wait {
            min(Some(*at));
        }
        let work = t;
        // Only future deadlines that `handle_timeout` clears, or the embedder would spin.
        let mut all = work;
        if self.pace_armed
            && self.has_unsent()
            && matches!(self.state, ConnState::Open | ConnState::Closing)
        {
            let at = self.pace_release_at();
            all = Some(all.map_or(at, |x| x.min(at)));
        }
        (all, work)
    }

    /// A path's tail-loss probe deadline. While the pilot is unanswered, not before the time
    /// its ACK is waited for (`pilot_wait`): the pilot may sit behind every other sender's
    /// pilot in the receiver's queue (about one fair-share gap), and a probe then is a
    /// spurious resend.
    fn tlp_at(&self, p: &TxPath, t: &TimerBasis) -> Option<u64> {
        let at = p.tlp_deadline(
            (t.base, t.conn_srtt),
            t.ack_allowance,
            self.cfg.initial_rtt_ns,
            t.rto_extra(self.cfg.ack_delay_ns),
        )?;
        Some(match t.pilot_wait {
            Some(w) => at.max(w),
            None => at,
        })
    }

    /// PATH-9 for a connection that has data again: no away path's home probe is further
    /// than `HOME_PROBE_RTTS` base RTTs away.
    pub(super) fn cap_home_probes(&mut self, now: u64) {
        let cap = (HOME_PROBE_RTTS * self.base_rtt()).max(1);
        for i in 0..self.paths.len() {
            let p = &mut self.paths[i];
            if p.plane != p.home_plane && p.home_probe_at.is_some_and(|t| t > now + cap) {
                p.home_probe_at = Some(now + cap);
                self.mark_path(i);
            }
        }
    }

    pub(crate) fn handle_timeout(&mut self, now: u64) {
        // The pacer's wake-up alone (one per packet at a paced rate): no path, ACK, control
        // or hint deadline is due, so the passes over the paths below would find nothing.
        // The endpoint recomputed `work_at` just before (it flushes its timers first); a
        // path away from its home plane whose home probe is not scheduled yet gets it
        // scheduled by the full pass, as before.
        if self.work_at.get().is_none_or(|w| w > now)
            && self.timers_clean()
            && !self
                .paths
                .iter()
                .any(|p| p.plane != p.home_plane && p.home_probe_at.is_none())
        {
            if self.pace_armed && self.pace_release_at() <= now {
                self.pace_armed = false;
            }
            return;
        }
        if let Some(at) = self.ctrl_at.get() {
            if at <= now {
                self.ctrl_at = At::from(None);
                match self.state {
                    ConnState::Opening => self.ctrl_queue.push_back(Ctrl::Open),
                    ConnState::Closing => self.ctrl_queue.push_back(Ctrl::Close),
                    _ => {}
                }
            }
        }
        let t = self.timer_basis();
        // With the table up to date, a path whose own deadline is still ahead has no TLP,
        // RTO or probe due (a path changed below has its deadline behind, so it is looked at).
        let clean = self.timers_clean();
        let due = |c: &Connection, i: usize| !clean || c.timer_rows()[i].own <= now;
        for i in 0..self.paths.len() {
            if !due(self, i) {
                continue;
            }
            if self.tlp_at(&self.paths[i], &t).is_some_and(|at| at <= now) {
                if let Some(ch) = self.paths[i].take_tlp() {
                    self.tlp = Some((ch, i as u8));
                }
                self.mark_path(i);
            }
        }
        for i in 0..self.paths.len() {
            if !due(self, i) {
                continue;
            }
            if let Some(d) = self.paths[i].rto_deadline(t.rto_extra(self.cfg.ack_delay_ns)) {
                if d <= now {
                    self.mark_path(i);
                    let before = self.paths[i].inflight_bytes;
                    let lost = self.paths[i].on_rto(now, &self.cfg);
                    self.path_changed(i, before);
                    self.counters.live().rtos += 1;
                    if self.paths[i].state == PathState::Probing {
                        self.counters.live().path_failures += 1;
                    }
                    for c in lost {
                        self.retx.push_back((c, i as u8));
                    }
                    // The connection is stuck only while no path is Good: a dying path whose
                    // siblings still work (or are being re-routed to working routes) is the
                    // path layer's business, not a reason to give up.
                    // Rounds of back-off, not expiries summed over paths (spec/transport.md
                    // §5.4): 16 paths timing out twice must not fail a connection whose peer
                    // was only descheduled for a millisecond.
                    if !self.any_good() {
                        self.no_progress_rtos = self.no_progress_rtos.max(self.paths[i].rto_count);
                    }
                    if self.no_progress_rtos as u32 >= self.cfg.retry_limit {
                        self.fail_connection();
                        return;
                    }
                }
            }
            if let Some(at) = self.paths[i].probe_at {
                if at <= now {
                    self.mark_path(i);
                    let p = &mut self.paths[i];
                    let next = match p.state {
                        PathState::Suspect
                            if p.probe_seq != 0
                                && p.rto_count as u32 + 1 >= self.cfg.fail_after_rtos =>
                        {
                            // Probes went unanswered for too long: fail and re-route.
                            p.fail(now);
                            self.counters.live().path_failures += 1;
                            0
                        }
                        PathState::Suspect => {
                            p.rto_count = p.rto_count.saturating_add(1);
                            p.rto_ns
                        }
                        _ => {
                            // Probing: every probe tries a new route: `PROBE_SEARCH` of them
                            // `probe_interval` apart, then (or as soon as an answer comes
                            // back late) each wait doubles, up to max_rto (PATH-12). Only
                            // the latest probe's answer is accepted (PATH-6), so a fixed
                            // 1 ms rate never recovers a path whose answers take longer, and
                            // thousands of connections probing at it are themselves the
                            // queue that makes them late.
                            p.generation = p.generation.wrapping_add(1);
                            p.entropy = path_entropy(self.seed, i as u8, p.generation);
                            p.move_plane();
                            p.counters_mut().reroutes += 1;
                            let k = (p.probing_sent.saturating_sub(PROBE_SEARCH - 1)).min(20);
                            p.probing_sent = p.probing_sent.saturating_add(1);
                            let cap = self.cfg.probe_interval_ns.max(self.cfg.max_rto_ns);
                            (self.cfg.probe_interval_ns << k).min(cap)
                        }
                    };
                    p.probe_at = if p.state == PathState::Good {
                        None
                    } else {
                        Some(now + next)
                    };
                    if p.state != PathState::Good {
                        self.ctrl_queue.push_back(Ctrl::Probe(i as u8));
                    }
                }
            }
        }
        self.detect_time_losses(now);
        if self.pace_armed && self.pace_release_at() <= now {
            self.pace_armed = false; // the next packet may go: the endpoint polls us again
        }
        if self
            .hint_req_at
            .get()
            .is_some_and(|t| t + self.cfg.initial_rto_ns <= now)
            && self.hint_tries >= HINT_TRIES
        {
            self.hint_req_at = At::from(None); // give up on the hint: data goes out without it
        }
        // A connection with data to move probes home at least every HOME_PROBE_RTTS base
        // RTTs, however long the outage: a repaired plane is taken up again within a few
        // RTTs. An idle one backs off to `probe_interval` (it loses nothing by staying away).
        let busy = self.has_unsent() || self.paths.iter().any(|p| p.has_in_flight());
        let busy_cap = HOME_PROBE_RTTS * t.base;
        for i in 0..self.paths.len() {
            let p = &mut self.paths[i];
            let before = p.home_probe_at;
            // Away from home, probe the home plane soon, then less and less often: a plane
            // back after a short outage is taken up again within tens of microseconds, and a
            // long outage costs one probe per path per `probe_interval` while idle.
            let mut interval = (self.cfg.probe_interval_ns
                >> HOME_PROBE_STEPS.saturating_sub(p.home_probes))
            .max(1);
            if busy {
                interval = interval.min(busy_cap.max(1));
            }
            if p.plane == p.home_plane {
                p.home_probe_at = None;
                p.home_probes = 0;
            } else if p.home_probe_at.is_none() {
                p.home_probe_at = Some(now + interval);
            } else if busy && p.home_probe_at.is_some_and(|t| t > now + interval) {
                // Data again after an idle spell: the backed-off probe comes forward.
                p.home_probe_at = Some(now + interval);
            } else if p.home_probe_at.is_some_and(|t| t <= now) {
                p.home_probe_at = Some(now + interval);
                if p.state == PathState::Good {
                    p.home_probes = p.home_probes.saturating_add(1);
                    self.ctrl_queue.push_back(Ctrl::HomeProbe(i as u8));
                }
            }
            if p.home_probe_at != before {
                self.mark_path(i);
            }
        }
        for i in 0..self.rx_paths.len() {
            if self.rx_due[i] > now {
                continue;
            }
            if self.rx_paths[i].hint_ack_at.is_some_and(|t| t <= now) {
                self.rx_paths[i].hint_ack_at = None;
                self.rx_timer(i);
                self.rx_paths[i].ack_now = true;
                self.queue_ack(i as u8);
            }
            if let Some(f) = self.rx_paths[i].first_unacked_at {
                if f + self.cfg.ack_delay_ns <= now {
                    self.rx_paths[i].ack_now = true;
                    self.queue_ack(i as u8);
                }
            }
        }
        let mut i = 0;
        while i < self.rnr_wait.len() {
            if self.rnr_wait[i].0 <= now {
                let (_, c) = self.rnr_wait.swap_remove(i);
                self.retx.push_back((c, u8::MAX));
            } else {
                i += 1;
            }
        }
        // Every ACK due is queued and a due pilot goes at the next transmit: until then
        // (the endpoint queues this connection) those deadlines are done with.
        if self.send_deadline_passed(now) {
            self.send_due_at = At::from(Some(now));
        }
    }

    /// Whether a send deadline (`send_deadline_after`) is at or before `now`.
    fn send_deadline_passed(&self, now: u64) -> bool {
        self.send_deadline_after(None).is_some_and(|d| d <= now)
    }

    /// The earliest deadline later than `after` whose action is "send something" at the
    /// next transmit: a receive path's delayed ACK or hint answer, the pilot, the hint
    /// request's resend. Both `deadlines` and `handle_timeout` (for `send_due_at`) read it,
    /// so they agree on what these deadlines are.
    fn send_deadline_after(&self, after: Option<u64>) -> Option<u64> {
        let mut t: Option<u64> = None;
        let mut min = |x: Option<u64>| {
            if let Some(x) = x.filter(|&x| after.is_none_or(|w| x > w)) {
                t = Some(t.map_or(x, |t| t.min(x)));
            }
        };
        // Branch-free over the rows (u64::MAX: none): a pass per re-arm on every receive path.
        let rx = match after {
            None => self.rx_due.iter().fold(u64::MAX, |m, &d| m.min(d)),
            Some(w) => self
                .rx_due
                .iter()
                .fold(u64::MAX, |m, &d| if d > w { m.min(d) } else { m }),
        };
        if rx != u64::MAX {
            min(Some(rx));
        }
        if let Some(at) = self.hint_req_at.get() {
            if self.state == ConnState::Open {
                // The request's resend, or the data its wait held back, goes at a transmit:
                // with nothing queued there is nothing to do then (the pilot may have carried
                // the whole message; the TLP and RTO cover its loss). Kept past, it fired
                // again at every event until an ACK came (all-to-all on 1,024 hosts: 1,023
                // such per host).
                if self.has_unsent() {
                    min(Some(at + self.cfg.initial_rto_ns));
                }
                // A pilot held only by a full NIC port needs no timer: the endpoint keeps
                // the connection in its ready queue until the port drains.
                if !self.port_blocked {
                    min(self.pilot_at.get().map(|p| p.max(at)));
                }
            }
        }
        t
    }
}
