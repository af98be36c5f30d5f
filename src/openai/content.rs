//! A message's content read into the conversation: a string, or a list of
//! parts of which text is read and the rest (images, audio, files) recorded
//! by identity. Chat and the Responses API differ only in what their text
//! parts are called.

use std::borrow::Cow;

use serde::Deserialize;

use super::raw::{string_value, Raw};
use super::turns::{Part, PartFields, PartText};
use super::Conversation;

/// What serde reads of a part the envelope scanner left to it.
#[derive(Deserialize)]
struct SerdePart<'a> {
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
                for part in parts {
                    read_raw_part(part, conversation, is_text);
                }
            }
        }
        _ => {}
    }
}

/// A list of parts, read as [`read_content`] reads one.
pub fn read_parts(parts: &[Part<'_>], conversation: &mut Conversation, is_text: fn(&str) -> bool) {
    for part in parts {
        match &part.fields {
            Some(fields) => read_part(fields, part.raw, conversation, is_text),
            None => read_raw_part(part.raw, conversation, is_text),
        }
    }
}

/// A part that only serde reads: one it refuses is recorded whole.
fn read_raw_part(raw: Raw<'_>, conversation: &mut Conversation, is_text: fn(&str) -> bool) {
    match serde_json::from_str::<SerdePart<'_>>(raw.get()) {
        Ok(SerdePart { kind, text }) => {
            let fields = PartFields {
                kind,
                text: text.map(PartText::Decoded),
            };
            read_part(&fields, raw, conversation, is_text)
        }
        Err(_) => conversation.push_identity("part", raw.get().as_bytes()),
    }
}

/// A part's text, or else its identity, under its type.
fn read_part(
    fields: &PartFields<'_>,
    raw: Raw<'_>,
    conversation: &mut Conversation,
    is_text: fn(&str) -> bool,
) {
    match fields {
        PartFields {
            kind,
            text: Some(text),
        } if kind.as_deref().is_none_or(is_text) => push_text(conversation, text),
        PartFields { kind, .. } => {
            conversation.push_identity(kind.as_deref().unwrap_or("part"), raw.get().as_bytes())
        }
    }
}

/// A part's text, decoded as it is read.
pub fn push_text(conversation: &mut Conversation, text: &PartText<'_>) {
    match text {
        PartText::Decoded(text) => conversation.push_text(text),
        PartText::Escaped(text) => conversation.push_escaped(text),
    }
}
