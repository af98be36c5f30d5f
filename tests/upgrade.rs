//! The process's life cycle. Zero-downtime upgrade the Pingora way: a new
//! `rolter serve -u` takes the listening sockets over, the old one gets
//! SIGQUIT and drains; requests flowing the whole time, streams included,
//! all succeed. And a fast shutdown (SIGINT) that always ends the process.

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;

use support::*;

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failed: AtomicU64,
    streams_completed: AtomicU64,
    ok_after_old_exited: AtomicU64,
}

async fn plain_traffic(
    listen: SocketAddr,
    stop: Arc<AtomicBool>,
    old_gone: Arc<AtomicBool>,
    tally: Arc<Tally>,
) {
    let http = client();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        n += 1;
        let result = http
            .post(format!("http://{listen}/v1/chat/completions"))
            .json(&chat_body("chat", &format!("plain {n}")))
            .send()
            .await;
        let outcome = match result {
            Ok(r) if r.status() == 200 => r.bytes().await.map(|_| ()).map_err(|e| e.to_string()),
            Ok(r) => Err(format!("status {}", r.status())),
            Err(e) => Err(e.to_string()),
        };
        match outcome {
            Ok(()) => {
                tally.ok.fetch_add(1, Ordering::Relaxed);
                if old_gone.load(Ordering::Relaxed) {
                    tally.ok_after_old_exited.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(e) => {
                eprintln!("plain request failed: {e}");
                tally.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

async fn streaming_traffic(listen: SocketAddr, stop: Arc<AtomicBool>, tally: Arc<Tally>) {
    let http = client();
    while !stop.load(Ordering::Relaxed) {
        let response = http
            .post(format!("http://{listen}/v1/chat/completions"))
            .json(&json!({
                "model": "chat",
                "stream": true,
                "max_tokens": 20,
                "messages": [{"role": "user", "content": "stream"}],
            }))
            .send()
            .await;
        let Ok(response) = response else {
            eprintln!("stream request failed: {response:?}");
            tally.failed.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let mut body = String::new();
        let mut stream = response.bytes_stream();
        let mut broken = false;
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(bytes) => body.push_str(&String::from_utf8_lossy(&bytes)),
                Err(e) => {
                    eprintln!("stream broke: {e}");
                    broken = true;
                    break;
                }
            }
        }
        if !broken && body.trim_end().ends_with("data: [DONE]") {
            tally.streams_completed.fetch_add(1, Ordering::Relaxed);
        } else {
            eprintln!("incomplete stream: {body:?}");
            tally.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// A gateway's files in a new directory, on free ports: model `chat`
/// routed to `engine`, and the test Pingora settings as `yaml` edits them.
fn gateway_files(
    engine: &FakeEngine,
    yaml: impl FnOnce(String) -> String,
) -> (tempfile::TempDir, SocketAddr, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let config = with_listeners(
        &format!(
            "{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"e\" }}]\n",
            provider("e", &engine.url())
        ),
        listen,
        admin,
    );
    std::fs::write(dir.path().join("rolter.toml"), config).unwrap();
    std::fs::write(
        dir.path().join("pingora.yaml"),
        yaml(pingora_yaml(dir.path())),
    )
    .unwrap();
    (dir, listen, admin)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_upgrade_loses_no_request() {
    // Streams of 20 tokens 25 ms apart (~0.5 s) span the hand-over.
    let engine = FakeEngine::start("e", &["--token-delay-ms", "25"]);
    let (dir, listen, admin) = gateway_files(&engine, |yaml| yaml);

    let mut old = spawn_serve(dir.path(), &[], false, "old gateway");
    wait_ready(&mut old, admin).await;

    let stop = Arc::new(AtomicBool::new(false));
    let old_gone = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let mut workers = Vec::new();
    for _ in 0..3 {
        workers.push(tokio::spawn(plain_traffic(
            listen,
            stop.clone(),
            old_gone.clone(),
            tally.clone(),
        )));
    }
    for _ in 0..2 {
        workers.push(tokio::spawn(streaming_traffic(
            listen,
            stop.clone(),
            tally.clone(),
        )));
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    let before = tally.ok.load(Ordering::Relaxed);
    assert!(before > 0, "no traffic before the upgrade");

    // The new instance waits on the upgrade socket for the old one's
    // listeners; SIGQUIT makes the old one hand them over and drain.
    let mut new = spawn_serve(dir.path(), &[], true, "new gateway");
    tokio::time::sleep(Duration::from_millis(300)).await;
    old.signal(libc::SIGQUIT);
    let exited = tokio::task::spawn_blocking(move || {
        let status = old.wait_exit(Duration::from_secs(30));
        (old, status)
    })
    .await
    .unwrap();
    let (old, status) = exited;
    assert!(
        status.is_some(),
        "the old gateway did not exit:\n{}",
        old.log_text()
    );
    old_gone.store(true, Ordering::Relaxed);

    wait_ready(&mut new, admin).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        tokio::time::timeout(Duration::from_secs(30), worker)
            .await
            .expect("traffic worker stuck")
            .unwrap();
    }

    let failed = tally.failed.load(Ordering::Relaxed);
    assert_eq!(
        failed,
        0,
        "requests failed across the upgrade\nold:\n{}\nnew:\n{}",
        old.log_text(),
        new.log_text()
    );
    assert!(
        tally.ok_after_old_exited.load(Ordering::Relaxed) > 0,
        "the new gateway served nothing"
    );
    assert!(tally.streams_completed.load(Ordering::Relaxed) >= 2);
    assert!(new.log_text().contains("Bootstrap"), "{}", new.log_text());
}

/// SIGINT, Pingora's fast shutdown, ends the process every time. A
/// listener is registered with the reactor of one of the service's threads
/// while its accept loops run on any of them, and the threads stop one by
/// one: with eight threads and four loops per listener, some loop outlives
/// the listener's thread in about two starts of five. Without the yield in
/// the patched accept loop (patches/README.md) that loop spins on "being
/// shutdown" and the process never exits.
#[tokio::test]
async fn a_fast_shutdown_exits_whichever_thread_stops_first() {
    let engine = FakeEngine::start("e", &[]);
    for round in 0..12 {
        let (dir, listen, admin) = gateway_files(&engine, |yaml| {
            yaml.replace("threads: 2\n", "threads: 8\n") + "listener_tasks_per_fd: 4\n"
        });

        let mut gateway = spawn_serve(dir.path(), &[], false, "gateway");
        wait_ready(&mut gateway, admin).await;
        let answer = client()
            .post(format!("http://{listen}/v1/chat/completions"))
            .json(&chat_body("chat", "hello"))
            .send()
            .await
            .expect("the gateway answers");
        assert_eq!(answer.status(), 200);

        gateway.signal(libc::SIGINT);
        let status = gateway.wait_exit(Duration::from_secs(10));
        assert!(
            status.is_some_and(|s| s.success()),
            "round {round}: {status:?} 10 s after SIGINT"
        );
    }
}
