//! Request handling: one entry point routes by path, applies the run-time
//! mode (delay, hang, injected status), then answers as vLLM would.
//!
//! A single fallback handler instead of an axum route table keeps the order
//! of things the same for every path: count the request, apply the failure
//! mode, then route — and lets unknown paths and methods get FastAPI's
//! `{"detail": …}` answers like vLLM's.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::answer::Answer;
use super::control::{KvControl, Mode};
use super::disagg;
use super::error::{not_routed, ApiError};
use super::kv::Prefill;
use super::model::{embedding, generated_text};
use super::pooling;
use super::request::{
    count_message_tokens, parse_embedding, parse_generation, parse_tokenize, GenerationKind,
    GenerationRequest,
};
use super::stats::{Endpoint, RequestGuard};
use super::stream::{sse_body, StreamPlan};
use super::Engine;

const X_FAKE_ENGINE: HeaderName = HeaderName::from_static("x-fake-engine");
const X_FAKE_BODY_BYTES: HeaderName = HeaderName::from_static("x-fake-body-bytes");
const X_FAKE_BODY_SHA256: HeaderName = HeaderName::from_static("x-fake-body-sha256");
/// Prompt tokens of a generation request, as the engine tokenized them.
const X_FAKE_PROMPT_TOKENS: HeaderName = HeaderName::from_static("x-fake-prompt-tokens");
/// Of those, the tokens found in the prefix cache.
const X_FAKE_CACHED_TOKENS: HeaderName = HeaderName::from_static("x-fake-cached-tokens");

/// What the engine received, echoed so tests can check what the gateway
/// forwarded.
struct Received {
    body_bytes: usize,
    body_sha256: String,
    /// Every request header, name (lowercase) to value; repeated headers
    /// joined by ", ", a value that is not text as "<binary>".
    headers: Map<String, Value>,
}

impl Received {
    /// The `fake` extension object of non-streaming answers.
    fn echo(&self, engine: &Engine, model: &str) -> Value {
        json!({
            "engine": engine.name,
            "received_model": model,
            "body_bytes": self.body_bytes,
            "body_sha256": self.body_sha256,
            "received_headers": self.headers,
        })
    }
}

/// The request headers as a JSON object (see [`Received::headers`]).
fn headers_json(headers: &HeaderMap) -> Map<String, Value> {
    let mut out = Map::new();
    for name in headers.keys() {
        let values: Vec<&str> = headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap_or("<binary>"))
            .collect();
        out.insert(name.as_str().to_string(), Value::from(values.join(", ")));
    }
    out
}

/// The one handler behind every path.
pub(crate) async fn handle(
    State(engine): State<Arc<Engine>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let received = Received {
        body_bytes: body.len(),
        body_sha256: hex::encode(Sha256::digest(&body)),
        headers: headers_json(&headers),
    };
    let mut response = match uri.path() {
        "/fake/control" => control(&engine, &method, &body),
        "/fake/stats" if method == Method::GET => Json(stats(&engine)).into_response(),
        "/fake/occupancy" if method == Method::GET => Json(occupancy(&engine)).into_response(),
        "/fake/stats" | "/fake/occupancy" => not_routed(StatusCode::METHOD_NOT_ALLOWED),
        path if path.starts_with("/fake/kv/") || path.starts_with("/fake/bootstrap/") => {
            handed_over(&engine, path)
        }
        path => {
            engine_request(
                &engine,
                &method,
                path,
                Endpoint::from_path(path),
                &body,
                &received,
            )
            .await
        }
    };
    let headers = response.headers_mut();
    if let Some(name) = &engine.name_header {
        headers.insert(X_FAKE_ENGINE, name.clone());
    }
    headers.insert(X_FAKE_BODY_BYTES, HeaderValue::from(received.body_bytes));
    if let Ok(digest) = HeaderValue::from_str(&received.body_sha256) {
        headers.insert(X_FAKE_BODY_SHA256, digest);
    }
    response
}

