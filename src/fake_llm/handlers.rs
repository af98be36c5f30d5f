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
use axum::http::{header, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::args::MAX_OUTPUT_TOKENS;
use super::control::Mode;
use super::error::{not_routed, ApiError};
use super::model::{embedding, generated_text};
use super::request::{parse_embedding, parse_generation, GenerationKind, GenerationRequest};
use super::stats::{Endpoint, RequestGuard};
use super::stream::{sse_body, StreamPlan};
use super::Engine;

const X_FAKE_ENGINE: HeaderName = HeaderName::from_static("x-fake-engine");
const X_FAKE_BODY_BYTES: HeaderName = HeaderName::from_static("x-fake-body-bytes");
const X_FAKE_BODY_SHA256: HeaderName = HeaderName::from_static("x-fake-body-sha256");

/// What the engine received, echoed so tests can check what the gateway
/// forwarded.
struct Received {
    body_bytes: usize,
    body_sha256: String,
}

impl Received {
    /// The `fake` extension object of non-streaming answers.
    fn echo(&self, engine: &Engine, model: &str) -> Value {
        json!({
            "engine": engine.name,
            "received_model": model,
            "body_bytes": self.body_bytes,
            "body_sha256": self.body_sha256,
        })
    }
}

/// The one handler behind every path.
pub(crate) async fn handle(
    State(engine): State<Arc<Engine>>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    let received = Received {
        body_bytes: body.len(),
        body_sha256: hex::encode(Sha256::digest(&body)),
    };
    let mut response = match uri.path() {
        "/fake/control" => control(&engine, &method, &body),
        "/fake/stats" if method == Method::GET => Json(engine.stats.to_json()).into_response(),
        "/fake/stats" => not_routed(StatusCode::METHOD_NOT_ALLOWED),
        path => {
            engine_request(
                &engine,
                &method,
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
        (Endpoint::Embeddings, &Method::POST) => embed(engine, body, &mode, received).await,
        (Endpoint::Models, &Method::GET) => Json(models(engine)).into_response(),
        (Endpoint::Health, &Method::GET) => StatusCode::OK.into_response(),
        (Endpoint::Metrics, &Method::GET) => metrics(engine),
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
    let request = match parse_generation(kind, body, engine.default_tokens) {
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
    let id = engine.response_id(match kind {
        GenerationKind::Chat => "chatcmpl",
        GenerationKind::Completion => "cmpl",
    });
    let created = unix_seconds();
    if request.stream {
        let plan = StreamPlan {
            kind,
            id,
            created,
            model: request.model,
            output_tokens: request.output_tokens,
            finish_reason: request.finish_reason,
            include_usage: request.include_usage,
            prompt_tokens: request.prompt_tokens,
            ttft_ms: mode.ttft_ms,
            token_delay_ms: mode.token_delay_ms,
            reset_after_chunks: mode.reset_after_chunks,
        };
        let mut response = Response::new(sse_body(plan, guard));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream; charset=utf-8"),
        );
        return response;
    }
    let generation_ms = mode.ttft_ms.saturating_add(
        mode.token_delay_ms
            .saturating_mul(u64::from(request.output_tokens)),
    );
    if generation_ms > 0 {
        tokio::time::sleep(Duration::from_millis(generation_ms)).await;
    }
    let answer = completion_json(engine, &request, id, created, received);
    guard.complete();
    Json(answer).into_response()
}

/// The non-streaming answer of a chat or completions request.
fn completion_json(
    engine: &Engine,
    request: &GenerationRequest,
    id: String,
    created: u64,
    received: &Received,
) -> Value {
    let text = generated_text(request.output_tokens);
    let completion_tokens = u64::from(request.output_tokens);
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
        GenerationKind::Completion => (
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
            "prompt_tokens": request.prompt_tokens,
            "total_tokens": request.prompt_tokens.saturating_add(completion_tokens),
            "completion_tokens": completion_tokens,
        },
        "fake": received.echo(engine, &request.model),
    })
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
                "max_model_len": MAX_OUTPUT_TOKENS,
                "permission": [],
            })
        })
        .collect();
    json!({"object": "list", "data": data})
}

/// A few of vLLM's Prometheus series: the load signals a gateway may poll.
fn metrics(engine: &Engine) -> Response {
    let model = prometheus_label(
        engine
            .listed_models()
            .first()
            .map_or("fake-model", String::as_str),
    );
    let running = engine.stats.running();
    let completed = engine.stats.completed();
    let requests = engine.stats.requests();
    let text = format!(
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n\
         # TYPE vllm:num_requests_running gauge\n\
         vllm:num_requests_running{{model_name=\"{model}\"}} {running}\n\
         # HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n\
         # TYPE vllm:num_requests_waiting gauge\n\
         vllm:num_requests_waiting{{model_name=\"{model}\"}} 0\n\
         # HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n\
         # TYPE vllm:kv_cache_usage_perc gauge\n\
         vllm:kv_cache_usage_perc{{model_name=\"{model}\"}} 0.0\n\
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

/// `/fake/control`: GET answers the current mode; POST applies a patch (see
/// [`Mode::patched`]) and answers the new mode.
fn control(engine: &Engine, method: &Method, body: &[u8]) -> Response {
    if method == Method::GET {
        return Json(engine.mode.load().to_json()).into_response();
    }
    if method != Method::POST {
        return not_routed(StatusCode::METHOD_NOT_ALLOWED);
    }
    let patch = if body.iter().all(u8::is_ascii_whitespace) {
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
            log::info!("fake-llm {}: mode is now {:?}", engine.name, mode);
            Json(mode.to_json()).into_response()
        }
        Err(message) => ApiError::bad_request(None, message).into_response(),
    }
}

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}
