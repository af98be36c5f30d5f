//! The admin surface, on its own listener: health, readiness, metrics
//! (`scrape.rs`), reload and balancer introspection here; the control API
//! and the fleet's `/internal/*` endpoints (`control.rs`, `api/`); the
//! dashboard's static files (`ui.rs`).
//!
//! `/healthz`, `/readyz` and `/metrics` are open (probes and scrapers carry no
//! secrets); everything under `/admin/` needs an admin token as
//! `Authorization: Bearer`, with the role each endpoint names. `/ui/` is the
//! dashboard's static files on every node (read-only on gateways and
//! standalone nodes, whose configuration is managed elsewhere); they hold
//! no data, the app signs in against the APIs.

pub mod api;
mod control;
pub mod history;
pub mod openapi;
mod scrape;
pub mod ui;

use std::sync::Arc;

use async_trait::async_trait;
use http::{header, Method, Response, StatusCode};
use pingora::apps::http_app::ServeHttp;
use pingora::protocols::http::ServerSession;
use serde::Serialize;
use utoipa::ToSchema;

use rolter_balancer::StrategyKind;

use crate::auth::bearer_token;
use crate::config::AdminRole;
use crate::listening::ProxyListening;
use crate::reload::Reloader;
use crate::state::GatewayState;
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
                None => json_response(
                    StatusCode::OK,
                    &crate::live::answer(&self.state, &self.state.snapshot()),
                ),
                Some(refusal) => refusal,
            },
            (&Method::GET, "/admin/history") => match self.refusal(session, AdminRole::Viewer) {
                None => json_response(
                    StatusCode::OK,
                    &crate::history::HistoryAnswer::of(
                        &self.state.history,
                        crate::history::INTERVAL,
                    ),
                ),
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
            (_, path) if UiFiles::owns(path) => self.ui.serve(&method, path).await,
            (
                _,
                "/healthz" | "/readyz" | "/metrics" | "/openapi.json" | "/admin/routes"
                | "/admin/reload" | "/admin/strategies" | "/admin/kv-index" | "/admin/history",
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
