//! What the nodes report, which is not configuration (no version bump, no
//! audit row): the newest adaptive-routing telemetry sample per (node,
//! model), each gateway's newest live state, and the cluster inventory. Timestamps are the database's clock,
//! so every control node agrees on them.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::postgres::PgRow;

use super::{column, Store, StoreError};
use crate::snapshot::Snapshot;

/// One stored telemetry sample.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TelemetrySample {
    pub node_id: String,
    /// The route's public model.
    pub model: String,
    /// As the node pushed it.
    pub sample: serde_json::Value,
    pub reported_at: DateTime<Utc>,
}

/// A gateway's newest live state, as it pushed it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredGatewayState {
    pub node_id: String,
    /// Its `/admin/routes` answer.
    pub state: serde_json::Value,
    /// How often it pushes.
    pub interval_ms: u64,
    pub reported_at: DateTime<Utc>,
    /// Milliseconds between `reported_at` and the database's clock now.
    pub age_ms: u64,
}

/// What a node says about itself when it polls.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct NodeReport {
    pub node_id: String,
    /// "gateway", "control", ...
    pub role: String,
    /// The configuration version it runs, when it runs one.
    pub config_version: Option<u64>,
    /// Where it was seen from (peer address).
    pub address: Option<String>,
    /// Its rolter version.
    pub software_version: Option<String>,
}

/// One node of the cluster inventory.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ClusterNode {
    #[serde(flatten)]
    pub report: NodeReport,
    /// When the control node first and last heard from it (absent for the
    /// node answering, which reports itself).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_seen: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_seen: Option<DateTime<Utc>>,
}

impl ClusterNode {
    /// The node answering, as it is now: it runs `snapshot`, publishes or
    /// serves `config_version`, and listens on its `admin_listen`.
    pub fn answering(snapshot: &Snapshot, config_version: u64) -> Self {
        ClusterNode {
            report: NodeReport {
                node_id: snapshot.node_id(),
                role: snapshot.config.server.role.as_str().to_owned(),
                config_version: Some(config_version),
                address: Some(snapshot.config.server.admin_listen.clone()),
                software_version: Some(crate::SOFTWARE_VERSION.to_owned()),
            },
            first_seen: None,
            last_seen: None,
        }
    }
}

/// `GET /api/v1/cluster/nodes`: the fleet's nodes and the configuration
/// version the answering node serves.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct ClusterAnswer {
    pub nodes: Vec<ClusterNode>,
    pub config_version: u64,
}

