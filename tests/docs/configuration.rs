//! `docs/configuration.md` against the serde types of `rolter.toml`, and
//! the configuration files shipped in `conf/` and `docker/` against the
//! validator.

use std::collections::{BTreeMap, BTreeSet};

use rolter::config::file::ConfigFile;
use serde_json::{json, Value};

use crate::kubernetes::k8s_manifests;
use crate::markdown::{code_spans, fenced_block, table_rows, Row};
use crate::read;

const PROBE: &str = "docs_probe_field";

/// Where a table sits in the file: `(key, is an array of tables)` from the
/// top down.
type TablePath = Vec<(String, bool)>;

fn path_name(path: &TablePath) -> String {
    path.iter()
        .map(|(k, _)| k.as_str())
        .collect::<Vec<_>>()
        .join(".")
}

/// A file with `content` as the only content of the table at `path`.
fn nested(path: &TablePath, content: Value) -> Value {
    path.iter().rev().fold(content, |inner, (key, array)| {
        let value = if *array { json!([inner]) } else { inner };
        json!({ key.as_str(): value })
    })
}

/// Parses `doc` as rolter.toml text, serde only (no validation).
fn parse_as_toml(doc: &Value) -> Result<(), String> {
    let text = toml::to_string(doc).expect("a JSON object renders as TOML");
    toml::from_str::<ConfigFile>(&text)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn rejects_probe_key(error: &Result<(), String>) -> bool {
    matches!(error, Err(e) if e.contains(&format!("unknown field `{PROBE}`")))
}

/// The keys the table at `path` accepts, as serde lists them when it meets
/// an unknown one.
fn accepted_keys(path: &TablePath) -> Vec<String> {
    let result = parse_as_toml(&nested(path, json!({ PROBE: 1 })));
    let Err(message) = result else {
        panic!("{} accepted an unknown key", path_name(path));
    };
    let marker = format!("unknown field `{PROBE}`");
    let at = message
        .find(&marker)
        .unwrap_or_else(|| panic!("unexpected error for {}: {message}", path_name(path)));
    let rest = &message[at + marker.len()..];
    if rest.contains("there are no fields") {
        return Vec::new();
    }
    let line = rest.lines().next().unwrap_or_default();
    code_spans(line)
}

/// The TOML type the key `key` of the table at `path` takes, in the words
/// of the reference's `type` column.
fn key_type(path: &TablePath, key: &str) -> &'static str {
    let with = |value: Value| parse_as_toml(&nested(path, json!({ key: value })));
    if rejects_probe_key(&with(json!({ PROBE: 1 }))) {
        return "table";
    }
    if rejects_probe_key(&with(json!([{ PROBE: 1 }]))) {
        return "list of tables";
    }
    for (value, name) in [
        (json!("x"), "string"),
        (json!(true), "boolean"),
        (json!(1.5), "float"),
        (json!(1), "integer"),
        (json!(["x"]), "list of strings"),
    ] {
        if with(value).is_ok() {
            return name;
        }
    }
    panic!(
        "{}.{key} takes none of the documented types: {:?}",
        path_name(path),
        with(json!("x"))
    );
}

