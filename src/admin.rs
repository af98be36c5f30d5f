//! The admin surface, on its own listener: health, readiness, metrics
//! (`scrape.rs`), reload and balancer introspection here; the control API
//! and the fleet's `/internal/*` endpoints (`control.rs`, `api/`); the
//! dashboard's static files (`ui.rs`).
//!
//! `/healthz`, `/readyz` and `/metrics` are open (probes and scrapers carry no
//! secrets); everything under `/admin/` needs an admin token as
//! `Authorization: Bearer`, with the role each endpoint names. `/ui/` is the
//! dashboard's static files on standalone and control nodes; they hold no
//! data, the app signs in against the APIs.

pub mod api;
mod control;
pub mod openapi;
mod scrape;
pub mod ui;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_trait::async_trait;
use http::{header, Method, Response, StatusCode};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use serde::Serialize;
use utoipa::ToSchema;

use rolter_balancer::{BalancerReport, StrategyKind};

use crate::auth::bearer_token;
use crate::config::AdminRole;
use crate::listening::ProxyListening;
use crate::reload::Reloader;
use crate::state::GatewayState;
use crate::tracker::TargetLoad;
use api::ErrorBody;
use ui::UiFiles;

pub struct AdminApp {
    state: Arc<GatewayState>,
    reloader: Reloader,
    /// The dashboard's build directory, resolved when the service is built.
    ui: UiFiles,
    /// Whether the proxy's listeners accept yet (`/readyz`).
    listening: ProxyListening,
}

impl AdminApp {
    pub fn new(state: Arc<GatewayState>, reloader: Reloader) -> Self {
        Self {
            state,
            reloader,
            ui: UiFiles::from_env(),
            listening: ProxyListening::default(),
        }
    }

