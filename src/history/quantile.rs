//! A quantile of a histogram's bucket counts, the way Prometheus'
//! `histogram_quantile` estimates it: find the bucket the rank falls in and
//! interpolate linearly inside it (from 0 for the first bucket). A rank in
//! the +Inf bucket answers the highest finite bound.

/// `counts` are cumulative per bucket, `bounds.len() + 1` of them (the last
/// is +Inf); `None` without observations or with a malformed histogram.
pub fn of_buckets(counts: &[u64], bounds: &[f64], q: f64) -> Option<f64> {
    if counts.len() != bounds.len() + 1 || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let total = *counts.last()?;
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let index = counts.iter().position(|&c| c as f64 >= rank)?;
    if index == bounds.len() {
        return bounds.last().copied();
    }
    let (lower, below) = match index {
        0 => (0.0, 0),
        i => (bounds[i - 1], counts[i - 1]),
    };
    let in_bucket = counts[index].saturating_sub(below);
    if in_bucket == 0 {
        return Some(bounds[index]);
    }
    let fraction = (rank - below as f64) / in_bucket as f64;
    Some(lower + (bounds[index] - lower) * fraction)
}

#[cfg(test)]
mod tests {
    use super::of_buckets;

    const BOUNDS: &[f64] = &[0.1, 0.2, 0.4];

    #[test]
    fn interpolates_inside_the_bucket_the_rank_falls_in() {
        // 10 observations: 4 below 0.1, 4 in (0.1, 0.2], 2 in (0.2, 0.4].
        let counts = [4, 8, 10, 10];
        assert_eq!(of_buckets(&counts, BOUNDS, 0.2), Some(0.05));
        let median = of_buckets(&counts, BOUNDS, 0.5).unwrap();
        assert!((median - 0.125).abs() < 1e-12, "{median}");
        let p95 = of_buckets(&counts, BOUNDS, 0.95).unwrap();
        assert!((p95 - 0.35).abs() < 1e-12, "{p95}");
    }

    #[test]
    fn a_rank_past_every_bound_answers_the_highest_one() {
        assert_eq!(of_buckets(&[0, 0, 1, 10], BOUNDS, 0.95), Some(0.4));
    }

    #[test]
    fn nothing_observed_or_a_malformed_histogram_answers_nothing() {
        assert_eq!(of_buckets(&[0, 0, 0, 0], BOUNDS, 0.5), None);
        assert_eq!(of_buckets(&[1, 2], BOUNDS, 0.5), None);
        assert_eq!(of_buckets(&[1, 1, 1, 1], BOUNDS, 1.5), None);
    }
}
