//! `--tokenizer DIR`: the engine tokenizes with a real model directory
//! instead of the simulated tokenizer ([`super::tokenizer`]), through the
//! same `rolter-tokenize` the gateway's route tokenizer uses (held to
//! Python `transformers` by its fidelity fixture). Its KV events then carry
//! the ids a vLLM serving that model would publish, so precise routing can
//! be seen working on plain text requests, as the demo shows.

use std::collections::HashMap;
use std::sync::Arc;

use rolter_tokenize::{ChatRequest, ModelTokenizer};
use serde_json::value::RawValue;
use serde_json::Value;

use super::error::ApiError;

/// Whole prompts: the engine tokenizes everything it prefills.
const WHOLE: usize = usize::MAX;

/// How the engine turns text into token ids.
#[derive(Clone, Debug, Default)]
pub(crate) enum Tokenizer {
    /// The built-in simulated tokenizer and ChatML-like template.
    #[default]
    Simulated,
    /// A model directory's template and tokenizer.
    Model(Arc<ModelTokenizer>),
}

impl Tokenizer {
    /// The ids of a chat request `body` (`None`: the simulated tokenizer
    /// reads it itself). A template that refuses the conversation is
    /// vLLM's 400.
    pub(crate) fn chat_ids(
        &self,
        body: &[u8],
        add_generation_prompt: Option<bool>,
    ) -> Option<Result<Vec<u32>, ApiError>> {
        let Tokenizer::Model(model) = self else {
            return None;
        };
        let fields: HashMap<String, &RawValue> = match serde_json::from_slice(body) {
            Ok(fields) => fields,
            Err(e) => return Some(Err(ApiError::bad_request(None, e.to_string()))),
        };
        let raw = |name: &str| fields.get(name).map(|v| v.get()).filter(|v| *v != "null");
        let Some(messages) = raw("messages") else {
            return Some(Err(ApiError::bad_request(
                Some("messages"),
                "Field `messages` is required.",
            )));
        };
        let request = ChatRequest {
            messages,
            tools: raw("tools"),
            chat_template_kwargs: raw("chat_template_kwargs"),
            add_generation_prompt,
        };
        Some(
            model
                .chat_token_ids(&request, WHOLE)
                .map(|ids| ids.ids.to_vec())
                .map_err(|e| ApiError::bad_request(Some("messages"), e.to_string())),
        )
    }

    /// The ids of one completions prompt string (special tokens added, as
    /// vLLM's `/v1/completions` does).
    pub(crate) fn prompt_ids(&self, text: &str) -> Option<Result<Vec<u32>, String>> {
        let Tokenizer::Model(model) = self else {
            return None;
        };
        Some(
            model
                .prompt_token_ids(text, WHOLE)
                .map(|ids| ids.ids.to_vec())
                .map_err(|e| e.to_string()),
        )
    }

    /// The ids of a completions `prompt`: strings through the model, token
    /// ids as given.
    pub(crate) fn prompts(&self, prompt: &Value) -> Option<Result<Vec<Vec<u32>>, String>> {
        if matches!(self, Tokenizer::Simulated) {
            return None;
        }
        let strings: Option<Vec<&str>> = match prompt {
            Value::String(text) => Some(vec![text.as_str()]),
            Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_string) => {
                Some(items.iter().filter_map(Value::as_str).collect())
            }
            _ => None,
        };
        let strings = strings?;
        Some(
            strings
                .into_iter()
                .map(|text| self.prompt_ids(text).unwrap_or(Ok(Vec::new())))
                .collect(),
        )
    }
}
