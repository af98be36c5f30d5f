//! The immutable routing snapshot: routes, their balancers and targets, callers.
//!
//! [`Snapshot::build`] turns a validated [`Config`] into everything the request
//! path reads, resolving provider addresses, building one balancer per route
//! for the snapshot's whole life (a balancer's state is what makes it balance)
//! and attaching each target to its [`TargetStats`] in the shared
//! [`LoadTracker`]. A reload builds a new snapshot and swaps it in whole
//! (see `state.rs`); requests in flight keep the one they started with.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::HeaderValue;
use pingora::upstreams::peer::HttpPeer;
use rolter_balancer::{BuildContext, LoadBalancer, StrategyKind, TargetSpec};

use crate::auth::{AdminTokens, ApiKeys};
use crate::config::{self, Config};
use crate::metrics::{Metrics, RouteMetrics, TargetMetrics};
use crate::tracker::{LoadTracker, TargetId, TargetStats};

/// How long an idle upstream connection stays in the pool. Below the 5 s
/// keep-alive of uvicorn (vLLM, SGLang), so the engine never closes a
/// connection the gateway is about to reuse.
pub const UPSTREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// Where and how to reach one provider.
#[derive(Debug)]
pub struct Provider {
    pub name: String,
    pub slug: String,
    pub addr: SocketAddr,
    pub tls: bool,
    pub host: String,
    /// `Host` header value: the host, with the port when it is not the default.
    pub host_header: HeaderValue,
    /// Path prefix of the base URL ("" or "/x/y"), prepended to the request path.
    pub path_prefix: String,
    /// `Bearer <key>` sent upstream, from `api_key_env`.
    pub authorization: Option<HeaderValue>,
    pub base_url: String,
}

/// One target of one route.
pub struct Target {
    pub id: TargetId,
    /// `id` as text (`provider/model`), the metrics label.
    pub label: String,
    pub provider: Arc<Provider>,
    pub weight: u32,
    /// The upstream model as a JSON string literal, spliced into request bodies.
    pub model_json: Bytes,
    pub model_header: HeaderValue,
    pub provider_header: HeaderValue,
    pub stats: Arc<TargetStats>,
    pub metrics: TargetMetrics,
    peer: HttpPeer,
}

impl Target {
    /// A fresh peer for one attempt (Pingora takes it boxed).
    pub fn peer(&self) -> Box<HttpPeer> {
        Box::new(self.peer.clone())
    }
}

pub struct Route {
    pub model: String,
    pub strategy: StrategyKind,
    pub balancer: Box<dyn LoadBalancer>,
    pub targets: Vec<Target>,
    pub metrics: RouteMetrics,
}

/// Settings read on the request path.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub require_api_key: bool,
    pub max_retries: u32,
}

pub struct Snapshot {
    pub version: u64,
    pub limits: Limits,
    /// The configuration this snapshot was built from.
    pub config: Config,
    routes: HashMap<String, Arc<Route>>,
    /// Routes in file order, for listings.
    route_order: Vec<Arc<Route>>,
    pub api_keys: ApiKeys,
    pub admin_tokens: AdminTokens,
}

/// Why a configuration that validated could still not be turned into a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("{source_file}: providers \"{provider}\": cannot resolve {host}:{port}: {reason}")]
    Resolve {
        source_file: String,
        provider: String,
        host: String,
        port: u16,
        reason: String,
    },
}

