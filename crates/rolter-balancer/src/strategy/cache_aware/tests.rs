use super::*;
use crate::prefix_tree::BLOCK_BYTES;

fn ctx(prompt: &str) -> RouteContext<'_> {
    RouteContext {
        prompt,
        prompt_len: prompt.len(),
        ..RouteContext::default()
    }
}

/// A system prompt of `bytes` bytes shared by a route's requests.
fn system_prompt(bytes: usize) -> String {
    let mut s = String::new();
    let mut i = 0u32;
    while s.len() < bytes {
        s.push_str(&format!("Rule {i}: answer precisely and cite sources. "));
        i += 1;
    }
    s.truncate(bytes);
    s
}

fn with_question(system: &str, i: usize) -> String {
    format!("{system}\nUser question number {i}: how does request {i} differ?")
}

#[test]
fn cache_aware_reports_its_name() {
    assert_eq!(CacheAware::from_seed(2, 0).name(), "cache_aware");
}

#[test]
fn cold_prompt_goes_to_the_least_loaded_eligible_target_not_the_smallest_tree() {
    let lb = CacheAware::from_seed(3, 1);
    // Target 1 has learned a lot, target 0 nothing; target 1 is idle.
    for i in 0..20 {
        lb.observe(1, &ctx(&system_prompt(2_000 + i)));
    }
    let cold = "a prompt nobody has seen before, long enough to span blocks".repeat(4);
    assert_eq!(lb.pick(&ctx(&cold), &[3, 0, 2]), Some(1));
    assert_eq!(lb.decisions().cold, 1);
}

#[test]
fn cold_prompts_break_load_ties_at_random() {
    let lb = CacheAware::from_seed(4, 9);
    let mut counts = [0usize; 4];
    for _ in 0..3_000 {
        counts[lb.pick(&ctx("short"), &[1, 0, 0, 0]).unwrap()] += 1;
    }
    assert_eq!(counts[0], 0, "{counts:?}");
    for &c in &counts[1..] {
        assert!((850..1_150).contains(&c), "{counts:?}");
    }
}

#[test]
fn warm_replica_keeps_affinity_within_the_guard() {
    let lb = CacheAware::from_seed(3, 1);
    let system = system_prompt(3_000);
    lb.observe(2, &ctx(&with_question(&system, 0)));
    let next = with_question(&system, 1);
    // At most 2 in flight: kept, however idle the others.
    assert_eq!(lb.pick(&ctx(&next), &[0, 0, 2]), Some(2));
    // More than 2, but not more than 2 past the least loaded (3 vs 2).
    assert_eq!(lb.pick(&ctx(&next), &[2, 5, 3]), Some(2));
    // 9 vs 6: 3 past it, but exactly 1.5x is not past it.
    assert_eq!(lb.pick(&ctx(&next), &[6, 12, 9]), Some(2));
    assert_eq!(lb.decisions().affinity, 3);
}

#[test]
fn warm_replica_spreads_past_guard() {
    let lb = CacheAware::from_seed(3, 1);
    let system = system_prompt(3_000);
    lb.observe(2, &ctx(&with_question(&system, 0)));
    let next = with_question(&system, 1);
    // 3 in flight against an idle target: more than 2 past it and more
    // than 1.5x.
    assert_eq!(lb.pick(&ctx(&next), &[1, 0, 3]), Some(1));
    // 7 against 4: 3 past it, and past 1.5x (6).
    assert_eq!(lb.pick(&ctx(&next), &[4, 5, 7]), Some(0));
    assert_eq!(lb.decisions().spread, 2);
}

