//! `rolter.toml`: file types, validation, and the validated configuration.
//!
//! Two layers (house style 6): [`file`] mirrors the file with serde, and
//! validation (`validate.rs`) turns it into the types below, which are what
//! the rest of rolter uses. Validation collects every problem it finds, each
//! naming its field path and line, and never panics; a file that parses but
//! does not validate yields no [`Config`] at all.
//!
//! Secrets never sit in the file: it names environment variables, and the
//! validated types hold the upstream bearer keys, the database URL and the
//! internal token read from them, and only digests of caller keys and admin
//! tokens ([`SecretDigest`]; `secret.rs` says how generated keys are salted).
//!
//! A fleet (docs/design/README.md, "Processes and roles") reuses all of this. A
//! control node serves its gateways the fleet's configuration as JSON of the
//! same [`file::ConfigFile`] type; a gateway merges it with its own file
//! ([`merge_fleet_document`]) and validates the result with
//! [`parse_document`], the same validation a file gets, without line
//! numbers (a document has no text). One rule is about files only: a
//! gateway's own file holds nothing but `[server]`, `[control_plane]` and
//! `[[admin_tokens]]`; everything else is set on the control node.
//!
//! Validation touches the file system only to check that the files a
//! configuration names (TLS certificates and keys, CA files, the access
//! log's directory) are there, and, for a control-plane node without a
//! `node_id`, to read the host name: a relative path is relative to the
//! working directory, as it will be when rolter opens it.
//!
//! A setting that is valid but does not do what it seems to (a weight under
//! a strategy that ignores weights, an adaptive-routing value clamped on the
//! way in) is not an error: it lands in [`Config::warnings`], which `rolter
//! check` and `serve` print.

mod base_url;
mod cidr;
mod endpoint;
mod error;
pub mod file;
mod fleet;
mod locate;
pub mod row_names;
mod secret;
mod slug;
mod validate;

#[cfg(test)]
mod tests;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::openai::EndpointSet;

pub use base_url::{BaseUrl, BaseUrlError};
pub use cidr::{Cidr, CidrError};
pub use error::{ConfigError, ConfigErrors};
pub use fleet::{merge_fleet_document, parse_json};
pub use secret::{
    new_secret, secret_id, SecretDigest, ADMIN_TOKEN_PREFIX, API_KEY_PREFIX, SALT_LEN,
    SECRET_ID_LEN,
};
pub use slug::{derive_slug, is_valid_slug};

/// A validated configuration. Rebuilt on reload, so plain owned data.
/// (`PartialEq` only: catalog prices and the adaptive policy are `f64`s.)
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// The file path as given, for messages.
    pub source: String,
    pub server: Server,
    pub providers: Vec<Provider>,
    pub routes: Vec<Route>,
    /// Fleets addressed as `<group-slug>/<model>`. Group slugs and provider
    /// slugs are one namespace: no group has a provider's slug.
    pub provider_groups: Vec<ProviderGroup>,
    /// Upstream model prices; no two entries share a model. Look one up
    /// with [`Config::price_of`].
    pub catalog: Vec<CatalogEntry>,
    /// `[adaptive_routing]`, already clamped (weights >= 0, exploration in
    /// [0, 0.5]); never enabled with all three weights zero.
    pub adaptive_routing: rolter_balancer::AdaptivePolicy,
    pub api_keys: Vec<ApiKey>,
    pub admin_tokens: Vec<AdminToken>,
    pub retry: Retry,
    pub timeouts: Timeouts,
    pub health: Health,
    pub breaker: Breaker,
    pub parking: Parking,
    pub saturation: Saturation,
    pub flow_control: FlowControl,
    /// Where API keys' limits are counted.
    pub rate_limits: RateLimitsConfig,
    /// Traces exported over OTLP; `None`: off.
    pub tracing: Option<TracingConfig>,
    /// `[control_plane]`: `Some` exactly when the role is `Gateway` or
    /// `Control`.
    pub control_plane: Option<ControlPlane>,
    /// Settings that validated but do not do what they seem to, in file
    /// order, each naming its field and line. Never a reason to refuse the
    /// file; `rolter check` and `serve` print them.
    pub warnings: Vec<ConfigError>,
}

