//! The engine endpoints that generate nothing: `/v1/rerank`, `/v1/score`,
//! `/detokenize` and the audio endpoints, in vLLM's shapes. Their answers
//! are computed from the request alone (a relevance score is the share of
//! the query's tokens a document holds; a transcript describes the audio
//! it received), so a test can tell what reached the engine.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::error::ApiError;
use super::tokenizer::tokenize;

/// A JSON body's object, or vLLM's 400.
fn object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(ApiError::bad_request(
            None,
            "The body must be a JSON object.",
        )),
    }
}

fn model_of(map: &Map<String, Value>) -> Result<String, ApiError> {
    match map.get("model") {
        Some(Value::String(model)) => Ok(model.clone()),
        _ => Err(ApiError::bad_request(
            Some("model"),
            "Field `model` is required.",
        )),
    }
}

/// Texts given as one string or a list of strings (or `{"text": …}`
/// documents, as Cohere-style rerank sends them).
fn texts(value: Option<&Value>, param: &'static str) -> Result<Vec<String>, ApiError> {
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("text").and_then(Value::as_str).map(str::to_string),
        _ => None,
    };
    match value {
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                text(item).ok_or_else(|| {
                    ApiError::bad_request(Some(param), format!("`{param}` must hold strings."))
                })
            })
            .collect(),
        Some(single) => text(single).map(|t| vec![t]).ok_or_else(|| {
            ApiError::bad_request(
                Some(param),
                format!("`{param}` must be a string or a list."),
            )
        }),
        None => Err(ApiError::bad_request(
            Some(param),
            format!("Field `{param}` is required."),
        )),
    }
}

/// The share of `query`'s tokens that `document` holds, in [0, 1].
fn relevance(query: &str, document: &str) -> f64 {
    let query = tokenize(query);
    if query.is_empty() {
        return 0.0;
    }
    let document = tokenize(document);
    let held = query.iter().filter(|t| document.contains(t)).count();
    held as f64 / query.len() as f64
}

/// What `model` and the body the engine served, for the model check.
pub(crate) struct Pooled {
    pub(crate) model: String,
    pub(crate) answer: Value,
}

/// `/v1/rerank`: `{model, query, documents, top_n?}` → results by relevance.
pub(crate) fn rerank(body: &[u8], id: String) -> Result<Pooled, ApiError> {
    let map = object(body)?;
    let model = model_of(&map)?;
    let query = match map.get("query") {
        Some(Value::String(query)) => query.clone(),
        _ => {
            return Err(ApiError::bad_request(
                Some("query"),
                "Field `query` must be a string.",
            ))
        }
    };
    let documents = texts(map.get("documents"), "documents")?;
    let top_n = map
        .get("top_n")
        .and_then(Value::as_u64)
        .map_or(documents.len(), |n| n as usize);
    let mut results: Vec<(usize, f64)> = documents
        .iter()
        .enumerate()
        .map(|(i, d)| (i, relevance(&query, d)))
        .collect();
    results.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    results.truncate(top_n);
    let tokens: usize = tokenize(&query).len() * documents.len()
        + documents.iter().map(|d| tokenize(d).len()).sum::<usize>();
    let answer = json!({
        "id": id,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        "results": results.iter().map(|(i, score)| json!({
            "index": i,
            "document": {"text": documents[*i]},
            "relevance_score": score,
        })).collect::<Vec<_>>(),
    });
    Ok(Pooled { model, answer })
}

/// `/v1/score`: `{model, text_1, text_2}` (one to one, one to many, or
/// pairwise) → one score per pair.
pub(crate) fn score(body: &[u8], id: String, created: u64) -> Result<Pooled, ApiError> {
    let map = object(body)?;
    let model = model_of(&map)?;
    let first = texts(map.get("text_1"), "text_1")?;
    let second = texts(map.get("text_2"), "text_2")?;
    let pairs: Vec<(&String, &String)> = match (first.len(), second.len()) {
        (1, _) => second.iter().map(|s| (&first[0], s)).collect(),
        (a, b) if a == b => first.iter().zip(&second).collect(),
        _ => {
            return Err(ApiError::bad_request(
                Some("text_2"),
                "`text_1` must hold one text or as many as `text_2`.",
            ))
        }
    };
    let tokens: usize = pairs
        .iter()
        .map(|(a, b)| tokenize(a).len() + tokenize(b).len())
        .sum();
    let answer = json!({
        "id": id,
        "object": "list",
        "created": created,
        "model": model,
        "data": pairs.iter().enumerate().map(|(i, (a, b))| json!({
            "index": i, "object": "score", "score": relevance(a, b),
        })).collect::<Vec<_>>(),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0},
    });
    Ok(Pooled { model, answer })
}

