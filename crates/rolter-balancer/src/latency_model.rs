//! The per-target latency model behind `predicted_latency`.
//!
//! A target's latency is modelled as a linear law over what the gateway can
//! see when it places a request:
//!
//! ```text
//! latency_ms ≈ w0 + w1 · queue_depth + w2 · prompt_ktokens
//! ```
//!
//! `w0` is fixed overhead, `w1` what one request already in flight ahead of
//! this one costs, `w2` prefill cost per thousand prompt tokens. Three
//! features and no more: batch composition, KV pressure and the engine's
//! scheduling phase are invisible from the gateway, and a model with
//! parameters it cannot observe fits noise (docs/design/balancer.md,
//! "predicted_latency"; #853, after llm-d).
//!
//! The coefficients are learned online by normalized least mean squares
//! (Widrow & Hoff's LMS with the step divided by the feature vector's squared
//! norm, Nagumo & Noda 1967): for a sample `(x, y)` with `x = [1, queue,
//! ktokens]`,
//!
//! ```text
//! w ← w + STEP · (y − w·x) · x / ‖x‖²
//! ```
//!
//! which moves the prediction at `x` a fixed fraction ([`STEP`]) of the way
//! to the sample whatever the features' magnitudes: one multiply-add per
//! feature per sample, no matrix, no allocation, no periodic refit.
//!
//! # Robustness
//!
//! Three clamps keep one bad sample one bad sample:
//!
//! - a sample is clamped to `[0, MAX_SAMPLE_MS]`, and a non-finite one is
//!   dropped;
//! - once the model predicts, the error a sample may teach is clipped to
//!   [`OUTLIER_ERROR_RATIO`] times the current prediction, so a client that
//!   held a stream open for a week moves the prediction by at most
//!   `STEP · OUTLIER_ERROR_RATIO` (45 %) once, and the next samples pull it
//!   back — while a genuine slow-down still wins in a few samples, since each
//!   one may raise the prediction by that much again;
//! - every coefficient is clamped to `[0, MAX_SAMPLE_MS]`: a deeper queue or
//!   a longer prompt never predicts a faster answer, and no coefficient can
//!   claim more than the longest sample the model accepts.
//!
//! # Contract with the gateway
//!
//! The gateway keeps one model per target in its load tracker (not in the
//! routing snapshot, so a reload keeps what was learned) and feeds it only
//! successful requests — a fast failure must not train a target into looking
//! cheap — with the queue depth it read *before* its own in-flight increment,
//! so the model learns the queue a request joined rather than the one it
//! created. `latency_ms` is the same measurement the latency EWMA uses.
//!
//! # Concurrency
//!
//! Many request threads learn and predict at once. Learners are serialized by
//! a tiny mutex; predictions never take it: the coefficients are published
//! through a sequence lock (Lamport's "concurrent reading and writing", the
//! scheme of crossbeam's `AtomicCell` and Linux's `seqlock_t`), so a pick
//! reads a consistent `(w, samples)` without blocking behind a learner.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// NLMS step: the fraction of the error a sample corrects at its own
/// features (docs/design/defaults.md).
pub const STEP: f64 = 0.15;

/// Successful samples a model needs before it predicts anything (docs/design/defaults.md).
pub const MIN_SAMPLES: u64 = 8;

/// Longest latency a sample may report, in ms (10 minutes); longer ones are
/// clamped to it. Past it a sample says more about the client than about the
/// target. Also the upper bound of every coefficient.
pub const MAX_SAMPLE_MS: f64 = 600_000.0;

/// Once the model predicts, a sample may teach an error of at most this many
/// times the current prediction (see the module documentation).
pub const OUTLIER_ERROR_RATIO: f64 = 3.0;

/// Floor, in ms, of the prediction the outlier clip is relative to, so a model
/// that predicts (nearly) zero can still learn upward.
pub const MIN_ERROR_SCALE_MS: f64 = 10.0;

/// Largest prompt size a sample or prediction may use, in thousands of tokens
/// (a billion tokens): beyond any context window, and it keeps `‖x‖²` finite.
pub const MAX_PROMPT_KTOKENS: f64 = 1_000_000.0;

