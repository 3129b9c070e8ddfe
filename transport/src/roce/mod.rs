//! RoCEv2 (IBTA RC, UC and UD over UDP 4791): codec and go-back-N engine. See
//! spec/rocev2.md.
//!
//! - [`wire`]: the BTH and extended transport headers, the ICRC, and the canonical IPv4/UDP
//!   headers ferroce sends RoCEv2 datagrams with.
//! - [`RoceEndpoint`]: an RC engine implementing [`crate::Transport`], so every embedder (the
//!   simulator harness, the DPDK dataplane, the verbs shim) drives it like the native engine.
//!
//! # The IPv4/UDP header rule (the ICRC covers them)
//!
//! The [`crate::Transport`] interface passes UDP payloads only, but the RoCEv2 ICRC is
//! computed over the IPv4 and UDP headers too (TOS, TTL, IPv4 checksum and UDP checksum
//! masked; everything else — lengths, identification, flags, protocol, addresses, ports —
//! covered). So ferroce fixes those headers: every RoCEv2 datagram a [`RoceEndpoint`] emits
//! is meant to be sent with exactly [`wire::ipv4_udp_headers`]`(src, dst, src_port, 4791,
//! len)`: IPv4 without options, identification 0, DF set, protocol 17, UDP checksum 0
//! (TOS and TTL are free: the canonical bytes use DSCP 0 / ECT(0) and TTL 64, and an
//! embedder may change them, e.g. for ECN, since the ICRC masks them). The engine computes
//! the ICRC it writes for those headers.
//!
//! On receive, [`crate::Transport::handle_datagram`] checks the ICRC against the canonical
//! headers of (peer address, local address, source port, 4791, length): right for ferroce
//! peers and for the simulator, which carries no IPv4 header. Peers such as Linux rxe send
//! other identification values, so an embedder that has the real headers (the DPDK
//! dataplane) should call [`RoceEndpoint::handle_datagram_ip`] instead, which checks the ICRC
//! over the real headers; or verify it itself and set [`RoceConfig::verify_icrc`] to false.

pub mod cm;
pub mod engine;
mod qp;
pub mod ud;
pub mod wire;

pub use engine::{QpParams, RoceEndpoint};
pub use qp::{XrcRole, XRC_HDR_LEN};
pub use ud::{UdDest, GRH_LEN};

use std::net::Ipv4Addr;

/// Settings of a RoCEv2 endpoint and the defaults of its queue pairs. Defaults follow Linux
/// rxe and perftest where they exist.
#[derive(Clone, Debug)]
pub struct RoceConfig {
    /// This host's IPv4 address (the source of the canonical headers the ICRC covers).
    pub local_ip: Ipv4Addr,
    /// Path MTU: payload bytes per packet, one of 256, 512, 1024, 2048, 4096 (other values
    /// round down to the nearest, at least 256). Default 1024 (rxe's active MTU on a
    /// 1500-byte link).
    pub mtu: u32,
    /// Local ACK timeout exponent: 4.096 µs × 2^timeout (0 = no timer). Default 14
    /// (~67 ms, the rxe/perftest default); benchmarks may use e.g. 5 (~131 µs).
    pub timeout: u8,
    /// Transport retries (timeouts, NAK sequence errors, implicit NAKs) without progress
    /// before RetryExceeded; 7 = retry forever when `retry_forever_at_7`. Default 7.
    pub retry_cnt: u8,
    /// Whether `retry_cnt` 7 means "retry forever", as rxe has it (default true), or seven
    /// retries, as IBTA and real NICs have it (the verbs shim: a dead peer must end in
    /// `IBV_WC_RETRY_EXC_ERR`, not a hang).
    pub retry_forever_at_7: bool,
    /// RNR NAKs tolerated without progress before RnrRetryExceeded; 7 = forever (IBTA).
    /// Default 7.
    pub rnr_retry: u8,
    /// RNR timer code this responder puts in its RNR NAKs (IBTA table of RNR timer
    /// encodings). Default 12 (0.64 ms, perftest's value).
    pub min_rnr_timer: u8,
    /// PSNs a requester may have sent beyond the oldest unacknowledged one. Default 128
    /// (rxe's RXE_MAX_UNACKED_PSNS).
    pub max_unacked_psns: u32,
    /// The requester sets AckReq on the last packet of every message, on the packet that
    /// fills the window, and at least every this many packets. Default 64 (rxe).
    pub ack_req_every: u32,
    /// The responder acknowledges after this many unacknowledged in-order packets even
    /// without AckReq (0 = only when asked, as rxe). Default 0.
    pub ack_every: u32,
    /// READ/ATOMIC requests a requester keeps outstanding (verbs max_rd_atomic). Default 16.
    pub max_rd_atomic: u32,
    /// READ/ATOMIC requests a responder accepts outstanding and remembers for duplicates
    /// (verbs max_dest_rd_atomic). Default 16.
    pub max_dest_rd_atomic: u32,
    /// Largest UD datagram payload: the port's MTU (one packet per datagram). Default
    /// 1024.
    pub ud_mtu: u32,
    /// Partition key of every QP. Default 0xffff.
    pub pkey: u16,
    /// Check the ICRC of received datagrams against the canonical headers. Default true.
    pub verify_icrc: bool,
    /// Initial PSN of every QP in both directions; `None` (default) derives it from the
    /// addresses and QPNs (both sides compute the same value, see spec/rocev2.md §7).
    pub initial_psn: Option<u32>,
}

