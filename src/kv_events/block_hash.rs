//! rolter's own chained hash of token blocks.
//!
//! The engine's block hash (sha256 over a pickled tuple, salted per process)
//! cannot be reproduced outside the engine, so rolter hashes token blocks
//! itself, the way routers that consume vLLM's KV events do (docs/design/wire-formats.md):
//! `h_i = H(h_{i-1}, tokens of block i)` over the FULL blocks of
//! `block_size` tokens, starting from a fixed root. A partial last block is
//! not hashed: the engine caches only full blocks. The index applies this to
//! a `BlockStored` event's tokens (continuing from its parent's hash) and
//! the request side to the caller's token ids, so equal prefixes meet.
//!
//! `H` is xxh3-64 seeded with the previous hash, over the block's token ids
//! as little-endian u32s. The root is [`ROOT_SEED`] for the base model;
//! blocks of a LoRA adapter start from [`adapter_root`] (the engine keys
//! them apart too), and blocks carrying extra keys the request cannot know
//! (multimodal inputs, a cache salt) are moved off every request's chain by
//! [`with_extra_keys`].

use xxhash_rust::xxh3::{xxh3_64_with_seed, Xxh3};

/// The hash every base-model chain starts from ("rolterkv").
pub const ROOT_SEED: u64 = 0x726f_6c74_6572_6b76;
/// Seeds the root of a LoRA adapter's chains.
const ADAPTER_SEED: u64 = 0x6b76_2d6c_6f72_6121; // "kv-lora!"
/// Tokens hashed in one go from a stack buffer.
const CHUNK_TOKENS: usize = 64;

/// The chained hashes of the full blocks of `token_ids`, from the root.
pub fn block_hashes(token_ids: &[u32], block_size: usize) -> BlockHashes<'_> {
    block_hashes_from(ROOT_SEED, token_ids, block_size)
}

/// The chained hashes of the full blocks of `token_ids`, continuing from
/// `parent` (a block's hash, or a root).
pub fn block_hashes_from(parent: u64, token_ids: &[u32], block_size: usize) -> BlockHashes<'_> {
    BlockHashes {
        parent,
        blocks: if block_size == 0 {
            token_ids[..0].chunks_exact(1)
        } else {
            token_ids.chunks_exact(block_size)
        },
    }
}

/// The root of an adapter's chains: blocks computed with a LoRA adapter
/// are not the base model's, even over the same tokens.
pub fn adapter_root(name: &str) -> u64 {
    xxh3_64_with_seed(name.as_bytes(), ADAPTER_SEED)
}

/// The hash of a block whose engine hash also covers extra keys (their
/// digest): no request's chain reaches it, nor any block chained after it.
pub fn with_extra_keys(hash: u64, extra_keys_digest: u64) -> u64 {
    xxh3_64_with_seed(&extra_keys_digest.to_le_bytes(), hash)
}

/// `H(parent, block)`.
pub fn chain(parent: u64, block: &[u32]) -> u64 {
    let mut buffer = [0u8; CHUNK_TOKENS * 4];
    if block.len() <= CHUNK_TOKENS {
        let bytes = fill(&mut buffer, block);
        return xxh3_64_with_seed(bytes, parent);
    }
    let mut hasher = Xxh3::with_seed(parent);
    for chunk in block.chunks(CHUNK_TOKENS) {
        hasher.update(fill(&mut buffer, chunk));
    }
    hasher.digest()
}

fn fill<'a>(buffer: &'a mut [u8; CHUNK_TOKENS * 4], tokens: &[u32]) -> &'a [u8] {
    debug_assert!(tokens.len() <= CHUNK_TOKENS);
    for (slot, token) in buffer.chunks_exact_mut(4).zip(tokens) {
        slot.copy_from_slice(&token.to_le_bytes());
    }
    &buffer[..tokens.len() * 4]
}

/// Iterator over chained block hashes; see [`block_hashes`].
#[derive(Clone, Debug)]
pub struct BlockHashes<'a> {
    parent: u64,
    blocks: std::slice::ChunksExact<'a, u32>,
}

impl Iterator for BlockHashes<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        let block = self.blocks.next()?;
        self.parent = chain(self.parent, block);
        Some(self.parent)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.blocks.size_hint()
    }
}

impl ExactSizeIterator for BlockHashes<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_full_blocks_are_hashed() {
        let tokens: Vec<u32> = (0..37).collect();
        assert_eq!(block_hashes(&tokens, 16).count(), 2);
        assert_eq!(block_hashes(&tokens[..15], 16).count(), 0);
        assert_eq!(
            block_hashes(&tokens, 0).count(),
            0,
            "a zero block size hashes nothing"
        );
        assert_eq!(block_hashes(&tokens, 16).len(), 2);
    }

    #[test]
    fn equal_prefixes_share_hashes_and_the_chain_depends_on_history() {
        let a: Vec<u32> = (0..48).collect();
        let mut b = a.clone();
        b[40] = 999; // third block differs
        let ha: Vec<u64> = block_hashes(&a, 16).collect();
        let hb: Vec<u64> = block_hashes(&b, 16).collect();
        assert_eq!(ha[..2], hb[..2]);
        assert_ne!(ha[2], hb[2]);
        // The same block after a different history hashes differently.
        let mut c = a.clone();
        c[0] = 7;
        let hc: Vec<u64> = block_hashes(&c, 16).collect();
        assert_ne!(ha[1], hc[1]);
        assert_ne!(ha[0], ha[1], "different blocks, different hashes");
    }

    #[test]
    fn continuing_from_a_parent_equals_hashing_the_whole_prefix() {
        let tokens: Vec<u32> = (100..164).collect();
        let whole: Vec<u64> = block_hashes(&tokens, 16).collect();
        let tail: Vec<u64> = block_hashes_from(whole[1], &tokens[32..], 16).collect();
        assert_eq!(tail, whole[2..]);
    }

    #[test]
    fn the_hash_is_fixed_across_processes() {
        // A regression guard: the chain is rolter's contract with itself
        // (indexes built before an upgrade meet requests hashed after it).
        let tokens: Vec<u32> = (0..16).collect();
        let first = block_hashes(&tokens, 16).next().unwrap();
        let mut bytes = Vec::new();
        for t in &tokens {
            bytes.extend_from_slice(&t.to_le_bytes());
        }
        assert_eq!(first, xxh3_64_with_seed(&bytes, ROOT_SEED));
    }

    #[test]
    fn long_blocks_hash_like_one_buffer() {
        let tokens: Vec<u32> = (0..300).map(|t| t * 7).collect();
        let mut bytes = Vec::new();
        for t in &tokens[..200] {
            bytes.extend_from_slice(&t.to_le_bytes());
        }
        assert_eq!(chain(42, &tokens[..200]), xxh3_64_with_seed(&bytes, 42));
    }

    #[test]
    fn adapters_and_extra_keys_leave_the_base_chain() {
        let tokens: Vec<u32> = (0..16).collect();
        let base = block_hashes(&tokens, 16).next().unwrap();
        let lora = block_hashes_from(adapter_root("sql"), &tokens, 16)
            .next()
            .unwrap();
        assert_ne!(base, lora);
        assert_ne!(adapter_root("sql"), adapter_root("chat"));
        assert_ne!(with_extra_keys(base, 1), base);
        assert_ne!(with_extra_keys(base, 1), with_extra_keys(base, 2));
    }
}
