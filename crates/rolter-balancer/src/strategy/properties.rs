//! Properties every strategy keeps, whatever the route looks like: the pick
//! is an index into the targets, it is eligible whenever anything is, and it
//! is `None` exactly when nothing is.

use proptest::prelude::*;

use crate::strategy::{build, BuildContext, StrategyKind, TargetSpec};
use crate::{LoadBalancer, RouteContext};

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
            ".{0,64}",
            prop_oneof![Just(0u64), any::<u64>()],
            any::<u64>(),
        )
            .prop_map(
                |(eligible, loads, weights, session_key, prompt, prompt_digest, seed)| Case {
                    eligible,
                    loads,
                    weights,
                    session_key,
                    prompt,
                    prompt_digest,
                    seed,
                },
            )
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
            price: None,
            max_adapters: TargetSpec::DEFAULT_MAX_ADAPTERS,
        })
        .collect();
    build(kind, &BuildContext::new(&targets, case.seed))
}

fn check_picks(
    kind: StrategyKind,
    lb: &dyn LoadBalancer,
    case: &Case,
) -> Result<(), TestCaseError> {
    let n = case.eligible.len();
    let ctx = RouteContext {
        session_key: case.session_key.as_deref(),
        prompt: &case.prompt,
        prompt_len: case.prompt.len(),
        prompt_digest: case.prompt_digest,
        ..RouteContext::default()
    };
    let eligible = |i: usize| case.eligible[i];
    let any_eligible = case.eligible.iter().any(|&e| e);
    for _ in 0..PICKS_PER_CASE {
        match lb.pick_eligible(&ctx, &case.loads, &eligible) {
            Some(i) => {
                prop_assert!(i < n, "{kind}: index {i} out of {n}");
                prop_assert!(case.eligible[i], "{kind}: picked ineligible {i}");
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
                prompt: "hello".to_owned(),
                prompt_digest: n as u64,
                seed: n as u64,
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
    };
    for &kind in StrategyKind::ALL {
        let lb = balancer(kind, &case);
        let ctx = RouteContext::default();
        assert_eq!(lb.pick(&ctx, &[]), None, "{kind}");
        assert_eq!(lb.pick_eligible(&ctx, &[], &|_| true), None, "{kind}");
    }
}
