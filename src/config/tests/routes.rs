//! `[[routes]]`: models, strategies, targets, the address collision rule.

use rolter_balancer::StrategyKind;

use super::*;

#[test]
fn route_model_is_required_and_unique() {
    let text = with_providers(
        "[[routes]]\ntargets = [{ provider = \"gpu-a\" }]\n\n[[routes]]\nmodel = \"m\"\ntargets = [{ provider = \"gpu-a\" }]\n\n[[routes]]\nmodel = \"m\"\ntargets = [{ provider = \"gpu-b\" }]\n",
    );
    let errors = errors(&text);
    assert_eq!(errors.len(), 2, "{}", ConfigErrors(errors.clone()));
    assert_eq!(field(&errors[0]), "routes[0].model");
    assert_eq!(errors[0].message, "is required");
    assert_eq!(field(&errors[1]), "routes[2].model");
    assert!(errors[1].message.contains("already routed by routes[1]"));
    assert_eq!(errors[1].line, Some(text.lines().count() - 1));
}

#[test]
fn unknown_strategy_lists_the_known_ones() {
    let text = with_providers(
        "[[routes]]\nmodel = \"m\"\nstrategy = \"fastest\"\ntargets = [{ provider = \"gpu-a\" }]\n",
    );
    let error = only_error(&text);
    assert_eq!(field(&error), "routes[0].strategy");
    assert_eq!(error.line, line(&text, "fastest"));
    assert_eq!(
        error.message,
        "unknown strategy \"fastest\" (known: round_robin, random, power_of_two, weighted, consistent_hash)"
    );
}

#[test]
fn strategies_of_the_spec_not_built_yet_say_so() {
    for name in [
        "cache_aware",
        "pipeline",
        "precise_cache_aware",
        "lmcache_aware",
        "adaptive",
        "predicted_latency",
        "lora_aware",
    ] {
        let text = with_providers(&format!(
            "[[routes]]\nmodel = \"m\"\nstrategy = \"{name}\"\ntargets = [{{ provider = \"gpu-a\" }}]\n"
        ));
        let error = only_error(&text);
        assert_eq!(
            error.message,
            format!("strategy `{name}` is not available in this version yet")
        );
    }
}

#[test]
fn every_known_strategy_is_accepted() {
    for kind in StrategyKind::ALL {
        let text = with_providers(&format!(
            "[[routes]]\nmodel = \"m\"\nstrategy = \"{}\"\ntargets = [{{ provider = \"gpu-a\" }}]\n",
            kind.as_str()
        ));
        assert_eq!(ok(&text).routes[0].strategy, *kind);
    }
}

#[test]
fn targets_are_required_and_not_empty() {
    let text =
        with_providers("[[routes]]\nmodel = \"m\"\n\n[[routes]]\nmodel = \"n\"\ntargets = []\n");
    let errors = errors(&text);
    let got: Vec<(&str, Option<usize>)> = errors.iter().map(|e| (field(e), e.line)).collect();
    assert_eq!(
        got,
        [
            ("routes[0].targets", line(&text, "[[routes]]")),
            ("routes[1].targets", line(&text, "targets = []")),
        ]
    );
}

#[test]
fn unknown_target_provider_lists_the_known_ones() {
    let text = with_providers(
        "[[routes]]\nmodel = \"a\"\ntargets = [{ provider = \"gpu-a\" }]\n\n[[routes]]\nmodel = \"b\"\ntargets = [\n  { provider = \"gpu-z\" },\n]\n",
    );
    let error = only_error(&text);
    let at = line(&text, "gpu-z").unwrap();
    assert_eq!(
        error.to_string(),
        format!("conf/rolter.toml:{at}: routes[1].targets[0].provider: unknown provider \"gpu-z\" (known: gpu-a, gpu-b)")
    );
}

#[test]
fn target_provider_may_be_named_by_display_name() {
    let text = "[[providers]]\nname = \"Big Box\"\nbase_url = \"http://h\"\n\n[[routes]]\nmodel = \"m\"\ntargets = [{ provider = \"Big Box\" }]\n";
    assert_eq!(ok(text).routes[0].targets[0].provider, "big-box");
}

#[test]
fn target_weight_must_be_at_least_one() {
    let text = with_providers(
        "[[routes]]\nmodel = \"m\"\ntargets = [{ provider = \"gpu-a\", weight = 0 }]\n",
    );
    let error = only_error(&text);
    assert_eq!(field(&error), "routes[0].targets[0].weight");
    assert_eq!(error.message, "must be >= 1");
}

#[test]
fn empty_upstream_model_is_rejected() {
    let text = with_providers(
        "[[routes]]\nmodel = \"m\"\ntargets = [{ provider = \"gpu-a\", model = \"\" }]\n",
    );
    assert_eq!(field(&only_error(&text)), "routes[0].targets[0].model");
}

#[test]
fn same_provider_and_upstream_model_twice_is_rejected() {
    let text = with_providers(
        "[[routes]]\nmodel = \"m\"\ntargets = [\n  { provider = \"gpu-a\", model = \"m\" },\n  { provider = \"gpu-b\" },\n  { provider = \"gpu-a\" },\n]\n",
    );
    let error = only_error(&text);
    assert_eq!(field(&error), "routes[0].targets[2]");
    assert_eq!(error.line, Some(text.lines().count() - 1));
    assert!(error.message.contains("already targets[0]"), "{error}");
    // Same provider, other upstream model: two targets.
    let text = with_providers(
        "[[routes]]\nmodel = \"m\"\ntargets = [{ provider = \"gpu-a\" }, { provider = \"gpu-a\", model = \"m2\" }]\n",
    );
    assert_eq!(ok(&text).routes[0].targets.len(), 2);
}

#[test]
fn route_model_colliding_with_a_provider_address_names_both() {
    for model in ["gpu-a", "gpu-a/llama"] {
        let text = with_providers(&format!(
            "[[routes]]\nmodel = \"{model}\"\ntargets = [{{ provider = \"gpu-b\" }}]\n"
        ));
        let error = only_error(&text);
        assert_eq!(field(&error), "routes[0].model");
        assert_eq!(error.line, line(&text, "model ="));
        assert!(
            error.message.contains(&format!("route \"{model}\""))
                && error.message.contains("provider \"gpu-a\""),
            "{error}"
        );
    }
    // A longer slug sharing a prefix is no collision.
    let text = with_providers(
        "[[routes]]\nmodel = \"gpu-ab/llama\"\ntargets = [{ provider = \"gpu-b\" }]\n",
    );
    ok(&text);
}
