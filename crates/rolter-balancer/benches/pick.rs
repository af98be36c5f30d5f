//! `pick_eligible` cost of each strategy at 8 and 64 targets, with one target
//! excluded the way a parked or already-tried target is; then a whole request
//! cycle — `pick_eligible` and `observe` of the chosen target — with 1 KiB
//! and 32 KiB conversations, so learning strategies pay for matching and
//! learning their prefix trees, session pins and adapter sets.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use rolter_balancer::{
    build, AdaptivePolicy, BuildContext, Candidates, LatencyModel, LoadBalancer, Price,
    RouteContext, StrategyKind, TargetSpec, TargetStatsView,
};

const TARGET_COUNTS: [usize; 2] = [8, 64];

/// Conversation sizes for the pick-and-observe cycle: a short chat and the
/// gateway's prompt bound.
const PROMPT_BYTES: [usize; 2] = [1024, 32 * 1024];

/// Distinct conversations cycled through: each shares its first half (a
/// system prompt) with the others and differs after it.
const CONVERSATIONS: usize = 16;

fn route(n: usize) -> (Vec<String>, Vec<u64>) {
    let ids = (0..n).map(|i| format!("provider-{i}/model")).collect();
    let loads = (0..n as u64).map(|i| i * 7 % 11).collect();
    (ids, loads)
}

fn specs(ids: &[String]) -> Vec<TargetSpec<'_>> {
    ids.iter()
        .enumerate()
        .map(|(i, id)| TargetSpec {
            id,
            weight: 1 + (i as u32 % 4),
            price: None,
            max_adapters: TargetSpec::DEFAULT_MAX_ADAPTERS,
        })
        .collect()
}

fn conversations(bytes: usize) -> Vec<String> {
    let system: String = "You are a meticulous assistant; cite every source. "
        .chars()
        .cycle()
        .take(bytes / 2)
        .collect();
    (0..CONVERSATIONS)
        .map(|c| {
            let mut text = system.clone();
            let turn = format!("Conversation {c}: the user asks about topic {c}. ");
            while text.len() < bytes {
                text.push_str(&turn);
            }
            text.truncate(bytes);
            text
        })
        .collect()
}

fn pick_and_observe(c: &mut Criterion) {
    let mut group = c.benchmark_group("pick_observe");
    let sessions: Vec<String> = (0..CONVERSATIONS).map(|c| format!("session-{c}")).collect();
    let adapters = ["lora-sql", "lora-poetry", "lora-legal"];
    let token_ids: Vec<u32> = (0..1024).collect();
    for bytes in PROMPT_BYTES {
        let prompts = conversations(bytes);
        for n in TARGET_COUNTS {
            let (ids, loads) = route(n);
            let targets = specs(&ids);
            let eligible = all_but_middle(n);
            for (kind, lb) in every_strategy(&targets) {
                let id = BenchmarkId::new(kind.as_str(), format!("{n}x{}KiB", bytes / 1024));
                group.bench_function(id, |b| {
                    let mut request: usize = 0;
                    let mut now_ms: u64 = 0;
                    b.iter(|| {
                        request = request.wrapping_add(1);
                        now_ms += 10;
                        let c = request % CONVERSATIONS;
                        let ctx = RouteContext {
                            session_key: Some(&sessions[c]),
                            prompt: &prompts[c],
                            prompt_len: prompts[c].len(),
                            prompt_digest: c as u64 + 1,
                            token_ids: Some(&token_ids),
                            adapter: Some(adapters[c % adapters.len()]),
                            now_ms,
                        };
                        serve_one(lb.as_ref(), &ctx, &loads, &eligible)
                    });
                });
            }
        }
    }
    group.finish();
}

/// Every target eligible but the middle one, as when one engine is down.
fn all_but_middle(n: usize) -> impl Fn(usize) -> bool + Copy {
    let excluded = n / 2;
    move |i| i != excluded
}

/// Every strategy, each built over `targets` with the same seed.
fn every_strategy<'a>(
    targets: &'a [TargetSpec<'a>],
) -> impl Iterator<Item = (StrategyKind, Box<dyn LoadBalancer>)> + 'a {
    StrategyKind::ALL
        .iter()
        .map(move |&kind| (kind, build(kind, &BuildContext::new(targets, 42))))
}

/// One request as the gateway makes it: a pick, then `observe` of the
/// target that served.
fn serve_one(
    lb: &dyn LoadBalancer,
    ctx: &RouteContext,
    loads: &[u64],
    eligible: &dyn Fn(usize) -> bool,
) -> Option<usize> {
    let picked = lb.pick_eligible(black_box(ctx), Candidates::new(black_box(loads), eligible));
    if let Some(target) = picked {
        lb.observe(target, ctx);
    }
    picked
}

