//! LoRA adapter affinity: prefer a target that plausibly still holds the
//! requested adapter resident (#853, after llm-d).
//!
//! Residency is learned from traffic: rolter cannot see which adapters an
//! engine holds. Each target keeps an LRU set of the adapters it recently
//! served, as many as it can hold at once (its `TargetSpec::max_adapters`,
//! mirroring vLLM's `--max-loras`), so the set tracks what the engine
//! plausibly still has loaded rather than everything it ever served — an
//! unbounded set would steer confidently to a target that went cold long
//! ago. Adapters are stored as the xxh3 hash of their name.
//!
//! A target holding the request's adapter scores 1, others 0. When no
//! eligible target holds it — a cold adapter — or the request names none
//! (`ctx.adapter` is set only on passthrough group routes), every target
//! scores 0: neutral, not a penalty, so the rest of the stack decides.

use std::sync::{Mutex, PoisonError};

use crate::hashing::key_hash;
use crate::{Candidates, RouteContext, Scorer};

/// Scores eligible targets by adapter residency; see the module
/// documentation.
#[derive(Debug)]
pub struct AdapterAffinityScorer {
    // One Mutex over every target's set: scoring scans each eligible
    // target's handful of hashes under it, observing moves one entry; no
    // I/O, no callbacks, and any state a panic leaves is a valid set.
    sets: Mutex<Box<[AdapterSet]>>,
}

/// One target's recently served adapters, least recently served first.
#[derive(Debug)]
struct AdapterSet {
    capacity: usize,
    held: Vec<u64>,
    evictions: u64,
}

impl AdapterSet {
    fn holds(&self, adapter: u64) -> bool {
        self.held.contains(&adapter)
    }

    fn serve(&mut self, adapter: u64) {
        if self.capacity == 0 {
            return;
        }
        if let Some(at) = self.held.iter().position(|&a| a == adapter) {
            self.held.remove(at);
        } else if self.held.len() == self.capacity {
            self.held.remove(0);
            self.evictions += 1;
        }
        self.held.push(adapter);
        debug_assert!(self.held.len() <= self.capacity);
    }
}

impl AdapterAffinityScorer {
    /// One adapter capacity per target, in target order (each target's
    /// `max_adapters`); a target past the end holds nothing.
    pub fn new(max_adapters: &[usize]) -> Self {
        let sets = max_adapters
            .iter()
            .map(|&capacity| AdapterSet {
                capacity,
                held: Vec::with_capacity(capacity.min(64)),
                evictions: 0,
            })
            .collect();
        Self {
            sets: Mutex::new(sets),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Box<[AdapterSet]>> {
        self.sets.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adapters `target` is believed to hold.
    pub fn held(&self, target: usize) -> usize {
        self.lock().get(target).map_or(0, |set| set.held.len())
    }

    /// Adapters dropped from `target`'s set to respect its capacity.
    pub fn evictions(&self, target: usize) -> u64 {
        self.lock().get(target).map_or(0, |set| set.evictions)
    }
}

impl Scorer for AdapterAffinityScorer {
    fn name(&self) -> &'static str {
        "adapter"
    }

    fn score(&self, ctx: &RouteContext, targets: Candidates<'_>, scores: &mut [f64]) {
        scores.fill(0.0);
        let Some(adapter) = ctx.adapter else {
            return;
        };
        let adapter = key_hash(adapter);
        let sets = self.lock();
        for (i, score) in scores.iter_mut().enumerate() {
            if targets.eligible(i) && sets.get(i).is_some_and(|set| set.holds(adapter)) {
                *score = 1.0;
            }
        }
    }

    fn observe(&self, target: usize, ctx: &RouteContext) {
        let Some(adapter) = ctx.adapter else {
            return;
        };
        let adapter = key_hash(adapter);
        if let Some(set) = self.lock().get_mut(target) {
            set.serve(adapter);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scorers::testing::{is_neutral, scores};

    fn ctx(adapter: Option<&str>) -> RouteContext<'_> {
        RouteContext {
            adapter,
            ..RouteContext::default()
        }
    }

    #[test]
    fn a_target_holding_the_adapter_scores_one() {
        let scorer = AdapterAffinityScorer::new(&[8, 8, 8]);
        scorer.observe(2, &ctx(Some("sql-lora")));
        let got = scores(&scorer, &ctx(Some("sql-lora")), &[0; 3], &|_| true);
        assert_eq!(got, [0.0, 0.0, 1.0]);
    }

    #[test]
    fn a_cold_adapter_or_none_is_neutral() {
        let scorer = AdapterAffinityScorer::new(&[8, 8]);
        scorer.observe(0, &ctx(Some("a")));
        assert!(is_neutral(&scores(
            &scorer,
            &ctx(Some("b")),
            &[0; 2],
            &|_| true
        )));
        assert!(is_neutral(&scores(&scorer, &ctx(None), &[0; 2], &|_| true)));
        // Held only by an ineligible target: cold among the candidates.
        assert!(is_neutral(&scores(
            &scorer,
            &ctx(Some("a")),
            &[0; 2],
            &|i| i == 1
        )));
    }

    #[test]
    fn adapter_set_evicts_the_least_recently_served_past_max_adapters() {
        let scorer = AdapterAffinityScorer::new(&[2]);
        scorer.observe(0, &ctx(Some("a")));
        scorer.observe(0, &ctx(Some("b")));
        scorer.observe(0, &ctx(Some("a"))); // "b" is now the least recent
        scorer.observe(0, &ctx(Some("c")));
        assert_eq!(scorer.held(0), 2);
        assert_eq!(scorer.evictions(0), 1);
        let holds = |name| scores(&scorer, &ctx(Some(name)), &[0], &|_| true)[0] == 1.0;
        assert!(holds("a") && holds("c") && !holds("b"));
    }

    #[test]
    fn each_target_has_its_own_capacity() {
        let scorer = AdapterAffinityScorer::new(&[1, 3]);
        for name in ["a", "b", "c"] {
            scorer.observe(0, &ctx(Some(name)));
            scorer.observe(1, &ctx(Some(name)));
        }
        assert_eq!((scorer.held(0), scorer.held(1)), (1, 3));
        assert_eq!((scorer.evictions(0), scorer.evictions(1)), (2, 0));
    }

    #[test]
    fn requests_without_an_adapter_teach_nothing() {
        let scorer = AdapterAffinityScorer::new(&[8]);
        scorer.observe(0, &ctx(None));
        assert_eq!(scorer.held(0), 0);
    }
}
