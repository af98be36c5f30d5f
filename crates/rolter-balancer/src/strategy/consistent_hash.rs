//! consistent_hash: a hash ring keyed by session, else by conversation.
//!
//! Consistent hashing (Karger et al., "Consistent Hashing and Random Trees",
//! STOC 1997) with virtual nodes as in Dynamo (DeCandia et al., 2007) and
//! libketama: every target is placed on a 64-bit ring at
//! [`ConsistentHash::VNODES_PER_TARGET`] pseudo-random points, and a request
//! goes to the owner of the first point clockwise from its key. Pinning a
//! session (or a conversation) to one target is what lets the engine reuse
//! that conversation's KV cache.
//!
//! A point's position is the xxh3 hash of the target's stable identity
//! (`provider-slug/upstream-model`) and the vnode number, never of its index.
//! So reordering targets moves no key, and adding a target moves only the keys
//! whose nearest point is now one of the newcomer's — about `1/(n+1)` of them;
//! removing one moves only the keys it owned. A hundred points per target keep
//! each target's share of the ring within roughly ±10% of `1/n`.
//!
//! The key is the `x-session-id` hashed with the same fixed seed, else the
//! gateway's digest of the whole conversation (or raw body), else — when the
//! gateway had neither — the hash of the bounded prompt text. The hash seed is
//! a constant, so every gateway node, and every restart, builds the same ring
//! and sends a session to the same target.
//!
//! An ineligible owner is skipped by walking on clockwise to the next point
//! whose target is eligible. The walk is bounded by the ring's length, and it
//! moves only the keys the ineligible target owned: the rest of the ring is
//! undisturbed while a target is parked or tried.

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::rng::mix64;
use crate::{Candidates, LoadBalancer, RouteContext};

/// Fixed seed for ring positions and session keys. Changing it remaps every
/// session in the fleet, and nodes running different values disagree.
const RING_HASH_SEED: u64 = 0x726f_6c74_6572_2d63; // "rolter-c"

/// Separates a target's identity from its vnode number in the hashed bytes.
/// `0xff` never occurs in UTF-8, so no id can end in something that looks
/// like another id's vnode suffix.
const VNODE_SEPARATOR: u8 = 0xff;

/// Hash-ring selection; see the module documentation.
#[derive(Debug)]
pub struct ConsistentHash {
    /// Point positions, ascending. Kept apart from `owners` so the binary
    /// search reads only positions.
    positions: Box<[u64]>,
    /// `owners[k]` is the target index owning `positions[k]`.
    owners: Box<[u32]>,
}

impl ConsistentHash {
    /// Virtual nodes placed on the ring per target (docs/design/balancer.md).
    pub const VNODES_PER_TARGET: u32 = 100;

    /// A ring over targets with the given stable identities, in target order.
    ///
    /// Targets sharing an identity share their points; the lower index owns
    /// them.
    pub fn new<S: AsRef<str>>(ids: &[S]) -> Self {
        let mut points: Vec<(u64, u32)> =
            Vec::with_capacity(ids.len() * Self::VNODES_PER_TARGET as usize);
        let mut bytes = Vec::new();
        for (index, id) in ids.iter().enumerate() {
            let owner = u32::try_from(index).expect("a route has fewer than 2^32 targets");
            for vnode in 0..Self::VNODES_PER_TARGET {
                bytes.clear();
                bytes.extend_from_slice(id.as_ref().as_bytes());
                bytes.push(VNODE_SEPARATOR);
                bytes.extend_from_slice(&vnode.to_le_bytes());
                points.push((xxh3_64_with_seed(&bytes, RING_HASH_SEED), owner));
            }
        }
        // Ties between positions are broken by identity, not index, so that
        // even a 64-bit collision cannot make the ring depend on target order.
        points.sort_unstable_by(|a, b| {
            let id = |owner: u32| ids[owner as usize].as_ref();
            (a.0, id(a.1), a.1).cmp(&(b.0, id(b.1), b.1))
        });
        Self {
            positions: points.iter().map(|p| p.0).collect(),
            owners: points.iter().map(|p| p.1).collect(),
        }
    }

