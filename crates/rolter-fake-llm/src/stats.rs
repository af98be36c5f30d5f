//! Request accounting for `/fake/stats` and `/metrics`.
//!
//! Every request except `/fake/*` takes a [`RequestGuard`] when it arrives.
//! The guard is dropped when the answer has been produced: for a
//! non-streaming answer when the handler returns it, for a stream when its
//! last chunk (`data: [DONE]`) has been handed to the server. A guard dropped
//! before that — the client went away and the server dropped the handler or
//! the body stream — counts as `cancelled`; a stream cut by
//! `reset_after_chunks` counts as `reset`. So at any time
//! `requests == in_flight + completed + cancelled + reset`.
//!
//! All counters are relaxed atomics: they are independent tallies read by
//! tests after the fact, and no request waits on another.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use serde_json::{json, Value};

/// What a request path is, for `by_path`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Endpoint {
    ChatCompletions,
    Completions,
    Embeddings,
    Models,
    Health,
    Metrics,
    /// vLLM's `/tokenize`.
    Tokenize,
    /// Anthropic's `/v1/messages`.
    Messages,
    /// Anthropic's `/v1/messages/count_tokens`.
    MessagesCountTokens,
    /// OpenAI's `/v1/responses`.
    Responses,
    /// `/v1/responses/{id}` (get, delete).
    ResponseById,
    /// `/v1/rerank` (also `/rerank`, `/v2/rerank`).
    Rerank,
    /// `/v1/score` (also `/score`).
    Score,
    /// vLLM's `/detokenize`.
    Detokenize,
    /// `/v1/audio/transcriptions`.
    AudioTranscriptions,
    /// `/v1/audio/translations`.
    AudioTranslations,
    /// Anything vLLM would answer with a 404.
    Other,
}

impl Endpoint {
    const ALL: [Endpoint; 17] = [
        Endpoint::ChatCompletions,
        Endpoint::Completions,
        Endpoint::Embeddings,
        Endpoint::Models,
        Endpoint::Health,
        Endpoint::Metrics,
        Endpoint::Tokenize,
        Endpoint::Messages,
        Endpoint::MessagesCountTokens,
        Endpoint::Responses,
        Endpoint::ResponseById,
        Endpoint::Rerank,
        Endpoint::Score,
        Endpoint::Detokenize,
        Endpoint::AudioTranscriptions,
        Endpoint::AudioTranslations,
        Endpoint::Other,
    ];

    pub(crate) fn from_path(path: &str) -> Self {
        match path {
            "/v1/chat/completions" => Endpoint::ChatCompletions,
            "/v1/completions" => Endpoint::Completions,
            "/v1/embeddings" => Endpoint::Embeddings,
            "/v1/models" => Endpoint::Models,
            "/health" => Endpoint::Health,
            "/metrics" => Endpoint::Metrics,
            "/tokenize" => Endpoint::Tokenize,
            "/v1/messages" => Endpoint::Messages,
            "/v1/messages/count_tokens" => Endpoint::MessagesCountTokens,
            "/v1/responses" => Endpoint::Responses,
            "/v1/rerank" | "/rerank" | "/v2/rerank" => Endpoint::Rerank,
            "/v1/score" | "/score" => Endpoint::Score,
            "/detokenize" => Endpoint::Detokenize,
            "/v1/audio/transcriptions" => Endpoint::AudioTranscriptions,
            "/v1/audio/translations" => Endpoint::AudioTranslations,
            _ if path
                .strip_prefix("/v1/responses/")
                .is_some_and(|id| !id.is_empty()) =>
            {
                Endpoint::ResponseById
            }
            _ => Endpoint::Other,
        }
    }

    /// The key in `by_path`.
    fn key(self) -> &'static str {
        match self {
            Endpoint::ChatCompletions => "/v1/chat/completions",
            Endpoint::Completions => "/v1/completions",
            Endpoint::Embeddings => "/v1/embeddings",
            Endpoint::Models => "/v1/models",
            Endpoint::Health => "/health",
            Endpoint::Metrics => "/metrics",
            Endpoint::Tokenize => "/tokenize",
            Endpoint::Messages => "/v1/messages",
            Endpoint::MessagesCountTokens => "/v1/messages/count_tokens",
            Endpoint::Responses => "/v1/responses",
            Endpoint::ResponseById => "/v1/responses/{id}",
            Endpoint::Rerank => "/v1/rerank",
            Endpoint::Score => "/v1/score",
            Endpoint::Detokenize => "/detokenize",
            Endpoint::AudioTranscriptions => "/v1/audio/transcriptions",
            Endpoint::AudioTranslations => "/v1/audio/translations",
            Endpoint::Other => "other",
        }
    }

    /// Whether the request is model work, counted in `vllm:num_requests_running`.
    fn is_generation(self) -> bool {
        matches!(
            self,
            Endpoint::ChatCompletions
                | Endpoint::Completions
                | Endpoint::Embeddings
                | Endpoint::Messages
                | Endpoint::Responses
                | Endpoint::Rerank
                | Endpoint::Score
                | Endpoint::AudioTranscriptions
                | Endpoint::AudioTranslations
        )
    }
}

