//! Who is calling: API keys of proxy callers and admin tokens.
//!
//! Only SHA-256 digests of keys are kept. A presented key is hashed and
//! compared with every stored digest in constant time, without stopping at a
//! match, so the time taken says nothing about which key (if any) matched.

use std::collections::HashSet;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use crate::config::{self, AdminRole};
use crate::rate_limit::{KeyLimits, RateLimits};
use crate::snapshot::{Route, RouteKind};

/// A proxy caller and what it may reach.
#[derive(Debug)]
pub struct Caller {
    pub name: String,
    /// Allowed public models; `None` = all.
    models: Option<HashSet<String>>,
    /// Allowed provider slugs; `None` = all.
    providers: Option<HashSet<String>>,
    /// The key's `rpm` / `max_concurrent` over its counters; `None` for
    /// anonymous callers, who are not limited.
    limits: Option<KeyLimits>,
}

impl Caller {
    /// The caller of an open proxy (`require_api_key = false`) without a known key.
    pub fn anonymous() -> Arc<Caller> {
        Arc::new(Caller {
            name: "anonymous".to_string(),
            models: None,
            providers: None,
            limits: None,
        })
    }

    pub fn may_use_model(&self, model: &str) -> bool {
        self.models.as_ref().is_none_or(|m| m.contains(model))
    }

    /// Whether the caller may use `route`: its address is listed, or, for a
    /// provider-group address, the group's slug is (it allows every model
    /// through the group). A pinned provider address needs the key to allow
    /// every model.
    pub fn may_use_route(&self, route: &Route) -> bool {
        let Some(models) = &self.models else {
            return true;
        };
        models.contains(&route.model)
            || matches!(&route.kind, RouteKind::Group { slug } if models.contains(slug))
    }

    pub fn may_use_provider(&self, slug: &str) -> bool {
        self.providers.as_ref().is_none_or(|p| p.contains(slug))
    }

    /// Whether the caller is limited to some providers (eligibility must check).
    pub fn restricts_providers(&self) -> bool {
        self.providers.is_some()
    }

    /// The key's rate limits (see `rate_limit.rs`); `None` = not limited.
    pub fn limits(&self) -> Option<&KeyLimits> {
        self.limits.as_ref()
    }
}

/// Finds the index whose digest equals `digest`, in time independent of the answer.
fn find_digest(stored: &[[u8; 32]], digest: &[u8; 32]) -> Option<usize> {
    let mut found = 0u64;
    let mut index = 0u64;
    for (i, candidate) in stored.iter().enumerate() {
        let hit = candidate.ct_eq(digest);
        index.conditional_assign(&(i as u64), hit);
        found.conditional_assign(&1, hit);
    }
    (found == 1).then_some(index as usize)
}

fn sha256(secret: &[u8]) -> [u8; 32] {
    Sha256::digest(secret).into()
}

/// Extracts the token of an `Authorization: Bearer <token>` header value.
pub fn bearer_token(header: &[u8]) -> Option<&[u8]> {
    let rest = header
        .strip_prefix(b"Bearer ")
        .or_else(|| header.strip_prefix(b"bearer "))?;
    let token = rest.trim_ascii();
    (!token.is_empty()).then_some(token)
}

/// The API keys of a snapshot.
#[derive(Debug, Default)]
pub struct ApiKeys {
    digests: Vec<[u8; 32]>,
    callers: Vec<Arc<Caller>>,
}

impl ApiKeys {
    /// The callers of `keys`, each limited over its counters in `rate_limits`.
    pub fn new(keys: &[config::ApiKey], rate_limits: &RateLimits) -> Self {
        let non_empty = |v: &Vec<String>| (!v.is_empty()).then(|| v.iter().cloned().collect());
        Self {
            digests: keys.iter().map(|k| k.sha256).collect(),
            callers: keys
                .iter()
                .map(|k| {
                    Arc::new(Caller {
                        name: k.name.clone(),
                        models: non_empty(&k.models),
                        providers: non_empty(&k.providers),
                        limits: Some(KeyLimits::new(
                            k.rpm,
                            k.max_concurrent,
                            rate_limits.counters(&k.name),
                        )),
                    })
                })
                .collect(),
        }
    }

    pub fn authenticate(&self, token: &[u8]) -> Option<Arc<Caller>> {
        find_digest(&self.digests, &sha256(token)).map(|i| Arc::clone(&self.callers[i]))
    }
}

/// The admin tokens of a snapshot.
#[derive(Debug, Default)]
pub struct AdminTokens {
    digests: Vec<[u8; 32]>,
    tokens: Vec<(String, AdminRole)>,
}

impl AdminTokens {
    pub fn new(tokens: &[config::AdminToken]) -> Self {
        Self {
            digests: tokens.iter().map(|t| t.sha256).collect(),
            tokens: tokens.iter().map(|t| (t.name.clone(), t.role)).collect(),
        }
    }

    /// The name and role of the token, if it is one of ours.
    pub fn authenticate(&self, token: &[u8]) -> Option<(&str, AdminRole)> {
        find_digest(&self.digests, &sha256(token)).map(|i| {
            let (name, role) = &self.tokens[i];
            (name.as_str(), *role)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, secret: &str, models: &[&str], providers: &[&str]) -> config::ApiKey {
        config::ApiKey {
            name: name.to_string(),
            sha256: sha256(secret.as_bytes()),
            models: models.iter().map(|s| s.to_string()).collect(),
            providers: providers.iter().map(|s| s.to_string()).collect(),
            rpm: 0,
            max_concurrent: 0,
        }
    }

    #[test]
    fn finds_the_matching_key_among_many() {
        let keys = ApiKeys::new(
            &[
                key("a", "secret-a", &[], &[]),
                key("b", "secret-b", &["chat"], &["gpu-a"]),
            ],
            &RateLimits::default(),
        );
        assert_eq!(keys.authenticate(b"secret-b").unwrap().name, "b");
        assert_eq!(keys.authenticate(b"secret-a").unwrap().name, "a");
        assert!(keys.authenticate(b"secret-c").is_none());
        assert!(keys.authenticate(b"").is_none());
    }

    #[test]
    fn empty_lists_allow_everything() {
        let keys = ApiKeys::new(
            &[
                key("open", "o", &[], &[]),
                key("narrow", "n", &["chat"], &["gpu-a"]),
            ],
            &RateLimits::default(),
        );
        let open = keys.authenticate(b"o").unwrap();
        assert!(open.may_use_model("anything") && open.may_use_provider("any"));
        let narrow = keys.authenticate(b"n").unwrap();
        assert!(narrow.may_use_model("chat") && !narrow.may_use_model("embed"));
        assert!(narrow.may_use_provider("gpu-a") && !narrow.may_use_provider("gpu-b"));
    }

    #[test]
    fn bearer_token_needs_the_scheme_and_a_value() {
        assert_eq!(bearer_token(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer_token(b"bearer  abc "), Some(&b"abc"[..]));
        assert_eq!(bearer_token(b"Basic abc"), None);
        assert_eq!(bearer_token(b"Bearer "), None);
    }
}
