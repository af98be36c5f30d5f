use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::*;
use crate::fed_stats::FedStats;
use crate::strategy::{Price, Random};

/// A fallback that sends every pick to the first eligible target in its
/// preference order — what a configured weight, session or prefix affinity
/// legitimately does — and counts what it is told was served.
struct Pinned {
    order: Vec<usize>,
    observed: Arc<AtomicU64>,
}

impl Pinned {
    fn to(first: usize, n: usize) -> (Box<dyn LoadBalancer>, Arc<AtomicU64>) {
        let observed = Arc::new(AtomicU64::new(0));
        let mut order = vec![first];
        order.extend((0..n).filter(|&i| i != first));
        let pinned = Pinned {
            order,
            observed: Arc::clone(&observed),
        };
        (Box::new(pinned), observed)
    }
}

impl LoadBalancer for Pinned {
    fn name(&self) -> &'static str {
        "pinned"
    }

    fn pick_eligible(&self, _ctx: &RouteContext, targets: Candidates<'_>) -> Option<usize> {
        self.order.iter().copied().find(|&i| targets.eligible(i))
    }

    fn observe(&self, _target: usize, _ctx: &RouteContext) {
        self.observed.fetch_add(1, Ordering::Relaxed);
    }
}

fn enabled() -> AdaptivePolicy {
    AdaptivePolicy {
        enabled: true,
        ..AdaptivePolicy::default()
    }
}

/// Enabled, engaged from the first pick when two targets are sampled, no
/// exploration: the blend alone decides.
fn blend_only(latency_weight: f64, cost_weight: f64, load_weight: f64) -> AdaptivePolicy {
    AdaptivePolicy {
        enabled: true,
        latency_weight,
        cost_weight,
        load_weight,
        exploration_ratio: 0.0,
        min_samples: 0,
    }
}

fn adaptive(
    prices: &[Option<Price>],
    stats: &Arc<FedStats>,
    policy: AdaptivePolicy,
    fallback: Box<dyn LoadBalancer>,
) -> Adaptive {
    let ids: Vec<String> = (0..prices.len()).map(|i| format!("p{i}/m")).collect();
    let targets: Vec<TargetSpec> = ids
        .iter()
        .zip(prices)
        .map(|(id, &price)| TargetSpec {
            price,
            ..TargetSpec::new(id)
        })
        .collect();
    let stats: Arc<dyn TargetStatsView> = stats.clone();
    Adaptive::new(&targets, stats, policy, fallback, 7)
}

fn price(per_mtok: f64) -> Option<Price> {
    Some(Price {
        input_per_mtok: per_mtok / 2.0,
        output_per_mtok: per_mtok / 2.0,
    })
}

/// Runs `picks` requests the way the gateway does — pick, serve, observe —
/// where target `i` answers successfully in `answers[i]` ms, or never.
/// Returns the picks per target.
fn serve(
    lb: &Adaptive,
    stats: &FedStats,
    answers: &[Option<f64>],
    picks: usize,
    eligible: &dyn Fn(usize) -> bool,
) -> Vec<u64> {
    let loads = vec![0; answers.len()];
    let mut counts = vec![0; answers.len()];
    for now_ms in 0..picks as u64 {
        let ctx = RouteContext {
            now_ms,
            ..RouteContext::default()
        };
        let target = lb
            .pick_eligible(&ctx, Candidates::new(&loads, eligible))
            .expect("eligible");
        assert!(eligible(target), "picked ineligible {target}");
        stats.dispatch(target);
        counts[target] += 1;
        if let Some(ms) = answers[target] {
            stats.record(target, ms);
        }
        lb.observe(target, &ctx);
    }
    counts
}

fn split(lb: &Adaptive) -> DecisionSplit {
    lb.report()
        .decisions
        .expect("adaptive reports its decisions")
}

#[test]
fn warm_up_probes_the_target_the_fallback_starves_1645() {
    // The fallback pins every pick to target 0. Before #1645 target 1 never
    // earned a latency sample and the route sat at engaged: false with
    // fallback: 50 of 50 forever.
    let stats = Arc::new(FedStats::new(2));
    stats.set(0, Some(500.0), 100);
    let (fallback, _) = Pinned::to(0, 2);
    let lb = adaptive(&[None, None], &stats, enabled(), fallback);
    let answers = [Some(500.0), Some(200.0)];

    let counts = serve(&lb, &stats, &answers, 50, &|_| true);
    assert_eq!(
        counts,
        [49, 1],
        "one probe, answered at once, buys the sample"
    );
    let got = split(&lb);
    assert_eq!((got.exploration, got.fallback, got.blend), (1, 49, 0));
    assert!(
        got.engaged,
        "50 picks and two sampled targets engage the blend"
    );

    // Engaged, the blend prefers the faster target the fallback skipped.
    let counts = serve(&lb, &stats, &answers, 1_000, &|_| true);
    assert!(counts[1] > 950, "{counts:?}");
}

