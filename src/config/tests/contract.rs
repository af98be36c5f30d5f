//! The example of docs/design/configuration.md: everything in it validates (provider groups,
//! the catalog, the adaptive policy, health, breaker and parking, TLS, the
//! access log, engine telemetry, key limits and the control plane
//! included), except that its `[control_plane]` is refused under its
//! `role = "standalone"`, which has none.

use rolter_balancer::StrategyKind;
use sha2::{Digest, Sha256};

use super::*;

/// What both examples write alike, from the adaptive policy's fields to
/// the connect timeout (the contract's defaults).
macro_rules! defaults_sections {
    () => {
        r#"enabled = false
latency_weight = 1.0
cost_weight = 0.5
load_weight = 0.25
exploration_ratio = 0.05
min_samples = 50

[health]
enabled = true
interval_secs = 10
timeout_secs = 2
unhealthy_after = 3
healthy_after = 2

[breaker]
enabled = true
failure_threshold = 5
open_secs = 30

[parking]
base_secs = 5
max_secs = 300

[retry]
max_retries = 2

[timeouts]
connect_ms = 2000
"#
    };
}

pub(super) const CONTRACT_EXAMPLE_IMPLEMENTED: &str = concat!(
    r#"
[server]
listen = ["0.0.0.0:8080"]          # proxy listeners
admin_listen = "127.0.0.1:9090"    # admin / metrics / control API
role = "standalone"                # standalone | gateway | control
max_body_bytes = 33554432          # 413 above this
require_api_key = true             # false: anonymous callers may use every route

[[providers]]
name = "gpu-a"                     # display name
slug = "gpu-a"                     # optional; derived from name; ^[a-z0-9][a-z0-9-]{0,62}$
base_url = "http://10.0.0.11:8000"
api_key_env = "GPU_A_KEY"          # optional: sent upstream as a bearer token
health_path = "/v1/models"         # optional

[[providers]]
name = "GPU B"
base_url = "https://10.0.0.12"

[[routes]]
model = "qwen-chat"                # public model name clients send
strategy = "weighted"              # any strategy of docs/design/balancer.md
targets = [
  { provider = "gpu-a", model = "Qwen/Qwen3-8B" },            # model: upstream name (default: the public one)
  { provider = "gpu-b", model = "Qwen/Qwen3-8B", weight = 2 }, # weight: default 1
]

[[provider_groups]]                # addressable as "<slug>/<model>"
name = "Edge fleet"
slug = "edge-fleet"                # optional; derived from name
strategy = "weighted"
members = [{ provider = "gpu-a", weight = 2 }, { provider = "gpu-b", model = "Qwen/Qwen3-8B" }]

[[catalog]]                        # prices, used by adaptive (cost) and the dashboard
model = "Qwen/Qwen3-8B"            # upstream model name
input_per_mtok = 0.10
output_per_mtok = 0.40

[[api_keys]]                       # callers of the proxy
name = "team-alpha"
key_env = "TEAM_ALPHA_KEY"         # or key_sha256 = "<hex>"
models = ["qwen-chat"]             # allowed public models / group addresses; empty = all
providers = []                     # allowed provider slugs; empty = all

[[admin_tokens]]                   # callers of the admin / control API
name = "ops"
token_env = "ROLTER_ADMIN_TOKEN"
role = "superadmin"                # superadmin | admin | viewer

[adaptive_routing]                 # deployment-wide policy (see docs/design/balancer.md)
"#,
    defaults_sections!(),
    r#"first_byte_secs = 120              # until the upstream's response headers
idle_secs = 300                    # between two reads of a streaming response
"#
);

const EXAMPLE_ENV: &[(&str, &str)] = &[
    ("GPU_A_KEY", "sk-upstream-a"),
    ("TEAM_ALPHA_KEY", "sk-team-alpha"),
    ("ROLTER_ADMIN_TOKEN", "admin-secret"),
];

