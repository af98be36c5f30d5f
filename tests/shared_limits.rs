//! Fleet-wide limits: two gateway nodes counting one key's `rpm`,
//! `max_concurrent` and `tpm` in one real Redis (`[rate_limits]
//! redis_url`), and both serving on their own counters while that Redis is
//! stopped, then sharing again when it is back.
//!
//! Each test runs its own `redis-server` on a free port, so stopping it
//! touches nothing else on the machine.

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use support::*;

/// A `redis-server` this test owns: no persistence, loopback only.
struct Redis {
    port: u16,
    process: Option<Process>,
    dir: tempfile::TempDir,
}

impl Redis {
    fn start() -> Redis {
        let mut redis = Redis {
            port: free_port(),
            process: None,
            dir: tempfile::tempdir().unwrap(),
        };
        redis.restart();
        redis
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts (again) on the same port and waits until it answers.
    fn restart(&mut self) {
        let log = self.dir.path().join("redis.log");
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (make deps)");
        self.process = Some(Process {
            child,
            log,
            name: "redis-server".into(),
        });
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.answers() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn answers(&self) -> bool {
        Command::new("redis-cli")
            .args(["-p", &self.port.to_string(), "PING"])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "PONG")
    }

    fn stop(&mut self) {
        drop(self.process.take());
    }
}

/// Two nodes sharing `redis`, one engine, the key `team` with `limits`.
async fn two_nodes(redis: &Redis, limits: &str, timeout_ms: u64) -> (FakeEngine, Gateway, Gateway) {
    let engine = FakeEngine::start("e", &[]);
    let config = format!(
        "[server]\nrequire_api_key = true\n\n{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"e\" }}]\n\n\
         [health]\nenabled = false\n\n[rate_limits]\nredis_url = \"{}\"\nredis_timeout_ms = {timeout_ms}\n\n\
         [[api_keys]]\nname = \"team\"\nkey_env = \"TEAM_KEY\"\n{limits}\n",
        provider("e", &engine.url()),
        redis.url(),
    );
    let env = [("TEAM_KEY", "sk-team")];
    let a = Gateway::start_with_env(&config, &env).await;
    let b = Gateway::start_with_env(&config, &env).await;
    for node in [&a, &b] {
        wait_for_metric(node, "rolter_rate_limit_redis_up 1").await;
    }
    (engine, a, b)
}

async fn wait_for_metric(node: &Gateway, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if node.metrics().await.lines().any(|l| l == line) {
            return;
        }
        assert!(Instant::now() < deadline, "{line} never showed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn chat(node: &Gateway, body: Value) -> reqwest::Response {
    client()
        .post(node.url("/v1/chat/completions"))
        .bearer_auth("sk-team")
        .json(&body)
        .send()
        .await
        .unwrap()
}

async fn status(node: &Gateway) -> u16 {
    chat(node, chat_body("chat", "hi")).await.status().as_u16()
}

#[tokio::test]
async fn two_nodes_enforce_one_rpm_and_keep_serving_while_redis_is_down() {
    let mut redis = Redis::start();
    let (engine, a, b) = two_nodes(&redis, "rpm = 6", 50).await;

    // Six requests a minute between them, whichever node they reach.
    for i in 0..6 {
        let node = if i % 2 == 0 { &a } else { &b };
        assert_eq!(status(node).await, 200, "request {i}");
    }
    for node in [&a, &b] {
        let refused = chat(node, chat_body("chat", "hi")).await;
        assert_eq!(refused.status(), 429);
        let seconds: u64 = refused.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=120).contains(&seconds), "Retry-After {seconds}");
        let body: Value = refused.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("(RPM): limit 6 across the gateway fleet"),
            "{message}"
        );
    }
    assert_eq!(engine.chat_requests().await, 6);

    // Redis stops: no request fails for it; each node falls back to its
    // own counters, which saw its three requests, so it admits three more.
    redis.stop();
    for node in [&a, &b] {
        let mut served = 0;
        for _ in 0..5 {
            match status(node).await {
                200 => served += 1,
                429 => {}
                other => panic!("a request failed with {other} while Redis was down"),
            }
        }
        assert_eq!(served, 3, "a node's local rpm after the fallback");
        let metrics = node.metrics().await;
        assert!(
            metrics.contains("rolter_rate_limit_redis_fallbacks_total 1"),
            "{metrics}"
        );
        assert!(
            metrics.contains("rolter_rate_limit_redis_up 0"),
            "{metrics}"
        );
        // Said once, however many requests came after.
        let log = node.process.log_text();
        assert_eq!(
            log.matches("counting on this node until it answers again")
                .count(),
            1,
            "{log}"
        );
    }

    // Redis is back (empty): both nodes count there again.
    redis.restart();
    for node in [&a, &b] {
        wait_for_metric(node, "rolter_rate_limit_redis_up 1").await;
    }
    let served = {
        let mut served = 0;
        for i in 0..10 {
            if status(if i % 2 == 0 { &a } else { &b }).await == 200 {
                served += 1;
            }
        }
        served
    };
    assert_eq!(served, 6, "one rpm for the fleet again");
}

