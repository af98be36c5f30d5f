//! Raw JSON values borrowed from a request body.

use std::borrow::Cow;

use serde_json::value::RawValue;

/// The text of a raw JSON string. Without escapes it is the literal's
/// inside, borrowed: the parser already checked the literal while scanning
/// the body, so a long prompt is not scanned a second time to decode it.
pub fn string_value(raw: &RawValue) -> Option<Cow<'_, str>> {
    let literal = raw.get();
    let inner = literal.strip_prefix('"')?.strip_suffix('"')?;
    if !inner.as_bytes().contains(&b'\\') {
        return Some(Cow::Borrowed(inner));
    }
    serde_json::from_str::<Cow<'_, str>>(literal).ok()
}