impl Config {
    /// The catalog price of an upstream model, `None` when unpriced
    /// (cost-neutral). A linear scan: for snapshot building, not the request
    /// path.
    pub fn price_of(&self, upstream_model: &str) -> Option<&CatalogEntry> {
        self.catalog
            .iter()
            .find(|entry| entry.model == upstream_model)
    }
}

/// `[server]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    /// Proxy listeners, each a valid `SocketAddr`, kept as written.
    pub listen: Vec<String>,
    /// Admin API listener, a valid `SocketAddr`, kept as written.
    pub admin_listen: String,
    pub role: Role,
    /// Request bodies above this many bytes are refused with 413; > 0.
    pub max_body_bytes: usize,
    /// `false`: anonymous callers may use every route.
    pub require_api_key: bool,
    /// TLS listeners (`[[server.tls]]`); none of them shares an address with
    /// `listen`, `admin_listen` or another TLS listener.
    pub tls: Vec<TlsListener>,
    /// Peers whose `X-Forwarded-For` chain is kept; empty = nobody's.
    pub trusted_proxies: Vec<Cidr>,
    pub access_log: AccessLog,
    pub access_log_format: AccessLogFormat,
    /// Longest wait for a client's complete request headers; 1 s to 1 h.
    pub header_read_timeout: Duration,
    /// How long an idle client connection is kept open between requests;
    /// zero = no keep-alive (one request per connection).
    pub keepalive_timeout: Duration,
    /// Requests served on one client connection before it is closed;
    /// 0 = unlimited.
    pub keepalive_requests: u32,
    /// Client connections open at once, across all listeners; 0 = unlimited.
    pub max_connections: u32,
    /// Longest a client may accept no response byte; 1 s to 1 h.
    pub send_timeout: Duration,
    /// Request headers above this many bytes are refused with 431.
    pub max_request_header_bytes: usize,
}

/// One `[[server.tls]]` listener: HTTPS, HTTP/2 offered by ALPN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsListener {
    /// A valid `SocketAddr`, kept as written.
    pub listen: String,
    /// Never empty; chosen by SNI, the first is the default.
    pub certificates: Vec<Certificate>,
}

/// A certificate chain and its private key, both PEM files that existed and
/// were readable when the configuration was validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certificate {
    pub cert_path: PathBuf,
    pub key_path: PathBuf,
}

/// Where the access log goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessLog {
    Stdout,
    Off,
    /// Appended to; reopened on SIGUSR1. Its directory existed at
    /// validation.
    File(PathBuf),
}

/// How an access-log line is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessLogFormat {
    /// One JSON object per line.
    Json,
    /// NCSA combined log format, as nginx and Apache write it.
    Combined,
}

impl AccessLogFormat {
    /// The name used in `rolter.toml`.
    pub fn as_str(self) -> &'static str {
        match self {
            AccessLogFormat::Json => "json",
            AccessLogFormat::Combined => "combined",
        }
    }
}

/// What this process is in a deployment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Proxy and admin API from one file; no control plane.
    Standalone,
    /// Proxy that polls a control node for its snapshot and pushes
    /// telemetry to it; its file holds only `[server]`, `[control_plane]`
    /// and `[[admin_tokens]]`.
    Gateway,
    /// The control node: control API over PostgreSQL. What its file
    /// configures is file-managed (read-only in the API).
    Control,
}

impl Role {
    /// The name used in `rolter.toml`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Standalone => "standalone",
            Role::Gateway => "gateway",
            Role::Control => "control",
        }
    }
}

/// `[control_plane]` of a gateway or control node.
#[derive(Clone, PartialEq, Eq)]
pub struct ControlPlane {
    /// A gateway's control node: `http(s)://host[:port]` of its admin
    /// listener, no trailing slash. `None` on a control node.
    pub url: Option<String>,
    /// The variable `database_url` was read from; `None` on a gateway.
    pub database_url_env: Option<String>,
    /// A control node's PostgreSQL URL, non-empty. Never printed.
    pub database_url: Option<String>,
    /// The variable `internal_token` was read from; always `Some` once
    /// validated.
    pub internal_token_env: Option<String>,
    /// The token gateways present to control nodes, non-empty; always
    /// `Some` once validated. Never printed.
    pub internal_token: Option<String>,
    /// `^[A-Za-z0-9._-]{1,128}$`; the host name unless written.
    pub node_id: String,
    /// Between two snapshot polls of a gateway; 1 s to 5 min.
    pub poll_interval: Duration,
    /// Between two telemetry pushes of a gateway; 1 s to 5 min.
    pub telemetry_interval: Duration,
}

