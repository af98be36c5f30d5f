//! Engine faults: while one healthy target remains, no client request fails,
//! and targets that are parked, breaker-open or unhealthy receive nothing.

mod support;

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};

use support::*;

/// Two providers, `sick` then `good`, round robin over them.
fn pair(sick: &FakeEngine, good: &FakeEngine, sections: &str) -> String {
    format!(
        "{}{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"sick\" }}, {{ provider = \"good\" }}]\n\n{sections}",
        provider("sick", &sick.url()),
        provider("good", &good.url()),
    )
}

/// Health checks off, so a test sees one mechanism at a time.
const NO_HEALTH: &str = "[health]\nenabled = false\n";

async fn requests_at(engine: &FakeEngine) -> u64 {
    engine.chat_requests().await
}

async fn metric_value(gateway: &Gateway, series: &str) -> Option<f64> {
    let text = gateway.metrics().await;
    text.lines()
        .find(|line| line.starts_with(series))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

async fn wait_metric(gateway: &Gateway, series: &str, wanted: impl Fn(f64) -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if metric_value(gateway, series).await.is_some_and(&wanted) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "timed out waiting for {what}: {series}\n{}",
        gateway.metrics().await
    );
}

#[tokio::test]
async fn a_5xx_engine_is_parked_and_nobody_fails() {
    let sick = FakeEngine::start("sick", &["--fail-status", "500"]);
    let good = FakeEngine::start("good", &[]);
    let config = pair(
        &sick,
        &good,
        &format!("{NO_HEALTH}[parking]\nbase_secs = 60\n"),
    );
    let gateway = Gateway::start(&config).await;
    for i in 0..12 {
        let response = gateway.chat("chat", &format!("{i}")).await;
        assert_eq!(response.status(), 200, "request {i}");
        assert_eq!(served_by(&response), "good");
    }
    assert!(
        requests_at(&sick).await <= 1,
        "a parked target took traffic"
    );
    wait_metric(
        &gateway,
        r#"rolter_target_parked{target="sick/chat"}"#,
        |v| v == 1.0,
        "parked",
    )
    .await;
}

#[tokio::test]
async fn a_429_with_retry_after_parks_for_that_long() {
    let sick = FakeEngine::start("sick", &["--fail-status", "429", "--retry-after", "40"]);
    let good = FakeEngine::start("good", &[]);
    let config = pair(
        &sick,
        &good,
        &format!("{NO_HEALTH}[parking]\nbase_secs = 1\nmax_secs = 120\n"),
    );
    let gateway = Gateway::start(&config).await;
    for i in 0..4 {
        assert_eq!(gateway.chat("chat", &format!("{i}")).await.status(), 200);
    }
    // base_secs is 1 s: only Retry-After keeps it parked past that.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for i in 0..6 {
        let response = gateway.chat("chat", &format!("later {i}")).await;
        assert_eq!(response.status(), 200);
        assert_eq!(served_by(&response), "good");
    }
    assert_eq!(requests_at(&sick).await, 1);
}

