//! The CRUD collections: one generic handler per method, parameterized by
//! the store's [`Resource`] and what differs per collection here (the roles
//! it needs, and, for API keys and admin tokens, the secret rolter
//! generates).
//!
//! A write runs in one store transaction that holds the version lock:
//! read the current database document, apply the change to a copy,
//! validate the copy (the validator adds the file-managed rows, as `rolter
//! check` would see the whole), then write the row and commit, which bumps
//! the version and audits the change. Anything refused before the commit
//! rolls back, so a refused write leaves neither a row, a version bump nor
//! an audit row.

use http::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::response::{
    bad_request, file_managed, invalid_configuration, method_not_allowed, not_found, problem,
    store_error, to_json, unprocessable, ApiResponse, Listing, RowAnswer, Written,
};
use super::{require, ApiContext, Caller};
use crate::config::file::{AdminTokenTable, ApiKeyTable};
use crate::config::{self, AdminRole, Config, ConfigErrors};
use crate::control::store::{
    AdminTokens, ApiKeys, Catalog, ConfigWrite, ProviderGroups, Providers, Resource, Routes,
    StoreError,
};

/// A secret rolter generated for a new row.
pub(super) enum Secret {
    /// An API key, answered as `key`.
    Key(String),
    /// An admin token, answered as `token`.
    Token(String),
}

/// A collection of the control API.
pub(super) trait Endpoint: Resource<Row: DeserializeOwned> {
    /// The role that may read the collection.
    const READ: AdminRole = AdminRole::Viewer;
    /// The role that may change it.
    const WRITE: AdminRole = AdminRole::Admin;

    /// The secret field a request body wrote, which only rolter may set.
    fn secret_written(_row: &Self::Row) -> Option<&'static str> {
        None
    }

    /// Gives a new row its generated secret; returns it, to be shown this
    /// once.
    fn issue_secret(_row: &mut Self::Row) -> Option<Secret> {
        None
    }

    /// Gives a replacement row the secret of the row it replaces.
    fn keep_secret(_row: &mut Self::Row, _stored: &Self::Row) {}
}

impl Endpoint for Providers {}
impl Endpoint for Routes {}
impl Endpoint for ProviderGroups {}
impl Endpoint for Catalog {}

impl Endpoint for ApiKeys {
    fn secret_written(row: &ApiKeyTable) -> Option<&'static str> {
        if row.key_env.is_some() {
            Some("key_env")
        } else if row.key_sha256.is_some() {
            Some("key_sha256")
        } else if row.key_salted.is_some() {
            Some("key_salted")
        } else {
            None
        }
    }

    fn issue_secret(row: &mut ApiKeyTable) -> Option<Secret> {
        let (key, digest) = config::new_secret(config::API_KEY_PREFIX);
        row.set_digest(&digest);
        Some(Secret::Key(key))
    }

    fn keep_secret(row: &mut ApiKeyTable, stored: &ApiKeyTable) {
        row.key_env = None;
        row.key_sha256 = None;
        row.key_salted = stored.key_salted.clone();
    }
}

/// Admin tokens grant the control API itself: superadmin only, reading
/// included.
impl Endpoint for AdminTokens {
    const READ: AdminRole = AdminRole::Superadmin;
    const WRITE: AdminRole = AdminRole::Superadmin;

    fn secret_written(row: &AdminTokenTable) -> Option<&'static str> {
        if row.token_env.is_some() {
            Some("token_env")
        } else if row.token_sha256.is_some() {
            Some("token_sha256")
        } else if row.token_salted.is_some() {
            Some("token_salted")
        } else {
            None
        }
    }

    fn issue_secret(row: &mut AdminTokenTable) -> Option<Secret> {
        let (token, digest) = config::new_secret(config::ADMIN_TOKEN_PREFIX);
        row.set_digest(&digest);
        Some(Secret::Token(token))
    }

    fn keep_secret(row: &mut AdminTokenTable, stored: &AdminTokenTable) {
        row.token_env = None;
        row.token_sha256 = None;
        row.token_salted = stored.token_salted.clone();
    }
}

/// Routes one request on the collection `R`.
pub(super) async fn collection<R: Endpoint>(
    ctx: &ApiContext,
    method: &Method,
    path: &str,
    key: Option<&str>,
    caller: &Caller,
    body: &[u8],
) -> ApiResponse {
    let needed = if *method == Method::GET {
        R::READ
    } else {
        R::WRITE
    };
    if let Err(refusal) = require(caller, needed) {
        return refusal;
    }
    let result = match (method, key) {
        (&Method::GET, None) => list::<R>(ctx).await,
        (&Method::GET, Some(key)) => get::<R>(ctx, key).await,
        (&Method::POST, None) => create::<R>(ctx, caller, body).await,
        (&Method::PUT, Some(key)) => update::<R>(ctx, caller, key, body).await,
        (&Method::DELETE, Some(key)) => delete::<R>(ctx, caller, key).await,
        _ => Err(method_not_allowed(method, path)),
    };
    result.unwrap_or_else(|refusal| refusal)
}

type Answer = Result<ApiResponse, ApiResponse>;

