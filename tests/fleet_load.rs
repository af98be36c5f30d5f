//! Two gateway nodes in front of the same engines: with
//! `[providers.engine_metrics]` each balances on the engines' own load,
//! which counts the other node's requests; without it, on its own only.

mod support;

use std::time::Duration;

use futures_util::future::join_all;
use serde_json::json;

use support::*;

/// Gateway B: routes `p2c` (power_of_two) and `cache` (cache_aware) over
/// engines a, b and c, their metrics read when `metrics`.
fn balancing_node(engines: &[FakeEngine], metrics: bool) -> String {
    let mut config = String::new();
    for (name, engine) in ["a", "b", "c"].iter().zip(engines) {
        config.push_str(&provider(name, &engine.url()));
        if metrics {
            config.push_str(
                "[providers.engine_metrics]\npoll_interval_ms = 100\nstale_after_ms = 2000\n\n",
            );
        }
    }
    let targets = "targets = [{ provider = \"a\" }, { provider = \"b\" }, { provider = \"c\" }]";
    config.push_str(&format!(
        "[[routes]]\nmodel = \"p2c\"\nstrategy = \"power_of_two\"\n{targets}\n\n[[routes]]\nmodel = \"cache\"\nstrategy = \"cache_aware\"\n{targets}\n\n[health]\nenabled = false\n"
    ));
    config
}

/// Chat completions each engine received.
async fn chats(engines: &[FakeEngine]) -> Vec<u64> {
    join_all(engines.iter().map(FakeEngine::chat_requests)).await
}

/// Sends `n` short chat requests for `model`, one after another, each with
/// its own conversation (no prefix affinity).
async fn send(gateway: &Gateway, model: &str, n: usize) {
    for i in 0..n {
        let response = gateway
            .chat(
                model,
                &format!("question {i} for {model}: {}", "x".repeat(i)),
            )
            .await;
        assert_eq!(response.status(), 200);
    }
}

/// A gateway node whose one route `fill` sends everything to `engine`.
async fn filler(engine: &FakeEngine) -> Gateway {
    Gateway::start(&format!(
        "{}[[routes]]\nmodel = \"fill\"\ntargets = [{{ provider = \"a\" }}]\n\n[health]\nenabled = false\n",
        provider("a", &engine.url())
    ))
    .await
}

/// `n` streams of `tokens` tokens through `filler`'s route, left running.
fn fill(filler: &Gateway, n: usize, tokens: u32) -> Vec<tokio::task::JoinHandle<()>> {
    let url = filler.url("/v1/completions");
    (0..n)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                let body =
                    json!({"model": "fill", "prompt": "long", "max_tokens": tokens, "stream": true});
                if let Ok(response) = client().post(url).json(&body).send().await {
                    let _ = response.bytes().await;
                }
            })
        })
        .collect()
}

#[tokio::test]
async fn a_node_avoids_the_engine_another_node_filled_when_it_reads_engine_metrics() {
    let engines: Vec<FakeEngine> = ["a", "b", "c"]
        .iter()
        .map(|n| FakeEngine::start(n, &[]))
        .collect();
    for engine in &engines {
        engine.control(json!({"token_delay_ms": 20})).await;
    }
    // Gateway A sends everything to engine a.
    let filler = filler(&engines[0]).await;
    let reading = Gateway::start(&balancing_node(&engines, true)).await;
    let blind = Gateway::start(&balancing_node(&engines, false)).await;

    // Eight long streams on engine a, from node A only.
    let streams = fill(&filler, 8, 600);
    wait_until(
        Duration::from_secs(10),
        "engine a running node A's 8",
        || async { engines[0].stats().await["running"] == 8 },
    )
    .await;
    wait_until(
        Duration::from_secs(10),
        "node B reading engine a's load",
        || async {
            let routes = reading.routes().await;
            routes["routes"][0]["targets"][0]["combined_load"].as_u64() >= Some(8)
        },
    )
    .await;
    // What /admin/routes shows of it.
    let routes = reading.routes().await;
    let a = &routes["routes"][0]["targets"][0];
    assert_eq!(a["engine_reading"]["fresh"], true, "{a}");
    assert!(a["engine_reading"]["running"].as_u64() >= Some(8), "{a}");
    assert!(a["engine_metrics"]["polls"].as_u64() >= Some(1), "{a}");
    assert_eq!(a["in_flight"], 0, "none of node B's own");

    let before = chats(&engines).await;
    send(&reading, "p2c", 24).await;
    send(&reading, "cache", 24).await;
    let after = chats(&engines).await;
    assert_eq!(
        after[0] - before[0],
        0,
        "node B sent nothing to the engine node A filled: {before:?} -> {after:?}"
    );
    assert_eq!((after[1] - before[1]) + (after[2] - before[2]), 48);

    // The same traffic from a node that counts only its own requests
    // spreads over all three: each of 48 picks has a third's chance of a.
    let before = chats(&engines).await;
    send(&blind, "p2c", 24).await;
    send(&blind, "cache", 24).await;
    let after = chats(&engines).await;
    assert!(
        after[0] - before[0] >= 5,
        "without engine metrics engine a looks idle to node B: {before:?} -> {after:?}"
    );

    for stream in streams {
        stream.abort();
    }
}

