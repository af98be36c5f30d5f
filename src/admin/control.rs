//! The control plane's HTTP surface on the admin listener.
//!
//! - `/internal/snapshot`, `/internal/adaptive-telemetry`: control nodes only,
//!   for gateways, with the internal token and `x-rolter-node-id`.
//! - `/api/v1/...`: the control API on control nodes. On every node the
//!   adaptive-routing policy, the adaptive-routing telemetry, the cluster
//!   inventory and the providers, routes, provider groups and catalog
//!   answer; a standalone or gateway node answers them from the running
//!   process, read-only (a policy PUT or a row write is refused: the
//!   configuration is managed in rolter.toml, or by the control node).
//! - `GET /api/v1/session`, on every node: who the admin token is and what
//!   this node lets it do, for the dashboard.
//! - `GET /api/v1/fleet/gateways`, `GET /api/v1/fleet/history`: each
//!   gateway's newest live state and recent traffic on a control node; none
//!   elsewhere (a node's own are `/admin/routes` and `/admin/history`).

use std::sync::Arc;

use http::{header, Method, StatusCode};
use pingora::protocols::http::ServerSession;
use serde::Serialize;
use subtle::ConstantTimeEq;
use utoipa::ToSchema;

use super::api::policy::PolicyAnswer;
use super::api::{
    parse_body, ApiContext, ApiRequest, ApiResponse, Caller, ErrorBody, FileManaged, API_PREFIX,
};
use crate::auth::bearer_token;
use crate::config::{AdminRole, Role};
use crate::control::node::ControlNode;
use crate::control::store::{ClusterAnswer, ClusterNode, NodeReport};
use crate::fleet::state::{FleetHistoryAnswer, GatewaysAnswer};
use crate::fleet::telemetry::{
    self, NodeRanking, PolicyView, RouteTelemetry, TelemetryAnswer, TelemetryPush,
    ADMIN_ADDRESS_HEADER, NODE_ID_HEADER,
};
use crate::state::GatewayState;

/// The most of a request body the control API reads.
const MAX_BODY: usize = 4 * 1024 * 1024;

/// Answers `path` if it is the control plane's; `None` otherwise.
pub async fn serve(
    state: &Arc<GatewayState>,
    control: Option<&ControlNode>,
    session: &mut ServerSession,
) -> Option<(StatusCode, Vec<u8>)> {
    let path = session.req_header().uri.path().to_string();
    let method = session.req_header().method.clone();
    if let Some(internal) = path.strip_prefix("/internal/") {
        return Some(match control {
            Some(control) => internal_call(state, control, session, &method, internal).await,
            None => error(
                StatusCode::NOT_FOUND,
                "internal endpoints are served by control nodes",
            ),
        });
    }
    if !path.starts_with(API_PREFIX) {
        return None;
    }
    let caller = caller(state, session);
    let body = match read_body(session).await {
        Ok(body) => body,
        Err(e) => return Some(error(StatusCode::BAD_REQUEST, &e)),
    };
    let query = session.req_header().uri.query().map(str::to_string);
    let resource = &path[API_PREFIX.len()..];
    let needed = match resource {
        "session" => Some(AdminRole::Viewer),
        "adaptive-routing-policy" if control.is_none() => Some(AdminRole::Superadmin),
        "adaptive-routing-telemetry" => Some(AdminRole::Superadmin),
        "cluster/nodes" | "fleet/gateways" | "fleet/history" => Some(AdminRole::Viewer),
        // The control API checks roles itself; elsewhere there is nothing else.
        _ => None,
    };
    if let Some(refusal) = needed.and_then(|role| needs(caller.as_ref(), role)) {
        return Some(refusal);
    }
    let response = match (resource, control) {
        ("session", _) if method != Method::GET => method_not_allowed(),
        ("session", _) => match caller.as_ref() {
            Some(caller) => ok(session_view(state, control.is_some(), caller)),
            // The role check above refused every request without one.
            None => error(StatusCode::UNAUTHORIZED, "an admin token is required"),
        },
        ("adaptive-routing-telemetry", _) if method != Method::GET => method_not_allowed(),
        ("adaptive-routing-telemetry", Some(control)) => match control.telemetry().await {
            Ok(body) => ok(body),
            Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e),
        },
        ("adaptive-routing-telemetry", None) => ok(local_telemetry(state)),
        ("cluster/nodes", _) if method != Method::GET => method_not_allowed(),
        ("cluster/nodes", Some(control)) => match control.nodes().await {
            Ok(body) => ok(body),
            Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e),
        },
        ("cluster/nodes", None) => ok(local_node(state)),
        ("fleet/gateways", _) if method != Method::GET => method_not_allowed(),
        ("fleet/gateways", Some(control)) => match control.gateways().await {
            Ok(body) => ok(body),
            Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e),
        },
        ("fleet/gateways", None) => ok(GatewaysAnswer::default()),
        ("fleet/history", _) if method != Method::GET => method_not_allowed(),
        ("fleet/history", Some(control)) => ok(control.gateway_histories()),
        ("fleet/history", None) => ok(FleetHistoryAnswer::default()),
        (_, Some(control)) => {
            let request = ApiRequest {
                method: &method,
                path: &path,
                query: query.as_deref(),
                caller: caller.as_ref(),
                body: &body,
            };
            let response = api(control, &request).await;
            (response.status, response.body_bytes())
        }
        ("adaptive-routing-policy", None) => match method {
            Method::GET => ok(PolicyAnswer {
                policy: Some(PolicyView::from(state.snapshot().config.adaptive_routing)),
                managed_by: Some(managed_by(state).to_owned()),
                ..PolicyAnswer::default()
            }),
            Method::PUT => error(
                StatusCode::CONFLICT,
                &format!(
                    "the adaptive-routing policy of this node is managed by {}: change it there",
                    managed_by(state)
                ),
            ),
            _ => method_not_allowed(),
        },
        (_, None) => match super::api::running::answer(
            &state.snapshot().config,
            managed_by(state),
            &method,
            &path,
            caller.as_ref(),
        ) {
            Some(response) => (response.status, response.body_bytes()),
            None => error(
                StatusCode::NOT_FOUND,
                "the control API is served by control nodes (role = \"control\"); this node's configuration comes from rolter.toml or its control node",
            ),
        },
    };
    Some(response)
}

