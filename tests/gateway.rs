//! The gateway end to end: real `rolter serve` and `rolter fake-llm`
//! processes on loopback.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use support::*;

fn three_engine_route(a: &FakeEngine, b: &FakeEngine, c: &FakeEngine, strategy: &str) -> String {
    format!(
        "{}{}{}[[routes]]\nmodel = \"chat\"\nstrategy = \"{strategy}\"\ntargets = [\n  {{ provider = \"gpu-a\", model = \"Qwen/Qwen3-8B\" }},\n  {{ provider = \"gpu-b\", model = \"Qwen/Qwen3-8B\" }},\n  {{ provider = \"gpu-c\", model = \"Qwen/Qwen3-8B\" }},\n]\n",
        provider("gpu-a", &a.url()),
        provider("gpu-b", &b.url()),
        provider("gpu-c", &c.url()),
    )
}

#[tokio::test]
async fn routes_by_model_and_rewrites_it_upstream() {
    let chat = FakeEngine::start("chat-engine", &[]);
    let embed = FakeEngine::start("embed-engine", &[]);
    let config = format!(
        "{}{}[[routes]]\nmodel = \"qwen-chat\"\ntargets = [{{ provider = \"chat-pool\", model = \"Qwen/Qwen3-8B\" }}]\n\n[[routes]]\nmodel = \"embed\"\ntargets = [{{ provider = \"embed-pool\", model = \"BAAI/bge-m3\" }}]\n",
        provider("chat-pool", &chat.url()),
        provider("embed-pool", &embed.url()),
    );
    let gateway = Gateway::start(&config).await;

    let response = gateway.chat("qwen-chat", "hello").await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-fake-engine"], "chat-engine");
    assert_eq!(response.headers()["x-rolter-target"], "chat-pool");
    assert_eq!(
        response.headers()["x-rolter-upstream-model"],
        "Qwen/Qwen3-8B"
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["fake"]["received_model"], "Qwen/Qwen3-8B");

    let response = client()
        .post(gateway.url("/v1/embeddings"))
        .json(&json!({"model": "embed", "input": ["a", "b"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-fake-engine"], "embed-engine");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["fake"]["received_model"], "BAAI/bge-m3");
    assert_eq!(body["data"].as_array().unwrap().len(), 2);

    let response = client()
        .post(gateway.url("/v1/completions"))
        .json(&json!({"model": "qwen-chat", "prompt": "Once upon", "max_tokens": 3}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["object"], "text_completion");
    assert_eq!(body["fake"]["received_model"], "Qwen/Qwen3-8B");
}

#[tokio::test]
async fn models_lists_the_routes() {
    let engine = FakeEngine::start("e", &[]);
    let config = format!(
        "{}[[routes]]\nmodel = \"b-model\"\ntargets = [{{ provider = \"e\" }}]\n\n[[routes]]\nmodel = \"a-model\"\ntargets = [{{ provider = \"e\" }}]\n",
        provider("e", &engine.url())
    );
    let gateway = Gateway::start(&config).await;
    let body: Value = client()
        .get(gateway.url("/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["object"], "list");
    let ids: Vec<&str> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["b-model", "a-model"]);
}

#[tokio::test]
async fn round_robin_spreads_evenly_in_turn() {
    let (a, b, c) = (
        FakeEngine::start("a", &[]),
        FakeEngine::start("b", &[]),
        FakeEngine::start("c", &[]),
    );
    let gateway = Gateway::start(&three_engine_route(&a, &b, &c, "round_robin")).await;
    let mut order = Vec::new();
    for i in 0..30 {
        let response = gateway.chat("chat", &format!("request {i}")).await;
        assert_eq!(response.status(), 200);
        order.push(served_by(&response));
    }
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for target in &order {
        *counts.entry(target.as_str()).or_default() += 1;
    }
    assert_eq!(counts.len(), 3, "{order:?}");
    assert!(counts.values().all(|&n| n == 10), "{counts:?}");
    // A rotation: no target serves twice in a row.
    assert!(order.windows(2).all(|w| w[0] != w[1]), "{order:?}");
}

#[tokio::test]
async fn weighted_route_follows_the_weights() {
    let (a, b) = (FakeEngine::start("a", &[]), FakeEngine::start("b", &[]));
    let config = format!(
        "{}{}[[routes]]\nmodel = \"chat\"\nstrategy = \"weighted\"\ntargets = [{{ provider = \"a\", weight = 3 }}, {{ provider = \"b\" }}]\n",
        provider("a", &a.url()),
        provider("b", &b.url()),
    );
    let gateway = Gateway::start(&config).await;
    let mut order = Vec::new();
    for _ in 0..8 {
        order.push(served_by(&gateway.chat("chat", "x").await));
    }
    assert_eq!(order, ["a", "a", "b", "a", "a", "a", "b", "a"]);
}

#[tokio::test]
async fn consistent_hash_keeps_a_session_on_one_target() {
    let (a, b, c) = (
        FakeEngine::start("a", &[]),
        FakeEngine::start("b", &[]),
        FakeEngine::start("c", &[]),
    );
    let gateway = Gateway::start(&three_engine_route(&a, &b, &c, "consistent_hash")).await;
    let http = client();
    let mut pins = Pins::default();
    for session in 0..12 {
        for turn in 0..3 {
            let response = http
                .post(gateway.url("/v1/chat/completions"))
                .header("x-session-id", format!("user-{session}"))
                .json(&chat_body("chat", &format!("turn {turn}")))
                .send()
                .await
                .unwrap();
            pins.record(format!("session {session}"), served_by(&response));
        }
    }
    pins.assert_spread();
}

/// Without a session key the ring is keyed by the conversation's digest,
/// which covers all of it: conversations that share their first 32 KiB
/// (the routing text) and differ only after, in escaped lines, spread
/// over the targets, and each one comes back to its own.
#[tokio::test]
async fn consistent_hash_without_a_session_keys_on_the_whole_conversation() {
    let (a, b, c) = (
        FakeEngine::start("a", &["--max-model-len", "1048576"]),
        FakeEngine::start("b", &["--max-model-len", "1048576"]),
        FakeEngine::start("c", &["--max-model-len", "1048576"]),
    );
    let gateway = Gateway::start(&three_engine_route(&a, &b, &c, "consistent_hash")).await;
    let shared = "The committee said \"yes\" to the plan.\n".repeat(1200);
    assert!(shared.len() > 40 * 1024);
    let mut pins = Pins::default();
    for conversation in 0..12 {
        let content = format!("{shared}and then item {conversation}\n");
        for _ in 0..2 {
            let response = gateway.chat("chat", &content).await;
            assert_eq!(response.status(), 200);
            pins.record(format!("conversation {conversation}"), served_by(&response));
        }
    }
    pins.assert_spread();
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A chat body of about `size` bytes whose `model` is `model`.
fn large_chat_body(model: &str, size: usize) -> Vec<u8> {
    let content: String = (0..size).map(|i| (b'a' + (i % 26) as u8) as char).collect();
    serde_json::to_vec(&json!({
        "model": model,
        "max_tokens": 2,
        "messages": [{"role": "user", "content": content}],
    }))
    .unwrap()
}

#[tokio::test]
async fn large_bodies_forward_byte_exact() {
    // A context long enough for the 4 MiB prompt (~420 k of its tokens).
    let engine = FakeEngine::start("e", &["--max-model-len", "1048576"]);
    let config = format!(
        "{}[[routes]]\nmodel = \"same\"\ntargets = [{{ provider = \"e\" }}]\n\n[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"e\", model = \"Qwen/Qwen3-8B\" }}]\n",
        provider("e", &engine.url())
    );
    let gateway = Gateway::start(&config).await;
    let rewritten = |body: &[u8]| {
        String::from_utf8(body.to_vec()).unwrap().replacen(
            r#""model":"chat""#,
            r#""model":"Qwen/Qwen3-8B""#,
            1,
        )
    };
    // Below, just above and far above Pingora's 64 KiB retry buffer.
    for size in [1024, 70 * 1024, 4 * 1024 * 1024] {
        let body = large_chat_body("same", size);
        assert_engine_receives(&gateway, body.clone(), &body, size).await;

        // With the model rewritten, the rest of the body is untouched.
        let body = large_chat_body("chat", size);
        let expected = rewritten(&body);
        assert_engine_receives(&gateway, body, expected.as_bytes(), size).await;

        // A stream that did not ask for usage: the gateway asks for it at
        // the front and rewrites the model at the back (a large body goes
        // out as slices of the client's buffer around both).
        let mut streamed: serde_json::Value =
            serde_json::from_slice(&large_chat_body("chat", size)).unwrap();
        streamed["stream"] = json!(true);
        let body = serde_json::to_vec(&streamed).unwrap();
        let expected = format!(
            r#"{{"stream_options":{{"include_usage":true}},{}"#,
            rewritten(&body[1..])
        );
        assert_engine_receives(&gateway, body, expected.as_bytes(), size).await;
    }
}

#[tokio::test]
async fn a_body_read_as_it_arrives_routes_as_one_read_whole() {
    // A JSON body of declared length, in many reads, is prescanned as it
    // arrives; a chunked one is read whole first. Hashed on the
    // conversation's digest, each lands where its text sends it: the same
    // engine both ways, if both read the same conversation.
    let (a, b, c) = (
        FakeEngine::start("a", &["--max-model-len", "1048576"]),
        FakeEngine::start("b", &["--max-model-len", "1048576"]),
        FakeEngine::start("c", &["--max-model-len", "1048576"]),
    );
    let gateway = Gateway::start(&three_engine_route(&a, &b, &c, "consistent_hash")).await;
    let http = client();
    let mut engines = std::collections::HashSet::new();
    for i in 0..8 {
        // Escapes, multi-byte characters and plain runs, some of them
        // split between reads.
        let line = format!(
            "turn {i}: caf\u{e9} \u{1F600} \"quoted\"\n\t{}\n",
            "x".repeat(97 * i)
        );
        let body = serde_json::to_vec(&json!({
            "model": "chat",
            "max_tokens": 1,
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": line.repeat(800)},
            ],
        }))
        .unwrap();
        let expected = String::from_utf8(body.clone()).unwrap().replacen(
            r#""model":"chat""#,
            r#""model":"Qwen/Qwen3-8B""#,
            1,
        );
        let mut served = Vec::new();
        for chunked in [false, true] {
            let request = http
                .post(gateway.url("/v1/chat/completions"))
                .header("content-type", "application/json");
            let request = if chunked {
                let pieces: Vec<Result<Vec<u8>, std::io::Error>> =
                    body.chunks(40_000).map(|p| Ok(p.to_vec())).collect();
                request.body(reqwest::Body::wrap_stream(futures_util::stream::iter(
                    pieces,
                )))
            } else {
                request.body(body.clone())
            };
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200, "body {i}, chunked {chunked}");
            assert_eq!(
                response.headers()["x-fake-body-sha256"],
                sha256_hex(expected.as_bytes()).as_str(),
                "body {i}, chunked {chunked}"
            );
            served.push(served_by(&response));
        }
        assert_eq!(served[0], served[1], "body {i} read two ways went two ways");
        engines.insert(served[0].clone());
    }
    assert!(
        engines.len() >= 2,
        "eight conversations all hashed to {engines:?}"
    );

    // Invalid UTF-8 far into a large body is refused as a body in one
    // piece is, and reaches no engine.
    let before = a.chat_requests().await + b.chat_requests().await + c.chat_requests().await;
    let mut broken = large_chat_body("chat", 512 * 1024);
    let at = broken.len() - 1000;
    broken[at] = 0xff;
    let response = gateway.post_chat_bytes(broken).await;
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not valid JSON"),
        "{error}"
    );
    let after = a.chat_requests().await + b.chat_requests().await + c.chat_requests().await;
    assert_eq!(after, before);
}

/// Posts `body` as a chat completion and asserts the engine got exactly
/// `expected` (its length and digest, as the fake engine reports them).
async fn assert_engine_receives(gateway: &Gateway, body: Vec<u8>, expected: &[u8], size: usize) {
    let response = gateway.post_chat_bytes(body).await;
    assert_eq!(response.status(), 200, "size {size}");
    assert_eq!(
        (
            response.headers()["x-fake-body-bytes"].to_str().unwrap(),
            response.headers()["x-fake-body-sha256"].to_str().unwrap()
        ),
        (
            expected.len().to_string().as_str(),
            sha256_hex(expected).as_str()
        ),
        "size {size}"
    );
    let _ = response.bytes().await.unwrap();
}

#[tokio::test]
async fn large_body_survives_failover() {
    // A context long enough for the 2 MiB prompt (~210 k of its tokens).
    let good = FakeEngine::start("good", &["--max-model-len", "1048576"]);
    let config = format!(
        "{}{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"dead\" }}, {{ provider = \"good\" }}]\n",
        provider("dead", &format!("http://127.0.0.1:{}", free_port())),
        provider("good", &good.url()),
    );
    let gateway = Gateway::start(&config).await;
    let body = large_chat_body("chat", 2 * 1024 * 1024);
    for _ in 0..2 {
        let response = gateway.post_chat_bytes(body.clone()).await;
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers()["x-fake-body-sha256"],
            sha256_hex(&body).as_str()
        );
    }
}

#[tokio::test]
async fn sse_chunks_arrive_as_the_engine_sends_them() {
    let engine = FakeEngine::start("e", &["--token-delay-ms", "150"]);
    let config = format!(
        "{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"e\" }}]\n",
        provider("e", &engine.url())
    );
    let gateway = Gateway::start(&config).await;
    let started = Instant::now();
    let response = client()
        .post(gateway.url("/v1/chat/completions"))
        .json(&json!({
            "model": "chat",
            "stream": true,
            "max_tokens": 6,
            "messages": [{"role": "user", "content": "count"}],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut stream = response.bytes_stream();
    let mut text = String::new();
    let mut arrivals = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        let events = String::from_utf8_lossy(&chunk).matches("data: ").count();
        for _ in 0..events {
            arrivals.push(started.elapsed());
        }
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
    let content_events = text.matches("\"content\":\"").count();
    assert!(content_events >= 6, "{text}");
    // Six tokens 150 ms apart: buffered at the end they would all arrive
    // together; streamed, the first arrives at least ~600 ms before the last.
    let spread = *arrivals.last().unwrap() - arrivals[0];
    assert!(
        spread >= Duration::from_millis(500),
        "arrivals {arrivals:?}"
    );
}

#[tokio::test]
async fn fails_over_when_an_engine_refuses_connections() {
    let good = FakeEngine::start("good", &[]);
    let config = format!(
        "{}{}[[routes]]\nmodel = \"chat\"\nstrategy = \"round_robin\"\ntargets = [{{ provider = \"dead\" }}, {{ provider = \"good\" }}]\n",
        provider("dead", &format!("http://127.0.0.1:{}", free_port())),
        provider("good", &good.url()),
    );
    let gateway = Gateway::start(&config).await;
    for i in 0..10 {
        let response = gateway.chat("chat", &format!("{i}")).await;
        assert_eq!(response.status(), 200, "request {i}");
        assert_eq!(served_by(&response), "good");
    }
    let metrics = gateway.metrics().await;
    assert!(
        metrics.contains(r#"rolter_upstream_failures_total{reason="connect",target="dead/chat"}"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn fails_over_when_an_engine_answers_503() {
    let sick = FakeEngine::start("sick", &["--fail-status", "503"]);
    let good = FakeEngine::start("good", &[]);
    let config = format!(
        "{}{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"sick\" }}, {{ provider = \"good\" }}]\n",
        provider("sick", &sick.url()),
        provider("good", &good.url()),
    );
    let gateway = Gateway::start(&config).await;
    for i in 0..6 {
        let response = gateway.chat("chat", &format!("{i}")).await;
        assert_eq!(response.status(), 200, "request {i}");
        assert_eq!(served_by(&response), "good");
    }
    // The first 503 parked the sick engine: it saw one request only.
    assert_eq!(sick.chat_requests().await, 1);
}

#[tokio::test]
async fn when_every_target_fails_the_client_gets_a_clean_error() {
    let sick = FakeEngine::start("sick", &["--fail-status", "503"]);
    let config = format!(
        "{}{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"sick\" }}, {{ provider = \"dead\" }}]\n",
        provider("sick", &sick.url()),
        provider("dead", &format!("http://127.0.0.1:{}", free_port())),
    );
    let gateway = Gateway::start(&config).await;
    for _ in 0..4 {
        let response = gateway.chat("chat", "x").await;
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap();
        match status {
            // The sick engine's own answer, passed through as the last word.
            503 => assert!(body["error"].is_object(), "{body}"),
            502 => {
                assert_eq!(body["error"]["code"], "upstream_error", "{body}");
                assert!(
                    body["error"]["message"].as_str().unwrap().contains("dead"),
                    "{body}"
                );
            }
            other => panic!("unexpected status {other}: {body}"),
        }
    }
}

async fn error_of(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("error body is JSON");
    assert!(body["error"]["message"].is_string(), "{body}");
    assert!(body["error"]["type"].is_string(), "{body}");
    (status, body)
}

#[tokio::test]
async fn bad_requests_get_openai_errors() {
    let engine = FakeEngine::start("e", &[]);
    let config = format!(
        "[server]\nrequire_api_key = false\nmax_body_bytes = 4096\n\n{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"e\" }}]\n",
        provider("e", &engine.url())
    );
    let gateway = Gateway::start(&config).await;
    let http = client();

    let (status, body) = error_of(gateway.chat("no-such-model", "x").await).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "model_not_found");
    assert_eq!(body["error"]["param"], "model");

    let (status, body) = error_of(gateway.post_chat_bytes("{\"model\": ").await).await;
    assert_eq!(status, 400);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("not valid JSON"));

    let (status, body) = error_of(gateway.post_chat_bytes("{\"messages\": []}").await).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "model");

    let (status, body) = error_of(gateway.post_chat_bytes("{\"model\": 7}").await).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "model");

    let oversize = large_chat_body("chat", 8192);
    let (status, body) = error_of(gateway.post_chat_bytes(oversize).await).await;
    assert_eq!(status, 413);
    assert_eq!(body["error"]["code"], "request_too_large");

    let (status, _) = error_of(
        http.post(gateway.url("/v1/nope"))
            .body("{}")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 404);

    let (status, _) = error_of(
        http.get(gateway.url("/v1/chat/completions"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 405);

    // None of it reached the engine.
    assert_eq!(engine.chat_requests().await, 0);
}

#[tokio::test]
async fn api_keys_are_checked_and_limit_models() {
    let engine = FakeEngine::start("e", &[]);
    let config = format!(
        "[server]\nrequire_api_key = true\n\n{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"e\" }}]\n\n[[routes]]\nmodel = \"secret\"\ntargets = [{{ provider = \"e\" }}]\n\n[[api_keys]]\nname = \"team\"\nkey_env = \"TEAM_KEY\"\nmodels = [\"chat\"]\n",
        provider("e", &engine.url())
    );
    let gateway = Gateway::start_with_env(&config, &[("TEAM_KEY", "sk-team")]).await;
    let http = client();
    let chat = |model: &str, key: Option<&str>| {
        let mut request = http
            .post(gateway.url("/v1/chat/completions"))
            .json(&chat_body(model, "x"));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send()
    };

    let response = chat("chat", Some("sk-team")).await.unwrap();
    assert_eq!(response.status(), 200);
    // The caller's key never reaches the engine (it has no key of its own).
    let (status, body) = error_of(chat("chat", Some("sk-wrong")).await.unwrap()).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["code"], "invalid_api_key");
    let (status, _) = error_of(chat("chat", None).await.unwrap()).await;
    assert_eq!(status, 401);
    let (status, body) = error_of(chat("secret", Some("sk-team")).await.unwrap()).await;
    assert_eq!(status, 403);
    assert_eq!(body["error"]["code"], "model_not_allowed");

    // /v1/models shows only what the key may use.
    let models: Value = http
        .get(gateway.url("/v1/models"))
        .bearer_auth("sk-team")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"].as_array().unwrap().len(), 1);
    assert_eq!(models["data"][0]["id"], "chat");
}

#[tokio::test]
async fn reload_with_reordered_targets_keeps_the_tracker() {
    let (a, b, c) = (
        FakeEngine::start("a", &[]),
        FakeEngine::start("b", &[]),
        FakeEngine::start("c", &[]),
    );
    let providers = format!(
        "{}{}{}",
        provider("gpu-a", &a.url()),
        provider("gpu-b", &b.url()),
        provider("gpu-c", &c.url())
    );
    let route = |targets: &str| {
        format!("{providers}[[routes]]\nmodel = \"chat\"\nstrategy = \"round_robin\"\ntargets = [{targets}]\n")
    };
    let gateway =
        Gateway::start(&route("{ provider = \"gpu-a\" }, { provider = \"gpu-b\" }")).await;
    for _ in 0..4 {
        assert_eq!(gateway.chat("chat", "x").await.status(), 200);
    }
    let requests_of = |routes: &Value, provider: &str| {
        routes["routes"][0]["targets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["provider"] == provider)
            .map(|t| t["requests"].as_u64().unwrap())
    };
    let before = gateway.routes().await;
    assert_eq!(before["version"], 1);
    assert_eq!(requests_of(&before, "gpu-a"), Some(2));
    assert_eq!(requests_of(&before, "gpu-b"), Some(2));

    gateway.write_config(&route(
        "{ provider = \"gpu-c\" }, { provider = \"gpu-b\" }, { provider = \"gpu-a\" }",
    ));
    let (status, body) = gateway.reload().await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["version"], 2);

    let after = gateway.routes().await;
    assert_eq!(after["version"], 2);
    assert_eq!(after["routes"][0]["targets"][0]["provider"], "gpu-c");
    assert_eq!(requests_of(&after, "gpu-a"), Some(2));
    assert_eq!(requests_of(&after, "gpu-b"), Some(2));
    assert_eq!(requests_of(&after, "gpu-c"), Some(0));

    // SIGHUP reloads too.
    gateway.write_config(&route("{ provider = \"gpu-b\" }"));
    gateway.process.signal(libc::SIGHUP);
    let admin = gateway.admin_url();
    wait_until(Duration::from_secs(10), "the SIGHUP reload", || {
        let request = client()
            .get(format!("{admin}/admin/routes"))
            .bearer_auth(ADMIN_TOKEN)
            .send();
        async move {
            match request.await {
                Ok(r) => r.json::<Value>().await.is_ok_and(|v| v["version"] == 3),
                Err(_) => false,
            }
        }
    })
    .await;
    for _ in 0..3 {
        assert_eq!(served_by(&gateway.chat("chat", "x").await), "gpu-b");
    }
}

#[tokio::test]
async fn bad_reload_keeps_the_running_configuration_and_says_why() {
    let engine = FakeEngine::start("e", &[]);
    let good = format!(
        "{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"e\" }}]\n",
        provider("e", &engine.url())
    );
    let gateway = Gateway::start(&good).await;
    gateway.write_config(&format!(
        "{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"missing\" }}]\n",
        provider("e", &engine.url())
    ));
    let (status, body) = gateway.reload().await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["status"], "error");
    assert_eq!(body["version"], 1);
    let errors = body["errors"].to_string();
    assert!(errors.contains("missing"), "{errors}");
    assert!(errors.contains("rolter.toml"), "{errors}");
    // Still serving the old configuration.
    assert_eq!(gateway.chat("chat", "x").await.status(), 200);
    assert!(gateway
        .metrics()
        .await
        .contains(r#"rolter_config_reloads_total{result="error"} 1"#));
    // The refusal stays on record for the dashboard, with its reasons.
    let last = &gateway.routes().await["last_reload"];
    assert_eq!(last["applied"], false, "{last}");
    assert_eq!(last["version"], 1, "{last}");
    assert!(last["errors"].to_string().contains("missing"), "{last}");
    assert!(
        last["source"].as_str().unwrap().ends_with("rolter.toml"),
        "{last}"
    );
    assert!(
        last["at_unix_ms"].as_u64().unwrap() > 1_700_000_000_000,
        "{last}"
    );
    // A good reload replaces it.
    gateway.write_config(&good);
    assert_eq!(gateway.reload().await.0, 200);
    let last = &gateway.routes().await["last_reload"];
    assert_eq!(last["applied"], true, "{last}");
    assert_eq!(last["version"], 2, "{last}");
    assert_eq!(last["errors"], json!([]), "{last}");
}

#[tokio::test]
async fn admin_endpoints_need_a_token_with_the_right_role() {
    let engine = FakeEngine::start("e", &[]);
    let config = format!(
        "{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"e\" }}]\n\n[[admin_tokens]]\nname = \"watcher\"\ntoken_env = \"VIEWER_TOKEN\"\nrole = \"viewer\"\n",
        provider("e", &engine.url())
    );
    let gateway = Gateway::start_with_env(&config, &[("VIEWER_TOKEN", "view-only")]).await;
    let http = client();
    let admin = gateway.admin_url();
    assert_eq!(
        http.get(format!("{admin}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        http.get(format!("{admin}/metrics"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        http.get(format!("{admin}/admin/routes"))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );
    let viewer_routes = http
        .get(format!("{admin}/admin/routes"))
        .bearer_auth("view-only")
        .send()
        .await
        .unwrap();
    assert_eq!(viewer_routes.status(), 200);
    let viewer_reload = http
        .post(format!("{admin}/admin/reload"))
        .bearer_auth("view-only")
        .send()
        .await
        .unwrap();
    assert_eq!(viewer_reload.status(), 403);
}

#[tokio::test]
async fn metrics_count_requests_picks_and_latency() {
    let engine = FakeEngine::start("e", &[]);
    let config = format!(
        "{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"e\", model = \"up\" }}]\n",
        provider("e", &engine.url())
    );
    let gateway = Gateway::start(&config).await;
    for _ in 0..3 {
        assert_eq!(gateway.chat("chat", "x").await.status(), 200);
    }
    // Requests are counted when Pingora logs them, just after the client
    // has the response.
    let admin = gateway.admin_url();
    wait_until(Duration::from_secs(5), "three logged requests", || {
        let request = client().get(format!("{admin}/metrics")).send();
        async move {
            match request.await {
                Ok(r) => r.text().await.is_ok_and(|t| {
                    t.contains(
                        r#"rolter_requests_total{route="chat",status="200",target="e/up"} 3"#,
                    )
                }),
                Err(_) => false,
            }
        }
    })
    .await;
    let metrics = gateway.metrics().await;
    for expected in [
        r#"rolter_requests_total{route="chat",status="200",target="e/up"} 3"#,
        r#"rolter_balancer_picks_total{route="chat",strategy="round_robin"} 3"#,
        r#"rolter_time_to_first_byte_seconds_count{route="chat",target="e/up"} 3"#,
        r#"rolter_upstream_latency_seconds_count{route="chat",target="e/up"} 3"#,
        r#"rolter_target_in_flight{target="e/up"} 0"#,
        "rolter_config_version 1",
    ] {
        assert!(metrics.contains(expected), "missing {expected}\n{metrics}");
    }
}
