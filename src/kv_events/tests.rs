//! In-process integration: the "kv events" service subscribing to a real
//! ZeroMQ publisher (PUB + ROUTER on loopback, OS-chosen ports) that sends
//! hand-built batches. Every wait is bounded.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::testing::{
    cleared_event, eventually, removed_event, stored_event, FakePublisher, ManualClock, ReplayForm,
};
use super::*;

const BS: usize = 4;
const TOPIC: &str = "kv@test";

/// The service under test, its sources (changed by the test) and a way to
/// stop it.
struct Gateway {
    registry: Arc<KvIndexRegistry>,
    sources: Arc<Mutex<(u64, Vec<KvSource>)>>,
    /// Counts the "snapshots" installed, as `GatewayState` does.
    installs: watch::Sender<u64>,
    shutdown: watch::Sender<bool>,
    service: tokio::task::JoinHandle<()>,
    clock: ManualClock,
}

impl Gateway {
    fn start(sources: Vec<KvSource>) -> Gateway {
        let clock = ManualClock::default();
        clock.set(1_000);
        let registry = Arc::new(KvIndexRegistry::with_options(KvIndexOptions {
            max_blocks: 10_000,
            stale_after: Duration::from_secs(30),
            clock: clock.clock(),
        }));
        let shared = Arc::new(Mutex::new((1, sources)));
        let read = Arc::clone(&shared);
        let (installs, changes) = watch::channel(0);
        let service = KvEventService::with_sources(
            Arc::clone(&registry),
            Box::new(move || read.lock().unwrap().clone()),
            changes,
        )
        .reconcile_every(Duration::from_millis(20));
        let (shutdown, watch) = watch::channel(false);
        let service = tokio::spawn(async move { service.run(watch).await });
        Gateway {
            registry,
            sources: shared,
            installs,
            shutdown,
            service,
            clock,
        }
    }

    fn set_sources(&self, sources: Vec<KvSource>) {
        let mut shared = self.sources.lock().unwrap();
        shared.0 += 1;
        shared.1 = sources;
        drop(shared);
        self.installs.send_modify(|count| *count += 1);
    }

    fn index(&self) -> Arc<KvIndex> {
        self.registry.index("gpu-a")
    }

    async fn stop(self) {
        self.shutdown.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), self.service)
            .await
            .expect("the service stops on shutdown")
            .unwrap();
    }
}

fn source(publisher: &FakePublisher, replay: bool) -> KvSource {
    KvSource {
        provider: "gpu-a".into(),
        topic: "kv@".into(),
        block_size: BS,
        ranks: vec![RankEndpoints {
            live: publisher.endpoint.clone(),
            replay: replay.then(|| publisher.replay_endpoint.clone()),
        }],
    }
}

/// Tokens of block `i` of the test prompt.
fn block(i: usize) -> Vec<u32> {
    (0..BS as u32).map(|t| i as u32 * 100 + t).collect()
}

fn prompt(blocks: usize) -> Vec<u32> {
    (0..blocks).flat_map(block).collect()
}

/// `BlockStored` of block `i` (engine id 1000 + i) under block `i - 1`.
fn store(i: usize) -> rmpv::Value {
    let parent = i.checked_sub(1).map(|p| 1000 + p as u64);
    stored_event(&[1000 + i as u64], parent, &block(i), BS)
}

/// Whether the index's (current) subscriber has taken a batch in.
fn following(index: &KvIndex) -> bool {
    index
        .summary()
        .ranks
        .first()
        .is_some_and(|rank| rank.next_seq.is_some())
}

/// Starts a publisher and a gateway subscribed to it, and waits until the
/// subscription carries batches.
async fn connected(replay: bool) -> (FakePublisher, Gateway) {
    let mut publisher = FakePublisher::start(TOPIC).await;
    let gateway = Gateway::start(vec![source(&publisher, replay)]);
    let index = gateway.index();
    publisher.publish_until(|| following(&index)).await;
    (publisher, gateway)
}

#[tokio::test]
async fn stored_blocks_become_resident_then_removal_and_clear_take_them_away() {
    let (mut publisher, gateway) = connected(true).await;
    let index = gateway.index();
    publisher.publish(vec![store(0), store(1)]).await;
    publisher.publish(vec![store(2)]).await;
    eventually("three blocks", || index.summary().blocks_resident == 3).await;
    assert_eq!(index.resident_leading_fraction(&prompt(4)), Some(0.75));
    let summary = index.summary();
    assert!(summary.usable && summary.ranks[0].connected);
    assert_eq!(summary.events.block_stored.applied, 3);

    publisher.publish(vec![removed_event(&[1001])]).await;
    eventually("the removal", || index.summary().blocks_resident == 2).await;
    assert_eq!(index.resident_leading_fraction(&prompt(4)), Some(0.25));

    publisher.publish(vec![cleared_event()]).await;
    eventually("the clear", || index.summary().blocks_resident == 0).await;
    assert_eq!(index.resident_leading_fraction(&prompt(4)), Some(0.0));
    assert_eq!(index.summary().gaps, 0);
    gateway.stop().await;
}

