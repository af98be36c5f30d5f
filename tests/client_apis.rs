//! The APIs clients use besides chat completions: Anthropic's Messages API
//! and OpenAI's Responses API through the gateway, with their official
//! Python SDKs (tests/python/requirements.txt; `make test` installs them),
//! affinity for their conversations, and Anthropic's own error shape and
//! key header.

mod support;

use std::collections::{HashMap, HashSet};

use serde_json::{json, Value};

use support::*;

const KEYS: &str = "[[api_keys]]\nname = \"sdk\"\nkey_env = \"SDK_KEY\"\n";

fn config(engines: &[(&str, &FakeEngine)], strategy: &str, require_key: bool) -> String {
    let mut config = format!("[server]\nrequire_api_key = {require_key}\n\n");
    for (name, engine) in engines {
        config.push_str(&provider(name, &engine.url()));
    }
    let targets: Vec<String> = engines
        .iter()
        .map(|(name, _)| format!("{{ provider = \"{name}\", model = \"Qwen/Qwen3-8B\" }}"))
        .collect();
    config.push_str(&format!(
        "[[routes]]\nmodel = \"qwen-chat\"\nstrategy = \"{strategy}\"\ntargets = [{}]\n\n[health]\nenabled = false\n\n{KEYS}",
        targets.join(", ")
    ));
    config
}

#[tokio::test]
async fn official_anthropic_client_plain_streaming_count_tokens_and_errors() {
    let engine = FakeEngine::start("e", &["--token-delay-ms", "5"]);
    let gateway = Gateway::start_with_env(
        &config(&[("e", &engine)], "round_robin", true),
        &[("SDK_KEY", "sk-sdk-test")],
    )
    .await;
    // The SDK sends its key as `x-api-key`; the base URL is the host (it adds /v1).
    sdk_script(
        "anthropic_client.py",
        "anthropic",
        gateway.url(""),
        "sk-sdk-test",
        "qwen-chat",
    )
    .await;
}

#[tokio::test]
async fn official_openai_client_responses_plain_and_streaming() {
    let engine = FakeEngine::start("e", &["--token-delay-ms", "5"]);
    let gateway = Gateway::start_with_env(
        &config(&[("e", &engine)], "round_robin", true),
        &[("SDK_KEY", "sk-sdk-test")],
    )
    .await;
    sdk_script(
        "responses_client.py",
        "openai",
        gateway.url("/v1"),
        "sk-sdk-test",
        "qwen-chat",
    )
    .await;
}