    /// Nothing when the caller's token has the role, else the response refusing it.
    fn refusal(&self, session: &ServerSession, needed: AdminRole) -> Option<Response<Vec<u8>>> {
        let snapshot = self.state.snapshot();
        let token = session
            .req_header()
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| bearer_token(v.as_bytes()));
        let Some(token) = token else {
            return Some(error(
                StatusCode::UNAUTHORIZED,
                "admin token required: send `Authorization: Bearer <token>`",
            ));
        };
        match snapshot.admin_tokens.authenticate(token) {
            None => Some(error(StatusCode::UNAUTHORIZED, "invalid admin token")),
            Some((name, role)) if role < needed => Some(error(
                StatusCode::FORBIDDEN,
                &format!(
                    "admin token `{name}` has role {}; this needs {} or above",
                    role.as_str(),
                    needed.as_str()
                ),
            )),
            Some(_) => None,
        }
    }

    async fn reload(&self) -> Response<Vec<u8>> {
        let (status, answer) = match self.reloader.reload().await {
            Ok(reloaded) => (
                StatusCode::OK,
                ReloadAnswer {
                    status: ReloadStatus::Ok,
                    version: reloaded.version,
                    warnings: reloaded.warnings,
                    needs_restart: reloaded.needs_restart,
                    message: None,
                    errors: Vec::new(),
                },
            ),
            Err(errors) => (
                StatusCode::UNPROCESSABLE_ENTITY,
                ReloadAnswer {
                    status: ReloadStatus::Error,
                    version: self.state.snapshot().version,
                    warnings: Vec::new(),
                    needs_restart: Vec::new(),
                    message: Some(
                        "configuration rejected; the running configuration stays".to_owned(),
                    ),
                    errors,
                },
            ),
        };
        json_response(status, &answer)
    }

    /// Each provider's KV index and LMCache signal, for operators asking
    /// why the cache-aware strategies choose what they choose.
    fn engine_telemetry(&self) -> Response<Vec<u8>> {
        let learned = &self.state.learned;
        let answer = EngineTelemetryAnswer {
            kv_indexes: learned.kv.summaries(),
            lmcache: learned
                .occupancy
                .summaries(crate::clock::now_ms())
                .into_iter()
                .collect(),
        };
        json_response(StatusCode::OK, &answer)
    }

    fn routes(&self) -> Response<Vec<u8>> {
        let snapshot = self.state.snapshot();
        let now = crate::clock::now_ms();
        let sources = EngineSources::read(&self.state, &snapshot, now);
        let routes: Vec<RouteView<'_>> = snapshot
            .routes()
            .iter()
            .map(|route| RouteView {
                model: &route.model,
                strategy: route.strategy.as_str(),
                reads_weights: route.strategy.reads_weights(),
                health_panic: route.metrics.health_panic.load(Ordering::Relaxed),
                tokenizer: route.tokenizer.as_ref().map(TokenizerView::of),
                token_sources: token_sources(&route.metrics),
                queued: route.queue.len(),
                report: ReportView::from(route.balancer.report()),
                targets: route
                    .targets
                    .iter()
                    .map(|t| {
                        TargetView::new(
                            &t.provider,
                            &t.id.model,
                            t.weight,
                            (&t.stats, Some(t.metrics.traffic())),
                            &sources,
                            now,
                        )
                    })
                    .collect(),
            })
            .collect();
        let mut groups: Vec<GroupView<'_>> = snapshot
            .groups()
            .map(|group| GroupView {
                slug: &group.slug,
                strategy: group.strategy.as_str(),
                tokenizer: group.tokenizer.as_ref().map(TokenizerView::of),
                token_sources: token_sources(&group.metrics),
                report: ReportView::from(group.balancer.report()),
                members: group
                    .members
                    .iter()
                    .zip(&group.member_stats)
                    .filter_map(|(m, stats)| {
                        let provider = snapshot.provider(&m.provider)?;
                        let model = m.model.as_deref().unwrap_or(crate::tracker::ANY_MODEL);
                        Some(TargetView::new(
                            provider,
                            model,
                            m.weight,
                            (stats, None),
                            &sources,
                            now,
                        ))
                    })
                    .collect(),
            })
            .collect();
        groups.sort_by(|a, b| a.slug.cmp(b.slug));
        let answer = RoutesAnswer {
            version: snapshot.version,
            routes,
            groups,
            addressed_routes: snapshot.addressed_routes(),
        };
        json_response(StatusCode::OK, &answer)
    }
}

/// `POST /admin/reload`: what the reload did.
#[derive(Serialize, ToSchema)]
pub struct ReloadAnswer {
    status: ReloadStatus,
    /// The configuration version served now (the old one when refused).
    version: u64,
    /// Warnings of the new configuration (it was applied regardless).
    warnings: Vec<String>,
    /// Settings that changed but only take effect on restart or upgrade.
    needs_restart: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    /// Why the configuration was refused, one line per problem.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    errors: Vec<String>,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
enum ReloadStatus {
    Ok,
    Error,
}

/// `GET /admin/routes`: the running snapshot's routes and groups, their
/// balancers' reports and every target's live state.
#[derive(Serialize, ToSchema)]
pub struct RoutesAnswer<'a> {
    version: u64,
    routes: Vec<RouteView<'a>>,
    groups: Vec<GroupView<'a>>,
    /// Routes kept for `<group>/<model>` and `<provider>/<model>` addresses.
    addressed_routes: usize,
}

/// `GET /admin/kv-index`: each provider's KV-event index and LMCache signal.
#[derive(Serialize, ToSchema)]
pub struct EngineTelemetryAnswer {
    kv_indexes: Vec<crate::kv_events::KvIndexSummary>,
    /// By provider slug.
    lmcache: std::collections::BTreeMap<String, crate::lmcache::OccupancySummary>,
}

/// `GET /admin/strategies`.
#[derive(Serialize, ToSchema)]
pub struct StrategiesAnswer {
    strategies: Vec<StrategyView>,
}

