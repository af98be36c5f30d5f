//! Serde types that mirror `rolter.toml` field for field (see
//! docs/design/configuration.md). Nothing here is checked beyond TOML types: validation
//! (`validate.rs`) turns these into the internal types the gateway uses.
//!
//! Every table denies unknown keys, so a typo is an error rather than a
//! setting silently ignored. Fields that are required by the contract are
//! still `Option` here, so that validation can report every missing field at
//! once, with its path, instead of serde stopping at the first.
//!
//! The same types carry a fleet's configuration from a control node to its
//! gateways, as JSON (`config::parse_json`): every type is `Serialize` too,
//! an unset field is left out rather than written as `null`, and a list
//! that defaults to empty is left out when empty, so a document says only
//! what was set and reads back as the same values.
//!
//! Fields the contract does not list are extensions, marked as such; the
//! contract allows adding fields, never renaming them.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Default for `server.listen`.
pub const DEFAULT_LISTEN: &str = "0.0.0.0:8080";
/// Default for `server.admin_listen`.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9090";
/// Default for `server.role`.
pub const DEFAULT_ROLE: &str = "standalone";
/// Default for `server.max_body_bytes`: 32 MiB.
pub const DEFAULT_MAX_BODY_BYTES: u64 = 32 * 1024 * 1024;
/// Default for `server.require_api_key`.
pub const DEFAULT_REQUIRE_API_KEY: bool = true;
/// Default for `server.access_log`.
pub const DEFAULT_ACCESS_LOG: &str = "stdout";
/// Default for `server.access_log_format`.
pub const DEFAULT_ACCESS_LOG_FORMAT: &str = "json";
/// Default for `server.header_read_timeout_secs`, in seconds: 60 (nginx's
/// `client_header_timeout`).
pub const DEFAULT_HEADER_READ_TIMEOUT_SECS: u64 = 60;
/// Upper bound for `server.header_read_timeout_secs`, in seconds: one hour;
/// catches the default written in milliseconds (60000).
pub const MAX_HEADER_READ_TIMEOUT_SECS: u64 = 3_600;
/// Default for `server.send_timeout_secs`, in seconds: 60 (nginx's
/// `send_timeout`).
pub const DEFAULT_SEND_TIMEOUT_SECS: u64 = 60;
/// Upper bound for `server.send_timeout_secs`, in seconds: one hour;
/// catches the default written in milliseconds (60000).
pub const MAX_SEND_TIMEOUT_SECS: u64 = 3_600;
/// Default for `server.max_request_header_bytes`: 32 KiB (nginx's
/// `large_client_header_buffers 4 8k`).
pub const DEFAULT_MAX_REQUEST_HEADER_BYTES: u64 = 32 * 1024;
/// Bounds of `server.max_request_header_bytes`: a request line and a
/// handful of headers need 1 KiB; Pingora itself reads at most 1 MiB.
pub const MIN_REQUEST_HEADER_BYTES: u64 = 1024;
pub const MAX_REQUEST_HEADER_BYTES: u64 = 1024 * 1024 - 1;
/// Default for `server.keepalive_timeout_secs`, in seconds: 60.
pub const DEFAULT_KEEPALIVE_TIMEOUT_SECS: u64 = 60;
/// Upper bound for `server.keepalive_timeout_secs`, in seconds: one hour;
/// catches the default written in milliseconds (60000).
pub const MAX_KEEPALIVE_TIMEOUT_SECS: u64 = 3_600;
/// Default for `server.keepalive_requests`: 1000 (nginx's default).
pub const DEFAULT_KEEPALIVE_REQUESTS: u32 = 1_000;
/// Default for `server.max_connections`: 0, unlimited.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 0;
/// Default for `providers.tls_verify`.
pub const DEFAULT_TLS_VERIFY: bool = true;
/// Default for `providers.kv_events.topic`: every topic.
pub const DEFAULT_KV_EVENTS_TOPIC: &str = "";
/// Default for `providers.kv_events.block_size`, in tokens: vLLM's default
/// `--block-size`.
pub const DEFAULT_KV_BLOCK_SIZE: u64 = 16;
/// Upper bound for `providers.kv_events.block_size`, in tokens: far above
/// any engine's block size.
pub const MAX_KV_BLOCK_SIZE: u64 = 1_024;
/// Default for `providers.kv_events.data_parallel_size`: one rank.
pub const DEFAULT_DATA_PARALLEL_SIZE: u64 = 1;
/// Upper bound for `providers.kv_events.data_parallel_size`: one
/// subscription per rank, and no engine runs more ranks than this.
pub const MAX_DATA_PARALLEL_SIZE: u64 = 64;
/// Default for `providers.lmcache.format`.
pub const DEFAULT_LMCACHE_FORMAT: &str = "json";
/// Default for `providers.lmcache.poll_interval_secs`, in seconds: 2.
pub const DEFAULT_LMCACHE_POLL_INTERVAL_SECS: u64 = 2;
/// Upper bound for `providers.lmcache.poll_interval_secs`, in seconds: one
/// hour; an occupancy polled more rarely says nothing about the cache now.
pub const MAX_LMCACHE_POLL_INTERVAL_SECS: u64 = 3_600;
/// Default for `providers.lmcache.stale_after_secs`, in seconds: 10, five
/// missed polls.
pub const DEFAULT_LMCACHE_STALE_AFTER_SECS: u64 = 10;
/// Upper bound for `providers.lmcache.stale_after_secs`, in seconds: one
/// day; a signal that old says nothing about the cache.
pub const MAX_LMCACHE_STALE_AFTER_SECS: u64 = 86_400;
/// Default for `providers.engine_metrics.poll_interval_ms`: 500.
pub const DEFAULT_ENGINE_METRICS_POLL_INTERVAL_MS: u64 = 500;
/// Lower bound for `providers.engine_metrics.poll_interval_ms`: 50; more
/// often costs the engine more than the reading is worth.
pub const MIN_ENGINE_METRICS_POLL_INTERVAL_MS: u64 = 50;
/// Upper bound for `providers.engine_metrics.poll_interval_ms`: one minute;
/// a load read more rarely says nothing about the load now.
pub const MAX_ENGINE_METRICS_POLL_INTERVAL_MS: u64 = 60_000;
/// Default for `providers.engine_metrics.stale_after_ms`: 3000, six missed polls.
pub const DEFAULT_ENGINE_METRICS_STALE_AFTER_MS: u64 = 3_000;
/// Upper bound for `providers.engine_metrics.stale_after_ms`: ten minutes.
pub const MAX_ENGINE_METRICS_STALE_AFTER_MS: u64 = 600_000;
/// Upper bound for `providers.max_concurrency`.
pub const MAX_PROVIDER_CONCURRENCY: u64 = 1_000_000;
/// Default for `saturation.max_waiting`: 5 (llm-d's saturation detector).
pub const DEFAULT_SATURATION_MAX_WAITING: u64 = 5;
/// Upper bound for `saturation.max_waiting`.
pub const MAX_SATURATION_MAX_WAITING: u64 = 1_000_000;
/// Default for `saturation.max_kv_usage`: 0.8 (llm-d's saturation detector).
pub const DEFAULT_SATURATION_MAX_KV_USAGE: f64 = 0.8;
/// Default for `rate_limits.redis_timeout_ms`.
pub const DEFAULT_REDIS_TIMEOUT_MS: u64 = 50;
/// Upper bound for `rate_limits.redis_timeout_ms`.
pub const MAX_REDIS_TIMEOUT_MS: u64 = 5_000;
/// Default for `rate_limits.redis_key_prefix`.
pub const DEFAULT_REDIS_KEY_PREFIX: &str = "rolter:limits:";

