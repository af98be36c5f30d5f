//! Behaviour of `parse`/`load` as a user sees it: which files validate, and
//! which message, field and line each mistake gets.

use std::time::Duration;

use rolter_balancer::StrategyKind;

use super::*;

mod adaptive;
mod catalog;
mod contract;
mod control_plane;
mod edge;
mod eligibility;
mod fleet;
mod groups;
mod keys;
mod providers;
mod robustness;
mod routes;
mod telemetry;
mod tokenizer;

const FILE: &str = "conf/rolter.toml";

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let pairs: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn ok(text: &str) -> Config {
    parse(FILE, text, &no_env).unwrap_or_else(|errors| panic!("{errors}"))
}

fn errors(text: &str) -> Vec<ConfigError> {
    match parse(FILE, text, &no_env) {
        Ok(config) => panic!("expected errors, got {config:?}"),
        Err(errors) => errors.0,
    }
}

/// The warnings of a file that validates.
fn warnings(text: &str) -> Vec<ConfigError> {
    ok(text).warnings
}

fn only_warning(text: &str) -> ConfigError {
    let warnings = warnings(text);
    assert_eq!(warnings.len(), 1, "{}", ConfigErrors(warnings.clone()));
    warnings.into_iter().next().unwrap()
}

fn only_error(text: &str) -> ConfigError {
    let errors = errors(text);
    assert_eq!(errors.len(), 1, "{}", ConfigErrors(errors.clone()));
    errors.into_iter().next().unwrap()
}

/// 1-based line of the first line containing `needle`.
fn line(text: &str, needle: &str) -> Option<usize> {
    let at = text
        .lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("{needle:?} not in text"));
    Some(at + 1)
}

fn field(error: &ConfigError) -> &str {
    error.field.as_deref().unwrap_or("")
}

/// Each error's field and message, in order.
fn fields(errors: &[ConfigError]) -> Vec<(&str, &str)> {
    errors
        .iter()
        .map(|e| (field(e), e.message.as_str()))
        .collect()
}

/// Each error's field, line and message, in order.
fn located(errors: &[ConfigError]) -> Vec<(&str, Option<usize>, &str)> {
    errors
        .iter()
        .map(|e| (field(e), e.line, e.message.as_str()))
        .collect()
}

/// A certificate, a key and a CA bundle that exist, in a directory that
/// lives as long as this value. Validation only checks that they can be
/// read, so their contents are placeholders.
struct TlsFiles {
    dir: tempfile::TempDir,
    cert: String,
    key: String,
    ca: String,
}

fn tls_files() -> TlsFiles {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, contents: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, contents).unwrap();
        path.to_str().expect("temp paths are UTF-8").to_owned()
    };
    let cert = write("api.pem", "-----BEGIN CERTIFICATE-----\n");
    let key = write("api.key", "-----BEGIN PRIVATE KEY-----\n");
    let ca = write("ca.pem", "-----BEGIN CERTIFICATE-----\n");
    TlsFiles { dir, cert, key, ca }
}

const TWO_PROVIDERS: &str = r#"
[[providers]]
name = "gpu-a"
base_url = "http://10.0.0.11:8000"

[[providers]]
name = "gpu-b"
base_url = "http://10.0.0.12:8000"
"#;

fn with_providers(rest: &str) -> String {
    format!("{TWO_PROVIDERS}\n{rest}")
}

// ---- defaults and the contract example ------------------------------------

#[test]
fn empty_file_gets_every_default() {
    let config = ok("");
    assert_eq!(config.source, FILE);
    assert_eq!(
        config.server,
        Server {
            listen: vec!["0.0.0.0:8080".into()],
            admin_listen: "127.0.0.1:9090".into(),
            role: Role::Standalone,
            max_body_bytes: 33_554_432,
            require_api_key: true,
            tls: vec![],
            trusted_proxies: vec![],
            access_log: AccessLog::Stdout,
            access_log_format: AccessLogFormat::Json,
            header_read_timeout: Duration::from_secs(60),
            keepalive_timeout: Duration::from_secs(60),
            keepalive_requests: 1000,
            max_connections: 0,
            send_timeout: Duration::from_secs(60),
            max_request_header_bytes: 32_768,
        }
    );
    assert!(config.providers.is_empty() && config.routes.is_empty());
    assert!(config.api_keys.is_empty() && config.admin_tokens.is_empty());
    assert!(config.provider_groups.is_empty() && config.catalog.is_empty());
    assert_eq!(
        config.adaptive_routing,
        rolter_balancer::AdaptivePolicy::default()
    );
    assert!(config.warnings.is_empty());
    assert_eq!(config.retry, Retry { max_retries: 2 });
    assert_eq!(
        config.timeouts,
        Timeouts {
            connect: Duration::from_millis(2000),
            first_byte: Duration::from_secs(120),
            idle: Duration::from_secs(300),
        }
    );
    assert_eq!(config.health, Health::default());
    assert_eq!(config.breaker, Breaker::default());
    assert_eq!(config.parking, Parking::default());
    assert_eq!(config.control_plane, None);
}

