//! `adaptive_routing_policy`: the one row holding the deployment-wide
//! `[adaptive_routing]` policy, stored sanitized (docs/design/balancer.md, "adaptive":
//! "Operator input is clamped on the way in").

use chrono::{DateTime, Utc};
use rolter_balancer::AdaptivePolicy;
use serde::Serialize;
use sqlx::PgConnection;

use super::{column, StoreError};
use crate::config::file::{AdaptiveRoutingTable, MAX_EXPLORATION_RATIO};

/// The stored policy and who set it last.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredPolicy {
    /// Every field set.
    pub policy: AdaptiveRoutingTable,
    pub updated_at: DateTime<Utc>,
    /// The admin token that set it; `None` for the migration's defaults.
    pub updated_by: Option<String>,
}

/// `table` as it is stored: unset fields take the defaults of docs/design/defaults.md,
/// negative weights become 0, exploration is clamped to [0, 0.5]. A NaN or
/// infinite value is left as it is, for validation to refuse.
pub fn sanitize(table: &AdaptiveRoutingTable) -> AdaptiveRoutingTable {
    let defaults = AdaptivePolicy::default();
    let weight = |value: Option<f64>, default: f64| {
        let value = value.unwrap_or(default);
        Some(if value < 0.0 { 0.0 } else { value })
    };
    // `clamp` keeps a NaN a NaN.
    let exploration = table
        .exploration_ratio
        .unwrap_or(defaults.exploration_ratio)
        .clamp(0.0, MAX_EXPLORATION_RATIO);
    AdaptiveRoutingTable {
        enabled: Some(table.enabled.unwrap_or(defaults.enabled)),
        latency_weight: weight(table.latency_weight, defaults.latency_weight),
        cost_weight: weight(table.cost_weight, defaults.cost_weight),
        load_weight: weight(table.load_weight, defaults.load_weight),
        exploration_ratio: Some(exploration),
        min_samples: Some(table.min_samples.unwrap_or(defaults.min_samples)),
    }
}

pub(super) async fn select(conn: &mut PgConnection) -> Result<StoredPolicy, StoreError> {
    let row = sqlx::query(
        "SELECT enabled, latency_weight, cost_weight, load_weight, exploration_ratio, \
         min_samples, updated_at, updated_by FROM adaptive_routing_policy",
    )
    .fetch_one(&mut *conn)
    .await
    .map_err(StoreError::database("reading the adaptive-routing policy"))?;
    let table = "adaptive_routing_policy";
    let min_samples: i64 = column(&row, "min_samples", table)?;
    Ok(StoredPolicy {
        policy: AdaptiveRoutingTable {
            enabled: Some(column(&row, "enabled", table)?),
            latency_weight: Some(column(&row, "latency_weight", table)?),
            cost_weight: Some(column(&row, "cost_weight", table)?),
            load_weight: Some(column(&row, "load_weight", table)?),
            exploration_ratio: Some(column(&row, "exploration_ratio", table)?),
            min_samples: Some(u64::try_from(min_samples).map_err(|_| StoreError::Corrupt {
                context: table.to_owned(),
                message: format!("min_samples = {min_samples}"),
            })?),
        },
        updated_at: column(&row, "updated_at", table)?,
        updated_by: column(&row, "updated_by", table)?,
    })
}

/// Stores `policy` (already sanitized: every field set).
pub(super) async fn update(
    conn: &mut PgConnection,
    policy: &AdaptiveRoutingTable,
    actor: &str,
) -> Result<(), StoreError> {
    let min_samples = policy.min_samples.unwrap_or_default();
    let min_samples = i64::try_from(min_samples).map_err(|_| StoreError::InvalidPolicy {
        field: "min_samples",
        message: format!("{min_samples} is too large"),
    })?;
    sqlx::query(
        "UPDATE adaptive_routing_policy SET enabled = $1, latency_weight = $2, cost_weight = $3, \
         load_weight = $4, exploration_ratio = $5, min_samples = $6, updated_at = now(), \
         updated_by = $7",
    )
    .bind(policy.enabled.unwrap_or_default())
    .bind(policy.latency_weight.unwrap_or_default())
    .bind(policy.cost_weight.unwrap_or_default())
    .bind(policy.load_weight.unwrap_or_default())
    .bind(policy.exploration_ratio.unwrap_or_default())
    .bind(min_samples)
    .bind(actor)
    .execute(&mut *conn)
    .await
    .map_err(StoreError::database("writing the adaptive-routing policy"))?;
    Ok(())
}