#[test]
fn contract_example_without_unimplemented_parts_validates() {
    let config = parse(FILE, CONTRACT_EXAMPLE_IMPLEMENTED, &env_of(EXAMPLE_ENV))
        .unwrap_or_else(|errors| panic!("{errors}"));
    assert_eq!(config.providers.len(), 2);
    assert_eq!(
        config.providers[0].api_key.as_deref(),
        Some("sk-upstream-a")
    );
    assert_eq!(config.providers[1].slug, "gpu-b");
    assert_eq!(config.providers[1].base_url.port, 443);
    let route = &config.routes[0];
    assert_eq!(route.strategy, StrategyKind::Weighted);
    assert_eq!(route.targets[1].provider, "gpu-b");
    assert_eq!(route.targets[1].model, "Qwen/Qwen3-8B");
    assert_eq!(route.targets[1].weight, 2);
    let key = &config.api_keys[0];
    assert_eq!(
        key.digest,
        SecretDigest::Sha256(Sha256::digest(b"sk-team-alpha").into())
    );
    assert_eq!(key.models, vec!["qwen-chat".to_string()]);
    assert_eq!(config.admin_tokens[0].role, AdminRole::Superadmin);
    assert_eq!(
        config.admin_tokens[0].digest,
        SecretDigest::Sha256(Sha256::digest(b"admin-secret").into())
    );
    assert_eq!(config.control_plane, None);
    assert_eq!(
        config.provider_groups,
        [ProviderGroup {
            name: "Edge fleet".into(),
            tokenizer: None,
            cache_guard: Default::default(),
            endpoints: Default::default(),
            slug: "edge-fleet".into(),
            strategy: StrategyKind::Weighted,
            members: vec![
                GroupMember {
                    provider: "gpu-a".into(),
                    model: None,
                    weight: 2,
                },
                GroupMember {
                    provider: "gpu-b".into(),
                    model: Some("Qwen/Qwen3-8B".into()),
                    weight: 1,
                },
            ],
        }]
    );
    let price = config.price_of("Qwen/Qwen3-8B").expect("priced");
    assert_eq!((price.input_per_mtok, price.output_per_mtok), (0.10, 0.40));
    assert_eq!(config.price_of("qwen-chat"), None);
    assert_eq!(
        config.adaptive_routing,
        rolter_balancer::AdaptivePolicy::default()
    );
    assert_eq!(config.providers[0].max_loras, 8);
    assert_eq!(
        config.health,
        Health {
            enabled: true,
            interval: Duration::from_secs(10),
            timeout: Duration::from_secs(2),
            unhealthy_after: 3,
            healthy_after: 2,
        }
    );
    assert_eq!(
        config.breaker,
        Breaker {
            enabled: true,
            failure_threshold: 5,
            open: Duration::from_secs(30),
        }
    );
    assert_eq!(
        config.parking,
        Parking {
            base: Duration::from_secs(5),
            max: Duration::from_secs(300),
        }
    );
    assert!(
        config.warnings.is_empty(),
        "{}",
        ConfigErrors(config.warnings.clone())
    );
}

