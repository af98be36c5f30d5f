//! Reading an OpenAI request body: the model, where it sits, and the routing text.
//!
//! The body is parsed once (`read_envelope`: by the envelope scanner when
//! it can vouch for the body, by serde otherwise): chat and Messages
//! conversations are read in that pass, the other fields routing reads are
//! borrowed as raw values and looked at more closely only as needed. `model` is kept as a
//! byte span of the body so the gateway can splice in the upstream model
//! without re-encoding the rest (the body may be many MiB of context).
//!
//! A body that is valid JSON with a string `model` is always routed, even if
//! the rest does not match the endpoint's shape: the engine owns that
//! verdict. Routing then falls back to a digest of the raw body.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use serde::Deserialize;

use super::content::read_parts;
use super::conversation::Digest;
use super::envelope::Envelope;
use super::prescan::Prescanned;
use super::raw::{string_value, Raw};
use super::turns::{Content, Turn, Turns};
use super::{Conversation, Endpoint};

/// What the gateway needs from a request body.
#[derive(Debug, PartialEq)]
pub struct ParsedRequest {
    /// The public model asked for.
    pub model: String,
    /// Byte range of `model` in the body: its JSON string literal (quotes
    /// included), or the value of a form's `model` part.
    pub model_span: Range<usize>,
    /// How the upstream model is written over `model_span`.
    pub model_literal: ModelLiteral,
    pub stream: bool,
    /// Conversation text, bounded to `RouteContext::MAX_PROMPT_BYTES`.
    pub prompt: String,
    /// Length of the whole conversation text.
    pub prompt_len: usize,
    /// Digest of the whole conversation, or of the raw body when it has no readable one.
    pub prompt_digest: u64,
    /// A completions `prompt` given as one list of token ids.
    pub token_ids: Option<Arc<[u32]>>,
    /// The conversation was read: the route's tokenizer, when it has one,
    /// can find its parts with [`text_spans`] (`tokenization.rs`).
    pub readable: bool,
    /// Responses: the stored response this one continues.
    pub previous_response_id: Option<String>,
    /// A chat or completions stream whose client did not ask for usage:
    /// the splice that asks the engine for it (the gateway counts tokens),
    /// whose chunk the gateway then keeps from the client.
    pub usage_splice: Option<Splice>,
}

/// How `model` is written in a body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelLiteral {
    /// A JSON string literal, quotes and escapes included.
    Json,
    /// The raw bytes of a `multipart/form-data` part.
    FormValue,
}

/// Bytes to put in place of `range` of the body (an empty range inserts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Splice {
    pub range: Range<usize>,
    pub bytes: Vec<u8>,
}

impl ParsedRequest {
    /// A request with no body to read, for `model` as the engine knows it
    /// (`GET /v1/responses/{id}`): nothing to rewrite, nothing to route on.
    pub fn bodiless(model: &str) -> ParsedRequest {
        ParsedRequest {
            model: model.to_string(),
            model_span: 0..0,
            model_literal: ModelLiteral::Json,
            stream: false,
            prompt: String::new(),
            prompt_len: 0,
            prompt_digest: 0,
            token_ids: None,
            readable: false,
            previous_response_id: None,
            usage_splice: None,
        }
    }
}

/// Byte ranges of raw JSON values in the body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextSpans {
    /// Chat: `messages`.
    pub messages: Option<Range<usize>>,
    /// Chat: `tools`, unless `null`.
    pub tools: Option<Range<usize>>,
    /// Chat: `chat_template_kwargs`, unless `null`.
    pub chat_template_kwargs: Option<Range<usize>>,
    /// Chat: `add_generation_prompt` when a boolean.
    pub add_generation_prompt: Option<bool>,
    /// Completions: `prompt` when one string (its literal, quotes included).
    pub prompt: Option<Range<usize>>,
    /// Messages: `system`; Responses: `instructions` (unless `null`).
    pub system: Option<Range<usize>>,
    /// Responses: `input` (Messages' `messages` and `tools` use the fields above).
    pub input: Option<Range<usize>>,
}

/// Why a body cannot be routed. Each names the offending field where there is one.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("the request body is empty; expected a JSON object")]
    Empty,
    #[error("the request body must be a JSON object")]
    NotAnObject,
    #[error("the request body is not valid JSON: {0}")]
    InvalidJson(String),
    #[error("you must provide a model parameter")]
    MissingModel,
    #[error("`model` must be a string")]
    ModelNotString,
    #[error("`model` must not be empty")]
    EmptyModel,
    #[error("the `x-rolter-token-ids` header must be comma-separated unsigned integers: {0}")]
    InvalidTokenIds(String),
    #[error("the multipart/form-data body cannot be read: {0}")]
    InvalidForm(#[from] super::form::FormError),
    #[error("`model` must be UTF-8 text")]
    ModelNotText,
    #[error("the `x-rolter-priority` header must be an integer (it may lower the key's priority, never raise it): got {0:?}")]
    InvalidPriority(String),
}

