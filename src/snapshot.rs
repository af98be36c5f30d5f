//! The immutable routing snapshot: routes, their balancers and targets, callers.
//!
//! [`Snapshot::build`] turns a validated [`Config`] into everything the request
//! path reads, resolving provider addresses, building one balancer per route
//! and per provider group for the snapshot's whole life (a balancer's state is
//! what makes it balance) and attaching each target to its [`TargetStats`] in
//! the shared [`LoadTracker`]. A reload builds a new snapshot and swaps it in
//! whole (see `state.rs`); requests in flight keep the one they started with.
//!
//! Addresses a client may use as `model` (docs/design/configuration.md): a route's public model;
//! `<group-slug>/<model>`, the members of a provider group; and
//! `<provider-slug>/<model>`, one provider pinned. The last two have no
//! configured route. [`Snapshot::address`] says what a name addresses
//! without building anything, so the caller's key is checked first
//! ([`Address::admits`]); [`Snapshot::route`] then builds the route, which
//! shares the group's balancer (built once in `build`; before #1655 it was
//! rebuilt per request and a whole fleet's traffic went to the first
//! member) and the group members' counters. What is kept per address is
//! bounded (`addressed.rs`).

mod addressed;
mod provider;
mod route;

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::time::Duration;

use rolter_balancer::{BuildContext, LoadBalancer, RoundRobin, StrategyKind, TargetSpec};

pub use addressed::MAX_ADDRESSED_ROUTES;
pub use provider::Provider;
pub use route::{PrefillPool, Route, RouteKind, Target, PREFILL_LABEL_SUFFIX};

use crate::auth::{AdminTokens, ApiKeys, Caller};
use crate::config::{Config, FlowControl, GroupMember};
use crate::flow_control::RouteQueue;
use crate::health::{HealthPolicy, ProbePlan, ProbeTarget};
use crate::kv_events::KvTargetsView;
use crate::learned::Learned;
use crate::lmcache::OccupancyTargetsView;
use crate::metrics::{Metrics, RouteMetrics};
use crate::tokenization::RouteTokens;
use crate::tracker::{
    BreakerPolicy, ParkingPolicy, SaturationPolicy, TargetId, TargetStats, TrackerView,
};
use addressed::AddressedRoutes;

/// How long an idle upstream connection stays in the pool. Below the 5 s
/// keep-alive of uvicorn (vLLM, SGLang), so the engine never closes a
/// connection the gateway is about to reuse.
pub const UPSTREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(4);

/// Settings read on the request path and by the health checker.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub require_api_key: bool,
    pub max_retries: u32,
    pub breaker: BreakerPolicy,
    pub parking: ParkingPolicy,
    pub health: HealthPolicy,
    pub saturation: SaturationPolicy,
    pub flow_control: FlowControl,
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
            saturation: SaturationPolicy::from(&config.saturation),
            flow_control: config.flow_control,
        }
    }
}

/// A provider group: its members and the one balancer they share.
pub struct Group {
    pub slug: String,
    pub strategy: StrategyKind,
    pub balancer: Arc<dyn LoadBalancer>,
    pub members: Vec<GroupMember>,
    /// Each member's counters, the ones its balancer reads: a member's
    /// declared `(provider, model)`, a passthrough member's engine
    /// (`(provider, "*")`, whatever model a request names through it).
    pub member_stats: Vec<Arc<TargetStats>>,
    /// Shared by every route built for the group (label `<slug>/*`).
    pub metrics: RouteMetrics,
    /// The model directory its routes tokenize requests with.
    pub tokenizer: Option<RouteTokens>,
    /// The endpoints its routes' requests may use.
    pub endpoints: crate::openai::EndpointSet,
    /// Where its routes' requests wait under flow control.
    pub queue: Arc<RouteQueue>,
}

/// A provider's engine as pinned addresses see it.
struct Engine {
    /// `(provider, "*")`, shared with passthrough group members.
    stats: Arc<TargetStats>,
    /// Shared by every pinned route of the provider (label `<slug>/*`).
    metrics: RouteMetrics,
    queue: Arc<RouteQueue>,
}

/// What a request's `model` names, found without building anything.
pub struct Address<'a> {
    /// The name as the request gave it.
    pub name: &'a str,
    pub kind: AddressKind<'a>,
}