impl Store {
    /// Keeps `sample` as the newest of (`node_id`, `model`), stamped now.
    pub async fn upsert_telemetry(
        &self,
        node_id: &str,
        model: &str,
        sample: &serde_json::Value,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO adaptive_routing_telemetry (node_id, model, sample, reported_at) \
             VALUES ($1, $2, $3, now()) \
             ON CONFLICT (node_id, model) DO UPDATE SET sample = EXCLUDED.sample, \
             reported_at = EXCLUDED.reported_at",
        )
        .bind(node_id)
        .bind(model)
        .bind(sample)
        .execute(&self.pool)
        .await
        .map_err(StoreError::database(format!(
            "storing the telemetry of node `{node_id}` for `{model}`"
        )))?;
        Ok(())
    }

    /// Samples reported at or after `cutoff`, by model then node.
    pub async fn telemetry_since(
        &self,
        cutoff: DateTime<Utc>,
    ) -> Result<Vec<TelemetrySample>, StoreError> {
        let rows = sqlx::query(
            "SELECT node_id, model, sample, reported_at FROM adaptive_routing_telemetry \
             WHERE reported_at >= $1 ORDER BY model, node_id",
        )
        .bind(cutoff)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::database(
            "reading the adaptive-routing telemetry",
        ))?;
        rows.iter()
            .map(|row| {
                let table = "adaptive_routing_telemetry";
                Ok(TelemetrySample {
                    node_id: column(row, "node_id", table)?,
                    model: column(row, "model", table)?,
                    sample: column(row, "sample", table)?,
                    reported_at: column(row, "reported_at", table)?,
                })
            })
            .collect()
    }

    /// Deletes samples reported before `older_than`; returns how many.
    pub async fn prune_telemetry(&self, older_than: DateTime<Utc>) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM adaptive_routing_telemetry WHERE reported_at < $1")
            .bind(older_than)
            .execute(&self.pool)
            .await
            .map_err(StoreError::database(
                "pruning the adaptive-routing telemetry",
            ))?;
        Ok(done.rows_affected())
    }

    /// Keeps `state` as the newest of gateway `node_id`, stamped now.
    pub async fn upsert_gateway_state(
        &self,
        node_id: &str,
        state: &serde_json::Value,
        interval_ms: u64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO gateway_state (node_id, state, interval_ms, reported_at) \
             VALUES ($1, $2, $3, now()) \
             ON CONFLICT (node_id) DO UPDATE SET state = EXCLUDED.state, \
             interval_ms = EXCLUDED.interval_ms, reported_at = EXCLUDED.reported_at",
        )
        .bind(node_id)
        .bind(state)
        .bind(i64::try_from(interval_ms).unwrap_or(i64::MAX))
        .execute(&self.pool)
        .await
        .map_err(StoreError::database(format!(
            "storing the live state of gateway `{node_id}`"
        )))?;
        Ok(())
    }

    /// Every gateway's newest state reported at or after `cutoff`, by node
    /// id, with its age on the database's clock.
    pub async fn gateway_states_since(
        &self,
        cutoff: DateTime<Utc>,
    ) -> Result<Vec<StoredGatewayState>, StoreError> {
        let rows = sqlx::query(
            "SELECT node_id, state, interval_ms, reported_at, \
             GREATEST(0, (EXTRACT(EPOCH FROM (now() - reported_at)) * 1000))::BIGINT AS age_ms \
             FROM gateway_state WHERE reported_at >= $1 ORDER BY node_id",
        )
        .bind(cutoff)
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::database("reading the gateways' live state"))?;
        rows.iter()
            .map(|row| {
                let table = "gateway_state";
                let interval_ms: i64 = column(row, "interval_ms", table)?;
                let age_ms: i64 = column(row, "age_ms", table)?;
                Ok(StoredGatewayState {
                    node_id: column(row, "node_id", table)?,
                    state: column(row, "state", table)?,
                    interval_ms: u64::try_from(interval_ms).unwrap_or(0),
                    reported_at: column(row, "reported_at", table)?,
                    age_ms: u64::try_from(age_ms).unwrap_or(0),
                })
            })
            .collect()
    }

    /// Deletes gateway states reported before `older_than`.
    pub async fn prune_gateway_states(&self, older_than: DateTime<Utc>) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM gateway_state WHERE reported_at < $1")
            .bind(older_than)
            .execute(&self.pool)
            .await
            .map_err(StoreError::database("pruning the gateways' live state"))?;
        Ok(done.rows_affected())
    }

    /// Records that `report.node_id` was seen now; `first_seen` stays as it
    /// was.
    pub async fn upsert_node(&self, report: &NodeReport) -> Result<(), StoreError> {
        let config_version = report
            .config_version
            .map(|v| i64::try_from(v).unwrap_or(i64::MAX));
        sqlx::query(
            "INSERT INTO cluster_nodes (node_id, role, config_version, address, software_version, \
             first_seen, last_seen) VALUES ($1, $2, $3, $4, $5, now(), now()) \
             ON CONFLICT (node_id) DO UPDATE SET role = EXCLUDED.role, \
             config_version = EXCLUDED.config_version, address = EXCLUDED.address, \
             software_version = EXCLUDED.software_version, last_seen = EXCLUDED.last_seen",
        )
        .bind(&report.node_id)
        .bind(&report.role)
        .bind(config_version)
        .bind(&report.address)
        .bind(&report.software_version)
        .execute(&self.pool)
        .await
        .map_err(StoreError::database(format!(
            "recording node `{}`",
            report.node_id
        )))?;
        Ok(())
    }

    /// The cluster inventory, by node id.
    pub async fn list_nodes(&self) -> Result<Vec<ClusterNode>, StoreError> {
        let rows = sqlx::query(
            "SELECT node_id, role, config_version, address, software_version, first_seen, \
             last_seen FROM cluster_nodes ORDER BY node_id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::database("listing the cluster nodes"))?;
        rows.iter().map(node).collect()
    }
}

fn node(row: &PgRow) -> Result<ClusterNode, StoreError> {
    let table = "cluster_nodes";
    let config_version: Option<i64> = column(row, "config_version", table)?;
    Ok(ClusterNode {
        report: NodeReport {
            node_id: column(row, "node_id", table)?,
            role: column(row, "role", table)?,
            config_version: config_version.and_then(|v| u64::try_from(v).ok()),
            address: column(row, "address", table)?,
            software_version: column(row, "software_version", table)?,
        },
        first_seen: Some(column(row, "first_seen", table)?),
        last_seen: Some(column(row, "last_seen", table)?),
    })
}
