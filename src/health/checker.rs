//! The active health checker: a background service probing every provider
//! of the running configuration (`GET health_path`, default `/v1/models`)
//! every `[health] interval_secs`, with Pingora's own HTTP health check.
//! It reads the configuration through a [`PlanSource`] (the server wires it
//! to the running snapshot), so it depends on nothing above this module.

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

use super::{HealthChange, HealthPolicy, ProbeOutcome, ProbeTarget};
use crate::clock;
use crate::metrics::Metrics;
use crate::wake::{self, Changes, Wake};

/// Marks a probe answered 429 in the validator's error.
const BUSY: ErrorType = ErrorType::CustomCode("engine busy", 429);
/// Marks a probe answered 404 or 405: the path, not the engine, is wrong.
const NOT_SERVED: &str = "health path not served";

/// What to probe now: a version that changes whenever the targets or the
/// policy may have, the policy, and the providers.
pub struct ProbePlan {
    pub version: u64,
    pub policy: HealthPolicy,
    pub targets: Arc<[ProbeTarget]>,
}

/// Reads the current [`ProbePlan`].
pub type PlanSource = Box<dyn Fn() -> ProbePlan + Send + Sync>;

pub struct HealthChecker {
    plan: PlanSource,
    metrics: Arc<Metrics>,
    changes: Changes,
}

impl HealthChecker {
    /// Probes what `plan` says, rereading it whenever `changes` moves.
    pub fn new(plan: PlanSource, metrics: Arc<Metrics>, changes: Changes) -> Self {
        Self {
            plan,
            metrics,
            changes,
        }
    }
}

/// One provider's probe, rebuilt when the snapshot changes.
struct Probe {
    check: HttpHealthCheck,
    backend: Backend,
}

impl Probe {
    fn new(target: &ProbeTarget, policy: &HealthPolicy) -> Option<Probe> {
        let mut check = HttpHealthCheck::new(&target.host, target.tls);
        let timeout = Duration::from_millis(policy.timeout_ms);
        check.peer_template.options.connection_timeout = Some(timeout);
        check.peer_template.options.read_timeout = Some(timeout);
        check.peer_template.options.write_timeout = Some(timeout);
        check.req.set_uri(target.path.parse().ok()?);
        if let Some(auth) = &target.authorization {
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
        let backend = Backend::new(&target.addr.to_string()).ok()?;
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
        let mut rounds = Rounds::default();
        let mut changes = self.changes.clone();
        loop {
            let plan = (self.plan)();
            let next = if plan.policy.enabled {
                self.round(&plan, &mut rounds).await
            } else {
                for target in plan.targets.iter() {
                    target.health.reset();
                }
                None
            };
            if wake::until(next, &mut changes, &mut shutdown).await == Wake::Shutdown {
                return;
            }
        }
    }
}

/// What the checker keeps from one round to the next.
#[derive(Default)]
struct Rounds {
    /// Built for the plan of version `built_for`.
    probes: HashMap<String, Probe>,
    built_for: u64,
    /// When each provider was last probed (ms); probes run every interval.
    last_probe: HashMap<String, u64>,
}

impl HealthChecker {
    /// Probes every provider of `plan` that is due; returns when the next
    /// one falls due (`None`: none has a probe).
    async fn round(&self, plan: &ProbePlan, rounds: &mut Rounds) -> Option<u64> {
        let policy = &plan.policy;
        if rounds.built_for != plan.version {
            rounds.probes = plan
                .targets
                .iter()
                .filter_map(|t| Some((t.slug.clone(), Probe::new(t, policy)?)))
                .collect();
            rounds.built_for = plan.version;
        }
        let Rounds {
            probes, last_probe, ..
        } = rounds;
        let now = clock::now_ms();
        let due: Vec<&ProbeTarget> = plan
            .targets
            .iter()
            .filter(|t| {
                t.health.probe_due(now)
                    && wake::due_at(last_probe.get(&t.slug).copied(), policy.interval_ms, now)
                        <= now
            })
            .collect();
        let timeout = Duration::from_millis(policy.timeout_ms);
        let runs = due.iter().filter_map(|provider| {
            let probe = probes.get(&provider.slug)?;
            Some(async move { (*provider, probe.run(timeout).await) })
        });
        for (provider, (outcome, detail)) in futures_util::future::join_all(runs).await {
            let now = clock::now_ms();
            last_probe.insert(provider.slug.clone(), now);
            self.metrics.record_probe(&provider.slug, outcome.label());
            let was_misconfigured = provider.health.probe_misconfigured().is_some();
            let change = provider.health.record(outcome, now, policy);
            if let ProbeOutcome::Misconfigured { status } = outcome {
                if !was_misconfigured {
                    log::warn!(
                        "provider {}: its health probe GET {} answered {status}: the engine does not serve that path; it is not judged by the probe until health_path names one it serves (e.g. /health or /v1/models)",
                        provider.slug,
                        provider.path
                    );
                }
            }
            self.metrics.set_probe_misconfigured(
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
            self.metrics
                .set_provider_healthy(&provider.slug, provider.health.is_healthy());
        }
        let now = clock::now_ms();
        plan.targets
            .iter()
            .filter(|t| probes.contains_key(&t.slug))
            .map(|t| {
                let after_last =
                    wake::due_at(last_probe.get(&t.slug).copied(), policy.interval_ms, now);
                after_last.max(t.health.next_probe_at())
            })
            .min()
    }
}
