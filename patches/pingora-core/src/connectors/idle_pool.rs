// rolter: the keep-alive pool of `TransportConnector`, in place of
// `pingora_pool::ConnectionPool`. Not part of the published crate; see
// patches/README.md.

//! Idle upstream streams kept for reuse, watched by nobody.
//!
//! `pingora_pool` gives every released stream its own task that waits for a
//! read, the idle timeout, an eviction or a reuse, behind an `Arc<Mutex>`, a
//! `Notify` and a oneshot channel: each request that reuses a connection paid
//! a spawn, a wakeup of that task and a task switch before it could write.
//! Here an idle stream is only a value in a list. What the watching task
//! found at once is found instead when the stream is taken (a readiness
//! check that costs no system call while the socket is quiet) and by one
//! sweep a second over the whole pool, which closes the streams the server
//! closed or sent data on and those past their idle timeout. The sweep runs
//! only while the pool holds something.

use super::test_reusable_stream;
use crate::protocols::Stream;
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// How often the pool looks for idle streams to close. A stream the server
/// closed stays open on this side (CLOSE_WAIT) at most this long, unless a
/// request finds it first; a stream past its idle timeout is never handed
/// out, so this bounds only how long it holds its descriptor.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

struct Idle {
    stream: Stream,
    since: Instant,
    expires: Option<Instant>,
}

impl Idle {
    fn expired(&self, now: Instant) -> bool {
        self.expires.is_some_and(|at| at <= now)
    }
}

#[derive(Default)]
struct Streams {
    /// Per reuse key, oldest first: a taker gets the newest (`pop_back`),
    /// whose server is the least likely to have timed it out, and the
    /// oldest are the first to expire or be evicted.
    by_key: HashMap<u64, VecDeque<Idle>>,
    len: usize,
    /// A sweep task is running (or about to): it stops, clearing this, when
    /// it finds the pool empty, and the next `put` starts another.
    sweeping: bool,
}

/// A stream evicted to keep the pool within its size, with how long it was idle.
pub struct Evicted {
    pub stream: Stream,
    pub idle: Duration,
}

/// What `put` did beyond keeping the stream.
pub struct Put {
    pub evicted: Option<Evicted>,
    /// The caller must start [`sweep`] (no sweep task is running).
    pub start_sweep: bool,
}

pub struct IdlePool {
    capacity: usize,
    streams: Mutex<Streams>,
}

impl IdlePool {
    pub fn new(capacity: usize) -> Self {
        IdlePool {
            capacity,
            streams: Mutex::new(Streams::default()),
        }
    }

    /// Keeps `stream` under `key`. A pool already holding its `capacity`
    /// gives back its longest-idle stream (of any key) to be closed.
    pub fn put(&self, key: u64, stream: Stream, idle_timeout: Option<Duration>) -> Put {
        let since = Instant::now();
        let idle = Idle {
            stream,
            since,
            expires: idle_timeout.and_then(|t| since.checked_add(t)),
        };
        let mut streams = self.streams.lock();
        if self.capacity == 0 {
            return Put {
                evicted: Some(Evicted {
                    stream: idle.stream,
                    idle: Duration::ZERO,
                }),
                start_sweep: false,
            };
        }
        streams.by_key.entry(key).or_default().push_back(idle);
        streams.len += 1;
        let evicted = if streams.len > self.capacity {
            streams.pop_oldest().map(|idle| Evicted {
                idle: since.saturating_duration_since(idle.since),
                stream: idle.stream,
            })
        } else {
            None
        };
        let start_sweep = !std::mem::replace(&mut streams.sweeping, true);
        Put {
            evicted,
            start_sweep,
        }
    }

    /// The most recently kept stream under `key` that is within its idle
    /// timeout. Expired ones met on the way are closed. The caller still
    /// checks the stream it gets (its server may have closed it).
    pub fn take(&self, key: u64) -> Option<Stream> {
        let now = Instant::now();
        let mut expired = Vec::new();
        let mut streams = self.streams.lock();
        let queue = streams.by_key.get_mut(&key)?;
        let mut found = None;
        while let Some(idle) = queue.pop_back() {
            if idle.expired(now) {
                expired.push(idle);
            } else {
                found = Some(idle.stream);
                break;
            }
        }
        streams.len -= expired.len() + usize::from(found.is_some());
        drop(streams);
        // Closing is a system call each: outside the lock.
        drop(expired);
        found
    }

    /// Closes every stream that expired, that its server closed or that
    /// has unread data. Returns false, having stopped the sweeping, when
    /// the pool is empty.
    fn sweep_once(&self, unexpected_data: &AtomicU64) -> bool {
        let now = Instant::now();
        let mut closed = Vec::new();
        let mut streams = self.streams.lock();
        streams.by_key.retain(|_, queue| {
            let mut at = 0;
            while at < queue.len() {
                let idle = &mut queue[at];
                if idle.expired(now) || !test_reusable_stream(&mut idle.stream, unexpected_data) {
                    closed.extend(queue.remove(at));
                } else {
                    at += 1;
                }
            }
            // Keys that emptied since the last sweep go too, so the map
            // holds only keys with streams (a `take` leaves its queue).
            !queue.is_empty()
        });
        streams.len -= closed.len();
        let keep_going = streams.len > 0;
        streams.sweeping = keep_going;
        drop(streams);
        drop(closed);
        keep_going
    }
}

impl Streams {
    /// Removes the stream idle the longest, of any key. A scan of the keys'
    /// oldest streams: keys are upstream groups, few, and a pool is full
    /// only when more connections were busy at once than it keeps.
    fn pop_oldest(&mut self) -> Option<Idle> {
        let key = self
            .by_key
            .iter()
            .filter_map(|(key, queue)| Some((*key, queue.front()?.since)))
            .min_by_key(|(_, since)| *since)?
            .0;
        let queue = self.by_key.get_mut(&key)?;
        let idle = queue.pop_front()?;
        if queue.is_empty() {
            self.by_key.remove(&key);
        }
        self.len -= 1;
        Some(idle)
    }
}

/// The pool's sweep: every [`SWEEP_EVERY`] while the pool holds a stream
/// and is still owned.
pub async fn sweep(pool: Weak<IdlePool>, unexpected_data: Arc<AtomicU64>) {
    let mut end = SweepEnd {
        pool: pool.clone(),
        stopped: false,
    };
    loop {
        tokio::time::sleep(SWEEP_EVERY).await;
        let Some(pool) = pool.upgrade() else {
            return;
        };
        if !pool.sweep_once(&unexpected_data) {
            end.stopped = true;
            return;
        }
    }
}

/// Clears the pool's `sweeping` flag when a sweep task ends other than by
/// finding the pool empty (its runtime shut down, or it panicked), so that
/// the next `put` starts another rather than none ever again.
struct SweepEnd {
    pool: Weak<IdlePool>,
    /// The sweep stopped itself, having cleared the flag.
    stopped: bool,
}

impl Drop for SweepEnd {
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        if let Some(pool) = self.pool.upgrade() {
            pool.streams.lock().sweeping = false;
        }
    }
}