async fn gap_is_filled_by_replay(form: ReplayForm) {
    let (mut publisher, gateway) = connected(true).await;
    publisher.set_replay_form(form);
    let index = gateway.index();
    publisher.publish(vec![store(0)]).await;
    eventually("block 0", || index.summary().blocks_resident == 1).await;
    // Two batches never reach the subscriber.
    publisher.lose(vec![store(1)]);
    publisher.lose(vec![store(2)]);
    let requests = publisher.replay_requests();
    // (Joining may have replayed from seq 0 already.)
    let replays = index.summary().replays.ok;
    publisher.publish(vec![store(3)]).await;
    eventually("the replay", || index.summary().blocks_resident == 4).await;
    let summary = index.summary();
    assert_eq!(summary.gaps, 1);
    assert_eq!(summary.replays.ok, replays + 1);
    assert_eq!(summary.resets.gap, 0);
    assert_eq!(publisher.replay_requests(), requests + 1);
    assert_eq!(index.resident_leading_fraction(&prompt(4)), Some(1.0));
    gateway.stop().await;
}

#[tokio::test]
async fn a_gap_is_filled_by_replay_in_the_older_reply_form() {
    gap_is_filled_by_replay(ReplayForm::Older).await;
}

#[tokio::test]
async fn a_gap_is_filled_by_replay_in_the_current_reply_form() {
    gap_is_filled_by_replay(ReplayForm::Current).await;
}

#[tokio::test]
async fn a_gap_without_replay_clears_and_goes_neutral() {
    let (mut publisher, gateway) = connected(false).await;
    let index = gateway.index();
    publisher.publish(vec![store(0), store(1)]).await;
    eventually("two blocks", || index.summary().blocks_resident == 2).await;
    assert_eq!(index.resident_leading_fraction(&prompt(2)), Some(1.0));
    publisher.lose(vec![removed_event(&[1001])]);
    publisher.publish(vec![store(2)]).await; // under a block now forgotten
    eventually("the reset", || index.summary().resets.gap == 1).await;
    let summary = index.summary();
    assert_eq!(summary.blocks_resident, 0);
    assert!(summary.ranks[0].rebuilding && !summary.usable);
    assert_eq!(index.resident_leading_fraction(&prompt(2)), None);
    // Fresh events rebuild it.
    publisher.publish(vec![store(0)]).await;
    eventually("the rebuild", || index.summary().usable).await;
    assert_eq!(index.resident_leading_fraction(&prompt(2)), Some(0.5));
    gateway.stop().await;
}

#[tokio::test]
async fn a_gap_the_replay_buffer_no_longer_covers_clears() {
    let (mut publisher, gateway) = connected(true).await;
    let index = gateway.index();
    publisher.publish(vec![store(0), store(1)]).await;
    eventually("two blocks", || index.summary().blocks_resident == 2).await;
    let lost = publisher.lose(vec![removed_event(&[1000])]);
    publisher.forget_before(lost + 1);
    publisher.publish(vec![store(2)]).await;
    eventually("the reset", || index.summary().resets.gap == 1).await;
    let summary = index.summary();
    assert_eq!(summary.replays.failed, 1);
    assert_eq!(index.resident_leading_fraction(&prompt(2)), None);
    gateway.stop().await;
}

#[tokio::test]
async fn a_seq_going_backwards_clears() {
    let (mut publisher, gateway) = connected(false).await;
    let index = gateway.index();
    publisher.publish(vec![store(0), store(1)]).await;
    eventually("two blocks", || index.summary().blocks_resident == 2).await;
    publisher.restart();
    publisher.publish(vec![]).await; // seq 0 of the new process
    eventually("the restart", || index.summary().resets.restart == 1).await;
    let summary = index.summary();
    assert_eq!(summary.blocks_resident, 0);
    assert_eq!(summary.ranks[0].next_seq, Some(1));
    assert_eq!(
        index.resident_leading_fraction(&prompt(2)),
        Some(0.0),
        "followed from seq 0: a known, empty cache"
    );
    gateway.stop().await;
}

