//! The block index of one provider: which token blocks its engine holds.
//!
//! One [`KvIndex`] per provider, fed by one subscriber per data-parallel
//! rank (each rank is its own engine with its own cache, publishing on its
//! own port). Per rank it keeps the engine's resident blocks as rolter
//! chain hashes ([`super::block_hash`]) in a bounded set (`blocks.rs`); the
//! request path hashes the caller's token ids the same way and asks how
//! many leading blocks one rank holds.
//!
//! A `BlockStored` chain continues from its parent's rolter hash, or starts
//! at the root when it has none (the adapter's root for LoRA blocks); a
//! chain whose parent the index does not hold cannot be placed and is
//! dropped (counted). A block carrying extra keys (multimodal inputs, a
//! cache salt) is moved off every request's chain, since token ids cannot
//! reproduce it. `BlockRemoved` resolves engine hashes through the same
//! map; `AllBlocksCleared` empties the rank.
//!
//! When a rank counts. A rank's blocks answer only while the rank is
//! *fresh* (a message within the staleness window, 30 s by default), not
//! *rebuilding*, and not known to be *cut off*: from the moment its
//! subscriber sees the publisher go away (or cannot reach it) until it is
//! connected again, the rank is neutral at once; staleness is only for a
//! stream that merely went quiet. A rank is rebuilding from the moment its blocks were
//! thrown away or never known: when its subscriber starts, after a gap that
//! replay could not fill, after an engine restart, after a batch that could
//! not be read. It counts again as soon as either (a) it holds a block
//! stored after that moment, or (b) its whole history is known to be
//! reflected (the stream was followed from seq 0, replay reached back to
//! seq 0, or the engine cleared its cache). From then on every block the
//! index holds is one the engine reported and has not reported gone, so a
//! positive score is real evidence; what the index misses only scores the
//! target low, which is how the scorer reads "unknown" too. Until then the
//! index answers `None`, saying why it knows nothing rather than claiming
//! a cold cache.
//!
//! Several ranks: the answer is the best rank's leading run, the blocks a
//! request can hope to find on whichever rank the engine picks, at best.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use super::block_hash::{self, adapter_root, block_hashes_from, with_extra_keys, ROOT_SEED};
use super::blocks::{BlockKey, RankBlocks};
use super::counters::{
    add, bump, load, worth_a_warning, Counters, KvIndexSummary, RankSummary, ResetReason,
};
use super::decode::{
    BatchEntry, BlockRemoved, BlockStored, DecodeError, EventBatch, KvEvent, Skipped,
};
use super::pending::{PendingBlocks, PENDING_WEIGHT};

/// Blocks one provider's index holds at most (over all its ranks) unless
/// told otherwise. At ~70 bytes a block, 70 MB for a full index; an engine
/// with 80 GB of KV cache at 2 MB a block holds ~40,000.
pub const DEFAULT_MAX_BLOCKS: usize = 1_000_000;

/// A rank with no message for this long is stale, and neutral
/// (docs/design/defaults.md: stale after 30 s without a message).
pub const DEFAULT_STALE_AFTER: Duration = Duration::from_secs(30);

/// Adapter names an index remembers (engines hold a few dozen at most).
const MAX_ADAPTER_NAMES: usize = 1024;

/// `last_message_ms` before the first message.
const NEVER: u64 = u64::MAX;
/// `next_seq` before the first message.
const NO_SEQ: u64 = u64::MAX;

/// Milliseconds on a monotonic clock; [`crate::clock::now_ms`] unless a
/// test injects another.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// How an index is bounded and when it goes stale.
#[derive(Clone)]
pub struct KvIndexOptions {
    /// Blocks held at most over all ranks; each rank gets an equal share.
    pub max_blocks: usize,
    /// No message for this long makes a rank stale.
    pub stale_after: Duration,
    pub clock: Clock,
}

impl Default for KvIndexOptions {
    fn default() -> Self {
        KvIndexOptions {
            max_blocks: DEFAULT_MAX_BLOCKS,
            stale_after: DEFAULT_STALE_AFTER,
            clock: Arc::new(crate::clock::now_ms),
        }
    }
}