impl RoceConfig {
    /// The defaults for a host with address `local_ip`.
    pub fn new(local_ip: Ipv4Addr) -> Self {
        RoceConfig {
            local_ip,
            mtu: 1024,
            timeout: 14,
            retry_cnt: 7,
            retry_forever_at_7: true,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_unacked_psns: 128,
            ack_req_every: 64,
            ack_every: 0,
            max_rd_atomic: 16,
            max_dest_rd_atomic: 16,
            ud_mtu: 1024,
            pkey: wire::DEFAULT_PKEY,
            verify_icrc: true,
            initial_psn: None,
        }
    }

    /// The MTU actually used: `mtu` rounded down to an IBTA MTU (256..=4096).
    pub fn effective_mtu(&self) -> u32 {
        let m = self.mtu.clamp(256, 4096);
        1 << (31 - m.leading_zeros())
    }
}

/// Endpoint-wide counters (both roles of every QP).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoceCounters {
    /// Datagrams handed to `handle_datagram*`.
    pub rx_datagrams: u64,
    /// Datagrams that parsed, passed the ICRC and reached a QP.
    pub rx_pkts: u64,
    pub rx_payload_bytes: u64,
    pub rx_truncated: u64,
    pub rx_unknown_opcode: u64,
    pub rx_malformed: u64,
    pub rx_bad_icrc: u64,
    /// TVer not 0 or P_Key not matching.
    pub rx_bad_bth: u64,
    pub rx_unknown_qp: u64,
    /// Packets for a QP in the error state.
    pub rx_qp_in_error: u64,
    /// Requests below the expected PSN (answered by re-ACK / replay) and responses already
    /// seen.
    pub rx_duplicates: u64,
    /// Requests above the expected PSN (dropped; one NAK per gap).
    pub rx_out_of_sequence: u64,
    /// Responses that name no outstanding request (stale or invalid): dropped.
    pub rx_stale_responses: u64,
    pub rx_ecn_ce: u64,
    pub rx_cnp: u64,
    pub tx_pkts: u64,
    /// UDP payload bytes sent.
    pub tx_bytes: u64,
    /// SEND/WRITE/READ-response payload bytes sent.
    pub tx_payload_bytes: u64,
    /// Packets sent again: requests below the highest PSN sent, replayed READ responses.
    pub retx_pkts: u64,
    /// Go-back-N rewinds of a requester (after a NAK, an implicit NAK, a timeout or a READ
    /// response gap).
    pub go_back_n: u64,
    /// Local ACK timeouts that fired with packets outstanding.
    pub timeouts: u64,
    pub acks_sent: u64,
    pub acks_received: u64,
    pub seq_naks_sent: u64,
    pub seq_naks_received: u64,
    pub rnr_naks_sent: u64,
    pub rnr_naks_received: u64,
    /// NAKs with invalid request / remote access / remote operational error.
    pub fatal_naks_sent: u64,
    pub fatal_naks_received: u64,
    /// ACKs or responses beyond a READ/ATOMIC whose response was lost.
    pub implicit_naks: u64,
    /// READ response gaps answered by re-issuing the READ at once.
    pub read_gap_retries: u64,
    /// READ responses and ATOMIC ACKs beyond a gap already answered by a re-issue: discarded.
    pub rx_out_of_order_responses: u64,
    pub rnr_waits: u64,
    pub read_responses_sent: u64,
    pub atomic_acks_sent: u64,
    pub completions_ok: u64,
    pub completions_err: u64,
    /// `poll_transmit` buffers too small for the next packet.
    pub tx_buffer_too_small: u64,
    /// UC: messages abandoned after a lost packet (their partial data stays placed, their
    /// receive is reused).
    pub uc_msgs_dropped: u64,
    /// UC: packets dropped while waiting for the next FIRST or ONLY.
    pub uc_pkts_dropped: u64,
    /// UC: SENDs dropped because no receive was posted.
    pub uc_no_recv: u64,
    /// UC: WRITEs dropped for a bad length, R_Key or access, or no receive for the immediate.
    pub uc_refused: u64,
    /// UD: datagrams sent.
    pub ud_sent: u64,
    /// UD: datagrams placed in a receive (successfully).
    pub ud_delivered: u64,
    /// CM MADs received on QP1 and sent from it (spec/rocev2.md §10).
    pub gsi_mads_received: u64,
    pub gsi_mads_sent: u64,
    /// UD: datagrams dropped because the DETH's Q_Key is not the QP's.
    pub ud_bad_qkey: u64,
    /// UD: datagrams dropped because no receive was posted.
    pub ud_no_recv: u64,
    /// UD: datagrams to this host's own address, delivered without the wire.
    pub ud_looped_back: u64,
    /// UD: sends longer than `ud_mtu`, completed without a packet (IBTA C10-93.1.1).
    pub ud_too_long: u64,
    /// Packets whose transport is not their QP's: XRC opcodes to an RC QP, RC ones to an
    /// XRC QP, requests to an XRC initiator or responses to a target (dropped).
    pub rx_wrong_transport: u64,
}
