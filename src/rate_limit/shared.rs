//! Fleet-wide limits: the keys' counters in Redis (`[rate_limits]
//! redis_url`), shared by every gateway node, the way Envoy's rate-limit
//! service and LiteLLM share theirs.
//!
//! **One round trip per request, none while it streams.** Admission runs
//! one Lua script ([`ADMIT`]) that reads the key's request and token
//! windows, sums the requests it has in flight on live nodes, and, when
//! every limit has room, counts the request and takes its in-flight slot,
//! atomically. What happens later (the slot given back when the response
//! ends, the tokens its `usage` reported) is queued in memory and sent by
//! the background service ([`SharedLimitsService`]) every
//! [`FLUSH_INTERVAL`], batched per key: the request path never waits for it.
//!
//! **Redis time, wall-clock minutes.** The script reads Redis's own clock,
//! so every node agrees on the window; the window is the current
//! wall-clock minute and the one before, weighed as the local estimator
//! weighs them (`rate_limit.rs`), so the same `Retry-After` arithmetic
//! applies.
//!
//! **In flight per node.** A key's requests in flight are a hash of one
//! field per node. A node that dies cannot give its slots back, so each
//! node refreshes a liveness key every [`LIVENESS_REFRESH`] (it expires
//! after [`LIVENESS_TTL`]) and the script counts, and then deletes, only
//! the fields of live nodes.
//!
//! **Redis down never fails a request.** A call that errs or outlasts
//! `redis_timeout_ms` switches the node to its local counters at once
//! (logged once per outage, counted in
//! `rolter_rate_limit_redis_fallbacks_total`), and requests are admitted
//! locally, without trying Redis, until the service reconnects (it tries
//! every [`RECONNECT_INTERVAL`]). The local counters are kept warm while
//! Redis is in use, so the fallback limits a key by what it did on this
//! node. Redis keeps counting from where it was, or from nothing if it
//! restarted empty; slot releases queued during the outage are applied
//! when it answers again, never below zero.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use redis::aio::MultiplexedConnection;

use super::{Limited, Quota, Window, WINDOW_MS};
use crate::config::SharedCounters;
use crate::metrics::Metrics;
use crate::wake::{self, Changes, Wake};

/// How often slot releases and token charges are sent.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(50);
/// How often an unreachable Redis is tried again.
pub const RECONNECT_INTERVAL: Duration = Duration::from_secs(1);
/// How often a node says it is alive.
pub const LIVENESS_REFRESH: Duration = Duration::from_secs(3);
/// How long a node that stopped saying so keeps its slots counted.
pub const LIVENESS_TTL: Duration = Duration::from_secs(15);

/// Counts of the windows expire after two minutes: the current and the one
/// before are all the estimator reads.
const WINDOW_TTL_MS: u64 = 2 * WINDOW_MS;

/// Admission. ARGV: key prefix, node prefix, node, rpm, tpm,
/// max_concurrent, window TTL (ms). Returns `{verdict, previous, current,
/// elapsed}`: verdict 0 admitted (counted, slot taken), 1 over rpm, 2 over
/// tpm (previous and current being that window's buckets), 3 over
/// max_concurrent (current being the requests in flight).
static ADMIT: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local minute = math.floor(now / 60000)
local elapsed = now - minute * 60000
local p, nodes, node = ARGV[1], ARGV[2], ARGV[3]
local rpm, tpm, maxc, ttl = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local function buckets(kind)
  local current = tonumber(redis.call('GET', p .. kind .. minute) or '0')
  local previous = tonumber(redis.call('GET', p .. kind .. (minute - 1)) or '0')
  return previous, current
end
local function full(previous, current, limit)
  return limit > 0 and previous * (60000 - elapsed) / 60000 + current >= limit
end
local rp, rc = buckets('r:')
if full(rp, rc, rpm) then return {1, rp, rc, elapsed} end
local tp, tc = buckets('t:')
if full(tp, tc, tpm) then return {2, tp, tc, elapsed} end
local slots = p .. 'in_flight'
local fields = redis.call('HGETALL', slots)
local busy = 0
for i = 1, #fields, 2 do
  if fields[i] == node or redis.call('EXISTS', nodes .. fields[i]) == 1 then
    busy = busy + tonumber(fields[i + 1])
  else
    redis.call('HDEL', slots, fields[i])
  end
