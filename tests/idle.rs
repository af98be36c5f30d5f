//! An idle gateway sleeps: its background services wake when a round of
//! theirs is due or the configuration changes, not on a tick that finds
//! nothing to do (`src/wake.rs`).

mod support;

use std::collections::HashMap;
use std::time::Duration;

use support::*;

/// Each thread's voluntary context switches so far (a thread that sleeps
/// and wakes counts one), by thread id.
fn voluntary_switches(pid: i32) -> HashMap<String, u64> {
    let mut switches = HashMap::new();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return switches;
    };
    for task in tasks.flatten() {
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        let count = status
            .lines()
            .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|n| n.trim().parse().ok());
        if let Some(count) = count {
            switches.insert(task.file_name().to_string_lossy().into_owned(), count);
        }
    }
    switches
}

#[tokio::test]
async fn an_idle_gateway_wakes_a_few_times_a_second_not_a_hundred() {
    let engine = FakeEngine::start("a", &[]);
    // Health checks on (the default, every 10 s); nothing else to poll.
    let gateway = Gateway::start(&format!(
        "{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"a\" }}]\n",
        provider("a", &engine.url())
    ))
    .await;
    assert_eq!(gateway.chat("chat", "hello").await.status(), 200);
    // Past the start's first probes and polls.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let window = Duration::from_secs(3);
    let before = voluntary_switches(gateway.process.pid());
    tokio::time::sleep(window).await;
    let after = voluntary_switches(gateway.process.pid());
    let woke: u64 = after
        .iter()
        .map(|(task, n)| n.saturating_sub(*before.get(task).unwrap_or(n)))
        .sum();
    // Measured: 6 in the 3 s (the history's one-second samples and the
    // keep-alive pool's sweep); ~5 a second when the access log and KV
    // events services also woke every second, ~110 when five pollers woke
    // every 50 to 250 ms to find nothing due.
    assert!(
        woke < 5 * window.as_secs(),
        "the idle gateway's threads woke {woke} times in {window:?}"
    );
}

#[tokio::test]
async fn a_reload_that_turns_engine_metrics_on_polls_at_once() {
    let engine = FakeEngine::start("a", &[]);
    let route = "[[routes]]\nmodel = \"chat\"\ntargets = [{ provider = \"a\" }]\n\n[health]\nenabled = false\n";
    let gateway = Gateway::start(&format!("{}{route}", provider("a", &engine.url()))).await;
    // The target is tracked from its first request: polls are for targets.
    assert_eq!(gateway.chat("chat", "hello").await.status(), 200);
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Half a minute between polls: only the reload itself can bring the
    // first one within the wait below; the poller slept with nothing to
    // poll.
    gateway.write_config(&format!(
        "{}[providers.engine_metrics]\npoll_interval_ms = 30000\nstale_after_ms = 60000\n\n{route}",
        provider("a", &engine.url())
    ));
    let (status, body) = gateway.reload().await;
    assert_eq!(status, 200, "{body}");
    wait_until(
        Duration::from_secs(5),
        "the first engine metrics poll",
        || async {
            let routes = gateway.routes().await;
            routes["routes"][0]["targets"][0]["engine_metrics"]["polls"].as_u64() >= Some(1)
        },
    )
    .await;
}
