//! The admin listener's API described once: an OpenAPI 3.1 document
//! derived from the types the endpoints serialize (`utoipa`), served at
//! `GET /openapi.json`. The dashboard's TypeScript types and field help are
//! generated from it (`ui/scripts/gen-api.mjs`, checked for drift), and
//! `make test` runs schemathesis against the served document.
//!
//! The functions below carry no code: each describes one endpoint for the
//! document (the routing itself is `admin.rs`, `control.rs` and `api/`).
//! Every endpoint but `/healthz`, `/readyz`, `/metrics` and this document
//! needs an admin token (`admin_token`, with the role each names), or, for
//! `/internal/*`, the fleet's internal token (`internal_token`).

// The functions exist for their `#[utoipa::path]` attributes only.
#![allow(dead_code)]

use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::api::policy::PolicyAnswer;
use super::api::{ErrorBody, Listing, RowAnswer, Written};
use super::control::SessionView;
use super::{EngineTelemetryAnswer, ReloadAnswer, StrategiesAnswer};
use crate::config::file::{
    AdaptiveRoutingTable, AdminTokenTable, ApiKeyTable, CatalogTable, ProviderGroupTable,
    ProviderTable, RouteTable,
};
use crate::control::store::{AdminTokenView, ApiKeyView, AuditRecord, ClusterAnswer};
use crate::fleet::poller::FleetSnapshot;
use crate::fleet::state::{FleetHistoryAnswer, GatewaysAnswer};
use crate::fleet::telemetry::{TelemetryAnswer, TelemetryPush};
use crate::history::HistoryAnswer;
use crate::live::RoutesAnswer;

/// The document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "rolter admin and control API",
        description = "The admin listener of a rolter node: health, metrics, reloads, \
                       balancer introspection, and the control API (writable on control nodes; \
                       read-only elsewhere, answered from the running configuration).",
    ),
    paths(
        healthz, readyz, metrics, document_path,
        reload, routes, strategies, kv_index,
        session, policy_get, policy_put, telemetry, cluster_nodes, fleet_gateways, fleet_history,
        admin_history, audit_log,
        providers_list, providers_create, providers_get, providers_update, providers_delete,
        routes_list, routes_create, routes_get, routes_update, routes_delete,
        groups_list, groups_create, groups_get, groups_update, groups_delete,
        catalog_list, catalog_create, catalog_get, catalog_update, catalog_delete,
        api_keys_list, api_keys_create, api_keys_get, api_keys_update, api_keys_delete,
        admin_tokens_list, admin_tokens_create, admin_tokens_get, admin_tokens_update,
        admin_tokens_delete,
        internal_snapshot, internal_telemetry,
    ),
    modifiers(&Tokens),
    tags(
        (name = "health", description = "Open: probes and scrapers carry no secrets."),
        (name = "admin", description = "This node's running state."),
        (name = "control", description = "The fleet's configuration."),
        (name = "internal", description = "Gateways to their control node."),
    ),
)]
pub struct ApiDoc;

/// The document as served.
pub fn document() -> String {
    ApiDoc::openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// The two bearer tokens.
struct Tokens;

impl Modify for Tokens {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        for name in ["admin_token", "internal_token"] {
            components.add_security_scheme(
                name,
                SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
            );
        }
    }
}

#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, description = "The process runs.", body = String, content_type = "text/plain")))]
fn healthz() {}

#[utoipa::path(get, path = "/readyz", tag = "health",
    responses(
        (status = 200, description = "Serving: every listener accepts and a configuration is installed.", body = String, content_type = "text/plain"),
        (status = 503, description = "Starting, draining or without a configuration yet.", body = String, content_type = "text/plain"),
    ))]
fn readyz() {}

#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "Prometheus text exposition.", body = String, content_type = "text/plain")))]
fn metrics() {}

#[utoipa::path(get, path = "/openapi.json", tag = "health",
    responses((status = 200, description = "This document.", body = Object)))]
fn document_path() {}

#[utoipa::path(post, path = "/admin/reload", tag = "admin", security(("admin_token" = [])),
    description = "Re-reads the configuration (role admin).",
    responses(
        (status = 200, description = "Applied.", body = ReloadAnswer),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 422, description = "Refused; the running configuration stays.", body = ReloadAnswer),
    ))]
