//! Distributed traces (`[tracing] otlp_endpoint`): W3C Trace Context in
//! and out, and a span per request, per flow-control wait and per
//! upstream attempt, exported over OTLP (HTTP/protobuf).
//!
//! **Off costs nothing.** Without `[tracing]` the sink is empty: a request
//! loads one pointer, finds nothing and never looks at a header; a
//! caller's `traceparent` passes to the engine untouched, as any header.
//!
//! **On, the request path only records.** Ids are drawn when the request
//! starts (the engine is sent `traceparent` naming the attempt's span),
//! instants are noted as the request goes, and the spans are built when it
//! ends (`request.rs`) and handed to a bounded queue with `try_send`: a
//! full queue drops the request's spans and counts them
//! (`rolter_trace_spans_total{outcome="dropped"}`), it never waits. The
//! export service (`export.rs`) batches them to the collector.
//!
//! **Whose trace.** A caller with an API key, or behind a trusted proxy
//! (`server.trusted_proxies`), continues its own trace (its `traceparent`,
//! its sampling decision, its `tracestate`); anyone else starts a new one,
//! sampled at `sampling_ratio` by trace id (as OpenTelemetry's
//! `TraceIdRatioBased` does), so a trace is kept or dropped whole.

mod context;
mod export;
mod request;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwapOption;
use opentelemetry::trace::TraceId;
use opentelemetry::InstrumentationScope;
use opentelemetry_sdk::trace::SpanData;

pub use context::{parse_traceparent, traceparent, Parent};
pub use export::TraceExportService;
pub use request::{Ending, RequestTrace};

use crate::config::TracingConfig;
use crate::metrics::Metrics;

pub static TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");
pub static TRACESTATE: http::HeaderName = http::HeaderName::from_static("tracestate");

/// Where finished spans go; present while tracing is configured.
pub struct SpanSink {
    queue: tokio::sync::mpsc::Sender<Vec<SpanData>>,
    /// Spans sent and not yet taken by the exporter.
    queued: Arc<AtomicUsize>,
    max_queued: usize,
    /// Traces whose id's low 64 bits are below this are sampled.
    sample_below: u64,
    /// Every ratio of 1 samples all, whatever the id.
    sample_all: bool,
    scope: InstrumentationScope,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for SpanSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpanSink")
            .field("max_queued", &self.max_queued)
            .field("sample_below", &self.sample_below)
            .finish()
    }
}

impl SpanSink {
    /// Whether a new trace with this id is sampled.
    fn samples(&self, trace_id: TraceId) -> bool {
        self.sample_all || (u128::from_be_bytes(trace_id.to_bytes()) as u64) < self.sample_below
    }

    /// Queues one request's spans, or drops and counts them.
    fn send(&self, spans: Vec<SpanData>) {
        let n = spans.len();
        let reserved = self
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |queued| {
                (queued + n <= self.max_queued).then_some(queued + n)
            })
            .is_ok();
        if !reserved {
            self.metrics.record_spans("dropped", n as u64);
            return;
        }
        if self.queue.try_send(spans).is_err() {
            self.queued.fetch_sub(n, Ordering::AcqRel);
            self.metrics.record_spans("dropped", n as u64);
        }
    }
}

/// The node's tracing switch: the sink while `[tracing]` is configured.
///
/// A configuration takes effect when its snapshot is installed
/// ([`Traces::configure`]): the sink is swapped at once and the new queue's
/// receiving end is handed to the export service.
#[derive(Debug, Default)]
pub struct Traces {
    /// Whether `sink` holds one: the one load a request pays while tracing
    /// is off (`benches/traces.rs`).
    enabled: AtomicBool,
    sink: ArcSwapOption<SpanSink>,
    /// The settings in effect; locked only by `configure` (once per reload).
    current: Mutex<Option<TracingConfig>>,
    /// The newest configuration's queue, for the export service to take.
    handoff: Mutex<Option<Handoff>>,
    changed: tokio::sync::Notify,
}

/// What the export service needs of a configuration.
#[derive(Debug)]
struct Handoff {
    settings: Option<TracingConfig>,
    receiver: Option<tokio::sync::mpsc::Receiver<Vec<SpanData>>>,
    sink: Option<Arc<SpanSink>>,
}

