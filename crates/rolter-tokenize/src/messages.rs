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

use std::borrow::Cow;

use indexmap::IndexMap;
use minijinja::value::{Value, ValueKind};
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

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
    let messages: Vec<RawMessage<'_>> = serde_json::from_str(raw)
        .map_err(|e| TokenizeError::Request(format!("`messages`: {e}")))?;
    let mut room = budget;
    let mut cut = false;
    let mut out = Vec::with_capacity(messages.len());
    for (i, message) in messages.into_iter().enumerate() {
        let mut rebuilt: IndexMap<Value, Value> = IndexMap::with_capacity(4);
        let role = message
            .role
            .and_then(|raw| serde_json::from_str::<Text<'_>>(raw.get()).ok())
            .ok_or_else(|| {
                TokenizeError::Request(format!("`messages[{i}].role` must be a string"))
            })?
            .0;
        rebuilt.insert(Value::from("role"), Value::from(&*role));
        let mut texts = text_parts(message.content, i)?;
        for text in &mut texts {
            if cut {
                *text = Cow::Borrowed("");
            } else if text.len() > room {
                let mut end = room;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                // Only the kept part is copied (a 4 MiB message stays in the body).
                *text = Cow::Owned(format!("{}{CUT_MARK}", &text[..end]));
                cut = true;
            } else {
                room -= text.len();
            }
        }
        let content = if content_as_parts {
            Value::from(
                texts
                    .iter()
                    .map(|text| {
                        let part: IndexMap<Value, Value> = IndexMap::from([
                            (Value::from("type"), Value::from("text")),
                            (Value::from("text"), Value::from(&**text)),
                        ]);
                        Value::from(part)
                    })
                    .collect::<Vec<_>>(),
            )
        } else {
            match texts.as_slice() {
                [] => Value::from(""),
                [text] => Value::from(&**text),
                _ => Value::from(texts.join("\n")),
            }
        };
        rebuilt.insert(Value::from("content"), content);
        let is = |name: &str| &*role == name;
        if is("assistant") {
            if let Some(calls) = message.tool_calls.map(value).filter(|v| !v.is_none()) {
                let calls = tool_calls(&calls);
                if calls.len().unwrap_or(1) > 0 {
                    rebuilt.insert(Value::from("tool_calls"), calls);
                }
            }
            let reasoning = [message.reasoning, message.reasoning_content]
                .into_iter()
                .flatten()
                .map(value)
                .find(|v| !v.is_none());
            if let Some(reasoning) = reasoning {
                rebuilt.insert(Value::from("reasoning"), reasoning.clone());
                rebuilt.insert(Value::from("reasoning_content"), reasoning);
            }
        }
        let tool_call_id = message.tool_call_id.filter(|_| is("tool"));
        for (field, raw) in [("tool_call_id", tool_call_id), ("name", message.name)] {
            if let Some(value) = raw.map(value).filter(|v| v.kind() == ValueKind::String) {
                rebuilt.insert(Value::from(field), value);
            }
        }
        out.push(Value::from(rebuilt));
    }
    Ok(Prepared {
        messages: Value::from(out),
        cut,
    })
}

/// A message as sent, its fields still JSON: only the ones vLLM keeps are
/// read, and content, the bulk of a request, is read once and borrowed
/// from the request where it has no escapes. A field sent twice keeps its
/// last value, as Python's `json` does.
#[derive(Default)]
struct RawMessage<'a> {
    role: Option<&'a RawValue>,
    content: Option<Content<'a>>,
    tool_calls: Option<&'a RawValue>,
    reasoning: Option<&'a RawValue>,
    reasoning_content: Option<&'a RawValue>,
    tool_call_id: Option<&'a RawValue>,
    name: Option<&'a RawValue>,
}

