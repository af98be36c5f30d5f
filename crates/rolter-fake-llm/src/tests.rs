//! End-to-end tests of the simulator: `serve` on a loopback port, driven by
//! a real HTTP client. Every request has a client timeout and every wait is
//! a bounded poll, so no test can hang.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use super::{announce_line, serve, BoundEngine, EngineAddresses, FakeLlmArgs};

mod disagg;
mod kv_events;
mod tokenize;

/// A running engine on a free loopback port.
struct TestEngine {
    base: String,
    task: JoinHandle<std::io::Result<()>>,
}

impl TestEngine {
    /// An engine with its KV-event sockets (if configured) bound on the
    /// ports its args name (use port 0), and where they are.
    async fn start_bound(args: FakeLlmArgs) -> (Self, EngineAddresses) {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let bound = BoundEngine::with_listener(args, listener)
            .await
            .expect("bind KV-event sockets");
        let addresses = bound.addresses().clone();
        let task = tokio::spawn(bound.serve());
        let engine = TestEngine {
            base: format!("http://{}", addresses.http),
            task,
        };
        (engine, addresses)
    }

    async fn start(args: FakeLlmArgs) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let task = tokio::spawn(serve(args, listener));
        TestEngine {
            base: format!("http://{addr}"),
            task,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        client()
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .expect("request")
    }

    async fn get(&self, path: &str) -> reqwest::Response {
        client().get(self.url(path)).send().await.expect("request")
    }

    async fn get_json(&self, path: &str) -> Value {
        self.get(path).await.json().await.expect("json")
    }

    async fn get_text(&self, path: &str) -> String {
        self.get(path).await.text().await.expect("text")
    }

    async fn stats(&self) -> Value {
        self.get_json("/fake/stats").await
    }

    /// A chat stream of `max_tokens` tokens, open and unread.
    async fn open_stream(
        &self,
        max_tokens: u64,
    ) -> impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> {
        let request =
            json!({"model": "m", "messages": [], "max_tokens": max_tokens, "stream": true});
        self.post("/v1/chat/completions", &request)
            .await
            .bytes_stream()
    }

    async fn control(&self, patch: Value) -> Value {
        let response = self.post("/fake/control", &patch).await;
        assert_eq!(response.status(), 200);
        response.json().await.expect("control json")
    }

