//! A seeded fault injector for one direction (this kernel has no netem): random and bursty
//! (Gilbert–Elliott) loss, reordering, duplication, corruption and ECN marking, every
//! decision counted. It works on frames, so it sits between the PMD and the engine; ARP frames
//! pass untouched so neighbour resolution is not part of the experiment.

use crate::io::{IoCaps, PacketIo, TxCount};
use crate::net;
use ferroce_dpdk_sys::{Mbuf, Mempool};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::VecDeque;

/// Faults of one direction. All probabilities are per frame, in [0, 1].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaultConfig {
    /// Independent random loss.
    pub loss: f64,
    /// Bursty loss (Gilbert–Elliott): chance per frame to enter the bad state...
    pub burst_enter: f64,
    /// ...and to leave it again (mean burst length 1 / burst_exit frames).
    pub burst_exit: f64,
    /// Loss probability while in the bad state (1.0 when unset and bursts are on).
    pub burst_loss: Option<f64>,
    /// Chance a frame is held back and sent after `reorder_depth` later frames.
    pub reorder: f64,
    /// How many later frames overtake a held one (default 4).
    pub reorder_depth: Option<u32>,
    /// Longest a held frame waits for others to overtake it, in microseconds (default 200).
    pub reorder_max_hold_us: Option<u64>,
    /// Chance a frame is sent twice.
    pub duplicate: f64,
    /// Chance one bit of the frame's UDP payload (or of the frame, if it has none) flips.
    pub corrupt: f64,
    /// Chance an IPv4 frame's ECN field is set to CE (congestion experienced).
    pub ecn_mark: f64,
    /// Seed of this direction's random choices (default: derived from the engine seed).
    pub seed: Option<u64>,
}

impl FaultConfig {
    /// Whether any fault is enabled.
    pub fn active(&self) -> bool {
        self.loss > 0.0
            || self.burst_enter > 0.0
            || self.reorder > 0.0
            || self.duplicate > 0.0
            || self.corrupt > 0.0
            || self.ecn_mark > 0.0
    }

    /// Check ranges; errors name the field (under `prefix`, e.g. "fault.tx").
    pub fn validate(&self, prefix: &str) -> Result<(), String> {
        let probs = [
            ("loss", self.loss),
            ("burst_enter", self.burst_enter),
            ("burst_exit", self.burst_exit),
            ("burst_loss", self.burst_loss.unwrap_or(1.0)),
            ("reorder", self.reorder),
            ("duplicate", self.duplicate),
            ("corrupt", self.corrupt),
            ("ecn_mark", self.ecn_mark),
        ];
        for (k, v) in probs {
            if !(0.0..=1.0).contains(&v) || v.is_nan() {
                return Err(format!(
                    "config field `{prefix}.{k}`: {v} is not a probability in [0, 1] \
                     (1 % loss is 0.01)"
                ));
            }
        }
        if self.burst_enter > 0.0 && self.burst_exit <= 0.0 {
            return Err(format!(
                "config field `{prefix}.burst_exit`: must be > 0 when `{prefix}.burst_enter` is \
                 set (bursts would never end)"
            ));
        }
        if self.reorder_depth == Some(0) {
            return Err(format!(
                "config field `{prefix}.reorder_depth`: must be at least 1"
            ));
        }
        Ok(())
    }
}

/// A change of both directions' faults at `at_s` seconds after the engine's first frame
/// (`[[fault.schedule]]` in the configuration): the injector's settings are otherwise fixed for
/// the engine's life, and a soak wants them to change while its connections stay up. A step's
/// `seed` is not used: the random sequence carries on from the engine's start.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FaultStep {
    pub at_s: f64,
    pub tx: FaultConfig,
    pub rx: FaultConfig,
}

/// Check a schedule: times finite, not negative and in order, every step's settings valid.
pub fn validate_schedule(steps: &[FaultStep]) -> Result<(), String> {
    let mut last = 0.0;
    for (i, s) in steps.iter().enumerate() {
        if !s.at_s.is_finite() || s.at_s < last {
            return Err(format!(
                "config field `fault.schedule[{i}].at_s`: {} must be >= 0 and not before the step                  ahead of it ({last})",
                s.at_s
            ));
        }
        last = s.at_s;
        s.tx.validate(&format!("fault.schedule[{i}].tx"))?;
        s.rx.validate(&format!("fault.schedule[{i}].rx"))?;
    }
    Ok(())
}