impl Snapshot {
    pub fn build(
        config: Config,
        version: u64,
        tracker: &LoadTracker,
        metrics: &Metrics,
    ) -> Result<Snapshot, BuildError> {
        let mut providers = HashMap::new();
        for provider in &config.providers {
            providers.insert(
                provider.slug.clone(),
                Arc::new(resolve_provider(&config.source, provider)?),
            );
        }

        let seed_base = RandomState::new().build_hasher().finish();
        let mut routes = HashMap::new();
        let mut route_order = Vec::with_capacity(config.routes.len());
        for (index, route) in config.routes.iter().enumerate() {
            let targets: Vec<Target> = route
                .targets
                .iter()
                .map(|t| {
                    let provider = Arc::clone(&providers[&t.provider]);
                    build_target(
                        &route.model,
                        t,
                        provider,
                        &config.timeouts,
                        tracker,
                        metrics,
                    )
                })
                .collect();
            let ids: Vec<String> = targets.iter().map(|t| t.label.clone()).collect();
            let specs: Vec<TargetSpec<'_>> = ids
                .iter()
                .zip(&targets)
                .map(|(id, t)| TargetSpec {
                    id,
                    weight: t.weight,
                    price: None,
                    max_adapters: TargetSpec::DEFAULT_MAX_ADAPTERS,
                })
                .collect();
            let balancer = rolter_balancer::build(
                route.strategy,
                &BuildContext::new(
                    &specs,
                    seed_base ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
                ),
            );
            let route = Arc::new(Route {
                model: route.model.clone(),
                strategy: route.strategy,
                balancer,
                metrics: metrics.route(&route.model, route.strategy.as_str()),
                targets,
            });
            routes.insert(route.model.clone(), Arc::clone(&route));
            route_order.push(route);
        }

        Ok(Snapshot {
            version,
            limits: Limits {
                max_body_bytes: config.server.max_body_bytes,
                require_api_key: config.server.require_api_key,
                max_retries: config.retry.max_retries,
            },
            api_keys: ApiKeys::new(&config.api_keys),
            admin_tokens: AdminTokens::new(&config.admin_tokens),
            routes,
            route_order,
            config,
        })
    }

    /// The route serving a public model name.
    pub fn route(&self, model: &str) -> Option<&Arc<Route>> {
        self.routes.get(model)
    }

    /// Routes in configuration order.
    pub fn routes(&self) -> &[Arc<Route>] {
        &self.route_order
    }
}

fn resolve_provider(source: &str, provider: &config::Provider) -> Result<Provider, BuildError> {
    let base = &provider.base_url;
    let resolve_error = |reason: String| BuildError::Resolve {
        source_file: source.to_string(),
        provider: provider.slug.clone(),
        host: base.host.clone(),
        port: base.port,
        reason,
    };
    let addr = base
        .authority()
        .to_socket_addrs()
        .map_err(|e| resolve_error(e.to_string()))?
        .next()
        .ok_or_else(|| resolve_error("no address".to_string()))?;
    // The port is named only when it is not the scheme's default (RFC 9110 §7.2).
    let host_header = if base.port == config::BaseUrl::default_port(base.tls) {
        base.host.clone()
    } else {
        base.authority()
    };
    Ok(Provider {
        name: provider.name.clone(),
        slug: provider.slug.clone(),
        addr,
        tls: base.tls,
        host: base.host.clone(),
        host_header: HeaderValue::from_str(&host_header)
            .map_err(|_| resolve_error("host is not a valid header value".to_string()))?,
        path_prefix: base.path_prefix.clone(),
        authorization: provider.api_key.as_ref().and_then(|key| {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}")).ok()?;
            value.set_sensitive(true);
            Some(value)
        }),
        base_url: base.to_string(),
    })
}

fn build_target(
    route_model: &str,
    target: &config::RouteTarget,
    provider: Arc<Provider>,
    timeouts: &config::Timeouts,
    tracker: &LoadTracker,
    metrics: &Metrics,
) -> Target {
    let id = TargetId::new(target.provider.clone(), target.model.clone());
    let label = id.to_string();
    // SNI is the bare host name (brackets of an IPv6 literal removed).
    let sni = provider
        .host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let mut peer = HttpPeer::new(provider.addr, provider.tls, sni);
    peer.options.connection_timeout = Some(timeouts.connect);
    // Pingora applies one read timeout to every upstream read, headers
    // included; the longer of the two bounds keeps a slow prefill alive.
    peer.options.read_timeout = Some(timeouts.first_byte.max(timeouts.idle));
    peer.options.idle_timeout = Some(UPSTREAM_IDLE_TIMEOUT);
    let model_json = serde_json::to_vec(&target.model).unwrap_or_default();
    Target {
        stats: tracker.stats(&id),
        metrics: metrics.target(route_model, &label),
        model_header: HeaderValue::from_str(&target.model)
            .unwrap_or_else(|_| HeaderValue::from_static("-")),
        provider_header: HeaderValue::from_str(&target.provider)
            .unwrap_or_else(|_| HeaderValue::from_static("-")),
        model_json: Bytes::from(model_json),
        weight: target.weight,
        provider,
        label,
        id,
        peer,
    }
}
