//! The control API against a real PostgreSQL (one database per test), with
//! the validator a control node uses: its file-managed rows merged with the
//! database's, judged by `config::parse_document`.

use std::future::Future;
use std::time::Duration;

use http::{Method, StatusCode};
use serde_json::{json, Value};

use super::*;
use crate::config::file::{ProviderTable, RouteTable, TargetEntry};
use crate::config::{self, SecretDigest};
use crate::control::store::test_db::TestDb;

const TEST_TIMEOUT: Duration = Duration::from_secs(60);

async fn bounded<F: Future>(test: F) -> F::Output {
    tokio::time::timeout(TEST_TIMEOUT, test)
        .await
        .expect("the test took longer than its bound")
}

/// What the control node's rolter.toml defines: one provider and one route
/// on it.
fn file_rows() -> ConfigFile {
    ConfigFile {
        providers: vec![ProviderTable {
            name: Some("file-gpu".to_owned()),
            base_url: Some("http://127.0.0.1:9001".to_owned()),
            ..ProviderTable::default()
        }],
        routes: vec![RouteTable {
            model: Some("file-chat".to_owned()),
            strategy: None,
            tokenizer: None,
            tokenizer_budget_kib: None,
            cache_guard: None,
            endpoints: None,
            targets: Some(vec![TargetEntry {
                provider: Some("file-gpu".to_owned()),
                model: None,
                weight: None,
            }]),
            disaggregation: None,
        }],
        ..ConfigFile::default()
    }
}

/// The control node's validator: file rows first, then the database's.
fn merged_validator(
    file: ConfigFile,
) -> impl Fn(&ConfigFile) -> Result<Config, ConfigErrors> + Send + Sync + 'static {
    move |database| {
        let mut merged = file.clone();
        merged.providers.extend(database.providers.iter().cloned());
        merged.routes.extend(database.routes.iter().cloned());
        merged
            .provider_groups
            .extend(database.provider_groups.iter().cloned());
        merged.catalog.extend(database.catalog.iter().cloned());
        merged.api_keys.extend(database.api_keys.iter().cloned());
        merged
            .admin_tokens
            .extend(database.admin_tokens.iter().cloned());
        merged.adaptive_routing = database.adaptive_routing.clone();
        config::parse_document("control-node", &merged, &|name| {
            (name == "GPU_KEY").then(|| "upstream-secret".to_owned())
        })
    }
}

struct Harness {
    ctx: ApiContext,
    // Dropped last: the database outlives the store's pool.
    _db: TestDb,
}

impl Harness {
    async fn new() -> Harness {
        let db = TestDb::create().await;
        let store = db.store().await;
        let file = file_rows();
        let ctx = ApiContext::new(
            store,
            merged_validator(file.clone()),
            FileManaged::of(&file),
        );
        Harness { ctx, _db: db }
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        role: Option<AdminRole>,
        body: Option<Value>,
    ) -> ApiResponse {
        let caller = role.map(|role| Caller {
            name: format!("{}-token", role.as_str()),
            role,
        });
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let (path, query) = match path.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (path, None),
        };
        let request = ApiRequest {
            method: &method,
            path,
            query,
            caller: caller.as_ref(),
            body: body.as_bytes(),
        };
        handle(&self.ctx, &request).await
    }

    async fn admin(&self, method: Method, path: &str, body: Option<Value>) -> ApiResponse {
        self.call(method, path, Some(AdminRole::Admin), body).await
    }

    async fn version(&self) -> u64 {
        self.ctx.store.version().await.unwrap()
    }

    async fn audit_actions(&self) -> Vec<(String, String, String)> {
        let answer = self
            .call(
                Method::GET,
                "/api/v1/audit-log?limit=1000",
                Some(AdminRole::Viewer),
                None,
            )
            .await;
        assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
        let mut actions: Vec<_> = answer.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["actor"].as_str().unwrap().to_owned(),
                    r["action"].as_str().unwrap().to_owned(),
                    r["subject"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        actions.reverse();
        actions
    }
}

#[track_caller]
fn expect(answer: &ApiResponse, status: StatusCode) {
    assert_eq!(answer.status, status, "{}", answer.body);
}