#[test]
fn warm_up_spends_exactly_eight_picks_on_a_target_that_never_answers() {
    let stats = Arc::new(FedStats::new(3));
    stats.set(0, Some(300.0), 10);
    let (fallback, _) = Pinned::to(0, 3);
    let lb = adaptive(&[None, None, None], &stats, enabled(), fallback);

    let counts = serve(&lb, &stats, &[Some(300.0), None, None], 500, &|_| true);
    assert_eq!(
        counts,
        [
            500 - 2 * Adaptive::WARM_UP_PICKS,
            Adaptive::WARM_UP_PICKS,
            Adaptive::WARM_UP_PICKS
        ]
    );
    let got = split(&lb);
    assert_eq!(got.exploration, 2 * Adaptive::WARM_UP_PICKS);
    assert_eq!(got.fallback, 500 - 2 * Adaptive::WARM_UP_PICKS);
    assert!(!got.engaged, "one sampled target is not evidence");
}

#[test]
fn a_rebuilt_balancer_keeps_the_evidence_and_the_spent_warm_up_budget() {
    // A reload rebuilds every balancer (a fleet gateway on every fleet
    // version); what was learned lives in the stats view, per target.
    let stats = Arc::new(FedStats::new(2));
    stats.set(0, Some(300.0), 10);
    let build = || {
        let (fallback, _) = Pinned::to(0, 2);
        adaptive(&[None, None], &stats, enabled(), fallback)
    };
    let mut probes = 0;
    for _reload in 0..5 {
        let lb = build();
        probes += serve(&lb, &stats, &[Some(300.0), None], 20, &|_| true)[1];
    }
    assert_eq!(
        probes,
        Adaptive::WARM_UP_PICKS,
        "a target that never answers absorbs eight picks in total, not eight per reload"
    );

    stats.record(1, 100.0);
    let before = build();
    assert!(split(&before).engaged, "100 served and two sampled targets");
    let after = build();
    assert!(split(&after).engaged, "engaged at once after the rebuild");
    let counts = serve(&after, &stats, &[Some(300.0), Some(100.0)], 20, &|_| true);
    assert!(counts[1] >= 18, "the blend routes at once: {counts:?}");
}

#[test]
fn warm_up_budget_covers_probes_still_in_flight() {
    // Samples land only when requests finish: eight concurrent probes may go
    // out before the first answers, and not one more.
    let stats = Arc::new(FedStats::new(2));
    stats.set(0, Some(300.0), 10);
    let (fallback, _) = Pinned::to(0, 2);
    let lb = adaptive(&[None, None], &stats, enabled(), fallback);
    let counts = serve(&lb, &stats, &[Some(300.0), None], 20, &|_| true);
    assert_eq!(counts[1], Adaptive::WARM_UP_PICKS);

    stats.record(1, 250.0);
    let got = split(&lb);
    assert_eq!(got.exploration, Adaptive::WARM_UP_PICKS);
    assert!(!got.engaged, "20 picks of the 50 required");
}

#[test]
fn warm_up_spreads_probes_and_skips_ineligible_targets() {
    let stats = Arc::new(FedStats::new(4));
    let (fallback, _) = Pinned::to(0, 4);
    let lb = adaptive(&[None; 4], &stats, enabled(), fallback);
    let eligible = |i: usize| i != 2;
    let counts = serve(&lb, &stats, &[None; 4], 9, &eligible);
    // Fewest probes first: 0, 1, 3, 0, 1, 3, ...
    assert_eq!(counts, [3, 3, 0, 3]);
    let counts = serve(&lb, &stats, &[None; 4], 100, &eligible);
    assert_eq!(counts[1], Adaptive::WARM_UP_PICKS - 3);
    assert_eq!(counts[2], 0);
    assert_eq!(counts[3], Adaptive::WARM_UP_PICKS - 3);
}

