//! `tokenizer`, `tokenizer_budget_kib` and `cache_guard` on routes and
//! provider groups.

use super::*;

/// The demo's model directory, which loads.
const DEMO_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/conf/demo-tokenizer");

fn route(rest: &str) -> String {
    with_providers(&format!(
        "[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"gpu-a\" }}]\n{rest}"
    ))
}

#[test]
fn a_model_directory_that_loads_is_the_routes_tokenizer() {
    let config = ok(&route(&format!(
        "tokenizer = \"{DEMO_DIR}\"\ntokenizer_budget_kib = 16\n"
    )));
    let tokenizer = config.routes[0].tokenizer.as_ref().unwrap();
    assert_eq!(tokenizer.dir, std::path::PathBuf::from(DEMO_DIR));
    assert_eq!(tokenizer.budget_bytes, 16 * 1024);
    let default = ok(&route(&format!("tokenizer = \"{DEMO_DIR}\"\n")));
    assert_eq!(
        default.routes[0].tokenizer.as_ref().unwrap().budget_bytes,
        64 * 1024
    );
    assert_eq!(ok(&route("")).routes[0].tokenizer, None);
}

#[test]
fn a_directory_that_does_not_load_is_an_error_naming_field_line_and_file() {
    let text = route("tokenizer = \"/no/such/model\"\n");
    let error = only_error(&text);
    assert_eq!(field(&error), "routes[0].tokenizer");
    assert_eq!(error.line, line(&text, "tokenizer ="));
    assert!(
        error.message.contains("/no/such/model"),
        "{}",
        error.message
    );

    let dir = tempfile::tempdir().unwrap();
    for file in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(format!("{DEMO_DIR}/{file}"), dir.path().join(file)).unwrap();
    }
    std::fs::write(dir.path().join("chat_template.jinja"), "ok\n{% if %}").unwrap();
    let text = route(&format!("tokenizer = \"{}\"\n", dir.path().display()));
    let error = only_error(&text);
    assert!(
        error.message.contains("chat_template.jinja") && error.message.contains("line 2"),
        "{}",
        error.message
    );
}

#[test]
fn budget_bounds_and_a_budget_without_tokenizer() {
    let error = only_error(&route(&format!(
        "tokenizer = \"{DEMO_DIR}\"\ntokenizer_budget_kib = 0\n"
    )));
    assert_eq!(field(&error), "routes[0].tokenizer_budget_kib");
    let warning = only_warning(&route("tokenizer_budget_kib = 8\n"));
    assert_eq!(field(&warning), "routes[0].tokenizer_budget_kib");
}

#[test]
fn a_control_node_checks_the_setting_but_loads_nothing() {
    // The control node routes nothing; its gateways hold the directories.
    let text = format!(
        "[server]\nrole = \"control\"\n\n[control_plane]\ndatabase_url_env = \"DB\"\ninternal_token_env = \"TOKEN\"\n\n{}",
        route("tokenizer = \"/models/only-on-gateways\"\n")
    );
    let env = env_of(&[
        ("DB", "postgres://x@127.0.0.1/db"),
        ("TOKEN", "t".repeat(32).as_str()),
    ]);
    let config = parse(FILE, &text, &env).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        config.routes[0].tokenizer.as_ref().map(|t| t.dir.clone()),
        Some("/models/only-on-gateways".into())
    );
}

#[test]
fn cache_guard_thresholds_are_bounded_and_read_only_by_cache_aware() {
    let guarded = |guard: &str| {
        route(&format!(
            "strategy = \"cache_aware\"\ncache_guard = {guard}\n"
        ))
    };
    let config = ok(&guarded("{ min_load = 4, load_ratio = 2.5 }"));
    assert_eq!(
        config.routes[0]
            .cache_guard
            .balancer()
            .over(rolter_balancer::CacheGuard::default()),
        rolter_balancer::CacheGuard {
            min_load: 4,
            load_ratio: 2.5
        }
    );
    // An unset field is the strategy's own default.
    let partial = ok(&guarded("{ min_load = 7 }")).routes[0]
        .cache_guard
        .balancer();
    assert_eq!(
        partial.over(rolter_balancer::CacheGuard::PRECISE),
        rolter_balancer::CacheGuard {
            min_load: 7,
            load_ratio: 2.0
        }
    );
    assert_eq!(ok(&route("")).routes[0].cache_guard, Default::default());
    let error = only_error(&guarded("{ load_ratio = 0.5 }"));
    assert_eq!(field(&error), "routes[0].cache_guard.load_ratio");
    let error = only_error(&guarded("{ min_load = 20000 }"));
    assert_eq!(field(&error), "routes[0].cache_guard.min_load");
    let warning = only_warning(&route(
        "strategy = \"round_robin\"\ncache_guard = { min_load = 3 }\n",
    ));
    assert_eq!(field(&warning), "routes[0].cache_guard");
}