#[tokio::test]
async fn max_concurrent_and_tpm_are_counted_once_for_the_fleet() {
    let redis = Redis::start();
    let (engine, a, b) = two_nodes(&redis, "max_concurrent = 1\ntpm = 30", 200).await;
    engine.control(json!({"ttft_ms": 400})).await;
    // One request in flight on a: b refuses the second.
    let slow = tokio::spawn({
        let url = a.url("/v1/chat/completions");
        async move {
            client()
                .post(url)
                .bearer_auth("sk-team")
                .json(&json!({"model": "chat", "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]}))
                .send()
                .await
                .unwrap()
        }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let refused = chat(&b, chat_body("chat", "hi")).await;
    assert_eq!(refused.status(), 429);
    let body: Value = refused.json().await.unwrap();
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("in flight"),
        "{body}"
    );
    let answer: Value = slow.await.unwrap().json().await.unwrap();
    let used = answer["usage"]["total_tokens"].as_u64().unwrap();
    assert!(used > 20, "{answer}");

    // The slot came back (within a flush) and a's tokens reached Redis:
    // one more request from b fits, and takes the key past 30.
    engine.control(json!({"ttft_ms": 0})).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let response = chat(&b, chat_body("chat", "hi")).await;
        if response.status() == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the slot never came back: {}",
            response.status()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Tokens are settled in the background: a sees b's within a flush.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let response = chat(&a, chat_body("chat", "hi")).await;
        if response.status() == 429 {
            let body: Value = response.json().await.unwrap();
            let message = body["error"]["message"].as_str().unwrap();
            // b's slot may still be on its way back (a flush away).
            if message.contains("(TPM): limit 30 across the gateway fleet") {
                break;
            }
            assert!(message.contains("in flight"), "{message}");
        } else {
            assert_eq!(response.status(), 200);
        }
        assert!(Instant::now() < deadline, "tpm never applied across nodes");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_redis_that_stops_answering_costs_a_request_at_most_the_timeout() {
    let redis = Redis::start();
    let (_engine, a, _b) = two_nodes(&redis, "rpm = 1000", 50).await;
    assert_eq!(status(&a).await, 200);
    // Frozen, not gone: connections stay open and nothing answers.
    let frozen = redis.process.as_ref().unwrap();
    frozen.signal(libc::SIGSTOP);
    let started = Instant::now();
    assert_eq!(status(&a).await, 200, "admitted locally after the timeout");
    let first = started.elapsed();
    // Later requests do not wait for Redis at all.
    let started = Instant::now();
    for _ in 0..5 {
        assert_eq!(status(&a).await, 200);
    }
    let five = started.elapsed();
    frozen.signal(libc::SIGCONT);
    assert!(
        first < Duration::from_secs(2),
        "the first request waited {first:?}"
    );
    assert!(five < Duration::from_secs(2), "five more took {five:?}");
    let metrics = a.metrics().await;
    assert!(
        metrics.contains("rolter_rate_limit_redis_fallbacks_total 1"),
        "{metrics}"
    );
    // Thawed, it is used again.
    wait_for_metric(&a, "rolter_rate_limit_redis_up 1").await;
}
