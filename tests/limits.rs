//! Limits at the edge, end to end: per-key requests and tokens per minute
//! and requests in flight (`[[api_keys]] rpm`, `tpm`, `max_concurrent`), and the client
//! connection limits of `[server]` (`keepalive_requests`,
//! `keepalive_timeout_secs`, `header_read_timeout_secs`, `max_connections`),
//! against real `rolter serve` and `rolter fake-llm` processes. Connection
//! behaviour is observed from the client side, on raw TCP streams.

mod support;

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use support::*;

/// Upper bound for anything the gateway should do "at once".
const PROMPTLY: Duration = Duration::from_secs(5);

/// Two keys, `alpha` and `beta`, with the given `[[api_keys]]` extras, one
/// engine behind the route `chat`; anonymous callers allowed.
fn keyed_config(engine: &FakeEngine, alpha: &str, beta: &str) -> String {
    format!(
        "[server]\nrequire_api_key = false\n\n{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"e\" }}]\n\n[[api_keys]]\nname = \"alpha\"\nkey_env = \"ALPHA_KEY\"\n{alpha}\n\n[[api_keys]]\nname = \"beta\"\nkey_env = \"BETA_KEY\"\n{beta}\n",
        provider("e", &engine.url())
    )
}

const KEYS: &[(&str, &str)] = &[("ALPHA_KEY", "sk-alpha"), ("BETA_KEY", "sk-beta")];

