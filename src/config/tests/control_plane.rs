//! `server.role` and `[control_plane]`: what each role requires, and what a
//! gateway's own file may hold.

use super::*;

/// `^[A-Za-z0-9._-]{1,128}$`, as the tests check it.
pub(super) fn is_node_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-_".contains(c))
}

const GATEWAY: &str = r#"[server]
role = "gateway"

[control_plane]
url = "http://control:9090"
internal_token_env = "INTERNAL"
"#;

const CONTROL: &str = r#"[server]
role = "control"

[control_plane]
database_url_env = "DATABASE_URL"
internal_token_env = "INTERNAL"
"#;

const NODE_ENV: &[(&str, &str)] = &[
    ("INTERNAL", "internal-secret"),
    ("DATABASE_URL", "postgres://rolter:pw@db/rolter"),
];

fn node(text: &str) -> Config {
    parse(FILE, text, &env_of(NODE_ENV)).unwrap_or_else(|errors| panic!("{errors}"))
}

fn node_errors(text: &str) -> Vec<ConfigError> {
    match parse(FILE, text, &env_of(NODE_ENV)) {
        Ok(config) => panic!("expected errors, got {config:?}"),
        Err(errors) => errors.0,
    }
}

fn node_error(text: &str) -> ConfigError {
    let errors = node_errors(text);
    assert_eq!(errors.len(), 1, "{}", ConfigErrors(errors.clone()));
    errors.into_iter().next().unwrap()
}

fn reported(errors: &[ConfigError]) -> Vec<(&str, Option<usize>, &str)> {
    errors
        .iter()
        .map(|e| (field(e), e.line, e.message.as_str()))
        .collect()
}

#[test]
fn gateway_takes_its_control_node_and_the_defaults() {
    let config = node(GATEWAY);
    assert_eq!(config.server.role, Role::Gateway);
    let control_plane = config.control_plane.expect("a control plane");
    assert_eq!(control_plane.url.as_deref(), Some("http://control:9090"));
    assert_eq!(
        control_plane.internal_token_env.as_deref(),
        Some("INTERNAL")
    );
    assert_eq!(
        control_plane.internal_token.as_deref(),
        Some("internal-secret")
    );
    assert_eq!(
        (&control_plane.database_url_env, &control_plane.database_url),
        (&None, &None)
    );
    assert_eq!(control_plane.poll_interval, Duration::from_secs(5));
    assert_eq!(control_plane.telemetry_interval, Duration::from_secs(15));
    assert!(
        is_node_id(&control_plane.node_id),
        "{}",
        control_plane.node_id
    );
    assert!(config.warnings.is_empty());
}

#[test]
fn control_node_takes_its_database_and_the_defaults() {
    let config = node(CONTROL);
    assert_eq!(config.server.role, Role::Control);
    let control_plane = config.control_plane.expect("a control plane");
    assert_eq!(control_plane.url, None);
    assert_eq!(
        control_plane.database_url_env.as_deref(),
        Some("DATABASE_URL")
    );
    assert_eq!(
        control_plane.database_url.as_deref(),
        Some("postgres://rolter:pw@db/rolter")
    );
    assert_eq!(
        control_plane.internal_token.as_deref(),
        Some("internal-secret")
    );
    assert!(config.warnings.is_empty());
}

#[test]
fn node_id_defaults_to_the_host_name() {
    let written = node(&format!("{GATEWAY}node_id = \"\"\n"));
    let unwritten = node(GATEWAY);
    let node_id = &unwritten.control_plane.as_ref().unwrap().node_id;
    assert_eq!(&written.control_plane.unwrap().node_id, node_id);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|name| name.trim().to_owned())
        .ok()
        .filter(|name| is_node_id(name));
    if let Some(kernel) = kernel {
        assert_eq!(node_id, &kernel);
    }
}

#[test]
fn node_id_is_checked_when_written() {
    let config = node(&format!("{GATEWAY}node_id = \"gw-1.eu_west\"\n"));
    assert_eq!(config.control_plane.unwrap().node_id, "gw-1.eu_west");
    let longest = "n".repeat(128);
    let config = node(&format!("{GATEWAY}node_id = \"{longest}\"\n"));
    assert_eq!(config.control_plane.unwrap().node_id, longest);
    for bad in ["gw 1", "gw/1", "gw\u{e9}", &"n".repeat(129)] {
        let text = format!("{GATEWAY}node_id = \"{bad}\"\n");
        let error = node_error(&text);
        assert_eq!(field(&error), "control_plane.node_id");
        assert_eq!(error.line, Some(7));
        assert_eq!(
            error.message,
            format!(
                "{bad:?} is not a node id: 1 to 128 characters of A-Z, a-z, 0-9, '.', '_' and '-'"
            )
        );
    }
}