/// The engine's request counters.
#[derive(Debug, Default)]
pub(crate) struct Stats {
    requests: AtomicU64,
    in_flight: AtomicU64,
    /// Generation requests in flight (`vllm:num_requests_running` plus
    /// `vllm:num_requests_waiting`).
    running: AtomicU64,
    /// The most generation requests ever in flight at once: what a test of
    /// the gateway's concurrency limits reads.
    peak_running: AtomicU64,
    completed: AtomicU64,
    cancelled: AtomicU64,
    reset: AtomicU64,
    last_body_bytes: AtomicU64,
    by_path: [AtomicU64; Endpoint::ALL.len()],
    /// TCP connections accepted: what a test of a client's connection
    /// reuse reads.
    connections: AtomicU64,
}

/// How a request ended, recorded by its guard on drop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Pending,
    Completed,
    Reset,
}

/// Counts one request in flight until dropped; see the module doc.
#[derive(Debug)]
pub(crate) struct RequestGuard {
    stats: Arc<Stats>,
    generation: bool,
    outcome: Outcome,
}

impl RequestGuard {
    /// The answer has been produced in full.
    pub(crate) fn complete(&mut self) {
        self.outcome = Outcome::Completed;
    }

    /// The stream was cut on purpose by `reset_after_chunks`.
    pub(crate) fn reset(&mut self) {
        self.outcome = Outcome::Reset;
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.stats.in_flight.fetch_sub(1, Relaxed);
        if self.generation {
            self.stats.running.fetch_sub(1, Relaxed);
        }
        let counter = match self.outcome {
            Outcome::Pending => &self.stats.cancelled,
            Outcome::Completed => &self.stats.completed,
            Outcome::Reset => &self.stats.reset,
        };
        counter.fetch_add(1, Relaxed);
    }
}

impl Stats {
    /// Counts a request that just arrived with a body of `body_bytes`.
    pub(crate) fn begin(self: &Arc<Self>, endpoint: Endpoint, body_bytes: usize) -> RequestGuard {
        self.requests.fetch_add(1, Relaxed);
        self.in_flight.fetch_add(1, Relaxed);
        let generation = endpoint.is_generation();
        if generation {
            let now = self.running.fetch_add(1, Relaxed) + 1;
            self.peak_running.fetch_max(now, Relaxed);
        }
        if let Some(slot) = Endpoint::ALL.iter().position(|e| *e == endpoint) {
            self.by_path[slot].fetch_add(1, Relaxed);
        }
        self.last_body_bytes.store(body_bytes as u64, Relaxed);
        RequestGuard {
            stats: Arc::clone(self),
            generation,
            outcome: Outcome::Pending,
        }
    }

    /// Generation requests in flight.
    pub(crate) fn running(&self) -> u64 {
        self.running.load(Relaxed)
    }

    /// Requests answered in full.
    pub(crate) fn completed(&self) -> u64 {
        self.completed.load(Relaxed)
    }

    /// Requests received.
    pub(crate) fn requests(&self) -> u64 {
        self.requests.load(Relaxed)
    }

    /// The `/fake/stats` document.
    pub(crate) fn to_json(&self) -> Value {
        let by_path: serde_json::Map<String, Value> = Endpoint::ALL
            .iter()
            .zip(&self.by_path)
            .map(|(endpoint, count)| (endpoint.key().to_owned(), json!(count.load(Relaxed))))
            .collect();
        json!({
            "requests": self.requests.load(Relaxed),
            "in_flight": self.in_flight.load(Relaxed),
            "running": self.running.load(Relaxed),
            "peak_running": self.peak_running.load(Relaxed),
            "completed": self.completed.load(Relaxed),
            "cancelled": self.cancelled.load(Relaxed),
            "reset": self.reset.load(Relaxed),
            "by_path": by_path,
            "last_body_bytes": self.last_body_bytes.load(Relaxed),
            "connections": self.connections.load(Relaxed),
        })
    }

    /// A TCP connection was accepted.
    pub(crate) fn connection_accepted(&self) {
        self.connections.fetch_add(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dropped_guard_counts_by_outcome() {
        let stats = Arc::new(Stats::default());
        drop(stats.begin(Endpoint::ChatCompletions, 10));
        let mut done = stats.begin(Endpoint::Completions, 20);
        done.complete();
        let mut cut = stats.begin(Endpoint::ChatCompletions, 30);
        cut.reset();
        let open = stats.begin(Endpoint::Health, 0);
        assert_eq!(stats.running(), 2);
        drop((done, cut));
        assert_eq!(
            stats.to_json()["peak_running"],
            2,
            "two generation requests at once"
        );
        let doc = stats.to_json();
        assert_eq!(doc["requests"], 4);
        assert_eq!(doc["in_flight"], 1);
        assert_eq!(doc["cancelled"], 1);
        assert_eq!(doc["completed"], 1);
        assert_eq!(doc["reset"], 1);
        assert_eq!(doc["by_path"]["/v1/chat/completions"], 2);
        assert_eq!(doc["last_body_bytes"], 0);
        assert_eq!(stats.running(), 0);
        drop(open);
    }
}
