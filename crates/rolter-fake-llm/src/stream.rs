//! Server-sent events, one per token, as vLLM sends them.
//!
//! Chat: a chunk with `delta.role = "assistant"` after the time to first
//! token, then one chunk per token, one token delay apart, then a chunk with
//! `finish_reason` and an empty delta. Completions: one `text_completion`
//! chunk per token (the first after the time to first token), then the
//! `finish_reason` chunk one token delay later. Both end with a usage chunk
//! (`choices: []`) when `stream_options.include_usage` is set, and
//! `data: [DONE]`. Either way the `finish_reason` chunk leaves
//! `ttft + n * token_delay` after the request, the same time a non-streaming
//! answer takes.
//!
//! Each chunk is rendered when its time comes and handed to hyper, which
//! writes it at once: the body is a stream, never built up front.
//!
//! Anthropic Messages and Responses streams are paced like a chat's, in
//! their own typed events: `message_start` (with `content_block_start` and
//! a `ping`), one `content_block_delta` per token, then
//! `content_block_stop`, `message_delta` and `message_stop`; or
//! `response.created`, `response.in_progress`, the output item and content
//! part added, one `response.output_text.delta` per token, then the text,
//! part and item done and `response.completed` (`response.incomplete` when
//! the output limit cut it). Neither has a usage chunk or `[DONE]`.
//!
//! With `reset_after_chunks = K` the stream fails after K chunks (or at its
//! end, if shorter) so hyper drops the connection without the final
//! zero-length chunk, as an engine that crashes mid-answer would.

use std::io;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use futures_util::stream;
use serde_json::Value;

use serde_json::json;

use super::answer::Answer;
use super::kv::Prefill;
use super::model::{generated_text, token};
use super::request::GenerationKind;
use super::scheduler::{DecodeSlot, Scheduler, Seq};
use super::stats::RequestGuard;
use std::sync::Arc;

/// Everything a token stream needs, fixed when the request arrives.
#[derive(Debug, Clone)]
pub(crate) struct StreamPlan {
    pub(crate) kind: GenerationKind,
    pub(crate) id: String,
    pub(crate) created: u64,
    pub(crate) model: String,
    pub(crate) output_tokens: u32,
    pub(crate) finish_reason: &'static str,
    pub(crate) include_usage: bool,
    pub(crate) prompt_tokens: u64,
    /// Prompt tokens found in the prefix cache.
    pub(crate) cached_tokens: u64,
    /// Milliseconds to the first token before prefill (the engine's fixed
    /// overhead and the simulated queue).
    pub(crate) ttft_ms: u64,
    /// Milliseconds of prefill, spent holding a prefill slot after `ttft_ms`.
    pub(crate) prefill_ms: u64,
    pub(crate) token_delay_ms: u64,
    pub(crate) reset_after_chunks: Option<u64>,
}

/// One SSE event of the stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    Role,
    Token(u32),
    Finish,
    Usage,
    Done,
}

impl StreamPlan {
    /// Event number `k` of the stream and the milliseconds to wait before
    /// sending it; `None` past the end.
    fn event_at(&self, k: u64) -> Option<(Event, u64)> {
        let tokens = u64::from(self.output_tokens);
        // Every API but completions opens with an event before the first token.
        let chat = self.kind != GenerationKind::Completion;
        let openai_chunks = matches!(self.kind, GenerationKind::Chat | GenerationKind::Completion);
        let mut k = k;
        if chat {
            if k == 0 {
                return Some((Event::Role, self.ttft_ms));
            }
            k -= 1;
        }
        if k < tokens {
            let first = if chat {
                self.token_delay_ms
            } else {
                self.ttft_ms
            };
            let delay = if k == 0 { first } else { self.token_delay_ms };
            // k < tokens <= u32::MAX, so the conversion cannot fail.
            return u32::try_from(k)
                .ok()
                .map(|index| (Event::Token(index), delay));
        }
        k -= tokens;
        if k == 0 {
            return Some((Event::Finish, if chat { 0 } else { self.token_delay_ms }));
        }
        k -= 1;
        if !openai_chunks {
            return None;
        }
        if self.include_usage {
            if k == 0 {
                return Some((Event::Usage, 0));
            }
            k -= 1;
        }
        (k == 0).then_some((Event::Done, 0))
    }

    /// The start every chunk of this stream shares: `{"id":…,"object":…,"created":…,"model":…,`.
    fn chunk_prefix(&self) -> String {
        let object = match self.kind {
            GenerationKind::Chat => "chat.completion.chunk",
            // Messages and Responses events are rendered whole (`render_typed`).
            _ => "text_completion",
        };
        format!(
            r#"{{"id":{},"object":"{object}","created":{},"model":{},"#,
            Value::String(self.id.clone()),
            self.created,
            Value::String(self.model.clone()),
        )
    }
}