fn reload() {}

#[utoipa::path(get, path = "/admin/routes", tag = "admin", security(("admin_token" = [])),
    description = "Routes, groups, balancer reports and live target state (role viewer).",
    responses((status = 200, body = RoutesAnswer), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
fn routes() {}

#[utoipa::path(get, path = "/admin/strategies", tag = "admin", security(("admin_token" = [])),
    responses((status = 200, body = StrategiesAnswer), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
fn strategies() {}

#[utoipa::path(get, path = "/admin/kv-index", tag = "admin", security(("admin_token" = [])),
    description = "Each provider's KV-event index and LMCache signal (role viewer).",
    responses((status = 200, body = EngineTelemetryAnswer), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
fn kv_index() {}

#[utoipa::path(get, path = "/api/v1/session", tag = "control", security(("admin_token" = [])),
    responses((status = 200, body = SessionView), (status = 401, body = ErrorBody)))]
fn session() {}

#[utoipa::path(get, path = "/api/v1/adaptive-routing-policy", tag = "control", security(("admin_token" = [])),
    description = "The deployment-wide adaptive-routing policy (role superadmin).",
    responses(
        (status = 200, body = PolicyAnswer),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 503, body = ErrorBody),
    ))]
fn policy_get() {}

#[utoipa::path(put, path = "/api/v1/adaptive-routing-policy", tag = "control", security(("admin_token" = [])),
    description = "Changes the fields it names; omitted fields keep their stored values (role superadmin, control nodes).",
    request_body = AdaptiveRoutingTable,
    responses(
        (status = 200, body = PolicyAnswer),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 409, description = "Managed in rolter.toml or by the control node here.", body = ErrorBody),
        (status = 422, body = ErrorBody), (status = 503, body = ErrorBody),
    ))]
fn policy_put() {}

#[utoipa::path(get, path = "/api/v1/adaptive-routing-telemetry", tag = "control", security(("admin_token" = [])),
    description = "What each node's adaptive balancers rank on (role superadmin).",
    responses((status = 200, body = TelemetryAnswer), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 503, body = ErrorBody)))]
fn telemetry() {}

#[utoipa::path(get, path = "/api/v1/cluster/nodes", tag = "control", security(("admin_token" = [])),
    responses((status = 200, body = ClusterAnswer), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 503, body = ErrorBody)))]
fn cluster_nodes() {}

#[utoipa::path(get, path = "/api/v1/fleet/gateways", tag = "control", security(("admin_token" = [])),
    description = "Each gateway's newest live state (its `/admin/routes`), with its age, on a control node; empty elsewhere.",
    responses((status = 200, body = GatewaysAnswer), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 503, body = ErrorBody)))]
fn fleet_gateways() {}

#[utoipa::path(get, path = "/api/v1/fleet/history", tag = "control", security(("admin_token" = [])),
    description = "Each gateway's recent traffic per route and target, a point per push it made to this control node; empty elsewhere.",
    responses((status = 200, body = FleetHistoryAnswer), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
fn fleet_history() {}

#[utoipa::path(get, path = "/admin/history", tag = "admin", security(("admin_token" = [])),
    description = "This node's traffic per route and target over the last 15 minutes, a point every 5 s (role viewer).",
    responses((status = 200, body = HistoryAnswer), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
fn admin_history() {}

#[utoipa::path(get, path = "/api/v1/audit-log", tag = "control", security(("admin_token" = [])),
    description = "The newest configuration changes first (control nodes).",
    params(("limit" = Option<u32>, Query, description = "At most this many records (1 to 1000; default 100).")),
    responses(
        (status = 200, body = RowAnswer<Vec<AuditRecord>>),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, description = "Not a control node.", body = ErrorBody), (status = 503, body = ErrorBody),
    ))]
fn audit_log() {}