impl std::fmt::Debug for KvIndexOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvIndexOptions")
            .field("max_blocks", &self.max_blocks)
            .field("stale_after", &self.stale_after)
            .finish_non_exhaustive()
    }
}

/// What the provider's `kv_events` configuration says about its cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvIndexSettings {
    /// Tokens per block; must equal the engine's `--block-size`.
    pub block_size: usize,
    /// Ranks publishing (each on base port + rank), at least 1.
    pub data_parallel_size: u16,
}

/// One provider's block index; see the module documentation.
pub struct KvIndex {
    provider: String,
    max_blocks: usize,
    stale_after_ms: u64,
    clock: Clock,
    /// The configured block size, 0 while unconfigured; read without the
    /// lock so a request is hashed before the lock is taken.
    block_size: AtomicUsize,
    // Read-locked by the request path for one lookup of already hashed
    // blocks, write-locked by a subscriber for one decoded batch or one
    // reset: map operations only, no I/O, never across an await.
    state: RwLock<IndexState>,
    /// Blocks of requests just routed here (`pending.rs`). Locked for a
    /// few map operations per routed request and per lookup, never across
    /// an await; apart from `state`, so a subscriber's batch never waits
    /// on it.
    pending: std::sync::Mutex<PendingBlocks>,
    counters: Counters,
}

struct IndexState {
    /// Bumped by every (re)configuration; writers of older ones are ignored.
    generation: u64,
    /// LoRA adapters the engine stored blocks for (`lora_name`), at most
    /// [`MAX_ADAPTER_NAMES`]: a request for one of these models is hashed
    /// from the adapter's root, any other model's from the base root.
    adapters: std::collections::HashSet<String>,
    settings: Option<KvIndexSettings>,
    rank_capacity: usize,
    ranks: Vec<RankState>,
}

struct RankState {
    blocks: RankBlocks,
    status: Arc<RankStatus>,
}

/// A rank's stream state; written by its subscriber, read by lookups and
/// summaries.
#[derive(Debug)]
pub(crate) struct RankStatus {
    last_message_ms: AtomicU64,
    /// Changed only under the index's write lock, with the blocks.
    rebuilding: AtomicBool,
    connected: AtomicBool,
    /// The subscriber saw the publisher go away, or cannot reach it; cleared
    /// when it connects again.
    cut_off: AtomicBool,
    next_seq: AtomicU64,
}

impl RankStatus {
    fn new() -> Self {
        RankStatus {
            last_message_ms: AtomicU64::new(NEVER),
            rebuilding: AtomicBool::new(true),
            connected: AtomicBool::new(false),
            cut_off: AtomicBool::new(false),
            next_seq: AtomicU64::new(NO_SEQ),
        }
    }

    fn stale(&self, now_ms: u64, stale_after_ms: u64) -> bool {
        match self.last_message_ms.load(Ordering::Acquire) {
            NEVER => true,
            last => now_ms.saturating_sub(last) > stale_after_ms,
        }
    }

    fn usable(&self, now_ms: u64, stale_after_ms: u64) -> bool {
        !self.rebuilding.load(Ordering::Acquire)
            && !self.cut_off.load(Ordering::Acquire)
            && !self.stale(now_ms, stale_after_ms)
    }
}

impl KvIndex {
    /// An unconfigured index (it answers `None` until [`KvIndex::configure`]).
    pub fn new(provider: impl Into<String>, options: KvIndexOptions) -> Self {
        KvIndex {
            provider: provider.into(),
            max_blocks: options.max_blocks.max(1),
            stale_after_ms: u64::try_from(options.stale_after.as_millis()).unwrap_or(u64::MAX),
            clock: options.clock,
            block_size: AtomicUsize::new(0),
            state: RwLock::new(IndexState {
                generation: 0,
                adapters: Default::default(),
                settings: None,
                rank_capacity: 1,
                ranks: Vec::new(),
            }),
            pending: Default::default(),
            counters: Counters::default(),
        }
    }

    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// The configured block size; `None` while unconfigured.
    pub fn block_size(&self) -> Option<usize> {
        Some(self.block_size.load(Ordering::Acquire)).filter(|&size| size > 0)
    }

