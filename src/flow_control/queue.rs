//! One route's waiting requests, in dispatch order.
//!
//! Order: the highest priority band first; within a band, tenants (API
//! keys) take turns, one request each; within a tenant, arrival order.
//! Dispatch is one request at a time: the queue grants its head the right
//! to pick a target, and grants the next once that one dispatched (or
//! left). A granted request that still finds every target saturated goes
//! back to its place and the queue waits for the next kick (capacity freed,
//! a new arrival), so a burst of freed capacity drains the queue as fast as
//! picks can be made while a saturated fleet costs one re-check per event.
//!
//! The lock is held for map and deque operations only, never across an
//! await; a waiter's place is found by its ticket (arrival order is ticket
//! order) in its tenant's queue.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

use crate::tracker::CapacitySignal;

/// The queue holds `max_queued` requests already.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Full;

/// One route's queue; see the module docs.
#[derive(Debug)]
pub struct RouteQueue {
    state: Mutex<State>,
    /// Requests waiting (not the granted one).
    len: AtomicU64,
    signal: Arc<CapacitySignal>,
}

#[derive(Debug, Default)]
struct State {
    bands: BTreeMap<Reverse<i32>, Band>,
    next_ticket: u64,
    /// A granted request has not dispatched or gone back yet.
    granted: bool,
    /// A kick came while the grant was out.
    kicked: bool,
}

#[derive(Debug, Default)]
struct Band {
    /// Tenants with waiting requests; the front one is served next.
    turns: VecDeque<Arc<str>>,
    tenants: HashMap<Arc<str>, VecDeque<Waiter>>,
}

#[derive(Debug)]
struct Waiter {
    ticket: u64,
    grant: oneshot::Sender<()>,
}

impl State {
    /// Grants the next waiter, if anyone waits.
    fn grant_next(&mut self, len: &AtomicU64) {
        while let Some(mut entry) = self.bands.first_entry() {
            let band = entry.get_mut();
            let Some(tenant) = band.turns.pop_front() else {
                entry.remove();
                continue;
            };
            let Some(queue) = band.tenants.get_mut(&tenant) else {
                continue;
            };
            let waiter = queue.pop_front();
            if queue.is_empty() {
                band.tenants.remove(&tenant);
            } else {
                band.turns.push_back(tenant);
            }
            if band.tenants.is_empty() {
                entry.remove();
            }
            let Some(waiter) = waiter else {
                continue;
            };
            len.fetch_sub(1, Ordering::Relaxed);
            // A waiter removes itself before its receiver goes, under this
            // lock, so the send reaches it.
            if waiter.grant.send(()).is_ok() {
                self.granted = true;
                return;
            }
        }
        self.granted = false;
    }

    /// Puts `waiter` in its place. `retake_turn`: it had its turn and
    /// found no capacity, so its tenant is served next again rather than
    /// losing the turn to whoever takes the capacity that frees next.
    fn insert(&mut self, priority: i32, tenant: &Arc<str>, waiter: Waiter, retake_turn: bool) {
        let band = self.bands.entry(Reverse(priority)).or_default();
        let queue = band.tenants.entry(Arc::clone(tenant)).or_insert_with(|| {
            if !retake_turn {
                band.turns.push_back(Arc::clone(tenant));
            }
            VecDeque::new()
        });
        let at = queue.partition_point(|w| w.ticket < waiter.ticket);
        queue.insert(at, waiter);
        if retake_turn {
            band.turns.retain(|t| t != tenant);
            band.turns.push_front(Arc::clone(tenant));
        }
    }

