//! `[adaptive_routing]`: the deployment-wide policy of the `adaptive`
//! strategy.
//!
//! docs/design/balancer.md, "adaptive": "Operator input is clamped on the way in: negative
//! weights become zero and exploration never exceeds half the traffic." A
//! clamp is not an error (the control-plane API accepts the same input), but
//! the value used is not the value written, so each clamp is a warning that
//! names it. What cannot be clamped into meaning is an error: a non-finite
//! number, and a switched-on blend with every weight zero, which the API
//! refuses too ("stopping adaptive routing is what enabled = false is for").

use rolter_balancer::AdaptivePolicy;

use super::super::file;
use super::Validator;

impl Validator<'_> {
    pub(super) fn adaptive_routing(&mut self, table: file::AdaptiveRoutingTable) -> AdaptivePolicy {
        let defaults = AdaptivePolicy::default();
        let enabled = table.enabled.unwrap_or(defaults.enabled);
        let latency_weight = self.blend_weight(
            "latency_weight",
            table.latency_weight,
            defaults.latency_weight,
        );
        let cost_weight = self.blend_weight("cost_weight", table.cost_weight, defaults.cost_weight);
        let load_weight = self.blend_weight("load_weight", table.load_weight, defaults.load_weight);
        let exploration_ratio =
            self.exploration_ratio(table.exploration_ratio, defaults.exploration_ratio);

        // A non-finite weight has its own error; judging the blend without
        // it would only add noise.
        if let (true, Some(latency), Some(cost), Some(load)) =
            (enabled, latency_weight, cost_weight, load_weight)
        {
            if latency == 0.0 && cost == 0.0 && load == 0.0 {
                self.error(
                    "adaptive_routing.enabled",
                    "enabled = true needs at least one of latency_weight, cost_weight and load_weight above zero (after clamping), or the blend has nothing to rank by; stopping adaptive routing is what enabled = false is for",
                );
            }
        }

        let policy = AdaptivePolicy {
            enabled,
            latency_weight: latency_weight.unwrap_or(defaults.latency_weight),
            cost_weight: cost_weight.unwrap_or(defaults.cost_weight),
            load_weight: load_weight.unwrap_or(defaults.load_weight),
            exploration_ratio: exploration_ratio.unwrap_or(defaults.exploration_ratio),
            min_samples: table.min_samples.unwrap_or(defaults.min_samples),
        };
        debug_assert!(
            policy.latency_weight >= 0.0
                && policy.cost_weight >= 0.0
                && policy.load_weight >= 0.0
                && (0.0..=file::MAX_EXPLORATION_RATIO).contains(&policy.exploration_ratio)
        );
        policy
    }

    /// A blend weight: finite (else an error and `None`), negative taken as
    /// zero with a warning.
    fn blend_weight(&mut self, name: &str, written: Option<f64>, default: f64) -> Option<f64> {
        let field = format!("adaptive_routing.{name}");
        let value = self.finite(&field, written.unwrap_or(default))?;
        if value < 0.0 {
            self.warn(
                field,
                format!("{value} is negative; using 0 (negative weights become zero)"),
            );
            return Some(0.0);
        }
        Some(value)
    }

    /// `exploration_ratio`: finite, clamped to [0, 0.5] with a warning.
    fn exploration_ratio(&mut self, written: Option<f64>, default: f64) -> Option<f64> {
        let field = "adaptive_routing.exploration_ratio";
        let value = self.finite(field, written.unwrap_or(default))?;
        let max = file::MAX_EXPLORATION_RATIO;
        if value < 0.0 {
            self.warn(
                field,
                format!("{value} is negative; using 0 (no exploration)"),
            );
            Some(0.0)
        } else if value > max {
            self.warn(
                field,
                format!("{value} is above {max}; using {max} (exploration never exceeds half the traffic)"),
            );
            Some(max)
        } else {
            Some(value)
        }
    }

    /// TOML has `inf` and `nan`; neither means anything as a weight or a
    /// ratio.
    fn finite(&mut self, field: &str, value: f64) -> Option<f64> {
        if value.is_finite() {
            Some(value)
        } else {
            self.error(field, format!("must be a finite number (got {value})"));
            None
        }
    }
}
