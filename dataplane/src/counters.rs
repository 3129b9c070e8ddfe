//! Port counters of the engine and the JSON snapshot (port, driver, fault injectors,
//! transport totals, endpoint drops, every connection) published while it runs.

use crate::net::DropReason;
use ferroce_transport::{ConnCounters, EndpointCounters, TransportTotals};
use serde::Serialize;
use serde_json::{json, Value};

/// What the engine did with frames (its own framing layer; the transport has its own).
#[derive(Clone, Debug, Default, Serialize)]
pub struct PortCounters {
    pub rx_frames: u64,
    pub rx_bytes: u64,
    /// Datagrams handed to the transport.
    pub rx_datagrams: u64,
    pub rx_arp_requests: u64,
    pub rx_arp_replies: u64,
    /// ARP requests for addresses that are not ours (ignored, not an error).
    pub rx_arp_other: u64,
    /// Multi-segment mbufs (never produced at the configured MTU): dropped.
    pub rx_multiseg: u64,
    /// Frames refused by the Ethernet/IPv4/UDP parser, by reason.
    #[serde(serialize_with = "ser_drops")]
    pub rx_drops: [u64; DropReason::ALL.len()],
    pub tx_frames: u64,
    pub tx_bytes: u64,
    pub tx_datagrams: u64,
    pub tx_arp_requests: u64,
    pub tx_arp_replies: u64,
    /// No mbuf free when the transport had something to send.
    pub tx_no_mbuf: u64,
    /// tx_burst took fewer than offered (the PMD's queue was full); retried.
    pub tx_busy: u64,
    /// Frames dropped because the PMD stayed full past the backlog limit.
    pub tx_dropped_full: u64,
    /// Datagrams longer than the IP MTU allows (a configuration error): dropped.
    pub tx_oversize: u64,
    /// Datagrams queued while their destination's MAC was resolved.
    pub arp_queued: u64,
    /// Queued datagrams dropped (queue full or resolution timed out).
    pub arp_queue_dropped: u64,
    pub arp_resolved: u64,
    pub commands: u64,
    /// Batches the commands came in (one per engine poll that found any).
    pub command_batches: u64,
    /// Raw frames sent on request (tests, tools).
    pub injected: u64,
    /// Posts the transport refused (reported to the application).
    pub post_errors: u64,
    pub completions: u64,
    pub events: u64,
    /// Batches of outputs published to the application's ring (one per poll at most).
    pub output_batches: u64,
    pub polls: u64,
    pub idle_sleeps: u64,
    /// Passes giving idle connections' spare capacity back (`engine.compact_interval_ms`).
    pub compactions: u64,
}

impl PortCounters {
    pub fn drop(&mut self, r: DropReason) {
        self.rx_drops[r as usize] += 1;
    }

    pub fn drops(&self, r: DropReason) -> u64 {
        self.rx_drops[r as usize]
    }

    pub fn total_drops(&self) -> u64 {
        self.rx_drops.iter().sum()
    }
}

fn ser_drops<S: serde::Serializer>(d: &[u64; 13], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(d.len()))?;
    for r in DropReason::ALL {
        m.serialize_entry(r.name(), &d[r as usize])?;
    }
    m.end()
}

pub fn totals_json(t: &TransportTotals) -> Value {
    json!({
        "tx_pkts": t.tx_pkts,
        "tx_payload_bytes": t.tx_payload_bytes,
        "retx_pkts": t.retx_pkts,
        "rx_pkts": t.rx_pkts,
        "rx_duplicates": t.rx_duplicates,
        "timeouts": t.timeouts,
        "nacks_sent": t.nacks_sent,
        "nacks_received": t.nacks_received,
    })
}

pub fn endpoint_json(c: &EndpointCounters) -> Value {
    json!({
        "rx_datagrams": c.rx_datagrams,
        "drop_truncated": c.drop_truncated,
        "drop_bad_version": c.drop_bad_version,
        "drop_bad_opcode": c.drop_bad_opcode,
        "drop_bad_crc": c.drop_bad_crc,
        "drop_malformed": c.drop_malformed,
        "drop_unknown_conn": c.drop_unknown_conn,
        "drop_open_limit": c.drop_open_limit,
        "tx_datagrams": c.tx_datagrams,
    })
}

/// The RoCEv2 endpoint's counters, every field by its name: read from the struct's `Debug`
/// form (a flat list of `name: number`), so a counter added to `RoceCounters` shows up here
/// without a second list to keep in step.
pub fn roce_json(c: &ferroce_transport::roce::RoceCounters) -> Value {
    let text = format!("{c:?}");
    let body = text
        .split_once('{')
        .and_then(|(_, b)| b.rsplit_once('}'))
        .map_or("", |(b, _)| b);
    let mut m = serde_json::Map::new();
    for field in body.split(',') {
        if let Some((k, v)) = field.split_once(':') {
            if let Ok(n) = v.trim().parse::<u64>() {
                m.insert(k.trim().to_string(), Value::from(n));
            }
        }
    }
    Value::Object(m)
}

pub fn conn_json(id: u32, peer: std::net::Ipv4Addr, state: &str, k: &ConnCounters) -> Value {
    let mut v = counters_json(k);
    if let Some(m) = v.as_object_mut() {
        m.insert("conn".into(), id.into());
        m.insert("peer".into(), peer.to_string().into());
        m.insert("state".into(), state.into());
    }
    v
}

/// A connection's counters (or their sum over connections), as JSON.
pub fn counters_json(k: &ConnCounters) -> Value {
    json!({
        "tx_pkts": k.tx_pkts,
        "tx_payload_bytes": k.tx_payload_bytes,
        "retx_pkts": k.retx_pkts,
        "rx_pkts": k.rx_pkts,
        "rx_payload_bytes": k.rx_payload_bytes,
        "rx_duplicates": k.rx_duplicates,
        "rx_not_open": k.rx_not_open,
        "rx_bad_path": k.rx_bad_path,
        "rx_out_of_window": k.rx_out_of_window,
        "acks_sent": k.acks_sent,
        "acks_received": k.acks_received,
        "sack_holes": k.sack_holes,
        "time_losses": k.time_losses,
        "rtos": k.rtos,
        "acks_redundant": k.acks_redundant,
        "rx_ack_holds_long": k.rx_ack_holds_long,
        "rx_ack_hold_max_ns": k.rx_ack_hold_max_ns,
        "ecn_ce_received": k.ecn_ce_received,
        "nacks_sent": k.nacks_sent,
        "nacks_received": k.nacks_received,
        "remote_access_refused": k.remote_access_refused,
        "rnr_waits": k.rnr_waits,
        "messages_completed_tx": k.messages_completed_tx,
        "messages_completed_rx": k.messages_completed_rx,
        "path_failures": k.path_failures,
        "rx_acks_bogus": k.rx_acks_bogus,
        "rx_acks_stale": k.rx_acks_stale,
        "rx_nacks_ignored": k.rx_nacks_ignored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roce_counters_by_name() {
        let c = ferroce_transport::roce::RoceCounters {
            rx_pkts: 7,
            rnr_naks_sent: 2,
            ..Default::default()
        };
        let v = roce_json(&c);
        assert_eq!(v["rx_pkts"], 7);
        assert_eq!(v["rnr_naks_sent"], 2);
        assert_eq!(v["timeouts"], 0);
        // Every field: as many as the Debug form names.
        let n = format!("{c:?}").matches(':').count();
        assert_eq!(v.as_object().map(|m| m.len()), Some(n));
    }
}