/// `GET /api/v1/session`: the caller's token name and role, this node's
/// role, whether its configuration is read-only here (everywhere but on a
/// control node), and the documentation host the dashboard links
/// (`ROLTER_DOCS_URL`, read per request; `null` when unset or empty).
fn session_view(state: &GatewayState, is_control: bool, caller: &Caller) -> SessionView {
    let docs_url = std::env::var(DOCS_URL_ENV)
        .ok()
        .map(|url| url.trim().to_string())
        .filter(|url| !url.is_empty());
    SessionView {
        token_name: caller.name.clone(),
        role: caller.role,
        node_role: state.snapshot().config.server.role,
        read_only: !is_control,
        docs_url,
    }
}

/// `GET /api/v1/session`.
#[derive(Serialize, ToSchema)]
pub struct SessionView {
    /// The admin token's name.
    token_name: String,
    /// The admin token's role.
    role: AdminRole,
    /// This node's role.
    node_role: Role,
    /// Everything is managed elsewhere here (every node but a control node).
    read_only: bool,
    /// The documentation host the dashboard links; `null` when unset.
    docs_url: Option<String>,
}

/// The environment variable with the documentation host the dashboard links.
pub const DOCS_URL_ENV: &str = "ROLTER_DOCS_URL";

fn managed_by(state: &GatewayState) -> &'static str {
    match state.snapshot().config.server.role {
        Role::Gateway => "the control node",
        _ => "rolter.toml",
    }
}

async fn internal_call(
    state: &GatewayState,
    control: &ControlNode,
    session: &mut ServerSession,
    method: &Method,
    path: &str,
) -> (StatusCode, Vec<u8>) {
    if !internal_token_ok(state, session) {
        return error(StatusCode::UNAUTHORIZED, "the internal token is required");
    }
    let Some(node_id) = session
        .req_header()
        .headers
        .get(NODE_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128)
        .map(str::to_string)
    else {
        return error(StatusCode::BAD_REQUEST, "x-rolter-node-id is required");
    };
    match (method, path) {
        (&Method::GET, "snapshot") => {
            let have = session.req_header().uri.query().and_then(|q| {
                q.split('&')
                    .find_map(|p| p.strip_prefix("version="))
                    .and_then(|v| v.parse::<u64>().ok())
                    .filter(|v| *v > 0)
            });
            let report = NodeReport {
                node_id,
                role: "gateway".to_string(),
                config_version: have,
                address: telemetry::advertised_address(
                    session.client_addr().and_then(|a| a.as_inet()).copied(),
                    session
                        .req_header()
                        .headers
                        .get(ADMIN_ADDRESS_HEADER)
                        .and_then(|v| v.to_str().ok()),
                ),
                software_version: session
                    .req_header()
                    .headers
                    .get(header::USER_AGENT)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string),
            };
            let (status, body) = control.snapshot_for(report).await;
            (status, body.to_vec())
        }
        (&Method::POST, "adaptive-telemetry") => {
            let body = match read_body(session).await {
                Ok(body) => body,
                Err(e) => return error(StatusCode::BAD_REQUEST, &e),
            };
            match parse_body::<TelemetryPush>(&body) {
                Ok(push) => match control.record_telemetry(&node_id, push).await {
                    Ok(()) => (StatusCode::NO_CONTENT, Vec::new()),
                    Err(e) => error(StatusCode::SERVICE_UNAVAILABLE, &e),
                },
                Err(refused) => (refused.status, refused.body_bytes()),
            }
        }
        _ => error(StatusCode::NOT_FOUND, "no such internal endpoint"),
    }
}

