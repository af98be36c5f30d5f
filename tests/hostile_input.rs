//! Bad clients: each gets a clear status and an OpenAI-style error, and none
//! crashes or stalls the gateway for anybody else.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;

use support::*;

async fn gateway_with_engine(engine: &FakeEngine, server: &str) -> Gateway {
    let config = format!(
        "[server]\nrequire_api_key = false\n{server}\n{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"e\" }}]\n\n[health]\nenabled = false\n",
        provider("e", &engine.url())
    );
    Gateway::start(&config).await
}

async fn expect_error(response: reqwest::Response, status: u16) -> Value {
    assert_eq!(response.status().as_u16(), status);
    let body: Value = response.json().await.expect("an OpenAI-style JSON error");
    assert!(body["error"]["message"].is_string(), "{body}");
    assert!(body["error"]["type"].is_string(), "{body}");
    body
}

#[tokio::test]
async fn malformed_bodies_get_400_naming_the_problem() {
    let engine = FakeEngine::start("e", &[]);
    let gateway = gateway_with_engine(&engine, "").await;
    let http = client();
    let post = |body: Vec<u8>| {
        http.post(gateway.url("/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    for (body, needle) in [
        (&b""[..], "empty"),
        (b"   ", "empty"),
        (b"[]", "JSON object"),
        (b"\"chat\"", "JSON object"),
        (b"{\"model\": \"chat\"", "not valid JSON"),
        (b"{\"model\": \"\xff\xfe\"}", "not valid JSON"),
        (b"{\"model\": [\"chat\"]}", "`model` must be a string"),
        (b"{\"model\": null}", "`model` must be a string"),
        (b"{\"model\": \"\"}", "must not be empty"),
        (b"{\"messages\": []}", "model"),
    ] {
        let body = expect_error(post(body.to_vec()).await.unwrap(), 400).await;
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(needle),
            "{message:?} should mention {needle:?}"
        );
    }
    assert_eq!(engine.chat_requests().await, 0);
}

#[tokio::test]
async fn wrong_content_type_gets_415() {
    let engine = FakeEngine::start("e", &[]);
    let gateway = gateway_with_engine(&engine, "").await;
    for content_type in [
        "text/plain",
        "multipart/form-data; boundary=x",
        "application/xml",
    ] {
        let response = client()
            .post(gateway.url("/v1/chat/completions"))
            .header("content-type", content_type)
            .body(r#"{"model":"chat","messages":[]}"#)
            .send()
            .await
            .unwrap();
        let body = expect_error(response, 415).await;
        assert_eq!(body["error"]["code"], "unsupported_media_type");
    }
    // JSON with parameters, and no content type at all, are fine.
    for content_type in [Some("application/json; charset=utf-8"), None] {
        let mut request = client()
            .post(gateway.url("/v1/chat/completions"))
            .body(r#"{"model":"chat","max_tokens":1,"messages":[]}"#);
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        assert_eq!(request.send().await.unwrap().status(), 200);
    }
}

#[tokio::test]
async fn invalid_token_ids_header_gets_400() {
    let engine = FakeEngine::start("e", &[]);
    let gateway = gateway_with_engine(&engine, "").await;
    for value in ["1,2,x", "-1", "1,,2", "99999999999"] {
        let response = client()
            .post(gateway.url("/v1/chat/completions"))
            .header("x-rolter-token-ids", value)
            .json(&chat_body("chat", "x"))
            .send()
            .await
            .unwrap();
        let body = expect_error(response, 400).await;
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("x-rolter-token-ids"),
            "{body}"
        );
    }
    let response = client()
        .post(gateway.url("/v1/chat/completions"))
        .header("x-rolter-token-ids", "1, 2, 3")
        .json(&chat_body("chat", "x"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn oversized_bodies_and_headers_are_refused_cleanly() {
    let engine = FakeEngine::start("e", &[]);
    let gateway = gateway_with_engine(&engine, "max_body_bytes = 65536").await;
    // Declared too large: refused before reading.
    let response = client()
        .post(gateway.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(vec![b' '; 70_000])
        .send()
        .await
        .unwrap();
    expect_error(response, 413).await;

    // Headers far past any sane size: refused, and the gateway lives on.
    let huge = "x".repeat(2 * 1024 * 1024);
    let result = client()
        .post(gateway.url("/v1/chat/completions"))
        .header("x-padding", huge)
        .json(&chat_body("chat", "x"))
        .send()
        .await;
    if let Ok(response) = result {
        assert!(response.status().is_client_error(), "{}", response.status());
    }
    assert_eq!(gateway.chat("chat", "still alive").await.status(), 200);
}

#[tokio::test]
async fn unknown_paths_and_methods_get_openai_errors() {
    let engine = FakeEngine::start("e", &[]);
    let gateway = gateway_with_engine(&engine, "").await;
    let http = client();
    for path in [
        "/",
        "/v1",
        "/v1/chat",
        "/v2/chat/completions",
        "/admin/reload",
    ] {
        let response = http
            .post(gateway.url(path))
            .body("{}")
            .send()
            .await
            .unwrap();
        let body = expect_error(response, 404).await;
        assert_eq!(body["error"]["code"], "unknown_url");
    }
    let response = http.delete(gateway.url("/v1/models")).send().await.unwrap();
    expect_error(response, 405).await;
}

#[tokio::test]
async fn slow_clients_do_not_stall_anyone_else() {
    let engine = FakeEngine::start("e", &[]);
    let gateway = gateway_with_engine(&engine, "").await;
    // Slowloris: many connections that send half a request and stop.
    let mut idle = Vec::new();
    for _ in 0..50 {
        let mut stream = TcpStream::connect(gateway.listen).unwrap();
        stream
            .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
            .unwrap();
        idle.push(stream);
    }
    // And one that sends its headers, then trickles its body and stops.
    let mut trickler = TcpStream::connect(gateway.listen).unwrap();
    trickler
        .write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\"")
        .unwrap();

    let started = Instant::now();
    for i in 0..10 {
        assert_eq!(gateway.chat("chat", &format!("{i}")).await.status(), 200);
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    // The stalled body is cut with a 408 once the read timeout passes.
    let answered = tokio::task::spawn_blocking(move || {
        trickler
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let mut response = Vec::new();
        let _ = trickler.read_to_end(&mut response);
        String::from_utf8_lossy(&response).into_owned()
    })
    .await
    .unwrap();
    assert!(answered.starts_with("HTTP/1.1 408"), "{answered}");
    assert!(answered.contains("request_timeout"), "{answered}");
    drop(idle);
}