#[test]
fn omitted_fields_get_their_defaults() {
    let config = ok(&with_providers(
        r#"
[[routes]]
model = "llama"
targets = [{ provider = "gpu-a" }]
"#,
    ));
    let provider = &config.providers[0];
    assert_eq!(provider.slug, "gpu-a");
    assert_eq!(provider.health_path, "/v1/models");
    assert_eq!(provider.api_key, None);
    assert_eq!(provider.kv_events, None);
    assert_eq!(provider.lmcache, None);
    assert_eq!(
        provider.tls,
        UpstreamTls {
            ca_file: None,
            verify: true
        }
    );
    let route = &config.routes[0];
    assert_eq!(route.strategy, StrategyKind::RoundRobin);
    assert_eq!(
        route.targets,
        vec![RouteTarget {
            provider: "gpu-a".into(),
            model: "llama".into(),
            weight: 1,
        }]
    );
}

// ---- syntax, unknown keys and types ---------------------------------------

#[test]
fn unknown_key_is_rejected_with_its_line_and_field() {
    let text = "[server]\nlisten = [\"0.0.0.0:8080\"]\nlisen = 1\n";
    let error = only_error(text);
    assert_eq!(error.line, Some(3));
    assert_eq!(error.field.as_deref(), Some("server.lisen"));
    assert!(error.message.contains("unknown field `lisen`"), "{error}");
    assert!(error
        .to_string()
        .starts_with("conf/rolter.toml:3: server.lisen: unknown field"));
}

#[test]
fn unknown_key_in_an_inline_target_is_rejected() {
    let text = with_providers(
        "[[routes]]\nmodel = \"m\"\ntargets = [\n  { provider = \"gpu-a\", wieght = 2 },\n]\n",
    );
    let error = only_error(&text);
    assert_eq!(error.line, line(&text, "wieght"));
    assert_eq!(field(&error), "routes[0].targets[0].wieght");
}

#[test]
fn unknown_section_is_rejected() {
    let text = "[retry]\nmax_retries = 1\n\n[sever]\nlisten = []\n";
    let error = only_error(text);
    assert_eq!(error.line, Some(4));
    assert_eq!(field(&error), "sever");
    assert!(error.message.contains("unknown field `sever`"), "{error}");
}

#[test]
fn syntax_error_reports_its_line_without_a_field() {
    let text = "[server]\nlisten = [\"0.0.0.0:8080\"]\nrole = \"standalone\n";
    let error = only_error(text);
    assert_eq!(error.file, FILE);
    assert_eq!(error.line, Some(3));
    assert_eq!(error.field, None);
    assert!(!error.message.is_empty());
}

#[test]
fn wrong_type_names_the_field_and_line() {
    let text = with_providers(
        "[[routes]]\nmodel = \"m\"\ntargets = [{ provider = \"gpu-a\", weight = \"two\" }]\n",
    );
    let error = only_error(&text);
    assert_eq!(error.line, line(&text, "weight"));
    assert_eq!(field(&error), "routes[0].targets[0].weight");
}

#[test]
fn negative_number_is_a_type_error() {
    let error = only_error("[timeouts]\nconnect_ms = -5\n");
    assert_eq!(error.line, Some(2));
    assert_eq!(field(&error), "timeouts.connect_ms");
}

// ---- [server] --------------------------------------------------------------

#[test]
fn listen_addresses_must_be_ip_and_port() {
    let text = "[server]\nlisten = [\"0.0.0.0:8080\", \"localhost:80\", \"0.0.0.0:8080\"]\nadmin_listen = \"9090\"\n";
    let errors = errors(text);
    let fields: Vec<&str> = errors.iter().map(field).collect();
    assert_eq!(
        fields,
        [
            "server.listen[1]",
            "server.listen[2]",
            "server.admin_listen"
        ]
    );
    assert!(errors[0].message.contains("not an ip:port address"));
    assert!(errors[1]
        .message
        .contains("already listed as server.listen[0]"));
    assert_eq!(errors[2].line, Some(3));
}

#[test]
fn listen_must_not_be_empty_nor_shared_with_admin() {
    assert_eq!(
        field(&only_error("[server]\nlisten = []\n")),
        "server.listen"
    );
    let error = only_error("[server]\nlisten = [\"127.0.0.1:9090\"]\n");
    assert_eq!(field(&error), "server.admin_listen");
    assert!(error.message.contains("also the proxy listener"), "{error}");
}

#[test]
fn listen_is_kept_as_written() {
    let config = ok("[server]\nlisten = [\"[::]:8080\", \"127.0.0.1:8081\"]\n");
    assert_eq!(config.server.listen, ["[::]:8080", "127.0.0.1:8081"]);
}