/// Every `(table, field) -> type` rolter.toml accepts, the top level as "".
fn code_fields() -> BTreeMap<(String, String), &'static str> {
    fn walk(path: TablePath, out: &mut BTreeMap<(String, String), &'static str>) {
        for key in accepted_keys(&path) {
            let kind = key_type(&path, &key);
            out.insert((path_name(&path), key.clone()), kind);
            if kind == "table" || kind == "list of tables" {
                let mut inner = path.clone();
                inner.push((key, kind == "list of tables"));
                walk(inner, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(Vec::new(), &mut out);
    out
}

/// The documented rows by `(table, field)`: type, unit, default.
fn documented_fields() -> BTreeMap<(String, String), Row> {
    let doc = read("docs/configuration.md");
    let mut out = BTreeMap::new();
    for row in table_rows(&doc, "field") {
        let tables: Vec<String> = code_spans(&row.heading)
            .into_iter()
            .map(|span| {
                if span == "rolter.toml" {
                    String::new()
                } else {
                    span.trim_matches(|c| c == '[' || c == ']').to_string()
                }
            })
            .collect();
        assert!(
            !tables.is_empty(),
            "a field table under {:?} names no TOML table in its heading",
            row.heading
        );
        assert_eq!(row.cells.len(), 5, "not 5 cells: {:?}", row.cells);
        let field = code_spans(&row.cells[0])
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("field cell without `code`: {:?}", row.cells));
        for table in tables {
            let previous = out.insert((table.clone(), field.clone()), row.clone());
            assert!(previous.is_none(), "{table}.{field} documented twice");
        }
    }
    out
}

fn dotted(table: &str, field: &str) -> String {
    if table.is_empty() {
        field.to_string()
    } else {
        format!("{table}.{field}")
    }
}

#[test]
fn configuration_reference_lists_exactly_the_fields_and_types_the_code_accepts() {
    let code = code_fields();
    let docs = documented_fields();
    assert!(
        code.len() > 80,
        "the probe found only {} fields",
        code.len()
    );
    let missing: Vec<String> = code
        .keys()
        .filter(|k| !docs.contains_key(*k))
        .map(|(t, f)| dotted(t, f))
        .collect();
    let extra: Vec<String> = docs
        .keys()
        .filter(|k| !code.contains_key(*k))
        .map(|(t, f)| dotted(t, f))
        .collect();
    let mistyped: Vec<String> = code
        .iter()
        .filter_map(|(key, kind)| {
            let row = docs.get(key)?;
            (row.cells[1] != *kind).then(|| {
                format!(
                    "{}: documented as {:?}, the code takes {kind:?}",
                    dotted(&key.0, &key.1),
                    row.cells[1]
                )
            })
        })
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty() && mistyped.is_empty(),
        "docs/configuration.md and src/config/file.rs disagree.\n\
         accepted by the code, not documented: {missing:?}\n\
         documented, not accepted by the code: {extra:?}\n\
         wrong type: {mistyped:#?}"
    );
    for (key, row) in &docs {
        assert!(
            !row.cells[2].is_empty() && !row.cells[3].is_empty() && !row.cells[4].is_empty(),
            "{}: unit, default and meaning must be filled in (— for none)",
            dotted(&key.0, &key.1)
        );
    }
}

/// The `DEFAULT_*` constants of `src/config/file.rs` with the field paths
/// their doc comment names (`/// Default for `a.b` and `c.d`...`).
fn default_constants_in_source() -> BTreeMap<String, Vec<String>> {
    let source = read("src/config/file.rs");
    let mut out = BTreeMap::new();
    let mut pending: Option<Vec<String>> = None;
    for line in source.lines().map(str::trim) {
        if let Some(comment) = line.strip_prefix("///") {
            if let Some(rest) = comment.trim().strip_prefix("Default for ") {
                // `table.field` spans; other spans on the line are prose.
                pending = Some(
                    code_spans(rest)
                        .into_iter()
                        .filter(|s| {
                            s.contains('.')
                                && s.chars()
                                    .all(|c| c.is_ascii_lowercase() || c == '_' || c == '.')
                        })
                        .collect(),
                );
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("pub const ") {
            let name = rest.split(':').next().unwrap_or_default().to_string();
            if let Some(paths) = pending.take() {
                out.insert(name, paths);
            }
            continue;
        }
        pending = None;
    }
    out
}

/// What each default constant looks like written in TOML.
fn default_literals() -> BTreeMap<&'static str, String> {
    use rolter::config::file::*;
    BTreeMap::from([
        ("DEFAULT_LISTEN", format!("[{DEFAULT_LISTEN:?}]")),
        ("DEFAULT_ADMIN_LISTEN", format!("{DEFAULT_ADMIN_LISTEN:?}")),
        ("DEFAULT_ROLE", format!("{DEFAULT_ROLE:?}")),
        ("DEFAULT_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES.to_string()),
        (
            "DEFAULT_REQUIRE_API_KEY",
            DEFAULT_REQUIRE_API_KEY.to_string(),
        ),
        ("DEFAULT_ACCESS_LOG", format!("{DEFAULT_ACCESS_LOG:?}")),
        (
            "DEFAULT_ACCESS_LOG_FORMAT",
            format!("{DEFAULT_ACCESS_LOG_FORMAT:?}"),
        ),
        (
            "DEFAULT_HEADER_READ_TIMEOUT_SECS",
            DEFAULT_HEADER_READ_TIMEOUT_SECS.to_string(),
        ),
        (
            "DEFAULT_KEEPALIVE_TIMEOUT_SECS",
            DEFAULT_KEEPALIVE_TIMEOUT_SECS.to_string(),
        ),
        (
            "DEFAULT_KEEPALIVE_REQUESTS",
            DEFAULT_KEEPALIVE_REQUESTS.to_string(),
        ),
        (
            "DEFAULT_MAX_CONNECTIONS",
            DEFAULT_MAX_CONNECTIONS.to_string(),
        ),
        (
            "DEFAULT_SEND_TIMEOUT_SECS",
            DEFAULT_SEND_TIMEOUT_SECS.to_string(),
        ),
        (
            "DEFAULT_MAX_REQUEST_HEADER_BYTES",
            DEFAULT_MAX_REQUEST_HEADER_BYTES.to_string(),
        ),
        ("DEFAULT_TLS_VERIFY", DEFAULT_TLS_VERIFY.to_string()),
        (
            "DEFAULT_KV_EVENTS_TOPIC",
            format!("{DEFAULT_KV_EVENTS_TOPIC:?}"),
        ),
        ("DEFAULT_KV_BLOCK_SIZE", DEFAULT_KV_BLOCK_SIZE.to_string()),
        (
            "DEFAULT_DATA_PARALLEL_SIZE",
            DEFAULT_DATA_PARALLEL_SIZE.to_string(),
        ),
        (
            "DEFAULT_LMCACHE_FORMAT",
            format!("{DEFAULT_LMCACHE_FORMAT:?}"),
        ),
        (
            "DEFAULT_LMCACHE_POLL_INTERVAL_SECS",
            DEFAULT_LMCACHE_POLL_INTERVAL_SECS.to_string(),
        ),
        (
            "DEFAULT_LMCACHE_STALE_AFTER_SECS",
            DEFAULT_LMCACHE_STALE_AFTER_SECS.to_string(),
        ),
        (
            "DEFAULT_ENGINE_METRICS_POLL_INTERVAL_MS",
            DEFAULT_ENGINE_METRICS_POLL_INTERVAL_MS.to_string(),
        ),
        (
            "DEFAULT_ENGINE_METRICS_STALE_AFTER_MS",
            DEFAULT_ENGINE_METRICS_STALE_AFTER_MS.to_string(),
        ),
        (
            "DEFAULT_SATURATION_MAX_WAITING",
            DEFAULT_SATURATION_MAX_WAITING.to_string(),
        ),
        (
            "DEFAULT_SATURATION_MAX_KV_USAGE",
            DEFAULT_SATURATION_MAX_KV_USAGE.to_string(),
        ),
        (
            "DEFAULT_FLOW_CONTROL_ENABLED",
            DEFAULT_FLOW_CONTROL_ENABLED.to_string(),
        ),
        (
            "DEFAULT_FLOW_CONTROL_MAX_QUEUED",
            DEFAULT_FLOW_CONTROL_MAX_QUEUED.to_string(),
        ),
        (
            "DEFAULT_FLOW_CONTROL_MAX_WAIT_SECS",
            DEFAULT_FLOW_CONTROL_MAX_WAIT_SECS.to_string(),
        ),
        (
            "DEFAULT_TRACING_SERVICE_NAME",
            format!("{DEFAULT_TRACING_SERVICE_NAME:?}"),
        ),
        (
            "DEFAULT_TRACING_MAX_QUEUED_SPANS",
            DEFAULT_TRACING_MAX_QUEUED_SPANS.to_string(),
        ),
        (
            "DEFAULT_REDIS_TIMEOUT_MS",
            DEFAULT_REDIS_TIMEOUT_MS.to_string(),
        ),
        (
            "DEFAULT_REDIS_KEY_PREFIX",
            format!("{DEFAULT_REDIS_KEY_PREFIX:?}"),
        ),
        ("DEFAULT_PRIORITY", DEFAULT_PRIORITY.to_string()),
        ("DEFAULT_RPM", DEFAULT_RPM.to_string()),
        ("DEFAULT_MAX_CONCURRENT", DEFAULT_MAX_CONCURRENT.to_string()),
        ("DEFAULT_HEALTH_PATH", format!("{DEFAULT_HEALTH_PATH:?}")),
        ("DEFAULT_STRATEGY", format!("{DEFAULT_STRATEGY:?}")),
        ("DEFAULT_WEIGHT", DEFAULT_WEIGHT.to_string()),
        ("DEFAULT_MAX_LORAS", DEFAULT_MAX_LORAS.to_string()),
        ("DEFAULT_ADMIN_ROLE", format!("{DEFAULT_ADMIN_ROLE:?}")),
        ("DEFAULT_MAX_RETRIES", DEFAULT_MAX_RETRIES.to_string()),
        ("DEFAULT_CONNECT_MS", DEFAULT_CONNECT_MS.to_string()),
        (
            "DEFAULT_FIRST_BYTE_SECS",
            DEFAULT_FIRST_BYTE_SECS.to_string(),
        ),
        ("DEFAULT_IDLE_SECS", DEFAULT_IDLE_SECS.to_string()),
        ("DEFAULT_HEALTH_ENABLED", DEFAULT_HEALTH_ENABLED.to_string()),
        (
            "DEFAULT_HEALTH_INTERVAL_SECS",
            DEFAULT_HEALTH_INTERVAL_SECS.to_string(),
        ),
        (
            "DEFAULT_HEALTH_TIMEOUT_SECS",
            DEFAULT_HEALTH_TIMEOUT_SECS.to_string(),
        ),
        (
            "DEFAULT_UNHEALTHY_AFTER",
            DEFAULT_UNHEALTHY_AFTER.to_string(),
        ),
        ("DEFAULT_HEALTHY_AFTER", DEFAULT_HEALTHY_AFTER.to_string()),
        (
            "DEFAULT_BREAKER_ENABLED",
            DEFAULT_BREAKER_ENABLED.to_string(),
        ),
        (
            "DEFAULT_FAILURE_THRESHOLD",
            DEFAULT_FAILURE_THRESHOLD.to_string(),
        ),
        ("DEFAULT_OPEN_SECS", DEFAULT_OPEN_SECS.to_string()),
        (
            "DEFAULT_PARKING_BASE_SECS",
            DEFAULT_PARKING_BASE_SECS.to_string(),
        ),
        (
            "DEFAULT_PARKING_MAX_SECS",
            DEFAULT_PARKING_MAX_SECS.to_string(),
        ),
        (
            "DEFAULT_POLL_INTERVAL_SECS",
            DEFAULT_POLL_INTERVAL_SECS.to_string(),
        ),
        (
            "DEFAULT_TELEMETRY_INTERVAL_SECS",
            DEFAULT_TELEMETRY_INTERVAL_SECS.to_string(),
        ),
    ])
}

/// Defaults that live outside `file.rs`: the adaptive policy's, from the
/// balancer that applies them.
fn policy_defaults() -> Vec<(&'static str, String)> {
    let policy = rolter_balancer::AdaptivePolicy::default();
    vec![
        ("adaptive_routing.enabled", policy.enabled.to_string()),
        (
            "adaptive_routing.latency_weight",
            format!("{:?}", policy.latency_weight),
        ),
        (
            "adaptive_routing.cost_weight",
            format!("{:?}", policy.cost_weight),
        ),
        (
            "adaptive_routing.load_weight",
            format!("{:?}", policy.load_weight),
        ),
        (
            "adaptive_routing.exploration_ratio",
            format!("{:?}", policy.exploration_ratio),
        ),
        (
            "adaptive_routing.min_samples",
            policy.min_samples.to_string(),
        ),
    ]
}

#[test]
fn configuration_reference_defaults_match_the_code_constants() {
    let constants = default_constants_in_source();
    let literals = default_literals();
    let scanned: BTreeSet<&str> = constants.keys().map(String::as_str).collect();
    let known: BTreeSet<&str> = literals.keys().copied().collect();
    assert_eq!(
        scanned, known,
        "src/config/file.rs has DEFAULT_* constants this test does not render (or no longer has some): add them to default_literals()"
    );
    let docs = documented_fields();
    let mut expected: Vec<(String, String)> = Vec::new();
    for (name, paths) in &constants {
        assert!(!paths.is_empty(), "{name}: its doc comment names no field");
        for path in paths {
            expected.push((path.clone(), literals[name.as_str()].clone()));
        }
    }
    expected.extend(
        policy_defaults()
            .into_iter()
            .map(|(p, v)| (p.to_string(), v)),
    );
    let mut wrong = Vec::new();
    for (path, literal) in expected {
        let (table, field) = path.rsplit_once('.').expect("a dotted path");
        let row = docs
            .get(&(table.to_string(), field.to_string()))
            .unwrap_or_else(|| panic!("{path} has a default in the code but no row in the docs"));
        let documented = code_spans(&row.cells[3]).into_iter().next();
        if documented.as_deref() != Some(literal.as_str()) {
            wrong.push(format!(
                "{path}: the code's default is `{literal}`, the docs say {:?}",
                row.cells[3]
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "wrong defaults in docs/configuration.md:\n{wrong:#?}"
    );
}

/// Every `(table, field)` set in a serialized file (unset fields and empty
/// lists are left out by the serde types).
fn fields_set(value: &Value, table: &str, out: &mut BTreeSet<(String, String)>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                out.insert((table.to_string(), key.clone()));
                let inner_table = dotted(table, key);
                match inner {
                    Value::Object(_) => fields_set(inner, &inner_table, out),
                    Value::Array(items) => {
                        for item in items.iter().filter(|i| i.is_object()) {
                            fields_set(item, &inner_table, out);
                        }
                    }
                    _ => {}
                }
            }
        }
        _ => panic!("not a table at {table}"),
    }
}

#[test]
fn configuration_reference_example_sets_every_field_and_parses() {
    let doc = read("docs/configuration.md");
    let example = fenced_block(&doc, "## Every field at once", "toml");
    let file: ConfigFile = toml::from_str(&example)
        .unwrap_or_else(|e| panic!("the example of docs/configuration.md does not parse: {e}"));
    let mut set = BTreeSet::new();
    fields_set(&serde_json::to_value(&file).unwrap(), "", &mut set);
    let code: BTreeSet<(String, String)> = code_fields().into_keys().collect();
    let unset: Vec<String> = code.difference(&set).map(|(t, f)| dotted(t, f)).collect();
    assert!(
        unset.is_empty(),
        "the \"every field\" example leaves out {unset:?}"
    );
}

/// Every environment variable a rolter.toml names.
pub fn env_vars_named(file: &ConfigFile) -> BTreeSet<String> {
    let mut vars = BTreeSet::new();
    vars.extend(file.providers.iter().filter_map(|p| p.api_key_env.clone()));
    vars.extend(file.api_keys.iter().filter_map(|k| k.key_env.clone()));
    vars.extend(file.admin_tokens.iter().filter_map(|t| t.token_env.clone()));
    if let Some(cp) = &file.control_plane {
        vars.extend(cp.database_url_env.clone());
        vars.extend(cp.internal_token_env.clone());
    }
    vars
}

/// Validates `text` as `rolter check` would, every variable set; returns
/// the file types.
pub fn validate_rolter_toml(source: &str, text: &str) -> ConfigFile {
    let env = |_: &str| Some("postgres://rolter:secret@postgres:5432/rolter".to_string());
    if let Err(errors) = rolter::config::parse(source, text, &env) {
        panic!("{source} does not validate:\n{errors}");
    }
    toml::from_str(text).expect("validated")
}

/// Pingora's YAML as the server reads it; returns how long a drain may
/// take after SIGTERM: Pingora's 5 s hand-over window + grace period +
/// runtime shutdown timeout.
pub fn validate_pingora_yaml(source: &str, text: &str) -> u64 {
    let conf = pingora::server::configuration::ServerConf::from_yaml(text)
        .unwrap_or_else(|e| panic!("{source} is not a valid Pingora configuration: {e}"));
    let grace = conf
        .grace_period_seconds
        .unwrap_or_else(|| panic!("{source}: set grace_period_seconds"));
    let shutdown = conf
        .graceful_shutdown_timeout_seconds
        .unwrap_or_else(|| panic!("{source}: set graceful_shutdown_timeout_seconds"));
    5 + grace + shutdown
}

pub fn port_of(addr: &str) -> u16 {
    addr.rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {addr:?}"))
}

/// The proxy and admin ports a node's file listens on.
pub fn listen_ports(file: &ConfigFile) -> (BTreeSet<u16>, u16) {
    use rolter::config::file::{DEFAULT_ADMIN_LISTEN, DEFAULT_LISTEN};
    let listen = file
        .server
        .listen
        .clone()
        .unwrap_or_else(|| vec![DEFAULT_LISTEN.to_string()]);
    let mut proxy: BTreeSet<u16> = listen.iter().map(|a| port_of(a)).collect();
    for tls in file.server.tls.iter().flatten() {
        proxy.extend(tls.listen.as_deref().map(port_of));
    }
    let admin = port_of(
        file.server
            .admin_listen
            .as_deref()
            .unwrap_or(DEFAULT_ADMIN_LISTEN),
    );
    (proxy, admin)
}

#[test]
fn shipped_configuration_files_validate() {
    for path in [
        "conf/rolter.toml",
        "docker/compose/control.toml",
        "docker/compose/gateway.toml",
    ] {
        validate_rolter_toml(path, &read(path));
    }
    validate_pingora_yaml("conf/pingora.yaml", &read("conf/pingora.yaml"));
    validate_pingora_yaml(
        "docker/compose/pingora.yaml",
        &read("docker/compose/pingora.yaml"),
    );
    let manifests = k8s_manifests();
    let config_maps: Vec<&Value> = manifests
        .iter()
        .filter(|(_, m)| m["kind"] == "ConfigMap")
        .map(|(_, m)| m)
        .collect();
    assert!(!config_maps.is_empty());
    for map in config_maps {
        let name = map["metadata"]["name"].as_str().unwrap();
        let data = &map["data"];
        validate_rolter_toml(
            &format!("ConfigMap {name} rolter.toml"),
            data["rolter.toml"].as_str().expect("a rolter.toml key"),
        );
        validate_pingora_yaml(
            &format!("ConfigMap {name} pingora.yaml"),
            data["pingora.yaml"].as_str().expect("a pingora.yaml key"),
        );
    }
}
