//! `load-tests/pgo_train.py`, the traffic `make release` trains its
//! profile-guided build on, run against this test build. Every request of
//! its mix must get the status the mix expects: a mix gone stale (an API
//! that changed, a route the configuration lost) would otherwise train the
//! release build on error paths and compile the real ones as cold, and
//! nothing else would notice. The debug build is not instrumented, so the
//! run must also refuse to report a profile it did not get.

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ROLTER: &str = env!("CARGO_BIN_EXE_rolter");
const REPO: &str = env!("CARGO_MANIFEST_DIR");
/// pgo_train.py's exit status on a setup error (here: no profile written).
const EXIT_SETUP: i32 = 2;
const TRAFFIC_SECONDS: &str = "5";
/// Engines and gateway start, 5 s of traffic, the gateway's drain.
const RUN_LIMIT: Duration = Duration::from_secs(120);

#[test]
fn the_training_mix_gets_the_answers_it_expects_and_a_missing_profile_fails_the_run() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out_path = dir.path().join("stdout");
    let err_path = dir.path().join("stderr");
    let profiles = dir.path().join("profiles");
    let mut child = Command::new("python3")
        .arg(Path::new(REPO).join("load-tests/pgo_train.py"))
        .args([
            "--rolter",
            ROLTER,
            "--seconds",
            TRAFFIC_SECONDS,
            "--profiles",
        ])
        .arg(&profiles)
        .current_dir(REPO)
        .stdin(Stdio::null())
        .stdout(File::create(&out_path).expect("stdout file"))
        .stderr(File::create(&err_path).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run python3: {e}"));
    let deadline = Instant::now() + RUN_LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for pgo_train.py") {
            break Some(status);
        }
        if Instant::now() > deadline {
            // Its engines and gateway die with it (PR_SET_PDEATHSIG).
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let read = |path: &Path| {
        let mut text = String::new();
        File::open(path)
            .and_then(|mut f| f.read_to_string(&mut text))
            .expect("read pgo_train.py's output");
        text
    };
    let (stdout, stderr) = (read(&out_path), read(&err_path));
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