#[tokio::test]
async fn a_failed_engine_reading_falls_back_to_the_local_count_at_once() {
    let engine = FakeEngine::start("a", &[]);
    let config = format!(
        "{}[providers.engine_metrics]\nendpoint = \"http://127.0.0.1:{}/metrics\"\npoll_interval_ms = 100\n\n[[routes]]\nmodel = \"chat\"\nstrategy = \"power_of_two\"\ntargets = [{{ provider = \"a\" }}]\n\n[health]\nenabled = false\n",
        provider("a", &engine.url()),
        free_port(),
    );
    let gateway = Gateway::start(&config).await;
    assert_eq!(gateway.chat("chat", "hello").await.status(), 200);
    wait_until(Duration::from_secs(5), "polls failing", || async {
        let metrics = gateway.metrics().await;
        metrics.contains("rolter_engine_metrics_polls_total{outcome=\"failed\",provider=\"a\"}")
            && metrics.contains("rolter_engine_metrics_fresh{provider=\"a\"} 0")
    })
    .await;
    let routes = gateway.routes().await;
    let target = &routes["routes"][0]["targets"][0];
    assert_eq!(target["combined_load"], 0, "{target}");
    assert_eq!(target["engine_metrics"]["fresh"], false, "{target}");
}

#[tokio::test]
async fn an_engine_reporting_a_full_queue_is_saturated_for_every_node() {
    let busy = FakeEngine::start("a", &["--max-num-seqs", "1"]);
    let idle = FakeEngine::start("b", &[]);
    busy.control(json!({"token_delay_ms": 20})).await;
    let filler = filler(&busy).await;
    // Round robin would send every other request to a: only saturation
    // read from a's metrics (1 running, 5 waiting) keeps them off it.
    let reading = Gateway::start(&format!(
        "{}[providers.engine_metrics]\npoll_interval_ms = 100\n\n{}[[routes]]\nmodel = \"rr\"\nstrategy = \"round_robin\"\ntargets = [{{ provider = \"a\" }}, {{ provider = \"b\" }}]\n\n[health]\nenabled = false\n\n[saturation]\nmax_waiting = 5\n",
        provider("a", &busy.url()),
        provider("b", &idle.url()),
    ))
    .await;
    let streams = fill(&filler, 6, 400);
    wait_until(
        Duration::from_secs(10),
        "node B seeing a saturated",
        || async {
            let routes = reading.routes().await;
            routes["routes"][0]["targets"][0]["saturated"] == "queue"
        },
    )
    .await;
    let before = busy.chat_requests().await;
    send(&reading, "rr", 8).await;
    assert_eq!(
        busy.chat_requests().await,
        before,
        "nothing went to the saturated engine"
    );
    assert_eq!(idle.chat_requests().await, 8);
    let metrics = reading.metrics().await;
    assert!(
        metrics.contains("rolter_target_saturated{target=\"a/rr\"} 1"),
        "{metrics}"
    );
    for stream in streams {
        stream.abort();
    }
}

#[tokio::test]
async fn two_routes_over_one_target_each_see_their_own_traffic() {
    let engine = FakeEngine::start("a", &[]);
    let gateway = Gateway::start(&format!(
        "{}[[routes]]\nmodel = \"one\"\ntargets = [{{ provider = \"a\", model = \"m\" }}]\n\n[[routes]]\nmodel = \"two\"\ntargets = [{{ provider = \"a\", model = \"m\" }}]\n\n[health]\nenabled = false\n",
        provider("a", &engine.url())
    ))
    .await;
    send(&gateway, "one", 3).await;
    send(&gateway, "two", 1).await;
    let routes = gateway.routes().await;
    let target = |route: usize| routes["routes"][route]["targets"][0].clone();
    assert_eq!(
        target(0)["requests"],
        4,
        "the target's counters: every route"
    );
    assert_eq!(target(1)["requests"], 4);
    assert_eq!(target(0)["route_traffic"]["attempts"], 3, "{}", target(0));
    assert_eq!(target(1)["route_traffic"]["attempts"], 1, "{}", target(1));
    assert_eq!(target(0)["route_traffic"]["failures"], 0);
    assert!(target(0)["route_traffic"]["latency_mean_ms"].as_f64() > Some(0.0));
    let metrics = gateway.metrics().await;
    assert!(
        metrics.contains("rolter_route_target_attempts_total{outcome=\"dispatched\",route=\"one\",target=\"a/m\"} 3"),
        "{metrics}"
    );
}