#[test]
fn disabled_policy_routes_exactly_like_the_fallback_and_probes_nothing() {
    // Evidence that would engage an enabled policy, and unsampled targets a
    // warm-up would probe: a disabled policy does neither.
    for policy in [
        AdaptivePolicy {
            min_samples: 0,
            ..AdaptivePolicy::default()
        },
        blend_only(0.0, 0.0, 0.0),
    ] {
        let stats = Arc::new(FedStats::new(4));
        stats.set(0, Some(900.0), 50);
        stats.set(1, Some(100.0), 50);
        let twin = Random::from_seed(4, 9);
        let lb = adaptive(
            &[None; 4],
            &stats,
            policy,
            Box::new(Random::from_seed(4, 9)),
        );
        let loads = [0; 4];
        for k in 0..400u64 {
            let eligible = |i: usize| i as u64 != k % 5;
            let ctx = RouteContext::default();
            assert_eq!(
                lb.pick_eligible(&ctx, Candidates::new(&loads, &eligible)),
                twin.pick_eligible(&ctx, Candidates::new(&loads, &eligible)),
                "pick {k} under {policy:?}"
            );
        }
        let got = split(&lb);
        assert_eq!((got.blend, got.fallback, got.exploration), (0, 400, 0));
        assert!(!got.engaged);
    }
}

#[test]
fn blend_waits_for_min_samples_picks() {
    let stats = Arc::new(FedStats::new(2));
    stats.set(0, Some(100.0), 10);
    stats.set(1, Some(800.0), 10);
    let (fallback, _) = Pinned::to(1, 2);
    let policy = AdaptivePolicy {
        min_samples: 20,
        ..blend_only(1.0, 0.5, 0.25)
    };
    let lb = adaptive(&[None, None], &stats, policy, fallback);
    assert_eq!(serve(&lb, &stats, &[None, None], 19, &|_| true), [0, 19]);
    assert!(!split(&lb).engaged);
    assert_eq!(serve(&lb, &stats, &[None, None], 1, &|_| true), [0, 1]);
    assert!(split(&lb).engaged, "the 20th pick completes min_samples");
    assert_eq!(serve(&lb, &stats, &[None, None], 30, &|_| true), [30, 0]);
    let got = split(&lb);
    assert_eq!((got.fallback, got.blend, got.exploration), (20, 30, 0));
}

/// The blend's pick over targets with these latencies, prices and loads,
/// all sampled, under `policy`; the fallback would pick the last target.
fn blend_pick(
    latency: &[f64],
    prices: &[Option<Price>],
    loads: &[u64],
    policy: AdaptivePolicy,
) -> usize {
    let n = latency.len();
    let stats = Arc::new(FedStats::new(n));
    for (i, &ms) in latency.iter().enumerate() {
        stats.set(i, Some(ms), 100);
    }
    let (fallback, _) = Pinned::to(n - 1, n);
    let lb = adaptive(prices, &stats, policy, fallback);
    let pick = lb.pick(&RouteContext::default(), loads).unwrap();
    assert_eq!(split(&lb).blend, 1);
    pick
}

#[test]
fn engaged_blend_prefers_the_faster_target_by_latency_weight() {
    let pick = blend_pick(
        &[300.0, 100.0, 200.0],
        &[None; 3],
        &[0; 3],
        blend_only(1.0, 0.0, 0.0),
    );
    assert_eq!(pick, 1);
}

#[test]
fn engaged_blend_prefers_the_cheaper_target_by_cost_weight() {
    let prices = [price(10.0), price(1.0), price(5.0)];
    let pick = blend_pick(
        &[100.0, 300.0, 200.0],
        &prices,
        &[0; 3],
        blend_only(0.0, 1.0, 0.0),
    );
    assert_eq!(pick, 1);
}

#[test]
fn engaged_blend_prefers_the_less_loaded_target_by_load_weight() {
    let pick = blend_pick(
        &[100.0, 300.0, 200.0],
        &[None; 3],
        &[5, 2, 0],
        blend_only(0.0, 0.0, 1.0),
    );
    assert_eq!(pick, 2);
    // Equal latency and price: load decides even at its small default weight.
    let pick = blend_pick(
        &[200.0, 200.0],
        &[None; 2],
        &[4, 0],
        blend_only(1.0, 0.5, 0.25),
    );
    assert_eq!(pick, 1);
}