/// An error answer's `code`, after checking the error shape.
fn error_code(answer: &ApiResponse) -> &str {
    let error = &answer.body["error"];
    assert!(error["message"].is_string(), "{}", answer.body);
    assert!(error["type"].is_string(), "{}", answer.body);
    error["code"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn every_collection_round_trips_create_read_replace_delete() {
    bounded(async {
        let h = Harness::new().await;
        let cases = [
            (
                "providers",
                "gpu-a",
                json!({ "name": "gpu-a", "base_url": "http://127.0.0.1:8001",
                        "kv_events": { "endpoint": "tcp://127.0.0.1:5557" },
                        "lmcache": { "endpoint": "http://127.0.0.1:9000/occupancy" } }),
                json!({ "name": "GPU A", "slug": "gpu-a", "base_url": "http://127.0.0.1:8002" }),
                "base_url",
            ),
            (
                "routes",
                "org/chat",
                json!({ "model": "org/chat", "targets": [{ "provider": "file-gpu" }] }),
                json!({ "strategy": "weighted",
                        "targets": [{ "provider": "file-gpu", "model": "m", "weight": 3 }] }),
                "strategy",
            ),
            (
                "provider-groups",
                "edge",
                json!({ "name": "Edge", "members": [{ "provider": "file-gpu" }] }),
                json!({ "name": "Edge fleet", "slug": "edge", "strategy": "random",
                        "members": [{ "provider": "file-gpu", "model": "m" }] }),
                "strategy",
            ),
            (
                "catalog",
                "Qwen/Qwen3-8B",
                json!({ "model": "Qwen/Qwen3-8B", "input_per_mtok": 0.1, "output_per_mtok": 0.4 }),
                json!({ "input_per_mtok": 0.2, "output_per_mtok": 0.8 }),
                "input_per_mtok",
            ),
            (
                "api-keys",
                "team-alpha",
                json!({ "name": "team-alpha", "models": ["file-chat"] }),
                json!({ "name": "team-alpha", "models": [], "rpm": 60 }),
                "rpm",
            ),
        ];
        for (collection, key, create, replace, changed) in cases {
            let base = format!("/api/v1/{collection}");
            let one = format!("{base}/{key}");

            let created = h.admin(Method::POST, &base, Some(create)).await;
            expect(&created, StatusCode::CREATED);
            let listed = h.call(Method::GET, &base, Some(AdminRole::Viewer), None).await;
            expect(&listed, StatusCode::OK);
            // The file's rows first (file_rows: one provider, one route), then
            // the database's.
            let listed_rows = listed.body["data"].as_array().unwrap();
            let from_file = listed.body["file_managed"].as_array().unwrap().len();
            assert_eq!(listed_rows.len(), from_file + 1, "{collection}");
            assert_eq!(listed_rows[from_file], created.body["data"], "{collection}");
            let got = h.call(Method::GET, &one, Some(AdminRole::Viewer), None).await;
            expect(&got, StatusCode::OK);
            assert_eq!(got.body["data"], created.body["data"], "{collection}");

            let replaced = h.admin(Method::PUT, &one, Some(replace.clone())).await;
            expect(&replaced, StatusCode::OK);
            assert_eq!(replaced.body["data"][changed], replace[changed], "{collection}");
            let got = h.call(Method::GET, &one, Some(AdminRole::Viewer), None).await;
            assert_eq!(got.body["data"], replaced.body["data"], "{collection}");

            let deleted = h.admin(Method::DELETE, &one, None).await;
            expect(&deleted, StatusCode::OK);
            assert_eq!(deleted.body["data"], replaced.body["data"], "{collection}");
            let gone = h.call(Method::GET, &one, Some(AdminRole::Viewer), None).await;
            expect(&gone, StatusCode::NOT_FOUND);
            assert_eq!(error_code(&gone), "not_found");
        }
        // Provider sources are stored and served back.
        let created = h
            .admin(
                Method::POST,
                "/api/v1/providers",
                Some(json!({ "name": "gpu-b", "base_url": "http://127.0.0.1:8003",
                             "kv_events": { "endpoint": "tcp://127.0.0.1:5557", "block_size": 32 } })),
            )
            .await;
        expect(&created, StatusCode::CREATED);
        assert_eq!(
            created.body["data"]["kv_events"],
            json!({ "endpoint": "tcp://127.0.0.1:5557", "block_size": 32 })
        );
        let (_, document) = h.ctx.store.document().await.unwrap();
        assert_eq!(
            document.providers[0]
                .kv_events
                .as_ref()
                .and_then(|k| k.block_size),
            Some(32)
        );
    })
    .await;
}

#[tokio::test]
async fn an_accepted_write_bumps_the_version_once_and_a_refused_one_not_at_all() {
    bounded(async {
        let h = Harness::new().await;
        let provider = json!({ "name": "gpu-a", "base_url": "http://127.0.0.1:8001" });
        assert_eq!(h.version().await, 1);
        let created = h.admin(Method::POST, "/api/v1/providers", Some(provider.clone())).await;
        expect(&created, StatusCode::CREATED);
        assert_eq!(created.body["version"], 2);
        assert_eq!(h.version().await, 2);

        // Refused: duplicate, invalid, unknown field, file-managed, forbidden.
        let duplicate = h.admin(Method::POST, "/api/v1/providers", Some(provider)).await;
        expect(&duplicate, StatusCode::CONFLICT);
        assert_eq!(error_code(&duplicate), "already_exists");
        let invalid = h
            .admin(
                Method::POST,
                "/api/v1/routes",
                Some(json!({ "model": "chat", "targets": [{ "provider": "nowhere" }] })),
            )
            .await;
        expect(&invalid, StatusCode::UNPROCESSABLE_ENTITY);
        let unknown_field = h
            .admin(
                Method::POST,
                "/api/v1/catalog",
                Some(json!({ "model": "m", "input_per_mtok": 1, "output_per_mtok": 1, "currency": "EUR" })),
            )
            .await;
        expect(&unknown_field, StatusCode::BAD_REQUEST);
        assert!(
            unknown_field.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("unknown field `currency`"),
            "{}",
            unknown_field.body
        );
        let file_managed = h.admin(Method::DELETE, "/api/v1/providers/file-gpu", None).await;
        expect(&file_managed, StatusCode::CONFLICT);
        let forbidden = h
            .call(
                Method::DELETE,
                "/api/v1/providers/gpu-a",
                Some(AdminRole::Viewer),
                None,
            )
            .await;
        expect(&forbidden, StatusCode::FORBIDDEN);

        assert_eq!(h.version().await, 2);
        assert_eq!(
            h.audit_actions().await,
            vec![(
                "admin-token".to_owned(),
                "provider.create".to_owned(),
                "gpu-a".to_owned()
            )]
        );
        assert_eq!(h.ctx.store.list::<Routes>().await.unwrap(), vec![]);
    })
    .await;
}

#[tokio::test]
async fn audit_rows_name_the_token_and_the_action() {
    bounded(async {
        let h = Harness::new().await;
        let provider = json!({ "name": "gpu-a", "base_url": "http://127.0.0.1:8001" });
        expect(
            &h.admin(Method::POST, "/api/v1/providers", Some(provider.clone()))
                .await,
            StatusCode::CREATED,
        );
        expect(
            &h.call(
                Method::PUT,
                "/api/v1/providers/gpu-a",
                Some(AdminRole::Superadmin),
                Some(provider),
            )
            .await,
            StatusCode::OK,
        );
        expect(
            &h.admin(
                Method::POST,
                "/api/v1/api-keys",
                Some(json!({ "name": "team" })),
            )
            .await,
            StatusCode::CREATED,
        );
        expect(
            &h.admin(Method::DELETE, "/api/v1/api-keys/team", None).await,
            StatusCode::OK,
        );
        expect(
            &h.admin(Method::DELETE, "/api/v1/providers/gpu-a", None)
                .await,
            StatusCode::OK,
        );
        let actions = h.audit_actions().await;
        let expected: Vec<(String, String, String)> = [
            ("admin-token", "provider.create", "gpu-a"),
            ("superadmin-token", "provider.update", "gpu-a"),
            ("admin-token", "api_key.create", "team"),
            ("admin-token", "api_key.delete", "team"),
            ("admin-token", "provider.delete", "gpu-a"),
        ]
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect();
        assert_eq!(actions, expected);
        assert_eq!(h.version().await, 6);

        let page = h
            .call(
                Method::GET,
                "/api/v1/audit-log?limit=2",
                Some(AdminRole::Viewer),
                None,
            )
            .await;
        expect(&page, StatusCode::OK);
        assert_eq!(page.body["data"].as_array().unwrap().len(), 2);
        assert_eq!(page.body["data"][0]["action"], "provider.delete");
        assert_eq!(page.body["data"][0]["version"], 6);
        let bad = h
            .call(
                Method::GET,
                "/api/v1/audit-log?limit=0",
                Some(AdminRole::Viewer),
                None,
            )
            .await;
        expect(&bad, StatusCode::BAD_REQUEST);
    })
    .await;
}

#[tokio::test]
async fn roles_gate_reads_writes_and_superadmin_endpoints() {
    bounded(async {
        let h = Harness::new().await;
        let provider = json!({ "name": "gpu-a", "base_url": "http://127.0.0.1:8001" });

        let anonymous = h.call(Method::GET, "/api/v1/providers", None, None).await;
        expect(&anonymous, StatusCode::UNAUTHORIZED);
        assert_eq!(error_code(&anonymous), "invalid_admin_token");
        assert_eq!(anonymous.body["error"]["type"], "authentication_error");

        let viewer = Some(AdminRole::Viewer);
        expect(
            &h.call(Method::GET, "/api/v1/providers", viewer, None).await,
            StatusCode::OK,
        );
        let refused = h
            .call(
                Method::POST,
                "/api/v1/providers",
                viewer,
                Some(provider.clone()),
            )
            .await;
        expect(&refused, StatusCode::FORBIDDEN);
        assert_eq!(error_code(&refused), "insufficient_role");
        assert_eq!(refused.body["error"]["type"], "permission_error");

        expect(
            &h.admin(Method::POST, "/api/v1/providers", Some(provider))
                .await,
            StatusCode::CREATED,
        );
        for path in ["/api/v1/adaptive-routing-policy", "/api/v1/admin-tokens"] {
            expect(
                &h.admin(Method::GET, path, None).await,
                StatusCode::FORBIDDEN,
            );
            expect(
                &h.call(Method::GET, path, Some(AdminRole::Superadmin), None)
                    .await,
                StatusCode::OK,
            );
        }
        let superadmin = Some(AdminRole::Superadmin);
        let token = h
            .call(
                Method::POST,
                "/api/v1/admin-tokens",
                superadmin,
                Some(json!({ "name": "dashboard", "role": "admin" })),
            )
            .await;
        expect(&token, StatusCode::CREATED);
        assert!(token.body["token"].as_str().unwrap().starts_with("rt-"));
        assert_eq!(token.body["data"]["role"], "admin");

        let not_allowed = h
            .admin(Method::PATCH, "/api/v1/providers/gpu-a", None)
            .await;
        expect(&not_allowed, StatusCode::METHOD_NOT_ALLOWED);
        let unknown = h.admin(Method::GET, "/api/v1/nothing", None).await;
        expect(&unknown, StatusCode::NOT_FOUND);
    })
    .await;
}

#[tokio::test]
async fn a_change_that_would_not_validate_answers_the_validators_messages() {
    bounded(async {
        let h = Harness::new().await;
        let answer = h
            .admin(
                Method::POST,
                "/api/v1/routes",
                Some(json!({ "model": "chat", "targets": [{ "provider": "gpu-z" }] })),
            )
            .await;
        expect(&answer, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(error_code(&answer), "invalid_configuration");
        // Exactly what `rolter check` would say about the merged document.
        let mut candidate = file_rows();
        candidate.routes.push(RouteTable {
            model: Some("chat".to_owned()),
            tokenizer: None,
            tokenizer_budget_kib: None,
            cache_guard: None,
            endpoints: None,
            strategy: None,
            targets: Some(vec![TargetEntry {
                provider: Some("gpu-z".to_owned()),
                model: None,
                weight: None,
            }]),
            disaggregation: None,
        });
        let expected = config::parse_document("control-node", &candidate, &|_| None).unwrap_err();
        let problems = answer.body["error"]["errors"].as_array().unwrap();
        assert_eq!(problems.len(), expected.0.len());
        for (problem, error) in problems.iter().zip(expected.iter()) {
            assert_eq!(problem["field"], json!(error.field));
            assert_eq!(problem["message"], error.message);
        }
        assert!(
            problems[0]["field"]
                .as_str()
                .unwrap()
                .ends_with("targets[0].provider"),
            "{problems:?}"
        );
        let message = answer.body["error"]["message"].as_str().unwrap();
        assert!(message.contains("gpu-z"), "{message}");

        // Deleting a provider a route still uses is refused the same way.
        expect(
            &h.admin(
                Method::POST,
                "/api/v1/providers",
                Some(json!({ "name": "gpu-a", "base_url": "http://127.0.0.1:8001" })),
            )
            .await,
            StatusCode::CREATED,
        );
        expect(
            &h.admin(
                Method::POST,
                "/api/v1/routes",
                Some(json!({ "model": "chat", "targets": [{ "provider": "gpu-a" }] })),
            )
            .await,
            StatusCode::CREATED,
        );
        let refused = h
            .admin(Method::DELETE, "/api/v1/providers/gpu-a", None)
            .await;
        expect(&refused, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(h.ctx.store.get::<Providers>("gpu-a").await.is_ok());

        // A bad base URL names its field.
        let bad_url = h
            .admin(
                Method::PUT,
                "/api/v1/providers/gpu-a",
                Some(json!({ "name": "gpu-a", "base_url": "ftp://x" })),
            )
            .await;
        expect(&bad_url, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(bad_url.body["error"]["errors"][0]["field"]
            .as_str()
            .unwrap()
            .ends_with("base_url"));
        assert_eq!(h.version().await, 3);
    })
    .await;
}

#[tokio::test]
async fn rows_defined_in_rolter_toml_are_read_only() {
    bounded(async {
        let h = Harness::new().await;
        let provider = json!({ "name": "file-gpu", "base_url": "http://127.0.0.1:8001" });
        for (method, path, body) in [
            (Method::POST, "/api/v1/providers", Some(provider.clone())),
            (Method::PUT, "/api/v1/providers/file-gpu", Some(provider)),
            (Method::DELETE, "/api/v1/providers/file-gpu", None),
            (Method::DELETE, "/api/v1/routes/file-chat", None),
        ] {
            let answer = h.admin(method, path, body).await;
            expect(&answer, StatusCode::CONFLICT);
            assert_eq!(error_code(&answer), "file_managed");
            let message = answer.body["error"]["message"].as_str().unwrap();
            assert!(message.contains("managed in rolter.toml"), "{message}");
        }
        let listed = h
            .call(
                Method::GET,
                "/api/v1/providers",
                Some(AdminRole::Viewer),
                None,
            )
            .await;
        assert_eq!(listed.body["file_managed"], json!(["file-gpu"]));
        // Listed (and readable one by one) as the file writes them, key set.
        assert_eq!(
            listed.body["data"],
            json!([{ "name": "file-gpu", "slug": "file-gpu", "base_url": "http://127.0.0.1:9001" }])
        );
        let one = h
            .call(
                Method::GET,
                "/api/v1/routes/file-chat",
                Some(AdminRole::Viewer),
                None,
            )
            .await;
        expect(&one, StatusCode::OK);
        assert_eq!(one.body["data"]["model"], "file-chat");
        assert_eq!(one.body["data"].get("strategy"), None);
        assert_eq!(h.version().await, 1);
        assert!(h.audit_actions().await.is_empty());
    })
    .await;
}

#[tokio::test]
async fn a_created_api_key_is_shown_once_and_verifies_against_its_salted_digest() {
    bounded(async {
        let h = Harness::new().await;
        let created = h
            .admin(
                Method::POST,
                "/api/v1/api-keys",
                Some(json!({ "name": "team-alpha", "models": ["file-chat"], "rpm": 10 })),
            )
            .await;
        expect(&created, StatusCode::CREATED);
        let key = created.body["key"].as_str().unwrap().to_owned();
        assert!(key.starts_with("rk-"), "{key}");

        // The stored digest verifies the key, as the gateway will check it.
        let (_, document) = h.ctx.store.document().await.unwrap();
        let stored = document.api_keys[0].key_salted.clone().unwrap();
        let salt = hex::decode(stored.salt.as_deref().unwrap()).unwrap();
        let sha256: [u8; 32] = hex::decode(stored.sha256.as_deref().unwrap())
            .unwrap()
            .try_into()
            .unwrap();
        let digest = SecretDigest::Salted {
            id: stored.id.clone().unwrap(),
            salt: salt.clone(),
            sha256,
        };
        assert!(digest.verify(key.as_bytes()));
        assert!(!digest.verify(b"rk-0000000000000000-wrong"));
        let validated = (h.ctx.validator)(&document).unwrap();
        let team = validated
            .api_keys
            .iter()
            .find(|k| k.name == "team-alpha")
            .unwrap();
        assert!(team.digest.verify(key.as_bytes()));
        assert_eq!(created.body["data"]["key_id"], json!(stored.id));

        // Nothing but creation shows it, nor its salt or digest.
        let secret_part = key["rk-".len() + config::SECRET_ID_LEN + 1..].to_owned();
        let salt_hex = stored.salt.clone().unwrap();
        let sha_hex = stored.sha256.clone().unwrap();
        let listed = h
            .call(
                Method::GET,
                "/api/v1/api-keys",
                Some(AdminRole::Viewer),
                None,
            )
            .await;
        let one = h
            .call(
                Method::GET,
                "/api/v1/api-keys/team-alpha",
                Some(AdminRole::Viewer),
                None,
            )
            .await;
        let replaced = h
            .admin(
                Method::PUT,
                "/api/v1/api-keys/team-alpha",
                Some(json!({ "models": [], "max_concurrent": 2 })),
            )
            .await;
        expect(&replaced, StatusCode::OK);
        let audit = h
            .call(
                Method::GET,
                "/api/v1/audit-log",
                Some(AdminRole::Viewer),
                None,
            )
            .await;
        for answer in [&listed, &one, &replaced, &audit] {
            let text = answer.body.to_string();
            for secret in [&key, &secret_part, &salt_hex, &sha_hex] {
                assert!(!text.contains(secret.as_str()), "{text}");
            }
            assert!(answer.body.get("key").is_none());
        }
        assert_eq!(listed.body["data"][0]["name"], "team-alpha");
        assert_eq!(replaced.body["data"]["max_concurrent"], 2);

        // A replacement keeps the key working.
        let (_, document) = h.ctx.store.document().await.unwrap();
        let validated = (h.ctx.validator)(&document).unwrap();
        assert!(validated.api_keys[0].digest.verify(key.as_bytes()));

        // A secret cannot be chosen through the API.
        for body in [
            json!({ "name": "mine", "key_sha256": "ab".repeat(32) }),
            json!({ "name": "mine", "key_env": "MY_KEY" }),
        ] {
            let refused = h.admin(Method::POST, "/api/v1/api-keys", Some(body)).await;
            expect(&refused, StatusCode::BAD_REQUEST);
        }
        // Two creations never share a key.
        let second = h
            .admin(
                Method::POST,
                "/api/v1/api-keys",
                Some(json!({ "name": "team-beta" })),
            )
            .await;
        expect(&second, StatusCode::CREATED);
        assert_ne!(second.body["key"], json!(key));
    })
    .await;
}

#[tokio::test]
async fn the_policy_is_sanitized_audited_and_names_the_routes_it_reaches() {
    bounded(async {
        let h = Harness::new().await;
        let superadmin = Some(AdminRole::Superadmin);
        expect(
            &h.admin(
                Method::POST,
                "/api/v1/routes",
                Some(json!({ "model": "smart", "strategy": "adaptive",
                             "targets": [{ "provider": "file-gpu" }] })),
            )
            .await,
            StatusCode::CREATED,
        );
        let put = h
            .call(
                Method::PUT,
                "/api/v1/adaptive-routing-policy",
                superadmin,
                Some(json!({ "enabled": true, "latency_weight": -2.0, "exploration_ratio": 0.8 })),
            )
            .await;
        expect(&put, StatusCode::OK);
        assert_eq!(put.body["data"]["latency_weight"], 0.0);
        assert_eq!(put.body["data"]["exploration_ratio"], 0.5);
        assert_eq!(put.body["data"]["cost_weight"], 0.5);
        assert_eq!(put.body["affected_routes"], json!(["smart"]));
        assert_eq!(put.body["updated_by"], "superadmin-token");
        assert_eq!(put.body["version"], 3);
        assert!(!put.body["warnings"].as_array().unwrap().is_empty());

        let got = h
            .call(
                Method::GET,
                "/api/v1/adaptive-routing-policy",
                superadmin,
                None,
            )
            .await;
        assert_eq!(got.body["data"], put.body["data"]);

        let all_zero = h
            .call(
                Method::PUT,
                "/api/v1/adaptive-routing-policy",
                superadmin,
                Some(json!({ "latency_weight": 0, "cost_weight": 0, "load_weight": -1 })),
            )
            .await;
        expect(&all_zero, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(all_zero.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("enabled = false"));
        assert_eq!(h.version().await, 3);
        assert_eq!(
            h.audit_actions().await.last().unwrap().1,
            "adaptive_routing_policy.update"
        );

        // A PUT that names one field changes that field only: the kill
        // switch does not reset the blend to the defaults.
        let switch = h
            .call(
                Method::PUT,
                "/api/v1/adaptive-routing-policy",
                superadmin,
                Some(json!({ "enabled": false })),
            )
            .await;
        expect(&switch, StatusCode::OK);
        let mut kept = put.body["data"].clone();
        kept["enabled"] = json!(false);
        assert_eq!(switch.body["data"], kept);
        assert_eq!(h.version().await, 4);
    })
    .await;
}
