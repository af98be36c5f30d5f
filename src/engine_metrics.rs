//! Reads each engine's own load from its Prometheus metrics
//! (`[providers.engine_metrics]`), so every gateway node balances on the
//! same figure (how it combines with this node's count: `tracker/engine.rs`).
//!
//! The series, told apart by name (one endpoint is either engine):
//!
//! | | running | waiting | KV-cache usage in [0, 1] |
//! |---|---|---|---|
//! | vLLM | `vllm:num_requests_running` | `vllm:num_requests_waiting` | `vllm:kv_cache_usage_perc` (before 0.10: `vllm:gpu_cache_usage_perc`) |
//! | SGLang | `sglang:num_running_reqs` | `sglang:num_queue_reqs` | `sglang:token_usage` |
//!
//! Both label samples with `model_name`. An engine serving several models
//! reports each; a target reads its own model's figures when the engine
//! labels it, and the engine's totals otherwise (one model, a label it
//! does not know, a passthrough target). Totals sum running and waiting
//! over samples (data-parallel ranks report one each) and take the
//! highest KV usage: saturation is about the fullest cache.
//!
//! A poll that fails (connection, status, no load series) makes the
//! engine's targets fall back to this node's count at once; a reading is
//! never older than `stale_after_ms` when used.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use http::Method;
use pingora::connectors::http::Connector;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

use crate::clock;
use crate::config::EngineMetrics;
use crate::http_client::Endpoint;
use crate::tracker::{EngineStats, LoadTracker, Reading, ANY_MODEL};
use crate::wake::{self, Changes, Wake};

/// The most of a metrics page that is read (vLLM's is ~100 KiB with
/// histograms).
const MAX_BODY: usize = 4 * 1024 * 1024;
/// Bounds of one poll's timeout, which is twice the poll interval: a busy
/// engine answers its metrics late, and a late reading is still better
/// than none; but one that takes seconds is not about now.
const MIN_POLL_TIMEOUT: Duration = Duration::from_millis(250);
const MAX_POLL_TIMEOUT: Duration = Duration::from_secs(2);

/// The running snapshot's version and each provider's slug with its
/// `[providers.engine_metrics]` (`None`: not read).
pub type MetricsSource = Box<dyn Fn() -> (u64, Vec<(String, Option<EngineMetrics>)>) + Send + Sync>;

/// One engine's figures, per model label and in total.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineReading {
    pub total: Reading,
    pub by_model: HashMap<String, Reading>,
}

impl EngineReading {
    /// The figures a target sending `model` reads.
    pub fn for_model(&self, model: &str) -> Reading {
        if model == ANY_MODEL || self.by_model.len() < 2 {
            return self.total;
        }
        self.by_model.get(model).copied().unwrap_or(self.total)
    }
}

#[derive(Clone, Copy)]
enum Series {
    Running,
    Waiting,
    KvUsage,
    /// vLLM's old name; read only when the new one is absent.
    LegacyKvUsage,
}

fn series(name: &str) -> Option<Series> {
    Some(match name {
        "vllm:num_requests_running" | "sglang:num_running_reqs" => Series::Running,
        "vllm:num_requests_waiting" | "sglang:num_queue_reqs" => Series::Waiting,
        "vllm:kv_cache_usage_perc" | "sglang:token_usage" => Series::KvUsage,
        "vllm:gpu_cache_usage_perc" => Series::LegacyKvUsage,
        _ => return None,
    })
}

/// The `model_name` label of a sample's label set (`a="x",model_name="m"`).
fn model_label(labels: &str) -> Option<String> {
    let mut rest = labels;
    while !rest.is_empty() {
        let (name, after) = rest.split_once('=')?;
        let after = after.strip_prefix('"')?;
        // The value ends at the first quote not escaped by a backslash.
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (_, '\\') => match chars.next()? {
                    (_, 'n') => value.push('\n'),
                    (_, c) => value.push(c),
                },
                (i, '"') => break i,
                (_, c) => value.push(c),
            }
        };
        if name.trim() == "model_name" {
            return Some(value);
        }
        rest = after[end + 1..].trim_start_matches([',', ' ']);
    }
    None
}