#[test]
fn past_the_guard_a_shorter_warm_match_keeps_the_request_before_a_cold_target() {
    let lb = CacheAware::from_seed(3, 1);
    let system = system_prompt(6_000);
    let history = format!("{system}{}", "Earlier turns of this chat. ".repeat(60));
    // Target 0 served this conversation; target 1 another user of the same
    // system prompt; target 2 nothing.
    lb.observe(0, &ctx(&history));
    lb.observe(1, &ctx(&with_question(&system, 0)));
    let next = format!("{history}And a follow-up question.");
    // Target 0 is past the guard (5 > 2 and > 1.5x 0); target 1 (2 waiting)
    // is within it: the system prompt's blocks beat an idle cold target.
    // Either way the guard moved it off its longest match: a spread.
    assert_eq!(lb.pick(&ctx(&next), &[5, 2, 0]), Some(1));
    // Both warm targets past it: only then the least loaded.
    assert_eq!(lb.pick(&ctx(&next), &[5, 4, 0]), Some(2));
    // Within the guard the longest match still wins over a less loaded one.
    assert_eq!(lb.pick(&ctx(&next), &[2, 0, 0]), Some(0));
    let decisions = lb.decisions();
    assert_eq!((decisions.affinity, decisions.spread), (1, 2));
}

#[test]
fn an_idle_ineligible_target_does_not_trip_the_guard() {
    let lb = CacheAware::from_seed(3, 1);
    let system = system_prompt(3_000);
    lb.observe(0, &ctx(&with_question(&system, 0)));
    let next = with_question(&system, 1);
    // Target 2 is idle but parked: the usable least load is 3, so the warm
    // target at 4 keeps the request.
    let got = lb.pick_eligible(&ctx(&next), Candidates::new(&[4, 3, 0], &|i| i != 2));
    assert_eq!(got, Some(0));
    // Eligible, the idle target does take it.
    assert_eq!(lb.pick(&ctx(&next), &[4, 3, 0]), Some(2));
}

#[test]
fn an_ineligible_warm_target_attracts_nothing() {
    let lb = CacheAware::from_seed(3, 1);
    let system = system_prompt(3_000);
    lb.observe(1, &ctx(&with_question(&system, 0)));
    let next = with_question(&system, 1);
    for _ in 0..100 {
        let got = lb.pick_eligible(&ctx(&next), Candidates::new(&[2, 0, 1], &|i| i != 1));
        assert_eq!(got, Some(2));
    }
    assert_eq!(
        lb.pick_eligible(&ctx(&next), Candidates::new(&[0; 3], &|_| false)),
        None
    );
}

#[test]
fn the_longest_match_wins_among_warm_targets() {
    let lb = CacheAware::from_seed(3, 1);
    let system = system_prompt(3_000);
    let conversation = format!("{system}{}", "Earlier turns of this chat. ".repeat(60));
    lb.observe(0, &ctx(&with_question(&system, 0)));
    lb.observe(1, &ctx(&conversation));
    let next = format!("{conversation}And a follow-up question.");
    assert_eq!(lb.pick(&ctx(&next), &[0, 2, 0]), Some(1));
}

#[test]
fn equally_warm_targets_split_by_load() {
    let lb = CacheAware::from_seed(3, 1);
    let system = system_prompt(3_000);
    lb.observe(0, &ctx(&with_question(&system, 0)));
    lb.observe(1, &ctx(&with_question(&system, 1)));
    let next = with_question(&system, 2);
    assert_eq!(lb.pick(&ctx(&next), &[2, 1, 0]), Some(1));
}

#[test]
fn a_small_match_of_a_long_prompt_is_cold() {
    let lb = CacheAware::from_seed(2, 1);
    // 1 KiB shared of a 3 KiB prompt: under half and under WARM_MATCH_BYTES.
    let shared = system_prompt(1_024);
    lb.observe(0, &ctx(&format!("{shared}{}", "x".repeat(2_048))));
    let next = format!("{shared}{}", "y".repeat(2_048));
    assert_eq!(lb.pick(&ctx(&next), &[1, 0]), Some(1));
    assert_eq!(lb.decisions().cold, 1);
}

#[test]
fn a_long_shared_prefix_is_warm_even_under_half_the_prompt() {
    let lb = CacheAware::from_seed(2, 1);
    // 8 KiB shared of a 24 KiB prompt: a third, but past WARM_MATCH_BYTES.
    let shared = system_prompt(8 * 1_024);
    lb.observe(0, &ctx(&format!("{shared}{}", "x".repeat(16 * 1_024))));
    let next = format!("{shared}{}", "y".repeat(16 * 1_024));
    assert_eq!(lb.pick(&ctx(&next), &[1, 0]), Some(0));
    assert_eq!(lb.decisions().affinity, 1);
}

