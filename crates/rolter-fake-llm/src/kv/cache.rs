//! The simulated prefix cache: a bounded LRU of full token blocks, keyed the
//! way vLLM keys them.
//!
//! A prompt is cut into blocks of `block_size` tokens; a partial last block
//! is not cached. Block `i`'s hash chains from block `i - 1`'s hash and block
//! `i`'s tokens, and block 0 chains from a root derived from a per-process
//! salt — as vLLM's `NONE_HASH` is random per process — so the hashes are
//! opaque and change when the engine restarts; a router has to hash tokens
//! itself and learn the engine's hashes from the events.
//!
//! [`PrefixCache::admit`] does what vLLM's scheduler does for a new request:
//! count the leading blocks already cached (at most all but the prompt's last
//! token, which vLLM always recomputes), evict least-recently-used blocks to
//! make room, then store the prompt's blocks. Blocks of one prompt are
//! stamped tail first, so the tail is evicted before the head, as vLLM frees
//! a request's blocks in reverse order. A prompt longer than the cache stores
//! only as many leading blocks as fit. Output tokens are not cached.
//!
//! Every change is returned as [`KvEvent`]s, in vLLM's order: evictions
//! (`BlockRemoved`) before stores (`BlockStored`, one per run of consecutive
//! newly stored blocks, whose parent is the block before the run).

use std::collections::{BTreeMap, HashMap};

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// A change to the cache, as vLLM reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum KvEvent {
    /// Consecutive blocks were stored; `token_ids` holds all their tokens.
    BlockStored {
        block_hashes: Vec<u64>,
        parent_block_hash: Option<u64>,
        token_ids: Vec<u32>,
        block_size: u32,
    },
    /// Blocks were evicted.
    BlockRemoved { block_hashes: Vec<u64> },
    /// The whole cache was dropped.
    AllBlocksCleared,
}

/// What admitting one prompt found and changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Admission {
    /// Leading prompt tokens found in the cache (whole blocks).
    pub(crate) cached_tokens: usize,
    pub(crate) events: Vec<KvEvent>,
}

/// The bounded LRU of block hashes; see the module doc.
#[derive(Debug)]
pub(crate) struct PrefixCache {
    block_size: usize,
    capacity: usize,
    /// The hash block 0 chains from.
    root: u64,
    salt: u64,
    /// Block hash to its last-use stamp.
    blocks: HashMap<u64, u64>,
    /// Last-use stamp to block hash, least recently used first.
    by_age: BTreeMap<u64, u64>,
    next_stamp: u64,
}

impl PrefixCache {
    /// An empty cache of `capacity` blocks of `block_size` tokens (both at
    /// least 1), hashing with `salt`.
    pub(crate) fn new(block_size: usize, capacity: usize, salt: u64) -> Self {
        debug_assert!(block_size > 0 && capacity > 0);
        PrefixCache {
            block_size: block_size.max(1),
            capacity: capacity.max(1),
            root: xxh3_64_with_seed(b"fake-llm root block", salt),
            salt,
            blocks: HashMap::new(),
            by_age: BTreeMap::new(),
            next_stamp: 0,
        }
    }