impl Traces {
    /// Applies `[tracing]` of a configuration being installed; nothing
    /// changes when it is the one in effect.
    pub fn configure(&self, settings: Option<&TracingConfig>, metrics: &Arc<Metrics>) {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if current.as_ref() == settings {
            return;
        }
        *current = settings.cloned();
        let (sink, receiver) = match settings {
            Some(settings) => {
                // Bounded in spans by `queued`; the channel holds at most
                // that many requests' worth.
                let (queue, receiver) =
                    tokio::sync::mpsc::channel(settings.max_queued_spans.max(1));
                let ratio = settings.sampling_ratio();
                let sink = Arc::new(SpanSink {
                    queue,
                    queued: Arc::default(),
                    max_queued: settings.max_queued_spans,
                    sample_below: sample_below(ratio),
                    sample_all: ratio >= 1.0,
                    scope: request::scope(),
                    metrics: Arc::clone(metrics),
                });
                (Some(sink), Some(receiver))
            }
            None => (None, None),
        };
        self.sink.store(sink.clone());
        self.enabled.store(sink.is_some(), Ordering::Release);
        *self.handoff.lock().unwrap_or_else(|e| e.into_inner()) = Some(Handoff {
            settings: settings.cloned(),
            receiver,
            sink,
        });
        self.changed.notify_one();
    }

    /// The trace of a request with this header, if tracing is on.
    pub fn begin(&self, request: &pingora::http::RequestHeader) -> Option<RequestTrace> {
        if !self.enabled.load(Ordering::Acquire) {
            return None;
        }
        let sink = self.sink.load_full()?;
        Some(RequestTrace::begin(
            sink,
            request.headers.get(&TRACEPARENT),
            request.headers.get(&TRACESTATE),
        ))
    }
}

/// Ratio (0 to 1) as the threshold of [`SpanSink::samples`].
fn sample_below(ratio: f64) -> u64 {
    (ratio.clamp(0.0, 1.0) * u64::MAX as f64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink(
        ratio: f64,
        max_queued: usize,
    ) -> (SpanSink, tokio::sync::mpsc::Receiver<Vec<SpanData>>) {
        let (queue, receiver) = tokio::sync::mpsc::channel(max_queued.max(1));
        let sink = SpanSink {
            queue,
            queued: Arc::default(),
            max_queued,
            sample_below: sample_below(ratio),
            sample_all: ratio >= 1.0,
            scope: request::scope(),
            metrics: Arc::new(Metrics::new()),
        };
        (sink, receiver)
    }

    #[test]
    fn the_ratio_samples_that_share_of_trace_ids() {
        let (half, _rx) = sink(0.25, 8);
        let ids = (0..4000u128)
            .map(|i| TraceId::from(i.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)));
        let sampled = ids.filter(|id| half.samples(*id)).count();
        assert!((800..1200).contains(&sampled), "{sampled} of 4000 at 0.25");
        let (none, _rx) = sink(0.0, 8);
        assert!(!none.samples(TraceId::from(1)));
        let (all, _rx) = sink(1.0, 8);
        assert!(all.samples(TraceId::from(u128::MAX)));
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_waiting() {
        let (sink, mut receiver) = sink(1.0, 3);
        let spans = |n| vec![dummy_span(); n];
        sink.send(spans(2));
        sink.send(spans(2));
        assert_eq!(sink.queued.load(Ordering::Acquire), 2);
        let metrics = sink.metrics.encode();
        assert!(
            metrics.contains(r#"rolter_trace_spans_total{outcome="dropped"} 2"#),
            "{metrics}"
        );
        assert_eq!(receiver.try_recv().unwrap().len(), 2);
    }

    fn dummy_span() -> SpanData {
        use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceState};
        SpanData {
            span_context: SpanContext::new(
                TraceId::from(1),
                SpanId::from(1),
                TraceFlags::SAMPLED,
                false,
                TraceState::NONE,
            ),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: "t".into(),
            start_time: std::time::SystemTime::UNIX_EPOCH,
            end_time: std::time::SystemTime::UNIX_EPOCH,
            attributes: vec![],
            dropped_attributes_count: 0,
            events: Default::default(),
            links: Default::default(),
            status: Status::Unset,
            instrumentation_scope: request::scope(),
        }
    }
}