/// The contract's example verbatim, as docs/design/configuration.md shows it.
pub(super) const CONTRACT_EXAMPLE_VERBATIM: &str = concat!(
    r#"
[server]
listen = ["0.0.0.0:8080"]
admin_listen = "127.0.0.1:9090"
role = "standalone"
max_body_bytes = 33554432
require_api_key = true
trusted_proxies = []
access_log = "stdout"
access_log_format = "json"

[[server.tls]]
listen = "0.0.0.0:8443"
certificates = [
  { cert_path = "/etc/rolter/tls/api.pem", key_path = "/etc/rolter/tls/api.key" },
]

[[providers]]
name = "gpu-a"
slug = "gpu-a"
base_url = "http://10.0.0.11:8000"
api_key_env = "GPU_A_KEY"
health_path = "/v1/models"
ca_file = "/etc/ssl/private-ca.pem"
tls_verify = true
[providers.kv_events]
endpoint = "tcp://10.0.0.11:5557"
replay_endpoint = "tcp://10.0.0.11:5558"
topic = ""
block_size = 16
[providers.lmcache]
endpoint = "http://10.0.0.11:9000/occupancy"

[[providers]]
name = "gpu-b"
base_url = "http://10.0.0.12:8000"

[[routes]]
model = "qwen-chat"
strategy = "cache_aware"
targets = [
  { provider = "gpu-a", model = "Qwen/Qwen3-8B" },
  { provider = "gpu-b", model = "Qwen/Qwen3-8B", weight = 2 },
]

[[provider_groups]]
name = "Edge fleet"
slug = "edge-fleet"
strategy = "weighted"
members = [{ provider = "gpu-a", weight = 2 }, { provider = "gpu-b", model = "Qwen/Qwen3-8B" }]

[[catalog]]
model = "Qwen/Qwen3-8B"
input_per_mtok = 0.10
output_per_mtok = 0.40

[[api_keys]]
name = "team-alpha"
key_env = "TEAM_ALPHA_KEY"
models = ["qwen-chat"]
providers = []
rpm = 0
max_concurrent = 0

[[admin_tokens]]
name = "ops"
token_env = "ROLTER_ADMIN_TOKEN"
role = "superadmin"

[adaptive_routing]
"#,
    defaults_sections!(),
    r#"first_byte_secs = 120
idle_secs = 300

[control_plane]
url = "http://control:9090"
database_url_env = "DATABASE_URL"
internal_token_env = "ROLTER_INTERNAL_TOKEN"
node_id = ""
"#
);

#[test]
fn the_design_document_shows_the_contract_example_verbatim() {
    let document = include_str!("../../../docs/design/configuration.md");
    let block = document
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("a toml block in docs/design/configuration.md");
    assert_eq!(block.trim(), CONTRACT_EXAMPLE_VERBATIM.trim());
}

/// The example's own TLS paths, which do not exist on a test machine.
const EXAMPLE_CERT: &str = "/etc/rolter/tls/api.pem";
const EXAMPLE_KEY: &str = "/etc/rolter/tls/api.key";
const EXAMPLE_CA: &str = "/etc/ssl/private-ca.pem";

#[test]
fn contract_example_verbatim_fails_only_on_its_paths_and_its_standalone_control_plane() {
    for path in [EXAMPLE_CERT, EXAMPLE_KEY, EXAMPLE_CA] {
        assert!(
            !std::path::Path::new(path).exists(),
            "{path} exists on this machine; this test expects it not to"
        );
    }
    let errors = parse(FILE, CONTRACT_EXAMPLE_VERBATIM, &env_of(EXAMPLE_ENV))
        .expect_err("the example's paths do not exist and a standalone node has no control plane")
        .0;
    let text = CONTRACT_EXAMPLE_VERBATIM;
    let missing =
        |path: &str| format!("cannot read {path:?}: No such file or directory (os error 2)");
    let standalone = "a standalone node has no control plane, so this table would be ignored: set server.role = \"gateway\" or \"control\", or remove it".to_owned();
    let mut expected: Vec<(&str, Option<usize>, String)> = vec![
        (
            "server.tls[0].certificates[0].cert_path",
            line(text, "cert_path"),
            missing(EXAMPLE_CERT),
        ),
        (
            "server.tls[0].certificates[0].key_path",
            line(text, "key_path"),
            missing(EXAMPLE_KEY),
        ),
        (
            "providers[0].ca_file",
            line(text, "ca_file"),
            missing(EXAMPLE_CA),
        ),
        ("control_plane", line(text, "[control_plane]"), standalone),
    ];
    // Until the balancer has cache_aware, the route refuses it too.
    if StrategyKind::from_name("cache_aware").is_none() {
        expected.push((
            "routes[0].strategy",
            line(text, "strategy = \"cache_aware\""),
            "strategy `cache_aware` is not available in this version yet".to_owned(),
        ));
        expected.sort_by_key(|(_, at, _)| *at);
    }
    let got: Vec<(&str, Option<usize>, String)> = errors
        .iter()
        .map(|e| (field(e), e.line, e.message.clone()))
        .collect();
    assert_eq!(got, expected, "{}", ConfigErrors(errors.clone()));
}