/// A request to the simulated engine (anything but `/fake/*`).
async fn engine_request(
    engine: &Engine,
    method: &Method,
    path: &str,
    endpoint: Endpoint,
    body: &Bytes,
    received: &Received,
) -> Response {
    let mut guard = engine.stats.begin(endpoint, body.len());
    // One snapshot for the whole request; see `control`.
    let mode = engine.mode.load_full();
    if mode.fail_delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(mode.fail_delay_ms)).await;
    }
    if mode.hang {
        // The connection stays open; when the client drops it, hyper drops
        // this future and the guard counts the request as cancelled.
        std::future::pending::<()>().await;
    }
    if let Some(status) = mode.fail_status {
        guard.complete();
        return ApiError::injected(status, &engine.name, mode.retry_after).into_response();
    }
    let response = match (endpoint, method) {
        (Endpoint::ChatCompletions, &Method::POST) => {
            return generate(engine, GenerationKind::Chat, body, &mode, guard, received).await
        }
        (Endpoint::Completions, &Method::POST) => {
            return generate(
                engine,
                GenerationKind::Completion,
                body,
                &mode,
                guard,
                received,
            )
            .await
        }
        (Endpoint::Messages, &Method::POST) => {
            return generate(
                engine,
                GenerationKind::Messages,
                body,
                &mode,
                guard,
                received,
            )
            .await
        }
        (Endpoint::Responses, &Method::POST) => {
            return generate(
                engine,
                GenerationKind::Responses,
                body,
                &mode,
                guard,
                received,
            )
            .await
        }
        (Endpoint::ResponseById, &Method::GET | &Method::DELETE) => {
            response_by_id(engine, method, path)
        }
        (Endpoint::MessagesCountTokens, &Method::POST) => {
            match count_message_tokens(body, &engine.tokenizer) {
                Ok(tokens) => Json(json!({ "input_tokens": tokens })).into_response(),
                Err(error) => error.into_response(),
            }
        }
        (Endpoint::Embeddings, &Method::POST) => embed(engine, body, &mode, received).await,
        (Endpoint::Models, &Method::GET) => Json(models(engine)).into_response(),
        (Endpoint::Health, &Method::GET) => StatusCode::OK.into_response(),
        (Endpoint::Metrics, &Method::GET) => metrics(engine),
        (Endpoint::Tokenize, &Method::POST) => tokenize(engine, body),
        (Endpoint::Rerank, &Method::POST) => pooled(
            engine,
            pooling::rerank(body, engine.response_id("rerank")),
            received,
        ),
        (Endpoint::Score, &Method::POST) => pooled(
            engine,
            pooling::score(body, engine.response_id("score"), unix_seconds()),
            received,
        ),
        (Endpoint::Detokenize, &Method::POST) => {
            pooled(engine, pooling::detokenize(body), received)
        }
        (Endpoint::AudioTranscriptions | Endpoint::AudioTranslations, &Method::POST) => {
            audio(engine, body, &mode, received).await
        }
        (Endpoint::Other, _) => not_routed(StatusCode::NOT_FOUND),
        _ => not_routed(StatusCode::METHOD_NOT_ALLOWED),
    };
    guard.complete();
    response
}

