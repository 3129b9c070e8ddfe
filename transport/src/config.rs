//! Every tunable of the core, with the spec's defaults (spec/transport.md, spec/congestion.md).

use crate::cc::Algorithm;

/// Endpoint-wide settings.
#[derive(Clone, Debug)]
pub struct EndpointConfig {
    /// This host's line rate in Mbit/s: the inbound capacity the fair-share allocation divides.
    pub line_rate_mbps: u32,
    /// Seed for connection ids and path entropy, so runs are reproducible.
    pub seed: u64,
    /// This run of the endpoint (spec/transport.md §2.6): mixed into its connection ids so
    /// that a restarted process with the same `seed` picks ids its previous run did not, and
    /// nothing addressed to the old run is taken for the new one. A real host draws it from
    /// the OS at start; 0 (the default) keeps the simulator's ids reproducible.
    pub incarnation: u64,
    /// Connections opened by peers this endpoint keeps at most (Closed and Failed ones
    /// count until reaped); further OPENs are dropped, counted `drop_open_limit`
    /// (spec/security.md §3.1).
    pub max_accepted: u32,
    /// Of those, at most this many from one IPv4 address.
    pub max_accepted_per_peer: u32,
    /// Defaults for connections this endpoint opens or accepts.
    pub conn: ConnConfig,
    /// How often the receiver recomputes fair shares (ns).
    pub share_interval_ns: u64,
    /// Fraction of the inbound capacity handed out as hints (headroom keeps queues short).
    pub share_target: f64,
    /// Hand out the whole line rate while only one connection sends to this endpoint and no
    /// CE mark arrived within `active_timeout` (spec/congestion.md §3): the headroom of
    /// `share_target` is for queues that a lone, unmarked sender does not build.
    pub full_rate_alone: bool,
    /// A sender silent this long leaves the fair-share set (ns).
    pub active_timeout_ns: u64,
    /// Whether ACKs carry the receiver's fair-share hint.
    pub rate_hints: bool,
    /// Grant a line-rate start: while this endpoint has exactly one connection, its OPEN /
    /// OPEN_ACK say SOLE and the peer's cold start goes at line rate at once (no hint request,
    /// no pilot), as nothing else can send to this endpoint (spec/transport.md §5.8, COLD-5).
    /// Needs `rate_hints`.
    pub sole_grant: bool,
    /// NIC ports of this host, one per fabric plane: path i starts on plane i mod
    /// `nic_ports` and a failed path moves to the next plane.
    pub nic_ports: u8,
    /// Connection ids this endpoint draws are those with `id % id_shards == id_shard`: an
    /// engine running several endpoints (one per lcore) gives each a residue class, so a
    /// packet's `dst_conn` names the endpoint that owns it (docs/design.md, "An engine on
    /// several lcores"). 1 and 0 (the default) leave every id possible, and the draws
    /// exactly as before.
    pub id_shards: u32,
    pub id_shard: u32,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            line_rate_mbps: 100_000,
            seed: 0x5eed_f00d,
            incarnation: 0,
            max_accepted: 65_536,
            max_accepted_per_peer: 65_536,
            conn: ConnConfig::default(),
            share_interval_ns: 10_000,
            share_target: 0.97,
            full_rate_alone: true,
            active_timeout_ns: 80_000,
            rate_hints: true,
            sole_grant: true,
            nic_ports: 1,
            id_shards: 1,
            id_shard: 0,
        }
    }
}

/// Pacing batch of the hosts that read their clock once per poll (the DPDK engine, the verbs
/// shim; spec/congestion.md §2.1): up to 16 packets, none held longer than 2 µs, so only
/// rates above one packet per ~130 ns (line rate at MTU) batch fully and a shared rate of a
/// few Gbit/s is still paced packet by packet.
pub const ENGINE_PACE_BURST: u32 = 16;
pub const ENGINE_PACE_QUANTUM_NS: u64 = 2_000;