    /// The request's position on the ring.
    fn key(ctx: &RouteContext) -> u64 {
        match ctx.session_key {
            Some(session) => xxh3_64_with_seed(session.as_bytes(), RING_HASH_SEED),
            // The digest is the gateway's; remixing it (a bijection, so no
            // two digests collide) spreads keys over the ring even if that
            // digest is weak in its high bits, which the binary search reads.
            None if ctx.prompt_digest != 0 => mix64(ctx.prompt_digest),
            None => xxh3_64_with_seed(ctx.prompt.as_bytes(), RING_HASH_SEED),
        }
    }
}

impl LoadBalancer for ConsistentHash {
    fn name(&self) -> &'static str {
        "consistent_hash"
    }

    fn pick_eligible(&self, ctx: &RouteContext, targets: Candidates<'_>) -> Option<usize> {
        let key = Self::key(ctx);
        let start = self.positions.partition_point(|&p| p < key);
        let len = self.owners.len();
        (start..len)
            .chain(0..start)
            .map(|k| self.owners[k] as usize)
            .find(|&target| targets.eligible(target))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("provider-{i}/model-x")).collect()
    }

    fn session(k: usize) -> String {
        format!("session-{k}")
    }

    /// Which target identity each of `keys` sessions lands on.
    fn owners(ids: &[String], keys: usize) -> Vec<String> {
        let lb = ConsistentHash::new(ids);
        (0..keys)
            .map(|k| {
                let key = session(k);
                let ctx = RouteContext {
                    session_key: Some(&key),
                    ..RouteContext::default()
                };
                ids[lb.pick(&ctx, &vec![0; ids.len()]).unwrap()].clone()
            })
            .collect()
    }

    fn moved(before: &[String], after: &[String]) -> usize {
        before.iter().zip(after).filter(|(a, b)| a != b).count()
    }

    #[test]
    fn consistent_hash_places_100_vnodes_per_target() {
        let lb = ConsistentHash::new(&ids(7));
        assert_eq!(lb.positions.len(), 700);
        assert!(lb.positions.windows(2).all(|w| w[0] <= w[1]));
        for target in 0..7 {
            assert_eq!(lb.owners.iter().filter(|&&o| o == target).count(), 100);
        }
    }

    #[test]
    fn consistent_hash_adding_a_target_moves_about_one_in_n_plus_one_keys() {
        const KEYS: usize = 10_000;
        for n in [2, 5, 10, 40] {
            let before = owners(&ids(n), KEYS);
            let after = owners(&ids(n + 1), KEYS);
            let expected = KEYS as f64 / (n + 1) as f64;
            let got = moved(&before, &after) as f64;
            assert!(
                (0.5 * expected..=1.6 * expected).contains(&got),
                "n = {n}: moved {got}, expected about {expected}"
            );
            // Every moved key moved to the newcomer.
            let newcomer = &ids(n + 1)[n];
            for (a, b) in before.iter().zip(&after) {
                assert!(a == b || b == newcomer, "{a} -> {b}");
            }
        }
    }

    #[test]
    fn consistent_hash_reordering_targets_moves_no_key() {
        let forward = ids(12);
        let mut shuffled = forward.clone();
        shuffled.reverse();
        shuffled.swap(0, 5);
        assert_eq!(owners(&forward, 10_000), owners(&shuffled, 10_000));
    }

    #[test]
    fn consistent_hash_same_session_goes_to_the_same_target() {
        let a = ConsistentHash::new(&ids(9));
        let b = ConsistentHash::new(&ids(9));
        let loads = [0; 9];
        for k in 0..1_000 {
            let key = session(k);
            let ctx = RouteContext {
                session_key: Some(&key),
                prompt: "whatever the prompt says",
                prompt_digest: k as u64 + 1,
                ..RouteContext::default()
            };
            let first = a.pick(&ctx, &loads);
            assert_eq!(a.pick(&ctx, &loads), first);
            assert_eq!(b.pick(&ctx, &loads), first, "a second node agrees");
        }
    }

    #[test]
    fn consistent_hash_session_key_outranks_the_prompt_digest() {
        let lb = ConsistentHash::new(&ids(16));
        let loads = [0; 16];
        let pinned = |digest: u64| {
            lb.pick(
                &RouteContext {
                    session_key: Some("one-user"),
                    prompt_digest: digest,
                    ..RouteContext::default()
                },
                &loads,
            )
        };
        let first = pinned(1);
        assert!((2..200).all(|d| pinned(d) == first));
    }

    #[test]
    fn consistent_hash_without_session_keys_by_conversation_digest() {
        let lb = ConsistentHash::new(&ids(16));
        let loads = [0; 16];
        let by_digest = |digest: u64, prompt: &str| {
            lb.pick(
                &RouteContext {
                    prompt,
                    prompt_digest: digest,
                    ..RouteContext::default()
                },
                &loads,
            )
            .unwrap()
        };
        // The digest, not the bounded text, decides.
        assert_eq!(by_digest(77, "hello"), by_digest(77, "goodbye"));
        let mut seen = [false; 16];
        for d in 1..2_000 {
            seen[by_digest(d, "same text")] = true;
        }
        assert!(seen.iter().all(|&s| s), "digests spread over every target");
    }

    #[test]
    fn consistent_hash_without_any_key_hashes_the_prompt_text() {
        let lb = ConsistentHash::new(&ids(16));
        let loads = [0; 16];
        let by_prompt = |prompt: &str| {
            lb.pick(
                &RouteContext {
                    prompt,
                    ..RouteContext::default()
                },
                &loads,
            )
            .unwrap()
        };
        assert_eq!(by_prompt("tell me a story"), by_prompt("tell me a story"));
        let mut seen = [false; 16];
        for k in 0..2_000 {
            seen[by_prompt(&format!("prompt {k}"))] = true;
        }
        assert!(seen.iter().all(|&s| s), "prompts spread over every target");
    }

    #[test]
    fn consistent_hash_spreads_keys_evenly() {
        let n = 10;
        let got = owners(&ids(n), 10_000);
        for id in ids(n) {
            let share = got.iter().filter(|o| **o == id).count();
            assert!((600..1_400).contains(&share), "{id}: {share}");
        }
    }

    #[test]
    fn consistent_hash_ineligible_target_moves_only_its_own_keys() {
        let targets = ids(8);
        let lb = ConsistentHash::new(&targets);
        let loads = [0; 8];
        for k in 0..5_000 {
            let key = session(k);
            let ctx = RouteContext {
                session_key: Some(&key),
                ..RouteContext::default()
            };
            let home = lb.pick(&ctx, &loads).unwrap();
            let without_3 = lb
                .pick_eligible(&ctx, Candidates::new(&loads, &|i| i != 3))
                .unwrap();
            assert_ne!(without_3, 3);
            if home != 3 {
                assert_eq!(without_3, home, "key {k} moved off an eligible target");
            }
        }
    }

    #[test]
    fn consistent_hash_walks_to_the_only_eligible_target_past_index_64() {
        let lb = ConsistentHash::new(&ids(130));
        let loads = [0; 130];
        for k in 0..200 {
            let key = session(k);
            let ctx = RouteContext {
                session_key: Some(&key),
                ..RouteContext::default()
            };
            assert_eq!(
                lb.pick_eligible(&ctx, Candidates::new(&loads, &|i| i == 129)),
                Some(129)
            );
        }
    }

    #[test]
    fn consistent_hash_with_no_targets_or_nothing_eligible_picks_nothing() {
        let ctx = RouteContext {
            session_key: Some("s"),
            ..RouteContext::default()
        };
        let none: [&str; 0] = [];
        assert_eq!(ConsistentHash::new(&none).pick(&ctx, &[]), None);
        let lb = ConsistentHash::new(&ids(3));
        assert_eq!(
            lb.pick_eligible(&ctx, Candidates::new(&[0; 3], &|_| false)),
            None
        );
    }

    #[test]
    fn consistent_hash_ring_positions_are_stable_across_releases() {
        // The ring must not change between builds, or a rolling upgrade
        // splits every session between old and new nodes. Pin a few picks.
        let lb = ConsistentHash::new(&["openai/gpt-4o", "vllm-a/llama-3", "vllm-b/llama-3"]);
        let picks: Vec<usize> = ["alice", "bob", "carol", "dave", "erin", "frank"]
            .iter()
            .map(|s| {
                lb.pick(
                    &RouteContext {
                        session_key: Some(s),
                        ..RouteContext::default()
                    },
                    &[0; 3],
                )
                .unwrap()
            })
            .collect();
        assert_eq!(picks, PINNED_PICKS);
    }

    const PINNED_PICKS: [usize; 6] = [2, 2, 2, 0, 0, 1];
}
