//! An OpenAI chat request as the engine hands it to the template.
//!
//! vLLM does not render the request's JSON as it came: it rebuilds each
//! message (`vllm/entrypoints/chat_utils.py`, `parse_chat_messages`) and
//! this module does the same, so the template sees the same values:
//!
//! - `role` and `content`; then `tool_calls` (assistant, unless empty),
//!   `reasoning` and `reasoning_content` (assistant), `tool_call_id` (tool)
//!   and `name`, where given. Other fields are dropped.
//! - A tool call as pydantic validated it against OpenAI's types: keys in
//!   declaration order, unknown ones dropped: `{"id", "function":
//!   {"arguments", "name"}, "type"}`.
//! - Content in the template's format. "string" (the template never loops
//!   over `content`): the text parts joined with `"\n"`; `null` is `""`.
//!   "openai": a list of `{"type": "text", "text": ...}` parts, a plain
//!   string becoming one such part.
//! - A tool call's `function.arguments`, a JSON string on the wire, parsed
//!   into the object it encodes (templates write it with `tojson`); `{}`
//!   when it is not valid JSON.
//! - `tools` as pydantic dumps them: `{"type", "function": {"name",
//!   "description", "parameters", <other keys as sent>}}`, `description`
//!   and `parameters` `null` when absent.
//!
//! Budget. Routing needs only the conversation's beginning, so content
//! past [`crate::ModelTokenizer`]'s byte budget is never rendered: the
//! message that crosses it is cut and marked with [`CUT_MARK`], later ones
//! keep their structure (so a template that looks ahead, e.g. for the last
//! user turn, takes the same branches) with empty content, and the rendered
//! text is cut at the mark.

use indexmap::IndexMap;
use minijinja::value::{Value, ValueKind};

use crate::TokenizeError;

/// Marks where cut content ended: a private-use code point no text carries.
pub const CUT_MARK: &str = "\u{10FFFD}\u{10FFFE}";

/// The parts of a chat request a template reads, as raw JSON.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChatRequest<'a> {
    /// `messages`: a JSON array.
    pub messages: &'a str,
    /// `tools`, when given.
    pub tools: Option<&'a str>,
    /// `chat_template_kwargs`, when given: extra template variables.
    pub chat_template_kwargs: Option<&'a str>,
    /// `add_generation_prompt`; vLLM's default is `true`.
    pub add_generation_prompt: Option<bool>,
}

/// Messages rebuilt for the template, and whether the budget cut them.
pub(crate) struct Prepared {
    pub(crate) messages: Value,
    pub(crate) cut: bool,
}

pub(crate) fn prepare(
    raw: &str,
    content_as_parts: bool,
    budget: usize,
) -> Result<Prepared, TokenizeError> {
    let messages: Vec<IndexMap<String, Value>> = serde_json::from_str(raw)
        .map_err(|e| TokenizeError::Request(format!("`messages`: {e}")))?;
    let mut room = budget;
    let mut cut = false;
    let mut out = Vec::with_capacity(messages.len());
    for (i, message) in messages.into_iter().enumerate() {
        let mut rebuilt: IndexMap<Value, Value> = IndexMap::with_capacity(4);
        let role = message.get("role").cloned().unwrap_or(Value::from(()));
        if role.kind() != ValueKind::String {
            return Err(TokenizeError::Request(format!(
                "`messages[{i}].role` must be a string"
            )));
        }
        rebuilt.insert(Value::from("role"), role.clone());
        let mut texts = text_parts(message.get("content"), i)?;
        for text in &mut texts {
            if cut {
                text.clear();
            } else if text.len() > room {
                let mut end = room;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.truncate(end);
                text.push_str(CUT_MARK);
                cut = true;
            } else {
                room -= text.len();
            }
        }
        let content = if content_as_parts {
            Value::from(
                texts
                    .into_iter()
                    .map(|text| {
                        let part: IndexMap<Value, Value> = IndexMap::from([
                            (Value::from("type"), Value::from("text")),
                            (Value::from("text"), Value::from(text)),
                        ]);
                        Value::from(part)
                    })
                    .collect::<Vec<_>>(),
            )
        } else {
            Value::from(texts.join("\n"))
        };
        rebuilt.insert(Value::from("content"), content);
        let is = |name: &str| role.as_str() == Some(name);
        if is("assistant") {
            if let Some(calls) = message.get("tool_calls").filter(|v| !v.is_none()) {
                let calls = tool_calls(calls);
                if calls.len().unwrap_or(1) > 0 {
                    rebuilt.insert(Value::from("tool_calls"), calls);
                }
            }
            if let Some(reasoning) = message.get("reasoning").filter(|v| !v.is_none()) {
                rebuilt.insert(Value::from("reasoning"), reasoning.clone());
                rebuilt.insert(Value::from("reasoning_content"), reasoning.clone());
            } else if let Some(reasoning) =
                message.get("reasoning_content").filter(|v| !v.is_none())
            {
                rebuilt.insert(Value::from("reasoning"), reasoning.clone());
                rebuilt.insert(Value::from("reasoning_content"), reasoning.clone());
            }
        }
        let fields: &[&str] = if is("tool") {
            &["tool_call_id", "name"]
        } else {
            &["name"]
        };
        for &field in fields {
            if let Some(value) = message.get(field).filter(|v| v.kind() == ValueKind::String) {
                rebuilt.insert(Value::from(field), value.clone());
            }
        }
        out.push(Value::from(rebuilt));
    }
    Ok(Prepared {
        messages: Value::from(out),
        cut,
    })
}

