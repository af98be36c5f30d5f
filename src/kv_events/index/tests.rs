use std::sync::Arc;
use std::time::Duration;

use super::*;
use crate::kv_events::decode::{EngineBlockId, EventKind, Medium};
use crate::kv_events::testing::ManualClock;

const BS: usize = 4;

fn index_with(max_blocks: usize, ranks: u16) -> (Arc<KvIndex>, Vec<RankWriter>, ManualClock) {
    let clock = ManualClock::default();
    clock.set(1_000);
    let index = Arc::new(KvIndex::new(
        "gpu-a",
        KvIndexOptions {
            max_blocks,
            stale_after: Duration::from_secs(30),
            clock: clock.clock(),
        },
    ));
    let writers = index.configure(KvIndexSettings {
        block_size: BS,
        data_parallel_size: ranks,
    });
    for writer in &writers {
        writer.record_message();
    }
    (index, writers, clock)
}

fn index() -> (Arc<KvIndex>, RankWriter, ManualClock) {
    let (index, mut writers, clock) = index_with(1_000, 1);
    (index, writers.remove(0), clock)
}

/// Tokens 0.. of `blocks` full blocks.
fn tokens(blocks: usize) -> Vec<u32> {
    (0..(blocks * BS) as u32).collect()
}

fn stored(ids: &[u64], parent: Option<u64>, token_ids: &[u32]) -> BlockStored {
    BlockStored::plain(ids, parent, token_ids, BS)
}

fn removed(ids: &[u64]) -> BlockRemoved {
    BlockRemoved {
        block_hashes: ids.iter().map(|&id| EngineBlockId(id)).collect(),
        medium: Medium::Gpu,
        group_idx: None,
        remaining_copy_counts: None,
    }
}

fn batch(events: Vec<KvEvent>) -> EventBatch {
    EventBatch {
        ts: 0.0,
        entries: events.into_iter().map(BatchEntry::Event).collect(),
        data_parallel_rank: None,
    }
}

fn store(writer: &RankWriter, event: BlockStored) {
    assert!(writer.apply(&batch(vec![KvEvent::BlockStored(event)])));
}

#[test]
fn stored_blocks_score_their_leading_fraction() {
    let (index, writer, _) = index();
    let request = tokens(4);
    // Blocks 0 and 1 stored as one chain from the root.
    store(&writer, stored(&[10, 11], None, &request[..2 * BS]));
    assert_eq!(index.resident_leading_fraction(&request), Some(0.5));
    // Block 2 continues from block 1's engine hash.
    store(&writer, stored(&[12], Some(11), &request[2 * BS..3 * BS]));
    assert_eq!(index.resident_leading_fraction(&request), Some(0.75));
    // A partial last block does not count: 3 of 3 full blocks.
    assert_eq!(
        index.resident_leading_fraction(&request[..3 * BS + 2]),
        Some(1.0)
    );
    // Another prompt shares nothing.
    let other: Vec<u32> = (100..100 + 4 * BS as u32).collect();
    assert_eq!(index.resident_leading_fraction(&other), Some(0.0));
    let summary = index.summary();
    assert_eq!(summary.blocks_stored, 3);
    assert_eq!(summary.blocks_resident, 3);
    assert_eq!(summary.events.block_stored.applied, 2);
    assert_eq!(summary.batches_applied, 2);
}

#[test]
fn only_the_leading_run_counts() {
    let (index, writer, _) = index();
    let request = tokens(4);
    store(&writer, stored(&[10, 11, 12, 13], None, &request));
    writer.apply(&batch(vec![KvEvent::BlockRemoved(removed(&[11]))]));
    assert_eq!(
        index.resident_leading_fraction(&request),
        Some(0.25),
        "blocks 2 and 3 are resident but follow a missing one"
    );
    assert_eq!(index.summary().blocks_removed, 1);
}

