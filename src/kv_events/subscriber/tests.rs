//! The driver's sequence rules against an in-memory replay source.

use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::*;
use crate::kv_events::index::{KvIndex, KvIndexOptions, KvIndexSettings};
use crate::kv_events::replay::ReplayError;
use crate::kv_events::testing::{
    batch_payload, cleared_event, live_frames, removed_event, stored_event,
};
use crate::kv_events::KvIndexSummary;

const BS: usize = 2;

/// What the in-memory publisher buffers, and whether its replay works.
#[derive(Default)]
struct ReplayState {
    batches: Vec<(u64, Bytes)>,
    broken: bool,
    requests: Vec<u64>,
}

#[derive(Clone, Default)]
struct FakeReplay(Arc<Mutex<ReplayState>>);

impl FakeReplay {
    fn buffer(&self, seq: u64, payload: Bytes) {
        self.0.lock().unwrap().batches.push((seq, payload));
    }

    fn requests(&self) -> Vec<u64> {
        self.0.lock().unwrap().requests.clone()
    }
}

impl ReplaySource for FakeReplay {
    async fn fetch(&self, from: u64) -> Result<Vec<(u64, Bytes)>, ReplayError> {
        let mut state = self.0.lock().unwrap();
        state.requests.push(from);
        if state.broken {
            return Err(ReplayError::Timeout(std::time::Duration::from_secs(5)));
        }
        Ok(state
            .batches
            .iter()
            .filter(|(seq, _)| *seq >= from)
            .cloned()
            .collect())
    }
}

/// A driver on a fresh one-rank index, plus a publisher-side log of every
/// batch so a test can send some live and "lose" others.
struct Harness {
    index: Arc<KvIndex>,
    driver: RankDriver<FakeReplay>,
    replay: FakeReplay,
}

impl Harness {
    fn new(with_replay: bool) -> Harness {
        let index = Arc::new(KvIndex::new("gpu-a", KvIndexOptions::default()));
        let writer = index
            .configure(KvIndexSettings {
                block_size: BS,
                data_parallel_size: 1,
            })
            .remove(0);
        let replay = FakeReplay::default();
        let driver = RankDriver::new(writer, with_replay.then(|| replay.clone()));
        Harness {
            index,
            driver,
            replay,
        }
    }

    /// The engine publishes `payload` as `seq` and the subscriber gets it.
    async fn live(&mut self, seq: u64, payload: Bytes) {
        self.replay.buffer(seq, payload.clone());
        self.driver.on_live(&live_frames("kv", seq, &payload)).await;
    }

    /// The engine publishes `payload` as `seq` and the subscriber misses it.
    fn lost(&mut self, seq: u64, payload: Bytes) {
        self.replay.buffer(seq, payload);
    }

    fn fraction(&self, tokens: &[u32]) -> Option<f64> {
        self.index.resident_leading_fraction(tokens)
    }

    fn summary(&self) -> KvIndexSummary {
        self.index.summary()
    }
}

/// Tokens of block `i` (0-based) of the shared test prompt.
fn block(i: usize) -> Vec<u32> {
    vec![i as u32 * 10, i as u32 * 10 + 1]
}

fn prompt(blocks: usize) -> Vec<u32> {
    (0..blocks).flat_map(block).collect()
}

/// Engine block ids are 100 + block index.
fn store_block(i: usize) -> Bytes {
    let parent = i.checked_sub(1).map(|p| 100 + p as u64);
    batch_payload(vec![stored_event(&[100 + i as u64], parent, &block(i), BS)])
}

fn empty() -> Bytes {
    batch_payload(Vec::new())
}

#[tokio::test]
async fn a_stream_followed_from_seq_zero_is_complete_and_applies_in_order() {
    let mut h = Harness::new(false);
    h.live(0, empty()).await;
    assert_eq!(h.fraction(&prompt(2)), Some(0.0), "complete: known cold");
    h.live(1, store_block(0)).await;
    h.live(2, store_block(1)).await;
    assert_eq!(h.fraction(&prompt(2)), Some(1.0));
    assert_eq!(h.summary().ranks[0].next_seq, Some(3));
}

