//! `[adaptive_routing]`: spec defaults, clamping with warnings, and the
//! refusals.

use rolter_balancer::AdaptivePolicy;

use super::*;

#[test]
fn adaptive_routing_defaults_to_the_spec_policy() {
    let policy = ok("[adaptive_routing]\n").adaptive_routing;
    assert_eq!(
        policy,
        AdaptivePolicy {
            enabled: false,
            latency_weight: 1.0,
            cost_weight: 0.5,
            load_weight: 0.25,
            exploration_ratio: 0.05,
            min_samples: 50,
        }
    );
}

#[test]
fn adaptive_routing_is_taken_as_written_within_bounds() {
    let config = ok("[adaptive_routing]\nenabled = true\nlatency_weight = 0\ncost_weight = 2\nload_weight = 0.5\nexploration_ratio = 0.5\nmin_samples = 0\n");
    assert_eq!(
        config.adaptive_routing,
        AdaptivePolicy {
            enabled: true,
            latency_weight: 0.0,
            cost_weight: 2.0,
            load_weight: 0.5,
            exploration_ratio: 0.5,
            min_samples: 0,
        }
    );
    assert!(config.warnings.is_empty());
}

#[test]
fn negative_adaptive_weights_become_zero_with_a_warning() {
    let text = "[adaptive_routing]\nenabled = true\nlatency_weight = -1.5\ncost_weight = -0.25\n";
    let config = ok(text);
    assert_eq!(config.adaptive_routing.latency_weight, 0.0);
    assert_eq!(config.adaptive_routing.cost_weight, 0.0);
    assert_eq!(config.adaptive_routing.load_weight, 0.25);
    let got: Vec<String> = config.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(
        got,
        [
            "conf/rolter.toml:3: adaptive_routing.latency_weight: -1.5 is negative; using 0 (negative weights become zero)",
            "conf/rolter.toml:4: adaptive_routing.cost_weight: -0.25 is negative; using 0 (negative weights become zero)",
        ]
    );
}

#[test]
fn exploration_ratio_is_clamped_to_at_most_half_with_a_warning() {
    let text = "[adaptive_routing]\nexploration_ratio = 0.8\n";
    let warning = only_warning(text);
    assert_eq!(
        warning.to_string(),
        "conf/rolter.toml:2: adaptive_routing.exploration_ratio: 0.8 is above 0.5; using 0.5 (exploration never exceeds half the traffic)"
    );
    assert_eq!(ok(text).adaptive_routing.exploration_ratio, 0.5);

    let text = "[adaptive_routing]\nexploration_ratio = -0.1\n";
    let warning = only_warning(text);
    assert_eq!(field(&warning), "adaptive_routing.exploration_ratio");
    assert_eq!(
        warning.message,
        "-0.1 is negative; using 0 (no exploration)"
    );
    assert_eq!(ok(text).adaptive_routing.exploration_ratio, 0.0);
}

#[test]
fn enabled_with_every_weight_zero_is_refused() {
    // Written as zero, or clamped to it: the blend has nothing to rank by.
    for weights in [
        "latency_weight = 0\ncost_weight = 0\nload_weight = 0\n",
        "latency_weight = -1\ncost_weight = 0.0\nload_weight = -0.0\n",
    ] {
        let text = format!("[adaptive_routing]\nenabled = true\n{weights}");
        let error = only_error(&text);
        assert_eq!(field(&error), "adaptive_routing.enabled");
        assert_eq!(error.line, Some(2));
        assert!(
            error
                .message
                .ends_with("stopping adaptive routing is what enabled = false is for"),
            "{error}"
        );
        // Switched off, the same weights are only clamped.
        let off = text.replace("enabled = true", "enabled = false");
        assert!(!ok(&off).adaptive_routing.enabled);
    }
}

#[test]
fn non_finite_adaptive_numbers_are_errors() {
    let text = "[adaptive_routing]\nenabled = true\nlatency_weight = nan\ncost_weight = -inf\nload_weight = 0\nexploration_ratio = inf\n";
    let errors = errors(text);
    let got: Vec<(&str, Option<usize>, &str)> = errors
        .iter()
        .map(|e| (field(e), e.line, e.message.as_str()))
        .collect();
    // No all-zero refusal on top: the blend cannot be judged.
    assert_eq!(
        got,
        [
            (
                "adaptive_routing.latency_weight",
                Some(3),
                "must be a finite number (got NaN)"
            ),
            (
                "adaptive_routing.cost_weight",
                Some(4),
                "must be a finite number (got -inf)"
            ),
            (
                "adaptive_routing.exploration_ratio",
                Some(6),
                "must be a finite number (got inf)"
            ),
        ]
    );
}

#[test]
fn min_samples_is_a_non_negative_integer() {
    let error = only_error("[adaptive_routing]\nmin_samples = -1\n");
    assert_eq!(field(&error), "adaptive_routing.min_samples");
    assert_eq!(error.line, Some(2));
    assert_eq!(
        ok("[adaptive_routing]\nmin_samples = 7\n")
            .adaptive_routing
            .min_samples,
        7
    );
}