/// What the injector did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultCounters {
    pub frames: u64,
    pub dropped_random: u64,
    pub dropped_burst: u64,
    pub bursts: u64,
    pub reordered: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    pub ecn_marked: u64,
    /// Duplicates not made for lack of mbufs.
    pub no_mbuf: u64,
    /// Schedule steps applied (`[[fault.schedule]]`).
    pub changes: u64,
}

/// A small, fast, seeded generator (xorshift64*), deterministic per seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        // splitmix64 of the seed, never 0.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// True with probability p.
    #[inline]
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)) < p
    }

    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }
}

/// The injector of one direction.
pub struct FaultInjector {
    cfg: FaultConfig,
    active: bool,
    rng: Rng,
    bad: bool,
    burst_loss: f64,
    depth: u64,
    max_hold_ns: u64,
    passed: u64,
    held: VecDeque<(Mbuf, u64, u64)>,
    /// Settings still to come: (ns after `t0`, settings), in order.
    schedule: VecDeque<(u64, FaultConfig)>,
    /// The time of the first frame (the schedule's zero).
    t0: Option<u64>,
    pub counters: FaultCounters,
}

impl std::fmt::Debug for FaultInjector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultInjector")
            .field("cfg", &self.cfg)
            .field("counters", &self.counters)
            .finish()
    }
}

impl FaultInjector {
    pub fn new(cfg: &FaultConfig, default_seed: u64) -> Self {
        FaultInjector {
            active: cfg.active(),
            rng: Rng::new(cfg.seed.unwrap_or(default_seed)),
            bad: false,
            burst_loss: cfg.burst_loss.unwrap_or(1.0),
            depth: cfg.reorder_depth.unwrap_or(4) as u64,
            max_hold_ns: cfg.reorder_max_hold_us.unwrap_or(200) * 1000,
            passed: 0,
            held: VecDeque::new(),
            schedule: VecDeque::new(),
            t0: None,
            counters: FaultCounters::default(),
            cfg: cfg.clone(),
        }
    }

    /// Settings to switch to later: (seconds after the first frame, settings), in order.
    pub fn with_schedule(mut self, steps: impl IntoIterator<Item = (f64, FaultConfig)>) -> Self {
        self.schedule = steps
            .into_iter()
            .map(|(s, c)| ((s.max(0.0) * 1e9) as u64, c))
            .collect();
        self
    }

    /// Replace the settings (the random sequence, the burst state and held frames carry on).
    pub fn set_config(&mut self, cfg: &FaultConfig) {
        self.active = cfg.active();
        self.burst_loss = cfg.burst_loss.unwrap_or(1.0);
        self.depth = cfg.reorder_depth.unwrap_or(4) as u64;
        self.max_hold_ns = cfg.reorder_max_hold_us.unwrap_or(200) * 1000;
        if cfg.burst_enter <= 0.0 {
            self.bad = false;
        }
        self.cfg = cfg.clone();
    }

    /// Apply the schedule's steps that are due at `now` (ns, the engine's clock).
    pub fn advance_schedule(&mut self, now: u64) {
        if self.schedule.is_empty() {
            return;
        }
        let t0 = *self.t0.get_or_insert(now);
        while let Some((at, _)) = self.schedule.front() {
            if now.saturating_sub(t0) < *at {
                break;
            }
            if let Some((_, c)) = self.schedule.pop_front() {
                self.set_config(&c);
                self.counters.changes += 1;
            }
        }
    }

    pub fn active(&self) -> bool {
        self.active
    }

    /// Whether any fault is on now or in a later schedule step (else the layer can be left out).
    pub fn may_fault(&self) -> bool {
        self.active || self.schedule.iter().any(|(_, c)| c.active())
    }

    pub fn config(&self) -> &FaultConfig {
        &self.cfg
    }

