//! `[[api_keys]]` and `[[admin_tokens]]`: callers, stored as SHA-256
//! digests only. A key's `rpm` and `max_concurrent` are any `u32`, 0
//! meaning unlimited; TOML's type check refuses the rest.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use super::super::file;
use super::super::{AdminRole, AdminToken, ApiKey};
use super::providers::{known_providers, resolve_provider, ProviderEntry};
use super::Validator;

/// The message for an `api_keys.models` entry that is neither a route's
/// model nor a group's slug.
fn unknown_model(model: &str, route_models: &[String], group_slugs: &[String]) -> String {
    // "<group>/<model>": the group is allowed as a whole, by its slug.
    if let Some(group) = group_slugs.iter().find(|slug| {
        model
            .strip_prefix(slug.as_str())
            .is_some_and(|rest| rest.starts_with('/'))
    }) {
        return format!(
            "unknown model {model:?}: a key allows a provider group as a whole; name its slug {group:?}"
        );
    }
    let known = match (route_models.is_empty(), group_slugs.is_empty()) {
        (true, true) => "no routes or provider groups are configured".to_owned(),
        (false, true) => format!("known: {}", route_models.join(", ")),
        (true, false) => format!("known groups: {}", group_slugs.join(", ")),
        (false, false) => format!(
            "known: {}; groups: {}",
            route_models.join(", "),
            group_slugs.join(", ")
        ),
    };
    format!("unknown model {model:?}: not a route's model nor a provider group's slug ({known})")
}

impl Validator<'_> {
    /// The digest of a key or token given either through `{what}_env` or
    /// `{what}_sha256`, exactly one of them.
    fn digest(
        &mut self,
        table: &str,
        what: &str,
        from_env: Option<String>,
        sha256: Option<String>,
    ) -> Option<[u8; 32]> {
        match (from_env, sha256) {
            (Some(_), Some(_)) => {
                self.error(
                    table,
                    format!("set exactly one of {what}_env and {what}_sha256, not both"),
                );
                None
            }
            (None, None) => {
                self.error(table, format!("set one of {what}_env or {what}_sha256"));
                None
            }
            (Some(var), None) => {
                let secret = self.secret(&format!("{table}.{what}_env"), &var)?;
                Some(Sha256::digest(secret.as_bytes()).into())
            }
            (None, Some(hex_digest)) => {
                let mut digest = [0u8; 32];
                if hex::decode_to_slice(hex_digest.trim(), &mut digest).is_ok() {
                    Some(digest)
                } else {
                    self.error(
                        format!("{table}.{what}_sha256"),
                        format!(
                            "must be 64 hexadecimal digits (the SHA-256 of the {what}); got {} characters{}",
                            hex_digest.chars().count(),
                            if hex_digest.chars().all(|c| c.is_ascii_hexdigit()) { "" } else { ", not all hexadecimal" }
                        ),
                    );
                    None
                }
            }
        }
    }

    pub(super) fn api_keys(
        &mut self,
        tables: Vec<file::ApiKeyTable>,
        route_models: &[String],
        group_slugs: &[String],
        providers: &[ProviderEntry],
    ) -> Vec<ApiKey> {
        let mut keys: Vec<ApiKey> = Vec::with_capacity(tables.len());
        let mut names: HashMap<String, usize> = HashMap::new();
        let mut digests: HashMap<[u8; 32], usize> = HashMap::new();
        for (i, table) in tables.into_iter().enumerate() {
            let here = format!("api_keys[{i}]");
            let errors_before = self.errors.len();

            let name = self.required(&format!("{here}.name"), table.name);
            if let Some(name) = &name {
                if let Some(j) = names.get(name) {
                    self.error(
                        format!("{here}.name"),
                        format!("name {name:?} is already used by api_keys[{j}]"),
                    );
                } else {
                    names.insert(name.clone(), i);
                }
            }

            let env_given = table.key_env.is_some();
            let sha256 = self.digest(&here, "key", table.key_env, table.key_sha256);
            if let Some(digest) = sha256 {
                if let Some(j) = digests.get(&digest) {
                    let field = if env_given { "key_env" } else { "key_sha256" };
                    self.error(
                        format!("{here}.{field}"),
                        format!("the same key as api_keys[{j}]; every caller needs its own key"),
                    );
                } else {
                    digests.insert(digest, i);
                }
            }

            for (k, model) in table.models.iter().enumerate() {
                // Checked against every route and group written, valid or
                // not: a failed one has its own error already.
                if !route_models.contains(model) && !group_slugs.contains(model) {
                    self.error(
                        format!("{here}.models[{k}]"),
                        unknown_model(model, route_models, group_slugs),
                    );
                }
            }

            let mut allowed_providers = Vec::with_capacity(table.providers.len());
            for (k, wanted) in table.providers.iter().enumerate() {
                match resolve_provider(providers, wanted) {
                    Some(slug) => allowed_providers.push(slug.to_owned()),
                    None => self.error(
                        format!("{here}.providers[{k}]"),
                        format!(
                            "unknown provider {wanted:?} ({})",
                            known_providers(providers)
                        ),
                    ),
                }
            }

            if let (Some(name), Some(sha256)) = (name, sha256) {
                if self.errors.len() == errors_before {
                    keys.push(ApiKey {
                        name,
                        sha256,
                        models: table.models,
                        providers: allowed_providers,
                        rpm: table.rpm.unwrap_or(file::DEFAULT_RPM),
                        max_concurrent: table
                            .max_concurrent
                            .unwrap_or(file::DEFAULT_MAX_CONCURRENT),
                    });
                }
            }
        }
        keys
    }

    pub(super) fn admin_tokens(&mut self, tables: Vec<file::AdminTokenTable>) -> Vec<AdminToken> {
        let mut tokens: Vec<AdminToken> = Vec::with_capacity(tables.len());
        let mut names: HashMap<String, usize> = HashMap::new();
        let mut digests: HashMap<[u8; 32], usize> = HashMap::new();
        for (i, table) in tables.into_iter().enumerate() {
            let here = format!("admin_tokens[{i}]");
            let errors_before = self.errors.len();

            let name = self.required(&format!("{here}.name"), table.name);
            if let Some(name) = &name {
                if let Some(j) = names.get(name) {
                    self.error(
                        format!("{here}.name"),
                        format!("name {name:?} is already used by admin_tokens[{j}]"),
                    );
                } else {
                    names.insert(name.clone(), i);
                }
            }

            let env_given = table.token_env.is_some();
            let sha256 = self.digest(&here, "token", table.token_env, table.token_sha256);
            if let Some(digest) = sha256 {
                if let Some(j) = digests.get(&digest) {
                    let field = if env_given {
                        "token_env"
                    } else {
                        "token_sha256"
                    };
                    self.error(
                        format!("{here}.{field}"),
                        format!(
                            "the same token as admin_tokens[{j}]; a token must identify one caller"
                        ),
                    );
                } else {
                    digests.insert(digest, i);
                }
            }

            let role = match table.role.as_deref().unwrap_or(file::DEFAULT_ADMIN_ROLE) {
                "viewer" => Some(AdminRole::Viewer),
                "admin" => Some(AdminRole::Admin),
                "superadmin" => Some(AdminRole::Superadmin),
                other => {
                    self.error(
                        format!("{here}.role"),
                        format!("unknown role {other:?} (known: viewer, admin, superadmin)"),
                    );
                    None
                }
            };

            if let (Some(name), Some(sha256), Some(role)) = (name, sha256, role) {
                if self.errors.len() == errors_before {
                    tokens.push(AdminToken { name, sha256, role });
                }
            }
        }
        tokens
    }
}
