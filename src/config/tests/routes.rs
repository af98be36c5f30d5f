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
    // The list follows the balancer as strategies land.
    let known: Vec<&str> = StrategyKind::ALL.iter().map(|k| k.as_str()).collect();
    assert!(known.starts_with(&[
        "round_robin",
        "random",
        "power_of_two",
        "weighted",
        "consistent_hash"
    ]));
    assert_eq!(
        error.message,
        format!("unknown strategy \"fastest\" (known: {})", known.join(", "))
    );
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

#[test]
fn weight_under_a_strategy_that_ignores_weights_warns() {
    let text = with_providers(
        "[[routes]]\nmodel = \"m\"\ntargets = [\n  { provider = \"gpu-a\" },\n  { provider = \"gpu-b\", weight = 2 },\n]\n",
    );
    let config = ok(&text);
    assert_eq!(config.routes[0].targets[1].weight, 2);
    let warning = only_warning(&text);
    assert_eq!(field(&warning), "routes[0].targets[1].weight");
    assert_eq!(warning.line, line(&text, "weight = 2"));
    // The list comes from the balancer, so it grows as strategies land.
    let readers: Vec<&str> = StrategyKind::ALL
        .iter()
        .filter(|k| k.reads_weights())
        .map(|k| k.as_str())
        .collect();
    assert!(readers.contains(&"weighted"));
    assert_eq!(
        warning.message,
        format!(
            "strategy \"round_robin\" ignores weights; this weight has no effect (strategies that read weights: {})",
            readers.join(", ")
        )
    );
}

#[test]
fn weight_warning_follows_reads_weights_for_every_strategy() {
    for kind in StrategyKind::ALL {
        let text = with_providers(&format!(
            "[[routes]]\nmodel = \"m\"\nstrategy = \"{}\"\ntargets = [{{ provider = \"gpu-a\", weight = 1 }}]\n",
            kind.as_str()
        ));
        assert_eq!(
            warnings(&text).is_empty(),
            kind.reads_weights(),
            "{}",
            kind.as_str()
        );
    }
}

#[test]
fn unwritten_weight_draws_no_warning() {
    let text = with_providers(
        "[[routes]]\nmodel = \"m\"\nstrategy = \"random\"\ntargets = [{ provider = \"gpu-a\" }, { provider = \"gpu-b\" }]\n",
    );
    assert!(warnings(&text).is_empty());
}

#[test]
fn warnings_come_in_file_order_and_never_fail_validation() {
    let text = with_providers(
        "[adaptive_routing]\nexploration_ratio = 0.9\n\n[[routes]]\nmodel = \"m\"\ntargets = [{ provider = \"gpu-a\", weight = 5 }]\n\n[[provider_groups]]\nname = \"g\"\nmembers = [{ provider = \"gpu-b\", weight = 5 }]\n",
    );
    let warnings = warnings(&text);
    let got: Vec<(&str, Option<usize>)> = warnings.iter().map(|w| (field(w), w.line)).collect();
    assert_eq!(
        got,
        [
            (
                "adaptive_routing.exploration_ratio",
                line(&text, "exploration_ratio")
            ),
            ("routes[0].targets[0].weight", line(&text, "targets =")),
            (
                "provider_groups[0].members[0].weight",
                line(&text, "members =")
            ),
        ]
    );
}

#[test]
fn endpoints_is_an_allow_list_of_known_names() {
    use crate::openai::{Endpoint, EndpointSet};
    let route = |rest: &str| {
        with_providers(&format!(
            "[[routes]]\nmodel = \"m\"\ntargets = [{{ provider = \"gpu-a\" }}]\n{rest}"
        ))
    };
    assert_eq!(ok(&route("")).routes[0].endpoints, EndpointSet::ALL);
    let open = ok(&route(
        "endpoints = [\"rerank\", \"audio/transcriptions\"]\n",
    ))
    .routes[0]
        .endpoints;
    assert!(open.allows(Endpoint::Rerank) && open.allows(Endpoint::AudioTranscriptions));
    assert!(!open.allows(Endpoint::ChatCompletions));

    let text = route("endpoints = [\"chat/completions\", \"chat\", \"chat/completions\"]\n");
    let errors = errors(&text);
    assert_eq!(
        fields(&errors),
        [
            ("routes[0].endpoints[1]", "unknown endpoint \"chat\" (known: chat/completions, completions, embeddings, responses, messages, messages/count_tokens, rerank, score, tokenize, detokenize, audio/transcriptions, audio/translations)"),
            ("routes[0].endpoints[2]", "\"chat/completions\" is listed twice"),
        ]
    );
    assert_eq!(errors[0].line, line(&text, "endpoints ="));
    assert_eq!(
        field(&only_error(&route("endpoints = []\n"))),
        "routes[0].endpoints"
    );
}