/// A strategy and whether it reads target weights (the list the
/// dashboard's `usesWeights()` mirrors).
#[derive(Serialize, ToSchema)]
struct StrategyView {
    name: &'static str,
    reads_weights: bool,
}

/// A provider group's balancer and members, as `/admin/routes` lists them.
/// A passthrough member's model is `*`: its counters are its engine's,
/// whatever model requests name through it.
#[derive(Serialize, ToSchema)]
struct GroupView<'a> {
    slug: &'a str,
    strategy: &'static str,
    /// Its `tokenizer`, when it has one.
    tokenizer: Option<TokenizerView>,
    /// Where its requests' routing token ids came from.
    token_sources: Vec<TokenSourceView>,
    members: Vec<TargetView<'a>>,
    report: ReportView,
}

#[derive(Serialize, ToSchema)]
struct RouteView<'a> {
    model: &'a str,
    strategy: &'static str,
    reads_weights: bool,
    /// Active health checks mark every target down and requests are routed
    /// across them anyway (`proxy/select.rs`).
    health_panic: bool,
    /// Its `tokenizer`, when it has one.
    tokenizer: Option<TokenizerView>,
    /// Where its requests' routing token ids came from.
    token_sources: Vec<TokenSourceView>,
    /// Requests waiting in flow control for one of its targets.
    queued: u64,
    targets: Vec<TargetView<'a>>,
    report: ReportView,
}

/// A route's model directory and its prefix cache.
#[derive(Serialize, ToSchema)]
struct TokenizerView {
    /// The directory, as configured.
    dir: String,
    /// Bytes of rendered text tokenized per request.
    budget_bytes: usize,
    has_chat_template: bool,
    /// Tokenized conversations whose beginning was found in the prefix
    /// cache, and those tokenized whole (shared by every route naming the
    /// same directory).
    prefix_cache_hits: u64,
    prefix_cache_misses: u64,
    /// `hits / (hits + misses)`; `null` before the first lookup.
    prefix_cache_hit_rate: Option<f64>,
}

impl TokenizerView {
    fn of(tokens: &crate::tokenization::RouteTokens) -> Self {
        let (hits, misses) = tokens.model.prefix_cache_counts();
        TokenizerView {
            dir: tokens.dir.display().to_string(),
            budget_bytes: tokens.budget_bytes,
            has_chat_template: tokens.model.has_chat_template(),
            prefix_cache_hits: hits,
            prefix_cache_misses: misses,
            prefix_cache_hit_rate: (hits + misses > 0)
                .then(|| hits as f64 / (hits + misses) as f64),
        }
    }
}

/// Requests routed with token ids from one source (and why without).
#[derive(Serialize, ToSchema)]
struct TokenSourceView {
    /// `gateway`, `caller` or `none`.
    source: &'static str,
    /// Why not from the gateway's tokenizer (`no_tokenizer`,
    /// `template_error`, ...), or that only its budget was tokenized
    /// (`over_budget`); empty otherwise.
    reason: &'static str,
    requests: u64,
}

fn token_sources(metrics: &crate::metrics::RouteMetrics) -> Vec<TokenSourceView> {
    crate::tokenization::TokenSource::ALL
        .iter()
        .zip(metrics.token_sources.iter())
        .filter(|(_, counter)| counter.get() > 0)
        .map(|(source, counter)| {
            let (source, reason) = source.labels();
            TokenSourceView {
                source,
                reason,
                requests: counter.get(),
            }
        })
        .collect()
}

/// A balancer's report as JSON: components and signals as objects.
#[derive(Serialize, ToSchema)]
struct ReportView {
    decisions: Option<DecisionsView>,
    /// cache_aware's picks since its balancer was built: warm prompts kept
    /// on the target holding their prefix (`affinity`), moved by the load
    /// guard (`spread`), cold prompts sent by load (`cold`).
    cache_decisions: Option<CacheDecisionsView>,
    targets: Vec<TargetReportView>,
}