end
if maxc > 0 and busy >= maxc then return {3, 0, busy, elapsed} end
redis.call('HINCRBY', slots, node, 1)
local key = p .. 'r:' .. minute
redis.call('INCR', key)
redis.call('PEXPIRE', key, ttl)
return {0, rp, rc + 1, elapsed}
"#,
    )
});

/// What happened after admission. ARGV: key prefix, node, slots given
/// back, tokens used, window TTL (ms).
static SETTLE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r#"
local t = redis.call('TIME')
local minute = math.floor((tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)) / 60000)
local p, node = ARGV[1], ARGV[2]
local released, tokens, ttl = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if released > 0 then
  local slots = p .. 'in_flight'
  if redis.call('HINCRBY', slots, node, -released) <= 0 then redis.call('HDEL', slots, node) end
end
if tokens > 0 then
  local key = p .. 't:' .. minute
  redis.call('INCRBY', key, tokens)
  redis.call('PEXPIRE', key, ttl)
end
return 1
"#,
    )
});

/// A key's admission through Redis.
#[derive(Debug)]
pub enum SharedAdmission {
    /// Redis is not in use or did not answer: admit by the local counters.
    Local,
    /// Counted in Redis; the slot is given back there when dropped.
    Admitted(RemoteSlot),
    Refused(Limited),
}

/// A connection that answered, and the settings it was made for.
struct Connected {
    conn: MultiplexedConnection,
    settings: SharedCounters,
}

/// What a key did since the last flush.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Pending {
    released: u64,
    tokens: u64,
}

/// The node's side of the shared counters; lives as long as the process.
pub struct SharedStore {
    /// `Some` while Redis answers; the request path only loads it.
    connected: ArcSwapOption<Connected>,
    /// This process in the in-flight hashes: unique per process, so a
    /// restarted node never inherits a dead one's slots.
    node: String,
    /// By key name (bounded by the configured keys). Locked for a map
    /// update, never across an await.
    pending: Mutex<HashMap<String, Pending>>,
}

impl std::fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedStore")
            .field("connected", &self.connected.load().is_some())
            .field("node", &self.node)
            .finish()
    }
}

impl Default for SharedStore {
    fn default() -> Self {
        SharedStore {
            connected: ArcSwapOption::empty(),
            node: format!("{}-{:016x}", std::process::id(), {
                use std::hash::{BuildHasher, Hasher};
                std::collections::hash_map::RandomState::new()
                    .build_hasher()
                    .finish()
            }),
            pending: Mutex::default(),
        }
    }
}

impl SharedStore {
    /// Whether admissions go to Redis now.
    pub fn in_use(&self) -> bool {
        self.connected.load().is_some()
    }

    /// Admits a request of `key` against `quota` in Redis, in one round
    /// trip bounded by `redis_timeout_ms`.
    pub async fn admit(
        self: &Arc<Self>,
        key: &str,
        quota: Quota,
        metrics: &Metrics,
    ) -> SharedAdmission {
        let Some(connected) = self.connected.load_full() else {
            return SharedAdmission::Local;
        };
        let settings = &connected.settings;
        let mut invocation = ADMIT.prepare_invoke();
        invocation
            .arg(key_prefix(settings, key))
            .arg(node_prefix(settings))
            .arg(&self.node)
            .arg(quota.rpm)
            .arg(quota.tpm)
            .arg(quota.max_concurrent)
            .arg(WINDOW_TTL_MS);
        let mut conn = connected.conn.clone();
        let reply: Result<(u8, u64, u64, u64), String> = match tokio::time::timeout(
            settings.timeout,
            invocation.invoke_async(&mut conn),
        )
        .await
        {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err(format!("no answer within {:?}", settings.timeout)),
        };
        let (verdict, previous, current, elapsed) = match reply {
            Ok(reply) => reply,
            Err(reason) => {
                self.fall_back(&connected, &reason, metrics);
                return SharedAdmission::Local;
            }
        };
        let window = Window {
            start_ms: 0,
            previous,
            current,
        };
        let retry_after = |limit: u64| window.wait_ms(elapsed, limit).div_ceil(1000).max(1);
        match verdict {
            0 => SharedAdmission::Admitted(RemoteSlot {
                store: Arc::clone(self),
                key: key.to_string(),
            }),
            1 => SharedAdmission::Refused(Limited::Rpm {
                limit: quota.rpm,
                retry_after_secs: retry_after(u64::from(quota.rpm)),
            }),
            2 => SharedAdmission::Refused(Limited::Tpm {
                limit: quota.tpm,
                retry_after_secs: retry_after(quota.tpm),
            }),
            _ => SharedAdmission::Refused(Limited::Concurrency {
                limit: quota.max_concurrent,
            }),
        }
    }

