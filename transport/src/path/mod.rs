//! One path of a connection: its own entropy, PSN space, window, RTT and state, on the sending
//! side; and its cumulative PSN plus 256-bit receive window on the receiving side.

use crate::at::At;
use crate::cc::{new_controller, AckSample, Controller};
use crate::config::ConnConfig;
use crate::conn::slim::SlimDeque;
use crate::counters::{CounterStore, PathCounters};
use crate::wire::{psn_diff, psn_lt, Sack256};

/// The path state machine (spec/transport.md, "Path states").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PathState {
    /// Carries new data.
    Good,
    /// An RTO expired: no new data, probes until an ACK shows it alive.
    Suspect,
    /// Failed and moved to a new UDP source port; probing for it.
    Probing,
}

/// What a sent PSN carried, so a loss can be resent (the owner resolves it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChunkRef {
    /// Chunk `chunk` of request `msn` on local stream `stream` (requester side).
    Req { stream: u32, msn: u32, chunk: u32 },
    /// Chunk `chunk` of the response to request `msn` on local stream `stream` (responder).
    Resp { stream: u32, msn: u32, chunk: u32 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fate {
    InFlight,
    Acked,
    /// Declared lost (SACK hole or RTO) or refused by a NACK: no longer this path's concern.
    Gone,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Sent {
    pub chunk: ChunkRef,
    pub bytes: u32,
    pub sent_at: u64,
    pub fate: Fate,
}

/// Sender-side state of a path.
#[derive(Debug)]
pub struct TxPath {
    pub index: u8,
    pub state: PathState,
    /// Current UDP source port.
    pub entropy: u16,
    /// NIC port (fabric plane) the path is on, of `planes`; the plane it started on, which
    /// it probes to return to after moving away from a failure.
    pub plane: u8,
    pub planes: u8,
    pub home_plane: u8,
    /// Planes the connection may use (`Connection::set_plane_mask`); a move skips the others.
    pub allowed: u64,
    pub(crate) home_probe_at: Option<u64>,
    pub(crate) home_probe_seq: Option<u32>,
    /// Home probes sent since the path left its home plane (they back off).
    pub(crate) home_probes: u8,
    pub generation: u32,
    pub next_psn: u32,
    /// PSN of `sent[0]`.
    base_psn: u32,
    /// One pointer while nothing is in flight and the path was compacted.
    sent: SlimDeque<Sent>,
    /// Send times of the oldest and the newest packet in flight, kept where fates change
    /// (`on_send`, `trim`), so the deadlines read two fields instead of the `sent` queue.
    oldest_at: At,
    newest_at: At,
    pub inflight_bytes: u64,
    /// The path's congestion controller: it owns the window; `cwnd` is its window as of its
    /// last change, read per packet without a virtual call.
    cc: Box<dyn Controller>,
    cwnd: f64,
    mtu: f64,
    pub srtt_ns: Option<f64>,
    pub rttvar_ns: f64,
    pub min_rtt_ns: u64,
    pub rto_ns: u64,
    /// Consecutive RTO expiries without progress (16 bits: the retry limit and
    /// `fail_after_rtos` end a run long before; saturating).
    pub rto_count: u16,
    /// ECN-CE count last echoed by an ACK.
    last_ce: u32,
    /// First PSN sent on the current route (spec/transport.md §4.8, PATH-13): the PSNs
    /// before it went by the route the path left, and may arrive after later ones.
    route_psn: u32,
    /// The path's own observation window of marks, whatever its controller (PATH-13): it
    /// ends when `cum_psn` reaches `mk_end`; packets acknowledged and marks echoed in it.
    mk_end: u32,
    /// (Bytes, saturating: a window holds about the SACK span at most, and the idle
    /// connection's heap budget counts every byte of a path.)
    mk_acked: u8,
    mk_marked: u8,
    /// Moving average of the windows' marked fractions on the current route, in 1/255ths
    /// (gain 1/2^`MARK_GAIN_SHIFT`): a route is left for marks that last, not for one window.
    mk_avg: u8,
    /// Next probe time (Suspect/Probing).
    pub probe_at: Option<u64>,
    pub probe_seq: u32,
    pub failed_at: u64,
    /// Packets declared lost since this path's last acknowledgement.
    pub consec_lost: u32,
    /// When this path last received an ACK.
    pub last_ack_at: u64,
    /// Tail-loss probes sent since the last ACK progress (each waits twice as long).
    pub(crate) tlps_sent: u8,
    /// PROBEs sent since the path failed (Probing): each doubles the wait (PATH-12).
    pub(crate) probing_sent: u8,
    /// Read with [`TxPath::counters`]; folded to its nonzero words while idle.
    counters: CounterStore<PathCounters>,
}

/// Consecutive losses (with no acknowledgement in between) that make a path Suspect without
/// waiting for its RTO: a black-holed path is left within about one RTT.
pub(crate) const SUSPECT_AFTER_LOSSES: u32 = 3;

/// A path's moving average of marked fractions moves by 1/2^this of each window's
/// difference (1/8, PATH-13).
const MARK_GAIN_SHIFT: u32 = 3;

/// Tail-loss probes per silent flight before only the RTO is left.
pub(crate) const MAX_TLPS: u8 = 3;

/// What an ACK told the sender.
#[derive(Debug, Default)]
pub(crate) struct AckOutcome {
    /// Chunks newly acknowledged.
    pub acked: Vec<ChunkRef>,
    /// Chunks newly declared lost (holes below the highest acknowledged PSN).
    pub lost: Vec<ChunkRef>,
    pub progress: bool,
    /// Send time of the most recently sent packet this ACK acknowledged.
    pub newest_acked_sent_at: Option<u64>,
    /// An observation window of the path ended with at least `reroute_marked` of its
    /// packets marked, on a route that has carried a whole window (PATH-13).
    pub congested: bool,
}

pub(crate) const SACK_SPAN: u32 = crate::config::PATH_SPAN_PACKETS;

impl TxPath {
    pub fn new(index: u8, entropy: u16, cfg: &ConnConfig, init_cwnd: f64, max_cwnd: f64) -> Self {
        TxPath {
            index,
            state: PathState::Good,
            entropy,
            plane: 0,
            planes: 1,
            home_plane: 0,
            allowed: u64::MAX,
            home_probe_at: None,
            home_probe_seq: None,
            home_probes: 0,
            generation: 0,
            next_psn: 0,
            base_psn: 0,
            sent: SlimDeque::new(),
            oldest_at: At::NONE,
            newest_at: At::NONE,
            inflight_bytes: 0,
            cwnd: init_cwnd,
            cc: new_controller(cfg, init_cwnd, max_cwnd),
            mtu: cfg.mtu as f64,
            srtt_ns: None,
            rttvar_ns: 0.0,
            min_rtt_ns: u64::MAX,
            rto_ns: cfg.initial_rto_ns,
            rto_count: 0,
            last_ce: 0,
            route_psn: 0,
            mk_end: 0,
            mk_acked: 0,
            mk_marked: 0,
            mk_avg: 0,
            probe_at: None,
            probe_seq: 0,
            failed_at: 0,
            consec_lost: 0,
            last_ack_at: 0,
            tlps_sent: 0,
            probing_sent: 0,
            counters: CounterStore::default(),
        }
    }

    /// Give back the send record's spare capacity (the connection has gone idle).
    pub(crate) fn compact(&mut self) {
        self.sent.shrink_to_fit();
        self.counters.fold();
    }

    /// The path's counters.
    pub fn counters(&self) -> PathCounters {
        self.counters.get()
    }

    pub(crate) fn counters_mut(&mut self) -> &mut PathCounters {
        self.counters.live()
    }

    /// Lowest PSN still in flight (the `floor` of the sequence header).
    pub fn floor(&self) -> u32 {
        self.base_psn
    }

    /// Room for one more packet of `bytes` under the path window and the SACK span.
    pub fn has_room(&self, bytes: u32) -> bool {
        psn_diff(self.next_psn, self.base_psn) < SACK_SPAN as i32
            && (self.inflight_bytes == 0 || self.inflight_bytes as f64 + bytes as f64 <= self.cwnd)
    }

    /// Room for one more PSN under the receiver's SACK span, whatever the window.
    pub(crate) fn in_span(&self) -> bool {
        psn_diff(self.next_psn, self.base_psn) < SACK_SPAN as i32
    }

    /// The window: bytes the path may have in flight.
    pub fn cwnd(&self) -> f64 {
        self.cwnd
    }

    /// Scale the window by `k` (towards the receiver's hint), within the controller's bounds.
    pub(crate) fn scale_window(&mut self, k: f64) {
        self.cc.scale(k);
        self.cwnd = self.cc.window();
    }

    /// Load relative to the window, for choosing the least-loaded path.
    pub fn load(&self) -> f64 {
        self.inflight_bytes as f64 / self.cwnd.max(1.0)
    }

    /// Record a sent packet; returns its PSN.
    pub fn on_send(&mut self, chunk: ChunkRef, bytes: u32, now: u64, retx: bool) -> u32 {
        let psn = self.next_psn;
        self.next_psn = psn.wrapping_add(1);
        self.newest_at = At::from(Some(now));
        if self.oldest_at.get().is_none() {
            self.oldest_at = At::from(Some(now));
        }
        self.sent.push_back(Sent {
            chunk,
            bytes,
            sent_at: now,
            fate: Fate::InFlight,
        });
        self.inflight_bytes += bytes as u64;
        self.counters.live().tx_pkts += 1;
        self.counters.live().tx_bytes += bytes as u64;
        if retx {
            self.counters.live().retx_pkts += 1;
        }
        psn
    }

    fn entry_mut(&mut self, psn: u32) -> Option<&mut Sent> {
        let d = psn_diff(psn, self.base_psn);
        if d < 0 {
            return None;
        }
        self.sent.get_mut(d as usize)
    }

    /// The chunk a PSN carried, if it is still in flight.
    pub(crate) fn peek(&self, psn: u32) -> Option<ChunkRef> {
        let d = psn_diff(psn, self.base_psn);
        if d < 0 {
            return None;
        }
        self.sent
            .get(d as usize)
            .filter(|e| e.fate == Fate::InFlight)
            .map(|e| e.chunk)
    }

    /// Forget everything in flight (the connection failed).
    pub(crate) fn abandon_all(&mut self) {
        for e in self.sent.iter_mut() {
            e.fate = Fate::Gone;
        }
        self.inflight_bytes = 0;
        self.trim();
    }

    /// Mark a PSN gone (NACKed); returns its chunk if it was in flight.
    pub(crate) fn forget(&mut self, psn: u32) -> Option<ChunkRef> {
        let e = self.entry_mut(psn)?;
        if e.fate != Fate::InFlight {
            return None;
        }
        e.fate = Fate::Gone;
        let (c, b) = (e.chunk, e.bytes);
        self.inflight_bytes -= b as u64;
        self.trim();
        Some(c)
    }

    /// Forget the packets before the oldest one in flight; every change of a fate ends here.
    fn trim(&mut self) {
        while let Some(f) = self.sent.front() {
            if f.fate == Fate::InFlight {
                break;
            }
            self.sent.pop_front();
            self.base_psn = self.base_psn.wrapping_add(1);
        }
        self.oldest_at = At::from(self.sent.front().map(|s| s.sent_at));
        self.newest_at = At::from(
            self.sent
                .iter()
                .rev()
                .find(|s| s.fate == Fate::InFlight)
                .map(|s| s.sent_at),
        );
    }

    /// Whether an ACK (`cum`: the first PSN not received; `sack` bit i: PSN cum + 1 + i)
    /// acknowledges a PSN this path never sent: such an ACK is not to be believed at all.
    pub(crate) fn ack_names_unsent(&self, cum: u32, sack: &Sack256) -> bool {
        if psn_diff(cum, self.next_psn) > 0 {
            return true;
        }
        sack.0.iter().enumerate().any(|(w, word)| {
            let mut bits = *word;
            while bits != 0 {
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                let psn = cum.wrapping_add(1 + w as u32 * 64 + b);
                if !psn_lt(psn, self.next_psn) {
                    return true;
                }
            }
            false
        })
    }

    /// Whether `cum` is below this path's cumulative acknowledgement already.
    pub(crate) fn ack_is_stale(&self, cum: u32) -> bool {
        psn_diff(cum, self.base_psn) < 0
    }

    /// Process one ACK for this path into `out` (cleared first; the caller keeps it, so an
    /// ACK allocates nothing once its vectors have grown). `conn_min_rtt`: the connection's
    /// smallest RTT sample, this ACK's included (u64::MAX before one), the controller's base.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_ack(
        &mut self,
        now: u64,
        cum: u32,
        sack: &Sack256,
        ecn_ce: u32,
        rtt_sample: Option<u64>,
        conn_min_rtt: u64,
        cfg: &ConnConfig,
        out: &mut AckOutcome,
    ) {
        let acked_before = self.counters.live().acked_pkts;
        out.acked.clear();
        out.lost.clear();
        out.progress = false;
        out.newest_acked_sent_at = None;
        self.last_ack_at = now;
        // Highest PSN acknowledged by this ACK, if any; and the highest of those sent on
        // the route the path left, while any of them is still tracked (PATH-13).
        let mut highest: Option<u32> = None;
        let old_route = psn_diff(self.route_psn, self.base_psn).max(0) as usize;
        let mut highest_old: Option<u32> = None;
        {
            // Cumulative part.
            let n_cum = psn_diff(cum, self.base_psn).clamp(0, self.sent.len() as i32) as usize;
            for i in 0..n_cum {
                self.ack_index(i, out);
            }
            if psn_diff(cum, self.base_psn) > 0 && psn_lt(cum.wrapping_sub(1), self.next_psn) {
                highest = Some(cum.wrapping_sub(1));
                if old_route > 0 {
                    highest_old = Some(if psn_lt(cum.wrapping_sub(1), self.route_psn) {
                        cum.wrapping_sub(1)
                    } else {
                        self.route_psn.wrapping_sub(1)
                    });
                }
            }
            // Selective part: bit i is PSN cum + 1 + i.
            for (w, word) in sack.0.iter().enumerate() {
                let mut bits = *word;
                while bits != 0 {
                    let b = bits.trailing_zeros();
                    bits &= bits - 1;
                    let psn = cum.wrapping_add(1 + w as u32 * 64 + b);
                    let d = psn_diff(psn, self.base_psn);
                    if d >= 0 && (d as usize) < self.sent.len() {
                        self.ack_index(d as usize, out);
                    }
                    if d >= 0 && psn_lt(psn, self.next_psn) {
                        highest = Some(match highest {
                            Some(h) if psn_lt(psn, h) => h,
                            _ => psn,
                        });
                        if (d as usize) < old_route {
                            highest_old = Some(match highest_old {
                                Some(h) if psn_lt(psn, h) => h,
                                _ => psn,
                            });
                        }
                    }
                }
            }
        }
        // Holes below the highest acknowledged PSN are losses: a route does not reorder.
        // A hole on the route the path left counts only below a PSN of that route.
        if let Some(h) = highest {
            let n = (psn_diff(h, self.base_psn).max(0) as usize).min(self.sent.len());
            let old_lost = highest_old.map_or(0, |o| psn_diff(o, self.base_psn).max(0) as usize);
            for i in 0..n {
                if i < old_route && i >= old_lost {
                    continue;
                }
                let e = &mut self.sent[i];
                if e.fate == Fate::InFlight {
                    e.fate = Fate::Gone;
                    self.inflight_bytes -= e.bytes as u64;
                    self.counters.live().sack_holes += 1;
                    out.lost.push(e.chunk);
                }
            }
        }
        if !out.lost.is_empty() {
            self.note_losses(now, out.lost.len() as u32);
        }
        if !out.acked.is_empty() {
            out.progress = true;
            self.rto_count = 0;
            self.consec_lost = 0;
            self.tlps_sent = 0;
            if self.state != PathState::Good {
                self.state = PathState::Good;
                self.probe_at = None;
            }
        }
        if let Some(rtt) = rtt_sample {
            self.on_rtt(rtt, cfg);
        }
        let newly = self.counters.live().acked_pkts - acked_before;
        let base = self.min_rtt_ns.min(conn_min_rtt);
        let marks = self.on_ecn(cum, ecn_ce, out, newly, rtt_sample, base);
        self.trim();
        out.congested = self.mark_window(cum, newly, marks, cfg.reroute_marked);
    }

    /// The path's own marked fraction, counted in windows as the AIMD controller counts
    /// its (congestion.md §1) but for every controller: whether the window that ends with
    /// this ACK had at least `limit` of its packets marked, on a route that carried all of
    /// it (a window is judged only once nothing the left route carried is still tracked).
    fn mark_window(&mut self, cum: u32, newly: u64, marks: u64, limit: f64) -> bool {
        self.mk_acked = self.mk_acked.saturating_add(newly.min(255) as u8);
        self.mk_marked = self.mk_marked.saturating_add(marks.min(255) as u8);
        if psn_lt(cum, self.mk_end) {
            return false;
        }
        let (acked, marked) = (self.mk_acked, self.mk_marked);
        self.mk_end = self.next_psn;
        self.mk_acked = 0;
        self.mk_marked = 0;
        // The window began on this route if the route began before it: `route_psn` is at
        // most the PSN the window started at, which `base_psn` has passed.
        if acked == 0 || psn_diff(self.base_psn, self.route_psn) < 0 {
            return false;
        }
        let f = 255 * marked.min(acked) as i32 / acked as i32;
        let m = self.mk_avg as i32;
        // The step is rounded, so a constant F is approached to within 4/255.
        let step = (f - m + (1 << (MARK_GAIN_SHIFT - 1))).div_euclid(1 << MARK_GAIN_SHIFT);
        self.mk_avg = (m + step).clamp(0, 255) as u8;
        self.mk_avg as f64 >= limit * 255.0
    }

    /// Whether packets of a route the path left are still tracked (PATH-13).
    pub(crate) fn moving(&self) -> bool {
        psn_diff(self.route_psn, self.base_psn) > 0
    }

    /// Move to a new route for congestion (PATH-13): the next generation's source port; the
    /// packets in flight on the old route stay tracked, their holes judged on their own.
    pub(crate) fn reroute(&mut self, entropy: u16) {
        self.generation = self.generation.wrapping_add(1);
        self.entropy = entropy;
        self.route_psn = self.next_psn;
        self.mk_end = self.next_psn;
        self.mk_acked = 0;
        self.mk_marked = 0;
        self.mk_avg = 0;
        self.counters.live().reroutes += 1;
    }

    /// `n` packets of this path were declared lost.
    pub(crate) fn note_losses(&mut self, now: u64, n: u32) {
        self.consec_lost += n;
        if self.consec_lost >= SUSPECT_AFTER_LOSSES && self.state == PathState::Good {
            self.state = PathState::Suspect;
            self.probe_at = Some(now);
        }
    }

    /// How long after its send time a packet of this path may still be acknowledged:
    /// srtt + max(4·rttvar, min_rtt/4) + the receiver's ACK delay.
    /// `conn_srtt`: the connection's smoothed RTT over all its paths (0: none), the floor
    /// of this path's own, which may be one sample taken before the queues built up.
    pub(crate) fn loss_delay(&self, base_rtt: u64, ack_delay: u64, conn_srtt: u64) -> u64 {
        let srtt = self
            .srtt_ns
            .unwrap_or(base_rtt as f64)
            .max(conn_srtt as f64);
        let var = (4.0 * self.rttvar_ns).max(base_rtt as f64 / 4.0);
        (srtt + var) as u64 + ack_delay
    }

    /// Time-based loss detection (RACK across paths): a packet still in flight is lost when
    /// a packet sent after it (`rack_time`: on any path) has been acknowledged, it is older
    /// than `delay`, and this path has heard no ACK for `delay` either. While a path's ACKs
    /// flow, its SACK bitmap reports its holes; the time rule is for silent paths: tail
    /// losses, lost ACKs at the end, dead routes.
    pub(crate) fn detect_time_losses(
        &mut self,
        now: u64,
        rack_time: u64,
        delay: u64,
    ) -> Vec<ChunkRef> {
        let mut lost = Vec::new();
        // The packets of a route the path left (PATH-13) are judged by time alone: the ACKs
        // of the new route say nothing about them, and SACKs only once one of theirs comes.
        let old_route = psn_diff(self.route_psn, self.base_psn).max(0) as usize;
        let quiet = now >= self.last_ack_at + delay;
        if !quiet && old_route == 0 {
            return lost;
        }
        for (i, e) in self.sent.iter_mut().enumerate() {
            if !quiet && i >= old_route {
                break;
            }
            if e.fate != Fate::InFlight {
                continue;
            }
            if e.sent_at >= rack_time || now < e.sent_at + delay {
                break; // later entries were sent later still
            }
            e.fate = Fate::Gone;
            self.inflight_bytes -= e.bytes as u64;
            lost.push(e.chunk);
        }
        if !lost.is_empty() {
            self.counters.live().time_losses += lost.len() as u64;
            self.note_losses(now, lost.len() as u32);
            self.trim();
        }
        lost
    }

    /// When `detect_time_losses` would next find something, given no further ACK.
    pub(crate) fn time_loss_deadline(&self, rack_time: u64, delay: u64) -> Option<u64> {
        let old_route = psn_diff(self.route_psn, self.base_psn) > 0;
        self.oldest_at
            .get()
            .filter(|&t| t < rack_time)
            .map(|t| if old_route { t } else { t.max(self.last_ack_at) } + delay)
    }

    fn ack_index(&mut self, i: usize, out: &mut AckOutcome) {
        let e = &mut self.sent[i];
        if e.fate != Fate::Acked {
            out.newest_acked_sent_at = Some(
                out.newest_acked_sent_at
                    .map_or(e.sent_at, |t| t.max(e.sent_at)),
            );
        }
        match e.fate {
            Fate::InFlight => {
                e.fate = Fate::Acked;
                self.inflight_bytes -= e.bytes as u64;
                self.counters.live().acked_pkts += 1;
                out.acked.push(e.chunk);
            }
            // A packet declared lost arrived after all (reordering): credit the chunk once more;
            // the owner deduplicates.
            Fate::Gone => {
                e.fate = Fate::Acked;
                out.acked.push(e.chunk);
            }
            Fate::Acked => {}
        }
    }

    fn on_rtt(&mut self, rtt: u64, cfg: &ConnConfig) {
        let r = rtt as f64;
        self.min_rtt_ns = self.min_rtt_ns.min(rtt.max(1));
        match self.srtt_ns {
            None => {
                self.srtt_ns = Some(r);
                self.rttvar_ns = r / 2.0;
            }
            Some(s) => {
                self.rttvar_ns = no_subnormal(0.75 * self.rttvar_ns + 0.25 * (s - r).abs());
                self.srtt_ns = Some(0.875 * s + 0.125 * r);
            }
        }
        let s = self.srtt_ns.unwrap_or(r);
        self.rto_ns = ((s + 4.0 * self.rttvar_ns) as u64).clamp(cfg.min_rto_ns, cfg.max_rto_ns);
    }

    /// The ACK's congestion signals to the path's controller: newly acknowledged packets
    /// and bytes, and new CE marks (the echoed counter's increase; an older, reordered ACK
    /// carries a smaller count and is ignored rather than moving it back).
    /// Returns the new marks.
    fn on_ecn(
        &mut self,
        cum: u32,
        ecn_ce: u32,
        out: &AckOutcome,
        newly: u64,
        rtt: Option<u64>,
        base: u64,
    ) -> u64 {
        let d = ecn_ce.wrapping_sub(self.last_ce);
        let new_marks = if d < 1 << 30 {
            self.last_ce = ecn_ce;
            d as u64
        } else {
            0
        };
        self.counters.live().ecn_echoed += new_marks;
        let s = AckSample {
            acked_pkts: newly,
            acked_bytes: out.acked.len() as u64 * self.mtu as u64,
            new_marks,
            cum_psn: cum,
            next_psn: self.next_psn,
            rtt_ns: rtt,
            min_rtt_ns: (base != u64::MAX).then_some(base),
        };
        if self.cc.on_ack(&s) {
            self.counters.live().cwnd_decreases += 1;
        }
        self.cwnd = self.cc.window();
        new_marks
    }

    /// Re-route across planes too: a dead plane is left, not just a dead ECMP route.
    pub(crate) fn move_plane(&mut self) {
        let n = self.planes.max(1);
        // The next allowed plane after the current one (the current one if it is the only).
        for step in 1..=n {
            let next = (self.plane + step) % n;
            if next >= 64 || self.allowed >> next & 1 == 1 {
                self.plane = next;
                break;
            }
        }
        self.home_probe_seq = None;
    }

    /// Send time of the oldest packet in flight.
    pub(crate) fn oldest_in_flight(&self) -> Option<u64> {
        self.oldest_at.get()
    }

    /// Whether any packet of the path is in flight (a zero-byte one included).
    pub(crate) fn has_in_flight(&self) -> bool {
        self.oldest_at.get().is_some()
    }

    /// Deadline of the tail-loss timer: the oldest packet in flight plus the RTO, plus
    /// `extra`: how much longer than the configured ACK delay the peer holds its ACKs (RTT
    /// samples leave the hold out).
    pub fn rto_deadline(&self, extra: u64) -> Option<u64> {
        self.oldest_at.get().map(|t| t + self.rto_ns + extra)
    }

    /// Tail-loss probe deadline: the path has had data in flight and heard nothing for
    /// 2·srtt + the receiver's ACK delay, doubled for each probe already sent; at most
    /// `MAX_TLPS` probes, and only before the RTO. A probe costs one packet; the RTO resends
    /// the whole flight and is set for the worst RTT, so on hosts with jittery scheduling a
    /// lost probe (or a lost ACK of it) must not leave recovery to the RTO.
    /// `ack_delay`: the ACK hold allowed for; `rto_extra`: its excess over the configured one.
    pub(crate) fn tlp_deadline(
        &self,
        (base_rtt, conn_srtt): (u64, u64),
        ack_delay: u64,
        floor: u64,
        rto_extra: u64,
    ) -> Option<u64> {
        if self.tlps_sent >= MAX_TLPS {
            return None;
        }
        let newest_at = self.newest_at.get()?;
        let srtt = self
            .srtt_ns
            .map(|s| s as u64)
            .unwrap_or(base_rtt)
            .max(conn_srtt);
        // A short path (same rack) has a tiny srtt but queues at the same last hop as the
        // long ones: two srtts are not less than `floor` (the fabric RTT assumed for a path
        // before it has samples), or a few packets of incast queue make probes spurious.
        let wait = (2 * srtt).max(floor) + ack_delay;
        let at = newest_at.max(self.last_ack_at) + (wait << self.tlps_sent);
        self.rto_deadline(rto_extra)
            .filter(|rto| at < *rto)
            .map(|_| at)
    }

    /// The newest chunk in flight, to be sent again as a tail-loss probe.
    pub(crate) fn take_tlp(&mut self) -> Option<ChunkRef> {
        self.tlps_sent += 1;
        let c = self
            .sent
            .iter()
            .rev()
            .find(|s| s.fate == Fate::InFlight)?
            .chunk;
        self.counters.live().tlps += 1;
        Some(c)
    }

    /// The RTO fired: every packet in flight is lost; returns them and updates the state.
    pub(crate) fn on_rto(&mut self, now: u64, cfg: &ConnConfig) -> Vec<ChunkRef> {
        let mut lost = Vec::new();
        for e in self.sent.iter_mut() {
            if e.fate == Fate::InFlight {
                e.fate = Fate::Gone;
                lost.push(e.chunk);
            }
        }
        self.inflight_bytes = 0;
        self.trim();
        self.counters.live().rtos += 1;
        self.rto_count = self.rto_count.saturating_add(1);
        self.rto_ns = (self.rto_ns * 2).min(cfg.max_rto_ns);
        match self.state {
            PathState::Good => {
                self.state = PathState::Suspect;
                self.probe_at = Some(now);
            }
            PathState::Suspect if self.rto_count as u32 >= cfg.fail_after_rtos => self.fail(now),
            _ => {}
        }
        lost
    }

    /// Give up on the current route: new entropy (re-route), probe for it.
    pub(crate) fn fail(&mut self, now: u64) {
        // The first probe (at once) moves the path: new source port and next plane.
        self.state = PathState::Probing;
        self.probing_sent = 0;
        self.failed_at = now;
        self.probe_at = Some(now);
        self.counters.live().failures += 1;
    }
}

/// The RTT variance of a path whose RTT never changes (as in the simulator) decays
/// geometrically and would end in subnormal floats, whose arithmetic takes a microcode assist
/// on x86 (~100x slower): that was half the transport's CPU time per packet. Values this
/// small change nothing (`srtt + 4·rttvar` rounds to the same double), so they become 0.
fn no_subnormal(x: f64) -> f64 {
    if x < 1e-20 {
        0.0
    } else {
        x
    }
}

mod rx;
pub use rx::RxPath;
pub(crate) use rx::RxVerdict;

#[cfg(test)]
mod tests;
