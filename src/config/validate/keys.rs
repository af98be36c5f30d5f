//! `[[api_keys]]` and `[[admin_tokens]]`: callers, stored as digests only
//! (`secret.rs`): a plain SHA-256 from `*_env` or `*_sha256`, or the salted
//! digest of a generated key from `*_salted`. Within one list no two plain
//! digests are equal and no two salted ones share an id (the id is how a
//! presented key finds its digest). A key's `rpm` and `max_concurrent` are
//! any `u32`, 0 meaning unlimited; TOML's type check refuses the rest.

use std::collections::HashMap;

use sha2::{Digest, Sha256};

use super::super::file;
use super::super::secret::is_secret_id;
use super::super::{
    AdminRole, AdminToken, ApiKey, SecretDigest, ADMIN_TOKEN_PREFIX, API_KEY_PREFIX, SALT_LEN,
    SECRET_ID_LEN,
};
use super::providers::ProviderEntry;
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

/// What a key or token is called in messages, and its fields' prefix.
#[derive(Clone, Copy)]
struct Secret {
    /// "key" | "token": `{what}_env`, `{what}_sha256`, `{what}_salted`.
    what: &'static str,
    /// The prefix of generated ones, for messages.
    prefix: &'static str,
}

const KEY: Secret = Secret {
    what: "key",
    prefix: API_KEY_PREFIX,
};
const TOKEN: Secret = Secret {
    what: "token",
    prefix: ADMIN_TOKEN_PREFIX,
};

/// The sources a table gives for its secret.
struct Sources {
    env: Option<String>,
    sha256: Option<String>,
    salted: Option<file::SaltedDigestTable>,
}

impl Sources {
    /// The field of the source given, for a duplicate's message.
    fn field(&self, secret: Secret) -> String {
        let what = secret.what;
        if self.env.is_some() {
            format!("{what}_env")
        } else if self.sha256.is_some() {
            format!("{what}_sha256")
        } else {
            format!("{what}_salted.id")
        }
    }
}

/// Tracks the secrets seen in one list, for duplicates.
#[derive(Default)]
struct Seen {
    digests: HashMap<[u8; 32], usize>,
    ids: HashMap<String, usize>,
}

