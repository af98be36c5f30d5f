//! The fleet document: the file types as JSON, validated by the same rules
//! (`parse_json`, `parse_document`), and merged into a gateway's file.

use rolter_balancer::StrategyKind;
use serde_json::json;

use super::contract::{CONTRACT_EXAMPLE_IMPLEMENTED, CONTRACT_EXAMPLE_VERBATIM};
use super::*;

const FLEET_ENV: &[(&str, &str)] = &[
    ("GPU_A_KEY", "sk-upstream-a"),
    ("TEAM_ALPHA_KEY", "sk-team-alpha"),
    ("ROLTER_ADMIN_TOKEN", "admin-secret"),
    ("DATABASE_URL", "postgres://db/rolter"),
    ("ROLTER_INTERNAL_TOKEN", "internal-secret"),
    ("LOCAL_ADMIN", "local-admin-secret"),
];

/// A configuration with its warnings' lines forgotten: a document has no
/// lines, so that is all that may differ between a file and its document
/// (and so the order of its warnings, which a file sorts by line).
fn without_lines(mut config: Config) -> Config {
    for warning in &mut config.warnings {
        warning.line = None;
    }
    config
        .warnings
        .sort_by(|a, b| (&a.field, &a.message).cmp(&(&b.field, &b.message)));
    config
}

/// TOML -> ConfigFile -> JSON -> ConfigFile -> validate gives what the
/// TOML gives; returns the JSON.
fn assert_round_trips(text: &str) -> String {
    let env = env_of(FLEET_ENV);
    let from_text = parse(FILE, text, &env).unwrap_or_else(|errors| panic!("{errors}"));
    let document: file::ConfigFile = toml::from_str(text).unwrap();
    let json = serde_json::to_string(&document).unwrap();
    let back: file::ConfigFile = serde_json::from_str(&json).unwrap();
    assert_eq!(back, document, "{json}");
    let from_json = parse_json(FILE, &json, &env).unwrap_or_else(|errors| panic!("{errors}"));
    assert_eq!(without_lines(from_json), without_lines(from_text.clone()));
    let from_document = parse_document(FILE, &back, &env).unwrap();
    assert_eq!(without_lines(from_document), without_lines(from_text));
    json
}

#[test]
fn contract_example_round_trips_through_json() {
    let json = assert_round_trips(CONTRACT_EXAMPLE_IMPLEMENTED);
    // Secrets stay names of variables.
    assert!(json.contains("\"key_env\":\"TEAM_ALPHA_KEY\""), "{json}");
    assert!(!json.contains("sk-team-alpha"), "{json}");
}

#[test]
fn every_table_round_trips_through_json() {
    let files = tls_files();
    let salted = "\n[[api_keys]]\nname = \"generated\"\nkey_salted = { id = \"0123456789abcdef\", salt = \"000102030405060708090a0b0c0d0e0f\", sha256 = \"".to_owned()
        + &"ee".repeat(32)
        + "\" }\nrpm = 60\n\n[[admin_tokens]]\nname = \"dash\"\ntoken_salted = { id = \"fedcba9876543210\", salt = \"000102030405060708090a0b0c0d0e0f\", sha256 = \""
        + &"dd".repeat(32)
        + "\" }\n";
    let text = CONTRACT_EXAMPLE_VERBATIM
        .replace("/etc/rolter/tls/api.pem", &files.cert)
        .replace("/etc/rolter/tls/api.key", &files.key)
        .replace("/etc/ssl/private-ca.pem", &files.ca)
        .replace("role = \"standalone\"", "role = \"control\"")
        .replace(
            "node_id = \"\"",
            "node_id = \"control-1\"\npoll_interval_secs = 7",
        )
        + &salted;
    let json = assert_round_trips(&text);
    let config = parse_json(FILE, &json, &env_of(FLEET_ENV)).unwrap();
    assert_eq!(config.server.role, Role::Control);
    assert_eq!(config.control_plane.unwrap().node_id, "control-1");
    assert!(matches!(
        config.api_keys[1].digest,
        SecretDigest::Salted { .. }
    ));
    assert_eq!(config.server.tls.len(), 1);
    assert!(config.providers[0].kv_events.is_some() && config.providers[0].lmcache.is_some());
    // Warnings survive, without their lines.
    assert!(!config.warnings.is_empty());
    assert!(config.warnings.iter().all(|w| w.line.is_none()));
}