/// The five endpoints of one collection of the control API.
macro_rules! collection {
    ($list:ident, $create:ident, $get:ident, $update:ident, $delete:ident,
     $path:literal, $one:literal, $key:literal, $row:ty, $public:ty, $what:literal) => {
        #[utoipa::path(get, path = $path, tag = "control", security(("admin_token" = [])),
            description = concat!("Every ", $what, ", and which rolter.toml manages."),
            responses(
                (status = 200, body = Listing<$public>),
                (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
                (status = 404, description = "Not served here (secrets: control nodes only).", body = ErrorBody),
                (status = 503, body = ErrorBody),
            ))]
        fn $list() {}

        #[utoipa::path(post, path = $path, tag = "control", security(("admin_token" = [])),
            description = concat!("Creates one ", $what, " (control nodes)."),
            request_body = $row,
            responses(
                (status = 201, body = Written<$public>),
                (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
                (status = 404, description = "Not a control node.", body = ErrorBody),
                (status = 409, body = ErrorBody), (status = 422, body = ErrorBody), (status = 503, body = ErrorBody),
            ))]
        fn $create() {}

        #[utoipa::path(get, path = $one, tag = "control", security(("admin_token" = [])),
            params(($key = String, Path)),
            responses(
                (status = 200, body = RowAnswer<$public>),
                (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
                (status = 404, body = ErrorBody), (status = 503, body = ErrorBody),
            ))]
        fn $get() {}

        #[utoipa::path(put, path = $one, tag = "control", security(("admin_token" = [])),
            description = concat!("Replaces one ", $what, " (control nodes)."),
            params(($key = String, Path)),
            request_body = $row,
            responses(
                (status = 200, body = Written<$public>),
                (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
                (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody),
                (status = 503, body = ErrorBody),
            ))]
        fn $update() {}

        #[utoipa::path(delete, path = $one, tag = "control", security(("admin_token" = [])),
            params(($key = String, Path)),
            responses(
                (status = 200, body = Written<$public>),
                (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
                (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 422, body = ErrorBody),
                (status = 503, body = ErrorBody),
            ))]
        fn $delete() {}
    };
}

collection!(
    providers_list,
    providers_create,
    providers_get,
    providers_update,
    providers_delete,
    "/api/v1/providers",
    "/api/v1/providers/{slug}",
    "slug",
    ProviderTable,
    ProviderTable,
    "provider"
);
collection!(
    routes_list,
    routes_create,
    routes_get,
    routes_update,
    routes_delete,
    "/api/v1/routes",
    "/api/v1/routes/{model}",
    "model",
    RouteTable,
    RouteTable,
    "route"
);
collection!(
    groups_list,
    groups_create,
    groups_get,
    groups_update,
    groups_delete,
    "/api/v1/provider-groups",
    "/api/v1/provider-groups/{slug}",
    "slug",
    ProviderGroupTable,
    ProviderGroupTable,
    "provider group"
);
collection!(
    catalog_list,
    catalog_create,
    catalog_get,
    catalog_update,
    catalog_delete,
    "/api/v1/catalog",
    "/api/v1/catalog/{model}",
    "model",
    CatalogTable,
    CatalogTable,
    "catalog entry"
);
collection!(
    api_keys_list,
    api_keys_create,
    api_keys_get,
    api_keys_update,
    api_keys_delete,
    "/api/v1/api-keys",
    "/api/v1/api-keys/{name}",
    "name",
    ApiKeyTable,
    ApiKeyView,
    "API key"
);
collection!(
    admin_tokens_list,
    admin_tokens_create,
    admin_tokens_get,
    admin_tokens_update,
    admin_tokens_delete,
    "/api/v1/admin-tokens",
    "/api/v1/admin-tokens/{name}",
    "name",
    AdminTokenTable,
    AdminTokenView,
    "admin token"
);

#[utoipa::path(get, path = "/internal/snapshot", tag = "internal", security(("internal_token" = [])),
    description = "The fleet document for a gateway (control nodes).",
    params(
        ("version" = Option<u64>, Query, description = "The version the gateway runs: 304 when current."),
        ("x-rolter-node-id" = String, Header),
    ),
    responses(
        (status = 200, body = FleetSnapshot), (status = 304, description = "Current."),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 503, body = ErrorBody),
    ))]
fn internal_snapshot() {}

#[utoipa::path(post, path = "/internal/adaptive-telemetry", tag = "internal", security(("internal_token" = [])),
    params(("x-rolter-node-id" = String, Header)),
    request_body = TelemetryPush,
    responses(
        (status = 204, description = "Stored."),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 503, body = ErrorBody),
    ))]
fn internal_telemetry() {}