/// A message's content as its text parts: a string is one part, `null`
/// or absent none. A part that is not text (an image, audio) is refused:
/// where it goes in the text is the model's processor's business, which the
/// gateway does not reproduce.
fn text_parts(content: Option<&Value>, message: usize) -> Result<Vec<String>, TokenizeError> {
    let Some(content) = content.filter(|c| !c.is_none() && !c.is_undefined()) else {
        return Ok(Vec::new());
    };
    if let Some(text) = content.as_str() {
        return Ok(vec![text.to_string()]);
    }
    if content.kind() != ValueKind::Seq {
        return Err(TokenizeError::Request(format!(
            "`messages[{message}].content` must be a string or a list of parts"
        )));
    }
    let mut texts = Vec::new();
    for (j, part) in content.try_iter().into_iter().flatten().enumerate() {
        let kind = part.get_attr("type").ok().filter(|k| !k.is_undefined());
        match kind.as_ref().and_then(Value::as_str) {
            Some("text") | None => {
                match part.get_attr("text").ok().as_ref().and_then(Value::as_str) {
                    Some(text) => texts.push(text.to_string()),
                    None => {
                        return Err(TokenizeError::Request(format!(
                            "`messages[{message}].content[{j}].text` must be a string"
                        )))
                    }
                }
            }
            Some(other) => {
                return Err(TokenizeError::Unsupported(format!(
                    "`messages[{message}].content[{j}]` is a {other:?} part"
                )))
            }
        }
    }
    Ok(texts)
}

/// `tool_calls` as vLLM renders them: each call's keys in the order of
/// OpenAI's types, and its `arguments` string parsed (`{}` when it is not
/// JSON).
fn tool_calls(calls: &Value) -> Value {
    if calls.kind() != ValueKind::Seq {
        return calls.clone();
    }
    let mut out = Vec::new();
    for call in calls.try_iter().into_iter().flatten() {
        let function = call.get_attr("function").unwrap_or_default();
        let mut rebuilt_function: IndexMap<Value, Value> = IndexMap::new();
        if let Some(arguments) = present(&function, "arguments") {
            let arguments = match arguments.as_str() {
                Some(text) => serde_json::from_str::<Value>(text)
                    .ok()
                    .unwrap_or_else(|| Value::from(IndexMap::<Value, Value>::new())),
                None if matches!(arguments.kind(), ValueKind::Map | ValueKind::Seq) => arguments,
                None => Value::from(IndexMap::<Value, Value>::new()),
            };
            rebuilt_function.insert(Value::from("arguments"), arguments);
        }
        if let Some(name) = present(&function, "name") {
            rebuilt_function.insert(Value::from("name"), name);
        }
        let mut rebuilt: IndexMap<Value, Value> = IndexMap::new();
        if let Some(id) = present(&call, "id") {
            rebuilt.insert(Value::from("id"), id);
        }
        rebuilt.insert(Value::from("function"), Value::from(rebuilt_function));
        rebuilt.insert(
            Value::from("type"),
            present(&call, "type").unwrap_or(Value::from("function")),
        );
        out.push(Value::from(rebuilt));
    }
    Value::from(out)
}

/// `tools` as vLLM's pydantic models dump them (see the module doc).
pub(crate) fn tools(raw: &str) -> Result<Value, TokenizeError> {
    let tools: Vec<IndexMap<String, Value>> =
        serde_json::from_str(raw).map_err(|e| TokenizeError::Request(format!("`tools`: {e}")))?;
    let mut out = Vec::with_capacity(tools.len());
    for tool in tools {
        let function = tool.get("function").cloned().unwrap_or_default();
        let mut dumped: IndexMap<Value, Value> = IndexMap::new();
        for field in ["name", "description", "parameters"] {
            dumped.insert(
                Value::from(field),
                present(&function, field).unwrap_or(Value::from(())),
            );
        }
        if let Ok(keys) = function.try_iter() {
            for key in keys {
                if !matches!(key.as_str(), Some("name" | "description" | "parameters")) {
                    let value = function.get_item(&key).unwrap_or_default();
                    dumped.insert(key, value);
                }
            }
        }
        let mut rebuilt: IndexMap<Value, Value> = IndexMap::new();
        rebuilt.insert(
            Value::from("type"),
            tool.get("type").cloned().unwrap_or(Value::from("function")),
        );
        rebuilt.insert(Value::from("function"), Value::from(dumped));
        out.push(Value::from(rebuilt));
    }
    Ok(Value::from(out))
}

/// `map[key]` when the map has it.
fn present(map: &Value, key: &str) -> Option<Value> {
    if map.kind() != ValueKind::Map {
        return None;
    }
    map.get_attr(key).ok().filter(|v| !v.is_undefined())
}

/// `chat_template_kwargs` as ordered pairs.
pub(crate) fn kwargs(raw: &str) -> Result<IndexMap<String, Value>, TokenizeError> {
    serde_json::from_str(raw)
        .map_err(|e| TokenizeError::Request(format!("`chat_template_kwargs`: {e}")))
}
