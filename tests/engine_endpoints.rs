//! The engines' own endpoints through the gateway: rerank, score,
//! tokenize, detokenize and the audio endpoints (a `multipart/form-data`
//! body, routed by its `model` field), each routed by `model` with its
//! upstream name written in; a route's `endpoints` list closing what the
//! operator does not serve; the official `openai` SDK's audio client.

mod support;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use support::*;

/// Two engines serving a reranker and a speech model under their upstream
/// names; the gateway's public names differ, so a request the engine
/// accepts is one whose model the gateway rewrote.
async fn fleet() -> (FakeEngine, FakeEngine, Gateway) {
    let args = ["--model", "bge-reranker-v2", "--model", "whisper-v3"];
    let (a, b) = (FakeEngine::start("a", &args), FakeEngine::start("b", &args));
    let mut config = String::from("[health]\nenabled = false\n\n");
    config.push_str(&provider("a", &a.url()));
    config.push_str(&provider("b", &b.url()));
    config.push_str(
        "[[routes]]\nmodel = \"ranker\"\nstrategy = \"power_of_two\"\n\
         targets = [{ provider = \"a\", model = \"bge-reranker-v2\" }, { provider = \"b\", model = \"bge-reranker-v2\" }]\n\n\
         [[routes]]\nmodel = \"speech\"\nendpoints = [\"audio/transcriptions\", \"audio/translations\"]\n\
         targets = [{ provider = \"a\", model = \"whisper-v3\" }, { provider = \"b\", model = \"whisper-v3\" }]\n",
    );
    let gateway = Gateway::start(&config).await;
    (a, b, gateway)
}

async fn post_json(gateway: &Gateway, path: &str, body: Value) -> (u16, String, Value) {
    let response = client()
        .post(gateway.url(path))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let engine = served_by(&response);
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or_else(|_| panic!("{path}: not JSON: {text}"));
    (status, engine, body)
}

