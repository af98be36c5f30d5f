use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::*;
use crate::scorers::testing::FixedView;
use crate::strategy::TargetSpec;

/// A scorer giving fixed scores, counting what it is asked and told.
struct Fixed {
    scores: Vec<f64>,
    observed: Arc<AtomicUsize>,
}

impl Fixed {
    fn new(scores: &[f64]) -> Self {
        Self {
            scores: scores.to_vec(),
            observed: Arc::default(),
        }
    }
}

impl Scorer for Fixed {
    fn name(&self) -> &'static str {
        "fixed"
    }

    fn score(&self, _ctx: &RouteContext, targets: Candidates<'_>, scores: &mut [f64]) {
        for (i, s) in scores.iter_mut().enumerate() {
            if targets.eligible(i) {
                *s = self.scores[i];
            }
        }
    }

    fn observe(&self, _target: usize, _ctx: &RouteContext) {
        self.observed.fetch_add(1, Ordering::Relaxed);
    }
}

fn specs(ids: &[String], weights: &[u32]) -> Vec<TargetSpec<'static>> {
    ids.iter()
        .zip(weights)
        .map(|(id, &weight)| TargetSpec {
            id: Box::leak(id.clone().into_boxed_str()),
            weight,
            price: None,
            max_adapters: 2,
        })
        .collect()
}

fn targets(weights: &[u32]) -> Vec<TargetSpec<'static>> {
    let ids: Vec<String> = (0..weights.len()).map(|i| format!("p{i}/m")).collect();
    specs(&ids, weights)
}

fn counts(lb: &dyn LoadBalancer, loads: &[u64], picks: usize) -> Vec<usize> {
    let mut counts = vec![0; loads.len()];
    for _ in 0..picks {
        counts[lb.pick(&RouteContext::default(), loads).unwrap()] += 1;
    }
    counts
}

#[test]
fn pipeline_picks_the_argmax_of_the_weighted_sum() {
    // Stage a prefers 0, stage b prefers 1; b's weight decides.
    let lb = |wb: f64| {
        Pipeline::new(
            "test",
            vec![
                WeightedScorer::new(Fixed::new(&[1.0, 0.0, 0.2]), 1.0),
                WeightedScorer::new(Fixed::new(&[0.0, 1.0, 0.2]), wb),
            ],
            1,
        )
    };
    let ctx = RouteContext::default();
    assert_eq!(lb(0.5).pick(&ctx, &[0; 3]), Some(0));
    assert_eq!(lb(2.0).pick(&ctx, &[0; 3]), Some(1));
}

#[test]
fn pipeline_never_returns_an_ineligible_target() {
    // Target 0 has the best score but is not eligible.
    let lb = Pipeline::new(
        "test",
        vec![WeightedScorer::new(Fixed::new(&[1.0, 0.1, 0.5]), 1.0)],
        1,
    );
    let ctx = RouteContext::default();
    for _ in 0..100 {
        assert_eq!(
            lb.pick_eligible(&ctx, Candidates::new(&[0; 3], &|i| i != 0)),
            Some(2)
        );
    }
    assert_eq!(
        lb.pick_eligible(&ctx, Candidates::new(&[0; 3], &|_| false)),
        None
    );
    assert_eq!(lb.pick(&ctx, &[]), None);
}

#[test]
fn pipeline_breaks_ties_uniformly_at_random() {
    let lb = Pipeline::new(
        "test",
        vec![WeightedScorer::new(Fixed::new(&[0.5, 0.5, 0.5, 0.1]), 1.0)],
        7,
    );
    let got = counts(&lb, &[0; 4], 3_000);
    assert_eq!(got[3], 0, "{got:?}");
    for &c in &got[..3] {
        assert!((850..1_150).contains(&c), "{got:?}");
    }
}

#[test]
fn pipeline_with_the_same_seed_repeats_its_tie_breaks() {
    let build = || Pipeline::new("test", vec![], 42);
    let (a, b) = (build(), build());
    let ctx = RouteContext::default();
    for _ in 0..100 {
        assert_eq!(a.pick(&ctx, &[0; 9]), b.pick(&ctx, &[0; 9]));
    }
}

#[test]
fn pipeline_forwards_observe_to_every_scorer() {
    let (a, b) = (Fixed::new(&[0.0]), Fixed::new(&[0.0]));
    let (seen_a, seen_b) = (a.observed.clone(), b.observed.clone());
    let lb = Pipeline::new(
        "test",
        vec![WeightedScorer::new(a, 1.0), WeightedScorer::new(b, 0.0)],
        1,
    );
    lb.observe(0, &RouteContext::default());
    lb.observe(0, &RouteContext::default());
    assert_eq!(seen_a.load(Ordering::Relaxed), 2);
    assert_eq!(seen_b.load(Ordering::Relaxed), 2);
}

