//! Validation: [`ConfigFile`] (what the file says) into [`Config`] (what
//! rolter runs with).
//!
//! Every rule reports into one list instead of returning early, so that a
//! user fixing a file sees all of its problems at once. Each report names
//! the field path (`routes[1].targets[0].provider`) and the line the locator
//! finds for it. A field that failed does not cascade: a provider with a bad
//! `base_url` still resolves by slug for the routes that name it.
//!
//! A setting that is valid but has no effect, or is changed on the way in,
//! is reported the same way into a second list, the warnings, which never
//! make validation fail.
//!
//! Validation serves files and documents alike: a document (a fleet
//! document, possibly merged into a gateway's file) has no text, so its
//! locator finds no line, and the one rule about what a gateway's own file
//! may hold is not applied to it ([`Origin`]).
//!
//! One file per part of the file: `providers.rs` (upstream TLS included),
//! `telemetry.rs` (a provider's KV-event stream and LMCache signal),
//! `groups.rs` (provider groups), `routes.rs`, `keys.rs` (API keys and admin
//! tokens), `tokenizer.rs` (a route's or group's model directory), `catalog.rs`,
//! `adaptive.rs`, `eligibility.rs` (`[health]`,
//! `[breaker]` and `[parking]`), `edge.rs` (the client-facing part of
//! `[server]`: TLS listeners, trusted proxies, the access log) and
//! `control_plane.rs` (`[control_plane]` and what each role requires); the
//! rest of
//! `[server]` (connection limits included), `[retry]` and `[timeouts]` and
//! the shared reporting helpers are here.

mod adaptive;
mod catalog;
mod control_plane;
mod disaggregation;
mod edge;
mod eligibility;
mod endpoints;
mod flow;
mod groups;
mod keys;
mod providers;
mod rate_limits;
mod routes;
mod telemetry;
mod tokenizer;
mod tracing;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::file::{self, ConfigFile};
use super::locate::Locator;
use super::{Config, ConfigError, ConfigErrors, Retry, Role, Server, Timeouts};

type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Where what is validated comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Origin {
    /// A node's own TOML file, whose locator has its text: a gateway's
    /// holds only the gateway's own sections.
    File,
    /// A deserialized document without text: a fleet document, or a
    /// gateway's file merged with one.
    Document,
}

pub(super) fn validate(
    source: &str,
    mut file: ConfigFile,
    locator: &Locator<'_>,
    origin: Origin,
    env: Env<'_>,
) -> Result<Config, ConfigErrors> {
    let mut v = Validator {
        source,
        locator,
        env,
        errors: Vec::new(),
        warnings: Vec::new(),
        loads_model_dirs: true,
    };
    if origin == Origin::File && file.server.role.as_deref() == Some("gateway") {
        file = v.gateway_file(file);
    }
    // An unknown role has its own error; its control plane is not judged.
    let role_known = matches!(
        file.server.role.as_deref(),
        None | Some("standalone" | "gateway" | "control")
    );
    let server = v.server(file.server);
    v.loads_model_dirs = server.role != Role::Control;
    let providers = v.providers(file.providers);
    let groups = v.provider_groups(file.provider_groups, &providers);
    // Every slug and model written, valid or not: a failed table has its
    // own error already, and must not add "unknown" noise elsewhere.
    let group_slugs: Vec<String> = groups
        .iter()
        .map(|group| group.slug.clone())
        .filter(|slug| !slug.is_empty())
        .collect();
    let route_models: Vec<String> = file
        .routes
        .iter()
        .filter_map(|route| route.model.clone())
        .collect();
    let routes = v.routes(file.routes, &providers, &group_slugs);
    let api_keys = v.api_keys(file.api_keys, &route_models, &group_slugs, &providers);
    let admin_tokens = v.admin_tokens(file.admin_tokens);
    let catalog = v.catalog(file.catalog);
    let adaptive_routing = v.adaptive_routing(file.adaptive_routing);
    let retry = v.retry(file.retry);
    let timeouts = v.timeouts(file.timeouts);
    let health = v.health(file.health);
    let breaker = v.breaker(file.breaker);
    let parking = v.parking(file.parking);
    let saturation = v.saturation(file.saturation);
    let flow_control = v.flow_control(file.flow_control);
    let rate_limits = v.rate_limits(file.rate_limits);
    let tracing = file.tracing.and_then(|table| v.tracing(table));
    // A control node's providers may all be in its database: judged where
    // the file holds the whole fleet.
    let nothing_saturates = providers
        .iter()
        .filter_map(|p| p.valid.as_ref())
        .all(|p| p.max_concurrency.is_none() && p.engine_metrics.is_none());
    if flow_control.enabled && server.role == Role::Standalone && nothing_saturates {
        v.warn(
            "flow_control.enabled",
            "has no effect: no provider sets max_concurrency or [providers.engine_metrics], so no engine is ever saturated and no request ever waits",
        );
    }
    // Last, where the contract's example writes it: a document's reports, which have no
    // line to be sorted by, then come in the order a file's would.
    let control_plane = if role_known {
        v.control_plane(server.role, file.control_plane)
    } else {
        None
    };

    if !v.errors.is_empty() {
        // File order; errors without a line first (a document's have none
        // and keep the order they were found in: the sort is stable).
        v.errors.sort_by_key(|error| error.line);
        return Err(ConfigErrors(v.errors));
    }
    v.warnings.sort_by_key(|warning| warning.line);
    // No error means every table produced its validated form.
    debug_assert!(providers.iter().all(|p| p.valid.is_some()));
    debug_assert!(groups.iter().all(|g| g.valid.is_some()));
    Ok(Config {
        source: source.to_owned(),
        server,
        providers: providers.into_iter().filter_map(|p| p.valid).collect(),
        routes,
        provider_groups: groups.into_iter().filter_map(|g| g.valid).collect(),
        catalog,
        adaptive_routing,
        api_keys,
        admin_tokens,
        retry,
        timeouts,
        health,
        breaker,
        parking,
        saturation,
        flow_control,
        rate_limits,
        tracing,
        control_plane,
        warnings: v.warnings,
    })
}

