//! The engine's run-time mode (failure injection and pacing) and the
//! `/fake/control` patch that changes it, with the fields that act on the
//! simulated KV cache instead ([`KvControl`]).
//!
//! The mode lives in an `ArcSwap`: a request loads one snapshot when it
//! arrives and keeps it for its whole life, so a change never takes a lock on
//! the request path and never half-applies to a stream already running.

use serde_json::{json, Map, Value};

use super::args::FakeLlmArgs;

/// How the engine answers, switchable at run time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Mode {
    /// Answer every request with this status and an OpenAI error body.
    pub(crate) fail_status: Option<u16>,
    /// Milliseconds to wait before answering any request.
    pub(crate) fail_delay_ms: u64,
    /// Never answer.
    pub(crate) hang: bool,
    /// Abort streams after this many SSE chunks.
    pub(crate) reset_after_chunks: Option<u64>,
    /// `Retry-After` seconds on injected failures.
    pub(crate) retry_after: Option<u64>,
    /// Milliseconds to the first token.
    pub(crate) ttft_ms: u64,
    /// Milliseconds more to the first token per request already running.
    pub(crate) queue_ttft_ms: u64,
    /// Milliseconds between tokens.
    pub(crate) token_delay_ms: u64,
    /// Microseconds to prefill one uncached prompt token.
    pub(crate) prefill_us_per_token: u64,
}

impl Mode {
    /// The start-up mode given on the command line.
    pub(crate) fn from_args(args: &FakeLlmArgs) -> Self {
        Mode {
            fail_status: args.fail_status,
            fail_delay_ms: args.fail_delay_ms,
            hang: args.hang,
            reset_after_chunks: args.reset_after_chunks,
            retry_after: args.retry_after,
            ttft_ms: args.ttft_ms,
            queue_ttft_ms: args.queue_ttft_ms,
            token_delay_ms: args.token_delay_ms,
            prefill_us_per_token: args.prefill_us_per_token,
        }
    }

    /// The JSON `/fake/control` answers: every field, `null` where unset.
    pub(crate) fn to_json(&self) -> Value {
        json!({
            "fail_status": self.fail_status,
            "fail_delay_ms": self.fail_delay_ms,
            "hang": self.hang,
            "reset_after_chunks": self.reset_after_chunks,
            "retry_after": self.retry_after,
            "ttft_ms": self.ttft_ms,
            "queue_ttft_ms": self.queue_ttft_ms,
            "token_delay_ms": self.token_delay_ms,
            "prefill_us_per_token": self.prefill_us_per_token,
        })
    }

    /// Applies a `/fake/control` patch: `"reset": true` first restores
    /// `startup`, then every other field given replaces the current value.
    /// Unknown fields and wrong types are errors naming the field, so a typo in
    /// a test fails loudly instead of silently testing the wrong mode.
    pub(crate) fn patched(
        &self,
        startup: &Mode,
        patch: &Map<String, Value>,
    ) -> Result<Mode, String> {
        let mut mode = self.clone();
        match patch.get("reset") {
            None | Some(Value::Bool(false)) => {}
            Some(Value::Bool(true)) => mode = startup.clone(),
            Some(_) => return Err("`reset` must be a boolean".to_owned()),
        }
        for (field, value) in patch {
            match field.as_str() {
                "reset" => {}
                "fail_status" => {
                    mode.fail_status = optional_u64(field, value)?
                        .map(|code| match u16::try_from(code) {
                            Ok(code) if (200..=599).contains(&code) => Ok(code),
                            _ => Err(format!(
                                "`{field}` must be an HTTP status in 200..=599 or null"
                            )),
                        })
                        .transpose()?;
                }
                "fail_delay_ms" => mode.fail_delay_ms = required_u64(field, value)?,
                "hang" => {
                    mode.hang = value
                        .as_bool()
                        .ok_or_else(|| format!("`{field}` must be a boolean"))?;
                }
                "reset_after_chunks" => mode.reset_after_chunks = optional_u64(field, value)?,
                "retry_after" => mode.retry_after = optional_u64(field, value)?,
                "ttft_ms" => mode.ttft_ms = required_u64(field, value)?,
                "queue_ttft_ms" => mode.queue_ttft_ms = required_u64(field, value)?,
                "token_delay_ms" => mode.token_delay_ms = required_u64(field, value)?,
                "prefill_us_per_token" => {
                    mode.prefill_us_per_token = required_u64(field, value)?;
                }
                other => return Err(format!("unknown control field `{other}`")),
            }
        }
        Ok(mode)
    }
}

/// The `/fake/control` fields that act on the simulated KV cache rather than
/// on the mode: one-shot actions and the KV-event and occupancy test knobs.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct KvControl {
    /// `clear_cache: true`: drop the cache (publishes `AllBlocksCleared`).
    pub(crate) clear_cache: bool,
    /// `kv_restart: true`: simulate an engine restart (empty cache, new hash
    /// salt, seq back to 0, empty replay buffer).
    pub(crate) restart: bool,
    /// `kv_drop_next: n`: leave the next n batches out of the live stream.
    pub(crate) drop_next: Option<u64>,
    /// `kv_pause: bool`: stop or resume the live stream.
    pub(crate) pause: Option<bool>,
    /// `occupancy_override: f | null`: answer this occupancy instead of the
    /// real one (`null` clears it). Any finite number, so tests can send
    /// out-of-range values on purpose.
    pub(crate) occupancy_override: Option<Option<f64>>,
    /// `cache_available: bool`.
    pub(crate) cache_available: Option<bool>,
}