    /// Takes the waiter `ticket` out of the queue; false when it is not in
    /// it (it was granted).
    fn remove(&mut self, priority: i32, tenant: &Arc<str>, ticket: u64) -> bool {
        let Some(band) = self.bands.get_mut(&Reverse(priority)) else {
            return false;
        };
        let Some(queue) = band.tenants.get_mut(tenant) else {
            return false;
        };
        let at = queue.partition_point(|w| w.ticket < ticket);
        if queue.get(at).is_none_or(|w| w.ticket != ticket) {
            return false;
        }
        queue.remove(at);
        if queue.is_empty() {
            band.tenants.remove(tenant);
            band.turns.retain(|t| t != tenant);
            if band.tenants.is_empty() {
                self.bands.remove(&Reverse(priority));
            }
        }
        true
    }
}

impl RouteQueue {
    pub fn new(signal: Arc<CapacitySignal>) -> Self {
        RouteQueue {
            state: Mutex::new(State::default()),
            len: AtomicU64::new(0),
            signal,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Requests waiting.
    pub fn len(&self) -> u64 {
        self.len.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether requests wait or one is being dispatched: a new arrival
    /// then queues behind them rather than overtaking.
    pub fn is_busy(&self) -> bool {
        !self.is_empty() || self.lock().granted
    }

    /// Waiting requests per priority band, highest first.
    pub fn depths(&self) -> Vec<(i32, u64)> {
        let state = self.lock();
        state
            .bands
            .iter()
            .map(|(Reverse(priority), band)| {
                (
                    *priority,
                    band.tenants.values().map(|q| q.len() as u64).sum(),
                )
            })
            .collect()
    }

    /// Queues a request of `tenant` at `priority` unless `max_queued`
    /// wait already; the queue is kicked, so a request that arrived as
    /// capacity freed is not left waiting for the next event.
    pub fn enqueue(
        self: &Arc<Self>,
        priority: i32,
        tenant: &str,
        max_queued: u64,
    ) -> Result<Queued, Full> {
        let (grant, granted) = oneshot::channel();
        let tenant: Arc<str> = Arc::from(tenant);
        let ticket = {
            let mut state = self.lock();
            if self.len() >= max_queued {
                return Err(Full);
            }
            let ticket = state.next_ticket;
            state.next_ticket += 1;
            state.insert(priority, &tenant, Waiter { ticket, grant }, false);
            self.len.fetch_add(1, Ordering::Relaxed);
            ticket
        };
        self.signal.start_waiting();
        let queued = Queued {
            queue: Arc::clone(self),
            priority,
            tenant,
            ticket,
            phase: Phase::Waiting(granted),
        };
        self.kick();
        Ok(queued)
    }

    /// Capacity may be free: grants the head unless a grant is out (then
    /// the holder passes it on when it is done).
    pub fn kick(&self) {
        let mut state = self.lock();
        if state.granted {
            state.kicked = true;
        } else {
            state.grant_next(&self.len);
        }
    }
}

#[derive(Debug)]
enum Phase {
    Waiting(oneshot::Receiver<()>),
    Granted,
    Done,
}

/// A request's place in a [`RouteQueue`]; dropping it leaves the queue
/// (and passes a grant it holds on).
#[derive(Debug)]
pub struct Queued {
    queue: Arc<RouteQueue>,
    priority: i32,
    tenant: Arc<str>,
    ticket: u64,
    phase: Phase,
}

impl Queued {
    /// Resolves when it is this request's turn to pick a target.
    pub async fn turn(&mut self) {
        if let Phase::Waiting(granted) = &mut self.phase {
            // The sender is dropped only after a successful send, or with
            // the queue, which this holds: an error cannot happen, and is
            // read as a turn.
            let _ = granted.await;
            self.phase = Phase::Granted;
        }
    }

    /// The turn ended with a dispatch: the next request gets its turn.
    pub fn dispatched(mut self) {
        self.release();
    }

    /// The turn found no capacity: back to the same place, until the next
    /// kick.
    pub fn requeue(&mut self) {
        if !matches!(self.phase, Phase::Granted) {
            return;
        }
        let (grant, granted) = oneshot::channel();
        let mut state = self.queue.lock();
        state.insert(
            self.priority,
            &self.tenant,
            Waiter {
                ticket: self.ticket,
                grant,
            },
            true,
        );
        self.queue.len.fetch_add(1, Ordering::Relaxed);
        self.phase = Phase::Waiting(granted);
        state.granted = false;
        if std::mem::take(&mut state.kicked) {
            state.grant_next(&self.queue.len);
        }
    }

    /// Leaves the queue, passing on a grant this request holds or was
    /// just sent.
    fn release(&mut self) {
        let phase = std::mem::replace(&mut self.phase, Phase::Done);
        let mut state = self.queue.lock();
        let holds_grant = match phase {
            Phase::Done => return,
            Phase::Granted => true,
            Phase::Waiting(mut granted) => {
                if state.remove(self.priority, &self.tenant, self.ticket) {
                    self.queue.len.fetch_sub(1, Ordering::Relaxed);
                    false
                } else {
                    // Popped: the grant was sent under this lock, before.
                    granted.close();
                    granted.try_recv().is_ok()
                }
            }
        };
        self.queue.signal.stop_waiting();
        if holds_grant {
            state.kicked = false;
            state.grant_next(&self.queue.len);
        }
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        self.release();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn queue() -> Arc<RouteQueue> {
        Arc::new(RouteQueue::new(Arc::default()))
    }

    /// Whether `queued` has its turn, without waiting.
    async fn has_turn(queued: &mut Queued) -> bool {
        tokio::time::timeout(Duration::from_millis(5), queued.turn())
            .await
            .is_ok()
    }

    /// Dispatches requests one after another and returns their labels in
    /// dispatch order.
    async fn drain(mut waiting: Vec<(String, Queued)>) -> Vec<String> {
        let mut order = Vec::new();
        for _ in 0..waiting.len() * 2 {
            if waiting.is_empty() {
                break;
            }
            let mut turn = None;
            for (i, (_, queued)) in waiting.iter_mut().enumerate() {
                if has_turn(queued).await {
                    turn = Some(i);
                    break;
                }
            }
            let (label, queued) = waiting.remove(turn.expect("someone has the turn"));
            order.push(label);
            queued.dispatched();
        }
        order
    }

    #[tokio::test]
    async fn the_first_arrival_gets_its_turn_at_once_and_the_next_waits() {
        let q = queue();
        let mut first = q.enqueue(0, "a", 10).unwrap();
        let mut second = q.enqueue(0, "a", 10).unwrap();
        assert!(has_turn(&mut first).await);
        assert!(!has_turn(&mut second).await, "one turn at a time");
        assert!(q.is_busy());
        first.dispatched();
        assert!(has_turn(&mut second).await);
        second.dispatched();
        assert!(!q.is_busy());
    }

    #[tokio::test]
    async fn higher_bands_go_first_then_tenants_take_turns_then_arrival_order() {
        let q = queue();
        // Held granted so that the rest queue up behind it.
        let mut gate = q.enqueue(0, "gate", 100).unwrap();
        gate.turn().await;
        let mut waiting = Vec::new();
        for i in 0..3 {
            waiting.push((format!("a{i}"), q.enqueue(0, "a", 100).unwrap()));
        }
        for i in 0..2 {
            waiting.push((format!("b{i}"), q.enqueue(0, "b", 100).unwrap()));
        }
        waiting.push(("urgent".into(), q.enqueue(1, "c", 100).unwrap()));
        waiting.push(("sheddable".into(), q.enqueue(-1, "a", 100).unwrap()));
        assert_eq!(q.depths(), [(1, 1), (0, 5), (-1, 1)]);
        gate.dispatched();
        assert_eq!(
            drain(waiting).await,
            ["urgent", "a0", "b0", "a1", "b1", "a2", "sheddable"]
        );
    }

    #[tokio::test]
    async fn a_full_queue_refuses_and_a_request_that_leaves_frees_its_place() {
        let q = queue();
        let mut gate = q.enqueue(0, "a", 2).unwrap();
        gate.turn().await;
        let first = q.enqueue(0, "a", 2).unwrap();
        let _second = q.enqueue(0, "a", 2).unwrap();
        assert_eq!(q.enqueue(0, "b", 2).err(), Some(Full));
        drop(first);
        assert_eq!(q.len(), 1);
        assert!(q.enqueue(0, "b", 2).is_ok());
    }

    #[tokio::test]
    async fn a_cancelled_waiter_is_skipped_and_a_dropped_grant_is_passed_on() {
        let q = queue();
        let mut gate = q.enqueue(0, "a", 10).unwrap();
        gate.turn().await;
        let gone = q.enqueue(0, "a", 10).unwrap();
        let mut next = q.enqueue(0, "a", 10).unwrap();
        drop(gone);
        drop(gate);
        assert!(
            has_turn(&mut next).await,
            "the grant went past the one that left"
        );
        assert_eq!(q.len(), 0);
    }

    #[tokio::test]
    async fn a_requeued_turn_keeps_its_place_and_waits_for_a_kick() {
        let q = queue();
        let mut first = q.enqueue(0, "a", 10).unwrap();
        first.turn().await;
        first.requeue();
        assert!(!has_turn(&mut first).await, "no kick: nobody's turn");
        // An arrival kicks: the head re-checks, and it is still the first.
        let mut second = q.enqueue(0, "a", 10).unwrap();
        assert!(has_turn(&mut first).await, "its place was first");
        assert!(!has_turn(&mut second).await);
        first.requeue();
        assert!(!has_turn(&mut second).await, "no kick since: nobody's turn");
        q.kick();
        assert!(has_turn(&mut first).await);
        first.dispatched();
        assert!(has_turn(&mut second).await, "a dispatch passes the turn on");
    }

    #[tokio::test]
    async fn a_tenant_whose_turn_found_no_capacity_keeps_its_turn() {
        let q = queue();
        let mut gate = q.enqueue(0, "gate", 10).unwrap();
        gate.turn().await;
        let mut a1 = q.enqueue(0, "a", 10).unwrap();
        let _a2 = q.enqueue(0, "a", 10).unwrap();
        let mut b1 = q.enqueue(0, "b", 10).unwrap();
        let _b2 = q.enqueue(0, "b", 10).unwrap();
        gate.dispatched();
        assert!(has_turn(&mut a1).await);
        a1.dispatched();
        // B's turn, but the capacity is gone: back, keeping the turn.
        assert!(has_turn(&mut b1).await);
        b1.requeue();
        q.kick();
        assert!(has_turn(&mut b1).await, "B again, not A's second");
    }

    #[tokio::test]
    async fn a_kick_while_the_turn_is_out_grants_again_after_a_requeue() {
        let q = queue();
        let mut first = q.enqueue(0, "a", 10).unwrap();
        first.turn().await;
        q.kick();
        first.requeue();
        assert!(has_turn(&mut first).await, "capacity freed meanwhile");
    }

    #[tokio::test]
    async fn ten_thousand_waiters_drain_in_order_and_leave_nothing_behind() {
        let q = queue();
        let mut gate = q.enqueue(0, "gate", 20_000).unwrap();
        gate.turn().await;
        let mut waiting: VecDeque<Queued> = (0..10_000)
            .map(|i| q.enqueue(0, &format!("t{}", i % 10), 20_000).unwrap())
            .collect();
        assert_eq!(q.len(), 10_000);
        gate.dispatched();
        let mut dispatched = 0;
        while let Some(mut next) = waiting.pop_front() {
            // Tenants take turns and arrival order is kept: the front of
            // the arrival order is always the next turn here.
            assert!(has_turn(&mut next).await, "waiter {dispatched}");
            next.dispatched();
            dispatched += 1;
        }
        assert_eq!(dispatched, 10_000);
        assert!(!q.is_busy());
        assert!(q.lock().bands.is_empty());
        assert_eq!(q.signal.waiters(), 0);
    }
}
