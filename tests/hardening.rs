//! Faults a review found by trying the gateway as an attacker and as an
//! operator would: each test is named after the failure it prevents and
//! runs the real `rolter serve` in front of `rolter fake-llm` engines.

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures_util::{stream, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use support::*;

/// Health checks off, so a test sees one mechanism at a time.
const NO_HEALTH: &str = "[health]\nenabled = false\n";

/// The value of the first series of `/metrics` that starts with `series`.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find(|line| line.starts_with(series))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Lines of `/metrics` (comments left out) that start with `prefix`.
fn series(text: &str, prefix: &str) -> usize {
    text.lines().filter(|l| l.starts_with(prefix)).count()
}

/// A field of `/proc/<pid>/status` in KiB (`VmRSS`, `VmData`).
fn proc_kib(pid: i32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Sends a chat completion per model name, `concurrency` at a time, with
/// `key`; returns how many got each status.
async fn flood(
    gateway: &Gateway,
    key: &str,
    models: impl Iterator<Item = String>,
    concurrency: usize,
) -> HashMap<u16, usize> {
    let http = client();
    let url = gateway.url("/v1/chat/completions");
    let statuses: Vec<u16> = stream::iter(models)
        .map(|model| {
            let request = http
                .post(&url)
                .bearer_auth(key)
                .json(&chat_body(&model, "hi"));
            async move { request.send().await.map_or(0, |r| r.status().as_u16()) }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let mut counts = HashMap::new();
    for status in statuses {
        *counts.entry(status).or_default() += 1;
    }
    counts
}

async fn chat_with_key(gateway: &Gateway, key: &str, model: &str) -> reqwest::Response {
    client()
        .post(gateway.url("/v1/chat/completions"))
        .bearer_auth(key)
        .json(&chat_body(model, "hi"))
        .send()
        .await
        .expect("chat request")
}

/// Target `provider` of the configured route `model` in `/admin/routes`.
fn route_target<'a>(routes: &'a Value, model: &str, provider: &str) -> &'a Value {
    routes["routes"]
        .as_array()
        .and_then(|all| all.iter().find(|r| r["model"] == model))
        .and_then(|r| r["targets"].as_array())
        .and_then(|targets| targets.iter().find(|t| t["provider"] == provider))
        .unwrap_or_else(|| panic!("no target {provider} of route {model} in {routes}"))
}

/// Member `provider` of group `slug` in `/admin/routes`.
fn group_member<'a>(routes: &'a Value, slug: &str, provider: &str) -> &'a Value {
    routes["groups"]
        .as_array()
        .and_then(|all| all.iter().find(|g| g["slug"] == slug))
        .and_then(|g| g["members"].as_array())
        .and_then(|members| members.iter().find(|m| m["provider"] == provider))
        .unwrap_or_else(|| panic!("no member {provider} of group {slug} in {routes}"))
}

/// A streamed chat completion, read to its end; returns who served it.
async fn stream_chat(gateway: &Gateway, model: &str, content: &str) -> String {
    let response = client()
        .post(gateway.url("/v1/chat/completions"))
        .json(&json!({
            "model": model,
            "stream": true,
            "max_tokens": 2,
            "messages": [{"role": "user", "content": content}],
        }))
        .send()
        .await
        .expect("stream request");
    assert_eq!(response.status(), 200, "stream for {model}");
    let served = served_by(&response);
    let body = response.text().await.expect("stream body");
    assert!(body.contains("[DONE]"), "the stream ended: {body}");
    served
}

// 1. Addressed routes cannot be used to exhaust the gateway.