/// the contract's example with its TLS paths pointing at files that exist and
/// without `[control_plane]`: everything else in it is implemented.
#[test]
fn contract_example_with_real_files_validates_every_edge_and_telemetry_field() {
    let files = tls_files();
    let control_plane = CONTRACT_EXAMPLE_VERBATIM
        .find("[control_plane]")
        .expect("the example has a control plane");
    let text = CONTRACT_EXAMPLE_VERBATIM[..control_plane]
        .replace(EXAMPLE_CERT, &files.cert)
        .replace(EXAMPLE_KEY, &files.key)
        .replace(EXAMPLE_CA, &files.ca);
    let config = match parse(FILE, &text, &env_of(EXAMPLE_ENV)) {
        Ok(config) => config,
        // Only until the balancer has cache_aware (see the test above).
        Err(errors) if StrategyKind::from_name("cache_aware").is_none() => {
            assert_eq!(errors.0.len(), 1, "{errors}");
            assert_eq!(field(&errors.0[0]), "routes[0].strategy");
            return;
        }
        Err(errors) => panic!("{errors}"),
    };

    let server = &config.server;
    assert_eq!(
        server.tls,
        [TlsListener {
            listen: "0.0.0.0:8443".into(),
            certificates: vec![Certificate {
                cert_path: files.cert.clone().into(),
                key_path: files.key.clone().into(),
            }],
        }]
    );
    assert!(server.trusted_proxies.is_empty());
    assert_eq!(server.access_log, AccessLog::Stdout);
    assert_eq!(server.access_log_format, AccessLogFormat::Json);

    let gpu_a = &config.providers[0];
    assert_eq!(
        gpu_a.tls,
        UpstreamTls {
            ca_file: Some(files.ca.clone().into()),
            verify: true,
        }
    );
    assert_eq!(
        gpu_a.kv_events,
        Some(KvEvents {
            endpoint: "tcp://10.0.0.11:5557".into(),
            replay_endpoint: Some("tcp://10.0.0.11:5558".into()),
            topic: String::new(),
            block_size: 16,
            data_parallel_size: 1,
        })
    );
    assert_eq!(
        gpu_a.lmcache,
        Some(Lmcache {
            endpoint: "http://10.0.0.11:9000/occupancy".into(),
            format: LmcacheFormat::Json,
            poll_interval: Duration::from_secs(2),
            stale_after: Duration::from_secs(10),
        })
    );
    assert_eq!(config.providers[1].kv_events, None);
    assert_eq!(
        (config.api_keys[0].rpm, config.api_keys[0].max_concurrent),
        (0, 0)
    );
    assert_eq!(config.routes[0].strategy, StrategyKind::CacheAware);

    // The example's gpu-a is http:// and names a CA file, and its route
    // weighs a target under a strategy that ignores weights: said, not
    // refused.
    let warnings: Vec<(&str, Option<usize>, &str)> = config
        .warnings
        .iter()
        .map(|w| (field(w), w.line, w.message.as_str()))
        .collect();
    assert_eq!(
        warnings,
        [
            (
                "providers[0].ca_file",
                line(&text, "ca_file"),
                "has no effect: base_url is http://; a CA file is read only for https://"
            ),
            (
                "routes[0].targets[1].weight",
                line(&text, "weight = 2 },"),
                "strategy \"cache_aware\" ignores weights; this weight has no effect (strategies that read weights: weighted, pipeline, adaptive)"
            ),
        ]
    );
}