impl fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControlPlane")
            .field("url", &self.url)
            .field("database_url_env", &self.database_url_env)
            .field(
                "database_url",
                &self.database_url.as_ref().map(|_| Redacted),
            )
            .field("internal_token_env", &self.internal_token_env)
            .field(
                "internal_token",
                &self.internal_token.as_ref().map(|_| Redacted),
            )
            .field("node_id", &self.node_id)
            .field("poll_interval", &self.poll_interval)
            .field("telemetry_interval", &self.telemetry_interval)
            .finish()
    }
}

/// An upstream OpenAI-compatible server.
#[derive(Clone, PartialEq, Eq)]
pub struct Provider {
    /// Display name.
    pub name: String,
    /// Unique identifier, `^[a-z0-9][a-z0-9-]{0,62}$`.
    pub slug: String,
    pub base_url: BaseUrl,
    /// Bearer token sent upstream, read from `api_key_env`. Never printed.
    pub api_key: Option<String>,
    /// Health probe path, starting with '/'.
    pub health_path: String,
    /// LoRA adapters the engine holds at once (its `--max-loras`), 1..=1024.
    pub max_loras: usize,
    /// The engine's KV-cache event stream, when it publishes one.
    pub kv_events: Option<KvEvents>,
    /// The LMCache occupancy signal, when there is one.
    pub lmcache: Option<Lmcache>,
    /// Requests this node sends at once before the engine counts as
    /// saturated; `None`: no limit.
    pub max_concurrency: Option<u64>,
    /// Where the engine's own load is read, when it is.
    pub engine_metrics: Option<EngineMetrics>,
    /// How an `https://` base URL is verified; unused for `http://`.
    pub tls: UpstreamTls,
    /// Its SGLang bootstrap server's port, for SGLang disaggregation.
    pub bootstrap_port: Option<u16>,
}

/// `[providers.engine_metrics]`, enabled: the engine's Prometheus metrics
/// (vLLM's or SGLang's series, told apart by name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineMetrics {
    /// `http://` or `https://` URL with a host; path and query allowed.
    pub endpoint: String,
    /// Between two reads; 50 ms to 1 min.
    pub poll_interval: Duration,
    /// A reading older than this is not used; > `poll_interval`.
    pub stale_after: Duration,
}

/// `[saturation]`: when an engine counts as full (besides its provider's
/// `max_concurrency`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Saturation {
    /// Waiting requests the engine reports, from which it is saturated.
    pub max_waiting: u64,
    /// KV-cache usage the engine reports, in thousandths (so the
    /// configuration stays `Eq`), from which it is saturated; 1..=1000.
    pub max_kv_usage_milli: u32,
}

impl Saturation {
    pub fn max_kv_usage(&self) -> f64 {
        f64::from(self.max_kv_usage_milli) / 1000.0
    }
}

impl Default for Saturation {
    fn default() -> Self {
        Saturation {
            max_waiting: file::DEFAULT_SATURATION_MAX_WAITING,
            max_kv_usage_milli: (file::DEFAULT_SATURATION_MAX_KV_USAGE * 1000.0) as u32,
        }
    }
}

/// `[flow_control]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowControl {
    pub enabled: bool,
    /// Requests one route holds waiting at most.
    pub max_queued: u64,
    /// The longest wait (a quarter of it for a negative priority).
    pub max_wait: Duration,
}

impl Default for FlowControl {
    fn default() -> Self {
        FlowControl {
            enabled: file::DEFAULT_FLOW_CONTROL_ENABLED,
            max_queued: file::DEFAULT_FLOW_CONTROL_MAX_QUEUED,
            max_wait: Duration::from_secs(file::DEFAULT_FLOW_CONTROL_MAX_WAIT_SECS),
        }
    }
}

