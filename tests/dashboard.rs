//! The dashboard's backend: its static files under `/ui/`, the session
//! endpoint, the Fleet screen's data in `/admin/routes`, and the check that
//! `ui/src/lib/strategies.ts` mirrors the balancer's strategy lists.

mod support;

use std::path::Path;
use std::time::Duration;

use rolter_balancer::StrategyKind;
use serde_json::Value;

use support::*;

/// The string literals of `export const <name> = [ ... ]` in a TypeScript
/// source, in order.
fn ts_string_array(source: &str, name: &str) -> Vec<String> {
    let start = format!("export const {name} = [");
    let from = source
        .find(&start)
        .unwrap_or_else(|| panic!("`{start}` not found in strategies.ts"))
        + start.len();
    let body = &source[from..];
    let body = &body[..body.find(']').expect("the array's closing bracket")];
    body.split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| {
            item.strip_prefix('"')
                .and_then(|item| item.strip_suffix('"'))
                .unwrap_or_else(|| panic!("{name}: `{item}` is not a plain string literal"))
                .to_string()
        })
        .collect()
}

#[test]
fn dashboard_strategy_lists_mirror_the_balancer() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("ui/src/lib/strategies.ts");
    let source = std::fs::read_to_string(&path).expect("ui/src/lib/strategies.ts");
    let all: Vec<&str> = StrategyKind::ALL.iter().map(|k| k.as_str()).collect();
    let reads_weights: Vec<&str> = StrategyKind::ALL
        .iter()
        .filter(|k| k.reads_weights())
        .map(|k| k.as_str())
        .collect();
    assert_eq!(
        ts_string_array(&source, "STRATEGIES"),
        all,
        "STRATEGIES in {} must list StrategyKind::ALL, in order",
        path.display()
    );
    assert_eq!(
        ts_string_array(&source, "READS_WEIGHTS"),
        reads_weights,
        "READS_WEIGHTS in {} (what usesWeights() answers) must list the strategies whose reads_weights() is true: otherwise the dashboard states traffic shares that do not exist, or hides ones that do",
        path.display()
    );
}

/// A build directory with an index, one bundle and a symlink pointing out.
fn ui_build(outside_secret: &Path) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(dir.path().join("assets")).unwrap();
    std::fs::write(
        dir.path().join("index.html"),
        "<!doctype html><title>rolter</title><div id=root></div>",
    )
    .unwrap();
    std::fs::write(dir.path().join("assets/index-abc123.js"), "console.log(1)").unwrap();
    std::fs::write(dir.path().join("assets/index-abc123.css"), "body{}").unwrap();
    std::os::unix::fs::symlink(outside_secret, dir.path().join("leak.txt")).unwrap();
    dir
}

async fn get(url: &str) -> (u16, String, String, String) {
    let response = client().get(url).send().await.expect("request");
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let (content_type, cache) = (header("content-type"), header("cache-control"));
    (status, content_type, cache, response.text().await.unwrap())
}