impl RequestError {
    /// The request field the error is about, for OpenAI's `param`.
    pub fn param(&self) -> Option<&'static str> {
        match self {
            RequestError::MissingModel
            | RequestError::ModelNotString
            | RequestError::EmptyModel
            | RequestError::ModelNotText => Some("model"),
            _ => None,
        }
    }
}

/// Where the parts a chat template reads sit: looked for only when a
/// route's tokenizer asks, so the request path does not capture them.
#[derive(Deserialize)]
struct Parts<'a> {
    #[serde(borrow)]
    messages: Option<Raw<'a>>,
    #[serde(borrow)]
    prompt: Option<Raw<'a>>,
    #[serde(borrow)]
    input: Option<Raw<'a>>,
    #[serde(borrow)]
    tools: Option<Raw<'a>>,
    #[serde(borrow)]
    chat_template_kwargs: Option<Raw<'a>>,
    #[serde(borrow)]
    add_generation_prompt: Option<Raw<'a>>,
    #[serde(borrow)]
    system: Option<Raw<'a>>,
    #[serde(borrow)]
    instructions: Option<Raw<'a>>,
}

pub fn parse_request(endpoint: Endpoint, body: &[u8]) -> Result<ParsedRequest, RequestError> {
    Ok(read_request(endpoint, body)?.parse(Digest::Kept))
}

/// [`parse_request`] of a body read as it arrived ([`Prescan`]): the same
/// answer, without redoing what the prescan did.
///
/// [`Prescan`]: super::Prescan
pub fn parse_prescanned(
    endpoint: Endpoint,
    body: &Prescanned,
) -> Result<ParsedRequest, RequestError> {
    Ok(read_prescanned(endpoint, body)?.parse(Digest::Kept))
}

/// [`parse_request`] with serde reading the whole envelope: the reference
/// its scanner is held to (unit tests, the `request` fuzz target).
#[doc(hidden)]
pub fn parse_request_by_serde(
    endpoint: Endpoint,
    body: &[u8],
) -> Result<ParsedRequest, RequestError> {
    Ok(RequestEnvelope::read(endpoint, body, Reader::Serde)?.parse(Digest::Kept))
}

/// The first half of [`parse_request`]: the body checked and its model
/// read, for the gateway to find the route, whose strategy says whether
/// the conversation's digest is worth working out.
pub fn read_request(endpoint: Endpoint, body: &[u8]) -> Result<RequestEnvelope<'_>, RequestError> {
    RequestEnvelope::read(endpoint, body, Reader::Scanner)
}

/// [`read_request`] of a body read as it arrived.
pub fn read_prescanned(
    endpoint: Endpoint,
    body: &Prescanned,
) -> Result<RequestEnvelope<'_>, RequestError> {
    RequestEnvelope::read(endpoint, body.body(), Reader::Prescanned(body))
}

/// A body whose envelope was read and whose model is known; its
/// conversation is read by [`RequestEnvelope::parse`].
pub struct RequestEnvelope<'a> {
    endpoint: Endpoint,
    body: &'a [u8],
    envelope: Envelope<'a>,
    model: Cow<'a, str>,
    model_span: Range<usize>,
}

impl<'a> RequestEnvelope<'a> {
    fn read(endpoint: Endpoint, body: &'a [u8], reader: Reader<'a>) -> Result<Self, RequestError> {
        match body.iter().find(|b| !b.is_ascii_whitespace()) {
            None => return Err(RequestError::Empty),
            Some(b'{') => {}
            Some(_) => return Err(RequestError::NotAnObject),
        }
        let envelope =
            read_envelope(body, reader).map_err(|e| RequestError::InvalidJson(e.to_string()))?;

        let raw_model = envelope.model.ok_or(RequestError::MissingModel)?;
        let model = string_value(raw_model).ok_or(RequestError::ModelNotString)?;
        if model.is_empty() {
            return Err(RequestError::EmptyModel);
        }
        let model_span = span_in(body, raw_model.get()).ok_or(RequestError::ModelNotString)?;
        Ok(Self {
            endpoint,
            body,
            envelope,
            model,
            model_span,
        })
    }