/// Reads the load series out of Prometheus text.
pub fn parse(text: &str) -> Result<EngineReading, String> {
    #[derive(Default, Clone, Copy)]
    struct Sums {
        running: Option<f64>,
        waiting: Option<f64>,
        kv: Option<f64>,
        legacy_kv: Option<f64>,
    }
    fn add(slot: &mut Option<f64>, value: f64) {
        *slot = Some(slot.unwrap_or(0.0) + value);
    }
    fn max(slot: &mut Option<f64>, value: f64) {
        *slot = Some(slot.map_or(value, |s| s.max(value)));
    }
    let mut by_model: HashMap<String, Sums> = HashMap::new();
    let mut total = Sums::default();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line
            .find(|c: char| c == '{' || c.is_whitespace())
            .unwrap_or(line.len());
        let Some(kind) = series(&line[..name_end]) else {
            continue;
        };
        let (labels, value) = match line[name_end..].strip_prefix('{') {
            Some(rest) => match rest.rsplit_once('}') {
                Some((labels, value)) => (labels, value),
                None => return Err(format!("unterminated labels: {line:?}")),
            },
            None => ("", &line[name_end..]),
        };
        let value_text = value.split_whitespace().next().unwrap_or("");
        let value: f64 = value_text.parse().map_err(|_| {
            format!(
                "{} has a non-numeric value {value_text:?}",
                &line[..name_end]
            )
        })?;
        if !value.is_finite() || value < 0.0 {
            return Err(format!("{} = {value} is not a load", &line[..name_end]));
        }
        let model = model_label(labels).unwrap_or_default();
        for sums in [by_model.entry(model).or_default(), &mut total] {
            match kind {
                Series::Running => add(&mut sums.running, value),
                Series::Waiting => add(&mut sums.waiting, value),
                Series::KvUsage => max(&mut sums.kv, value),
                Series::LegacyKvUsage => max(&mut sums.legacy_kv, value),
            }
        }
    }
    if total.running.is_none() && total.waiting.is_none() {
        return Err(
            "no vLLM or SGLang load series (num_requests_running / num_running_reqs)".into(),
        );
    }
    let reading = |sums: Sums| Reading {
        running: sums.running.unwrap_or(0.0).round() as u64,
        waiting: sums.waiting.unwrap_or(0.0).round() as u64,
        kv_usage: sums.kv.or(sums.legacy_kv),
    };
    Ok(EngineReading {
        total: reading(total),
        by_model: by_model
            .into_iter()
            .filter(|(model, _)| !model.is_empty())
            .map(|(model, sums)| (model, reading(sums)))
            .collect(),
    })
}

/// Polls every provider with `engine_metrics` into its targets' readings.
pub struct EngineMetricsPoller {
    source: MetricsSource,
    tracker: Arc<LoadTracker>,
    changes: Changes,
}

impl EngineMetricsPoller {
    /// Polls what `source` says, rereading it whenever `changes` moves.
    pub fn new(source: MetricsSource, tracker: Arc<LoadTracker>, changes: Changes) -> Self {
        Self {
            source,
            tracker,
            changes,
        }
    }