#[test]
fn gateway_file_round_trips_through_json() {
    assert_round_trips(
        "[server]\nrole = \"gateway\"\nlisten = [\"0.0.0.0:8080\", \"[::]:8081\"]\n\n[control_plane]\nurl = \"http://control:9090\"\ninternal_token_env = \"ROLTER_INTERNAL_TOKEN\"\ntelemetry_interval_secs = 30\n\n[[admin_tokens]]\nname = \"local\"\ntoken_env = \"LOCAL_ADMIN\"\n",
    );
}

#[test]
fn awkward_prices_round_trip_exactly() {
    let prices = [
        0.1 + 0.2,
        1e-300,
        f64::MAX,
        f64::MIN_POSITIVE,
        123_456.789_012_345_68,
        2.225_073_858_507_201e-308,
        0.0,
    ];
    let catalog: String = prices
        .iter()
        .enumerate()
        .map(|(i, price)| {
            format!("[[catalog]]\nmodel = \"m{i}\"\ninput_per_mtok = {price:?}\noutput_per_mtok = {price:?}\n")
        })
        .collect();
    assert_round_trips(&catalog);
    let config = ok(&catalog);
    for (entry, price) in config.catalog.iter().zip(prices) {
        assert_eq!(entry.input_per_mtok.to_bits(), price.to_bits());
    }
}

#[test]
fn unset_fields_and_empty_lists_are_left_out() {
    let json = serde_json::to_value(file::ConfigFile::default()).unwrap();
    assert_eq!(
        json,
        json!({
            "server": {},
            "retry": {},
            "timeouts": {},
            "adaptive_routing": {},
            "health": {},
            "breaker": {},
            "parking": {},
            "saturation": {},
            "flow_control": {},
            "rate_limits": {},
        })
    );
    let document: file::ConfigFile = toml::from_str(
        "[[api_keys]]\nname = \"k\"\nkey_sha256 = \"00\"\n\n[control_plane]\nurl = \"http://c\"\n",
    )
    .unwrap();
    let json = serde_json::to_value(&document).unwrap();
    assert_eq!(
        json["api_keys"],
        json!([{ "name": "k", "key_sha256": "00" }])
    );
    assert_eq!(json["control_plane"], json!({ "url": "http://c" }));
}

#[test]
fn document_errors_name_the_field_without_a_line() {
    let mut document: file::ConfigFile = toml::from_str(&with_providers("")).unwrap();
    document.providers[1].base_url = Some("ftp://gpu-b".into());
    document.retry.max_retries = Some(11);
    let errors = parse_document("fleet v7", &document, &no_env).unwrap_err();
    assert_eq!(
        errors.to_string(),
        "fleet v7: providers[1].base_url: \"ftp://gpu-b\" must start with http:// or https://\nfleet v7: retry.max_retries: must be at most 10 (got 11)"
    );
}

