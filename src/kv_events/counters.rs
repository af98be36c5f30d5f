//! What a provider's KV-event stream did, counted in atomics, and the
//! summary that `GET /admin/kv-index` and the metrics read.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use super::decode::EventKind;

/// Why a rank's blocks were thrown away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetReason {
    /// Events were lost (a seq gap) and replay could not bring them back.
    Gap,
    /// The seq went backwards: the engine restarted with an empty cache.
    Restart,
    /// A batch, or a removal in one, could not be read: what it removed is
    /// unknown.
    Malformed,
}

impl ResetReason {
    pub fn label(self) -> &'static str {
        match self {
            ResetReason::Gap => "gap",
            ResetReason::Restart => "restart",
            ResetReason::Malformed => "malformed",
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct KindCounters {
    pub received: AtomicU64,
    pub applied: AtomicU64,
    pub dropped: AtomicU64,
}

impl KindCounters {
    fn snapshot(&self) -> KindCounts {
        KindCounts {
            received: load(&self.received),
            applied: load(&self.applied),
            dropped: load(&self.dropped),
        }
    }
}

/// Every count of one provider's stream (all its ranks), monotonic.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub messages: AtomicU64,
    pub batches_applied: AtomicU64,
    pub decode_errors: AtomicU64,
    pub block_stored: KindCounters,
    pub block_removed: KindCounters,
    pub all_blocks_cleared: KindCounters,
    pub unknown_events: AtomicU64,
    pub malformed_events: AtomicU64,
    pub blocks_stored: AtomicU64,
    pub blocks_removed: AtomicU64,
    pub unknown_parent_drops: AtomicU64,
    pub block_size_mismatches: AtomicU64,
    pub evictions: AtomicU64,
    pub gaps: AtomicU64,
    pub duplicates: AtomicU64,
    pub replays_ok: AtomicU64,
    pub replays_failed: AtomicU64,
    pub resets_gap: AtomicU64,
    pub resets_restart: AtomicU64,
    pub resets_malformed: AtomicU64,
    pub connects: AtomicU64,
    pub connect_failures: AtomicU64,
    pub disconnects: AtomicU64,
}

impl Counters {
    pub(super) fn kind(&self, kind: EventKind) -> &KindCounters {
        match kind {
            EventKind::BlockStored => &self.block_stored,
            EventKind::BlockRemoved => &self.block_removed,
            EventKind::AllBlocksCleared => &self.all_blocks_cleared,
        }
    }

    pub(super) fn reset(&self, reason: ResetReason) -> &AtomicU64 {
        match reason {
            ResetReason::Gap => &self.resets_gap,
            ResetReason::Restart => &self.resets_restart,
            ResetReason::Malformed => &self.resets_malformed,
        }
    }

    pub(super) fn replays(&self) -> ReplayCounts {
        ReplayCounts {
            ok: load(&self.replays_ok),
            failed: load(&self.replays_failed),
        }
    }

    pub(super) fn resets(&self) -> ResetCounts {
        ResetCounts {
            gap: load(&self.resets_gap),
            restart: load(&self.resets_restart),
            malformed: load(&self.resets_malformed),
        }
    }

    pub(super) fn events(&self) -> EventCounts {
        EventCounts {
            block_stored: self.block_stored.snapshot(),
            block_removed: self.block_removed.snapshot(),
            all_blocks_cleared: self.all_blocks_cleared.snapshot(),
            unknown: load(&self.unknown_events),
            malformed: load(&self.malformed_events),
        }
    }
}

/// Adds one and returns the new count.
pub(super) fn bump(counter: &AtomicU64) -> u64 {
    add(counter, 1)
}

pub(super) fn add(counter: &AtomicU64, n: u64) -> u64 {
    counter.fetch_add(n, Ordering::Relaxed) + n
}

pub(super) fn load(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// Whether the `count`th occurrence of a repeating problem is logged at
/// warn level: the 1st, 2nd, 4th, 8th, ... (the rest go to debug), so a
/// stream that is broken for good cannot flood the log.
pub(super) fn worth_a_warning(count: u64) -> bool {
    count.is_power_of_two()
}

/// One event type's counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct KindCounts {
    /// Decoded or tagged with this type (including the malformed ones).
    pub received: u64,
    /// Changed the index (a removal of an unknown block still counts).
    pub applied: u64,
    /// Malformed, of another block size, or a chain with an unknown parent.
    pub dropped: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct EventCounts {
    pub block_stored: KindCounts,
    pub block_removed: KindCounts,
    pub all_blocks_cleared: KindCounts,
    /// Events of a type this version does not know, skipped.
    pub unknown: u64,
    /// Events that could not be read, skipped (also in their type's
    /// `dropped` when the type was readable).
    pub malformed: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ReplayCounts {
    /// Replays that brought back every missing batch (or, when joining a
    /// stream, every batch the publisher still buffers up to the live one).
    pub ok: u64,
    /// Replays that failed, timed out or could not cover what was missing.
    pub failed: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct ResetCounts {
    pub gap: u64,
    pub restart: u64,
    pub malformed: u64,
}

/// One data-parallel rank's stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct RankSummary {
    pub rank: u16,
    /// The SUB socket has a connection to the publisher.
    pub connected: bool,
    /// No message within the staleness window (or none yet).
    pub stale: bool,
    /// Cleared and not yet rebuilt (see the module documentation).
    pub rebuilding: bool,
    /// Neither stale nor rebuilding: its blocks count.
    pub usable: bool,
    /// Milliseconds since the last message; `None` before the first.
    pub last_message_age_ms: Option<u64>,
    /// The seq the rank expects next; `None` before the first message.
    pub next_seq: Option<u64>,
    /// Engine blocks held for this rank.
    pub blocks: u64,
}

/// One provider's KV index, as `GET /admin/kv-index` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct KvIndexSummary {
    pub provider: String,
    /// A subscriber feeds it (the provider has `kv_events`).
    pub configured: bool,
    pub block_size: usize,
    pub data_parallel_size: u16,
    /// Bound on the blocks held, over all ranks.
    pub max_blocks: usize,
    pub stale_after_ms: u64,
    /// At least one rank is usable: the index answers for this provider.
    pub usable: bool,
    /// Engine blocks held, over all ranks.
    pub blocks_resident: u64,
    /// Live messages received (replayed batches are not counted here).
    pub messages: u64,
    pub batches_applied: u64,
    /// Messages or batches that could not be read, rejected.
    pub decode_errors: u64,
    pub events: EventCounts,
    /// Blocks placed by `BlockStored` events.
    pub blocks_stored: u64,
    /// Held blocks dropped by `BlockRemoved` events.
    pub blocks_removed: u64,
    /// `BlockStored` chains dropped because their parent is unknown.
    pub unknown_parent_drops: u64,
    /// `BlockStored` events dropped for naming another block size.
    pub block_size_mismatches: u64,
    /// Blocks evicted at the `max_blocks` bound.
    pub evictions: u64,
    /// Sequence gaps seen.
    pub gaps: u64,
    /// Live messages skipped because a replay already applied them.
    pub duplicates: u64,
    pub replays: ReplayCounts,
    /// Ranks cleared, by reason.
    pub resets: ResetCounts,
    /// Connections made to the publisher.
    pub connects: u64,
    pub connect_failures: u64,
    pub disconnects: u64,
    pub ranks: Vec<RankSummary>,
}
