//! Prefill/decode disaggregation through the real gateway: fake engines in
//! the prefill and decode roles of vLLM's and SGLang's protocols check the
//! handshake themselves (a decode engine refuses parameters it cannot
//! fetch), so a request that succeeds went through both legs intact.

mod support;

use serde_json::{json, Value};
use support::*;

/// The `pd` counters of an engine's `/fake/stats`.
async fn pd(engine: &FakeEngine) -> Value {
    engine.stats().await["pd"].clone()
}

async fn count(engines: &[&FakeEngine], field: &str) -> u64 {
    let mut total = 0;
    for engine in engines {
        total += pd(engine).await[field].as_u64().unwrap_or(0);
    }
    total
}

fn engine(name: &str, role: &str, protocol: &str) -> FakeEngine {
    FakeEngine::start(
        name,
        &[
            "--pd-role",
            role,
            "--pd-protocol",
            protocol,
            "--token-delay-ms",
            "1",
        ],
    )
}

/// A `[[providers]]` table, with the bootstrap port SGLang's decode engines
/// reach the prefill engine's bootstrap server on (the fake serves it on its
/// HTTP port).
fn pd_provider(name: &str, engine: &FakeEngine, bootstrap: bool) -> String {
    let mut table = provider(name, &engine.url());
    if bootstrap {
        let port = engine.url().rsplit(':').next().unwrap().to_owned();
        table = table.replacen("\n\n", &format!("\nbootstrap_port = {port}\n\n"), 1);
    }
    table
}

struct Fleet {
    prefill: [FakeEngine; 2],
    decode: [FakeEngine; 2],
    gateway: Gateway,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

async fn fleet(protocol: &str, extra: &str) -> Fleet {
    let prefill = [
        engine("p1", "prefill", protocol),
        engine("p2", "prefill", protocol),
    ];
    let decode = [
        engine("d1", "decode", protocol),
        engine("d2", "decode", protocol),
    ];
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let sglang = protocol == "sglang";
    let mut config = format!(
        "[server]\nrequire_api_key = false\naccess_log = \"{}\"\naccess_log_format = \"json\"\n\n",
        log.display()
    );
    for (name, engine) in [("p1", &prefill[0]), ("p2", &prefill[1])] {
        config.push_str(&pd_provider(name, engine, sglang));
    }
    for (name, engine) in [("d1", &decode[0]), ("d2", &decode[1])] {
        config.push_str(&pd_provider(name, engine, false));
    }
    config.push_str(&format!(
        "[[routes]]\nmodel = \"pd\"\n\
         disaggregation = {{ protocol = \"{protocol}\", prefill = [{{ provider = \"p1\", model = \"llama\" }}, {{ provider = \"p2\", model = \"llama\" }}], \
         decode = [{{ provider = \"d1\", model = \"llama\" }}, {{ provider = \"d2\", model = \"llama\" }}]{extra} }}\n"
    ));
    let gateway = Gateway::start(&config).await;
    Fleet {
        prefill,
        decode,
        gateway,
        log,
        _dir: dir,
    }
}

impl Fleet {
    fn prefill(&self) -> [&FakeEngine; 2] {
        [&self.prefill[0], &self.prefill[1]]
    }

    fn decode(&self) -> [&FakeEngine; 2] {
        [&self.decode[0], &self.decode[1]]
    }