/// Default for `tracing.service_name`.
pub const DEFAULT_TRACING_SERVICE_NAME: &str = "rolter";
/// Default for `tracing.max_queued_spans`.
pub const DEFAULT_TRACING_MAX_QUEUED_SPANS: u64 = 4096;
/// Upper bound for `tracing.max_queued_spans`.
pub const MAX_TRACING_MAX_QUEUED_SPANS: u64 = 1_000_000;

/// Default for `flow_control.enabled`.
pub const DEFAULT_FLOW_CONTROL_ENABLED: bool = false;
/// Default for `flow_control.max_queued`, per route: 1000.
pub const DEFAULT_FLOW_CONTROL_MAX_QUEUED: u64 = 1_000;
/// Upper bound for `flow_control.max_queued`.
pub const MAX_FLOW_CONTROL_MAX_QUEUED: u64 = 1_000_000;
/// Default for `flow_control.max_wait_secs`: 30.
pub const DEFAULT_FLOW_CONTROL_MAX_WAIT_SECS: u64 = 30;
/// Upper bound for `flow_control.max_wait_secs`: one hour.
pub const MAX_FLOW_CONTROL_MAX_WAIT_SECS: u64 = 3_600;
/// Default for `api_keys.priority`.
pub const DEFAULT_PRIORITY: i64 = 0;
/// Bound of `api_keys.priority` either way.
pub const MAX_PRIORITY: i64 = 1_000;
/// Largest `api_keys.tpm`: a trillion tokens a minute, far past any fleet.
pub const MAX_TPM: u64 = 1_000_000_000_000;

