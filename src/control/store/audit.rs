//! `audit_log`: who changed what. A row is written by the transaction that
//! made the change (see [`ConfigWrite`](super::ConfigWrite)), so the log
//! holds exactly the changes that happened, each with the configuration
//! version it produced.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;

use super::{column, Store, StoreError};

/// Longest page [`Store::audit_log`] returns.
pub const MAX_AUDIT_PAGE: u32 = 1_000;

/// One change as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, utoipa::ToSchema)]
pub struct AuditRecord {
    pub id: i64,
    pub at: DateTime<Utc>,
    /// The admin token that made the change.
    pub actor: String,
    /// `<resource>.<create|update|delete>`, `adaptive_routing_policy.update`.
    pub action: String,
    /// The row's key.
    pub subject: String,
    /// `before` / `after`, the rows' public forms (no secret).
    pub details: serde_json::Value,
    /// The configuration version the change produced.
    pub version: Option<u64>,
}

/// A change a write made, recorded when the write commits.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Change {
    pub action: String,
    pub subject: String,
    pub details: serde_json::Value,
}

pub(super) async fn insert(
    conn: &mut PgConnection,
    actor: &str,
    version: i64,
    change: &Change,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO audit_log (actor, action, subject, details, version) \
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(actor)
    .bind(&change.action)
    .bind(&change.subject)
    .bind(&change.details)
    .bind(version)
    .execute(&mut *conn)
    .await
    .map_err(StoreError::database(format!(
        "auditing {} `{}`",
        change.action, change.subject
    )))?;
    Ok(())
}

impl Store {
    /// The newest `limit` changes (at most [`MAX_AUDIT_PAGE`]), newest
    /// first.
    pub async fn audit_log(&self, limit: u32) -> Result<Vec<AuditRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, at, actor, action, subject, details, version FROM audit_log \
             ORDER BY id DESC LIMIT $1",
        )
        .bind(i64::from(limit.min(MAX_AUDIT_PAGE)))
        .fetch_all(&self.pool)
        .await
        .map_err(StoreError::database("reading the audit log"))?;
        rows.iter()
            .map(|row| {
                let table = "audit_log";
                let version: Option<i64> = column(row, "version", table)?;
                Ok(AuditRecord {
                    id: column(row, "id", table)?,
                    at: column(row, "at", table)?,
                    actor: column(row, "actor", table)?,
                    action: column(row, "action", table)?,
                    subject: column(row, "subject", table)?,
                    details: column(row, "details", table)?,
                    version: version.and_then(|v| u64::try_from(v).ok()),
                })
            })
            .collect()
    }
}