/// Chat or completions, streamed or not.
async fn generate(
    engine: &Engine,
    kind: GenerationKind,
    body: &[u8],
    mode: &Mode,
    mut guard: RequestGuard,
    received: &Received,
) -> Response {
    let request = match parse_generation(kind, body, engine.default_tokens, &engine.tokenizer) {
        Ok(request) => request,
        Err(error) => {
            guard.complete();
            return error.into_response();
        }
    };
    if let Err(error) = engine.check_model(&request.model) {
        guard.complete();
        return error.into_response();
    }
    if let Err(error) = request.check_context(engine.max_model_len) {
        guard.complete();
        return error.into_response();
    }
    // A Responses continuation needs the response it continues, which only
    // the engine that answered it holds.
    let fields: Value = if kind == GenerationKind::Responses || engine.disagg.is_some() {
        serde_json::from_slice(body).unwrap_or_default()
    } else {
        Value::Null
    };
    if let Some(previous) = fields.get("previous_response_id").and_then(Value::as_str) {
        if engine.responses.get(previous).is_none() {
            guard.complete();
            return ApiError::unknown_response(previous, Some("previous_response_id"))
                .into_response();
        }
    }
    let id = engine.response_id(match kind {
        GenerationKind::Chat => "chatcmpl",
        GenerationKind::Completion => "cmpl",
        GenerationKind::Messages => "msg",
        GenerationKind::Responses => "resp",
    });
    let created = unix_seconds();
    let handover = match &engine.disagg {
        Some(disagg) => {
            let digest = disagg::prompt_digest(&request.prompts);
            match disagg
                .check(&fields, digest, request.output_tokens, request.stream, &id)
                .await
            {
                Ok(checked) => Some(checked),
                Err(error) => {
                    guard.complete();
                    return error.into_response();
                }
            }
        }
        None => None,
    };
    let mut prefill = engine.kv.admit(&request.prompts);
    if matches!(handover, Some(disagg::Checked::Decoded)) {
        // The KV cache came from the prefill engine: nothing to compute.
        prefill.cached_tokens = prefill.prompt_tokens;
    }
    if kind == GenerationKind::Responses && fields.get("store") != Some(&Value::Bool(false)) {
        let answer = Answer {
            id: &id,
            created,
            model: &request.model,
            output_tokens: request.output_tokens,
            finish_reason: request.finish_reason,
            prefill,
        };
        let text = generated_text(request.output_tokens);
        engine.responses.put(&id, answer.response(Some(&text)));
    }
    // The requests running before this one (its own guard counts it too).
    let ahead = engine.stats.running().saturating_sub(1);
    let ttft_ms = mode
        .ttft_ms
        .saturating_add(mode.queue_ttft_ms.saturating_mul(ahead));
    let prefill_ms = prefill.prefill_ms(mode.prefill_us_per_token);
    let mut response = if request.stream {
        let plan = StreamPlan {
            kind,
            id,
            created,
            model: request.model,
            output_tokens: request.output_tokens,
            finish_reason: request.finish_reason,
            include_usage: request.include_usage,
            prompt_tokens: prefill.prompt_tokens,
            cached_tokens: prefill.cached_tokens,
            ttft_ms,
            prefill_ms,
            token_delay_ms: mode.token_delay_ms,
            reset_after_chunks: mode.reset_after_chunks,
        };
        let mut response = Response::new(sse_body(plan, guard, Arc::clone(&engine.scheduler)));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream; charset=utf-8"),
        );
        response
    } else {
        let _seq = engine.scheduler.join_batch().await;
        if ttft_ms > 0 {
            tokio::time::sleep(Duration::from_millis(ttft_ms)).await;
        }
        let queue_ms = engine.scheduler.prefill(prefill_ms).await;
        let _decoding = engine.scheduler.decode();
        let decode_ms = engine
            .scheduler
            .token_delay(mode.token_delay_ms)
            .saturating_mul(u64::from(request.output_tokens));
        if decode_ms > 0 {
            tokio::time::sleep(Duration::from_millis(decode_ms)).await;
        }
        let mut answer = completion_json(engine, &request, prefill, id, created, received);
        if let Some(disagg::Checked::Prefilled(Some(params))) = handover {
            answer["kv_transfer_params"] = params;
        }
        if let Some(fake) = answer.get_mut("fake").and_then(Value::as_object_mut) {
            fake.insert("queue_ms".into(), json!(queue_ms));
        }
        guard.complete();
        Json(answer).into_response()
    };
    let headers = response.headers_mut();
    headers.insert(
        X_FAKE_PROMPT_TOKENS,
        HeaderValue::from(prefill.prompt_tokens),
    );
    headers.insert(
        X_FAKE_CACHED_TOKENS,
        HeaderValue::from(prefill.cached_tokens),
    );
    response
}

