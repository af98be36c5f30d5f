//! `GET`/`PUT /api/v1/adaptive-routing-policy` (superadmin only): the
//! deployment-wide `[adaptive_routing]` policy (docs/design/balancer.md,
//! "Adaptive routing"). A change is validated with the whole document like
//! any other write, stored sanitized, audited as
//! `adaptive_routing_policy.update`, and answered with the routes and
//! provider groups it reaches (those on the `adaptive` strategy). A PUT
//! changes the fields it names and keeps the stored value of every field
//! it omits (`{"enabled": false}` is the kill switch, nothing else). An
//! all-zero blend is refused outright: switching adaptive routing off is
//! what `enabled = false` is for.

use chrono::{DateTime, Utc};
use http::{Method, StatusCode};
use rolter_balancer::StrategyKind;
use serde::Serialize;
use utoipa::ToSchema;

use super::resources::{begin, parse_body, validate};
use super::response::{
    method_not_allowed, problem, store_error, to_json, unprocessable, ApiResponse, Problem,
};
use super::{require, ApiContext, Caller};
use crate::config::file::AdaptiveRoutingTable;
use crate::config::AdminRole;
use crate::control::store::{sanitize_policy, StoredPolicy};
use crate::fleet::telemetry::PolicyView;

pub(super) async fn endpoint(
    ctx: &ApiContext,
    method: &Method,
    path: &str,
    caller: &Caller,
    body: &[u8],
) -> ApiResponse {
    if let Err(refusal) = require(caller, AdminRole::Superadmin) {
        return refusal;
    }
    let result = match *method {
        Method::GET => ctx
            .store
            .get_policy()
            .await
            .map(|stored| ApiResponse::json(StatusCode::OK, to_json(&view(stored))))
            .map_err(store_error),
        Method::PUT => put(ctx, caller, body).await,
        _ => Err(method_not_allowed(method, path)),
    };
    result.unwrap_or_else(|refusal| refusal)
}

async fn put(ctx: &ApiContext, caller: &Caller, body: &[u8]) -> Result<ApiResponse, ApiResponse> {
    let written: AdaptiveRoutingTable = parse_body(body)?;
    let mut write = begin(ctx, caller).await?;
    let mut candidate = write.document().await.map_err(store_error)?;
    let table = with_stored(written, &candidate.adaptive_routing);
    let sanitized = sanitize_policy(&table);
    let weights = [
        sanitized.latency_weight,
        sanitized.cost_weight,
        sanitized.load_weight,
    ];
    if weights.iter().all(|weight| *weight == Some(0.0)) {
        return Err(unprocessable(
            "adaptive_routing",
            "latency_weight, cost_weight and load_weight are all zero (or negative): such a blend ranks nothing; to stop adaptive routing set enabled = false",
        ));
    }

    // As written, so the validator refuses what is not a number and warns
    // about what sanitizing changes.
    candidate.adaptive_routing = table.clone();
    let config = validate(ctx, candidate).await?;
    let stored = write.put_policy(&table).await.map_err(store_error)?;
    let version = write.commit().await.map_err(store_error)?;

    let affected_routes = config
        .routes
        .iter()
        .filter(|route| route.strategy == StrategyKind::Adaptive)
        .map(|route| route.model.clone())
        .collect();
    let affected_groups = config
        .provider_groups
        .iter()
        .filter(|group| group.strategy == StrategyKind::Adaptive)
        .map(|group| group.slug.clone())
        .collect();
    let answer = PolicyAnswer {
        version: Some(version),
        affected_routes: Some(affected_routes),
        affected_provider_groups: Some(affected_groups),
        warnings: config.warnings.iter().map(problem).collect(),
        ..view(stored)
    };
    Ok(ApiResponse::json(StatusCode::OK, to_json(&answer)))
}

/// `written` with every field it omits taken from `stored`.
fn with_stored(
    written: AdaptiveRoutingTable,
    stored: &AdaptiveRoutingTable,
) -> AdaptiveRoutingTable {
    AdaptiveRoutingTable {
        enabled: written.enabled.or(stored.enabled),
        latency_weight: written.latency_weight.or(stored.latency_weight),
        cost_weight: written.cost_weight.or(stored.cost_weight),
        load_weight: written.load_weight.or(stored.load_weight),
        exploration_ratio: written.exploration_ratio.or(stored.exploration_ratio),
        min_samples: written.min_samples.or(stored.min_samples),
    }
}

fn view(stored: StoredPolicy) -> PolicyAnswer {
    PolicyAnswer {
        data: Some(stored.policy),
        updated_at: Some(stored.updated_at),
        updated_by: stored.updated_by,
        ..PolicyAnswer::default()
    }
}

/// `GET`/`PUT /api/v1/adaptive-routing-policy`. On a control node: the
/// stored policy (`data`, every field set), who set it and when, and after
/// a PUT the version it produced and the routes and groups it reaches. On
/// any other node, which answers from its running configuration: the
/// `policy` it runs and who manages it (`managed_by`).
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct PolicyAnswer {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<AdaptiveRoutingTable>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<DateTime<Utc>>,
    /// The admin token that set it; `null` for the migration's defaults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affected_routes: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub affected_provider_groups: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<Problem>,
    /// The policy this node runs (not a control node).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyView>,
    /// Who manages the policy of this node: `rolter.toml` or `the control node`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub managed_by: Option<String>,
}