#[test]
fn default_stack_reports_its_name_and_stages() {
    let t = targets(&[1, 1]);
    let lb = Pipeline::default_stack(&BuildContext::new(&t, 1));
    assert_eq!(lb.name(), "pipeline");
    let stages: Vec<(&str, f64)> = lb
        .stages()
        .iter()
        .map(|s| (s.scorer.name(), s.weight))
        .collect();
    assert_eq!(
        stages,
        [
            ("session", 1.0),
            ("weight", 1.0),
            ("load", 1.0),
            ("prefix", 1.0),
            ("queue_depth", 0.5),
            ("kv_usage", 0.5)
        ]
    );
}

/// Engine readings as a test sets them: waiting queue and KV usage.
struct EngineReadings {
    waiting: Vec<u64>,
    kv_usage: Vec<f64>,
}

impl crate::TargetStatsView for EngineReadings {
    fn waiting(&self, target: usize) -> Option<u64> {
        self.waiting.get(target).copied()
    }
    fn kv_usage(&self, target: usize) -> Option<f64> {
        self.kv_usage.get(target).copied()
    }
}

#[test]
fn default_stack_breaks_a_load_tie_by_queue_then_kv_cache() {
    let t = targets(&[1; 3]);
    let mut ctx = BuildContext::new(&t, 5);
    ctx.stats = std::sync::Arc::new(EngineReadings {
        waiting: vec![3, 0, 0],
        kv_usage: vec![0.1, 0.9, 0.2],
    });
    let lb = Pipeline::default_stack(&ctx);
    let got = counts(&lb, &[2, 2, 2], 200);
    assert_eq!(
        got,
        [0, 0, 200],
        "equal load: the empty queue with the most free cache"
    );
}

#[test]
fn default_stack_without_session_or_prompt_is_least_load() {
    let t = targets(&[1; 5]);
    let lb = Pipeline::default_stack(&BuildContext::new(&t, 3));
    let got = counts(&lb, &[4, 2, 2, 9, 3], 1_000);
    assert_eq!(got[0] + got[3] + got[4], 0, "{got:?}");
    assert!(got[1] > 400 && got[2] > 400, "ties at random: {got:?}");
}

#[test]
fn default_stack_keeps_a_session_on_its_last_served_target() {
    let t = targets(&[1; 3]);
    let lb = Pipeline::default_stack(&BuildContext::new(&t, 3));
    let ctx = RouteContext {
        session_key: Some("conversation-1"),
        now_ms: 1_000,
        ..RouteContext::default()
    };
    lb.observe(2, &ctx);
    // Target 2 runs 3 requests, the others none: the pin outweighs load.
    assert_eq!(lb.pick(&ctx, &[0, 0, 3]), Some(2));
    // Parked: the pin is silent and load decides among the rest.
    let got = lb.pick_eligible(&ctx, Candidates::new(&[0, 1, 3], &|i| i != 2));
    assert_eq!(got, Some(0));
    // Past the TTL the pin is gone too.
    let later = RouteContext {
        now_ms: 1_000 + SessionAffinityScorer::DEFAULT_TTL_MS + 1,
        ..ctx
    };
    assert_eq!(lb.pick(&later, &[1, 0, 3]), Some(1));
}

#[test]
fn default_stack_prefers_the_target_that_served_the_prefix() {
    let t = targets(&[1; 3]);
    let lb = Pipeline::default_stack(&BuildContext::new(&t, 3));
    let system = "You are a helpful assistant. ".repeat(100);
    let first = format!("{system}What is rust?");
    let second = format!("{system}What is a borrow checker?");
    lb.observe(
        1,
        &RouteContext {
            prompt: &first,
            prompt_len: first.len(),
            ..RouteContext::default()
        },
    );
    let ctx = RouteContext {
        prompt: &second,
        prompt_len: second.len(),
        ..RouteContext::default()
    };
    assert_eq!(lb.pick(&ctx, &[0, 1, 0]), Some(1));
}

#[test]
fn default_stack_prefers_heavier_weights_at_equal_load() {
    let t = targets(&[1, 3, 1]);
    let lb = Pipeline::default_stack(&BuildContext::new(&t, 3));
    assert_eq!(counts(&lb, &[0; 3], 100), [0, 100, 0]);
}

#[test]
fn default_stack_gives_weight_zero_targets_no_share_while_a_weighted_one_is_usable() {
    let t = targets(&[0, 1, 0]);
    let lb = Pipeline::default_stack(&BuildContext::new(&t, 3));
    // Target 0 is idle, but weight 0 takes no share.
    assert_eq!(counts(&lb, &[0, 50, 0], 100), [0, 100, 0]);
    // With only weight-0 targets usable, they still serve (least loaded).
    let ctx = RouteContext::default();
    assert_eq!(
        lb.pick_eligible(&ctx, Candidates::new(&[3, 0, 1], &|i| i != 1)),
        Some(2)
    );
}

