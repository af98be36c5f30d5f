//! Prefix affinity: prefer the target that has served the longest prefix of
//! this conversation, whose engine likely still holds its KV.
//!
//! Each target has an approximate prefix tree (see `prefix_tree.rs`, shared
//! with `cache_aware`), learned from the prompts `observe` reports it served.
//! The score is the matched fraction of the (bounded) prompt: 1 when a
//! target has served the whole prompt before, 0.5 when half of it. An empty
//! prompt, or one no target has served, scores 0 everywhere (neutral).
//!
//! Unlike `cache_aware` there is no load guard here: in a pipeline, load is
//! its own scorer, and the weights decide how much affinity is worth.

use crate::prefix_tree::{PrefixTrees, PromptBlocks};
use crate::{Candidates, RouteContext, Scorer};

/// Scores eligible targets by matched prompt prefix; see the module
/// documentation.
#[derive(Debug)]
pub struct PrefixAffinityScorer {
    trees: PrefixTrees,
}

impl PrefixAffinityScorer {
    /// Prompt text remembered per target by [`PrefixAffinityScorer::new`]:
    /// 2 MiB, the same default as `cache_aware`.
    pub const DEFAULT_MAX_BYTES_PER_TARGET: usize = 2 * 1024 * 1024;

    /// Prefix trees for `targets` targets, each bounded to
    /// [`Self::DEFAULT_MAX_BYTES_PER_TARGET`].
    pub fn new(targets: usize) -> Self {
        Self::with_max_bytes(targets, Self::DEFAULT_MAX_BYTES_PER_TARGET)
    }

    /// Prefix trees for `targets` targets, each representing at most
    /// `max_bytes_per_target` bytes of prompt text (least recently used
    /// blocks evicted first).
    pub fn with_max_bytes(targets: usize, max_bytes_per_target: usize) -> Self {
        Self {
            trees: PrefixTrees::new(targets, max_bytes_per_target),
        }
    }

    /// Bytes of prompt text remembered for `target`.
    pub fn learned_bytes(&self, target: usize) -> u64 {
        self.trees.stored_bytes(target)
    }

    /// Blocks evicted from `target`'s tree since the scorer was built.
    pub fn evictions(&self, target: usize) -> u64 {
        self.trees.evictions(target)
    }
}

impl Scorer for PrefixAffinityScorer {
    fn name(&self) -> &'static str {
        "prefix"
    }

    fn score(&self, ctx: &RouteContext, targets: Candidates<'_>, scores: &mut [f64]) {
        scores.fill(0.0);
        let prompt = PromptBlocks::of(ctx.prompt);
        if prompt.len() == 0 {
            return;
        }
        for (i, score) in scores.iter_mut().enumerate() {
            if targets.eligible(i) {
                *score = prompt
                    .matched_fraction(self.trees.matched_blocks(i, &prompt))
                    .min(1.0);
            }
        }
    }

    fn observe(&self, target: usize, ctx: &RouteContext) {
        self.trees.insert(target, &PromptBlocks::of(ctx.prompt));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scorers::testing::{is_neutral, scores};

    fn ctx(prompt: &str) -> RouteContext<'_> {
        RouteContext {
            prompt,
            prompt_len: prompt.len(),
            ..RouteContext::default()
        }
    }

    #[test]
    fn the_target_that_served_the_prompt_scores_its_matched_fraction() {
        let scorer = PrefixAffinityScorer::new(3);
        let system = "s".repeat(1_024);
        scorer.observe(1, &ctx(&format!("{system}first question")));
        let next = format!("{system}{}", "q".repeat(1_024));
        let got = scores(&scorer, &ctx(&next), &[0; 3], &|_| true);
        assert_eq!(got, [0.0, 0.5, 0.0]);
    }

    #[test]
    fn an_unseen_or_empty_prompt_is_neutral() {
        let scorer = PrefixAffinityScorer::new(2);
        scorer.observe(0, &ctx(&"a".repeat(512)));
        assert!(is_neutral(&scores(
            &scorer,
            &ctx(&"b".repeat(512)),
            &[0; 2],
            &|_| true
        )));
        assert!(is_neutral(&scores(&scorer, &ctx(""), &[0; 2], &|_| true)));
    }

    #[test]
    fn learned_bytes_are_bounded_per_target() {
        let scorer = PrefixAffinityScorer::with_max_bytes(1, 256);
        for i in 0..10 {
            scorer.observe(0, &ctx(&i.to_string().repeat(512)));
        }
        assert_eq!(scorer.learned_bytes(0), 256);
        assert!(scorer.evictions(0) > 0);
    }
}