/// A chat completion as `key` (anonymous when `None`).
async fn chat_as(gateway: &Gateway, key: Option<&str>, body: Value) -> reqwest::Response {
    let mut request = client()
        .post(gateway.url("/v1/chat/completions"))
        .json(&body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    request.send().await.expect("chat request")
}

fn short_chat() -> Value {
    chat_body("chat", "hi")
}

fn retry_after(response: &reqwest::Response) -> u64 {
    response
        .headers()
        .get("retry-after")
        .unwrap_or_else(|| panic!("no Retry-After on {}", response.status()))
        .to_str()
        .unwrap()
        .parse()
        .expect("Retry-After in seconds")
}

/// Checks a 429 in OpenAI's shape and returns its `Retry-After`.
async fn assert_rate_limited(response: reqwest::Response, key: &str) -> u64 {
    assert_eq!(response.status(), 429);
    let seconds = retry_after(&response);
    let body: Value = response.json().await.expect("error json");
    assert_eq!(body["error"]["type"], "requests", "{body}");
    assert_eq!(body["error"]["code"], "rate_limit_exceeded", "{body}");
    assert!(body["error"]["param"].is_null(), "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains(&format!("`{key}`")), "{message}");
    seconds
}

#[tokio::test]
async fn the_request_over_rpm_gets_429_with_retry_after_and_other_keys_are_unaffected() {
    let engine = FakeEngine::start("e", &[]);
    let gateway = Gateway::start_with_env(&keyed_config(&engine, "rpm = 3", "rpm = 3"), KEYS).await;

    for _ in 0..3 {
        assert_eq!(
            chat_as(&gateway, Some("sk-alpha"), short_chat())
                .await
                .status(),
            200
        );
    }
    let response = chat_as(&gateway, Some("sk-alpha"), short_chat()).await;
    let seconds = assert_rate_limited(response, "alpha").await;
    // The burst was just now: the minute is almost whole.
    assert!((50..=60).contains(&seconds), "Retry-After: {seconds}");

    // Another key has its own minute; anonymous callers have none.
    for _ in 0..3 {
        assert_eq!(
            chat_as(&gateway, Some("sk-beta"), short_chat())
                .await
                .status(),
            200
        );
    }
    for _ in 0..5 {
        assert_eq!(chat_as(&gateway, None, short_chat()).await.status(), 200);
    }
    // The refused request never reached the engine.
    assert_eq!(engine.chat_requests().await, 3 + 3 + 5);
    let metrics = gateway.metrics().await;
    assert!(
        metrics.contains(r#"rolter_rate_limited_total{key="alpha",limit="rpm"} 1"#),
        "{metrics}"
    );
    assert!(
        !metrics.contains(r#"rolter_rate_limited_total{key="beta""#),
        "{metrics}"
    );
}

/// The tokens the engine reported for a chat answer (prompt + completion).
async fn used_tokens(response: reqwest::Response) -> u64 {
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    body["usage"]["total_tokens"].as_u64().expect("usage")
}

#[tokio::test]
async fn tpm_refuses_once_the_engines_reported_tokens_fill_the_minute() {
    let engine = FakeEngine::start("e", &[]);
    let gateway =
        Gateway::start_with_env(&keyed_config(&engine, "tpm = 40", "tpm = 40"), KEYS).await;
    let body = |max_tokens: u64| json!({"model": "chat", "max_tokens": max_tokens, "messages": [{"role": "user", "content": "hi"}]});
    // 20 completion tokens and a few of prompt: room for a second request,
    // which takes the key past its 40.
    let first = used_tokens(chat_as(&gateway, Some("sk-alpha"), body(20)).await).await;
    assert!(first > 20 && first < 40, "{first}");
    // A stream whose client did not ask for usage is charged too: the
    // gateway asks the engine for it.
    let stream = chat_as(
        &gateway,
        Some("sk-alpha"),
        json!({"model": "chat", "max_tokens": 20, "stream": true, "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(stream.status(), 200);
    let text = stream.text().await.unwrap();
    assert!(
        !text.contains("\"usage\""),
        "the client did not ask for usage: {text}"
    );

    let refused = chat_as(&gateway, Some("sk-alpha"), body(1)).await;
    assert_eq!(refused.status(), 429);
    // About 58 tokens against 40: the overshoot is waited off into the
    // next minute.
    let seconds = retry_after(&refused);
    assert!((61..=120).contains(&seconds), "Retry-After: {seconds}");
    let answer: Value = refused.json().await.unwrap();
    assert_eq!(answer["error"]["code"], "rate_limit_exceeded", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("tokens per minute (TPM): limit 40"),
        "{message}"
    );

    // The other key has its own tokens; the refused request reached no engine.
    assert!(used_tokens(chat_as(&gateway, Some("sk-beta"), body(5)).await).await > 5);
    assert_eq!(engine.chat_requests().await, 3);
    let metrics = gateway.metrics().await;
    assert!(
        metrics.contains(r#"rolter_rate_limited_total{key="alpha",limit="tpm"} 1"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_reload_applies_new_limits_to_the_same_counters() {
    let engine = FakeEngine::start("e", &[]);
    let gateway = Gateway::start_with_env(&keyed_config(&engine, "rpm = 2", ""), KEYS).await;
    for _ in 0..2 {
        assert_eq!(
            chat_as(&gateway, Some("sk-alpha"), short_chat())
                .await
                .status(),
            200
        );
    }
    assert_eq!(
        chat_as(&gateway, Some("sk-alpha"), short_chat())
            .await
            .status(),
        429
    );

    gateway.write_config(&keyed_config(&engine, "rpm = 4", ""));
    let (status, answer) = gateway.reload().await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["needs_restart"], json!([]), "{answer}");
    // The two requests of this minute still count: two more, not four.
    for _ in 0..2 {
        assert_eq!(
            chat_as(&gateway, Some("sk-alpha"), short_chat())
                .await
                .status(),
            200
        );
    }
    let response = chat_as(&gateway, Some("sk-alpha"), short_chat()).await;
    assert_rate_limited(response, "alpha").await;
}

/// Starts a long stream as `key` and waits for its first chunk, so the
/// request is surely admitted and in flight.
async fn open_stream(
    gateway: &Gateway,
    key: &str,
) -> impl futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> {
    let response = chat_as(
        gateway,
        Some(key),
        json!({"model": "chat", "stream": true, "max_tokens": 400,
               "messages": [{"role": "user", "content": "a long story"}]}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let mut stream = Box::pin(response.bytes_stream());
    stream
        .next()
        .await
        .expect("a first chunk")
        .expect("a readable first chunk");
    stream
}

#[tokio::test]
async fn max_concurrent_refuses_beyond_the_requests_in_flight_until_one_ends() {
    // 400 tokens 50 ms apart: a stream lasts 20 s unless its client leaves.
    let engine = FakeEngine::start("e", &["--token-delay-ms", "50"]);
    let gateway = Gateway::start_with_env(
        &keyed_config(&engine, "max_concurrent = 2", "max_concurrent = 1"),
        KEYS,
    )
    .await;

    let first = open_stream(&gateway, "sk-alpha").await;
    let _second = open_stream(&gateway, "sk-alpha").await;
    let refused = chat_as(&gateway, Some("sk-alpha"), short_chat()).await;
    assert_eq!(retry_after(&refused), 1);
    assert_rate_limited(refused, "alpha").await;
    // beta's single slot is its own.
    let _beta = open_stream(&gateway, "sk-beta").await;

    // The client of the first stream goes away: its slot comes back when
    // the gateway notices (at the next token) and drops the request.
    drop(first);
    let one_token = json!({"model": "chat", "max_tokens": 1,
                           "messages": [{"role": "user", "content": "hi"}]});
    wait_until(
        PROMPTLY,
        "a new request admitted after one stream ended",
        || {
            let request = chat_as(&gateway, Some("sk-alpha"), one_token.clone());
            async move { request.await.status() == 200 }
        },
    )
    .await;
    let metrics = gateway.metrics().await;
    assert!(
        metrics.contains(r#"rolter_rate_limited_total{key="alpha",limit="concurrency"}"#),
        "{metrics}"
    );
}

// ---- client connections, on raw TCP ----

/// One HTTP/1.1 response read off a raw connection.
struct RawResponse {
    status: u16,
    /// `Connection` header, lowercased ("" when absent).
    connection: String,
    /// The body, its chunked framing (if any) removed.
    body: Vec<u8>,
}

/// Sends `GET /v1/models` (served by the gateway itself, with a
/// `Content-Length`) and reads the whole response.
async fn get_models(stream: &mut TcpStream) -> std::io::Result<RawResponse> {
    stream
        .write_all(b"GET /v1/models HTTP/1.1\r\nHost: rolter.test\r\n\r\n")
        .await?;
    tokio::time::timeout(PROMPTLY, read_response(stream))
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no response"))?
}

async fn read_response(stream: &mut TcpStream) -> std::io::Result<RawResponse> {
    read_response_after(stream, &mut Vec::new()).await
}

/// Reads the next response, `carry` holding what was read past the one
/// before (responses to pipelined requests may share a read); what is
/// read past this one is left in `carry`.
async fn read_response_after(
    stream: &mut TcpStream,
    carry: &mut Vec<u8>,
) -> std::io::Result<RawResponse> {
    let mut buf = std::mem::take(carry);
    let header_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).to_string();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    let header = |name: &str| {
        head.lines()
            .filter_map(|line| line.split_once(':'))
            .find(|(key, _)| key.trim().eq_ignore_ascii_case(name))
            .map(|(_, value)| value.trim().to_ascii_lowercase())
    };
    let chunked = header("transfer-encoding").is_some_and(|v| v == "chunked");
    let length: Option<usize> = header("content-length").and_then(|v| v.parse().ok());
    assert!(chunked || length.is_some(), "a framed body: {head}");
    let mut body = buf.split_off(header_end);
    let end = loop {
        let end = match length {
            Some(length) => (body.len() >= length).then_some(length),
            None => chunked::end(&body),
        };
        if let Some(end) = end {
            break end;
        }
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        body.extend_from_slice(&chunk[..n]);
    };
    *carry = body.split_off(end);
    if chunked {
        body = chunked::split(&body).concat();
    }
    Ok(RawResponse {
        status,
        connection: header("connection").unwrap_or_default(),
        body,
    })
}

/// A gateway with one route and the given `[server]` settings, anonymous
/// callers allowed; `/v1/models` needs no engine, but the route does.
async fn edge_gateway(engine: &FakeEngine, server: &str) -> Gateway {
    let config = format!(
        "[server]\nrequire_api_key = false\n{server}\n\n{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"e\" }}]\n",
        provider("e", &engine.url())
    );
    Gateway::start(&config).await
}

#[tokio::test]
async fn keepalive_requests_closes_the_connection_after_the_nth_response() {
    let engine = FakeEngine::start("e", &[]);
    let gateway = edge_gateway(&engine, "keepalive_requests = 3").await;
    let mut stream = TcpStream::connect(gateway.listen).await.unwrap();
    for n in 1..=2 {
        let response = get_models(&mut stream).await.unwrap();
        assert_eq!(response.status, 200, "request {n}");
        assert_eq!(response.connection, "keep-alive", "request {n}");
    }
    let third = get_models(&mut stream).await.unwrap();
    assert_eq!(third.status, 200);
    assert_eq!(third.connection, "close");
    assert!(closed_by_peer(&mut stream, PROMPTLY).await);
    // A fourth request on it gets nothing.
    assert!(get_models(&mut stream).await.is_err());
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_keepalive_timeout() {
    let engine = FakeEngine::start("e", &[]);
    let gateway = edge_gateway(&engine, "keepalive_timeout_secs = 1").await;
    let mut stream = TcpStream::connect(gateway.listen).await.unwrap();
    let response = get_models(&mut stream).await.unwrap();
    assert_eq!(response.connection, "keep-alive");
    let idle_since = Instant::now();
    assert!(closed_by_peer(&mut stream, PROMPTLY).await);
    let idle = idle_since.elapsed();
    assert!(
        idle >= Duration::from_millis(900),
        "closed after {idle:?} idle"
    );

    // A connection in use is not idle: requests 0.5 s apart keep it.
    let mut stream = TcpStream::connect(gateway.listen).await.unwrap();
    for _ in 0..4 {
        assert_eq!(get_models(&mut stream).await.unwrap().status, 200);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn keepalive_timeout_zero_closes_after_every_response() {
    let engine = FakeEngine::start("e", &[]);
    let gateway = edge_gateway(&engine, "keepalive_timeout_secs = 0").await;
    let mut stream = TcpStream::connect(gateway.listen).await.unwrap();
    let response = get_models(&mut stream).await.unwrap();
    assert_eq!(response.status, 200);
    assert_eq!(response.connection, "close");
    assert!(closed_by_peer(&mut stream, PROMPTLY).await);
}

#[tokio::test]
async fn a_client_that_sends_half_its_header_is_cut_at_header_read_timeout() {
    let engine = FakeEngine::start("e", &[]);
    let gateway = edge_gateway(
        &engine,
        "header_read_timeout_secs = 1\nkeepalive_timeout_secs = 30",
    )
    .await;

    // Half a header, then silence.
    let mut stream = TcpStream::connect(gateway.listen).await.unwrap();
    let started = Instant::now();
    stream
        .write_all(b"GET /v1/models HTTP/1.1\r\nHost: rolter.test\r\n")
        .await
        .unwrap();
    assert!(closed_by_peer(&mut stream, PROMPTLY).await);
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(900), "cut after {waited:?}");

    // A header dripped a few bytes at a time is cut at the same deadline:
    // it bounds the whole header, not each read.
    let mut stream = TcpStream::connect(gateway.listen).await.unwrap();
    let started = Instant::now();
    let header = b"GET /v1/models HTTP/1.1\r\nHost: rolter.test\r\nUser-Agent: slow\r\n";
    let mut cut = false;
    for piece in header.chunks(4) {
        if stream.write_all(piece).await.is_err()
            || closed_by_peer(&mut stream, Duration::from_millis(250)).await
        {
            cut = true;
            break;
        }
    }
    assert!(cut || closed_by_peer(&mut stream, PROMPTLY).await);
    let waited = started.elapsed();
    assert!(
        (Duration::from_millis(900)..Duration::from_millis(2500)).contains(&waited),
        "a dripping header was cut after {waited:?}"
    );

    // On a kept-alive connection the deadline runs from the next request's
    // first byte, however long the connection was idle before it.
    let mut stream = TcpStream::connect(gateway.listen).await.unwrap();
    assert_eq!(get_models(&mut stream).await.unwrap().status, 200);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(get_models(&mut stream).await.unwrap().status, 200);
    stream
        .write_all(b"GET /v1/models HTTP/1.1\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    assert!(closed_by_peer(&mut stream, PROMPTLY).await);
    assert!(started.elapsed() >= Duration::from_millis(900));

    let metrics = gateway.metrics().await;
    assert!(
        metrics.contains(r#"rolter_client_connections_closed_total{reason="header_timeout"} 3"#),
        "{metrics}"
    );
}

/// A chat request to the route `chat` as raw HTTP/1.1, marked with an
/// `X-Order` header the engine echoes back.
fn raw_chat(order: u32) -> Vec<u8> {
    raw_chat_body(order, chat_body("chat", &format!("request {order}")))
}

fn raw_chat_body(order: u32, body: Value) -> Vec<u8> {
    let body = body.to_string();
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: rolter.test\r\nX-Order: {order}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The `X-Order` a chat answer's engine received.
fn order_of(response: &RawResponse) -> String {
    assert_eq!(
        response.status,
        200,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    let answer: Value = serde_json::from_slice(&response.body).expect("a JSON answer");
    answer["fake"]["received_headers"]["x-order"]
        .as_str()
        .unwrap_or_else(|| panic!("no x-order reached the engine: {answer}"))
        .to_string()
}

/// Reads the next response on `stream`, failing the test if none comes.
async fn next_response(stream: &mut TcpStream, carry: &mut Vec<u8>) -> RawResponse {
    tokio::time::timeout(PROMPTLY, read_response_after(stream, carry))
        .await
        .expect("a response in time")
        .expect("a response")
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order_on_one_connection() {
    // An engine slow enough that a request sent after the first one's body
    // arrives while the first is still at the engine, or still streaming.
    let engine = FakeEngine::start("e", &["--ttft-ms", "300", "--token-delay-ms", "100"]);
    let gateway = edge_gateway(&engine, "").await;

    // Every request in one write: the gateway reads the second and third
    // with the first's body, and answers them in order.
    let mut stream = TcpStream::connect(gateway.listen).await.unwrap();
    // What was read past the response before (answers may share a read).
    let mut carry = Vec::new();
    let mut burst = raw_chat(1);
    burst.extend_from_slice(b"GET /v1/models HTTP/1.1\r\nHost: rolter.test\r\n\r\n");
    burst.extend(raw_chat(2));
    stream.write_all(&burst).await.unwrap();
    assert_eq!(order_of(&next_response(&mut stream, &mut carry).await), "1");
    let models = next_response(&mut stream, &mut carry).await;
    assert_eq!(models.status, 200);
    assert!(
        String::from_utf8_lossy(&models.body).contains("\"chat\""),
        "not the model list"
    );
    let third = next_response(&mut stream, &mut carry).await;
    assert_eq!(order_of(&third), "2");
    assert_eq!(third.connection, "keep-alive");

    // The next request sent while the first waits for its engine: the
    // gateway reads its first bytes then and must not take them for a
    // client going away (this request was logged 499 and the connection
    // closed).
    let mut stream = TcpStream::connect(gateway.listen).await.unwrap();
    assert!(carry.is_empty(), "bytes past the third answer");
    stream.write_all(&raw_chat(3)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    stream.write_all(&raw_chat(4)).await.unwrap();
    assert_eq!(order_of(&next_response(&mut stream, &mut carry).await), "3");
    assert_eq!(order_of(&next_response(&mut stream, &mut carry).await), "4");
    // And the connection serves on.
    assert!(carry.is_empty(), "bytes past the fourth answer");
    assert_eq!(get_models(&mut stream).await.unwrap().status, 200);

    // Sent while the first one's events flow (the first token at 300 ms,
    // the rest 100 ms apart): the stream ends whole, then the next answer.
    let mut stream = TcpStream::connect(gateway.listen).await.unwrap();
    let mut events = chat_body("chat", "request 5");
    events["stream"] = json!(true);
    stream.write_all(&raw_chat_body(5, events)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(450)).await;
    stream.write_all(&raw_chat(6)).await.unwrap();
    let streamed = next_response(&mut stream, &mut carry).await;
    assert_eq!(streamed.status, 200);
    let text = String::from_utf8_lossy(&streamed.body);
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    // The role's event, then one per token of `max_tokens = 4`.
    assert_eq!(text.matches("\"content\"").count(), 5, "{text}");
    assert_eq!(order_of(&next_response(&mut stream, &mut carry).await), "6");
    assert!(carry.is_empty(), "bytes past the last answer");

    assert_eq!(engine.chat_requests().await, 6);
    let metrics = gateway.metrics().await;
    assert_eq!(
        sum_series(&metrics, "rolter_requests_total", "status=\"499\""),
        0,
        "{metrics}"
    );
}

#[tokio::test]
async fn max_connections_refuses_the_connection_beyond_the_limit_until_one_closes() {
    let engine = FakeEngine::start("e", &[]);
    let gateway = edge_gateway(&engine, "max_connections = 2").await;

    // Two connections, each proven open (served once) and then kept idle.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(gateway.listen).await.unwrap();
        assert_eq!(get_models(&mut stream).await.unwrap().status, 200);
        held.push(stream);
    }
    // The third is closed at once, before a request is even read.
    let mut third = TcpStream::connect(gateway.listen).await.unwrap();
    assert!(closed_by_peer(&mut third, PROMPTLY).await);
    let mut fourth = TcpStream::connect(gateway.listen).await.unwrap();
    assert!(get_models(&mut fourth).await.is_err());
    // The held ones still work.
    for stream in &mut held {
        assert_eq!(get_models(stream).await.unwrap().status, 200);
    }
    let metrics = gateway.metrics().await;
    assert!(metrics.contains("rolter_client_connections 2"), "{metrics}");
    assert!(
        metrics.contains(r#"rolter_client_connections_closed_total{reason="max_connections"} 2"#),
        "{metrics}"
    );

    // One closes: a new connection is served.
    drop(held.remove(0));
    wait_until(
        PROMPTLY,
        "a connection admitted after one closed",
        || async {
            match TcpStream::connect(gateway.listen).await {
                Ok(mut stream) => get_models(&mut stream).await.is_ok_and(|r| r.status == 200),
                Err(_) => false,
            }
        },
    )
    .await;
}