#[tokio::test]
async fn the_dashboard_is_served_under_ui_with_client_routes_and_nothing_outside() {
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret.txt");
    std::fs::write(&secret, "do-not-serve").unwrap();
    let build = ui_build(&secret);
    let build_dir = build.path().display().to_string();
    let node = Gateway::start_with_env("", &[("ROLTER_UI_DIR", build_dir.as_str())]).await;
    let admin = node.admin_url();

    for path in [
        "/ui",
        "/ui/",
        "/ui/fleet",
        "/ui/routes/edit/org/chat",
        "/ui/index.html",
    ] {
        let (status, content_type, cache, body) = get(&format!("{admin}{path}")).await;
        assert_eq!(status, 200, "{path}");
        assert_eq!(content_type, "text/html; charset=utf-8", "{path}");
        assert_eq!(cache, "no-cache", "{path}");
        assert!(body.contains("<div id=root>"), "{path}: {body}");
    }
    let (status, content_type, cache, body) =
        get(&format!("{admin}/ui/assets/index-abc123.js")).await;
    assert_eq!((status, body.as_str()), (200, "console.log(1)"));
    assert_eq!(content_type, "text/javascript; charset=utf-8");
    assert!(cache.contains("immutable"), "{cache}");
    let (_, content_type, _, _) = get(&format!("{admin}/ui/assets/index-abc123.css")).await;
    assert_eq!(content_type, "text/css; charset=utf-8");
    // A missing bundle is a 404, not the app.
    let (status, _, _, _) = get(&format!("{admin}/ui/assets/gone.js")).await;
    assert_eq!(status, 404);

    // Nothing outside the build directory: escaped dot segments, a symlink
    // pointing out, an absolute path smuggled in.
    for path in [
        "/ui/..%2f..%2fetc%2fpasswd",
        "/ui/assets/..%2F..%2Fsecret.txt",
        "/ui/%2fetc%2fpasswd",
        "/ui/a%5c..%5cb",
    ] {
        let (status, _, _, body) = get(&format!("{admin}{path}")).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(!body.contains("root:"), "{path}");
    }
    let (_, _, _, body) = get(&format!("{admin}/ui/leak.txt")).await;
    assert!(!body.contains("do-not-serve"), "{body}");

    let head = client()
        .head(format!("{admin}/ui/assets/index-abc123.js"))
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), 200);
    let post = client().post(format!("{admin}/ui/")).send().await.unwrap();
    assert_eq!(post.status(), 405);
    // `/uix` is not the dashboard's.
    let (status, content_type, _, _) = get(&format!("{admin}/uix")).await;
    assert_eq!((status, content_type.as_str()), (404, "application/json"));
}

#[tokio::test]
async fn without_a_build_the_dashboard_says_how_to_make_one() {
    let missing = tempfile::tempdir().unwrap();
    let dir = missing.path().join("dist");
    let dir = dir.display().to_string();
    let node = Gateway::start_with_env("", &[("ROLTER_UI_DIR", dir.as_str())]).await;
    let (status, content_type, _, body) = get(&format!("{}/ui/", node.admin_url())).await;
    assert_eq!(status, 404);
    assert_eq!(content_type, "text/html; charset=utf-8");
    assert!(body.contains("npm run build"), "{body}");
    assert!(body.contains(&dir), "{body}");
    assert!(body.contains("ROLTER_UI_DIR"), "{body}");
}

#[tokio::test]
async fn the_session_names_the_token_role_and_what_this_node_allows() {
    let node =
        Gateway::start_with_env("", &[("ROLTER_DOCS_URL", "https://docs.example.com")]).await;
    let url = format!("{}/api/v1/session", node.admin_url());
    let response = client().get(&url).send().await.unwrap();
    assert_eq!(response.status(), 401);
    let response = client()
        .get(&url)
        .bearer_auth("not-a-token")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    let session: Value = client()
        .get(&url)
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        session,
        serde_json::json!({
            "token_name": "test",
            "role": "superadmin",
            "node_role": "standalone",
            "read_only": true,
            "docs_url": "https://docs.example.com",
        })
    );
    let without_docs = Gateway::start("").await;
    let session: Value = client()
        .get(format!("{}/api/v1/session", without_docs.admin_url()))
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(session["docs_url"], Value::Null);
}

