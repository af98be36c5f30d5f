//! Polls each provider's LMCache occupancy signal in the background. The
//! providers and their `[providers.lmcache]` come through a
//! [`SignalSource`] (the server wires it to the running snapshot).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use http::Method;
use pingora::connectors::http::Connector;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

use super::OccupancyRegistry;
use crate::clock;
use crate::config::{Lmcache, LmcacheFormat};
use crate::http_client::Endpoint;
use crate::wake::{self, Changes, Wake};

/// The most of a signal's body that is read.
const MAX_BODY: usize = 1024 * 1024;

/// Reads the current signals: a version that changes whenever they may
/// have, and each provider's slug and `[providers.lmcache]`.
pub type SignalSource = Box<dyn Fn() -> (u64, Vec<(String, Lmcache)>) + Send + Sync>;

pub struct OccupancyPoller {
    signals: SignalSource,
    registry: Arc<OccupancyRegistry>,
    changes: Changes,
}

impl OccupancyPoller {
    /// Polls what `signals` names into `registry`, rereading it whenever
    /// `changes` moves.
    pub fn new(signals: SignalSource, registry: Arc<OccupancyRegistry>, changes: Changes) -> Self {
        Self {
            signals,
            registry,
            changes,
        }
    }

    /// Polls every provider of `due` at once and records what each said.
    async fn poll_all(
        &self,
        connector: &Connector,
        sources: &HashMap<String, Result<Source, String>>,
        due: &[&(String, Lmcache)],
        last_poll: &mut HashMap<String, u64>,
    ) {
        let polls = due.iter().map(|(slug, lmcache)| {
            let source = sources.get(slug);
            async move {
                let result = match source {
                    Some(Ok(source)) => source.poll(connector).await,
                    Some(Err(e)) => Err(e.clone()),
                    None => Err("no source".to_string()),
                };
                (slug, lmcache, result)
            }
        });
        for (slug, lmcache, result) in futures_util::future::join_all(polls).await {
            let now = clock::now_ms();
            last_poll.insert(slug.clone(), now);
            let signal = self.registry.provider(slug);
            signal.set_stale_after(lmcache.stale_after.as_millis() as u64);
            match result {
                Ok((occupancy, available)) => signal.record(occupancy, available, now),
                Err(e) => {
                    signal.record_failure();
                    log::debug!("provider {slug}: LMCache poll failed: {e}");
                }
            }
        }
    }
}

/// Where one provider's signal is read from.
struct Source {
    endpoint: Endpoint,
    format: LmcacheFormat,
}

impl Source {
    fn new(lmcache: &Lmcache, timeout: Duration) -> Result<Source, String> {
        Ok(Source {
            endpoint: Endpoint::new(&lmcache.endpoint, timeout).map_err(|e| e.to_string())?,
            format: lmcache.format.clone(),
        })
    }

    /// One poll: the occupancy and whether the cache is available.
    async fn poll(&self, connector: &Connector) -> Result<(f64, bool), String> {
        let (status, body) = self
            .endpoint
            .call(
                connector,
                Method::GET,
                &self.endpoint.path,
                &[],
                None,
                MAX_BODY,
            )
            .await
            .map_err(|e| e.to_string())?;
        if status != 200 {
            return Err(format!("answered {status}"));
        }
        let text = std::str::from_utf8(&body).map_err(|_| "signal is not UTF-8".to_string())?;
        match &self.format {
            LmcacheFormat::Json => parse_json(text),
            LmcacheFormat::Prometheus { metric } => {
                parse_prometheus(text, metric).map(|o| (o, true))
            }
        }
    }
}

/// `{"occupancy": f, "cache_available": b}`.
fn parse_json(text: &str) -> Result<(f64, bool), String> {
    #[derive(serde::Deserialize)]
    struct Signal {
        occupancy: Option<f64>,
        cache_available: Option<bool>,
    }
    let signal: Signal =
        serde_json::from_str(text).map_err(|e| format!("not the expected JSON: {e}"))?;
    let occupancy = signal.occupancy.ok_or("no `occupancy` in the signal")?;
    Ok((occupancy, signal.cache_available.unwrap_or(true)))
}

/// The value of the first sample of gauge `metric` in Prometheus text.
fn parse_prometheus(text: &str, metric: &str) -> Result<f64, String> {
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix(metric) else {
            continue;
        };
        // The name must end here: `metric 0.5` or `metric{labels} 0.5`.
        let rest = match rest.chars().next() {
            Some('{') => rest.split_once('}').map_or("", |(_, after)| after),
            Some(c) if c.is_whitespace() => rest,
            _ => continue,
        };
        let value = rest
            .split_whitespace()
            .next()
            .ok_or("sample without a value")?;
        return value
            .parse::<f64>()
            .map_err(|_| format!("{metric} has a non-numeric value {value:?}"));
    }
    Err(format!("no sample of {metric}"))
}

#[async_trait]
impl BackgroundService for OccupancyPoller {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let connector = Connector::new(None);
        let mut sources: HashMap<String, Result<Source, String>> = HashMap::new();
        let mut built_for = 0;
        let mut last_poll: HashMap<String, u64> = HashMap::new();
        let mut changes = self.changes.clone();
        loop {
            let (version, signals) = (self.signals)();
            if built_for != version {
                sources = signals
                    .iter()
                    .map(|(slug, lmcache)| {
                        let timeout = lmcache.poll_interval.min(Duration::from_secs(2));
                        let source = Source::new(lmcache, timeout);
                        if let Err(e) = &source {
                            log::error!("provider {slug}: LMCache endpoint unusable: {e}");
                        }
                        (slug.clone(), source)
                    })
                    .collect();
                built_for = version;
            }
            let now = clock::now_ms();
            let due: Vec<&(String, Lmcache)> = signals
                .iter()
                .filter(|(slug, lmcache)| {
                    let every = lmcache.poll_interval.as_millis() as u64;
                    wake::due_at(last_poll.get(slug).copied(), every, now) <= now
                })
                .collect();
            if !due.is_empty() {
                self.poll_all(&connector, &sources, &due, &mut last_poll)
                    .await;
            }
            let next = wake::earliest(
                signals.iter().map(|(slug, lmcache)| {
                    let every = lmcache.poll_interval.as_millis() as u64;
                    (last_poll.get(slug).copied(), every)
                }),
                clock::now_ms(),
            );
            if wake::until(next, &mut changes, &mut shutdown).await == Wake::Shutdown {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_signal_needs_occupancy() {
        assert_eq!(
            parse_json(r#"{"occupancy":0.4,"cache_available":false}"#),
            Ok((0.4, false))
        );
        assert_eq!(parse_json(r#"{"occupancy":0.4}"#), Ok((0.4, true)));
        assert!(parse_json("{}").is_err());
        assert!(parse_json("").is_err());
    }

    #[test]
    fn prometheus_gauge_is_found_with_or_without_labels() {
        let text = "# HELP lmcache:usage_ratio used\n# TYPE lmcache:usage_ratio gauge\nlmcache:usage_ratio_total 9\nlmcache:usage_ratio{engine=\"a\"} 0.25\n";
        assert_eq!(parse_prometheus(text, "lmcache:usage_ratio"), Ok(0.25));
        assert_eq!(parse_prometheus("vllm:kv 0.5\n", "vllm:kv"), Ok(0.5));
        assert!(parse_prometheus("vllm:kv_total 0.5\n", "vllm:kv").is_err());
        assert!(parse_prometheus("vllm:kv NaNx\n", "vllm:kv").is_err());
    }
}
