//! `api_keys` and `admin_tokens`: callers of the proxy and of the admin
//! API. The store keeps generated secrets only, in their salted form
//! (`key_salted` / `token_salted`: public id, salt, SHA-256 of salt || key);
//! a row with `key_env` or `key_sha256` belongs in rolter.toml and is
//! refused. The public form of a row ([`Resource::public`]) keeps the id
//! and drops the salt and the digest.

use async_trait::async_trait;
use serde::Serialize;
use sqlx::postgres::PgRow;

use super::resource::{from_bigint, PgQuery, Resource, ResourceKind};
use super::{column, StoreError};
use crate::config::file::{
    AdminTokenTable, ApiKeyTable, ConfigFile, SaltedDigestTable, DEFAULT_ADMIN_ROLE,
};

/// `[[api_keys]]`, keyed by name.
pub struct ApiKeys;

/// `[[admin_tokens]]`, keyed by name.
pub struct AdminTokens;

/// The three parts of a salted digest, all present.
struct Salted<'a> {
    id: &'a str,
    salt: &'a str,
    sha256: &'a str,
}

/// The salted digest of a row; the store keeps no other kind of secret.
fn salted<'a>(
    kind: ResourceKind,
    key: &str,
    field: &'static str,
    salted: &'a Option<SaltedDigestTable>,
    other_forms: bool,
) -> Result<Salted<'a>, StoreError> {
    let invalid = |message: &str| StoreError::Invalid {
        kind,
        key: key.to_owned(),
        field,
        message: message.to_owned(),
    };
    if other_forms {
        return Err(invalid(
            "the database keeps generated secrets only, as their salted digest; \
             a secret read from the environment or given as a bare SHA-256 belongs in rolter.toml",
        ));
    }
    let digest = salted.as_ref().ok_or_else(|| invalid("required"))?;
    match (&digest.id, &digest.salt, &digest.sha256) {
        (Some(id), Some(salt), Some(sha256)) => Ok(Salted { id, salt, sha256 }),
        _ => Err(invalid("needs id, salt and sha256")),
    }
}

fn salted_of(
    row: &PgRow,
    id: &str,
    hash: &str,
    table: &str,
) -> Result<SaltedDigestTable, StoreError> {
    Ok(SaltedDigestTable {
        id: Some(column(row, id, table)?),
        salt: Some(column(row, "salt", table)?),
        sha256: Some(column(row, hash, table)?),
    })
}

/// An API key as the control API shows it and the audit log records it:
/// never the key, nor a digest of it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ApiKeyView {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The public id of a key rolter generated (`rk-<id>-<secret>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_id: Option<String>,
    /// Public models this key may use; empty = all.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// Provider slugs this key may reach; empty = all.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub providers: Vec<String>,
    /// Requests per minute on each node; 0 = unlimited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rpm: Option<u32>,
    /// Tokens per minute on each node; 0 = unlimited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tpm: Option<u64>,
    /// Requests in flight at once on each node; 0 = unlimited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrent: Option<u32>,
    /// Flow control's priority band; negative = sheddable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
}

/// An admin token as the control API shows it: never the token, nor a
/// digest of it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AdminTokenView {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The public id of a token rolter generated (`rt-<id>-<secret>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_id: Option<String>,
    /// `viewer`, `admin` or `superadmin`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
}

fn id_of(salted: &Option<SaltedDigestTable>) -> Option<String> {
    salted.as_ref().and_then(|s| s.id.clone())
}

#[async_trait]
impl Resource for ApiKeys {
    type Row = ApiKeyTable;
    const KIND: ResourceKind = ResourceKind::ApiKey;
    const TABLE: &'static str = "api_keys";
    const COLUMNS: &'static [&'static str] = &[
        "key_id",
        "salt",
        "key_hash",
        "models",
        "providers",
        "rpm",
        "max_concurrent",
        "priority",
        "tpm",
    ];

    fn key_field(row: &ApiKeyTable) -> &Option<String> {
        &row.name
    }

    fn key_field_mut(row: &mut ApiKeyTable) -> &mut Option<String> {
        &mut row.name
    }

    fn rows(document: &ConfigFile) -> &Vec<ApiKeyTable> {
        &document.api_keys
    }

    fn rows_mut(document: &mut ConfigFile) -> &mut Vec<ApiKeyTable> {
        &mut document.api_keys
    }

    /// Name, limits and the key's public id ([`ApiKeyView`]).
    fn public(row: &ApiKeyTable) -> serde_json::Value {
        let view = ApiKeyView {
            name: row.name.clone(),
            key_id: id_of(&row.key_salted),
            models: row.models.clone(),
            providers: row.providers.clone(),
            rpm: row.rpm,
            tpm: row.tpm,
            max_concurrent: row.max_concurrent,
            priority: row.priority,
        };
        serde_json::to_value(view).unwrap_or_default()
    }

    fn from_row(row: &PgRow) -> Result<ApiKeyTable, StoreError> {
        api_key(row)
    }

    fn bind_columns<'q>(
        query: PgQuery<'q>,
        key: &str,
        row: &'q ApiKeyTable,
    ) -> Result<PgQuery<'q>, StoreError> {
        let digest = api_key_digest(key, row)?;
        Ok(query
            .bind(digest.id)
            .bind(digest.salt)
            .bind(digest.sha256)
            .bind(&row.models)
            .bind(&row.providers)
            .bind(row.rpm.map(i64::from))
            .bind(row.max_concurrent.map(i64::from))
            .bind(row.priority)
            // Validation keeps tpm within MAX_TPM, far inside a BIGINT.
            .bind(row.tpm.map(|tpm| i64::try_from(tpm).unwrap_or(i64::MAX))))
    }
}

