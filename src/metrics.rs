//! Prometheus metrics of the gateway.
//!
//! One registry per process. Label values are fixed at snapshot build where
//! possible ([`RouteMetrics`], [`TargetMetrics`] hold resolved handles), so the
//! request path does not hash label sets for its histograms and counters.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

use prometheus::{
    Encoder, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

mod flow;
mod telemetry;

pub use flow::EngineMetricsGauges;
use flow::FlowMetrics;
use telemetry::TelemetryMetrics;

use crate::kv_events::KvIndexSummary;
use crate::lmcache::OccupancySummary;
use crate::openai::usage::Usage;
use crate::tokenization::TokenSource;
use crate::tracker::{BreakerState, FailureReason};

/// Buckets for upstream latencies, in seconds: LLM calls run from
/// milliseconds (embeddings, cached prefills) to minutes (long generations).
pub const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Distinct target label values addressed routes (`<group>/<model>`,
/// `<provider>/<model>`) may add to the per-target series. Callers choose
/// those model names, so past this many a target's series are folded into
/// `<provider>/_other`.
pub const MAX_ADDRESSED_TARGET_LABELS: usize = 256;
/// The model part of a folded target label.
pub const FOLDED_MODEL_LABEL: &str = "_other";

pub struct Metrics {
    registry: Registry,
    /// Target labels admitted for addressed routes (bounded, see above).
    // Locked once per addressed route a snapshot keeps, never per request.
    addressed_labels: Mutex<HashSet<String>>,
    /// The per-target gauge label sets the last scrape set, so a target
    /// that left the tracker leaves the exposition too.
    // Locked by scrapes only.
    target_gauges: Mutex<HashSet<String>>,
    addressed_routes: IntGauge,
    addressed_evictions: IntCounter,
    health_panics: IntCounterVec,
    ineligible: IntCounterVec,
    probe_misconfigured: IntGaugeVec,
    requests: IntCounterVec,
    upstream_latency: HistogramVec,
    time_to_first_byte: HistogramVec,
    route_target_attempts: IntCounterVec,
    picks: IntCounterVec,
    routing_tokens: IntCounterVec,
    disaggregation: IntCounterVec,
    tokens: IntCounterVec,
    in_flight: IntGaugeVec,
    upstream_failures: IntCounterVec,
    reloads: IntCounterVec,
    config_version: IntGauge,
    adaptive_score: GaugeVec,
    cache_decisions: IntGaugeVec,
    provider_healthy: IntGaugeVec,
    health_probes: IntCounterVec,
    breaker_state: IntGaugeVec,
    breaker_transitions: IntCounterVec,
    parked: IntGaugeVec,
    retries: IntCounterVec,
    timeouts: IntCounterVec,
    client_cancels: IntCounterVec,
    rate_limited: IntCounterVec,
    redis_fallbacks: IntCounter,
    trace_spans: IntCounterVec,
    redis_in_use: IntGauge,
    client_connections: IntGauge,
    client_connections_closed: IntCounterVec,
    access_log_dropped: IntCounterVec,
    target_load: IntGaugeVec,
    target_saturated: IntGaugeVec,
    telemetry: TelemetryMetrics,
    pub flow: FlowMetrics,
}

/// Handles of one route, resolved when the snapshot is built; shared by
/// every route built for one group or pinned provider.
#[derive(Clone)]
pub struct RouteMetrics {
    /// The route's label value (its model, or `<slug>/*` for addresses).
    pub label: String,
    pub picks: IntCounter,
    /// `rolter_routing_tokens_total` of this route, one handle per
    /// [`TokenSource::ALL`] entry.
    pub token_sources: std::sync::Arc<[IntCounter]>,
    /// Set while requests are routed in health panic mode, so entering
    /// and leaving it is logged once each (`proxy/select.rs`).
    pub health_panic: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

/// `rolter_disaggregation_requests_total` of one disaggregated route: how
/// its requests went.
#[derive(Clone)]
pub struct DisaggregationCounts {
    /// Prefilled on a prefill engine, decoded on a decode engine.
    pub split: IntCounter,
    /// Served whole by a decode engine: a prompt under
    /// `min_prefill_tokens`, or an endpoint that is not split.
    pub decode_only: IntCounter,
    /// No prefill engine could take the request: it failed.
    pub prefill_failed: IntCounter,
}

/// Handles of one target within one route.
#[derive(Clone)]
pub struct TargetMetrics {
    /// The target's label value: `provider/model`, or for an addressed
    /// route possibly `provider/_other` (see [`Metrics::addressed_target_label`]).
    pub label: std::sync::Arc<str>,
    pub upstream_latency: Histogram,
    pub time_to_first_byte: Histogram,
    /// Attempts this route dispatched to the target, and those that
    /// failed: the route's own traffic there, where the tracker's counters
    /// are the target's over every route.
    pub attempts: IntCounter,
    pub failures: IntCounter,
    /// `rolter_requests_total` of this route and target with status 200,
    /// the common outcome, resolved once rather than by label per request.
    pub served_ok: IntCounter,
    /// `rolter_tokens_total` of this route and target, per API key.
    pub tokens: Arc<TokenCounters>,
}

/// `rolter_tokens_total` of one route and target: each API key's three
/// counters (`prompt`, `cached`, `completion`) are resolved by label on its
/// first request under the snapshot and kept, so a request counts its
/// tokens without a label lookup. The keys are the gateway's own (each
/// caller's key name, or `-`), so the map is as bounded as they are, and it
/// goes with the snapshot.
pub struct TokenCounters {
    family: IntCounterVec,
    route: String,
    target: String,
    by_key: RwLock<HashMap<String, [IntCounter; 3]>>,
}

impl TokenCounters {
    /// Counts the tokens an engine reported for one request of `key`.
    pub fn record(&self, key: &str, usage: Usage) {
        let counts = [usage.prompt, usage.cached, usage.completion];
        let by_key = self.by_key.read().unwrap_or_else(|e| e.into_inner());
        if let Some(counters) = by_key.get(key) {
            counters.iter().zip(counts).for_each(|(c, n)| c.inc_by(n));
            return;
        }
        drop(by_key);
        let counters = ["prompt", "cached", "completion"].map(|kind| {
            self.family
                .with_label_values(&[key, &self.route, &self.target, kind])
        });
        counters.iter().zip(counts).for_each(|(c, n)| c.inc_by(n));
        self.by_key
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key.to_owned())
            .or_insert(counters);
    }
}

impl TargetMetrics {
    /// This route's traffic to the target, for the admin API.
    pub fn traffic(&self) -> RouteTraffic {
        let count = self.upstream_latency.get_sample_count();
        RouteTraffic {
            attempts: self.attempts.get(),
            failures: self.failures.get(),
            latency_mean_ms: (count > 0)
                .then(|| self.upstream_latency.get_sample_sum() / count as f64 * 1000.0),
        }
    }
}

/// One route's traffic to one target since the process started.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct RouteTraffic {
    pub attempts: u64,
    pub failures: u64,
    /// Mean time of the route's requests there, header to last byte, in ms
    /// (`rolter_upstream_latency_seconds`); `None` before the first.
    pub latency_mean_ms: Option<f64>,
}

/// Why access-log lines were lost, as a fixed label value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessLogDrop {
    /// The writer's queue was full (the sink is slower than the traffic).
    QueueFull,
    /// Writing to the sink failed, or its file could not be opened.
    WriteError,
    /// The writer service is not running.
    WriterStopped,
}

