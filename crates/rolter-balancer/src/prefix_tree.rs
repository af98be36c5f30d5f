//! Per-target approximate prefix trees over conversation text, shared by the
//! `cache_aware` strategy and the pipeline's prefix-affinity scorer.
//!
//! An engine's prefix cache (vLLM's automatic prefix caching, SGLang's radix
//! cache) reuses the KV of a request's longest prefix it has seen before. The
//! gateway cannot see that cache, so it keeps its own approximation: which
//! prompt prefixes each target has served.
//!
//! The approximation is block-grained, like the engines' own caches. A prompt
//! is cut into [`BLOCK_BYTES`]-byte blocks, and block `k` is identified by a
//! chained hash, `h(k) = xxh3(block k, seed = h(k - 1))`, so one `u64` names
//! the whole prefix up to and including block `k`. A target's tree is then
//! the set of prefix hashes it has served: a trie whose edges are blocks,
//! stored flat. There are no per-character nodes and no stored text: matching
//! a 32 KiB prompt hashes 512 blocks once and asks each tree about a handful
//! of them, and learning it touches 512 map entries. A trailing partial block
//! is not stored: it would only ever match the identical prompt, and a
//! growing conversation extends it into a different full block.
//!
//! Memory is bounded per target by the prompt bytes the tree represents
//! (blocks × [`BLOCK_BYTES`]), which is what operators reason about; what is
//! held per block is a hash, two links and an index entry, well under the 64
//! bytes of text it stands for. When a tree is full, the least recently used
//! block is evicted (and counted).
//!
//! Recency is kept so that eviction only ever removes leaves: learning a
//! prompt touches its blocks deepest first, so every block is more recently
//! used than all of its descendants, and the least recently used block has
//! none. The stored set is therefore prefix-closed — if block `k` of a prompt
//! is present, so are blocks `0..k` — which lets a match binary-search the
//! prompt's blocks instead of walking all of them (a 64-bit hash collision
//! could break that, and would cost one approximate match, nothing more).

use std::sync::{Mutex, PoisonError};

use smallvec::SmallVec;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::hashing::PrehashedMap;
use crate::RouteContext;

/// Bytes of prompt text per block: the match granularity. vLLM's default KV
/// block is 16 tokens, about 64 bytes of English text.
pub(crate) const BLOCK_BYTES: usize = 64;

/// Blocks considered per prompt: the gateway bounds prompts to
/// [`RouteContext::MAX_PROMPT_BYTES`], and anything past that is ignored here
/// too, so a prompt's hashes always fit on the stack.
pub(crate) const MAX_BLOCKS: usize = RouteContext::MAX_PROMPT_BYTES / BLOCK_BYTES;

/// Seed of the first block's hash. A constant, so every gateway node learns
/// and matches the same hashes.
const CHAIN_SEED: u64 = 0x726f_6c74_6572_2d70; // "rolter-p"

/// "No slot" in the recency list.
const NIL: u32 = u32::MAX;

/// A prompt cut into chained block hashes, computed once per request and
/// matched against any number of trees.
pub(crate) struct PromptBlocks {
    hashes: SmallVec<[u64; MAX_BLOCKS]>,
    /// Bytes of the prompt that matching can account for: its length, capped
    /// at [`MAX_BLOCKS`] blocks.
    considered_bytes: usize,
}

impl PromptBlocks {
    pub(crate) fn of(prompt: &str) -> Self {
        let bytes = prompt.as_bytes();
        let bytes = &bytes[..bytes.len().min(MAX_BLOCKS * BLOCK_BYTES)];
        let mut hashes = SmallVec::new();
        let mut chain = CHAIN_SEED;
        for block in bytes.chunks_exact(BLOCK_BYTES) {
            chain = xxh3_64_with_seed(block, chain);
            hashes.push(chain);
        }
        debug_assert!(hashes.len() <= MAX_BLOCKS);
        Self {
            hashes,
            considered_bytes: bytes.len(),
        }
    }

    /// Whole blocks in the prompt.
    pub(crate) fn len(&self) -> usize {
        self.hashes.len()
    }

