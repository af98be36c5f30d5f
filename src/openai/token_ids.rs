//! Caller-supplied token ids: the `x-rolter-token-ids` header.
//!
//! rolter does not tokenize; a caller that knows the request's token ids
//! (an SDK with the model's tokenizer, an agent framework) hands them over so
//! KV-block scoring can hash them exactly as the engine's cache does.

use super::RequestError;

/// The request header carrying comma-separated token ids.
pub static TOKEN_IDS_HEADER: http::HeaderName = http::HeaderName::from_static("x-rolter-token-ids");

/// Parses `1,2, 3` into token ids; whitespace around ids is allowed, empty
/// entries and anything but unsigned 32-bit integers are not.
pub fn parse_token_ids(value: &[u8]) -> Result<Vec<u32>, RequestError> {
    let text = std::str::from_utf8(value)
        .map_err(|_| RequestError::InvalidTokenIds("it is not ASCII".to_string()))?;
    let mut ids = Vec::with_capacity(text.len() / 4 + 1);
    for (position, item) in text.split(',').enumerate() {
        let item = item.trim();
        let id = item.parse::<u32>().map_err(|_| {
            RequestError::InvalidTokenIds(format!(
                "entry {position} ({:?}) is not an unsigned 32-bit integer",
                truncate(item)
            ))
        })?;
        ids.push(id);
    }
    Ok(ids)
}

fn truncate(item: &str) -> &str {
    rolter_balancer::bound_prompt(item, 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_comma_separated_ids_with_spaces() {
        assert_eq!(
            parse_token_ids(b"1,2, 3 ,4294967295").unwrap(),
            [1, 2, 3, u32::MAX]
        );
    }

    #[test]
    fn rejects_empty_negative_overflowing_and_garbage_entries() {
        for bad in [&b""[..], b"1,,2", b"-1", b"4294967296", b"1,x", b"\xff"] {
            let error = parse_token_ids(bad).unwrap_err();
            assert!(matches!(error, RequestError::InvalidTokenIds(_)), "{bad:?}");
        }
        let message = parse_token_ids(b"1,abc").unwrap_err().to_string();
        assert!(
            message.contains("entry 1") && message.contains("abc"),
            "{message}"
        );
    }
}