    /// One poll of `slug`'s engine, stored into its targets.
    async fn poll(
        &self,
        connector: &Connector,
        slug: &str,
        engine: Arc<EngineStats>,
        endpoint: &Result<Endpoint, String>,
    ) {
        // Taken before the request: what this node sends from here on is
        // not in the answer.
        let mark = engine.dispatched();
        let result = match endpoint {
            Ok(endpoint) => endpoint
                .call(connector, Method::GET, &endpoint.path, &[], None, MAX_BODY)
                .await
                .map_err(|e| e.to_string())
                .and_then(|(status, body)| {
                    if status != 200 {
                        return Err(format!("answered {status}"));
                    }
                    let text = std::str::from_utf8(&body).map_err(|_| "not UTF-8".to_string())?;
                    parse(text)
                }),
            Err(e) => Err(e.clone()),
        };
        let now = clock::now_ms();
        match result {
            Ok(reading) => {
                for (id, stats) in self.tracker.targets_of(slug) {
                    stats
                        .reported()
                        .store(reading.for_model(&id.model), mark, now);
                }
                engine.record_poll(true);
            }
            Err(e) => {
                engine.record_poll(false);
                log::debug!("provider {slug}: engine metrics poll failed: {e}");
            }
        }
    }

    /// Polls every provider of `due` whose engine has a tracked target, at
    /// once.
    async fn poll_all(
        &self,
        connector: &Connector,
        due: &[(&String, &EngineMetrics)],
        endpoints: &HashMap<String, Result<Endpoint, String>>,
    ) {
        let polls = due.iter().filter_map(|(slug, metrics)| {
            // No target of it is tracked yet: nothing would read it.
            let engine = self.tracker.engine(slug)?;
            // Targets created since the last poll need the setting too.
            engine.set_stale_after(Some(metrics.stale_after.as_millis() as u64));
            // Built for every provider of this version's list.
            let endpoint = endpoints.get(*slug)?;
            Some(self.poll(connector, slug, engine, endpoint))
        });
        futures_util::future::join_all(polls).await;
    }
}

