//! Flow control: while every eligible target of a route is saturated
//! (`tracker/engine.rs`), a request waits in the gateway instead of joining
//! an engine's queue, where nothing could reorder it.
//!
//! With `[flow_control] enabled`, `upstream_peer` queues a request when its
//! pick finds only saturated targets, or when others of its route already
//! wait (a newcomer does not overtake them). Each route has one
//! [`RouteQueue`] (`flow_control/queue.rs`: priority bands, then tenants in
//! turn, then arrival order), shared across reloads by route label. A
//! waiting request is dispatched when capacity frees — one of the route's
//! requests ends, an engine reading changes, or the [`Dispatcher`]'s tick
//! (for what frees without an event: parking ends, a breaker half-opens) —
//! and picks its target then, so affinity reads the freshest state.
//!
//! A request leaves the queue with 429 and `Retry-After` when the queue is
//! full (`max_queued`) or its wait ran out (`max_wait_secs`; a quarter of
//! it for a negative priority, which is sheddable); a client that
//! disconnects leaves at once. Each outcome is counted
//! (`rolter_flow_control_total`), each wait timed
//! (`rolter_flow_control_wait_seconds`).

mod queue;

pub use queue::{Full, Queued, RouteQueue};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

use crate::tracker::CapacitySignal;

/// How a request left flow control, as a fixed label value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It waited and was dispatched.
    Dispatched,
    /// The route's queue was full.
    Full,
    /// Its wait ran out.
    Expired,
    /// The client went away while it waited.
    Cancelled,
}

impl Outcome {
    pub const ALL: [Outcome; 4] = [
        Outcome::Dispatched,
        Outcome::Full,
        Outcome::Expired,
        Outcome::Cancelled,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Outcome::Dispatched => "dispatched",
            Outcome::Full => "queue_full",
            Outcome::Expired => "expired",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// The longest a request of `priority` waits under `max_wait`.
pub fn max_wait_for(priority: i32, max_wait: Duration) -> Duration {
    if priority < 0 {
        max_wait / 4
    } else {
        max_wait
    }
}

/// Every route's queue, by route label; outlives snapshots.
#[derive(Debug)]
pub struct FlowControl {
    // Locked when a snapshot builds a route and by the dispatcher's kick,
    // never per request.
    queues: Mutex<HashMap<String, Arc<RouteQueue>>>,
    signal: Arc<CapacitySignal>,
}

impl FlowControl {
    pub fn new(signal: Arc<CapacitySignal>) -> Self {
        FlowControl {
            queues: Mutex::new(HashMap::new()),
            signal,
        }
    }

    /// The queue of the route labelled `route`, created empty.
    pub fn queue(&self, route: &str) -> Arc<RouteQueue> {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(queue) = queues.get(route) {
            return Arc::clone(queue);
        }
        let queue = Arc::new(RouteQueue::new(Arc::clone(&self.signal)));
        queues.insert(route.to_owned(), Arc::clone(&queue));
        queue
    }

    /// Gives the head of every non-empty queue its turn; drops queues no
    /// route holds any more.
    pub fn kick_all(&self) {
        let busy: Vec<Arc<RouteQueue>> = {
            let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
            queues.retain(|_, queue| Arc::strong_count(queue) > 1 || !queue.is_empty());
            queues
                .values()
                .filter(|queue| !queue.is_empty())
                .cloned()
                .collect()
        };
        for queue in busy {
            queue.kick();
        }
    }

    /// Waiting requests per route and priority band.
    pub fn depths(&self) -> Vec<(String, i32, u64)> {
        let queues: Vec<(String, Arc<RouteQueue>)> = {
            let queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
            queues
                .iter()
                .map(|(route, queue)| (route.clone(), Arc::clone(queue)))
                .collect()
        };
        let mut depths: Vec<(String, i32, u64)> = queues
            .into_iter()
            .flat_map(|(route, queue)| {
                queue
                    .depths()
                    .into_iter()
                    .map(move |(band, n)| (route.clone(), band, n))
            })
            .collect();
        depths.sort();
        depths
    }

    /// Requests waiting over every route.
    pub fn waiting(&self) -> u64 {
        self.signal.waiters()
    }
}

/// How often the dispatcher kicks the queues without an event while a
/// request waits.
const TICK: Duration = Duration::from_millis(100);

/// Kicks the queues whenever capacity may have freed.
pub struct Dispatcher {
    flow: Arc<FlowControl>,
}

impl Dispatcher {
    pub fn new(flow: Arc<FlowControl>) -> Self {
        Self { flow }
    }
}

#[async_trait]
impl BackgroundService for Dispatcher {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        loop {
            // With nobody waiting there is nothing to kick: it sleeps until
            // the first waiter signals.
            let waiting = self.flow.waiting() > 0;
            tokio::select! {
                _ = self.flow.signal.changed() => {}
                _ = tokio::time::sleep(TICK), if waiting => {}
                _ = shutdown.changed() => return,
            }
            if self.flow.waiting() > 0 {
                self.flow.kick_all();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sheddable_requests_wait_a_quarter() {
        let max = Duration::from_secs(30);
        assert_eq!(max_wait_for(0, max), max);
        assert_eq!(max_wait_for(5, max), max);
        assert_eq!(max_wait_for(-1, max), Duration::from_millis(7_500));
    }

    #[tokio::test]
    async fn queues_are_shared_by_label_and_dropped_once_unused() {
        let flow = FlowControl::new(Arc::default());
        let a = flow.queue("chat");
        assert!(Arc::ptr_eq(&a, &flow.queue("chat")));
        let queued = a.enqueue(0, "k", 10).unwrap();
        assert_eq!(flow.waiting(), 1);
        assert!(
            flow.depths().is_empty(),
            "the head has its turn: none waits"
        );
        drop(a);
        flow.kick_all();
        assert_eq!(flow.queues.lock().unwrap().len(), 1, "its request holds it");
        drop(queued);
        flow.kick_all();
        assert!(flow.queues.lock().unwrap().is_empty());
        assert_eq!(flow.waiting(), 0);
    }
}
