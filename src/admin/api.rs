//! The control API: CRUD over the configuration a control node keeps in
//! PostgreSQL, as plain functions the admin app routes `/api/v1/` to
//! ([`handle`]).
//!
//! Collections, each `GET` (list), `GET /{key}`, `POST` (create), `PUT
//! /{key}` (replace) and `DELETE /{key}`, with bodies of the rolter.toml
//! table types as JSON (unknown fields refused):
//!
//! | path | key | read | write |
//! |---|---|---|---|
//! | `/api/v1/providers` | slug | viewer | admin |
//! | `/api/v1/routes` | model | viewer | admin |
//! | `/api/v1/provider-groups` | slug | viewer | admin |
//! | `/api/v1/catalog` | model | viewer | admin |
//! | `/api/v1/api-keys` | name | viewer | admin |
//! | `/api/v1/admin-tokens` | name | superadmin | superadmin |
//!
//! plus `GET /api/v1/audit-log?limit=N` (viewer) and `GET`/`PUT
//! /api/v1/adaptive-routing-policy` (superadmin). Standalone and gateway
//! nodes answer the first four collections read-only from their running
//! configuration, in the same shape (`running.rs`).
//!
//! A key is the rest of the path, percent-decoded, so `org/model` works
//! raw. Creating an API key or admin token generates its secret
//! (`rk-…`/`rt-…`) and answers it once as `key`/`token`; nothing else ever
//! shows a secret or its digest (the public `key_id`/`token_id` names it).
//!
//! A list shows the rows rolter.toml defines first, then the database's,
//! and names the file's in `file_managed`; `GET /{key}` answers either.
//! Only the database's can be written.
//!
//! Validation is `rolter check`'s: a write is applied to the current
//! document, the [`ApiContext::validator`] judges the result (it adds the
//! control node's file-managed rows), and a refusal is a 422 listing the
//! validator's messages with their field paths. Rows that rolter.toml
//! defines are read-only here (409). Every accepted write bumps the
//! configuration version once and is audited with the caller's token name;
//! a refused one changes nothing (see `resources.rs`).
//!
//! Errors are `{"error": {"message", "type", "code"}}` (`response.rs`).

mod path;
pub(crate) use path::percent_decode;
pub(crate) use resources::parse_body;
pub use response::{to_json, ErrorBody, ErrorDetail, Listing, Problem, RowAnswer, Written};
pub mod policy;
mod resources;
mod response;
pub mod running;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use http::{Method, StatusCode};

use crate::config::file::ConfigFile;
use crate::config::{AdminRole, Config, ConfigErrors};
use crate::control::store::{
    AdminTokens, ApiKeys, Catalog, ProviderGroups, Providers, Resource, ResourceKind, Routes,
    Store, MAX_AUDIT_PAGE,
};

pub use response::ApiResponse;

/// The prefix [`handle`] serves.
pub const API_PREFIX: &str = "/api/v1/";

/// Entries `GET /api/v1/audit-log` returns without `?limit=`.
pub const DEFAULT_AUDIT_PAGE: u32 = 100;

/// Judges a candidate database document as `rolter check` would judge the
/// whole configuration: the control node merges its file-managed rows in
/// and calls [`crate::config::parse_document`].
pub type Validator = Arc<dyn Fn(&ConfigFile) -> Result<Config, ConfigErrors> + Send + Sync>;

/// What the control API works with.
pub struct ApiContext {
    pub store: Store,
    pub validator: Validator,
    /// Keys of the rows rolter.toml defines: read-only here.
    pub file_managed: FileManaged,
}

impl ApiContext {
    pub fn new(
        store: Store,
        validator: impl Fn(&ConfigFile) -> Result<Config, ConfigErrors> + Send + Sync + 'static,
        file_managed: FileManaged,
    ) -> ApiContext {
        ApiContext {
            store,
            validator: Arc::new(validator),
            file_managed,
        }
    }
}

/// An authenticated caller of the control API: its admin token's name
/// (the audit log's actor) and role.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    pub role: AdminRole,
}

/// The rows rolter.toml defines, per collection: their keys, and their
/// public form (key set, no secret) for the lists, which show them first
/// and name them in `file_managed`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileManaged {
    keys: BTreeMap<ResourceKind, BTreeSet<String>>,
    rows: BTreeMap<ResourceKind, Vec<(String, serde_json::Value)>>,
}

impl FileManaged {
    /// The rows of `file`, keyed as the store keys them (a provider or
    /// group without a slug by the slug of its name); rows without a key
    /// are left out (validation refuses them anyway).
    pub fn of(file: &ConfigFile) -> FileManaged {
        fn keys<R: Resource>(file: &ConfigFile, managed: &mut FileManaged) {
            for row in R::rows(file) {
                if let Some(key) = R::key(row) {
                    let mut keyed = row.clone();
                    R::set_key(&mut keyed, &key);
                    managed
                        .rows
                        .entry(R::KIND)
                        .or_default()
                        .push((key.clone(), R::public(&keyed)));
                    managed.insert(R::KIND, key);
                }
            }
        }
        let mut managed = FileManaged::default();
        keys::<Providers>(file, &mut managed);
        keys::<Routes>(file, &mut managed);
        keys::<ProviderGroups>(file, &mut managed);
        keys::<Catalog>(file, &mut managed);
        keys::<ApiKeys>(file, &mut managed);
        keys::<AdminTokens>(file, &mut managed);
        managed
    }