/// The non-streaming answer of a chat or completions request.
fn completion_json(
    engine: &Engine,
    request: &GenerationRequest,
    prefill: Prefill,
    id: String,
    created: u64,
    received: &Received,
) -> Value {
    let text = generated_text(request.output_tokens);
    let completion_tokens = u64::from(request.output_tokens);
    let answer = Answer {
        id: &id,
        created,
        model: &request.model,
        output_tokens: request.output_tokens,
        finish_reason: request.finish_reason,
        prefill,
    };
    let other_api = match request.kind {
        GenerationKind::Messages => Some(answer.message(Some(&text))),
        GenerationKind::Responses => Some(answer.response(Some(&text))),
        GenerationKind::Chat | GenerationKind::Completion => None,
    };
    if let Some(mut other_api) = other_api {
        other_api["fake"] = received.echo(engine, &request.model);
        return other_api;
    }
    let (object, choice) = match request.kind {
        GenerationKind::Chat => (
            "chat.completion",
            json!({
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
                "logprobs": null,
                "finish_reason": request.finish_reason,
                "stop_reason": null,
            }),
        ),
        GenerationKind::Completion | GenerationKind::Messages | GenerationKind::Responses => (
            "text_completion",
            json!({
                "index": 0,
                "text": text,
                "logprobs": null,
                "finish_reason": request.finish_reason,
                "stop_reason": null,
            }),
        ),
    };
    json!({
        "id": id,
        "object": object,
        "created": created,
        "model": request.model,
        "choices": [choice],
        "usage": {
            "prompt_tokens": prefill.prompt_tokens,
            "total_tokens": prefill.prompt_tokens.saturating_add(completion_tokens),
            "completion_tokens": completion_tokens,
            "prompt_tokens_details": {"cached_tokens": prefill.cached_tokens},
        },
        "fake": received.echo(engine, &request.model),
    })
}

/// `GET` or `DELETE /v1/responses/{id}`: the kept response, or vLLM's 404.
fn response_by_id(engine: &Engine, method: &Method, path: &str) -> Response {
    let id = path.trim_start_matches("/v1/responses/");
    if method == Method::DELETE {
        return match engine.responses.remove(id) {
            true => Json(json!({"id": id, "object": "response", "deleted": true})).into_response(),
            false => ApiError::unknown_response(id, None).into_response(),
        };
    }
    match engine.responses.get(id) {
        Some(response) => Json(response).into_response(),
        None => ApiError::unknown_response(id, None).into_response(),
    }
}

/// `/v1/embeddings`: one vector per input, after the time to first token
/// (an embedding is a prefill).
async fn embed(engine: &Engine, body: &[u8], mode: &Mode, received: &Received) -> Response {
    let request = match parse_embedding(body) {
        Ok(request) => request,
        Err(error) => return error.into_response(),
    };
    if let Err(error) = engine.check_model(&request.model) {
        return error.into_response();
    }
    if mode.ttft_ms > 0 {
        tokio::time::sleep(Duration::from_millis(mode.ttft_ms)).await;
    }
    let data: Vec<Value> = request
        .inputs
        .iter()
        .enumerate()
        .map(|(index, input)| json!({"object": "embedding", "index": index, "embedding": embedding(input)}))
        .collect();
    Json(json!({
        "id": engine.response_id("embd"),
        "object": "list",
        "created": unix_seconds(),
        "model": request.model,
        "data": data,
        "usage": {"prompt_tokens": request.prompt_tokens, "total_tokens": request.prompt_tokens},
        "fake": received.echo(engine, &request.model),
    }))
    .into_response()
}

/// `/tokenize` in vLLM's shape: `{"count", "max_model_len", "tokens",
/// "token_strs": null}`, the tokens being exactly those a chat or
/// completions request with the same `messages` or `prompt` prefills and
/// caches (see [`parse_tokenize`]). It costs no simulated time and touches
/// no cache.
fn tokenize(engine: &Engine, body: &[u8]) -> Response {
    let request = match parse_tokenize(body, &engine.tokenizer) {
        Ok(request) => request,
        Err(error) => return error.into_response(),
    };
    if let Some(model) = &request.model {
        if let Err(error) = engine.check_model(model) {
            return error.into_response();
        }
    }
    Json(json!({
        "count": request.tokens.len(),
        "max_model_len": engine.max_model_len,
        "tokens": request.tokens,
        "token_strs": null,
    }))
    .into_response()
}

/// A rerank, score or detokenize answer, once its model is checked; a JSON
/// object answer carries the `fake` echo.
fn pooled(
    engine: &Engine,
    answer: Result<pooling::Pooled, ApiError>,
    received: &Received,
) -> Response {
    let pooled = match answer {
        Ok(pooled) => pooled,
        Err(error) => return error.into_response(),
    };
    if let Err(error) = engine.check_model(&pooled.model) {
        return error.into_response();
    }
    let mut answer = pooled.answer;
    if let Value::Object(map) = &mut answer {
        map.insert("fake".into(), received.echo(engine, &pooled.model));
    }
    Json(answer).into_response()
}

