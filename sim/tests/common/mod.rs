//! Test hosts shared by the integration tests.
#![allow(dead_code)]

use ferroce_sim::{Datagram, Ecn, Host, Nanos};

/// One stream of datagrams a [`TestHost`] sends.
#[derive(Clone, Debug)]
pub struct Flow {
    pub dst: [u8; 4],
    pub src_port: u16,
    pub dst_port: u16,
    pub count: u64,
    pub payload: usize,
    pub ecn: Ecn,
}

impl Flow {
    pub fn new(dst: [u8; 4], src_port: u16, count: u64, payload: usize) -> Self {
        Flow {
            dst,
            src_port,
            dst_port: ferroce_sim::ROCEV2_PORT,
            count,
            payload,
            ecn: Ecn::NotEct,
        }
    }

    pub fn ect(mut self) -> Self {
        self.ecn = Ecn::Ect0;
        self
    }
}

/// What a [`TestHost`] saw arrive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arrival {
    pub t: Nanos,
    pub port: usize,
    pub src_ip: [u8; 4],
    pub src_port: u16,
    pub seq: u64,
    pub ecn: Ecn,
    pub len: usize,
    /// Payload still matches the pattern the sender wrote.
    pub intact: bool,
    /// Number of payload bits that differ from the pattern.
    pub flipped_bits: u32,
}

/// Payload byte `i` of packet `seq` (after the 8-byte sequence number).
fn pattern(seq: u64, i: usize) -> u8 {
    (seq as u8).wrapping_mul(31) ^ (i as u8).wrapping_mul(7) ^ 0x5a
}

pub fn make_payload(seq: u64, len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len];
    let n = len.min(8);
    p[..n].copy_from_slice(&seq.to_le_bytes()[..n]);
    for (i, b) in p.iter_mut().enumerate().skip(8) {
        *b = pattern(seq, i);
    }
    p
}

/// A host that sends its flows (round-robin, as fast as the NIC takes them, from `start_at`) and
/// records every arrival.
#[derive(Clone, Debug)]
pub struct TestHost {
    pub ip: [u8; 4],
    pub flows: Vec<Flow>,
    pub sent_per_flow: Vec<u64>,
    cursor: usize,
    pub start_at: Nanos,
    started: bool,
    pub sent: u64,
    pub arrivals: Vec<Arrival>,
    pub timeouts: Vec<Nanos>,
    /// Record arrivals (off in big tests to save memory; `received` still counts).
    pub record: bool,
    pub received: u64,
}

impl TestHost {
    pub fn new(ip: [u8; 4]) -> Self {
        TestHost {
            ip,
            flows: Vec::new(),
            sent_per_flow: Vec::new(),
            cursor: 0,
            start_at: 0,
            started: false,
            sent: 0,
            arrivals: Vec::new(),
            timeouts: Vec::new(),
            record: true,
            received: 0,
        }
    }

    pub fn add_flow(&mut self, f: Flow) {
        self.flows.push(f);
        self.sent_per_flow.push(0);
    }

    pub fn with_flow(mut self, f: Flow) -> Self {
        self.add_flow(f);
        self
    }

    pub fn starting_at(mut self, t: Nanos) -> Self {
        self.start_at = t;
        self
    }

    pub fn has_work(&self) -> bool {
        self.flows
            .iter()
            .zip(&self.sent_per_flow)
            .any(|(f, &s)| s < f.count)
    }

    pub fn total_to_send(&self) -> u64 {
        self.flows.iter().map(|f| f.count).sum()
    }
}

impl Host for TestHost {
    fn handle_datagram(&mut self, now: Nanos, port: usize, d: Datagram) {
        self.received += 1;
        if !self.record {
            return;
        }
        let mut seq_bytes = [0u8; 8];
        let n = d.payload.len().min(8);
        seq_bytes[..n].copy_from_slice(&d.payload[..n]);
        let seq = u64::from_le_bytes(seq_bytes);
        let flipped: u32 = d
            .payload
            .iter()
            .enumerate()
            .skip(8)
            .map(|(i, &b)| (b ^ pattern(seq, i)).count_ones())
            .sum();
        self.arrivals.push(Arrival {
            t: now,
            port,
            src_ip: d.src_ip,
            src_port: d.src_port,
            seq,
            ecn: d.ecn,
            len: d.payload.len(),
            intact: flipped == 0,
            flipped_bits: flipped,
        });
    }

    fn poll_transmit(&mut self, now: Nanos) -> Option<Datagram> {
        if now < self.start_at || self.flows.is_empty() {
            return None;
        }
        self.started = true;
        let n = self.flows.len();
        for k in 0..n {
            let i = (self.cursor + k) % n;
            if self.sent_per_flow[i] < self.flows[i].count {
                let f = &self.flows[i];
                let seq = self.sent_per_flow[i];
                self.sent_per_flow[i] += 1;
                self.cursor = (i + 1) % n;
                self.sent += 1;
                return Some(Datagram {
                    src_ip: self.ip,
                    dst_ip: f.dst,
                    src_port: f.src_port,
                    dst_port: f.dst_port,
                    ecn: f.ecn,
                    payload: make_payload(seq, f.payload),
                });
            }
        }
        None
    }

    fn poll_timeout(&mut self) -> Option<Nanos> {
        if !self.started && self.has_work() {
            Some(self.start_at)
        } else {
            None
        }
    }

    fn handle_timeout(&mut self, now: Nanos) {
        self.timeouts.push(now);
        if now >= self.start_at {
            self.started = true;
        }
    }
}