#[tokio::test]
async fn the_gateway_key_never_reaches_the_engine_and_anthropic_headers_do() {
    let engine = FakeEngine::start("e", &[]);
    let gateway = Gateway::start_with_env(
        &config(&[("e", &engine)], "round_robin", true),
        &[("SDK_KEY", "sk-sdk-test")],
    )
    .await;
    let response = client()
        .post(gateway.url("/v1/messages"))
        .header("x-api-key", "sk-sdk-test")
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "tools-2024-04-04")
        .json(&json!({"model": "qwen-chat", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "message", "{body}");
    assert_eq!(
        body["fake"]["received_model"], "Qwen/Qwen3-8B",
        "model rewritten"
    );
    let seen = &body["fake"]["received_headers"];
    assert!(
        seen.get("x-api-key").is_none(),
        "the gateway's key leaked: {seen}"
    );
    assert!(seen.get("authorization").is_none(), "{seen}");
    assert_eq!(seen["anthropic-version"], "2023-06-01");
    assert_eq!(seen["anthropic-beta"], "tools-2024-04-04");

    // Errors rolter itself answers on this path are in Anthropic's shape.
    let refused = client()
        .post(gateway.url("/v1/messages"))
        .json(&json!({"model": "qwen-chat", "max_tokens": 2, "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["type"], "error", "{body}");
    assert_eq!(body["error"]["type"], "authentication_error", "{body}");
    let bad = client()
        .post(gateway.url("/v1/messages"))
        .header("x-api-key", "sk-sdk-test")
        .json(&json!({"max_tokens": 2, "messages": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let body: Value = bad.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("model"),
        "{body}"
    );
    // The Responses path keeps OpenAI's.
    let openai = client()
        .post(gateway.url("/v1/responses"))
        .header("authorization", "Bearer sk-sdk-test")
        .json(&json!({"model": "nope", "input": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(openai.status(), 404);
    let body: Value = openai.json().await.unwrap();
    assert_eq!(body["error"]["code"], "model_not_found", "{body}");
}

/// Sends one turn on `path` and returns the engine that served it.
async fn turn(gateway: &Gateway, path: &str, body: Value) -> String {
    let response = client()
        .post(gateway.url(path))
        .header("x-api-key", "sk-sdk-test")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{path}");
    served_by(&response)
}

#[tokio::test]
async fn multi_turn_messages_and_responses_conversations_stay_on_one_engine() {
    let (a, b, c) = (
        FakeEngine::start("a", &[]),
        FakeEngine::start("b", &[]),
        FakeEngine::start("c", &[]),
    );
    let gateway = Gateway::start_with_env(
        &config(&[("a", &a), ("b", &b), ("c", &c)], "cache_aware", true),
        &[("SDK_KEY", "sk-sdk-test")],
    )
    .await;
    let mut homes = HashMap::new();
    for user in 0..6 {
        let system = format!("You are assistant number {user}. {}", "Rules. ".repeat(200));
        let mut messages = vec![json!({"role": "user", "content": "hello"})];
        let mut input = vec![json!({"role": "user", "content": "hello"})];
        let api = if user % 2 == 0 {
            "messages"
        } else {
            "responses"
        };
        let mut served = HashSet::new();
        for turn_no in 0..4 {
            let engine = if api == "messages" {
                turn(
                    &gateway,
                    "/v1/messages",
                    json!({"model": "qwen-chat", "max_tokens": 2, "system": system, "messages": messages}),
                )
                .await
            } else {
                turn(
                    &gateway,
                    "/v1/responses",
                    json!({"model": "qwen-chat", "max_output_tokens": 2, "instructions": system, "input": input}),
                )
                .await
            };
            served.insert(engine.clone());
            homes.insert(user, engine);
            let reply = format!("answer {turn_no}");
            messages
                .push(json!({"role": "assistant", "content": [{"type": "text", "text": reply}]}));
            messages.push(json!({"role": "user", "content": format!("turn {turn_no}")}));
            input.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": reply}]}));
            input.push(json!({"role": "user", "content": [{"type": "input_text", "text": format!("turn {turn_no}")}]}));
        }
        assert_eq!(
            served.len(),
            1,
            "{api} conversation {user} moved: {served:?}"
        );
    }
    let distinct: HashSet<_> = homes.values().collect();
    assert!(
        distinct.len() >= 2,
        "six cold conversations all on one engine: {homes:?}"
    );
}

/// A Responses request on `path` with `body`: its status, JSON and engine.
async fn responses_call(
    gateway: &Gateway,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value, String) {
    let mut request = client()
        .request(method, gateway.url(path))
        .header("authorization", "Bearer sk-sdk-test");
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let engine = served_by(&response);
    let text = response.text().await.unwrap();
    let json = serde_json::from_str(&text)
        .or_else(|_| {
            // A stream: the response object of its first event.
            let data = text
                .lines()
                .find_map(|l| l.strip_prefix("data: "))
                .unwrap_or("null");
            serde_json::from_str::<Value>(data).map(|event| event["response"].clone())
        })
        .unwrap_or(Value::Null);
    (status, json, engine)
}

#[tokio::test]
async fn stored_responses_and_their_continuations_reach_the_engine_holding_them() {
    let (a, b, c) = (
        FakeEngine::start("a", &[]),
        FakeEngine::start("b", &[]),
        FakeEngine::start("c", &[]),
    );
    // Round robin: without the learned homes every next request moves,
    // and the other engines do not hold the response (vLLM answers 404).
    let gateway = Gateway::start_with_env(
        &config(&[("a", &a), ("b", &b), ("c", &c)], "round_robin", true),
        &[("SDK_KEY", "sk-sdk-test")],
    )
    .await;
    let post = reqwest::Method::POST;
    let (status, first, home) = responses_call(
        &gateway,
        post.clone(),
        "/v1/responses",
        Some(json!({"model": "qwen-chat", "input": "hello", "max_output_tokens": 2})),
    )
    .await;
    assert_eq!(status, 200, "{first}");
    let mut last = first["id"].as_str().unwrap().to_string();
    for turn in 0..4 {
        let stream = turn % 2 == 1;
        let (status, answer, engine) = responses_call(
            &gateway,
            post.clone(),
            "/v1/responses",
            Some(json!({"model": "qwen-chat", "input": format!("turn {turn}"), "max_output_tokens": 2,
                        "previous_response_id": last, "stream": stream})),
        )
        .await;
        assert_eq!(status, 200, "turn {turn} (stream {stream}): {answer}");
        assert_eq!(
            engine, home,
            "turn {turn} (stream {stream}) left the engine holding {last}"
        );
        last = answer["id"].as_str().unwrap().to_string();
    }
    // The last id came from a stream's first event: learned all the same.
    let by_id = format!("/v1/responses/{last}");
    let (status, got, engine) = responses_call(&gateway, reqwest::Method::GET, &by_id, None).await;
    assert_eq!((status, engine.as_str()), (200, home.as_str()), "{got}");
    assert_eq!(got["id"], last.as_str());
    let (status, _, _) = responses_call(&gateway, reqwest::Method::PUT, &by_id, None).await;
    assert_eq!(status, 405);
    let (status, deleted, engine) =
        responses_call(&gateway, reqwest::Method::DELETE, &by_id, None).await;
    assert_eq!((status, engine.as_str()), (200, home.as_str()), "{deleted}");
    assert_eq!(deleted["deleted"], true);
    for id in [last.as_str(), "resp-never-seen"] {
        let (status, error, engine) = responses_call(
            &gateway,
            reqwest::Method::GET,
            &format!("/v1/responses/{id}"),
            None,
        )
        .await;
        assert_eq!(status, 404, "{error}");
        assert_eq!(engine, "-", "answered by the gateway, not an engine");
        assert_eq!(error["error"]["code"], "response_not_found", "{error}");
    }
}

/// The usage an answer reports on `path` (a stream's merged from its
/// events, as each API splits it), as (prompt, cached, completion).
fn reported_usage(path: &str, text: &str) -> Option<(u64, u64, u64)> {
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let values: Vec<Value> = match serde_json::from_str::<Value>(text) {
        Ok(value) => vec![value],
        Err(_) => text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .filter_map(|d| serde_json::from_str(d).ok())
            .collect(),
    };
    let mut found: Option<(u64, u64, u64)> = None;
    for value in &values {
        let usage = [
            &value["usage"],
            &value["message"]["usage"],
            &value["response"]["usage"],
        ]
        .into_iter()
        .find(|u| u.is_object())
        .cloned();
        let Some(u) = usage else { continue };
        let this = if path == "/v1/messages" {
            let read = n(&u["cache_read_input_tokens"]);
            (n(&u["input_tokens"]) + read, read, n(&u["output_tokens"]))
        } else if path == "/v1/responses" {
            (
                n(&u["input_tokens"]),
                n(&u["input_tokens_details"]["cached_tokens"]),
                n(&u["output_tokens"]),
            )
        } else {
            (
                n(&u["prompt_tokens"]),
                n(&u["prompt_tokens_details"]["cached_tokens"]),
                n(&u["completion_tokens"]),
            )
        };
        found = Some(match found {
            Some(f) => (f.0.max(this.0), f.1.max(this.1), f.2.max(this.2)),
            None => this,
        });
    }
    found
}

#[tokio::test]
async fn token_counters_and_the_access_log_equal_the_engines_usage() {
    let engine = FakeEngine::start("e", &[]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let config = config(&[("e", &engine)], "round_robin", true).replacen(
        "[server]\n",
        &format!(
            "[server]\naccess_log = \"{}\"\naccess_log_format = \"json\"\n",
            log.display()
        ),
        1,
    );
    let gateway = Gateway::start_with_env(&config, &[("SDK_KEY", "sk-sdk-test")]).await;
    let system = "You are a careful assistant. ".repeat(20);
    let chat = |stream: bool, usage: bool| {
        json!({"model": "qwen-chat", "max_tokens": 3, "stream": stream,
               "stream_options": if stream { json!({"include_usage": usage}) } else { Value::Null },
               "messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}]})
    };
    let messages = |stream: bool| {
        json!({"model": "qwen-chat", "max_tokens": 4, "stream": stream, "system": system,
               "messages": [{"role": "user", "content": "hi"}]})
    };
    let responses = |stream: bool| {
        json!({"model": "qwen-chat", "max_output_tokens": 5, "stream": stream,
               "instructions": system, "input": "hi"})
    };
    let cases = [
        ("/v1/chat/completions", chat(false, false), true),
        ("/v1/chat/completions", chat(true, true), true),
        // The client did not ask: the gateway asks the engine for usage and
        // keeps that chunk from the client.
        ("/v1/chat/completions", chat(true, false), false),
        ("/v1/messages", messages(false), true),
        ("/v1/messages", messages(true), true),
        ("/v1/responses", responses(false), true),
        ("/v1/responses", responses(true), true),
    ];
    let mut expected = (0, 0, 0);
    for (i, (path, body, has_usage)) in cases.iter().enumerate() {
        let id = format!("usage-case-{i}");
        let response = client()
            .post(gateway.url(path))
            .header("x-api-key", "sk-sdk-test")
            .header("x-request-id", &id)
            .json(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
        let text = response.text().await.unwrap();
        let usage = reported_usage(path, &text);
        assert_eq!(usage.is_some(), *has_usage, "{path}: {text}");
        let line = line_with(&log, &id).await;
        let logged: Value = serde_json::from_str(&line).unwrap();
        match usage {
            Some((prompt, cached, completion)) => {
                assert!(prompt > 0 && completion > 0, "{path}: {text}");
                assert_eq!(logged["prompt_tokens"], prompt, "{path}: {line}");
                assert_eq!(logged["cached_tokens"], cached, "{path}: {line}");
                assert_eq!(logged["completion_tokens"], completion, "{path}: {line}");
                expected = (
                    expected.0 + prompt,
                    expected.1 + cached,
                    expected.2 + completion,
                );
            }
            None => {
                assert!(
                    !text.contains("\"usage\":{"),
                    "the client saw a usage chunk: {text}"
                );
                assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
                assert_eq!(
                    text.matches("\"content\":").count(),
                    4,
                    "role + 3 tokens: {text}"
                );
                assert_eq!(
                    logged["completion_tokens"], 3,
                    "counted all the same: {line}"
                );
                let n = |field: &str| logged[field].as_u64().unwrap();
                assert!(n("prompt_tokens") > 0, "{line}");
                expected = (
                    expected.0 + n("prompt_tokens"),
                    expected.1 + n("cached_tokens"),
                    expected.2 + n("completion_tokens"),
                );
            }
        }
    }
    assert!(
        expected.1 > 0,
        "the shared system prompt was served from the prefix cache"
    );
    let metrics = gateway.metrics().await;
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("rolter_tokens_total{"))
    {
        assert!(
            line.contains("key=\"sdk\"") && line.contains("route=\"qwen-chat\""),
            "{line}"
        );
    }
    let counted = |kind: &str| {
        sum_series(
            &metrics,
            "rolter_tokens_total{",
            &format!("kind=\"{kind}\""),
        )
    };
    assert_eq!(
        (counted("prompt"), counted("cached"), counted("completion")),
        expected,
        "{metrics}"
    );
}
