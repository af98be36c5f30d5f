//! Properties every strategy keeps, whatever the route looks like: the pick
//! is an index into the targets, it is eligible whenever anything is, and it
//! is `None` exactly when nothing is — also once learning strategies have
//! learned something (session pins, prefix trees, adapter sets: every pick is
//! observed, after a generated history), with KV / occupancy signals that
//! favour some targets, and with latency evidence on some targets and not
//! others (adaptive warming up, engaged and exploring; predicted_latency over
//! warm and cold models).

use std::sync::Arc;

use proptest::prelude::*;

use crate::scorers::testing::FixedView;
use crate::strategy::{build, AdaptivePolicy, BuildContext, Price, StrategyKind, TargetSpec};
use crate::views::TargetStatsView;
use crate::{Candidates, LoadBalancer, RouteContext};

/// Target counts that stress bitmask and rounding assumptions.
const EDGE_COUNTS: [usize; 6] = [1, 2, 63, 64, 65, 130];

/// Picks made per generated case, so stateful strategies (counters, running
/// weights) are checked past their first step.
const PICKS_PER_CASE: usize = 4;

#[derive(Debug, Clone)]
struct Case {
    eligible: Vec<bool>,
    loads: Vec<u64>,
    weights: Vec<u32>,
    session_key: Option<String>,
    prompt: String,
    prompt_digest: u64,
    seed: u64,
    adapter: Option<String>,
    token_ids: Option<Vec<u32>>,
    /// Targets (modulo the target count) that served this request before.
    history: Vec<usize>,
    /// What the KV-block and occupancy views answer per target.
    signals: Vec<Option<f64>>,
}

fn target_count() -> impl Strategy<Value = usize> {
    prop_oneof![
        1 => proptest::sample::select(EDGE_COUNTS.to_vec()),
        3 => 1..=130usize,
    ]
}

fn eligibility(n: usize) -> impl Strategy<Value = Vec<bool>> {
    prop_oneof![
        Just(vec![false; n]),
        Just(vec![true; n]),
        (0..n).prop_map(move |only| (0..n).map(|i| i == only).collect()),
        proptest::collection::vec(proptest::bool::weighted(0.05), n),
        proptest::collection::vec(any::<bool>(), n),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    target_count().prop_flat_map(|n| {
        (
            eligibility(n),
            proptest::collection::vec(prop_oneof![0..4u64, any::<u64>()], n),
            proptest::collection::vec(prop_oneof![Just(0u32), 1..10u32, any::<u32>()], n),
            proptest::option::of("[a-z0-9-]{0,24}"),
            ".{0,160}",
            prop_oneof![Just(0u64), any::<u64>()],
            any::<u64>(),
            (
                proptest::option::of("[a-c]"),
                proptest::option::of(proptest::collection::vec(any::<u32>(), 0..48)),
                proptest::collection::vec(any::<usize>(), 0..4),
                proptest::collection::vec(proptest::option::of(0.0..=1.0f64), n),
            ),
        )
            .prop_map(|parts| {
                let (eligible, loads, weights, session_key, prompt, prompt_digest, seed, rest) =
                    parts;
                let (adapter, token_ids, history, signals) = rest;
                Case {
                    eligible,
                    loads,
                    weights,
                    session_key,
                    prompt,
                    prompt_digest,
                    seed,
                    adapter,
                    token_ids,
                    history,
                    signals,
                }
            })
    })
}

fn balancer(kind: StrategyKind, case: &Case) -> Box<dyn LoadBalancer> {
    let ids: Vec<String> = (0..case.eligible.len())
        .map(|i| format!("provider-{i}/model"))
        .collect();
    let targets: Vec<TargetSpec> = ids
        .iter()
        .zip(&case.weights)
        .map(|(id, &weight)| TargetSpec {
            id,
            weight,
            // Some priced targets for adaptive's cost component.
            price: (weight % 3 == 1).then_some(Price {
                input_per_mtok: f64::from(weight % 5),
                output_per_mtok: 2.0,
            }),
            max_adapters: TargetSpec::DEFAULT_MAX_ADAPTERS,
        })
        .collect();
    let mut ctx = BuildContext::new(&targets, case.seed);
    let view = Arc::new(FixedView::new(&case.signals));
    ctx.kv_blocks = view.clone();
    ctx.occupancy = view;
    ctx.stats = Arc::new(SignalStats::new(case.signals.clone()));
    ctx.adaptive = adaptive_policy(case.seed);
    build(kind, &ctx)
}

/// Latencies and latency predictions derived from a case's signals: a target
/// with a signal is sampled (and predicts, growing with its queue and the
/// prompt), one without is cold — so `adaptive` warms up, engages and
/// explores, and `predicted_latency` ranks known and unknown targets.
struct SignalStats {
    signals: Vec<Option<f64>>,
    /// Every target has served a dozen requests; warm-up spends per target.
    warm_up: Vec<std::sync::atomic::AtomicU64>,
}

impl SignalStats {
    fn new(signals: Vec<Option<f64>>) -> Self {
        let warm_up = signals.iter().map(|_| Default::default()).collect();
        Self { signals, warm_up }
    }
}

impl TargetStatsView for SignalStats {
    fn latency_ms(&self, target: usize) -> Option<f64> {
        self.signals
            .get(target)
            .copied()
            .flatten()
            .map(|s| 20.0 + 2_000.0 * s)
    }

    fn latency_samples(&self, target: usize) -> u64 {
        if self.latency_ms(target).is_some() {
            12
        } else {
            0
        }
    }

    fn served(&self, target: usize) -> u64 {
        u64::from(target < self.signals.len()) * 12
    }

    fn warm_up_spent(&self, target: usize) -> u64 {
        self.warm_up
            .get(target)
            .map_or(0, |w| w.load(std::sync::atomic::Ordering::Relaxed))
    }

    fn spend_warm_up(&self, target: usize, budget: u64) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        self.warm_up.get(target).is_some_and(|w| {
            w.fetch_update(Relaxed, Relaxed, |n| (n < budget).then_some(n + 1))
                .is_ok()
        })
    }

    fn predicted_latency_ms(&self, target: usize, queue: u64, ktokens: f64) -> Option<f64> {
        let s = self.signals.get(target).copied().flatten()?;
        Some(50.0 + 900.0 * s + 40.0 * queue as f64 + 100.0 * ktokens)
    }
}

