//! Per-link-direction fault injection settings.

use crate::Nanos;

/// Two-state Gilbert–Elliott burst-loss model. Per packet the state first moves (good→bad with
/// `p_good_to_bad`, bad→good with `p_bad_to_good`), then the packet is lost with the loss
/// probability of the new state. The mean stay in the bad state is `1 / p_bad_to_good` packets,
/// so with `loss_in_bad = 1` the mean loss burst is about that long.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GilbertElliott {
    /// Probability per packet of entering the bad state.
    pub p_good_to_bad: f64,
    /// Probability per packet of leaving the bad state.
    pub p_bad_to_good: f64,
    /// Loss probability while bad.
    pub loss_in_bad: f64,
    /// Loss probability while good.
    pub loss_in_good: f64,
}

impl GilbertElliott {
    /// The simple Gilbert model: everything lost while bad, nothing while good.
    pub fn bursts(p_good_to_bad: f64, p_bad_to_good: f64) -> Self {
        GilbertElliott {
            p_good_to_bad,
            p_bad_to_good,
            loss_in_bad: 1.0,
            loss_in_good: 0.0,
        }
    }

    /// Long-run loss rate of the model (stationary distribution), for choosing parameters.
    pub fn mean_loss(&self) -> f64 {
        let denom = self.p_good_to_bad + self.p_bad_to_good;
        if denom.is_nan() || denom <= 0.0 {
            return self.loss_in_good;
        }
        let pi_bad = self.p_good_to_bad / denom;
        pi_bad * self.loss_in_bad + (1.0 - pi_bad) * self.loss_in_good
    }
}

/// Faults applied to every packet sent in one direction of a link. All probabilities are per
/// packet; values `<= 0` (or NaN) disable a fault and values `>= 1` make it certain.
///
/// Order of application to a packet: burst loss, random loss, corruption, random ECN mark,
/// reordering delay, duplication.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FaultConfig {
    /// Independent random drop probability.
    pub loss: f64,
    /// Optional correlated (bursty) loss on top of `loss`.
    pub burst: Option<GilbertElliott>,
    /// Probability that a packet is held back by `reorder_delay` (so later packets overtake it).
    pub reorder: f64,
    /// Extra delay given to a reordered packet.
    pub reorder_delay: Nanos,
    /// Probability that a packet is delivered twice.
    pub duplicate: f64,
    /// Probability that one random payload bit is flipped.
    pub corrupt: f64,
    /// Probability that an ECT packet is marked CE.
    pub ecn_mark: f64,
}

impl FaultConfig {
    /// No faults.
    pub const NONE: FaultConfig = FaultConfig {
        loss: 0.0,
        burst: None,
        reorder: 0.0,
        reorder_delay: 0,
        duplicate: 0.0,
        corrupt: 0.0,
        ecn_mark: 0.0,
    };

    /// Only independent random loss with probability `p`.
    pub fn loss(p: f64) -> Self {
        FaultConfig {
            loss: p,
            ..FaultConfig::NONE
        }
    }

    /// True when no fault can ever fire, so the fast path can skip every random draw.
    pub fn is_clean(&self) -> bool {
        let off = |p: f64| p.is_nan() || p <= 0.0;
        let burst_off = match &self.burst {
            None => true,
            Some(ge) => off(ge.loss_in_good) && (off(ge.loss_in_bad) || off(ge.p_good_to_bad)),
        };
        off(self.loss)
            && burst_off
            && off(self.reorder)
            && off(self.duplicate)
            && off(self.corrupt)
            && off(self.ecn_mark)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_detection() {
        assert!(FaultConfig::NONE.is_clean());
        assert!(FaultConfig::default().is_clean());
        assert!(!FaultConfig::loss(0.01).is_clean());
        assert!(FaultConfig::loss(f64::NAN).is_clean());
        let f = FaultConfig {
            burst: Some(GilbertElliott::bursts(0.0, 0.5)),
            ..FaultConfig::NONE
        };
        assert!(f.is_clean());
        let f = FaultConfig {
            burst: Some(GilbertElliott::bursts(0.01, 0.5)),
            ..FaultConfig::NONE
        };
        assert!(!f.is_clean());
    }

    #[test]
    fn ge_mean_loss() {
        let ge = GilbertElliott::bursts(0.01, 0.25);
        assert!((ge.mean_loss() - 0.01 / 0.26).abs() < 1e-12);
        assert_eq!(GilbertElliott::bursts(0.0, 0.0).mean_loss(), 0.0);
    }
}
