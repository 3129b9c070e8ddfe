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

/// Counter structs made only of `u64` words, read and written by index: what
/// [`CounterStore`] folds. `WORDS` is the struct's word count (a test checks it against
/// its size, so a field added to the struct and not to the list fails it).
pub(crate) trait Words: Default + Copy {
    const WORDS: usize;
    fn word(&self, i: usize) -> u64;
    fn word_mut(&mut self, i: usize) -> &mut u64;
}

macro_rules! words {
    ($t:ty { $($f:ident),* $(,)? } [$($a:ident: $n:literal),* $(,)?]) => {
        impl Words for $t {
            const WORDS: usize = [$(stringify!($f)),*].len() $(+ $n)*;
            fn word(&self, i: usize) -> u64 {
                let mut k = i;
                $(if k == 0 { return self.$f; } k -= 1;)*
                $(if k < $n { return self.$a[k]; } k -= $n;)*
                panic!("word {i} of {}", stringify!($t))
            }
            fn word_mut(&mut self, i: usize) -> &mut u64 {
                let mut k = i;
                $(if k == 0 { return &mut self.$f; } k -= 1;)*
                $(if k < $n { return &mut self.$a[k]; } k -= $n;)*
                panic!("word {i} of {}", stringify!($t))
            }
        }
    };
}

words!(PathCounters {
    tx_pkts, tx_bytes, retx_pkts, acked_pkts, sack_holes, time_losses, tlps, rtos,
    ecn_echoed, cwnd_decreases, probes_sent, failures, reroutes,
} []);

words!(ConnCounters {
    tx_pkts, tx_payload_bytes, retx_pkts, rx_pkts, rx_payload_bytes, rx_duplicates,
    rx_not_open, rx_bad_path, rx_out_of_window, acks_sent, acks_received,
    rx_ack_holds_long, rx_ack_hold_max_ns, acks_redundant, ack_multi_sent,
    ack_multi_received, ack_blocks_sent, sack_holes, time_losses, rtos, ecn_ce_received,
    remote_access_refused, rx_local_errors, rnr_waits, rx_ordered_held, rx_ordered_dropped,
    rx_bad_responses, responses_retired_unacked, messages_completed_tx, uc_msgs_dropped,
    uc_pkts_dropped, uc_no_recv, uc_refused, messages_completed_rx, path_failures,
    rx_acks_bogus, rx_acks_stale, rx_nacks_ignored,
} [nacks_sent: 6, nacks_received: 6]);

impl ConnCounters {
    /// Add `o` in (every counter summed, except the longest ACK hold, which is the larger).
    pub fn add(&mut self, o: &ConnCounters) {
        let hold = self.rx_ack_hold_max_ns.max(o.rx_ack_hold_max_ns);
        for i in 0..Self::WORDS {
            let w = self.word_mut(i);
            *w = w.wrapping_add(o.word(i));
        }
        self.rx_ack_hold_max_ns = hold;
    }
}

/// Where a connection or a path keeps its counters: while in use, boxed as the struct
/// (an increment is a pointer away); once the owner has gone idle (`fold`), as the nonzero
/// words only (a bitmap of them, then each as a LEB128 varint), which for a connection that
/// moved one message is a few dozen bytes instead of 400, and nothing at all while every
/// counter is zero. Reading gives the struct by value either way.
#[derive(Clone, Debug)]
pub(crate) enum CounterStore<T> {
    Folded(Box<[u8]>),
    Live(Box<T>),
}

impl<T> Default for CounterStore<T> {
    fn default() -> Self {
        CounterStore::Folded(Box::default())
    }
}

fn put_varint(out: &mut Vec<u8>, mut x: u64) {
    while x >= 0x80 {
        out.push(x as u8 | 0x80);
        x >>= 7;
    }
    out.push(x as u8);
}

fn get_varint(b: &[u8], at: &mut usize) -> u64 {
    let (mut x, mut shift) = (0u64, 0);
    loop {
        let v = b[*at];
        *at += 1;
        x |= ((v & 0x7f) as u64) << shift;
        if v < 0x80 {
            return x;
        }
        shift += 7;
    }
}

