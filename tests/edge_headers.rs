//! The gateway at the edge, as nginx would be: what the engine is told about
//! the client (`X-Forwarded-*`, `X-Real-IP`), the request id both ways, the
//! headers that never cross (the caller's key, hop-by-hop headers), and the
//! access log (both formats, rotation on SIGUSR1, reload).

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use support::*;

const CALLER_KEY: &str = "caller-secret-key";
const ENGINE_KEY: &str = "engine-secret-key";

/// One engine behind route `chat` (upstream model `Qwen/Qwen3-8B`), the
/// caller key `team` required, and `server` lines added to `[server]`.
fn edge_config(engine: &FakeEngine, server: &str) -> String {
    format!(
        "[server]\nrequire_api_key = true\n{server}\n\n\
         [[providers]]\nname = \"gpu-a\"\nbase_url = \"{}\"\napi_key_env = \"ENGINE_KEY\"\n\n\
         [[routes]]\nmodel = \"chat\"\nstrategy = \"round_robin\"\ntargets = [{{ provider = \"gpu-a\", model = \"Qwen/Qwen3-8B\" }}]\n\n\
         [[api_keys]]\nname = \"team\"\nkey_env = \"TEAM_KEY\"\n\n[health]\nenabled = false\n",
        engine.url()
    )
}

async fn start(config: &str) -> Gateway {
    Gateway::start_with_env(
        config,
        &[("TEAM_KEY", CALLER_KEY), ("ENGINE_KEY", ENGINE_KEY)],
    )
    .await
}

/// A response read off a raw connection.
struct RawResponse {
    status: u16,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

impl RawResponse {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }
}

/// Sends `head` (request line and headers, without the blank line) and
/// `body` on a fresh connection, exactly as written, so that no client
/// library adds or drops a header; the request must ask for
/// `Connection: close` (the response is read to the end of the stream).
async fn raw_request(gateway: &Gateway, head: &str, body: &str) -> RawResponse {
    let mut stream = tokio::net::TcpStream::connect(gateway.listen)
        .await
        .expect("connect");
    let request = format!("{head}\r\nContent-Length: {}\r\n\r\n{body}", body.len());
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut raw))
        .await
        .expect("response in time")
        .expect("read");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of the response header");
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers
        .get("transfer-encoding")
        .is_some_and(|v| v.contains("chunked"))
    {
        body = chunked::split(&body).concat();
    }
    RawResponse {
        status,
        headers,
        body,
    }
}