#[tokio::test]
async fn junk_model_floods_leave_bounded_state_and_new_addresses_still_work() {
    // `open` serves whatever model it is asked for, so junk through the
    // group is served (and kept, up to the LRU's bound); `strict` serves
    // one model and refuses junk with vLLM's 404, so nothing is kept.
    let open = FakeEngine::start("open", &[]);
    let strict = FakeEngine::start("strict", &["--model", "real-model"]);
    let config = format!(
        "[server]\nrequire_api_key = true\naccess_log = \"off\"\n\n{}{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"open\" }}]\n\n[[provider_groups]]\nname = \"fleet\"\nstrategy = \"round_robin\"\nmembers = [{{ provider = \"open\" }}]\n\n[[api_keys]]\nname = \"flood\"\nkey_env = \"FLOOD_KEY\"\n\n[[api_keys]]\nname = \"chat-only\"\nkey_env = \"CHAT_KEY\"\nmodels = [\"chat\"]\n\n{NO_HEALTH}",
        provider("open", &open.url()),
        provider("strict", &strict.url()),
    );
    let gateway = Gateway::start_with_env(
        &config,
        &[("FLOOD_KEY", "flood-key"), ("CHAT_KEY", "chat-key")],
    )
    .await;

    // A key that may not use these addresses is refused before anything is
    // built for them: no engine sees a request, no route is kept.
    let refused = flood(
        &gateway,
        "chat-key",
        (0..1000).map(|i| {
            if i % 2 == 0 {
                format!("fleet/refused-{i}")
            } else {
                format!("strict/refused-{i}")
            }
        }),
        32,
    )
    .await;
    assert_eq!(refused, HashMap::from([(403, 1000)]));
    assert_eq!(open.chat_requests().await + strict.chat_requests().await, 0);
    let text = gateway.metrics().await;
    assert_eq!(metric(&text, "rolter_addressed_routes "), Some(0.0));
    assert!(!text.contains("refused-"), "a refused address left a label");

    // The flood: 20,000 distinct names, 12,000 served through the group and
    // 8,000 refused by the strict engine, in two halves measured apart.
    let junk = |half: usize| {
        (0..10_000).map(move |i| {
            if i % 5 < 3 {
                format!("fleet/junk-{half}-{i}")
            } else {
                format!("strict/junk-{half}-{i}")
            }
        })
    };
    let pid = gateway.process.pid();
    let first = flood(&gateway, "flood-key", junk(0), 32).await;
    assert_eq!(first.get(&200), Some(&6000), "{first:?}");
    assert_eq!(first.get(&404), Some(&4000), "{first:?}");
    let rss_first = proc_kib(pid, "VmRSS");
    let metrics_first = gateway.metrics().await;
    let second = flood(&gateway, "flood-key", junk(1), 32).await;
    assert_eq!(second.get(&200), Some(&6000), "{second:?}");
    let rss_second = proc_kib(pid, "VmRSS");
    let metrics_second = gateway.metrics().await;

    let kept = metric(&metrics_second, "rolter_addressed_routes ").expect("kept gauge");
    assert!(kept <= 4096.0, "{kept} addressed routes kept");
    let evicted = metric(&metrics_second, "rolter_addressed_route_evictions_total ").unwrap();
    assert!(evicted >= 6000.0, "evictions counted: {evicted}");
    // Per-target series: the configured target, the open engine's labels
    // (at most 256 plus its fold) and the strict engine's fold.
    let histograms = series(&metrics_second, "rolter_upstream_latency_seconds_count{");
    assert!(histograms <= 1 + 257 + 1, "{histograms} latency series");
    assert!(metrics_second.contains("target=\"strict/_other\""));
    assert!(
        !metrics_second.contains("strict/junk-"),
        "a name the engine refused left a label"
    );
    // Tracker entries: `open/chat` and each provider's engine, nothing per name.
    assert_eq!(series(&metrics_second, "rolter_target_in_flight{"), 3);
    let growth = metrics_second.len() as f64 / metrics_first.len() as f64;
    assert!(
        growth < 1.02,
        "/metrics grew from {} to {} bytes",
        metrics_first.len(),
        metrics_second.len()
    );
    assert!(
        rss_second < rss_first + 8 * 1024,
        "RSS grew from {rss_first} KiB to {rss_second} KiB over 10,000 more junk names"
    );
    eprintln!(
        "after 10,000 junk names: RSS {rss_first} KiB, /metrics {} B; after 20,000: RSS {rss_second} KiB, /metrics {} B; {kept} kept, {evicted} evicted",
        metrics_first.len(),
        metrics_second.len()
    );

    // Legitimate new addresses still work, through the group and pinned.
    let response = chat_with_key(&gateway, "flood-key", "fleet/real-model").await;
    assert_eq!(response.status(), 200);
    assert_eq!(served_by(&response), "open");
    let response = chat_with_key(&gateway, "flood-key", "strict/real-model").await;
    assert_eq!(response.status(), 200);
    assert_eq!(served_by(&response), "strict");
    assert_eq!(
        chat_with_key(&gateway, "chat-key", "chat").await.status(),
        200
    );
}

