//! `pick_eligible` cost of each strategy at 8 and 64 targets, with one target
//! excluded the way a parked or already-tried target is.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use rolter_balancer::{build, BuildContext, RouteContext, StrategyKind, TargetSpec};

const TARGET_COUNTS: [usize; 2] = [8, 64];

fn pick_eligible(c: &mut Criterion) {
    let mut group = c.benchmark_group("pick_eligible");
    for n in TARGET_COUNTS {
        let ids: Vec<String> = (0..n).map(|i| format!("provider-{i}/model")).collect();
        let targets: Vec<TargetSpec> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| TargetSpec {
                id,
                weight: 1 + (i as u32 % 4),
                price: None,
                max_adapters: TargetSpec::DEFAULT_MAX_ADAPTERS,
            })
            .collect();
        let loads: Vec<u64> = (0..n as u64).map(|i| i * 7 % 11).collect();
        let excluded = n / 2;
        let eligible = move |i: usize| i != excluded;
        for &kind in StrategyKind::ALL {
            let lb = build(kind, &BuildContext::new(&targets, 42));
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
                    lb.pick_eligible(black_box(&ctx), black_box(&loads), &eligible)
                });
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    targets = pick_eligible
}
criterion_main!(benches);
