//! The immutable routing snapshot: routes, their balancers and targets, callers.
//!
//! [`Snapshot::build`] turns a validated [`Config`] into everything the request
//! path reads, resolving provider addresses, building one balancer per route
//! and per provider group for the snapshot's whole life (a balancer's state is
//! what makes it balance) and attaching each target to its [`TargetStats`] in
//! the shared [`LoadTracker`]. A reload builds a new snapshot and swaps it in
//! whole (see `state.rs`); requests in flight keep the one they started with.
//!
//! Addresses a client may use as `model` (config.md): a route's public model;
//! `<group-slug>/<model>`, the members of a provider group; and
//! `<provider-slug>/<model>`, one provider pinned. The last two have no
//! configured route: [`Snapshot::resolve`] builds one on first use and keeps
//! it for the snapshot's life, sharing the group's balancer (built once in
//! `build`; before #1655 it was rebuilt per request and a whole fleet's
//! traffic went to the first member).

mod provider;
mod route;

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rolter_balancer::{BuildContext, LoadBalancer, RoundRobin, StrategyKind, TargetSpec};

pub use provider::Provider;
pub use route::{Route, RouteKind, Target};

use crate::auth::{AdminTokens, ApiKeys};
use crate::config::{Config, GroupMember};
use crate::health::HealthPolicy;
use crate::kv_events::KvTargetsView;
use crate::lmcache::OccupancyTargetsView;
use crate::metrics::Metrics;
use crate::state::Learned;
use crate::tracker::{BreakerPolicy, LoadTracker, ParkingPolicy, TargetId, TrackerView};

/// How long an idle upstream connection stays in the pool. Below the 5 s
/// keep-alive of uvicorn (vLLM, SGLang), so the engine never closes a
/// connection the gateway is about to reuse.
pub const UPSTREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// Distinct group and pinned addresses one snapshot builds routes for. Each
/// address has its own targets and counters, and clients choose the model
/// part freely, so the number is bounded; a reload starts afresh.
pub const MAX_ADDRESSED_ROUTES: usize = 4096;

/// Settings read on the request path and by the health checker.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub require_api_key: bool,
    pub max_retries: u32,
    pub breaker: BreakerPolicy,
    pub parking: ParkingPolicy,
    pub health: HealthPolicy,
}

impl Limits {
    fn from_config(config: &Config) -> Self {
        let ms = |d: Duration| d.as_millis() as u64;
        Limits {
            max_body_bytes: config.server.max_body_bytes,
            require_api_key: config.server.require_api_key,
            max_retries: config.retry.max_retries,
            breaker: BreakerPolicy {
                enabled: config.breaker.enabled,
                failure_threshold: config.breaker.failure_threshold,
                open_ms: ms(config.breaker.open),
            },
            parking: ParkingPolicy {
                base_ms: ms(config.parking.base),
                max_ms: ms(config.parking.max),
            },
            health: HealthPolicy {
                enabled: config.health.enabled,
                interval_ms: ms(config.health.interval),
                timeout_ms: ms(config.health.timeout),
                unhealthy_after: config.health.unhealthy_after,
                healthy_after: config.health.healthy_after,
            },
        }
    }
}

/// A provider group: its members and the one balancer they share.
pub struct Group {
    pub slug: String,
    pub strategy: StrategyKind,
    pub balancer: Arc<dyn LoadBalancer>,
    pub members: Vec<GroupMember>,
}

/// Why an address resolves to no route.
#[derive(Debug, PartialEq, Eq)]
pub enum Unresolved {
    /// Nothing is configured under that name.
    Unknown,
    /// The snapshot already built [`MAX_ADDRESSED_ROUTES`] addressed routes.
    TooManyAddresses,
}

pub struct Snapshot {
    pub version: u64,
    pub limits: Limits,
    /// The configuration this snapshot was built from.
    pub config: Config,
    routes: HashMap<String, Arc<Route>>,
    /// Routes in file order, for listings.
    route_order: Vec<Arc<Route>>,
    providers: HashMap<String, Arc<Provider>>,
    groups: HashMap<String, Group>,
    // Routes built for group and pinned addresses. Read-locked for one map
    // lookup per such request, write-locked once per new address; never held
    // across an await.
    addressed: RwLock<HashMap<String, Arc<Route>>>,
    tracker: Arc<LoadTracker>,
    metrics: Arc<Metrics>,
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
    #[error("{source_file}: providers \"{provider}\": ca_file {error}")]
    Tls {
        source_file: String,
        provider: String,
        error: crate::tls::TlsFileError,
    },
}

/// A seed per balancer, so random strategies do not move in lockstep.
struct Seeds {
    base: u64,
    next: u64,
}

impl Seeds {
    fn new() -> Self {
        Self {
            base: RandomState::new().build_hasher().finish(),
            next: 0,
        }
    }