/// Per-connection settings.
#[derive(Clone, Debug)]
pub struct ConnConfig {
    /// Paths the connection asks for (the agreed count is the smaller of both sides).
    pub paths: u8,
    /// Largest payload per packet (bytes); the agreed value is the smaller of both sides.
    pub mtu: u16,
    /// RTT assumed before the first sample, and the one the initial window is sized for (ns).
    pub initial_rtt_ns: u64,
    /// Lower bound of the retransmission timeout (ns).
    pub min_rto_ns: u64,
    /// Upper bound of the retransmission timeout (ns).
    pub max_rto_ns: u64,
    /// Retransmission timeout before the first RTT sample (ns). Data-centre RTTs are tens
    /// of microseconds; a connection that loses its whole first window must not sit out a
    /// WAN-sized timeout.
    pub initial_rto_ns: u64,
    /// Reliable packets per path between two ACKs.
    pub ack_every: u32,
    /// Longest a receiver holds an ACK (ns).
    pub ack_delay_ns: u64,
    /// Sender timers (tail-loss probe, time-based loss, RTO) allow for the ACK hold the peer
    /// actually reports (a decaying maximum of the ACKs' `ack_delay`), not only for
    /// `ack_delay_ns`: a receiver whose NIC is busy with its own data holds ACKs far longer,
    /// and RTT samples leave that hold out (spec/transport.md §5.6).
    pub peer_hold_timers: bool,
    /// When an ACK is due, acknowledge every path with something new in one ACK_MULTI
    /// (spec/transport.md §6.2) instead of one ACK per path.
    pub ack_multi: bool,
    /// With `ack_multi`, also add blocks for paths with no ACK due yet but a packet
    /// unacknowledged ("riders", acknowledged early;
    /// spec/transport.md §6.2).
    pub ack_multi_riders: bool,
    /// OPEN / CLOSE resend interval (ns), doubled after each try up to 256 times this.
    pub open_rto_ns: u64,
    /// OPEN / CLOSE tries before the connection fails.
    pub open_tries: u32,
    /// Consecutive RTOs of a path, while no path is Good and nothing makes progress, before
    /// the connection fails.
    pub retry_limit: u32,
    /// RNR NACKs tolerated per work request; 7 means retry forever (IBTA).
    pub rnr_retry: u8,
    /// RNR retry delay used when a NACK says 0 (ns).
    pub default_rnr_delay_ns: u64,
    /// Consecutive RTOs that move a Suspect path to Failed.
    pub fail_after_rtos: u32,
    /// Probe interval of a Failed (Probing) path (ns).
    pub probe_interval_ns: u64,
    /// Marked fraction of one observation window at or above which a Good path moves to a
    /// new route (spec/transport.md PATH-13); above 1, never.
    pub reroute_marked: f64,
    /// Messages a stream accepts ahead of its oldest incomplete one.
    pub stream_window: u32,
    /// Payload bytes a responder holds for ORDERED packets waiting for earlier messages of
    /// their stream, per connection; beyond it such packets are dropped and resent.
    pub order_hold_bytes: u64,
    /// Silence after which a connection starts cold again (ns): it asks the receiver for its
    /// fair-share hint before sending data.
    pub cold_after_ns: u64,
    /// How long a receiver holds its answer to a hint request, so that requests arriving
    /// together are counted together (ns).
    pub hint_hold_ns: u64,
    /// A cold connection sends one data packet (the pilot) along with its hint request, at a
    /// pseudo-random point of this span after it (ns): data flows in the first RTT, and N
    /// senders starting together put at most N packets, spread, into the receiver's queue.
    pub pilot_spread_ns: u64,
    /// Pilots the peer's last hop is assumed to queue at once (packets): with a peer that
    /// reports a crowd of `n` connections, the pilot is spread over the line-rate time of
    /// `n − pilot_absorb` full-sized packets when that is longer than `pilot_spread`.
    pub pilot_absorb: u32,
    /// The longest span a crowd stretches the pilot's to (ns): in an all-to-all every host
    /// has a crowd of 255, and spans past ~40 µs cost more in tail-loss probes than they
    /// save in drops.
    pub pilot_spread_max_ns: u64,
    /// A cold connection whose peer reports a crowd of 2 to this many connections starts at
    /// line rate ÷ crowd at once, without waiting for its hint request's answer (COLD-8),
    /// once that crowd has held for `crowd_settled_ns`; 0: never. Random phases of a few
    /// dozen senders queue little; beyond, the pilot's ACK-timed phase settles sooner.
    pub crowd_start_max: u32,
    /// How long the peer's crowd must have held before a crowd start trusts it (ns):
    /// connections opened together and used at once see crowds of 2, 3, ... until the
    /// refreshes (COLD-6) arrive, and their starts would add up to ~ln(crowd) × line rate.
    pub crowd_settled_ns: u64,
    /// Packets a paced connection that was due but polled late may send back to back to
    /// catch up with its rate (never after idling or being held by a window or a full NIC
    /// port). 0 for hosts that run the core exactly at its deadlines (the simulator); an
    /// engine that reads its clock once per poll needs some, or a poll longer than one gap
    /// caps it at one packet per poll.
    pub pace_catch_up: u32,
    /// Packets a paced connection releases together (spec/congestion.md §2.1, CC-14): it
    /// holds a paced run until this many packets are due, then sends them back to back, so
    /// an engine pays its per-poll and timer costs once per batch, not once per packet. The
    /// rate is unchanged. 1 (every packet at its own time) for the simulator, whose results
    /// are checked at that setting.
    pub pace_burst: u32,
    /// The longest a packet is held to fill a batch (ns): a batch is at most
    /// `1 + pace_quantum_ns / gap` packets, so a slow (shared) rate is paced packet by packet
    /// and only fast rates, where the per-packet cost matters, go in batches.
    pub pace_quantum_ns: u64,
    /// Per-path congestion controller (spec/congestion.md §1): ECN AIMD or delay-based.
    pub cc: Algorithm,
    /// DCTCP gain g for the per-path marked-fraction average (AIMD).
    pub dctcp_g: f64,
    /// Floor of the multiplicative decrease factor (AIMD).
    pub md_floor: f64,
    /// Delay controller: target queueing delay, RTT above the path's smallest (ns).
    pub delay_target_ns: u64,
    /// Delay controller: decrease gain (cut = beta × (rtt − target rtt) / rtt).
    pub delay_beta: f64,
    /// Delay controller: largest fraction one decrease takes off the window.
    pub delay_max_mdf: f64,
}

