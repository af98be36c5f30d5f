//! The engine's timing under load: a bounded running batch with a waiting
//! queue, prefill slots, and decode slowed by the batch.
//!
//! A real engine prefills a bounded number of requests at once (vLLM's
//! token budget per step; two slots is a fair model of a busy GPU) and
//! queues the rest in arrival order, and its per-token decode time grows
//! with the number of sequences in the running batch. Without this a fake
//! engine's time to first token never grows with its queue, so a router
//! that piles requests onto one engine is never punished for it.
//!
//! `--max-num-seqs N` (vLLM's flag; 0: unlimited) bounds the sequences in
//! the running batch: a request beyond it waits in the engine's queue, in
//! arrival order, until one finishes, and is reported in
//! `vllm:num_requests_waiting` meanwhile; its first token waits with it.
//! `--prefill-slots N` (0: unlimited, the old behaviour) bounds concurrent
//! prefills; a request waits for a slot in FIFO order (tokio's semaphore is
//! fair) and holds it for its prefill time, `uncached tokens x
//! prefill_us_per_token`. `--decode-slowdown-pct P` makes each token's
//! delay `token_delay x (1 + P/100 x (other decoding sequences))`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

#[derive(Debug)]
pub(crate) struct Scheduler {
    /// Places in the running batch (`--max-num-seqs`).
    seqs: Option<Arc<Semaphore>>,
    prefill_slots: Option<Semaphore>,
    decoding: AtomicU64,
    /// Requests waiting for a place in the batch or a prefill slot.
    waiting: AtomicU64,
    decode_slowdown: f64,
}

/// A request's place in the running batch, held until it is dropped (the
/// answer ended or the client went away).
#[derive(Debug)]
pub(crate) struct Seq {
    _permit: Option<OwnedSemaphorePermit>,
}

impl Scheduler {
    pub(crate) fn new(max_num_seqs: usize, prefill_slots: usize, decode_slowdown: f64) -> Self {
        Scheduler {
            seqs: (max_num_seqs > 0).then(|| Arc::new(Semaphore::new(max_num_seqs))),
            prefill_slots: (prefill_slots > 0).then(|| Semaphore::new(prefill_slots)),
            decoding: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            decode_slowdown: decode_slowdown.max(0.0),
        }
    }

    /// Requests in the engine's queue now (`vllm:num_requests_waiting`).
    pub(crate) fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Waits for a place in the running batch (FIFO: tokio's semaphore is
    /// fair); counted as waiting meanwhile.
    pub(crate) async fn join_batch(&self) -> Seq {
        let Some(seqs) = &self.seqs else {
            return Seq { _permit: None };
        };
        let _queued = Waiting::count(&self.waiting);
        Seq {
            _permit: Arc::clone(seqs).acquire_owned().await.ok(),
        }
    }

    /// Waits for a prefill slot and holds it for `prefill_ms`; returns the
    /// milliseconds spent waiting for the slot (the queue wait).
    pub(crate) async fn prefill(&self, prefill_ms: u64) -> u64 {
        let queued = Instant::now();
        let _slot = match &self.prefill_slots {
            Some(slots) => {
                let _queued = Waiting::count(&self.waiting);
                slots.acquire().await.ok()
            }
            None => None,
        };
        let waited = queued.elapsed().as_millis() as u64;
        if prefill_ms > 0 {
            tokio::time::sleep(Duration::from_millis(prefill_ms)).await;
        }
        waited
    }

    /// Counts one more sequence in the decode batch until the slot drops.
    pub(crate) fn decode(self: &Arc<Self>) -> DecodeSlot {
        self.decoding.fetch_add(1, Ordering::Relaxed);
        DecodeSlot {
            scheduler: Arc::clone(self),
        }
    }

    /// The delay of one token of a decoding sequence: `base_ms` slowed by
    /// the other sequences in the batch.
    pub(crate) fn token_delay(&self, base_ms: u64) -> u64 {
        let others = self.decoding.load(Ordering::Relaxed).saturating_sub(1);
        (base_ms as f64 * (1.0 + self.decode_slowdown * others as f64)).round() as u64
    }
}

/// One request counted as waiting until dropped (also when the wait is
/// cancelled by a client that left).
struct Waiting<'a>(&'a AtomicU64);

impl<'a> Waiting<'a> {
    fn count(waiting: &'a AtomicU64) -> Self {
        waiting.fetch_add(1, Ordering::Relaxed);
        Waiting(waiting)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One sequence in the decode batch.
#[derive(Debug)]
pub(crate) struct DecodeSlot {
    scheduler: Arc<Scheduler>,
}

impl Drop for DecodeSlot {
    fn drop(&mut self) {
        self.scheduler.decoding.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn prefills_queue_for_their_slots_in_order() {
        let scheduler = Arc::new(Scheduler::new(0, 2, 0.0));
        let waits: Vec<_> = (0..4)
            .map(|_| {
                let scheduler = Arc::clone(&scheduler);
                tokio::spawn(async move { scheduler.prefill(100).await })
            })
            .collect();
        let mut waited = Vec::new();
        for wait in waits {
            waited.push(wait.await.unwrap());
        }
        assert_eq!(
            waited,
            [0, 0, 100, 100],
            "two slots: the last two wait one prefill"
        );
        let unlimited = Scheduler::new(0, 0, 0.0);
        assert_eq!(unlimited.prefill(0).await, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn past_max_num_seqs_requests_wait_and_are_counted() {
        let scheduler = Arc::new(Scheduler::new(2, 0, 0.0));
        let first = scheduler.join_batch().await;
        let _second = scheduler.join_batch().await;
        assert_eq!(scheduler.waiting(), 0);
        let third = {
            let scheduler = Arc::clone(&scheduler);
            tokio::spawn(async move { scheduler.join_batch().await })
        };
        let fourth = {
            let scheduler = Arc::clone(&scheduler);
            tokio::spawn(async move { scheduler.join_batch().await })
        };
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(scheduler.waiting(), 2, "two past the batch wait");
        fourth.abort();
        let _ = fourth.await;
        assert_eq!(scheduler.waiting(), 1, "a cancelled wait leaves the queue");
        drop(first);
        let _third = third.await.unwrap();
        assert_eq!(scheduler.waiting(), 0);
    }

    #[test]
    fn decode_slows_with_the_batch() {
        let scheduler = Arc::new(Scheduler::new(0, 0, 0.5));
        let first = scheduler.decode();
        assert_eq!(scheduler.token_delay(10), 10, "alone");
        let second = scheduler.decode();
        let _third = scheduler.decode();
        assert_eq!(scheduler.token_delay(10), 20, "two others: 1 + 0.5 x 2");
        drop((first, second));
        assert_eq!(scheduler.token_delay(10), 10, "alone again");
    }
}
