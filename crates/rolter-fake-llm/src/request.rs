//! Reading OpenAI request bodies, leniently where vLLM is lenient and with
//! vLLM's 400s where it is not.
//!
//! Only what the simulation needs is read: `model`, `stream`,
//! `stream_options.include_usage`, the output length, and the prompt as token
//! ids (see [`super::tokenizer`]): the chat template's tokens for a chat, the
//! `prompt` for a completion. Anthropic Messages and Responses bodies are
//! turned into the chat request vLLM makes of them and prefilled as one.

use serde_json::{json, Map, Value};

use super::args::MAX_OUTPUT_TOKENS;
use super::error::ApiError;
use super::model_tokenizer::Tokenizer;
use super::tokenizer::{chat_template_text, chat_token_ids, prompt_token_ids, tokenize};

/// Which text-generation API a request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GenerationKind {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Completion,
    /// Anthropic's `/v1/messages`, as vLLM serves it.
    Messages,
    /// OpenAI's `/v1/responses`, as vLLM serves it.
    Responses,
}

/// A chat or completions request, as far as the simulation cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GenerationRequest {
    pub(crate) kind: GenerationKind,
    pub(crate) model: String,
    pub(crate) stream: bool,
    pub(crate) include_usage: bool,
    /// Tokens to generate.
    pub(crate) output_tokens: u32,
    /// `"length"` when the request set the limit we stop at; `"stop"` when
    /// the engine default ended generation, as if the model emitted EOS.
    pub(crate) finish_reason: &'static str,
    /// The token ids of each prompt: one for a chat, one or more for a
    /// completion.
    pub(crate) prompts: Vec<Vec<u32>>,
}

/// A `/tokenize` request: vLLM's completion form (`prompt`, a string) or
/// chat form (`messages`, `add_generation_prompt`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TokenizeRequest {
    /// `model`, if given (vLLM makes it optional here).
    pub(crate) model: Option<String>,
    /// The token ids the engine would prefill for the same prompt or chat.
    pub(crate) tokens: Vec<u32>,
}

/// An embeddings request.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct EmbeddingRequest {
    pub(crate) model: String,
    /// One entry per embedding to return: a string or a list of token ids.
    pub(crate) inputs: Vec<Value>,
    pub(crate) prompt_tokens: u64,
}

/// The body as a JSON object, or vLLM's 400.
fn parse_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(ApiError::bad_request(
            None,
            "The request body must be a JSON object.",
        )),
        Err(err) => Err(ApiError::bad_request(
            None,
            format!("Invalid JSON in request body: {err}"),
        )),
    }
}

fn model(map: &Map<String, Value>) -> Result<String, ApiError> {
    match map.get("model") {
        Some(Value::String(model)) => Ok(model.clone()),
        None | Some(Value::Null) => Err(ApiError::bad_request(
            Some("model"),
            "Field `model` is required.",
        )),
        Some(_) => Err(ApiError::bad_request(
            Some("model"),
            "Field `model` must be a string.",
        )),
    }
}

/// vLLM's 400 for a chat request without its `messages` list, a required
/// field of its request model.
fn chat_messages(map: &Map<String, Value>) -> Result<(), ApiError> {
    match present(map, "messages") {
        Some(Value::Array(_)) => Ok(()),
        None => Err(ApiError::bad_request(
            Some("messages"),
            "Field `messages` is required.",
        )),
        Some(_) => Err(ApiError::bad_request(
            Some("messages"),
            "Field `messages` must be a list.",
        )),
    }
}

/// A boolean field, `None` when absent or not a boolean.
fn flag_or_none(map: &Map<String, Value>, field: &str) -> Option<bool> {
    present(map, field).and_then(Value::as_bool)
}

/// A field that is absent or `null` reads as `None`.
fn present<'a>(map: &'a Map<String, Value>, field: &str) -> Option<&'a Value> {
    map.get(field).filter(|value| !value.is_null())
}

