//! The adaptive blend: how latency, cost and load become one score.
//!
//! Each component is a ratio to the best candidate: `best / value`, in
//! (0, 1], so the best candidate scores 1 and one twice as slow, dear or
//! loaded scores 0.5, whatever the unit. A ratio rather than a min–max
//! stretch because min–max turns every two-target comparison into 1 vs 0 and
//! makes the policy weights a vote instead of a trade-off; with ratios, a
//! 10 % latency gap is worth 0.1 × `latency_weight`, and a cheaper target
//! wins when its saving outweighs that.
//!
//! Candidates are the eligible targets of the pick (all targets for a
//! report, since eligibility is per attempt). Per component:
//!
//! - latency: the smoothed latency of successful requests. A candidate with
//!   no sample gets 0, no credit: the blend routes on evidence, and evidence
//!   is bought by the warm-up and by exploration, not by assuming a target
//!   nobody has measured is fast (a target that never answers would otherwise
//!   take a permanent share).
//! - cost: the catalog price as one number, input + output per million
//!   tokens (the request's output length is unknown at pick time, so both
//!   count alike). An unpriced target is cost-neutral: it scores the mean
//!   cost score of the priced candidates, so cost orders the priced targets
//!   among themselves and neither rewards nor penalises one whose price is
//!   unknown. With no priced candidate every one scores 1.
//! - load: in-flight requests counted with the one being placed,
//!   `(least + 1) / (in_flight + 1)`, the load scorer's normalization.
//!
//! When no candidate has a signal every candidate gets the same component,
//! which cannot move the argmax.

use crate::AdaptivePolicy;

/// Latency floor, in ms, so a (buggy) zero latency does not divide by zero.
const MIN_LATENCY_MS: f64 = 1.0;

/// Price floor, per million tokens: a hundredth of a currency unit, below
/// which prices compare as equal (and zero, free, stays comparable).
const MIN_PRICE_PER_MTOK: f64 = 0.01;

/// What the blend knows about one candidate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Signals {
    /// Smoothed latency of successful requests, ms.
    pub(super) latency_ms: Option<f64>,
    /// Catalog price, input + output per million tokens.
    pub(super) price: Option<f64>,
    /// In-flight requests.
    pub(super) in_flight: u64,
}

impl Signals {
    /// Signals with an invalid latency (non-finite, negative: a view's bug)
    /// read as unknown.
    pub(super) fn new(latency_ms: Option<f64>, price: Option<f64>, in_flight: u64) -> Self {
        Self {
            latency_ms: latency_ms.filter(|ms| ms.is_finite() && *ms >= 0.0),
            price,
            in_flight,
        }
    }
}

/// A target's price as the blend's one number; `None` (unpriced) also for a
/// price that is negative or not finite, so a catalog bug cannot make a
/// target look free.
pub(super) fn price_number(input_per_mtok: f64, output_per_mtok: f64) -> Option<f64> {
    let sum = input_per_mtok + output_per_mtok;
    (sum.is_finite() && input_per_mtok >= 0.0 && output_per_mtok >= 0.0).then_some(sum)
}

/// The normalized components of one candidate, each in (0, 1] or 0.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Components {
    pub(super) latency: f64,
    pub(super) cost: f64,
    pub(super) load: f64,
}

impl Components {
    /// The blended score under `policy`'s (sanitized, non-negative) weights.
    pub(super) fn score(&self, policy: &AdaptivePolicy) -> f64 {
        policy.latency_weight * self.latency
            + policy.cost_weight * self.cost
            + policy.load_weight * self.load
    }
}

/// The best value of each component over the candidates, accumulated in one
/// pass so a pick allocates nothing.
#[derive(Clone, Copy, Debug)]
pub(super) struct Reference {
    best_latency: f64,
    best_price: f64,
    /// Σ 1 / price over the priced candidates, for the unpriced mean.
    inverse_price_sum: f64,
    priced: u32,
    least_load: u64,
}

impl Reference {
    pub(super) fn new() -> Self {
        Self {
            best_latency: f64::INFINITY,
            best_price: f64::INFINITY,
            inverse_price_sum: 0.0,
            priced: 0,
            least_load: u64::MAX,
        }
    }

    /// Counts one candidate in.
    pub(super) fn add(&mut self, signals: &Signals) {
        if let Some(ms) = signals.latency_ms {
            self.best_latency = self.best_latency.min(ms.max(MIN_LATENCY_MS));
        }
        if let Some(price) = signals.price {
            let price = price.max(MIN_PRICE_PER_MTOK);
            self.best_price = self.best_price.min(price);
            self.inverse_price_sum += 1.0 / price;
            self.priced += 1;
        }
        self.least_load = self.least_load.min(signals.in_flight);
    }

