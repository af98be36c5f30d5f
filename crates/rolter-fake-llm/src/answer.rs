//! Answers in Anthropic's Messages shape and OpenAI's Responses shape, whole
//! or as the opening object of a stream (`handlers.rs`, `stream.rs`).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use serde_json::{json, Value};

use super::kv::Prefill;

/// Responses kept by id, the oldest forgotten past [`ResponseStore::CAPACITY`].
#[derive(Debug, Default)]
pub(crate) struct ResponseStore {
    inner: Mutex<(HashMap<String, Value>, VecDeque<String>)>,
}

impl ResponseStore {
    const CAPACITY: usize = 10_000;

    pub(crate) fn put(&self, id: &str, response: Value) {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (map, order) = &mut *guard;
        if map.insert(id.to_owned(), response).is_none() {
            order.push_back(id.to_owned());
        }
        while order.len() > Self::CAPACITY {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
    }

    pub(crate) fn get(&self, id: &str) -> Option<Value> {
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        guard.0.get(id).cloned()
    }

    pub(crate) fn remove(&self, id: &str) -> bool {
        let mut guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let (map, order) = &mut *guard;
        order.retain(|kept| kept != id);
        map.remove(id).is_some()
    }
}

/// What an answer in Anthropic's or the Responses shape says, streamed or not.
pub(crate) struct Answer<'a> {
    pub(crate) id: &'a str,
    pub(crate) created: u64,
    pub(crate) model: &'a str,
    pub(crate) output_tokens: u32,
    /// `stop`, or `length` when the output limit cut it.
    pub(crate) finish_reason: &'a str,
    pub(crate) prefill: Prefill,
}

impl Answer<'_> {
    fn truncated(&self) -> bool {
        self.finish_reason == "length"
    }

    /// Anthropic's stop reason for the simulated finish.
    pub(crate) fn stop_reason(&self) -> &'static str {
        if self.truncated() {
            "max_tokens"
        } else {
            "end_turn"
        }
    }

    /// Anthropic's usage; `output_tokens` so far.
    pub(crate) fn anthropic_usage(&self, output_tokens: u64) -> Value {
        json!({
            "input_tokens": self.prefill.prompt_tokens.saturating_sub(self.prefill.cached_tokens),
            "cache_read_input_tokens": self.prefill.cached_tokens,
            "cache_creation_input_tokens": 0,
            "output_tokens": output_tokens,
        })
    }

    /// An Anthropic Messages answer: finished with `text`, or (`None`) as
    /// a stream's `message_start` carries it.
    pub(crate) fn message(&self, text: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": match text {
                Some(text) => json!([{"type": "text", "text": text}]),
                None => json!([]),
            },
            "stop_reason": text.map(|_| self.stop_reason()),
            "stop_sequence": null,
            "usage": self.anthropic_usage(if text.is_some() { u64::from(self.output_tokens) } else { 0 }),
        })
    }

    /// A Responses object: finished with `text`, or (`None`) in progress
    /// with no output yet, as a stream's `response.created` carries it.
    pub(crate) fn response(&self, text: Option<&str>) -> Value {
        let status = match (text, self.truncated()) {
            (None, _) => "in_progress",
            (Some(_), false) => "completed",
            (Some(_), true) => "incomplete",
        };
        let output_tokens = u64::from(self.output_tokens);
        json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "error": null,
            "incomplete_details": if status == "incomplete" { json!({"reason": "max_output_tokens"}) } else { Value::Null },
            "instructions": null,
            "metadata": {},
            "model": self.model,
            "output": match text {
                Some(text) => json!([self.output_message(text, "completed")]),
                None => json!([]),
            },
            "parallel_tool_calls": true,
            "temperature": 1.0,
            "tool_choice": "auto",
            "tools": [],
            "top_p": 1.0,
            "usage": match text {
                Some(_) => json!({
                    "input_tokens": self.prefill.prompt_tokens,
                    "input_tokens_details": {"cached_tokens": self.prefill.cached_tokens},
                    "output_tokens": output_tokens,
                    "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": self.prefill.prompt_tokens.saturating_add(output_tokens),
                }),
                None => Value::Null,
            },
        })
    }

    /// The id of the one output message of a Responses answer.
    pub(crate) fn message_id(&self) -> String {
        format!("msg_{}", self.id)
    }

    /// The one output message of a Responses answer.
    pub(crate) fn output_message(&self, text: &str, status: &str) -> Value {
        json!({
            "type": "message",
            "id": self.message_id(),
            "status": status,
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        })
    }
}
