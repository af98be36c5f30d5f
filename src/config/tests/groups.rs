//! `[[provider_groups]]`: slugs and their shared namespace, members,
//! strategies, weights, and API keys that allow a group.

use rolter_balancer::StrategyKind;

use super::*;

fn group(rest: &str) -> String {
    with_providers(&format!("[[provider_groups]]\n{rest}"))
}

#[test]
fn group_slug_is_derived_from_the_name_and_members_default_to_passthrough() {
    let config = ok(&group(
        "name = \"Edge fleet\"\nmembers = [{ provider = \"gpu-a\" }, { provider = \"gpu-b\", model = \"Qwen/Qwen3-8B\" }]\n",
    ));
    assert_eq!(
        config.provider_groups,
        [ProviderGroup {
            name: "Edge fleet".into(),
            tokenizer: None,
            cache_guard: Default::default(),
            endpoints: Default::default(),
            slug: "edge-fleet".into(),
            strategy: StrategyKind::RoundRobin,
            members: vec![
                GroupMember {
                    provider: "gpu-a".into(),
                    model: None,
                    weight: 1,
                },
                GroupMember {
                    provider: "gpu-b".into(),
                    model: Some("Qwen/Qwen3-8B".into()),
                    weight: 1,
                },
            ],
        }]
    );
    assert!(config.warnings.is_empty());
}

#[test]
fn group_member_may_name_its_provider_by_display_name() {
    let text = "[[providers]]\nname = \"Big Box\"\nbase_url = \"http://h\"\n\n[[provider_groups]]\nname = \"g\"\nmembers = [{ provider = \"Big Box\" }]\n";
    assert_eq!(ok(text).provider_groups[0].members[0].provider, "big-box");
}

#[test]
fn group_name_is_required_and_unique_and_slug_must_be_valid() {
    let text = group(
        "members = [{ provider = \"gpu-a\" }]\n\n[[provider_groups]]\nname = \"g\"\nslug = \"Edge_Fleet\"\nmembers = [{ provider = \"gpu-a\" }]\n\n[[provider_groups]]\nname = \"g\"\nslug = \"g2\"\nmembers = [{ provider = \"gpu-a\" }]\n\n[[provider_groups]]\nname = \"???\"\nmembers = [{ provider = \"gpu-a\" }]\n",
    );
    let errors = errors(&text);
    assert_eq!(
        fields(&errors),
        [
            ("provider_groups[0].name", "is required"),
            (
                "provider_groups[1].slug",
                "\"Edge_Fleet\" is not a valid slug: 1 to 63 lowercase letters, digits and '-', starting with a letter or digit"
            ),
            (
                "provider_groups[2].name",
                "name \"g\" is already used by provider_groups[1]"
            ),
            (
                "provider_groups[3].name",
                "cannot derive a slug from \"???\": it has no ASCII letter or digit; set `slug`"
            ),
        ]
    );
    assert_eq!(errors[1].line, line(&text, "Edge_Fleet"));
}

#[test]
fn group_slugs_must_be_unique_explicit_or_derived() {
    let text = group(
        "name = \"Edge fleet\"\nmembers = [{ provider = \"gpu-a\" }]\n\n[[provider_groups]]\nname = \"EDGE  FLEET\"\nmembers = [{ provider = \"gpu-a\" }]\n\n[[provider_groups]]\nname = \"other\"\nslug = \"edge-fleet\"\nmembers = [{ provider = \"gpu-a\" }]\n",
    );
    assert_eq!(
        located(&errors(&text)),
        [
            (
                "provider_groups[1].name",
                line(&text, "EDGE  FLEET"),
                "slug \"edge-fleet\" is already used by provider_groups[0] (derived from the name; set `slug` to choose another)"
            ),
            (
                "provider_groups[2].slug",
                line(&text, "slug = \"edge-fleet\""),
                "slug \"edge-fleet\" is already used by provider_groups[0]"
            ),
        ]
    );
}

