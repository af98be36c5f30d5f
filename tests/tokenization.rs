//! Precise prefix routing for clients that send text only: the route's
//! tokenizer turns `openai` SDK chat requests into the engine's token ids.
//!
//! The engine's blocks are stored from the ids Python `transformers`
//! computes for a conversation (the fixture of
//! `crates/rolter-tokenize/tests/fidelity.rs`), sent to one engine as an
//! integer prompt, so its vLLM-format KV events carry exactly those ids;
//! the gateway's own tokenization of later turns must meet them.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use indexmap::IndexMap;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use support::*;

/// The fixture's model directories and the reference ids of one case.
struct Reference {
    _dir: tempfile::TempDir,
    root: PathBuf,
    /// The case's `messages`, as written.
    messages: String,
    ids: Vec<u32>,
}

fn reference(family: &str, case: &str) -> Reference {
    let dir = tempfile::tempdir().unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/tokenizer_fixture.py"
    );
    let out = Command::new("python3")
        .arg(script)
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "fixture: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(dir.path().join("cases.json")).unwrap();
    let cases: IndexMap<String, Box<RawValue>> = serde_json::from_str(&text).unwrap();
    let chat: Vec<IndexMap<String, Box<RawValue>>> =
        serde_json::from_str(cases["chat"].get()).unwrap();
    let found = chat
        .iter()
        .find(|c| {
            c["family"].get() == format!("\"{family}\"") && c["name"].get() == format!("\"{case}\"")
        })
        .expect("the case exists");
    let request: IndexMap<String, Box<RawValue>> =
        serde_json::from_str(found["request"].get()).unwrap();
    Reference {
        root: dir.path().to_path_buf(),
        messages: request["messages"].get().to_string(),
        ids: serde_json::from_str(found["ids"].get()).unwrap(),
        _dir: dir,
    }
}

/// A stream held open on `provider`: load that least-load routing avoids.
/// 6,000 tokens at 10 ms (60 s) outlast every step of the test on a loaded
/// machine (each step starts a Python SDK client); the engines stop with
/// the test.
fn hold(gateway: &Gateway, provider: &str) -> tokio::task::JoinHandle<()> {
    let url = gateway.url("/v1/completions");
    let body = json!({"model": format!("{provider}/chat"), "prompt": "hold", "max_tokens": 6000, "stream": true});
    tokio::spawn(async move {
        if let Ok(response) = client().post(url).json(&body).send().await {
            let _ = response.bytes().await;
        }
    })
}

