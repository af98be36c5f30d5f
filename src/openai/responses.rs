//! OpenAI's Responses API as routing reads it: `instructions` and `input`
//! become the same conversation text a chat request's messages do.

use std::borrow::Cow;

use serde::Deserialize;

use super::content::read_content;
use super::raw::{string_value, Raw};
use super::Conversation;

/// One input item; only what routing reads.
#[derive(Deserialize)]
struct Item<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow)]
    content: Option<Raw<'a>>,
    /// A `function_call_output`'s result.
    #[serde(borrow)]
    output: Option<Raw<'a>>,
    #[serde(borrow)]
    call_id: Option<Cow<'a, str>>,
}

/// `instructions` as the system turn, then `input`: a string (one user
/// turn) or a list of items. Messages are read turn by turn, a function's
/// output as a `tool` turn, and other items (function calls, reasoning,
/// references) by identity. False when `input` is neither.
pub fn read(
    instructions: Option<Raw<'_>>,
    input: Option<Raw<'_>>,
    conversation: &mut Conversation,
) -> bool {
    let Some(input) = input else {
        return false;
    };
    let items = match input.get().as_bytes().first() {
        Some(b'"') => None,
        Some(b'[') => match serde_json::from_str::<Vec<Raw<'_>>>(input.get()) {
            Ok(items) => Some(items),
            Err(_) => return false,
        },
        _ => return false,
    };
    if let Some(text) = instructions.and_then(string_value) {
        conversation.push_turn("system");
        conversation.push_text(&text);
    }
    let Some(items) = items else {
        conversation.push_turn("user");
        if let Some(text) = string_value(input) {
            conversation.push_text(&text);
        }
        return true;
    };
    for raw in items {
        let Ok(item) = serde_json::from_str::<Item<'_>>(raw.get()) else {
            conversation.push_identity("item", raw.get().as_bytes());
            continue;
        };
        match item.kind.as_deref() {
            None | Some("message") => {
                conversation.push_turn(item.role.as_deref().unwrap_or(""));
                if let Some(content) = item.content {
                    read_content(content, conversation, |kind| {
                        matches!(kind, "input_text" | "output_text" | "text")
                    });
                }
            }
            Some("function_call_output") => {
                conversation.push_turn("tool");
                if let Some(id) = &item.call_id {
                    conversation.push_identity("call_id", id.as_bytes());
                }
                match item.output.and_then(string_value) {
                    Some(text) => conversation.push_text(&text),
                    None => {
                        if let Some(output) = item.output {
                            conversation.push_identity("output", output.get().as_bytes());
                        }
                    }
                }
            }
            Some(kind) => conversation.push_identity(kind, raw.get().as_bytes()),
        }
    }
    true
}