impl Default for ConnConfig {
    fn default() -> Self {
        ConnConfig {
            paths: 16,
            mtu: 4096,
            initial_rtt_ns: 20_000,
            min_rto_ns: 100_000,
            max_rto_ns: 100_000_000,
            initial_rto_ns: 100_000,
            ack_every: 4,
            ack_delay_ns: 5_000,
            peer_hold_timers: true,
            ack_multi: true,
            ack_multi_riders: true,
            open_rto_ns: 1_000_000,
            open_tries: 16,
            retry_limit: 16,
            rnr_retry: 7,
            default_rnr_delay_ns: 100_000,
            fail_after_rtos: 3,
            probe_interval_ns: 1_000_000,
            reroute_marked: 0.5,
            stream_window: 1024,
            order_hold_bytes: 4 << 20,
            cold_after_ns: 1_000_000,
            hint_hold_ns: 6_000,
            pilot_spread_ns: 12_000,
            pilot_absorb: 24,
            pilot_spread_max_ns: 36_000,
            crowd_start_max: 48,
            crowd_settled_ns: 100_000,
            pace_catch_up: 0,
            pace_burst: 1,
            pace_quantum_ns: 0,
            cc: Algorithm::Aimd,
            dctcp_g: 1.0 / 16.0,
            md_floor: 0.5,
            delay_target_ns: 10_000,
            delay_beta: 0.8,
            delay_max_mdf: 0.5,
        }
    }
}

/// Packets one path can have outstanding: the 256 PSNs a SACK block covers
/// (spec/transport.md §4.2). A connection's ceiling is `paths` times this.
pub const PATH_SPAN_PACKETS: u32 = 256;

