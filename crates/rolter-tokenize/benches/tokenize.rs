//! Render + tokenize cost of a chat request, at 1, 32 and 256 KiB of
//! conversation: cold (nothing of it tokenized before) and warm (the next
//! turn of a conversation whose history was tokenized on the turn before).
//! The model directory is the demo's (conf/demo-tokenizer: a byte-level BPE
//! with a ChatML template); the budget is the default 64 KiB.

use std::hint::black_box;
use std::path::Path;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use rolter_tokenize::{ChatRequest, ModelTokenizer};

const BUDGET: usize = 64 * 1024;

/// A multi-turn conversation of about `kib` KiB: a system prompt, then
/// user and assistant turns of ~1 KiB, ending with a user turn.
fn conversation(kib: usize, salt: u64) -> Vec<serde_json::Value> {
    let sentence = "The quick brown fox jumps over the lazy dog while the engine streams tokens, ";
    let turn = || sentence.repeat(1024 / sentence.len());
    let mut messages = vec![
        serde_json::json!({"role": "system", "content": format!("Session {salt}. {}", turn())}),
    ];
    for i in 1..kib.max(2) {
        let role = if i % 2 == 1 { "user" } else { "assistant" };
        messages
            .push(serde_json::json!({"role": role, "content": format!("Turn {i}: {}", turn())}));
    }
    if messages.last().is_some_and(|m| m["role"] == "assistant") {
        messages.push(serde_json::json!({"role": "user", "content": "And then?"}));
    }
    messages
}

fn bench(c: &mut Criterion) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../conf/demo-tokenizer");
    let model = ModelTokenizer::load(&dir).expect("the demo tokenizer loads");
    let mut group = c.benchmark_group("chat_token_ids");
    for kib in [1usize, 32, 256] {
        let mut salt = 0u64;
        group.bench_function(BenchmarkId::new("cold", format!("{kib}KiB")), |b| {
            b.iter(|| {
                salt += 1;
                let messages = serde_json::to_string(&conversation(kib, salt)).unwrap();
                let request = ChatRequest {
                    messages: &messages,
                    ..ChatRequest::default()
                };
                black_box(model.chat_token_ids(&request, BUDGET).unwrap())
            })
        });
        // Turn k+1: the history of turn k, its answer and a new question.
        let history = conversation(kib, u64::MAX);
        let mut turn = 0u64;
        let previous = serde_json::to_string(&history).unwrap();
        model
            .chat_token_ids(
                &ChatRequest {
                    messages: &previous,
                    ..ChatRequest::default()
                },
                BUDGET,
            )
            .unwrap();
        group.bench_function(BenchmarkId::new("warm", format!("{kib}KiB")), |b| {
            b.iter_batched(
                || {
                    turn += 1;
                    let mut next = history.clone();
                    next.push(serde_json::json!({"role": "assistant", "content": format!("Answer {turn}.")}));
                    next.push(serde_json::json!({"role": "user", "content": format!("Question {turn}?")}));
                    serde_json::to_string(&next).unwrap()
                },
                |messages| {
                    let request = ChatRequest { messages: &messages, ..ChatRequest::default() };
                    black_box(model.chat_token_ids(&request, BUDGET).unwrap())
                },
                criterion::BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);
