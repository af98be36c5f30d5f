//! The chat request vLLM makes of an Anthropic Messages or a Responses
//! body before it renders the chat template, so the route's tokenizer
//! computes the token ids the engine will prefill (`tokenization.rs`).
//!
//! Messages: `system` (a string, or text blocks joined) is the system
//! message; text blocks become text parts; an assistant's `tool_use`
//! blocks its `tool_calls` (arguments: the input as JSON text); each
//! `tool_result` a `tool` message with its `tool_use_id`; images and
//! documents are left out (they reach the template as nothing it renders
//! as text). Responses: `instructions` is the system message; `input` a
//! user message, or items: messages (text parts), `function_call` as an
//! assistant's tool call, `function_call_output` as a `tool` message.
//! Tools: Anthropic's `{name, description, input_schema}` and Responses'
//! `{type: "function", name, description, parameters}` become chat's
//! `{type: "function", function: {name, description, parameters}}`.

use serde_json::{json, Map, Value};

/// A chat `messages` array and `tools` (when any), as JSON text.
pub struct ChatParts {
    pub messages: String,
    pub tools: Option<String>,
}

/// A Messages body's `system`, `messages` and `tools` (raw JSON texts).
pub fn from_messages(
    system: Option<&str>,
    messages: &str,
    tools: Option<&str>,
) -> Option<ChatParts> {
    let messages: Vec<Value> = serde_json::from_str(messages).ok()?;
    let mut chat = Vec::with_capacity(messages.len() + 1);
    if let Some(system) = system.and_then(|s| serde_json::from_str::<Value>(s).ok()) {
        let text = match &system {
            Value::String(text) => text.clone(),
            Value::Array(blocks) => blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        };
        chat.push(json!({"role": "system", "content": text}));
    }
    for message in &messages {
        let role = message
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("user");
        let blocks = match message.get("content") {
            Some(Value::String(text)) => {
                chat.push(json!({"role": role, "content": text}));
                continue;
            }
            Some(Value::Array(blocks)) => blocks,
            _ => {
                chat.push(json!({"role": role, "content": ""}));
                continue;
            }
        };
        let mut parts = Vec::new();
        let mut calls = Vec::new();
        let mut results = Vec::new();
        for block in blocks {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => parts.push(json!({"type": "text", "text": block.get("text").cloned().unwrap_or_default()})),
                Some("tool_use") => calls.push(json!({
                    "id": block.get("id").cloned().unwrap_or_default(),
                    "type": "function",
                    "function": {
                        "name": block.get("name").cloned().unwrap_or_default(),
                        "arguments": block.get("input").map_or_else(|| "{}".to_string(), Value::to_string),
                    },
                })),
                Some("tool_result") => results.push(json!({
                    "role": "tool",
                    "tool_call_id": block.get("tool_use_id").cloned().unwrap_or_default(),
                    "content": anthropic_text(block.get("content")),
                })),
                _ => {}
            }
        }
        chat.extend(results);
        if !parts.is_empty() || !calls.is_empty() {
            let mut out = Map::new();
            out.insert("role".into(), json!(role));
            out.insert("content".into(), Value::Array(parts));
            if !calls.is_empty() {
                out.insert("tool_calls".into(), Value::Array(calls));
            }
            chat.push(Value::Object(out));
        }
    }
    Some(ChatParts {
        messages: Value::Array(chat).to_string(),
        tools: convert_tools(tools, |tool| {
            json!({"type": "function", "function": {
                "name": tool.get("name").cloned().unwrap_or_default(),
                "description": tool.get("description").cloned().unwrap_or_default(),
                "parameters": tool.get("input_schema").cloned().unwrap_or_else(|| json!({})),
            }})
        }),
    })
}