#[test]
fn precise_and_lmcache_without_signals_behave_exactly_like_least_load() {
    let t = targets(&[1; 6]);
    let ctx = BuildContext::new(&t, 11);
    let tokens = [1u32; 256];
    for lb in [
        Pipeline::precise_cache_aware(&ctx),
        Pipeline::lmcache_aware(&ctx),
    ] {
        let mut state = 0x1234_5678_u64;
        for round in 0..2_000 {
            let loads: Vec<u64> = (0..6)
                .map(|_| {
                    state = crate::rng::mix64(state.wrapping_add(round));
                    state % 5
                })
                .collect();
            let eligible = |i: usize| (state >> (8 + i)) & 3 != 0;
            let req = RouteContext {
                token_ids: (round % 2 == 0).then_some(&tokens[..]),
                ..RouteContext::default()
            };
            let least = (0..6).filter(|&i| eligible(i)).map(|i| loads[i]).min();
            match lb.pick_eligible(&req, Candidates::new(&loads, &eligible)) {
                Some(i) => {
                    assert!(eligible(i), "{}", lb.name());
                    assert_eq!(Some(loads[i]), least, "{} {loads:?}", lb.name());
                }
                None => assert_eq!(least, None),
            }
        }
        // And ties spread at random, as least-load's do.
        let got = counts(&lb, &[1, 0, 0, 1, 0, 2], 3_000);
        for i in [1, 2, 4] {
            assert!((850..1_150).contains(&got[i]), "{} {got:?}", lb.name());
        }
    }
}

#[test]
fn precise_cache_aware_prefers_resident_kv_blocks_over_a_light_load_gap() {
    let t = targets(&[1; 3]);
    let mut ctx = BuildContext::new(&t, 1);
    ctx.kv_blocks = Arc::new(FixedView::new(&[Some(0.1), Some(0.9), None]));
    let lb = Pipeline::precise_cache_aware(&ctx);
    let tokens = [3u32; 64];
    let req = RouteContext {
        token_ids: Some(&tokens),
        ..RouteContext::default()
    };
    assert_eq!(lb.pick(&req, &[0, 3, 0]), Some(1));
    // Without token ids the same pool is least-load.
    assert_ne!(lb.pick(&RouteContext::default(), &[0, 3, 0]), Some(1));
}

#[test]
fn lmcache_aware_prefers_the_freest_available_cache() {
    let t = targets(&[1; 4]);
    let mut ctx = BuildContext::new(&t, 1);
    ctx.occupancy = Arc::new(FixedView::new(&[Some(0.2), None, Some(0.8), Some(0.5)]));
    let lb = Pipeline::lmcache_aware(&ctx);
    assert_eq!(counts(&lb, &[0, 0, 1, 0], 50)[2], 50);
}

#[test]
fn lora_aware_routes_to_the_target_holding_the_adapter() {
    let t = targets(&[1; 3]);
    let lb = Pipeline::lora_aware(&BuildContext::new(&t, 1));
    let req = |adapter| RouteContext {
        adapter: Some(adapter),
        ..RouteContext::default()
    };
    lb.observe(2, &req("sql"));
    // Residency outranks a load gap.
    assert_eq!(lb.pick(&req("sql"), &[0, 0, 4]), Some(2));
    // A cold adapter is neutral: load decides.
    assert_eq!(lb.pick(&req("poetry"), &[2, 0, 4]), Some(1));
}

#[test]
fn lora_aware_forgets_adapters_past_max_adapters() {
    // max_adapters is 2 in these specs.
    let t = targets(&[1; 2]);
    let lb = Pipeline::lora_aware(&BuildContext::new(&t, 1));
    let req = |adapter| RouteContext {
        adapter: Some(adapter),
        ..RouteContext::default()
    };
    for adapter in ["a", "b", "c"] {
        lb.observe(1, &req(adapter));
    }
    // "a" was evicted from target 1: load decides.
    assert_eq!(lb.pick(&req("a"), &[0, 1]), Some(0));
    assert_eq!(lb.pick(&req("c"), &[0, 1]), Some(1));
}

#[test]
fn report_gives_the_last_scores_components_and_picks() {
    let lb = Pipeline::new(
        "test",
        vec![
            WeightedScorer::new(Fixed::new(&[1.0, 0.5, 0.0]), 2.0),
            WeightedScorer::new(LoadScorer::new(), 1.0),
        ],
        1,
    );
    assert!(lb.report().targets.is_empty());
    let ctx = RouteContext {
        now_ms: 77,
        ..RouteContext::default()
    };
    assert_eq!(
        lb.pick_eligible(&ctx, Candidates::new(&[1, 0, 0], &|i| i != 2)),
        Some(0)
    );
    let report = lb.report();
    assert_eq!(report.targets.len(), 3);
    let t0 = &report.targets[0];
    assert_eq!(t0.score, Some(2.5));
    assert_eq!(t0.components, [("fixed", 1.0), ("load", 0.5)]);
    assert_eq!(t0.signals, [("in_flight", 1.0)]);
    assert_eq!((t0.picks, t0.last_pick_ms), (1, Some(77)));
    assert_eq!(report.targets[1].score, Some(2.0));
    assert_eq!(report.targets[1].picks, 0);
    assert_eq!(report.targets[2].score, None, "ineligible");
}