#[test]
fn group_taking_a_provider_slug_names_both() {
    // Written, and derived from the name: one namespace either way.
    for (table, at, written) in [
        (
            "name = \"fleet\"\nslug = \"gpu-a\"\n",
            "provider_groups[0].slug",
            "slug = \"gpu-a\"",
        ),
        (
            "name = \"GPU A\"\n",
            "provider_groups[0].name",
            "name = \"GPU A\"",
        ),
    ] {
        let text = group(&format!("{table}members = [{{ provider = \"gpu-b\" }}]\n"));
        let error = only_error(&text);
        assert_eq!(field(&error), at);
        assert_eq!(error.line, line(&text, written));
        assert!(
            error.message.starts_with(
                "group slug \"gpu-a\" is already the slug of provider \"gpu-a\" (providers[0]): providers and provider groups share one namespace, \"gpu-a/<model>\" would address both"
            ),
            "{error}"
        );
        assert_eq!(
            error.message.ends_with("set `slug` to choose another)"),
            at.ends_with("name"),
            "{error}"
        );
    }
}

#[test]
fn route_in_a_group_address_space_names_both() {
    for model in ["edge-fleet", "edge-fleet/Qwen/Qwen3-8B"] {
        let text = group(&format!(
            "name = \"Edge fleet\"\nmembers = [{{ provider = \"gpu-a\" }}]\n\n[[routes]]\nmodel = \"{model}\"\ntargets = [{{ provider = \"gpu-b\" }}]\n"
        ));
        let error = only_error(&text);
        assert_eq!(field(&error), "routes[0].model");
        assert_eq!(error.line, line(&text, "model ="));
        assert_eq!(
            error.message,
            format!("route \"{model}\" collides with provider group \"edge-fleet\": \"edge-fleet/<model>\" addresses that group; rename the route")
        );
    }
    // A longer slug sharing a prefix is no collision.
    ok(&group(
        "name = \"Edge fleet\"\nmembers = [{ provider = \"gpu-a\" }]\n\n[[routes]]\nmodel = \"edge-fleet-2/llama\"\ntargets = [{ provider = \"gpu-b\" }]\n",
    ));
}

#[test]
fn route_collides_with_a_group_even_when_the_group_failed() {
    // The group's own error is reported; the address it claims still is its.
    let text = group(
        "name = \"Edge fleet\"\nmembers = []\n\n[[routes]]\nmodel = \"edge-fleet/x\"\ntargets = [{ provider = \"gpu-b\" }]\n",
    );
    let fields: Vec<String> = errors(&text).iter().map(|e| field(e).to_owned()).collect();
    assert_eq!(fields, ["provider_groups[0].members", "routes[0].model"]);
}

#[test]
fn unknown_member_provider_lists_the_known_ones() {
    let text = group(
        "name = \"g\"\nmembers = [\n  { provider = \"gpu-a\" },\n  { provider = \"gpu-z\" },\n]\n",
    );
    let error = only_error(&text);
    assert_eq!(
        error.to_string(),
        format!(
            "conf/rolter.toml:{}: provider_groups[0].members[1].provider: unknown provider \"gpu-z\" (known: gpu-a, gpu-b)",
            line(&text, "gpu-z").unwrap()
        )
    );
}

#[test]
fn same_provider_twice_in_a_group_is_rejected() {
    // By slug and by name, with another upstream model: still one provider.
    let text = "[[providers]]\nname = \"Big Box\"\nbase_url = \"http://h\"\n\n[[provider_groups]]\nname = \"g\"\nmembers = [\n  { provider = \"big-box\" },\n  { provider = \"Big Box\", model = \"other\" },\n]\n";
    let error = only_error(text);
    assert_eq!(field(&error), "provider_groups[0].members[1]");
    assert_eq!(error.line, line(text, "model = \"other\""));
    assert_eq!(
        error.message,
        "duplicate member: provider \"big-box\" is already members[0]; a group lists each provider once"
    );
}