impl ConnConfig {
    /// Paths a connection needs for its SACK spans to cover what the receiver's hint lets
    /// it have in flight at `line_rate_mbps` over a base RTT of `rtt_ns` (spec/transport.md
    /// §4.7): the hint window, line rate × (1.5 × RTT + the ACK delay), over 256 full
    /// packets per path; never fewer than `self.paths`, at most 255 (the path field is 8
    /// bits and 255 is NO_PATH).
    pub fn paths_for_rtt(&self, rtt_ns: u64, line_rate_mbps: u32) -> u8 {
        let window =
            line_rate_mbps as f64 / 8000.0 * (1.5 * rtt_ns as f64 + self.ack_delay_ns as f64);
        let span = PATH_SPAN_PACKETS as f64 * self.mtu.max(1) as f64;
        let need = (window / span).ceil().min(255.0) as u8;
        need.max(self.paths)
    }

    /// This configuration for a connection whose base RTT is about `rtt_ns` (a long haul;
    /// spec/transport.md §4.7): enough paths for its bandwidth-delay product, the initial
    /// window and RTT assumption of that RTT, and the first RTO and OPEN resend allowing a
    /// whole RTT. A data-centre RTT (below the default `initial_rtt_ns`) changes nothing.
    pub fn cover_rtt(mut self, rtt_ns: u64, line_rate_mbps: u32) -> ConnConfig {
        if rtt_ns <= self.initial_rtt_ns {
            return self;
        }
        self.paths = self.paths_for_rtt(rtt_ns, line_rate_mbps);
        self.initial_rtt_ns = rtt_ns;
        // Two RTTs: the first ACK of a window comes one RTT after its first packet, and the
        // peer may hold it; below that every first flight would time out.
        self.initial_rto_ns = self.initial_rto_ns.max(2 * rtt_ns);
        // The RTO is srtt + 4 rttvar floored at min_rto. On a steady long haul rttvar
        // collapses to nothing, so 100 µs of floor is no margin at all over a 10 ms srtt: an
        // ACK a little late (a held ACK, a queue) fires a spurious RTO, which resends the
        // path's whole flight. Half an RTT of margin, as 100 µs is several data-centre RTTs.
        self.min_rto_ns = self.min_rto_ns.max(rtt_ns + rtt_ns / 2);
        self.open_rto_ns = self.open_rto_ns.max(2 * rtt_ns);
        self.max_rto_ns = self.max_rto_ns.max(4 * rtt_ns);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // checks: [LONG-1]
    #[test]
    fn a_long_rtt_gets_paths_for_its_hint_window_and_timers_for_its_rtt() {
        let c = ConnConfig::default();
        // 100 Gb/s: 12.5 B/ns x (1.5 x RTT + 5 µs) over 256 x 4096 B per path.
        assert_eq!(c.paths_for_rtt(10_014_000, 100_000), 180);
        assert_eq!(c.paths_for_rtt(1_014_000, 100_000), 19);
        assert_eq!(c.paths_for_rtt(14_000, 100_000), 16, "never below `paths`");
        assert_eq!(
            c.paths_for_rtt(100_000_000, 100_000),
            255,
            "the 8-bit path field"
        );
        assert_eq!(c.paths_for_rtt(10_014_000, 400_000), 255);
        let l = c.clone().cover_rtt(10_014_000, 100_000);
        assert_eq!(l.paths, 180);
        assert_eq!(l.initial_rtt_ns, 10_014_000);
        assert_eq!(l.initial_rto_ns, 20_028_000);
        assert_eq!(l.min_rto_ns, 15_021_000);
        assert_eq!(l.open_rto_ns, 20_028_000);
        assert_eq!(l.max_rto_ns, 100_000_000);
        // A data-centre RTT changes nothing.
        let d = c.clone().cover_rtt(14_000, 100_000);
        assert_eq!(
            (d.paths, d.initial_rtt_ns, d.min_rto_ns, d.initial_rto_ns),
            (c.paths, c.initial_rtt_ns, c.min_rto_ns, c.initial_rto_ns)
        );
    }
}
