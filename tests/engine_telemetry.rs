//! precise_cache_aware over real vLLM-format KV events, and lmcache_aware
//! over real occupancy polls, with `rolter fake-llm` engines.

mod support;

use std::time::Duration;

use serde_json::{json, Value};

use support::*;

async fn wait_index(gateway: &Gateway, provider: &str, what: &str, check: impl Fn(&Value) -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let index = gateway.kv_index(provider).await;
        if check(&index) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}: {index}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A streaming request held open on `provider`, adding to the load of the
/// route's target there (same identity: provider and model `chat`).
fn hold(gateway: &Gateway, provider: &str, seed: u32) -> tokio::task::JoinHandle<()> {
    let url = gateway.url("/v1/completions");
    let body = json!({"model": format!("{provider}/chat"), "prompt": block_prompt(seed, 1),
                      "max_tokens": 400, "stream": true});
    tokio::spawn(async move {
        if let Ok(response) = client().post(url).json(&body).send().await {
            let _ = response.bytes().await;
        }
    })
}

#[tokio::test]
async fn precise_cache_aware_follows_the_engines_kv_events() {
    let (a, b, c) = (kv_engine("a"), kv_engine("b"), kv_engine("c"));
    for engine in [&a, &b, &c] {
        engine.control(json!({"token_delay_ms": 10})).await;
    }
    let config = format!(
        "{}{}{}[[routes]]\nmodel = \"chat\"\nstrategy = \"precise_cache_aware\"\ntargets = [{{ provider = \"a\" }}, {{ provider = \"b\" }}, {{ provider = \"c\" }}]\n\n[health]\nenabled = false\n",
        kv_provider("a", &a),
        kv_provider("b", &b),
        kv_provider("c", &c),
    );
    let gateway = Gateway::start(&config).await;

    // The prompt's blocks land on b (pinned address), b publishes them.
    let shared = block_prompt(1, 8);
    assert_eq!(gateway.complete_ids("b/m", &shared).await, "b");
    // A subscription may still be on its way when the first batch goes out
    // (ZeroMQ drops what a PUB socket sends before it knows the subscriber);
    // the next batch then joins with a replay from seq 0, which brings the
    // first one back. So nudge with a filler prompt until the blocks arrive.
    for filler in 0..10 {
        let index = gateway.kv_index("b").await;
        if index["blocks_resident"].as_u64().unwrap_or(0) >= 8 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            gateway
                .complete_ids("b/m", &block_prompt(900 + filler, 1))
                .await,
            "b"
        );
    }
    wait_index(&gateway, "b", "b's blocks", |i| {
        i["blocks_resident"].as_u64().unwrap_or(0) >= 8
    })
    .await;

    // A longer prompt starting with those blocks goes to b, every time,
    // even while b is the busiest engine.
    let _b_busy = [hold(&gateway, "b", 50), hold(&gateway, "b", 51)];
    let _a_busy = hold(&gateway, "a", 52);
    let mut longer = shared.clone();
    longer.extend(block_prompt(2, 2));
    for _ in 0..5 {
        assert_eq!(gateway.complete_ids("chat", &longer).await, "b");
    }

    // b clears its cache: the choice falls back to least load (c is idle).
    b.control(json!({"clear_cache": true})).await;
    wait_index(&gateway, "b", "b's cleared index", |i| {
        i["events"]["all_blocks_cleared"]["applied"].as_u64() >= Some(1)
    })
    .await;
    assert_eq!(gateway.complete_ids("chat", &block_prompt(3, 4)).await, "c");

    // A lost batch: b stores a prompt whose events are dropped (a gap),
    // then another; replay fills the gap and both are known.
    b.control(json!({"kv_drop_next": 1})).await;
    let gapped = block_prompt(4, 4);
    assert_eq!(gateway.complete_ids("b/m", &gapped).await, "b");
    assert_eq!(gateway.complete_ids("b/m", &block_prompt(5, 2)).await, "b");
    wait_index(&gateway, "b", "a replay", |i| {
        i["replays"]["ok"].as_u64() >= Some(1)
    })
    .await;
    assert_eq!(gateway.complete_ids("chat", &gapped).await, "b");

    // An engine restart (seq back to 0): b's old blocks are gone.
    b.control(json!({"kv_restart": true})).await;
    assert_eq!(gateway.complete_ids("b/m", &block_prompt(6, 1)).await, "b");
    wait_index(&gateway, "b", "a restart reset", |i| {
        i["resets"]["restart"].as_u64() >= Some(1)
    })
    .await;
    wait_index(&gateway, "b", "only the new block", |i| {
        i["blocks_resident"] == 1
    })
    .await;
    assert_eq!(
        gateway.complete_ids("chat", &gapped).await,
        "c",
        "stale blocks still count"
    );

    let metrics = gateway.metrics().await;
    assert!(
        metrics.contains(r#"rolter_kv_replays_total{provider="b",result="ok"}"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"rolter_kv_blocks_resident{provider="b"} 1"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn lmcache_aware_prefers_free_capacity_and_ignores_a_dead_signal() {
    let (a, b, c) = (
        FakeEngine::start("a", &[]),
        FakeEngine::start("b", &[]),
        FakeEngine::start("c", &[]),
    );
    // b's signal comes from a separate endpoint, which dies later.
    let b_signal = FakeEngine::start("b-signal", &[]);
    a.control(json!({"occupancy_override": 0.9})).await;
    b_signal.control(json!({"occupancy_override": 0.2})).await;
    c.control(json!({"occupancy_override": 0.5})).await;
    let lmcache = |url: &str| {
        format!("[providers.lmcache]\nendpoint = \"{url}/fake/occupancy\"\npoll_interval_secs = 1\nstale_after_secs = 2\n\n")
    };
    let config = format!(
        "{}{}{}{}{}{}[[routes]]\nmodel = \"chat\"\nstrategy = \"lmcache_aware\"\ntargets = [{{ provider = \"a\" }}, {{ provider = \"b\" }}, {{ provider = \"c\" }}]\n\n[health]\nenabled = false\n",
        provider("a", &a.url()),
        lmcache(&a.url()),
        provider("b", &b.url()),
        lmcache(&b_signal.url()),
        provider("c", &c.url()),
        lmcache(&c.url()),
    );
    let gateway = Gateway::start(&config).await;
    let admin = gateway.admin_url();
    wait_until(Duration::from_secs(10), "three fresh signals", || {
        let request = client()
            .get(format!("{admin}/admin/kv-index"))
            .bearer_auth(ADMIN_TOKEN)
            .send();
        async move {
            let Ok(response) = request.await else {
                return false;
            };
            let body: Value = response.json().await.unwrap_or(Value::Null);
            ["a", "b", "c"]
                .iter()
                .all(|p| body["lmcache"][p]["fresh"] == true)
        }
    })
    .await;
    for i in 0..5 {
        assert_eq!(served_by(&gateway.chat("chat", &format!("{i}")).await), "b");
    }

    // b's poller fails from now on; once stale, b is neutral and the
    // freest fresh cache (c) wins.
    drop(b_signal);
    wait_until(Duration::from_secs(10), "b's signal to go stale", || {
        let request = client()
            .get(format!("{admin}/admin/kv-index"))
            .bearer_auth(ADMIN_TOKEN)
            .send();
        async move {
            let Ok(response) = request.await else {
                return false;
            };
            let body: Value = response.json().await.unwrap_or(Value::Null);
            body["lmcache"]["b"]["fresh"] == false
        }
    })
    .await;
    for i in 0..5 {
        assert_eq!(
            served_by(&gateway.chat("chat", &format!("later {i}")).await),
            "c"
        );
    }
}