#[test]
fn no_full_block_and_no_configuration_are_neutral() {
    let (index, writer, _) = index();
    store(&writer, stored(&[10], None, &tokens(1)));
    assert_eq!(index.resident_leading_fraction(&tokens(1)[..BS - 1]), None);
    assert_eq!(index.resident_leading_fraction(&[]), None);
    let bare = KvIndex::new("gpu-b", KvIndexOptions::default());
    assert_eq!(bare.resident_leading_fraction(&tokens(2)), None);
    assert!(!bare.summary().configured);
    index.unconfigure();
    assert_eq!(index.resident_leading_fraction(&tokens(1)), None);
    assert!(
        !writer.apply(&batch(vec![KvEvent::AllBlocksCleared])),
        "superseded"
    );
}

#[test]
fn a_chain_with_an_unknown_parent_is_dropped_and_counted() {
    let (index, writer, _) = index();
    let request = tokens(2);
    store(&writer, stored(&[10], None, &request[..BS]));
    writer.apply(&batch(vec![KvEvent::BlockStored(stored(
        &[12],
        Some(99),
        &request[BS..],
    ))]));
    let summary = index.summary();
    assert_eq!(summary.unknown_parent_drops, 1);
    assert_eq!(summary.events.block_stored.dropped, 1);
    assert_eq!(summary.blocks_resident, 1);
    assert_eq!(index.resident_leading_fraction(&request), Some(0.5));
}

#[test]
fn removal_and_clear_by_the_engine() {
    let (index, writer, _) = index();
    let request = tokens(2);
    store(&writer, stored(&[10, 11], None, &request));
    writer.apply(&batch(vec![KvEvent::BlockRemoved(removed(&[10, 77]))]));
    assert_eq!(index.resident_leading_fraction(&request), Some(0.0));
    assert_eq!(index.summary().blocks_removed, 1, "77 was never held");
    store(&writer, stored(&[10], None, &request[..BS]));
    assert_eq!(index.resident_leading_fraction(&request), Some(1.0));
    writer.apply(&batch(vec![KvEvent::AllBlocksCleared]));
    assert_eq!(
        index.resident_leading_fraction(&request),
        Some(0.0),
        "a cleared cache is known to be cold, not unknown"
    );
    assert_eq!(index.summary().blocks_resident, 0);
    assert_eq!(index.summary().events.all_blocks_cleared.applied, 1);
}

#[test]
fn remaining_copies_keep_a_block_resident() {
    let (index, writer, _) = index();
    let request = tokens(1);
    store(&writer, stored(&[10], None, &request));
    let mut event = removed(&[10]);
    event.remaining_copy_counts = Some(vec![1]);
    writer.apply(&batch(vec![KvEvent::BlockRemoved(event)]));
    assert_eq!(index.resident_leading_fraction(&request), Some(1.0));
}

#[test]
fn a_fresh_index_is_rebuilding_until_it_holds_a_block_or_knows_the_whole_stream() {
    let (index, writer, _) = index();
    assert_eq!(index.resident_leading_fraction(&tokens(1)), None);
    assert!(index.summary().ranks[0].rebuilding);
    writer.mark_complete();
    assert_eq!(index.resident_leading_fraction(&tokens(1)), Some(0.0));
}

#[test]
fn a_reset_clears_and_is_neutral_until_fresh_blocks_arrive() {
    let (index, writer, _) = index();
    let request = tokens(2);
    store(&writer, stored(&[10, 11], None, &request));
    writer.reset(ResetReason::Gap);
    assert_eq!(index.resident_leading_fraction(&request), None);
    let summary = index.summary();
    assert_eq!(summary.blocks_resident, 0);
    assert_eq!(summary.resets.gap, 1);
    assert!(summary.ranks[0].rebuilding && !summary.usable);
    // A child of a forgotten block cannot rebuild anything.
    writer.apply(&batch(vec![KvEvent::BlockStored(stored(
        &[12],
        Some(11),
        &request[BS..],
    ))]));
    assert_eq!(index.resident_leading_fraction(&request), None);
    // A fresh root chain does.
    store(&writer, stored(&[10], None, &request[..BS]));
    assert_eq!(index.resident_leading_fraction(&request), Some(0.5));
    writer.reset(ResetReason::Restart);
    assert_eq!(index.summary().resets.restart, 1);
}