#[test]
fn engaged_blend_trades_latency_against_cost_per_the_weights() {
    // Target 0 is 20 % faster and ten times dearer.
    let prices = [price(30.0), price(3.0)];
    let latency = [100.0, 120.0];
    assert_eq!(
        blend_pick(&latency, &prices, &[0, 0], blend_only(1.0, 0.5, 0.25)),
        1
    );
    assert_eq!(
        blend_pick(&latency, &prices, &[0, 0], blend_only(1.0, 0.0, 0.25)),
        0
    );
    assert_eq!(
        blend_pick(&latency, &prices, &[0, 0], blend_only(1.0, 0.1, 0.0)),
        0
    );
}

#[test]
fn engaged_blend_does_not_rank_a_target_that_never_answered() {
    let stats = Arc::new(FedStats::new(3));
    stats.set(0, Some(400.0), 10);
    stats.set(1, Some(500.0), 10);
    let (fallback, _) = Pinned::to(2, 3);
    let lb = adaptive(&[None; 3], &stats, blend_only(1.0, 0.5, 0.25), fallback);
    let counts = serve(&lb, &stats, &[None; 3], 200, &|_| true);
    assert_eq!(counts, [200, 0, 0]);
}

#[test]
fn engaged_blend_breaks_ties_at_random() {
    let stats = Arc::new(FedStats::new(3));
    for i in 0..3 {
        stats.set(i, Some(250.0), 10);
    }
    let (fallback, _) = Pinned::to(0, 3);
    let lb = adaptive(&[None; 3], &stats, blend_only(1.0, 0.5, 0.25), fallback);
    let counts = serve(&lb, &stats, &[None; 3], 3_000, &|_| true);
    for &c in &counts {
        assert!((850..1_150).contains(&c), "{counts:?}");
    }
}

#[test]
fn engaged_exploration_share_is_close_to_the_ratio_and_uniform() {
    let stats = Arc::new(FedStats::new(4));
    for (i, ms) in [100.0, 200.0, 300.0, 400.0].into_iter().enumerate() {
        stats.set(i, Some(ms), 10);
    }
    let (fallback, _) = Pinned::to(3, 4);
    let policy = AdaptivePolicy {
        exploration_ratio: 0.2,
        ..blend_only(1.0, 0.5, 0.25)
    };
    let lb = adaptive(&[None; 4], &stats, policy, fallback);
    let counts = serve(&lb, &stats, &[None; 4], 20_000, &|_| true);
    let got = split(&lb);
    assert!((3_800..4_200).contains(&got.exploration), "{got:?}");
    assert_eq!(got.blend + got.exploration, 20_000);
    // The blend always takes target 0; exploration spreads 1000 each.
    for &c in &counts[1..] {
        assert!((850..1_150).contains(&c), "{counts:?}");
    }
}

#[test]
fn exploration_never_exceeds_half_the_traffic() {
    let stats = Arc::new(FedStats::new(2));
    stats.set(0, Some(100.0), 10);
    stats.set(1, Some(100.0), 10);
    let (fallback, _) = Pinned::to(0, 2);
    let policy = AdaptivePolicy {
        exploration_ratio: 0.9,
        ..blend_only(1.0, 0.5, 0.25)
    };
    let lb = adaptive(&[None; 2], &stats, policy, fallback);
    assert_eq!(
        lb.policy().exploration_ratio,
        Adaptive::MAX_EXPLORATION_RATIO
    );
    serve(&lb, &stats, &[None; 2], 10_000, &|_| true);
    let got = split(&lb);
    assert!((4_800..5_200).contains(&got.exploration), "{got:?}");
}

#[test]
fn policy_is_sanitized_again() {
    let stats = Arc::new(FedStats::new(2));
    let (fallback, _) = Pinned::to(0, 2);
    let policy = AdaptivePolicy {
        enabled: true,
        latency_weight: -1.0,
        cost_weight: f64::NAN,
        load_weight: f64::INFINITY,
        exploration_ratio: f64::NAN,
        min_samples: 0,
    };
    let lb = adaptive(&[None; 2], &stats, policy, fallback);
    let p = lb.policy();
    assert_eq!(
        (
            p.latency_weight,
            p.cost_weight,
            p.load_weight,
            p.exploration_ratio
        ),
        (0.0, 0.0, 0.0, 0.0)
    );
    // All weights zero: the blend may not route, and nothing is probed.
    assert_eq!(serve(&lb, &stats, &[None; 2], 20, &|_| true), [20, 0]);
    assert_eq!(split(&lb).exploration, 0);
}