/// Regression test for #1851: a system prompt shared by every request made
/// the first replica to serve it warm for all of them, and without a load
/// guard a burst of concurrent requests piled onto it (24/0/0) while its
/// peers idled.
#[test]
fn shared_system_prompt_under_concurrency_does_not_pile_onto_one_replica_1851() {
    for seed in 0..20 {
        let lb = CacheAware::from_seed(3, seed);
        let system = system_prompt(3_000);
        let mut loads = [0u64; 3];
        // 24 requests in flight, none completed: each is dispatched (its
        // load counted) and observed as it is picked.
        for i in 0..24 {
            let prompt = with_question(&system, i);
            let target = lb.pick(&ctx(&prompt), &loads).unwrap();
            // The guard held at the moment of the pick.
            let least = *loads.iter().min().unwrap();
            assert!(
                !lb.guard_trips(loads[target], least),
                "seed {seed}: request {i} went to {target} at {loads:?}"
            );
            loads[target] += 1;
            lb.observe(target, &ctx(&prompt));
        }
        let (max, min) = (*loads.iter().max().unwrap(), *loads.iter().min().unwrap());
        assert!(max <= 9 && min >= 7, "seed {seed}: {loads:?}");
        let decisions = lb.decisions();
        assert!(decisions.spread >= 2, "seed {seed}: {decisions:?}");
        // Once spread, the prefix is warm everywhere: affinity decides.
        assert!(decisions.affinity >= 18, "seed {seed}: {decisions:?}");
    }
}

#[test]
fn observe_learns_what_the_target_served() {
    let lb = CacheAware::from_seed(2, 1);
    let system = system_prompt(3_000);
    let next = with_question(&system, 1);
    assert_eq!(lb.pick(&ctx(&next), &[1, 0]), Some(1), "cold: least loaded");
    lb.observe(0, &ctx(&with_question(&system, 0)));
    assert_eq!(lb.pick(&ctx(&next), &[1, 0]), Some(0), "warm: affinity");
}

#[test]
fn report_counts_learned_size_evictions_and_picks() {
    let lb = CacheAware::with_max_bytes(2, 8 * BLOCK_BYTES, 1);
    for i in 0..4 {
        lb.observe(
            0,
            &ctx(&system_prompt(4 * BLOCK_BYTES + i).replace('R', &i.to_string())),
        );
    }
    let ctx_at = RouteContext {
        now_ms: 99,
        ..ctx("x")
    };
    assert_eq!(lb.pick(&ctx_at, &[5, 0]), Some(1));
    let report = lb.report();
    assert_eq!(report.targets.len(), 2);
    let (t0, t1) = (&report.targets[0], &report.targets[1]);
    assert_eq!(t0.learned_size, Some(8 * BLOCK_BYTES as u64));
    assert_eq!(t0.evictions, Some(8));
    assert_eq!((t1.learned_size, t1.evictions), (Some(0), Some(0)));
    assert_eq!((t1.picks, t1.last_pick_ms), (1, Some(99)));
    assert_eq!((t0.picks, t0.last_pick_ms), (0, None));
}

#[test]
fn prefix_memory_stays_bounded_under_a_stream_of_distinct_prompts() {
    let bound = 64 * 1_024;
    let lb = CacheAware::with_max_bytes(1, bound, 1);
    for i in 0..200 {
        let prompt = format!("{i:06} {}", system_prompt(4_000));
        lb.observe(0, &ctx(&prompt));
    }
    let report = lb.report();
    assert_eq!(report.targets[0].learned_size, Some(bound as u64));
    // 200 prompts of 62 blocks through a 1024-block tree.
    assert_eq!(report.targets[0].evictions, Some(200 * 62 - 1_024));
}

/// Target `i` has `waiting[i]` requests not past their first token.
struct Waiting(Vec<u64>);

