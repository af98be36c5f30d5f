//! The engine's simulated KV cache: a vLLM-style prefix cache whose hits
//! shorten the time to first token, the KV-event stream that reports its
//! changes, and the occupancy signal an LMCache-aware router polls.
//!
//! Each generation request is admitted when it arrives (after failure
//! injection and validation): its prompts' leading cached blocks are counted
//! and its blocks stored ([`cache`]), and everything that changed becomes
//! one batch of events with the next seq ([`wire`], [`publisher`]). Its
//! time to first token is then `ttft_ms + uncached_tokens *
//! prefill_us_per_token`, so a router that finds the warm replica is seen to
//! win.
//!
//! Events go out when the request is admitted, not after its simulated
//! prefill; a request whose prompts change nothing (all cached, nothing
//! evicted) publishes no batch, as in vLLM. Without `--kv-events` nothing is
//! encoded and no seq is spent.
//!
//! A restart (`kv_restart`) is what a new engine process looks like from
//! outside: an empty cache, a new hash salt, seq back at 0 and an empty
//! replay buffer (batches already queued for the live stream still go out,
//! as an old process's last messages would). The hit counters and the test
//! knobs survive it.

mod cache;
mod publisher;
mod wire;

/// vLLM's `BlockStored` fields in their order on the wire (the msgspec
/// struct in `vllm/distributed/kv_events.py`), which a map-encoded event
/// keeps: what the tests of the encoder hold it to.
#[cfg(test)]
pub(crate) const VLLM_BLOCK_STORED_FIELDS: [&str; 7] = [
    "type",
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
];

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use super::args::FakeLlmArgs;
use cache::{KvEvent, PrefixCache};
pub(crate) use publisher::{BoundSockets, Publisher, PublisherTasks, ReplayFraming};
use wire::WireFormat;

/// What the prefix cache did for one request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Prefill {
    pub(crate) prompt_tokens: u64,
    /// Prompt tokens found in the cache (vLLM's `cached_tokens`).
    pub(crate) cached_tokens: u64,
}

impl Prefill {
    /// Milliseconds the uncached tokens take to prefill, rounded to the
    /// nearest (so a short chat costs nothing at the default rate).
    pub(crate) fn prefill_ms(&self, us_per_token: u64) -> u64 {
        (self.prompt_tokens.saturating_sub(self.cached_tokens))
            .saturating_mul(us_per_token)
            .saturating_add(500)
            / 1000
    }
}

/// The cache, its seq and the one-shot test knob that acts on seqs.
#[derive(Debug)]
struct CacheState {
    cache: PrefixCache,
    /// The seq of the next batch.
    next_seq: u64,
    /// Batches still to leave out of the live stream (`kv_drop_next`).
    drop_next: u64,
}

/// The occupancy signal's test overrides.
#[derive(Clone, Copy, Debug, PartialEq)]
struct OccupancyControl {
    /// Answered instead of the real occupancy.
    value: Option<f64>,
    cache_available: bool,
}

impl Default for OccupancyControl {
    fn default() -> Self {
        OccupancyControl {
            value: None,
            cache_available: true,
        }
    }
}

/// The engine's KV cache and event stream; see the module doc.
#[derive(Debug)]
pub(crate) struct KvState {
    // Held for one admission — hashing a prompt's blocks, a few map
    // operations per block, encoding and queueing one batch — and never
    // across an await; taking it in seq order is what keeps batches in seq
    // order.
    state: Mutex<CacheState>,
    publisher: Option<Publisher>,
    format: WireFormat,
    // Held only to copy or replace two fields.
    occupancy: Mutex<OccupancyControl>,
    /// Prompts with at least one cached block.
    hits: AtomicU64,
    /// Prompts with none.
    misses: AtomicU64,
    /// Prompt tokens looked up (`vllm:prefix_cache_queries`).
    queried_tokens: AtomicU64,
    /// Prompt tokens found (`vllm:prefix_cache_hits`).
    cached_tokens: AtomicU64,
}