#[tokio::test]
async fn admin_routes_report_health_parking_and_engine_sources_per_target() {
    let kv = FakeEngine::start(
        "kv",
        &[
            "--kv-events",
            "tcp://127.0.0.1:0",
            "--kv-replay",
            "tcp://127.0.0.1:0",
        ],
    );
    let failing = FakeEngine::start("failing", &["--fail-status", "503"]);
    let config = format!(
        "[[providers]]\nname = \"kv\"\nbase_url = \"{kv_url}\"\nkv_events = {{ endpoint = \"{events}\", replay_endpoint = \"{replay}\" }}\n\n[providers.lmcache]\nendpoint = \"{kv_url}/fake/occupancy\"\npoll_interval_secs = 1\nstale_after_secs = 5\n\n{failing}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"kv\" }}, {{ provider = \"failing\" }}]\n\n[health]\nenabled = false\n\n[retry]\nmax_retries = 0\n",
        kv_url = kv.url(),
        events = kv.kv_events.as_deref().unwrap(),
        replay = kv.kv_replay.as_deref().unwrap(),
        failing = provider("failing", &failing.url()),
    );
    let gateway = Gateway::start(&config).await;
    // Round robin: one request each; the failing engine's 503 parks it.
    for _ in 0..2 {
        gateway
            .chat(
                "chat",
                "a prompt long enough to fill a block or two of the cache",
            )
            .await;
    }
    wait_until(
        Duration::from_secs(10),
        "sources read and the failing target parked",
        || async {
            let routes = gateway.routes().await;
            let targets = &routes["routes"][0]["targets"];
            targets[0]["lmcache"]["fresh"] == true
                && targets[0]["kv_index"]["configured"] == true
                && targets[1]["parked_until_ms"].as_u64().is_some()
        },
    )
    .await;
    let routes = gateway.routes().await;
    let targets = &routes["routes"][0]["targets"];
    let kv_target = &targets[0];
    assert_eq!(kv_target["healthy"], true, "{kv_target}");
    assert_eq!(kv_target["parked_until_ms"], Value::Null, "{kv_target}");
    assert!(
        kv_target["kv_index"]["blocks_resident"].is_u64(),
        "{kv_target}"
    );
    assert!(kv_target["kv_index"]["usable"].is_boolean(), "{kv_target}");
    assert!(kv_target["lmcache"]["occupancy"].is_number(), "{kv_target}");
    let parked = &targets[1];
    let remaining = parked["parked_until_ms"].as_u64().unwrap();
    assert!(remaining > 0 && remaining <= 5_000, "{parked}");
    // A provider without sources reports none.
    assert_eq!(parked["kv_index"], Value::Null, "{parked}");
    assert_eq!(parked["lmcache"], Value::Null, "{parked}");
}

#[tokio::test]
async fn the_history_holds_each_interval_s_rate_of_each_route_target() {
    let engine = FakeEngine::start("e", &["--ttft-ms", "20"]);
    let config = format!(
        "{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"e\" }}]\n\n[health]\nenabled = false\n",
        provider("e", &engine.url())
    );
    let gateway = Gateway::start(&config).await;
    let history = || async {
        client()
            .get(format!("{}/admin/history", gateway.admin_url()))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    };
    for _ in 0..10 {
        assert_eq!(gateway.chat("chat", "counted").await.status(), 200);
    }
    // A point every 5 s: the ten requests are in the first one or two.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let answer = loop {
        let answer = history().await;
        let points = answer["series"][0]["points"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let seen: f64 = points
            .iter()
            .map(|p| p["requests_per_s"].as_f64().unwrap() * 5.0)
            .sum();
        if (seen - 10.0).abs() < 0.5 {
            break answer;
        }
        assert!(std::time::Instant::now() < deadline, "{answer}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(answer["interval_ms"], 5000);
    let series = &answer["series"][0];
    assert_eq!(
        (&series["route"], &series["target"]),
        (&Value::from("chat"), &Value::from("e/chat"))
    );
    let busy = series["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["requests_per_s"].as_f64().unwrap() > 0.0)
        .unwrap();
    assert_eq!(busy["errors_per_s"], 0.0);
    // The engine answers its first byte after 20 ms.
    let p50 = busy["ttft_p50_ms"].as_f64().unwrap();
    assert!((10.0..=500.0).contains(&p50), "{busy}");
    assert!(busy["ttft_p95_ms"].as_f64().unwrap() >= p50, "{busy}");
}
