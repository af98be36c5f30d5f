//! Scorers: the pluggable parts of the `pipeline` family of strategies.
//!
//! A pipeline filters the eligible targets, asks each of its scorers for a
//! score per target, sums them with the scorers' weights and picks the
//! argmax (ties at random). Every cost, latency or cache signal becomes a
//! scorer; a strategy such as `precise_cache_aware` is a named stack of them.

use crate::RouteContext;

/// One signal of a pipeline.
pub trait Scorer: Send + Sync {
    /// A short fixed name, for reports ("session", "weight", "load", ...).
    fn name(&self) -> &'static str;

    /// Writes this scorer's score, in [0, 1] (higher is better), for every
    /// eligible target `i` into `scores[i]`; entries of ineligible targets
    /// are ignored by the caller and must not influence the others. A
    /// scorer with nothing to say writes the same value everywhere (neutral:
    /// an equal contribution cannot move the argmax). `scores.len()` is the
    /// number of targets.
    fn score(&self, ctx: &RouteContext, targets: Candidates<'_>, scores: &mut [f64]);

    /// Learns that `target` served the request described by `ctx`.
    fn observe(&self, _target: usize, _ctx: &RouteContext) {}
}

/// The targets a scorer scores: what each carries in flight, and which of
/// them may be picked.
#[derive(Clone, Copy)]
pub struct Candidates<'a> {
    /// `loads[i]` is target `i`'s in-flight count.
    pub loads: &'a [u64],
    is_eligible: &'a dyn Fn(usize) -> bool,
}

impl<'a> Candidates<'a> {
    pub fn new(loads: &'a [u64], is_eligible: &'a dyn Fn(usize) -> bool) -> Self {
        Candidates { loads, is_eligible }
    }

    /// Whether target `i` may be picked.
    pub fn eligible(&self, i: usize) -> bool {
        (self.is_eligible)(i)
    }

    /// The eligibility predicate itself, for a helper that reads no load.
    pub fn predicate(&self) -> &'a dyn Fn(usize) -> bool {
        self.is_eligible
    }
}
