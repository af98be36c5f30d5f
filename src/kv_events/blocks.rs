//! One engine cache's resident blocks: a bounded set with LRU eviction.
//!
//! Two maps. `blocks` maps the engine's id of a block (within its KV-cache
//! group) to rolter's chain hash of it, which is what `parent_block_hash`
//! links and `BlockRemoved` resolve through, and to the media (GPU, CPU,
//! storage) holding it. `resident` counts, per rolter hash, the engine
//! blocks that carry it (several can: the same tokens under another cache
//! salt's engine hash, or in two KV-cache groups), so a request block is
//! resident while any of them is.
//!
//! The bound is a safety net: the engine reports its own evictions, so the
//! set only outgrows the engine's cache when removals were lost. Recency is
//! that of the last `BlockStored` naming the block (the request path only
//! reads, under a shared lock); the least recent block is evicted first.
//! The queue holds one entry per touch and skips entries a later touch
//! superseded; it is compacted when it holds more than twice the blocks.

use std::collections::{HashMap, VecDeque};

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::decode::{EngineBlockId, Medium};

/// Mixes a KV-cache group into a block's key.
const GROUP_SEED: u64 = 0x6b76_2d67_726f_7570; // "kv-group"
/// Queue entries allowed beyond twice the blocks before a compaction.
const QUEUE_SLACK: usize = 1024;

/// An engine block within its KV-cache group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct BlockKey(u64);

impl BlockKey {
    pub(super) fn new(id: EngineBlockId, group: Option<i64>) -> Self {
        match group {
            None | Some(0) => BlockKey(id.0),
            Some(group) => BlockKey(xxh3_64_with_seed(
                &id.0.to_le_bytes(),
                GROUP_SEED ^ group as u64,
            )),
        }
    }
}

fn medium_bit(medium: Medium) -> u8 {
    match medium {
        Medium::Gpu => 1,
        Medium::Cpu => 2,
        Medium::Storage => 4,
        Medium::Other => 8,
    }
}

#[derive(Debug)]
struct Block {
    rolter: u64,
    /// The media holding the block ([`medium_bit`]s); never 0 while stored.
    media: u8,
    /// The last touch, matching one queue entry.
    tick: u64,
}

#[derive(Debug)]
pub(super) struct RankBlocks {
    blocks: HashMap<BlockKey, Block>,
    resident: HashMap<u64, u32>,
    queue: VecDeque<(u64, BlockKey)>,
    tick: u64,
    capacity: usize,
}

impl RankBlocks {
    pub(super) fn new(capacity: usize) -> Self {
        RankBlocks {
            blocks: HashMap::new(),
            resident: HashMap::new(),
            queue: VecDeque::new(),
            tick: 0,
            capacity: capacity.max(1),
        }
    }

    /// Engine blocks held.
    pub(super) fn len(&self) -> usize {
        self.blocks.len()
    }

    /// rolter's hash of an engine block, when the block is held.
    pub(super) fn rolter_hash(&self, key: BlockKey) -> Option<u64> {
        self.blocks.get(&key).map(|block| block.rolter)
    }

    /// How many of `hashes`, from the first, are resident.
    pub(super) fn leading_run(&self, hashes: &[u64]) -> usize {
        hashes
            .iter()
            .take_while(|hash| self.resident.contains_key(hash))
            .count()
    }

    /// Records that `medium` holds the block; returns how many blocks were
    /// evicted to make room.
    pub(super) fn store(&mut self, key: BlockKey, rolter: u64, medium: Medium) -> u64 {
        self.tick += 1;
        let tick = self.tick;
        let mut evicted = 0;
        if let Some(block) = self.blocks.get_mut(&key) {
            if block.rolter != rolter {
                release(&mut self.resident, block.rolter);
                *self.resident.entry(rolter).or_default() += 1;
                block.rolter = rolter;
            }
            block.media |= medium_bit(medium);
            block.tick = tick;
        } else {
            while self.blocks.len() >= self.capacity && self.evict_one() {
                evicted += 1;
            }
            self.blocks.insert(
                key,
                Block {
                    rolter,
                    media: medium_bit(medium),
                    tick,
                },
            );
            *self.resident.entry(rolter).or_default() += 1;
        }
        self.queue.push_back((tick, key));
        self.compact_if_needed();
        debug_assert!(self.blocks.len() <= self.capacity);
        evicted
    }

    /// Records that `medium` dropped the block; returns whether the block
    /// was held there (an unknown block is one stored before rolter
    /// listened, or already evicted here).
    pub(super) fn remove(&mut self, key: BlockKey, medium: Medium) -> bool {
        let Some(block) = self.blocks.get_mut(&key) else {
            return false;
        };
        let bit = medium_bit(medium);
        if block.media & bit == 0 {
            return false;
        }
        block.media &= !bit;
        if block.media == 0 {
            let rolter = block.rolter;
            self.blocks.remove(&key);
            release(&mut self.resident, rolter);
        }
        true
    }

