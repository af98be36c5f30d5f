//! predicted_latency: rank targets by what this request is modelled to cost
//! on each of them.
//!
//! A per-target latency average is the wrong signal when requests differ in
//! size: a target that happened to serve the long prompts looks slow while
//! it is the emptiest box, and one with a deep queue looks fast right until
//! the queue is what the request joins. Each target's
//! [`LatencyModel`](crate::LatencyModel), kept by the gateway behind
//! [`TargetStatsView::predicted_latency_ms`], answers for *this* request
//! instead: the queue it would join (`loads[i]`, read before its own
//! increment, as the model learned it) and its own prompt size
//! ([`RouteContext::prompt_ktokens`]). #853, after llm-d.
//!
//! The strategy is a pipeline of two scorers:
//!
//! | scorer                     | weight | why                                   |
//! |----------------------------|--------|---------------------------------------|
//! | [`PredictedLatencyScorer`] | 1.0    | the signal                            |
//! | [`LoadScorer`]             | 0.25   | cold-model carrier, then tiebreaker   |
//!
//! Load stays in the stack because it carries the route while the models are
//! cold (the predicted scorer is neutral then, so the pick is exactly the
//! least-load pipeline's) and because, once they are warm, it breaks the ties
//! between targets the model rates equally — the common case on a
//! homogeneous fleet. Its weight is the 0.25 every "signal plus load" stack
//! uses (docs/design/defaults.md), and is small for a reason of its own here: the
//! prediction already prices the queue, so load only needs to decide where
//! the model's own noise (a few percent between identical targets) would.
//! Both scorers are ratios to the best candidate, so 0.25 lets load overturn
//! at most a 12.5 % predicted gap, and only between an idle and a busy
//! target.

use std::sync::Arc;

use crate::scorers::LoadScorer;
use crate::strategy::{BuildContext, Pipeline, WeightedScorer};
use crate::views::TargetStatsView;
use crate::{Candidates, RouteContext, Scorer};

/// Floor, in ms, of a prediction when ranking: keeps a model that predicts
/// zero (all coefficients clamped at 0) from dividing by it.
const MIN_PREDICTION_MS: f64 = 1.0;

/// Scores eligible targets by their predicted latency for this request.
///
/// A target with a prediction scores `best / predicted`, where `best` is the
/// shortest prediction among the eligible targets: the fastest scores 1, one
/// predicted twice as slow 0.5. A ratio rather than a min–max stretch so that
/// near-equal predictions stay near-equal scores and load can break the tie.
///
/// A target without a prediction (a cold model: fewer than 8 successful
/// samples) is unknown, not slow, and scores 1 — level with the best known
/// target, never above it. The model then has no say between the cold
/// targets and the best warm one, and load decides among them: a cold target
/// is not ranked on no evidence (it never outranks a target the model
/// favours), yet it is not starved either, since it takes traffic whenever it
/// is emptier than the best warm target, which is how it earns the samples
/// that make it predict. When no eligible target has a prediction, every one
/// scores 1 and the scorer is neutral: the route behaves exactly like least
/// load, so switching a route to `predicted_latency` moves no traffic on its
/// own.
pub struct PredictedLatencyScorer {
    stats: Arc<dyn TargetStatsView>,
}

impl PredictedLatencyScorer {
    /// A scorer reading predictions from `stats` (route target indices).
    pub fn new(stats: Arc<dyn TargetStatsView>) -> Self {
        Self { stats }
    }
}

impl Scorer for PredictedLatencyScorer {
    fn name(&self) -> &'static str {
        "predicted_latency"
    }

    fn score(&self, ctx: &RouteContext, targets: Candidates<'_>, scores: &mut [f64]) {
        let loads = targets.loads;
        let n = scores.len().min(loads.len());
        let ktokens = ctx.prompt_ktokens();
        // First pass: predictions into `scores` (NaN marks unknown, so no
        // scratch allocation), and the best one.
        let mut best = f64::INFINITY;
        for i in 0..n {
            if !targets.eligible(i) {
                continue;
            }
            scores[i] = match self.stats.predicted_latency_ms(i, loads[i], ktokens) {
                // A non-finite or negative prediction is a view's bug: unknown.
                Some(ms) if ms.is_finite() && ms >= 0.0 => {
                    let ms = ms.max(MIN_PREDICTION_MS);
                    best = best.min(ms);
                    ms
                }
                _ => f64::NAN,
            };
        }
        // Second pass: ratios to the best; unknown (and, with nothing known,
        // everything) scores 1.
        for (i, score) in scores.iter_mut().enumerate().take(n) {
            if targets.eligible(i) {
                *score = if score.is_nan() { 1.0 } else { best / *score };
                debug_assert!((0.0..=1.0).contains(score), "score {score}");
            }
        }
    }
}