/// An adaptive policy varied by the case's seed: mostly enabled, engaging
/// after 0 to 4 requests served (each target has served 12), exploring none, some or half of the traffic, now and
/// then with an all-zero blend.
fn adaptive_policy(seed: u64) -> AdaptivePolicy {
    let zero_blend = seed % 7 == 0;
    AdaptivePolicy {
        enabled: seed % 4 != 0,
        latency_weight: if zero_blend { 0.0 } else { 1.0 },
        cost_weight: if zero_blend { 0.0 } else { 0.5 },
        load_weight: if zero_blend { 0.0 } else { 0.25 },
        exploration_ratio: [0.0, 0.05, 0.5][(seed % 3) as usize],
        min_samples: seed % 5,
    }
}

/// What the gateway passes the balancer for `case`'s request.
fn context(case: &Case) -> RouteContext<'_> {
    RouteContext {
        session_key: case.session_key.as_deref(),
        prompt: &case.prompt,
        prompt_len: case.prompt.len(),
        prompt_digest: case.prompt_digest,
        token_ids: case.token_ids.as_deref(),
        adapter: case.adapter.as_deref(),
        now_ms: 1_000,
    }
}

fn check_picks(
    kind: StrategyKind,
    lb: &dyn LoadBalancer,
    case: &Case,
) -> Result<(), TestCaseError> {
    let n = case.eligible.len();
    let mut ctx = context(case);
    if n > 0 {
        for &target in &case.history {
            lb.observe(target % n, &ctx);
        }
    }
    let eligible = |i: usize| case.eligible[i];
    let any_eligible = case.eligible.iter().any(|&e| e);
    for _ in 0..PICKS_PER_CASE {
        ctx.now_ms += 1_000;
        match lb.pick_eligible(&ctx, Candidates::new(&case.loads, &eligible)) {
            Some(i) => {
                prop_assert!(i < n, "{kind}: index {i} out of {n}");
                prop_assert!(case.eligible[i], "{kind}: picked ineligible {i}");
                lb.observe(i, &ctx);
            }
            None => prop_assert!(!any_eligible, "{kind}: None while something is eligible"),
        }
        let all = lb.pick(&ctx, &case.loads);
        prop_assert!(
            all.is_some_and(|i| i < n),
            "{kind}: pick with {n} targets gave {all:?}"
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_strategy_picks_an_eligible_index_or_none_only_when_nothing_is(case in case()) {
        for &kind in StrategyKind::ALL {
            check_picks(kind, balancer(kind, &case).as_ref(), &case)?;
        }
    }
}

/// The picks of `lb`, built for `case`, when the gateway passes `digest`
/// as the conversation's digest: the learned state the same history
/// leaves, then a pick per round.
fn picks_with_digest(lb: &dyn LoadBalancer, case: &Case, digest: u64) -> Vec<Option<usize>> {
    let n = case.eligible.len();
    let mut ctx = RouteContext {
        prompt_digest: digest,
        ..context(case)
    };
    for &target in &case.history {
        lb.observe(target % n.max(1), &ctx);
    }
    let eligible = |i: usize| case.eligible[i];
    (0..PICKS_PER_CASE)
        .map(|_| {
            ctx.now_ms += 1_000;
            let pick = lb.pick_eligible(&ctx, Candidates::new(&case.loads, &eligible));
            if let Some(i) = pick {
                lb.observe(i, &ctx);
            }
            pick
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// The gateway skips the digest (passes 0) for every strategy that
    /// does not say it reads it: such a strategy must pick the same
    /// either way, or a skipped digest would change where requests go.
    #[test]
    fn only_the_strategies_that_say_so_read_the_digest(case in case(), digest in 1..u64::MAX) {
        let case = Case { session_key: None, ..case };
        prop_assume!(!case.eligible.is_empty());
        for &kind in StrategyKind::ALL.iter().filter(|kind| !kind.reads_prompt_digest()) {
            let with = picks_with_digest(balancer(kind, &case).as_ref(), &case, digest);
            let without = picks_with_digest(balancer(kind, &case).as_ref(), &case, 0);
            prop_assert_eq!(with, without, "{} read the digest", kind);
        }
    }
}

/// consistent_hash does read it: without a session key, two digests of
/// the same bounded text (conversations that differ past 32 KiB) land on
/// different targets of a large enough ring.
#[test]
fn consistent_hash_reads_the_digest() {
    let case = Case {
        eligible: vec![true; 64],
        loads: vec![0; 64],
        weights: vec![1; 64],
        session_key: None,
        prompt: "the same first 32 KiB".to_owned(),
        prompt_digest: 0,
        seed: 7,
        adapter: None,
        token_ids: None,
        history: vec![],
        signals: vec![None; 64],
    };
    assert!(StrategyKind::ConsistentHash.reads_prompt_digest());
    let picks: std::collections::HashSet<_> = (1..=16u64)
        .map(|digest| {
            picks_with_digest(
                balancer(StrategyKind::ConsistentHash, &case).as_ref(),
                &case,
                digest,
            )
        })
        .collect();
    assert!(picks.len() > 1, "{picks:?}");
}

/// The edge counts again, deterministically and with every shape of
/// eligibility, so they are covered whatever proptest happens to draw.
#[test]
fn every_strategy_keeps_eligibility_at_edge_target_counts() {
    for n in EDGE_COUNTS {
        let shapes: Vec<Vec<bool>> = vec![
            vec![true; n],
            vec![false; n],
            (0..n).map(|i| i == 0).collect(),
            (0..n).map(|i| i == n - 1).collect(),
            (0..n).map(|i| i % 2 == 1).collect(),
            (0..n).map(|i| i >= 64).collect(),
            (0..n).map(|i| i < 63).collect(),
        ];
        for eligible in shapes {
            let case = Case {
                loads: (0..n as u64).map(|i| i * 7 % 5).collect(),
                weights: (0..n as u32).map(|i| i % 3).collect(),
                session_key: Some(format!("session-{n}")),
                prompt: "You are a careful assistant. ".repeat(8),
                prompt_digest: n as u64,
                seed: n as u64,
                adapter: Some("adapter-a".to_owned()),
                token_ids: Some((0..64).collect()),
                // Learned state that favours targets the shapes exclude.
                history: vec![0, n - 1, 64 % n, n / 2],
                signals: (0..n)
                    .map(|i| (i % 3 != 0).then_some(i as f64 / n as f64))
                    .collect(),
                eligible,
            };
            for &kind in StrategyKind::ALL {
                let lb = balancer(kind, &case);
                for _ in 0..50 {
                    check_picks(kind, lb.as_ref(), &case).unwrap();
                }
            }
        }
    }
}

#[test]
fn every_strategy_with_no_targets_picks_nothing() {
    let case = Case {
        eligible: vec![],
        loads: vec![],
        weights: vec![],
        session_key: None,
        prompt: String::new(),
        prompt_digest: 0,
        seed: 0,
        adapter: None,
        token_ids: None,
        history: vec![],
        signals: vec![],
    };
    for &kind in StrategyKind::ALL {
        let lb = balancer(kind, &case);
        let ctx = RouteContext::default();
        assert_eq!(lb.pick(&ctx, &[]), None, "{kind}");
        assert_eq!(
            lb.pick_eligible(&ctx, Candidates::new(&[], &|_| true)),
            None,
            "{kind}"
        );
    }
}
