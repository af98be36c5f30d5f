use super::*;

fn reading(at_unix_ms: u64, attempts: u64, failures: u64, ttfb: [u64; 4]) -> Reading {
    const BOUNDS: &[f64] = &[0.1, 0.2, 0.4];
    Reading {
        at_unix_ms,
        attempts,
        failures,
        in_flight: 3,
        ttfb: Some((ttfb.to_vec(), BOUNDS)),
    }
}

fn key(route: &str) -> SeriesKey {
    (route.to_owned(), "gpu/m".to_owned())
}

#[test]
fn each_point_holds_the_rates_and_quantiles_of_its_own_interval() {
    let history = History::default();
    history.record(vec![(
        key("chat"),
        reading(10_000, 100, 5, [40, 80, 100, 100]),
    )]);
    assert!(
        history.points()[0].1.is_empty(),
        "a first reading makes no point"
    );
    // 5 s later: 50 more attempts, 10 more failures; the interval's own
    // time to first byte is all in (0.2, 0.4], whatever came before.
    history.record(vec![(
        key("chat"),
        reading(15_000, 150, 15, [40, 80, 150, 150]),
    )]);
    let points = &history.points()[0].1;
    assert_eq!(points.len(), 1);
    let point = &points[0];
    assert_eq!(point.at_unix_ms, 15_000);
    assert_eq!(point.requests_per_s, 10.0);
    assert_eq!(point.errors_per_s, 2.0);
    assert_eq!(point.in_flight, 3);
    let p50 = point.ttft_p50_ms.unwrap();
    assert!((p50 - 300.0).abs() < 1e-9, "{p50}");
    assert!(point.ttft_p95_ms.unwrap() > p50);
}

#[test]
fn a_series_keeps_its_last_points_and_leaves_with_its_route() {
    let history = History::default();
    for i in 0..(POINTS as u64 + 10) {
        history.record(vec![
            (key("chat"), reading(i * 5_000, i, 0, [0, 0, 0, 0])),
            (key("other"), reading(i * 5_000, 0, 0, [0, 0, 0, 0])),
        ]);
    }
    let all = history.points();
    assert_eq!(all.len(), 2);
    assert_eq!(all[0].1.len(), POINTS);
    // 189 points of 190 readings: the first nine went.
    assert_eq!(
        all[0].1[0].at_unix_ms,
        10 * 5_000,
        "the oldest points go first"
    );
    assert_eq!(all[0].1[0].ttft_p50_ms, None, "no request, no quantile");
    history.record(vec![(
        key("chat"),
        reading((POINTS as u64 + 10) * 5_000, 0, 0, [0, 0, 0, 0]),
    )]);
    let all = history.points();
    assert_eq!(all.len(), 1, "a removed route's series is dropped");
    assert_eq!(
        all[0].1.len(),
        POINTS,
        "counters that went backwards (a restart) make no point"
    );
}

#[test]
fn readings_without_a_histogram_have_rates_and_no_quantiles() {
    let history = History::default();
    let plain = |at, attempts| Reading {
        at_unix_ms: at,
        attempts,
        failures: 0,
        in_flight: 1,
        ttfb: None,
    };
    history.record(vec![(key("chat"), plain(0, 0))]);
    history.record(vec![(key("chat"), plain(2_000, 8))]);
    let point = &history.points()[0].1[0];
    assert_eq!(point.requests_per_s, 4.0);
    assert_eq!((point.ttft_p50_ms, point.ttft_p95_ms), (None, None));
}