#[test]
fn intervals_are_one_second_to_five_minutes() {
    let config = node(&format!(
        "{GATEWAY}poll_interval_secs = 1\ntelemetry_interval_secs = 300\n"
    ));
    let control_plane = config.control_plane.unwrap();
    assert_eq!(control_plane.poll_interval, Duration::from_secs(1));
    assert_eq!(control_plane.telemetry_interval, Duration::from_secs(300));
    let text = format!("{GATEWAY}poll_interval_secs = 0\ntelemetry_interval_secs = 15000\n");
    assert_eq!(
        reported(&node_errors(&text)),
        [
            (
                "control_plane.poll_interval_secs",
                Some(7),
                "must be between 1 and 300 seconds (got 0)"
            ),
            (
                "control_plane.telemetry_interval_secs",
                Some(8),
                "must be between 1 and 300 seconds (got 15000); the unit is seconds, not milliseconds"
            ),
        ]
    );
}

#[test]
fn standalone_with_a_control_plane_is_refused() {
    for text in [
        "[control_plane]\nurl = \"http://control:9090\"\n",
        "[server]\nrole = \"standalone\"\n\n[control_plane]\n",
    ] {
        let error = node_error(text);
        assert_eq!(field(&error), "control_plane");
        assert_eq!(error.line, line(text, "[control_plane]"));
        assert_eq!(
            error.message,
            "a standalone node has no control plane, so this table would be ignored: set server.role = \"gateway\" or \"control\", or remove it"
        );
    }
}

#[test]
fn gateway_and_control_need_a_control_plane_table() {
    let error = node_error("[server]\nrole = \"gateway\"\n");
    assert_eq!((field(&error), error.line), ("server.role", Some(2)));
    assert_eq!(
        error.message,
        "role \"gateway\" needs a [control_plane] table with url (the control node to poll) and internal_token_env"
    );
    let error = node_error("[server]\nrole = \"control\"\n");
    assert_eq!((field(&error), error.line), ("server.role", Some(2)));
    assert_eq!(
        error.message,
        "role \"control\" needs a [control_plane] table with database_url_env and internal_token_env"
    );
}

#[test]
fn gateway_needs_a_url_and_an_internal_token() {
    let text = "[server]\nrole = \"gateway\"\n\n[control_plane]\nnode_id = \"gw-1\"\n";
    assert_eq!(
        reported(&node_errors(text)),
        [
            (
                "control_plane.url",
                Some(4),
                "is required with role = \"gateway\": the admin listener of the control node to poll (e.g. \"http://control:9090\")"
            ),
            (
                "control_plane.internal_token_env",
                Some(4),
                "is required with role = \"gateway\": the environment variable holding the token gateways present to control nodes (the same on every node)"
            ),
        ]
    );
}

#[test]
fn control_needs_a_database_and_an_internal_token() {
    let text = "[server]\nrole = \"control\"\n\n[control_plane]\n";
    assert_eq!(
        reported(&node_errors(text)),
        [
            (
                "control_plane.database_url_env",
                Some(4),
                "is required with role = \"control\": the environment variable holding the PostgreSQL URL"
            ),
            (
                "control_plane.internal_token_env",
                Some(4),
                "is required with role = \"control\": the environment variable holding the token gateways present to control nodes (the same on every node)"
            ),
        ]
    );
}

#[test]
fn control_plane_variables_must_be_set_and_are_never_shown() {
    let env = env_of(&[
        ("INTERNAL", ""),
        ("DATABASE_URL", "postgres://u:hunter2@db/x\n"),
    ]);
    let errors = parse(FILE, CONTROL, &env).unwrap_err().0;
    assert_eq!(
        reported(&errors),
        [
            (
                "control_plane.database_url_env",
                Some(5),
                "environment variable DATABASE_URL contains control characters (a trailing newline?)"
            ),
            (
                "control_plane.internal_token_env",
                Some(6),
                "environment variable INTERNAL is empty"
            ),
        ]
    );
    assert!(!ConfigErrors(errors).to_string().contains("hunter2"));
    let error = parse(FILE, GATEWAY, &no_env).unwrap_err().0.remove(0);
    assert_eq!(error.message, "environment variable INTERNAL is not set");
}