#[tokio::test]
async fn a_gap_is_filled_by_replay_in_order() {
    let mut h = Harness::new(true);
    h.live(0, store_block(0)).await;
    h.lost(1, store_block(1));
    h.lost(2, batch_payload(vec![removed_event(&[100])]));
    h.live(3, store_block(0)).await; // block 0 stored again
    assert_eq!(h.replay.requests(), [1]);
    let summary = h.summary();
    assert_eq!(
        (summary.gaps, summary.replays.ok, summary.resets.gap),
        (1, 1, 0)
    );
    assert_eq!(summary.ranks[0].next_seq, Some(4));
    // 1 stored block 1 under 0, 2 removed 0, 3 stored 0 again: both resident.
    assert_eq!(h.fraction(&prompt(2)), Some(1.0));
    assert_eq!(
        summary.events.block_stored.applied, 3,
        "the live 3 is not applied twice"
    );
    h.live(4, batch_payload(vec![removed_event(&[101])])).await;
    assert_eq!(h.fraction(&prompt(2)), Some(0.5));
    assert_eq!(h.summary().gaps, 1);
}

#[tokio::test]
async fn live_copies_of_batches_replay_already_applied_are_skipped() {
    let mut h = Harness::new(true);
    h.live(0, empty()).await;
    h.lost(1, store_block(0));
    // The publisher has sent 2 and 3 by the time it answers the replay.
    h.replay.buffer(2, store_block(1));
    h.replay
        .buffer(3, batch_payload(vec![removed_event(&[101])]));
    h.driver
        .on_live(&live_frames("kv", 2, &store_block(1)))
        .await;
    assert_eq!(h.fraction(&prompt(2)), Some(0.5), "3 already applied");
    h.driver
        .on_live(&live_frames(
            "kv",
            3,
            &batch_payload(vec![removed_event(&[101])]),
        ))
        .await;
    let summary = h.summary();
    assert_eq!(summary.duplicates, 1);
    assert_eq!(summary.resets.restart, 0, "a duplicate is not a restart");
    h.live(4, store_block(1)).await;
    assert_eq!(h.fraction(&prompt(2)), Some(1.0));
}

#[tokio::test]
async fn a_gap_without_replay_clears_and_stays_neutral_until_fresh_blocks() {
    let mut h = Harness::new(false);
    h.live(0, store_block(0)).await;
    h.live(1, store_block(1)).await;
    assert_eq!(h.fraction(&prompt(2)), Some(1.0));
    h.lost(2, batch_payload(vec![removed_event(&[101])]));
    // 3 continues a chain the index no longer holds: nothing to rebuild from.
    h.live(
        3,
        batch_payload(vec![stored_event(&[102], Some(101), &block(2), BS)]),
    )
    .await;
    let summary = h.summary();
    assert_eq!((summary.gaps, summary.resets.gap), (1, 1));
    assert_eq!(summary.blocks_resident, 0);
    assert_eq!(summary.unknown_parent_drops, 1);
    assert_eq!(h.fraction(&prompt(2)), None, "rebuilding");
    // A fresh root chain rebuilds it.
    h.live(4, store_block(0)).await;
    assert_eq!(h.fraction(&prompt(2)), Some(0.5));
}

#[tokio::test]
async fn a_failed_replay_clears() {
    let mut h = Harness::new(true);
    h.live(0, store_block(0)).await;
    h.replay.0.lock().unwrap().broken = true;
    h.lost(1, empty());
    h.live(2, empty()).await;
    let summary = h.summary();
    assert_eq!((summary.replays.failed, summary.resets.gap), (1, 1));
    assert_eq!(h.fraction(&prompt(1)), None);
    assert_eq!(summary.ranks[0].next_seq, Some(3));
}

