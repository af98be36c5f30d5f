//! Hashing shared by the learning strategies and scorers.
//!
//! Learned state (session pins, adapter sets, prefix-tree blocks) is keyed by
//! the xxh3 hash of the text it is about, not by the text: storing a `u64`
//! needs no allocation on the request path, and a 64-bit collision between
//! two live keys is far rarer than anything routing could notice (a collision
//! only misroutes affinity, never correctness). Maps over such keys use
//! [`Prehashed`], which passes the key through instead of hashing it again.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Seed for keys of learned state. A constant, so every gateway node and
/// every restart derives the same key from the same text.
const KEY_HASH_SEED: u64 = 0x726f_6c74_6572_2d6b; // "rolter-k"

/// The key under which learned state about `text` is stored.
pub(crate) fn key_hash(text: &str) -> u64 {
    xxh3_64_with_seed(text.as_bytes(), KEY_HASH_SEED)
}

/// A `HashMap` whose keys are already well-mixed hashes.
pub(crate) type PrehashedMap<V> = HashMap<u64, V, BuildHasherDefault<Prehashed>>;

/// A [`Hasher`] for keys that are xxh3 outputs already: it returns the key
/// itself. The table's bucket and control bits then come straight from xxh3,
/// which mixes every input bit into every output bit.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used by `PrehashedMap`; fold anything else in so
        // the hasher stays correct if a key type changes.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, key: u64) {
        self.0 = key;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_hash_is_stable_and_distinguishes_texts() {
        assert_eq!(key_hash("session-1"), key_hash("session-1"));
        assert_ne!(key_hash("session-1"), key_hash("session-2"));
    }

    #[test]
    fn prehashed_map_finds_what_it_stored() {
        let mut map: PrehashedMap<u32> = PrehashedMap::default();
        for i in 0..1_000u32 {
            map.insert(key_hash(&i.to_string()), i);
        }
        for i in 0..1_000u32 {
            assert_eq!(map.get(&key_hash(&i.to_string())), Some(&i));
        }
    }
}
