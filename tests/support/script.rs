//! A Python script of `load-tests/` run to its end under a time limit, with
//! what it printed.

use std::ffi::OsStr;
use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

pub struct Finished {
    /// `None` when the script was still running at the limit (it was killed).
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `python3 load-tests/<script> <args>` from the repository root. A
/// script still running after `limit` is killed; the processes it started
/// die with it (the load-tests helpers set PR_SET_PDEATHSIG).
pub fn run_load_test<I, S>(script: &str, args: I, limit: Duration) -> Finished
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let dir = tempfile::tempdir().expect("temp dir");
    let out_path = dir.path().join("stdout");
    let err_path = dir.path().join("stderr");
    let mut child = Command::new("python3")
        .arg(Path::new(REPO).join("load-tests").join(script))
        .args(args)
        .current_dir(REPO)
        .stdin(Stdio::null())
        .stdout(File::create(&out_path).expect("stdout file"))
        .stderr(File::create(&err_path).expect("stderr file"))
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run python3 (run `make deps`): {e}"));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the script") {
            break Some(status);
        }
        if Instant::now() > deadline {
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
            .unwrap_or_else(|e| panic!("read {script}'s output: {e}"));
        text
    };
    Finished {
        status,
        stdout: read(&out_path),
        stderr: read(&err_path),
    }
}