impl TargetStatsView for Waiting {
    fn waiting(&self, target: usize) -> Option<u64> {
        self.0.get(target).copied()
    }
}

#[test]
fn streams_that_only_decode_do_not_push_a_conversation_off_its_warm_target() {
    let conversation = with_question(&system_prompt(6_000), 1);
    let warm = |waiting: Vec<u64>| {
        let lb = CacheAware::from_seed(3, 7)
            .with_guard(CacheGuard::default(), Arc::new(Waiting(waiting)));
        lb.observe(0, &ctx(&conversation));
        lb
    };
    // Target 0 streams 4 answers (decoding) against 0 elsewhere: counted by
    // in-flight, the guard would trip (4 > 2 and 4 > 1.5 x 0).
    let decoding = warm(vec![0, 0, 0]);
    assert_eq!(decoding.pick(&ctx(&conversation), &[4, 0, 1]), Some(0));
    assert_eq!(
        decoding.report().cache_decisions.map(|d| d.affinity),
        Some(1)
    );
    // The same four still waiting for their first token: it spreads.
    let queued = warm(vec![4, 0, 1]);
    assert_eq!(queued.pick(&ctx(&conversation), &[4, 0, 1]), Some(1));
    assert_eq!(queued.report().cache_decisions.map(|d| d.spread), Some(1));
    // Without a waiting count the view falls back to in flight.
    let unmeasured = CacheAware::from_seed(3, 7);
    unmeasured.observe(0, &ctx(&conversation));
    assert_eq!(unmeasured.pick(&ctx(&conversation), &[4, 0, 1]), Some(1));
}

#[test]
fn the_guard_thresholds_are_the_routes() {
    let conversation = with_question(&system_prompt(6_000), 2);
    let lb = |guard: CacheGuard| {
        let lb = CacheAware::from_seed(2, 3).with_guard(guard, Arc::new(NoViews));
        lb.observe(0, &ctx(&conversation));
        lb
    };
    // 4 against 1: the default guard (more than 2 and 1.5x past) trips.
    assert_eq!(
        lb(CacheGuard::default()).pick(&ctx(&conversation), &[4, 1]),
        Some(1)
    );
    let patient = CacheGuard {
        min_load: 8,
        load_ratio: 1.5,
    };
    assert_eq!(lb(patient).pick(&ctx(&conversation), &[4, 1]), Some(0));
    let ratio = CacheGuard {
        min_load: 2,
        load_ratio: 4.0,
    };
    assert_eq!(lb(ratio).pick(&ctx(&conversation), &[4, 1]), Some(0));
    assert_eq!(lb(ratio).pick(&ctx(&conversation), &[5, 1]), Some(1));
}

/// The guard's "more than 2" is counted past the least loaded target, as
/// its "1.5x" is: a warm engine one queued request ahead of a peer that
/// has one waiting keeps the conversation, whose history would otherwise
/// be prefilled again elsewhere.
#[test]
fn the_guard_counts_requests_past_the_least_loaded() {
    let guard = CacheGuard::default();
    assert!(
        !guard.trips(3, 1),
        "2 past the least loaded is not more than 2"
    );
    assert!(guard.trips(4, 1), "3 past it, and 4x");
    assert!(guard.trips(3, 0), "3 past an idle peer");
    assert!(!guard.trips(2, 0), "never at 2 or fewer");
    assert!(!guard.trips(9, 6), "3 past it, but only 1.5x");
    assert!(guard.trips(10, 6), "4 past it and more than 1.5x");

    let conversation = with_question(&system_prompt(6_000), 3);
    let lb = CacheAware::from_seed(3, 5).with_guard(guard, Arc::new(NoViews));
    lb.observe(0, &ctx(&conversation));
    assert_eq!(lb.pick(&ctx(&conversation), &[3, 1, 1]), Some(0));
    assert_eq!(lb.pick(&ctx(&conversation), &[4, 1, 2]), Some(1));
    let decisions = lb.decisions();
    assert_eq!((decisions.affinity, decisions.spread), (1, 1));
}