    /// Queues `tokens` used by `key` for the next flush.
    pub fn charge_tokens(&self, key: &str, tokens: u64) {
        if tokens > 0 && self.in_use() {
            self.add_pending(
                key,
                Pending {
                    released: 0,
                    tokens,
                },
            );
        }
    }

    fn add_pending(&self, key: &str, add: Pending) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let entry = pending.entry(key.to_string()).or_default();
        entry.released += add.released;
        entry.tokens += add.tokens;
    }

    /// Stops using Redis after `reason`, once per outage.
    fn fall_back(&self, failed: &Arc<Connected>, reason: &str, metrics: &Metrics) {
        let current = self.connected.compare_and_swap(failed, None);
        let was_current = current.as_ref().is_some_and(|c| Arc::ptr_eq(c, failed));
        if was_current {
            log::warn!(
                "rate limits: Redis at {} failed ({reason}); counting on this node until it answers again",
                redacted(&failed.settings.url)
            );
            metrics.record_redis_fallback();
            metrics.set_redis_in_use(false);
        }
    }

    /// Sends what keys did since the last flush; on failure keeps it for
    /// the next one.
    async fn flush(&self, metrics: &Metrics) {
        let Some(connected) = self.connected.load_full() else {
            return;
        };
        let batch: Vec<(String, Pending)> = {
            let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            pending.drain().collect()
        };
        let mut conn = connected.conn.clone();
        let mut left = batch.into_iter();
        for (key, what) in left.by_ref() {
            let mut invocation = SETTLE.prepare_invoke();
            invocation
                .arg(key_prefix(&connected.settings, &key))
                .arg(&self.node)
                .arg(what.released)
                .arg(what.tokens)
                .arg(WINDOW_TTL_MS);
            let sent = tokio::time::timeout(
                RECONNECT_INTERVAL,
                invocation.invoke_async::<i64>(&mut conn),
            )
            .await;
            if !matches!(sent, Ok(Ok(_))) {
                self.add_pending(&key, what);
                for (key, what) in left {
                    self.add_pending(&key, what);
                }
                let reason = match sent {
                    Ok(Err(e)) => e.to_string(),
                    _ => "no answer".to_string(),
                };
                self.fall_back(&connected, &reason, metrics);
                return;
            }
        }
    }
}

/// A request's in-flight slot in Redis; queued for release when dropped.
#[derive(Debug)]
pub struct RemoteSlot {
    store: Arc<SharedStore>,
    key: String,
}

impl Drop for RemoteSlot {
    fn drop(&mut self) {
        self.store.add_pending(
            &self.key,
            Pending {
                released: 1,
                tokens: 0,
            },
        );
    }
}

/// Every Redis key of one API key starts with this.
fn key_prefix(settings: &SharedCounters, key: &str) -> String {
    format!("{}key:{key}:", settings.key_prefix)
}

fn node_prefix(settings: &SharedCounters) -> String {
    format!("{}node:", settings.key_prefix)
}

/// A Redis URL without its password, for logs.
fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://…@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_string(),
    }
}

/// Reads the running configuration's `[rate_limits]`.
pub type SettingsSource = Box<dyn Fn() -> Option<SharedCounters> + Send + Sync>;

/// Connects to the configured Redis (again after a failure or a reload
/// that changed it), keeps this node's liveness key fresh and flushes what
/// requests did.
pub struct SharedLimitsService {
    store: Arc<SharedStore>,
    settings: SettingsSource,
    metrics: Arc<Metrics>,
    changes: Changes,
}

impl SharedLimitsService {
    /// Follows `settings`, rereading them every [`FLUSH_INTERVAL`] while
    /// Redis is configured and otherwise whenever `changes` moves.
    pub fn new(
        store: Arc<SharedStore>,
        settings: SettingsSource,
        metrics: Arc<Metrics>,
        changes: Changes,
    ) -> Self {
        Self {
            store,
            settings,
            metrics,
            changes,
        }
    }