fn flag(map: &Map<String, Value>, field: &'static str) -> Result<bool, ApiError> {
    match present(map, field) {
        None => Ok(false),
        Some(Value::Bool(value)) => Ok(*value),
        Some(_) => Err(ApiError::bad_request(
            Some(field),
            format!("Field `{field}` must be a boolean."),
        )),
    }
}

/// Reads a chat or completions request. `default_tokens` is the engine's
/// output length for requests that give none.
pub(crate) fn parse_generation(
    kind: GenerationKind,
    body: &[u8],
    default_tokens: u32,
    tokenizer: &Tokenizer,
) -> Result<GenerationRequest, ApiError> {
    let map = parse_object(body)?;
    let model = model(&map)?;
    if kind == GenerationKind::Chat {
        chat_messages(&map)?;
    }
    let stream = flag(&map, "stream")?;
    let include_usage = match present(&map, "stream_options") {
        None => false,
        Some(Value::Object(options)) => flag(options, "include_usage")?,
        Some(_) => {
            return Err(ApiError::bad_request(
                Some("stream_options"),
                "Field `stream_options` must be an object.",
            ))
        }
    };
    // vLLM reads `max_completion_tokens` first on chat (OpenAI's newer name).
    let limit_field = match kind {
        GenerationKind::Chat if present(&map, "max_completion_tokens").is_some() => {
            "max_completion_tokens"
        }
        GenerationKind::Responses => "max_output_tokens",
        _ => "max_tokens",
    };
    let (output_tokens, finish_reason) = match present(&map, limit_field) {
        None => (default_tokens, "stop"),
        Some(value) => (output_limit(limit_field, value)?, "length"),
    };
    let prompts = match kind {
        GenerationKind::Chat => {
            match tokenizer.chat_ids(body, flag_or_none(&map, "add_generation_prompt")) {
                Some(ids) => vec![ids?],
                None => vec![chat_token_ids(&Value::Object(map))],
            }
        }
        // vLLM turns both into a chat request and prefills it as one.
        GenerationKind::Messages | GenerationKind::Responses => {
            let chat = if kind == GenerationKind::Messages {
                messages_as_chat(&map)
            } else {
                responses_as_chat(&map)
            };
            let body = serde_json::to_vec(&chat).unwrap_or_default();
            match tokenizer.chat_ids(&body, None) {
                Some(ids) => vec![ids?],
                None => vec![chat_token_ids(&chat)],
            }
        }
        GenerationKind::Completion => match present(&map, "prompt") {
            // vLLM's request model: a completion names its prompt, as text
            // or token ids, or brings it as embeddings.
            None if present(&map, "prompt_embeds").is_some() => vec![Vec::new()],
            None => {
                return Err(ApiError::bad_request(
                    Some("prompt"),
                    "At least one of `prompt` or `prompt_embeds` must be set.",
                ))
            }
            Some(prompt) => tokenizer
                .prompts(prompt)
                .unwrap_or_else(|| prompt_token_ids(prompt))
                .map_err(|message| ApiError::bad_request(Some("prompt"), message))?,
        },
    };
    Ok(GenerationRequest {
        kind,
        model,
        stream,
        include_usage,
        output_tokens,
        finish_reason,
        prompts,
    })
}

/// Text of Anthropic content (a string, or blocks of which text and tool
/// results are read).
fn anthropic_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .map(|block| match block.get("type").and_then(Value::as_str) {
                Some("tool_result") => anthropic_text(block.get("content")),
                _ => block
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            })
            .collect(),
        _ => String::new(),
    }
}

/// An Anthropic Messages body as the chat request vLLM makes of it.
fn messages_as_chat(map: &Map<String, Value>) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = present(map, "system") {
        messages.push(json!({"role": "system", "content": anthropic_text(Some(system))}));
    }
    for message in present(map, "messages")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
    {
        let role = message
            .get("role")
            .and_then(Value::as_str)
            .unwrap_or("user");
        messages.push(json!({"role": role, "content": anthropic_text(message.get("content"))}));
    }
    json!({ "messages": messages })
}