/// `[providers.kv_events]`: where a vLLM engine publishes its KV-cache
/// events (docs/design/wire-formats.md). rolter connects a SUB socket to each
/// rank's endpoint, and a DEALER to its replay endpoint to fill gaps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvEvents {
    /// Rank 0's live endpoint, normalized `tcp://host:port` (lowercase
    /// host, IPv6 in brackets); never a wildcard host.
    pub endpoint: String,
    /// Rank 0's replay (ROUTER) endpoint, normalized like `endpoint`.
    pub replay_endpoint: Option<String>,
    /// Subscription prefix; "" = every topic.
    pub topic: String,
    /// Tokens per KV block, the engine's `--block-size`; 1..=1024.
    pub block_size: usize,
    /// Data-parallel ranks, 1..=64: rank r publishes on the endpoint's port
    /// + r, and replays on the replay port + r; every such port is <= 65535.
    pub data_parallel_size: u16,
}

impl KvEvents {
    /// The live endpoint of data-parallel rank `rank`
    /// (`< data_parallel_size`).
    pub fn endpoint_of_rank(&self, rank: u16) -> String {
        debug_assert!(rank < self.data_parallel_size, "rank {rank}");
        shift_port(&self.endpoint, rank)
    }

    /// The replay endpoint of data-parallel rank `rank`
    /// (`< data_parallel_size`), when replay is configured.
    pub fn replay_endpoint_of_rank(&self, rank: u16) -> Option<String> {
        debug_assert!(rank < self.data_parallel_size, "rank {rank}");
        self.replay_endpoint
            .as_deref()
            .map(|endpoint| shift_port(endpoint, rank))
    }
}

/// `tcp://host:port` with the port `offset` higher. Validation guarantees
/// the shape and that every rank's port fits.
fn shift_port(endpoint: &str, offset: u16) -> String {
    match endpoint.rsplit_once(':') {
        Some((head, port)) => match port.parse::<u16>().ok().and_then(|p| p.checked_add(offset)) {
            Some(port) => format!("{head}:{port}"),
            None => {
                debug_assert!(false, "{endpoint} + {offset}");
                endpoint.to_owned()
            }
        },
        None => {
            debug_assert!(false, "{endpoint}");
            endpoint.to_owned()
        }
    }
}

/// `[providers.lmcache]`: an occupancy signal polled in the background for
/// `lmcache_aware` (docs/design/wire-formats.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lmcache {
    /// `http://` or `https://` URL with a host; path and query allowed.
    pub endpoint: String,
    pub format: LmcacheFormat,
    /// Between two polls; >= 1 s.
    pub poll_interval: Duration,
    /// A signal older than this is stale, hence neutral; > `poll_interval`.
    pub stale_after: Duration,
}

/// What an LMCache occupancy endpoint answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LmcacheFormat {
    /// `{"occupancy": <0..1>, "cache_available": <bool>}`.
    Json,
    /// Prometheus text exposition; the gauge `metric` is the occupancy in
    /// [0, 1].
    Prometheus {
        /// A valid Prometheus metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`).
        metric: String,
    },
}

/// How rolter verifies an `https://` provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamTls {
    /// PEM bundle of extra trusted CAs (a private CA); it existed and was
    /// readable at validation. `None`: the system roots only.
    pub ca_file: Option<PathBuf>,
    /// `false`: any certificate is accepted (warned at start).
    pub verify: bool,
}

impl Default for UpstreamTls {
    fn default() -> Self {
        UpstreamTls {
            ca_file: None,
            verify: file::DEFAULT_TLS_VERIFY,
        }
    }
}

impl fmt::Debug for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Provider")
            .field("name", &self.name)
            .field("slug", &self.slug)
            .field("base_url", &format_args!("{}", self.base_url))
            .field("api_key", &self.api_key.as_ref().map(|_| Redacted))
            .field("health_path", &self.health_path)
            .field("max_loras", &self.max_loras)
            .field("kv_events", &self.kv_events)
            .field("lmcache", &self.lmcache)
            .field("max_concurrency", &self.max_concurrency)
            .field("engine_metrics", &self.engine_metrics)
            .field("tls", &self.tls)
            .field("bootstrap_port", &self.bootstrap_port)
            .finish()
    }
}