async fn list<R: Endpoint>(ctx: &ApiContext) -> Answer {
    let rows = ctx.store.list::<R>().await.map_err(store_error)?;
    let file_managed: Vec<&str> = ctx.file_managed.names(R::KIND).collect();
    let file_rows = ctx.file_managed.rows(R::KIND).cloned();
    Ok(ApiResponse::json(
        StatusCode::OK,
        list_body(file_rows.chain(rows.iter().map(R::public)), &file_managed),
    ))
}

/// A collection's list: the public rows, and the keys of the rows
/// rolter.toml defines. Also the shape a standalone or gateway node answers
/// from its running configuration (`running.rs`).
pub(super) fn list_body(
    public_rows: impl IntoIterator<Item = Value>,
    file_managed: &[impl AsRef<str>],
) -> Value {
    to_json(&Listing {
        data: public_rows.into_iter().collect(),
        file_managed: file_managed.iter().map(|k| k.as_ref().to_owned()).collect(),
    })
}

async fn get<R: Endpoint>(ctx: &ApiContext, key: &str) -> Answer {
    match ctx.store.get::<R>(key).await {
        Ok(row) => Ok(ApiResponse::json(
            StatusCode::OK,
            to_json(&RowAnswer {
                data: R::public(&row),
            }),
        )),
        Err(StoreError::NotFound { .. }) if ctx.file_managed.contains(R::KIND, key) => {
            match ctx.file_managed.row(R::KIND, key) {
                Some(row) => Ok(ApiResponse::json(
                    StatusCode::OK,
                    to_json(&RowAnswer { data: row }),
                )),
                None => Err(not_found(&format!(
                    "the {} `{key}` is managed in rolter.toml",
                    R::KIND.noun()
                ))),
            }
        }
        Err(error) => Err(store_error(error)),
    }
}

async fn create<R: Endpoint>(ctx: &ApiContext, caller: &Caller, body: &[u8]) -> Answer {
    let mut row: R::Row = parse_body(body)?;
    refuse_secret::<R>(&row)?;
    let Some(key) = R::key(&row) else {
        return Err(unprocessable(R::KIND.key_field(), "required"));
    };
    if ctx.file_managed.contains(R::KIND, &key) {
        return Err(file_managed(R::KIND.noun(), &key));
    }
    R::set_key(&mut row, &key);
    let secret = R::issue_secret(&mut row);

    let mut write = begin(ctx, caller).await?;
    if write.get::<R>(&key).await.map_err(store_error)?.is_some() {
        return Err(ApiResponse::error(
            StatusCode::CONFLICT,
            "conflict_error",
            "already_exists",
            &format!("the {} `{key}` already exists", R::KIND.noun()),
        ));
    }
    let mut candidate = write.document().await.map_err(store_error)?;
    R::rows_mut(&mut candidate).push(row.clone());
    let config = validate(ctx, candidate).await?;
    let stored = write.create::<R>(&row).await.map_err(store_error)?;
    let version = write.commit().await.map_err(store_error)?;

    let mut answer = written::<R>(&stored, version, &config);
    match secret {
        Some(Secret::Key(key)) => answer.key = Some(key),
        Some(Secret::Token(token)) => answer.token = Some(token),
        None => {}
    }
    Ok(ApiResponse::json(StatusCode::CREATED, to_json(&answer)))
}

async fn update<R: Endpoint>(ctx: &ApiContext, caller: &Caller, key: &str, body: &[u8]) -> Answer {
    let mut row: R::Row = parse_body(body)?;
    refuse_secret::<R>(&row)?;
    if ctx.file_managed.contains(R::KIND, key) {
        return Err(file_managed(R::KIND.noun(), key));
    }
    if let Some(written) = R::key_written(&row).filter(|written| *written != key) {
        return Err(unprocessable(
            R::KIND.key_field(),
            &format!(
                "`{written}` differs from `{key}` in the path; a {} cannot be renamed: create the new one and delete this one",
                R::KIND.noun()
            ),
        ));
    }
    R::set_key(&mut row, key);

    let mut write = begin(ctx, caller).await?;
    let stored = write
        .get::<R>(key)
        .await
        .map_err(store_error)?
        .ok_or_else(|| not_found(&format!("the {} `{key}` does not exist", R::KIND.noun())))?;
    R::keep_secret(&mut row, &stored);
    let mut candidate = write.document().await.map_err(store_error)?;
    for existing in R::rows_mut(&mut candidate) {
        if R::key(existing).as_deref() == Some(key) {
            *existing = row.clone();
        }
    }
    let config = validate(ctx, candidate).await?;
    let stored = write.update::<R>(key, &row).await.map_err(store_error)?;
    let version = write.commit().await.map_err(store_error)?;
    Ok(ApiResponse::json(
        StatusCode::OK,
        to_json(&written::<R>(&stored, version, &config)),
    ))
}

