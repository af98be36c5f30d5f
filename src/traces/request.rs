//! One request's trace: its ids from the start (the engine is told its
//! parent before the answer exists), its spans built once, when it ends.
//!
//! Spans are not live objects here: the request records a few instants as
//! it goes (queue wait, each attempt, the first byte) and [`RequestTrace::finish`]
//! turns them into finished `SpanData` in one go, off the streaming path.
//! Instants become wall-clock times by their offset from the request's
//! start, so every span of a trace agrees with the others.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use http::HeaderValue;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SpanData, SpanEvents, SpanLinks};

use super::context::{self, Parent};
use super::SpanSink;
use crate::openai::usage::Usage;

/// Attempts recorded per request; a request has at most `max_retries` + 1.
const MAX_ATTEMPT_SPANS: usize = 16;

/// What the caller sent, kept until the request's trust is known.
#[derive(Debug, Clone)]
struct Incoming {
    parent: Parent,
    tracestate: Option<HeaderValue>,
}

/// One upstream attempt.
#[derive(Debug, Clone)]
struct AttemptSpan {
    span_id: SpanId,
    started: Instant,
    ended: Option<Instant>,
    number: u32,
    target: Arc<str>,
    provider: String,
    decision: &'static str,
    status: Option<u16>,
    first_byte: Option<Duration>,
    retry_reason: Option<String>,
}

/// The trace of one request in flight.
#[derive(Debug)]
pub struct RequestTrace {
    sink: Arc<SpanSink>,
    started: Instant,
    started_at: SystemTime,
    incoming: Option<Incoming>,
    /// Set by [`Self::settle`]; until then the caller's trust is unknown.
    settled: bool,
    trace_id: TraceId,
    root: SpanId,
    remote_parent: Option<SpanId>,
    sampled: bool,
    tracestate: Option<HeaderValue>,
    queue: Option<(Instant, Instant, &'static str)>,
    attempts: Vec<AttemptSpan>,
}

/// The request as it ended, for the root span.
#[derive(Debug, Default)]
pub struct Ending<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub status: u16,
    pub route: Option<&'a str>,
    pub model: Option<&'a str>,
    pub strategy: Option<&'a str>,
    pub key: Option<&'a str>,
    pub request_id: Option<&'a str>,
    pub usage: Option<Usage>,
    pub error: Option<String>,
}

impl RequestTrace {
    /// Starts the trace of a request whose header is `traceparent` /
    /// `tracestate` (either may be absent).
    pub(super) fn begin(
        sink: Arc<SpanSink>,
        traceparent: Option<&HeaderValue>,
        tracestate: Option<&HeaderValue>,
    ) -> RequestTrace {
        let ids = RandomIdGenerator::default();
        let incoming = traceparent
            .and_then(|v| context::parse_traceparent(v.as_bytes()))
            .map(|parent| Incoming {
                parent,
                tracestate: tracestate.and_then(context::usable_tracestate),
            });
        RequestTrace {
            sink,
            started: Instant::now(),
            started_at: SystemTime::now(),
            incoming,
            settled: false,
            trace_id: ids.new_trace_id(),
            root: ids.new_span_id(),
            remote_parent: None,
            sampled: false,
            tracestate: None,
            queue: None,
            attempts: Vec::new(),
        }
    }

    /// Decides whose trace this is, once: a `trusted` caller's (one with
    /// an API key, or behind a trusted proxy) continues with its sampling
    /// decision; anyone else's starts afresh, sampled at the configured
    /// ratio. Idempotent.
    pub fn settle(&mut self, trusted: bool) {
        if self.settled {
            return;
        }
        self.settled = true;
        match self.incoming.take().filter(|_| trusted) {
            Some(incoming) => {
                self.trace_id = incoming.parent.trace_id;
                self.remote_parent = Some(incoming.parent.span_id);
                self.sampled = incoming.parent.sampled;
                self.tracestate = incoming.tracestate;
            }
            None => self.sampled = self.sink.samples(self.trace_id),
        }
    }

    /// The trace id, for logs and tests.
    pub fn trace_id(&self) -> TraceId {
        self.trace_id
    }

    pub fn sampled(&self) -> bool {
        self.sampled
    }

    /// The request waited in flow control from `from` to `to`.
    pub fn queue_wait(&mut self, from: Instant, to: Instant, outcome: &'static str) {
        self.queue = Some((from, to, outcome));
    }

    /// An attempt starts: the `traceparent` (and `tracestate`) the engine
    /// gets, naming the attempt's span as its parent.
    pub fn begin_attempt(
        &mut self,
        started: Instant,
        target: &Arc<str>,
        provider: &str,
        decision: &'static str,
    ) -> (HeaderValue, Option<HeaderValue>) {
        self.settle(false);
        let span_id = RandomIdGenerator::default().new_span_id();
        if self.attempts.len() < MAX_ATTEMPT_SPANS {
            self.attempts.push(AttemptSpan {
                span_id,
                started,
                ended: None,
                number: self.attempts.len() as u32 + 1,
                target: Arc::clone(target),
                provider: provider.to_string(),
                decision,
                status: None,
                first_byte: None,
                retry_reason: None,
            });
        }
        (
            context::traceparent(self.trace_id, span_id, self.sampled),
            self.tracestate.clone(),
        )
    }

    /// The open attempt ended: its status (if an answer came), first byte,
    /// and why another attempt follows (if one does).
    pub fn end_attempt(
        &mut self,
        status: Option<u16>,
        first_byte: Option<Duration>,
        retry_reason: Option<&str>,
    ) {
        if let Some(attempt) = self.attempts.last_mut().filter(|a| a.ended.is_none()) {
            attempt.ended = Some(Instant::now());
            attempt.status = status;
            attempt.first_byte = first_byte;
            attempt.retry_reason = retry_reason.map(str::to_string);
        }
    }