    /// The public model asked for.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// What the gateway needs of the body: the envelope's fields and the
    /// conversation, with its digest or without ([`Digest`]).
    pub fn parse(self, digest: Digest) -> ParsedRequest {
        let Self {
            endpoint,
            body,
            envelope,
            model,
            model_span,
        } = self;
        // The routing text is made of the body's strings and shorter labels
        // (`user: ` for `"role":"user"`), so the body's size is room enough.
        let mut conversation = Conversation::with_capacity(body.len(), digest);
        let mut token_ids = None;
        let readable = match endpoint {
            Endpoint::ChatCompletions => match &envelope.messages {
                Some(Turns(Some(turns))) => {
                    read_messages(turns, &mut conversation);
                    true
                }
                _ => false,
            },
            Endpoint::Completions => envelope.prompt.is_some_and(|p| {
                token_ids = read_token_ids(p);
                read_prompt(p, &mut conversation)
            }),
            Endpoint::Embeddings => envelope
                .input
                .is_some_and(|i| read_prompt(i, &mut conversation)),
            Endpoint::Responses => {
                super::responses::read(envelope.instructions, envelope.input, &mut conversation)
            }
            Endpoint::Messages | Endpoint::MessagesCountTokens => super::messages::read(
                envelope.system,
                envelope.messages.as_ref(),
                &mut conversation,
            ),
            // Routed by `model` alone: by least load, or by a digest of the
            // whole body for the strategies that hash.
            Endpoint::Models
            | Endpoint::ResponseById
            | Endpoint::Rerank
            | Endpoint::Score
            | Endpoint::Tokenize
            | Endpoint::Detokenize
            | Endpoint::AudioTranscriptions
            | Endpoint::AudioTranslations => false,
        };
        let (prompt, prompt_len, mut prompt_digest) = conversation.finish();
        if !readable && digest == Digest::Kept {
            prompt_digest = xxhash_rust::xxh3::xxh3_64(body);
        }
        let stream = envelope.stream.is_some_and(|s| s.get() == "true");
        let usage_splice = match endpoint {
            Endpoint::ChatCompletions | Endpoint::Completions if stream => {
                usage_splice(body, envelope.stream_options)
            }
            _ => None,
        };
        ParsedRequest {
            model: model.into_owned(),
            model_span,
            model_literal: ModelLiteral::Json,
            stream,
            usage_splice,
            prompt: if readable { prompt } else { String::new() },
            prompt_len: if readable { prompt_len } else { 0 },
            prompt_digest,
            token_ids: token_ids.map(Arc::from),
            readable,
            previous_response_id: match endpoint {
                Endpoint::Responses => envelope
                    .previous_response_id
                    .and_then(string_value)
                    .map(Cow::into_owned),
                _ => None,
            },
        }
    }
}

/// Which parser reads the envelope.
#[derive(Clone, Copy, Debug)]
enum Reader<'a> {
    /// The scanner, and serde for what it declines: the gateway's.
    Scanner,
    /// The scanner on the prescan of the body, and serde for what it
    /// declines.
    Prescanned(&'a Prescanned),
    /// serde alone: the reference the scanner is held to.
    Serde,
}

/// The envelope of `body`, or serde's error.
fn read_envelope<'a>(
    body: &'a [u8],
    reader: Reader<'a>,
) -> Result<Envelope<'a>, serde_json::Error> {
    let scanned = match reader {
        Reader::Scanner => super::scan::envelope(body),
        Reader::Prescanned(prescanned) => super::scan::envelope_prescanned(prescanned),
        Reader::Serde => None,
    };
    match scanned {
        Some(envelope) => Ok(envelope),
        None => serde_json::from_slice(body),
    }
}

/// Where the parts a chat template reads sit in `body`, a request of
/// `endpoint` that [`parse_request`] read (`ParsedRequest::readable`).
pub fn text_spans(endpoint: Endpoint, body: &[u8]) -> Option<TextSpans> {
    let parts: Parts<'_> = serde_json::from_slice(body).ok()?;
    let span = |raw: Option<Raw<'_>>| {
        raw.filter(|r| r.get() != "null")
            .and_then(|r| span_in(body, r.get()))
    };
    Some(match endpoint {
        Endpoint::ChatCompletions => TextSpans {
            messages: span(parts.messages),
            tools: span(parts.tools),
            chat_template_kwargs: span(parts.chat_template_kwargs),
            add_generation_prompt: parts
                .add_generation_prompt
                .and_then(|r| serde_json::from_str::<bool>(r.get()).ok()),
            ..TextSpans::default()
        },
        Endpoint::Completions => TextSpans {
            prompt: span(parts.prompt.filter(|p| p.get().starts_with('"'))),
            ..TextSpans::default()
        },
        Endpoint::Messages | Endpoint::MessagesCountTokens => TextSpans {
            messages: span(parts.messages),
            tools: span(parts.tools),
            system: span(parts.system),
            ..TextSpans::default()
        },
        Endpoint::Responses => TextSpans {
            input: span(parts.input),
            tools: span(parts.tools),
            system: span(parts.instructions),
            ..TextSpans::default()
        },
        _ => return None,
    })
}