#[tokio::test]
async fn a_replay_that_starts_too_late_clears_then_applies_what_it_has() {
    let mut h = Harness::new(true);
    h.live(0, store_block(0)).await;
    h.lost(1, batch_payload(vec![removed_event(&[100])]));
    h.lost(2, store_block(0));
    h.live(3, store_block(1)).await;
    // The buffer rolled over: it starts at 2.
    let mut h2 = Harness::new(true);
    h2.live(0, store_block(0)).await;
    h2.replay.buffer(2, store_block(0));
    h2.replay.buffer(3, store_block(1));
    h2.driver
        .on_live(&live_frames("kv", 3, &store_block(1)))
        .await;
    let summary = h2.summary();
    assert_eq!(summary.replays.failed, 1, "it cannot cover seq 1");
    assert_eq!(summary.resets.gap, 1);
    // 2 and 3 were applied after the clear: a clean suffix of the stream.
    assert_eq!(h2.fraction(&prompt(2)), Some(1.0));
    assert_eq!(summary.ranks[0].next_seq, Some(4));
    // The covered case for comparison: 1 removed block 0, 2 stored it again.
    assert_eq!(h.fraction(&prompt(2)), Some(1.0));
    assert_eq!(h.summary().replays.ok, 1);
}

#[tokio::test]
async fn a_seq_going_backwards_is_a_restart_that_clears() {
    let mut h = Harness::new(false);
    h.live(0, store_block(0)).await;
    h.live(1, store_block(1)).await;
    // The engine restarted: seq 0 again, an empty cache.
    h.live(0, empty()).await;
    let summary = h.summary();
    assert_eq!(summary.resets.restart, 1);
    assert_eq!(summary.blocks_resident, 0);
    assert_eq!(
        h.fraction(&prompt(2)),
        Some(0.0),
        "followed from the new process's seq 0: known cold"
    );
    h.live(1, store_block(0)).await;
    assert_eq!(h.fraction(&prompt(2)), Some(0.5));
}

#[tokio::test]
async fn joining_mid_stream_catches_up_from_seq_zero() {
    // The publisher still buffers everything: the rank is complete.
    let mut h = Harness::new(true);
    h.lost(0, store_block(0));
    h.lost(1, store_block(1));
    h.live(2, empty()).await;
    assert_eq!(h.replay.requests(), [0]);
    assert_eq!(h.fraction(&prompt(2)), Some(1.0));
    assert_eq!(h.summary().replays.ok, 1);

    // The buffer no longer reaches seq 0: what it has is applied, and the
    // rank rebuilds.
    let mut h = Harness::new(true);
    h.replay.buffer(
        5,
        batch_payload(vec![stored_event(&[101], Some(100), &block(1), BS)]),
    );
    h.live(6, empty()).await;
    assert_eq!(h.fraction(&prompt(2)), None, "only an orphan chain so far");
    let summary = h.summary();
    assert_eq!(summary.resets.gap, 0, "nothing to clear when joining");
    assert_eq!(
        (summary.replays.ok, summary.replays.failed),
        (1, 0),
        "a buffer that no longer reaches seq 0 is normal when joining"
    );
    h.live(7, store_block(0)).await;
    assert_eq!(h.fraction(&prompt(2)), Some(0.5));

    // Without replay, the same.
    let mut h = Harness::new(false);
    h.live(9, empty()).await;
    assert_eq!(h.fraction(&prompt(1)), None);
    h.live(10, batch_payload(vec![cleared_event()])).await;
    assert_eq!(
        h.fraction(&prompt(1)),
        Some(0.0),
        "a clear makes the cache known"
    );
}

#[tokio::test]
async fn an_unreadable_batch_clears_and_the_stream_goes_on() {
    let mut h = Harness::new(false);
    h.live(0, store_block(0)).await;
    h.live(1, Bytes::from_static(b"\xc1 not msgpack")).await;
    let summary = h.summary();
    assert_eq!(summary.decode_errors, 1);
    assert_eq!(summary.resets.malformed, 1);
    assert_eq!(h.fraction(&prompt(1)), None);
    h.live(2, store_block(0)).await;
    let summary = h.summary();
    assert_eq!(summary.gaps, 0, "the bad batch's seq was consumed");
    assert_eq!(h.fraction(&prompt(1)), Some(1.0));
}

#[tokio::test]
async fn a_message_without_three_frames_is_rejected_and_counted() {
    let mut h = Harness::new(false);
    h.live(0, store_block(0)).await;
    h.driver
        .on_live(&[Bytes::from_static(b"kv"), Bytes::from_static(b"x")])
        .await;
    let summary = h.summary();
    assert_eq!(summary.decode_errors, 1);
    assert_eq!(summary.messages, 2);
    assert_eq!(h.fraction(&prompt(1)), Some(1.0), "nothing else changes");
}