#[test]
fn a_silent_rank_goes_stale_and_a_message_makes_it_fresh() {
    let (index, writer, clock) = index();
    let request = tokens(1);
    store(&writer, stored(&[10], None, &request));
    clock.set(1_000 + 30_000);
    assert_eq!(
        index.resident_leading_fraction(&request),
        Some(1.0),
        "30 s is still fresh"
    );
    clock.set(1_000 + 30_001);
    assert_eq!(index.resident_leading_fraction(&request), None);
    let summary = index.summary();
    assert!(summary.ranks[0].stale && !summary.usable);
    assert_eq!(summary.ranks[0].last_message_age_ms, Some(30_001));
    writer.record_message();
    assert_eq!(index.resident_leading_fraction(&request), Some(1.0));
}

#[test]
fn another_block_size_is_dropped_and_counted() {
    let (index, writer, _) = index();
    let mut event = stored(&[10], None, &tokens(2)[..8]);
    event.block_size = Some(8);
    writer.apply(&batch(vec![KvEvent::BlockStored(event)]));
    // Tokens that do not fill the blocks exactly.
    writer.apply(&batch(vec![KvEvent::BlockStored(stored(
        &[10, 11],
        None,
        &tokens(1),
    ))]));
    let summary = index.summary();
    assert_eq!(summary.block_size_mismatches, 1);
    assert_eq!(summary.events.malformed, 1);
    assert_eq!(summary.events.block_stored.dropped, 2);
    assert_eq!(summary.blocks_resident, 0);
    // Without a block size in the event, the configured one is trusted.
    let mut event = stored(&[10], None, &tokens(1));
    event.block_size = None;
    store(&writer, event);
    assert_eq!(index.resident_leading_fraction(&tokens(1)), Some(1.0));
}

#[test]
fn the_bound_evicts_the_least_recent_blocks_and_counts_them() {
    let (index, mut writers, _) = index_with(3, 1);
    let writer = writers.remove(0);
    let request = tokens(5);
    store(&writer, stored(&[10, 11, 12, 13, 14], None, &request));
    let summary = index.summary();
    assert_eq!(summary.blocks_resident, 3);
    assert_eq!(summary.evictions, 2);
    assert_eq!(summary.max_blocks, 3);
    // Blocks 0 and 1 went first, so no leading block is left.
    assert_eq!(index.resident_leading_fraction(&request), Some(0.0));
}

#[test]
fn adapter_blocks_and_blocks_with_extra_keys_do_not_match_a_plain_request() {
    let (index, writer, _) = index();
    let request = tokens(2);
    let mut lora = stored(&[10, 11], None, &request);
    lora.lora_name = Some("sql".into());
    store(&writer, lora);
    assert_eq!(index.resident_leading_fraction(&request), Some(0.0));
    assert_eq!(
        index.resident_leading_fraction_for_adapter(&request, "sql"),
        Some(1.0)
    );
    let mut salted = stored(&[20, 21], None, &request);
    salted.extra_keys = Some(vec![Some(1234), None]);
    store(&writer, salted);
    assert_eq!(index.resident_leading_fraction(&request), Some(0.0));
    // The same tokens without extra keys do match.
    store(&writer, stored(&[30, 31], None, &request));
    assert_eq!(index.resident_leading_fraction(&request), Some(1.0));
}