    /// Polls `/fake/stats` until `ready` holds, for at most three seconds.
    async fn wait_for_stats(&self, ready: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let stats = self.stats().await;
            if ready(&stats) || Instant::now() > deadline {
                return stats;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for TestEngine {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn client() -> reqwest::Client {
    client_with_timeout(Duration::from_secs(10))
}

fn client_with_timeout(timeout: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(timeout)
        .build()
        .expect("client")
}

fn header<'a>(response: &'a reqwest::Response, name: &str) -> &'a str {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// One received SSE event: its payload after `data: ` and when it arrived.
struct Event {
    data: String,
    at: Instant,
}

impl Event {
    fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or(Value::Null)
    }
}

/// Reads an SSE body to its end, timing each event. `Err` carries the events
/// read before the body failed.
async fn read_events(response: reqwest::Response) -> Result<Vec<Event>, Vec<Event>> {
    let mut events = Vec::new();
    let mut pending = String::new();
    let mut body = response.bytes_stream();
    while let Some(chunk) = body.next().await {
        let Ok(chunk) = chunk else { return Err(events) };
        let at = Instant::now();
        pending.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = pending.find("\n\n") {
            let event: String = pending.drain(..end + 2).collect();
            let data = event
                .trim_end()
                .strip_prefix("data: ")
                .unwrap_or(event.trim_end())
                .to_owned();
            events.push(Event { data, at });
        }
    }
    Ok(events)
}

#[tokio::test]
async fn chat_echoes_received_model_and_body_digest() {
    let args = FakeLlmArgs {
        name: "engine-a".into(),
        model: vec!["served".into()],
        ..Default::default()
    };
    let engine = TestEngine::start(args).await;
    let body = br#"{"model":"served","messages":[{"role":"user","content":"hello there"}],"max_tokens":3}"#;
    let response = client()
        .post(engine.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .header("x-request-id", "r-1")
        .header("x-twice", "a")
        .header("x-twice", "b")
        .body(&body[..])
        .send()
        .await
        .expect("request");
    assert_eq!(response.status(), 200);
    let digest = hex::encode(Sha256::digest(body));
    assert_eq!(header(&response, "x-fake-engine"), "engine-a");
    assert_eq!(
        header(&response, "x-fake-body-bytes"),
        body.len().to_string()
    );
    assert_eq!(header(&response, "x-fake-body-sha256"), digest);
    let answer: Value = response.json().await.expect("json");
    assert_eq!(answer["object"], "chat.completion");
    assert_eq!(answer["model"], "served");
    assert!(answer["id"]
        .as_str()
        .is_some_and(|id| id.starts_with("chatcmpl-")));
    assert_eq!(answer["choices"][0]["message"]["role"], "assistant");
    assert_eq!(answer["choices"][0]["message"]["content"], "tok0 tok1 tok2");
    assert_eq!(answer["choices"][0]["finish_reason"], "length");
    assert_eq!(answer["usage"]["completion_tokens"], 3);
    // <|im_start|> user hello there <|im_end|> <|im_start|> assistant
    let prompt: Value = serde_json::from_slice(body).expect("body");
    assert_eq!(super::chat_token_ids(&prompt).len(), 7);
    assert_eq!(answer["usage"]["prompt_tokens"], 7);
    assert_eq!(answer["usage"]["total_tokens"], 10);
    assert_eq!(answer["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    let mut fake = answer["fake"].clone();
    let headers = fake
        .as_object_mut()
        .and_then(|f| f.remove("received_headers"))
        .expect("received_headers");
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(headers["x-request-id"], "r-1");
    assert_eq!(headers["x-twice"], "a, b");
    assert_eq!(headers["content-length"], body.len().to_string());
    assert_eq!(
        fake,
        json!({"engine": "engine-a", "received_model": "served", "body_bytes": body.len(), "body_sha256": digest, "queue_ms": 0})
    );
    let stats = engine.stats().await;
    assert_eq!(stats["completed"], 1);
    assert_eq!(stats["by_path"]["/v1/chat/completions"], 1);
    assert_eq!(stats["last_body_bytes"], body.len());
}

#[tokio::test]
async fn completion_without_max_tokens_uses_default_and_stops() {
    let engine = TestEngine::start(FakeLlmArgs {
        max_tokens: 2,
        ..Default::default()
    })
    .await;
    let response = engine
        .post(
            "/v1/completions",
            &json!({"model": "anything", "prompt": "Say"}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.expect("json");
    assert_eq!(answer["object"], "text_completion");
    assert_eq!(answer["model"], "anything");
    assert_eq!(answer["choices"][0]["text"], "tok0 tok1");
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
    assert_eq!(answer["fake"]["received_model"], "anything");
}

#[tokio::test]
async fn non_streaming_answer_waits_ttft_and_token_delays() {
    let engine = TestEngine::start(FakeLlmArgs {
        ttft_ms: 60,
        token_delay_ms: 20,
        ..Default::default()
    })
    .await;
    let started = Instant::now();
    let response = engine
        .post(
            "/v1/completions",
            &json!({"model": "m", "prompt": "x", "max_tokens": 4}),
        )
        .await;
    assert_eq!(response.status(), 200);
    // ttft + 4 * delay = 140 ms; only a loose lower bound.
    assert!(
        started.elapsed() >= Duration::from_millis(100),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn chat_stream_sends_role_tokens_finish_usage_and_done_spread_over_time() {
    let engine = TestEngine::start(FakeLlmArgs {
        token_delay_ms: 40,
        ..Default::default()
    })
    .await;
    let request = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
        "stream": true, "stream_options": {"include_usage": true}});
    let response = engine.post("/v1/chat/completions", &request).await;
    assert_eq!(response.status(), 200);
    assert!(header(&response, "content-type").starts_with("text/event-stream"));
    assert_eq!(header(&response, "x-fake-engine"), "fake-llm");
    assert_eq!(
        header(&response, "x-fake-body-bytes"),
        request.to_string().len().to_string()
    );
    assert_eq!(header(&response, "x-fake-body-sha256").len(), 64);
    let events = read_events(response)
        .await
        .unwrap_or_else(|_| panic!("stream failed"));
    // role + 5 tokens + finish + usage + [DONE]
    assert_eq!(
        events.len(),
        9,
        "{:?}",
        events.iter().map(|e| &e.data).collect::<Vec<_>>()
    );
    let first = events[0].json();
    assert_eq!(first["object"], "chat.completion.chunk");
    assert_eq!(first["model"], "m");
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    let text: String = events[1..6]
        .iter()
        .map(|e| {
            e.json()["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap_or("?")
                .to_owned()
        })
        .collect();
    assert_eq!(text, "tok0 tok1 tok2 tok3 tok4");
    assert!(events[1..6]
        .iter()
        .all(|e| e.json()["choices"][0]["finish_reason"].is_null()));
    assert_eq!(events[6].json()["choices"][0]["finish_reason"], "length");
    let usage = events[7].json();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 5);
    assert_eq!(events[8].data, "[DONE]");
    assert!(events
        .iter()
        .all(|e| e.data == "[DONE]" || e.json()["id"] == first["id"]));
    // Five token delays between the role chunk and the last token; a loose bound.
    let spread = events[5].at.duration_since(events[0].at);
    assert!(
        spread >= Duration::from_millis(4 * 40 / 2),
        "chunks arrived within {spread:?}"
    );
    let stats = engine.wait_for_stats(|s| s["completed"] == 1).await;
    assert_eq!(
        (stats["completed"].clone(), stats["cancelled"].clone()),
        (json!(1), json!(0))
    );
}

#[tokio::test]
async fn completion_stream_without_usage_ends_with_done() {
    let engine = TestEngine::start(FakeLlmArgs::default()).await;
    let request = json!({"model": "m", "prompt": "hi", "max_tokens": 3, "stream": true});
    let response = engine.post("/v1/completions", &request).await;
    let events = read_events(response)
        .await
        .unwrap_or_else(|_| panic!("stream failed"));
    let data: Vec<&str> = events.iter().map(|e| e.data.as_str()).collect();
    assert_eq!(events.len(), 5, "{data:?}");
    let text: String = events[..3]
        .iter()
        .map(|e| {
            e.json()["choices"][0]["text"]
                .as_str()
                .unwrap_or("?")
                .to_owned()
        })
        .collect();
    assert_eq!(text, "tok0 tok1 tok2");
    assert_eq!(events[0].json()["object"], "text_completion");
    assert_eq!(events[3].json()["choices"][0]["finish_reason"], "length");
    assert_eq!(events[4].data, "[DONE]");
}

#[tokio::test]
async fn control_injects_failure_with_retry_after_and_reset_restores() {
    let engine = TestEngine::start(FakeLlmArgs::default()).await;
    let mode = engine
        .control(json!({"fail_status": 503, "retry_after": 7}))
        .await;
    assert_eq!(
        mode,
        json!({"fail_status": 503, "fail_delay_ms": 0, "hang": false, "reset_after_chunks": null,
               "retry_after": 7, "ttft_ms": 0, "queue_ttft_ms": 0, "token_delay_ms": 0,
               "prefill_us_per_token": 50, "kv_pause": false, "kv_drop_next": 0, "occupancy_override": null,
               "cache_available": true})
    );
    let request = json!({"model": "m", "messages": []});
    let response = engine.post("/v1/chat/completions", &request).await;
    assert_eq!(response.status(), 503);
    assert_eq!(header(&response, "retry-after"), "7");
    assert_eq!(header(&response, "x-fake-engine"), "fake-llm");
    let error: Value = response.json().await.expect("json");
    assert_eq!(error["error"]["type"], "ServiceUnavailableError");
    assert_eq!(error["error"]["code"], 503);
    assert!(error["error"]["message"].is_string());

    let mode = engine.control(json!({"reset": true})).await;
    assert_eq!(mode["fail_status"], Value::Null);
    let response = engine.post("/v1/chat/completions", &request).await;
    assert_eq!(response.status(), 200);
    assert!(response.headers().get("retry-after").is_none());
    // Control and stats requests are not counted.
    assert_eq!(engine.stats().await["requests"], 2);
}

#[tokio::test]
async fn control_rejects_unknown_fields() {
    let engine = TestEngine::start(FakeLlmArgs::default()).await;
    let response = engine
        .post("/fake/control", &json!({"fail_stauts": 503}))
        .await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.expect("json");
    assert!(error["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains("fail_stauts")));
}

#[tokio::test]
async fn reset_after_chunks_cuts_the_stream_without_done() {
    let engine = TestEngine::start(FakeLlmArgs {
        reset_after_chunks: Some(3),
        ..Default::default()
    })
    .await;
    let request = json!({"model": "m", "messages": [], "max_tokens": 10, "stream": true});
    let response = engine.post("/v1/chat/completions", &request).await;
    assert_eq!(response.status(), 200);
    let events = match read_events(response).await {
        Ok(events) => panic!("stream ended cleanly after {} events", events.len()),
        Err(events) => events,
    };
    assert!(events.len() <= 3);
    assert!(events.iter().all(|e| e.data != "[DONE]"));
    let stats = engine.wait_for_stats(|s| s["reset"] == 1).await;
    assert_eq!(stats["reset"], 1);
    assert_eq!(stats["completed"], 0);
}

#[tokio::test]
async fn hang_never_answers_and_counts_the_abandoned_request() {
    let engine = TestEngine::start(FakeLlmArgs::default()).await;
    engine.control(json!({"hang": true})).await;
    let started = Instant::now();
    let result = client_with_timeout(Duration::from_millis(300))
        .post(engine.url("/v1/chat/completions"))
        .json(&json!({"model": "m", "messages": []}))
        .send()
        .await;
    assert!(
        result.as_ref().is_err_and(reqwest::Error::is_timeout),
        "{result:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    let stats = engine.wait_for_stats(|s| s["cancelled"] == 1).await;
    assert_eq!(
        (stats["cancelled"].clone(), stats["in_flight"].clone()),
        (json!(1), json!(0))
    );
}

#[tokio::test]
async fn client_dropping_a_stream_counts_as_cancelled() {
    let engine = TestEngine::start(FakeLlmArgs {
        token_delay_ms: 30,
        ..Default::default()
    })
    .await;
    let mut body = Box::pin(engine.open_stream(200).await);
    for _ in 0..2 {
        assert!(matches!(body.next().await, Some(Ok(_))));
    }
    assert_eq!(engine.stats().await["in_flight"], 1);
    drop(body);
    let stats = engine.wait_for_stats(|s| s["cancelled"] == 1).await;
    assert_eq!(stats["cancelled"], 1);
    assert_eq!(stats["in_flight"], 0);
    assert_eq!(stats["completed"], 0);
}

#[tokio::test]
async fn dropping_serve_closes_open_streams() {
    let engine = TestEngine::start(FakeLlmArgs {
        token_delay_ms: 30,
        ..Default::default()
    })
    .await;
    let mut body = Box::pin(engine.open_stream(200).await);
    assert!(matches!(body.next().await, Some(Ok(_))));
    engine.task.abort();
    let ended = tokio::time::timeout(Duration::from_secs(2), async {
        while let Some(Ok(_)) = body.next().await {}
    })
    .await;
    assert!(ended.is_ok(), "stream still open after serve was dropped");
}

#[tokio::test]
async fn unknown_model_is_a_vllm_404() {
    let engine = TestEngine::start(FakeLlmArgs {
        model: vec!["a".into()],
        ..Default::default()
    })
    .await;
    let response = engine
        .post(
            "/v1/chat/completions",
            &json!({"model": "b", "messages": []}),
        )
        .await;
    assert_eq!(response.status(), 404);
    let error: Value = response.json().await.expect("json");
    assert_eq!(error["error"]["message"], "The model `b` does not exist.");
    assert_eq!(error["error"]["type"], "NotFoundError");
    assert_eq!(error["error"]["code"], 404);
}

#[tokio::test]
async fn bad_json_and_missing_model_are_400s() {
    let engine = TestEngine::start(FakeLlmArgs::default()).await;
    for body in ["{oops", r#"{"messages":[]}"#, ""] {
        let response = client()
            .post(engine.url("/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), 400, "{body}");
        let error: Value = response.json().await.expect("json");
        assert_eq!(error["error"]["type"], "BadRequestError");
        assert_eq!(error["error"]["code"], 400);
        assert!(error["error"].get("param").is_some());
    }
    assert_eq!(engine.stats().await["completed"], 3);
}

#[tokio::test]
async fn embeddings_return_one_vector_per_input() {
    let engine = TestEngine::start(FakeLlmArgs::default()).await;
    let response = engine
        .post(
            "/v1/embeddings",
            &json!({"model": "e", "input": ["a", "b"]}),
        )
        .await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.expect("json");
    assert_eq!(answer["object"], "list");
    assert_eq!(answer["model"], "e");
    let data = answer["data"].as_array().cloned().unwrap_or_default();
    assert_eq!(data.len(), 2);
    assert_eq!(data[1]["index"], 1);
    assert_eq!(data[0]["embedding"].as_array().map(Vec::len), Some(8));
    assert_ne!(data[0]["embedding"], data[1]["embedding"]);
}

#[tokio::test]
async fn models_health_and_metrics_answer_like_vllm() {
    let engine = TestEngine::start(FakeLlmArgs::default()).await;
    let models: Value = engine.get_json("/v1/models").await;
    assert_eq!(models["data"][0]["id"], "fake-model");
    let health = engine.get("/health").await;
    assert_eq!(health.status(), 200);
    assert_eq!(health.bytes().await.map(|b| b.len()).ok(), Some(0));
    let metrics = engine.get_text("/metrics").await;
    assert!(
        metrics.contains("vllm:num_requests_running{model_name=\"fake-model\"} 0"),
        "{metrics}"
    );
    assert!(metrics.contains("vllm:num_requests_waiting{model_name=\"fake-model\"} 0"));
    assert!(metrics.contains("fake_llm_requests_total 3"));
    let missing = engine.get("/v2/nothing").await;
    assert_eq!(missing.status(), 404);
    let wrong_method = engine.get("/v1/chat/completions").await;
    assert_eq!(wrong_method.status(), 405);
}

#[tokio::test]
async fn a_request_longer_than_the_context_gets_vllms_400_at_once() {
    // The default prefill rate would take 35 s over this prompt: the
    // refusal comes before any of it.
    let engine = TestEngine::start(FakeLlmArgs {
        max_model_len: 1000,
        ..FakeLlmArgs::default()
    })
    .await;
    let models: Value = engine.get_json("/v1/models").await;
    assert_eq!(models["data"][0]["max_model_len"], 1000);
    let long = "word ".repeat(700_000);
    let started = Instant::now();
    let response = engine
        .post(
            "/v1/chat/completions",
            &json!({"model": "m", "messages": [{"role": "user", "content": long}]}),
        )
        .await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.expect("a JSON error");
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("This model's maximum context length is 1000 tokens."),
        "{error}"
    );
    assert_eq!(error["error"]["type"], "BadRequestError");
    assert!(started.elapsed() < Duration::from_secs(10));
    // A prompt that fits with room for its explicit limit is answered.
    let fits = engine
        .post(
            "/v1/chat/completions",
            &json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}),
        )
        .await;
    assert_eq!(fits.status(), 200);
    // An explicit limit past the context's end is the other refusal.
    let too_many = engine
        .post(
            "/v1/chat/completions",
            &json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 999}),
        )
        .await;
    assert_eq!(too_many.status(), 400);
    let error: Value = too_many.json().await.expect("a JSON error");
    assert!(
        error["error"]["message"].as_str().is_some_and(
            |m| m.starts_with("'max_tokens' or 'max_completion_tokens' is too large: 999.")
        ),
        "{error}"
    );
}

#[tokio::test]
async fn multi_mebibyte_body_arrives_whole() {
    // 300,000 tokens: no prefill time, or the client gives up, and a
    // context that holds them.
    let engine = TestEngine::start(FakeLlmArgs {
        prefill_us_per_token: 0,
        max_model_len: 1 << 20,
        ..FakeLlmArgs::default()
    })
    .await;
    let long = "x".repeat(3 << 20);
    let request =
        json!({"model": "m", "messages": [{"role": "user", "content": long}], "max_tokens": 1});
    let bytes = request.to_string();
    let response = engine.post("/v1/chat/completions", &request).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        header(&response, "x-fake-body-bytes"),
        bytes.len().to_string()
    );
    assert_eq!(
        header(&response, "x-fake-body-sha256"),
        hex::encode(Sha256::digest(bytes.as_bytes()))
    );
}

#[test]
fn first_line_names_every_bound_socket() {
    let mut addresses = EngineAddresses {
        http: "127.0.0.1:8000".parse().expect("addr"),
        kv_events: None,
        kv_replay: None,
    };
    assert_eq!(
        announce_line(&addresses),
        "fake-llm listening on http://127.0.0.1:8000"
    );
    addresses.kv_events = Some("tcp://127.0.0.1:5557".into());
    addresses.kv_replay = Some("tcp://127.0.0.1:5558".into());
    assert_eq!(
        announce_line(&addresses),
        "fake-llm listening on http://127.0.0.1:8000 kv-events tcp://127.0.0.1:5557 replay tcp://127.0.0.1:5558"
    );
}

/// The gauge `name` of `/metrics`, for the default model.
fn gauge(metrics: &str, name: &str) -> Option<f64> {
    let prefix = format!("{name}{{model_name=\"fake-model\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse().ok())
}

#[tokio::test]
async fn past_max_num_seqs_requests_queue_and_metrics_say_so() {
    let engine = TestEngine::start(FakeLlmArgs {
        max_num_seqs: 1,
        token_delay_ms: 100,
        ..FakeLlmArgs::default()
    })
    .await;
    let request = json!({"model": "m", "prompt": "hi", "max_tokens": 4, "stream": true});
    let first = engine.post("/v1/completions", &request).await;
    let mut first_body = first.bytes_stream();
    // The first holds the batch's only place from its first token on.
    first_body
        .next()
        .await
        .expect("first chunk")
        .expect("bytes");
    let started = Instant::now();
    let second = engine.post("/v1/completions", &request).await;
    assert_eq!(second.status(), 200, "headers go out at once, as vLLM's do");
    let mut second_body = second.bytes_stream();
    let deadline = Instant::now() + Duration::from_secs(5);
    let metrics = loop {
        let metrics = engine.get_text("/metrics").await;
        if gauge(&metrics, "vllm:num_requests_waiting") == Some(1.0) || Instant::now() > deadline {
            break metrics;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(
        gauge(&metrics, "vllm:num_requests_waiting"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        gauge(&metrics, "vllm:num_requests_running"),
        Some(1.0),
        "{metrics}"
    );
    second_body
        .next()
        .await
        .expect("second's first chunk")
        .expect("bytes");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(250),
        "the second's first token waits for the first to finish its 4 tokens: {waited:?}"
    );
    while first_body.next().await.is_some() {}
    while second_body.next().await.is_some() {}
    let stats = engine.stats().await;
    assert_eq!(stats["peak_running"], 2, "{stats}");
    let metrics = engine.get_text("/metrics").await;
    assert_eq!(gauge(&metrics, "vllm:num_requests_waiting"), Some(0.0));
}