#[derive(Serialize, ToSchema)]
struct CacheDecisionsView {
    affinity: u64,
    spread: u64,
    cold: u64,
}

#[derive(Serialize, ToSchema)]
struct DecisionsView {
    engaged: bool,
    blend: u64,
    fallback: u64,
    exploration: u64,
}

/// One target of a balancer's report; fields a strategy does not track
/// are `null`.
#[derive(Serialize, ToSchema)]
struct TargetReportView {
    /// The blended score the strategy last ranked this target by.
    score: Option<f64>,
    /// Named components of that score ("latency", "cost", "load").
    components: std::collections::BTreeMap<&'static str, f64>,
    /// The raw signals behind them ("latency_ms", "price", "in_flight").
    signals: std::collections::BTreeMap<&'static str, f64>,
    picks: u64,
    /// The clock reading (ms since start) of the last pick.
    last_pick_ms: Option<u64>,
    /// Size of learned per-target state (prefix-tree characters, adapters).
    learned_size: Option<u64>,
    /// Evictions from that state since the balancer was built.
    evictions: Option<u64>,
}

impl From<BalancerReport> for ReportView {
    fn from(report: BalancerReport) -> Self {
        ReportView {
            decisions: report.decisions.map(|d| DecisionsView {
                engaged: d.engaged,
                blend: d.blend,
                fallback: d.fallback,
                exploration: d.exploration,
            }),
            cache_decisions: report.cache_decisions.map(|d| CacheDecisionsView {
                affinity: d.affinity,
                spread: d.spread,
                cold: d.cold,
            }),
            targets: report
                .targets
                .into_iter()
                .map(|t| TargetReportView {
                    score: t.score,
                    components: t.components.into_iter().collect(),
                    signals: t.signals.into_iter().collect(),
                    picks: t.picks,
                    last_pick_ms: t.last_pick_ms,
                    learned_size: t.learned_size,
                    evictions: t.evictions,
                })
                .collect(),
        }
    }
}

#[derive(Serialize, ToSchema)]
struct TargetView<'a> {
    provider: &'a str,
    model: &'a str,
    weight: u32,
    base_url: &'a str,
    #[serde(flatten)]
    load: TargetLoad,
    /// The provider's active health (true until probes say otherwise).
    healthy: bool,
    /// The status (404, 405) the health probe's path answered: the probe is
    /// misconfigured, and the engine is not judged by it.
    probe_misconfigured: Option<u16>,
    /// Milliseconds until the target is unparked; `None` when not parked.
    parked_until_ms: Option<u64>,
    /// The provider's KV-event index, when it has `kv_events`.
    kv_index: Option<KvIndexView>,
    /// The provider's LMCache signal, when it has `lmcache`.
    lmcache: Option<LmcacheView>,
    /// The load strategies read: the engine's reported running + waiting
    /// plus what this node sent since, never below `in_flight`
    /// (`tracker/engine.rs`); `in_flight` alone without a fresh reading.
    combined_load: u64,
    /// The engine's last reading for this target, and its age; `None`
    /// when its metrics are not read or never answered.
    engine_reading: Option<crate::tracker::ReadingSummary>,
    /// How the provider's `engine_metrics` polls go; `None` when off.
    engine_metrics: Option<crate::tracker::PollSummary>,
    /// The provider's `max_concurrency`, when it has one.
    max_concurrency: Option<u64>,
    /// Why it takes no new request now; `None` when it takes them.
    saturated: Option<crate::tracker::SaturatedBy>,
    /// This route's own traffic to the target (the counters above are the
    /// target's over every route that lists it); `None` for a group's
    /// members, whose routes are built per address.
    route_traffic: Option<crate::metrics::RouteTraffic>,
}

