//! The LLM-aware strategies and route forms through the real gateway.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Value};

use support::*;

fn providers(engines: &[(&str, &FakeEngine)]) -> String {
    engines
        .iter()
        .map(|(name, engine)| provider(name, &engine.url()))
        .collect()
}

fn route(model: &str, strategy: &str, names: &[&str]) -> String {
    let targets: Vec<String> = names
        .iter()
        .map(|n| format!("{{ provider = \"{n}\", model = \"Qwen/Qwen3-8B\" }}"))
        .collect();
    format!(
        "[[routes]]\nmodel = \"{model}\"\nstrategy = \"{strategy}\"\ntargets = [{}]\n\n",
        targets.join(", ")
    )
}

fn three_engines(extra: &[&str]) -> (FakeEngine, FakeEngine, FakeEngine) {
    (
        FakeEngine::start("a", extra),
        FakeEngine::start("b", extra),
        FakeEngine::start("c", extra),
    )
}

async fn chat_with(
    gateway: &Gateway,
    model: &str,
    messages: Value,
    session: Option<&str>,
) -> String {
    let mut request = client()
        .post(gateway.url("/v1/chat/completions"))
        .json(&json!({"model": model, "max_tokens": 2, "messages": messages}));
    if let Some(session) = session {
        request = request.header("x-session-id", session);
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    served_by(&response)
}

fn conversation(system: &str, user: &str) -> Value {
    json!([{"role": "system", "content": system}, {"role": "user", "content": user}])
}

#[tokio::test]
async fn cache_aware_returns_a_conversation_to_the_replica_that_served_it() {
    let (a, b, c) = three_engines(&[]);
    let config = providers(&[("a", &a), ("b", &b), ("c", &c)])
        + &route("chat", "cache_aware", &["a", "b", "c"]);
    let gateway = Gateway::start(&config).await;
    let mut homes = HashMap::new();
    for user in 0..6 {
        let system = format!("You are assistant number {user}. {}", "Rules. ".repeat(200));
        let first = chat_with(&gateway, "chat", conversation(&system, "hello"), None).await;
        for turn in 0..3 {
            let again = chat_with(
                &gateway,
                "chat",
                conversation(&system, &format!("turn {turn}")),
                None,
            )
            .await;
            assert_eq!(again, first, "conversation {user} moved on turn {turn}");
        }
        homes.insert(user, first);
    }
    let distinct: std::collections::HashSet<_> = homes.values().collect();
    assert!(
        distinct.len() >= 2,
        "six cold conversations all on one replica: {homes:?}"
    );
}

#[tokio::test]
async fn cache_aware_spreads_a_shared_prompt_under_concurrency() {
    // #1851: a shared system prompt must not pile every concurrent request
    // onto the replica that first served it.
    let (a, b, c) = three_engines(&["--token-delay-ms", "40"]);
    let config = providers(&[("a", &a), ("b", &b), ("c", &c)])
        + &route("chat", "cache_aware", &["a", "b", "c"]);
    let gateway = Gateway::start(&config).await;
    let system = "You are a helpful assistant. ".repeat(300);
    // Warm one replica with the prompt.
    chat_with(&gateway, "chat", conversation(&system, "warm"), None).await;

    let mut tasks = Vec::new();
    for i in 0..24 {
        let url = gateway.url("/v1/chat/completions");
        let body = json!({
            "model": "chat",
            "max_tokens": 25,
            "messages": conversation(&system, &format!("question {i}")),
        });
        tasks.push(tokio::spawn(async move {
            let response = client().post(url).json(&body).send().await.unwrap();
            assert_eq!(response.status(), 200);
            let target = served_by(&response);
            response.bytes().await.unwrap();
            target
        }));
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    let mut counts: HashMap<String, usize> = HashMap::new();
    for task in tasks {
        *counts.entry(task.await.unwrap()).or_default() += 1;
    }
    let most = counts.values().copied().max().unwrap();
    assert!(counts.len() >= 2, "24/0/0 pile-up: {counts:?}");
    assert!(
        most < 20,
        "the warm replica took nearly everything: {counts:?}"
    );
}

#[tokio::test]
async fn pipeline_pins_a_session_to_its_target() {
    let (a, b, c) = three_engines(&[]);
    let config = providers(&[("a", &a), ("b", &b), ("c", &c)])
        + &route("chat", "pipeline", &["a", "b", "c"]);
    let gateway = Gateway::start(&config).await;
    let mut pins = Pins::default();
    // A session's first pick is a tie broken at random: with six sessions
    // all six landed on one target once in 243 runs; with twelve, once in
    // 177,147.
    for round in 0..4 {
        for session in 0..12 {
            let id = format!("session-{session}");
            let target = chat_with(
                &gateway,
                "chat",
                conversation("short", &format!("round {round}")),
                Some(&id),
            )
            .await;
            pins.record(format!("session {session}"), target);
        }
    }
    pins.assert_spread();
}

#[tokio::test]
async fn group_address_rotates_over_members_and_passes_the_model_through() {
    // #1655: the group's balancer is built once per snapshot; built per
    // request, round robin would always answer with the first member.
    let (a, b, c) = three_engines(&[]);
    let config = providers(&[("gpu-a", &a), ("gpu-b", &b), ("gpu-c", &c)])
        + "[[provider_groups]]\nname = \"Edge fleet\"\nstrategy = \"round_robin\"\nmembers = [{ provider = \"gpu-a\" }, { provider = \"gpu-b\" }, { provider = \"gpu-c\" }]\n";
    let gateway = Gateway::start(&config).await;
    let mut order = Vec::new();
    for _ in 0..9 {
        let response = gateway.chat("edge-fleet/Qwen/Qwen3-8B", "hi").await;
        assert_eq!(response.status(), 200);
        order.push(served_by(&response));
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["fake"]["received_model"], "Qwen/Qwen3-8B");
    }
    let distinct: std::collections::HashSet<_> = order.iter().collect();
    assert_eq!(distinct.len(), 3, "{order:?}");
    assert!(order.windows(2).all(|w| w[0] != w[1]), "{order:?}");

    // Another model through the same group shares the group's rotation.
    let response = gateway.chat("edge-fleet/other-adapter", "hi").await;
    assert_eq!(response.status(), 200);
    assert_ne!(served_by(&response), order[8]);
}

#[tokio::test]
async fn provider_address_pins_one_provider() {
    let (a, b) = (FakeEngine::start("a", &[]), FakeEngine::start("b", &[]));
    let config = providers(&[("gpu-a", &a), ("gpu-b", &b)]);
    let gateway = Gateway::start(&config).await;
    for _ in 0..4 {
        let response = gateway.chat("gpu-b/meta-llama/Llama-3.1-8B", "hi").await;
        assert_eq!(response.status(), 200);
        assert_eq!(served_by(&response), "gpu-b");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["fake"]["received_model"], "meta-llama/Llama-3.1-8B");
    }
    assert_eq!(gateway.chat("gpu-z/model", "hi").await.status(), 404);
}

