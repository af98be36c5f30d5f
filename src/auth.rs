//! Who is calling: API keys of proxy callers and admin tokens.
//!
//! Only digests of keys are kept ([`config::SecretDigest`]), in two forms,
//! and a presented key costs one hash either way:
//! - A key rolter generated (`rk-<id>-<secret>`, `rt-<id>-<secret>` for
//!   admin tokens) has a salted digest. Its id, which is not secret, finds
//!   that one digest in a map; the key is hashed with its salt and compared
//!   in constant time.
//! - Any other key (an operator's, from `key_env` or `key_sha256`) is
//!   hashed and compared with every plain digest in constant time, without
//!   stopping at a match, so the time taken says nothing about which key (if
//!   any) matched.
//!
//! A key shaped like a generated one whose id is unknown is tried as a
//! plain key: an operator may have put a generated key in `key_env`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock};

use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use crate::config::{self, AdminRole, SecretDigest};
use crate::rate_limit::{KeyLimits, Quota, RateLimits};

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
    /// Flow control's priority band (`api_keys.priority`); 0 for anonymous
    /// callers.
    pub priority: i32,
}

impl Caller {
    /// The caller of an open proxy (`require_api_key = false`) without a known key.
    /// One for the process: it was built (two allocations) per request.
    pub fn anonymous() -> Arc<Caller> {
        static ANONYMOUS: LazyLock<Arc<Caller>> = LazyLock::new(|| {
            Arc::new(Caller {
                name: "anonymous".to_string(),
                models: None,
                providers: None,
                limits: None,
                priority: 0,
            })
        });
        Arc::clone(&ANONYMOUS)
    }

    /// Whether the key's `models` list `model` (a route's public model, a
    /// group slug or a `<slug>/<model>` address); see `Address::admits`.
    pub fn may_use_model(&self, model: &str) -> bool {
        self.models.as_ref().is_none_or(|m| m.contains(model))
    }