#[test]
fn eligibility_is_honoured_in_every_mode() {
    let stats = Arc::new(FedStats::new(5));
    let (fallback, _) = Pinned::to(0, 5);
    let policy = AdaptivePolicy {
        exploration_ratio: 0.5,
        min_samples: 30,
        ..enabled()
    };
    let lb = adaptive(
        &[price(4.0), None, price(1.0), None, None],
        &stats,
        policy,
        fallback,
    );
    let answers = [Some(100.0), Some(50.0), Some(300.0), None, Some(80.0)];
    let loads = [3, 0, 1, 2, 0];
    for k in 0..2_000u64 {
        let mask = mix64(k) & 0b11111;
        let eligible = |i: usize| mask & (1 << i) != 0;
        let ctx = RouteContext::default();
        match lb.pick_eligible(&ctx, Candidates::new(&loads, &eligible)) {
            Some(i) => {
                assert!(eligible(i), "pick {k}: {i} under mask {mask:05b}");
                stats.dispatch(i);
                if let Some(ms) = answers[i] {
                    stats.record(i, ms);
                }
            }
            None => assert_eq!(mask, 0, "pick {k}: None while something is eligible"),
        }
    }
    let got = split(&lb);
    assert!(got.engaged && got.blend > 0 && got.exploration > 0 && got.fallback > 0);
    assert_eq!(
        lb.pick_eligible(
            &RouteContext::default(),
            Candidates::new(&loads, &|_| false)
        ),
        None
    );
}

#[test]
fn fallback_keeps_learning_while_the_blend_routes() {
    let stats = Arc::new(FedStats::new(2));
    stats.set(0, Some(100.0), 10);
    stats.set(1, Some(200.0), 10);
    let (fallback, observed) = Pinned::to(1, 2);
    let lb = adaptive(&[None; 2], &stats, blend_only(1.0, 0.5, 0.25), fallback);
    let counts = serve(&lb, &stats, &[None; 2], 100, &|_| true);
    assert_eq!(counts, [100, 0], "the blend routed every pick");
    assert_eq!(
        observed.load(Ordering::Relaxed),
        100,
        "the fallback saw every one"
    );
}

#[test]
fn same_seed_makes_the_same_picks() {
    let run = || {
        let stats = Arc::new(FedStats::new(6));
        let policy = AdaptivePolicy {
            exploration_ratio: 0.3,
            min_samples: 10,
            ..enabled()
        };
        let lb = adaptive(
            &[None; 6],
            &stats,
            policy,
            Box::new(Random::from_seed(6, 3)),
        );
        let answers: Vec<Option<f64>> = (0..6).map(|i| Some(100.0 + 10.0 * i as f64)).collect();
        serve(&lb, &stats, &answers, 500, &|i| i != 4)
    };
    assert_eq!(run(), run());
}

#[test]
fn report_carries_scores_components_signals_picks_and_the_split() {
    let stats = Arc::new(FedStats::new(3));
    stats.set(0, Some(100.0), 10);
    stats.set(1, Some(200.0), 10);
    let (fallback, _) = Pinned::to(0, 3);
    let policy = blend_only(1.0, 0.5, 0.25);
    let prices = [
        Some(Price {
            input_per_mtok: 1.0,
            output_per_mtok: 2.0,
        }),
        price(6.0),
        None,
    ];
    let lb = adaptive(&prices, &stats, policy, fallback);

    let before = lb.report();
    assert_eq!(before.targets.len(), 3);
    assert!(before
        .targets
        .iter()
        .all(|t| t.picks == 0 && t.last_pick_ms.is_none()));

    let ctx = RouteContext {
        now_ms: 1_234,
        ..RouteContext::default()
    };
    assert_eq!(lb.pick(&ctx, &[1, 3, 0]), Some(0));
    let report = lb.report();

    let t0 = &report.targets[0];
    assert_eq!(t0.picks, 1);
    assert_eq!(t0.last_pick_ms, Some(1_234));
    assert_eq!(
        t0.components,
        [("latency", 1.0), ("cost", 1.0), ("load", 0.5)]
    );
    assert_eq!(
        t0.signals,
        [("latency_ms", 100.0), ("price", 3.0), ("in_flight", 1.0)]
    );
    assert_eq!(t0.score, Some(1.0 + 0.5 + 0.25 * 0.5));

    let t1 = &report.targets[1];
    assert_eq!(t1.picks, 0);
    assert_eq!(t1.last_pick_ms, None);
    assert_eq!(
        t1.components,
        [("latency", 0.5), ("cost", 0.5), ("load", 0.25)]
    );

    // Never sampled, unpriced: no latency credit, the priced ones' mean cost.
    let t2 = &report.targets[2];
    assert_eq!(t2.signals, [("in_flight", 0.0)]);
    let component = |name: &str| t2.components.iter().find(|(n, _)| *n == name).unwrap().1;
    assert_eq!(component("latency"), 0.0);
    assert!(
        (component("cost") - 0.75).abs() < 1e-12,
        "{:?}",
        t2.components
    );
    assert_eq!(component("load"), 1.0);

    assert_eq!(
        report.decisions,
        Some(DecisionSplit {
            blend: 1,
            fallback: 0,
            exploration: 0,
            engaged: true,
        })
    );
}

