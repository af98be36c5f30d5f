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
mod scrape;
pub mod ui;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use async_trait::async_trait;
use http::{header, Method, Response, StatusCode};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use serde::Serialize;
use serde_json::json;

use rolter_balancer::{BalancerReport, StrategyKind};

use crate::auth::bearer_token;
use crate::config::AdminRole;
use crate::listening::ProxyListening;
use crate::reload::Reloader;
use crate::state::GatewayState;
use crate::tracker::TargetLoad;
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
        match self.reloader.reload().await {
            Ok(reloaded) => json_response(
                StatusCode::OK,
                &json!({
                    "status": "ok",
                    "version": reloaded.version,
                    "warnings": reloaded.warnings,
                    "needs_restart": reloaded.needs_restart,
                }),
            ),
            Err(errors) => json_response(
                StatusCode::UNPROCESSABLE_ENTITY,
                &json!({
                    "status": "error",
                    "version": self.state.snapshot().version,
                    "message": "configuration rejected; the running configuration stays",
                    "errors": errors,
                }),
            ),
        }
    }

    /// Each provider's KV index and LMCache signal, for operators asking
    /// why the cache-aware strategies choose what they choose.
    fn engine_telemetry(&self) -> Response<Vec<u8>> {
        let learned = &self.state.learned;
        let occupancy: serde_json::Map<String, serde_json::Value> = learned
            .occupancy
            .summaries(crate::clock::now_ms())
            .into_iter()
            .map(|(provider, summary)| (provider, json!(summary)))
            .collect();
        json_response(
            StatusCode::OK,
            &json!({ "kv_indexes": learned.kv.summaries(), "lmcache": occupancy }),
        )
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
                report: ReportView::from(route.balancer.report()),
                targets: route
                    .targets
                    .iter()
                    .map(|t| {
                        TargetView::new(&t.provider, &t.id.model, t.weight, &t.stats, &sources, now)
                    })
                    .collect(),
            })
            .collect();
        let mut groups: Vec<GroupView<'_>> = snapshot
            .groups()
            .map(|group| GroupView {
                slug: &group.slug,
                strategy: group.strategy.as_str(),
                report: ReportView::from(group.balancer.report()),
                members: group
                    .members
                    .iter()
                    .zip(&group.member_stats)
                    .filter_map(|(m, stats)| {
                        let provider = snapshot.provider(&m.provider)?;
                        let model = m.model.as_deref().unwrap_or(crate::tracker::ANY_MODEL);
                        Some(TargetView::new(
                            provider, model, m.weight, stats, &sources, now,
                        ))
                    })
                    .collect(),
            })
            .collect();
        groups.sort_by(|a, b| a.slug.cmp(b.slug));
        json_response(
            StatusCode::OK,
            &json!({
                "version": snapshot.version,
                "routes": routes,
                "groups": groups,
                "addressed_routes": snapshot.addressed_routes(),
            }),
        )
    }
}

/// A provider group's balancer and members, as `/admin/routes` lists them.
/// A passthrough member's model is `*`: its counters are its engine's,
/// whatever model requests name through it.
#[derive(Serialize)]
struct GroupView<'a> {
    slug: &'a str,
    strategy: &'static str,
    members: Vec<TargetView<'a>>,
    report: ReportView,
}

#[derive(Serialize)]
struct RouteView<'a> {
    model: &'a str,
    strategy: &'static str,
    reads_weights: bool,
    /// Active health checks mark every target down and requests are routed
    /// across them anyway (`proxy/select.rs`).
    health_panic: bool,
    targets: Vec<TargetView<'a>>,
    report: ReportView,
}

/// A balancer's report as JSON: components and signals as objects.
#[derive(Serialize)]
struct ReportView {
    decisions: Option<DecisionsView>,
    targets: Vec<serde_json::Value>,
}

#[derive(Serialize)]
struct DecisionsView {
    engaged: bool,
    blend: u64,
    fallback: u64,
    exploration: u64,
}

impl From<BalancerReport> for ReportView {
    fn from(report: BalancerReport) -> Self {
        let pairs = |pairs: &[(&'static str, f64)]| {
            pairs
                .iter()
                .map(|(name, value)| ((*name).to_string(), json!(value)))
                .collect::<serde_json::Map<_, _>>()
        };
        ReportView {
            decisions: report.decisions.map(|d| DecisionsView {
                engaged: d.engaged,
                blend: d.blend,
                fallback: d.fallback,
                exploration: d.exploration,
            }),
            targets: report
                .targets
                .iter()
                .map(|t| {
                    json!({
                        "score": t.score,
                        "components": pairs(&t.components),
                        "signals": pairs(&t.signals),
                        "picks": t.picks,
                        "last_pick_ms": t.last_pick_ms,
                        "learned_size": t.learned_size,
                        "evictions": t.evictions,
                    })
                })
                .collect(),
        }
    }
}

#[derive(Serialize)]
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
}

impl<'a> TargetView<'a> {
    fn new(
        provider: &'a crate::snapshot::Provider,
        model: &'a str,
        weight: u32,
        stats: &crate::tracker::TargetStats,
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
        }
    }
}

/// How fresh a provider's KV-event index is.
#[derive(Serialize, Clone)]
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
#[derive(Serialize, Clone)]
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
        EngineSources { kv, lmcache }
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
                "/healthz" | "/readyz" | "/metrics" | "/admin/routes" | "/admin/reload"
                | "/admin/strategies" | "/admin/kv-index",
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
    let list: Vec<_> = StrategyKind::ALL
        .iter()
        .map(|k| json!({ "name": k.as_str(), "reads_weights": k.reads_weights() }))
        .collect();
    json_response(StatusCode::OK, &json!({ "strategies": list }))
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

fn json_response(status: StatusCode, value: &serde_json::Value) -> Response<Vec<u8>> {
    respond(
        status,
        "application/json",
        serde_json::to_vec(value).unwrap_or_default(),
    )
}

fn error(status: StatusCode, message: &str) -> Response<Vec<u8>> {
    json_response(
        status,
        &json!({ "error": { "message": message, "code": status.as_u16() } }),
    )
}