#[test]
fn json_errors_name_the_json_path() {
    let error = |json: &str| {
        let errors = parse_json("fleet", json, &no_env).unwrap_err().0;
        assert_eq!(errors.len(), 1, "{}", ConfigErrors(errors.clone()));
        let error = errors.into_iter().next().unwrap();
        assert_eq!((error.file.as_str(), error.line), ("fleet", None));
        error
    };
    let wrong_type = error(r#"{"providers": [{"name": "a"}, {"name": "b", "max_loras": "8"}]}"#);
    assert_eq!(field(&wrong_type), "providers[1].max_loras");
    assert!(
        wrong_type
            .message
            .starts_with("invalid type: string \"8\", expected u64"),
        "{wrong_type}"
    );
    let unknown = error(r#"{"server": {"lisen": []}}"#);
    assert_eq!(field(&unknown), "server.lisen");
    assert!(
        unknown.message.starts_with("unknown field `lisen`"),
        "{unknown}"
    );
    let syntax = error("{\"retry\": {\"max_retries\": 2}");
    assert_eq!(syntax.field, None);
    assert!(syntax.message.contains("EOF"), "{syntax}");
    let trailing = error("{} {}");
    assert_eq!(trailing.field, None);
    assert!(
        trailing.message.starts_with("trailing characters"),
        "{trailing}"
    );
    let not_an_object = error("[]");
    assert_eq!(not_an_object.field, None);
    // Validation errors after a good parse name their field.
    let errors = parse_json("fleet", r#"{"retry": {"max_retries": 11}}"#, &no_env).unwrap_err();
    assert_eq!(
        errors.to_string(),
        "fleet: retry.max_retries: must be at most 10 (got 11)"
    );
}

/// A gateway's own file.
const LOCAL: &str = r#"[server]
role = "gateway"
listen = ["0.0.0.0:8081"]

[control_plane]
url = "http://control:9090"
internal_token_env = "ROLTER_INTERNAL_TOKEN"
node_id = "gw-1"

[[admin_tokens]]
name = "local"
token_env = "LOCAL_ADMIN"
role = "admin"
"#;

/// A fleet document with a section of every kind, its own `[server]` and
/// `[control_plane]` (which a gateway ignores) and an admin token.
fn fleet() -> file::ConfigFile {
    let text = CONTRACT_EXAMPLE_IMPLEMENTED.to_owned()
        + "\n[control_plane]\ndatabase_url_env = \"DATABASE_URL\"\n";
    let mut fleet: file::ConfigFile = toml::from_str(&text).unwrap();
    fleet.server.listen = Some(vec!["0.0.0.0:9999".into()]);
    // A control node serves digests, never its own variables' names.
    fleet.api_keys[0].set_digest(&SecretDigest::Sha256([1; 32]));
    fleet.admin_tokens[0].set_digest(&SecretDigest::Sha256([2; 32]));
    fleet
}

#[test]
fn merge_takes_the_node_sections_from_the_gateway_and_the_rest_from_the_fleet() {
    let local: file::ConfigFile = toml::from_str(LOCAL).unwrap();
    let fleet = fleet();
    let merged = merge_fleet_document(&local, &fleet);
    assert_eq!(merged.server, local.server);
    assert_eq!(merged.control_plane, local.control_plane);
    let tokens: Vec<&str> = merged
        .admin_tokens
        .iter()
        .filter_map(|t| t.name.as_deref())
        .collect();
    assert_eq!(tokens, ["ops", "local"]);
    let expected = file::ConfigFile {
        server: local.server.clone(),
        control_plane: local.control_plane.clone(),
        admin_tokens: merged.admin_tokens.clone(),
        ..fleet.clone()
    };
    assert_eq!(merged, expected);
}

#[test]
fn merged_gateway_document_validates_as_a_gateway_with_the_fleet() {
    let local: file::ConfigFile = toml::from_str(LOCAL).unwrap();
    let fleet_json = serde_json::to_string(&fleet()).unwrap();
    let fleet: file::ConfigFile = serde_json::from_str(&fleet_json).unwrap();
    let env = env_of(FLEET_ENV);
    let config = parse_document(
        "rolter.toml + fleet",
        &merge_fleet_document(&local, &fleet),
        &env,
    )
    .unwrap_or_else(|errors| panic!("{errors}"));
    let alone = parse(FILE, LOCAL, &env).unwrap();
    assert_eq!(config.server, alone.server);
    assert_eq!(config.control_plane, alone.control_plane);
    assert_eq!(config.control_plane.as_ref().unwrap().node_id, "gw-1");
    assert_eq!(config.routes[0].strategy, StrategyKind::Weighted);
    assert_eq!(config.providers.len(), 2);
    assert_eq!(config.api_keys[0].digest, SecretDigest::Sha256([1; 32]));
    let tokens: Vec<(&str, AdminRole)> = config
        .admin_tokens
        .iter()
        .map(|t| (t.name.as_str(), t.role))
        .collect();
    assert_eq!(
        tokens,
        [("ops", AdminRole::Superadmin), ("local", AdminRole::Admin)]
    );
    // The gateway's file alone holds no fleet sections.
    assert!(alone.providers.is_empty() && alone.routes.is_empty());
}

#[test]
fn merge_reports_a_local_token_named_like_a_fleet_one() {
    let local: file::ConfigFile =
        toml::from_str(&LOCAL.replace("name = \"local\"", "name = \"ops\"")).unwrap();
    let merged = merge_fleet_document(&local, &fleet());
    let errors = parse_document("merged", &merged, &env_of(FLEET_ENV)).unwrap_err();
    assert_eq!(
        errors.to_string(),
        "merged: admin_tokens[1].name: name \"ops\" is already used by admin_tokens[0]"
    );
}
