//! The prefill/decode roles refuse what a real split deployment would
//! fail on, so the gateway's tests (which count refusals) prove the
//! handshake, not just a request that went through.

use serde_json::{json, Value};

use super::TestEngine;
use crate::{FakeLlmArgs, PdProtocol, PdRole};

async fn engine(role: PdRole, protocol: PdProtocol) -> TestEngine {
    TestEngine::start(FakeLlmArgs {
        pd_role: Some(role),
        pd_protocol: protocol,
        ..FakeLlmArgs::default()
    })
    .await
}

fn chat(content: &str) -> Value {
    json!({"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": 1, "stream": false})
}

fn with(mut body: Value, fields: Value) -> Value {
    for (k, v) in fields.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

async fn refused(engine: &TestEngine, body: &Value) -> String {
    let response = engine.post("/v1/chat/completions", body).await;
    assert_eq!(response.status(), 400);
    let answer: Value = response.json().await.unwrap();
    answer["error"]["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_vllm_decode_engine_takes_only_the_handle_of_its_own_prompt_once() {
    let prefill = engine(PdRole::Prefill, PdProtocol::Vllm).await;
    let decode = engine(PdRole::Decode, PdProtocol::Vllm).await;
    // A prefill engine wants a remote-decode request of one token.
    let message = refused(&prefill, &chat("hello")).await;
    assert!(message.contains("do_remote_decode"), "{message}");
    let remote =
        json!({"kv_transfer_params": {"do_remote_decode": true, "do_remote_prefill": false}});
    let streamed = with(chat("hello"), json!({"stream": true}));
    assert!(refused(&prefill, &with(streamed, remote.clone()))
        .await
        .contains("stream false"));

    let answer: Value = prefill
        .post("/v1/chat/completions", &with(chat("hello"), remote.clone()))
        .await
        .json()
        .await
        .unwrap();
    let params = answer["kv_transfer_params"].clone();
    assert_eq!(params["do_remote_prefill"], true, "{answer}");
    // The handle of another prompt is refused.
    let other = with(
        chat("goodbye"),
        json!({ "kv_transfer_params": params.clone() }),
    );
    assert!(refused(&decode, &other).await.contains("another prompt"));
    // That pull spent it: a handle is given out once, as blocks are pulled
    // once, so even the right prompt finds nothing now.
    let same = with(
        chat("hello"),
        json!({ "kv_transfer_params": params.clone() }),
    );
    assert!(refused(&decode, &same).await.contains("KV transfer"));

    // A fresh prefill and the matching decode go through, with the whole
    // prompt arriving cached.
    let answer: Value = prefill
        .post("/v1/chat/completions", &with(chat("hello"), remote))
        .await
        .json()
        .await
        .unwrap();
    let params = answer["kv_transfer_params"].clone();
    let response = decode
        .post(
            "/v1/chat/completions",
            &with(chat("hello"), json!({ "kv_transfer_params": params })),
        )
        .await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(
        answer["usage"]["prompt_tokens"],
        answer["usage"]["prompt_tokens_details"]["cached_tokens"]
    );
    // Incomplete parameters are refused; no handshake at all is served whole.
    let partial = with(
        chat("hello"),
        json!({"kv_transfer_params": {"do_remote_prefill": true}}),
    );
    assert!(refused(&decode, &partial).await.contains("remote_host"));
    assert_eq!(
        decode
            .post("/v1/chat/completions", &chat("hi"))
            .await
            .status(),
        200
    );
    let stats = decode.stats().await;
    assert_eq!(stats["pd"]["decoded"], 1, "{stats}");
    assert_eq!(stats["pd"]["whole"], 1, "{stats}");
    assert_eq!(stats["pd"]["refused"], 3, "{stats}");
}

#[tokio::test]
async fn an_sglang_decode_engine_waits_for_its_room_on_the_named_bootstrap_server() {
    let prefill = engine(PdRole::Prefill, PdProtocol::Sglang).await;
    let decode = engine(PdRole::Decode, PdProtocol::Sglang).await;
    let port: u16 = prefill.base.rsplit(':').next().unwrap().parse().unwrap();
    let room = |room: u64| json!({"bootstrap_host": "127.0.0.1", "bootstrap_port": port, "bootstrap_room": room});
    // The prefill engine is the bootstrap server it is told about.
    let elsewhere =
        json!({"bootstrap_host": "127.0.0.1", "bootstrap_port": 1, "bootstrap_room": 5});
    assert!(refused(&prefill, &with(chat("q"), elsewhere))
        .await
        .contains("bootstrap server"));
    // Decode first, prefill a moment later: the decode engine waits.
    let body = with(chat("question"), room(7));
    let (decoded, prefilled) = tokio::join!(decode.post("/v1/chat/completions", &body), async {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        prefill.post("/v1/chat/completions", &body).await
    });
    assert_eq!(prefilled.status(), 200);
    assert_eq!(decoded.status(), 200);
    // A room holding another prompt is refused.
    let response = prefill
        .post("/v1/chat/completions", &with(chat("one"), room(8)))
        .await;
    assert_eq!(response.status(), 200);
    assert!(refused(&decode, &with(chat("two"), room(8)))
        .await
        .contains("another prompt"));
    let stats = decode.stats().await;
    assert_eq!(stats["pd"]["decoded"], 1, "{stats}");
    assert_eq!(stats["pd"]["refused"], 1, "{stats}");
}