/// `[tracing]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracingConfig {
    /// The collector's OTLP/HTTP traces URL.
    pub otlp_endpoint: String,
    /// The sampling ratio in millionths, so the configuration stays `Eq`.
    pub sampling_ppm: u32,
    pub service_name: String,
    pub max_queued_spans: usize,
}

impl TracingConfig {
    /// The share of new traces kept, 0 to 1.
    pub fn sampling_ratio(&self) -> f64 {
        f64::from(self.sampling_ppm) / 1_000_000.0
    }
}

/// `[rate_limits]`, validated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateLimitsConfig {
    /// Counters shared through Redis; `None`: each node counts alone.
    pub redis: Option<SharedCounters>,
}

/// The Redis that holds the fleet's counters.
#[derive(Clone, PartialEq, Eq)]
pub struct SharedCounters {
    /// A `redis://` URL that parsed (it may hold a password: never logged).
    pub url: String,
    pub timeout: Duration,
    pub key_prefix: String,
}

impl fmt::Debug for SharedCounters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedCounters")
            .field("url", &"<redacted>")
            .field("timeout", &self.timeout)
            .field("key_prefix", &self.key_prefix)
            .finish()
    }
}

/// A public model name and where its requests go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// Public model name clients send.
    pub model: String,
    pub strategy: rolter_balancer::StrategyKind,
    /// Never empty; no two share `(provider, model)`.
    pub targets: Vec<RouteTarget>,
    /// The model directory requests are tokenized with for routing.
    pub tokenizer: Option<RouteTokenizer>,
    /// cache_aware's load guard.
    pub cache_guard: CacheGuard,
    /// The endpoints its requests may use.
    pub endpoints: EndpointSet,
    /// A prefill pool in front of `targets`, which are then the decode
    /// pool (and `strategy` the decode pool's).
    pub disaggregation: Option<Disaggregation>,
}

/// `disaggregation` of a route, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Disaggregation {
    pub protocol: PdProtocol,
    /// Never empty; no two share `(provider, model)`.
    pub prefill: Vec<RouteTarget>,
    pub prefill_strategy: rolter_balancer::StrategyKind,
    pub min_prefill_tokens: u64,
}

/// The handshake between a prefill and a decode engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PdProtocol {
    /// vLLM's `kv_transfer_params`: prefill answers, then decode.
    Vllm,
    /// SGLang's bootstrap room: both at once.
    Sglang,
}

impl PdProtocol {
    pub fn as_str(self) -> &'static str {
        match self {
            PdProtocol::Vllm => "vllm",
            PdProtocol::Sglang => "sglang",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        [PdProtocol::Vllm, PdProtocol::Sglang]
            .into_iter()
            .find(|p| p.as_str() == name)
    }
}

/// `cache_guard` of a route or provider group, validated, as written (an
/// unset field is the strategy's default): `load_ratio` in thousandths,
/// so the configuration stays `Eq`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheGuard {
    pub min_load: Option<u64>,
    pub load_ratio_milli: Option<u32>,
}

impl CacheGuard {
    /// The balancer's form.
    pub fn balancer(self) -> rolter_balancer::GuardSetting {
        rolter_balancer::GuardSetting {
            min_load: self.min_load,
            load_ratio: self.load_ratio_milli.map(|milli| f64::from(milli) / 1000.0),
        }
    }
}

/// `tokenizer` and `tokenizer_budget_kib` of a route or provider group:
/// a model directory that loaded when the configuration was validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteTokenizer {
    /// As written (relative to the working directory).
    pub dir: PathBuf,
    /// Bytes of rendered text tokenized per request; > 0.
    pub budget_bytes: usize,
}

/// One target of a route: identity `(provider, model)`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RouteTarget {
    /// Provider slug.
    pub provider: String,
    /// Upstream model name sent to the provider.
    pub model: String,
    /// >= 1; read only by strategies that use weights.
    pub weight: u32,
}

