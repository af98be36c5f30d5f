//! Saturation and flow control through the real gateway, in front of
//! `rolter fake-llm` engines that count what reaches them.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::{json, Value};

use support::*;

/// Engines answering each token after `token_delay_ms`.
async fn engines(names: &[&str], token_delay_ms: u64) -> Vec<FakeEngine> {
    let engines: Vec<FakeEngine> = names.iter().map(|n| FakeEngine::start(n, &[])).collect();
    for engine in &engines {
        engine
            .control(json!({"token_delay_ms": token_delay_ms}))
            .await;
    }
    engines
}

/// Providers with `max_concurrency`, one route `chat` over them, flow
/// control on with `flow` (extra `[flow_control]` lines) and `extra` tables.
fn config(
    engines: &[(&str, &FakeEngine)],
    max_concurrency: u64,
    flow: &str,
    extra: &str,
) -> String {
    let mut config = String::new();
    for (name, engine) in engines {
        config.push_str(&format!(
            "{}\nmax_concurrency = {max_concurrency}\n\n",
            provider(name, &engine.url()).trim_end()
        ));
    }
    let targets: Vec<String> = engines
        .iter()
        .map(|(name, _)| format!("{{ provider = \"{name}\" }}"))
        .collect();
    config.push_str(&format!(
        "[[routes]]\nmodel = \"chat\"\nstrategy = \"power_of_two\"\ntargets = [{}]\n\n[health]\nenabled = false\n\n[flow_control]\nenabled = true\n{flow}\n{extra}",
        targets.join(", ")
    ));
    config
}