/// Default for `api_keys.rpm`: 0, unlimited.
pub const DEFAULT_RPM: u32 = 0;
/// Default for `api_keys.max_concurrent`: 0, unlimited.
pub const DEFAULT_MAX_CONCURRENT: u32 = 0;
/// Default for `providers.health_path`: every OpenAI-compatible engine
/// answers it.
pub const DEFAULT_HEALTH_PATH: &str = "/v1/models";
/// Default for `routes.strategy`.
pub const DEFAULT_STRATEGY: &str = "round_robin";
/// Default for `routes.targets.weight` and `provider_groups.members.weight`.
pub const DEFAULT_WEIGHT: u32 = 1;
/// Default for `providers.max_loras`: what `lora_aware` assumes when the
/// provider does not say (the balancer's own default, so the two agree).
pub const DEFAULT_MAX_LORAS: u64 = rolter_balancer::TargetSpec::DEFAULT_MAX_ADAPTERS as u64;
/// Upper bound for `providers.max_loras`: far above any engine's adapter
/// slots, low enough that a typo cannot make a balancer remember millions.
pub const MAX_LORAS_LIMIT: u64 = 1024;
/// Upper bound for `adaptive_routing.exploration_ratio`: exploration never
/// exceeds half the traffic (docs/design/balancer.md).
pub const MAX_EXPLORATION_RATIO: f64 = 0.5;
/// Default for `admin_tokens.role`: the least privilege.
pub const DEFAULT_ADMIN_ROLE: &str = "viewer";
/// Default for `retry.max_retries`: 2 (docs/design/defaults.md, "Gateway").
pub const DEFAULT_MAX_RETRIES: u32 = 2;
/// Upper bound for `retry.max_retries`: more only multiplies the load an
/// outage puts on the remaining targets.
pub const MAX_RETRIES_LIMIT: u32 = 10;
/// Default for `timeouts.connect_ms`.
pub const DEFAULT_CONNECT_MS: u64 = 2_000;
/// Default for `timeouts.first_byte_secs`: long prompts take a while to
/// prefill before the engine sends its response headers.
pub const DEFAULT_FIRST_BYTE_SECS: u64 = 120;
/// Default for `timeouts.idle_secs`.
pub const DEFAULT_IDLE_SECS: u64 = 300;
/// Default for `health.enabled`: every provider is probed.
pub const DEFAULT_HEALTH_ENABLED: bool = true;
/// Default for `health.interval_secs`, in seconds: 10 (docs/design/defaults.md).
pub const DEFAULT_HEALTH_INTERVAL_SECS: u64 = 10;
/// Upper bound for `health.interval_secs`, in seconds: one hour. A probe
/// rarer than that no longer tracks health, and the bound catches the
/// default written in milliseconds (10000).
pub const MAX_HEALTH_INTERVAL_SECS: u64 = 3_600;
/// Default for `health.timeout_secs`, in seconds: 2 (docs/design/defaults.md). Must be
/// below `health.interval_secs`, which also bounds it.
pub const DEFAULT_HEALTH_TIMEOUT_SECS: u64 = 2;
/// Default for `health.unhealthy_after`, in consecutive failed probes: 3
/// (docs/design/defaults.md).
pub const DEFAULT_UNHEALTHY_AFTER: u32 = 3;
/// Default for `health.healthy_after`, in consecutive successful probes: 2
/// (docs/design/defaults.md).
pub const DEFAULT_HEALTHY_AFTER: u32 = 2;
/// Upper bound for `health.unhealthy_after` and `health.healthy_after`, in
/// probes: at the default interval, 100 probes are already 17 minutes.
pub const MAX_HEALTH_THRESHOLD: u32 = 100;
/// Default for `breaker.enabled`.
pub const DEFAULT_BREAKER_ENABLED: bool = true;
/// Default for `breaker.failure_threshold`, in consecutive failed requests:
/// 5 (docs/design/defaults.md).
pub const DEFAULT_FAILURE_THRESHOLD: u32 = 5;
/// Upper bound for `breaker.failure_threshold`, in requests: a breaker that
/// needs more than 1000 failures in a row never opens in practice.
pub const MAX_FAILURE_THRESHOLD: u32 = 1_000;
/// Default for `breaker.open_secs`, in seconds: 30 (docs/design/defaults.md).
pub const DEFAULT_OPEN_SECS: u64 = 30;
/// Upper bound for `breaker.open_secs`, in seconds: one hour; catches the
/// default written in milliseconds (30000).
pub const MAX_OPEN_SECS: u64 = 3_600;
/// Default for `parking.base_secs`, in seconds: 5 (docs/design/defaults.md).
pub const DEFAULT_PARKING_BASE_SECS: u64 = 5;
/// Upper bound for `parking.base_secs`, in seconds: one hour; catches the
/// default written in milliseconds (5000).
pub const MAX_PARKING_BASE_SECS: u64 = 3_600;
/// Default for `parking.max_secs`, in seconds: 300 (docs/design/defaults.md).
pub const DEFAULT_PARKING_MAX_SECS: u64 = 300;
/// Upper bound for `parking.max_secs`, in seconds: one day, the longest
/// `Retry-After` worth honouring (a daily quota); catches the default
/// written in milliseconds (300000).
pub const MAX_PARKING_MAX_SECS: u64 = 86_400;

/// Default for `control_plane.poll_interval_secs`, in seconds: 5
/// (docs/design/defaults.md).
pub const DEFAULT_POLL_INTERVAL_SECS: u64 = 5;
/// Upper bound for `control_plane.poll_interval_secs`, in seconds: five
/// minutes; a gateway polling more rarely runs on a stale configuration, and
/// the bound catches the default written in milliseconds (5000).
pub const MAX_POLL_INTERVAL_SECS: u64 = 300;
/// Default for `control_plane.telemetry_interval_secs`, in seconds: 15
/// (docs/design/defaults.md).
pub const DEFAULT_TELEMETRY_INTERVAL_SECS: u64 = 15;
/// Upper bound for `control_plane.telemetry_interval_secs`, in seconds: five
/// minutes; catches the default written in milliseconds (15000).
pub const MAX_TELEMETRY_INTERVAL_SECS: u64 = 300;
/// `control_plane.node_id` when it is not written and the host name is not
/// a valid node id.
pub const FALLBACK_NODE_ID: &str = "node";
/// Longest `control_plane.node_id`, in characters.
pub const MAX_NODE_ID_LEN: usize = 128;

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// `[server]`: listeners and request limits. Default: every field's default.
    #[serde(default)]
    pub server: ServerTable,
    /// `[[providers]]`: upstream engines. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub providers: Vec<ProviderTable>,
    /// `[[routes]]`: public model names and where they go. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<RouteTable>,
    /// `[[api_keys]]`: callers of the proxy. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_keys: Vec<ApiKeyTable>,
    /// `[[admin_tokens]]`: callers of the admin API. Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub admin_tokens: Vec<AdminTokenTable>,
    /// `[retry]`: failover. Default: every field's default.
    #[serde(default)]
    pub retry: RetryTable,
    /// `[timeouts]`: upstream timeouts. Default: every field's default.
    #[serde(default)]
    pub timeouts: TimeoutsTable,
    /// `[[provider_groups]]`: fleets addressable as `<group-slug>/<model>`.
    /// Default: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provider_groups: Vec<ProviderGroupTable>,
    /// `[[catalog]]`: upstream model prices, read by adaptive (cost) and the
    /// dashboard. Default: none (every model cost-neutral).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub catalog: Vec<CatalogTable>,
    /// `[adaptive_routing]`: the deployment-wide policy of the `adaptive`
    /// strategy. Default: every field's default (switched off).
    #[serde(default)]
    pub adaptive_routing: AdaptiveRoutingTable,

    /// `[health]`: active probes of every provider. Default: every field's
    /// default (probing on).
    #[serde(default)]
    pub health: HealthTable,
    /// `[breaker]`: the per-target circuit breaker. Default: every field's
    /// default (on).
    #[serde(default)]
    pub breaker: BreakerTable,
    /// `[parking]`: how long a failing target sits out. Default: every
    /// field's default.
    #[serde(default)]
    pub parking: ParkingTable,
    /// `[saturation]`: when an engine counts as full. Default: every
    /// field's default.
    #[serde(default)]
    pub saturation: SaturationTable,
    /// `[flow_control]`: requests wait in the gateway while every engine
    /// of their route is saturated. Default: every field's default (off).
    #[serde(default)]
    pub flow_control: FlowControlTable,
    /// `[rate_limits]`: where the API keys' `rpm`, `tpm` and
    /// `max_concurrent` are counted. Default: in each node.
    #[serde(default)]
    pub rate_limits: RateLimitsTable,
    /// `[tracing]`: spans of every request exported over OTLP. Default:
    /// off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tracing: Option<TracingTable>,

    /// `[control_plane]`: where a gateway polls, or a control node's
    /// database. Required with `server.role = "gateway"` or `"control"`,
    /// refused with `"standalone"`. Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub control_plane: Option<ControlPlaneTable>,
}