impl<'a> TargetView<'a> {
    fn new(
        provider: &'a crate::snapshot::Provider,
        model: &'a str,
        weight: u32,
        (stats, traffic): (
            &crate::tracker::TargetStats,
            Option<crate::metrics::RouteTraffic>,
        ),
        sources: &EngineSources,
        now: u64,
    ) -> Self {
        TargetView {
            provider: &provider.slug,
            model,
            weight,
            base_url: &provider.base_url,
            load: stats.load(),
            healthy: provider.health.is_healthy(),
            probe_misconfigured: provider.health.probe_misconfigured(),
            parked_until_ms: stats
                .parking
                .parked_until(now)
                .map(|until| until.saturating_sub(now)),
            kv_index: sources.kv.get(provider.slug.as_str()).cloned(),
            lmcache: sources.lmcache.get(provider.slug.as_str()).cloned(),
            combined_load: stats.combined_load(now),
            engine_reading: stats.reading(now),
            engine_metrics: stats.engine().poll_summary(now),
            max_concurrency: provider.max_concurrency,
            saturated: stats.saturation(now, &sources.saturation, provider.max_concurrency),
            route_traffic: traffic,
        }
    }
}

/// How fresh a provider's KV-event index is.
#[derive(Serialize, Clone, ToSchema)]
struct KvIndexView {
    /// A subscriber feeds it on this node.
    configured: bool,
    /// At least one rank answers: `precise_cache_aware` scores this provider.
    usable: bool,
    blocks_resident: u64,
    /// Since the newest message over all ranks; `None` before the first.
    last_message_age_ms: Option<u64>,
}

/// How fresh a provider's LMCache signal is.
#[derive(Serialize, Clone, ToSchema)]
struct LmcacheView {
    /// Read recently enough to count: `lmcache_aware` scores this provider.
    fresh: bool,
    occupancy: Option<f64>,
    cache_available: bool,
    age_ms: Option<u64>,
}

/// The KV-index and LMCache readings of the providers that have those
/// sources, by slug, read once per `/admin/routes` answer.
struct EngineSources {
    kv: std::collections::HashMap<String, KvIndexView>,
    lmcache: std::collections::HashMap<String, LmcacheView>,
    saturation: crate::tracker::SaturationPolicy,
}

impl EngineSources {
    fn read(state: &GatewayState, snapshot: &crate::snapshot::Snapshot, now: u64) -> Self {
        let providers = &snapshot.config.providers;
        let kv = providers
            .iter()
            .filter(|p| p.kv_events.is_some())
            .map(|p| {
                let view = match state.learned.kv.get(&p.slug) {
                    Some(index) => {
                        let summary = index.summary();
                        KvIndexView {
                            configured: summary.configured,
                            usable: summary.usable,
                            blocks_resident: summary.blocks_resident,
                            last_message_age_ms: summary
                                .ranks
                                .iter()
                                .filter_map(|r| r.last_message_age_ms)
                                .min(),
                        }
                    }
                    None => KvIndexView {
                        configured: false,
                        usable: false,
                        blocks_resident: 0,
                        last_message_age_ms: None,
                    },
                };
                (p.slug.clone(), view)
            })
            .collect();
        let mut readings: std::collections::HashMap<_, _> =
            state.learned.occupancy.summaries(now).into_iter().collect();
        let lmcache = providers
            .iter()
            .filter(|p| p.lmcache.is_some())
            .map(|p| {
                let view = match readings.remove(&p.slug) {
                    Some(s) => LmcacheView {
                        fresh: s.fresh,
                        occupancy: s.occupancy,
                        cache_available: s.cache_available,
                        age_ms: s.age_ms,
                    },
                    None => LmcacheView {
                        fresh: false,
                        occupancy: None,
                        cache_available: false,
                        age_ms: None,
                    },
                };
                (p.slug.clone(), view)
            })
            .collect();
        EngineSources {
            kv,
            lmcache,
            saturation: snapshot.limits.saturation,
        }
    }
}