#[test]
fn picks_counted_per_target_add_up_to_the_split() {
    let stats = Arc::new(FedStats::new(4));
    let policy = AdaptivePolicy {
        exploration_ratio: 0.25,
        min_samples: 40,
        ..enabled()
    };
    let lb = adaptive(
        &[None; 4],
        &stats,
        policy,
        Box::new(Random::from_seed(4, 1)),
    );
    let answers = [Some(100.0), Some(300.0), None, Some(200.0)];
    let counts = serve(&lb, &stats, &answers, 400, &|_| true);
    let report = lb.report();
    let picks: Vec<u64> = report.targets.iter().map(|t| t.picks).collect();
    assert_eq!(picks, counts);
    let got = report.decisions.unwrap();
    assert_eq!(got.blend + got.fallback + got.exploration, 400);
    assert_eq!(report.targets[3].last_pick_ms.is_some(), counts[3] > 0);
}

#[test]
fn adaptive_with_no_targets_picks_nothing() {
    let stats = Arc::new(FedStats::new(0));
    let lb = adaptive(&[], &stats, enabled(), Box::new(Random::from_seed(0, 1)));
    assert_eq!(lb.pick(&RouteContext::default(), &[]), None);
    assert_eq!(split(&lb), DecisionSplit::default());
}

#[test]
fn built_adaptive_with_the_policy_off_routes_exactly_like_the_pipeline() {
    // Moving a route to adaptive shifts no traffic on its own: the fallback
    // is the route's pipeline stack, seeded alike, and learns alike.
    let ids: Vec<String> = (0..5).map(|i| format!("p{i}/m")).collect();
    let targets: Vec<TargetSpec> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| TargetSpec {
            weight: 1 + i as u32 % 3,
            price: price(i as f64),
            ..TargetSpec::new(id)
        })
        .collect();
    let stats = Arc::new(FedStats::new(5));
    for i in 0..5 {
        stats.set(i, Some(100.0 * (i + 1) as f64), 100);
    }
    let ctx = BuildContext {
        stats,
        ..BuildContext::new(&targets, 21)
    };
    let adaptive = crate::build(crate::StrategyKind::Adaptive, &ctx);
    let pipeline = crate::build(crate::StrategyKind::Pipeline, &ctx);
    let sessions = ["alice", "bob", "carol"];
    let prompts = [
        "You are a helpful assistant. Summarise",
        "Translate to French:",
        "Hi",
    ];
    for k in 0..300usize {
        let loads: Vec<u64> = (0..5).map(|i| ((k + 2 * i) % 4) as u64).collect();
        let prompt = prompts[k % 3];
        let ctx = RouteContext {
            session_key: (k % 4 != 0).then_some(sessions[k % 3]),
            prompt,
            prompt_len: prompt.len(),
            now_ms: k as u64 * 10,
            ..RouteContext::default()
        };
        let eligible = |i: usize| (k + i) % 5 != 0;
        let want = pipeline.pick_eligible(&ctx, Candidates::new(&loads, &eligible));
        assert_eq!(
            adaptive.pick_eligible(&ctx, Candidates::new(&loads, &eligible)),
            want,
            "pick {k}"
        );
        if let Some(target) = want {
            adaptive.observe(target, &ctx);
            pipeline.observe(target, &ctx);
        }
    }
    let split = adaptive.report().decisions.unwrap();
    assert_eq!(
        (split.fallback, split.blend, split.exploration),
        (300, 0, 0)
    );
    assert_eq!(adaptive.name(), "adaptive");
}