#[test]
fn members_are_required_and_each_is_checked() {
    let text = group(
        "name = \"a\"\n\n[[provider_groups]]\nname = \"b\"\nmembers = []\n\n[[provider_groups]]\nname = \"c\"\nmembers = [{ model = \"m\" }, { provider = \"gpu-a\", model = \" \" }, { provider = \"gpu-b\", weight = 0 }]\n",
    );
    let errors = errors(&text);
    assert_eq!(
        fields(&errors),
        [
            ("provider_groups[0].members", "is required"),
            (
                "provider_groups[1].members",
                "must list at least one member"
            ),
            ("provider_groups[2].members[0].provider", "is required"),
            (
                "provider_groups[2].members[1].model",
                "must not be empty (leave it out for passthrough)"
            ),
            ("provider_groups[2].members[2].weight", "must be >= 1"),
        ]
    );
    assert_eq!(errors[0].line, line(&text, "[[provider_groups]]"));
}

#[test]
fn group_strategy_is_validated_like_a_route_strategy() {
    for name in ["fastest", "least_loaded"] {
        let route = only_error(&with_providers(&format!(
            "[[routes]]\nmodel = \"m\"\nstrategy = \"{name}\"\ntargets = [{{ provider = \"gpu-a\" }}]\n"
        )));
        let text = group(&format!(
            "name = \"g\"\nstrategy = \"{name}\"\nmembers = [{{ provider = \"gpu-a\" }}]\n"
        ));
        let error = only_error(&text);
        assert_eq!(field(&error), "provider_groups[0].strategy");
        assert_eq!(error.line, line(&text, "strategy ="));
        assert_eq!(error.message, route.message);
    }
    for kind in StrategyKind::ALL {
        let text = group(&format!(
            "name = \"g\"\nstrategy = \"{}\"\nmembers = [{{ provider = \"gpu-a\" }}]\n",
            kind.as_str()
        ));
        assert_eq!(ok(&text).provider_groups[0].strategy, *kind);
    }
}

#[test]
fn member_weight_under_a_strategy_that_ignores_weights_warns() {
    let text = group(
        "name = \"g\"\nmembers = [\n  { provider = \"gpu-a\" },\n  { provider = \"gpu-b\", weight = 3 },\n]\n",
    );
    let warning = only_warning(&text);
    assert_eq!(field(&warning), "provider_groups[0].members[1].weight");
    assert_eq!(warning.line, line(&text, "weight = 3"));
    assert!(
        warning
            .message
            .starts_with("strategy \"round_robin\" ignores weights; this weight has no effect"),
        "{warning}"
    );
    assert_eq!(ok(&text).provider_groups[0].members[1].weight, 3);
    // Under weighted the weight is read: no warning.
    let text = text.replace("name = \"g\"\n", "name = \"g\"\nstrategy = \"weighted\"\n");
    assert!(warnings(&text).is_empty());
}

#[test]
fn api_key_may_allow_a_group_by_its_slug() {
    let zeros = "0".repeat(64);
    let text = group(&format!(
        "name = \"Edge fleet\"\nmembers = [{{ provider = \"gpu-a\" }}]\n\n[[routes]]\nmodel = \"m\"\ntargets = [{{ provider = \"gpu-a\" }}]\n\n[[api_keys]]\nname = \"k\"\nkey_sha256 = \"{zeros}\"\nmodels = [\"m\", \"edge-fleet\", \"edge-fleet/llama\", \"nope\"]\n"
    ));
    assert_eq!(
        fields(&errors(&text)),
        [
            (
                "api_keys[0].models[2]",
                "unknown model \"edge-fleet/llama\": a key allows a provider group as a whole; name its slug \"edge-fleet\""
            ),
            (
                "api_keys[0].models[3]",
                "unknown model \"nope\": not a route's model nor a provider group's slug (known: m; groups: edge-fleet)"
            ),
        ]
    );
    let text = text.replace(", \"edge-fleet/llama\", \"nope\"", "");
    assert_eq!(ok(&text).api_keys[0].models, ["m", "edge-fleet"]);
}