#[test]
fn unknown_role_lists_the_known_ones() {
    let error = only_error("[server]\nrole = \"primary\"\n");
    assert_eq!(field(&error), "server.role");
    assert_eq!(error.line, Some(2));
    assert_eq!(
        error.message,
        "unknown role \"primary\" (known: standalone, gateway, control)"
    );
    // Its control plane is not judged against a role nobody meant.
    let error = only_error("[server]\nrole = \"primary\"\n\n[control_plane]\nurl = \"http://c\"\n");
    assert_eq!(field(&error), "server.role");
}

#[test]
fn send_timeout_and_header_limit_are_bounded_and_name_their_field() {
    let error = only_error("[server]\nsend_timeout_secs = 0\n");
    assert_eq!(field(&error), "server.send_timeout_secs");
    let error = only_error("[server]\nsend_timeout_secs = 60000\n");
    assert!(
        error.message.contains("not milliseconds"),
        "{}",
        error.message
    );
    let error = only_error("[server]\nmax_request_header_bytes = 100\n");
    assert_eq!(field(&error), "server.max_request_header_bytes");
    let error = only_error("[server]\nmax_request_header_bytes = 2097152\n");
    assert_eq!(field(&error), "server.max_request_header_bytes");
    let server = ok("[server]\nsend_timeout_secs = 5\nmax_request_header_bytes = 8192\n").server;
    assert_eq!(server.send_timeout, Duration::from_secs(5));
    assert_eq!(server.max_request_header_bytes, 8192);
}

#[test]
fn max_body_bytes_must_be_positive() {
    let error = only_error("[server]\nmax_body_bytes = 0\n");
    assert_eq!(field(&error), "server.max_body_bytes");
    assert_eq!(error.message, "must be > 0");
    assert_eq!(
        ok("[server]\nmax_body_bytes = 1024\n")
            .server
            .max_body_bytes,
        1024
    );
    assert!(
        !ok("[server]\nrequire_api_key = false\n")
            .server
            .require_api_key
    );
}

// ---- [retry] and [timeouts] -------------------------------------------------

#[test]
fn max_retries_is_at_most_ten() {
    assert_eq!(ok("[retry]\nmax_retries = 10\n").retry.max_retries, 10);
    let error = only_error("[retry]\nmax_retries = 11\n");
    assert_eq!(field(&error), "retry.max_retries");
    assert_eq!(error.message, "must be at most 10 (got 11)");
}

#[test]
fn timeouts_must_be_positive() {
    let text = "[timeouts]\nconnect_ms = 0\nfirst_byte_secs = 0\nidle_secs = 0\n";
    assert_eq!(
        located(&errors(text)),
        [
            ("timeouts.connect_ms", Some(2), "must be > 0"),
            ("timeouts.first_byte_secs", Some(3), "must be > 0"),
            ("timeouts.idle_secs", Some(4), "must be > 0"),
        ]
    );
    let config = ok("[timeouts]\nconnect_ms = 250\nfirst_byte_secs = 5\nidle_secs = 7\n");
    assert_eq!(config.timeouts.connect, Duration::from_millis(250));
    assert_eq!(config.timeouts.first_byte, Duration::from_secs(5));
    assert_eq!(config.timeouts.idle, Duration::from_secs(7));
}

// ---- collection and files ---------------------------------------------------

#[test]
fn every_semantic_error_is_reported_in_file_order() {
    let text = "[timeouts]\nidle_secs = 0\n\n[server]\nrole = \"control\"\n\n[[providers]]\nname = \"a\"\nbase_url = \"ftp://h\"\n";
    let errors = errors(text);
    let lines: Vec<Option<usize>> = errors.iter().map(|e| e.line).collect();
    assert_eq!(lines, [Some(2), Some(5), Some(9)]);
    let shown = ConfigErrors(errors).to_string();
    assert_eq!(shown.lines().count(), 3);
    assert!(
        shown.starts_with("conf/rolter.toml:2: timeouts.idle_secs: must be > 0\n"),
        "{shown}"
    );
}

#[test]
fn load_reads_the_file_and_names_it_in_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rolter.toml");
    std::fs::write(&path, "[retry]\nmax_retries = 3\n").unwrap();
    assert_eq!(load(&path).unwrap().retry.max_retries, 3);
    assert_eq!(load(&path).unwrap().source, path.display().to_string());

    let missing = dir.path().join("missing.toml");
    let errors = load(&missing).unwrap_err();
    assert_eq!(errors.0.len(), 1);
    let error = &errors.0[0];
    assert_eq!(error.file, missing.display().to_string());
    assert_eq!((error.line, error.field.as_deref()), (None, None));
    assert!(
        error
            .message
            .starts_with("cannot read the configuration file"),
        "{error}"
    );
}