    /// Prompt bytes covered by the first `blocks` blocks.
    pub(crate) fn matched_bytes(blocks: usize) -> usize {
        blocks * BLOCK_BYTES
    }

    /// The share of the (bounded) prompt covered by the first `blocks`
    /// blocks, in [0, 1]; 0 for an empty prompt.
    pub(crate) fn matched_fraction(&self, blocks: usize) -> f64 {
        if self.considered_bytes == 0 {
            return 0.0;
        }
        Self::matched_bytes(blocks) as f64 / self.considered_bytes as f64
    }
}

/// One target's tree: the set of prefix hashes it has served, in a recency
/// list for LRU eviction. See the module documentation.
#[derive(Debug)]
struct PrefixTree {
    /// Block hash -> its slot.
    index: PrehashedMap<u32>,
    /// Slab of blocks, doubly linked from most (`head`) to least (`tail`)
    /// recently used. Never longer than `capacity`: a full tree reuses the
    /// slot of the block it evicts.
    slots: Vec<Slot>,
    head: u32,
    tail: u32,
    /// Blocks this tree may hold.
    capacity: usize,
    evictions: u64,
}

#[derive(Clone, Copy, Debug)]
struct Slot {
    hash: u64,
    prev: u32,
    next: u32,
}

impl PrefixTree {
    fn new(capacity: usize) -> Self {
        // Slot indices are u32 with NIL reserved.
        let capacity = capacity.min(NIL as usize - 1);
        Self {
            index: PrehashedMap::default(),
            slots: Vec::new(),
            head: NIL,
            tail: NIL,
            capacity,
            evictions: 0,
        }
    }

    /// Leading blocks of `prompt` this tree holds. Binary search is valid
    /// because the stored set is prefix-closed (module documentation).
    fn matched_blocks(&self, prompt: &PromptBlocks) -> usize {
        if self.index.is_empty() {
            return 0;
        }
        prompt
            .hashes
            .partition_point(|hash| self.index.contains_key(hash))
    }

    /// Learns `prompt`: its leading blocks, as many as fit, become the most
    /// recently used, each more recent than its descendants.
    fn insert(&mut self, prompt: &PromptBlocks) {
        let keep = prompt.len().min(self.capacity);
        for &hash in prompt.hashes[..keep].iter().rev() {
            self.touch_or_insert(hash);
        }
        debug_assert!(self.index.len() <= self.capacity);
        debug_assert_eq!(self.index.len(), self.slots.len());
    }

    fn touch_or_insert(&mut self, hash: u64) {
        if let Some(&slot) = self.index.get(&hash) {
            if slot != self.head {
                self.unlink(slot);
                self.push_front(slot);
            }
            return;
        }
        let slot = if self.slots.len() < self.capacity {
            self.slots.push(Slot {
                hash,
                prev: NIL,
                next: NIL,
            });
            (self.slots.len() - 1) as u32
        } else {
            // Full: the least recently used block is a leaf (module
            // documentation); its slot takes the new block.
            let victim = self.tail;
            debug_assert_ne!(victim, NIL, "a full tree of capacity > 0 has a tail");
            self.unlink(victim);
            self.index.remove(&self.slots[victim as usize].hash);
            self.evictions += 1;
            self.slots[victim as usize].hash = hash;
            victim
        };
        self.push_front(slot);
        self.index.insert(hash, slot);
    }

    fn unlink(&mut self, slot: u32) {
        let Slot { prev, next, .. } = self.slots[slot as usize];
        match prev {
            NIL => self.head = next,
            p => self.slots[p as usize].next = next,
        }
        match next {
            NIL => self.tail = prev,
            n => self.slots[n as usize].prev = prev,
        }
    }

    fn push_front(&mut self, slot: u32) {
        let old_head = self.head;
        {
            let s = &mut self.slots[slot as usize];
            s.prev = NIL;
            s.next = old_head;
        }
        match old_head {
            NIL => self.tail = slot,
            h => self.slots[h as usize].prev = slot,
        }
        self.head = slot;
    }
}

