//! Caller secrets as rolter keeps them: digests, never the keys.
//!
//! Two forms. A key an operator chose (`key_env`, `key_sha256`) is kept as
//! its plain SHA-256. A key rolter generated through the control API is
//! `<prefix>-<id>-<secret>` (`rk-` for API keys, `rt-` for admin tokens):
//! `id` is 16 hex digits of 8 random bytes, `secret` 43 URL-safe base64
//! characters of 32 random bytes, all from the operating system's CSPRNG.
//! It is kept as `{ id, salt, sha256(salt || key) }` with 16 random bytes of
//! salt, so a leaked table cannot be checked against a list of guesses all
//! at once, and two equal keys would not even look equal.
//!
//! The id is not secret (it is how the dashboard names a key): it lets the
//! gateway find the one digest to check with one hash per request, instead
//! of one salted hash per stored key. The comparison itself is constant
//! time.

use std::fmt;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// Prefix of the API keys rolter generates: `rk-<id>-<secret>`.
pub const API_KEY_PREFIX: &str = "rk";
/// Prefix of the admin tokens rolter generates: `rt-<id>-<secret>`.
pub const ADMIN_TOKEN_PREFIX: &str = "rt";
/// Characters of a generated key's id: 8 random bytes in hex.
pub const SECRET_ID_LEN: usize = 16;
/// Bytes of salt in a salted digest.
pub const SALT_LEN: usize = 16;
/// Random bytes in a generated key's secret part.
const SECRET_BYTES: usize = 32;
/// Characters of the secret part: 32 bytes in unpadded base64.
const SECRET_CHARS: usize = 43;

/// How a caller's key or token is stored.
#[derive(Clone, PartialEq, Eq)]
pub enum SecretDigest {
    /// SHA-256 of the key (`key_env`, `key_sha256`).
    Sha256([u8; 32]),
    /// A key rolter generated: its id, the salt, and SHA-256 of the salt's
    /// bytes followed by the whole key (`key_salted`).
    Salted {
        /// 16 lowercase hex digits, the `<id>` of `<prefix>-<id>-<secret>`.
        id: String,
        /// [`SALT_LEN`] bytes.
        salt: Vec<u8>,
        sha256: [u8; 32],
    },
}

impl SecretDigest {
    /// The digest of `presented` as this form stores it.
    fn digest_of(&self, presented: &[u8]) -> [u8; 32] {
        match self {
            SecretDigest::Sha256(_) => Sha256::digest(presented).into(),
            SecretDigest::Salted { salt, .. } => salted_sha256(salt, presented),
        }
    }

    /// The stored digest.
    pub fn sha256(&self) -> &[u8; 32] {
        match self {
            SecretDigest::Sha256(sha256) | SecretDigest::Salted { sha256, .. } => sha256,
        }
    }

    /// The id of a salted digest; `None` for a plain one.
    pub fn id(&self) -> Option<&str> {
        match self {
            SecretDigest::Sha256(_) => None,
            SecretDigest::Salted { id, .. } => Some(id),
        }
    }

    /// Whether `presented` is the key this digest was made from: one hash,
    /// then a comparison in constant time.
    pub fn verify(&self, presented: &[u8]) -> bool {
        self.digest_of(presented).ct_eq(self.sha256()).into()
    }
}

/// Hex of the digest (and the salt): nothing secret.
impl fmt::Debug for SecretDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretDigest::Sha256(sha256) => {
                f.debug_tuple("Sha256").field(&super::Hex(sha256)).finish()
            }
            SecretDigest::Salted { id, salt, sha256 } => f
                .debug_struct("Salted")
                .field("id", id)
                .field("salt", &super::Hex(salt))
                .field("sha256", &super::Hex(sha256))
                .finish(),
        }
    }
}

/// SHA-256 of `salt` followed by `key`.
fn salted_sha256(salt: &[u8], key: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(salt);
    hasher.update(key);
    hasher.finalize().into()
}

/// A new key `<prefix>-<id>-<secret>` ([`API_KEY_PREFIX`],
/// [`ADMIN_TOKEN_PREFIX`]) and its [`SecretDigest::Salted`]. The key is
/// shown to its owner once and never stored.
///
/// # Panics
///
/// When the operating system's random source fails (on Linux, only before
/// the kernel's entropy pool was ever initialized, which `getrandom` waits
/// for): no key is better than a guessable one.
pub fn new_secret(prefix: &str) -> (String, SecretDigest) {
    debug_assert!(
        !prefix.is_empty() && prefix.bytes().all(|b| b.is_ascii_alphanumeric()),
        "{prefix:?}"
    );
    let mut random = [0u8; SECRET_ID_LEN / 2 + SECRET_BYTES + SALT_LEN];
    if let Err(error) = getrandom::fill(&mut random) {
        panic!("the operating system's random source failed: {error}");
    }
    let (id, rest) = random.split_at(SECRET_ID_LEN / 2);
    let (secret, salt) = rest.split_at(SECRET_BYTES);
    let id = hex::encode(id);
    let key = format!("{prefix}-{id}-{}", base64_url(secret));
    debug_assert_eq!(secret_id(prefix, key.as_bytes()), Some(id.as_str()));
    let sha256 = salted_sha256(salt, key.as_bytes());
    (
        key,
        SecretDigest::Salted {
            id,
            salt: salt.to_vec(),
            sha256,
        },
    )
}