/// A chat completion of `tokens` tokens as `key` (none: anonymous).
async fn chat(gateway: &Gateway, key: Option<&str>, tokens: u32, stream: bool) -> (u16, String) {
    let mut request = client()
        .post(gateway.url("/v1/chat/completions"))
        .json(&json!({
            "model": "chat",
            "max_tokens": tokens,
            "stream": stream,
            "messages": [{"role": "user", "content": "hello"}],
        }));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.expect("chat request");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

/// A request of `tokens` tokens that holds `engine`'s only place; returns
/// once the engine runs it.
async fn hold(
    gateway: &Arc<Gateway>,
    engine: &FakeEngine,
    tokens: u32,
) -> tokio::task::JoinHandle<(u16, String)> {
    let held = {
        let gateway = Arc::clone(gateway);
        tokio::spawn(async move { chat(&gateway, None, tokens, false).await })
    };
    wait_until(
        Duration::from_secs(5),
        "the holder on the engine",
        || async { engine.stats().await["running"] == 1 },
    )
    .await;
    held
}

/// Requests waiting in flow control on route `chat`.
async fn queued(gateway: &Gateway) -> u64 {
    series_sum(gateway, "rolter_flow_control_queued{", "route=\"chat\"").await
}

/// Requests this gateway has in flight to `provider`.
async fn in_flight(gateway: &Gateway, provider: &str) -> u64 {
    let target = format!("target=\"{provider}/");
    series_sum(gateway, "rolter_target_in_flight{", &target).await
}

/// `rolter_flow_control_total` of route `chat` for `outcome`.
async fn outcomes(gateway: &Gateway, outcome: &str) -> u64 {
    let series = format!("rolter_flow_control_total{{outcome=\"{outcome}\",route=\"chat\"}} ");
    gateway
        .metrics()
        .await
        .lines()
        .find_map(|l| l.strip_prefix(&series)?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn no_engine_ever_holds_more_than_its_max_concurrency_and_every_stream_completes() {
    let engines = engines(&["a", "b", "c"], 10).await;
    let named: Vec<(&str, &FakeEngine)> = ["a", "b", "c"].into_iter().zip(&engines).collect();
    let gateway = Gateway::start(&config(&named, 2, "", "")).await;
    let started = Instant::now();
    let answers = join_all((0..30).map(|_| chat(&gateway, None, 20, true))).await;
    for (status, body) in &answers {
        assert_eq!(*status, 200, "{body}");
        assert!(
            body.trim_end().ends_with("data: [DONE]"),
            "cut short: {body}"
        );
    }
    for engine in &engines {
        let stats = engine.stats().await;
        assert!(
            stats["peak_running"].as_u64().unwrap_or(99) <= 2,
            "an engine held more than 2 at once: {stats}"
        );
    }
    let served: u64 = join_all(engines.iter().map(FakeEngine::chat_requests))
        .await
        .into_iter()
        .sum();
    assert_eq!(served, 30, "each stream reached an engine once");
    // 30 streams of ~200 ms through 6 places take at least 5 rounds.
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    assert!(outcomes(&gateway, "dispatched").await >= 20, "most waited");
}

#[tokio::test]
async fn a_higher_priority_request_sent_last_goes_before_the_queued_ones() {
    let engines = engines(&["a"], 0).await;
    let keys = "[[api_keys]]\nname = \"low\"\nkey_env = \"LOW_KEY\"\n\n[[api_keys]]\nname = \"high\"\nkey_env = \"HIGH_KEY\"\npriority = 1\n";
    let gateway = Gateway::start_with_env(
        &config(&[("a", &engines[0])], 1, "", keys),
        &[("LOW_KEY", "low-secret"), ("HIGH_KEY", "high-secret")],
    )
    .await;
    engines[0].control(json!({"token_delay_ms": 40})).await;
    let gateway = Arc::new(gateway);
    let finished = Arc::new(std::sync::Mutex::new(Vec::new()));
    let send = |label: &'static str, key: &'static str, tokens: u32| {
        let gateway = Arc::clone(&gateway);
        let finished = Arc::clone(&finished);
        tokio::spawn(async move {
            let (status, body) = chat(&gateway, Some(key), tokens, false).await;
            assert_eq!(status, 200, "{label}: {body}");
            finished.lock().unwrap().push(label);
        })
    };
    // Holds the engine's one place while the others queue.
    let holder = send("holder", "low-secret", 10);
    wait_until(
        Duration::from_secs(5),
        "the holder on the engine",
        || async { engines[0].stats().await["running"] == 1 },
    )
    .await;
    let mut tasks = vec![holder];
    for _ in 0..4 {
        tasks.push(send("low", "low-secret", 2));
    }
    wait_until(Duration::from_secs(5), "four queued", || async {
        queued(&gateway).await == 4
    })
    .await;
    tasks.push(send("high", "high-secret", 2));
    wait_until(Duration::from_secs(5), "five queued", || async {
        queued(&gateway).await == 5
    })
    .await;
    for task in tasks {
        task.await.expect("request task");
    }
    let order = finished.lock().unwrap().clone();
    assert_eq!(order, ["holder", "high", "low", "low", "low", "low"]);
}

#[tokio::test]
async fn a_flooding_tenant_does_not_delay_another_behind_its_backlog() {
    let engines = engines(&["a"], 0).await;
    let keys = "[[api_keys]]\nname = \"tenant-a\"\nkey_env = \"A_KEY\"\n\n[[api_keys]]\nname = \"tenant-b\"\nkey_env = \"B_KEY\"\n";
    let gateway = Arc::new(
        Gateway::start_with_env(
            &config(&[("a", &engines[0])], 2, "", keys),
            &[("A_KEY", "a-secret"), ("B_KEY", "b-secret")],
        )
        .await,
    );
    engines[0].control(json!({"token_delay_ms": 25})).await;
    let a_done = Arc::new(AtomicUsize::new(0));
    let flood: Vec<_> = (0..60)
        .map(|_| {
            let gateway = Arc::clone(&gateway);
            let a_done = Arc::clone(&a_done);
            tokio::spawn(async move {
                let (status, body) = chat(&gateway, Some("a-secret"), 2, false).await;
                assert_eq!(status, 200, "{body}");
                a_done.fetch_add(1, Ordering::SeqCst);
            })
        })
        .collect();
    wait_until(Duration::from_secs(5), "A's backlog queued", || async {
        queued(&gateway).await >= 50
    })
    .await;
    let b = join_all((0..6).map(|_| chat(&gateway, Some("b-secret"), 2, false))).await;
    let a_when_b_done = a_done.load(Ordering::SeqCst);
    for (status, body) in b {
        assert_eq!(status, 200, "{body}");
    }
    assert!(
        a_when_b_done <= 30,
        "B's 6 finished only after {a_when_b_done} of A's 60: they waited behind A's backlog"
    );
    for task in flood {
        task.await.expect("flood task");
    }
    assert_eq!(a_done.load(Ordering::SeqCst), 60, "A's backlog drained too");
}

/// One engine whose only place a long request holds, behind a gateway
/// with flow control: the next request queues.
async fn one_place_held() -> (
    FakeEngine,
    Arc<Gateway>,
    tokio::task::JoinHandle<(u16, String)>,
) {
    let engine = engines(&["a"], 0).await.remove(0);
    let gateway = Arc::new(Gateway::start(&config(&[("a", &engine)], 1, "", "")).await);
    engine.control(json!({"token_delay_ms": 50})).await;
    let holder = hold(&gateway, &engine, 20).await;
    (engine, gateway, holder)
}

/// The request queued behind the holder left: counted, gone from the
/// queue at once, and the place that freed after the holder stayed empty.
async fn left_without_reaching_the_engine(
    engine: &FakeEngine,
    gateway: &Gateway,
    holder: tokio::task::JoinHandle<(u16, String)>,
) {
    wait_until(Duration::from_secs(5), "the leave counted", || async {
        outcomes(gateway, "cancelled").await == 1
    })
    .await;
    assert_eq!(queued(gateway).await, 0, "it left the queue at once");
    let (status, _) = holder.await.expect("holder");
    assert_eq!(status, 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(engine.chat_requests().await, 1, "only the holder");
}

async fn until_queued(gateway: &Gateway) {
    wait_until(Duration::from_secs(5), "a request queued", || async {
        queued(gateway).await == 1
    })
    .await;
}

#[tokio::test]
async fn a_client_that_leaves_the_queue_never_reaches_an_engine() {
    let (engine, gateway, holder) = one_place_held().await;
    let leaver = {
        let gateway = Arc::clone(&gateway);
        tokio::spawn(async move { chat(&gateway, None, 2, false).await })
    };
    until_queued(&gateway).await;
    leaver.abort();
    let _ = leaver.await;
    left_without_reaching_the_engine(&engine, &gateway, holder).await;
}

#[tokio::test]
async fn an_http2_client_that_resets_its_stream_leaves_the_queue_and_keeps_its_connection() {
    let (engine, gateway, holder) = one_place_held().await;
    // h2c with prior knowledge: one connection, the queued request on one
    // stream of it.
    let tcp = tokio::net::TcpStream::connect(gateway.listen)
        .await
        .expect("connect");
    let (client, connection) = h2::client::handshake(tcp).await.expect("h2 handshake");
    let connection = tokio::spawn(connection);
    let body = json!({
        "model": "chat",
        "max_tokens": 2,
        "messages": [{"role": "user", "content": "hello"}],
    })
    .to_string();
    let send = |client: h2::client::SendRequest<bytes::Bytes>| {
        let (uri, body) = (gateway.url("/v1/chat/completions"), body.clone());
        async move {
            let mut client = client.ready().await.expect("the connection is open");
            let request = http::Request::post(uri)
                .header("content-type", "application/json")
                .body(())
                .unwrap();
            let (response, mut stream) = client.send_request(request, false).expect("a stream");
            stream
                .send_data(bytes::Bytes::from(body), true)
                .expect("its body");
            (response, stream)
        }
    };
    let (response, mut stream) = send(client.clone()).await;
    until_queued(&gateway).await;
    stream.send_reset(h2::Reason::CANCEL);
    drop(response);
    left_without_reaching_the_engine(&engine, &gateway, holder).await;
    // The stream left, not the connection: the next stream on it is served.
    let (response, _stream) = send(client).await;
    let response = tokio::time::timeout(Duration::from_secs(10), response)
        .await
        .expect("answered in time")
        .expect("a response");
    assert_eq!(response.status(), 200);
    assert_eq!(engine.chat_requests().await, 2);
    connection.abort();
}

#[tokio::test]
async fn an_expired_wait_is_a_429_with_retry_after_and_a_sheddable_request_gives_up_sooner() {
    let engines = engines(&["a"], 0).await;
    let gateway = Arc::new(
        Gateway::start(&config(&[("a", &engines[0])], 1, "max_wait_secs = 2\n", "")).await,
    );
    engines[0].control(json!({"token_delay_ms": 100})).await;
    let holder = hold(&gateway, &engines[0], 50).await;
    let waited = Instant::now();
    let response = client()
        .post(gateway.url("/v1/chat/completions"))
        .json(&chat_body("chat", "hello"))
        .send()
        .await
        .expect("request");
    let normal_wait = waited.elapsed();
    assert_eq!(response.status(), 429);
    assert_eq!(
        response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["error"]["type"], "overloaded_error", "{body}");
    assert!(
        normal_wait >= Duration::from_millis(1_900) && normal_wait < Duration::from_secs(4),
        "{normal_wait:?}"
    );

    let waited = Instant::now();
    let sheddable = client()
        .post(gateway.url("/v1/chat/completions"))
        .header("x-rolter-priority", "-1")
        .json(&chat_body("chat", "hello"))
        .send()
        .await
        .expect("request");
    assert_eq!(sheddable.status(), 429);
    assert!(
        waited.elapsed() < Duration::from_millis(1_200),
        "a quarter of 2 s: {:?}",
        waited.elapsed()
    );
    assert_eq!(outcomes(&gateway, "expired").await, 2);
    assert_eq!(
        engines[0].chat_requests().await,
        1,
        "neither reached the engine"
    );
    holder.abort();
}

#[tokio::test]
async fn a_full_queue_refuses_at_once_and_without_flow_control_saturation_only_steers() {
    let engines = engines(&["a", "b"], 0).await;
    let gateway =
        Arc::new(Gateway::start(&config(&[("a", &engines[0])], 1, "max_queued = 1\n", "")).await);
    engines[0].control(json!({"token_delay_ms": 50})).await;
    let holder = hold(&gateway, &engines[0], 20).await;
    let waiter = {
        let gateway = Arc::clone(&gateway);
        tokio::spawn(async move { chat(&gateway, None, 2, false).await })
    };
    wait_until(Duration::from_secs(5), "one queued", || async {
        queued(&gateway).await == 1
    })
    .await;
    let started = Instant::now();
    let (status, body) = chat(&gateway, None, 2, false).await;
    assert_eq!(status, 429, "{body}");
    assert!(
        body.contains("overloaded_error") && body.contains("1 requests already wait"),
        "{body}"
    );
    assert!(started.elapsed() < Duration::from_millis(500));
    assert_eq!(outcomes(&gateway, "queue_full").await, 1);
    assert_eq!(holder.await.expect("holder").0, 200);
    assert_eq!(
        waiter.await.expect("waiter").0,
        200,
        "the queued one was served"
    );

    // Flow control off: a saturated target is avoided while another is
    // free, and used when all are saturated (the old behaviour).
    let off = format!(
        "{}\nmax_concurrency = 1\n\n{}\nmax_concurrency = 1\n\n[[routes]]\nmodel = \"chat\"\nstrategy = \"round_robin\"\ntargets = [{{ provider = \"a\" }}, {{ provider = \"b\" }}]\n\n[health]\nenabled = false\n",
        provider("a", &engines[0].url()).trim_end(),
        provider("b", &engines[1].url()).trim_end(),
    );
    let plain = Arc::new(Gateway::start(&off).await);
    // The held stream outlasts the steps below on a loaded machine (5 s),
    // on whichever engine it lands.
    engines[1].control(json!({"token_delay_ms": 50})).await;
    let before: Vec<u64> = join_all(engines.iter().map(FakeEngine::chat_requests)).await;
    let held = {
        let gateway = Arc::clone(&plain);
        tokio::spawn(async move { chat(&gateway, None, 100, false).await })
    };
    wait_until(Duration::from_secs(5), "one engine busy", || async {
        let a = engines[0].stats().await["running"].as_u64().unwrap_or(0);
        let b = engines[1].stats().await["running"].as_u64().unwrap_or(0);
        a + b == 1
    })
    .await;
    let busy = if engines[0].stats().await["running"] == 1 {
        0
    } else {
        1
    };
    let free = ["a", "b"][1 - busy];
    assert_eq!(
        in_flight(&plain, ["a", "b"][busy]).await,
        1,
        "the held one counted"
    );
    for _ in 0..4 {
        // The last answer is at the client a moment before the gateway
        // counts it finished: wait for that, or the free engine is
        // saturated too and the pick is the all-saturated one.
        wait_until(Duration::from_secs(5), "the free engine idle", || async {
            in_flight(&plain, free).await == 0
        })
        .await;
        assert_eq!(chat(&plain, None, 1, false).await.0, 200);
    }
    let after: Vec<u64> = join_all(engines.iter().map(FakeEngine::chat_requests)).await;
    assert_eq!(
        after[busy] - before[busy],
        1,
        "round robin skipped the saturated engine: {before:?} -> {after:?}"
    );
    let both_busy = join_all((0..3).map(|_| chat(&plain, None, 10, false))).await;
    assert!(
        both_busy.iter().all(|(status, _)| *status == 200),
        "all saturated: served anyway"
    );
    assert_eq!(held.await.expect("held").0, 200);
}