#[async_trait]
impl ServeHttp for AdminApp {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        if let Some((status, body)) =
            control::serve(&self.state, self.reloader.control(), session).await
        {
            return respond(status, "application/json", body);
        }
        let method = session.req_header().method.clone();
        let path = session.req_header().uri.path().to_string();
        match (&method, path.as_str()) {
            (&Method::GET, "/healthz") => text(StatusCode::OK, "ok\n"),
            (&Method::GET, "/readyz") => {
                if self.state.is_ready() {
                    if self.listening.check(&self.state).await {
                        text(StatusCode::OK, "ready\n")
                    } else {
                        text(
                            StatusCode::SERVICE_UNAVAILABLE,
                            "the proxy listeners are not accepting yet\n",
                        )
                    }
                } else if self.state.is_shutting_down() {
                    text(StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
                } else {
                    text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "waiting for the fleet configuration\n",
                    )
                }
            }
            (&Method::GET, "/openapi.json") => respond(
                StatusCode::OK,
                "application/json",
                openapi::document().into_bytes(),
            ),
            (&Method::GET, "/metrics") => respond(
                StatusCode::OK,
                "text/plain; version=0.0.4",
                scrape::scrape(
                    &self.state.metrics,
                    &self.state.learned,
                    &self.state.snapshot(),
                )
                .into_bytes(),
            ),
            (&Method::POST, "/admin/reload") => match self.refusal(session, AdminRole::Admin) {
                None => self.reload().await,
                Some(refusal) => refusal,
            },
            (&Method::GET, "/admin/routes") => match self.refusal(session, AdminRole::Viewer) {
                None => self.routes(),
                Some(refusal) => refusal,
            },
            (&Method::GET, "/admin/strategies") => match self.refusal(session, AdminRole::Viewer) {
                None => strategies(),
                Some(refusal) => refusal,
            },
            (&Method::GET, "/admin/kv-index") => match self.refusal(session, AdminRole::Viewer) {
                None => self.engine_telemetry(),
                Some(refusal) => refusal,
            },
            (_, path) if UiFiles::owns(path) => self.dashboard(&method, path).await,
            (
                _,
                "/healthz" | "/readyz" | "/metrics" | "/openapi.json" | "/admin/routes"
                | "/admin/reload" | "/admin/strategies" | "/admin/kv-index",
            ) => error(
                StatusCode::METHOD_NOT_ALLOWED,
                &format!("{method} is not allowed on {path}"),
            ),
            _ => error(
                StatusCode::NOT_FOUND,
                &format!("no admin endpoint at {path}"),
            ),
        }
    }
}

impl AdminApp {
    /// The dashboard under `/ui/`, on the nodes that serve it.
    async fn dashboard(&self, method: &Method, path: &str) -> Response<Vec<u8>> {
        match self.state.snapshot().config.server.role {
            crate::config::Role::Gateway => ui::not_served_here(),
            _ => self.ui.serve(method, path).await,
        }
    }
}

/// Every strategy and whether it reads target weights (the list the
/// dashboard's `usesWeights()` mirrors).
fn strategies() -> Response<Vec<u8>> {
    let answer = StrategiesAnswer {
        strategies: StrategyKind::ALL
            .iter()
            .map(|k| StrategyView {
                name: k.as_str(),
                reads_weights: k.reads_weights(),
            })
            .collect(),
    };
    json_response(StatusCode::OK, &answer)
}

fn respond(status: StatusCode, content_type: &str, body: Vec<u8>) -> Response<Vec<u8>> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CONTENT_LENGTH, body.len())
        .body(body)
        .unwrap_or_default()
}

fn text(status: StatusCode, body: &str) -> Response<Vec<u8>> {
    respond(status, "text/plain", body.as_bytes().to_vec())
}

fn json_response(status: StatusCode, value: &impl Serialize) -> Response<Vec<u8>> {
    respond(
        status,
        "application/json",
        serde_json::to_vec(value).unwrap_or_default(),
    )
}

fn error(status: StatusCode, message: &str) -> Response<Vec<u8>> {
    json_response(status, &ErrorBody::for_status(status, message))
}
