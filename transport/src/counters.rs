//! Counters per path, per connection and per endpoint, readable at any time.

/// Per-path sender counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathCounters {
    pub tx_pkts: u64,
    pub tx_bytes: u64,
    /// Packets that carried a chunk sent before.
    pub retx_pkts: u64,
    pub acked_pkts: u64,
    /// PSNs found missing below a higher acknowledged PSN.
    pub sack_holes: u64,
    /// Packets declared lost by time (a later packet on any path was acknowledged).
    pub time_losses: u64,
    /// Tail-loss probes: the newest packet in flight sent again before the RTO.
    pub tlps: u64,
    pub rtos: u64,
    /// CE marks the receiver echoed.
    pub ecn_echoed: u64,
    pub cwnd_decreases: u64,
    pub probes_sent: u64,
    pub failures: u64,
    pub reroutes: u64,
}

/// Per-connection counters (both directions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnCounters {
    pub tx_pkts: u64,
    pub tx_payload_bytes: u64,
    pub retx_pkts: u64,
    pub rx_pkts: u64,
    pub rx_payload_bytes: u64,
    pub rx_duplicates: u64,
    /// Reliable packets that arrived before the connection was open (or after it closed).
    pub rx_not_open: u64,
    /// Packets naming a path the connection does not have.
    pub rx_bad_path: u64,
    pub rx_out_of_window: u64,
    /// ACK datagrams sent (ACK or ACK_MULTI) and received.
    pub acks_sent: u64,
    pub acks_received: u64,
    /// ACK blocks whose reported hold (`ack_delay`) exceeded this end's `ack_delay_ns`, and
    /// the longest hold reported (ns; as reported, not capped as the timers cap it).
    pub rx_ack_holds_long: u64,
    pub rx_ack_hold_max_ns: u64,
    /// Chunks an ACK credited that were credited already (or whose request had completed):
    /// a resend whose original had arrived too, i.e. a spurious one.
    pub acks_redundant: u64,
    /// Of those, ACK_MULTI datagrams, and the path blocks the sent ones carried.
    pub ack_multi_sent: u64,
    pub ack_multi_received: u64,
    pub ack_blocks_sent: u64,
    pub sack_holes: u64,
    pub time_losses: u64,
    pub rtos: u64,
    pub ecn_ce_received: u64,
    /// Indexed by the NACK's reason code (wire.md §2.11; index 0 unused).
    pub nacks_sent: [u64; 6],
    pub nacks_received: [u64; 6],
    pub remote_access_refused: u64,
    /// Valid requests the responder could not carry out in its own memory (a receive too
    /// short, or naming memory its stream may not write): its stream entered Error.
    pub rx_local_errors: u64,
    pub rnr_waits: u64,
    /// ORDERED packets held until every earlier message of their stream was complete, and
    /// those dropped (not acknowledged: the requester resends) because the hold buffer was
    /// full (spec/transport.md §7.2).
    pub rx_ordered_held: u64,
    pub rx_ordered_dropped: u64,
    /// READ / atomic responses refused as malformed for their work request (it fails with
    /// a bad-response error).
    pub rx_bad_responses: u64,
    /// READ / atomic responses dropped unacknowledged because the requester started a
    /// request a stream window past them (spec/transport.md RES-2): it had placed them, or it
    /// broke STREAM-2.
    pub responses_retired_unacked: u64,
    pub messages_completed_tx: u64,
    /// Unreliable streams: messages abandoned after a lost packet, packets dropped while
    /// waiting for a message's first chunk, SENDs without a posted receive, and packets
    /// refused (bad chunk, key, or a reliable packet on an unreliable stream) without a
    /// NACK.
    pub uc_msgs_dropped: u64,
    pub uc_pkts_dropped: u64,
    pub uc_no_recv: u64,
    pub uc_refused: u64,
    pub messages_completed_rx: u64,
    pub path_failures: u64,
    /// ACK blocks ignored whole because they acknowledge a PSN this end never sent on that
    /// path (a broken or hostile peer: spec/security.md §3.1).
    pub rx_acks_bogus: u64,
    /// ACK blocks whose cumulative PSN is below one already acknowledged (reordered ACKs,
    /// or a peer running its ACKs backwards); their selective part is still used.
    pub rx_acks_stale: u64,
    /// NACKs that name no outstanding packet or work request (late, duplicate or forged):
    /// they change nothing.
    pub rx_nacks_ignored: u64,
}

/// Endpoint-wide drop counters (packets that never reached a connection).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndpointCounters {
    pub rx_datagrams: u64,
    pub drop_truncated: u64,
    pub drop_bad_version: u64,
    pub drop_bad_opcode: u64,
    pub drop_bad_crc: u64,
    pub drop_malformed: u64,
    pub drop_unknown_conn: u64,
    /// OPENs refused because the endpoint already accepts `max_accepted` connections, or
    /// `max_accepted_per_peer` from that address (spec/security.md §3.1); not answered.
    pub drop_open_limit: u64,
    pub tx_datagrams: u64,
    /// Connection timer passes (`handle_timeout` of one connection): a deadline that stays
    /// in the past shows here as passes growing with events, not with deadlines.
    pub conn_timeouts: u64,
}
