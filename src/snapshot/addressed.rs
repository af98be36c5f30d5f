//! The routes a snapshot keeps for group and pinned-provider addresses.
//!
//! A client chooses the model part of `<slug>/<model>` freely, so what is
//! kept per address is bounded twice: an address is kept only once a
//! request on it was served (an engine answered it without an error; a
//! junk name the engine refuses leaves nothing behind), and at most
//! [`MAX_ADDRESSED_ROUTES`] are kept, the least recently used evicted first
//! (counted in `rolter_addressed_route_evictions_total`). A request for an
//! address that is not kept gets a route built for it alone, dropped with
//! the request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use super::Route;

/// Addresses one snapshot keeps routes for.
pub const MAX_ADDRESSED_ROUTES: usize = 4096;

struct Kept {
    route: Arc<Route>,
    /// Clock reading (ms) of the last request that used it.
    last_used_ms: AtomicU64,
}

pub struct AddressedRoutes {
    capacity: usize,
    // Read-locked for one lookup per addressed request, write-locked once
    // per address kept (and its eviction batch); map operations only,
    // never held across an await.
    routes: RwLock<HashMap<String, Kept>>,
}

impl Default for AddressedRoutes {
    fn default() -> Self {
        Self::with_capacity(MAX_ADDRESSED_ROUTES)
    }
}

impl AddressedRoutes {
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            routes: RwLock::new(HashMap::new()),
        }
    }

    /// The kept route of `address`, marked used at `now_ms`.
    pub fn get(&self, address: &str, now_ms: u64) -> Option<Arc<Route>> {
        let routes = self.routes.read().unwrap_or_else(|e| e.into_inner());
        let kept = routes.get(address)?;
        // Written only when it changed, so concurrent readers of a hot
        // address do not bounce its cache line on every request.
        if kept.last_used_ms.load(Ordering::Relaxed) != now_ms {
            kept.last_used_ms.store(now_ms, Ordering::Relaxed);
        }
        Some(Arc::clone(&kept.route))
    }

    pub fn contains(&self, address: &str) -> bool {
        let routes = self.routes.read().unwrap_or_else(|e| e.into_inner());
        routes.contains_key(address)
    }

    /// Keeps `route` under its address unless one is kept already; returns
    /// how many routes were evicted to make room.
    pub fn insert(&self, route: Arc<Route>, now_ms: u64) -> usize {
        let mut routes = self.routes.write().unwrap_or_else(|e| e.into_inner());
        if routes.contains_key(&route.model) {
            return 0;
        }
        let mut evicted = 0;
        if routes.len() >= self.capacity {
            // A sixteenth at once, so the scan is paid once per that many
            // new addresses rather than on each.
            let batch = (self.capacity / 16).clamp(1, routes.len());
            let mut ages: Vec<(u64, &String)> = routes
                .iter()
                .map(|(address, kept)| (kept.last_used_ms.load(Ordering::Relaxed), address))
                .collect();
            ages.select_nth_unstable_by_key(batch - 1, |(used, _)| *used);
            let oldest: Vec<String> = ages[..batch].iter().map(|(_, a)| (*a).clone()).collect();
            for address in oldest {
                routes.remove(&address);
            }
            evicted = batch;
        }
        routes.insert(
            route.model.clone(),
            Kept {
                route,
                last_used_ms: AtomicU64::new(now_ms),
            },
        );
        evicted
    }

    pub fn len(&self) -> usize {
        self.routes.read().unwrap_or_else(|e| e.into_inner()).len()
    }
}