impl<'de> Deserialize<'de> for RawMessage<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = RawMessage<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a message object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut message = RawMessage::default();
                while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
                    let slot = match &*key {
                        "content" => {
                            message.content = Some(map.next_value()?);
                            continue;
                        }
                        "role" => &mut message.role,
                        "tool_calls" => &mut message.tool_calls,
                        "reasoning" => &mut message.reasoning,
                        "reasoning_content" => &mut message.reasoning_content,
                        "tool_call_id" => &mut message.tool_call_id,
                        "name" => &mut message.name,
                        _ => {
                            map.next_value::<IgnoredAny>()?;
                            continue;
                        }
                    };
                    *slot = Some(map.next_value()?);
                }
                Ok(message)
            }
        }
        deserializer.deserialize_map(Fields)
    }
}

/// A message's `content` as sent.
enum Content<'a> {
    Text(Cow<'a, str>),
    Parts(Vec<&'a RawValue>),
    None,
    /// Neither a string, a list nor null.
    Other,
}

impl<'de> Deserialize<'de> for Content<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Any;
        impl<'de> Visitor<'de> for Any {
            type Value = Content<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("message content")
            }
            fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Self::Value, E> {
                Ok(Content::Text(Cow::Borrowed(text)))
            }
            fn visit_str<E>(self, text: &str) -> Result<Self::Value, E> {
                Ok(Content::Text(Cow::Owned(text.to_owned())))
            }
            fn visit_string<E>(self, text: String) -> Result<Self::Value, E> {
                Ok(Content::Text(Cow::Owned(text)))
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(Content::None)
            }
            fn visit_none<E>(self) -> Result<Self::Value, E> {
                Ok(Content::None)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut parts = Vec::new();
                while let Some(part) = seq.next_element()? {
                    parts.push(part);
                }
                Ok(Content::Parts(parts))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Content::Other)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
                Ok(Content::Other)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
                Ok(Content::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
                Ok(Content::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
                Ok(Content::Other)
            }
        }
        deserializer.deserialize_any(Any)
    }
}

/// A content part: its `type` and `text`, as JSON.
#[derive(Default, Deserialize)]
struct RawPart<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<&'a RawValue>,
    #[serde(borrow)]
    text: Option<&'a RawValue>,
}

/// A JSON string, borrowed from the request when it holds no escape.
#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

/// A field kept as sent, as the template sees it.
fn value(raw: &RawValue) -> Value {
    serde_json::from_str(raw.get()).unwrap_or_default()
}

