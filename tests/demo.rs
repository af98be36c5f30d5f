//! `rolter demo`, as the README's first command runs it: its engines start,
//! its configuration loads, and the routes it prints examples for answer
//! (the disaggregated one through a real prefill/decode handshake).

mod support;

use std::net::SocketAddr;
use std::process::{Command, Stdio};

use serde_json::{json, Value};
use support::*;

#[tokio::test]
async fn the_demo_serves_its_routes_the_split_one_included() {
    let dir = tempfile::tempdir().unwrap();
    let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let admin: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let log = dir.path().join("demo.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut process = Process {
        child: Command::new(ROLTER)
            .args([
                "demo",
                "--listen",
                &listen.to_string(),
                "--admin-listen",
                &admin.to_string(),
            ])
            .env("ROLTER_ADMIN_TOKEN", ADMIN_TOKEN)
            .env("TMPDIR", dir.path())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()
            .expect("spawn rolter demo"),
        log,
        name: "demo".into(),
    };
    wait_ready(&mut process, admin).await;
    for model in ["chat", "chat-cache", "chat-precise", "chat-split"] {
        let response = client()
            .post(format!("http://{listen}/v1/chat/completions"))
            .json(&json!({
                "model": model,
                "max_tokens": 3,
                "messages": [{"role": "user", "content": "Teach me how binary search works."}],
            }))
            .send()
            .await
            .unwrap();
        let status = response.status();
        let target = served_by(&response);
        let body: Value = response.json().await.unwrap();
        assert_eq!(status, 200, "{model}: {body}");
        assert_eq!(body["usage"]["completion_tokens"], 3, "{model}: {body}");
        if model == "chat-split" {
            // Decoded on the decode engine, whose KV cache came from prefill-a.
            assert_eq!(target, "decode-a", "{body}");
            assert_eq!(
                body["usage"]["prompt_tokens"],
                body["usage"]["prompt_tokens_details"]["cached_tokens"],
                "{body}"
            );
        }
    }
}
