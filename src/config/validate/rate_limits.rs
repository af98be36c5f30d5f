//! `[rate_limits]`: the Redis that fleet-wide counters live in.

use std::time::Duration;

use super::super::file;
use super::super::{RateLimitsConfig, SharedCounters};
use super::eligibility::Unit;
use super::Validator;

impl Validator<'_> {
    pub(super) fn rate_limits(&mut self, table: file::RateLimitsTable) -> RateLimitsConfig {
        let timeout_ms = self
            .bounded(
                "rate_limits.redis_timeout_ms",
                table.redis_timeout_ms,
                file::DEFAULT_REDIS_TIMEOUT_MS,
                file::MAX_REDIS_TIMEOUT_MS,
                Unit::Milliseconds,
            )
            .unwrap_or(file::DEFAULT_REDIS_TIMEOUT_MS);
        let key_prefix = table
            .redis_key_prefix
            .unwrap_or_else(|| file::DEFAULT_REDIS_KEY_PREFIX.to_string());
        if key_prefix.is_empty()
            || key_prefix
                .chars()
                .any(|c| c.is_control() || c.is_whitespace())
        {
            self.error(
                "rate_limits.redis_key_prefix",
                "must be non-empty, without spaces or control characters",
            );
        }
        let (field, url) = match (table.redis_url, table.redis_url_env) {
            (None, None) => {
                for (field, set) in [
                    (
                        "rate_limits.redis_timeout_ms",
                        table.redis_timeout_ms.is_some(),
                    ),
                    (
                        "rate_limits.redis_key_prefix",
                        key_prefix != file::DEFAULT_REDIS_KEY_PREFIX,
                    ),
                ] {
                    if set {
                        self.warn(
                            field,
                            "has no effect without `redis_url` or `redis_url_env`",
                        );
                    }
                }
                return RateLimitsConfig::default();
            }
            (Some(_), Some(_)) => {
                self.error(
                    "rate_limits.redis_url_env",
                    "give `redis_url` or `redis_url_env`, not both",
                );
                return RateLimitsConfig::default();
            }
            (Some(url), None) => ("rate_limits.redis_url", Some(url)),
            (None, Some(var)) => (
                "rate_limits.redis_url_env",
                self.secret("rate_limits.redis_url_env", &var),
            ),
        };
        let Some(url) = url else {
            return RateLimitsConfig::default();
        };
        if let Err(problem) = check_url(&url) {
            self.error(field, problem);
            return RateLimitsConfig::default();
        }
        RateLimitsConfig {
            redis: Some(SharedCounters {
                url,
                timeout: Duration::from_millis(timeout_ms),
                key_prefix,
            }),
        }
    }
}

/// A `redis://` (or `redis+unix://`) URL the client accepts. The message
/// never repeats the URL: it may hold a password.
fn check_url(url: &str) -> Result<(), String> {
    if url.starts_with("rediss://") {
        return Err("TLS to Redis (rediss://) is not built in; use redis:// on a private network or a local TLS tunnel".into());
    }
    if !(url.starts_with("redis://") || url.starts_with("redis+unix://")) {
        return Err("must be a redis:// URL: redis://[user:password@]host[:port][/db]".into());
    }
    redis::Client::open(url)
        .map(drop)
        .map_err(|e| format!("is not a usable Redis URL ({:?})", e.kind()))
}
