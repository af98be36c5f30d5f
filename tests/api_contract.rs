//! The admin listener keeps the contract it publishes: the OpenAPI document
//! at `GET /openapi.json` is the committed `ui/openapi.json` the dashboard's
//! types are generated from, and schemathesis, driving a standalone node and
//! a control node on PostgreSQL from that document, finds no server error,
//! no undocumented status, content type or body shape, and no endpoint that
//! answers without its token.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use support::*;

/// What schemathesis checks on every response it provokes.
const CHECKS: &str = "not_a_server_error,status_code_conformance,content_type_conformance,\
                      response_schema_conformance,ignored_auth";

/// How much longer than its own `--max-time` a schemathesis run may take
/// before it counts as hung.
const GRACE: Duration = Duration::from_secs(45);

#[test]
fn committed_openapi_document_is_the_one_the_code_describes() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("ui/openapi.json");
    let committed = std::fs::read_to_string(&path).expect("ui/openapi.json");
    assert!(
        committed.trim_end() == rolter::admin::openapi::document().trim_end(),
        "{} is not what the code describes: run `cargo run -- openapi > ui/openapi.json`, then `cd ui && npm run gen-api`",
        path.display()
    );
}

/// Runs schemathesis against `admin` with `token` for at most `seconds`,
/// on the operations `filter` (a schemathesis `--include-*`/`--exclude-*`
/// pair) selects, and fails the test with its report when any check fails.
fn schemathesis(admin: &str, token: &str, filter: [&str; 2], seconds: u64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = Command::new("python3")
        .args(["-m", "schemathesis.cli", "run"])
        .arg(format!("{admin}/openapi.json"))
        .args(["--checks", CHECKS])
        .args(["--header", &format!("Authorization: Bearer {token}")])
        .args(filter)
        .args(["--max-examples", "10", "--seed", "20261201"])
        .args([
            "--max-time",
            &seconds.to_string(),
            "--request-timeout",
            "10",
        ])
        .args(["--generation-database", "none", "--no-color"])
        // Hypothesis writes its scratch files beside the working directory.
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run python3 -m schemathesis (run `make deps`): {e}"));
    let deadline = Instant::now() + Duration::from_secs(seconds) + GRACE;
    while child.try_wait().expect("schemathesis status").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let output = child.wait_with_output().expect("schemathesis output");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "schemathesis found the admin API at {admin} breaking its document ({}):\n{report}",
        output.status
    );
    // A run that tested nothing would pass as well.
    assert!(
        report.contains("passed") && !report.contains("No operations"),
        "schemathesis tested nothing at {admin}:\n{report}"
    );
}

/// schemathesis over `node`'s admin and control API with the admin token
/// (75 s) and, on a control node, over `/internal` with the internal token
/// (20 s).
async fn conforms(node: &Gateway, control: bool) {
    let admin = node.admin_url();
    tokio::task::spawn_blocking(move || {
        schemathesis(
            &admin,
            ADMIN_TOKEN,
            ["--exclude-path-regex", "^/internal"],
            75,
        );
        if control {
            schemathesis(
                &admin,
                INTERNAL_TOKEN,
                ["--include-path-regex", "^/internal"],
                20,
            );
        }
    })
    .await
    .unwrap();
}

const STANDALONE: &str = r#"
[server]
require_api_key = true

[[providers]]
name = "gpu-a"
base_url = "http://127.0.0.1:1"

[[providers]]
name = "gpu-b"
base_url = "http://127.0.0.1:2"
kv_events = { endpoint = "tcp://127.0.0.1:3", replay_endpoint = "tcp://127.0.0.1:4" }

[[routes]]
model = "chat"
strategy = "power_of_two"
targets = [{ provider = "gpu-a" }, { provider = "gpu-b", model = "chat-b" }]

[[provider_groups]]
name = "fleet"
members = [{ provider = "gpu-a" }, { provider = "gpu-b" }]

[[catalog]]
model = "chat"
input_per_mtok = 1
output_per_mtok = 2

[[api_keys]]
name = "team"
key_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
models = ["chat"]

[health]
enabled = false
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_node_answers_as_its_document_says() {
    let node = Gateway::start(STANDALONE).await;
    let served = client()
        .get(format!("{}/openapi.json", node.admin_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(served.status(), 200);
    assert_eq!(
        served.text().await.unwrap(),
        rolter::admin::openapi::document(),
        "GET /openapi.json serves the document"
    );
    conforms(&node, false).await;
    // The fuzzing left the node serving.
    let routes = node.routes().await;
    assert_eq!(routes["routes"][0]["model"], "chat", "{routes}");
}

async fn seed(control: &Gateway, collection: &str, body: Value) {
    let response = client()
        .post(format!("{}/api/v1/{collection}", control.admin_url()))
        .bearer_auth(ADMIN_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    assert_eq!(status, 201, "POST /api/v1/{collection}: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_node_answers_as_its_document_says() {
    let database = TestDatabase::create().await;
    let control = database.start_control("").await;
    // One row in every collection, so listings and reads answer with
    // bodies, not only with empty lists and 404s.
    for (collection, row) in [
        (
            "providers",
            json!({"name": "gpu-a", "base_url": "http://127.0.0.1:1"}),
        ),
        (
            "routes",
            json!({"model": "chat", "targets": [{"provider": "gpu-a"}]}),
        ),
        (
            "provider-groups",
            json!({"name": "fleet", "members": [{"provider": "gpu-a"}]}),
        ),
        (
            "catalog",
            json!({"model": "chat", "input_per_mtok": 1, "output_per_mtok": 2}),
        ),
        ("api-keys", json!({"name": "team", "models": ["chat"]})),
        ("admin-tokens", json!({"name": "viewer", "role": "viewer"})),
    ] {
        seed(&control, collection, row).await;
    }
    // A gateway's report, so the telemetry and cluster answers carry a node.
    let pushed = client()
        .post(format!(
            "{}/internal/adaptive-telemetry",
            control.admin_url()
        ))
        .bearer_auth(INTERNAL_TOKEN)
        .header("x-rolter-node-id", "gw-1")
        .json(&json!({"routes": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(pushed.status(), 204, "{}", pushed.text().await.unwrap());

    conforms(&control, true).await;
    let session = client()
        .get(format!("{}/api/v1/session", control.admin_url()))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(session.status(), 200, "the control node still serves");
}