    /// The fraction in [0, 1] of the request's leading full blocks of
    /// `block_size` tokens that the best usable rank holds. `None` when the
    /// request has no full block, or when no rank is usable (unconfigured,
    /// stale, rebuilding).
    pub fn resident_leading_fraction(&self, token_ids: &[u32]) -> Option<f64> {
        self.resident_leading_fraction_from(ROOT_SEED, token_ids)
    }

    /// [`KvIndex::resident_leading_fraction`] for a request the engine
    /// serves as `model`: from the adapter's root when the engine stored
    /// blocks under that adapter name, else from the base model's.
    pub fn resident_leading_fraction_for_model(
        &self,
        token_ids: &[u32],
        model: &str,
    ) -> Option<f64> {
        let is_adapter = self.read().adapters.contains(model);
        let root = if is_adapter {
            adapter_root(model)
        } else {
            ROOT_SEED
        };
        self.resident_leading_fraction_from(root, token_ids)
    }

    /// [`KvIndex::resident_leading_fraction`] for a request served by a
    /// LoRA adapter (named as the engine names it).
    pub fn resident_leading_fraction_for_adapter(
        &self,
        token_ids: &[u32],
        adapter: &str,
    ) -> Option<f64> {
        self.resident_leading_fraction_from(adapter_root(adapter), token_ids)
    }

    fn resident_leading_fraction_from(&self, root: u64, token_ids: &[u32]) -> Option<f64> {
        let block_size = self.block_size()?;
        let hashes: Vec<u64> = block_hashes_from(root, token_ids, block_size).collect();
        self.leading_fraction_of(block_size, &hashes)
    }

    /// Notes the blocks of a request just routed to this provider's engine
    /// as pending (`pending.rs`), keyed as [`Self::resident_leading_fraction_for_model`]
    /// keys them (`model`: what the engine serves it as).
    pub fn note_pending(&self, token_ids: &[u32], model: Option<&str>) {
        let Some(block_size) = self.block_size() else {
            return;
        };
        let root = match model {
            Some(model) if self.read().adapters.contains(model) => adapter_root(model),
            _ => ROOT_SEED,
        };
        let hashes: Vec<u64> = block_hashes_from(root, token_ids, block_size).collect();
        if hashes.is_empty() {
            return;
        }
        let now = (self.clock)();
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .note(&hashes, now);
    }

    /// Forgets every pending block: the engine's cache was cleared or lost.
    fn clear_pending(&self) {
        *self.pending.lock().unwrap_or_else(|e| e.into_inner()) = PendingBlocks::default();
    }