/// One prefix tree per target of a route.
#[derive(Debug)]
pub(crate) struct PrefixTrees {
    // One Mutex per target: a match holds it for a binary search (about nine
    // map probes), learning for at most MAX_BLOCKS touches; neither does I/O
    // or calls out, and a tree left mid-update by a panic is still a valid
    // set of blocks, so a poisoned lock is taken over.
    trees: Box<[Mutex<PrefixTree>]>,
}

impl PrefixTrees {
    /// Trees for `targets` targets, each representing at most
    /// `max_bytes_per_target` bytes of prompt text (rounded down to whole
    /// blocks).
    pub(crate) fn new(targets: usize, max_bytes_per_target: usize) -> Self {
        let capacity = max_bytes_per_target / BLOCK_BYTES;
        Self {
            trees: (0..targets)
                .map(|_| Mutex::new(PrefixTree::new(capacity)))
                .collect(),
        }
    }

    fn tree(&self, target: usize) -> Option<std::sync::MutexGuard<'_, PrefixTree>> {
        self.trees
            .get(target)
            .map(|tree| tree.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Leading blocks of `prompt` that `target` has served; 0 for an unknown
    /// target.
    pub(crate) fn matched_blocks(&self, target: usize, prompt: &PromptBlocks) -> usize {
        if prompt.len() == 0 {
            return 0;
        }
        self.tree(target)
            .map_or(0, |tree| tree.matched_blocks(prompt))
    }

    /// Records that `target` served `prompt`; an unknown target is ignored.
    pub(crate) fn insert(&self, target: usize, prompt: &PromptBlocks) {
        if prompt.len() == 0 {
            return;
        }
        if let Some(mut tree) = self.tree(target) {
            tree.insert(prompt);
        }
    }

    /// Bytes of prompt text `target`'s tree represents.
    pub(crate) fn stored_bytes(&self, target: usize) -> u64 {
        self.tree(target)
            .map_or(0, |tree| (tree.index.len() * BLOCK_BYTES) as u64)
    }

    /// Blocks evicted from `target`'s tree since it was built.
    pub(crate) fn evictions(&self, target: usize) -> u64 {
        self.tree(target).map_or(0, |tree| tree.evictions)
    }

    /// Targets covered.
    pub(crate) fn len(&self) -> usize {
        self.trees.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(seed: u64, bytes: usize) -> String {
        // Distinct, deterministic text: every 8 bytes encode a counter.
        let mut s = String::with_capacity(bytes + 16);
        let mut i = seed.wrapping_mul(1_000_003);
        while s.len() < bytes {
            s.push_str(&format!("{:08x}", i as u32));
            i = i.wrapping_add(1);
        }
        s.truncate(bytes);
        s
    }

    #[test]
    fn prompt_blocks_cut_whole_blocks_and_cap_at_the_prompt_bound() {
        assert_eq!(PromptBlocks::of("").len(), 0);
        assert_eq!(PromptBlocks::of(&"a".repeat(63)).len(), 0);
        assert_eq!(PromptBlocks::of(&"a".repeat(64)).len(), 1);
        assert_eq!(PromptBlocks::of(&"a".repeat(200)).len(), 3);
        assert_eq!(PromptBlocks::of(&"a".repeat(100_000)).len(), MAX_BLOCKS);
    }

    #[test]
    fn block_hashes_name_the_whole_prefix_not_just_the_block() {
        // Same second block, different first block: different hashes.
        let a = PromptBlocks::of(&format!("{}{}", "x".repeat(64), "y".repeat(64)));
        let b = PromptBlocks::of(&format!("{}{}", "z".repeat(64), "y".repeat(64)));
        assert_ne!(a.hashes[1], b.hashes[1]);
    }

    #[test]
    fn a_learned_prompt_matches_whole_and_its_extensions_match_its_blocks() {
        let trees = PrefixTrees::new(2, 1 << 20);
        let turn1 = text(1, 1_000);
        trees.insert(0, &PromptBlocks::of(&turn1));
        assert_eq!(trees.matched_blocks(0, &PromptBlocks::of(&turn1)), 15);
        let turn2 = format!("{turn1}{}", text(2, 500));
        let blocks = PromptBlocks::of(&turn2);
        assert_eq!(trees.matched_blocks(0, &blocks), 15);
        assert_eq!(trees.matched_blocks(1, &blocks), 0);
        assert!((blocks.matched_fraction(15) - 960.0 / 1_500.0).abs() < 1e-12);
    }

    #[test]
    fn a_diverging_prompt_matches_up_to_the_divergence() {
        let trees = PrefixTrees::new(1, 1 << 20);
        let shared = text(7, 640);
        trees.insert(0, &PromptBlocks::of(&format!("{shared}{}", text(8, 640))));
        let other = PromptBlocks::of(&format!("{shared}{}", text(9, 640)));
        assert_eq!(trees.matched_blocks(0, &other), 10);
    }

    #[test]
    fn prefix_tree_memory_bound_is_respected_and_evictions_counted() {
        let bound = 10 * BLOCK_BYTES;
        let trees = PrefixTrees::new(1, bound);
        // 20 unrelated 2-block prompts: 40 blocks through a 10-block tree.
        for i in 0..20 {
            trees.insert(0, &PromptBlocks::of(&text(100 + i, 2 * BLOCK_BYTES)));
            assert!(trees.stored_bytes(0) <= bound as u64);
        }
        assert_eq!(trees.stored_bytes(0), bound as u64);
        assert_eq!(trees.evictions(0), 30);
        // The five most recent prompts survive whole; the oldest are gone.
        for i in 15..20 {
            let p = PromptBlocks::of(&text(100 + i, 2 * BLOCK_BYTES));
            assert_eq!(trees.matched_blocks(0, &p), 2, "prompt {i}");
        }
        let oldest = PromptBlocks::of(&text(100, 2 * BLOCK_BYTES));
        assert_eq!(trees.matched_blocks(0, &oldest), 0);
    }

    #[test]
    fn eviction_removes_leaves_first_so_a_shared_prefix_survives() {
        // A 4-block shared prefix, then many different 1-block tails, in a
        // 8-block tree: the prefix is touched by every prompt and stays.
        let trees = PrefixTrees::new(1, 8 * BLOCK_BYTES);
        let shared = text(1, 4 * BLOCK_BYTES);
        for i in 0..50 {
            let p = format!("{shared}{}", text(1_000 + i, BLOCK_BYTES));
            trees.insert(0, &PromptBlocks::of(&p));
        }
        let fresh = PromptBlocks::of(&format!("{shared}{}", text(9_999, BLOCK_BYTES)));
        assert_eq!(trees.matched_blocks(0, &fresh), 4);
        assert!(trees.evictions(0) > 0);
    }

    #[test]
    fn a_prompt_longer_than_the_tree_keeps_its_leading_blocks() {
        let trees = PrefixTrees::new(1, 4 * BLOCK_BYTES);
        let long = PromptBlocks::of(&text(3, 10 * BLOCK_BYTES));
        trees.insert(0, &long);
        assert_eq!(trees.matched_blocks(0, &long), 4);
        assert_eq!(trees.evictions(0), 0);
    }

    #[test]
    fn a_zero_byte_bound_learns_nothing() {
        let trees = PrefixTrees::new(1, 0);
        let p = PromptBlocks::of(&text(3, 4 * BLOCK_BYTES));
        trees.insert(0, &p);
        assert_eq!(trees.matched_blocks(0, &p), 0);
        assert_eq!(trees.stored_bytes(0), 0);
    }

    #[test]
    fn unknown_targets_match_nothing_and_learn_nothing() {
        let trees = PrefixTrees::new(1, 1 << 20);
        let p = PromptBlocks::of(&text(3, 4 * BLOCK_BYTES));
        trees.insert(5, &p);
        assert_eq!(trees.matched_blocks(5, &p), 0);
        assert_eq!(trees.stored_bytes(5), 0);
        assert_eq!(trees.len(), 1);
    }
}
