//! What engine-reported load and flow control cost a request: the combined
//! load of a route's targets (with and without a fresh engine reading), a
//! saturation check, and a flow-control queue's enqueue and dispatch, and a
//! cancellation, at 10,000 requests waiting.

use std::collections::VecDeque;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use rolter::flow_control::{Queued, RouteQueue};
use rolter::tracker::{LoadTracker, Reading, SaturationPolicy, TargetId, TargetStats};

const TARGETS: usize = 16;
const QUEUED: usize = 10_000;
const TENANTS: usize = 100;

/// A route's targets; with `reading`, each engine's metrics are read and
/// fresh at clock 1,000.
fn targets(reading: bool) -> (Arc<LoadTracker>, Vec<Arc<TargetStats>>) {
    let tracker = Arc::new(LoadTracker::new());
    let stats: Vec<_> = (0..TARGETS)
        .map(|i| tracker.stats(&TargetId::new(format!("gpu-{i}"), "m")))
        .collect();
    if reading {
        for (i, target) in stats.iter().enumerate() {
            target.engine().set_stale_after(Some(3_000));
            target.engine().record_poll(true);
            target.reported().store(
                Reading {
                    running: i as u64,
                    waiting: (i % 3) as u64,
                    kv_usage: Some(0.5),
                },
                target.engine().dispatched(),
                1_000,
            );
        }
    }
    (tracker, stats)
}

fn combined_load(c: &mut Criterion) {
    let mut group = c.benchmark_group("combined_load");
    for (name, reading) in [("local_only", false), ("engine_reading", true)] {
        let (_tracker, stats) = targets(reading);
        group.bench_function(format!("{TARGETS}_targets/{name}"), |b| {
            b.iter(|| {
                let loads: smallvec::SmallVec<[u64; 16]> = stats
                    .iter()
                    .map(|t| t.combined_load(black_box(1_500)))
                    .collect();
                black_box(loads)
            })
        });
        let policy = SaturationPolicy::default();
        group.bench_function(format!("{TARGETS}_targets/{name}/saturation"), |b| {
            b.iter(|| {
                stats
                    .iter()
                    .filter(|t| t.saturation(black_box(1_500), &policy, Some(64)).is_some())
                    .count()
            })
        });
    }
    group.finish();
}

/// A queue with [`QUEUED`] requests over [`TENANTS`] keys, its head granted.
fn full_queue() -> (Arc<RouteQueue>, VecDeque<Queued>) {
    let queue = Arc::new(RouteQueue::new(Arc::default()));
    let waiting = (0..QUEUED)
        .map(|i| {
            queue
                .enqueue(0, &format!("key-{}", i % TENANTS), u64::MAX)
                .expect("room")
        })
        .collect();
    (queue, waiting)
}

fn queue(c: &mut Criterion) {
    let mut group = c.benchmark_group("flow_control");
    let (queue, mut waiting) = full_queue();
    let mut next = QUEUED;
    // Steady state at 10,000 waiting: one arrives, the head dispatches and
    // grants the next.
    group.bench_function("enqueue_and_dispatch_at_10000_queued", |b| {
        b.iter(|| {
            let arrival = queue
                .enqueue(0, &format!("key-{}", next % TENANTS), u64::MAX)
                .expect("room");
            next += 1;
            waiting.push_back(arrival);
            if let Some(head) = waiting.pop_front() {
                head.dispatched();
            }
        })
    });
    let (queue, waiting) = full_queue();
    // Clients anywhere in the queue go away, each replaced by a newcomer of
    // its tenant (slots, so that the benchmark's own bookkeeping is O(1)).
    let mut slots: Vec<Option<Queued>> = waiting.into_iter().map(Some).collect();
    let mut at = 0;
    group.bench_function("cancel_at_10000_queued", |b| {
        b.iter(|| {
            at = (at + 37) % QUEUED;
            drop(slots[at].take());
            let tenant = format!("key-{}", at % TENANTS);
            slots[at] = Some(queue.enqueue(0, &tenant, u64::MAX).expect("room"));
        })
    });
    group.bench_function("is_busy", |b| b.iter(|| black_box(queue.is_busy())));
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = combined_load, queue
}
criterion_main!(benches);
