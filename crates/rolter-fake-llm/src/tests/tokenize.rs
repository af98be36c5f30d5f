//! `POST /tokenize`: the token ids a client learns from it must be the ones
//! the engine prefills and caches for the same request, or a router fed
//! with them (`x-rolter-token-ids`) looks up blocks no engine holds.

use serde_json::{json, Value};

use super::TestEngine;
use crate::FakeLlmArgs;

const BLOCK_SIZE: usize = 4;

fn engine_args() -> FakeLlmArgs {
    FakeLlmArgs {
        model: vec!["served".into()],
        block_size: BLOCK_SIZE,
        ..FakeLlmArgs::default()
    }
}

fn conversation() -> Value {
    json!([
        {"role": "system", "content": "You are the support desk of tenant 7. Answer in two sentences."},
        {"role": "user", "content": "My invoice #4411 shows the wrong VAT rate; can you fix it?"},
        {"role": "assistant", "content": "tok0 tok1 tok2"},
        {"role": "user", "content": "Thanks — and the one before, #4410?"},
    ])
}

/// `/tokenize`'s answer, which must be a 200.
async fn tokenize(engine: &TestEngine, body: &Value) -> Value {
    let response = engine.post("/tokenize", body).await;
    assert_eq!(response.status(), 200);
    response.json().await.expect("tokenize json")
}

fn token_ids(answer: &Value) -> Vec<u64> {
    answer["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|id| id.as_u64().expect("token id"))
        .collect()
}

/// The prompt token count and cached tokens a generation request reported.
async fn usage(engine: &TestEngine, path: &str, body: &Value) -> (u64, u64) {
    let response = engine.post(path, body).await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.expect("json");
    let usage = &answer["usage"];
    (
        usage["prompt_tokens"].as_u64().expect("prompt_tokens"),
        usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .expect("cached_tokens"),
    )
}

#[tokio::test]
async fn tokenize_of_a_chat_is_what_its_chat_completion_caches() {
    let engine = TestEngine::start(engine_args()).await;
    let answer = tokenize(
        &engine,
        &json!({"model": "served", "messages": conversation()}),
    )
    .await;
    let tokens = token_ids(&answer);
    assert_eq!(answer["count"], tokens.len());
    assert_eq!(answer["max_model_len"], 131_072);
    assert!(tokens.len() > 4 * BLOCK_SIZE, "{tokens:?}");

    let chat = json!({"model": "served", "messages": conversation(), "max_tokens": 2});
    let (prompt_tokens, cached) = usage(&engine, "/v1/chat/completions", &chat).await;
    assert_eq!((prompt_tokens, cached), (tokens.len() as u64, 0));

    // The chat's blocks are cached under exactly these ids: a completion
    // given them as its prompt finds every full block but the one holding
    // the last token (which the engine always recomputes).
    let by_ids = json!({"model": "served", "prompt": tokens, "max_tokens": 1});
    let (prompt_tokens, cached) = usage(&engine, "/v1/completions", &by_ids).await;
    let full_blocks = (tokens.len() - 1) / BLOCK_SIZE;
    assert_eq!(
        (prompt_tokens, cached),
        (tokens.len() as u64, (full_blocks * BLOCK_SIZE) as u64)
    );

    // One token more or less at the start and nothing is found.
    let shifted: Vec<u64> = tokens[1..].to_vec();
    let shifted = json!({"model": "served", "prompt": shifted, "max_tokens": 1});
    assert_eq!(usage(&engine, "/v1/completions", &shifted).await.1, 0);
}

#[tokio::test]
async fn tokenize_of_a_prompt_is_what_its_completion_caches() {
    let engine = TestEngine::start(engine_args()).await;
    let prompt = "Summarise the attached contract, clause by clause, in plain English.";
    let tokens = token_ids(&tokenize(&engine, &json!({"model": "served", "prompt": prompt})).await);
    let text = json!({"model": "served", "prompt": prompt, "max_tokens": 1});
    assert_eq!(
        usage(&engine, "/v1/completions", &text).await,
        (tokens.len() as u64, 0)
    );
    let by_ids = json!({"model": "served", "prompt": tokens, "max_tokens": 1});
    let full_blocks = (tokens.len() - 1) / BLOCK_SIZE;
    assert_eq!(
        usage(&engine, "/v1/completions", &by_ids).await,
        (tokens.len() as u64, (full_blocks * BLOCK_SIZE) as u64)
    );
}

#[tokio::test]
async fn tokenize_leaves_out_the_generation_prompt_when_asked() {
    let engine = TestEngine::start(engine_args()).await;
    let with = token_ids(&tokenize(&engine, &json!({"messages": conversation()})).await);
    let without = token_ids(
        &tokenize(
            &engine,
            &json!({"messages": conversation(), "add_generation_prompt": false}),
        )
        .await,
    );
    // `<|im_start|>assistant\n` is two tokens.
    assert_eq!(without.len() + 2, with.len());
    assert_eq!(without[..], with[..without.len()]);
}

#[tokio::test]
async fn tokenize_answers_errors_like_vllm_and_is_counted() {
    let engine = TestEngine::start(engine_args()).await;
    let response = engine
        .post("/tokenize", &json!({"model": "other", "prompt": "x"}))
        .await;
    assert_eq!(response.status(), 404);
    let response = engine.post("/tokenize", &json!({"model": "served"})).await;
    assert_eq!(response.status(), 400);
    let answer: Value = response.json().await.expect("json");
    assert_eq!(answer["error"]["type"], "BadRequestError");
    let response = engine.get("/tokenize").await;
    assert_eq!(response.status(), 405);
    let stats = engine.stats().await;
    assert_eq!(stats["by_path"]["/tokenize"], 3);
    // Tokenizing is not generation: the cache saw nothing.
    assert_eq!(stats["prefix_cache"]["queried_tokens"], 0);
}