#[tokio::test]
async fn a_silent_stream_goes_stale_and_a_message_makes_it_fresh() {
    let (mut publisher, gateway) = connected(true).await;
    let index = gateway.index();
    publisher.publish(vec![store(0)]).await;
    eventually("block 0", || index.summary().blocks_resident == 1).await;
    assert_eq!(index.resident_leading_fraction(&prompt(1)), Some(1.0));
    gateway.clock.advance(30_001);
    assert_eq!(index.resident_leading_fraction(&prompt(1)), None);
    assert!(index.summary().ranks[0].stale);
    let before = index.summary().messages;
    publisher.publish(vec![]).await;
    eventually("a message", || index.summary().messages > before).await;
    assert_eq!(index.resident_leading_fraction(&prompt(1)), Some(1.0));
    gateway.stop().await;
}

#[tokio::test]
async fn the_service_follows_source_changes_and_stops_on_shutdown() {
    let (mut publisher, gateway) = connected(false).await;
    let index = gateway.index();
    publisher.publish(vec![store(0)]).await;
    eventually("block 0", || index.summary().blocks_resident == 1).await;

    // Another engine for the same provider: the index starts over on it.
    let mut other = FakePublisher::start(TOPIC).await;
    gateway.set_sources(vec![source(&other, false)]);
    eventually("the reconfiguration", || {
        index.summary().blocks_resident == 0
    })
    .await;
    other.publish_until(|| following(&index)).await;
    other.publish(vec![store(0), store(1)]).await;
    eventually("two blocks", || index.summary().blocks_resident == 2).await;
    // The old engine is no longer followed: its clear never arrives, while
    // a batch the new one sends after it does.
    let before = index.summary();
    publisher.publish(vec![cleared_event()]).await;
    other.publish(vec![]).await;
    eventually("the new engine's batch", || {
        index.summary().messages > before.messages
    })
    .await;
    let after = index.summary();
    assert_eq!(
        after.events.all_blocks_cleared,
        before.events.all_blocks_cleared
    );
    assert_eq!(after.blocks_resident, 2);
    assert!(
        Arc::ptr_eq(&index, &gateway.index()),
        "one index per provider"
    );

    // The provider loses kv_events: its index answers None.
    gateway.set_sources(Vec::new());
    eventually("the stop", || !index.summary().configured).await;
    assert_eq!(index.resident_leading_fraction(&prompt(2)), None);
    assert_eq!(gateway.registry.summaries().len(), 1);
    gateway.stop().await;
}

#[tokio::test]
async fn an_absent_publisher_is_retried_and_picked_up_when_it_appears() {
    // Bind a publisher to learn a free port, then drop it: nothing listens.
    let endpoint = {
        let publisher = FakePublisher::start(TOPIC).await;
        publisher.endpoint.clone()
    };
    let gateway = Gateway::start(vec![KvSource {
        provider: "gpu-a".into(),
        topic: String::new(),
        block_size: BS,
        ranks: vec![RankEndpoints {
            live: endpoint.clone(),
            replay: None,
        }],
    }]);
    let index = gateway.index();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let summary = index.summary();
    assert!(summary.configured && !summary.usable && !summary.ranks[0].connected);
    assert_eq!(index.resident_leading_fraction(&prompt(1)), None);
    // The engine comes up on that endpoint.
    let mut publisher = FakePublisher::start_at(TOPIC, &endpoint).await;
    publisher.publish_until(|| following(&index)).await;
    publisher.publish(vec![store(0)]).await;
    eventually("block 0", || index.summary().blocks_resident == 1).await;
    assert_eq!(index.resident_leading_fraction(&prompt(1)), Some(1.0));
    assert!(index.summary().ranks[0].connected);
    gateway.stop().await;
}

#[tokio::test]
async fn a_publisher_that_goes_away_is_neutral_at_once_not_after_the_staleness_window() {
    let (mut publisher, gateway) = connected(false).await;
    let index = gateway.index();
    publisher.publish(vec![store(0)]).await;
    eventually("block 0", || index.summary().blocks_resident == 1).await;
    assert_eq!(index.resident_leading_fraction(&prompt(1)), Some(1.0));
    // The engine goes away. The clock does not move: staleness cannot be
    // what turns the rank neutral.
    drop(publisher);
    eventually("the disconnect", || !index.summary().ranks[0].connected).await;
    assert_eq!(index.resident_leading_fraction(&prompt(1)), None);
    assert!(!index.summary().usable);
    assert!(!index.summary().ranks[0].stale, "known broken, not stale");
    gateway.stop().await;
}
