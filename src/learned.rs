//! What the gateway learns and keeps across configuration snapshots.
//!
//! A reload builds a new snapshot (routes, balancers, targets) and throws
//! the old one away once its requests are done; what was learned about the
//! engines must not go with it, or every reload would reopen breakers,
//! unpark targets that asked for time, forget latencies and caches, and
//! reset every key's rate limit. Each part is keyed by a stable identity
//! (target, provider, key name), never by a position in the snapshot.

use std::sync::Arc;

use crate::flow_control::FlowControl;
use crate::health::HealthRegistry;
use crate::kv_events::KvIndexRegistry;
use crate::lmcache::OccupancyRegistry;
use crate::rate_limit::RateLimits;
use crate::response_homes::ResponseHomes;
use crate::tracker::LoadTracker;

/// What the gateway learns and keeps across snapshots: per-target load and
/// breaker state, provider health, KV indexes, cache occupancy, what each
/// API key used of its rate limits, the requests flow control holds, which
/// engine holds which Responses API answer.
#[derive(Debug)]
pub struct Learned {
    pub tracker: Arc<LoadTracker>,
    pub health: Arc<HealthRegistry>,
    pub kv: Arc<KvIndexRegistry>,
    pub occupancy: Arc<OccupancyRegistry>,
    pub rate_limits: Arc<RateLimits>,
    /// Woken by the tracker's capacity signal.
    pub flow: Arc<FlowControl>,
    /// Which engine holds which Responses API answer.
    pub response_homes: Arc<ResponseHomes>,
}

impl Default for Learned {
    fn default() -> Self {
        let tracker = Arc::new(LoadTracker::new());
        let flow = Arc::new(FlowControl::new(Arc::clone(tracker.capacity_signal())));
        Learned {
            tracker,
            health: Arc::default(),
            kv: Arc::default(),
            occupancy: Arc::default(),
            rate_limits: Arc::default(),
            flow,
            response_homes: Arc::default(),
        }
    }
}