struct Validator<'a> {
    source: &'a str,
    locator: &'a Locator<'a>,
    env: Env<'a>,
    errors: Vec<ConfigError>,
    warnings: Vec<ConfigError>,
    /// Model directories (`tokenizer`) are loaded to be checked; not on a
    /// control node, which routes nothing (its gateways load and check
    /// them when they validate the fleet document).
    loads_model_dirs: bool,
}

impl Validator<'_> {
    fn located(&self, field: String, message: String) -> ConfigError {
        ConfigError {
            file: self.source.to_owned(),
            line: self.locator.line_of(&field),
            field: Some(field),
            message,
        }
    }

    fn error(&mut self, field: impl Into<String>, message: impl Into<String>) {
        let error = self.located(field.into(), message.into());
        self.errors.push(error);
    }

    /// Reports a setting that is accepted but does not do what it seems to.
    fn warn(&mut self, field: impl Into<String>, message: impl Into<String>) {
        let warning = self.located(field.into(), message.into());
        self.warnings.push(warning);
    }

    /// A required string field: reports when absent or blank.
    fn required(&mut self, field: &str, value: Option<String>) -> Option<String> {
        match value {
            None => {
                self.error(field, "is required");
                None
            }
            Some(value) if value.trim().is_empty() => {
                self.error(field, "must not be empty");
                None
            }
            Some(value) => Some(value),
        }
    }

    /// A required list: reported when absent ("is required") or empty
    /// ("must list at least one {noun}"); otherwise its entries.
    fn non_empty<T>(&mut self, field: &str, list: Option<Vec<T>>, noun: &str) -> Vec<T> {
        match list {
            None => self.error(field, "is required"),
            Some(list) if list.is_empty() => {
                self.error(field, format!("must list at least one {noun}"))
            }
            Some(list) => return list,
        }
        Vec::new()
    }

    /// Claims `value` for entry `i` of a list, in `claimed`: the first entry
    /// to write a value keeps it; a later one gets an error at `field`
    /// naming the first, "{what} {value:?} is already {how}[{j}]" (`how`:
    /// "used by providers", "routed by routes", ...).
    fn claim(
        &mut self,
        claimed: &mut HashMap<String, usize>,
        (field, what, how): (String, &str, &str),
        value: &str,
        i: usize,
    ) {
        match claimed.get(value) {
            Some(j) => self.error(field, format!("{what} {value:?} is already {how}[{j}]")),
            None => {
                claimed.insert(value.to_owned(), i);
            }
        }
    }

    /// A reference to a provider by slug (or name), resolved to its slug;
    /// an unknown one is an error at `field` that lists the known ones.
    fn provider_reference(
        &mut self,
        field: String,
        wanted: &str,
        providers: &[providers::ProviderEntry],
    ) -> Option<String> {
        match providers::resolve_provider(providers, wanted) {
            Some(slug) => Some(slug.to_owned()),
            None => {
                self.error(
                    field,
                    format!(
                        "unknown provider {wanted:?} ({})",
                        providers::known_providers(providers)
                    ),
                );
                None
            }
        }
    }

    /// A file rolter reads at start (a certificate, a key, a CA bundle): it
    /// must exist, be a file, and be readable now. Errors name the path.
    fn readable_file(&mut self, field: &str, path: String) -> Option<PathBuf> {
        if path.trim().is_empty() {
            self.error(field, "must not be empty");
            return None;
        }
        let path_buf = PathBuf::from(&path);
        let problem = match std::fs::metadata(&path_buf) {
            Err(error) => format!("cannot read {path:?}: {error}"),
            Ok(metadata) if metadata.is_dir() => format!("{path:?} is a directory, not a file"),
            Ok(_) => match std::fs::File::open(&path_buf) {
                Err(error) => format!("cannot read {path:?}: {error}"),
                Ok(_) => return Some(path_buf),
            },
        };
        self.error(field, problem);
        None
    }

    /// The value of the environment variable named at `field`. Never puts the
    /// value in a message.
    fn secret(&mut self, field: &str, var: &str) -> Option<String> {
        if var.is_empty() || var.contains(['=', '\0']) {
            self.error(
                field,
                format!("{var:?} is not an environment variable name"),
            );
            return None;
        }
        match (self.env)(var) {
            None => self.error(field, format!("environment variable {var} is not set")),
            Some(value) if value.is_empty() => {
                self.error(field, format!("environment variable {var} is empty"))
            }
            Some(value) if value.chars().any(char::is_control) => self.error(
                field,
                format!(
                    "environment variable {var} contains control characters (a trailing newline?)"
                ),
            ),
            Some(value) => return Some(value),
        }
        None
    }

    fn server(&mut self, table: file::ServerTable) -> Server {
        let listen = table
            .listen
            .unwrap_or_else(|| vec![file::DEFAULT_LISTEN.to_owned()]);
        if listen.is_empty() {
            self.error("server.listen", "must name at least one address");
        }
        let mut bound: Vec<(SocketAddr, usize)> = Vec::new();
        for (i, address) in listen.iter().enumerate() {
            let field = format!("server.listen[{i}]");
            match address.parse::<SocketAddr>() {
                Err(_) => self.error(
                    field,
                    format!("{address:?} is not an ip:port address (e.g. \"0.0.0.0:8080\")"),
                ),
                Ok(addr) => match bound.iter().find(|(other, _)| *other == addr) {
                    Some((_, first)) => self.error(
                        field,
                        format!("{address:?} is already listed as server.listen[{first}]"),
                    ),
                    None => bound.push((addr, i)),
                },
            }
        }
        let admin_listen = table
            .admin_listen
            .unwrap_or_else(|| file::DEFAULT_ADMIN_LISTEN.to_owned());
        let admin_addr = match admin_listen.parse::<SocketAddr>() {
            Err(_) => {
                self.error(
                    "server.admin_listen",
                    format!("{admin_listen:?} is not an ip:port address (e.g. \"127.0.0.1:9090\")"),
                );
                None
            }
            Ok(addr) => {
                if let Some((_, i)) = bound.iter().find(|(other, _)| *other == addr) {
                    self.error(
                        "server.admin_listen",
                        format!("{admin_listen:?} is also the proxy listener server.listen[{i}]"),
                    );
                }
                Some(addr)
            }
        };

        let role_name = table.role.as_deref().unwrap_or(file::DEFAULT_ROLE);
        let role = match role_name {
            "standalone" => Role::Standalone,
            "gateway" => Role::Gateway,
            "control" => Role::Control,
            other => {
                self.error(
                    "server.role",
                    format!("unknown role {other:?} (known: standalone, gateway, control)"),
                );
                Role::Standalone
            }
        };

        let max_body_bytes = table.max_body_bytes.unwrap_or(file::DEFAULT_MAX_BODY_BYTES);
        if max_body_bytes == 0 {
            self.error("server.max_body_bytes", "must be > 0");
        }
        let max_body_bytes = usize::try_from(max_body_bytes).unwrap_or_else(|_| {
            self.error(
                "server.max_body_bytes",
                format!("{max_body_bytes} does not fit this platform's address space"),
            );
            0
        });

        // Every plain-HTTP listener a TLS listener must not overlap.
        let mut taken: Vec<(SocketAddr, String)> = bound
            .iter()
            .map(|(addr, i)| (*addr, format!("server.listen[{i}]")))
            .collect();
        if let Some(addr) = admin_addr {
            taken.push((addr, "server.admin_listen".to_owned()));
        }
        let tls = self.tls_listeners(table.tls.unwrap_or_default(), &taken);
        let trusted_proxies = self.trusted_proxies(table.trusted_proxies.unwrap_or_default());
        let (access_log, access_log_format) =
            self.access_log(table.access_log, table.access_log_format);
        // Each in 1..=max seconds; the default stands in for a refused value.
        let seconds = |v: &mut Self, field: &str, written, default, max| {
            v.bounded(field, written, default, max, eligibility::Unit::Seconds)
                .unwrap_or(default)
        };
        let header_read_timeout = seconds(
            self,
            "server.header_read_timeout_secs",
            table.header_read_timeout_secs,
            file::DEFAULT_HEADER_READ_TIMEOUT_SECS,
            file::MAX_HEADER_READ_TIMEOUT_SECS,
        );
        let send_timeout = seconds(
            self,
            "server.send_timeout_secs",
            table.send_timeout_secs,
            file::DEFAULT_SEND_TIMEOUT_SECS,
            file::MAX_SEND_TIMEOUT_SECS,
        );
        let max_request_header_bytes = table
            .max_request_header_bytes
            .unwrap_or(file::DEFAULT_MAX_REQUEST_HEADER_BYTES);
        if !(file::MIN_REQUEST_HEADER_BYTES..=file::MAX_REQUEST_HEADER_BYTES)
            .contains(&max_request_header_bytes)
        {
            self.error(
                "server.max_request_header_bytes",
                format!(
                    "must be between {} and {} bytes (got {max_request_header_bytes})",
                    file::MIN_REQUEST_HEADER_BYTES,
                    file::MAX_REQUEST_HEADER_BYTES
                ),
            );
        }
        let keepalive_timeout = table
            .keepalive_timeout_secs
            .unwrap_or(file::DEFAULT_KEEPALIVE_TIMEOUT_SECS);
        if keepalive_timeout > file::MAX_KEEPALIVE_TIMEOUT_SECS {
            self.error(
                "server.keepalive_timeout_secs",
                format!(
                    "must be at most {} seconds (got {keepalive_timeout}); the unit is seconds, not milliseconds; 0 turns keep-alive off",
                    file::MAX_KEEPALIVE_TIMEOUT_SECS
                ),
            );
        }
        if keepalive_timeout == 0 && table.keepalive_requests.is_some() {
            self.warn(
                "server.keepalive_requests",
                "has no effect: keepalive_timeout_secs = 0 closes every connection after one request",
            );
        }

        Server {
            listen,
            admin_listen,
            role,
            max_body_bytes,
            require_api_key: table
                .require_api_key
                .unwrap_or(file::DEFAULT_REQUIRE_API_KEY),
            tls,
            trusted_proxies,
            access_log,
            access_log_format,
            header_read_timeout: Duration::from_secs(header_read_timeout),
            keepalive_timeout: Duration::from_secs(keepalive_timeout),
            keepalive_requests: table
                .keepalive_requests
                .unwrap_or(file::DEFAULT_KEEPALIVE_REQUESTS),
            max_connections: table
                .max_connections
                .unwrap_or(file::DEFAULT_MAX_CONNECTIONS),
            send_timeout: Duration::from_secs(send_timeout),
            max_request_header_bytes: usize::try_from(max_request_header_bytes)
                .unwrap_or(usize::MAX),
        }
    }

    fn retry(&mut self, table: file::RetryTable) -> Retry {
        let max_retries = table.max_retries.unwrap_or(file::DEFAULT_MAX_RETRIES);
        if max_retries > file::MAX_RETRIES_LIMIT {
            self.error(
                "retry.max_retries",
                format!(
                    "must be at most {} (got {max_retries})",
                    file::MAX_RETRIES_LIMIT
                ),
            );
        }
        Retry { max_retries }
    }

    fn timeouts(&mut self, table: file::TimeoutsTable) -> Timeouts {
        let mut positive = |field: &str, value: Option<u64>, default: u64| {
            let value = value.unwrap_or(default);
            if value == 0 {
                self.error(format!("timeouts.{field}"), "must be > 0");
            }
            value
        };
        let connect = positive("connect_ms", table.connect_ms, file::DEFAULT_CONNECT_MS);
        let first_byte = positive(
            "first_byte_secs",
            table.first_byte_secs,
            file::DEFAULT_FIRST_BYTE_SECS,
        );
        let idle = positive("idle_secs", table.idle_secs, file::DEFAULT_IDLE_SECS);
        Timeouts {
            connect: Duration::from_millis(connect),
            first_byte: Duration::from_secs(first_byte),
            idle: Duration::from_secs(idle),
        }
    }
}