#[tokio::test]
async fn adaptive_warms_up_every_target_then_engages_and_prefers_the_fast_one() {
    let fast = FakeEngine::start("fast", &[]);
    let slow = FakeEngine::start("slow", &["--ttft-ms", "120"]);
    // A weight pins the fallback stack to the slow target: without warm-up
    // (#1645) the fast one would never earn a latency sample.
    let config = providers(&[("fast", &fast), ("slow", &slow)])
        + "[[routes]]\nmodel = \"chat\"\nstrategy = \"adaptive\"\ntargets = [{ provider = \"slow\", weight = 100 }, { provider = \"fast\", weight = 1 }]\n\n[adaptive_routing]\nenabled = true\nlatency_weight = 1.0\ncost_weight = 0.0\nload_weight = 0.0\nexploration_ratio = 0.0\nmin_samples = 10\n";
    let gateway = Gateway::start(&config).await;
    let mut served = Vec::new();
    for _ in 0..40 {
        served.push(served_by(&gateway.chat("chat", "x").await));
    }
    let tail = &served[25..];
    let fast_share = tail.iter().filter(|t| *t == "fast").count();
    assert!(
        fast_share >= 13,
        "engaged blend should prefer the fast target: {served:?}"
    );

    let routes = gateway.routes().await;
    let decisions = &routes["routes"][0]["report"]["decisions"];
    assert_eq!(decisions["engaged"], true, "{routes}");
    assert!(
        decisions["exploration"].as_u64().unwrap() >= 1,
        "{decisions}"
    );
    assert!(decisions["blend"].as_u64().unwrap() >= 15, "{decisions}");
    let metrics = gateway.metrics().await;
    assert!(
        metrics
            .contains(r#"rolter_adaptive_routing_target_score{model="chat",target="fast/chat"}"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn predicted_latency_ranks_by_modelled_cost_not_by_queue_length_alone() {
    // `fast` answers in ~60 ms, `slow` in ~340 ms; neither queues (the fake
    // engine serves requests in parallel), so the models learn that one
    // queued request on `fast` costs it next to nothing. Least load would
    // send the next request to the idle `slow`; predicted_latency keeps it
    // on `fast`.
    let fast = FakeEngine::start("fast", &["--ttft-ms", "20", "--token-delay-ms", "10"]);
    let slow = FakeEngine::start("slow", &["--ttft-ms", "300", "--token-delay-ms", "10"]);
    let config = providers(&[("fast", &fast), ("slow", &slow)])
        + &route("chat", "predicted_latency", &["fast", "slow"]);
    let gateway = Gateway::start(&config).await;
    // Evidence for both models (8 successful samples each before they predict):
    // concurrent pairs, so least load (the cold fallback) spreads them.
    for round in 0..14 {
        let (first, second) = (format!("warm {round} a"), format!("warm {round} b"));
        let (a, b) = tokio::join!(gateway.chat("chat", &first), gateway.chat("chat", &second));
        assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
    }
    let routes = gateway.routes().await;
    for target in routes["routes"][0]["targets"].as_array().unwrap() {
        assert!(target["latency_samples"].as_u64().unwrap() >= 8, "{routes}");
    }
    // One long stream keeps a request in flight on `fast`.
    let url = gateway.url("/v1/chat/completions");
    let held = tokio::spawn(async move {
        let response = client()
            .post(url)
            .json(
                &json!({"model": "fast/Qwen/Qwen3-8B", "stream": true, "max_tokens": 300,
                          "messages": [{"role": "user", "content": "long"}]}),
            )
            .send()
            .await
            .unwrap();
        response.bytes().await.unwrap().len()
    });
    let admin = gateway.admin_url();
    wait_until(
        Duration::from_secs(5),
        "the stream in flight on fast",
        || {
            let request = client().get(format!("{admin}/metrics")).send();
            async move {
                match request.await {
                    Ok(r) => r.text().await.is_ok_and(|t| {
                        t.contains(r#"rolter_target_in_flight{target="fast/Qwen/Qwen3-8B"} 1"#)
                    }),
                    Err(_) => false,
                }
            }
        },
    )
    .await;
    for i in 0..4 {
        assert_eq!(
            served_by(&gateway.chat("chat", &format!("now {i}")).await),
            "fast"
        );
    }
    held.abort();
}
