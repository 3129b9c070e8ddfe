//! Rates over time, from delivered bytes sampled on a fixed time grid.
//!
//! While a scenario runs, the receiver's per-connection counters of new payload bytes (what the
//! transport accepted, duplicates excluded) are read every `dt` ns, so each source's deliveries
//! are known to within `dt`. Two views of a source's rate over a window:
//! - **raw**: the bytes delivered inside the window;
//! - **fluid**: each delivery's bytes spread evenly over the interval since the same source's
//!   previous delivery (the first one since the source started). A source getting one packet
//!   every 21 µs has a fluid rate of one packet per 21 µs in every window, where its raw rate in
//!   1-RTT windows would jump between 0 and a full packet. This is what makes per-sender shares
//!   below one packet per RTT measurable (64 senders of 4 KiB packets sharing 100 Gb/s get 0.66
//!   packet per 14 µs RTT each).

use ferroce_harness::NodeHost;
use ferroce_sim::{HostId, Node, Sim, SwitchId};
use ferroce_transport::ConnId;
use std::collections::HashMap;
use std::net::Ipv4Addr;

/// Deliveries of several sources, sampled every `dt` ns from `t0`.
#[derive(Clone, Debug)]
pub struct DeliveryLog {
    pub t0: u64,
    pub dt: u64,
    /// Samples taken; sample `g` covers `(t0 + (g-1) dt, t0 + g dt]`.
    pub samples: usize,
    /// Per source: (sample index, bytes delivered in that sample), in order.
    pub arrivals: Vec<Vec<(u32, u64)>>,
    /// Per source: the sample index its fluid deliveries start from (its start time).
    pub origin: Vec<u32>,
}

impl DeliveryLog {
    pub fn new(sources: usize, t0: u64, dt: u64) -> Self {
        DeliveryLog {
            t0,
            dt: dt.max(1),
            samples: 1,
            arrivals: vec![Vec::new(); sources],
            origin: vec![0; sources],
        }
    }

    /// Sample index of time `t` (rounded down; times before `t0` give 0).
    pub fn index_of(&self, t: u64) -> usize {
        (t.saturating_sub(self.t0) / self.dt) as usize
    }

    pub fn time_of(&self, g: usize) -> u64 {
        self.t0 + g as u64 * self.dt
    }

    /// Source `s` starts sending at time `t` (its first fluid delivery spreads back to there).
    pub fn set_origin(&mut self, s: usize, t: u64) {
        self.origin[s] = self.index_of(t) as u32;
    }

    /// Cumulative raw bytes of source `s` at the end of every sample (length `samples`).
    pub fn raw_cumulative(&self, s: usize) -> Vec<f64> {
        let mut out = vec![0.0; self.samples];
        let mut acc = 0.0;
        let mut it = self.arrivals[s].iter().peekable();
        for (g, o) in out.iter_mut().enumerate() {
            while let Some(&&(gi, b)) = it.peek() {
                if gi as usize > g {
                    break;
                }
                acc += b as f64;
                it.next();
            }
            *o = acc;
        }
        out
    }

    /// Cumulative fluid bytes of source `s` at the end of every sample (length `samples`).
    pub fn fluid_cumulative(&self, s: usize) -> Vec<f64> {
        let mut out = vec![0.0; self.samples];
        let mut prev_g = self.origin[s] as usize;
        let mut acc = 0.0;
        for &(gi, b) in &self.arrivals[s] {
            let gi = gi as usize;
            let span = gi.saturating_sub(prev_g).max(1);
            let start = gi + 1 - span;
            for (k, g) in (start..=gi.min(self.samples - 1)).enumerate() {
                out[g] = acc + b as f64 * (k + 1) as f64 / span as f64;
            }
            acc += b as f64;
            prev_g = gi;
        }
        // Flat between and after deliveries: carry the running total forward.
        let mut last = 0.0f64;
        for (g, o) in out.iter_mut().enumerate() {
            let _ = g;
            if *o < last {
                *o = last;
            }
            last = *o;
        }
        out
    }

    /// Total bytes of every source (raw), per sample, cumulative.
    pub fn aggregate_cumulative(&self) -> Vec<f64> {
        let mut out = vec![0.0; self.samples];
        for a in &self.arrivals {
            for &(g, b) in a {
                if (g as usize) < self.samples {
                    out[g as usize] += b as f64;
                }
            }
        }
        let mut acc = 0.0;
        for o in out.iter_mut() {
            acc += *o;
            *o = acc;
        }
        out
    }
}

/// Bytes of a cumulative series in the window of `w` samples ending at sample `g`.
pub fn window(cum: &[f64], g: usize, w: usize) -> f64 {
    let a = if g >= w { cum[g - w] } else { 0.0 };
    cum[g] - a
}

/// The first sample `g` in `from..` such that `cond` holds for every sample in `g..=g + hold`
/// (all of which must exist before `end`).
pub fn first_stable(
    from: usize,
    end: usize,
    hold: usize,
    mut cond: impl FnMut(usize) -> bool,
) -> Option<usize> {
    let mut run_start: Option<usize> = None;
    for g in from..end {
        if cond(g) {
            let s = *run_start.get_or_insert(g);
            if g - s >= hold {
                return Some(s);
            }
        } else {
            run_start = None;
        }
    }
    None
}

