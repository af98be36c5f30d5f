//! Anthropic's Messages API as routing reads it: `system` and `messages`
//! become the same conversation text a chat request's messages do, so a
//! conversation keeps its engine whichever API it arrives by.

use std::borrow::Cow;

use serde::Deserialize;

use super::raw::{string_value, Raw};
use super::turns::{Content, Turns};
use super::Conversation;

/// One content block; only what routing reads.
#[derive(Deserialize)]
struct Block<'a> {
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
                read_block_list(&blocks, conversation);
            }
        }
        _ => {}
    }
}

/// Blocks, each kept raw, read as [`read_blocks`] reads them.
fn read_block_list(blocks: &[Raw<'_>], conversation: &mut Conversation) {
    for block in blocks {
        let Ok(parsed) = serde_json::from_str::<Block<'_>>(block.get()) else {
            conversation.push_identity("block", block.get().as_bytes());
            continue;
        };
        match (parsed.kind.as_deref(), &parsed.text) {
            (Some("text") | None, Some(text)) => conversation.push_text(text),
            (Some("tool_result"), _) => {
                if let Some(id) = &parsed.tool_use_id {
                    conversation.push_identity("tool_use_id", id.as_bytes());
                }
                if let Some(content) = parsed.content {
                    read_blocks(content, conversation);
                }
            }
            (kind, _) => {
                conversation.push_identity(kind.unwrap_or("block"), block.get().as_bytes())
            }
        }
    }
}