    /// Blocks noted pending and not expired or pushed out yet.
    pub fn pending_blocks(&self) -> usize {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// The leading fraction of request blocks already hashed with
    /// [`block_hash::block_hashes`] at `block_size` (so one hashing serves
    /// every provider of that block size); `None` as for
    /// [`KvIndex::resident_leading_fraction`], and when `block_size` is not
    /// this index's.
    pub fn leading_fraction_of(&self, block_size: usize, hashes: &[u64]) -> Option<f64> {
        if hashes.is_empty() {
            return None;
        }
        let now = (self.clock)();
        let state = self.read();
        if state.settings?.block_size != block_size {
            return None;
        }
        let run = state
            .ranks
            .iter()
            .filter(|rank| rank.status.usable(now, self.stale_after_ms))
            .map(|rank| rank.blocks.leading_run(hashes))
            .max()?;
        drop(state);
        // The blocks right after the confirmed run that a request routed
        // here moments ago will have stored, at a discount.
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .leading_run(&hashes[run..], now);
        Some((run as f64 + PENDING_WEIGHT * pending as f64) / hashes.len() as f64)
    }

    /// Whether some rank is usable (fresh and not rebuilding).
    pub fn is_usable(&self) -> bool {
        let now = (self.clock)();
        self.read()
            .ranks
            .iter()
            .any(|rank| rank.status.usable(now, self.stale_after_ms))
    }

    /// Forgets everything and sets the index up for `settings`; returns one
    /// writer per rank. Writers of an earlier configuration are ignored
    /// from now on.
    pub(crate) fn configure(self: &Arc<Self>, settings: KvIndexSettings) -> Vec<RankWriter> {
        let ranks = usize::from(settings.data_parallel_size.max(1));
        let rank_capacity = (self.max_blocks / ranks).max(1);
        let states: Vec<RankState> = (0..ranks)
            .map(|_| RankState {
                blocks: RankBlocks::new(rank_capacity),
                status: Arc::new(RankStatus::new()),
            })
            .collect();
        let statuses: Vec<Arc<RankStatus>> = states.iter().map(|r| Arc::clone(&r.status)).collect();
        let (generation, old) = {
            let mut state = self.write();
            state.generation += 1;
            state.settings = Some(settings);
            state.rank_capacity = rank_capacity;
            self.block_size
                .store(settings.block_size, Ordering::Release);
            (
                state.generation,
                std::mem::replace(&mut state.ranks, states),
            )
        };
        drop(old); // outside the lock: a full index takes a while to free
        statuses
            .into_iter()
            .enumerate()
            .map(|(rank, status)| RankWriter {
                index: Arc::clone(self),
                rank,
                generation,
                status,
            })
            .collect()
    }

    /// Forgets everything: the provider no longer has `kv_events`.
    pub(crate) fn unconfigure(&self) {
        let old = {
            let mut state = self.write();
            state.generation += 1;
            state.settings = None;
            self.block_size.store(0, Ordering::Release);
            std::mem::take(&mut state.ranks)
        };
        drop(old);
    }

    /// Counts and state for `GET /admin/kv-index` and the metrics.
    pub fn summary(&self) -> KvIndexSummary {
        let now = (self.clock)();
        let c = &self.counters;
        let (settings, ranks) = {
            let state = self.read();
            let ranks: Vec<RankSummary> = state
                .ranks
                .iter()
                .enumerate()
                .map(|(rank, r)| {
                    let status = &r.status;
                    let last = status.last_message_ms.load(Ordering::Acquire);
                    let next = status.next_seq.load(Ordering::Acquire);
                    RankSummary {
                        rank: u16::try_from(rank).unwrap_or(u16::MAX),
                        connected: status.connected.load(Ordering::Acquire),
                        stale: status.stale(now, self.stale_after_ms),
                        rebuilding: status.rebuilding.load(Ordering::Acquire),
                        usable: status.usable(now, self.stale_after_ms),
                        last_message_age_ms: (last != NEVER).then(|| now.saturating_sub(last)),
                        next_seq: (next != NO_SEQ).then_some(next),
                        blocks: r.blocks.len() as u64,
                    }
                })
                .collect();
            (state.settings, ranks)
        };
        KvIndexSummary {
            provider: self.provider.clone(),
            configured: settings.is_some(),
            block_size: settings.map_or(0, |s| s.block_size),
            data_parallel_size: settings.map_or(0, |s| s.data_parallel_size),
            max_blocks: self.max_blocks,
            stale_after_ms: self.stale_after_ms,
            usable: ranks.iter().any(|r| r.usable),
            blocks_resident: ranks.iter().map(|r| r.blocks).sum(),
            messages: load(&c.messages),
            batches_applied: load(&c.batches_applied),
            decode_errors: load(&c.decode_errors),
            events: c.events(),
            blocks_stored: load(&c.blocks_stored),
            blocks_removed: load(&c.blocks_removed),
            unknown_parent_drops: load(&c.unknown_parent_drops),
            block_size_mismatches: load(&c.block_size_mismatches),
            evictions: load(&c.evictions),
            gaps: load(&c.gaps),
            duplicates: load(&c.duplicates),
            replays: c.replays(),
            resets: c.resets(),
            connects: load(&c.connects),
            connect_failures: load(&c.connect_failures),
            disconnects: load(&c.disconnects),
            ranks,
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, IndexState> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, IndexState> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }
}

impl std::fmt::Debug for KvIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvIndex")
            .field("provider", &self.provider)
            .field("block_size", &self.block_size())
            .finish_non_exhaustive()
    }
}

