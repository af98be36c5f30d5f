//! `load-tests/pgo_train.py`, the traffic `make release` trains its
//! profile-guided build on, run against this test build. Every request of
//! its mix must get the status the mix expects: a mix gone stale (an API
//! that changed, a route the configuration lost) would otherwise train the
//! release build on error paths and compile the real ones as cold, and
//! nothing else would notice. The debug build is not instrumented, so the
//! run must also refuse to report a profile it did not get.

use std::time::Duration;

mod support;

use support::script::{run_load_test, Finished};
use support::ROLTER;

/// pgo_train.py's exit status on a setup error (here: no profile written).
const EXIT_SETUP: i32 = 2;
const TRAFFIC_SECONDS: &str = "5";
/// Engines and gateway start, 5 s of traffic, the gateway's drain.
const RUN_LIMIT: Duration = Duration::from_secs(120);

#[test]
fn the_training_mix_gets_the_answers_it_expects_and_a_missing_profile_fails_the_run() {
    let dir = tempfile::tempdir().expect("temp dir");
    let profiles = dir.path().join("profiles");
    let Finished {
        status,
        stdout,
        stderr,
    } = run_load_test(
        "pgo_train.py",
        [
            "--rolter".as_ref(),
            ROLTER.as_ref(),
            "--seconds".as_ref(),
            TRAFFIC_SECONDS.as_ref(),
            "--profiles".as_ref(),
            profiles.as_os_str(),
        ],
        RUN_LIMIT,
    );
    let status =
        status.unwrap_or_else(|| panic!("still running after {RUN_LIMIT:?}:\n{stdout}\n{stderr}"));

    // Exit 1 would be answers other than the expected ones (listed on
    // stderr); 2 after the traffic is the profile check.
    assert_eq!(
        status.code(),
        Some(EXIT_SETUP),
        "pgo_train.py:\n{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("the gateway wrote no profile"),
        "the run did not notice the missing profile:\n{stderr}"
    );
    let answers = stdout
        .lines()
        .find_map(|l| l.strip_prefix("pgo_train: answers by status: "))
        .unwrap_or_else(|| panic!("no answers line:\n{stdout}\n{stderr}"));
    let answers: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(answers).expect("the answers are a JSON object");
    let count = |status: &str| answers.get(status).and_then(|n| n.as_u64()).unwrap_or(0);
    // The mix's served requests, and each kind of client error it makes on
    // purpose, reached the gateway; nothing else came back.
    assert!(count("200") >= 100, "{answers:?}");
    for error in ["400", "401", "404"] {
        assert!(count(error) > 0, "no {error} in the mix: {answers:?}");
    }
    assert_eq!(
        answers.len(),
        4,
        "statuses the mix does not send for: {answers:?}"
    );
}