/// The id of a presented `<prefix>-<id>-<secret>` key, when it has exactly
/// that shape (16 lowercase hex digits, 43 URL-safe base64 characters);
/// `None` for anything else, such as a key an operator chose.
pub fn secret_id<'k>(prefix: &str, presented: &'k [u8]) -> Option<&'k str> {
    let rest = presented
        .strip_prefix(prefix.as_bytes())?
        .strip_prefix(b"-")?;
    let (id, rest) = rest.split_at_checked(SECRET_ID_LEN)?;
    let secret = rest.strip_prefix(b"-")?;
    let shaped = is_secret_id(id)
        && secret.len() == SECRET_CHARS
        && secret
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_');
    // Lowercase hex digits are ASCII.
    shaped.then(|| std::str::from_utf8(id).ok()).flatten()
}

/// Whether `id` is a generated key's id: 16 lowercase hex digits.
pub(super) fn is_secret_id(id: &[u8]) -> bool {
    id.len() == SECRET_ID_LEN && id.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Unpadded URL-safe base64 (RFC 4648 section 5).
fn base64_url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut text = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let group = chunk.iter().enumerate().fold(0u32, |group, (i, byte)| {
            group | (u32::from(*byte) << (16 - 8 * i))
        });
        // A chunk of n bytes carries n + 1 characters of 6 bits.
        for k in 0..=chunk.len() {
            let index = (group >> (18 - 6 * k)) & 0x3f;
            text.push(char::from(ALPHABET[index as usize]));
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_url_matches_the_rfc_4648_vectors_without_padding() {
        for (bytes, text) in [
            (&b""[..], ""),
            (b"f", "Zg"),
            (b"fo", "Zm8"),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg"),
            (b"fooba", "Zm9vYmE"),
            (b"foobar", "Zm9vYmFy"),
            (&[0xfb, 0xff, 0xbf], "-_-_"),
        ] {
            assert_eq!(base64_url(bytes), text, "{bytes:?}");
        }
        assert_eq!(base64_url(&[0u8; SECRET_BYTES]).len(), SECRET_CHARS);
    }

    #[test]
    fn new_secret_has_the_documented_shape_and_verifies() {
        let (key, digest) = new_secret(API_KEY_PREFIX);
        assert_eq!(key.len(), 2 + 1 + SECRET_ID_LEN + 1 + SECRET_CHARS, "{key}");
        let id = secret_id(API_KEY_PREFIX, key.as_bytes()).expect("shaped");
        assert_eq!(&key[3..19], id);
        let SecretDigest::Salted {
            id: stored,
            salt,
            sha256,
        } = &digest
        else {
            panic!("{digest:?}");
        };
        assert_eq!(stored, id);
        assert_eq!(salt.len(), SALT_LEN);
        assert_eq!(*sha256, salted_sha256(salt, key.as_bytes()));
        assert!(digest.verify(key.as_bytes()));
        assert!(!digest.verify(&key.as_bytes()[..key.len() - 1]));
        assert!(!format!("{digest:?}").contains(&key[20..]));

        let (token, _) = new_secret(ADMIN_TOKEN_PREFIX);
        assert!(token.starts_with("rt-"));
        assert_eq!(secret_id(API_KEY_PREFIX, token.as_bytes()), None);
    }

    #[test]
    fn new_secrets_differ_in_id_secret_and_salt() {
        let (a, digest_a) = new_secret(API_KEY_PREFIX);
        let (b, digest_b) = new_secret(API_KEY_PREFIX);
        assert_ne!(a, b);
        assert_ne!(digest_a.id(), digest_b.id());
        assert_ne!(digest_a, digest_b);
        assert!(!digest_a.verify(b.as_bytes()));
    }

    #[test]
    fn secret_id_needs_the_exact_shape() {
        let secret = "A".repeat(SECRET_CHARS);
        let good = format!("rk-0123456789abcdef-{secret}");
        assert_eq!(secret_id("rk", good.as_bytes()), Some("0123456789abcdef"));
        let dashed = format!("rk-0123456789abcdef-{}", "-_".repeat(21) + "x");
        assert_eq!(secret_id("rk", dashed.as_bytes()), Some("0123456789abcdef"));
        for bad in [
            format!("rt-0123456789abcdef-{secret}"),
            format!("rk0123456789abcdef-{secret}"),
            format!("rk-0123456789ABCDEF-{secret}"),
            format!("rk-0123456789abcde-{secret}"),
            format!("rk-0123456789abcdef{secret}"),
            format!("rk-0123456789abcdef-{secret}A"),
            format!("rk-0123456789abcdef-{}", &secret[1..]),
            format!("rk-0123456789abcdef-{}=", &secret[1..]),
            "rk-".to_owned(),
            String::new(),
        ] {
            assert_eq!(secret_id("rk", bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn plain_digest_verifies_its_key_only() {
        let digest = SecretDigest::Sha256(Sha256::digest(b"sk-chosen").into());
        assert!(digest.verify(b"sk-chosen"));
        assert!(!digest.verify(b"sk-chosen "));
        assert!(!digest.verify(b""));
        assert_eq!(digest.id(), None);
        assert_eq!(
            format!("{digest:?}"),
            format!("Sha256(\"{}\")", hex::encode(Sha256::digest(b"sk-chosen")))
        );
    }
}