/// The engines that served `count` SDK continuations of `messages`.
async fn continuations(gateway: &Gateway, messages: &str, count: usize) -> Vec<String> {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), messages).unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/python/chat_continuations.py"
    );
    let (base_url, path) = (gateway.url("/v1"), file.path().to_path_buf());
    let output = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .args([
                script,
                &base_url,
                "chat",
                path.to_str().unwrap(),
                &count.to_string(),
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn config(dir: &Path, a: &FakeEngine, b: &FakeEngine, c: &FakeEngine) -> String {
    format!(
        "{}{}{}[[routes]]\nmodel = \"chat\"\nstrategy = \"precise_cache_aware\"\ntokenizer = \"{}\"\ntargets = [{{ provider = \"a\" }}, {{ provider = \"b\" }}, {{ provider = \"c\" }}]\n\n[health]\nenabled = false\n",
        kv_provider("a", a),
        kv_provider("b", b),
        kv_provider("c", c),
        dir.display(),
    )
}

fn counted(metrics: &str, source: &str, reason: &str) -> u64 {
    let series = format!(
        "rolter_routing_tokens_total{{reason=\"{reason}\",route=\"chat\",source=\"{source}\"}} "
    );
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&series))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// Three engines behind a `precise_cache_aware` route with the fixture's
/// ChatML tokenizer: b holds `reference`'s blocks and is the busiest, so
/// only the history can bring a request there.
struct HistoryOnB {
    engines: [FakeEngine; 3],
    gateway: Gateway,
    model_dir: PathBuf,
    _busy: [tokio::task::JoinHandle<()>; 3],
}

async fn history_on_b(reference: &Reference) -> HistoryOnB {
    let blocks = reference.ids.len() / KV_BLOCK;
    assert!(blocks >= 8, "a conversation of {blocks} blocks");
    let (a, b, c) = (kv_engine("a"), kv_engine("b"), kv_engine("c"));
    for engine in [&a, &b, &c] {
        engine.control(json!({"token_delay_ms": 10})).await;
    }
    let model_dir = reference.root.join("chatml");
    let gateway = Gateway::start(&config(&model_dir, &a, &b, &c)).await;

    // b prefills the conversation as transformers tokenizes it and
    // publishes its blocks. A subscriber that joined late gets them back
    // by replay once the next batch shows the gap.
    assert_eq!(gateway.complete_ids("b/m", &reference.ids).await, "b");
    for filler in 0..20u32 {
        if gateway.kv_index("b").await["blocks_resident"]
            .as_u64()
            .unwrap_or(0) as usize
            >= blocks
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            gateway
                .complete_ids("b/m", &[7_000 + filler; KV_BLOCK])
                .await,
            "b"
        );
    }
    assert!(
        gateway.kv_index("b").await["blocks_resident"]
            .as_u64()
            .unwrap_or(0) as usize
            >= blocks,
        "b's blocks never arrived"
    );

    // b is the busiest engine: without the history, least load avoids it.
    let busy = [
        hold(&gateway, "b"),
        hold(&gateway, "b"),
        hold(&gateway, "a"),
    ];
    wait_until(Duration::from_secs(10), "the held streams", || async {
        let routes = gateway.routes().await;
        let in_flight: u64 = routes["routes"][0]["targets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["in_flight"].as_u64().unwrap_or(0))
            .sum();
        in_flight >= 3
    })
    .await;
    HistoryOnB {
        engines: [a, b, c],
        gateway,
        model_dir,
        _busy: busy,
    }
}

#[tokio::test]
async fn text_only_sdk_chats_follow_the_engine_holding_their_history() {
    let reference = reference("chatml", "long_conversation");
    let setup = history_on_b(&reference).await;
    let (gateway, model_dir) = (&setup.gateway, &setup.model_dir);
    let _engines = &setup.engines;
    let served = continuations(gateway, &reference.messages, 5).await;
    assert_eq!(
        served, ["b"; 5],
        "text-only continuations left the engine holding their history"
    );
    let metrics = gateway.metrics().await;
    assert!(counted(&metrics, "gateway", "") >= 5, "{metrics}");
    let routes = gateway.routes().await;
    let tokenizer = &routes["routes"][0]["tokenizer"];
    assert_eq!(tokenizer["dir"], model_dir.display().to_string());
    assert!(
        tokenizer["prefix_cache_hits"].as_u64() >= Some(1),
        "{tokenizer}"
    );

    // The template changes under the engines (a different system preamble):
    // the gateway's ids no longer meet b's blocks, and least load decides.
    let config_text = std::fs::read_to_string(model_dir.join("tokenizer_config.json")).unwrap();
    let config_json: Value = serde_json::from_str(&config_text).unwrap();
    let template = config_json["chat_template"].as_str().unwrap();
    std::fs::write(
        model_dir.join("chat_template.jinja"),
        format!("<|im_start|>system\nA changed preamble.<|im_end|>\n{template}"),
    )
    .unwrap();
    let (status, body) = gateway.reload().await;
    assert_eq!(status, 200, "{body}");
    let served = continuations(gateway, &reference.messages, 3).await;
    assert_eq!(
        served, ["c"; 3],
        "a changed template still matched b's blocks"
    );

    // A template that refuses the conversation: routed without ids, counted.
    std::fs::write(
        model_dir.join("chat_template.jinja"),
        "{% if messages | length > 4 %}{{ raise_exception('at most 4 messages') }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}",
    )
    .unwrap();
    let (status, body) = gateway.reload().await;
    assert_eq!(status, 200, "{body}");
    let served = continuations(gateway, &reference.messages, 3).await;
    assert_eq!(served, ["c"; 3]);
    let metrics = gateway.metrics().await;
    assert_eq!(counted(&metrics, "none", "template_error"), 3, "{metrics}");

    // A template that does not compile is refused at reload, naming it.
    std::fs::write(
        model_dir.join("chat_template.jinja"),
        "{% for m in messages %}\n{{ m.content }\n",
    )
    .unwrap();
    let (status, body) = gateway.reload().await;
    assert_ne!(status, 200);
    let text = body.to_string();
    assert!(
        text.contains("chat_template.jinja") && text.contains("line 2"),
        "{text}"
    );
}

/// The engine that served `body` on `path`.
async fn served_on(gateway: &Gateway, path: &str, body: Value) -> String {
    let response = client()
        .post(gateway.url(path))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{path}");
    served_by(&response)
}

#[tokio::test]
async fn messages_and_responses_conversations_follow_the_engine_holding_their_history() {
    let reference = reference("chatml", "long_conversation");
    let setup = history_on_b(&reference).await;
    let gateway = &setup.gateway;
    let chat: Vec<Value> = serde_json::from_str(&reference.messages).unwrap();
    let (system, turns) = chat.split_first().unwrap();
    assert_eq!(system["role"], "system");
    let system = system["content"].as_str().unwrap();
    for turn in 0..3 {
        // The history as each API carries it, then one more exchange.
        let mut history: Vec<Value> = turns.to_vec();
        history.push(
            json!({"role": "assistant", "content": format!("Here is answer number {turn}.")}),
        );
        history.push(
            json!({"role": "user", "content": format!("Thanks. Follow-up question {turn}?")}),
        );
        let messages =
            json!({"model": "chat", "max_tokens": 2, "system": system, "messages": history});
        assert_eq!(
            served_on(gateway, "/v1/messages", messages).await,
            "b",
            "a Messages continuation left the engine holding its history (turn {turn})"
        );
        let input: Vec<Value> = history
            .iter()
            .map(|m| json!({"type": "message", "role": m["role"], "content": m["content"]}))
            .collect();
        let responses = json!({"model": "chat", "max_output_tokens": 2, "instructions": system, "input": input});
        assert_eq!(
            served_on(gateway, "/v1/responses", responses).await,
            "b",
            "a Responses continuation left the engine holding its history (turn {turn})"
        );
    }
    let metrics = gateway.metrics().await;
    assert!(counted(&metrics, "gateway", "") >= 6, "{metrics}");
}