fn api_key_digest<'a>(key: &str, row: &'a ApiKeyTable) -> Result<Salted<'a>, StoreError> {
    salted(
        ResourceKind::ApiKey,
        key,
        "key_salted",
        &row.key_salted,
        row.key_env.is_some() || row.key_sha256.is_some(),
    )
}

fn api_key(row: &PgRow) -> Result<ApiKeyTable, StoreError> {
    let table = "api_keys";
    let name: String = column(row, "name", table)?;
    Ok(ApiKeyTable {
        key_env: None,
        key_sha256: None,
        key_salted: Some(salted_of(row, "key_id", "key_hash", table)?),
        models: column(row, "models", table)?,
        providers: column(row, "providers", table)?,
        rpm: from_bigint(
            ResourceKind::ApiKey,
            &name,
            "rpm",
            column(row, "rpm", table)?,
        )?,
        max_concurrent: from_bigint(
            ResourceKind::ApiKey,
            &name,
            "max_concurrent",
            column(row, "max_concurrent", table)?,
        )?,
        tpm: from_bigint(
            ResourceKind::ApiKey,
            &name,
            "tpm",
            column(row, "tpm", table)?,
        )?,
        priority: column(row, "priority", table)?,
        name: Some(name),
    })
}

#[async_trait]
impl Resource for AdminTokens {
    type Row = AdminTokenTable;
    const KIND: ResourceKind = ResourceKind::AdminToken;
    const TABLE: &'static str = "admin_tokens";
    const COLUMNS: &'static [&'static str] = &["token_id", "salt", "token_hash", "role"];

    fn key_field(row: &AdminTokenTable) -> &Option<String> {
        &row.name
    }

    fn key_field_mut(row: &mut AdminTokenTable) -> &mut Option<String> {
        &mut row.name
    }

    fn rows(document: &ConfigFile) -> &Vec<AdminTokenTable> {
        &document.admin_tokens
    }

    fn rows_mut(document: &mut ConfigFile) -> &mut Vec<AdminTokenTable> {
        &mut document.admin_tokens
    }

    /// Name, role and the token's public id ([`AdminTokenView`]).
    fn public(row: &AdminTokenTable) -> serde_json::Value {
        let view = AdminTokenView {
            name: row.name.clone(),
            token_id: id_of(&row.token_salted),
            role: row.role.clone(),
        };
        serde_json::to_value(view).unwrap_or_default()
    }

    fn from_row(row: &PgRow) -> Result<AdminTokenTable, StoreError> {
        admin_token(row)
    }

    fn bind_columns<'q>(
        query: PgQuery<'q>,
        key: &str,
        row: &'q AdminTokenTable,
    ) -> Result<PgQuery<'q>, StoreError> {
        let digest = admin_token_digest(key, row)?;
        Ok(query
            .bind(digest.id)
            .bind(digest.salt)
            .bind(digest.sha256)
            .bind(row.role.as_deref().unwrap_or(DEFAULT_ADMIN_ROLE)))
    }
}

fn admin_token_digest<'a>(key: &str, row: &'a AdminTokenTable) -> Result<Salted<'a>, StoreError> {
    salted(
        ResourceKind::AdminToken,
        key,
        "token_salted",
        &row.token_salted,
        row.token_env.is_some() || row.token_sha256.is_some(),
    )
}

fn admin_token(row: &PgRow) -> Result<AdminTokenTable, StoreError> {
    let table = "admin_tokens";
    Ok(AdminTokenTable {
        name: Some(column(row, "name", table)?),
        token_env: None,
        token_sha256: None,
        token_salted: Some(salted_of(row, "token_id", "token_hash", table)?),
        role: Some(column(row, "role", table)?),
    })
}