impl KvState {
    /// The cache `args` describe, publishing through `publisher` if given.
    pub(crate) fn new(args: &FakeLlmArgs, publisher: Option<Publisher>) -> Self {
        KvState {
            state: Mutex::new(CacheState {
                cache: PrefixCache::new(args.block_size, args.kv_blocks, random_salt()),
                next_seq: 0,
                drop_next: 0,
            }),
            publisher,
            format: WireFormat {
                encoding: args.kv_encoding,
                hashes: args.kv_hash_encoding,
                data_parallel_rank: args.data_parallel_rank,
            },
            occupancy: Mutex::new(OccupancyControl::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            queried_tokens: AtomicU64::new(0),
            cached_tokens: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Looks up and stores the prompts of one request (each list of token
    /// ids is one sequence), publishing one batch of whatever changed.
    pub(crate) fn admit(&self, prompts: &[Vec<u32>]) -> Prefill {
        let mut prefill = Prefill::default();
        let mut events = Vec::new();
        let mut state = self.lock();
        for tokens in prompts {
            let admission = state.cache.admit(tokens);
            let cached = admission.cached_tokens as u64;
            prefill.prompt_tokens += tokens.len() as u64;
            prefill.cached_tokens += cached;
            let counter = if cached > 0 { &self.hits } else { &self.misses };
            counter.fetch_add(1, Relaxed);
            events.extend(admission.events);
        }
        self.publish(&mut state, &events);
        drop(state);
        self.queried_tokens
            .fetch_add(prefill.prompt_tokens, Relaxed);
        self.cached_tokens.fetch_add(prefill.cached_tokens, Relaxed);
        prefill
    }

    /// Drops every cached block and publishes `AllBlocksCleared`.
    pub(crate) fn clear(&self) {
        let mut state = self.lock();
        let event = state.cache.clear();
        self.publish(&mut state, &[event]);
    }

    /// Simulates an engine restart; see the module doc.
    pub(crate) fn restart(&self) {
        let mut state = self.lock();
        state.cache = state.cache.restarted(random_salt());
        state.next_seq = 0;
        if let Some(publisher) = &self.publisher {
            publisher.forget();
        }
    }

    /// Leaves the next `batches` batches out of the live stream (their seqs
    /// are still spent, and replay still has them).
    pub(crate) fn drop_next(&self, batches: u64) {
        self.lock().drop_next = batches;
    }

    /// Stops or resumes the live stream.
    pub(crate) fn set_paused(&self, paused: bool) {
        if let Some(publisher) = &self.publisher {
            publisher.set_paused(paused);
        }
    }

    /// Sets the occupancy signal's overrides; `None` leaves one as it is.
    pub(crate) fn set_occupancy(&self, value: Option<Option<f64>>, cache_available: Option<bool>) {
        let mut control = self.occupancy.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(value) = value {
            control.value = value;
        }
        if let Some(available) = cache_available {
            control.cache_available = available;
        }
    }

    /// Puts every test knob back: not paused, nothing to drop, no
    /// occupancy override, cache available. The cache itself stays.
    pub(crate) fn reset_knobs(&self) {
        self.drop_next(0);
        self.set_paused(false);
        *self.occupancy.lock().unwrap_or_else(|e| e.into_inner()) = OccupancyControl::default();
    }

    /// Fraction of the cache's blocks in use, in `0..=1`.
    pub(crate) fn usage(&self) -> f64 {
        let state = self.lock();
        state.cache.used() as f64 / state.cache.capacity() as f64
    }

    /// The occupancy signal: the override if set, else [`Self::usage`]; and
    /// whether the cache is available.
    pub(crate) fn occupancy(&self) -> (f64, bool) {
        let control = *self.occupancy.lock().unwrap_or_else(|e| e.into_inner());
        (
            control.value.unwrap_or_else(|| self.usage()),
            control.cache_available,
        )
    }

    /// Prompt tokens looked up and found, for `/metrics`.
    pub(crate) fn token_counts(&self) -> (u64, u64) {
        (
            self.queried_tokens.load(Relaxed),
            self.cached_tokens.load(Relaxed),
        )
    }

    /// The `prefix_cache` and `kv_events` objects of `/fake/stats`.
    pub(crate) fn stats_json(&self) -> (Value, Value) {
        let state = self.lock();
        let cache = json!({
            "block_size": state.cache.block_size(),
            "capacity_blocks": state.cache.capacity(),
            "used_blocks": state.cache.used(),
            "hits": self.hits.load(Relaxed),
            "misses": self.misses.load(Relaxed),
            "queried_tokens": self.queried_tokens.load(Relaxed),
            "cached_tokens": self.cached_tokens.load(Relaxed),
        });
        let mut events = match &self.publisher {
            Some(publisher) => publisher.to_json(),
            None => json!({}),
        };
        events["enabled"] = json!(self.publisher.is_some());
        events["next_seq"] = json!(state.next_seq);
        events["drop_next"] = json!(state.drop_next);
        (cache, events)
    }

    /// The knobs `/fake/control` reports.
    pub(crate) fn control_json(&self) -> Value {
        let control = *self.occupancy.lock().unwrap_or_else(|e| e.into_inner());
        json!({
            "kv_pause": self.publisher.as_ref().is_some_and(Publisher::paused),
            "kv_drop_next": self.lock().drop_next,
            "occupancy_override": control.value,
            "cache_available": control.cache_available,
        })
    }

    /// Encodes `events` as the next batch and hands it to the publisher.
    fn publish(&self, state: &mut CacheState, events: &[KvEvent]) {
        let Some(publisher) = &self.publisher else {
            return;
        };
        if events.is_empty() {
            return;
        }
        let seq = state.next_seq;
        state.next_seq += 1;
        let skip_live = state.drop_next > 0;
        state.drop_next = state.drop_next.saturating_sub(1);
        let payload = self.format.encode_batch(unix_seconds_f64(), events);
        publisher.publish(seq, payload, skip_live);
    }
}

/// A salt no other process (or restart) shares.
fn random_salt() -> u64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |t| t.as_nanos()),
    );
    hasher.finish()
}

fn unix_seconds_f64() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |t| t.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefill_time_counts_only_uncached_tokens() {
        let prefill = Prefill {
            prompt_tokens: 100,
            cached_tokens: 64,
        };
        assert_eq!(prefill.prefill_ms(1000), 36);
        assert_eq!(prefill.prefill_ms(50), 2);
        assert_eq!(prefill.prefill_ms(10), 0);
        assert_eq!(prefill.prefill_ms(0), 0);
    }

    #[test]
    fn admission_counts_hits_and_misses() {
        let args = FakeLlmArgs {
            block_size: 4,
            kv_blocks: 8,
            ..FakeLlmArgs::default()
        };
        let kv = KvState::new(&args, None);
        let prompt = vec![(0..9).collect::<Vec<u32>>()];
        assert_eq!(kv.admit(&prompt).cached_tokens, 0);
        assert_eq!(kv.admit(&prompt).cached_tokens, 8);
        assert!((kv.usage() - 0.25).abs() < 1e-9);
        let (cache, events) = kv.stats_json();
        assert_eq!(
            (cache["hits"].clone(), cache["misses"].clone()),
            (json!(1), json!(1))
        );
        assert_eq!(cache["cached_tokens"], 8);
        assert_eq!(events["enabled"], false);
        kv.set_occupancy(Some(Some(0.9)), Some(false));
        assert_eq!(kv.occupancy(), (0.9, false));
        kv.reset_knobs();
        assert_eq!(kv.occupancy(), (0.25, true));
        kv.clear();
        assert_eq!(kv.usage(), 0.0);
    }
}