/// Reads a `multipart/form-data` body (the audio endpoints) delimited by
/// `boundary`: its `model` part, in place, and `stream`. Routed by `model`
/// alone; strategies that hash read a digest of the whole body.
pub fn parse_form_request(body: &[u8], boundary: &[u8]) -> Result<ParsedRequest, RequestError> {
    if body.is_empty() {
        return Err(RequestError::Empty);
    }
    let fields = super::form::read_form(body, boundary)?;
    let model_span = fields.model.ok_or(RequestError::MissingModel)?;
    let model =
        std::str::from_utf8(&body[model_span.clone()]).map_err(|_| RequestError::ModelNotText)?;
    if model.is_empty() {
        return Err(RequestError::EmptyModel);
    }
    Ok(ParsedRequest {
        model: model.to_string(),
        model_span,
        model_literal: ModelLiteral::FormValue,
        stream: fields.stream,
        usage_splice: None,
        prompt: String::new(),
        prompt_len: 0,
        prompt_digest: xxhash_rust::xxh3::xxh3_64(body),
        token_ids: None,
        readable: false,
        previous_response_id: None,
    })
}

/// The splice that sets `stream_options.include_usage` when the client did
/// not: `None` when it did, or when `stream_options` is not an object (the
/// engine answers that one).
fn usage_splice(body: &[u8], options: Option<Raw<'_>>) -> Option<Splice> {
    const ASK: &str = r#"{"include_usage":true}"#;
    if let Some(null) = options.filter(|o| o.get() == "null") {
        return Some(Splice {
            range: span_in(body, null.get())?,
            bytes: ASK.as_bytes().to_vec(),
        });
    }
    let Some(options) = options else {
        // Right after the opening brace: the object has `model`, so a
        // member follows and the comma is right.
        let brace = body.iter().position(|&b| b == b'{')?;
        return Some(Splice {
            range: brace + 1..brace + 1,
            bytes: format!(r#""stream_options":{ASK},"#).into_bytes(),
        });
    };
    let span = span_in(body, options.get())?;
    let mut fields: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(options.get()).ok()?;
    if fields.get("include_usage") == Some(&serde_json::Value::Bool(true)) {
        return None;
    }
    fields.insert("include_usage".into(), serde_json::Value::Bool(true));
    Some(Splice {
        range: span,
        bytes: serde_json::to_vec(&fields).ok()?,
    })
}

/// A prompt that is one list of token ids.
fn read_token_ids(raw: Raw<'_>) -> Option<Vec<u32>> {
    raw.get()
        .starts_with('[')
        .then(|| serde_json::from_str::<Vec<u32>>(raw.get()).ok())
        .flatten()
        .filter(|ids| !ids.is_empty())
}

/// Where `inner` (a slice borrowed from `outer`) sits in `outer`.
fn span_in(outer: &[u8], inner: &str) -> Option<Range<usize>> {
    let start = (inner.as_ptr() as usize).checked_sub(outer.as_ptr() as usize)?;
    let end = start.checked_add(inner.len())?;
    (end <= outer.len() && &outer[start..end] == inner.as_bytes()).then_some(start..end)
}

/// Chat messages, turn by turn.
fn read_messages(turns: &[Turn<'_>], conversation: &mut Conversation) {
    for turn in turns {
        conversation.push_turn(turn.role.as_deref().unwrap_or(""));
        match &turn.content {
            Some(Content::Text(text)) => conversation.push_text(text),
            Some(Content::Escaped(text)) => conversation.push_escaped(text),
            Some(Content::List(parts)) => read_parts(parts, conversation, |kind| kind == "text"),
            Some(Content::Other) | None => {}
        }
        if let Some(tool_calls) = turn.tool_calls {
            conversation.push_identity("tool_calls", tool_calls.get().as_bytes());
        }
        if let Some(id) = &turn.tool_call_id {
            conversation.push_identity("tool_call_id", id.as_bytes());
        }
    }
}

/// A completions `prompt` or embeddings `input`: a string, a list of strings,
/// a list of token ids, or a list of lists of token ids.
fn read_prompt(raw: Raw<'_>, conversation: &mut Conversation) -> bool {
    match raw.get().as_bytes().first() {
        Some(b'"') => match string_value(raw) {
            Some(text) => {
                conversation.push_text(&text);
                true
            }
            None => false,
        },
        Some(b'[') => {
            if let Ok(ids) = serde_json::from_str::<Vec<u32>>(raw.get()) {
                conversation.push_token_ids(&ids);
                return true;
            }
            let Ok(items) = serde_json::from_str::<Vec<Raw<'_>>>(raw.get()) else {
                return false;
            };
            for (i, item) in items.into_iter().enumerate() {
                if i > 0 {
                    conversation.push_separator();
                }
                if item.get().starts_with('"') {
                    match string_value(item) {
                        Some(text) => conversation.push_text(&text),
                        None => return false,
                    }
                } else {
                    match serde_json::from_str::<Vec<u32>>(item.get()) {
                        Ok(ids) => conversation.push_token_ids(&ids),
                        Err(_) => return false,
                    }
                }
            }
            true
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use rolter_balancer::RouteContext;

    use super::*;
    use crate::openai::Prescan;

    fn chat(body: &str) -> Result<ParsedRequest, RequestError> {
        parse_request(Endpoint::ChatCompletions, body.as_bytes())
    }

    #[test]
    fn finds_model_and_its_exact_span() {
        let body =
            r#"{"messages":[{"role":"user","content":"hi"}], "model" : "qwen-chat","stream":true}"#;
        let parsed = chat(body).unwrap();
        assert_eq!(parsed.model, "qwen-chat");
        assert_eq!(&body[parsed.model_span.clone()], r#""qwen-chat""#);
        assert!(parsed.stream);
        assert_eq!(parsed.prompt, "user: hi");
    }

    #[test]
    fn escaped_model_is_decoded_and_span_covers_the_literal() {
        let body = r#"{"model":"a\/b\u0041"}"#;
        let parsed = chat(body).unwrap();
        assert_eq!(parsed.model, "a/bA");
        assert_eq!(&body[parsed.model_span], r#""a\/b\u0041""#);
    }

    #[test]
    fn rejects_what_cannot_be_routed_naming_the_field() {
        assert_eq!(chat("").unwrap_err(), RequestError::Empty);
        assert_eq!(chat("  [1]").unwrap_err(), RequestError::NotAnObject);
        assert!(matches!(
            chat("{\"model\":").unwrap_err(),
            RequestError::InvalidJson(_)
        ));
        assert_eq!(chat("{}").unwrap_err(), RequestError::MissingModel);
        assert_eq!(
            chat(r#"{"model":42}"#).unwrap_err(),
            RequestError::ModelNotString
        );
        assert_eq!(
            chat(r#"{"model":""}"#).unwrap_err(),
            RequestError::EmptyModel
        );
        assert_eq!(RequestError::ModelNotString.param(), Some("model"));
        assert!(matches!(
            chat(r#"{"model":"a","model":"b"}"#).unwrap_err(),
            RequestError::InvalidJson(_)
        ));
    }

    #[test]
    fn invalid_utf8_is_invalid_json() {
        let body = b"{\"model\":\"\xff\"}";
        assert!(matches!(
            parse_request(Endpoint::ChatCompletions, body).unwrap_err(),
            RequestError::InvalidJson(_)
        ));
    }

    #[test]
    fn chat_parts_give_text_and_image_identity() {
        let with = |url: &str| {
            chat(&format!(
                r#"{{"model":"m","messages":[{{"role":"system","content":"be brief"}},{{"role":"user","content":[{{"type":"text","text":"what is"}},{{"type":"image_url","image_url":{{"url":"{url}"}}}}]}}]}}"#
            ))
            .unwrap()
        };
        let cat = with("http://x/cat.png");
        let dog = with("http://x/dog.png");
        assert_eq!(cat.prompt, "system: be brief\nuser: what is");
        assert_eq!(cat.prompt, dog.prompt);
        assert_ne!(cat.prompt_digest, dog.prompt_digest);
    }

    #[test]
    fn tool_calls_and_results_are_part_of_the_digest() {
        let with = |args: &str| {
            chat(&format!(
                r#"{{"model":"m","messages":[{{"role":"assistant","content":null,"tool_calls":[{{"id":"c1","type":"function","function":{{"name":"f","arguments":"{args}"}}}}]}},{{"role":"tool","tool_call_id":"c1","content":"42"}}]}}"#
            ))
            .unwrap()
        };
        let a = with("{}");
        let b = with("{\\\"x\\\":1}");
        assert_eq!(a.prompt, "assistant: \ntool: 42");
        assert_ne!(a.prompt_digest, b.prompt_digest);
    }

    #[test]
    fn completions_prompt_forms() {
        let parse = |prompt: &str| {
            parse_request(
                Endpoint::Completions,
                format!(r#"{{"model":"m","prompt":{prompt}}}"#).as_bytes(),
            )
            .unwrap()
        };
        assert_eq!(parse(r#""hello""#).prompt, "hello");
        assert_eq!(parse(r#"["a","b"]"#).prompt, "a\nb");
        let ids = parse("[1,2,3]");
        assert_eq!(ids.prompt, "");
        assert_eq!(ids.token_ids.as_deref(), Some(&[1, 2, 3][..]));
        assert_eq!(parse(r#""hello""#).token_ids, None);
        assert_eq!(parse("[[1,2],[3]]").token_ids, None);
        assert_ne!(ids.prompt_digest, parse("[1,2,4]").prompt_digest);
        assert_ne!(
            parse("[[1,2],[3]]").prompt_digest,
            parse("[[1],[2,3]]").prompt_digest
        );
    }

    #[test]
    fn unreadable_shape_still_routes_on_a_raw_digest() {
        let a = chat(r#"{"model":"m","messages":"not a list"}"#).unwrap();
        let b = chat(r#"{"model":"m","messages":"another"}"#).unwrap();
        assert_eq!(a.prompt, "");
        assert_ne!(a.prompt_digest, b.prompt_digest);
    }

    #[test]
    fn a_list_that_is_not_of_messages_is_consumed_and_routes_on_a_raw_digest() {
        for messages in [
            r#"[{"role":"user","content":"hi"},3]"#,
            r#"[{"role":5,"content":"hi"}]"#,
            r#"[{"role":"user","tool_call_id":{"a":1},"content":"hi"}]"#,
            r#"[{"role":"user","content":"hi","role":"user"}]"#,
            r#"[["user","hi"]]"#,
            r#"{"role":"user","content":"hi"}"#,
            r#"[{"role":"user","content":"hi"},null]"#,
        ] {
            let body = format!(r#"{{"messages":{messages},"model":"m","stream":true}}"#);
            let parsed = chat(&body).unwrap_or_else(|e| panic!("{messages}: {e}"));
            assert!(!parsed.readable, "{messages}");
            assert_eq!(
                (parsed.prompt.as_str(), parsed.prompt_len),
                ("", 0),
                "{messages}"
            );
            assert_eq!(
                parsed.prompt_digest,
                xxhash_rust::xxh3::xxh3_64(body.as_bytes())
            );
            // What follows the list was still read.
            assert!(parsed.stream, "{messages}");
            assert_eq!(parsed.model, "m");
        }
    }

    #[test]
    fn contents_of_every_shape_are_read_or_passed_over_in_one_pass() {
        let parsed = chat(
            r#"{"model":"m","messages":[
                {"role":"system","content":null,"name":"x","name":"y"},
                {"role":"user","content":{"text":"an object is not read"}},
                {"role":"user","content":7},
                {"content":true},
                {"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
                {"role":null,"content":"last"}
            ]}"#,
        )
        .unwrap();
        assert!(parsed.readable);
        assert_eq!(
            parsed.prompt,
            "system: \nuser: \nuser: \n: \nassistant: ab\n: last"
        );
    }

    #[test]
    fn text_spans_are_the_raw_parts_a_template_reads() {
        let at = |body: &'static str, range: Option<Range<usize>>| &body[range.unwrap()];
        let body = r#"{"model":"m","tools":[{"type":"function"}],"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":false,"chat_template_kwargs":null}"#;
        let spans = text_spans(Endpoint::ChatCompletions, body.as_bytes()).unwrap();
        assert_eq!(
            at(body, spans.messages),
            r#"[{"role":"user","content":"hi"}]"#
        );
        assert_eq!(at(body, spans.tools), r#"[{"type":"function"}]"#);
        assert_eq!(spans.chat_template_kwargs, None, "null is no kwargs");
        assert_eq!(spans.add_generation_prompt, Some(false));
        let body =
            r#"{"model":"m","system":"be brief","messages":[{"role":"user","content":"hi"}]}"#;
        let spans = text_spans(Endpoint::Messages, body.as_bytes()).unwrap();
        assert_eq!(at(body, spans.system), r#""be brief""#);
        assert_eq!(
            at(body, spans.messages),
            r#"[{"role":"user","content":"hi"}]"#
        );
        let body = r#"{"model":"m","instructions":"be brief","input":"hi"}"#;
        let spans = text_spans(Endpoint::Responses, body.as_bytes()).unwrap();
        assert_eq!(
            (at(body, spans.system), at(body, spans.input)),
            (r#""be brief""#, r#""hi""#)
        );
        let body = r#"{"model":"m","prompt":"once upon"}"#;
        let spans = text_spans(Endpoint::Completions, body.as_bytes()).unwrap();
        assert_eq!(at(body, spans.prompt), r#""once upon""#);
        assert_eq!(text_spans(Endpoint::Embeddings, body.as_bytes()), None);
    }

    #[test]
    fn escaped_and_plain_strings_read_the_same_text() {
        let plain = chat(r#"{"model":"m","messages":[{"role":"user","content":"a/b é"}]}"#);
        let escaped = chat(r#"{"model":"m","messages":[{"role":"user","content":"a\/b \u00e9"}]}"#);
        let (plain, escaped) = (plain.unwrap(), escaped.unwrap());
        assert_eq!(escaped.prompt, "user: a/b é");
        assert_eq!(plain.prompt, "user: a/b é");
        assert_eq!(plain.prompt_digest, escaped.prompt_digest);
        let prompt = parse_request(Endpoint::Completions, br#"{"model":"m","prompt":"x\ty"}"#);
        assert_eq!(prompt.unwrap().prompt, "x\ty");
    }

    /// What a route that reads no digest gets: the same bounded text and
    /// whole length as one that does, a digest of 0, for conversations
    /// whose escapes fall before the bound, across it and past it, in
    /// every endpoint that reads a conversation.
    #[test]
    fn skipping_the_digest_reads_the_same_text_and_length() {
        // Counted escape by escape (a `\u` escape), or by the prescan's
        // index (short escapes, backslash runs among them).
        for line in [
            r#"The committee said \"yes\" to the plan \u00e9\ud83d\ude00.\n"#,
            r#"The committee said \"yes\" to the plan.\n"#,
            r#"C:\\path\\\"quoted\\\\\" \/ \b\f\r\t"#,
        ] {
            skipping_the_digest_reads_the_same_text_and_length_of(line);
        }
    }

    fn skipping_the_digest_reads_the_same_text_and_length_of(line: &str) {
        let long = line.repeat(2 * RouteContext::MAX_PROMPT_BYTES / line.len());
        let bodies = [
            (
                Endpoint::ChatCompletions,
                format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{long}"}}]}}"#),
            ),
            (
                Endpoint::ChatCompletions,
                format!(
                    r#"{{"model":"m","messages":[{{"role":"system","content":"short\n"}},{{"role":"user","content":"{long}"}},{{"role":"user","content":"{long}"}}]}}"#
                ),
            ),
            (
                Endpoint::ChatCompletions,
                format!(
                    r#"{{"model":"m","messages":[{{"role":"user","content":"{}"}},{{"role":"user","content":"{long}"}}]}}"#,
                    "x".repeat(RouteContext::MAX_PROMPT_BYTES - 10)
                ),
            ),
            (
                Endpoint::Messages,
                format!(
                    r#"{{"model":"m","max_tokens":5,"messages":[{{"role":"user","content":"{long}"}}]}}"#
                ),
            ),
            (
                Endpoint::Completions,
                format!(r#"{{"model":"m","prompt":"{long}"}}"#),
            ),
            (
                Endpoint::Embeddings,
                r#"{"model":"m","input":[1,2,3]}"#.to_owned(),
            ),
            (Endpoint::Rerank, r#"{"model":"m","query":"q"}"#.to_owned()),
        ];
        for (endpoint, body) in bodies {
            let read = |digest| {
                read_request(endpoint, body.as_bytes())
                    .unwrap()
                    .parse(digest)
            };
            let (kept, skipped) = (read(Digest::Kept), read(Digest::Skipped));
            // As it arrived: the same, whatever the pieces.
            for cut in [7, 4093] {
                let mut prescan = Prescan::with_pieces(body.len(), &[]);
                for piece in body.as_bytes().chunks(cut) {
                    prescan.push(piece);
                }
                let prescanned = prescan.finish().expect("UTF-8");
                let read = |digest| {
                    read_prescanned(endpoint, &prescanned)
                        .unwrap()
                        .parse(digest)
                };
                assert_eq!(read(Digest::Kept), kept, "{endpoint:?} in pieces of {cut}");
                assert_eq!(
                    read(Digest::Skipped),
                    skipped,
                    "{endpoint:?} in pieces of {cut}"
                );
            }
            assert_eq!(skipped.prompt, kept.prompt, "{endpoint:?}");
            assert_eq!(skipped.prompt_len, kept.prompt_len, "{endpoint:?}");
            assert_ne!(kept.prompt_digest, 0, "{endpoint:?}");
            assert_eq!(skipped.prompt_digest, 0, "{endpoint:?}");
            assert_eq!(
                ParsedRequest {
                    prompt_digest: 0,
                    ..kept
                },
                skipped,
                "{endpoint:?}"
            );
        }
        // The length is the decoded text's, which serde agrees with.
        let body = format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{long}"}}]}}"#);
        let decoded: String = serde_json::from_str(&format!("\"{long}\"")).unwrap();
        let skipped = read_request(Endpoint::ChatCompletions, body.as_bytes())
            .unwrap()
            .parse(Digest::Skipped);
        assert_eq!(skipped.prompt_len, "user: ".len() + decoded.len());
        let prescanned = Prescan::with_pieces(body.len(), &[Bytes::from(body.clone())])
            .finish()
            .expect("UTF-8");
        let skipped = read_prescanned(Endpoint::ChatCompletions, &prescanned)
            .unwrap()
            .parse(Digest::Skipped);
        assert_eq!(skipped.prompt_len, "user: ".len() + decoded.len());
    }

    #[test]
    fn embeddings_input_is_read() {
        let parsed =
            parse_request(Endpoint::Embeddings, br#"{"model":"e","input":["x","y"]}"#).unwrap();
        assert_eq!(parsed.prompt, "x\ny");
    }

    #[test]
    fn a_conversation_reads_the_same_through_messages_responses_and_chat() {
        let chat = chat(
            r#"{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"more"}]}"#,
        )
        .unwrap();
        let messages = parse_request(
            Endpoint::Messages,
            br#"{"model":"m","max_tokens":5,"system":[{"type":"text","text":"be brief"}],"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":[{"type":"text","text":"hello"}]},{"role":"user","content":"more"}]}"#,
        )
        .unwrap();
        let responses = parse_request(
            Endpoint::Responses,
            br#"{"model":"m","instructions":"be brief","input":[{"role":"user","content":"hi"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"hello"}]},{"role":"user","content":[{"type":"input_text","text":"more"}]}]}"#,
        )
        .unwrap();
        assert_eq!(
            chat.prompt,
            "system: be brief\nuser: hi\nassistant: hello\nuser: more"
        );
        assert_eq!(messages.prompt, chat.prompt);
        assert_eq!(responses.prompt, chat.prompt);
        assert_eq!(messages.model, "m");
        let one_turn = parse_request(
            Endpoint::Responses,
            br#"{"model":"m","input":"hi","stream":true}"#,
        )
        .unwrap();
        assert_eq!(one_turn.prompt, "user: hi");
        assert!(one_turn.stream);
    }

    #[test]
    fn tool_calls_and_results_of_messages_and_responses_are_in_the_digest() {
        let messages = |result: &str| {
            parse_request(
                Endpoint::Messages,
                format!(
                    r#"{{"model":"m","messages":[{{"role":"assistant","content":[{{"type":"tool_use","id":"t1","name":"f","input":{{}}}}]}},{{"role":"user","content":[{{"type":"tool_result","tool_use_id":"t1","content":"{result}"}}]}}]}}"#
                )
                .as_bytes(),
            )
            .unwrap()
        };
        let (a, b) = (messages("41"), messages("42"));
        assert_eq!(a.prompt, "assistant: \nuser: 41");
        assert_ne!(a.prompt_digest, b.prompt_digest);
        let responses = |args: &str| {
            parse_request(
                Endpoint::Responses,
                format!(
                    r#"{{"model":"m","input":[{{"type":"function_call","call_id":"c1","name":"f","arguments":"{args}"}},{{"type":"function_call_output","call_id":"c1","output":"42"}}]}}"#
                )
                .as_bytes(),
            )
            .unwrap()
        };
        let (a, b) = (responses("{}"), responses("[]"));
        assert_eq!(a.prompt, "tool: 42");
        assert_ne!(a.prompt_digest, b.prompt_digest);
        // A body whose input is neither is still routed, by its raw digest.
        let odd = parse_request(Endpoint::Responses, br#"{"model":"m","input":7}"#).unwrap();
        assert_eq!(odd.prompt, "");
    }
}

#[cfg(test)]
mod usage_splice_tests {
    use super::*;

    fn spliced(body: &str) -> Option<String> {
        let parsed = parse_request(Endpoint::ChatCompletions, body.as_bytes()).unwrap();
        let splice = parsed.usage_splice?;
        let mut out = body.as_bytes().to_vec();
        out.splice(splice.range, splice.bytes);
        Some(String::from_utf8(out).unwrap())
    }

    #[test]
    fn a_stream_that_did_not_ask_for_usage_asks_the_engine() {
        let asked = |body: &str| {
            let out = spliced(body).expect("a splice");
            let json: serde_json::Value = serde_json::from_str(&out).unwrap();
            assert_eq!(json["stream_options"]["include_usage"], true, "{out}");
            json
        };
        asked(r#"{"model":"m","stream":true,"messages":[]}"#);
        asked(r#" { "model":"m","stream":true,"stream_options":null}"#);
        let kept = asked(
            r#"{"model":"m","stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":false}}"#,
        );
        assert_eq!(kept["stream_options"]["continuous_usage_stats"], false);
        assert_eq!(
            spliced(r#"{"model":"m","stream":true,"stream_options":{"include_usage":true}}"#),
            None
        );
        assert_eq!(
            spliced(r#"{"model":"m","stream":false}"#),
            None,
            "not a stream"
        );
        assert_eq!(
            spliced(r#"{"model":"m","stream":true,"stream_options":7}"#),
            None
        );
    }
}