    pub fn insert(&mut self, kind: ResourceKind, key: impl Into<String>) {
        self.keys.entry(kind).or_default().insert(key.into());
    }

    pub fn contains(&self, kind: ResourceKind, key: &str) -> bool {
        self.keys.get(&kind).is_some_and(|keys| keys.contains(key))
    }

    /// The public rows of one collection, in file order.
    pub fn rows(&self, kind: ResourceKind) -> impl Iterator<Item = &serde_json::Value> {
        self.rows
            .get(&kind)
            .into_iter()
            .flatten()
            .map(|(_, row)| row)
    }

    /// The public row `key` of one collection.
    pub fn row(&self, kind: ResourceKind, key: &str) -> Option<&serde_json::Value> {
        self.rows
            .get(&kind)?
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, row)| row)
    }

    /// The keys of one collection, sorted.
    pub fn names(&self, kind: ResourceKind) -> impl Iterator<Item = &str> {
        self.keys
            .get(&kind)
            .into_iter()
            .flatten()
            .map(String::as_str)
    }
}

/// One control-API request, as the admin listener received it.
pub struct ApiRequest<'a> {
    pub method: &'a Method,
    /// The URI path, starting with [`API_PREFIX`].
    pub path: &'a str,
    /// The query string, if any.
    pub query: Option<&'a str>,
    /// The authenticated admin token; `None`: there was none, or it is
    /// unknown (401).
    pub caller: Option<&'a Caller>,
    pub body: &'a [u8],
}

/// Answers one control-API request.
pub async fn handle(ctx: &ApiContext, request: &ApiRequest<'_>) -> ApiResponse {
    let ApiRequest {
        method,
        path,
        query,
        caller,
        body,
    } = *request;
    let Some(caller) = caller else {
        return ApiResponse::unauthorized(
            "an admin token is required: send `Authorization: Bearer <token>`",
        );
    };
    let Some(rest) = path.strip_prefix(API_PREFIX) else {
        return response::not_found(&format!("no control API endpoint at {path}"));
    };
    let (collection, key) = match path::split(rest) {
        Ok(split) => split,
        Err(message) => return response::bad_request(&message),
    };
    let key = key.as_deref();
    match collection {
        "providers" => {
            resources::collection::<Providers>(ctx, method, path, key, caller, body).await
        }
        "routes" => resources::collection::<Routes>(ctx, method, path, key, caller, body).await,
        "provider-groups" => {
            resources::collection::<ProviderGroups>(ctx, method, path, key, caller, body).await
        }
        "catalog" => resources::collection::<Catalog>(ctx, method, path, key, caller, body).await,
        "api-keys" => resources::collection::<ApiKeys>(ctx, method, path, key, caller, body).await,
        "admin-tokens" => {
            resources::collection::<AdminTokens>(ctx, method, path, key, caller, body).await
        }
        "adaptive-routing-policy" if key.is_none() => {
            policy::endpoint(ctx, method, path, caller, body).await
        }
        "audit-log" if key.is_none() => audit_log(ctx, method, path, query, caller).await,
        _ => response::not_found(&format!("no control API endpoint at {path}")),
    }
}

/// `Err(403)` unless `caller` has `needed` or above.
fn require(caller: &Caller, needed: AdminRole) -> Result<(), ApiResponse> {
    if caller.role >= needed {
        return Ok(());
    }
    Err(response::forbidden(&format!(
        "admin token `{}` has role {}; this needs {} or above",
        caller.name,
        caller.role.as_str(),
        needed.as_str()
    )))
}

/// `GET /api/v1/audit-log?limit=N`: the newest changes first.
async fn audit_log(
    ctx: &ApiContext,
    method: &Method,
    path: &str,
    query: Option<&str>,
    caller: &Caller,
) -> ApiResponse {
    if let Err(refusal) = require(caller, AdminRole::Viewer) {
        return refusal;
    }
    if *method != Method::GET {
        return response::method_not_allowed(method, path);
    }
    let limit = match path::query_param(query, "limit") {
        None => DEFAULT_AUDIT_PAGE,
        Some(limit) => match limit.parse::<u32>() {
            Ok(limit) if (1..=MAX_AUDIT_PAGE).contains(&limit) => limit,
            _ => {
                return response::bad_request(&format!(
                    "limit must be a whole number from 1 to {MAX_AUDIT_PAGE}, not `{limit}`"
                ))
            }
        },
    };
    match ctx.store.audit_log(limit).await {
        Ok(records) => ApiResponse::json(StatusCode::OK, to_json(&RowAnswer { data: records })),
        Err(error) => response::store_error(error),
    }
}