    async fn chat(&self, body: Value) -> reqwest::Response {
        self.gateway.post_chat(&body).await
    }
}

fn long_chat(content: &str, stream: bool) -> Value {
    json!({
        "model": "pd",
        "messages": [{"role": "user", "content": content.repeat(40)}],
        "max_tokens": 4,
        "stream": stream,
    })
}

#[tokio::test]
async fn vllm_requests_are_prefilled_on_one_pool_and_decoded_on_the_other() {
    let fleet = fleet("vllm", ", decode_strategy = \"round_robin\"").await;
    for i in 0..6 {
        let stream = i % 2 == 1;
        let response = fleet
            .chat(long_chat(&format!("question {i} about the fleet "), stream))
            .await;
        assert_eq!(response.status(), 200);
        let decode_engine = served_by(&response);
        assert!(decode_engine.starts_with('d'), "{decode_engine}");
        let text = response.text().await.unwrap();
        if stream {
            assert!(text.contains("data: [DONE]"), "{text}");
            // The client did not ask for usage and sees none; the gateway
            // asked the decode engine for it.
            assert!(!text.contains("\"usage\":{"), "{text}");
        } else {
            let answer: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(answer["usage"]["completion_tokens"], 4, "{answer}");
            // The whole prompt arrived with the KV transfer: nothing recomputed.
            assert_eq!(
                answer["usage"]["prompt_tokens"],
                answer["usage"]["prompt_tokens_details"]["cached_tokens"],
                "{answer}"
            );
        }
    }
    // Every request: one prefill on a prefill engine, one verified decode
    // (the decode engine fetched the handle from the prefill engine and
    // compared prompts), nothing refused or served whole.
    assert_eq!(count(&fleet.prefill(), "prefilled").await, 6);
    assert_eq!(count(&fleet.decode(), "decoded").await, 6);
    assert_eq!(count(&fleet.decode(), "whole").await, 0);
    assert_eq!(count(&fleet.prefill(), "refused").await, 0);
    assert_eq!(count(&fleet.decode(), "refused").await, 0);
    // Round robin over the decode pool: both decoded.
    for engine in fleet.decode() {
        assert_eq!(pd(engine).await["decoded"], 3);
    }
    let metrics = fleet.gateway.metrics().await;
    assert_eq!(
        sum_series(
            &metrics,
            "rolter_disaggregation_requests_total",
            "path=\"split\""
        ),
        6,
        "{metrics}"
    );
    assert_eq!(
        sum_series(
            &metrics,
            "rolter_route_target_attempts_total",
            "route=\"pd:prefill\""
        ),
        6,
        "{metrics}"
    );
    // /admin/routes shows both pools and how requests went.
    let routes = fleet.gateway.routes().await;
    let route = &routes["routes"][0];
    assert_eq!(route["targets"].as_array().unwrap().len(), 2, "{route}");
    let prefill = &route["prefill"];
    assert_eq!(prefill["protocol"], "vllm", "{route}");
    assert_eq!(prefill["strategy"], "cache_aware", "{route}");
    assert_eq!(prefill["split"], 6, "{route}");
    assert_eq!(prefill["targets"].as_array().unwrap().len(), 2, "{route}");
    // The access log names both engines.
    let line: Value =
        serde_json::from_str(&line_with(&fleet.log, "\"prefill_target\":\"p").await).unwrap();
    assert!(line["target"].as_str().unwrap().starts_with("d"), "{line}");
    assert!(
        line["prefill_target"].as_str().unwrap().ends_with("/llama"),
        "{line}"
    );
}

#[tokio::test]
async fn a_multi_turn_conversation_keeps_its_prefill_engine() {
    let fleet = fleet("vllm", "").await;
    let mut messages =
        vec![json!({"role": "system", "content": "You are a careful assistant. ".repeat(60)})];
    let mut prefilled_on = Vec::new();
    for turn in 0..4 {
        messages.push(json!({"role": "user", "content": format!("turn {turn}: go on")}));
        let before = [
            pd(&fleet.prefill[0]).await["prefilled"].clone(),
            pd(&fleet.prefill[1]).await["prefilled"].clone(),
        ];
        let response = fleet
            .chat(json!({"model": "pd", "messages": messages, "max_tokens": 2}))
            .await;
        assert_eq!(response.status(), 200);
        let answer: Value = response.json().await.unwrap();
        messages.push(
            json!({"role": "assistant", "content": answer["choices"][0]["message"]["content"]}),
        );
        let after = [
            pd(&fleet.prefill[0]).await["prefilled"].clone(),
            pd(&fleet.prefill[1]).await["prefilled"].clone(),
        ];
        let which = (0..2)
            .find(|&i| before[i] != after[i])
            .expect("a prefill engine prefilled");
        prefilled_on.push(which);
    }
    // cache_aware (the default prefill strategy) keeps the conversation
    // where its history is cached.
    assert!(
        prefilled_on.iter().all(|&i| i == prefilled_on[0]),
        "{prefilled_on:?}"
    );
}

#[tokio::test]
async fn short_prompts_skip_the_prefill_pool() {
    let fleet = fleet("vllm", ", min_prefill_tokens = 200").await;
    let short = fleet
        .chat(json!({"model": "pd", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}))
        .await;
    assert_eq!(short.status(), 200);
    let long = fleet
        .chat(long_chat("a long question about prefill ", false))
        .await;
    assert_eq!(long.status(), 200);
    assert_eq!(count(&fleet.prefill(), "prefilled").await, 1);
    assert_eq!(count(&fleet.decode(), "whole").await, 1);
    assert_eq!(count(&fleet.decode(), "decoded").await, 1);
    let metrics = fleet.gateway.metrics().await;
    assert_eq!(
        sum_series(
            &metrics,
            "rolter_disaggregation_requests_total",
            "path=\"decode_only\""
        ),
        1
    );
}

#[tokio::test]
async fn a_failing_prefill_engine_is_retried_around() {
    let fleet = fleet("vllm", ", prefill_strategy = \"round_robin\"").await;
    fleet.prefill[0].control(json!({"fail_status": 503})).await;
    for i in 0..4 {
        let response = fleet
            .chat(long_chat(&format!("retry {i} "), i % 2 == 0))
            .await;
        assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    }
    assert_eq!(pd(&fleet.prefill[1]).await["prefilled"], 4);
    assert_eq!(count(&fleet.decode(), "decoded").await, 4);
    // p1 was tried and failed over from, then parked.
    let metrics = fleet.gateway.metrics().await;
    assert!(
        sum_series(&metrics, "rolter_retries_total", "route=\"pd:prefill\"") >= 1,
        "{metrics}"
    );
    // With both prefill engines failing, the request fails with the reason.
    fleet.prefill[1].control(json!({"fail_status": 503})).await;
    let response = fleet.chat(long_chat("no prefill left ", false)).await;
    assert!(response.status().as_u16() >= 500, "{}", response.status());
    let body: Value = response.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("prefill"),
        "{body}"
    );
    assert_eq!(count(&fleet.decode(), "refused").await, 0);
}