    pub fn may_use_provider(&self, slug: &str) -> bool {
        self.providers.as_ref().is_none_or(|p| p.contains(slug))
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

/// Stored secrets and what each one identifies.
#[derive(Debug)]
struct SecretIndex<T> {
    /// `rk` or `rt`: the prefix of the generated keys in `salted`.
    prefix: &'static str,
    /// Plain digests, scanned in full.
    digests: Vec<[u8; 32]>,
    /// What each of `digests` identifies, by index.
    plain: Vec<T>,
    /// Salted digests by id (ids are unique: validation says so).
    salted: HashMap<String, (SecretDigest, T)>,
}

impl<T> SecretIndex<T> {
    fn new(prefix: &'static str, entries: impl IntoIterator<Item = (SecretDigest, T)>) -> Self {
        let mut index = SecretIndex {
            prefix,
            digests: Vec::new(),
            plain: Vec::new(),
            salted: HashMap::new(),
        };
        for (digest, value) in entries {
            match digest {
                SecretDigest::Sha256(sha256) => {
                    index.digests.push(sha256);
                    index.plain.push(value);
                }
                SecretDigest::Salted { ref id, .. } => {
                    let id = id.clone();
                    let previous = index.salted.insert(id, (digest, value));
                    debug_assert!(previous.is_none(), "duplicate salted id");
                }
            }
        }
        index
    }

    /// What `presented` identifies, if it is one of the stored secrets.
    fn find(&self, presented: &[u8]) -> Option<&T> {
        if let Some((digest, value)) =
            config::secret_id(self.prefix, presented).and_then(|id| self.salted.get(id))
        {
            return digest.verify(presented).then_some(value);
        }
        find_digest(&self.digests, &sha256(presented)).map(|i| &self.plain[i])
    }
}

impl<T> Default for SecretIndex<T> {
    fn default() -> Self {
        SecretIndex {
            prefix: "",
            digests: Vec::new(),
            plain: Vec::new(),
            salted: HashMap::new(),
        }
    }
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
    callers: SecretIndex<Arc<Caller>>,
}

impl ApiKeys {
    /// The callers of `keys`, each limited over its counters in `rate_limits`.
    pub fn new(keys: &[config::ApiKey], rate_limits: &RateLimits) -> Self {
        let non_empty = |v: &Vec<String>| (!v.is_empty()).then(|| v.iter().cloned().collect());
        let callers = keys.iter().map(|k| {
            let caller = Arc::new(Caller {
                name: k.name.clone(),
                models: non_empty(&k.models),
                providers: non_empty(&k.providers),
                limits: Some(KeyLimits::new(
                    Quota {
                        rpm: k.rpm,
                        tpm: k.tpm,
                        max_concurrent: k.max_concurrent,
                    },
                    rate_limits.counters(&k.name),
                )),
                priority: k.priority,
            });
            (k.digest.clone(), caller)
        });
        Self {
            callers: SecretIndex::new(config::API_KEY_PREFIX, callers),
        }
    }

    pub fn authenticate(&self, token: &[u8]) -> Option<Arc<Caller>> {
        self.callers.find(token).map(Arc::clone)
    }
}

/// The admin tokens of a snapshot.
#[derive(Debug, Default)]
pub struct AdminTokens {
    tokens: SecretIndex<(String, AdminRole)>,
}

impl AdminTokens {
    pub fn new(tokens: &[config::AdminToken]) -> Self {
        let tokens = tokens
            .iter()
            .map(|t| (t.digest.clone(), (t.name.clone(), t.role)));
        Self {
            tokens: SecretIndex::new(config::ADMIN_TOKEN_PREFIX, tokens),
        }
    }

    /// The name and role of the token, if it is one of ours.
    pub fn authenticate(&self, token: &[u8]) -> Option<(&str, AdminRole)> {
        self.tokens
            .find(token)
            .map(|(name, role)| (name.as_str(), *role))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, secret: &str, models: &[&str], providers: &[&str]) -> config::ApiKey {
        config::ApiKey {
            name: name.to_string(),
            digest: SecretDigest::Sha256(sha256(secret.as_bytes())),
            models: models.iter().map(|s| s.to_string()).collect(),
            providers: providers.iter().map(|s| s.to_string()).collect(),
            rpm: 0,
            tpm: 0,
            max_concurrent: 0,
            priority: 0,
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

    /// A key rolter generated, with its salted digest.
    fn generated_key(name: &str) -> (String, config::ApiKey) {
        let (secret, digest) = config::new_secret(config::API_KEY_PREFIX);
        let mut key = key(name, "", &[], &[]);
        key.digest = digest;
        (secret, key)
    }

    /// `secret` with its last character changed: the same id, another secret.
    fn other_secret(secret: &str) -> String {
        let (head, last) = secret.split_at(secret.len() - 1);
        format!("{head}{}", if last == "A" { "B" } else { "A" })
    }

    #[test]
    fn salted_key_authenticates_by_its_id() {
        let (secret_s, salted) = generated_key("salted");
        let (secret_t, other) = generated_key("other");
        let keys = ApiKeys::new(
            &[key("plain", "secret-p", &[], &[]), salted, other],
            &RateLimits::default(),
        );
        assert_eq!(
            keys.authenticate(secret_s.as_bytes()).unwrap().name,
            "salted"
        );
        assert_eq!(
            keys.authenticate(secret_t.as_bytes()).unwrap().name,
            "other"
        );
        assert_eq!(keys.authenticate(b"secret-p").unwrap().name, "plain");
    }

    #[test]
    fn salted_key_with_a_known_id_and_a_wrong_secret_is_refused() {
        let (secret, salted) = generated_key("salted");
        let keys = ApiKeys::new(&[salted], &RateLimits::default());
        let wrong = other_secret(&secret);
        assert_eq!(
            config::secret_id("rk", wrong.as_bytes()),
            config::secret_id("rk", secret.as_bytes())
        );
        assert!(keys.authenticate(wrong.as_bytes()).is_none());
    }

    #[test]
    fn salted_key_with_an_unknown_id_or_malformed_is_refused() {
        let (secret, salted) = generated_key("salted");
        let keys = ApiKeys::new(&[salted], &RateLimits::default());
        let unknown_id = format!("rk-{}-{}", "0".repeat(16), &secret[20..]);
        assert!(config::secret_id("rk", unknown_id.as_bytes()).is_some());
        assert!(keys.authenticate(unknown_id.as_bytes()).is_none());
        for malformed in [
            secret[..secret.len() - 1].to_owned(),
            format!("{secret}x"),
            secret.replacen("rk-", "rt-", 1),
            secret.to_uppercase(),
            "rk-".to_owned(),
        ] {
            assert!(
                keys.authenticate(malformed.as_bytes()).is_none(),
                "{malformed}"
            );
        }
    }

    #[test]
    fn generated_key_kept_as_a_plain_digest_still_authenticates() {
        // An operator may put a generated key in `key_env`: shaped like a
        // salted one, but its id is not in the map.
        let (secret, _) = config::new_secret(config::API_KEY_PREFIX);
        let keys = ApiKeys::new(&[key("env", &secret, &[], &[])], &RateLimits::default());
        assert_eq!(keys.authenticate(secret.as_bytes()).unwrap().name, "env");
    }

    #[test]
    fn admin_tokens_authenticate_both_forms() {
        let (secret, digest) = config::new_secret(config::ADMIN_TOKEN_PREFIX);
        let tokens = AdminTokens::new(&[
            config::AdminToken {
                name: "ops".into(),
                digest: SecretDigest::Sha256(sha256(b"ops-token")),
                role: AdminRole::Superadmin,
            },
            config::AdminToken {
                name: "dash".into(),
                digest,
                role: AdminRole::Viewer,
            },
        ]);
        assert_eq!(
            tokens.authenticate(b"ops-token"),
            Some(("ops", AdminRole::Superadmin))
        );
        assert_eq!(
            tokens.authenticate(secret.as_bytes()),
            Some(("dash", AdminRole::Viewer))
        );
        assert_eq!(tokens.authenticate(other_secret(&secret).as_bytes()), None);
        // An admin token is not an API key, nor the other way round.
        let as_key = secret.replacen("rt-", "rk-", 1);
        assert_eq!(tokens.authenticate(as_key.as_bytes()), None);
        assert_eq!(AdminTokens::default().authenticate(b"ops-token"), None);
    }

    #[test]
    fn bearer_token_needs_the_scheme_and_a_value() {
        assert_eq!(bearer_token(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer_token(b"bearer  abc "), Some(&b"abc"[..]));
        assert_eq!(bearer_token(b"Basic abc"), None);
        assert_eq!(bearer_token(b"Bearer "), None);
    }
}