#[tokio::test]
async fn a_hanging_engine_times_out_fails_over_and_opens_its_breaker() {
    let sick = FakeEngine::start("sick", &["--hang"]);
    let good = FakeEngine::start("good", &[]);
    let config = pair(
        &sick,
        &good,
        &format!("{NO_HEALTH}[timeouts]\nfirst_byte_secs = 1\n\n[breaker]\nfailure_threshold = 2\nopen_secs = 60\n"),
    );
    let gateway = Gateway::start(&config).await;
    for i in 0..8 {
        let started = Instant::now();
        let response = gateway.chat("chat", &format!("{i}")).await;
        assert_eq!(response.status(), 200, "request {i}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    // Two timeouts opened the breaker; after that the engine sees nothing.
    assert_eq!(requests_at(&sick).await, 2);
    wait_metric(
        &gateway,
        r#"rolter_breaker_state{target="sick/chat"}"#,
        |v| v == 1.0,
        "open breaker",
    )
    .await;
    wait_metric(
        &gateway,
        r#"rolter_upstream_timeouts_total{phase="first_byte",target="sick/chat"}"#,
        |v| v == 2.0,
        "two first-byte timeouts",
    )
    .await;
}

#[tokio::test]
async fn half_open_breaker_admits_exactly_one_probe() {
    let sick = FakeEngine::start("sick", &["--fail-status", "503"]);
    let good = FakeEngine::start("good", &[]);
    let config = pair(
        &sick,
        &good,
        &format!("{NO_HEALTH}[breaker]\nfailure_threshold = 1\nopen_secs = 1\n\n[parking]\nbase_secs = 1\n"),
    );
    let gateway = Gateway::start(&config).await;
    // One failure opens the breaker (and parks the target for a second).
    for i in 0..2 {
        assert_eq!(gateway.chat("chat", &format!("{i}")).await.status(), 200);
    }
    assert_eq!(requests_at(&sick).await, 1);
    // The engine recovers, slowly: the probe stays in flight a while.
    sick.control(json!({"reset": true, "fail_status": null, "ttft_ms": 800}))
        .await;
    tokio::time::sleep(Duration::from_millis(1300)).await;

    let mut tasks = Vec::new();
    for i in 0..10 {
        let url = gateway.url("/v1/chat/completions");
        tasks.push(tokio::spawn(async move {
            client()
                .post(url)
                .json(&chat_body("chat", &format!("burst {i}")))
                .send()
                .await
                .map(|r| (r.status().as_u16(), served_by(&r)))
        }));
    }
    let mut to_sick = 0;
    for task in tasks {
        let (status, target) = task.await.unwrap().unwrap();
        assert_eq!(status, 200);
        to_sick += usize::from(target == "sick");
    }
    assert_eq!(to_sick, 1, "half-open must admit exactly one probe");
    assert_eq!(requests_at(&sick).await, 2);
    // The probe succeeded: closed again, traffic returns.
    wait_metric(
        &gateway,
        r#"rolter_breaker_state{target="sick/chat"}"#,
        |v| v == 0.0,
        "closed breaker",
    )
    .await;
    let mut served = Vec::new();
    for i in 0..6 {
        served.push(served_by(
            &gateway.chat("chat", &format!("after {i}")).await,
        ));
    }
    assert!(served.iter().any(|t| t == "sick"), "{served:?}");
}

#[tokio::test]
async fn a_flapping_engine_costs_no_client_request() {
    let flappy = FakeEngine::start("sick", &[]);
    let good = FakeEngine::start("good", &[]);
    let config = pair(
        &flappy,
        &good,
        &format!("{NO_HEALTH}[parking]\nbase_secs = 1\n"),
    );
    let gateway = Gateway::start(&config).await;
    for round in 0..6 {
        let mode = if round % 2 == 0 {
            json!({"fail_status": 502})
        } else {
            json!({"reset": true})
        };
        flappy.control(mode).await;
        for i in 0..5 {
            let response = gateway.chat("chat", &format!("{round}-{i}")).await;
            assert_eq!(response.status(), 200, "round {round} request {i}");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// An engine whose tokens come `token_delay_ms` apart, behind a gateway
/// with `idle_secs = 1`, and a stream of `max_tokens` started through it
/// (with the time it started).
async fn stream_under_an_idle_limit(
    name: &str,
    token_delay_ms: u64,
    max_tokens: u32,
) -> (FakeEngine, Gateway, Instant, reqwest::Response) {
    let engine = FakeEngine::start(name, &["--token-delay-ms", &token_delay_ms.to_string()]);
    let config = format!(
        "{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"{name}\" }}]\n\n{NO_HEALTH}[timeouts]\nidle_secs = 1\n",
        provider(name, &engine.url())
    );
    let gateway = Gateway::start(&config).await;
    let started = Instant::now();
    let response = client()
        .post(gateway.url("/v1/chat/completions"))
        .json(
            &json!({"model": "chat", "stream": true, "max_tokens": max_tokens,
                      "messages": [{"role": "user", "content": "x"}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    (engine, gateway, started, response)
}

#[tokio::test]
async fn a_stalled_stream_is_cut_and_counted() {
    let (_slow, gateway, started, response) = stream_under_an_idle_limit("slow", 4000, 5).await;
    let mut body = String::new();
    let mut stream = response.bytes_stream();
    let mut broke = false;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(bytes) => body.push_str(&String::from_utf8_lossy(&bytes)),
            Err(_) => {
                broke = true;
                break;
            }
        }
    }
    assert!(
        broke || !body.contains("[DONE]"),
        "the stall was not cut: {body}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "cut after {:?}",
        started.elapsed()
    );
    wait_metric(
        &gateway,
        r#"rolter_upstream_timeouts_total{phase="idle",target="slow/chat"}"#,
        |v| v >= 1.0,
        "an idle timeout",
    )
    .await;
}

/// The idle limit bounds the wait for each read of the engine's body, not
/// the stream: a stream longer than it whose tokens keep coming is never
/// cut.
#[tokio::test]
async fn a_stream_longer_than_the_idle_limit_is_not_cut_while_tokens_come() {
    let (_steady, gateway, started, response) = stream_under_an_idle_limit("steady", 350, 10).await;
    let body = response.text().await.expect("the whole stream");
    assert!(body.contains("[DONE]"), "the stream was cut: {body}");
    assert!(
        started.elapsed() > Duration::from_secs(3),
        "ten tokens 350 ms apart took only {:?}: the stream did not outlast the idle limit",
        started.elapsed()
    );
    let idle_timeouts = metric_value(
        &gateway,
        r#"rolter_upstream_timeouts_total{phase="idle",target="steady/chat"}"#,
    )
    .await;
    assert!(
        idle_timeouts.unwrap_or(0.0) == 0.0,
        "an idle timeout was counted: {idle_timeouts:?}"
    );
}

#[tokio::test]
async fn a_reset_mid_stream_terminates_the_client_stream() {
    let broken = FakeEngine::start(
        "broken",
        &["--reset-after-chunks", "2", "--token-delay-ms", "20"],
    );
    let config = format!(
        "{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"broken\" }}]\n\n{NO_HEALTH}",
        provider("broken", &broken.url())
    );
    let gateway = Gateway::start(&config).await;
    let response = client()
        .post(gateway.url("/v1/chat/completions"))
        .json(&json!({"model": "chat", "stream": true, "max_tokens": 10,
                      "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = String::new();
    let mut stream = response.bytes_stream();
    while let Some(Ok(chunk)) = stream.next().await {
        body.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(!body.contains("[DONE]"), "{body}");
    wait_metric(
        &gateway,
        r#"rolter_upstream_failures_total{reason="stream",target="broken/chat"}"#,
        |v| v >= 1.0,
        "a stream failure",
    )
    .await;
}

#[tokio::test]
async fn client_disconnect_cancels_the_engine_request_and_frees_the_slot() {
    let engine = FakeEngine::start("e", &["--token-delay-ms", "100"]);
    let config = format!(
        "{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"e\" }}]\n\n{NO_HEALTH}",
        provider("e", &engine.url())
    );
    let gateway = Gateway::start(&config).await;
    let response = client()
        .post(gateway.url("/v1/chat/completions"))
        .json(&json!({"model": "chat", "stream": true, "max_tokens": 200,
                      "messages": [{"role": "user", "content": "long"}]}))
        .send()
        .await
        .unwrap();
    let mut stream = response.bytes_stream();
    for _ in 0..2 {
        stream.next().await.unwrap().unwrap();
    }
    wait_metric(
        &gateway,
        r#"rolter_target_in_flight{target="e/chat"}"#,
        |v| v == 1.0,
        "in flight",
    )
    .await;
    drop(stream);
    let dropped = Instant::now();
    wait_until(
        Duration::from_secs(5),
        "the engine to see the cancel",
        || {
            let stats = engine.stats();
            async move { stats.await["cancelled"].as_u64() == Some(1) }
        },
    )
    .await;
    assert!(
        dropped.elapsed() < Duration::from_secs(2),
        "cancel took {:?}",
        dropped.elapsed()
    );
    wait_metric(
        &gateway,
        r#"rolter_target_in_flight{target="e/chat"}"#,
        |v| v == 0.0,
        "slot freed",
    )
    .await;
    wait_metric(
        &gateway,
        r#"rolter_client_cancels_total{route="chat"}"#,
        |v| v == 1.0,
        "cancel counted",
    )
    .await;
}

#[tokio::test]
async fn health_checks_take_a_dead_engine_out_and_bring_it_back() {
    let good = FakeEngine::start("good", &[]);
    let port = free_port();
    let flaky_args = ["--listen", &format!("127.0.0.1:{port}")];
    let flaky = FakeEngine::start_with("flaky", &flaky_args);
    let config = pair(
        &flaky,
        &good,
        "[health]\ninterval_secs = 2\ntimeout_secs = 1\nunhealthy_after = 1\nhealthy_after = 1\n\n[parking]\nbase_secs = 1\n",
    );
    let gateway = Gateway::start(&config).await;
    wait_metric(
        &gateway,
        r#"rolter_provider_healthy{provider="sick"}"#,
        |v| v == 1.0,
        "healthy",
    )
    .await;
    drop(flaky);
    wait_metric(
        &gateway,
        r#"rolter_provider_healthy{provider="sick"}"#,
        |v| v == 0.0,
        "unhealthy",
    )
    .await;
    // Unhealthy: requests go to the healthy one without trying the dead one.
    for i in 0..5 {
        let response = gateway.chat("chat", &format!("{i}")).await;
        assert_eq!(response.status(), 200);
        assert_eq!(served_by(&response), "good");
    }
    let connect_failures = metric_value(
        &gateway,
        r#"rolter_upstream_failures_total{reason="connect",target="sick/chat"}"#,
    )
    .await
    .unwrap_or(0.0);
    assert!(
        connect_failures <= 1.0,
        "requests were sent to an unhealthy provider"
    );

    let revived = FakeEngine::start_with("flaky", &flaky_args);
    wait_metric(
        &gateway,
        r#"rolter_provider_healthy{provider="sick"}"#,
        |v| v == 1.0,
        "healthy again",
    )
    .await;
    let mut served = Vec::new();
    for i in 0..4 {
        served.push(served_by(&gateway.chat("chat", &format!("back {i}")).await));
    }
    assert!(served.iter().any(|t| t == "sick"), "{served:?}");
    assert!(requests_at(&revived).await >= 1);
}

#[tokio::test]
async fn a_health_probe_answered_429_backs_off_instead_of_marking_down() {
    let busy = FakeEngine::start("busy", &["--fail-status", "429"]);
    let good = FakeEngine::start("good", &[]);
    let config = pair(
        &busy,
        &good,
        "[health]\ninterval_secs = 2\ntimeout_secs = 1\nunhealthy_after = 1\n",
    );
    let gateway = Gateway::start(&config).await;
    wait_metric(
        &gateway,
        r#"rolter_health_probes_total{outcome="busy",provider="sick"}"#,
        |v| v >= 1.0,
        "a busy probe",
    )
    .await;
    assert_eq!(
        metric_value(&gateway, r#"rolter_provider_healthy{provider="sick"}"#).await,
        Some(1.0)
    );
}

#[tokio::test]
async fn no_eligible_target_says_why() {
    let sick = FakeEngine::start("sick", &["--fail-status", "503"]);
    let config = format!(
        "{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"sick\" }}]\n\n{NO_HEALTH}[parking]\nbase_secs = 60\n",
        provider("sick", &sick.url())
    );
    let gateway = Gateway::start(&config).await;
    // The engine's own 503 reaches the client (no other target to try)...
    assert_eq!(gateway.chat("chat", "x").await.status(), 503);
    // ...and then the target is parked: the gateway answers itself.
    let response = gateway.chat("chat", "y").await;
    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "no_eligible_target", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("parked"),
        "{body}"
    );
    assert_eq!(requests_at(&sick).await, 1);
}

#[tokio::test]
async fn breaker_and_parking_survive_a_reload() {
    let sick = FakeEngine::start("sick", &["--fail-status", "500"]);
    let good = FakeEngine::start("good", &[]);
    let config = pair(
        &sick,
        &good,
        &format!("{NO_HEALTH}[breaker]\nfailure_threshold = 1\nopen_secs = 60\n"),
    );
    let gateway = Gateway::start(&config).await;
    for i in 0..3 {
        assert_eq!(gateway.chat("chat", &format!("{i}")).await.status(), 200);
    }
    assert_eq!(requests_at(&sick).await, 1);
    sick.control(json!({"reset": true, "fail_status": null}))
        .await;
    // Reordered targets: a new snapshot, the same learned state.
    gateway.write_config(&format!(
        "{}{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"good\" }}, {{ provider = \"sick\" }}]\n\n{NO_HEALTH}[breaker]\nfailure_threshold = 1\nopen_secs = 60\n",
        provider("sick", &sick.url()),
        provider("good", &good.url()),
    ));
    let (status, body) = gateway.reload().await;
    assert_eq!(status, 200, "{body}");
    for i in 0..4 {
        assert_eq!(
            served_by(&gateway.chat("chat", &format!("after {i}")).await),
            "good"
        );
    }
    assert_eq!(requests_at(&sick).await, 1);
}