    /// One step: follow the configuration, reconnect when due, refresh
    /// liveness when due, flush. `last_try` and `last_alive` are the
    /// service's own clock marks. Says whether Redis is configured.
    async fn step(&self, ticks: &mut Ticks) -> bool {
        let wanted = (self.settings)();
        let configured = wanted.is_some();
        let current = self.store.connected.load_full();
        if current.as_ref().map(|c| &c.settings) != wanted.as_ref() {
            if let Some(old) = current {
                if wanted.as_ref().map(|w| &w.url) != Some(&old.settings.url) {
                    log::info!(
                        "rate limits: no longer counting in Redis at {}",
                        redacted(&old.settings.url)
                    );
                }
                self.store.connected.store(None);
            }
        }
        match (self.store.connected.load_full(), wanted) {
            (None, Some(settings)) if ticks.reconnect_due() => {
                if let Some(connected) = connect(settings).await {
                    log::info!(
                        "rate limits: counting in Redis at {} (key prefix {:?})",
                        redacted(&connected.settings.url),
                        connected.settings.key_prefix
                    );
                    let connected = Arc::new(connected);
                    self.alive(&connected).await;
                    ticks.alive_now();
                    self.store.connected.store(Some(connected));
                }
            }
            (Some(connected), _) if ticks.liveness_due() => self.alive(&connected).await,
            _ => {}
        }
        self.metrics.set_redis_in_use(self.store.in_use());
        self.store.flush(&self.metrics).await;
        configured
    }

    /// Refreshes this node's liveness key.
    async fn alive(&self, connected: &Arc<Connected>) {
        let mut conn = connected.conn.clone();
        let key = format!("{}{}", node_prefix(&connected.settings), self.store.node);
        let mut set = redis::cmd("SET");
        set.arg(&key)
            .arg(1)
            .arg("PX")
            .arg(LIVENESS_TTL.as_millis() as u64);
        match tokio::time::timeout(RECONNECT_INTERVAL, set.exec_async(&mut conn)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => self
                .store
                .fall_back(connected, &e.to_string(), &self.metrics),
            Err(_) => self.store.fall_back(connected, "no answer", &self.metrics),
        }
    }
}

/// Opens a connection and checks that Redis answers.
async fn connect(settings: SharedCounters) -> Option<Connected> {
    let client = redis::Client::open(settings.url.as_str()).ok()?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(RECONNECT_INTERVAL)
        .set_response_timeout(RECONNECT_INTERVAL);
    let mut conn = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .ok()?;
    let pong: String = redis::cmd("PING").query_async(&mut conn).await.ok()?;
    (pong == "PONG").then_some(Connected { conn, settings })
}

/// When the service last tried to connect and last said it was alive.
#[derive(Default)]
struct Ticks {
    last_try: Option<std::time::Instant>,
    last_alive: Option<std::time::Instant>,
}

impl Ticks {
    fn reconnect_due(&mut self) -> bool {
        Self::due(&mut self.last_try, RECONNECT_INTERVAL)
    }

    fn liveness_due(&mut self) -> bool {
        Self::due(&mut self.last_alive, LIVENESS_REFRESH)
    }

    fn alive_now(&mut self) {
        self.last_alive = Some(std::time::Instant::now());
    }

    fn due(mark: &mut Option<std::time::Instant>, every: Duration) -> bool {
        let now = std::time::Instant::now();
        if mark.is_some_and(|at| now.duration_since(at) < every) {
            return false;
        }
        *mark = Some(now);
        true
    }
}

#[async_trait]
impl BackgroundService for SharedLimitsService {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let mut ticks = Ticks::default();
        let mut interval = tokio::time::interval(FLUSH_INTERVAL);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut changes = self.changes.clone();
        loop {
            if self.step(&mut ticks).await {
                tokio::select! {
                    _ = shutdown.changed() => break,
                    _ = interval.tick() => {}
                }
            } else if wake::until(None, &mut changes, &mut shutdown).await == Wake::Shutdown {
                break;
            }
        }
        // What ended before shutdown still reaches Redis.
        self.store.flush(&self.metrics).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_is_logged_without_its_password() {
        assert_eq!(
            redacted("redis://user:s3cret@10.0.0.5:6379/2"),
            "redis://…@10.0.0.5:6379/2"
        );
        assert_eq!(redacted("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }

    #[test]
    fn released_slots_and_tokens_add_up_until_flushed() {
        let store = Arc::new(SharedStore::default());
        drop(RemoteSlot {
            store: Arc::clone(&store),
            key: "team".into(),
        });
        drop(RemoteSlot {
            store: Arc::clone(&store),
            key: "team".into(),
        });
        store.add_pending(
            "team",
            Pending {
                released: 0,
                tokens: 7,
            },
        );
        let pending = store.pending.lock().unwrap();
        assert_eq!(
            pending["team"],
            Pending {
                released: 2,
                tokens: 7
            }
        );
    }
}