    /// Frames held back for reordering.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Decide the fate of one frame: what survives goes to `out` (possibly twice, possibly
    /// later).
    pub fn apply(&mut self, mut m: Mbuf, now: u64, pool: &Mempool, out: &mut Vec<Mbuf>) {
        self.advance_schedule(now);
        if !self.active {
            out.push(m);
            return;
        }
        if is_arp(m.data()) {
            out.push(m);
            return;
        }
        let c = &mut self.counters;
        c.frames += 1;
        if self.cfg.burst_enter > 0.0 {
            if self.bad {
                if self.rng.chance(self.cfg.burst_exit) {
                    self.bad = false;
                }
            } else if self.rng.chance(self.cfg.burst_enter) {
                self.bad = true;
                c.bursts += 1;
            }
            if self.bad && self.rng.chance(self.burst_loss) {
                c.dropped_burst += 1;
                return;
            }
        }
        if self.rng.chance(self.cfg.loss) {
            c.dropped_random += 1;
            return;
        }
        if self.rng.chance(self.cfg.corrupt) {
            let d = m.data_mut();
            let (lo, hi) = if d.len() > net::HDRS_LEN {
                (net::HDRS_LEN, d.len())
            } else {
                (0, d.len())
            };
            if hi > lo {
                let at = lo + self.rng.below(hi - lo);
                d[at] ^= 1 << self.rng.below(8);
                c.corrupted += 1;
            }
        }
        if self.rng.chance(self.cfg.ecn_mark) && net::set_ecn(m.data_mut(), net::ecn::CE) {
            c.ecn_marked += 1;
        }
        if self.rng.chance(self.cfg.duplicate) {
            match pool.alloc() {
                Some(mut d) => {
                    let n = m.len();
                    d.room_mut()[..n].copy_from_slice(m.data());
                    d.set_len(n);
                    self.counters.duplicated += 1;
                    self.pass(d, out);
                }
                None => self.counters.no_mbuf += 1,
            }
        }
        if self.rng.chance(self.cfg.reorder) {
            self.counters.reordered += 1;
            self.held
                .push_back((m, self.passed, now.saturating_add(self.max_hold_ns)));
            return;
        }
        self.pass(m, out);
    }

    fn pass(&mut self, m: Mbuf, out: &mut Vec<Mbuf>) {
        out.push(m);
        self.passed += 1;
        while let Some((_, at, _)) = self.held.front() {
            if self.passed - at >= self.depth {
                let (h, _, _) = self.held.pop_front().expect("front exists");
                out.push(h);
            } else {
                break;
            }
        }
    }

    /// Release held frames whose hold time is over (call once per loop).
    pub fn flush_expired(&mut self, now: u64, out: &mut Vec<Mbuf>) {
        while let Some((_, _, deadline)) = self.held.front() {
            if *deadline <= now {
                let (h, _, _) = self.held.pop_front().expect("front exists");
                out.push(h);
            } else {
                break;
            }
        }
    }

    /// Release everything held (at shutdown).
    pub fn flush_all(&mut self, out: &mut Vec<Mbuf>) {
        out.extend(self.held.drain(..).map(|(m, _, _)| m));
    }
}

/// The injectors of both directions around any [`PacketIo`]: received frames pass the
/// receive injector after `inner` hands them up, sent frames the send injector before they
/// go down. Frames the device did not take stay in the caller's queue and are not faulted a
/// second time when offered again.
pub struct FaultIo {
    inner: Box<dyn PacketIo>,
    tx: FaultInjector,
    rx: FaultInjector,
    /// Duplicates are copies in fresh mbufs from here.
    pool: Mempool,
    rx_stage: Vec<Mbuf>,
    tx_stage: Vec<Mbuf>,
    /// The first `carried` frames of the caller's transmit queue passed the injector already.
    carried: usize,
}

impl FaultIo {
    pub fn new(
        inner: Box<dyn PacketIo>,
        tx: FaultInjector,
        rx: FaultInjector,
        pool: Mempool,
    ) -> Self {
        FaultIo {
            inner,
            tx,
            rx,
            pool,
            rx_stage: Vec::new(),
            tx_stage: Vec::new(),
            carried: 0,
        }
    }
}

impl PacketIo for FaultIo {
    fn rx_burst(&mut self, now: u64, out: &mut Vec<Mbuf>, max: u16) -> usize {
        let before = out.len();
        self.inner.rx_burst(now, &mut self.rx_stage, max);
        for m in self.rx_stage.drain(..) {
            self.rx.apply(m, now, &self.pool, out);
        }
        self.rx.flush_expired(now, out);
        out.len() - before
    }