impl AccessLogDrop {
    pub const ALL: [AccessLogDrop; 3] = [
        AccessLogDrop::QueueFull,
        AccessLogDrop::WriteError,
        AccessLogDrop::WriterStopped,
    ];

    pub fn label(self) -> &'static str {
        match self {
            AccessLogDrop::QueueFull => "queue_full",
            AccessLogDrop::WriteError => "write_error",
            AccessLogDrop::WriterStopped => "writer_stopped",
        }
    }
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let requests = IntCounterVec::new(
            Opts::new(
                "rolter_requests_total",
                "Proxied requests by route, final target and status sent to the client.",
            ),
            &["route", "target", "status"],
        )
        .expect("static metric definition");
        let upstream_latency = HistogramVec::new(
            HistogramOpts::new(
                "rolter_upstream_latency_seconds",
                "Time from dispatch to the end of the upstream response.",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["route", "target"],
        )
        .expect("static metric definition");
        let time_to_first_byte = HistogramVec::new(
            HistogramOpts::new(
                "rolter_time_to_first_byte_seconds",
                "Time from dispatch to the upstream's response headers.",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["route", "target"],
        )
        .expect("static metric definition");
        let picks = IntCounterVec::new(
            Opts::new(
                "rolter_balancer_picks_total",
                "Balancer picks by route and strategy.",
            ),
            &["route", "strategy"],
        )
        .expect("static metric definition");
        let routing_tokens = IntCounterVec::new(
            Opts::new(
                "rolter_routing_tokens_total",
                "Requests by route and where their routing token ids came from: the gateway's tokenizer, the caller, or none (and why).",
            ),
            &["route", "source", "reason"],
        )
        .expect("static metric definition");
        let disaggregation = IntCounterVec::new(
            Opts::new(
                "rolter_disaggregation_requests_total",
                "Requests of disaggregated routes by route and path: split (prefill engine, then decode engine), decode_only (served whole by a decode engine), prefill_failed (no prefill engine could take it).",
            ),
            &["route", "path"],
        )
        .expect("static metric definition");
        let tokens = IntCounterVec::new(
            Opts::new(
                "rolter_tokens_total",
                "Tokens engines reported in their answers' usage, by API key, route, target and kind: prompt (cached part included), cached, completion.",
            ),
            &["key", "route", "target", "kind"],
        )
        .expect("static metric definition");
        let in_flight = IntGaugeVec::new(
            Opts::new("rolter_target_in_flight", "Requests in flight per target."),
            &["target"],
        )
        .expect("static metric definition");
        let route_target_attempts = IntCounterVec::new(
            Opts::new(
                "rolter_route_target_attempts_total",
                "Attempts a route dispatched to a target, by outcome (dispatched, failed): the route's own share of the target's traffic.",
            ),
            &["route", "target", "outcome"],
        )
        .expect("static metric definition");
        let target_load = IntGaugeVec::new(
            Opts::new(
                "rolter_target_load",
                "Load strategies read per target: the engine's reported running + waiting plus what this node sent since, never below this node's in-flight count (tracker/engine.rs).",
            ),
            &["target"],
        )
        .expect("static metric definition");
        let target_saturated = IntGaugeVec::new(
            Opts::new(
                "rolter_target_saturated",
                "1 while the target takes no new request: at its provider's max_concurrency, or its engine reports a queue or KV usage at the [saturation] limits.",
            ),
            &["target"],
        )
        .expect("static metric definition");
        let upstream_failures = IntCounterVec::new(
            Opts::new(
                "rolter_upstream_failures_total",
                "Failed attempts per target and reason (connect, status, stream).",
            ),
            &["target", "reason"],
        )
        .expect("static metric definition");
        let reloads = IntCounterVec::new(
            Opts::new(
                "rolter_config_reloads_total",
                "Configuration reloads by result.",
            ),
            &["result"],
        )
        .expect("static metric definition");
        let config_version = IntGauge::new(
            "rolter_config_version",
            "Version of the configuration snapshot being served.",
        )
        .expect("static metric definition");
        let cache_decisions = IntGaugeVec::new(
            Opts::new(
                "rolter_cache_aware_decisions",
                "cache_aware picks by route and decision (affinity: kept on its longest match; spread: moved off it by the load guard; cold: by load) since the route's balancer was built (a reload restarts them).",
            ),
            &["route", "decision"],
        )
        .expect("static metric definition");
        let adaptive_score = GaugeVec::new(
            Opts::new(
                "rolter_adaptive_routing_target_score",
                "Blended score the adaptive strategy last ranked each target by.",
            ),
            &["model", "target"],
        )
        .expect("static metric definition");
        let gauge_vec = |name: &str, help: &str, labels: &[&str]| {
            IntGaugeVec::new(Opts::new(name, help), labels).expect("static metric definition")
        };
        let counter_vec = |name: &str, help: &str, labels: &[&str]| {
            IntCounterVec::new(Opts::new(name, help), labels).expect("static metric definition")
        };
        let provider_healthy = gauge_vec(
            "rolter_provider_healthy",
            "1 while the provider passes its active health checks.",
            &["provider"],
        );
        let health_probes = counter_vec(
            "rolter_health_probes_total",
            "Active health probes by outcome (up, busy, down).",
            &["provider", "outcome"],
        );
        let breaker_state = gauge_vec(
            "rolter_breaker_state",
            "Circuit breaker per target: 0 closed, 1 open, 2 half-open.",
            &["target"],
        );
        let breaker_transitions = counter_vec(
            "rolter_breaker_transitions_total",
            "Circuit breaker state changes per target.",
            &["target", "to"],
        );
        let parked = gauge_vec(
            "rolter_target_parked",
            "1 while the target is parked (after 429, 408, 5xx or a connect failure).",
            &["target"],
        );
        let retries = counter_vec(
            "rolter_retries_total",
            "Attempts retried on another target, by route and reason.",
            &["route", "reason"],
        );
        let timeouts = counter_vec(
            "rolter_upstream_timeouts_total",
            "Upstream timeouts per target and phase (first_byte, idle).",
            &["target", "phase"],
        );
        let client_cancels = counter_vec(
            "rolter_client_cancels_total",
            "Requests whose client went away before the response ended.",
            &["route"],
        );
        let access_log_dropped = counter_vec(
            "rolter_access_log_dropped_total",
            "Access-log lines lost, by reason (queue_full, write_error, writer_stopped).",
            &["reason"],
        );
        // Present from the start, so a dashboard sees 0 rather than nothing.
        for reason in AccessLogDrop::ALL {
            access_log_dropped.with_label_values(&[reason.label()]);
        }
        let rate_limited = counter_vec(
            "rolter_rate_limited_total",
            "Requests refused with 429 by an API key's limit (limit: rpm, tpm, concurrency).",
            &["key", "limit"],
        );
        let redis_fallbacks = IntCounter::new(
            "rolter_rate_limit_redis_fallbacks_total",
            "Times this node stopped counting rate limits in Redis (an error or a timeout) and counted locally until Redis answered again.",
        )
        .expect("static metric definition");
        let trace_spans = counter_vec(
            "rolter_trace_spans_total",
            "Spans of [tracing] by outcome: exported (the collector took them), dropped (the export queue was full), failed (the collector refused them or did not answer).",
            &["outcome"],
        );
        for outcome in ["exported", "dropped", "failed"] {
            trace_spans.with_label_values(&[outcome]);
        }
        let redis_in_use = IntGauge::new(
            "rolter_rate_limit_redis_up",
            "1 while this node counts rate limits in the Redis of [rate_limits], else 0.",
        )
        .expect("static metric definition");
        let client_connections = IntGauge::new(
            "rolter_client_connections",
            "Client connections open on the proxy listeners (what server.max_connections caps).",
        )
        .expect("static metric definition");
        let client_connections_closed = counter_vec(
            "rolter_client_connections_closed_total",
            "Client connections the gateway closed by reason (max_connections, header_timeout).",
            &["reason"],
        );
        let addressed_routes = IntGauge::new(
            "rolter_addressed_routes",
            "Routes kept for group and pinned-provider addresses (a bounded LRU, per configuration version).",
        )
        .expect("static metric definition");
        let addressed_evictions = IntCounter::new(
            "rolter_addressed_route_evictions_total",
            "Addressed routes dropped from the LRU to make room for another address.",
        )
        .expect("static metric definition");
        let health_panics = counter_vec(
            "rolter_health_panic_total",
            "Requests routed across targets active health checks had all marked down (Envoy's panic mode).",
            &["route"],
        );
        let ineligible = counter_vec(
            "rolter_ineligible_targets_total",
            "Targets left out of a request that found no eligible target (503), by why: tried, not_allowed, unhealthy, parked, breaker_open.",
            &["route", "reason"],
        );
        let probe_misconfigured = gauge_vec(
            "rolter_health_probe_misconfigured",
            "1 while the provider answers its health probe with 404 or 405: the probe path is wrong, the engine is not judged by it.",
            &["provider"],
        );
        for collector in [
            Box::new(requests.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(addressed_routes.clone()),
            Box::new(addressed_evictions.clone()),
            Box::new(health_panics.clone()),
            Box::new(ineligible.clone()),
            Box::new(probe_misconfigured.clone()),
            Box::new(upstream_latency.clone()),
            Box::new(time_to_first_byte.clone()),
            Box::new(picks.clone()),
            Box::new(routing_tokens.clone()),
            Box::new(disaggregation.clone()),
            Box::new(tokens.clone()),
            Box::new(in_flight.clone()),
            Box::new(upstream_failures.clone()),
            Box::new(reloads.clone()),
            Box::new(config_version.clone()),
            Box::new(adaptive_score.clone()),
            Box::new(cache_decisions.clone()),
            Box::new(provider_healthy.clone()),
            Box::new(health_probes.clone()),
            Box::new(breaker_state.clone()),
            Box::new(breaker_transitions.clone()),
            Box::new(parked.clone()),
            Box::new(retries.clone()),
            Box::new(timeouts.clone()),
            Box::new(client_cancels.clone()),
            Box::new(rate_limited.clone()),
            Box::new(redis_fallbacks.clone()),
            Box::new(trace_spans.clone()),
            Box::new(redis_in_use.clone()),
            Box::new(client_connections.clone()),
            Box::new(client_connections_closed.clone()),
            Box::new(access_log_dropped.clone()),
            Box::new(target_load.clone()),
            Box::new(target_saturated.clone()),
            Box::new(route_target_attempts.clone()),
        ] {
            registry
                .register(collector)
                .expect("metric names are unique");
        }
        Self {
            addressed_labels: Mutex::new(HashSet::new()),
            target_gauges: Mutex::new(HashSet::new()),
            addressed_routes,
            addressed_evictions,
            health_panics,
            ineligible,
            probe_misconfigured,
            requests,
            upstream_latency,
            time_to_first_byte,
            picks,
            routing_tokens,
            disaggregation,
            tokens,
            in_flight,
            upstream_failures,
            reloads,
            config_version,
            adaptive_score,
            cache_decisions,
            provider_healthy,
            health_probes,
            breaker_state,
            breaker_transitions,
            parked,
            retries,
            timeouts,
            client_cancels,
            rate_limited,
            redis_fallbacks,
            trace_spans,
            redis_in_use,
            client_connections,
            client_connections_closed,
            access_log_dropped,
            target_load,
            target_saturated,
            route_target_attempts,
            telemetry: TelemetryMetrics::new(&registry),
            flow: FlowMetrics::new(&registry),
            registry,
        }
    }

    pub fn route(&self, route: &str, strategy: &str) -> RouteMetrics {
        RouteMetrics {
            label: route.to_string(),
            picks: self.picks.with_label_values(&[route, strategy]),
            token_sources: TokenSource::ALL
                .iter()
                .map(|source| {
                    let (from, reason) = source.labels();
                    self.routing_tokens
                        .with_label_values(&[route, from, reason])
                })
                .collect(),
            health_panic: Default::default(),
        }
    }

    /// The disaggregation counters of `route`, resolved once per snapshot.
    pub fn disaggregation(&self, route: &str) -> DisaggregationCounts {
        let counter = |path: &str| self.disaggregation.with_label_values(&[route, path]);
        DisaggregationCounts {
            split: counter("split"),
            decode_only: counter("decode_only"),
            prefill_failed: counter("prefill_failed"),
        }
    }

    /// Counts where a routed request's token ids came from.
    pub fn record_token_source(route: &RouteMetrics, source: TokenSource) {
        if let Some(counter) = route.token_sources.get(source.index()) {
            counter.inc();
        }
    }

    pub fn target(&self, route: &str, target: &str) -> TargetMetrics {
        TargetMetrics {
            label: target.into(),
            upstream_latency: self.upstream_latency.with_label_values(&[route, target]),
            time_to_first_byte: self.time_to_first_byte.with_label_values(&[route, target]),
            attempts: self
                .route_target_attempts
                .with_label_values(&[route, target, "dispatched"]),
            failures: self
                .route_target_attempts
                .with_label_values(&[route, target, "failed"]),
            served_ok: self.requests.with_label_values(&[route, target, "200"]),
            tokens: Arc::new(TokenCounters {
                family: self.tokens.clone(),
                route: route.to_owned(),
                target: target.to_owned(),
                by_key: RwLock::default(),
            }),
        }
    }

    /// The target label of `provider` serving `model` on an addressed
    /// route: its own while fewer than [`MAX_ADDRESSED_TARGET_LABELS`] are
    /// admitted and `admit` is set (the address is kept: it was served),
    /// else `<provider>/_other`.
    pub fn addressed_target_label(&self, provider: &str, model: &str, admit: bool) -> String {
        let own = format!("{provider}/{model}");
        if admit {
            let mut admitted = self
                .addressed_labels
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if admitted.contains(&own) || admitted.len() < MAX_ADDRESSED_TARGET_LABELS {
                admitted.insert(own.clone());
                return own;
            }
        }
        format!("{provider}/{FOLDED_MODEL_LABEL}")
    }

    /// How many addressed routes the current snapshot keeps.
    pub fn set_addressed_routes(&self, count: usize) {
        self.addressed_routes.set(count as i64);
    }

    pub fn record_addressed_evictions(&self, count: usize) {
        self.addressed_evictions.inc_by(count as u64);
    }

    /// A request routed in health panic mode on `route` (its label).
    pub fn record_health_panic(&self, route: &str) {
        self.health_panics.with_label_values(&[route]).inc();
    }

    /// `count` targets of `route` left out for `reason` when a request
    /// found no eligible target.
    pub fn record_ineligible(&self, route: &str, reason: &str, count: usize) {
        self.ineligible
            .with_label_values(&[route, reason])
            .inc_by(count as u64);
    }

    pub fn set_probe_misconfigured(&self, provider: &str, misconfigured: bool) {
        self.probe_misconfigured
            .with_label_values(&[provider])
            .set(i64::from(misconfigured));
    }

    pub fn record_request(&self, route: &str, target: &str, status: u16) {
        let mut buf = itoa_buf();
        self.requests
            .with_label_values(&[route, target, status_label(status, &mut buf)])
            .inc();
    }

    pub fn record_upstream_failure(&self, target: &str, reason: FailureReason) {
        self.upstream_failures
            .with_label_values(&[target, reason.label()])
            .inc();
    }

    pub fn set_provider_healthy(&self, provider: &str, healthy: bool) {
        self.provider_healthy
            .with_label_values(&[provider])
            .set(i64::from(healthy));
    }

    /// A health probe of `provider` and its outcome's label.
    pub fn record_probe(&self, provider: &str, outcome: &str) {
        self.health_probes
            .with_label_values(&[provider, outcome])
            .inc();
    }

    pub fn record_breaker_transition(&self, target: &str, to: BreakerState) {
        self.breaker_transitions
            .with_label_values(&[target, to.as_str()])
            .inc();
    }

    pub fn record_retry(&self, route: &str, reason: FailureReason) {
        self.retries
            .with_label_values(&[route, reason.label()])
            .inc();
    }

    pub fn record_timeout(&self, target: &str, phase: &str) {
        self.timeouts.with_label_values(&[target, phase]).inc();
    }

    pub fn record_client_cancel(&self, route: &str) {
        self.client_cancels.with_label_values(&[route]).inc();
    }

    pub fn record_access_log_dropped(&self, reason: AccessLogDrop, lines: u64) {
        self.access_log_dropped
            .with_label_values(&[reason.label()])
            .inc_by(lines);
    }

    /// Access-log lines lost for `reason` so far.
    pub fn access_log_dropped(&self, reason: AccessLogDrop) -> u64 {
        self.access_log_dropped
            .with_label_values(&[reason.label()])
            .get()
    }

    /// A request refused by its key's `limit` (`rpm` or `concurrency`).
    pub fn record_rate_limited(&self, key: &str, limit: &str) {
        self.rate_limited.with_label_values(&[key, limit]).inc();
    }

    /// `n` spans of [tracing] ended as `outcome`.
    pub fn record_spans(&self, outcome: &str, n: u64) {
        self.trace_spans.with_label_values(&[outcome]).inc_by(n);
    }

    /// This node stopped counting in Redis.
    pub fn record_redis_fallback(&self) {
        self.redis_fallbacks.inc();
    }

    pub fn set_redis_in_use(&self, in_use: bool) {
        self.redis_in_use.set(i64::from(in_use));
    }

    /// The gauge of open client connections (moved by `downstream.rs`).
    pub fn client_connections(&self) -> &IntGauge {
        &self.client_connections
    }

    /// A client connection the gateway closed for `reason` (`downstream.rs`).
    pub fn record_client_connection_closed(&self, reason: &str) {
        self.client_connections_closed
            .with_label_values(&[reason])
            .inc();
    }

    pub fn record_reload(&self, ok: bool) {
        self.reloads
            .with_label_values(&[if ok { "ok" } else { "error" }])
            .inc();
    }

    pub fn set_config_version(&self, version: u64) {
        self.config_version.set(version as i64);
    }

    /// The KV-index and LMCache gauges, from their current summaries.
    pub fn sync_telemetry(&self, kv: &[KvIndexSummary], occupancy: &[(String, OccupancySummary)]) {
        self.telemetry.sync(kv, occupancy);
    }

    /// The per-target gauges (in flight, breaker, parked) of every tracked
    /// target; the series of a target no longer tracked are removed.
    pub fn set_target_gauges(&self, targets: &[TargetGauges]) {
        let labels: HashSet<String> = targets.iter().map(|t| t.label.clone()).collect();
        {
            let mut previous = self.target_gauges.lock().unwrap_or_else(|e| e.into_inner());
            for gone in previous.difference(&labels) {
                for gauge in [
                    &self.in_flight,
                    &self.breaker_state,
                    &self.parked,
                    &self.target_load,
                    &self.target_saturated,
                ] {
                    // Err only when the series was never set: nothing to remove.
                    gauge.remove_label_values(&[gone]).ok();
                }
            }
            *previous = labels;
        }
        for target in targets {
            let label = [target.label.as_str()];
            self.in_flight
                .with_label_values(&label)
                .set(target.in_flight as i64);
            let state = match target.breaker {
                BreakerState::Closed => 0,
                BreakerState::Open => 1,
                BreakerState::HalfOpen => 2,
            };
            self.breaker_state.with_label_values(&label).set(state);
            self.parked
                .with_label_values(&label)
                .set(i64::from(target.parked));
            self.target_load
                .with_label_values(&label)
                .set(i64::try_from(target.load).unwrap_or(i64::MAX));
            self.target_saturated
                .with_label_values(&label)
                .set(i64::from(target.saturated));
        }
    }

    /// The blended score `adaptive` last ranked `target` of `route` by.
    pub fn set_cache_decisions(&self, route: &str, decision: &str, count: u64) {
        self.cache_decisions
            .with_label_values(&[route, decision])
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    pub fn set_adaptive_score(&self, route: &str, target: &str, score: f64) {
        self.adaptive_score
            .with_label_values(&[route, target])
            .set(score);
    }

    /// Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = Vec::with_capacity(16 * 1024);
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            log::error!("encoding metrics failed: {e}");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

/// One tracked target's gauges at scrape time.
#[derive(Clone, Debug)]
pub struct TargetGauges {
    pub label: String,
    pub in_flight: u64,
    pub breaker: BreakerState,
    pub parked: bool,
    /// The combined load (`tracker/engine.rs`).
    pub load: u64,
    pub saturated: bool,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

fn itoa_buf() -> [u8; 3] {
    [b'0'; 3]
}

/// Three-digit status as a label without allocating.
fn status_label(status: u16, buf: &mut [u8; 3]) -> &str {
    let status = status.min(999);
    buf[0] = b'0' + (status / 100) as u8;
    buf[1] = b'0' + (status / 10 % 10) as u8;
    buf[2] = b'0' + (status % 10) as u8;
    std::str::from_utf8(buf).unwrap_or("000")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_label_is_three_digits() {
        let mut buf = itoa_buf();
        assert_eq!(status_label(200, &mut buf), "200");
        assert_eq!(status_label(503, &mut buf), "503");
        assert_eq!(status_label(7, &mut buf), "007");
    }

    #[test]
    fn target_gauges_of_targets_no_longer_tracked_leave_the_exposition() {
        let metrics = Metrics::new();
        let gauges = |label: &str| TargetGauges {
            label: label.to_string(),
            in_flight: 1,
            breaker: BreakerState::Open,
            parked: true,
            load: 3,
            saturated: true,
        };
        metrics.set_target_gauges(&[gauges("gpu-a/m"), gauges("gpu-b/m")]);
        let text = metrics.encode();
        assert!(text.contains(r#"rolter_target_in_flight{target="gpu-b/m"} 1"#));
        assert!(text.contains(r#"rolter_target_load{target="gpu-b/m"} 3"#));
        assert!(text.contains(r#"rolter_target_saturated{target="gpu-b/m"} 1"#));
        assert!(text.contains(r#"rolter_breaker_state{target="gpu-b/m"} 1"#));
        metrics.set_target_gauges(&[gauges("gpu-a/m")]);
        let text = metrics.encode();
        assert!(text.contains(r#"rolter_target_parked{target="gpu-a/m"} 1"#));
        assert!(!text.contains("gpu-b/m"), "{text}");
    }

    #[test]
    fn tokens_are_counted_per_key_under_the_targets_labels() {
        let metrics = Metrics::new();
        let target = metrics.target("chat", "gpu-a/m");
        let usage = |prompt, cached, completion| Usage {
            prompt,
            cached,
            completion,
        };
        target.tokens.record("team-a", usage(10, 4, 3));
        target.tokens.record("team-a", usage(5, 0, 2));
        target.tokens.record("-", usage(1, 1, 1));
        let text = metrics.encode();
        for (key, kind, count) in [
            ("team-a", "prompt", 15),
            ("team-a", "cached", 4),
            ("team-a", "completion", 5),
            ("-", "completion", 1),
        ] {
            let series = format!(
                r#"rolter_tokens_total{{key="{key}",kind="{kind}",route="chat",target="gpu-a/m"}} {count}"#
            );
            assert!(text.contains(&series), "{series} missing from\n{text}");
        }
    }
}