impl KvControl {
    /// The control fields that belong to the KV cache.
    pub(crate) const FIELDS: [&'static str; 6] = [
        "clear_cache",
        "kv_restart",
        "kv_drop_next",
        "kv_pause",
        "occupancy_override",
        "cache_available",
    ];

    /// Takes this type's fields out of `patch`, leaving the mode's.
    pub(crate) fn take_from(patch: &mut Map<String, Value>) -> Result<Self, String> {
        let mut control = KvControl::default();
        for field in Self::FIELDS {
            let Some(value) = patch.remove(field) else {
                continue;
            };
            let flag = || {
                value
                    .as_bool()
                    .ok_or_else(|| format!("`{field}` must be a boolean"))
            };
            match field {
                "clear_cache" => control.clear_cache = flag()?,
                "kv_restart" => control.restart = flag()?,
                "kv_drop_next" => control.drop_next = Some(required_u64(field, &value)?),
                "kv_pause" => control.pause = Some(flag()?),
                "occupancy_override" => {
                    control.occupancy_override = Some(match &value {
                        Value::Null => None,
                        _ => Some(
                            value
                                .as_f64()
                                .filter(|v| v.is_finite())
                                .ok_or_else(|| format!("`{field}` must be a number or null"))?,
                        ),
                    });
                }
                _ => control.cache_available = Some(flag()?),
            }
        }
        Ok(control)
    }
}

fn required_u64(field: &str, value: &Value) -> Result<u64, String> {
    value
        .as_u64()
        .ok_or_else(|| format!("`{field}` must be a non-negative integer"))
}

fn optional_u64(field: &str, value: &Value) -> Result<Option<u64>, String> {
    match value {
        Value::Null => Ok(None),
        _ => value
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{field}` must be a non-negative integer or null")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patch(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    #[test]
    fn given_fields_replace_and_others_stay() {
        let startup = Mode {
            ttft_ms: 5,
            ..Mode::default()
        };
        let current = Mode {
            token_delay_ms: 7,
            ..startup.clone()
        };
        let next = current
            .patched(
                &startup,
                &patch(json!({"fail_status": 503, "retry_after": 2})),
            )
            .unwrap_or_default();
        assert_eq!(next.fail_status, Some(503));
        assert_eq!(next.retry_after, Some(2));
        assert_eq!(next.token_delay_ms, 7);
        assert_eq!(next.ttft_ms, 5);
        let cleared = next
            .patched(&startup, &patch(json!({"fail_status": null})))
            .unwrap_or_default();
        assert_eq!(cleared.fail_status, None);
    }

    #[test]
    fn reset_restores_startup_before_other_fields() {
        let startup = Mode {
            hang: true,
            ..Mode::default()
        };
        let current = Mode {
            fail_status: Some(500),
            ..Mode::default()
        };
        let next = current
            .patched(&startup, &patch(json!({"ttft_ms": 9, "reset": true})))
            .unwrap_or_default();
        assert_eq!(
            next,
            Mode {
                hang: true,
                ttft_ms: 9,
                ..Mode::default()
            }
        );
    }

    #[test]
    fn kv_fields_are_taken_out_of_the_patch() {
        let mut fields = patch(
            json!({"clear_cache": true, "kv_drop_next": 2, "kv_pause": false,
            "occupancy_override": 0.5, "cache_available": false, "ttft_ms": 3}),
        );
        let control = KvControl::take_from(&mut fields);
        assert_eq!(
            control,
            Ok(KvControl {
                clear_cache: true,
                restart: false,
                drop_next: Some(2),
                pause: Some(false),
                occupancy_override: Some(Some(0.5)),
                cache_available: Some(false),
            })
        );
        assert_eq!(fields.keys().collect::<Vec<_>>(), ["ttft_ms"]);
        let cleared = KvControl::take_from(&mut patch(json!({"occupancy_override": null})));
        assert_eq!(cleared.map(|c| c.occupancy_override), Ok(Some(None)));
        for bad in [
            json!({"kv_restart": 1}),
            json!({"kv_drop_next": -1}),
            json!({"occupancy_override": "x"}),
        ] {
            let field = bad
                .as_object()
                .and_then(|m| m.keys().next().cloned())
                .unwrap_or_default();
            let err = KvControl::take_from(&mut patch(bad)).err();
            assert!(err.is_some_and(|e| e.contains(&field)), "{field}");
        }
    }

    #[test]
    fn bad_fields_are_named() {
        let mode = Mode::default();
        let err = mode
            .patched(&mode, &patch(json!({"fail_stauts": 503})))
            .err();
        assert!(err.is_some_and(|e| e.contains("fail_stauts")));
        let err = mode
            .patched(&mode, &patch(json!({"fail_status": 42})))
            .err();
        assert!(err.is_some_and(|e| e.contains("fail_status")));
        let err = mode.patched(&mode, &patch(json!({"ttft_ms": -1}))).err();
        assert!(err.is_some_and(|e| e.contains("ttft_ms")));
    }
}