/// Why a `BlockStored` event was not placed.
enum StoreDrop {
    UnknownParent,
    BlockSize(usize),
    Malformed,
}

/// What one batch did that is worth a log line (logged after the lock).
#[derive(Default)]
struct Notes {
    unknown_types: Vec<String>,
    malformed: Vec<&'static str>,
    block_size_mismatch: Option<usize>,
    malformed_reset: bool,
    /// The engine cleared its cache (`AllBlocksCleared`).
    cleared: bool,
}

/// Writes one rank of one configuration of an index; held by that rank's
/// subscriber. Every change is ignored once the index was reconfigured.
pub(crate) struct RankWriter {
    index: Arc<KvIndex>,
    rank: usize,
    generation: u64,
    status: Arc<RankStatus>,
}

impl RankWriter {
    /// A message arrived (live or replayed): the rank is fresh.
    pub(crate) fn record_message(&self) {
        bump(&self.index.counters.messages);
        self.status
            .last_message_ms
            .store((self.index.clock)(), Ordering::Release);
    }

    pub(crate) fn set_next_seq(&self, next: Option<u64>) {
        self.status
            .next_seq
            .store(next.unwrap_or(NO_SEQ), Ordering::Release);
    }

    /// Applies a decoded batch; false when this writer was superseded.
    pub(crate) fn apply(&self, batch: &EventBatch) -> bool {
        let c = &self.index.counters;
        let mut notes = Notes::default();
        let mut garbage = Vec::new();
        {
            let mut state = self.index.write();
            if state.generation != self.generation {
                return false;
            }
            let capacity = state.rank_capacity;
            let Some(settings) = state.settings else {
                return false;
            };
            let IndexState {
                ranks, adapters, ..
            } = &mut *state;
            let rank = &mut ranks[self.rank];
            for entry in &batch.entries {
                match entry {
                    BatchEntry::Event(event) => {
                        let counts = c.kind(event.kind());
                        bump(&counts.received);
                        match event {
                            KvEvent::BlockStored(stored) => {
                                if let Some(name) = &stored.lora_name {
                                    if adapters.len() < MAX_ADAPTER_NAMES
                                        && !adapters.contains(name)
                                    {
                                        adapters.insert(name.clone());
                                    }
                                }
                                match store(&mut rank.blocks, settings.block_size, stored) {
                                    Ok((placed, evicted)) => {
                                        bump(&counts.applied);
                                        add(&c.blocks_stored, placed);
                                        add(&c.evictions, evicted);
                                        if placed > 0 {
                                            rank.status.rebuilding.store(false, Ordering::Release);
                                        }
                                    }
                                    Err(drop) => {
                                        bump(&counts.dropped);
                                        match drop {
                                            StoreDrop::UnknownParent => {
                                                bump(&c.unknown_parent_drops);
                                            }
                                            StoreDrop::BlockSize(size) => {
                                                bump(&c.block_size_mismatches);
                                                notes.block_size_mismatch = Some(size);
                                            }
                                            StoreDrop::Malformed => {
                                                bump(&c.malformed_events);
                                                notes.malformed.push(
                                                    "token_ids do not fill its blocks exactly",
                                                );
                                            }
                                        }
                                    }
                                }
                            }
                            KvEvent::BlockRemoved(removed) => {
                                bump(&counts.applied);
                                add(&c.blocks_removed, remove(&mut rank.blocks, removed));
                            }
                            KvEvent::AllBlocksCleared => {
                                bump(&counts.applied);
                                notes.cleared = true;
                                garbage.push(std::mem::replace(
                                    &mut rank.blocks,
                                    RankBlocks::new(capacity),
                                ));
                                // The cache is known to be empty: nothing is missing.
                                rank.status.rebuilding.store(false, Ordering::Release);
                            }
                        }
                    }
                    BatchEntry::Skipped(Skipped::Unknown(tag)) => {
                        bump(&c.unknown_events);
                        notes.unknown_types.push(tag.clone());
                    }
                    BatchEntry::Skipped(Skipped::Malformed { kind, reason }) => {
                        bump(&c.malformed_events);
                        notes.malformed.push(reason);
                        if let Some(kind) = kind {
                            let counts = c.kind(*kind);
                            bump(&counts.received);
                            bump(&counts.dropped);
                        }
                        // A stored chain that cannot be read only leaves
                        // blocks out; anything else may have removed blocks
                        // the index would go on claiming.
                        if *kind != Some(super::decode::EventKind::BlockStored) {
                            garbage.push(std::mem::replace(
                                &mut rank.blocks,
                                RankBlocks::new(capacity),
                            ));
                            rank.status.rebuilding.store(true, Ordering::Release);
                            notes.malformed_reset = true;
                        }
                    }
                }
            }
        }
        drop(garbage); // outside the lock
        if notes.cleared {
            self.index.clear_pending();
        }
        bump(&c.batches_applied);
        self.log_notes(notes);
        true
    }