    fn tx_burst(&mut self, now: u64, pkts: &mut Vec<Mbuf>) -> TxCount {
        let keep = self.carried.min(pkts.len());
        for m in pkts.drain(keep..) {
            self.tx.apply(m, now, &self.pool, &mut self.tx_stage);
        }
        pkts.append(&mut self.tx_stage);
        self.tx.flush_expired(now, pkts);
        let sent = self.inner.tx_burst(now, pkts);
        self.carried = pkts.len();
        sent
    }

    fn caps(&self) -> IoCaps {
        self.inner.caps()
    }

    fn link_up(&self) -> bool {
        self.inner.link_up()
    }

    fn stats(&self, out: &mut Map<String, Value>) {
        let j = |c: &FaultCounters| serde_json::to_value(c).unwrap_or(Value::Null);
        out.insert("fault_tx".into(), j(&self.tx.counters));
        out.insert("fault_rx".into(), j(&self.rx.counters));
        self.inner.stats(out);
    }

    fn release(&mut self, out: &mut Vec<Mbuf>) {
        self.tx.flush_all(out);
        self.inner.release(out);
    }

    fn flush(&mut self) {
        self.inner.flush();
    }
}

fn is_arp(f: &[u8]) -> bool {
    f.len() >= net::ETH_LEN && u16::from_be_bytes([f[12], f[13]]) == net::ETHERTYPE_ARP
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_seeded_and_fair() {
        let mut a = Rng::new(5);
        let mut b = Rng::new(5);
        let hits = (0..100_000).filter(|_| a.chance(0.1)).count();
        let hits_b = (0..100_000).filter(|_| b.chance(0.1)).count();
        assert_eq!(hits, hits_b);
        assert!((9_000..11_000).contains(&hits), "{hits}");
    }

    #[test]
    fn the_schedule_switches_settings_at_its_times() {
        let lossy = FaultConfig {
            loss: 0.5,
            ..Default::default()
        };
        let mut f = FaultInjector::new(&FaultConfig::default(), 1)
            .with_schedule([(1.0, lossy.clone()), (2.5, FaultConfig::default())]);
        assert!(!f.active());
        // The first frame at t = 7 s is the schedule's zero.
        f.advance_schedule(7_000_000_000);
        assert!(!f.active() && f.counters.changes == 0);
        f.advance_schedule(7_999_999_999);
        assert!(!f.active());
        f.advance_schedule(8_000_000_000);
        assert!(f.active() && f.config() == &lossy && f.counters.changes == 1);
        // Late: both due steps at once, the last one wins.
        let mut g = FaultInjector::new(&FaultConfig::default(), 1)
            .with_schedule([(1.0, lossy.clone()), (2.5, FaultConfig::default())]);
        g.advance_schedule(0);
        g.advance_schedule(3_000_000_000);
        assert!(!g.active() && g.counters.changes == 2);
        f.advance_schedule(9_499_999_999);
        assert!(f.active());
        f.advance_schedule(9_500_000_000);
        assert!(!f.active());
    }

    #[test]
    fn a_schedule_out_of_order_or_out_of_range_is_refused() {
        let step = |at_s: f64, loss: f64| FaultStep {
            at_s,
            tx: FaultConfig {
                loss,
                ..Default::default()
            },
            rx: FaultConfig::default(),
        };
        assert!(validate_schedule(&[step(0.0, 0.1), step(5.0, 0.0)]).is_ok());
        let e = validate_schedule(&[step(5.0, 0.1), step(4.0, 0.0)]).unwrap_err();
        assert!(e.contains("fault.schedule[1].at_s"), "{e}");
        let e = validate_schedule(&[step(1.0, 2.0)]).unwrap_err();
        assert!(e.contains("fault.schedule[0].tx.loss"), "{e}");
        assert!(validate_schedule(&[step(f64::NAN, 0.0)]).is_err());
    }

    #[test]
    fn validation_names_the_field() {
        let c = FaultConfig {
            loss: 1.5,
            ..Default::default()
        };
        let e = c.validate("fault.tx").unwrap_err();
        assert!(e.contains("fault.tx.loss"), "{e}");
        let c = FaultConfig {
            burst_enter: 0.01,
            ..Default::default()
        };
        assert!(c
            .validate("fault.rx")
            .unwrap_err()
            .contains("fault.rx.burst_exit"));
    }
}
