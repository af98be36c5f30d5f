//! Request paths and query strings. A row's key is everything after the
//! collection's segment, percent-decoded: route models and catalog models
//! are often `org/model`, so a key may contain '/' (sent raw or as %2F).

/// `/api/v1/<collection>[/<key>]` split into the collection and the
/// decoded key (`None` when empty). `Err` names what could not be decoded.
pub(super) fn split(rest: &str) -> Result<(&str, Option<String>), String> {
    let (collection, key) = match rest.split_once('/') {
        Some((collection, key)) => (collection, key),
        None => (rest, ""),
    };
    if key.is_empty() {
        return Ok((collection, None));
    }
    match percent_decode(key) {
        None => Err(format!(
            "the path segment `{key}` is not valid percent-encoded UTF-8"
        )),
        // No stored key can hold one (PostgreSQL's text cannot).
        Some(decoded) if decoded.contains('\0') => Err(format!(
            "the path segment `{key}` decodes to a NUL character"
        )),
        Some(decoded) => Ok((collection, Some(decoded))),
    }
}

/// `%XX` escapes decoded; `None` for a malformed escape or invalid UTF-8.
pub(crate) fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The decoded value of `name` in a query string; the first if repeated.
pub(super) fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    query?
        .split('&')
        .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
        .find(|(key, _)| *key == name)
        .and_then(|(_, value)| percent_decode(&value.replace('+', " ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_keeps_slashes_and_decodes_escapes() {
        assert_eq!(split("routes").unwrap(), ("routes", None));
        assert_eq!(split("routes/").unwrap(), ("routes", None));
        assert_eq!(
            split("routes/Qwen/Qwen3-8B").unwrap(),
            ("routes", Some("Qwen/Qwen3-8B".to_owned()))
        );
        assert_eq!(
            split("catalog/org%2Fmodel%20x").unwrap(),
            ("catalog", Some("org/model x".to_owned()))
        );
        assert!(split("routes/bad%zz").is_err());
        assert!(split("routes/bad%ff").is_err());
        assert!(
            split("routes/chat%00").is_err(),
            "no stored key holds a NUL"
        );
    }

    #[test]
    fn query_param_finds_the_first_value() {
        assert_eq!(
            query_param(Some("a=1&limit=5&limit=6"), "limit").as_deref(),
            Some("5")
        );
        assert_eq!(query_param(Some("limit"), "limit").as_deref(), Some(""));
        assert_eq!(query_param(None, "limit"), None);
        assert_eq!(query_param(Some("a=1"), "limit"), None);
    }
}
