//! Fleet mode end to end: a control node over a real PostgreSQL database and
//! two gateway nodes polling it, all real processes.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use support::*;

async fn api(
    node: &Gateway,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = client()
        .request(method, format!("{}/api/v1/{path}", node.admin_url()))
        .bearer_auth(ADMIN_TOKEN);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn eventually<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("not within {limit:?}: {what}");
}

fn gateway_config(control: &Gateway, node_id: &str) -> String {
    format!(
        "[server]\nrole = \"gateway\"\nrequire_api_key = false\n\n[control_plane]\nurl = \"{}\"\ninternal_token_env = \"ROLTER_INTERNAL_TOKEN\"\nnode_id = \"{node_id}\"\npoll_interval_secs = 1\ntelemetry_interval_secs = 1\n",
        control.admin_url()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_and_policy_written_on_the_control_node_reach_every_gateway() {
    let database = TestDatabase::create().await;
    let engine = FakeEngine::start("engine", &[]);
    let env = database.env();
    let control = database.start_control("").await;
    let gateways = [
        Gateway::start_with_env(&gateway_config(&control, "gw-1"), &env).await,
        Gateway::start_with_env(&gateway_config(&control, "gw-2"), &env).await,
    ];

    // A provider and a route, through the control API.
    let (status, body) = api(
        &control,
        reqwest::Method::POST,
        "providers",
        Some(json!({"name": "engine", "base_url": engine.url()})),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = api(
        &control,
        reqwest::Method::POST,
        "routes",
        Some(json!({"model": "fleet-chat", "strategy": "adaptive",
                     "targets": [{"provider": "engine", "model": "m"}]})),
    )
    .await;
    assert_eq!(status, 201, "{body}");

    // Both gateways serve it within 10 s.
    for gateway in &gateways {
        eventually(
            "the route to serve on a gateway",
            Duration::from_secs(10),
            || async { gateway.chat("fleet-chat", "hello").await.status() == 200 },
        )
        .await;
    }

    // A policy change reaches both.
    let (status, body) = api(
        &control,
        reqwest::Method::PUT,
        "adaptive-routing-policy",
        Some(
            json!({"enabled": true, "latency_weight": 1.0, "cost_weight": 0.0,
                     "load_weight": 0.5, "exploration_ratio": 0.9, "min_samples": 5}),
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body.to_string().contains("fleet-chat"),
        "affected routes: {body}"
    );
    for gateway in &gateways {
        eventually(
            "the policy on a gateway",
            Duration::from_secs(10),
            || async {
                let (_, body) = api(
                    gateway,
                    reqwest::Method::GET,
                    "adaptive-routing-policy",
                    None,
                )
                .await;
                // Clamped on the way in: exploration never exceeds half the traffic.
                body["policy"]["enabled"] == true && body["policy"]["exploration_ratio"] == 0.5
            },
        )
        .await;
    }

    // Both appear in the telemetry and the cluster inventory.
    for gateway in &gateways {
        for _ in 0..3 {
            assert_eq!(gateway.chat("fleet-chat", "traffic").await.status(), 200);
        }
    }
    eventually(
        "telemetry from both gateways",
        Duration::from_secs(10),
        || async {
            let (status, body) = api(
                &control,
                reqwest::Method::GET,
                "adaptive-routing-telemetry",
                None,
            )
            .await;
            status == 200
                && body["routes"]
                    .as_array()
                    .and_then(|routes| routes.iter().find(|r| r["model"] == "fleet-chat"))
                    .and_then(|route| route["nodes"].as_array())
                    .is_some_and(|nodes| {
                        let ids: Vec<_> =
                            nodes.iter().filter_map(|n| n["node_id"].as_str()).collect();
                        ids.contains(&"gw-1") && ids.contains(&"gw-2")
                    })
        },
    )
    .await;
    let (status, nodes) = api(&control, reqwest::Method::GET, "cluster/nodes", None).await;
    assert_eq!(status, 200, "{nodes}");
    let version = nodes["config_version"].as_u64().unwrap();
    for id in ["gw-1", "gw-2"] {
        let node = nodes["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["node_id"] == id)
            .unwrap_or_else(|| panic!("{id} missing: {nodes}"));
        assert!(
            node["config_version"].as_u64().unwrap() >= version - 1,
            "{node}"
        );
    }

    // Without the control node, gateways keep serving their last snapshot.
    let mut control = control;
    control.process.signal(libc::SIGKILL);
    control.process.wait_exit(Duration::from_secs(5));
    tokio::time::sleep(Duration::from_secs(2)).await;
    for gateway in &gateways {
        assert_eq!(gateway.chat("fleet-chat", "still here").await.status(), 200);
    }
    drop(database);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_api_validates_like_rolter_check_and_audits_writes() {
    let database = TestDatabase::create().await;
    let control = database
        .start_control("[[providers]]\nname = \"file-gpu\"\nbase_url = \"http://127.0.0.1:9\"\n")
        .await;
    // The dashboard's session: a control node is where the configuration
    // is edited.
    let (status, session) = api(&control, reqwest::Method::GET, "session", None).await;
    assert_eq!(status, 200, "{session}");
    assert_eq!(session["node_role"], "control", "{session}");
    assert_eq!(session["read_only"], false, "{session}");
    // The file's rows are listed, named as file-managed.
    let (status, providers) = api(&control, reqwest::Method::GET, "providers", None).await;
    assert_eq!(status, 200, "{providers}");
    assert_eq!(
        providers["file_managed"],
        json!(["file-gpu"]),
        "{providers}"
    );
    assert_eq!(providers["data"][0]["slug"], "file-gpu", "{providers}");
    // A route naming a provider that does not exist: rolter check's message.
    let (status, body) = api(
        &control,
        reqwest::Method::POST,
        "routes",
        Some(json!({"model": "x", "targets": [{"provider": "nope"}]})),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body.to_string().contains("unknown provider \\\"nope\\\""),
        "{body}"
    );
    // The problem names the row by its model, not by its place in the
    // document rolter.toml's rows and the database's make together.
    assert_eq!(
        body["error"]["errors"][0]["field"], "routes[\"x\"].targets[0].provider",
        "{body}"
    );
    // Rows from rolter.toml are read-only.
    let (status, body) = api(
        &control,
        reqwest::Method::DELETE,
        "providers/file-gpu",
        None,
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(body.to_string().contains("rolter.toml"), "{body}");
    // An all-zero blend is refused.
    let (status, body) = api(
        &control,
        reqwest::Method::PUT,
        "adaptive-routing-policy",
        Some(
            json!({"enabled": true, "latency_weight": 0.0, "cost_weight": 0.0, "load_weight": 0.0}),
        ),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    // A valid write is audited.
    let (status, _) = api(
        &control,
        reqwest::Method::POST,
        "routes",
        Some(json!({"model": "ok", "targets": [{"provider": "file-gpu"}]})),
    )
    .await;
    assert_eq!(status, 201);
    let (_, audit) = api(&control, reqwest::Method::GET, "audit-log", None).await;
    assert!(audit.to_string().contains("route.create"), "{audit}");
    // The internal endpoints need the internal token.
    let response = client()
        .get(format!("{}/internal/snapshot", control.admin_url()))
        .header("x-rolter-node-id", "intruder")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 401);
    drop(database);
}

#[tokio::test]
async fn a_standalone_node_answers_policy_and_telemetry_from_its_file() {
    let engine = FakeEngine::start("e", &[]);
    let config = format!(
        "{}[[routes]]\nmodel = \"chat\"\nstrategy = \"adaptive\"\ntargets = [{{ provider = \"e\" }}]\n\n[adaptive_routing]\nenabled = true\n",
        provider("e", &engine.url())
    );
    let gateway = Gateway::start(&config).await;
    let (status, body) = api(
        &gateway,
        reqwest::Method::GET,
        "adaptive-routing-policy",
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["policy"]["enabled"], true);
    assert_eq!(body["managed_by"], "rolter.toml");
    let (status, body) = api(
        &gateway,
        reqwest::Method::PUT,
        "adaptive-routing-policy",
        Some(json!({"enabled": false})),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert!(body.to_string().contains("rolter.toml"), "{body}");
    assert_eq!(gateway.chat("chat", "x").await.status(), 200);
    let (status, body) = api(
        &gateway,
        reqwest::Method::GET,
        "adaptive-routing-telemetry",
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["routes"][0]["model"], "chat", "{body}");
    // The configuration reads in the control API's shape, every row
    // file-managed; writes are refused.
    let (status, body) = api(&gateway, reqwest::Method::GET, "providers", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["file_managed"], json!(["e"]), "{body}");
    assert_eq!(body["data"][0]["base_url"], engine.url(), "{body}");
    let (status, body) = api(
        &gateway,
        reqwest::Method::PUT,
        "routes/chat",
        Some(json!({"strategy": "random", "targets": [{"provider": "e"}]})),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "file_managed", "{body}");
    let (status, body) = api(&gateway, reqwest::Method::GET, "api-keys", None).await;
    assert_eq!(status, 404, "{body}");
}

/// The target `provider` of route `model` in a live-state document.
fn find_live_target<'a>(state: &'a Value, model: &str, provider: &str) -> Option<&'a Value> {
    state["routes"]
        .as_array()
        .and_then(|routes| routes.iter().find(|r| r["model"] == model))
        .and_then(|route| route["targets"].as_array())
        .and_then(|targets| targets.iter().find(|t| t["provider"] == provider))
}

fn live_target<'a>(state: &'a Value, model: &str, provider: &str) -> &'a Value {
    find_live_target(state, model, provider)
        .unwrap_or_else(|| panic!("no {provider} under {model}: {state}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_gateway_pushes_its_live_state_and_the_cluster_lists_every_node_where_it_listens() {
    let database = TestDatabase::create().await;
    let engine = FakeEngine::start("engine", &[]);
    let env = database.env();
    let control = database.start_control("").await;
    let ui = tempfile::tempdir().unwrap();
    std::fs::write(ui.path().join("index.html"), "<div id=root></div>").unwrap();
    let ui_dir = ui.path().display().to_string();
    let gateway_env = [env[0], env[1], ("ROLTER_UI_DIR", ui_dir.as_str())];
    let gateways = [
        Gateway::start_with_env(&gateway_config(&control, "gw-1"), &gateway_env).await,
        Gateway::start_with_env(&gateway_config(&control, "gw-2"), &env).await,
    ];
    // A gateway serves the dashboard of its own state (read-only: the
    // session says so).
    let page = client()
        .get(format!("{}/ui/fleet", gateways[0].admin_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("<div id=root>"));
    let (status, session) = api(&gateways[0], reqwest::Method::GET, "session", None).await;
    assert_eq!(status, 200, "{session}");
    assert_eq!(
        (&session["node_role"], &session["read_only"]),
        (&json!("gateway"), &json!(true))
    );
    for (path, row) in [
        (
            "providers",
            json!({"name": "engine", "base_url": engine.url()}),
        ),
        (
            "routes",
            json!({"model": "live-chat", "targets": [{"provider": "engine", "model": "m"}]}),
        ),
    ] {
        let (status, body) = api(&control, reqwest::Method::POST, path, Some(row)).await;
        assert_eq!(status, 201, "{body}");
    }
    for gateway in &gateways {
        eventually(
            "the route on a gateway",
            Duration::from_secs(10),
            || async { gateway.chat("live-chat", "warm").await.status() == 200 },
        )
        .await;
    }
    // Known traffic: 1 + 3 through gw-1, 1 + 5 through gw-2.
    for (gateway, n) in gateways.iter().zip([3, 5]) {
        for _ in 0..n {
            assert_eq!(gateway.chat("live-chat", "counted").await.status(), 200);
        }
    }
    eventually(
        "both gateways' counts on the control node",
        Duration::from_secs(10),
        || async {
            let (status, body) = api(&control, reqwest::Method::GET, "fleet/gateways", None).await;
            assert_eq!(status, 200, "{body}");
            let attempts = |id: &str| {
                body["gateways"]
                    .as_array()
                    .and_then(|g| g.iter().find(|g| g["node_id"] == id))
                    .and_then(|g| find_live_target(&g["state"], "live-chat", "engine"))
                    .and_then(|t| t["route_traffic"]["attempts"].as_u64())
            };
            attempts("gw-1") == Some(4) && attempts("gw-2") == Some(6)
        },
    )
    .await;
    let (_, answer) = api(&control, reqwest::Method::GET, "fleet/gateways", None).await;
    for gateway in answer["gateways"].as_array().unwrap() {
        assert_eq!(gateway["stale"], false, "{gateway}");
        assert_eq!(gateway["interval_ms"], 1000, "{gateway}");
        assert_eq!(gateway["state"]["node_id"], gateway["node_id"]);
        assert!(gateway["age_ms"].as_u64().unwrap() < 4_000, "{gateway}");
        assert!(gateway["reported_at"].as_str().unwrap().ends_with('Z'));
        // The fleet document it installed is on record.
        assert_eq!(
            gateway["state"]["last_reload"]["applied"], true,
            "{gateway}"
        );
    }

    // Each push is a point of that gateway's history on the control node.
    eventually(
        "both gateways' history",
        Duration::from_secs(10),
        || async {
            let (status, body) = api(&control, reqwest::Method::GET, "fleet/history", None).await;
            assert_eq!(status, 200, "{body}");
            let busy = |id: &str| {
                body["gateways"].as_array().is_some_and(|g| {
                    g.iter().any(|g| {
                        g["node_id"] == id
                            && g["interval_ms"] == 1000
                            && g["series"].as_array().is_some_and(|s| {
                                s.iter().any(|s| {
                                    s["route"] == "live-chat"
                                        && s["target"] == "engine/m"
                                        && s["points"].as_array().is_some_and(|p| !p.is_empty())
                                })
                            })
                    })
                })
            };
            busy("gw-1") && busy("gw-2")
        },
    )
    .await;

    // The control node lists itself first; gateways where they listen.
    let (status, nodes) = api(&control, reqwest::Method::GET, "cluster/nodes", None).await;
    assert_eq!(status, 200, "{nodes}");
    let nodes = nodes["nodes"].as_array().unwrap().clone();
    assert_eq!(nodes[0]["role"], "control", "{nodes:?}");
    assert_eq!(
        nodes[0]["address"].as_str(),
        control.admin_url().strip_prefix("http://")
    );
    for (gateway, id) in gateways.iter().zip(["gw-1", "gw-2"]) {
        let node = nodes.iter().find(|n| n["node_id"] == id).unwrap();
        assert_eq!(
            node["address"].as_str(),
            gateway.admin_url().strip_prefix("http://"),
            "{node}"
        );
        assert!(node["last_seen"].as_str().unwrap().ends_with('Z'), "{node}");
        assert!(
            node["software_version"]
                .as_str()
                .is_some_and(|v| v.starts_with("rolter/")),
            "{node}"
        );
    }

    // A gateway that stops reporting is marked stale within two pushes
    // and a grace, and its last numbers stay.
    gateways[1].process.signal(libc::SIGSTOP);
    eventually("gw-2 stale", Duration::from_secs(10), || async {
        let (_, body) = api(&control, reqwest::Method::GET, "fleet/gateways", None).await;
        let gateways = body["gateways"].as_array().cloned().unwrap_or_default();
        let of = |id: &str| gateways.iter().find(|g| g["node_id"] == id).cloned();
        of("gw-2").is_some_and(|g| {
            g["stale"] == true
                && live_target(&g["state"], "live-chat", "engine")["route_traffic"]["attempts"] == 6
        }) && of("gw-1").is_some_and(|g| g["stale"] == false)
    })
    .await;
    gateways[1].process.signal(libc::SIGCONT);
    drop(database);
}