    /// Builds the spans of the finished request and queues them for
    /// export (nothing when the trace is not sampled).
    pub fn finish(mut self, ending: Ending<'_>) {
        self.settle(false);
        if !self.sampled {
            return;
        }
        let ended = Instant::now();
        let at =
            |instant: Instant| self.started_at + instant.saturating_duration_since(self.started);
        let scope = self.sink.scope.clone();
        let flags = TraceFlags::SAMPLED;
        let context =
            |span_id| SpanContext::new(self.trace_id, span_id, flags, false, TraceState::NONE);
        let child = |span_id, kind, name: String, from, to, attributes, events, status| SpanData {
            span_context: context(span_id),
            parent_span_id: self.root,
            parent_span_is_remote: false,
            span_kind: kind,
            name: Cow::Owned(name),
            start_time: at(from),
            end_time: at(to),
            attributes,
            dropped_attributes_count: 0,
            events,
            links: SpanLinks::default(),
            status,
            instrumentation_scope: scope.clone(),
        };
        let mut spans = Vec::with_capacity(2 + self.attempts.len());

        let mut root = vec![
            KeyValue::new("http.request.method", ending.method.to_string()),
            KeyValue::new("url.path", ending.path.to_string()),
            KeyValue::new("http.response.status_code", i64::from(ending.status)),
            KeyValue::new("rolter.attempts", self.attempts.len() as i64),
        ];
        let optional = [
            ("rolter.route", ending.route),
            ("gen_ai.request.model", ending.model),
            ("rolter.strategy", ending.strategy),
            ("rolter.api_key", ending.key),
            ("rolter.request_id", ending.request_id),
        ];
        root.extend(
            optional
                .into_iter()
                .filter_map(|(key, value)| Some(KeyValue::new(key, value?.to_string()))),
        );
        if let Some(usage) = ending.usage {
            root.extend(usage_attributes(usage));
        }
        let failed = ending.status >= 500 || ending.error.is_some() && ending.status == 0;
        let status = match (&ending.error, failed) {
            (Some(error), true) => Status::error(error.clone()),
            (None, true) => Status::error(format!("status {}", ending.status)),
            _ => Status::Unset,
        };

        if let Some((from, to, outcome)) = self.queue {
            spans.push(child(
                RandomIdGenerator::default().new_span_id(),
                SpanKind::Internal,
                "flow control wait".to_string(),
                from,
                to,
                vec![KeyValue::new("rolter.queue.outcome", outcome)],
                SpanEvents::default(),
                Status::Unset,
            ));
        }
        let last = self.attempts.len();
        for (i, attempt) in self.attempts.iter().enumerate() {
            let mut attributes = vec![
                KeyValue::new("rolter.target", attempt.target.to_string()),
                KeyValue::new("server.address", attempt.provider.clone()),
                KeyValue::new("rolter.attempt", i64::from(attempt.number)),
                KeyValue::new("rolter.decision", attempt.decision),
            ];
            if let Some(strategy) = ending.strategy {
                attributes.push(KeyValue::new("rolter.strategy", strategy.to_string()));
            }
            // The last attempt is the request's answer.
            let status_code = if i + 1 == last {
                attempt.status.or(Some(ending.status).filter(|s| *s != 0))
            } else {
                attempt.status
            };
            if let Some(code) = status_code {
                attributes.push(KeyValue::new("http.response.status_code", i64::from(code)));
            }
            if let Some(reason) = &attempt.retry_reason {
                attributes.push(KeyValue::new("rolter.retry_reason", reason.clone()));
            }
            let mut events = SpanEvents::default();
            if let Some(first_byte) = attempt.first_byte {
                attributes.push(KeyValue::new(
                    "rolter.time_to_first_token_ms",
                    first_byte.as_secs_f64() * 1000.0,
                ));
                events.events.push(opentelemetry::trace::Event::new(
                    "first token",
                    at(attempt.started + first_byte),
                    vec![],
                    0,
                ));
            }
            if i + 1 == last {
                if let Some(usage) = ending.usage {
                    attributes.extend(usage_attributes(usage));
                }
            }
            let failed_attempt =
                attempt.retry_reason.is_some() || status_code.is_some_and(|s| s >= 500);
            spans.push(child(
                attempt.span_id,
                SpanKind::Client,
                format!("upstream {}", attempt.provider),
                attempt.started,
                attempt.ended.unwrap_or(ended),
                attributes,
                events,
                if failed_attempt {
                    Status::error(attempt.retry_reason.clone().unwrap_or_default())
                } else {
                    Status::Unset
                },
            ));
        }
        spans.push(SpanData {
            span_context: context(self.root),
            parent_span_id: self.remote_parent.unwrap_or(SpanId::INVALID),
            parent_span_is_remote: self.remote_parent.is_some(),
            span_kind: SpanKind::Server,
            name: Cow::Owned(format!("{} {}", ending.method, ending.path)),
            start_time: self.started_at,
            end_time: at(ended),
            attributes: root,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status,
            instrumentation_scope: scope,
        });
        self.sink.send(spans);
        // The queue wait was reported; nothing is kept.
        self.attempts.clear();
    }
}

fn usage_attributes(usage: Usage) -> [KeyValue; 3] {
    [
        KeyValue::new("gen_ai.usage.input_tokens", usage.prompt as i64),
        KeyValue::new("gen_ai.usage.output_tokens", usage.completion as i64),
        KeyValue::new("rolter.usage.cached_tokens", usage.cached as i64),
    ]
}

/// The instrumentation scope of every span rolter makes.
pub(super) fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("rolter")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}