/// `[server]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerTable {
    /// Proxy listeners, each "ip:port". Default: `["0.0.0.0:8080"]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<Vec<String>>,
    /// Admin, metrics and control API listener, "ip:port".
    /// Default: "127.0.0.1:9090".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_listen: Option<String>,
    /// "standalone" (proxy and admin from this file) | "gateway" (proxy and
    /// admin; everything but `[server]`, `[control_plane]` and
    /// `[[admin_tokens]]` comes from a control node) | "control" (the control
    /// API over PostgreSQL). Default: "standalone".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Largest request body accepted, in bytes; larger bodies get 413.
    /// Default: 33554432 (32 MiB). Must be > 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_body_bytes: Option<u64>,
    /// Whether callers must present an API key; `false` lets anonymous
    /// callers use every route. Default: true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub require_api_key: Option<bool>,

    /// `[[server.tls]]`: HTTPS listeners (rustls; HTTP/2 by ALPN).
    /// Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls: Option<Vec<TlsListenerTable>>,
    /// Networks whose `X-Forwarded-For` chain is kept, each a CIDR
    /// ("10.0.0.0/8", "fd00::/8") or a bare address (one host, /32 or
    /// /128). Default: empty, nobody's chain is kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trusted_proxies: Option<Vec<String>>,
    /// "stdout" | "off" | a file path (appended to, reopened on SIGUSR1;
    /// its directory must exist). Default: "stdout".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_log: Option<String>,
    /// "json" (one object per line) | "combined" (NCSA combined).
    /// Default: "json".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_log_format: Option<String>,
    /// Extension. Longest wait for a client's complete request headers, in
    /// seconds; a slower client is disconnected. Default: 60; 1 to 3600.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub header_read_timeout_secs: Option<u64>,
    /// Extension. How long an idle client connection stays open between
    /// requests, in seconds; 0 = no keep-alive. Default: 60; at most 3600.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keepalive_timeout_secs: Option<u64>,
    /// Extension. Requests served on one client connection before it is
    /// closed; 0 = unlimited. Default: 1000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keepalive_requests: Option<u32>,
    /// Extension. Client connections open at once, over all listeners;
    /// 0 = unlimited. Default: 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<u32>,
    /// Extension. Longest a client may go without accepting any byte of a
    /// response, in seconds (nginx's `send_timeout`); past it the
    /// connection is closed and the engine's request cancelled.
    /// Default: 60; 1 to 3600.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub send_timeout_secs: Option<u64>,
    /// Extension. Largest request header accepted, in bytes: the request
    /// line and every field line; larger ones get 431 and never reach an
    /// engine. Default: 32768 (nginx's 4 x 8 KiB); 1024 to 1048575.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_request_header_bytes: Option<u64>,
}

/// One `[[server.tls]]` entry: an HTTPS listener.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsListenerTable {
    /// "ip:port". Required; not the address of `server.listen`,
    /// `server.admin_listen` or another TLS listener.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// `[{ cert_path, key_path }, ...]`, chosen by SNI; the first is the
    /// default. Required, non-empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificates: Option<Vec<CertificateEntry>>,
}

/// One entry of `server.tls.certificates`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CertificateEntry {
    /// PEM certificate chain, leaf first. Required; must exist and be
    /// readable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cert_path: Option<String>,
    /// PEM private key of the leaf. Required; must exist and be readable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_path: Option<String>,
}

