//! The export side: a background service that follows `[tracing]`,
//! installs the sink requests send spans to, and sends them in batches to
//! the collector with `opentelemetry-otlp`'s HTTP/protobuf exporter, over
//! the gateway's own HTTP client (Pingora's connector; no second HTTP
//! stack in the binary).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use opentelemetry_sdk::Resource;
use pingora::connectors::http::Connector;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::sync::mpsc;

use super::{SpanSink, Traces};
use crate::config::TracingConfig;
use crate::http_client::Endpoint;
use crate::metrics::Metrics;

/// Spans sent in one export at most.
const MAX_BATCH: usize = 512;
/// How long spans wait for a fuller batch.
const BATCH_DELAY: Duration = Duration::from_millis(500);
/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest collector answer read.
const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Drains the queue of the configuration in effect into its collector.
pub struct TraceExportService {
    traces: Arc<Traces>,
    metrics: Arc<Metrics>,
}

impl TraceExportService {
    pub fn new(traces: Arc<Traces>, metrics: Arc<Metrics>) -> Self {
        Self { traces, metrics }
    }
}

/// A running export: the exporter and the queue it drains.
struct Running {
    exporter: opentelemetry_otlp::SpanExporter,
    receiver: mpsc::Receiver<Vec<SpanData>>,
    sink: Arc<SpanSink>,
}

impl TraceExportService {
    /// Takes the newest configuration's queue, if one was handed over.
    fn take_handoff(&self) -> Option<Option<Running>> {
        let handoff = self
            .traces
            .handoff
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()?;
        let (Some(settings), Some(receiver), Some(sink)) =
            (handoff.settings, handoff.receiver, handoff.sink)
        else {
            log::info!("tracing: off");
            return Some(None);
        };
        match exporter(&settings) {
            Ok(exporter) => {
                log::info!(
                    "tracing: exporting to {} (sampling ratio {})",
                    settings.otlp_endpoint,
                    settings.sampling_ratio()
                );
                Some(Some(Running {
                    exporter,
                    receiver,
                    sink,
                }))
            }
            Err(e) => {
                // Validated as an http(s) URL; a failure here is the
                // exporter's own. Spans queue up, then drop and count.
                log::error!("tracing: no exporter for {}: {e}", settings.otlp_endpoint);
                Some(None)
            }
        }
    }

    /// Sends `batch`, counting what became of it.
    async fn export(&self, running: &Running, batch: Vec<SpanData>) {
        if batch.is_empty() {
            return;
        }
        let n = batch.len();
        match tokio::time::timeout(EXPORT_TIMEOUT, running.exporter.export(batch)).await {
            Ok(Ok(())) => self.metrics.record_spans("exported", n as u64),
            Ok(Err(e)) => {
                log::debug!("tracing: export of {n} spans failed: {e}");
                self.metrics.record_spans("failed", n as u64);
            }
            Err(_) => self.metrics.record_spans("failed", n as u64),
        }
    }

    /// Takes what the queue holds into `batch`.
    fn take(running: &mut Running, spans: Vec<SpanData>, batch: &mut Vec<SpanData>) {
        running.sink.queued.fetch_sub(spans.len(), Ordering::AcqRel);
        batch.extend(spans);
    }
}

#[async_trait]
impl BackgroundService for TraceExportService {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut running: Option<Running> = self.take_handoff().flatten();
        let mut batch: Vec<SpanData> = Vec::new();
        loop {
            let flush_at = tokio::time::sleep(BATCH_DELAY);
            tokio::select! {
                _ = shutdown.changed() => break,
                _ = self.traces.changed.notified() => {
                    if let Some(next) = self.take_handoff() {
                        if let Some(old) = running.as_mut() {
                            while let Ok(spans) = old.receiver.try_recv() {
                                Self::take(old, spans, &mut batch);
                            }
                        }
                        if let Some(old) = &running {
                            self.export(old, std::mem::take(&mut batch)).await;
                        }
                        running = next;
                    }
                }
                spans = async {
                    match running.as_mut() {
                        Some(r) => r.receiver.recv().await,
                        None => std::future::pending().await,
                    }
                } => {
                    if let (Some(spans), Some(r)) = (spans, running.as_mut()) {
                        Self::take(r, spans, &mut batch);
                    }
                    if batch.len() >= MAX_BATCH {
                        if let Some(r) = &running {
                            self.export(r, std::mem::take(&mut batch)).await;
                        }
                    }
                }
                _ = flush_at, if !batch.is_empty() => {
                    if let Some(r) = &running {
                        self.export(r, std::mem::take(&mut batch)).await;
                    }
                }
            }
        }
        // What ended before shutdown still goes out.
        if let Some(mut r) = running {
            while let Ok(spans) = r.receiver.try_recv() {
                Self::take(&mut r, spans, &mut batch);
            }
            self.export(&r, batch).await;
        }
    }
}

fn exporter(settings: &TracingConfig) -> Result<opentelemetry_otlp::SpanExporter, String> {
    let client = GatewayHttp {
        endpoint: Arc::new(
            Endpoint::new(&settings.otlp_endpoint, EXPORT_TIMEOUT).map_err(|e| e.to_string())?,
        ),
        connector: Arc::new(Connector::new(None)),
    };
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(settings.otlp_endpoint.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| e.to_string())?;
    exporter.set_resource(
        &Resource::builder_empty()
            .with_service_name(settings.service_name.clone())
            .build(),
    );
    Ok(exporter)
}

/// `opentelemetry-http`'s client trait over the gateway's HTTP client.
#[derive(Clone)]
struct GatewayHttp {
    endpoint: Arc<Endpoint>,
    connector: Arc<Connector>,
}

impl std::fmt::Debug for GatewayHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GatewayHttp")
    }
}

#[async_trait]
impl HttpClient for GatewayHttp {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let headers: Vec<(HeaderName, HeaderValue)> = parts
            .headers
            .iter()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        let (status, answer) = self
            .endpoint
            .call(
                &self.connector,
                parts.method,
                &self.endpoint.path,
                &headers,
                Some(body),
                MAX_ANSWER_BYTES,
            )
            .await
            .map_err(|e| Box::new(e) as HttpError)?;
        Response::builder()
            .status(status)
            .body(answer)
            .map_err(|e| Box::new(e) as HttpError)
    }
}
