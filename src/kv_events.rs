//! vLLM KV-cache events: which token blocks each engine holds, for the
//! `precise_cache_aware` strategy.
//!
//! vLLM publishes a `BlockStored` / `BlockRemoved` / `AllBlocksCleared`
//! event stream over ZeroMQ (docs/design/wire-formats.md). For every provider with
//! `[providers.kv_events]`, the "kv events" background service
//! (`service.rs`) runs one subscriber per data-parallel rank
//! (`subscriber.rs`): a SUB socket on the rank's stream, sequence tracking
//! (`sequence.rs`) and replay of lost batches (`replay.rs`). It decodes the
//! msgpack batches (`decode.rs`) and applies them to the provider's
//! [`KvIndex`] (`index.rs`), which keeps each rank's resident blocks under
//! rolter's own chained block hash (`block_hash.rs`) in a bounded set with
//! LRU eviction (`blocks.rs`). A route reads its targets' indexes through a
//! [`KvTargetsView`] (`view.rs`).
//!
//! The request path hashes the caller's token ids the same way and reads
//! [`KvIndex::resident_leading_fraction`]: the leading fraction of the
//! request's full blocks resident on the provider, `None` (neutral) when
//! the request has no full block or the index has nothing fresh to say
//! (stale: no message for 30 s; rebuilding after a gap, restart or
//! unreadable batch). It never waits for the network: it takes a read lock
//! held by writers for one batch at most.
//!
//! Indexes live in a [`KvIndexRegistry`] by provider slug that outlives
//! snapshots, like `health.rs`'s registry, so a reload neither loses what
//! an index learned nor leaves a route holding a dead one.

mod block_hash;
mod blocks;
mod counters;
mod decode;
mod index;
mod pending;
mod replay;
mod sequence;
mod service;
mod subscriber;
mod view;

#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub use block_hash::{block_hashes, block_hashes_from, BlockHashes, ROOT_SEED};
pub use counters::{
    EventCounts, KindCounts, KvIndexSummary, RankSummary, ReplayCounts, ResetCounts, ResetReason,
};
pub use decode::{
    decode_batch, BatchEntry, BlockRemoved, BlockStored, DecodeError, EngineBlockId, EventBatch,
    EventKind, KvEvent, Medium, Skipped,
};
pub use index::{
    Clock, KvIndex, KvIndexOptions, KvIndexSettings, DEFAULT_MAX_BLOCKS, DEFAULT_STALE_AFTER,
};
pub use replay::{ReplayError, MAX_REPLAY_BATCHES, REPLAY_TIMEOUT};
pub use sequence::{SequenceTracker, Verdict};
pub use service::{
    sources_of, KvEventService, KvSource, RankEndpoints, SourceReader, RECONCILE_EVERY,
    SERVICE_NAME,
};
pub use subscriber::{CONNECT_TIMEOUT, RECONNECT_INITIAL, RECONNECT_MAX};
pub use view::KvTargetsView;

/// Every provider's KV index, by slug; shared by all snapshots.
#[derive(Debug, Default)]
pub struct KvIndexRegistry {
    options: KvIndexOptions,
    // Locked to look an index up or list them: by snapshot builds, the
    // service's reconciliation and admin summaries, never by the request
    // path (a route's view holds its own `Arc<KvIndex>`).
    indexes: Mutex<HashMap<String, Arc<KvIndex>>>,
}

impl KvIndexRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry whose indexes are built with `options` (bound, staleness
    /// window, clock).
    pub fn with_options(options: KvIndexOptions) -> Self {
        KvIndexRegistry {
            options,
            indexes: Mutex::default(),
        }
    }

    /// The provider's index, created (unconfigured) on first use. The same
    /// `Arc` for the provider's whole life in the registry: the service
    /// reconfigures it in place when its source changes.
    pub fn index(&self, provider: &str) -> Arc<KvIndex> {
        let mut indexes = self.lock();
        Arc::clone(
            indexes
                .entry(provider.to_string())
                .or_insert_with(|| Arc::new(KvIndex::new(provider, self.options.clone()))),
        )
    }

    /// The provider's index, if it has one.
    pub fn get(&self, provider: &str) -> Option<Arc<KvIndex>> {
        self.lock().get(provider).cloned()
    }

    /// Forgets the indexes of providers `keep` rejects (gone from the
    /// configuration), freeing their blocks once no route holds them.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.lock().retain(|provider, _| keep(provider));
    }

    /// Every index's summary, by provider slug.
    pub fn summaries(&self) -> Vec<KvIndexSummary> {
        let indexes: Vec<Arc<KvIndex>> = self.lock().values().cloned().collect();
        let mut summaries: Vec<KvIndexSummary> = indexes.iter().map(|i| i.summary()).collect();
        summaries.sort_by(|a, b| a.provider.cmp(&b.provider));
        summaries
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<KvIndex>>> {
        self.indexes.lock().unwrap_or_else(|e| e.into_inner())
    }
}