/// One `[[providers]]` entry: an upstream OpenAI-compatible server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderTable {
    /// Display name. Required, non-empty, unique.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Identifier in `<slug>/<model>` addresses, metrics and headers;
    /// `^[a-z0-9][a-z0-9-]{0,62}$`, unique. Default: derived from `name`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slug: Option<String>,
    /// Server root, `http://host[:port][/prefix]` or `https://...`, without
    /// the trailing `/v1` (rolter adds it). Required. Default port: 80 / 443.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Name of the environment variable holding the bearer token sent
    /// upstream; it must be set and non-empty. Default: no upstream
    /// credentials.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Path probed for health, starting with '/'. Default: "/v1/models".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_path: Option<String>,
    /// How many LoRA adapters the engine holds resident at once: set it to
    /// the engine's vLLM `--max-loras`. `lora_aware` remembers that many
    /// adapters per target. Default: 8; 1 to 1024.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_loras: Option<u64>,

    /// PEM bundle of CAs trusted for an `https://` base_url, on top of the
    /// system roots (a private CA). Must exist and be readable. Default:
    /// the system roots only. Warned about on an `http://` provider.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
    /// Whether an `https://` provider's certificate is verified. Default:
    /// true; false is warned about at start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_verify: Option<bool>,
    /// `[providers.kv_events]`: the engine's vLLM KV-cache event stream.
    /// Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_events: Option<KvEventsTable>,
    /// `[providers.lmcache]`: an LMCache occupancy signal. Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lmcache: Option<LmcacheTable>,
    /// Extension. Requests this gateway node sends the engine at once; at
    /// this many the engine is saturated (see `[saturation]`). Default:
    /// none (no limit); 1 to 1000000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u64>,
    /// `[providers.engine_metrics]`: the engine's own load, read from its
    /// Prometheus metrics (vLLM or SGLang). Default: none (this node's
    /// in-flight count only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub engine_metrics: Option<EngineMetricsTable>,
    /// The port of the engine's SGLang bootstrap server (its
    /// `--disaggregation-bootstrap-port`), on the base_url's host: required
    /// for a prefill engine of a route with `disaggregation.protocol =
    /// "sglang"`. Default: none; 1 to 65535.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bootstrap_port: Option<u16>,
}

/// `[providers.engine_metrics]`: where the engine's Prometheus metrics are
/// read, for a load every gateway node agrees on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EngineMetricsTable {
    /// Extension. Whether the metrics are read. Default: true (the table
    /// being there turns them on).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// "http(s)://host[:port][/path]". Default: the provider's base_url
    /// followed by "/metrics".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Time between two reads, in milliseconds. Default: 500; 50 to 60000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_interval_ms: Option<u64>,
    /// Age after which a reading is stale and the node's own count is used
    /// instead, in milliseconds. Default: 3000; more than
    /// `poll_interval_ms`, at most 600000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale_after_ms: Option<u64>,
}

/// `[providers.kv_events]`: where a vLLM engine started with
/// `--kv-events-config` publishes (docs/design/wire-formats.md).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KvEventsTable {
    /// The publisher's endpoint as rolter connects to it,
    /// "tcp://host:port": the engine's host, not its bind address
    /// ("tcp://*:5557"). Required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The replay (ROUTER) endpoint, "tcp://host:port", used to fill gaps.
    /// Default: none, a gap clears the target's state.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_endpoint: Option<String>,
    /// Subscription prefix. Default: "" (every topic).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// Tokens per KV block; must equal the engine's `--block-size`.
    /// Default: 16; 1 to 1024.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u64>,
    /// Extension. Data-parallel ranks of the engine: rank r publishes on the
    /// endpoint's port + r (and replays on the replay port + r).
    /// Default: 1; 1 to 64.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_parallel_size: Option<u64>,
}

/// `[providers.lmcache]`: an occupancy signal polled in the background.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LmcacheTable {
    /// "http(s)://host[:port][/path][?query]". Required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Extension. "json" (`{"occupancy": <0..1>, "cache_available": <bool>}`)
    /// | "prometheus" (text exposition; see `metric`). Default: "json".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<String>,
    /// Extension. Name of the gauge whose value is the occupancy in [0, 1].
    /// Required when `format = "prometheus"`, refused otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// Extension. Time between two polls, in seconds. Default: 2; 1 to
    /// 3600.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_interval_secs: Option<u64>,
    /// Extension. Age after which a signal is stale (neutral), in seconds.
    /// Default: 10; more than `poll_interval_secs`, at most 86400.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale_after_secs: Option<u64>,
}

/// One `[[routes]]` entry: a public model name and its targets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RouteTable {
    /// Public model name clients send. Required, non-empty, unique, and not
    /// a provider slug nor `<provider-slug>/...`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Load-balancing strategy name (docs/design/balancer.md). Default:
    /// "round_robin".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    /// Local Hugging Face model directory (`tokenizer.json`,
    /// `tokenizer_config.json`, optionally `chat_template.jinja`) of the
    /// model the engines serve: the gateway renders and tokenizes requests
    /// with it so `precise_cache_aware` and the KV-block scorer match
    /// requests that carry only text. Relative to the working directory.
    /// Default: none (token ids only from the caller).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<String>,
    /// How much of a request's rendered text is tokenized for routing, in
    /// KiB; routing reads the beginning of a conversation. Default: 64; 1
    /// to 4096. Read only with `tokenizer`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokenizer_budget_kib: Option<u32>,
    /// The load guard of `cache_aware` and `precise_cache_aware`: a warm
    /// target keeps a request unless its waiting requests (queued or in
    /// prefill) are more than `min_load` past the least loaded target's
    /// and more than `load_ratio` times it. Default: 2 and 1.5 under
    /// `cache_aware`, 4 and 2.0 under `precise_cache_aware`; a field left
    /// out keeps the strategy's default. Read only by those two strategies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_guard: Option<CacheGuardTable>,
    /// The API endpoints requests for this model may use, by name:
    /// "chat/completions", "completions", "embeddings", "responses" (with
    /// `/v1/responses/{id}`), "messages", "messages/count_tokens", "rerank",
    /// "score", "tokenize", "detokenize", "audio/transcriptions",
    /// "audio/translations". A request on another endpoint gets a 404.
    /// Default: every endpoint; each name at most once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<Vec<String>>,
    /// Where requests for `model` go. Required, non-empty (absent on a
    /// route with `disaggregation`, which names its engines there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub targets: Option<Vec<TargetEntry>>,
    /// Prefill/decode disaggregation: each generation request is prefilled
    /// on one engine and decoded on another (docs/design/disaggregation.md).
    /// Default: none (one engine serves a request whole).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disaggregation: Option<DisaggregationTable>,
}