    fn next(&mut self) -> u64 {
        self.next += 1;
        self.base ^ self.next.wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
}

impl Snapshot {
    pub fn build(
        config: Config,
        version: u64,
        learned: &Learned,
        metrics: &Arc<Metrics>,
    ) -> Result<Snapshot, BuildError> {
        let tracker = &learned.tracker;
        let health = &learned.health;
        // Telemetry of providers that are gone is dropped; the others keep
        // their index and signal across the reload.
        let configured = |slug: &str| config.providers.iter().any(|p| p.slug == slug);
        learned.kv.retain(configured);
        learned.occupancy.retain(configured);
        let mut providers = HashMap::new();
        for provider in &config.providers {
            providers.insert(
                provider.slug.clone(),
                Arc::new(provider::resolve(
                    &config.source,
                    provider,
                    health.provider(&provider.slug),
                )?),
            );
        }

        let mut seeds = Seeds::new();
        let mut routes = HashMap::new();
        let mut route_order = Vec::with_capacity(config.routes.len());
        for route in &config.routes {
            let targets: Vec<Target> = route
                .targets
                .iter()
                .map(|t| {
                    Target::new(
                        &route.model,
                        Arc::clone(&providers[&t.provider]),
                        &t.model,
                        t.weight,
                        &config.timeouts,
                        tracker,
                        metrics,
                    )
                })
                .collect();
            let specs: Vec<TargetSpec<'_>> = targets.iter().map(|t| t.spec(&config)).collect();
            let views = TargetViews::new(
                targets.iter().map(|t| (t.id.provider.as_str(), &t.stats)),
                &config,
                learned,
            );
            let balancer =
                build_balancer(route.strategy, &specs, views, seeds.next(), &config).into();
            let route = Arc::new(Route {
                model: route.model.clone(),
                kind: RouteKind::Configured,
                strategy: route.strategy,
                balancer,
                metrics: metrics.route(&route.model, route.strategy.as_str()),
                targets,
                adapter: None,
            });
            routes.insert(route.model.clone(), Arc::clone(&route));
            route_order.push(route);
        }

        let mut groups = HashMap::new();
        for group in &config.provider_groups {
            // Costs and learned state of a group's balancer follow each
            // member's declared upstream model; a passthrough member's model
            // is unknown until a request names it, so it is cost-neutral.
            let ids: Vec<String> = group
                .members
                .iter()
                .map(|m| TargetId::new(m.provider.clone(), member_model(m)).to_string())
                .collect();
            let specs: Vec<TargetSpec<'_>> = group
                .members
                .iter()
                .zip(&ids)
                .map(|(m, id)| TargetSpec {
                    id,
                    weight: m.weight,
                    price: m
                        .model
                        .as_deref()
                        .and_then(|model| config.price_of(model))
                        .map(|p| rolter_balancer::Price {
                            input_per_mtok: p.input_per_mtok,
                            output_per_mtok: p.output_per_mtok,
                        }),
                    max_adapters: providers[&m.provider].max_loras,
                })
                .collect();
            let member_stats: Vec<_> = group
                .members
                .iter()
                .map(|m| tracker.stats(&TargetId::new(m.provider.clone(), member_model(m))))
                .collect();
            let views = TargetViews::new(
                group
                    .members
                    .iter()
                    .map(|m| m.provider.as_str())
                    .zip(&member_stats),
                &config,
                learned,
            );
            let balancer = build_balancer(group.strategy, &specs, views, seeds.next(), &config);
            groups.insert(
                group.slug.clone(),
                Group {
                    slug: group.slug.clone(),
                    strategy: group.strategy,
                    balancer: balancer.into(),
                    members: group.members.clone(),
                },
            );
        }

        // Last, when nothing can fail any more: a rejected reload keeps
        // every key's counters.
        let api_keys = ApiKeys::new(&config.api_keys, &learned.rate_limits);
        learned
            .rate_limits
            .retain(|name| config.api_keys.iter().any(|k| k.name == name));
        Ok(Snapshot {
            version,
            limits: Limits::from_config(&config),
            api_keys,
            admin_tokens: AdminTokens::new(&config.admin_tokens),
            routes,
            route_order,
            providers,
            groups,
            addressed: RwLock::new(HashMap::new()),
            tracker: Arc::clone(tracker),
            metrics: Arc::clone(metrics),
            config,
        })
    }