/// The state between two chunks.
struct TokenStream {
    plan: StreamPlan,
    prefix: String,
    /// Index of the next event.
    next: u64,
    ended: bool,
    guard: RequestGuard,
    scheduler: Arc<Scheduler>,
    /// Held from the first token on: this stream is in the decode batch.
    decoding: Option<DecodeSlot>,
    /// Its place in the running batch, taken before the first token.
    seq: Option<Seq>,
    /// Milliseconds the prefill waited for a slot, reported in the usage chunk.
    queue_ms: u64,
}

impl TokenStream {
    async fn step(mut self) -> Option<(io::Result<Bytes>, Self)> {
        if self.ended {
            return None;
        }
        let next = self.plan.event_at(self.next);
        if let Some(limit) = self.plan.reset_after_chunks {
            if self.next >= limit || next.is_none() {
                self.ended = true;
                self.guard.reset();
                // Let hyper flush the chunks sent so far first: an error it
                // sees right behind them makes it drop its write buffer.
                tokio::task::yield_now().await;
                let error = io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    "fake-llm: reset_after_chunks",
                );
                return Some((Err(error), self));
            }
        }
        // Past the end without a reset: the guard was completed with [DONE].
        let (event, delay_ms) = next?;
        if self.seq.is_none() {
            // Headers are out; the first token waits for a place in the batch.
            self.seq = Some(self.scheduler.join_batch().await);
        }
        let delay_ms = if self.decoding.is_some() {
            self.scheduler.token_delay(delay_ms)
        } else {
            delay_ms
        };
        if delay_ms > 0 {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        }
        if self.next == 0 {
            // The first event is the first token: queue for a prefill slot
            // and prefill, then join the decode batch.
            self.queue_ms = self.scheduler.prefill(self.plan.prefill_ms).await;
            self.decoding = Some(self.scheduler.decode());
        }
        self.next += 1;
        if self.plan.reset_after_chunks.is_none() && self.plan.event_at(self.next).is_none() {
            // Finished once the last chunk is handed over: a client that
            // reads [DONE] (or `message_stop`) and hangs up at once has not
            // cancelled anything.
            self.guard.complete();
        }
        Some((Ok(self.render(event)), self))
    }

    fn render(&self, event: Event) -> Bytes {
        if matches!(
            self.plan.kind,
            GenerationKind::Messages | GenerationKind::Responses
        ) {
            return Bytes::from(self.render_typed(event));
        }
        if event == Event::Done {
            return Bytes::from_static(b"data: [DONE]\n\n");
        }
        let chat = self.plan.kind == GenerationKind::Chat;
        let mut out = String::with_capacity(self.prefix.len() + 160);
        out.push_str("data: ");
        out.push_str(&self.prefix);
        match event {
            Event::Role => out.push_str(
                r#""choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}"#,
            ),
            Event::Token(index) if chat => out.push_str(&format!(
                r#""choices":[{{"index":0,"delta":{{"content":"{}"}},"logprobs":null,"finish_reason":null}}]}}"#,
                token(index)
            )),
            Event::Token(index) => out.push_str(&format!(
                r#""choices":[{{"index":0,"text":"{}","logprobs":null,"finish_reason":null,"stop_reason":null}}]}}"#,
                token(index)
            )),
            Event::Finish if chat => out.push_str(&format!(
                r#""choices":[{{"index":0,"delta":{{}},"logprobs":null,"finish_reason":"{}","stop_reason":null}}]}}"#,
                self.plan.finish_reason
            )),
            Event::Finish => out.push_str(&format!(
                r#""choices":[{{"index":0,"text":"","logprobs":null,"finish_reason":"{}","stop_reason":null}}]}}"#,
                self.plan.finish_reason
            )),
            Event::Usage => {
                let completion = u64::from(self.plan.output_tokens);
                out.push_str(&format!(
                    r#""choices":[],"usage":{{"prompt_tokens":{},"total_tokens":{},"completion_tokens":{completion},"prompt_tokens_details":{{"cached_tokens":{}}}}},"fake":{{"queue_ms":{}}}}}"#,
                    self.plan.prompt_tokens,
                    self.plan.prompt_tokens.saturating_add(completion),
                    self.plan.cached_tokens,
                    self.queue_ms,
                ));
            }
            Event::Done => {}
        }
        out.push_str("\n\n");
        Bytes::from(out)
    }
}

/// One `event:` + `data:` pair.
fn typed_event(out: &mut String, value: &Value) {
    let kind = value["type"].as_str().unwrap_or("event");
    out.push_str("event: ");
    out.push_str(kind);
    out.push_str("\ndata: ");
    out.push_str(&value.to_string());
    out.push_str("\n\n");
}