/// `disaggregation` of a route: two pools of targets and the handshake
/// between them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DisaggregationTable {
    /// The engines' handshake: "vllm" (`kv_transfer_params`, prefill then
    /// decode) or "sglang" (a bootstrap room, both at once). Required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// The prefill engines, written like `targets`. Required, non-empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill: Option<Vec<TargetEntry>>,
    /// The decode engines, written like `targets`. Required, non-empty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode: Option<Vec<TargetEntry>>,
    /// How a prefill engine is picked. Default: "cache_aware" (a prompt's
    /// prefix is cached where it was prefilled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill_strategy: Option<String>,
    /// How a decode engine is picked. Default: "power_of_two".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_strategy: Option<String>,
    /// Prompts shorter than this many tokens skip the prefill pool and run
    /// whole on a decode engine. Tokens from the route's tokenizer or the
    /// caller's token ids, else estimated at 4 bytes of prompt per token.
    /// Default: 0 (every prompt is prefilled remotely); 0 to 10000000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_prefill_tokens: Option<u64>,
}

/// `disaggregation.prefill_strategy` when it is left out.
pub const DEFAULT_PREFILL_STRATEGY: &str = "cache_aware";
/// `disaggregation.decode_strategy` when it is left out.
pub const DEFAULT_DECODE_STRATEGY: &str = "power_of_two";
/// The largest `disaggregation.min_prefill_tokens`.
pub const MAX_MIN_PREFILL_TOKENS: u64 = 10_000_000;

/// `cache_guard` of a route or provider group.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CacheGuardTable {
    /// Waiting requests a warm target may hold past the least loaded
    /// target's before the guard can move a request off it. Default: 2; 0
    /// to 10000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_load: Option<u64>,
    /// How many times the least loaded target's waiting requests a warm
    /// target may hold. Default: 1.5; 1 to 100.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_ratio: Option<f64>,
}

/// One entry of `routes.targets` or `provider_groups.members`:
/// `{ provider, model?, weight? }`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TargetEntry {
    /// Provider slug (or name). Required; must name a configured provider.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Upstream model name sent to the provider, whatever the caller asked
    /// for. Default: a route target sends the route's public model; a group
    /// member is passthrough, it sends the model of the
    /// `<group-slug>/<model>` address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Relative share for strategies that read weights, >= 1. Default: 1.
    /// Written under a strategy that does not read weights, it draws a
    /// warning.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
}

/// A group member is written like a route target.
pub type GroupMemberEntry = TargetEntry;

/// One `[[provider_groups]]` entry: a fleet addressed as
/// `<group-slug>/<model>`, balanced over its members.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderGroupTable {
    /// Display name. Required, non-empty, unique among groups.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Identifier in `<slug>/<model>` addresses; same pattern as provider
    /// slugs and unique across providers and groups together.
    /// Default: derived from `name`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slug: Option<String>,
    /// Load-balancing strategy over the members (docs/design/balancer.md).
    /// Default: "round_robin".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strategy: Option<String>,
    /// Local Hugging Face model directory (`tokenizer.json`,
    /// `tokenizer_config.json`, optionally `chat_template.jinja`) of the
    /// model the engines serve: the gateway renders and tokenizes requests
    /// with it so `precise_cache_aware` and the KV-block scorer match
    /// requests that carry only text. Relative to the working directory.
    /// Default: none (token ids only from the caller).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<String>,
    /// How much of a request's rendered text is tokenized for routing, in
    /// KiB; routing reads the beginning of a conversation. Default: 64; 1
    /// to 4096. Read only with `tokenizer`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tokenizer_budget_kib: Option<u32>,
    /// The load guard of `cache_aware` and `precise_cache_aware`: a warm
    /// target keeps a request unless its waiting requests (queued or in
    /// prefill) are more than `min_load` past the least loaded target's
    /// and more than `load_ratio` times it. Default: 2 and 1.5 under
    /// `cache_aware`, 4 and 2.0 under `precise_cache_aware`; a field left
    /// out keeps the strategy's default. Read only by those two strategies.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_guard: Option<CacheGuardTable>,
    /// The API endpoints requests for this model may use, by name:
    /// "chat/completions", "completions", "embeddings", "responses" (with
    /// `/v1/responses/{id}`), "messages", "messages/count_tokens", "rerank",
    /// "score", "tokenize", "detokenize", "audio/transcriptions",
    /// "audio/translations". A request on another endpoint gets a 404.
    /// Default: every endpoint; each name at most once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<Vec<String>>,
    /// The group's providers. Required, non-empty, each provider at most
    /// once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub members: Option<Vec<GroupMemberEntry>>,
}

/// One `[[catalog]]` entry: the price of an upstream model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CatalogTable {
    /// Upstream model name, as sent to providers. Required, non-empty,
    /// unique.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Price of input (prompt) tokens, in currency units per million tokens.
    /// Required; finite, >= 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_per_mtok: Option<f64>,
    /// Price of output (completion) tokens, in currency units per million
    /// tokens. Required; finite, >= 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_per_mtok: Option<f64>,
}

