//! The receiver's fair-share hint on the sender side and the cold-start pilot (spec/transport.md §5.8; congestion.md §2, §3).

use super::*;

impl Connection {
    /// The receiver's fair-share rate: jump to it (scale path windows), never probe.
    pub(super) fn apply_hint(&mut self, mbps: u32) {
        self.win_cache.set(None);
        self.peer_hint_mbps = mbps;
        let target = self.hint_window();
        let sum = self.window_sum();
        if sum > 0.0 && target > sum {
            self.scale_windows(target / sum);
        }
    }

    /// The smallest RTT any path has measured (kept as a running minimum on every ACK, since
    /// a path's minimum only falls), or `initial_rtt` before the first sample.
    pub(super) fn base_rtt(&self) -> u64 {
        if self.min_rtt_all == u64::MAX {
            self.cfg.initial_rtt_ns
        } else {
            self.min_rtt_all
        }
    }

    /// Bytes the hint allows in flight: rate × (base RTT × 1.25 + the receiver's ACK delay),
    /// since with N paths an ACK can be held up to `ack_delay` and the window must cover it.
    pub(super) fn hint_window(&self) -> f64 {
        // Pacing sets the rate; the window is only a safety bound, so it gets headroom: an RTT
        // and a half plus the ACK delay, and never less than HINT_WINDOW_MIN packets (a fair
        // share below a packet per RTT must not stall on a one-packet window).
        // The RTT it covers is the larger of 1.5 × the base RTT and the smoothed RTT: in a
        // fabric they are close, but where the hosts' own scheduling adds most of the RTT (busy
        // cores, sleeping poll loops) a base-RTT window would cap the rate far below the hint.
        let srtt = self
            .paths
            .iter()
            .filter_map(|p| p.srtt_ns)
            .fold(f64::INFINITY, f64::min);
        let srtt = if srtt.is_finite() { srtt } else { 0.0 };
        let rtt = (self.base_rtt() as f64 * 1.5).max(srtt) + self.cfg.ack_delay_ns as f64;
        (self.peer_hint_mbps as f64 / 8000.0 * rtt).max(HINT_WINDOW_MIN * self.mtu as f64)
    }

    /// While the pilot's ACK is out: until when the next packet waits for it.
    pub(super) fn pilot_wait_until(&self) -> Option<u64> {
        let t = self.pilot_sent_at.get()?;
        if self.peer_hint_mbps == 0 {
            return None;
        }
        let gap = self.hint_gap();
        let base = self.base_rtt();
        (gap >= base).then_some(t + gap + 2 * base)
    }

    /// The span the pilot is placed in (COLD-7): `pilot_spread`, or, when the peer has a
    /// crowd of connections that may all start at once, the time the pilots beyond
    /// `pilot_absorb` take at the line rate, so that they arrive no faster than the peer's
    /// link drains them and its last hop's queue takes the rest; at most `pilot_spread_max`.
    pub(super) fn pilot_spread(&self) -> u64 {
        let crowd = self.crowd_span().min(self.cfg.pilot_spread_max_ns);
        self.cfg.pilot_spread_ns.max(crowd)
    }

    /// The line-rate time of the peer's crowd beyond `pilot_absorb` full-sized packets: a
    /// span over which that many first packets arrive no faster than the link drains them.
    pub(super) fn crowd_span(&self) -> u64 {
        let over = (self.peer_crowd as u64).saturating_sub(self.cfg.pilot_absorb as u64);
        over * self.full_packet_ser()
    }

    /// The first data packet after a cold start goes at exactly `at` (ns), as one batch.
    pub(super) fn first_paced_at(&mut self, now: u64, at: u64) {
        self.pace_next = at;
        self.pace_batch = true;
        self.pace_armed = at > now;
    }

    /// Since when the peer's crowd has been what it is (as seen by `handle_packet`).
    pub(super) fn note_crowd(&mut self, now: u64) {
        if self.peer_crowd != self.crowd_seen {
            self.crowd_seen = self.peer_crowd;
            self.crowd_seen_us = ((now / 1000) as u32).max(1);
        }
    }

    /// COLD-8: a cold start may go at line rate ÷ crowd at once: the peer reports a crowd of
    /// 2 to `crowd_start_max` connections, unchanged for `crowd_settled_ns`, so every one of
    /// them starting at once fills its link and no more. A fresh crowd may be stale at the
    /// peer's other connections (they open together and learn the count one by one), and a
    /// large one settles sooner behind pilots (their ACKs phase the senders).
    pub(super) fn may_crowd_start(&self, now: u64) -> bool {
        let c = self.peer_crowd;
        c > 1
            && u32::from(c) <= self.cfg.crowd_start_max
            && c == self.crowd_seen
            && self.crowd_seen_us != 0
            && u64::from(((now / 1000) as u32).wrapping_sub(self.crowd_seen_us)) * 1000
                >= self.cfg.crowd_settled_ns
    }

    /// One MTU-sized packet's spacing at the hinted rate (ns).
    pub(super) fn hint_gap(&self) -> u64 {
        (self.full_packet_wire() as f64 * 8000.0 / self.peer_hint_mbps.max(1) as f64) as u64
    }

    /// One full-sized packet's serialisation at the line rate (ns).
    pub(super) fn full_packet_ser(&self) -> u64 {
        self.full_packet_wire() * 8000 / self.line_rate_mbps.max(1) as u64
    }

    /// Wire bytes of a full-sized WRITE packet: payload, native headers and trailer, framing.
    pub(super) fn full_packet_wire(&self) -> u64 {
        (self.mtu as usize
            + wire::BASE_LEN
            + wire::Opcode::Write.header_len()
            + wire::TRAILER_LEN
            + WIRE_OVERHEAD) as u64
    }
}