#[tokio::test]
async fn a_target_a_reload_removed_leaves_the_tracker_once_it_drained() {
    let a = FakeEngine::start("a", &[]);
    let b = FakeEngine::start("b", &["--token-delay-ms", "100"]);
    let both = format!(
        "{}{}[[routes]]\nmodel = \"chat\"\nstrategy = \"round_robin\"\ntargets = [{{ provider = \"a\" }}, {{ provider = \"b\" }}]\n\n{NO_HEALTH}",
        provider("a", &a.url()),
        provider("b", &b.url()),
    );
    let gateway = Gateway::start(&both).await;
    let b_in_flight = r#"rolter_target_in_flight{target="b/chat"}"#;
    // A stream on b that outlives the reload.
    let held = client()
        .post(gateway.url("/v1/chat/completions"))
        .json(&json!({"model": "b/chat", "stream": true, "max_tokens": 20,
                      "messages": [{"role": "user", "content": "long"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(served_by(&held), "b");
    gateway.write_config(&format!(
        "{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"a\" }}]\n\n{NO_HEALTH}",
        provider("a", &a.url()),
    ));
    assert_eq!(gateway.reload().await.0, 200);
    // Draining: still tracked while its request is in flight.
    let text = gateway.metrics().await;
    assert_eq!(metric(&text, b_in_flight), Some(1.0));
    drop(held);
    // Its identities go (with their gauges) once the last request drained.
    let gauges = [
        "rolter_target_in_flight{target=\"b/",
        "rolter_breaker_state{target=\"b/",
        "rolter_target_parked{target=\"b/",
    ];
    wait_until(
        Duration::from_secs(10),
        "b to leave the tracker",
        || async {
            let text = gateway.metrics().await;
            gauges.iter().all(|g| series(&text, g) == 0)
        },
    )
    .await;
    assert_eq!(gateway.chat("chat", "still").await.status(), 200);
}

// 2. Slow readers cannot hold slots forever.

#[tokio::test]
async fn a_client_that_stops_reading_is_cut_off_and_every_slot_is_released() {
    let engine = FakeEngine::start("e", &[]);
    let config = format!(
        "[server]\nrequire_api_key = true\nsend_timeout_secs = 1\n\n{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"e\" }}]\n\n[[api_keys]]\nname = \"slow\"\nkey_env = \"SLOW_KEY\"\nmax_concurrent = 1\n\n{NO_HEALTH}",
        provider("e", &engine.url()),
    );
    let gateway = Gateway::start_with_env(&config, &[("SLOW_KEY", "slow-key")]).await;

    // A raw client with a tiny receive window asks for a long stream and
    // then reads nothing more.
    let body = json!({
        "model": "chat",
        "stream": true,
        // All the engine's context leaves after the prompt: it would not
        // end within the test.
        "max_tokens": 100_000,
        "messages": [{"role": "user", "content": "go on forever"}],
    })
    .to_string();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(gateway.listen).await.unwrap();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: rolter\r\nAuthorization: Bearer slow-key\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = [0u8; 512];
    let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut head))
        .await
        .expect("a response starts")
        .unwrap();
    assert!(head[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &head[..n]);

    // The gateway gives up on the reader, the engine sees the cancel.
    wait_until(
        Duration::from_secs(30),
        "the engine to see the cancel",
        || async {
            let stats = engine.stats().await;
            stats["cancelled"] == 1 && stats["in_flight"] == 0
        },
    )
    .await;
    let routes = gateway.routes().await;
    assert_eq!(route_target(&routes, "chat", "e")["in_flight"], 0);
    // The key's one concurrency slot is free again.
    let response = chat_with_key(&gateway, "slow-key", "chat").await;
    assert_eq!(response.status(), 200);
    let text = gateway.metrics().await;
    assert_eq!(
        metric(
            &text,
            r#"rolter_client_connections_closed_total{reason="send_timeout"}"#
        ),
        Some(1.0)
    );
    drop(stream);
}

// 3. adaptive and predicted_latency learn what they model.

#[tokio::test]
async fn streams_teach_time_to_first_token_and_predicted_latency_routes_away_from_the_slow_engine()
{
    // Both engines answer a stream's headers at once; `slow` holds its
    // first token back 300 ms (and more per request ahead of it).
    let fast = FakeEngine::start("fast", &[]);
    let slow = FakeEngine::start("slow", &["--ttft-ms", "300", "--queue-ttft-ms", "100"]);
    let cut = FakeEngine::start("cut", &["--reset-after-chunks", "1"]);
    let config = format!(
        "{}{}{}[[routes]]\nmodel = \"chat\"\nstrategy = \"predicted_latency\"\ntargets = [{{ provider = \"fast\" }}, {{ provider = \"slow\" }}]\n\n[[routes]]\nmodel = \"broken\"\ntargets = [{{ provider = \"cut\" }}]\n\n{NO_HEALTH}\n[retry]\nmax_retries = 0\n",
        provider("fast", &fast.url()),
        provider("slow", &slow.url()),
        provider("cut", &cut.url()),
    );
    let gateway = Gateway::start(&config).await;

    // Cold: least load decides (ties at random) until both targets predict.
    let mut warm = false;
    for i in 0..80 {
        stream_chat(&gateway, "chat", &format!("warm {i}")).await;
        let routes = gateway.routes().await;
        let samples = |p| route_target(&routes, "chat", p)["latency_samples"].as_u64();
        if samples("fast") >= Some(8) && samples("slow") >= Some(8) {
            warm = true;
            break;
        }
    }
    assert!(warm, "both targets earned 8 samples");
    let routes = gateway.routes().await;
    let slow_ms = route_target(&routes, "chat", "slow")["latency_ewma_ms"]
        .as_f64()
        .unwrap();
    let fast_ms = route_target(&routes, "chat", "fast")["latency_ewma_ms"]
        .as_f64()
        .unwrap();
    assert!(
        slow_ms >= 250.0,
        "slow learned its first token: {slow_ms} ms"
    );
    assert!(fast_ms < 150.0, "fast: {fast_ms} ms");
    for i in 0..10 {
        assert_eq!(
            stream_chat(&gateway, "chat", &format!("after {i}")).await,
            "fast",
            "request {i} after warm-up"
        );
    }

    // A stream cut after its first chunk teaches nothing.
    let response = client()
        .post(gateway.url("/v1/chat/completions"))
        .json(&json!({"model": "broken", "stream": true, "max_tokens": 8,
                      "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.text().await.is_err(), "the stream was cut");
    let routes = gateway.routes().await;
    assert_eq!(route_target(&routes, "broken", "cut")["latency_samples"], 0);
}

// 4. Passthrough groups learn, and adapters on one engine share its load.

#[tokio::test]
async fn a_passthrough_group_learns_from_what_its_members_served() {
    let fast = FakeEngine::start("fast", &[]);
    let slow = FakeEngine::start("slow", &["--ttft-ms", "300"]);
    let config = format!(
        "{}{}[[provider_groups]]\nname = \"fleet\"\nstrategy = \"predicted_latency\"\nmembers = [{{ provider = \"fast\" }}, {{ provider = \"slow\" }}]\n\n{NO_HEALTH}",
        provider("fast", &fast.url()),
        provider("slow", &slow.url()),
    );
    let gateway = Gateway::start(&config).await;
    let mut warm = false;
    for i in 0..80 {
        // Two adapters: what either served teaches the same members.
        let model = format!("fleet/adapter-{}", i % 2);
        stream_chat(&gateway, &model, &format!("warm {i}")).await;
        let routes = gateway.routes().await;
        let samples = |p| group_member(&routes, "fleet", p)["latency_samples"].as_u64();
        if samples("fast") >= Some(8) && samples("slow") >= Some(8) {
            warm = true;
            break;
        }
    }
    assert!(warm, "the group's members earned their samples");
    let routes = gateway.routes().await;
    assert_eq!(group_member(&routes, "fleet", "slow")["model"], "*");
    for i in 0..10 {
        let model = format!("fleet/adapter-{}", i % 3);
        assert_eq!(stream_chat(&gateway, &model, "after").await, "fast");
    }
}

#[tokio::test]
async fn requests_for_two_adapters_on_one_engine_share_its_load() {
    let a = FakeEngine::start("a", &["--token-delay-ms", "100"]);
    let b = FakeEngine::start("b", &["--token-delay-ms", "100"]);
    let config = format!(
        "{}{}[[provider_groups]]\nname = \"pair\"\nstrategy = \"power_of_two\"\nmembers = [{{ provider = \"a\" }}, {{ provider = \"b\" }}]\n\n{NO_HEALTH}",
        provider("a", &a.url()),
        provider("b", &b.url()),
    );
    let gateway = Gateway::start(&config).await;
    for round in 0..6 {
        // A long stream for one adapter holds an engine...
        let held = client()
            .post(gateway.url("/v1/chat/completions"))
            .json(
                &json!({"model": "pair/adapter-x", "stream": true, "max_tokens": 30,
                          "messages": [{"role": "user", "content": "long"}]}),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(held.status(), 200);
        let busy = served_by(&held);
        // ...and a request for another adapter sees that engine's load.
        let other = gateway.chat("pair/adapter-y", "short").await;
        assert_eq!(other.status(), 200);
        assert_ne!(served_by(&other), busy, "round {round}");
        drop(held);
        wait_until(
            Duration::from_secs(10),
            "the held stream to end",
            || async {
                let routes = gateway.routes().await;
                ["a", "b"]
                    .iter()
                    .all(|p| group_member(&routes, "pair", p)["in_flight"] == 0)
            },
        )
        .await;
    }
}

// 5. adaptive keeps its evidence across reloads.

#[tokio::test]
async fn reload_storms_neither_disengage_adaptive_nor_refill_its_warm_up_budget() {
    let a = FakeEngine::start("a", &[]);
    let b = FakeEngine::start("b", &[]);
    // `mute` answers every request for this route with a 404: never a
    // latency sample, never a breaker failure, never parked. Its weight
    // keeps the fallback stack off it, so only warm-up probes reach it.
    let mute = FakeEngine::start("mute", &["--model", "something-else"]);
    let config = format!(
        "{}{}{}[[routes]]\nmodel = \"chat\"\nstrategy = \"adaptive\"\ntargets = [{{ provider = \"a\", weight = 10 }}, {{ provider = \"b\", weight = 10 }}, {{ provider = \"mute\", weight = 1 }}]\n\n[adaptive_routing]\nenabled = true\nmin_samples = 20\nexploration_ratio = 0.0\n\n{NO_HEALTH}",
        provider("a", &a.url()),
        provider("b", &b.url()),
        provider("mute", &mute.url()),
    );
    let gateway = Gateway::start(&config).await;
    let decisions = |routes: &Value| routes["routes"][0]["report"]["decisions"].clone();
    for round in 0..10 {
        let (status, body) = gateway.reload().await;
        assert_eq!(status, 200, "reload {round}: {body}");
        for i in 0..6 {
            gateway.chat("chat", &format!("{round}-{i}")).await;
        }
    }
    assert_eq!(
        mute.chat_requests().await,
        8,
        "warm-up probes: eight in total, not eight per reload"
    );
    let routes = gateway.routes().await;
    assert_eq!(decisions(&routes)["engaged"], true, "{routes}");
    let (status, _) = gateway.reload().await;
    assert_eq!(status, 200);
    let routes = gateway.routes().await;
    assert_eq!(
        decisions(&routes)["engaged"],
        true,
        "engaged at once on the new snapshot"
    );
}

// 7. Telemetry goes neutral at once when its source does.

#[tokio::test]
async fn an_engine_whose_telemetry_breaks_is_neutral_at_once_not_after_staleness() {
    let engine = FakeEngine::start(
        "e",
        &[
            "--kv-events",
            "tcp://127.0.0.1:0",
            "--kv-replay",
            "tcp://127.0.0.1:0",
        ],
    );
    let config = format!(
        "{}[providers.kv_events]\nendpoint = \"{}\"\nreplay_endpoint = \"{}\"\nblock_size = 16\n\n[providers.lmcache]\nendpoint = \"{}/fake/occupancy\"\npoll_interval_secs = 1\nstale_after_secs = 120\n\n[[routes]]\nmodel = \"chat\"\nstrategy = \"precise_cache_aware\"\ntargets = [{{ provider = \"e\" }}]\n\n{NO_HEALTH}",
        provider("e", &engine.url()),
        engine.kv_events.as_deref().unwrap(),
        engine.kv_replay.as_deref().unwrap(),
        engine.url(),
    );
    let gateway = Gateway::start(&config).await;
    let target = || async {
        let routes = gateway.routes().await;
        route_target(&routes, "chat", "e").clone()
    };
    // Usable once the gateway heard the engine store a block. Each try sends
    // a prompt the engine has not cached (two full blocks of its own), so
    // each publishes an event: the first may go out before the subscription
    // reached the publisher, and a cached prompt would publish nothing more.
    let mut attempt = 0u32;
    wait_until(Duration::from_secs(15), "fresh telemetry", || {
        attempt += 1;
        let tokens: Vec<u32> = (0..32).map(|t| attempt * 1000 + t).collect();
        let (gateway, target) = (&gateway, &target);
        async move {
            let sent = client()
                .post(gateway.url("/v1/completions"))
                .json(&json!({"model": "chat", "prompt": tokens, "max_tokens": 1}))
                .send()
                .await;
            assert_eq!(sent.map(|r| r.status().as_u16()).ok(), Some(200));
            let t = target().await;
            t["kv_index"]["usable"] == true && t["lmcache"]["fresh"] == true
        }
    })
    .await;
    // The engine dies: its KV-event stream disconnects and its LMCache
    // poll fails. Both stale windows (30 s, 120 s) are far away.
    let died = Instant::now();
    drop(engine);
    wait_until(Duration::from_secs(8), "neutral telemetry", || async {
        let t = target().await;
        t["kv_index"]["usable"] == false && t["lmcache"]["fresh"] == false
    })
    .await;
    assert!(died.elapsed() < Duration::from_secs(8));
}

// 8. Header limits of our own.

#[tokio::test]
async fn a_huge_request_header_gets_431_and_never_reaches_an_engine() {
    let engine = FakeEngine::start("e", &[]);
    let config = format!(
        "{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"e\" }}]\n\n{NO_HEALTH}",
        provider("e", &engine.url()),
    );
    let gateway = Gateway::start(&config).await;
    let send = |value: String| {
        client()
            .post(gateway.url("/v1/chat/completions"))
            .header("x-padding", value)
            .json(&chat_body("chat", "hi"))
            .send()
    };
    let response = send("a".repeat(64 * 1024)).await.unwrap();
    assert_eq!(response.status(), 431);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["code"], "request_header_too_large");
    assert!(body["error"]["message"].as_str().unwrap().contains("32768"));
    assert_eq!(engine.chat_requests().await, 0);
    // Below the default limit of 32 KiB: forwarded.
    assert_eq!(send("a".repeat(20 * 1024)).await.unwrap().status(), 200);
    assert_eq!(engine.chat_requests().await, 1);
}

// 9. Active health alone never empties a route.

#[tokio::test]
async fn a_probe_path_the_engine_does_not_serve_is_a_misconfiguration_not_an_outage() {
    let engine = FakeEngine::start("e", &[]);
    let config = format!(
        "[[providers]]\nname = \"e\"\nbase_url = \"{}\"\nhealth_path = \"/no-such-path\"\n\n[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"e\" }}]\n\n[health]\ninterval_secs = 2\ntimeout_secs = 1\nunhealthy_after = 1\n",
        engine.url(),
    );
    let gateway = Gateway::start(&config).await;
    wait_until(
        Duration::from_secs(10),
        "the misconfigured probe",
        || async {
            let routes = gateway.routes().await;
            route_target(&routes, "chat", "e")["probe_misconfigured"] == 404
        },
    )
    .await;
    for i in 0..5 {
        assert_eq!(gateway.chat("chat", &format!("{i}")).await.status(), 200);
    }
    let routes = gateway.routes().await;
    assert_eq!(route_target(&routes, "chat", "e")["healthy"], true);
    let text = gateway.metrics().await;
    assert_eq!(
        metric(&text, r#"rolter_health_probe_misconfigured{provider="e"}"#),
        Some(1.0)
    );
    let log = gateway.process.log_text();
    assert_eq!(
        log.matches("does not serve that path").count(),
        1,
        "logged once"
    );
}

#[tokio::test]
async fn when_health_checks_mark_every_target_down_the_route_still_serves() {
    // Every request to these engines takes 1.5 s, the health probe's
    // included: probes time out (1 s) while inference is served.
    let a = FakeEngine::start("a", &["--fail-delay-ms", "1500"]);
    let b = FakeEngine::start("b", &["--fail-delay-ms", "1500"]);
    let config = format!(
        "{}{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"a\" }}, {{ provider = \"b\" }}]\n\n[health]\ninterval_secs = 2\ntimeout_secs = 1\nunhealthy_after = 1\n",
        provider("a", &a.url()),
        provider("b", &b.url()),
    );
    let gateway = Gateway::start(&config).await;
    wait_until(
        Duration::from_secs(15),
        "both down by their probes",
        || async {
            let text = gateway.metrics().await;
            ["a", "b"].iter().all(|p| {
                metric(
                    &text,
                    &format!("rolter_provider_healthy{{provider=\"{p}\"}}"),
                ) == Some(0.0)
            })
        },
    )
    .await;
    for i in 0..3 {
        let response = gateway.chat("chat", &format!("{i}")).await;
        assert_eq!(response.status(), 200, "request {i} in health panic");
    }
    let routes = gateway.routes().await;
    assert_eq!(routes["routes"][0]["health_panic"], true);
    let text = gateway.metrics().await;
    assert_eq!(
        metric(&text, r#"rolter_health_panic_total{route="chat"}"#),
        Some(3.0)
    );
    assert_eq!(
        gateway.process.log_text().matches("(health panic)").count(),
        1,
        "entering panic is logged once"
    );
}

// 10. Failure logging cannot flood.

#[tokio::test]
async fn an_engine_failing_every_request_writes_a_bounded_log() {
    let sick = FakeEngine::start("sick", &["--fail-status", "500"]);
    let config = format!(
        "{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"sick\" }}]\n\n[parking]\nbase_secs = 1\nmax_secs = 1\n\n[breaker]\nenabled = false\n\n{NO_HEALTH}",
        provider("sick", &sick.url()),
    );
    let gateway = Gateway::start(&config).await;
    let mut statuses = HashMap::new();
    let started = Instant::now();
    let mut sent = 0;
    // Past the one-second parking several times, so the engine is asked
    // again and again; bounded in count and time.
    while sent < 3000 && started.elapsed() < Duration::from_secs(4) {
        let round = flood(&gateway, "none", (0..100).map(|_| "chat".to_string()), 16).await;
        for (status, n) in round {
            *statuses.entry(status).or_insert(0) += n;
        }
        sent += 100;
    }
    assert!(statuses.get(&500).is_some_and(|&n| n >= 3), "{statuses:?}");
    let access_lines = |log: &str| log.lines().filter(|l| l.starts_with('{')).count();
    wait_until(Duration::from_secs(10), "every access-log line", || async {
        access_lines(&gateway.process.log_text()) >= sent
    })
    .await;
    let log = gateway.process.log_text();
    assert_eq!(access_lines(&log), sent, "one access-log line per request");
    let other_lines: Vec<&str> = log
        .lines()
        .filter(|l| !l.starts_with('{') && l.contains("sick"))
        .collect();
    assert!(
        other_lines.len() <= 12,
        "{} log lines about the failing target for {sent} requests:\n{}",
        other_lines.len(),
        other_lines.join("\n")
    );
}

// 11. Small ones.

#[tokio::test]
async fn a_huge_retry_after_parks_for_the_cap_instead_of_wrapping_to_a_short_park() {
    // 2^64 / 1000 + 1 seconds: as milliseconds in a u64 it wrapped to 384 ms.
    let sick = FakeEngine::start(
        "sick",
        &["--fail-status", "429", "--retry-after", "18446744073709552"],
    );
    let good = FakeEngine::start("good", &[]);
    let config = format!(
        "{}{}[[routes]]\nmodel = \"chat\"\nstrategy = \"round_robin\"\ntargets = [{{ provider = \"sick\" }}, {{ provider = \"good\" }}]\n\n[parking]\nmax_secs = 120\n\n{NO_HEALTH}",
        provider("sick", &sick.url()),
        provider("good", &good.url()),
    );
    let gateway = Gateway::start(&config).await;
    for i in 0..2 {
        assert_eq!(gateway.chat("chat", &format!("{i}")).await.status(), 200);
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    for i in 0..6 {
        let response = gateway.chat("chat", &format!("later {i}")).await;
        assert_eq!(served_by(&response), "good");
    }
    assert_eq!(sick.chat_requests().await, 1, "parked for the cap");
    let routes = gateway.routes().await;
    let parked = route_target(&routes, "chat", "sick")["parked_until_ms"]
        .as_u64()
        .unwrap();
    assert!(parked > 100_000, "parked for {parked} more ms");
}

#[tokio::test]
async fn a_declared_body_that_never_arrives_reserves_no_memory() {
    let engine = FakeEngine::start("e", &[]);
    let config = format!(
        "{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"e\" }}]\n\n{NO_HEALTH}",
        provider("e", &engine.url()),
    );
    let gateway = Gateway::start(&config).await;
    let pid = gateway.process.pid();
    let before = proc_kib(pid, "VmData");
    // 40 clients each promise 32 MiB (the limit) and send one byte.
    let mut held = Vec::new();
    for _ in 0..40 {
        let mut stream = tokio::net::TcpStream::connect(gateway.listen)
            .await
            .unwrap();
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: rolter\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{{",
            32 * 1024 * 1024
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        held.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = proc_kib(pid, "VmData");
    assert!(
        after < before + 200 * 1024,
        "40 promised bodies took {} MiB (VmData {before} -> {after} KiB)",
        (after.saturating_sub(before)) / 1024
    );
    drop(held);
}

#[tokio::test]
async fn a_client_that_leaves_before_any_response_is_logged_and_counted_as_499() {
    let engine = FakeEngine::start("e", &["--ttft-ms", "3000"]);
    let config = format!(
        "{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"e\" }}]\n\n{NO_HEALTH}",
        provider("e", &engine.url()),
    );
    let gateway = Gateway::start(&config).await;
    let quick = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let gone = quick
        .post(gateway.url("/v1/chat/completions"))
        .json(&chat_body("chat", "never mind"))
        .send()
        .await;
    assert!(gone.is_err(), "the client gave up first");
    wait_until(Duration::from_secs(10), "the 499", || async {
        let text = gateway.metrics().await;
        metric(
            &text,
            r#"rolter_requests_total{route="chat",status="499",target="e/chat"}"#,
        ) == Some(1.0)
    })
    .await;
    let text = gateway.metrics().await;
    assert!(!text.contains("status=\"502\""), "no 502 nobody received");
    let log = gateway.process.log_text();
    let line: Value = log
        .lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str(l).ok())
        .find(|v: &Value| v["path"] == "/v1/chat/completions")
        .expect("an access-log line");
    assert_eq!(line["status"], 499);
    assert_eq!(line["client_cancel"], true);
    wait_until(
        Duration::from_secs(10),
        "the engine to see the cancel",
        || async { engine.stats().await["cancelled"] == 1 },
    )
    .await;
}