    /// Drops the least recently stored block; false when there is none.
    fn evict_one(&mut self) -> bool {
        while let Some((tick, key)) = self.queue.pop_front() {
            if self
                .blocks
                .get(&key)
                .is_some_and(|block| block.tick == tick)
            {
                let block = self.blocks.remove(&key).expect("just found");
                release(&mut self.resident, block.rolter);
                return true;
            }
        }
        false
    }

    fn compact_if_needed(&mut self) {
        if self.queue.len() <= 2 * self.blocks.len() + QUEUE_SLACK {
            return;
        }
        let mut live: Vec<(u64, BlockKey)> = self
            .blocks
            .iter()
            .map(|(key, block)| (block.tick, *key))
            .collect();
        live.sort_unstable_by_key(|(tick, _)| *tick);
        self.queue = live.into();
    }
}

fn release(resident: &mut HashMap<u64, u32>, rolter: u64) {
    if let Some(count) = resident.get_mut(&rolter) {
        *count -= 1;
        if *count == 0 {
            resident.remove(&rolter);
        }
    } else {
        debug_assert!(false, "a held block's hash is counted as resident");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u64) -> BlockKey {
        BlockKey::new(EngineBlockId(n), None)
    }

    #[test]
    fn stored_blocks_are_resident_until_removed() {
        let mut blocks = RankBlocks::new(10);
        blocks.store(key(1), 100, Medium::Gpu);
        blocks.store(key(2), 200, Medium::Gpu);
        assert_eq!(blocks.leading_run(&[100, 200, 300]), 2);
        assert_eq!(blocks.rolter_hash(key(2)), Some(200));
        assert!(blocks.remove(key(1), Medium::Gpu));
        assert_eq!(
            blocks.leading_run(&[100, 200]),
            0,
            "the run breaks at the first gap"
        );
        assert!(!blocks.remove(key(1), Medium::Gpu), "already gone");
        assert!(!blocks.remove(key(9), Medium::Gpu), "never seen");
        assert_eq!(blocks.len(), 1);
    }

    #[test]
    fn a_block_stays_resident_while_any_medium_holds_it() {
        let mut blocks = RankBlocks::new(10);
        blocks.store(key(1), 100, Medium::Gpu);
        blocks.store(key(1), 100, Medium::Cpu);
        assert!(blocks.remove(key(1), Medium::Gpu));
        assert_eq!(blocks.leading_run(&[100]), 1, "still on the CPU");
        assert!(!blocks.remove(key(1), Medium::Storage), "never held there");
        assert!(blocks.remove(key(1), Medium::Cpu));
        assert_eq!(blocks.leading_run(&[100]), 0);
    }

    #[test]
    fn a_hash_stays_resident_while_any_engine_block_carries_it() {
        let mut blocks = RankBlocks::new(10);
        blocks.store(key(1), 100, Medium::Gpu);
        blocks.store(BlockKey::new(EngineBlockId(1), Some(1)), 100, Medium::Gpu);
        assert_ne!(key(1), BlockKey::new(EngineBlockId(1), Some(1)));
        assert!(blocks.remove(key(1), Medium::Gpu));
        assert_eq!(blocks.leading_run(&[100]), 1, "group 1 still holds it");
    }

    #[test]
    fn the_least_recently_stored_block_is_evicted_at_the_bound() {
        let mut blocks = RankBlocks::new(3);
        assert_eq!(blocks.store(key(1), 100, Medium::Gpu), 0);
        assert_eq!(blocks.store(key(2), 200, Medium::Gpu), 0);
        assert_eq!(blocks.store(key(3), 300, Medium::Gpu), 0);
        // Storing 1 again makes 2 the least recent.
        assert_eq!(blocks.store(key(1), 100, Medium::Gpu), 0);
        assert_eq!(blocks.store(key(4), 400, Medium::Gpu), 1);
        assert_eq!(blocks.len(), 3);
        assert_eq!(blocks.rolter_hash(key(2)), None);
        assert_eq!(blocks.leading_run(&[100]), 1);
        assert_eq!(blocks.leading_run(&[300]), 1);
        assert_eq!(blocks.leading_run(&[400]), 1);
    }

    #[test]
    fn the_queue_stays_bounded_under_repeated_touches() {
        let mut blocks = RankBlocks::new(4);
        for round in 0..10_000u64 {
            blocks.store(key(round % 4), round % 4, Medium::Gpu);
        }
        assert!(blocks.queue.len() <= 2 * blocks.len() + QUEUE_SLACK + 1);
        assert_eq!(blocks.len(), 4);
        // Eviction order survives compaction: key 0 was touched least recently.
        blocks.store(key(99), 99, Medium::Gpu);
        assert_eq!(blocks.rolter_hash(key(0)), None);
        assert_eq!(blocks.rolter_hash(key(3)), Some(3));
    }
}