/// A message's content as its text parts: a string is one part, `null`
/// or absent none. A part that is not text (an image, audio) is refused:
/// where it goes in the text is the model's processor's business, which the
/// gateway does not reproduce.
fn text_parts<'a>(
    content: Option<Content<'a>>,
    message: usize,
) -> Result<Vec<Cow<'a, str>>, TokenizeError> {
    let parts = match content {
        None | Some(Content::None) => return Ok(Vec::new()),
        Some(Content::Text(text)) => return Ok(vec![text]),
        Some(Content::Parts(parts)) => parts,
        Some(Content::Other) => {
            return Err(TokenizeError::Request(format!(
                "`messages[{message}].content` must be a string or a list of parts"
            )))
        }
    };
    let mut texts = Vec::with_capacity(parts.len());
    for (j, part) in parts.into_iter().enumerate() {
        // Not an object: a part with no text, refused below.
        let part: RawPart<'a> = serde_json::from_str(part.get()).unwrap_or_default();
        let kind = part
            .kind
            .and_then(|raw| serde_json::from_str::<Option<Text<'_>>>(raw.get()).ok())
            .flatten();
        match kind.as_ref().map(|Text(kind)| &**kind) {
            Some("text") | None => {
                let text = part
                    .text
                    .and_then(|raw| serde_json::from_str::<Text<'a>>(raw.get()).ok());
                match text {
                    Some(Text(text)) => texts.push(text),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(raw: &str, as_parts: bool, budget: usize) -> Result<(String, bool), TokenizeError> {
        let prepared = prepare(raw, as_parts, budget)?;
        let shown: Vec<String> = prepared
            .messages
            .try_iter()
            .unwrap()
            .map(|m| m.get_attr("content").unwrap().to_string())
            .collect();
        Ok((shown.join("|"), prepared.cut))
    }

    #[test]
    fn content_reads_the_same_with_escapes_duplicates_and_parts() {
        let raw = r#"[
            {"role": "system", "content": "caf\u00e9 \"q\"\n"},
            {"role": "user", "content": "first", "content": "last", "extra": {"x": [1]}},
            {"role": "assistant", "content": null},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"text": "b"}]},
            {"r\u006fle": "user"}
        ]"#;
        let (shown, cut) = contents(raw, false, usize::MAX).unwrap();
        assert_eq!(shown, "café \"q\"\n|last||a\nb|");
        assert!(!cut);
    }

    #[test]
    fn the_budget_cuts_inside_an_escaped_text_and_empties_what_follows() {
        let raw = r#"[{"role": "user", "content": "\u00e9\u00e9\u00e9"}, {"role": "user", "content": "later"}]"#;
        let (shown, cut) = contents(raw, true, 3).unwrap();
        assert!(cut);
        // 3 bytes hold one 2-byte "é"; the next message keeps its place.
        assert_eq!(
            shown,
            format!("[{{'type': 'text', 'text': 'é{CUT_MARK}'}}]|[{{'type': 'text', 'text': ''}}]")
        );
    }

    #[test]
    fn a_bad_message_names_the_field_that_is_wrong() {
        let cases = [
            (r#"[{"role": 7, "content": "x"}]"#, "`messages[0].role`"),
            (r#"[{"content": "x"}]"#, "`messages[0].role`"),
            (
                r#"[{"role": "user", "content": "x"}, {"role": "user", "content": {"a": 1}}]"#,
                "`messages[1].content`",
            ),
            (
                r#"[{"role": "user", "content": [{"type": "text", "text": 3}]}]"#,
                "`messages[0].content[0].text`",
            ),
            (
                r#"[{"role": "user", "content": ["plain"]}]"#,
                "`messages[0].content[0].text`",
            ),
            (r#"[{"role": "user"}, 5]"#, "`messages`"),
            (r#"{"role": "user"}"#, "`messages`"),
        ];
        for (raw, named) in cases {
            match prepare(raw, false, usize::MAX) {
                Err(TokenizeError::Request(why)) => assert!(why.starts_with(named), "{raw}: {why}"),
                Err(other) => panic!("{raw}: {other}"),
                Ok(_) => panic!("{raw} was accepted"),
            }
        }
        let image =
            r#"[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]"#;
        assert!(matches!(
            prepare(image, false, usize::MAX),
            Err(TokenizeError::Unsupported(why)) if why.contains("`messages[0].content[0]`")
        ));
    }

    #[test]
    fn assistant_and_tool_fields_are_kept_as_vllm_keeps_them() {
        let raw = r#"[
            {"role": "assistant", "content": "", "reasoning_content": "think",
             "tool_calls": [{"type": "function", "id": "c1", "function": {"name": "f", "arguments": "{\"a\": 1}"}}]},
            {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "ok"},
            {"role": "user", "tool_call_id": "dropped", "content": "hi"}
        ]"#;
        let prepared = prepare(raw, false, usize::MAX).unwrap();
        let messages: Vec<Value> = prepared.messages.try_iter().unwrap().collect();
        let keys =
            |m: &Value| -> Vec<String> { m.try_iter().unwrap().map(|k| k.to_string()).collect() };
        assert_eq!(
            keys(&messages[0]),
            [
                "role",
                "content",
                "tool_calls",
                "reasoning",
                "reasoning_content"
            ]
        );
        let call = messages[0]
            .get_attr("tool_calls")
            .unwrap()
            .get_item_by_index(0)
            .unwrap();
        assert_eq!(keys(&call), ["id", "function", "type"]);
        let arguments = call
            .get_attr("function")
            .unwrap()
            .get_attr("arguments")
            .unwrap();
        assert_eq!(arguments.get_attr("a").unwrap(), Value::from(1));
        assert_eq!(
            keys(&messages[1]),
            ["role", "content", "tool_call_id", "name"]
        );
        assert_eq!(keys(&messages[2]), ["role", "content"]);
    }
}