fn internal_token_ok(state: &GatewayState, session: &ServerSession) -> bool {
    let snapshot = state.snapshot();
    let Some(expected) = snapshot
        .config
        .control_plane
        .as_ref()
        .and_then(|c| c.internal_token.as_deref())
    else {
        return false;
    };
    session
        .req_header()
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| bearer_token(v.as_bytes()))
        .is_some_and(|token| bool::from(token.ct_eq(expected.as_bytes())))
}

fn caller(state: &GatewayState, session: &ServerSession) -> Option<Caller> {
    let token = session
        .req_header()
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| bearer_token(v.as_bytes()))?;
    let snapshot = state.snapshot();
    let (name, role) = snapshot.admin_tokens.authenticate(token)?;
    Some(Caller {
        name: name.to_string(),
        role,
    })
}

/// `Some(refusal)` unless `caller` has `role` or above.
fn needs(caller: Option<&Caller>, role: AdminRole) -> Option<(StatusCode, Vec<u8>)> {
    match caller {
        None => Some(ApiResponse::unauthorized(
            "an admin token is required: send `Authorization: Bearer <token>`",
        ))
        .map(|r| (r.status, r.body_bytes())),
        Some(c) if c.role < role => Some(error(
            StatusCode::FORBIDDEN,
            &format!(
                "admin token `{}` has role {}; this needs {} or above",
                c.name,
                c.role.as_str(),
                role.as_str()
            ),
        )),
        Some(_) => None,
    }
}

async fn read_body(session: &mut ServerSession) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        match session.read_request_body().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > MAX_BODY {
                    return Err(format!("request body larger than {MAX_BODY} bytes"));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(e) => return Err(format!("reading the request body: {e}")),
        }
    }
}

/// This node's own telemetry, in the control node's shape.
fn local_telemetry(state: &GatewayState) -> TelemetryAnswer {
    let snapshot = state.snapshot();
    let node_id = snapshot.node_id();
    TelemetryAnswer {
        routes: telemetry::sample(&snapshot)
            .into_iter()
            .map(|route| RouteTelemetry {
                model: route.model,
                nodes: vec![NodeRanking {
                    node_id: node_id.clone(),
                    reported_at: None,
                    ranking: route.ranking,
                }],
            })
            .collect(),
    }
}

fn local_node(state: &GatewayState) -> ClusterAnswer {
    let snapshot = state.snapshot();
    ClusterAnswer {
        nodes: vec![ClusterNode::answering(&snapshot, snapshot.version)],
        config_version: snapshot.version,
    }
}

fn ok(body: impl Serialize) -> (StatusCode, Vec<u8>) {
    (
        StatusCode::OK,
        serde_json::to_vec(&body).unwrap_or_default(),
    )
}

fn method_not_allowed() -> (StatusCode, Vec<u8>) {
    error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed")
}

fn error(status: StatusCode, message: &str) -> (StatusCode, Vec<u8>) {
    (
        status,
        serde_json::to_vec(&ErrorBody::for_status(status, message)).unwrap_or_default(),
    )
}

/// `/api/v1/...` on a control node, against its store; a write that was
/// accepted is published at once.
async fn api(node: &ControlNode, request: &ApiRequest<'_>) -> ApiResponse {
    let store = match node.store().await {
        Ok(store) => store.clone(),
        Err(e) => {
            return ApiResponse::error(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "database_unavailable",
                &e,
            )
        }
    };
    let file_managed = node
        .file_managed_rows()
        .map(|file| FileManaged::of(&file))
        .unwrap_or_default();
    let context = ApiContext::new(store, node.validator(), file_managed);
    let response = super::api::handle(&context, request).await;
    if request.method != Method::GET && response.status.is_success() {
        if let Err(e) = node.refresh(false).await {
            log::error!("publishing the configuration after a write failed: {e}");
        }
    }
    response
}