/// `/v1/audio/transcriptions` and `/translations`: the form read, the
/// model checked, the transcript after the time to first token.
async fn audio(engine: &Engine, body: &Bytes, mode: &Mode, received: &Received) -> Response {
    let content_type = received.headers.get("content-type").and_then(Value::as_str);
    let request = match pooling::audio_form(content_type, body.clone()).await {
        Ok(request) => request,
        Err(error) => return error.into_response(),
    };
    if let Err(error) = engine.check_model(&request.model) {
        return error.into_response();
    }
    if mode.ttft_ms > 0 {
        tokio::time::sleep(Duration::from_millis(mode.ttft_ms)).await;
    }
    let echo = received.echo(engine, &request.model);
    pooling::transcription(&request, engine.response_id("trsc"), unix_seconds(), echo)
}

/// `/v1/models` in vLLM's shape.
fn models(engine: &Engine) -> Value {
    let created = unix_seconds();
    let data: Vec<Value> = engine
        .listed_models()
        .iter()
        .map(|model| {
            json!({
                "id": model,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": model,
                "parent": null,
                "max_model_len": engine.max_model_len,
                "permission": [],
            })
        })
        .collect();
    json!({"object": "list", "data": data})
}

/// A few of vLLM's Prometheus series: the load and cache signals a gateway
/// may poll. `vllm:kv_cache_usage_perc` (and its old name
/// `vllm:gpu_cache_usage_perc`) is the real share of cache blocks in use;
/// the prefix-cache counters count tokens, as vLLM's do; `lmcache:usage_ratio`
/// is the occupancy `/fake/occupancy` answers, override included.
fn metrics(engine: &Engine) -> Response {
    let model = prometheus_label(
        engine
            .listed_models()
            .first()
            .map_or("fake-model", String::as_str),
    );
    // vLLM counts a request as running once it holds a place in the batch;
    // the rest are waiting.
    let waiting = engine.scheduler.waiting();
    let running = engine.stats.running().saturating_sub(waiting);
    let completed = engine.stats.completed();
    let requests = engine.stats.requests();
    let usage = engine.kv.usage();
    let (occupancy, _) = engine.kv.occupancy();
    let (queried_tokens, cached_tokens) = engine.kv.token_counts();
    let text = format!(
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n\
         # TYPE vllm:num_requests_running gauge\n\
         vllm:num_requests_running{{model_name=\"{model}\"}} {running}\n\
         # HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n\
         # TYPE vllm:num_requests_waiting gauge\n\
         vllm:num_requests_waiting{{model_name=\"{model}\"}} {waiting}\n\
         # HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n\
         # TYPE vllm:kv_cache_usage_perc gauge\n\
         vllm:kv_cache_usage_perc{{model_name=\"{model}\"}} {usage:?}\n\
         # HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.\n\
         # TYPE vllm:gpu_cache_usage_perc gauge\n\
         vllm:gpu_cache_usage_perc{{model_name=\"{model}\"}} {usage:?}\n\
         # HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.\n\
         # TYPE vllm:prefix_cache_queries_total counter\n\
         vllm:prefix_cache_queries_total{{model_name=\"{model}\"}} {queried_tokens}\n\
         # HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.\n\
         # TYPE vllm:prefix_cache_hits_total counter\n\
         vllm:prefix_cache_hits_total{{model_name=\"{model}\"}} {cached_tokens}\n\
         # HELP lmcache:usage_ratio Share of the cache in use (the fake engine's occupancy signal).\n\
         # TYPE lmcache:usage_ratio gauge\n\
         lmcache:usage_ratio {occupancy:?}\n\
         # HELP vllm:request_success_total Count of successfully processed requests.\n\
         # TYPE vllm:request_success_total counter\n\
         vllm:request_success_total{{model_name=\"{model}\"}} {completed}\n\
         # HELP fake_llm_requests_total Requests received (all paths but /fake/*).\n\
         # TYPE fake_llm_requests_total counter\n\
         fake_llm_requests_total {requests}\n"
    );
    let mut response = text.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// Escapes a Prometheus label value.
fn prometheus_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// `/fake/stats`: the request counters, plus `prefix_cache` and `kv_events`.
fn stats(engine: &Engine) -> Value {
    let mut doc = engine.stats.to_json();
    let (cache, events) = engine.kv.stats_json();
    doc["prefix_cache"] = cache;
    doc["kv_events"] = events;
    if let Some(disagg) = &engine.disagg {
        doc["pd"] = disagg.stats_json();
    }
    doc
}

/// `GET /fake/kv/{id}` (vLLM) and `/fake/bootstrap/{room}` (SGLang): the
/// prompt digest a prefill engine holds for a decode engine, given out
/// once; 404 when it holds none (yet).
fn handed_over(engine: &Engine, path: &str) -> Response {
    let key = path.rsplit('/').next().unwrap_or_default();
    let held = engine
        .disagg
        .as_ref()
        .filter(|d| d.role == disagg::PdRole::Prefill)
        .and_then(|d| d.take(key));
    match held {
        Some(digest) => Json(json!({ "digest": digest })).into_response(),
        None => not_routed(StatusCode::NOT_FOUND),
    }
}

/// `/fake/occupancy`: the signal the `lmcache_aware` strategy polls.
fn occupancy(engine: &Engine) -> Value {
    let (occupancy, cache_available) = engine.kv.occupancy();
    json!({"occupancy": occupancy, "cache_available": cache_available})
}

/// What `/fake/control` answers: the mode and the KV test knobs.
fn control_state(engine: &Engine, mode: &Mode) -> Value {
    let mut state = mode.to_json();
    if let (Value::Object(state), Value::Object(knobs)) = (&mut state, engine.kv.control_json()) {
        state.extend(knobs);
    }
    state
}

/// `/fake/control`: GET answers the current mode and KV knobs; POST applies
/// a patch (see [`Mode::patched`] and [`KvControl`]) and answers the new
/// state. A patch with any bad field changes nothing. `"reset": true` also
/// puts the KV knobs back (see `KvState::reset_knobs`); the cache stays.
fn control(engine: &Engine, method: &Method, body: &[u8]) -> Response {
    if method == Method::GET {
        return Json(control_state(engine, &engine.mode.load())).into_response();
    }
    if method != Method::POST {
        return not_routed(StatusCode::METHOD_NOT_ALLOWED);
    }
    let mut patch = if body.iter().all(u8::is_ascii_whitespace) {
        Map::new()
    } else {
        match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(patch)) => patch,
            Ok(_) => {
                return ApiError::bad_request(None, "The control body must be a JSON object.")
                    .into_response()
            }
            Err(err) => {
                return ApiError::bad_request(None, format!("Invalid JSON in control body: {err}"))
                    .into_response()
            }
        }
    };
    let kv = match KvControl::take_from(&mut patch) {
        Ok(kv) => kv,
        Err(message) => return ApiError::bad_request(None, message).into_response(),
    };
    // Lock-free read-modify-write: `rcu` retries the closure until its result
    // is stored, so `outcome` ends up describing the value that was stored.
    let mut outcome = Err(String::new());
    engine.mode.rcu(|current| {
        outcome = current.patched(&engine.startup, &patch);
        match &outcome {
            Ok(mode) => Arc::new(mode.clone()),
            Err(_) => Arc::clone(current),
        }
    });
    match outcome {
        Ok(mode) => {
            apply_kv_control(engine, &patch, &kv);
            log::info!(
                "fake-llm {}: mode is now {:?}, KV {:?}",
                engine.name,
                mode,
                kv
            );
            Json(control_state(engine, &mode)).into_response()
        }
        Err(message) => ApiError::bad_request(None, message).into_response(),
    }
}

/// Applies the KV part of a control patch whose mode part was accepted.
fn apply_kv_control(engine: &Engine, patch: &Map<String, Value>, kv: &KvControl) {
    if patch.get("reset") == Some(&Value::Bool(true)) {
        engine.kv.reset_knobs();
    }
    if kv.restart {
        engine.kv.restart();
    }
    if kv.clear_cache {
        engine.kv.clear();
    }
    if let Some(paused) = kv.pause {
        engine.kv.set_paused(paused);
    }
    if let Some(batches) = kv.drop_next {
        engine.kv.drop_next(batches);
    }
    engine
        .kv
        .set_occupancy(kv.occupancy_override, kv.cache_available);
}

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}