/// The example's TLS paths made real, for the role tests below.
fn example_with_files(files: &TlsFiles) -> String {
    CONTRACT_EXAMPLE_VERBATIM
        .replace(EXAMPLE_CERT, &files.cert)
        .replace(EXAMPLE_KEY, &files.key)
        .replace(EXAMPLE_CA, &files.ca)
}

/// the contract's example as a control node's file: everything in it is
/// allowed, and its control-plane `url` is said to have no effect.
#[test]
fn contract_example_as_a_control_node_validates_with_its_database() {
    let files = tls_files();
    let text = example_with_files(&files).replace("role = \"standalone\"", "role = \"control\"");
    let mut env = EXAMPLE_ENV.to_vec();
    env.extend([
        ("DATABASE_URL", "postgres://rolter@db/rolter"),
        ("ROLTER_INTERNAL_TOKEN", "internal-secret"),
    ]);
    let config = parse(FILE, &text, &env_of(&env)).unwrap_or_else(|errors| panic!("{errors}"));
    assert_eq!(config.server.role, Role::Control);
    let control_plane = config.control_plane.as_ref().expect("a control plane");
    assert_eq!(control_plane.url, None);
    assert_eq!(
        control_plane.database_url.as_deref(),
        Some("postgres://rolter@db/rolter")
    );
    assert_eq!(
        control_plane.internal_token.as_deref(),
        Some("internal-secret")
    );
    // `node_id = ""`: the host name.
    assert!(super::control_plane::is_node_id(&control_plane.node_id));
    assert_eq!(config.providers.len(), 2);
    let url_warning = config
        .warnings
        .iter()
        .find(|w| field(w) == "control_plane.url")
        .expect("url warned");
    assert_eq!(
        url_warning.line,
        line(&text, "url = \"http://control:9090\"")
    );
    assert_eq!(
        url_warning.message,
        "has no effect with role = \"control\": only gateways poll a control node"
    );
}

/// the contract's example as a gateway's file: every fleet section is refused,
/// each at its line; `[server]`, `[control_plane]` and `[[admin_tokens]]`
/// are not.
#[test]
fn contract_example_as_a_gateway_file_refuses_every_fleet_section() {
    let files = tls_files();
    let text = example_with_files(&files).replace("role = \"standalone\"", "role = \"gateway\"");
    let env = env_of(&[
        ("ROLTER_ADMIN_TOKEN", "admin-secret"),
        ("ROLTER_INTERNAL_TOKEN", "internal-secret"),
    ]);
    let errors = parse(FILE, &text, &env).unwrap_err().0;
    let got: Vec<(&str, Option<usize>)> = errors.iter().map(|e| (field(e), e.line)).collect();
    let expected: Vec<(&str, Option<usize>)> = [
        ("providers", "[[providers]]"),
        ("routes", "[[routes]]"),
        ("provider_groups", "[[provider_groups]]"),
        ("catalog", "[[catalog]]"),
        ("api_keys", "[[api_keys]]"),
        ("adaptive_routing", "[adaptive_routing]"),
        ("health", "[health]"),
        ("breaker", "[breaker]"),
        ("parking", "[parking]"),
        ("retry", "[retry]"),
        ("timeouts", "[timeouts]"),
    ]
    .into_iter()
    .map(|(field, header)| (field, line(&text, header)))
    .collect();
    assert_eq!(got, expected, "{}", ConfigErrors(errors.clone()));
    assert_eq!(
        errors[0].to_string(),
        format!(
            "conf/rolter.toml:{}: providers: [[providers]] is set on the control node: a gateway takes it from the fleet document, and its own file holds only [server], [control_plane] and [[admin_tokens]]",
            line(&text, "[[providers]]").unwrap()
        )
    );
    assert_eq!(
        errors[5].message,
        "[adaptive_routing] is set on the control node: a gateway takes it from the fleet document, and its own file holds only [server], [control_plane] and [[admin_tokens]]"
    );
}