    fn log_notes(&self, notes: Notes) {
        let c = &self.index.counters;
        for tag in notes.unknown_types {
            self.warn_sometimes(
                load(&c.unknown_events),
                format_args!("skipped an event of unknown type {tag:?}"),
            );
        }
        for reason in notes.malformed {
            self.warn_sometimes(
                load(&c.malformed_events),
                format_args!("skipped a malformed event: {reason}"),
            );
        }
        if let Some(size) = notes.block_size_mismatch {
            self.warn_sometimes(
                load(&c.block_size_mismatches),
                format_args!(
                    "dropped blocks of {size} tokens: kv_events.block_size is {}; it must equal \
                     the engine's --block-size",
                    self.index.block_size().unwrap_or(0)
                ),
            );
        }
        if notes.malformed_reset {
            let count = bump(&c.resets_malformed);
            self.warn_sometimes(
                count,
                format_args!("cleared: a removal could not be read; rebuilding"),
            );
        }
    }

    /// A message or batch that could not be read at all.
    pub(crate) fn decode_error(&self, seq: Option<u64>, error: &DecodeError) {
        let count = bump(&self.index.counters.decode_errors);
        match seq {
            Some(seq) => self.warn_sometimes(count, format_args!("rejected batch {seq}: {error}")),
            None => self.warn_sometimes(count, format_args!("rejected a message: {error}")),
        }
    }

    /// Throws the rank's blocks away; the rank rebuilds from fresh events.
    pub(crate) fn reset(&self, reason: ResetReason) {
        let old = {
            let mut state = self.index.write();
            if state.generation != self.generation {
                return;
            }
            let capacity = state.rank_capacity;
            let rank = &mut state.ranks[self.rank];
            rank.status.rebuilding.store(true, Ordering::Release);
            std::mem::replace(&mut rank.blocks, RankBlocks::new(capacity))
        };
        drop(old);
        // What was expected to arrive on top of the old blocks will not.
        self.index.clear_pending();
        let count = bump(self.index.counters.reset(reason));
        self.warn_sometimes(
            count,
            format_args!("cleared ({}); rebuilding from fresh events", reason.label()),
        );
    }

    /// Every event of the engine's life was seen (from seq 0), so the rank
    /// counts even before it holds a block.
    pub(crate) fn mark_complete(&self) {
        let state = self.index.write();
        if state.generation == self.generation {
            state.ranks[self.rank]
                .status
                .rebuilding
                .store(false, Ordering::Release);
        }
    }

    pub(crate) fn gap(&self, expected: u64, got: u64) {
        let count = bump(&self.index.counters.gaps);
        self.warn_sometimes(
            count,
            format_args!("sequence gap: expected {expected}, got {got}"),
        );
    }

    pub(crate) fn duplicate(&self) {
        bump(&self.index.counters.duplicates);
    }