fn chat_json(model: &str) -> String {
    json!({"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
        .to_string()
}

/// The headers the engine received, from the `fake` echo.
fn received(body: &Value) -> &serde_json::Map<String, Value> {
    body["fake"]["received_headers"]
        .as_object()
        .unwrap_or_else(|| panic!("no received_headers in {body}"))
}

/// A chat request's head with the caller's key and `extra` header lines.
fn chat_head(extra: &[&str]) -> String {
    let mut head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: api.example.test\r\nContent-Type: application/json\r\nAuthorization: Bearer {CALLER_KEY}"
    );
    for line in extra {
        head.push_str("\r\n");
        head.push_str(line);
    }
    head
}

#[tokio::test]
async fn an_untrusted_client_cannot_forge_forwarding_headers_and_hop_headers_stop_here() {
    let engine = FakeEngine::start("gpu-a", &[]);
    let gateway = start(&edge_config(&engine, "")).await;
    let head = chat_head(&[
        "X-Forwarded-For: 198.51.100.66, 10.9.9.9",
        "X-Forwarded-Proto: https",
        "X-Forwarded-Host: evil.example",
        "X-Real-IP: 198.51.100.66",
        "Forwarded: for=198.51.100.66",
        "Connection: close, X-Custom",
        "X-Custom: hop-only",
        "Keep-Alive: timeout=5",
        "TE: trailers",
        "Upgrade: h2c",
        "Proxy-Authorization: Basic cHJveHk6c2VjcmV0",
        "X-End-To-End: kept",
        // The gateway compresses nothing, whatever the client accepts.
        "Accept-Encoding: gzip, br, zstd",
    ]);
    let response = raw_request(&gateway, &head, &chat_json("chat")).await;
    assert_eq!(
        response.status,
        200,
        "{}",
        String::from_utf8_lossy(&response.body)
    );
    assert!(
        !response.headers.contains_key("content-encoding"),
        "{:?}",
        response.headers
    );
    let body = response.json();
    let seen = received(&body);

    // 127.0.0.1 is not a trusted proxy: it is the client, whatever it says.
    assert_eq!(seen["x-forwarded-for"], "127.0.0.1", "{seen:?}");
    assert_eq!(seen["x-real-ip"], "127.0.0.1");
    assert_eq!(seen["x-forwarded-proto"], "http");
    assert_eq!(seen["x-forwarded-host"], "api.example.test");
    assert!(!seen.contains_key("forwarded"), "{seen:?}");

    // The caller's key never reaches the engine; the provider's key does.
    assert_eq!(seen["authorization"], format!("Bearer {ENGINE_KEY}"));
    assert!(
        !serde_json::to_string(seen).unwrap().contains(CALLER_KEY),
        "{seen:?}"
    );

    // Hop-by-hop headers, and the one `Connection` named, stop at the gateway.
    for name in [
        "x-custom",
        "keep-alive",
        "te",
        "upgrade",
        "proxy-authorization",
        "proxy-connection",
    ] {
        assert!(
            !seen.contains_key(name),
            "{name} reached the engine: {seen:?}"
        );
    }
    if let Some(connection) = seen.get("connection") {
        let connection = connection.as_str().unwrap().to_ascii_lowercase();
        assert!(!connection.contains("x-custom"), "{connection}");
    }
    assert_eq!(seen["x-end-to-end"], "kept");
    // A generated request id, the same on both sides.
    let id = &response.headers["x-request-id"];
    assert_eq!(id.len(), 32, "{id}");
    assert_eq!(seen["x-request-id"], id.as_str());
    assert_ne!(seen["host"], "api.example.test");
}

/// `Content-Length` given again (RFC 9110 §8.6): the same number, on its
/// own line or in a list, frames the body as one; any other second value,
/// or a value that is not all digits, is a request without a length.
#[tokio::test]
async fn a_length_given_twice_frames_the_body_only_when_both_agree() {
    let engine = FakeEngine::start("gpu-a", &[]);
    let gateway = start(&edge_config(&engine, "")).await;
    let body = chat_json("chat");
    let len = body.len();
    for (extra, status) in [
        (format!("Content-Length: {len}"), 200),
        (format!("Content-Length: {len}, {len}"), 200),
        (format!("Content-Length: {len} ,{len}"), 200),
        (format!("Content-Length: {}", len + 1), 400),
        (format!("Content-Length: {len}, {}", len - 1), 400),
        (format!("Content-Length: +{len}"), 400),
        (format!("Content-Length: {len}x"), 400),
    ] {
        let head = chat_head(&["Connection: close", &extra]);
        let response = raw_request(&gateway, &head, &body).await;
        assert_eq!(
            response.status,
            status,
            "{extra}: {}",
            String::from_utf8_lossy(&response.body)
        );
        if status == 200 {
            // One length, the rewritten body's, goes on.
            let body = response.json();
            let sent = received(&body)["content-length"].as_str().unwrap();
            assert!(sent.parse::<usize>().is_ok(), "{extra}: {sent}");
        }
    }
}

#[tokio::test]
async fn a_trusted_proxys_chain_is_kept_and_names_the_client() {
    let engine = FakeEngine::start("gpu-a", &[]);
    let gateway = start(&edge_config(
        &engine,
        "trusted_proxies = [\"127.0.0.1/32\"]",
    ))
    .await;
    let head = chat_head(&[
        // One chain over two header lines.
        "X-Forwarded-For: 198.51.100.7, 203.0.113.9",
        "X-Forwarded-For: 127.0.0.1",
        "X-Forwarded-Proto: https",
        "X-Forwarded-Host: api.example.com",
        "Connection: close",
    ]);
    let response = raw_request(&gateway, &head, &chat_json("chat")).await;
    assert_eq!(response.status, 200);
    let body = response.json();
    let seen = received(&body);
    assert_eq!(
        seen["x-forwarded-for"], "198.51.100.7, 203.0.113.9, 127.0.0.1, 127.0.0.1",
        "{seen:?}"
    );
    // Walking from the right: 127.0.0.1 (the peer) and 127.0.0.1 are
    // trusted, 203.0.113.9 is not: that is the client; what it claims about
    // 198.51.100.7 is not believed.
    assert_eq!(seen["x-real-ip"], "203.0.113.9");
    assert_eq!(seen["x-forwarded-proto"], "https");
    assert_eq!(seen["x-forwarded-host"], "api.example.com");
}

#[tokio::test]
async fn the_request_id_is_kept_or_generated_and_travels_both_ways() {
    let engine = FakeEngine::start("gpu-a", &[]);
    let gateway = start(&edge_config(&engine, "")).await;
    let http = client();
    let chat = |id: Option<&str>| {
        let mut request = http
            .post(gateway.url("/v1/chat/completions"))
            .bearer_auth(CALLER_KEY)
            .json(&chat_body("chat", "hi"));
        if let Some(id) = id {
            request = request.header("x-request-id", id);
        }
        request.send()
    };

    // A sane id is kept, at the engine and in the response.
    let response = chat(Some("client-req-42")).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-request-id"], "client-req-42");
    let body: Value = response.json().await.unwrap();
    assert_eq!(received(&body)["x-request-id"], "client-req-42");

    // Absent: generated, 32 hex digits, the same at the engine and client.
    let mut generated = Vec::new();
    for _ in 0..2 {
        let response = chat(None).await.unwrap();
        let id = response.headers()["x-request-id"]
            .to_str()
            .unwrap()
            .to_string();
        assert_eq!(id.len(), 32, "{id}");
        assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(received(&body)["x-request-id"], id.as_str());
        generated.push(id);
    }
    assert_ne!(generated[0], generated[1]);

    // Not sane (too long): replaced by a generated one, everywhere.
    let long = "x".repeat(200);
    let response = chat(Some(&long)).await.unwrap();
    let id = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(id.len(), 32);
    let body: Value = response.json().await.unwrap();
    assert_eq!(received(&body)["x-request-id"], id.as_str());

    // The gateway's own error answers carry it too.
    let response = http
        .post(gateway.url("/v1/chat/completions"))
        .bearer_auth(CALLER_KEY)
        .header("x-request-id", "err-req-1")
        .json(&chat_body("no-such-model", "hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    assert_eq!(response.headers()["x-request-id"], "err-req-1");
    let response = http
        .post(gateway.url("/v1/chat/completions"))
        .json(&chat_body("chat", "hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(
        response.headers()["x-request-id"].to_str().unwrap().len(),
        32
    );
}

// ---- access log ---------------------------------------------------------------

/// Splits a `combined` line into its fields: spaces separate, except
/// inside `[...]` and `"..."`.
fn combined_fields(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut current = String::new();
    let (mut quoted, mut bracketed) = (false, false);
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            '[' if !quoted => bracketed = true,
            ']' if !quoted => bracketed = false,
            ' ' if !quoted && !bracketed => {
                fields.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    fields.push(current);
    fields
}

/// A `combined` line as a map: the nginx part under fixed names, then the
/// `key=value` pairs (quotes removed).
fn parse_combined(line: &str) -> HashMap<String, String> {
    let fields = combined_fields(line);
    assert!(fields.len() > 9, "{line}");
    let unquote = |s: &str| s.trim_matches('"').to_string();
    let mut map = HashMap::new();
    map.insert("remote_addr".into(), fields[0].clone());
    assert_eq!(fields[1], "-");
    assert_eq!(fields[2], "-");
    assert!(
        fields[3].starts_with('[') && fields[3].ends_with(" +0000]"),
        "{line}"
    );
    map.insert("request".into(), unquote(&fields[4]));
    map.insert("status".into(), fields[5].clone());
    map.insert("body_bytes_sent".into(), fields[6].clone());
    map.insert("http_referer".into(), unquote(&fields[7]));
    map.insert("http_user_agent".into(), unquote(&fields[8]));
    for pair in &fields[9..] {
        let (key, value) = pair
            .split_once('=')
            .unwrap_or_else(|| panic!("{pair} in {line}"));
        map.insert(key.to_string(), unquote(value));
    }
    map
}

/// A gateway over two engines (`sick` answers 500, `good` answers), route
/// `chat` round robin over both and route `solo` on `good` only, the access
/// log in `dir/access.log`.
struct LogSetup {
    gateway: Gateway,
    log: PathBuf,
    dir: tempfile::TempDir,
    _sick: FakeEngine,
    _good: FakeEngine,
}

fn log_config(sick: &FakeEngine, good: &FakeEngine, log: &Path, format: &str) -> String {
    format!(
        "[server]\nrequire_api_key = true\naccess_log = \"{}\"\naccess_log_format = \"{format}\"\n\n\
         {}{}\
         [[routes]]\nmodel = \"chat\"\nstrategy = \"round_robin\"\ntargets = [{{ provider = \"sick\" }}, {{ provider = \"good\" }}]\n\n\
         [[routes]]\nmodel = \"solo\"\nstrategy = \"random\"\ntargets = [{{ provider = \"good\", model = \"Qwen/Qwen3-8B\" }}]\n\n\
         [[api_keys]]\nname = \"team\"\nkey_env = \"TEAM_KEY\"\n\n\
         [health]\nenabled = false\n\n[parking]\nbase_secs = 60\n",
        log.display(),
        provider("sick", &sick.url()),
        provider("good", &good.url()),
    )
}

async fn log_setup(format: &str) -> LogSetup {
    let sick = FakeEngine::start("sick", &["--fail-status", "500"]);
    let good = FakeEngine::start("good", &[]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.log");
    let gateway = start(&log_config(&sick, &good, &log, format)).await;
    LogSetup {
        gateway,
        log,
        dir,
        _sick: sick,
        _good: good,
    }
}

/// A chat request with `id` as its request id; returns status and body length.
async fn logged_chat(gateway: &Gateway, model: &str, id: &str, key: Option<&str>) -> (u16, usize) {
    let mut request = client()
        .post(gateway.url("/v1/chat/completions"))
        .header("x-request-id", id)
        .header("user-agent", "edge-test/1.0")
        .json(&chat_body(model, "hello"));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let body = response.bytes().await.unwrap();
    (status, body.len())
}

fn request_bytes(model: &str) -> usize {
    serde_json::to_vec(&chat_body(model, "hello"))
        .unwrap()
        .len()
}

#[tokio::test]
async fn json_access_log_records_success_failover_and_client_errors() {
    let setup = log_setup("json").await;
    let gateway = &setup.gateway;

    // Success.
    let (status, sent) = logged_chat(gateway, "solo", "log-ok", Some(CALLER_KEY)).await;
    assert_eq!(status, 200);
    let line: Value = serde_json::from_str(&line_with(&setup.log, "\"log-ok\"").await).unwrap();
    assert_eq!(line["request_id"], "log-ok");
    assert_eq!(line["client"], "127.0.0.1");
    assert_eq!(line["peer"], "127.0.0.1");
    assert_eq!(line["method"], "POST");
    assert_eq!(line["path"], "/v1/chat/completions");
    assert_eq!(line["protocol"], "HTTP/1.1");
    assert_eq!(line["status"], 200);
    assert_eq!(line["key"], "team");
    assert_eq!(line["model"], "solo");
    assert_eq!(line["route"], "solo");
    assert_eq!(line["strategy"], "random");
    assert_eq!(line["target"], "good/Qwen/Qwen3-8B");
    assert_eq!(line["attempts"], 1);
    assert_eq!(line["upstream_status"], 200);
    assert_eq!(line["bytes_sent"], sent);
    assert_eq!(line["request_bytes"], request_bytes("solo"));
    assert_eq!(line["client_cancel"], false);
    assert_eq!(line["error"], Value::Null);
    assert_eq!(line["user_agent"], "edge-test/1.0");
    let ttfb = line["ttfb_ms"].as_f64().unwrap();
    let total = line["total_ms"].as_f64().unwrap();
    assert!(ttfb > 0.0 && ttfb <= total, "{line}");
    assert!(line["time"].as_str().unwrap().ends_with('Z'));

    // Failover: round robin reaches `sick` first on one of two requests;
    // that one is logged with two attempts and served by `good`.
    for id in ["log-fo-1", "log-fo-2"] {
        assert_eq!(
            logged_chat(gateway, "chat", id, Some(CALLER_KEY)).await.0,
            200
        );
    }
    let mut attempts = Vec::new();
    for id in ["log-fo-1", "log-fo-2"] {
        let line: Value =
            serde_json::from_str(&line_with(&setup.log, &format!("\"{id}\"")).await).unwrap();
        assert_eq!(line["status"], 200);
        assert_eq!(line["target"], "good/chat");
        assert_eq!(line["upstream_status"], 200);
        assert_eq!(line["strategy"], "round_robin");
        attempts.push(line["attempts"].as_u64().unwrap());
    }
    attempts.sort();
    assert_eq!(attempts, [1, 2], "exactly one request failed over");

    // Client errors: an unknown model, and no key.
    assert_eq!(
        logged_chat(gateway, "nope", "log-404", Some(CALLER_KEY))
            .await
            .0,
        404
    );
    let line: Value = serde_json::from_str(&line_with(&setup.log, "\"log-404\"").await).unwrap();
    assert_eq!(line["status"], 404);
    assert_eq!(line["error"], "model_not_found");
    assert_eq!(line["model"], "nope");
    assert_eq!(line["route"], Value::Null);
    assert_eq!(line["target"], Value::Null);
    assert_eq!(line["attempts"], 0);
    assert_eq!(line["upstream_status"], Value::Null);
    assert_eq!(line["ttfb_ms"], Value::Null);
    assert!(line["bytes_sent"].as_u64().unwrap() > 0);

    assert_eq!(logged_chat(gateway, "chat", "log-401", None).await.0, 401);
    let line: Value = serde_json::from_str(&line_with(&setup.log, "\"log-401\"").await).unwrap();
    assert_eq!(line["status"], 401);
    assert_eq!(line["error"], "invalid_api_key");
    assert_eq!(line["key"], Value::Null);

    // One line per request, each a JSON object.
    let lines = lines_of(&setup.log);
    assert_eq!(lines.len(), 5, "{lines:#?}");
    for line in &lines {
        serde_json::from_str::<Value>(line).unwrap();
    }
    let metrics = gateway.metrics().await;
    assert!(
        metrics.contains("rolter_access_log_dropped_total{reason=\"queue_full\"} 0"),
        "{metrics}"
    );
}

#[tokio::test]
async fn combined_access_log_is_nginx_combined_plus_rolter_fields() {
    let setup = log_setup("combined").await;
    let gateway = &setup.gateway;

    let (status, sent) = logged_chat(gateway, "solo", "c-ok", Some(CALLER_KEY)).await;
    assert_eq!(status, 200);
    let line = parse_combined(&line_with(&setup.log, "request_id=c-ok ").await);
    assert_eq!(line["remote_addr"], "127.0.0.1");
    assert_eq!(line["request"], "POST /v1/chat/completions HTTP/1.1");
    assert_eq!(line["status"], "200");
    assert_eq!(line["body_bytes_sent"], sent.to_string());
    assert_eq!(line["http_referer"], "-");
    assert_eq!(line["http_user_agent"], "edge-test/1.0");
    assert_eq!(line["key"], "team");
    assert_eq!(line["model"], "solo");
    assert_eq!(line["route"], "solo");
    assert_eq!(line["strategy"], "random");
    assert_eq!(line["target"], "good/Qwen/Qwen3-8B");
    assert_eq!(line["attempts"], "1");
    assert_eq!(line["upstream_status"], "200");
    assert_eq!(line["request_bytes"], request_bytes("solo").to_string());
    assert_eq!(line["client_cancel"], "false");
    assert_eq!(line["error"], "-");
    assert_eq!(line["peer"], "127.0.0.1");
    let ttfb: f64 = line["ttfb_ms"].parse().unwrap();
    let total: f64 = line["total_ms"].parse().unwrap();
    assert!(ttfb <= total);

    for id in ["c-fo-1", "c-fo-2"] {
        assert_eq!(
            logged_chat(gateway, "chat", id, Some(CALLER_KEY)).await.0,
            200
        );
    }
    let mut attempts = Vec::new();
    for id in ["c-fo-1", "c-fo-2"] {
        let line = parse_combined(&line_with(&setup.log, &format!("request_id={id} ")).await);
        assert_eq!(line["status"], "200");
        assert_eq!(line["target"], "good/chat");
        attempts.push(line["attempts"].clone());
    }
    attempts.sort();
    assert_eq!(attempts, ["1", "2"]);

    // A model name with a space and a quote is quoted and escaped, and the
    // line stays one line with the same fields.
    assert_eq!(
        logged_chat(gateway, "no \"such\" model", "c-404", Some(CALLER_KEY))
            .await
            .0,
        404
    );
    let line = parse_combined(&line_with(&setup.log, "request_id=c-404 ").await);
    assert_eq!(line["status"], "404");
    assert_eq!(line["error"], "model_not_found");
    assert_eq!(line["model"], "no \\x22such\\x22 model");
    assert_eq!(line["target"], "-");
    assert_eq!(line["upstream_status"], "-");
    assert_eq!(line["attempts"], "0");
    assert_eq!(lines_of(&setup.log).len(), 4);
}

#[tokio::test]
async fn sigusr1_reopens_the_access_log_after_a_rename() {
    let setup = log_setup("json").await;
    let gateway = &setup.gateway;
    assert_eq!(
        logged_chat(gateway, "solo", "rot-1", Some(CALLER_KEY))
            .await
            .0,
        200
    );
    line_with(&setup.log, "\"rot-1\"").await;

    let rotated = setup.dir.path().join("access.log.1");
    std::fs::rename(&setup.log, &rotated).unwrap();
    // Until the signal, lines still go to the renamed file (same inode).
    assert_eq!(
        logged_chat(gateway, "solo", "rot-2", Some(CALLER_KEY))
            .await
            .0,
        200
    );
    line_with(&rotated, "\"rot-2\"").await;

    gateway.process.signal(libc::SIGUSR1);
    let log = setup.log.clone();
    wait_until(Duration::from_secs(10), "the access log reopened", || {
        let exists = log.exists();
        async move { exists }
    })
    .await;
    assert_eq!(
        logged_chat(gateway, "solo", "rot-3", Some(CALLER_KEY))
            .await
            .0,
        200
    );
    line_with(&setup.log, "\"rot-3\"").await;

    let old = lines_of(&rotated);
    let new = lines_of(&setup.log);
    assert_eq!(old.len(), 2, "{old:#?}");
    assert_eq!(new.len(), 1, "{new:#?}");
    assert!(old.iter().all(|l| !l.contains("rot-3")));
    // The gateway is still up and serving.
    assert!(gateway.process.log_text().contains("reopened"));
}

#[tokio::test]
async fn the_access_log_follows_a_reload() {
    let setup = log_setup("json").await;
    let gateway = &setup.gateway;
    assert_eq!(
        logged_chat(gateway, "solo", "rl-1", Some(CALLER_KEY))
            .await
            .0,
        200
    );
    line_with(&setup.log, "\"rl-1\"").await;

    // To another file, in the combined format.
    let other = setup.dir.path().join("other.log");
    let config = log_config(&setup._sick, &setup._good, &other, "combined");
    gateway.write_config(&config);
    let (status, answer) = gateway.reload().await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        logged_chat(gateway, "solo", "rl-2", Some(CALLER_KEY))
            .await
            .0,
        200
    );
    let line = parse_combined(&line_with(&other, "request_id=rl-2 ").await);
    assert_eq!(line["status"], "200");
    assert_eq!(lines_of(&setup.log).len(), 1);

    // Off: requests served meanwhile are not logged anywhere. (Back on a
    // third file afterwards: its first line shows the queue held nothing
    // from the `off` period.)
    let off = config.replace(
        &format!("access_log = \"{}\"", other.display()),
        "access_log = \"off\"",
    );
    gateway.write_config(&off);
    assert_eq!(gateway.reload().await.0, 200);
    assert_eq!(
        logged_chat(gateway, "solo", "rl-3", Some(CALLER_KEY))
            .await
            .0,
        200
    );
    assert_eq!(
        logged_chat(gateway, "solo", "rl-4", Some(CALLER_KEY))
            .await
            .0,
        200
    );
    let third = setup.dir.path().join("third.log");
    gateway.write_config(&log_config(&setup._sick, &setup._good, &third, "json"));
    assert_eq!(gateway.reload().await.0, 200);
    assert_eq!(
        logged_chat(gateway, "solo", "rl-5", Some(CALLER_KEY))
            .await
            .0,
        200
    );
    line_with(&third, "\"rl-5\"").await;
    assert_eq!(lines_of(&third).len(), 1, "{:#?}", lines_of(&third));
    assert_eq!(lines_of(&other).len(), 1);
    assert_eq!(lines_of(&setup.log).len(), 1);
}