/// Text of a Responses message's content (a string, or text parts).
fn responses_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// A Responses body as the chat request vLLM makes of it.
fn responses_as_chat(map: &Map<String, Value>) -> Value {
    let mut messages = Vec::new();
    if let Some(Value::String(instructions)) = present(map, "instructions") {
        messages.push(json!({"role": "system", "content": instructions}));
    }
    match present(map, "input") {
        Some(Value::String(text)) => messages.push(json!({"role": "user", "content": text})),
        Some(Value::Array(items)) => {
            for item in items {
                match item.get("type").and_then(Value::as_str) {
                    None | Some("message") => {
                        let role = item.get("role").and_then(Value::as_str).unwrap_or("user");
                        messages.push(
                            json!({"role": role, "content": responses_text(item.get("content"))}),
                        );
                    }
                    Some("function_call_output") => messages.push(json!({
                        "role": "tool",
                        "content": responses_text(item.get("output")),
                    })),
                    Some(_) => {}
                }
            }
        }
        _ => {}
    }
    json!({ "messages": messages })
}

/// The prompt tokens of an Anthropic `/v1/messages/count_tokens` body.
pub(crate) fn count_message_tokens(body: &[u8], tokenizer: &Tokenizer) -> Result<u64, ApiError> {
    let map = parse_object(body)?;
    model(&map)?;
    let chat = messages_as_chat(&map);
    let bytes = serde_json::to_vec(&chat).unwrap_or_default();
    let ids = match tokenizer.chat_ids(&bytes, None) {
        Some(ids) => ids?,
        None => chat_token_ids(&chat),
    };
    Ok(ids.len() as u64)
}

/// Reads a `/tokenize` request. The ids are those a generation request
/// with the same `prompt` or `messages` prefills ([`parse_generation`]):
/// the same tokenizer and chat template, the generation prompt included
/// unless `add_generation_prompt` is false (vLLM's default is true). The
/// simulated tokenizer adds no special tokens around a prompt, so vLLM's
/// `add_special_tokens` changes nothing and is not read.
pub(crate) fn parse_tokenize(
    body: &[u8],
    tokenizer: &Tokenizer,
) -> Result<TokenizeRequest, ApiError> {
    let map = parse_object(body)?;
    let model = match present(&map, "model") {
        None => None,
        Some(_) => Some(model(&map)?),
    };
    let tokens = match (present(&map, "prompt"), present(&map, "messages")) {
        (Some(Value::String(prompt)), None) => match tokenizer.prompt_ids(prompt) {
            Some(ids) => ids.map_err(|e| ApiError::bad_request(Some("prompt"), e))?,
            None => tokenize(prompt),
        },
        (Some(_), None) => {
            return Err(ApiError::bad_request(
                Some("prompt"),
                "Field `prompt` must be a string.",
            ))
        }
        (None, Some(Value::Array(_))) => {
            let add_generation_prompt = match present(&map, "add_generation_prompt") {
                None => true,
                Some(Value::Bool(add)) => *add,
                Some(_) => {
                    return Err(ApiError::bad_request(
                        Some("add_generation_prompt"),
                        "Field `add_generation_prompt` must be a boolean.",
                    ))
                }
            };
            if let Some(ids) = tokenizer.chat_ids(body, Some(add_generation_prompt)) {
                return Ok(TokenizeRequest {
                    model,
                    tokens: ids?,
                });
            }
            tokenize(&chat_template_text(
                &Value::Object(map),
                add_generation_prompt,
            ))
        }
        (None, Some(_)) => {
            return Err(ApiError::bad_request(
                Some("messages"),
                "Field `messages` must be a list.",
            ))
        }
        (Some(_), Some(_)) => {
            return Err(ApiError::bad_request(
                None,
                "Give either `prompt` or `messages`, not both.",
            ))
        }
        (None, None) => {
            return Err(ApiError::bad_request(
                None,
                "Field `prompt` or `messages` is required.",
            ))
        }
    };
    Ok(TokenizeRequest { model, tokens })
}