pub enum AddressKind<'a> {
    /// A `[[routes]]` entry.
    Route(&'a Arc<Route>),
    /// A group or pinned provider address: no configured route.
    Addressed(Addressed<'a>),
}

pub enum Addressed<'a> {
    /// `<group-slug>/<model>`.
    Group { group: &'a Group, model: &'a str },
    /// `<provider-slug>/<model>`.
    Pinned {
        provider: &'a Arc<Provider>,
        model: &'a str,
    },
}

/// Why a caller may not use an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The key's `models` do not list it.
    Model,
    /// The key's `providers` exclude every provider behind it.
    Provider,
}

impl Address<'_> {
    /// Whether `caller` may use this address: its `models` list the name
    /// (or, for a group address, the group's slug, which allows every model
    /// through the group; a pinned provider address needs its own name or a
    /// key that allows every model), and its `providers` allow at least one
    /// provider behind it. Checked before any route is built for it.
    pub fn admits(&self, caller: &Caller) -> Result<(), Refusal> {
        let listed = caller.may_use_model(self.name)
            || matches!(&self.kind, AddressKind::Addressed(Addressed::Group { group, .. }) if caller.may_use_model(&group.slug));
        if !listed {
            return Err(Refusal::Model);
        }
        let any_provider = match &self.kind {
            AddressKind::Route(route) => route
                .targets
                .iter()
                .any(|t| caller.may_use_provider(&t.id.provider)),
            AddressKind::Addressed(Addressed::Group { group, .. }) => group
                .members
                .iter()
                .any(|m| caller.may_use_provider(&m.provider)),
            AddressKind::Addressed(Addressed::Pinned { provider, .. }) => {
                caller.may_use_provider(&provider.slug)
            }
        };
        if any_provider {
            Ok(())
        } else {
            Err(Refusal::Provider)
        }
    }
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
    /// What the health checker probes (`ProbePlan`).
    probes: Arc<[ProbeTarget]>,
    groups: HashMap<String, Group>,
    /// Each provider's engine, which pinned addresses use.
    engines: HashMap<String, Engine>,
    /// The counters of every configured identity (route targets, declared
    /// group members): a pinned address naming one shares its counters.
    configured: HashMap<TargetId, Arc<TargetStats>>,
    /// Routes kept for group and pinned addresses (`addressed.rs`).
    addressed: AddressedRoutes,
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
    #[error("{source_file}: {at}.tokenizer: {error}")]
    Tokenizer {
        source_file: String,
        at: String,
        error: Box<rolter_tokenize::LoadError>,
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
        // A control node routes nothing: its snapshot leaves the model
        // directories to its gateways (see config/validate/tokenizer.rs).
        let routes_here = config.server.role != crate::config::Role::Control;
        let tokens = |tokenizer: &Option<crate::config::RouteTokenizer>, at: String| {
            tokenizer
                .as_ref()
                .filter(|_| routes_here)
                .map(|t| RouteTokens::load(&t.dir, t.budget_bytes))
                .transpose()
                .map_err(|error| BuildError::Tokenizer {
                    source_file: config.source.clone(),
                    at,
                    error: Box::new(error),
                })
        };
        for (i, route) in config.routes.iter().enumerate() {
            let tokenizer = tokens(&route.tokenizer, format!("routes[{i}]"))?;
            let pool = |targets: &[crate::config::RouteTarget],
                        strategy: StrategyKind,
                        label: &str,
                        seed: u64| {
                configured_pool(
                    (targets, strategy, route.cache_guard, seed),
                    label,
                    (&config, learned, metrics, &providers),
                )
            };
            let prefill = route.disaggregation.as_ref().map(|d| {
                let label = format!("{}{}", route.model, PREFILL_LABEL_SUFFIX);
                let (balancer, targets) =
                    pool(&d.prefill, d.prefill_strategy, &label, seeds.next());
                PrefillPool {
                    protocol: d.protocol,
                    min_prefill_tokens: d.min_prefill_tokens,
                    counts: metrics.disaggregation(&route.model),
                    route: Arc::new(Route {
                        model: route.model.clone(),
                        kind: RouteKind::Configured,
                        strategy: d.prefill_strategy,
                        balancer,
                        metrics: metrics.route(&label, d.prefill_strategy.as_str()),
                        targets,
                        adapter: None,
                        kept: false,
                        tokenizer: None,
                        endpoints: route.endpoints,
                        queue: learned.flow.queue(&label),
                        prefill: None,
                    }),
                }
            });
            let (balancer, targets) =
                pool(&route.targets, route.strategy, &route.model, seeds.next());
            let route = Arc::new(Route {
                model: route.model.clone(),
                kind: RouteKind::Configured,
                strategy: route.strategy,
                balancer,
                metrics: metrics.route(&route.model, route.strategy.as_str()),
                targets,
                adapter: None,
                kept: false,
                tokenizer,
                endpoints: route.endpoints,
                queue: learned.flow.queue(&route.model),
                prefill,
            });
            routes.insert(route.model.clone(), Arc::clone(&route));
            route_order.push(route);
        }

        let mut groups = HashMap::new();
        for (i, group) in config.provider_groups.iter().enumerate() {
            let tokenizer = tokens(&group.tokenizer, format!("provider_groups[{i}]"))?;
            // Costs and learned state of a group's balancer follow each
            // member's declared upstream model; a passthrough member's model
            // is unknown until a request names it, so it is cost-neutral.
            let ids: Vec<String> = group
                .members
                .iter()
                .map(|m| member_id(m).to_string())
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
                .map(|m| tracker.stats(&member_id(m)))
                .collect();
            let views = TargetViews::new(
                group
                    .members
                    .iter()
                    .zip(&member_stats)
                    .map(|(m, stats)| (m.provider.as_str(), m.model.as_deref(), stats)),
                &config,
                learned,
            );
            let balancer = build_balancer(
                group.strategy,
                &specs,
                views,
                (seeds.next(), group.cache_guard),
                &config,
            );
            groups.insert(
                group.slug.clone(),
                Group {
                    slug: group.slug.clone(),
                    strategy: group.strategy,
                    balancer: balancer.into(),
                    members: group.members.clone(),
                    member_stats,
                    metrics: metrics.route(&format!("{}/*", group.slug), group.strategy.as_str()),
                    tokenizer,
                    endpoints: group.endpoints,
                    queue: learned.flow.queue(&format!("{}/*", group.slug)),
                },
            );
        }
        let configured: HashMap<TargetId, Arc<TargetStats>> = configured_targets(&config)
            .into_iter()
            .map(|id| {
                let stats = tracker.stats(&id);
                (id, stats)
            })
            .collect();
        let engines: HashMap<String, Engine> = config
            .providers
            .iter()
            .map(|p| {
                let engine = Engine {
                    stats: tracker.stats(&TargetId::engine(p.slug.clone())),
                    metrics: metrics
                        .route(&format!("{}/*", p.slug), StrategyKind::RoundRobin.as_str()),
                    queue: learned.flow.queue(&format!("{}/*", p.slug)),
                };
                (p.slug.clone(), engine)
            })
            .collect();

        // Last, when nothing can fail any more: a rejected reload keeps
        // every key's counters and every target's.
        let api_keys = ApiKeys::new(&config.api_keys, &learned.rate_limits);
        learned
            .rate_limits
            .retain(|name| config.api_keys.iter().any(|k| k.name == name));
        tracker.retain(configured.keys().cloned().collect());
        Ok(Snapshot {
            version,
            limits: Limits::from_config(&config),
            api_keys,
            admin_tokens: AdminTokens::new(&config.admin_tokens),
            routes,
            route_order,
            probes: providers.values().map(|p| p.probe_target()).collect(),
            providers,
            groups,
            engines,
            configured,
            addressed: AddressedRoutes::default(),
            metrics: Arc::clone(metrics),
            config,
        })
    }

    /// What `model` names: a configured route, a group address or a pinned
    /// provider address; `None` when nothing is configured under it.
    /// Builds nothing.
    pub fn address<'a>(&'a self, model: &'a str) -> Option<Address<'a>> {
        if let Some(route) = self.routes.get(model) {
            return Some(Address {
                name: model,
                kind: AddressKind::Route(route),
            });
        }
        let (slug, upstream) = model.split_once('/')?;
        if upstream.is_empty() {
            return None;
        }
        let addressed = match (self.groups.get(slug), self.providers.get(slug)) {
            (Some(group), _) => Addressed::Group {
                group,
                model: upstream,
            },
            (None, Some(provider)) => Addressed::Pinned {
                provider,
                model: upstream,
            },
            (None, None) => return None,
        };
        Some(Address {
            name: model,
            kind: AddressKind::Addressed(addressed),
        })
    }

    /// The route of `address`: the configured one, a kept addressed route,
    /// or one built for this request alone (see [`Snapshot::keep`]).
    pub fn route(&self, address: &Address<'_>, now_ms: u64) -> Arc<Route> {
        match &address.kind {
            AddressKind::Route(route) => Arc::clone(route),
            AddressKind::Addressed(addressed) => self
                .addressed
                .get(address.name, now_ms)
                .unwrap_or_else(|| Arc::new(self.addressed_route(address.name, addressed, false))),
        }
    }

    /// Keeps the route of an address that just served a request, so later
    /// requests share it (and get its own metric labels while those last).
    /// A no-op for configured routes and routes kept already.
    pub fn keep(&self, route: &Route, now_ms: u64) {
        if route.kind == RouteKind::Configured
            || route.kept
            || self.addressed.contains(&route.model)
        {
            return;
        }
        let Some(Address {
            name,
            kind: AddressKind::Addressed(addressed),
        }) = self.address(&route.model)
        else {
            return;
        };
        let kept = Arc::new(self.addressed_route(name, &addressed, true));
        let evicted = self.addressed.insert(kept, now_ms);
        if evicted > 0 {
            self.metrics.record_addressed_evictions(evicted);
        }
    }

    /// How many addressed routes are kept.
    pub fn addressed_routes(&self) -> usize {
        self.addressed.len()
    }

    /// A route for `addressed`; `kept` routes get their own metric labels
    /// (while those last), the others share `<provider>/_other`.
    fn addressed_route(&self, name: &str, addressed: &Addressed<'_>, kept: bool) -> Route {
        match addressed {
            Addressed::Group { group, model } => self.group_route(group, name, model, kept),
            Addressed::Pinned { provider, model } => self.pinned_route(provider, name, model, kept),
        }
    }

    fn group_route(&self, group: &Group, address: &str, requested: &str, kept: bool) -> Route {
        let label = &group.metrics.label;
        let targets = group
            .members
            .iter()
            .zip(&group.member_stats)
            .map(|(m, stats)| {
                let model = m.model.as_deref().unwrap_or(requested);
                let metric_label = self
                    .metrics
                    .addressed_target_label(&m.provider, model, kept);
                Target::new(
                    Arc::clone(&self.providers[&m.provider]),
                    model,
                    m.weight,
                    &self.config.timeouts,
                    Arc::clone(stats),
                    self.metrics.target(label, &metric_label),
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
            metrics: group.metrics.clone(),
            // The requested model names an adapter over shared base weights
            // only where members forward it as asked.
            adapter: passthrough.then(|| requested.to_string()),
            kept,
            tokenizer: group.tokenizer.clone(),
            endpoints: group.endpoints,
            queue: Arc::clone(&group.queue),
            prefill: None,
        }
    }

    fn pinned_route(
        &self,
        provider: &Arc<Provider>,
        address: &str,
        model: &str,
        kept: bool,
    ) -> Route {
        let engine = &self.engines[&provider.slug];
        // The configured target of that provider and model, if there is
        // one (a pinned request is load on it too), else the engine.
        let stats = self
            .configured
            .get(&TargetId::new(provider.slug.clone(), model))
            .unwrap_or(&engine.stats);
        let metric_label = self
            .metrics
            .addressed_target_label(&provider.slug, model, kept);
        Route {
            model: address.to_string(),
            kind: RouteKind::Pinned {
                slug: provider.slug.clone(),
            },
            strategy: StrategyKind::RoundRobin,
            balancer: Arc::new(RoundRobin::new(1)),
            targets: vec![Target::new(
                Arc::clone(provider),
                model,
                1,
                &self.config.timeouts,
                Arc::clone(stats),
                self.metrics.target(&engine.metrics.label, &metric_label),
            )],
            metrics: engine.metrics.clone(),
            adapter: None,
            kept,
            tokenizer: None,
            endpoints: crate::openai::EndpointSet::ALL,
            queue: Arc::clone(&engine.queue),
            prefill: None,
        }
    }

    /// The node's name in the fleet: its `[control_plane] node_id`, or
    /// "standalone".
    pub fn node_id(&self) -> String {
        self.config
            .control_plane
            .as_ref()
            .map_or_else(|| "standalone".to_string(), |c| c.node_id.clone())
    }

    /// Routes in configuration order.
    pub fn routes(&self) -> &[Arc<Route>] {
        &self.route_order
    }

    /// What the health checker probes under this snapshot.
    pub fn probe_plan(&self) -> ProbePlan {
        ProbePlan {
            version: self.version,
            policy: self.limits.health,
            targets: Arc::clone(&self.probes),
        }
    }

    /// The provider with `slug`.
    pub fn provider(&self, slug: &str) -> Option<&Arc<Provider>> {
        self.providers.get(slug)
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

/// The identity a group member's counters are kept under: its declared
/// target, or for a passthrough member its provider's engine.
fn member_id(member: &GroupMember) -> TargetId {
    match &member.model {
        Some(model) => TargetId::new(member.provider.clone(), model.clone()),
        None => TargetId::engine(member.provider.clone()),
    }
}

/// Every identity `config` names: route targets, group members and each
/// provider's engine. The tracker drops the others once they drained.
fn configured_targets(config: &Config) -> HashSet<TargetId> {
    let routes = config
        .routes
        .iter()
        .flat_map(|r| {
            let prefill = r.disaggregation.iter().flat_map(|d| &d.prefill);
            r.targets.iter().chain(prefill)
        })
        .map(|t| TargetId::new(t.provider.clone(), t.model.clone()));
    let members = config
        .provider_groups
        .iter()
        .flat_map(|g| &g.members)
        .map(member_id);
    let engines = config
        .providers
        .iter()
        .map(|p| TargetId::engine(p.slug.clone()));
    routes.chain(members).chain(engines).collect()
}

/// What a balancer over some targets reads: their counters, KV indexes and
/// cache occupancy (absent where a provider has no such source).
struct TargetViews {
    stats: Vec<Arc<crate::tracker::TargetStats>>,
    kv: Vec<Option<Arc<crate::kv_events::KvIndex>>>,
    /// The model each target sends; `None` for passthrough members.
    models: Vec<Option<String>>,
    occupancy: Vec<Option<Arc<crate::lmcache::Occupancy>>>,
}

impl TargetViews {
    fn new<'a>(
        targets: impl Iterator<
            Item = (
                &'a str,
                Option<&'a str>,
                &'a Arc<crate::tracker::TargetStats>,
            ),
        >,
        config: &Config,
        learned: &Learned,
    ) -> Self {
        let mut views = TargetViews {
            stats: Vec::new(),
            kv: Vec::new(),
            models: Vec::new(),
            occupancy: Vec::new(),
        };
        for (slug, model, stats) in targets {
            views.models.push(model.map(str::to_owned));
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

/// The targets of one pool of a configured route (its own, or its
/// disaggregation's prefill pool) and the balancer over them.
fn configured_pool(
    (targets, strategy, cache_guard, seed): (
        &[crate::config::RouteTarget],
        StrategyKind,
        crate::config::CacheGuard,
        u64,
    ),
    label: &str,
    (config, learned, metrics, providers): (
        &Config,
        &Learned,
        &Arc<Metrics>,
        &HashMap<String, Arc<Provider>>,
    ),
) -> (Arc<dyn LoadBalancer>, Vec<Target>) {
    let targets: Vec<Target> = targets
        .iter()
        .map(|t| {
            let id = TargetId::new(t.provider.clone(), t.model.clone());
            Target::new(
                Arc::clone(&providers[&t.provider]),
                &t.model,
                t.weight,
                &config.timeouts,
                learned.tracker.stats(&id),
                metrics.target(label, &id.to_string()),
            )
        })
        .collect();
    let specs: Vec<TargetSpec<'_>> = targets.iter().map(|t| t.spec(config)).collect();
    let views = TargetViews::new(
        targets
            .iter()
            .map(|t| (t.id.provider.as_str(), Some(t.id.model.as_str()), &t.stats)),
        config,
        learned,
    );
    let balancer = build_balancer(strategy, &specs, views, (seed, cache_guard), config).into();
    (balancer, targets)
}

fn build_balancer(
    strategy: StrategyKind,
    specs: &[TargetSpec<'_>],
    views: TargetViews,
    (seed, cache_guard): (u64, crate::config::CacheGuard),
    config: &Config,
) -> Box<dyn LoadBalancer> {
    let mut context = BuildContext::new(specs, seed);
    context.cache_guard = cache_guard.balancer();
    context.stats = Arc::new(TrackerView::new(views.stats));
    context.kv_blocks = Arc::new(KvTargetsView::new(views.kv, views.models));
    context.occupancy = Arc::new(OccupancyTargetsView::new(views.occupancy));
    context.adaptive = config.adaptive_routing;
    rolter_balancer::build(strategy, &context)
}