/// The first sample `g` in `from..end` after which `cond` holds up to `end` (exclusive):
/// `cond` is false at `g - 1` (or `g == from`) and true on `g..end`. `None` if it is false at
/// `end - 1`.
pub fn stays_from(from: usize, end: usize, mut cond: impl FnMut(usize) -> bool) -> Option<usize> {
    let mut last_false: Option<usize> = None;
    for g in from..end {
        if !cond(g) {
            last_false = Some(g);
        }
    }
    match last_false {
        None => Some(from),
        Some(l) if l + 1 < end => Some(l + 1),
        _ => None,
    }
}

/// Jain's fairness index of `x`: (Σx)² / (n Σx²), 1 when all are equal.
pub fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let q: f64 = x.iter().map(|v| v * v).sum();
    if q == 0.0 {
        return 0.0;
    }
    s * s / (x.len() as f64 * q)
}

/// Reads the receiver's per-connection delivered bytes into a [`DeliveryLog`]: sources are the
/// client hosts, known by address.
#[derive(Debug)]
pub struct Sampler {
    pub receiver: HostId,
    by_ip: HashMap<Ipv4Addr, usize>,
    last: HashMap<ConnId, u64>,
    pub log: DeliveryLog,
    /// The switch output port watched by [`Sampler::watch_queue_to`], and its occupancy in
    /// wire bytes at every sample (empty when nothing is watched).
    queue_port: Option<(SwitchId, usize)>,
    pub queue: Vec<u64>,
}

impl Sampler {
    pub fn new(receiver: HostId, sources: &[Ipv4Addr], t0: u64, dt: u64) -> Self {
        Sampler {
            receiver,
            by_ip: sources.iter().enumerate().map(|(i, ip)| (*ip, i)).collect(),
            last: HashMap::new(),
            log: DeliveryLog::new(sources.len(), t0, dt),
            queue_port: None,
            queue: Vec::new(),
        }
    }

    /// Also record, at every sample, the queue of the switch port that feeds `host`'s first
    /// NIC port (an incast's bottleneck). Returns false if the host hangs on no switch.
    pub fn watch_queue_to(&mut self, sim: &Sim<NodeHost>, host: HostId) -> bool {
        let Some(link) = sim.host_port_link(host, 0) else {
            return false;
        };
        let Some((a, b)) = sim.link_ends(link) else {
            return false;
        };
        let sw = match (a, b) {
            (Node::Switch(sw), _) | (_, Node::Switch(sw)) => sw,
            _ => return false,
        };
        let Some(port) = sim.switch_links(sw).iter().position(|&l| l == link) else {
            return false;
        };
        self.queue_port = Some((sw, port));
        true
    }

    /// Record what arrived since the last sample (call at `t0 + k dt`, k = 1, 2, ...).
    pub fn sample(&mut self, sim: &Sim<NodeHost>) {
        let g = self.log.samples as u32;
        if let Some(ep) = sim.host(self.receiver).native() {
            for c in ep.connections() {
                let Some(&src) = self.by_ip.get(&c.peer) else {
                    continue;
                };
                let now = c.counters().rx_payload_bytes;
                let prev = self.last.insert(c.id, now).unwrap_or(0);
                if now > prev {
                    self.log.arrivals[src].push((g, now - prev));
                }
            }
        }
        if let Some((sw, port)) = self.queue_port {
            self.queue.push(sim.switch_queue_bytes(sw, port));
        }
        self.log.samples += 1;
    }

    /// Runs the simulation to `until`, sampling every `dt`.
    pub fn run_until(&mut self, sim: &mut Sim<NodeHost>, until: u64) {
        loop {
            let next = self.log.time_of(self.log.samples);
            if next > until {
                break;
            }
            sim.run_until(next);
            self.sample(sim);
        }
    }

    /// Runs until `done` holds (checked at every sample) or `limit`.
    pub fn run_while(
        &mut self,
        sim: &mut Sim<NodeHost>,
        limit: u64,
        mut done: impl FnMut(&Sim<NodeHost>) -> bool,
    ) -> bool {
        loop {
            if done(sim) {
                return true;
            }
            let next = self.log.time_of(self.log.samples);
            if next > limit {
                return false;
            }
            sim.run_until(next);
            self.sample(sim);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fluid_spreads_each_delivery_back_to_the_previous_one() {
        let mut log = DeliveryLog::new(1, 0, 10);
        log.samples = 11;
        log.arrivals[0] = vec![(4, 400), (8, 400)];
        let f = log.fluid_cumulative(0);
        assert_eq!(f[0], 0.0);
        assert_eq!(f[1], 100.0);
        assert_eq!(f[4], 400.0);
        assert_eq!(f[6], 600.0);
        assert_eq!(f[8], 800.0);
        assert_eq!(f[10], 800.0);
        let r = log.raw_cumulative(0);
        assert_eq!((r[3], r[4], r[10]), (0.0, 400.0, 800.0));
        assert_eq!(window(&f, 6, 4), 400.0);
    }

    #[test]
    fn stability_helpers() {
        let v = [false, true, false, true, true, true, false];
        assert_eq!(first_stable(0, v.len(), 1, |g| v[g]), Some(3));
        assert_eq!(first_stable(0, v.len(), 3, |g| v[g]), None);
        assert_eq!(stays_from(0, 6, |g| v[g]), Some(3));
        assert_eq!(stays_from(0, 7, |g| v[g]), None);
        assert!((jain(&[1.0, 1.0]) - 1.0).abs() < 1e-12);
        assert!((jain(&[1.0, 0.0]) - 0.5).abs() < 1e-12);
    }
}