#[tokio::test]
async fn rerank_score_tokenize_and_detokenize_are_routed_by_model() {
    let (_a, _b, gateway) = fleet().await;
    let documents = [
        "The capital of Brazil is Brasilia.",
        "The capital of France is Paris.",
    ];
    for path in ["/v1/rerank", "/rerank", "/v2/rerank"] {
        let (status, engine, body) = post_json(
            &gateway,
            path,
            json!({"model": "ranker", "query": "capital of France", "documents": documents, "top_n": 1}),
        )
        .await;
        assert_eq!(status, 200, "{path}: {body}");
        assert!(engine == "a" || engine == "b", "{path} served by {engine}");
        assert_eq!(body["fake"]["received_model"], "bge-reranker-v2", "{body}");
        let results = body["results"].as_array().unwrap();
        assert_eq!(results.len(), 1, "top_n is the engine's to apply: {body}");
        assert_eq!(results[0]["index"], 1, "{body}");
    }
    for path in ["/v1/score", "/score"] {
        let (status, _, body) = post_json(
            &gateway,
            path,
            json!({"model": "ranker", "text_1": "capital of France", "text_2": documents}),
        )
        .await;
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(body["object"], "list");
        assert_eq!(body["data"].as_array().unwrap().len(), 2, "{body}");
        assert_eq!(body["fake"]["received_model"], "bge-reranker-v2");
    }
    let (status, _, tokens) = post_json(
        &gateway,
        "/tokenize",
        json!({"model": "ranker", "prompt": "capital of France"}),
    )
    .await;
    assert_eq!(status, 200, "{tokens}");
    assert_eq!(tokens["count"], 3, "{tokens}");
    let (status, _, text) = post_json(
        &gateway,
        "/detokenize",
        json!({"model": "ranker", "tokens": tokens["tokens"]}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(text["fake"]["received_model"], "bge-reranker-v2");
    assert!(text["prompt"].as_str().unwrap().starts_with('<'), "{text}");

    // The gateway's own checks come first, in OpenAI's shape.
    let (status, _, body) = post_json(&gateway, "/v1/rerank", json!({"query": "x"})).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "model", "{body}");
    let (status, _, body) = post_json(&gateway, "/v1/score", json!({"model": "nope"})).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "model_not_found", "{body}");
    let wrong_method = client()
        .get(gateway.url("/v1/rerank"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_method.status(), 405);
}

#[tokio::test]
async fn a_routes_endpoint_list_closes_what_it_leaves_out() {
    let (a, b, gateway) = fleet().await;
    for (path, body) in [
        ("/v1/chat/completions", chat_body("speech", "hi")),
        (
            "/v1/rerank",
            json!({"model": "speech", "query": "q", "documents": ["d"]}),
        ),
        ("/tokenize", json!({"model": "speech", "prompt": "p"})),
    ] {
        let (status, _, answer) = post_json(&gateway, path, body).await;
        assert_eq!(status, 404, "{path}: {answer}");
        assert_eq!(answer["error"]["code"], "endpoint_not_served", "{answer}");
        assert_eq!(answer["error"]["param"], "model", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("`speech`") && message.contains("endpoints"),
            "{message}"
        );
    }
    // Refused at the gateway: no engine saw them.
    for engine in [&a, &b] {
        let stats = engine.stats().await;
        assert_eq!(stats["requests"], 0, "{stats}");
    }
    // The route without a list serves every endpoint, chat included.
    let (status, _, _) =
        post_json(&gateway, "/v1/chat/completions", chat_body("ranker", "hi")).await;
    assert_eq!(status, 200);
}

/// A form as the `openai` SDKs and curl write it, fields in `order`.
fn form(boundary: &str, fields: &[(&str, &[u8])]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        let disposition = match *name {
            "file" => "Content-Disposition: form-data; name=\"file\"; filename=\"clip.wav\"\r\nContent-Type: audio/wav\r\n".to_string(),
            _ => format!("Content-Disposition: form-data; name=\"{name}\"\r\n"),
        };
        body.extend_from_slice(disposition.as_bytes());
        body.extend_from_slice(b"\r\n");
        body.extend_from_slice(value);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    body
}

async fn post_form(
    gateway: &Gateway,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> reqwest::Response {
    client()
        .post(gateway.url(path))
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn audio_forms_are_routed_by_their_model_field_and_rewritten_in_place() {
    let (_a, _b, gateway) = fleet().await;
    // 2 MiB of audio that holds CRLFs, dashes and the boundary's letters,
    // with `model` after it, so the reader walks the whole file.
    let audio: Vec<u8> = (0..2 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let digest = hex::encode(Sha256::digest(&audio));
    let boundary = "rolter-test-boundary";
    let content_type = format!("multipart/form-data; boundary={boundary}");
    let body = form(
        boundary,
        &[("file", &audio), ("language", b"fr"), ("model", b"speech")],
    );
    let sent = body.len();
    let response = post_form(&gateway, "/v1/audio/transcriptions", &content_type, body).await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(
        answer["text"],
        format!(
            "heard {} bytes of audio {} in fr",
            audio.len(),
            &digest[..16]
        ),
        "the audio reached the engine intact: {answer}"
    );
    assert_eq!(answer["fake"]["received_model"], "whisper-v3");
    // Only the model's value changed: "speech" became "whisper-v3".
    assert_eq!(
        answer["fake"]["body_bytes"],
        sent + "whisper-v3".len() - "speech".len()
    );

    // Streaming: vLLM's transcription chunks, unbuffered, then [DONE].
    let body = form(
        boundary,
        &[
            ("model", b"speech"),
            ("stream", b"true"),
            ("file", &audio[..64_000]),
        ],
    );
    let response = post_form(&gateway, "/v1/audio/translations", &content_type, body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let text = response.text().await.unwrap();
    let pieces: String = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .filter(|data| *data != "[DONE]")
        .map(|data| {
            serde_json::from_str::<Value>(data).unwrap()["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(pieces.starts_with("heard 64000 bytes of audio"), "{text}");
    assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");

    // What the gateway refuses, naming what was wrong.
    let json_body = post_form(
        &gateway,
        "/v1/audio/transcriptions",
        "application/json",
        b"{\"model\":\"speech\"}".to_vec(),
    )
    .await;
    assert_eq!(json_body.status(), 415);
    let answer: Value = json_body.json().await.unwrap();
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("multipart/form-data"), "{message}");
    let no_model = post_form(
        &gateway,
        "/v1/audio/transcriptions",
        &content_type,
        form(boundary, &[("file", b"abc")]),
    )
    .await;
    assert_eq!(no_model.status(), 400);
    let answer: Value = no_model.json().await.unwrap();
    assert_eq!(answer["error"]["param"], "model", "{answer}");
    let mut cut = form(boundary, &[("file", b"abc"), ("model", b"speech")]);
    cut.truncate(cut.len() - 20);
    let truncated = post_form(&gateway, "/v1/audio/transcriptions", &content_type, cut).await;
    assert_eq!(truncated.status(), 400);
    let answer: Value = truncated.json().await.unwrap();
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("multipart"),
        "{answer}"
    );
    // A JSON endpoint still wants JSON.
    let form_to_chat = post_form(
        &gateway,
        "/v1/chat/completions",
        &content_type,
        form(boundary, &[("model", b"ranker")]),
    )
    .await;
    assert_eq!(form_to_chat.status(), 415);
}

#[tokio::test]
async fn official_openai_client_transcribes_and_translates() {
    let (_a, _b, gateway) = fleet().await;
    sdk_script(
        "audio_client.py",
        "openai",
        gateway.url("/v1"),
        "unused",
        "speech",
    )
    .await;
}
