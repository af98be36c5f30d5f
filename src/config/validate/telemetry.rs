//! A provider's engine telemetry: `[providers.kv_events]` (vLLM's KV-cache
//! event stream, for `precise_cache_aware`), `[providers.lmcache]` (an
//! occupancy signal, for `lmcache_aware`) and `[providers.engine_metrics]`
//! (the engine's load, for every load-reading strategy). Formats:
//! docs/design/wire-formats.md.
//!
//! A data-parallel engine runs one publisher per rank, rank r on the
//! configured port + r, so the whole port range of every rank must fit
//! below 65536, and the live and replay ranges of one host must not share a
//! port (one socket per port).

use std::time::Duration;

use super::super::endpoint::{self, TcpEndpoint};
use super::super::file;
use super::super::{BaseUrl, EngineMetrics, KvEvents, Lmcache, LmcacheFormat};
use super::eligibility::{by_default, Unit};
use super::Validator;

/// Whether `name` is a Prometheus metric name, `[a-zA-Z_:][a-zA-Z0-9_:]*`.
fn is_metric_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_' || b == b':')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':')
}

impl Validator<'_> {
    /// A `tcp://host:port` endpoint at `field`, normalized.
    fn tcp_endpoint(&mut self, field: &str, written: &str) -> Option<TcpEndpoint> {
        match endpoint::parse_tcp(written) {
            Ok(endpoint) => Some(endpoint),
            Err(error) => {
                self.error(field, error.to_string());
                None
            }
        }
    }

    /// `[providers.kv_events]` of the provider at `here` (`providers[0]`);
    /// `None` when absent or invalid (then with errors).
    pub(super) fn kv_events(
        &mut self,
        here: &str,
        table: Option<file::KvEventsTable>,
    ) -> Option<KvEvents> {
        let table = table?;
        let at = |field: &str| format!("{here}.kv_events.{field}");
        let errors_before = self.errors.len();

        let live = self
            .required(&at("endpoint"), table.endpoint)
            .and_then(|written| self.tcp_endpoint(&at("endpoint"), &written));
        let replay = table
            .replay_endpoint
            .and_then(|written| self.tcp_endpoint(&at("replay_endpoint"), &written));

        let block_size = table.block_size.unwrap_or(file::DEFAULT_KV_BLOCK_SIZE);
        if !(1..=file::MAX_KV_BLOCK_SIZE).contains(&block_size) {
            self.error(
                at("block_size"),
                format!(
                    "must be between 1 and {} (got {block_size}); set it to the engine's --block-size",
                    file::MAX_KV_BLOCK_SIZE
                ),
            );
        }

        let ranks = table
            .data_parallel_size
            .unwrap_or(file::DEFAULT_DATA_PARALLEL_SIZE);
        let ranks = if (1..=file::MAX_DATA_PARALLEL_SIZE).contains(&ranks) {
            // At most 64, so it fits.
            u16::try_from(ranks).ok()
        } else {
            self.error(
                at("data_parallel_size"),
                format!(
                    "must be between 1 and {} (got {ranks})",
                    file::MAX_DATA_PARALLEL_SIZE
                ),
            );
            None
        };

        if let Some(ranks) = ranks {
            for (name, endpoint) in [("endpoint", &live), ("replay_endpoint", &replay)] {
                let Some(endpoint) = endpoint else { continue };
                if endpoint.shifted(ranks - 1).is_none() {
                    self.error(
                        at("data_parallel_size"),
                        format!(
                            "{ranks} ranks publish on ports {} to {} of {name} \"{endpoint}\", past 65535",
                            endpoint.port,
                            u32::from(endpoint.port) + u32::from(ranks) - 1
                        ),
                    );
                }
            }
            if let (Some(live), Some(replay)) = (&live, &replay) {
                let apart = live.port.abs_diff(replay.port);
                if live.host == replay.host && apart < ranks {
                    let message = if ranks == 1 {
                        format!(
                            "\"{replay}\" is also the live endpoint: the engine's PUB and ROUTER sockets need ports of their own"
                        )
                    } else {
                        format!(
                            "the replay ports {} to {} overlap the live ports {} to {} ({ranks} ranks each): the engine's PUB and ROUTER sockets need ports of their own",
                            replay.port,
                            u32::from(replay.port) + u32::from(ranks) - 1,
                            live.port,
                            u32::from(live.port) + u32::from(ranks) - 1
                        )
                    };
                    self.error(at("replay_endpoint"), message);
                }
            }
        }

        if self.errors.len() != errors_before {
            return None;
        }
        Some(KvEvents {
            endpoint: live?.to_string(),
            replay_endpoint: replay.map(|endpoint| endpoint.to_string()),
            topic: table
                .topic
                .unwrap_or_else(|| file::DEFAULT_KV_EVENTS_TOPIC.to_owned()),
            block_size: usize::try_from(block_size).ok()?,
            data_parallel_size: ranks?,
        })
    }

    /// `[providers.lmcache]` of the provider at `here` (`providers[0]`);
    /// `None` when absent or invalid (then with errors).
    pub(super) fn lmcache(
        &mut self,
        here: &str,
        table: Option<file::LmcacheTable>,
    ) -> Option<Lmcache> {
        let table = table?;
        let at = |field: &str| format!("{here}.lmcache.{field}");
        let errors_before = self.errors.len();

        let endpoint = self
            .required(&at("endpoint"), table.endpoint)
            .and_then(|written| match endpoint::check_http(&written) {
                Ok(()) => Some(written.trim().to_owned()),
                Err(error) => {
                    self.error(at("endpoint"), error.to_string());
                    None
                }
            });

        let format = match table
            .format
            .as_deref()
            .unwrap_or(file::DEFAULT_LMCACHE_FORMAT)
        {
            "json" => {
                if table.metric.is_some() {
                    self.error(
                        at("metric"),
                        "is read only with format = \"prometheus\"; remove it or set the format",
                    );
                }
                Some(LmcacheFormat::Json)
            }
            "prometheus" => match self.required(&at("metric"), table.metric) {
                Some(metric) if is_metric_name(&metric) => {
                    Some(LmcacheFormat::Prometheus { metric })
                }
                Some(metric) => {
                    self.error(
                        at("metric"),
                        format!(
                            "{metric:?} is not a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)"
                        ),
                    );
                    None
                }
                None => None,
            },
            other => {
                self.error(
                    at("format"),
                    format!("unknown format {other:?} (known: json, prometheus)"),
                );
                None
            }
        };

        let poll_interval = self.bounded(
            &at("poll_interval_secs"),
            table.poll_interval_secs,
            file::DEFAULT_LMCACHE_POLL_INTERVAL_SECS,
            file::MAX_LMCACHE_POLL_INTERVAL_SECS,
            Unit::Seconds,
        );
        let stale_after = self.bounded(
            &at("stale_after_secs"),
            table.stale_after_secs,
            file::DEFAULT_LMCACHE_STALE_AFTER_SECS,
            file::MAX_LMCACHE_STALE_AFTER_SECS,
            Unit::Seconds,
        );
        if let (Some(poll), Some(stale)) = (poll_interval, stale_after) {
            if stale <= poll {
                let reason = "a signal must outlive the interval between two polls";
                if table.stale_after_secs.is_some() {
                    self.error(
                        at("stale_after_secs"),
                        format!(
                            "must be greater than poll_interval_secs (got stale_after_secs = {stale}, poll_interval_secs = {poll}{}): {reason}",
                            by_default(table.poll_interval_secs)
                        ),
                    );
                } else {
                    self.error(
                        at("poll_interval_secs"),
                        format!(
                            "must be less than stale_after_secs (got poll_interval_secs = {poll}, stale_after_secs = {stale} by default): {reason}"
                        ),
                    );
                }
            }
        }

        if self.errors.len() != errors_before {
            return None;
        }
        Some(Lmcache {
            endpoint: endpoint?,
            format: format?,
            poll_interval: Duration::from_secs(poll_interval?),
            stale_after: Duration::from_secs(stale_after?),
        })
    }

    /// `[providers.engine_metrics]` of the provider at `here`, whose base
    /// URL is `base_url` when it is valid; `None` when absent, switched off
    /// or invalid (then with errors).
    pub(super) fn engine_metrics(
        &mut self,
        here: &str,
        table: Option<file::EngineMetricsTable>,
        base_url: Option<&BaseUrl>,
    ) -> Option<EngineMetrics> {
        let table = table?;
        let at = |field: &str| format!("{here}.engine_metrics.{field}");
        let errors_before = self.errors.len();

        let endpoint = match table.endpoint {
            Some(written) => match endpoint::check_http(&written) {
                Ok(()) => Some(written.trim().to_owned()),
                Err(error) => {
                    self.error(at("endpoint"), error.to_string());
                    None
                }
            },
            // An invalid base_url has its own error.
            None => base_url.map(|base| format!("{base}/metrics")),
        };
        let mut millis = |field: &str, written: Option<u64>, default: u64, min: u64, max: u64| {
            let value = written.unwrap_or(default);
            if (min..=max).contains(&value) {
                return Some(value);
            }
            self.error(
                at(field),
                format!("must be between {min} and {max} milliseconds (got {value})"),
            );
            None
        };
        let poll = millis(
            "poll_interval_ms",
            table.poll_interval_ms,
            file::DEFAULT_ENGINE_METRICS_POLL_INTERVAL_MS,
            file::MIN_ENGINE_METRICS_POLL_INTERVAL_MS,
            file::MAX_ENGINE_METRICS_POLL_INTERVAL_MS,
        );
        let stale = millis(
            "stale_after_ms",
            table.stale_after_ms,
            file::DEFAULT_ENGINE_METRICS_STALE_AFTER_MS,
            1,
            file::MAX_ENGINE_METRICS_STALE_AFTER_MS,
        );
        if let (Some(poll), Some(stale)) = (poll, stale) {
            if stale <= poll {
                let reason = "a reading must outlive the interval between two reads";
                if table.stale_after_ms.is_some() {
                    self.error(
                        at("stale_after_ms"),
                        format!(
                            "must be greater than poll_interval_ms (got stale_after_ms = {stale}, poll_interval_ms = {poll}{}): {reason}",
                            by_default(table.poll_interval_ms)
                        ),
                    );
                } else {
                    self.error(
                        at("poll_interval_ms"),
                        format!(
                            "must be less than stale_after_ms (got poll_interval_ms = {poll}, stale_after_ms = {stale} by default): {reason}"
                        ),
                    );
                }
            }
        }
        if self.errors.len() != errors_before || table.enabled == Some(false) {
            return None;
        }
        Some(EngineMetrics {
            endpoint: endpoint?,
            poll_interval: Duration::from_millis(poll?),
            stale_after: Duration::from_millis(stale?),
        })
    }
}
