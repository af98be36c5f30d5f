//! What tracing costs a request: nothing measurable while `[tracing]` is
//! off (the proxy's hooks see no trace after one atomic load), and a
//! request's hooks with tracing on when the request is not sampled
//! (`sampling_ratio = 0`: the trace ids are made, the spans are not).

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use pingora::http::RequestHeader;
use rolter::config::TracingConfig;
use rolter::metrics::Metrics;
use rolter::traces::{Ending, Traces};

fn header(traceparent: bool) -> RequestHeader {
    let mut header = RequestHeader::build("POST", b"/v1/chat/completions", None).unwrap();
    if traceparent {
        header
            .insert_header(
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
            )
            .unwrap();
    }
    header
}

fn begin(c: &mut Criterion) {
    let mut group = c.benchmark_group("traces");
    let metrics = Arc::new(Metrics::new());
    let off = Traces::default();
    let request = header(true);
    group.bench_function("off/begin", |b| {
        b.iter(|| black_box(off.begin(black_box(&request))))
    });

    let unsampled = Traces::default();
    unsampled.configure(
        Some(&TracingConfig {
            otlp_endpoint: "http://127.0.0.1:4318/v1/traces".into(),
            sampling_ppm: 0,
            service_name: "rolter".into(),
            max_queued_spans: 4096,
        }),
        &metrics,
    );
    let label: Arc<str> = Arc::from("gpu-a/model");
    for (name, request) in [
        ("caller_trace", header(true)),
        ("no_caller_trace", header(false)),
    ] {
        group.bench_function(format!("on_unsampled/request/{name}"), |b| {
            b.iter(|| {
                let mut trace = unsampled.begin(black_box(&request)).unwrap();
                trace.settle(false);
                let sent = trace.begin_attempt(Instant::now(), &label, "gpu-a", "pick");
                trace.end_attempt(Some(200), None, None);
                trace.finish(Ending {
                    method: "POST",
                    path: "/v1/chat/completions",
                    status: 200,
                    ..Ending::default()
                });
                black_box(sent)
            })
        });
    }
    group.finish();
}

criterion_group!(benches, begin);
criterion_main!(benches);