/// A Responses body's `instructions`, `input` and `tools` (raw JSON texts).
pub fn from_responses(
    instructions: Option<&str>,
    input: &str,
    tools: Option<&str>,
) -> Option<ChatParts> {
    let input: Value = serde_json::from_str(input).ok()?;
    let mut chat = Vec::new();
    if let Some(Value::String(text)) = instructions.and_then(|s| serde_json::from_str(s).ok()) {
        chat.push(json!({"role": "system", "content": text}));
    }
    match input {
        Value::String(text) => chat.push(json!({"role": "user", "content": text})),
        Value::Array(items) => {
            for item in &items {
                match item.get("type").and_then(Value::as_str) {
                    None | Some("message") => {
                        let role = item.get("role").and_then(Value::as_str).unwrap_or("user");
                        let content = match item.get("content") {
                            Some(Value::String(text)) => json!(text),
                            Some(Value::Array(parts)) => Value::Array(
                                parts
                                    .iter()
                                    .filter_map(|p| p.get("text"))
                                    .map(|text| json!({"type": "text", "text": text}))
                                    .collect(),
                            ),
                            _ => json!(""),
                        };
                        chat.push(json!({"role": role, "content": content}));
                    }
                    Some("function_call") => chat.push(json!({
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [{
                            "id": item.get("call_id").cloned().unwrap_or_default(),
                            "type": "function",
                            "function": {
                                "name": item.get("name").cloned().unwrap_or_default(),
                                "arguments": item.get("arguments").cloned().unwrap_or_else(|| json!("{}")),
                            },
                        }],
                    })),
                    Some("function_call_output") => chat.push(json!({
                        "role": "tool",
                        "tool_call_id": item.get("call_id").cloned().unwrap_or_default(),
                        "content": item.get("output").and_then(Value::as_str).unwrap_or_default(),
                    })),
                    Some(_) => {}
                }
            }
        }
        _ => return None,
    }
    Some(ChatParts {
        messages: Value::Array(chat).to_string(),
        tools: convert_tools(tools, |tool| {
            json!({"type": "function", "function": {
                "name": tool.get("name").cloned().unwrap_or_default(),
                "description": tool.get("description").cloned().unwrap_or_default(),
                "parameters": tool.get("parameters").cloned().unwrap_or_else(|| json!({})),
            }})
        }),
    })
}

/// Text of an Anthropic tool result's content: a string, or text blocks.
fn anthropic_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// `tools` as chat's function tools; `None` when absent or empty.
fn convert_tools(tools: Option<&str>, convert: impl Fn(&Value) -> Value) -> Option<String> {
    let tools: Vec<Value> = serde_json::from_str(tools?).ok()?;
    (!tools.is_empty()).then(|| Value::Array(tools.iter().map(convert).collect()).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_messages_conversation_becomes_the_chat_vllm_renders() {
        let parts = from_messages(
            Some(r#"[{"type":"text","text":"be brief"}]"#),
            r#"[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"calling"},{"type":"tool_use","id":"t1","name":"f","input":{"x":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"42"}]}]"#,
            Some(r#"[{"name":"f","description":"d","input_schema":{"type":"object"}}]"#),
        )
        .unwrap();
        let messages: Value = serde_json::from_str(&parts.messages).unwrap();
        assert_eq!(
            messages,
            json!([
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "text", "text": "calling"}],
                 "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}}]},
                {"role": "tool", "tool_call_id": "t1", "content": "42"},
            ])
        );
        let tools: Value = serde_json::from_str(parts.tools.as_deref().unwrap()).unwrap();
        assert_eq!(
            tools[0]["function"]["parameters"],
            json!({"type": "object"})
        );
    }

    #[test]
    fn a_responses_input_becomes_the_chat_vllm_renders() {
        let parts = from_responses(
            Some(r#""be brief""#),
            r#"[{"role":"user","content":[{"type":"input_text","text":"hi"}]},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"42"}]"#,
            None,
        )
        .unwrap();
        let messages: Value = serde_json::from_str(&parts.messages).unwrap();
        assert_eq!(
            messages[0],
            json!({"role": "system", "content": "be brief"})
        );
        assert_eq!(
            messages[1],
            json!({"role": "user", "content": [{"type": "text", "text": "hi"}]})
        );
        assert_eq!(messages[2]["tool_calls"][0]["function"]["name"], "f");
        assert_eq!(
            messages[3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "42"})
        );
        assert!(parts.tools.is_none());
        let one = from_responses(None, r#""hello""#, None).unwrap();
        assert_eq!(one.messages, r#"[{"content":"hello","role":"user"}]"#);
    }
}
