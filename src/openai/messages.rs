//! Anthropic's Messages API as routing reads it: `system` and `messages`
//! become the same conversation text a chat request's messages do, so a
//! conversation keeps its engine whichever API it arrives by.

use std::borrow::Cow;

use serde::Deserialize;

use super::content::push_text;
use super::raw::{string_value, Raw};
use super::turns::{Content, Part, PartFields, PartText, Turns};
use super::Conversation;

/// One content block, as serde reads a block the envelope scanner left to
/// it; only what routing reads.
#[derive(Deserialize)]
struct SerdeBlock<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    text: Option<Cow<'a, str>>,
    /// A `tool_result`'s content: a string or blocks.
    #[serde(borrow)]
    content: Option<Raw<'a>>,
    #[serde(borrow)]
    tool_use_id: Option<Cow<'a, str>>,
}

/// `system` (a string or text blocks), then `messages` turn by turn. False
/// when `messages` is not a list of messages.
pub fn read(
    system: Option<Raw<'_>>,
    messages: Option<&Turns<'_>>,
    conversation: &mut Conversation,
) -> bool {
    let Some(Turns(Some(messages))) = messages else {
        return false;
    };
    if let Some(system) = system.filter(|s| s.get() != "null") {
        conversation.push_turn("system");
        read_blocks(system, conversation);
    }
    for message in messages {
        conversation.push_turn(message.role.as_deref().unwrap_or(""));
        match &message.content {
            Some(Content::Text(text)) => conversation.push_text(text),
            Some(Content::Escaped(text)) => conversation.push_escaped(text),
            Some(Content::List(blocks)) => read_block_list(blocks, conversation),
            Some(Content::Other) | None => {}
        }
    }
    true
}

/// A string, or blocks: text is read, a tool result's content is read as
/// text after its `tool_use_id`; anything else (tool calls, images,
/// documents, thinking) is recorded by identity. JSON's nesting limit bounds
/// the recursion through tool results.
fn read_blocks(raw: Raw<'_>, conversation: &mut Conversation) {
    match raw.get().as_bytes().first() {
        Some(b'"') => {
            if let Some(text) = string_value(raw) {
                conversation.push_text(&text);
            }
        }
        Some(b'[') => {
            if let Ok(blocks) = serde_json::from_str::<Vec<Raw<'_>>>(raw.get()) {
                for block in blocks {
                    read_raw_block(block, conversation);
                }
            }
        }
        _ => {}
    }
}

/// Blocks, read as [`read_blocks`] reads them. The scanner reads a block's
/// `type` and `text` only when it has neither `content` nor `tool_use_id`.
fn read_block_list(blocks: &[Part<'_>], conversation: &mut Conversation) {
    for block in blocks {
        match &block.fields {
            Some(fields) => read_block(fields, None, None, block.raw, conversation),
            None => read_raw_block(block.raw, conversation),
        }
    }
}

/// A block that only serde reads: one it refuses is recorded whole.
fn read_raw_block(raw: Raw<'_>, conversation: &mut Conversation) {
    let Ok(block) = serde_json::from_str::<SerdeBlock<'_>>(raw.get()) else {
        conversation.push_identity("block", raw.get().as_bytes());
        return;
    };
    let fields = PartFields {
        kind: block.kind,
        text: block.text.map(PartText::Decoded),
    };
    let tool_use_id = block.tool_use_id.as_deref();
    read_block(&fields, tool_use_id, block.content, raw, conversation);
}

/// A block's text, a tool result's id and content, or else its identity.
fn read_block(
    fields: &PartFields<'_>,
    tool_use_id: Option<&str>,
    content: Option<Raw<'_>>,
    raw: Raw<'_>,
    conversation: &mut Conversation,
) {
    match (fields.kind.as_deref(), &fields.text) {
        (Some("text") | None, Some(text)) => push_text(conversation, text),
        (Some("tool_result"), _) => {
            if let Some(id) = tool_use_id {
                conversation.push_identity("tool_use_id", id.as_bytes());
            }
            if let Some(content) = content {
                read_blocks(content, conversation);
            }
        }
        (kind, _) => conversation.push_identity(kind.unwrap_or("block"), raw.get().as_bytes()),
    }
}