/// A provider group: a fleet addressed as `<slug>/<model>`. It has no
/// route; the gateway builds one per request from the members, with the
/// group's strategy and weights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderGroup {
    /// Display name.
    pub name: String,
    /// `^[a-z0-9][a-z0-9-]{0,62}$`, unique across providers and groups.
    pub slug: String,
    pub strategy: rolter_balancer::StrategyKind,
    /// Never empty; no provider twice.
    pub members: Vec<GroupMember>,
    /// The model directory requests are tokenized with for routing.
    pub tokenizer: Option<RouteTokenizer>,
    /// cache_aware's load guard.
    pub cache_guard: CacheGuard,
    /// The endpoints its requests may use.
    pub endpoints: EndpointSet,
}

/// One member of a provider group.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GroupMember {
    /// Provider slug.
    pub provider: String,
    /// Declared upstream model, sent whatever the caller asked for; `None`
    /// is passthrough: the member forwards the model of the
    /// `<group>/<model>` address.
    pub model: Option<String>,
    /// >= 1; read only by strategies that use weights.
    pub weight: u32,
}

/// The price of one upstream model, in currency units per million tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogEntry {
    /// Upstream model name, as sent to providers.
    pub model: String,
    /// Finite, >= 0.
    pub input_per_mtok: f64,
    /// Finite, >= 0.
    pub output_per_mtok: f64,
}

impl CatalogEntry {
    /// The price as the balancer takes it.
    pub fn price(&self) -> rolter_balancer::Price {
        rolter_balancer::Price {
            input_per_mtok: self.input_per_mtok,
            output_per_mtok: self.output_per_mtok,
        }
    }
}

/// A caller of the proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    pub name: String,
    /// How the key is checked; the key itself is not kept. Salted ids are
    /// unique among API keys.
    pub digest: SecretDigest,
    /// Route models and provider-group slugs this key may use (a group slug
    /// allows every `<group>/<model>` address); empty = all.
    pub models: Vec<String>,
    /// Provider slugs this key may reach; empty = all.
    pub providers: Vec<String>,
    /// Requests per minute on each node; 0 = unlimited.
    pub rpm: u32,
    /// Tokens (prompt and completion) per minute on each node; 0 = unlimited.
    pub tpm: u64,
    /// Requests in flight at once on each node; 0 = unlimited.
    pub max_concurrent: u32,
    /// Flow control's priority band; negative = sheddable.
    pub priority: i32,
}

/// A caller of the admin API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminToken {
    pub name: String,
    /// How the token is checked; the token itself is not kept. Salted ids
    /// are unique among admin tokens.
    pub digest: SecretDigest,
    pub role: AdminRole,
}

/// Admin API privilege, ordered: `Viewer < Admin < Superadmin`, so a check
/// is `token.role >= AdminRole::Admin`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum AdminRole {
    /// Read-only.
    Viewer,
    /// May change providers, routes and keys.
    Admin,
    /// May also change the deployment-wide policies.
    Superadmin,
}

impl AdminRole {
    /// The name used in `rolter.toml`.
    pub fn as_str(self) -> &'static str {
        match self {
            AdminRole::Viewer => "viewer",
            AdminRole::Admin => "admin",
            AdminRole::Superadmin => "superadmin",
        }
    }
}

/// `[retry]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retry {
    /// Further attempts after the first; at most 10.
    pub max_retries: u32,
}

/// `[timeouts]`; every duration is > 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeouts {
    /// Upstream connect.
    pub connect: Duration,
    /// Until the upstream's response headers.
    pub first_byte: Duration,
    /// Between two reads of a streaming response.
    pub idle: Duration,
}

/// `[health]`: an active probe per provider (`GET` of its `health_path`).
/// A provider is down after `unhealthy_after` failed probes in a row and up
/// again after `healthy_after` successes in a row; one not yet probed counts
/// as healthy. [`Health::default`] is the defaults of docs/design/defaults.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Health {
    /// `false`: nothing is probed and every provider counts as healthy.
    pub enabled: bool,
    /// Between two probes of one provider; 1 s to 1 h.
    pub interval: Duration,
    /// A probe slower than this failed; >= 1 s and < `interval`, so a probe
    /// ends before the next one starts.
    pub timeout: Duration,
    /// Consecutive failed probes that mark a provider down; 1..=100.
    pub unhealthy_after: u32,
    /// Consecutive successful probes that mark it up again; 1..=100.
    pub healthy_after: u32,
}