#[async_trait]
impl BackgroundService for EngineMetricsPoller {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let connector = Connector::new(None);
        let mut endpoints: HashMap<String, Result<Endpoint, String>> = HashMap::new();
        let mut built_for = None;
        let mut last_poll: HashMap<String, u64> = HashMap::new();
        let mut changes = self.changes.clone();
        loop {
            let (version, providers) = (self.source)();
            if built_for != Some(version) {
                endpoints.clear();
                for (slug, metrics) in &providers {
                    let engine = self.tracker.engine(slug);
                    let Some(metrics) = metrics else {
                        if let Some(engine) = engine {
                            engine.set_stale_after(None);
                        }
                        continue;
                    };
                    let timeout =
                        (metrics.poll_interval * 2).clamp(MIN_POLL_TIMEOUT, MAX_POLL_TIMEOUT);
                    let endpoint =
                        Endpoint::new(&metrics.endpoint, timeout).map_err(|e| e.to_string());
                    if let Err(e) = &endpoint {
                        log::error!("provider {slug}: engine metrics endpoint unusable: {e}");
                    }
                    endpoints.insert(slug.clone(), endpoint);
                }
                built_for = Some(version);
            }
            let now = clock::now_ms();
            let due: Vec<(&String, &EngineMetrics)> = providers
                .iter()
                .filter_map(|(slug, metrics)| Some((slug, metrics.as_ref()?)))
                .filter(|(slug, metrics)| {
                    let every = metrics.poll_interval.as_millis() as u64;
                    wake::due_at(last_poll.get(*slug).copied(), every, now) <= now
                })
                .collect();
            if !due.is_empty() {
                self.poll_all(&connector, &due, &endpoints).await;
                let now = clock::now_ms();
                for (slug, _) in due {
                    last_poll.insert(slug.clone(), now);
                }
                last_poll.retain(|slug, _| endpoints.contains_key(slug));
            }
            let next = wake::earliest(
                providers.iter().filter_map(|(slug, metrics)| {
                    let every = metrics.as_ref()?.poll_interval.as_millis() as u64;
                    Some((last_poll.get(slug).copied(), every))
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

    const VLLM: &str =
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n\
        # TYPE vllm:num_requests_running gauge\n\
        vllm:num_requests_running{engine=\"0\",model_name=\"llama\"} 3.0\n\
        vllm:num_requests_running{engine=\"1\",model_name=\"llama\"} 2.0\n\
        vllm:num_requests_waiting{engine=\"0\",model_name=\"llama\"} 4.0\n\
        vllm:num_requests_waiting{engine=\"1\",model_name=\"llama\"} 0.0\n\
        vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"llama\"} 0.5\n\
        vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"llama\"} 0.75\n\
        vllm:num_requests_running_total 99\n\
        vllm:request_success_total{model_name=\"llama\"} 12\n";

    #[test]
    fn vllm_series_sum_over_ranks_and_take_the_fullest_cache() {
        let reading = parse(VLLM).unwrap();
        let expected = Reading {
            running: 5,
            waiting: 4,
            kv_usage: Some(0.75),
        };
        assert_eq!(reading.total, expected);
        assert_eq!(reading.by_model["llama"], expected);
        assert_eq!(reading.for_model("llama"), expected);
    }

    #[test]
    fn sglang_series_are_read_too() {
        let text = "sglang:num_running_reqs{model_name=\"qwen\",tp_rank=\"0\"} 7\n\
            sglang:num_queue_reqs{model_name=\"qwen\",tp_rank=\"0\"} 2\n\
            sglang:token_usage{model_name=\"qwen\",tp_rank=\"0\"} 0.31\n";
        assert_eq!(
            parse(text).unwrap().total,
            Reading {
                running: 7,
                waiting: 2,
                kv_usage: Some(0.31)
            }
        );
    }

    #[test]
    fn each_model_reads_its_own_figures_when_the_engine_serves_several() {
        let text = "vllm:num_requests_running{model_name=\"a\"} 1\n\
            vllm:num_requests_waiting{model_name=\"a\"} 0\n\
            vllm:num_requests_running{model_name=\"b\"} 4\n\
            vllm:num_requests_waiting{model_name=\"b\"} 6\n";
        let reading = parse(text).unwrap();
        assert_eq!(
            (
                reading.for_model("a").running,
                reading.for_model("a").waiting
            ),
            (1, 0)
        );
        assert_eq!(
            (
                reading.for_model("b").running,
                reading.for_model("b").waiting
            ),
            (4, 6)
        );
        let total = reading.for_model("unknown-adapter");
        assert_eq!(
            (total.running, total.waiting),
            (5, 6),
            "the engine's totals"
        );
        assert_eq!(reading.for_model(ANY_MODEL).running, 5);
    }

    #[test]
    fn the_old_kv_gauge_is_read_only_without_the_new_one() {
        let old = "vllm:num_requests_running 1\nvllm:gpu_cache_usage_perc 0.4\n";
        assert_eq!(parse(old).unwrap().total.kv_usage, Some(0.4));
        let both = "vllm:num_requests_running 1\nvllm:gpu_cache_usage_perc 0.4\nvllm:kv_cache_usage_perc 0.6\n";
        assert_eq!(parse(both).unwrap().total.kv_usage, Some(0.6));
    }

    #[test]
    fn pages_without_load_series_or_with_garbage_are_errors() {
        assert!(parse("").is_err());
        assert!(parse("process_cpu_seconds_total 5\n").is_err());
        assert!(parse("vllm:num_requests_running{model_name=\"m\"} lots\n").is_err());
        assert!(parse("vllm:num_requests_waiting -1\n").is_err());
        assert!(parse("vllm:num_requests_waiting NaN\n").is_err());
        assert!(parse("vllm:num_requests_waiting{model_name=\"m\" 1\n").is_err());
    }

    #[test]
    fn label_values_with_escapes_and_commas_are_read_whole() {
        assert_eq!(
            model_label(r#"a="x,\"y\"",model_name="org/m,1""#),
            Some("org/m,1".to_owned())
        );
        assert_eq!(model_label(r#"engine="0""#), None);
        assert_eq!(model_label(r#"model_name="unterminated"#), None);
    }
}
