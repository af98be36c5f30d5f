//! Token ids of conversation prefixes already tokenized.
//!
//! A multi-turn chat re-sends its whole history each turn, and rendered
//! through its template, turn k's text begins with turn k-1's text up to
//! the generation prompt. Tokenizers split text at added tokens
//! (`<|im_start|>`, `<|start_header_id|>`, `[INST]`) before anything else,
//! so the ids of the text before an added token do not depend on what
//! follows it. The cache keeps, for each tokenized text, the ids before a
//! few of its added tokens (the first ones, where a shared system prompt
//! ends, and the last ones, where the next turn will branch off), keyed by a
//! digest of the text before them; a new text looks up the digests at its
//! own added-token offsets, longest first, and tokenizes only the rest. The
//! checkpoints of one text share one copy of its ids.
//!
//! Bounded by the tokens it holds: past [`PrefixCache::new`]'s capacity,
//! the least recently used eighth is dropped at once (one scan per many
//! inserts, not one per insert).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Checkpoints kept per tokenized text at its first added tokens...
pub const LEADING_CHECKPOINTS: usize = 2;
/// ...and at its last ones.
pub const TRAILING_CHECKPOINTS: usize = 3;

#[derive(Debug)]
pub struct PrefixCache {
    capacity_tokens: usize,
    /// Held for a hash-map lookup or insert, never across an await or a
    /// tokenization: short, and only tokenizing requests take it.
    entries: Mutex<Entries>,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Debug, Default)]
struct Entries {
    /// Digest of a text prefix: the ids of a longer text, how many of them
    /// are the prefix's, and when the entry was last used.
    map: HashMap<u64, (Arc<[u32]>, usize, u64)>,
    tokens: usize,
    clock: u64,
}

impl PrefixCache {
    pub fn new(capacity_tokens: usize) -> Self {
        PrefixCache {
            capacity_tokens,
            entries: Mutex::new(Entries::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The ids of the text whose digest is `key`: `ids[..len]`.
    pub fn get(&self, key: u64) -> Option<(Arc<[u32]>, usize)> {
        let mut entries = self.lock();
        entries.clock += 1;
        let clock = entries.clock;
        let (ids, len, used) = entries.map.get_mut(&key)?;
        *used = clock;
        Some((Arc::clone(ids), *len))
    }

    /// Remembers that the text with digest `key` has the ids `ids[..len]`.
    pub fn insert(&self, key: u64, ids: Arc<[u32]>, len: usize) {
        debug_assert!(len <= ids.len());
        if len > self.capacity_tokens {
            return;
        }
        let mut entries = self.lock();
        entries.clock += 1;
        let clock = entries.clock;
        if let Some((_, old, _)) = entries.map.insert(key, (ids, len, clock)) {
            entries.tokens -= old;
        }
        entries.tokens += len;
        if entries.tokens > self.capacity_tokens {
            entries.evict_oldest_eighth();
        }
    }

    /// Counts a lookup's outcome (one per tokenized request).
    pub fn record(&self, hit: bool) {
        let counter = if hit { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Lookups that found a prefix, and those that did not.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    /// Tokens held.
    pub fn tokens(&self) -> usize {
        self.lock().tokens
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // A panic while holding the lock leaves plain counters behind; the
        // map stays usable.
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Entries {
    fn evict_oldest_eighth(&mut self) {
        let mut stamps: Vec<u64> = self.map.values().map(|(_, _, used)| *used).collect();
        stamps.sort_unstable();
        let cut = stamps[stamps.len() / 8];
        let mut freed = 0;
        self.map.retain(|_, (_, len, used)| {
            let keep = *used > cut;
            if !keep {
                freed += *len;
            }
            keep
        });
        self.tokens -= freed;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_no_more_tokens_than_its_capacity_and_keeps_the_recently_used() {
        let cache = PrefixCache::new(1000);
        cache.insert(0, vec![1; 100].into(), 100);
        for key in 1..100u64 {
            assert!(cache.get(0).is_some(), "the entry read every time stays");
            cache.insert(key, vec![2; 100].into(), 100);
            assert!(cache.tokens() <= 1000, "{} tokens", cache.tokens());
        }
        assert!(cache.get(99).is_some());
        assert!(cache.get(1).is_none());
        cache.insert(7, vec![0; 1001].into(), 1001);
        assert!(cache.get(7).is_none(), "larger than the whole cache");
    }

    #[test]
    fn replacing_a_key_counts_its_tokens_once() {
        let cache = PrefixCache::new(1000);
        cache.insert(1, vec![1; 300].into(), 300);
        let shared: Arc<[u32]> = vec![1; 400].into();
        cache.insert(1, Arc::clone(&shared), 200);
        assert_eq!(cache.tokens(), 200);
        assert_eq!(cache.get(1).map(|(ids, len)| ids[..len].len()), Some(200));
    }
}