impl Default for Health {
    fn default() -> Self {
        Health {
            enabled: file::DEFAULT_HEALTH_ENABLED,
            interval: Duration::from_secs(file::DEFAULT_HEALTH_INTERVAL_SECS),
            timeout: Duration::from_secs(file::DEFAULT_HEALTH_TIMEOUT_SECS),
            unhealthy_after: file::DEFAULT_UNHEALTHY_AFTER,
            healthy_after: file::DEFAULT_HEALTHY_AFTER,
        }
    }
}

/// `[breaker]`: a circuit breaker per target. Closed, it opens after
/// `failure_threshold` consecutive failed requests; open, it refuses the
/// target for `open`; then half-open, it admits exactly one probe request,
/// whose success closes it and whose failure re-opens it.
/// [`Breaker::default`] is the defaults of docs/design/defaults.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Breaker {
    /// `false`: breakers never open.
    pub enabled: bool,
    /// 1..=1000.
    pub failure_threshold: u32,
    /// How long an open breaker stays open; 1 s to 1 h.
    pub open: Duration,
}

impl Default for Breaker {
    fn default() -> Self {
        Breaker {
            enabled: file::DEFAULT_BREAKER_ENABLED,
            failure_threshold: file::DEFAULT_FAILURE_THRESHOLD,
            open: Duration::from_secs(file::DEFAULT_OPEN_SECS),
        }
    }
}

/// `[parking]`: a target that answered 429, 408 or 5xx, or failed to
/// connect, is parked for `base` or the `Retry-After` it sent, capped at
/// `max`; parking only ever extends. [`Parking::default`] is docs/design/defaults.md's
/// defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parking {
    /// Without a `Retry-After`; 1 s to 1 h.
    pub base: Duration,
    /// The cap; >= `base`, at most one day.
    pub max: Duration,
}

impl Default for Parking {
    fn default() -> Self {
        Parking {
            base: Duration::from_secs(file::DEFAULT_PARKING_BASE_SECS),
            max: Duration::from_secs(file::DEFAULT_PARKING_MAX_SECS),
        }
    }
}

/// Read and validate a file (environment from `std::env`).
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    let source = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|error| ConfigError {
        file: source.clone(),
        line: None,
        field: None,
        message: format!("cannot read the configuration file: {error}"),
    })?;
    parse(&source, &text, &|name| {
        std::env::var_os(name).and_then(|value| value.into_string().ok())
    })
}

/// Validate text; `source` names the file in messages; `env` resolves
/// environment variables (tests inject it).
pub fn parse(
    source: &str,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    let locator = locate::Locator::new(text);
    let file: file::ConfigFile = match toml::from_str(text) {
        Ok(file) => file,
        // A syntax or type error: serde stops at the first, so there is one.
        Err(error) => {
            let offset = error.span().map(|span| span.start);
            return Err(ConfigError {
                file: source.to_owned(),
                line: offset.map(|offset| locate::line_at(text, offset)),
                field: offset.and_then(|offset| locator.path_at(offset)),
                message: error.message().trim_end().to_owned(),
            }
            .into());
        }
    };
    validate::validate(source, file, &locator, validate::Origin::File, env)
}

/// Validate a document that is already deserialized, such as a fleet
/// document merged into a gateway's file ([`merge_fleet_document`]): the
/// same rules as [`parse`], except the one about what a gateway's own file
/// may hold. Errors and warnings name their field path but no line.
pub fn parse_document(
    source: &str,
    document: &file::ConfigFile,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    validate::validate(
        source,
        document.clone(),
        &locate::Locator::empty(),
        validate::Origin::Document,
        env,
    )
}

/// Debug stand-in for a secret.
struct Redacted;

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Debug form of a digest: lowercase hex.
struct Hex<'a>(&'a [u8]);

impl fmt::Debug for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "\"{}\"", hex::encode(self.0))
    }
}