#[test]
fn disaggregation_names_two_pools_with_their_strategies() {
    let text = with_providers(
        "[[routes]]\nmodel = \"m\"\n\
         disaggregation = { protocol = \"vllm\", prefill = [{ provider = \"gpu-a\" }], decode = [{ provider = \"gpu-b\", model = \"big\" }], min_prefill_tokens = 64 }\n",
    );
    let config = ok(&text);
    let route = &config.routes[0];
    // The decode pool is the route's own targets and strategy.
    assert_eq!(route.targets.len(), 1);
    assert_eq!(route.targets[0].provider, "gpu-b");
    assert_eq!(route.targets[0].model, "big");
    assert_eq!(route.strategy, StrategyKind::PowerOfTwo);
    let split = route.disaggregation.as_ref().unwrap();
    assert_eq!(split.protocol, crate::config::PdProtocol::Vllm);
    assert_eq!(split.prefill_strategy, StrategyKind::CacheAware);
    assert_eq!(split.prefill[0].model, "m");
    assert_eq!(split.min_prefill_tokens, 64);
    assert!(warnings(&text).is_empty(), "{:?}", warnings(&text));
    // Its cache_guard is for the prefill pool's cache_aware: no warning that
    // the decode pool's power_of_two ignores it.
    let guarded = text.replacen(
        "model = \"m\"\n",
        "model = \"m\"\ncache_guard = { min_load = 3 }\n",
        1,
    );
    assert!(warnings(&guarded).is_empty(), "{:?}", warnings(&guarded));
    assert_eq!(ok(&guarded).routes[0].cache_guard.min_load, Some(3));
}

#[test]
fn disaggregation_refuses_targets_beside_it_unknown_protocols_and_empty_pools() {
    let text = with_providers(
        "[[routes]]\nmodel = \"m\"\ntargets = [{ provider = \"gpu-a\" }]\n\
         disaggregation = { protocol = \"dynamo\", prefill = [], decode = [{ provider = \"gpu-b\" }], min_prefill_tokens = 20000000 }\n",
    );
    let errors = errors(&text);
    let fields: Vec<&str> = errors.iter().map(field).collect();
    assert_eq!(
        fields,
        [
            "routes[0].targets",
            "routes[0].disaggregation.protocol",
            "routes[0].disaggregation.min_prefill_tokens",
            "routes[0].disaggregation.prefill",
        ],
        "{}",
        ConfigErrors(errors.clone())
    );
    assert!(
        errors[1].message.contains("known: vllm, sglang"),
        "{}",
        errors[1]
    );
}

#[test]
fn sglang_prefill_engines_need_a_bootstrap_port() {
    let text = with_providers(
        "[[routes]]\nmodel = \"m\"\n\
         disaggregation = { protocol = \"sglang\", prefill = [{ provider = \"gpu-a\" }], decode = [{ provider = \"gpu-b\" }] }\n",
    );
    let error = only_error(&text);
    assert_eq!(
        field(&error),
        "routes[0].disaggregation.prefill[0].provider"
    );
    assert!(error.message.contains("bootstrap_port"), "{error}");
    let with_port = text.replacen(
        "base_url = \"http://10.0.0.11:8000\"",
        "base_url = \"http://10.0.0.11:8000\"\nbootstrap_port = 8998",
        1,
    );
    let config = ok(&with_port);
    assert_eq!(config.providers[0].bootstrap_port, Some(8998));
}
