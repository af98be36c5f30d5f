//! What reading a request's body costs: an everyday chat body, and a 4 MiB
//! prompt of two kinds: one plain run (load-tests/bench.js's body) and a
//! document whose lines and quotes are escapes every ~13 bytes, the
//! document also as a text part (`document_part`). For the
//! large bodies, the prescan (which runs while the body arrives, piece by
//! piece) is measured apart from the read after the last byte, which is
//! what adds to the request's time: with the conversation's digest, as a
//! consistent-hash route reads it, and without (`no_digest`), as every
//! other strategy's route does.

use std::hint::black_box;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rolter::openai::{parse_prescanned, parse_request, read_prescanned, Digest, Endpoint, Prescan};

const LARGE: usize = 4 << 20;
/// Pingora hands a large upload over in pieces of about this size.
const PIECE: usize = 64 << 10;

/// A chat body with the prompt last: its closing quote lies in the
/// body's last bytes, for most lengths a partial block of the prescan's
/// index, which the index once left out.
fn chat_body(content: &str) -> Vec<u8> {
    let content = serde_json::to_string(content).expect("serializable");
    chat_body_with(&content)
}

/// [`chat_body`] with the prompt as one text part, as the `openai` SDK's
/// typed content sends it.
fn chat_body_parts(content: &str) -> Vec<u8> {
    let content = serde_json::to_string(content).expect("serializable");
    chat_body_with(&format!(r#"[{{"type":"text","text":{content}}}]"#))
}

/// A chat body whose last message's `content` is the JSON `content`.
fn chat_body_with(content: &str) -> Vec<u8> {
    format!(
        r#"{{"model":"Qwen/Qwen3-8B","max_tokens":64,"stream":true,"messages":[{{"role":"system","content":"You are a helpful assistant."}},{{"role":"user","content":{content}}}]}}"#
    )
    .into_bytes()
}

/// A document's lines: text, a quotation, a newline.
fn document(len: usize) -> String {
    let line = "The committee said \"yes\" to the plan.\n";
    line.repeat(len / line.len())
}

fn prescanned(body: &[u8]) -> rolter::openai::Prescanned {
    let half = body.len() / 2;
    let mut prescan = Prescan::with_pieces(body.len(), &[Bytes::copy_from_slice(&body[..half])]);
    for piece in body[half..].chunks(PIECE) {
        prescan.push(piece);
    }
    prescan.finish().expect("UTF-8")
}

fn read(c: &mut Criterion) {
    let mut group = c.benchmark_group("request");
    let chat = chat_body("Summarize the plot of Hamlet in three sentences, please.");
    group.bench_function("chat", |b| {
        b.iter(|| parse_request(Endpoint::ChatCompletions, black_box(&chat)).expect("valid"))
    });

    group.sample_size(20);
    group.throughput(Throughput::Bytes(LARGE as u64));
    for (name, body) in [
        ("plain", chat_body(&"x".repeat(LARGE))),
        ("document", chat_body(&document(LARGE))),
        ("document_part", chat_body_parts(&document(LARGE))),
    ] {
        group.bench_function(format!("{name}_4m/whole"), |b| {
            b.iter(|| parse_request(Endpoint::ChatCompletions, black_box(&body)).expect("valid"))
        });
        group.bench_function(format!("{name}_4m/prescan"), |b| {
            b.iter(|| prescanned(black_box(&body)))
        });
        let ready = prescanned(&body);
        group.bench_function(format!("{name}_4m/after_last_byte"), |b| {
            b.iter(|| {
                parse_prescanned(Endpoint::ChatCompletions, black_box(&ready)).expect("valid")
            })
        });
        group.bench_function(format!("{name}_4m/after_last_byte_no_digest"), |b| {
            b.iter(|| {
                read_prescanned(Endpoint::ChatCompletions, black_box(&ready))
                    .expect("valid")
                    .parse(Digest::Skipped)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, read);
criterion_main!(benches);