#[tokio::test]
async fn sglang_requests_meet_in_a_bootstrap_room() {
    let fleet = fleet("sglang", "").await;
    for i in 0..4 {
        let stream = i % 2 == 0;
        let response = fleet.chat(long_chat(&format!("sglang {i} "), stream)).await;
        assert_eq!(response.status(), 200);
        assert!(served_by(&response).starts_with('d'));
        let text = response.text().await.unwrap();
        if stream {
            assert!(text.contains("data: [DONE]"), "{text}");
        }
    }
    // The prefill legs run alongside: wait for their counts.
    wait_until(
        std::time::Duration::from_secs(5),
        "prefill legs",
        || async { count(&fleet.prefill(), "prefilled").await == 4 },
    )
    .await;
    assert_eq!(count(&fleet.decode(), "decoded").await, 4);
    assert_eq!(count(&fleet.decode(), "refused").await, 0);
    assert_eq!(count(&fleet.prefill(), "refused").await, 0);
}

#[tokio::test]
async fn the_official_openai_client_sees_an_ordinary_chat_completion() {
    let fleet = fleet("vllm", "").await;
    sdk_script(
        "openai_client.py",
        "openai",
        fleet.gateway.url("/v1"),
        "unused",
        "pd",
    )
    .await;
    assert!(count(&fleet.decode(), "decoded").await >= 2);
    assert_eq!(count(&fleet.decode(), "refused").await, 0);
}