impl GenerationRequest {
    /// vLLM's 400 for a request longer than the model's context
    /// (`--max-model-len`): a prompt that fills it, or a prompt and an
    /// explicit output limit that together exceed it. Without a limit vLLM
    /// generates up to the context's end, so only the prompt counts.
    pub(crate) fn check_context(&self, max_model_len: u64) -> Result<(), ApiError> {
        let explicit_limit = self.finish_reason == "length";
        let output = u64::from(self.output_tokens);
        for prompt in &self.prompts {
            let input = prompt.len() as u64;
            if input >= max_model_len {
                return Err(ApiError::bad_request(
                    None,
                    format!(
                        "This model's maximum context length is {max_model_len} tokens. However, your request has {input} input tokens. Please reduce the length of the input messages."
                    ),
                ));
            }
            if explicit_limit && input + output > max_model_len {
                return Err(ApiError::bad_request(
                    None,
                    format!(
                        "'max_tokens' or 'max_completion_tokens' is too large: {output}. This model's maximum context length is {max_model_len} tokens and your request has {input} input tokens ({output} > {max_model_len} - {input})."
                    ),
                ));
            }
        }
        Ok(())
    }
}

fn output_limit(field: &'static str, value: &Value) -> Result<u32, ApiError> {
    let Some(limit) = value.as_u64() else {
        return Err(ApiError::bad_request(
            Some(field),
            format!("`{field}` must be a non-negative integer."),
        ));
    };
    if limit == 0 {
        return Err(ApiError::bad_request(
            Some(field),
            format!("{field} must be at least 1, got 0."),
        ));
    }
    match u32::try_from(limit) {
        Ok(limit) if limit <= MAX_OUTPUT_TOKENS => Ok(limit),
        _ => Err(ApiError::bad_request(
            Some(field),
            format!("`{field}` is too large: {limit}. This model's maximum output length is {MAX_OUTPUT_TOKENS} tokens."),
        )),
    }
}

/// Reads an embeddings request: `input` is a string, a list of strings, a
/// list of token ids, or a list of lists of token ids.
pub(crate) fn parse_embedding(body: &[u8]) -> Result<EmbeddingRequest, ApiError> {
    let map = parse_object(body)?;
    let model = model(&map)?;
    let inputs = match present(&map, "input") {
        Some(Value::String(_)) => map.get("input").cloned().into_iter().collect(),
        Some(Value::Array(items)) if items.is_empty() => {
            return Err(ApiError::bad_request(
                Some("input"),
                "Field `input` must not be empty.",
            ))
        }
        Some(Value::Array(items)) if items.iter().all(Value::is_number) => {
            vec![Value::Array(items.clone())]
        }
        Some(Value::Array(items)) => items.clone(),
        Some(_) => {
            return Err(ApiError::bad_request(
                Some("input"),
                "Field `input` must be a string or a list.",
            ))
        }
        None => {
            return Err(ApiError::bad_request(
                Some("input"),
                "Field `input` is required.",
            ))
        }
    };
    let prompt_tokens = inputs.iter().map(input_tokens).sum();
    Ok(EmbeddingRequest {
        model,
        inputs,
        prompt_tokens,
    })
}