impl TokenStream {
    fn answer(&self) -> Answer<'_> {
        Answer {
            id: &self.plan.id,
            created: self.plan.created,
            model: &self.plan.model,
            output_tokens: self.plan.output_tokens,
            finish_reason: self.plan.finish_reason,
            prefill: Prefill {
                prompt_tokens: self.plan.prompt_tokens,
                cached_tokens: self.plan.cached_tokens,
            },
        }
    }

    /// An event of an Anthropic Messages or a Responses stream.
    fn render_typed(&self, event: Event) -> String {
        let answer = self.answer();
        let tokens = self.plan.output_tokens;
        let mut out = String::new();
        if self.plan.kind == GenerationKind::Messages {
            match event {
                Event::Role => {
                    typed_event(
                        &mut out,
                        &json!({"type": "message_start", "message": answer.message(None)}),
                    );
                    typed_event(
                        &mut out,
                        &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                    );
                    typed_event(&mut out, &json!({"type": "ping"}));
                }
                Event::Token(index) => typed_event(
                    &mut out,
                    &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": token(index)}}),
                ),
                Event::Finish => {
                    typed_event(&mut out, &json!({"type": "content_block_stop", "index": 0}));
                    typed_event(
                        &mut out,
                        &json!({
                            "type": "message_delta",
                            "delta": {"stop_reason": answer.stop_reason(), "stop_sequence": null},
                            "usage": {"output_tokens": tokens},
                        }),
                    );
                    typed_event(&mut out, &json!({"type": "message_stop"}));
                }
                Event::Usage | Event::Done => {}
            }
            return out;
        }
        let item_id = answer.message_id();
        let part = |text: &str| json!({"type": "output_text", "text": text, "annotations": []});
        let mut seq = |value: Value, n: u64| {
            let mut value = value;
            value["sequence_number"] = json!(n);
            typed_event(&mut out, &value);
        };
        let first_after = 4 + u64::from(tokens);
        match event {
            Event::Role => {
                seq(
                    json!({"type": "response.created", "response": answer.response(None)}),
                    0,
                );
                seq(
                    json!({"type": "response.in_progress", "response": answer.response(None)}),
                    1,
                );
                seq(
                    json!({"type": "response.output_item.added", "output_index": 0, "item": {
                        "type": "message", "id": item_id, "status": "in_progress", "role": "assistant", "content": [],
                    }}),
                    2,
                );
                seq(
                    json!({"type": "response.content_part.added", "item_id": item_id, "output_index": 0,
                    "content_index": 0, "part": part("")}),
                    3,
                );
            }
            Event::Token(index) => seq(
                json!({"type": "response.output_text.delta", "item_id": item_id,
                "output_index": 0, "content_index": 0, "delta": token(index), "logprobs": []}),
                4 + u64::from(index),
            ),
            Event::Finish => {
                let text = generated_text(tokens);
                seq(
                    json!({"type": "response.output_text.done", "item_id": item_id, "output_index": 0,
                    "content_index": 0, "text": text, "logprobs": []}),
                    first_after,
                );
                seq(
                    json!({"type": "response.content_part.done", "item_id": item_id, "output_index": 0,
                    "content_index": 0, "part": part(&text)}),
                    first_after + 1,
                );
                seq(
                    json!({"type": "response.output_item.done", "output_index": 0,
                    "item": answer.output_message(&text, "completed")}),
                    first_after + 2,
                );
                let done = answer.response(Some(&text));
                let kind = if done["status"] == "incomplete" {
                    "response.incomplete"
                } else {
                    "response.completed"
                };
                seq(json!({"type": kind, "response": done}), first_after + 3);
            }
            Event::Usage | Event::Done => {}
        }
        out
    }
}