/// One target's online latency model; see the module documentation.
#[derive(Debug, Default)]
pub struct LatencyModel {
    /// Serializes learners. Held only for one NLMS step (a dozen float
    /// operations and seven relaxed stores), never across I/O or a callback,
    /// and predictions do not take it.
    learner: Mutex<()>,
    /// Sequence lock over `weights` and `samples`: odd while a learner
    /// publishes, advanced by two per publication.
    seq: AtomicU64,
    /// `[w0, w1, w2]` as `f64` bits.
    weights: [AtomicU64; 3],
    /// Samples learned (clamped ones included, dropped ones not).
    samples: AtomicU64,
}

impl LatencyModel {
    /// A cold model: all coefficients zero, no samples, no prediction.
    pub fn new() -> Self {
        Self::default()
    }

    /// Learns one successful request: it joined a queue of `queue_depth`
    /// requests (read before its own in-flight increment), carried a prompt
    /// of `prompt_ktokens` thousand tokens, and took `latency_ms`.
    ///
    /// Call it for successful requests only. A non-finite `latency_ms` is
    /// ignored; see the module documentation for the clamps.
    pub fn learn(&self, queue_depth: u64, prompt_ktokens: f64, latency_ms: f64) {
        if !latency_ms.is_finite() {
            return;
        }
        let y = latency_ms.clamp(0.0, MAX_SAMPLE_MS);
        let x = features(queue_depth, prompt_ktokens);
        // ‖x‖² ≥ 1 thanks to the constant feature, and finite thanks to the
        // feature bounds, so the division below is always defined.
        let norm = dot(x, x);

        // Poisoning only means a learner panicked mid-step, which pure
        // arithmetic cannot do; the published state is consistent anyway.
        let _learner = self.learner.lock().unwrap_or_else(PoisonError::into_inner);
        // Only learners write, and we are the only learner: relaxed loads
        // read the last publication exactly.
        let mut w = self.weights.each_ref().map(load_f64);
        let samples = self.samples.load(Ordering::Relaxed);

        let predicted = dot(w, x);
        let mut error = y - predicted;
        if samples >= MIN_SAMPLES {
            error = error.min(OUTLIER_ERROR_RATIO * predicted.max(MIN_ERROR_SCALE_MS));
        }
        let gain = STEP * error / norm;
        for (wk, xk) in w.iter_mut().zip(x) {
            *wk = (*wk + gain * xk).clamp(0.0, MAX_SAMPLE_MS);
        }
        debug_assert!(w.iter().all(|wk| wk.is_finite()), "coefficients {w:?}");
        self.publish(w, samples + 1);
    }

    /// What a request of `prompt_ktokens` thousand tokens joining a queue of
    /// `queue_depth` is modelled to take, in ms; `None` until the model has
    /// learned [`MIN_SAMPLES`] samples.
    pub fn predict(&self, queue_depth: u64, prompt_ktokens: f64) -> Option<f64> {
        let (w, samples) = self.read();
        (samples >= MIN_SAMPLES).then(|| dot(w, features(queue_depth, prompt_ktokens)))
    }

    /// Samples learned so far.
    pub fn samples(&self) -> u64 {
        self.read().1
    }

    /// The learned `[w0 (ms), w1 (ms per queued request), w2 (ms per
    /// thousand prompt tokens)]`.
    pub fn coefficients(&self) -> [f64; 3] {
        self.read().0
    }

    /// Publishes a learner's result. Call with `learner` held.
    fn publish(&self, w: [f64; 3], samples: u64) {
        let seq = self.seq.load(Ordering::Relaxed);
        debug_assert!(seq % 2 == 0, "a publication is already in progress");
        self.seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        // Orders the odd marker before the data: a reader that sees any new
        // value also sees the marker on its re-check.
        fence(Ordering::Release);
        for (cell, wk) in self.weights.iter().zip(w) {
            cell.store(wk.to_bits(), Ordering::Relaxed);
        }
        self.samples.store(samples, Ordering::Relaxed);
        self.seq.store(seq.wrapping_add(2), Ordering::Release);
    }