    pub(crate) fn replay_ok(&self, from: u64, batches: usize) {
        bump(&self.index.counters.replays_ok);
        log::info!(
            "kv events {} rank {}: replayed {batches} batches from seq {from}",
            self.index.provider,
            self.rank
        );
    }

    pub(crate) fn replay_failed(&self, from: u64, why: &dyn std::fmt::Display) {
        let count = bump(&self.index.counters.replays_failed);
        self.warn_sometimes(count, format_args!("replay from seq {from} failed: {why}"));
    }

    pub(crate) fn connected(&self, endpoint: &str) {
        bump(&self.index.counters.connects);
        self.status.connected.store(true, Ordering::Release);
        self.status.cut_off.store(false, Ordering::Release);
        log::info!(
            "kv events {} rank {}: subscribed to {endpoint}",
            self.index.provider,
            self.rank
        );
    }

    pub(crate) fn disconnected(&self, why: &dyn std::fmt::Display) {
        let count = bump(&self.index.counters.disconnects);
        self.status.connected.store(false, Ordering::Release);
        self.status.cut_off.store(true, Ordering::Release);
        self.warn_sometimes(count, format_args!("disconnected: {why}"));
    }

    pub(crate) fn connect_failed(&self, endpoint: &str, why: &dyn std::fmt::Display) {
        let count = bump(&self.index.counters.connect_failures);
        self.status.connected.store(false, Ordering::Release);
        self.status.cut_off.store(true, Ordering::Release);
        self.warn_sometimes(count, format_args!("cannot subscribe to {endpoint}: {why}"));
    }

    /// Logs at warn for the 1st, 2nd, 4th, ... occurrence, else at debug.
    fn warn_sometimes(&self, count: u64, message: std::fmt::Arguments<'_>) {
        let level = if worth_a_warning(count) {
            log::Level::Warn
        } else {
            log::Level::Debug
        };
        log::log!(
            level,
            "kv events {} rank {}: {message} (#{count})",
            self.index.provider,
            self.rank
        );
    }
}

/// Places a stored chain; returns (blocks placed, blocks evicted).
fn store(
    blocks: &mut RankBlocks,
    block_size: usize,
    event: &BlockStored,
) -> Result<(u64, u64), StoreDrop> {
    if let Some(size) = event.block_size.filter(|&size| size != block_size) {
        return Err(StoreDrop::BlockSize(size));
    }
    if event.token_ids.len() != event.block_hashes.len() * block_size {
        return Err(StoreDrop::Malformed);
    }
    let mut parent = match event.parent_block_hash {
        Some(parent) => blocks
            .rolter_hash(BlockKey::new(parent, event.group_idx))
            .ok_or(StoreDrop::UnknownParent)?,
        None => match (&event.lora_name, event.lora_id) {
            (Some(name), _) => adapter_root(name),
            (None, Some(id)) => adapter_root(&format!("lora-id:{id}")),
            (None, None) => ROOT_SEED,
        },
    };
    let mut evicted = 0;
    for (i, (id, tokens)) in event
        .block_hashes
        .iter()
        .zip(event.token_ids.chunks_exact(block_size))
        .enumerate()
    {
        let mut hash = block_hash::chain(parent, tokens);
        if let Some(Some(extra)) = event.extra_keys.as_ref().and_then(|keys| keys.get(i)) {
            hash = with_extra_keys(hash, *extra);
        }
        evicted += blocks.store(BlockKey::new(*id, event.group_idx), hash, event.medium);
        parent = hash;
    }
    Ok((event.block_hashes.len() as u64, evicted))
}

/// Drops removed blocks; returns how many held blocks went.
fn remove(blocks: &mut RankBlocks, event: &BlockRemoved) -> u64 {
    let mut removed = 0;
    for (i, id) in event.block_hashes.iter().enumerate() {
        let copies_left = event
            .remaining_copy_counts
            .as_ref()
            .and_then(|counts| counts.get(i))
            .is_some_and(|&left| left > 0);
        if !copies_left && blocks.remove(BlockKey::new(*id, event.group_idx), event.medium) {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests;
