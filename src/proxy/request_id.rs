//! `X-Request-Id`: one identity per request, shared by the client, the
//! engine and the access log.
//!
//! A client's (or a front proxy's) id is kept when it is sane: 1 to 128
//! visible ASCII characters, so it can sit in a header, a log line and a
//! metric exemplar unescaped. Anything else is replaced, as is an absent id.
//! A generated id is 32 lowercase hex digits (128 bits), the shape of nginx's
//! `$request_id`: XXH3-128 over a per-process random key (from the standard
//! library's randomly seeded `RandomState`) and a process-wide counter, so
//! ids never repeat within a process and are not guessable across processes
//! (each has its own key; no clock is read for them). They identify; they
//! are not secrets.
//!
//! The id is worked out once, in `request_filter`, and kept in the request's
//! context: the upstream request, the gateway's own responses
//! (`respond.rs`), the response headers and the log all take it from
//! there. It is not written back into the client's header: that map was
//! built with room for exactly what the client sent, and growing it per
//! request cost more than the insert itself.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use http::{HeaderName, HeaderValue};
use pingora::proxy::Session;

pub static REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// Longest client-supplied id kept.
pub const MAX_LEN: usize = 128;

/// Whether a client-supplied id is kept as is.
pub fn is_sane(value: &[u8]) -> bool {
    (1..=MAX_LEN).contains(&value.len()) && value.iter().all(u8::is_ascii_graphic)
}

/// The request's id: the one it carries when sane (exactly one value),
/// else a new one, which replaces whatever it carried wherever the
/// gateway writes the id.
pub fn of(session: &Session) -> HeaderValue {
    let headers = &session.req_header().headers;
    let mut values = headers.get_all(&REQUEST_ID_HEADER).iter();
    if let (Some(value), None) = (values.next(), values.next()) {
        if is_sane(value.as_bytes()) {
            return value.clone();
        }
    }
    generate()
}

/// A new id: 32 lowercase hex digits.
pub fn generate() -> HeaderValue {
    static KEY: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let key = *KEY.get_or_init(|| {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        hasher.finish()
    });
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let digest = xxhash_rust::xxh3::xxh3_128_with_seed(&count.to_le_bytes(), key);
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut text = [0u8; 32];
    for (i, byte) in digest.to_be_bytes().iter().enumerate() {
        text[2 * i] = HEX[usize::from(byte >> 4)];
        text[2 * i + 1] = HEX[usize::from(byte & 0xf)];
    }
    debug_assert!(is_sane(&text));
    HeaderValue::from_bytes(&text).unwrap_or_else(|_| HeaderValue::from_static("-"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_ids_are_32_hex_digits_and_distinct() {
        let ids: std::collections::HashSet<String> = (0..1000)
            .map(|_| generate().to_str().unwrap().to_string())
            .collect();
        assert_eq!(ids.len(), 1000);
        for id in &ids {
            assert_eq!(id.len(), 32);
            assert!(id
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        }
    }

    #[test]
    fn sane_ids_are_short_visible_ascii() {
        assert!(is_sane(b"abc-123_X.Y:Z/{}"));
        assert!(is_sane(&[b'a'; MAX_LEN]));
        assert!(!is_sane(&[b'a'; MAX_LEN + 1]));
        assert!(!is_sane(b""));
        assert!(!is_sane(b"has space"));
        assert!(!is_sane(b"tab\there"));
        assert!(!is_sane("caf\u{e9}".as_bytes()));
    }
}
