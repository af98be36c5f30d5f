//! `rolter check` and `rolter serve -t`: configuration is validated up front,
//! like `nginx -t`, with errors naming file, line and field.

mod support;

use std::process::Command;

use support::*;

const GOOD: &str = "[[providers]]\nname = \"gpu-a\"\nbase_url = \"http://127.0.0.1:9\"\n\n[[routes]]\nmodel = \"chat\"\ntargets = [{ provider = \"gpu-a\" }]\n";

fn write(dir: &std::path::Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn check_accepts_a_good_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "rolter.toml", GOOD);
    let output = Command::new(ROLTER)
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("test is successful"));
}

#[test]
fn check_names_file_line_and_field_of_each_error() {
    let dir = tempfile::tempdir().unwrap();
    let bad = GOOD.replace("provider = \"gpu-a\" }", "provider = \"gpu-z\" }")
        + "\n[retry]\nmax_retrys = 3\n";
    let path = write(dir.path(), "rolter.toml", &bad);
    let output = Command::new(ROLTER)
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("{}:10: retry.max_retrys", path.display())),
        "{stderr}"
    );
    assert!(stderr.contains("test failed"), "{stderr}");

    let bad = GOOD.replace("provider = \"gpu-a\" }", "provider = \"gpu-z\" }");
    let path = write(dir.path(), "rolter.toml", &bad);
    let output = Command::new(ROLTER)
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "{}:7: routes[0].targets[0].provider",
            path.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("gpu-z"), "{stderr}");
}

#[test]
fn check_reports_a_missing_file() {
    let output = Command::new(ROLTER)
        .args(["check", "--config", "/nonexistent/rolter.toml"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("/nonexistent/rolter.toml"));
}

#[test]
fn serve_test_flag_validates_both_files_and_exits() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "pingora.yaml", &pingora_yaml(dir.path()));
    let listeners = format!(
        "[server]\nlisten = [\"127.0.0.1:{}\"]\nadmin_listen = \"127.0.0.1:{}\"\n\n",
        free_port(),
        free_port()
    );
    let config = write(dir.path(), "rolter.toml", &(listeners.clone() + GOOD));
    let run = || {
        Command::new(ROLTER)
            .arg("serve")
            .arg("-t")
            .arg("-c")
            .arg(dir.path().join("pingora.yaml"))
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap()
    };
    let output = run();
    assert!(output.status.success(), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("test is successful"));

    std::fs::write(
        &config,
        listeners + "[[routes]]\nmodel = \"x\"\ntargets = []\n",
    )
    .unwrap();
    let output = run();
    assert_eq!(output.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&output.stderr).contains("routes[0].targets"));
}

#[test]
fn shipped_example_configuration_validates() {
    let output = Command::new(ROLTER)
        .args([
            "check",
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/conf/rolter.toml"),
        ])
        .env("TEAM_ALPHA_KEY", "sk-example")
        .env("ROLTER_ADMIN_TOKEN", "example")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
}

/// The binary's jemalloc keeps freed pages until `rolter::allocator`'s purge
/// (`src/main.rs`): its options string must reach jemalloc, which reads it
/// through a weak symbol before `main`.
#[test]
fn the_binary_tells_jemalloc_to_keep_freed_pages_for_the_purge() {
    let output = Command::new(ROLTER)
        .arg("--version")
        .env("_RJEM_MALLOC_CONF", "stats_print:true")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stats = String::from_utf8_lossy(&output.stderr);
    assert!(
        stats.contains("opt.dirty_decay_ms: -1"),
        "jemalloc's options at exit:\n{stats}"
    );
}
