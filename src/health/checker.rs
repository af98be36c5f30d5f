//! The active health checker: a background service probing every provider
//! of the current snapshot (`GET health_path`, default `/v1/models`) every
//! `[health] interval_secs`, with Pingora's own HTTP health check.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::http::ResponseHeader;
use pingora::lb::health_check::{HealthCheck, HttpHealthCheck};
use pingora::lb::Backend;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use pingora::{Error, ErrorType};

use super::{HealthChange, HealthPolicy, ProbeOutcome};
use crate::clock;
use crate::snapshot::Provider;
use crate::state::GatewayState;

/// How often the checker wakes to see which probes are due.
const TICK: Duration = Duration::from_millis(250);
/// Marks a probe answered 429 in the validator's error.
const BUSY: ErrorType = ErrorType::CustomCode("engine busy", 429);
/// Marks a probe answered 404 or 405: the path, not the engine, is wrong.
const NOT_SERVED: &str = "health path not served";

pub struct HealthChecker {
    state: Arc<GatewayState>,
}

impl HealthChecker {
    pub fn new(state: Arc<GatewayState>) -> Self {
        Self { state }
    }
}

/// One provider's probe, rebuilt when the snapshot changes.
struct Probe {
    check: HttpHealthCheck,
    backend: Backend,
}

impl Probe {
    fn new(provider: &Provider, policy: &HealthPolicy) -> Option<Probe> {
        let host = provider.host_header.to_str().ok()?;
        let mut check = HttpHealthCheck::new(host, provider.tls);
        let timeout = Duration::from_millis(policy.timeout_ms);
        check.peer_template.options.connection_timeout = Some(timeout);
        check.peer_template.options.read_timeout = Some(timeout);
        check.peer_template.options.write_timeout = Some(timeout);
        check.req.set_uri(
            format!("{}{}", provider.path_prefix, provider.health_path)
                .parse()
                .ok()?,
        );
        if let Some(auth) = &provider.authorization {
            check
                .req
                .insert_header(http::header::AUTHORIZATION, auth.clone())
                .ok()?;
        }
        check.validator = Some(Box::new(|response: &ResponseHeader| {
            match response.status.as_u16() {
                200..=299 => Ok(()),
                429 => Err(Error::explain(BUSY, "health probe answered 429")),
                status @ (404 | 405) => Err(Error::explain(
                    ErrorType::CustomCode(NOT_SERVED, status),
                    format!("health probe answered {status}"),
                )),
                status => Err(Error::explain(
                    ErrorType::CustomCode("health probe status", status),
                    format!("health probe answered {status}"),
                )),
            }
        }));
        let backend = Backend::new(&provider.addr.to_string()).ok()?;
        Some(Probe { check, backend })
    }

    async fn run(&self, timeout: Duration) -> (ProbeOutcome, String) {
        match tokio::time::timeout(timeout, self.check.check(&self.backend)).await {
            Ok(Ok(())) => (ProbeOutcome::Up, String::new()),
            Ok(Err(e)) if e.etype() == &BUSY => (ProbeOutcome::Busy, e.to_string()),
            Ok(Err(e)) => match e.etype() {
                ErrorType::CustomCode(NOT_SERVED, status) => (
                    ProbeOutcome::Misconfigured { status: *status },
                    e.to_string(),
                ),
                _ => (ProbeOutcome::Down, e.to_string()),
            },
            Err(_) => (ProbeOutcome::Down, format!("no answer within {timeout:?}")),
        }
    }
}

#[async_trait]
impl BackgroundService for HealthChecker {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut probes: HashMap<String, Probe> = HashMap::new();
        let mut built_for = 0;
        // When each provider was last probed (ms); probes run every interval.
        let mut last_probe: HashMap<String, u64> = HashMap::new();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(TICK) => {}
                _ = shutdown.changed() => return,
            }
            let snapshot = self.state.snapshot();
            let policy = snapshot.limits.health;
            if !policy.enabled {
                for provider in snapshot.providers() {
                    provider.health.reset();
                }
                continue;
            }
            if built_for != snapshot.version {
                probes = snapshot
                    .providers()
                    .filter_map(|p| Some((p.slug.clone(), Probe::new(p, &policy)?)))
                    .collect();
                built_for = snapshot.version;
            }
            let now = clock::now_ms();
            let due: Vec<&Arc<Provider>> = snapshot
                .providers()
                .filter(|p| {
                    p.health.probe_due(now)
                        && last_probe
                            .get(&p.slug)
                            .is_none_or(|&at| now >= at + policy.interval_ms)
                })
                .collect();
            if due.is_empty() {
                continue;
            }
            let timeout = Duration::from_millis(policy.timeout_ms);
            let runs = due.iter().filter_map(|provider| {
                let probe = probes.get(&provider.slug)?;
                Some(async move { (*provider, probe.run(timeout).await) })
            });
            for (provider, (outcome, detail)) in futures_util::future::join_all(runs).await {
                let now = clock::now_ms();
                last_probe.insert(provider.slug.clone(), now);
                self.state.metrics.record_probe(
                    &provider.slug,
                    outcome,
                    provider.health.is_healthy(),
                );
                let was_misconfigured = provider.health.probe_misconfigured().is_some();
                let change = provider.health.record(outcome, now, &policy);
                if let ProbeOutcome::Misconfigured { status } = outcome {
                    if !was_misconfigured {
                        log::warn!(
                            "provider {}: its health probe GET {} answered {status}: the engine does not serve that path; it is not judged by the probe until health_path names one it serves (e.g. /health or /v1/models)",
                            provider.slug,
                            provider.health_path
                        );
                    }
                }
                self.state.metrics.set_probe_misconfigured(
                    &provider.slug,
                    provider.health.probe_misconfigured().is_some(),
                );
                match change {
                    Some(HealthChange::WentDown) => {
                        log::warn!("provider {} is unhealthy: {detail}", provider.slug)
                    }
                    Some(HealthChange::CameUp) => {
                        log::info!("provider {} is healthy again", provider.slug)
                    }
                    None if outcome == ProbeOutcome::Busy => {
                        log::info!(
                            "provider {} is busy (429); backing off its health probes",
                            provider.slug
                        )
                    }
                    None => {}
                }
                self.state
                    .metrics
                    .set_provider_healthy(&provider.slug, provider.health.is_healthy());
            }
        }
    }
}