    pub(crate) fn block_size(&self) -> usize {
        self.block_size
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Blocks cached now.
    pub(crate) fn used(&self) -> usize {
        self.blocks.len()
    }

    /// The chained hashes of the full blocks of `tokens`.
    pub(crate) fn block_hashes(&self, tokens: &[u32]) -> Vec<u64> {
        let mut parent = self.root;
        let mut input = Vec::with_capacity(8 + 4 * self.block_size);
        tokens
            .chunks_exact(self.block_size)
            .map(|block| {
                input.clear();
                input.extend_from_slice(&parent.to_le_bytes());
                for token in block {
                    input.extend_from_slice(&token.to_le_bytes());
                }
                parent = xxh3_64_with_seed(&input, self.salt);
                parent
            })
            .collect()
    }

    /// Looks `tokens` up and stores its blocks; see the module doc.
    pub(crate) fn admit(&mut self, tokens: &[u32]) -> Admission {
        let hashes = self.block_hashes(tokens);
        let max_hit_blocks = tokens.len().saturating_sub(1) / self.block_size;
        let hit_blocks = hashes
            .iter()
            .take(max_hit_blocks)
            .take_while(|hash| self.blocks.contains_key(hash))
            .count();
        let stored = &hashes[..hashes.len().min(self.capacity)];
        let is_new: Vec<bool> = stored
            .iter()
            .map(|hash| !self.blocks.contains_key(hash))
            .collect();
        let new_blocks = is_new.iter().filter(|new| **new).count();
        let mut events = Vec::new();

        // Stamps for the prompt's blocks, newer than any in the cache and
        // tail first. The cached ones take theirs before evicting, so the
        // oldest `excess` blocks are never the prompt's own: `stored.len()
        // <= capacity` leaves room for all of them.
        let base = self.next_stamp;
        self.next_stamp += stored.len() as u64;
        let stamp_of = |index: usize| base + (stored.len() - 1 - index) as u64;
        for (index, hash) in stored.iter().enumerate() {
            if let Some(stamp) = self.blocks.get_mut(hash) {
                self.by_age.remove(stamp);
                *stamp = stamp_of(index);
                self.by_age.insert(*stamp, *hash);
            }
        }
        let excess = (self.blocks.len() + new_blocks).saturating_sub(self.capacity);
        let mut removed = Vec::with_capacity(excess);
        for _ in 0..excess {
            let Some((_, hash)) = self.by_age.pop_first() else {
                break;
            };
            self.blocks.remove(&hash);
            removed.push(hash);
        }
        debug_assert!(removed.iter().all(|hash| !stored.contains(hash)));
        if !removed.is_empty() {
            events.push(KvEvent::BlockRemoved {
                block_hashes: removed,
            });
        }
        for (index, hash) in stored.iter().enumerate() {
            if is_new[index] {
                self.blocks.insert(*hash, stamp_of(index));
                self.by_age.insert(stamp_of(index), *hash);
            }
        }
        debug_assert!(self.blocks.len() <= self.capacity);
        debug_assert_eq!(self.blocks.len(), self.by_age.len());

        let mut index = 0;
        while index < stored.len() {
            if !is_new[index] {
                index += 1;
                continue;
            }
            let start = index;
            while index < stored.len() && is_new[index] {
                index += 1;
            }
            events.push(KvEvent::BlockStored {
                block_hashes: stored[start..index].to_vec(),
                parent_block_hash: start.checked_sub(1).map(|parent| stored[parent]),
                token_ids: tokens[start * self.block_size..index * self.block_size].to_vec(),
                block_size: u32::try_from(self.block_size).unwrap_or(u32::MAX),
            });
        }
        Admission {
            cached_tokens: hit_blocks * self.block_size,
            events,
        }
    }

    /// Drops every block (vLLM's prefix-cache reset).
    pub(crate) fn clear(&mut self) -> KvEvent {
        self.blocks.clear();
        self.by_age.clear();
        KvEvent::AllBlocksCleared
    }

    /// An empty cache hashing with a new salt, as after an engine restart.
    pub(crate) fn restarted(&self, salt: u64) -> Self {
        PrefixCache::new(self.block_size, self.capacity, salt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(range: std::ops::Range<u32>) -> Vec<u32> {
        range.collect()
    }

    #[test]
    fn repeated_prompt_hits_its_full_blocks_but_not_the_last_token() {
        let mut cache = PrefixCache::new(4, 100, 7);
        let prompt = tokens(0..10);
        let first = cache.admit(&prompt);
        assert_eq!(first.cached_tokens, 0);
        let hashes = cache.block_hashes(&prompt);
        assert_eq!(hashes.len(), 2);
        assert_eq!(
            first.events,
            vec![KvEvent::BlockStored {
                block_hashes: hashes.clone(),
                parent_block_hash: None,
                token_ids: tokens(0..8),
                block_size: 4,
            }]
        );
        let again = cache.admit(&prompt);
        assert_eq!(
            again,
            Admission {
                cached_tokens: 8,
                events: vec![]
            }
        );
        // A block-aligned prompt recomputes its last token, so its last block.
        assert_eq!(cache.admit(&tokens(0..8)).cached_tokens, 4);
        assert_eq!(cache.used(), 2);
    }

    #[test]
    fn a_longer_prompt_stores_only_its_new_blocks_chained_to_the_cached_ones() {
        let mut cache = PrefixCache::new(4, 100, 7);
        cache.admit(&tokens(0..8));
        let longer = tokens(0..17);
        let hashes = cache.block_hashes(&longer);
        let admission = cache.admit(&longer);
        assert_eq!(admission.cached_tokens, 8);
        assert_eq!(
            admission.events,
            vec![KvEvent::BlockStored {
                block_hashes: hashes[2..4].to_vec(),
                parent_block_hash: Some(hashes[1]),
                token_ids: tokens(8..16),
                block_size: 4,
            }]
        );
    }

    #[test]
    fn hashes_chain_on_the_prefix_and_depend_on_the_salt() {
        let cache = PrefixCache::new(2, 10, 1);
        let a = cache.block_hashes(&[1, 2, 3, 4]);
        let b = cache.block_hashes(&[9, 9, 3, 4]);
        assert_eq!(a.len(), 2);
        assert_ne!(a[1], b[1], "same block, different prefix");
        assert_ne!(a, cache.restarted(2).block_hashes(&[1, 2, 3, 4]));
        assert_eq!(a, PrefixCache::new(2, 10, 1).block_hashes(&[1, 2, 3, 4, 5]));
    }

    #[test]
    fn least_recently_used_tail_blocks_are_evicted_first() {
        let mut cache = PrefixCache::new(1, 6, 3);
        cache.admit(&[1, 2, 0]);
        let b = cache.block_hashes(&[5, 6, 0]);
        cache.admit(&[5, 6, 0]);
        // Touch the first prompt: the second is now the oldest, tail first.
        assert_eq!(cache.admit(&[1, 2, 0]).cached_tokens, 2);
        let c = cache.block_hashes(&[7, 0]);
        let admission = cache.admit(&[7, 0]);
        assert_eq!(cache.used(), 6);
        assert_eq!(
            admission.events,
            vec![
                KvEvent::BlockRemoved {
                    block_hashes: vec![b[2], b[1]]
                },
                KvEvent::BlockStored {
                    block_hashes: c,
                    parent_block_hash: None,
                    token_ids: vec![7, 0],
                    block_size: 1,
                },
            ]
        );
        assert_eq!(cache.admit(&[1, 2, 0]).cached_tokens, 2);
        assert_eq!(cache.admit(&[5, 6, 9]).cached_tokens, 1);
    }

    #[test]
    fn a_prompt_longer_than_the_cache_stores_its_head() {
        let mut cache = PrefixCache::new(1, 3, 3);
        let admission = cache.admit(&[1, 2, 3, 4, 5]);
        assert_eq!(cache.used(), 3);
        let hashes = cache.block_hashes(&[1, 2, 3]);
        assert!(
            matches!(&admission.events[..], [KvEvent::BlockStored { block_hashes, .. }] if *block_hashes == hashes)
        );
        assert_eq!(cache.admit(&[1, 2, 3, 4, 5]).cached_tokens, 3);
    }

    #[test]
    fn clear_empties_the_cache() {
        let mut cache = PrefixCache::new(2, 10, 3);
        cache.admit(&[1, 2, 3, 4, 5]);
        assert_eq!(cache.clear(), KvEvent::AllBlocksCleared);
        assert_eq!(cache.used(), 0);
        assert_eq!(cache.admit(&[1, 2, 3, 4, 5]).cached_tokens, 0);
    }
}