/// Tokens of one embeddings input: a string's, or the ids given.
fn input_tokens(input: &Value) -> u64 {
    match input {
        Value::String(text) => tokenize(text).len() as u64,
        Value::Array(items) => items.len() as u64,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    #[test]
    fn chat_reads_limits_and_prompt() {
        let body = br#"{"model":"m","messages":[{"role":"user","content":"12345678"},
            {"role":"user","content":[{"type":"text","text":"abcd"},{"type":"image_url","image_url":{"url":"x"}}]}],
            "max_tokens":3,"max_completion_tokens":5,"stream":true,"stream_options":{"include_usage":true}}"#;
        let request = parse_generation(GenerationKind::Chat, body, 16, &Tokenizer::Simulated);
        let request = request.ok();
        let expected_prompt = chat_token_ids(&serde_json::from_slice(body).unwrap_or(Value::Null));
        assert_eq!(
            request,
            Some(GenerationRequest {
                kind: GenerationKind::Chat,
                model: "m".into(),
                stream: true,
                include_usage: true,
                output_tokens: 5,
                finish_reason: "length",
                prompts: vec![expected_prompt],
            })
        );
    }

    #[test]
    fn a_chat_request_without_a_messages_list_is_refused_as_vllm_refuses_it() {
        for (body, message) in [
            (&br#"{"model":"m"}"#[..], "Field `messages` is required."),
            (
                br#"{"model":"m","messages":null}"#,
                "Field `messages` is required.",
            ),
            (
                br#"{"model":"m","messages":"hi"}"#,
                "Field `messages` must be a list.",
            ),
        ] {
            let refused = parse_generation(GenerationKind::Chat, body, 16, &Tokenizer::Simulated)
                .unwrap_err();
            assert_eq!(refused.status, StatusCode::BAD_REQUEST);
            assert_eq!(refused.message, message);
            assert_eq!(refused.param, Some("messages"));
        }
        // A list passes (its contents are the template's to judge), and a
        // completion has no `messages` to require.
        assert!(parse_generation(
            GenerationKind::Chat,
            br#"{"model":"m","messages":[]}"#,
            16,
            &Tokenizer::Simulated
        )
        .is_ok());
        assert!(parse_generation(
            GenerationKind::Completion,
            br#"{"model":"m","prompt":"hi"}"#,
            16,
            &Tokenizer::Simulated
        )
        .is_ok());
    }

    #[test]
    fn a_completion_without_a_prompt_is_refused_as_vllm_refuses_it() {
        for body in [&br#"{"model":"m"}"#[..], br#"{"model":"m","prompt":null}"#] {
            let refused =
                parse_generation(GenerationKind::Completion, body, 16, &Tokenizer::Simulated)
                    .unwrap_err();
            assert_eq!(refused.status, StatusCode::BAD_REQUEST);
            assert_eq!(
                refused.message,
                "At least one of `prompt` or `prompt_embeds` must be set."
            );
            assert_eq!(refused.param, Some("prompt"));
        }
        // Embeddings stand in for the prompt; an empty text is a prompt.
        for body in [
            &br#"{"model":"m","prompt_embeds":"AAAA"}"#[..],
            br#"{"model":"m","prompt":""}"#,
        ] {
            assert!(
                parse_generation(GenerationKind::Completion, body, 16, &Tokenizer::Simulated)
                    .is_ok()
            );
        }
    }

    #[test]
    fn a_request_longer_than_the_context_is_refused_as_vllm_refuses_it() {
        let request = |prompt_len: usize, output_tokens: u32, explicit: bool| GenerationRequest {
            kind: GenerationKind::Completion,
            model: "m".into(),
            stream: false,
            include_usage: false,
            output_tokens,
            finish_reason: if explicit { "length" } else { "stop" },
            prompts: vec![vec![1; 3], vec![7; prompt_len]],
        };
        // vLLM's own edge: one token short of the context, plus one, fits.
        assert!(request(99, 1, true).check_context(100).is_ok());
        // Every prompt of a completion counts, not only the first.
        let full = request(100, 1, true).check_context(100).unwrap_err();
        assert_eq!(full.status, StatusCode::BAD_REQUEST);
        assert!(
            full.message.contains(
                "maximum context length is 100 tokens. However, your request has 100 input tokens"
            ),
            "{}",
            full.message
        );
        let over = request(90, 20, true).check_context(100).unwrap_err();
        assert!(
            over.message
                .contains("'max_tokens' or 'max_completion_tokens' is too large: 20")
                && over.message.contains("(20 > 100 - 90)"),
            "{}",
            over.message
        );
        // The engine's default output length is not the client's limit.
        assert!(request(90, 20, false).check_context(100).is_ok());
        assert!(request(100, 20, false).check_context(100).is_err());
    }

    #[test]
    fn missing_limit_uses_default_and_stops() {
        let request = parse_generation(
            GenerationKind::Completion,
            br#"{"model":"m","prompt":[1,2,3]}"#,
            7,
            &Tokenizer::Simulated,
        )
        .ok();
        assert_eq!(
            request.as_ref().map(|r| (r.output_tokens, r.finish_reason)),
            Some((7, "stop"))
        );
        assert_eq!(request.map(|r| r.prompts), Some(vec![vec![1, 2, 3]]));
    }

    #[test]
    fn bad_requests_are_400s() {
        for body in [
            &b"{not json"[..],
            b"[1]",
            br#"{"messages":[]}"#,
            br#"{"model":7}"#,
            br#"{"model":"m","stream":"yes"}"#,
            br#"{"model":"m","max_tokens":0}"#,
            br#"{"model":"m","max_tokens":-3}"#,
            br#"{"model":"m","max_tokens":99999999999}"#,
        ] {
            let err = parse_generation(GenerationKind::Chat, body, 16, &Tokenizer::Simulated).err();
            assert_eq!(
                err.map(|e| e.status),
                Some(StatusCode::BAD_REQUEST),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        let err = parse_generation(
            GenerationKind::Completion,
            br#"{"model":"m","prompt":[-1]}"#,
            16,
            &Tokenizer::Simulated,
        );
        assert_eq!(
            err.err().map(|e| (e.status, e.param)),
            Some((StatusCode::BAD_REQUEST, Some("prompt")))
        );
    }

    #[test]
    fn tokenize_reads_a_prompt_or_a_chat() {
        let tokens = |body: &[u8]| parse_tokenize(body, &Tokenizer::Simulated).map(|r| r.tokens);
        assert_eq!(
            tokens(br#"{"model":"m","prompt":"a b, c"}"#),
            Ok(tokenize("a b, c"))
        );
        let chat = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        let body: Value = serde_json::from_slice(chat).unwrap_or(Value::Null);
        assert_eq!(tokens(chat), Ok(chat_token_ids(&body)));
        let without = tokens(
            br#"{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false}"#,
        );
        assert_eq!(without, Ok(tokenize("<|im_start|>user\nhi<|im_end|>\n")));
        assert_eq!(
            parse_tokenize(br#"{"prompt":""}"#, &Tokenizer::Simulated).map(|r| r.model),
            Ok(None)
        );
    }

    #[test]
    fn bad_tokenize_requests_are_400s_naming_the_field() {
        for (body, param) in [
            (&br#"{"model":"m"}"#[..], None),
            (br#"{"prompt":"a","messages":[]}"#, None),
            (br#"{"prompt":[1,2]}"#, Some("prompt")),
            (br#"{"messages":"hi"}"#, Some("messages")),
            (
                br#"{"messages":[],"add_generation_prompt":1}"#,
                Some("add_generation_prompt"),
            ),
            (br#"{"model":3,"prompt":"a"}"#, Some("model")),
        ] {
            let err = parse_tokenize(body, &Tokenizer::Simulated).err();
            assert_eq!(
                err.map(|e| (e.status, e.param)),
                Some((StatusCode::BAD_REQUEST, param)),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn embedding_inputs_are_split_like_openai() {
        let count = |body: &[u8]| parse_embedding(body).ok().map(|r| r.inputs.len());
        assert_eq!(count(br#"{"model":"m","input":"a"}"#), Some(1));
        assert_eq!(count(br#"{"model":"m","input":["a","b"]}"#), Some(2));
        assert_eq!(count(br#"{"model":"m","input":[1,2,3]}"#), Some(1));
        assert_eq!(count(br#"{"model":"m","input":[[1],[2]]}"#), Some(2));
        assert_eq!(count(br#"{"model":"m","input":[]}"#), None);
        assert_eq!(count(br#"{"model":"m"}"#), None);
    }
}