    /// A consistent `(weights, samples)`: retried while a learner publishes,
    /// which takes a handful of stores.
    fn read(&self) -> ([f64; 3], u64) {
        let mut spins = 0u32;
        loop {
            let before = self.seq.load(Ordering::Acquire);
            if before % 2 == 0 {
                let w = self.weights.each_ref().map(load_f64);
                let samples = self.samples.load(Ordering::Relaxed);
                // Orders the data loads before the re-check (pairs with the
                // learner's release fence).
                fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == before {
                    return (w, samples);
                }
            }
            // A learner preempted mid-publication: let it run.
            spins += 1;
            if spins % 64 == 0 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// The feature vector `[1, queue_depth, prompt_ktokens]`, prompt size
/// sanitized (non-finite or negative reads as 0) and bounded.
fn features(queue_depth: u64, prompt_ktokens: f64) -> [f64; 3] {
    let ktokens = if prompt_ktokens.is_finite() {
        prompt_ktokens.clamp(0.0, MAX_PROMPT_KTOKENS)
    } else {
        0.0
    };
    [1.0, queue_depth as f64, ktokens]
}

fn dot(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

fn load_f64(cell: &AtomicU64) -> f64 {
    f64::from_bits(cell.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::rng::SplitMix64;

    /// A uniform draw in `[0, 1)`.
    fn unit(rng: &SplitMix64) -> f64 {
        (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Feeds `n` samples of `law` (`[w0, w1, w2]`) with queue depths in
    /// `0..=16`, prompts in `[0, 8)` ktokens and uniform noise of ±`noise` ms.
    fn train(model: &LatencyModel, law: [f64; 3], n: usize, noise: f64, seed: u64) {
        let rng = SplitMix64::from_seed(seed);
        for _ in 0..n {
            let queue = rng.below(17) as u64;
            let ktokens = 8.0 * unit(&rng);
            let latency = dot(law, [1.0, queue as f64, ktokens]) + noise * (2.0 * unit(&rng) - 1.0);
            model.learn(queue, ktokens, latency);
        }
    }

    fn assert_close(got: f64, want: f64, tolerance: f64) {
        assert!(
            (got - want).abs() <= tolerance * want.abs(),
            "got {got}, want {want} ± {:.0} %",
            tolerance * 100.0
        );
    }

    #[test]
    fn latency_model_converges_on_a_noisy_linear_law() {
        let model = LatencyModel::new();
        let law = [400.0, 120.0, 250.0];
        train(&model, law, 5_000, 50.0, 1);
        let w = model.coefficients();
        assert_close(w[0], law[0], 0.15);
        assert_close(w[1], law[1], 0.05);
        assert_close(w[2], law[2], 0.05);
        for (queue, ktokens) in [(0, 0.5), (4, 2.0), (12, 6.0)] {
            let want = dot(law, [1.0, queue as f64, ktokens]);
            assert_close(model.predict(queue, ktokens).unwrap(), want, 0.05);
        }
        assert_eq!(model.samples(), 5_000);
    }

    #[test]
    fn latency_model_separates_a_deep_queue_from_a_long_prompt() {
        // One target where waiting is expensive, one where prefill is.
        let queue_bound = LatencyModel::new();
        train(&queue_bound, [200.0, 300.0, 20.0], 4_000, 30.0, 2);
        let prefill_bound = LatencyModel::new();
        train(&prefill_bound, [200.0, 10.0, 400.0], 4_000, 30.0, 3);

        let (deep_queue, long_prompt) = ((8, 1.0), (1, 8.0));
        let predict = |m: &LatencyModel, (q, k): (u64, f64)| m.predict(q, k).unwrap();
        assert!(predict(&queue_bound, deep_queue) > 2.0 * predict(&queue_bound, long_prompt));
        assert!(predict(&prefill_bound, long_prompt) > 2.0 * predict(&prefill_bound, deep_queue));
        assert!(queue_bound.coefficients()[1] > 10.0 * queue_bound.coefficients()[2]);
        assert!(prefill_bound.coefficients()[2] > 10.0 * prefill_bound.coefficients()[1]);
    }

    #[test]
    fn latency_model_predicts_nothing_before_eight_samples() {
        let model = LatencyModel::new();
        assert_eq!(model.predict(0, 0.0), None);
        for i in 0..MIN_SAMPLES {
            assert_eq!(model.predict(3, 1.0), None, "after {i} samples");
            model.learn(3, 1.0, 900.0);
        }
        assert!(model.predict(3, 1.0).is_some_and(|p| p > 0.0));
        assert_eq!(model.samples(), MIN_SAMPLES);
    }

    #[test]
    fn latency_model_ignores_non_finite_samples_and_sanitizes_features() {
        let model = LatencyModel::new();
        model.learn(1, 1.0, f64::NAN);
        model.learn(1, 1.0, f64::INFINITY);
        assert_eq!(model.samples(), 0);
        for _ in 0..MIN_SAMPLES {
            model.learn(u64::MAX, f64::NAN, 500.0);
            model.learn(2, f64::INFINITY, -5.0);
            model.learn(2, f64::MAX, 500.0);
        }
        assert!(model.coefficients().iter().all(|w| w.is_finite()));
        let prediction = model.predict(u64::MAX, f64::MAX).unwrap();
        assert!(prediction.is_finite() && prediction >= 0.0, "{prediction}");
    }

    #[test]
    fn week_long_stream_is_one_bad_sample_not_a_poisoned_model() {
        let model = LatencyModel::new();
        let law = [300.0, 80.0, 150.0];
        train(&model, law, 3_000, 20.0, 4);
        let truth = dot(law, [1.0, 4.0, 2.0]);
        let before = model.predict(4, 2.0).unwrap();
        assert_close(before, truth, 0.05);

        model.learn(4, 2.0, 7.0 * 24.0 * 3_600_000.0);
        let after = model.predict(4, 2.0).unwrap();
        assert!(
            after <= before * (1.0 + STEP * OUTLIER_ERROR_RATIO) + 1.0,
            "{before} -> {after}"
        );
        assert!(model.coefficients().iter().all(|&w| w <= MAX_SAMPLE_MS));

        train(&model, law, 40, 20.0, 5);
        assert_close(model.predict(4, 2.0).unwrap(), truth, 0.05);
    }

    #[test]
    fn latency_model_follows_a_genuine_slowdown_quickly() {
        let model = LatencyModel::new();
        train(&model, [200.0, 50.0, 100.0], 2_000, 10.0, 6);
        let slow = [2_000.0, 500.0, 1_000.0];
        train(&model, slow, 600, 10.0, 7);
        assert_close(
            model.predict(4, 2.0).unwrap(),
            dot(slow, [1.0, 4.0, 2.0]),
            0.1,
        );
    }

    #[test]
    fn latency_model_coefficients_never_go_negative() {
        // Latency that falls with queue depth is noise the model must not
        // believe: a deeper queue never predicts a faster answer.
        let model = LatencyModel::new();
        let rng = SplitMix64::from_seed(8);
        for _ in 0..2_000 {
            let queue = rng.below(17) as u64;
            model.learn(queue, 1.0, 2_000.0 - 100.0 * queue as f64);
        }
        assert!(model.coefficients().iter().all(|&w| w >= 0.0));
        assert!(model.predict(16, 1.0).unwrap() >= model.predict(0, 1.0).unwrap() - 1e-9);
    }

    #[test]
    fn concurrent_learners_and_readers_do_not_corrupt_the_model() {
        let model = Arc::new(LatencyModel::new());
        let law = [400.0, 120.0, 250.0];
        let learners: Vec<_> = (0..4)
            .map(|t| {
                let model = Arc::clone(&model);
                std::thread::spawn(move || train(&model, law, 5_000, 50.0, 100 + t))
            })
            .collect();
        let reader = {
            let model = Arc::clone(&model);
            std::thread::spawn(move || {
                let mut last = 0;
                for _ in 0..50_000 {
                    let (w, samples) = model.read();
                    assert!(samples >= last, "samples went backwards");
                    last = samples;
                    assert!(
                        w.iter().all(|wk| (0.0..=MAX_SAMPLE_MS).contains(wk)),
                        "{w:?}"
                    );
                }
            })
        };
        for learner in learners {
            learner.join().unwrap();
        }
        reader.join().unwrap();

        assert_eq!(model.samples(), 20_000, "no sample lost");
        let w = model.coefficients();
        assert_close(w[0], law[0], 0.15);
        assert_close(w[1], law[1], 0.05);
        assert_close(w[2], law[2], 0.05);
    }

    #[test]
    fn latency_model_is_send_and_sync() {
        fn shared<T: Send + Sync>() {}
        shared::<LatencyModel>();
    }
}