fn pick_eligible(c: &mut Criterion) {
    let mut group = c.benchmark_group("pick_eligible");
    for n in TARGET_COUNTS {
        let (ids, loads) = route(n);
        let targets = specs(&ids);
        let eligible = all_but_middle(n);
        for (kind, lb) in every_strategy(&targets) {
            group.bench_with_input(BenchmarkId::new(kind.as_str(), n), &n, |b, _| {
                // A fresh digest per pick, so consistent_hash walks a
                // different part of the ring each time.
                let mut digest: u64 = 1;
                b.iter(|| {
                    digest = digest.wrapping_add(0x9e37_79b9_7f4a_7c15);
                    let ctx = RouteContext {
                        prompt_digest: digest,
                        ..RouteContext::default()
                    };
                    lb.pick_eligible(
                        black_box(&ctx),
                        Candidates::new(black_box(&loads), &eligible),
                    )
                });
            });
        }
    }
    group.finish();
}

/// Measurements as a warm gateway holds them: every target sampled, with a
/// smoothed latency and a trained [`LatencyModel`] (predictions read through
/// its sequence lock, as the gateway's tracker does).
struct WarmStats {
    latency_ms: Vec<f64>,
    models: Vec<LatencyModel>,
}

impl WarmStats {
    fn new(n: usize) -> Self {
        let models: Vec<LatencyModel> = (0..n).map(|_| LatencyModel::new()).collect();
        for (i, model) in models.iter().enumerate() {
            for k in 0..64u64 {
                let (queue, ktokens) = (k % 8, (k % 5) as f64);
                model.learn(
                    queue,
                    ktokens,
                    150.0 + 10.0 * i as f64 + 80.0 * queue as f64 + 120.0 * ktokens,
                );
            }
        }
        Self {
            latency_ms: (0..n).map(|i| 200.0 + 37.0 * (i % 9) as f64).collect(),
            models,
        }
    }
}

impl TargetStatsView for WarmStats {
    fn latency_ms(&self, target: usize) -> Option<f64> {
        self.latency_ms.get(target).copied()
    }
    fn latency_samples(&self, target: usize) -> u64 {
        u64::from(target < self.latency_ms.len()) * 100
    }
    fn served(&self, target: usize) -> u64 {
        self.latency_samples(target)
    }
    /// Warm: nothing left to warm up.
    fn warm_up_spent(&self, _target: usize) -> u64 {
        u64::MAX
    }
    fn spend_warm_up(&self, _target: usize, _budget: u64) -> bool {
        false
    }
    fn latency_model(&self, target: usize) -> Option<&LatencyModel> {
        self.models.get(target)
    }
}

/// `adaptive` engaged (the blend routes, 5 % exploration) and
/// `predicted_latency` with warm models: the states the default-context
/// groups above never reach (there adaptive's policy is off, so it measures
/// its fallback, and every model is cold). `pick_eligible` alone, then the
/// pick-and-observe cycle with 1 KiB and 32 KiB conversations.
fn warm_views(c: &mut Criterion) {
    let mut group = c.benchmark_group("warm_views");
    let kinds = [
        ("adaptive_engaged", StrategyKind::Adaptive),
        ("predicted_latency_warm", StrategyKind::PredictedLatency),
    ];
    for n in TARGET_COUNTS {
        let (ids, loads) = route(n);
        let targets: Vec<TargetSpec> = specs(&ids)
            .into_iter()
            .enumerate()
            .map(|(i, t)| TargetSpec {
                price: (i % 3 != 0).then_some(Price {
                    input_per_mtok: 1.0 + i as f64 % 5.0,
                    output_per_mtok: 4.0,
                }),
                ..t
            })
            .collect();
        let eligible = all_but_middle(n);
        let ctx = BuildContext {
            stats: std::sync::Arc::new(WarmStats::new(n)),
            adaptive: AdaptivePolicy {
                enabled: true,
                min_samples: 0,
                ..AdaptivePolicy::default()
            },
            ..BuildContext::new(&targets, 42)
        };
        for (name, kind) in kinds {
            let lb = build(kind, &ctx);
            group.bench_function(BenchmarkId::new(format!("{name}/pick_eligible"), n), |b| {
                let request = RouteContext {
                    prompt_len: 4096,
                    ..RouteContext::default()
                };
                b.iter(|| {
                    lb.pick_eligible(
                        black_box(&request),
                        Candidates::new(black_box(&loads), &eligible),
                    )
                });
            });
            for bytes in PROMPT_BYTES {
                let prompts = conversations(bytes);
                let id = BenchmarkId::new(
                    format!("{name}/pick_observe"),
                    format!("{n}x{}KiB", bytes / 1024),
                );
                group.bench_function(id, |b| {
                    let mut request: usize = 0;
                    b.iter(|| {
                        request = request.wrapping_add(1);
                        let c = request % CONVERSATIONS;
                        let ctx = RouteContext {
                            prompt: &prompts[c],
                            prompt_len: prompts[c].len(),
                            prompt_digest: c as u64 + 1,
                            now_ms: request as u64,
                            ..RouteContext::default()
                        };
                        serve_one(lb.as_ref(), &ctx, &loads, &eligible)
                    });
                });
            }
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    // Short runs: the whole bench (every strategy, both groups) stays under
    // about two minutes on a small machine.
    config = Criterion::default()
        .sample_size(50)
        .measurement_time(Duration::from_millis(800))
        .warm_up_time(Duration::from_millis(250));
    targets = pick_eligible, pick_and_observe, warm_views
}
criterion_main!(benches);
