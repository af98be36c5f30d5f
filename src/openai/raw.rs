//! Raw JSON values borrowed from a request body.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// A JSON value's text as it stands in the body (no surrounding
/// whitespace), made only by a parser that checked it: serde's, through
/// [`RawValue`], or the envelope scanner (`scan.rs`), which vouches for
/// what it hands over exactly as serde would.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Raw<'a>(&'a str);

impl<'a> Raw<'a> {
    /// `text` must be one whole, valid JSON value.
    pub(super) fn checked(text: &'a str) -> Raw<'a> {
        Raw(text)
    }

    pub fn get(self) -> &'a str {
        self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Raw<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        <&'de RawValue>::deserialize(deserializer).map(|raw| Raw(raw.get()))
    }
}

/// The text of a raw JSON string. Without escapes it is the literal's
/// inside, borrowed: the parser already checked the literal while scanning
/// the body, so a long prompt is not scanned a second time to decode it.
pub fn string_value(raw: Raw<'_>) -> Option<Cow<'_, str>> {
    let literal = raw.get();
    let inner = literal.strip_prefix('"')?.strip_suffix('"')?;
    if !inner.as_bytes().contains(&b'\\') {
        return Some(Cow::Borrowed(inner));
    }
    serde_json::from_str::<Cow<'_, str>>(literal).ok()
}