    /// The components of a candidate that was counted in.
    pub(super) fn components(&self, signals: &Signals) -> Components {
        let latency = match signals.latency_ms {
            Some(ms) => self.best_latency / ms.max(MIN_LATENCY_MS),
            None => 0.0,
        };
        let cost = match signals.price {
            Some(price) => self.best_price / price.max(MIN_PRICE_PER_MTOK),
            None => self.unpriced_cost(),
        };
        let load = (self.least_load as f64 + 1.0) / (signals.in_flight as f64 + 1.0);
        let components = Components {
            latency,
            cost,
            load,
        };
        debug_assert!(
            [latency, cost, load]
                .iter()
                .all(|c| (0.0..=1.0 + 1e-12).contains(c)),
            "{components:?} against {self:?}"
        );
        components
    }

    /// An unpriced candidate's cost score: the mean of the priced ones'
    /// (`best · mean(1 / price)`), or 1 when none is priced.
    fn unpriced_cost(&self) -> f64 {
        if self.priced == 0 {
            1.0
        } else {
            (self.best_price * self.inverse_price_sum / f64::from(self.priced)).min(1.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn components(all: &[Signals]) -> Vec<Components> {
        let mut reference = Reference::new();
        all.iter().for_each(|s| reference.add(s));
        all.iter().map(|s| reference.components(s)).collect()
    }

    #[test]
    fn each_component_is_a_ratio_to_the_best_candidate() {
        let got = components(&[
            Signals::new(Some(100.0), Some(4.0), 0),
            Signals::new(Some(200.0), Some(2.0), 3),
        ]);
        assert_eq!(got[0].latency, 1.0);
        assert_eq!(got[1].latency, 0.5);
        assert_eq!(got[0].cost, 0.5);
        assert_eq!(got[1].cost, 1.0);
        assert_eq!(got[0].load, 1.0);
        assert_eq!(got[1].load, 0.25);
    }

    #[test]
    fn unsampled_candidate_gets_no_latency_credit() {
        let got = components(&[
            Signals::new(Some(400.0), None, 0),
            Signals::new(None, None, 0),
            Signals::new(Some(f64::NAN), None, 0),
        ]);
        assert_eq!(got[0].latency, 1.0);
        assert_eq!(got[1].latency, 0.0);
        assert_eq!(got[2].latency, 0.0);
    }

    #[test]
    fn unpriced_candidate_scores_the_mean_of_the_priced_ones() {
        let got = components(&[
            Signals::new(None, Some(1.0), 0),
            Signals::new(None, Some(4.0), 0),
            Signals::new(None, None, 0),
        ]);
        assert_eq!(got[0].cost, 1.0);
        assert_eq!(got[1].cost, 0.25);
        assert_eq!(got[2].cost, 0.625);
    }

    #[test]
    fn all_unpriced_or_one_priced_is_cost_neutral() {
        let none = components(&[Signals::new(None, None, 0), Signals::new(None, None, 0)]);
        assert_eq!(none[0].cost, none[1].cost);
        let one = components(&[
            Signals::new(None, Some(9.0), 0),
            Signals::new(None, None, 0),
        ]);
        assert_eq!(one[0].cost, one[1].cost);
    }

    #[test]
    fn free_and_nearly_free_prices_compare_equal() {
        let got = components(&[
            Signals::new(None, Some(0.0), 0),
            Signals::new(None, Some(0.005), 0),
            Signals::new(None, Some(1.0), 0),
        ]);
        assert_eq!(got[0].cost, 1.0);
        assert_eq!(got[1].cost, 1.0);
        assert!((got[2].cost - 0.01).abs() < 1e-12);
    }

    #[test]
    fn price_number_sums_input_and_output_and_rejects_nonsense() {
        assert_eq!(price_number(3.0, 15.0), Some(18.0));
        assert_eq!(price_number(0.0, 0.0), Some(0.0));
        assert_eq!(price_number(-1.0, 5.0), None);
        assert_eq!(price_number(f64::NAN, 5.0), None);
        assert_eq!(price_number(f64::INFINITY, 5.0), None);
    }

    #[test]
    fn score_weights_the_components() {
        let c = Components {
            latency: 0.5,
            cost: 1.0,
            load: 0.25,
        };
        let policy = AdaptivePolicy {
            latency_weight: 1.0,
            cost_weight: 0.5,
            load_weight: 0.25,
            ..AdaptivePolicy::default()
        };
        assert_eq!(c.score(&policy), 0.5 + 0.5 + 0.0625);
    }
}