async fn delete<R: Endpoint>(ctx: &ApiContext, caller: &Caller, key: &str) -> Answer {
    if ctx.file_managed.contains(R::KIND, key) {
        return Err(file_managed(R::KIND.noun(), key));
    }
    let mut write = begin(ctx, caller).await?;
    if write.get::<R>(key).await.map_err(store_error)?.is_none() {
        return Err(not_found(&format!(
            "the {} `{key}` does not exist",
            R::KIND.noun()
        )));
    }
    let mut candidate = write.document().await.map_err(store_error)?;
    R::rows_mut(&mut candidate).retain(|existing| R::key(existing).as_deref() != Some(key));
    let config = validate(ctx, candidate).await?;
    let deleted = write.delete::<R>(key).await.map_err(store_error)?;
    let version = write.commit().await.map_err(store_error)?;
    Ok(ApiResponse::json(
        StatusCode::OK,
        to_json(&written::<R>(&deleted, version, &config)),
    ))
}

/// The public row, the version, and the configuration's warnings.
fn written<R: Endpoint>(row: &R::Row, version: u64, config: &Config) -> Written<Value> {
    Written {
        data: R::public(row),
        version,
        warnings: config.warnings.iter().map(problem).collect(),
        key: None,
        token: None,
    }
}

/// A JSON body of the file type: unknown fields are refused (the file
/// types deny them), with serde's message. PostgreSQL's text holds no NUL
/// character, so a string with one is refused here, by its place in the
/// body, before any query could fail on it.
pub(crate) fn parse_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiResponse> {
    let invalid = |e: serde_json::Error| {
        bad_request(&format!("the request body is not a valid object here: {e}"))
    };
    // JSON writes a NUL only as the escape `\u0000`: without one in the
    // bytes, no walk over the values is needed.
    if body.windows(6).any(|w| w == b"\\u0000") {
        let value: Value = serde_json::from_slice(body).map_err(invalid)?;
        if let Some(at) = nul_at(&value, String::new()) {
            return Err(bad_request(&format!(
                "`{at}` contains a NUL character (\\u0000), which no stored text may hold"
            )));
        }
    }
    serde_json::from_slice(body).map_err(invalid)
}

/// Where in `value` the first string (or object key) with a NUL is, as a
/// dotted path from the body (`body` itself for a bare string).
fn nul_at(value: &Value, at: String) -> Option<String> {
    let place = |at: &str, next: &str| {
        if at.is_empty() {
            next.to_owned()
        } else {
            format!("{at}.{next}")
        }
    };
    match value {
        Value::String(text) if text.contains('\0') => {
            Some(if at.is_empty() { "body".to_owned() } else { at })
        }
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| nul_at(item, format!("{at}[{i}]"))),
        Value::Object(fields) => fields.iter().find_map(|(key, item)| {
            if key.contains('\0') {
                Some(place(&at, &key.replace('\0', "\\u0000")))
            } else {
                nul_at(item, place(&at, key))
            }
        }),
        _ => None,
    }
}

fn refuse_secret<R: Endpoint>(row: &R::Row) -> Result<(), ApiResponse> {
    match R::secret_written(row) {
        Some(field) => Err(bad_request(&format!(
            "`{field}` cannot be set through the control API: rolter generates the {}'s secret and returns it once, on creation",
            R::KIND.noun()
        ))),
        None => Ok(()),
    }
}

pub(super) async fn begin(ctx: &ApiContext, caller: &Caller) -> Result<ConfigWrite, ApiResponse> {
    ctx.store
        .begin_write(&caller.name)
        .await
        .map_err(store_error)
}

/// Runs the validator off the async workers (it may read files: CA
/// bundles, certificates); 422 with its messages when the document fails.
pub(super) async fn validate(
    ctx: &ApiContext,
    candidate: crate::config::file::ConfigFile,
) -> Result<Config, ApiResponse> {
    let validator = std::sync::Arc::clone(&ctx.validator);
    let outcome: Result<Result<Config, ConfigErrors>, _> =
        tokio::task::spawn_blocking(move || validator(&candidate)).await;
    match outcome {
        Ok(Ok(config)) => Ok(config),
        Ok(Err(errors)) => Err(invalid_configuration(&errors)),
        Err(e) => {
            log::error!("control API: the validator failed: {e}");
            Err(ApiResponse::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "validator_failed",
                "validating the configuration failed",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::file::ProviderGroupTable;

    fn refusal(body: &str) -> String {
        let refused = parse_body::<ProviderGroupTable>(body.as_bytes()).unwrap_err();
        assert_eq!(refused.status, StatusCode::BAD_REQUEST);
        refused.body.to_string()
    }

    #[test]
    fn a_nul_anywhere_in_the_body_is_refused_by_its_place() {
        assert!(refusal(r#"{"slug": "a\u0000b"}"#).contains("`slug` contains a NUL"));
        assert!(
            refusal(r#"{"members": [{"provider": "x"}, {"provider": "\u0000"}]}"#)
                .contains("`members[1].provider` contains a NUL")
        );
        assert!(refusal(r#"{"a\u0000": 1}"#).contains("NUL"));
        let group: ProviderGroupTable = parse_body(br#"{"slug": "fleet"}"#).unwrap();
        assert_eq!(group.slug.as_deref(), Some("fleet"));
    }
}