/// `[adaptive_routing]`: the policy of the `adaptive` strategy, one for the
/// whole deployment. Weights are relative to each other, not fractions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveRoutingTable {
    /// Kill switch; off, every adaptive route picks as its fallback stack
    /// would. Default: false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Weight of observed latency in the blend. Default: 1.0; a negative
    /// value is taken as 0 (with a warning).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_weight: Option<f64>,
    /// Weight of catalog cost in the blend. Default: 0.5; a negative value
    /// is taken as 0 (with a warning).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_weight: Option<f64>,
    /// Weight of in-flight load in the blend. Default: 0.25; a negative
    /// value is taken as 0 (with a warning).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub load_weight: Option<f64>,
    /// Share of engaged picks made uniformly at random, a fraction.
    /// Default: 0.05; clamped to [0, 0.5] (with a warning).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exploration_ratio: Option<f64>,
    /// Requests a route serves before the blend may engage. Default: 50.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_samples: Option<u64>,
}

/// One `[[api_keys]]` entry: a caller of the proxy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyTable {
    /// Name shown in logs and metrics. Required, non-empty, unique.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Environment variable holding the key; must be set and non-empty.
    /// Exactly one of `key_env`, `key_sha256` and `key_salted`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_env: Option<String>,
    /// SHA-256 of the key, 64 hex digits. Exactly one of `key_env`,
    /// `key_sha256` and `key_salted`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_sha256: Option<String>,
    /// Extension. The salted digest of a key rolter generated
    /// (`rk-<id>-<secret>`), as the control API stores it. Exactly one of
    /// `key_env`, `key_sha256` and `key_salted`; no two keys share an id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_salted: Option<SaltedDigestTable>,
    /// Public models this key may use, each a configured route.
    /// Default: empty = all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// Provider slugs this key may reach. Default: empty = all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub providers: Vec<String>,

    /// Requests per minute this key may make on each node; 0 = unlimited.
    /// Default: 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpm: Option<u32>,
    /// Tokens (prompt and completion, from the engines' `usage`) this key
    /// may use per minute on each node; checked before a request is
    /// dispatched, charged when its answer ends; 0 = unlimited. Default: 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpm: Option<u64>,
    /// Requests this key may have in flight at once on each node;
    /// 0 = unlimited. Default: 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<u32>,
    /// Extension. The key's priority band under flow control: higher
    /// bands are dispatched first; a negative priority is sheddable.
    /// A request may lower its own with `x-rolter-priority`, never raise
    /// it. Default: 0; -1000 to 1000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
}

/// One `[[admin_tokens]]` entry: a caller of the admin API.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AdminTokenTable {
    /// Name shown in logs. Required, non-empty, unique.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Environment variable holding the token; must be set and non-empty.
    /// Exactly one of `token_env`, `token_sha256` and `token_salted`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
    /// SHA-256 of the token, 64 hex digits. Exactly one of `token_env`,
    /// `token_sha256` and `token_salted`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_sha256: Option<String>,
    /// Extension. The salted digest of a token rolter generated
    /// (`rt-<id>-<secret>`), as the control API stores it. Exactly one of
    /// `token_env`, `token_sha256` and `token_salted`; no two tokens share
    /// an id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_salted: Option<SaltedDigestTable>,
    /// "viewer" | "admin" | "superadmin". Default: "viewer".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

/// `key_salted` / `token_salted`: the salted digest of a secret rolter
/// generated, `<prefix>-<id>-<secret>`. Only the digest is kept: SHA-256 of
/// the salt's bytes followed by the whole key as presented.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SaltedDigestTable {
    /// The id inside the key, 16 lowercase hex digits; it finds the digest
    /// without hashing once per key. Required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The salt, 32 hex digits (16 bytes). Required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub salt: Option<String>,
    /// SHA-256 of salt || key, 64 hex digits. Required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

impl SaltedDigestTable {
    /// The file form of a salted digest.
    pub fn of(id: &str, salt: &[u8], sha256: &[u8; 32]) -> Self {
        SaltedDigestTable {
            id: Some(id.to_owned()),
            salt: Some(hex::encode(salt)),
            sha256: Some(hex::encode(sha256)),
        }
    }
}

impl ApiKeyTable {
    /// Makes `digest` this key's only secret: `key_sha256` or `key_salted`
    /// is set, the other two cleared. For documents built from stored keys
    /// (a key read from `key_env` becomes its digest, which every node can
    /// check without the variable).
    pub fn set_digest(&mut self, digest: &super::SecretDigest) {
        let (sha256, salted) = digest_fields(digest);
        self.key_env = None;
        self.key_sha256 = sha256;
        self.key_salted = salted;
    }
}

impl AdminTokenTable {
    /// Makes `digest` this token's only secret, as
    /// [`ApiKeyTable::set_digest`] does for a key.
    pub fn set_digest(&mut self, digest: &super::SecretDigest) {
        let (sha256, salted) = digest_fields(digest);
        self.token_env = None;
        self.token_sha256 = sha256;
        self.token_salted = salted;
    }
}

/// The `*_sha256` and `*_salted` values of a digest.
fn digest_fields(digest: &super::SecretDigest) -> (Option<String>, Option<SaltedDigestTable>) {
    match digest {
        super::SecretDigest::Sha256(sha256) => (Some(hex::encode(sha256)), None),
        super::SecretDigest::Salted { id, salt, sha256 } => {
            (None, Some(SaltedDigestTable::of(id, salt, sha256)))
        }
    }
}

/// `[retry]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryTable {
    /// Further attempts on other targets after the first fails before any
    /// byte reached the client. Default: 2; at most 10.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
}

