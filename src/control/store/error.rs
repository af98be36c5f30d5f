//! What a store operation can fail with. Each error names its subject (which
//! resource, which key, which field) and keeps the database error it came
//! from, so the control API can map it to a status without guessing.

use super::ResourceKind;

/// A failed store operation.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The row does not exist.
    #[error("{kind} `{key}` does not exist", kind = .kind.noun())]
    NotFound { kind: ResourceKind, key: String },
    /// A unique column already holds the value: `field` names it (`slug`,
    /// `name`, `key_id`, ...).
    #[error("{kind} `{key}`: another {kind} already has this {field}", kind = .kind.noun())]
    Conflict {
        kind: ResourceKind,
        key: String,
        field: &'static str,
    },
    /// The row cannot be stored as given: a required field is missing or a
    /// value does not fit its column. The control API validates before it
    /// writes, so it meets this only for what validation lets through.
    #[error("{kind} `{key}`: {field}: {message}", kind = .kind.noun())]
    Invalid {
        kind: ResourceKind,
        key: String,
        field: &'static str,
        message: String,
    },
    /// The adaptive-routing policy cannot be stored as given.
    #[error("adaptive_routing.{field}: {message}")]
    InvalidPolicy {
        field: &'static str,
        message: String,
    },
    /// A stored value that no write of ours produces (edited by hand, or a
    /// newer schema).
    #[error("corrupt row: {context}: {message}")]
    Corrupt { context: String, message: String },
    /// The database failed; `context` says what we were doing.
    #[error("{context}: {source}")]
    Database {
        context: String,
        #[source]
        source: sqlx::Error,
    },
    /// Applying the migrations failed.
    #[error("applying the migrations failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

impl StoreError {
    /// A database error while doing `context`.
    pub(crate) fn database(context: impl Into<String>) -> impl FnOnce(sqlx::Error) -> StoreError {
        let context = context.into();
        move |source| StoreError::Database { context, source }
    }
}

/// PostgreSQL's SQLSTATE for a unique violation.
const UNIQUE_VIOLATION: &str = "23505";
/// PostgreSQL's SQLSTATE for a CHECK violation.
const CHECK_VIOLATION: &str = "23514";

/// Maps a failed write of `kind`/`key` to a typed error: a unique violation
/// becomes [`StoreError::Conflict`] naming the column of the constraint
/// (constraints are named in `migrations/`), a CHECK violation
/// [`StoreError::Invalid`], anything else [`StoreError::Database`].
pub(crate) fn write_error(
    kind: ResourceKind,
    key: &str,
    context: &str,
) -> impl FnOnce(sqlx::Error) -> StoreError {
    let key = key.to_owned();
    let context = context.to_owned();
    move |source| {
        if let sqlx::Error::Database(db) = &source {
            let constraint = db.constraint().unwrap_or_default();
            match db.code().as_deref() {
                Some(UNIQUE_VIOLATION) => {
                    return StoreError::Conflict {
                        kind,
                        key,
                        field: unique_field(constraint, kind),
                    }
                }
                Some(CHECK_VIOLATION) => {
                    return StoreError::Invalid {
                        kind,
                        key,
                        field: "row",
                        message: format!("refused by the database check `{constraint}`"),
                    }
                }
                _ => {}
            }
        }
        StoreError::Database { context, source }
    }
}

/// The column a unique constraint of `migrations/` protects.
fn unique_field(constraint: &str, kind: ResourceKind) -> &'static str {
    match constraint {
        "providers_name_key" | "provider_groups_name_key" => "name",
        "api_keys_key_id_key" => "key_id",
        "admin_tokens_token_id_key" => "token_id",
        _ => kind.key_field(),
    }
}