#[test]
fn unknown_and_malformed_events_are_counted_and_a_lost_removal_clears() {
    let (index, writer, _) = index();
    let request = tokens(2);
    store(&writer, stored(&[10, 11], None, &request));
    let mixed = EventBatch {
        ts: 0.0,
        entries: vec![
            BatchEntry::Skipped(Skipped::Unknown("BlockPinned".into())),
            BatchEntry::Skipped(Skipped::Malformed {
                kind: Some(EventKind::BlockStored),
                reason: "test",
            }),
            BatchEntry::Event(KvEvent::BlockRemoved(removed(&[11]))),
        ],
        data_parallel_rank: None,
    };
    writer.apply(&mixed);
    let summary = index.summary();
    assert_eq!(summary.events.unknown, 1);
    assert_eq!(summary.events.malformed, 1);
    assert_eq!(summary.events.block_stored.dropped, 1);
    assert_eq!(summary.events.block_removed.applied, 1);
    assert_eq!(index.resident_leading_fraction(&request), Some(0.5));
    // A removal that cannot be read: the index no longer knows what is gone.
    writer.apply(&EventBatch {
        ts: 0.0,
        entries: vec![BatchEntry::Skipped(Skipped::Malformed {
            kind: Some(EventKind::BlockRemoved),
            reason: "test",
        })],
        data_parallel_rank: None,
    });
    assert_eq!(index.resident_leading_fraction(&request), None);
    let summary = index.summary();
    assert_eq!(summary.resets.malformed, 1);
    assert_eq!(summary.blocks_resident, 0);
}

#[test]
fn the_best_usable_rank_answers() {
    let (index, writers, clock) = index_with(1_000, 2);
    let request = tokens(4);
    store(&writers[0], stored(&[10], None, &request[..BS]));
    store(&writers[1], stored(&[20, 21, 22], None, &request[..3 * BS]));
    assert_eq!(index.resident_leading_fraction(&request), Some(0.75));
    // Rank 1 goes silent; rank 0 keeps talking.
    clock.set(40_000);
    writers[0].record_message();
    assert_eq!(index.resident_leading_fraction(&request), Some(0.25));
    let summary = index.summary();
    assert_eq!(summary.data_parallel_size, 2);
    assert!(!summary.ranks[0].stale && summary.ranks[1].stale);
    assert_eq!(summary.ranks[1].blocks, 3);
    // A rank's removal leaves the other rank's copy alone.
    writers[0].record_message();
    writers[1].record_message();
    writers[0].apply(&batch(vec![KvEvent::BlockRemoved(removed(&[20]))]));
    assert_eq!(index.resident_leading_fraction(&request), Some(0.75));
}

#[test]
fn reconfiguring_forgets_everything_and_ignores_old_writers() {
    let (index, writer, _) = index();
    store(&writer, stored(&[10], None, &tokens(1)));
    let writers = index.configure(KvIndexSettings {
        block_size: 2,
        data_parallel_size: 1,
    });
    assert_eq!(index.block_size(), Some(2));
    assert!(!writer.apply(&batch(vec![KvEvent::AllBlocksCleared])));
    writer.reset(ResetReason::Gap);
    assert_eq!(
        index.summary().resets.gap,
        0,
        "an old writer's reset is ignored"
    );
    assert_eq!(index.summary().blocks_resident, 0);
    writers[0].record_message();
    writers[0].mark_complete();
    assert_eq!(index.resident_leading_fraction(&[1, 2]), Some(0.0));
}

#[test]
fn prehashed_requests_must_match_the_block_size() {
    let (index, writer, _) = index();
    let request = tokens(2);
    store(&writer, stored(&[10, 11], None, &request));
    let hashes: Vec<u64> = block_hash::block_hashes(&request, BS).collect();
    assert_eq!(index.leading_fraction_of(BS, &hashes), Some(1.0));
    assert_eq!(index.leading_fraction_of(BS * 2, &hashes), None);
    assert_eq!(index.leading_fraction_of(BS, &[]), None);
}

#[test]
fn the_summary_serializes_for_the_admin_api() {
    let (index, writer, _) = index();
    writer.set_next_seq(Some(8));
    store(&writer, stored(&[10], None, &tokens(1)));
    let json = serde_json::to_value(index.summary()).unwrap();
    assert_eq!(json["provider"], "gpu-a");
    assert_eq!(json["block_size"], BS);
    assert_eq!(json["usable"], true);
    assert_eq!(json["ranks"][0]["next_seq"], 8);
    assert_eq!(json["events"]["block_stored"]["applied"], 1);
    assert_eq!(json["replays"]["failed"], 0);
}