/// `[timeouts]`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TimeoutsTable {
    /// Upstream TCP (and TLS) connect timeout, in milliseconds. Default: 2000;
    /// must be > 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_ms: Option<u64>,
    /// Time until the upstream's response headers, in seconds. Default: 120;
    /// must be > 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_byte_secs: Option<u64>,
    /// Longest gap between two reads of a streaming response, in seconds.
    /// Default: 300; must be > 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_secs: Option<u64>,
}

/// `[health]`: an active probe per provider, `GET` of its `health_path`.
/// A provider not yet probed counts as healthy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthTable {
    /// Whether providers are probed; off, every provider counts as healthy.
    /// Default: true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Time between two probes of one provider, in seconds. Default: 10;
    /// 1 to 3600.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval_secs: Option<u64>,
    /// Time a probe may take before it counts as failed, in seconds.
    /// Default: 2; at least 1 and less than `interval_secs`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    /// Consecutive failed probes that mark a provider down. Default: 3;
    /// 1 to 100.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unhealthy_after: Option<u64>,
    /// Consecutive successful probes that mark a down provider up again.
    /// Default: 2; 1 to 100.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub healthy_after: Option<u64>,
}

/// `[breaker]`: a circuit breaker per target, fed by real requests.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BreakerTable {
    /// Whether breakers open at all. Default: true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Consecutive failed requests that open a target's breaker.
    /// Default: 5; 1 to 1000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_threshold: Option<u64>,
    /// How long an open breaker refuses requests before it admits one probe
    /// request (half-open), in seconds. Default: 30; 1 to 3600.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_secs: Option<u64>,
}

/// `[parking]`: a target that answered 429, 408 or 5xx, or failed to
/// connect, sits out for a while.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ParkingTable {
    /// How long a target is parked when it sent no `Retry-After`, in
    /// seconds. Default: 5; 1 to 3600.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_secs: Option<u64>,
    /// The longest a target is parked, whatever its `Retry-After` says, in
    /// seconds. Default: 300; at least `base_secs`, at most 86400.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_secs: Option<u64>,
}

/// `[saturation]`: when a target counts as full. A saturated target takes
/// no new request while another is not saturated (or, with flow control
/// on, at all: the request waits in the gateway).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SaturationTable {
    /// An engine reporting this many waiting requests or more is
    /// saturated (read with `engine_metrics`). Default: 5; 1 to 1000000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_waiting: Option<u64>,
    /// An engine reporting this share of its KV cache in use or more is
    /// saturated (read with `engine_metrics`). Default: 0.8; above 0, at
    /// most 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_kv_usage: Option<f64>,
}

/// `[flow_control]`: requests wait in the gateway, ordered by priority and
/// shared fairly between API keys, while every target of their route is
/// saturated.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct FlowControlTable {
    /// Whether requests wait instead of being sent to saturated engines.
    /// Default: false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Requests one route may hold waiting; past it, 429. Default: 1000;
    /// 1 to 1000000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_queued: Option<u64>,
    /// The longest a request waits, in seconds; then 429. Requests with a
    /// negative priority wait at most a quarter of it. Default: 30; 1 to
    /// 3600.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_wait_secs: Option<u64>,
}

/// `[rate_limits]`: counters shared by every gateway node through Redis.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimitsTable {
    /// "redis://[user:password@]host[:port][/db]" of the Redis that holds
    /// the keys' counters for the whole fleet. At most one of `redis_url`
    /// and `redis_url_env`. Default: none (each node counts alone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_url: Option<String>,
    /// Environment variable holding `redis_url` (for a URL with a password).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_url_env: Option<String>,
    /// How long a request's admission waits for Redis before the node
    /// falls back to its own counters, in milliseconds. Default: 50; 1 to
    /// 5000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_timeout_ms: Option<u64>,
    /// Prefix of every Redis key rolter writes; nodes that share limits
    /// use the same one. Default: "rolter:limits:".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub redis_key_prefix: Option<String>,
}

/// `[tracing]`: W3C trace context in and out, spans exported over OTLP.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TracingTable {
    /// The collector's OTLP/HTTP traces URL, "http(s)://host[:port]/v1/traces"
    /// (protobuf). Required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub otlp_endpoint: Option<String>,
    /// Share of new traces kept, 0 to 1; a trusted caller's own sampling
    /// decision is followed. Default: 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sampling_ratio: Option<f64>,
    /// `service.name` of the spans. Default: "rolter".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_name: Option<String>,
    /// Spans waiting for export at most; past it a request's spans are
    /// dropped and counted. Default: 4096; 1 to 1000000.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_queued_spans: Option<u64>,
}

/// `[control_plane]`: for `role = "gateway"`, the control node to poll; for
/// `role = "control"`, the database.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ControlPlaneTable {
    /// `http(s)://host[:port]` of a control node's admin listener (often
    /// an L4 balancer in front of several). Required with role "gateway";
    /// has no effect (warned) with "control".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Environment variable holding the PostgreSQL URL; must be set and
    /// non-empty. Required with role "control"; has no effect (warned) with
    /// "gateway".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database_url_env: Option<String>,
    /// Environment variable holding the token gateways present to control
    /// nodes (the same value on every node); must be set and non-empty.
    /// Required with roles "gateway" and "control".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub internal_token_env: Option<String>,
    /// This node's name in the fleet, `^[A-Za-z0-9._-]{1,128}$`; sent as
    /// `x-rolter-node-id`. Default (also for ""): the host name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// Extension. Time between two snapshot polls of a gateway, in seconds.
    /// Default: 5; 1 to 300.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_interval_secs: Option<u64>,
    /// Extension. Time between two telemetry pushes of a gateway, in
    /// seconds. Default: 15; 1 to 300.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub telemetry_interval_secs: Option<u64>,
}