impl Validator<'_> {
    /// `n` hex digits at `field` as bytes; an error naming the field
    /// otherwise. `what` says what they are.
    fn hex_field(
        &mut self,
        field: &str,
        written: Option<String>,
        n: usize,
        what: &str,
    ) -> Option<Vec<u8>> {
        let written = self.required(field, written)?;
        let trimmed = written.trim();
        match hex::decode(trimmed) {
            Ok(bytes) if bytes.len() * 2 == n => Some(bytes),
            _ => {
                self.error(
                    field,
                    format!(
                        "must be {n} hexadecimal digits ({what}); got {} characters{}",
                        written.chars().count(),
                        if trimmed.chars().all(|c| c.is_ascii_hexdigit()) {
                            ""
                        } else {
                            ", not all hexadecimal"
                        }
                    ),
                );
                None
            }
        }
    }

    /// The digest of a key or token given through exactly one of
    /// `{what}_env`, `{what}_sha256` and `{what}_salted`.
    fn digest(&mut self, table: &str, secret: Secret, sources: &Sources) -> Option<SecretDigest> {
        let what = secret.what;
        let given: Vec<String> = [
            sources.env.is_some().then(|| format!("{what}_env")),
            sources.sha256.is_some().then(|| format!("{what}_sha256")),
            sources.salted.is_some().then(|| format!("{what}_salted")),
        ]
        .into_iter()
        .flatten()
        .collect();
        match given.len() {
            0 => {
                self.error(
                    table,
                    format!("set one of {what}_env, {what}_sha256 or {what}_salted"),
                );
                return None;
            }
            1 => {}
            _ => {
                self.error(
                    table,
                    format!(
                        "set exactly one of {what}_env, {what}_sha256 and {what}_salted, not {}",
                        given.join(" and ")
                    ),
                );
                return None;
            }
        }
        if let Some(var) = &sources.env {
            let value = self.secret(&format!("{table}.{what}_env"), var)?;
            return Some(SecretDigest::Sha256(
                Sha256::digest(value.as_bytes()).into(),
            ));
        }
        if let Some(hex_digest) = &sources.sha256 {
            let field = format!("{table}.{what}_sha256");
            let digest = self.hex_field(
                &field,
                Some(hex_digest.clone()),
                64,
                &format!("the SHA-256 of the {what}"),
            )?;
            return Some(SecretDigest::Sha256(digest.try_into().ok()?));
        }
        let salted = sources.salted.as_ref()?;
        let at = |field: &str| format!("{table}.{what}_salted.{field}");
        let id = self.required(&at("id"), salted.id.clone()).and_then(|id| {
            if is_secret_id(id.as_bytes()) {
                Some(id)
            } else {
                self.error(
                    at("id"),
                    format!(
                        "{id:?} is not a generated {what}'s id: {SECRET_ID_LEN} lowercase hexadecimal digits, the <id> of {}-<id>-<secret>",
                        secret.prefix
                    ),
                );
                None
            }
        });
        let salt = self.hex_field(
            &at("salt"),
            salted.salt.clone(),
            2 * SALT_LEN,
            &format!("{SALT_LEN} bytes of salt"),
        );
        let sha256 = self.hex_field(
            &at("sha256"),
            salted.sha256.clone(),
            64,
            &format!("the SHA-256 of the salt and the {what}"),
        );
        Some(SecretDigest::Salted {
            id: id?,
            salt: salt?,
            sha256: sha256?.try_into().ok()?,
        })
    }

    /// Reports a secret already used by entry `j` of the same list.
    fn duplicate(
        &mut self,
        here: &str,
        secret: Secret,
        sources: &Sources,
        digest: &SecretDigest,
        seen: &mut Seen,
        i: usize,
    ) {
        let list = if secret.what == "key" {
            "api_keys"
        } else {
            "admin_tokens"
        };
        let field = format!("{here}.{}", sources.field(secret));
        match digest {
            SecretDigest::Sha256(sha256) => match seen.digests.get(sha256) {
                Some(j) => {
                    let message = if secret.what == "key" {
                        format!("the same key as api_keys[{j}]; every caller needs its own key")
                    } else {
                        format!("the same token as admin_tokens[{j}]; a token must identify one caller")
                    };
                    self.error(field, message);
                }
                None => {
                    seen.digests.insert(*sha256, i);
                }
            },
            SecretDigest::Salted { id, .. } => match seen.ids.get(id) {
                Some(j) => self.error(
                    field,
                    format!("id {id:?} is already used by {list}[{j}]; every generated {} has its own id", secret.what),
                ),
                None => {
                    seen.ids.insert(id.clone(), i);
                }
            },
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
        let mut seen = Seen::default();
        for (i, table) in tables.into_iter().enumerate() {
            let here = format!("api_keys[{i}]");
            let errors_before = self.errors.len();

            let name = self.required(&format!("{here}.name"), table.name);
            if let Some(name) = &name {
                let claim = (format!("{here}.name"), "name", "used by api_keys");
                self.claim(&mut names, claim, name, i);
            }

            let sources = Sources {
                env: table.key_env,
                sha256: table.key_sha256,
                salted: table.key_salted,
            };
            let digest = self.digest(&here, KEY, &sources);
            if let Some(digest) = &digest {
                self.duplicate(&here, KEY, &sources, digest, &mut seen, i);
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
                let field = format!("{here}.providers[{k}]");
                if let Some(slug) = self.provider_reference(field, wanted, providers) {
                    allowed_providers.push(slug);
                }
            }

            let tpm = table.tpm.unwrap_or(0);
            if tpm > file::MAX_TPM {
                self.error(
                    format!("{here}.tpm"),
                    format!("must be at most {} (got {tpm})", file::MAX_TPM),
                );
            }

            let priority = table.priority.unwrap_or(file::DEFAULT_PRIORITY);
            if !(-file::MAX_PRIORITY..=file::MAX_PRIORITY).contains(&priority) {
                self.error(
                    format!("{here}.priority"),
                    format!(
                        "must be between -{max} and {max} (got {priority})",
                        max = file::MAX_PRIORITY
                    ),
                );
            }

            if let (Some(name), Some(digest)) = (name, digest) {
                if self.errors.len() == errors_before {
                    keys.push(ApiKey {
                        name,
                        digest,
                        models: table.models,
                        providers: allowed_providers,
                        rpm: table.rpm.unwrap_or(file::DEFAULT_RPM),
                        tpm,
                        max_concurrent: table
                            .max_concurrent
                            .unwrap_or(file::DEFAULT_MAX_CONCURRENT),
                        // Within +-1000 (no error), so it fits.
                        priority: i32::try_from(priority).unwrap_or_default(),
                    });
                }
            }
        }
        keys
    }

    pub(super) fn admin_tokens(&mut self, tables: Vec<file::AdminTokenTable>) -> Vec<AdminToken> {
        let mut tokens: Vec<AdminToken> = Vec::with_capacity(tables.len());
        let mut names: HashMap<String, usize> = HashMap::new();
        let mut seen = Seen::default();
        for (i, table) in tables.into_iter().enumerate() {
            let here = format!("admin_tokens[{i}]");
            let errors_before = self.errors.len();

            let name = self.required(&format!("{here}.name"), table.name);
            if let Some(name) = &name {
                let claim = (format!("{here}.name"), "name", "used by admin_tokens");
                self.claim(&mut names, claim, name, i);
            }

            let sources = Sources {
                env: table.token_env,
                sha256: table.token_sha256,
                salted: table.token_salted,
            };
            let digest = self.digest(&here, TOKEN, &sources);
            if let Some(digest) = &digest {
                self.duplicate(&here, TOKEN, &sources, digest, &mut seen, i);
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

            if let (Some(name), Some(digest), Some(role)) = (name, digest, role) {
                if self.errors.len() == errors_before {
                    tokens.push(AdminToken { name, digest, role });
                }
            }
        }
        tokens
    }
}