/// `/detokenize`: `{model, tokens}` → `{"prompt"}`. The simulated
/// tokenizer hashes text and cannot invert it: each id reads as `<id>`.
pub(crate) fn detokenize(body: &[u8]) -> Result<Pooled, ApiError> {
    let map = object(body)?;
    let model = model_of(&map)?;
    let Some(Value::Array(tokens)) = map.get("tokens") else {
        return Err(ApiError::bad_request(
            Some("tokens"),
            "Field `tokens` must be a list.",
        ));
    };
    let mut prompt = String::new();
    for token in tokens {
        let id = token
            .as_u64()
            .ok_or_else(|| ApiError::bad_request(Some("tokens"), "`tokens` must hold integers."))?;
        prompt.push_str(&format!("<{id}>"));
    }
    Ok(Pooled {
        model,
        answer: json!({ "prompt": prompt }),
    })
}

/// The fields of a transcription form.
pub(crate) struct AudioRequest {
    pub(crate) model: String,
    pub(crate) stream: bool,
    pub(crate) audio_bytes: usize,
    pub(crate) audio_sha256: String,
    pub(crate) language: Option<String>,
}

/// Reads a `multipart/form-data` transcription request with `multer` (an
/// independent reader: what the gateway spliced must parse here).
pub(crate) async fn audio_form(
    content_type: Option<&str>,
    body: Bytes,
) -> Result<AudioRequest, ApiError> {
    let boundary = content_type
        .and_then(|ct| multer::parse_boundary(ct).ok())
        .ok_or_else(|| {
            ApiError::bad_request(None, "Expected a multipart/form-data body with a boundary.")
        })?;
    let stream = futures_util::stream::once(async move { Ok::<_, std::convert::Infallible>(body) });
    let mut form = multer::Multipart::new(stream, boundary);
    let bad =
        |e: multer::Error| ApiError::bad_request(None, format!("Invalid multipart body: {e}"));
    let (mut model, mut stream, mut audio, mut language) = (None, false, None, None);
    while let Some(field) = form.next_field().await.map_err(bad)? {
        let name = field.name().unwrap_or_default().to_string();
        let bytes = field.bytes().await.map_err(bad)?;
        match name.as_str() {
            "model" => model = Some(String::from_utf8_lossy(&bytes).into_owned()),
            "stream" => stream = bytes.trim_ascii().eq_ignore_ascii_case(b"true"),
            "language" => language = Some(String::from_utf8_lossy(&bytes).into_owned()),
            "file" => audio = Some(bytes),
            _ => {}
        }
    }
    let model =
        model.ok_or_else(|| ApiError::bad_request(Some("model"), "Field `model` is required."))?;
    let audio =
        audio.ok_or_else(|| ApiError::bad_request(Some("file"), "Field `file` is required."))?;
    Ok(AudioRequest {
        model,
        stream,
        audio_bytes: audio.len(),
        audio_sha256: hex::encode(Sha256::digest(&audio)),
        language,
    })
}

/// The transcript of `audio`: words that name what was received.
pub(crate) fn transcript(audio: &AudioRequest) -> String {
    format!(
        "heard {} bytes of audio {} in {}",
        audio.audio_bytes,
        &audio.audio_sha256[..16],
        audio.language.as_deref().unwrap_or("en")
    )
}

/// A transcription answer: `{"text", "usage"}`, or with `stream` vLLM's
/// `transcription.chunk` events, one per word, then `[DONE]`.
pub(crate) fn transcription(
    audio: &AudioRequest,
    id: String,
    created: u64,
    echo: Value,
) -> Response {
    let text = transcript(audio);
    let seconds = (audio.audio_bytes / 32_000).max(1);
    if !audio.stream {
        return Json(json!({
            "text": text,
            "usage": {"type": "duration", "seconds": seconds},
            "fake": echo,
        }))
        .into_response();
    }
    let mut events = String::new();
    for (i, word) in text.split(' ').enumerate() {
        let piece = if i == 0 {
            word.to_string()
        } else {
            format!(" {word}")
        };
        let chunk = json!({
            "id": id, "object": "transcription.chunk", "created": created, "model": audio.model,
            "choices": [{"delta": {"content": piece}, "finish_reason": null, "stop_reason": null}],
        });
        events.push_str(&format!("data: {chunk}\n\n"));
    }
    events.push_str("data: [DONE]\n\n");
    ([(header::CONTENT_TYPE, "text/event-stream")], events).into_response()
}