#[test]
fn control_plane_debug_redacts_the_database_url_and_the_token() {
    let config = node(CONTROL);
    let shown = format!("{config:?}");
    assert!(shown.contains("database_url: Some(<redacted>)"), "{shown}");
    assert!(
        shown.contains("internal_token: Some(<redacted>)"),
        "{shown}"
    );
    assert!(
        !shown.contains("hunter2") && !shown.contains("pw@db"),
        "{shown}"
    );
    assert!(!shown.contains("internal-secret"), "{shown}");
}

#[test]
fn control_url_is_an_http_url_without_a_query() {
    let config = node(&GATEWAY.replace(
        "http://control:9090",
        "https://control.internal:9443/rolter/",
    ));
    assert_eq!(
        config.control_plane.unwrap().url.as_deref(),
        Some("https://control.internal:9443/rolter")
    );
    for (bad, message) in [
        ("control:9090", "\"control:9090\" must start with http:// or https://"),
        ("http://control:9090/?x=1", "\"http://control:9090/?x=1\" must not have a query: rolter appends its own paths to it"),
        ("http://u:p@control", "must not carry credentials (user@host)"),
    ] {
        let error = node_error(&GATEWAY.replace("http://control:9090", bad));
        assert_eq!((field(&error), error.line), ("control_plane.url", Some(5)));
        assert_eq!(error.message, message);
    }
}

#[test]
fn a_field_of_the_other_role_is_warned_and_not_read() {
    // The gateway's environment has no DATABASE_URL: it is not read.
    let text = format!("{GATEWAY}database_url_env = \"DATABASE_URL\"\n");
    let config = parse(FILE, &text, &env_of(&[("INTERNAL", "t")])).unwrap();
    assert_eq!(config.control_plane.unwrap().database_url, None);
    assert_eq!(
        reported(&config.warnings),
        [(
            "control_plane.database_url_env",
            Some(7),
            "has no effect with role = \"gateway\": a gateway reaches the database through its control node"
        )]
    );
    let text = format!("{CONTROL}url = \"not a url\"\n");
    let config = node(&text);
    assert_eq!(config.control_plane.unwrap().url, None);
    assert_eq!(
        reported(&config.warnings),
        [(
            "control_plane.url",
            Some(7),
            "has no effect with role = \"control\": only gateways poll a control node"
        )]
    );
}

#[test]
fn gateway_file_holds_only_its_own_sections() {
    let allowed = format!(
        "{GATEWAY}\n[[admin_tokens]]\nname = \"local\"\ntoken_env = \"INTERNAL\"\nrole = \"admin\"\n"
    );
    let config = node(&allowed);
    assert_eq!(config.admin_tokens[0].name, "local");
    assert!(config.providers.is_empty());

    let text = format!(
        "retry.max_retries = 3\n{GATEWAY}\n[[providers]]\nbase_url = \"ftp://nowhere\"\n\n[timeouts]\n"
    );
    let errors = node_errors(&text);
    let message = |header: &str| {
        format!("{header} is set on the control node: a gateway takes it from the fleet document, and its own file holds only [server], [control_plane] and [[admin_tokens]]")
    };
    // The refused sections are not validated too: no base_url noise.
    assert_eq!(
        errors
            .iter()
            .map(|e| (field(e), e.line, e.message.clone()))
            .collect::<Vec<_>>(),
        [
            ("retry", Some(1), message("[retry]")),
            (
                "providers",
                line(&text, "[[providers]]"),
                message("[[providers]]")
            ),
            ("timeouts", line(&text, "[timeouts]"), message("[timeouts]")),
        ]
    );
}

#[test]
fn role_rules_apply_to_documents_too_but_not_the_gateway_file_rule() {
    let mut document: file::ConfigFile = toml::from_str(GATEWAY).unwrap();
    document.retry.max_retries = Some(4);
    let config = parse_document("fleet", &document, &env_of(NODE_ENV)).unwrap();
    assert_eq!(config.retry.max_retries, 4);

    document.control_plane.as_mut().unwrap().url = None;
    let errors = parse_document("fleet", &document, &env_of(NODE_ENV))
        .unwrap_err()
        .0;
    assert_eq!(reported(&errors)[0].0, "control_plane.url");
    assert_eq!(errors[0].line, None);
    assert_eq!(
        errors[0].to_string(),
        "fleet: control_plane.url: is required with role = \"gateway\": the admin listener of the control node to poll (e.g. \"http://control:9090\")"
    );
}