/// The SSE body of a streamed answer; `guard` stays in flight until the
/// stream ends or is dropped.
pub(crate) fn sse_body(plan: StreamPlan, guard: RequestGuard, scheduler: Arc<Scheduler>) -> Body {
    let prefix = plan.chunk_prefix();
    let state = TokenStream {
        plan,
        prefix,
        next: 0,
        ended: false,
        guard,
        scheduler,
        decoding: None,
        seq: None,
        queue_ms: 0,
    };
    Body::from_stream(stream::unfold(state, TokenStream::step))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(kind: GenerationKind, include_usage: bool) -> StreamPlan {
        StreamPlan {
            kind,
            id: "id-1".into(),
            created: 1,
            model: "m\"q".into(),
            output_tokens: 2,
            finish_reason: "length",
            include_usage,
            prompt_tokens: 4,
            cached_tokens: 2,
            ttft_ms: 100,
            prefill_ms: 0,
            token_delay_ms: 10,
            reset_after_chunks: None,
        }
    }

    fn events(plan: &StreamPlan) -> Vec<(Event, u64)> {
        (0..).map_while(|k| plan.event_at(k)).collect()
    }

    #[test]
    fn chat_paces_role_then_tokens() {
        assert_eq!(
            events(&plan(GenerationKind::Chat, true)),
            vec![
                (Event::Role, 100),
                (Event::Token(0), 10),
                (Event::Token(1), 10),
                (Event::Finish, 0),
                (Event::Usage, 0),
                (Event::Done, 0),
            ]
        );
    }

    #[test]
    fn completion_paces_tokens_then_finish() {
        assert_eq!(
            events(&plan(GenerationKind::Completion, false)),
            vec![
                (Event::Token(0), 100),
                (Event::Token(1), 10),
                (Event::Finish, 10),
                (Event::Done, 0)
            ]
        );
    }

    #[test]
    fn every_chunk_is_valid_json_with_escaped_model() {
        for kind in [GenerationKind::Chat, GenerationKind::Completion] {
            let plan = plan(kind, true);
            let stats = std::sync::Arc::new(super::super::stats::Stats::default());
            let guard = stats.begin(super::super::stats::Endpoint::ChatCompletions, 0);
            let stream = TokenStream {
                prefix: plan.chunk_prefix(),
                plan,
                next: 0,
                ended: false,
                guard,
                scheduler: Arc::new(Scheduler::new(0, 0, 0.0)),
                decoding: None,
                seq: None,
                queue_ms: 0,
            };
            for (event, _) in events(&stream.plan) {
                let bytes = stream.render(event);
                let text = String::from_utf8_lossy(&bytes);
                let payload = text
                    .strip_prefix("data: ")
                    .and_then(|t| t.strip_suffix("\n\n"));
                assert!(payload.is_some(), "{text}");
                let payload = payload.unwrap_or_default();
                if event == Event::Done {
                    assert_eq!(payload, "[DONE]");
                    continue;
                }
                let json: Value = serde_json::from_str(payload).unwrap_or(Value::Null);
                assert_eq!(json["model"], "m\"q", "{payload}");
                assert_eq!(json["id"], "id-1");
                if event == Event::Usage {
                    assert_eq!(json["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
                }
            }
        }
    }

    #[test]
    fn messages_and_responses_streams_are_typed_events_in_order() {
        for kind in [GenerationKind::Messages, GenerationKind::Responses] {
            let plan = plan(kind, true);
            assert_eq!(
                events(&plan),
                vec![
                    (Event::Role, 100),
                    (Event::Token(0), 10),
                    (Event::Token(1), 10),
                    (Event::Finish, 0),
                ],
                "no usage chunk, no [DONE]"
            );
            let stats = std::sync::Arc::new(super::super::stats::Stats::default());
            let stream = TokenStream {
                prefix: plan.chunk_prefix(),
                plan,
                next: 0,
                ended: false,
                guard: stats.begin(super::super::stats::Endpoint::Messages, 0),
                scheduler: Arc::new(Scheduler::new(0, 0, 0.0)),
                decoding: None,
                seq: None,
                queue_ms: 0,
            };
            let mut types = Vec::new();
            let mut text = String::new();
            let mut sequence = Vec::new();
            for (event, _) in events(&stream.plan) {
                let bytes = stream.render(event);
                for frame in String::from_utf8_lossy(&bytes).split_terminator("\n\n") {
                    let (head, data) = frame.split_once('\n').unwrap();
                    let json: Value =
                        serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
                    assert_eq!(head, format!("event: {}", json["type"].as_str().unwrap()));
                    types.push(json["type"].as_str().unwrap().to_owned());
                    if let Some(n) = json["sequence_number"].as_u64() {
                        sequence.push(n);
                    }
                    for delta in [&json["delta"]["text"], &json["delta"]] {
                        if let Some(piece) = delta.as_str() {
                            text.push_str(piece);
                        }
                    }
                }
            }
            assert_eq!(text, "tok0 tok1", "{kind:?}: the deltas make the text");
            if kind == GenerationKind::Messages {
                assert_eq!(types.first().unwrap(), "message_start");
                assert_eq!(types.last().unwrap(), "message_stop");
            } else {
                assert_eq!(types.first().unwrap(), "response.created");
                // max_tokens was reached: the Responses API calls that incomplete.
                assert_eq!(types.last().unwrap(), "response.incomplete");
                assert_eq!(sequence, (0..sequence.len() as u64).collect::<Vec<_>>());
            }
        }
    }
}