impl Pipeline {
    /// Stage weights of `predicted_latency`: the prediction 1.0, load 0.25
    /// behind it (see the `predicted_latency` module documentation).
    pub const PREDICTED_LATENCY_WEIGHT: f64 = 1.0;
    pub const PREDICTED_LATENCY_LOAD_WEIGHT: f64 = 0.25;

    /// `predicted_latency`: [`PredictedLatencyScorer`] over `ctx.stats`,
    /// then [`LoadScorer`], weighted as above; ties at random from
    /// `ctx.seed`. Least-load until the targets' models have evidence.
    pub fn predicted_latency(ctx: &BuildContext) -> Self {
        Self::new(
            "predicted_latency",
            vec![
                WeightedScorer::new(
                    PredictedLatencyScorer::new(ctx.stats.clone()),
                    Self::PREDICTED_LATENCY_WEIGHT,
                ),
                WeightedScorer::new(LoadScorer::new(), Self::PREDICTED_LATENCY_LOAD_WEIGHT),
            ],
            ctx.seed,
        )
    }
}

impl std::fmt::Debug for PredictedLatencyScorer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PredictedLatencyScorer")
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fed_stats::FedStats;
    use crate::scorers::testing::{is_neutral, scores};
    use crate::strategy::TargetSpec;
    use crate::LoadBalancer;

    /// Predictions fixed per target, whatever the queue or prompt.
    struct Fixed(Vec<Option<f64>>);

    impl TargetStatsView for Fixed {
        fn predicted_latency_ms(&self, target: usize, _queue: u64, _ktokens: f64) -> Option<f64> {
            self.0[target]
        }
    }

    fn scorer(predictions: &[Option<f64>]) -> PredictedLatencyScorer {
        PredictedLatencyScorer::new(Arc::new(Fixed(predictions.to_vec())))
    }

    fn strategy(stats: Arc<dyn TargetStatsView>, n: usize, seed: u64) -> Pipeline {
        let ids: Vec<String> = (0..n).map(|i| format!("p{i}/m")).collect();
        let targets: Vec<TargetSpec> = ids.iter().map(|id| TargetSpec::new(id)).collect();
        let ctx = BuildContext {
            stats,
            ..BuildContext::new(&targets, seed)
        };
        Pipeline::predicted_latency(&ctx)
    }

    /// Trains `target`'s model on `law` (`[w0, w1, w2]`) over queues 0..=15
    /// and prompts of 0 to 7.5 ktokens, without noise.
    fn train(stats: &FedStats, target: usize, law: [f64; 3]) {
        for k in 0..2_000u64 {
            let (queue, ktokens) = (k % 16, (k % 31) as f64 / 4.0);
            let ms = law[0] + law[1] * queue as f64 + law[2] * ktokens;
            stats.model(target).learn(queue, ktokens, ms);
        }
    }

    fn ctx(prompt_len: usize) -> RouteContext<'static> {
        RouteContext {
            prompt_len,
            ..RouteContext::default()
        }
    }

    #[test]
    fn shortest_prediction_scores_one_and_others_their_ratio() {
        let got = scores(
            &scorer(&[Some(400.0), Some(200.0), Some(800.0)]),
            &ctx(0),
            &[0; 3],
            &|_| true,
        );
        assert_eq!(got, [0.5, 1.0, 0.25]);
    }

    #[test]
    fn no_prediction_anywhere_is_neutral() {
        let got = scores(&scorer(&[None; 4]), &ctx(0), &[3, 0, 9, 1], &|_| true);
        assert!(is_neutral(&got), "{got:?}");
    }

    #[test]
    fn unknown_target_is_level_with_the_best_known_never_above() {
        let got = scores(
            &scorer(&[Some(300.0), None, Some(600.0)]),
            &ctx(0),
            &[0; 3],
            &|_| true,
        );
        assert_eq!(got, [1.0, 1.0, 0.5]);
    }

    #[test]
    fn ineligible_targets_do_not_set_the_best_prediction() {
        let got = scores(
            &scorer(&[Some(100.0), Some(400.0), Some(800.0)]),
            &ctx(0),
            &[0; 3],
            &|i| i != 0,
        );
        assert_eq!(got[1], 1.0);
        assert_eq!(got[2], 0.5);
    }

    #[test]
    fn invalid_predictions_read_as_unknown() {
        let got = scores(
            &scorer(&[Some(f64::NAN), Some(-5.0), Some(f64::INFINITY), Some(0.0)]),
            &ctx(0),
            &[0; 4],
            &|_| true,
        );
        assert_eq!(got, [1.0, 1.0, 1.0, 1.0]);
    }

    #[test]
    fn cold_models_route_exactly_like_the_least_load_pipeline() {
        let stats = Arc::new(FedStats::new(5));
        // Evidence short of the eight samples a model needs.
        for target in 0..5 {
            for _ in 0..7 {
                stats
                    .model(target)
                    .learn(0, 1.0, 100.0 * (target + 1) as f64);
            }
        }
        let lb = strategy(stats, 5, 11);
        let least_load = Pipeline::new(
            "least_load",
            vec![WeightedScorer::new(LoadScorer::new(), 1.0)],
            11,
        );
        for k in 0..500u64 {
            let loads: Vec<u64> = (0..5).map(|i| (k * 7 + i * 3) % 4).collect();
            let eligible = |i: usize| (k + i as u64) % 3 != 0;
            assert_eq!(
                lb.pick_eligible(&ctx(4_096), Candidates::new(&loads, &eligible)),
                least_load.pick_eligible(&ctx(4_096), Candidates::new(&loads, &eligible)),
                "pick {k} over {loads:?}"
            );
        }
    }

    #[test]
    fn warm_models_prefer_the_shorter_predicted_latency_over_the_lower_average() {
        let stats = Arc::new(FedStats::new(2));
        // Target 0 is a fast engine that happened to serve the long prompts,
        // so its average is the worse; it also runs the longer queue.
        train(&stats, 0, [150.0, 40.0, 60.0]);
        train(&stats, 1, [300.0, 400.0, 200.0]);
        stats.set(0, Some(2_500.0), 2_000);
        stats.set(1, Some(900.0), 2_000);
        let lb = strategy(stats.clone(), 2, 3);
        let loads = [4, 2];
        assert!(
            stats.predicted_latency_ms(0, 4, 1.0).unwrap()
                < stats.predicted_latency_ms(1, 2, 1.0).unwrap()
        );
        for _ in 0..50 {
            assert_eq!(lb.pick(&ctx(4_000), &loads), Some(0));
        }
    }

    #[test]
    fn warm_models_take_the_shorter_queue_between_identical_targets() {
        let stats = Arc::new(FedStats::new(3));
        for target in 0..3 {
            train(&stats, target, [200.0, 250.0, 100.0]);
        }
        let lb = strategy(stats, 3, 5);
        assert_eq!(lb.pick(&ctx(8_000), &[6, 2, 9]), Some(1));
        assert_eq!(
            lb.pick_eligible(&ctx(8_000), Candidates::new(&[6, 2, 9], &|i| i != 1)),
            Some(0)
        );
    }

    #[test]
    fn the_prompt_size_decides_between_a_deep_queue_and_slow_prefill() {
        let stats = Arc::new(FedStats::new(2));
        train(&stats, 0, [200.0, 20.0, 400.0]); // slow prefill
        train(&stats, 1, [200.0, 300.0, 20.0]); // expensive queue
        let lb = strategy(stats, 2, 9);
        let loads = [3, 3];
        // 250 tokens: the prefill-bound target is cheap.
        assert_eq!(lb.pick(&ctx(1_000), &loads), Some(0));
        // 8k tokens: the queue-bound target is.
        assert_eq!(lb.pick(&ctx(32_000), &loads), Some(1));
    }

    #[test]
    fn equal_predictions_fall_to_least_load() {
        let lb = strategy(Arc::new(Fixed(vec![Some(700.0); 3])), 3, 2);
        assert_eq!(lb.pick(&ctx(0), &[5, 1, 3]), Some(1));
        assert_eq!(
            lb.pick_eligible(&ctx(0), Candidates::new(&[5, 1, 3], &|i| i != 1)),
            Some(2)
        );
    }

    #[test]
    fn cold_target_shares_the_top_with_the_best_and_load_decides() {
        // Target 1 is cold: it takes traffic while emptier than the best warm
        // target, never on the model's word.
        let lb = strategy(Arc::new(Fixed(vec![Some(300.0), None, Some(900.0)])), 3, 4);
        assert_eq!(lb.pick(&ctx(0), &[4, 1, 0]), Some(1));
        assert_eq!(lb.pick(&ctx(0), &[1, 4, 0]), Some(0));
    }

    #[test]
    fn predicted_latency_stack_is_the_scorer_then_load() {
        let lb = strategy(Arc::new(Fixed(vec![None; 2])), 2, 0);
        let stages: Vec<(&str, f64)> = lb
            .stages()
            .iter()
            .map(|s| (s.scorer.name(), s.weight))
            .collect();
        assert_eq!(stages, [("predicted_latency", 1.0), ("load", 0.25)]);
        assert_eq!(lb.name(), "predicted_latency");
    }
}