impl<T: Words> CounterStore<T> {
    fn unfold(b: &[u8]) -> T {
        let mut t = T::default();
        if b.is_empty() {
            return t;
        }
        let mut at = 0;
        let map = get_varint(b, &mut at);
        for i in 0..T::WORDS {
            if map >> i & 1 == 1 {
                *t.word_mut(i) = get_varint(b, &mut at);
            }
        }
        t
    }

    /// The counters, by value.
    pub(crate) fn get(&self) -> T {
        match self {
            CounterStore::Folded(b) => Self::unfold(b),
            CounterStore::Live(t) => **t,
        }
    }

    /// The counters to change (unfolded first if folded).
    #[inline]
    pub(crate) fn live(&mut self) -> &mut T {
        if let CounterStore::Folded(b) = self {
            *self = CounterStore::Live(Box::new(Self::unfold(b)));
        }
        match self {
            CounterStore::Live(t) => t,
            CounterStore::Folded(_) => unreachable!("unfolded above"),
        }
    }

    /// Keep only the nonzero words (the owner has gone idle).
    pub(crate) fn fold(&mut self) {
        let CounterStore::Live(t) = self else { return };
        let mut map = 0u64;
        for i in 0..T::WORDS {
            if t.word(i) != 0 {
                map |= 1 << i;
            }
        }
        let mut out = Vec::new();
        if map != 0 {
            put_varint(&mut out, map);
            for i in 0..T::WORDS {
                if map >> i & 1 == 1 {
                    put_varint(&mut out, t.word(i));
                }
            }
        }
        *self = CounterStore::Folded(out.into_boxed_slice());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Words + PartialEq + std::fmt::Debug>() {
        // Every word is listed: the list covers the struct's whole size.
        assert_eq!(T::WORDS * 8, std::mem::size_of::<T>());
        assert!(T::WORDS <= 64, "the fold's bitmap is one u64");
        let mut s = CounterStore::<T>::default();
        assert_eq!(s.get(), T::default());
        s.fold();
        assert!(matches!(&s, CounterStore::Folded(b) if b.is_empty()));
        let mut want = T::default();
        for i in 0..T::WORDS {
            // Distinct values, some zero, some needing all ten varint bytes.
            let v = match i % 4 {
                0 => 0,
                1 => i as u64 + 1,
                2 => u64::MAX - i as u64,
                _ => 1 << (i % 63),
            };
            *want.word_mut(i) = v;
            *s.live().word_mut(i) = v;
        }
        s.fold();
        assert_eq!(s.get(), want);
        *s.live().word_mut(1) = 7;
        *want.word_mut(1) = 7;
        assert_eq!(s.get(), want);
        s.fold();
        assert_eq!(s.get(), want);
    }

    #[test]
    fn counters_fold_and_unfold_exactly() {
        round_trip::<ConnCounters>();
        round_trip::<PathCounters>();
        // Distinct words map to distinct fields.
        let mut c = ConnCounters::default();
        for i in 0..ConnCounters::WORDS {
            *c.word_mut(i) = i as u64 + 1;
        }
        let mut seen: Vec<u64> = (0..ConnCounters::WORDS).map(|i| c.word(i)).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), ConnCounters::WORDS);
        assert_eq!(c.nacks_received[5], ConnCounters::WORDS as u64);
        assert_eq!(c.tx_pkts, 1);
    }

    #[test]
    fn a_sum_of_connections_adds_every_counter_and_keeps_the_longest_hold() {
        let mut a = ConnCounters::default();
        let mut b = ConnCounters::default();
        for i in 0..ConnCounters::WORDS {
            *a.word_mut(i) = i as u64 + 1;
            *b.word_mut(i) = 100;
        }
        a.rx_ack_hold_max_ns = 5;
        b.rx_ack_hold_max_ns = 900;
        let mut sum = a;
        sum.add(&b);
        for i in 0..ConnCounters::WORDS {
            if sum.word(i) != 900 {
                assert_eq!(sum.word(i), i as u64 + 101, "word {i}");
            }
        }
        assert_eq!(sum.rx_ack_hold_max_ns, 900);
        assert_eq!(sum.nacks_sent[3], a.nacks_sent[3] + 100);
    }
}
