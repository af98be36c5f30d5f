//! A message's content read into the conversation: a string, or a list of
//! parts of which text is read and the rest (images, audio, files) recorded
//! by identity. Chat and the Responses API differ only in what their text
//! parts are called.

use std::borrow::Cow;

use serde::Deserialize;

use super::raw::{string_value, Raw};
use super::Conversation;

#[derive(Deserialize)]
struct Part<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    text: Option<Cow<'a, str>>,
}

/// Reads `raw` into `conversation`; a part with text whose type is absent
/// or passes `is_text` is text.
pub fn read_content(raw: Raw<'_>, conversation: &mut Conversation, is_text: fn(&str) -> bool) {
    match raw.get().as_bytes().first() {
        Some(b'"') => {
            if let Some(text) = string_value(raw) {
                conversation.push_text(&text);
            }
        }
        Some(b'[') => {
            if let Ok(parts) = serde_json::from_str::<Vec<Raw<'_>>>(raw.get()) {
                read_parts(&parts, conversation, is_text);
            }
        }
        _ => {}
    }
}

/// A list of parts, each kept raw, read as [`read_content`] reads one.
pub fn read_parts(parts: &[Raw<'_>], conversation: &mut Conversation, is_text: fn(&str) -> bool) {
    for part in parts {
        match serde_json::from_str::<Part<'_>>(part.get()) {
            Ok(Part {
                kind,
                text: Some(text),
            }) if kind.as_deref().is_none_or(is_text) => conversation.push_text(&text),
            Ok(Part { kind, .. }) => {
                conversation.push_identity(kind.as_deref().unwrap_or("part"), part.get().as_bytes())
            }
            Err(_) => conversation.push_identity("part", part.get().as_bytes()),
        }
    }
}