#[tokio::test]
async fn a_failed_decode_attempt_prefills_again_unless_its_engine_never_saw_the_handle() {
    let p = engine("p", "prefill", "vllm");
    let d = engine("d", "decode", "vllm");
    let sick = engine("sick", "decode", "vllm");
    sick.control(json!({"fail_status": 503})).await;
    let dead = format!("http://127.0.0.1:{}", free_port());
    let config = |decode: &str| {
        format!(
            "{}{}{}{}[[routes]]\nmodel = \"pd\"\n\
             disaggregation = {{ protocol = \"vllm\", prefill = [{{ provider = \"p\" }}], \
             decode = [{{ provider = \"{decode}\" }}, {{ provider = \"d\" }}], decode_strategy = \"round_robin\" }}\n",
            provider("p", &p.url()),
            provider("d", &d.url()),
            provider("sick", &sick.url()),
            provider("dead", &dead),
        )
    };
    // A decode engine that answered 503 may have consumed the handle: the
    // retry on `d` comes with a fresh prefill.
    let gateway = Gateway::start(&config("sick")).await;
    for i in 0..2 {
        let response = gateway
            .post_chat(&long_chat(&format!("sick {i} "), false))
            .await;
        assert_eq!(response.status(), 200);
    }
    let retried = pd(&p).await["prefilled"].as_u64().unwrap();
    assert_eq!(pd(&d).await["decoded"], 2);
    // Round robin sent one of the two to `sick` first: three prefills.
    assert_eq!(retried, 3);
    drop(gateway);

    // A decode engine that could not be reached never saw it: the retry
    // reuses the handle, one prefill per request.
    let gateway = Gateway::start(&config("dead")).await;
    for i in 0..2 {
        let response = gateway
            .post_chat(&long_chat(&format!("dead {i} "), false))
            .await;
        assert_eq!(response.status(), 200);
    }
    assert_eq!(pd(&p).await["prefilled"].as_u64().unwrap() - retried, 2);
    assert_eq!(pd(&d).await["decoded"], 4);
    assert_eq!(pd(&d).await["refused"], 0);
}