    /// The route for the `model` a request names: a configured route, a
    /// group address or a pinned provider address.
    pub fn resolve(&self, model: &str) -> Result<Arc<Route>, Unresolved> {
        if let Some(route) = self.routes.get(model) {
            return Ok(Arc::clone(route));
        }
        let (slug, upstream) = model.split_once('/').ok_or(Unresolved::Unknown)?;
        if upstream.is_empty()
            || (!self.groups.contains_key(slug) && !self.providers.contains_key(slug))
        {
            return Err(Unresolved::Unknown);
        }
        let addressed = self.addressed.read().unwrap_or_else(|e| e.into_inner());
        if let Some(route) = addressed.get(model) {
            return Ok(Arc::clone(route));
        }
        let full = addressed.len() >= MAX_ADDRESSED_ROUTES;
        drop(addressed);
        if full {
            return Err(Unresolved::TooManyAddresses);
        }
        let route = Arc::new(match self.groups.get(slug) {
            Some(group) => self.group_route(group, model, upstream),
            None => self.pinned_route(&self.providers[slug], model, upstream),
        });
        let mut addressed = self.addressed.write().unwrap_or_else(|e| e.into_inner());
        // A concurrent request may have built the same address first; keep
        // one, so every request for it shares the same targets.
        Ok(Arc::clone(
            addressed.entry(model.to_string()).or_insert(route),
        ))
    }

    fn group_route(&self, group: &Group, address: &str, requested: &str) -> Route {
        let label = format!("{}/*", group.slug);
        let targets = group
            .members
            .iter()
            .map(|m| {
                Target::new(
                    &label,
                    Arc::clone(&self.providers[&m.provider]),
                    m.model.as_deref().unwrap_or(requested),
                    m.weight,
                    &self.config.timeouts,
                    &self.tracker,
                    &self.metrics,
                )
            })
            .collect();
        let passthrough = group.members.iter().any(|m| m.model.is_none());
        Route {
            model: address.to_string(),
            kind: RouteKind::Group {
                slug: group.slug.clone(),
            },
            strategy: group.strategy,
            balancer: Arc::clone(&group.balancer),
            targets,
            metrics: self.metrics.route(&label, group.strategy.as_str()),
            // The requested model names an adapter over shared base weights
            // only where members forward it as asked.
            adapter: passthrough.then(|| requested.to_string()),
        }
    }

    fn pinned_route(&self, provider: &Arc<Provider>, address: &str, model: &str) -> Route {
        let label = format!("{}/*", provider.slug);
        Route {
            model: address.to_string(),
            kind: RouteKind::Pinned {
                slug: provider.slug.clone(),
            },
            strategy: StrategyKind::RoundRobin,
            balancer: Arc::new(RoundRobin::new(1)),
            targets: vec![Target::new(
                &label,
                Arc::clone(provider),
                model,
                1,
                &self.config.timeouts,
                &self.tracker,
                &self.metrics,
            )],
            metrics: self
                .metrics
                .route(&label, StrategyKind::RoundRobin.as_str()),
            adapter: None,
        }
    }

    /// Routes in configuration order.
    pub fn routes(&self) -> &[Arc<Route>] {
        &self.route_order
    }

    /// Every provider of the configuration.
    pub fn providers(&self) -> impl Iterator<Item = &Arc<Provider>> {
        self.providers.values()
    }

    /// Provider groups, by slug.
    pub fn groups(&self) -> impl Iterator<Item = &Group> {
        self.groups.values()
    }
}

/// The model a group member is known by at build time.
fn member_model(member: &GroupMember) -> &str {
    member.model.as_deref().unwrap_or("*")
}

/// What a balancer over some targets reads: their counters, KV indexes and
/// cache occupancy (absent where a provider has no such source).
struct TargetViews {
    stats: Vec<Arc<crate::tracker::TargetStats>>,
    kv: Vec<Option<Arc<crate::kv_events::KvIndex>>>,
    occupancy: Vec<Option<Arc<crate::lmcache::Occupancy>>>,
}

impl TargetViews {
    fn new<'a>(
        targets: impl Iterator<Item = (&'a str, &'a Arc<crate::tracker::TargetStats>)>,
        config: &Config,
        learned: &Learned,
    ) -> Self {
        let mut views = TargetViews {
            stats: Vec::new(),
            kv: Vec::new(),
            occupancy: Vec::new(),
        };
        for (slug, stats) in targets {
            let provider = config.providers.iter().find(|p| p.slug == slug);
            views.stats.push(Arc::clone(stats));
            views.kv.push(
                provider
                    .and_then(|p| p.kv_events.as_ref())
                    .map(|_| learned.kv.index(slug)),
            );
            views.occupancy.push(
                provider
                    .and_then(|p| p.lmcache.as_ref())
                    .map(|_| learned.occupancy.provider(slug)),
            );
        }
        views
    }
}

fn build_balancer(
    strategy: StrategyKind,
    specs: &[TargetSpec<'_>],
    views: TargetViews,
    seed: u64,
    config: &Config,
) -> Box<dyn LoadBalancer> {
    let mut context = BuildContext::new(specs, seed);
    context.stats = Arc::new(TrackerView::new(views.stats));
    context.kv_blocks = Arc::new(KvTargetsView::new(views.kv));
    context.occupancy = Arc::new(OccupancyTargetsView::new(views.occupancy));
    context.adaptive = config.adaptive_routing;
    rolter_balancer::build(strategy, &context)
}