#[tokio::test]
async fn the_prefill_pool_follows_its_engines_kv_events() {
    let prefill_engine = |name: &str| kv_engine_with(name, &["--pd-role", "prefill"]);
    let (p1, p2) = (prefill_engine("p1"), prefill_engine("p2"));
    let d = engine("d", "decode", "vllm");
    let config = format!(
        "{}{}{}[[routes]]\nmodel = \"pd\"\n\
         disaggregation = {{ protocol = \"vllm\", prefill_strategy = \"precise_cache_aware\", \
         prefill = [{{ provider = \"p1\" }}, {{ provider = \"p2\" }}], decode = [{{ provider = \"d\" }}] }}\n\n\
         [health]\nenabled = false\n",
        kv_provider("p1", &p1),
        kv_provider("p2", &p2),
        provider("d", &d.url()),
    );
    let gateway = Gateway::start(&config).await;
    for name in ["p1", "p2"] {
        wait_until(
            std::time::Duration::from_secs(10),
            "KV subscriptions",
            || async { gateway.kv_index(name).await["ranks"][0]["connected"] == true },
        )
        .await;
    }
    // Hold one prefill engine with a slow prefill so that the prompt under
    // test goes to the other one, whatever the cold tie-break is.
    for engine in [&p1, &p2] {
        engine.control(json!({"ttft_ms": 1500})).await;
    }
    let url = gateway.url("/v1/completions");
    let slow = tokio::spawn(async move {
        let body = json!({"model": "pd", "prompt": block_prompt(7, 1), "max_tokens": 2});
        client()
            .post(url)
            .json(&body)
            .send()
            .await
            .unwrap()
            .status()
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let busy = loop {
        let (a, b) = (p1.stats().await, p2.stats().await);
        if a["running"].as_u64() > Some(0) {
            break 0;
        }
        if b["running"].as_u64() > Some(0) {
            break 1;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the slow prefill never started"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    };
    for engine in [&p1, &p2] {
        engine.control(json!({"ttft_ms": 0})).await;
    }
    let shared = block_prompt(1, 8);
    gateway.complete_ids("pd", &shared).await;
    assert_eq!(slow.await.unwrap(), 200);
    let (holder, other) = if busy == 0 { (&p2, &p1) } else { (&p1, &p2) };
    let holder_name = if busy == 0 { "p2" } else { "p1" };
    assert_eq!(
        pd(holder).await["prefilled"],
        1,
        "the prompt went to the idle engine"
    );
    wait_until(
        std::time::Duration::from_secs(15),
        "the holder's blocks",
        || async {
            gateway.kv_index(holder_name).await["blocks_resident"]
                .as_u64()
                .unwrap_or(0)
                >= 8
        },
    )
    .await;
    // Both idle now: longer prompts starting with those blocks are
    // prefilled where the blocks are, every time.
    let before = pd(other).await["prefilled"].as_u64().unwrap();
    for extra in 0..3 {
        let mut longer = shared.clone();
        longer.extend(block_prompt(20 + extra, 2));
        gateway.complete_ids("pd", &longer).await;
    }
    assert_eq!(pd(holder).await["prefilled"], 4);
    assert_eq!(pd(other).await["prefilled"].as_u64().unwrap(), before);
    assert_eq!(count(&[&d], "decoded").await, 5);
}

#[tokio::test]
async fn an_unreachable_sglang_prefill_engine_is_retried_around() {
    let p = engine("p", "prefill", "sglang");
    let d = engine("d", "decode", "sglang");
    let dead = format!("http://127.0.0.1:{}", free_port());
    let config = format!(
        "{}{}{}[[routes]]\nmodel = \"pd\"\n\
         disaggregation = {{ protocol = \"sglang\", prefill_strategy = \"round_robin\", \
         prefill = [{{ provider = \"dead\" }}, {{ provider = \"p\" }}], decode = [{{ provider = \"d\" }}] }}\n\n\
         [health]\nenabled = false\n",
        provider("dead", &dead).replacen("\n\n", "\nbootstrap_port = 1\n\n", 1),
        pd_provider("p", &p, true),
        provider("d", &d.url()),
    );
    let gateway = Gateway::start(&config).await;
    for i in 0..3 {
        let response = gateway
            .post_chat(&long_chat(&format!("around {i} "), i == 1))
            .await;
        assert_eq!(response.status(), 200);
        let _ = response.text().await.unwrap();
    }
    wait_until(
        std::time::Duration::from_secs(5),
        "the prefill legs",
        || async { pd(&p).await["prefilled"] == 3 },
    )
    .await;
    assert_eq!(pd(&d).await["decoded"], 3);
    assert_eq!(pd(&d).await["refused"], 0);
    let metrics = gateway.metrics().await;
    assert!(
        sum_series(&metrics, "rolter_retries_total", "route=\"pd:prefill\"") >= 1,
        "{metrics}"
    );
}

#[tokio::test]
async fn vllm_prefill_legs_reuse_their_connection_to_the_engine() {
    let p = engine("p", "prefill", "vllm");
    let d = engine("d", "decode", "vllm");
    let config = format!(
        "{}{}[[routes]]\nmodel = \"pd\"\n\
         disaggregation = {{ protocol = \"vllm\", prefill = [{{ provider = \"p\" }}], decode = [{{ provider = \"d\" }}] }}\n\n\
         [health]\nenabled = false\n",
        provider("p", &p.url()),
        provider("d", &d.url()),
    );
    let gateway = Gateway::start(&config).await;
    let before = p.stats().await["connections"].as_u64().unwrap();
    for i in 0..6 {
        let response = gateway
            .post_chat(&long_chat(&format!("kept {i} "), false))
            .await;
        assert_eq!(response.status(), 200);
    }
    assert_eq!(pd(&p).await["prefilled"], 6);
    // Six legs over one kept connection. The engine also accepted the
    // decode engine's six KV pulls (one connection each) and this test's
    // two stats reads since `before`: 9 in all, 14 without reuse.
    let opened = p.stats().await["connections"].as_u64().unwrap() - before;
    assert!(
        opened <= 6 + 2 + 1,
        "{opened} connections for 6 prefill legs"
    );
}
