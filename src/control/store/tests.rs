//! The store against a real PostgreSQL: each test on its own database
//! ([`TestDb`]), bounded by [`TEST_TIMEOUT`].

use std::future::Future;
use std::time::Duration;

use chrono::Utc;

use super::test_db::TestDb;
use super::*;
use crate::config::file::{
    AdminTokenTable, ApiKeyTable, CacheGuardTable, CatalogTable, DisaggregationTable,
    EngineMetricsTable, GroupMemberEntry, KvEventsTable, LmcacheTable, ProviderGroupTable,
    ProviderTable, RouteTable, SaltedDigestTable, TargetEntry,
};

const TEST_TIMEOUT: Duration = Duration::from_secs(60);

async fn bounded<F: Future>(test: F) -> F::Output {
    tokio::time::timeout(TEST_TIMEOUT, test)
        .await
        .expect("the test took longer than its bound")
}

fn provider(name: &str) -> ProviderTable {
    ProviderTable {
        name: Some(name.to_owned()),
        base_url: Some("http://127.0.0.1:8000".to_owned()),
        ..ProviderTable::default()
    }
}

fn target(provider: &str, model: Option<&str>, weight: Option<u32>) -> TargetEntry {
    TargetEntry {
        provider: Some(provider.to_owned()),
        model: model.map(str::to_owned),
        weight,
    }
}

fn salted(id: &str) -> SaltedDigestTable {
    SaltedDigestTable {
        id: Some(id.to_owned()),
        salt: Some("00".repeat(16)),
        sha256: Some("ab".repeat(32)),
    }
}

async fn audit_actions(store: &Store) -> Vec<(String, String, String, Option<u64>)> {
    store
        .audit_log(MAX_AUDIT_PAGE)
        .await
        .unwrap()
        .into_iter()
        .rev()
        .map(|r| (r.actor, r.action, r.subject, r.version))
        .collect()
}

#[tokio::test]
async fn migrations_apply_to_an_empty_database_and_a_second_run_is_a_no_op() {
    bounded(async {
        let db = TestDb::create().await;
        let store = Store::connect(&db.url).await.unwrap();
        let applied = store.migrate().await.unwrap();
        assert_eq!(
            applied.iter().map(|m| m.version).collect::<Vec<_>>(),
            vec![1, 2, 3, 4, 5, 6],
            "{applied:?}"
        );
        assert!(store.migrate().await.unwrap().is_empty());
        assert_eq!(store.version().await.unwrap(), 1);

        let (version, document) = store.document().await.unwrap();
        assert_eq!(version, 1);
        let empty = crate::config::file::ConfigFile {
            adaptive_routing: sanitize_policy(&Default::default()),
            ..Default::default()
        };
        assert_eq!(document, empty);
        // The migration's policy is the defaults of docs/design/defaults.md.
        let defaults = rolter_balancer::AdaptivePolicy::default();
        let policy = store.get_policy().await.unwrap();
        assert_eq!(policy.policy.enabled, Some(defaults.enabled));
        assert_eq!(policy.policy.latency_weight, Some(defaults.latency_weight));
        assert_eq!(policy.policy.cost_weight, Some(defaults.cost_weight));
        assert_eq!(policy.policy.load_weight, Some(defaults.load_weight));
        assert_eq!(
            policy.policy.exploration_ratio,
            Some(defaults.exploration_ratio)
        );
        assert_eq!(policy.policy.min_samples, Some(defaults.min_samples));
        assert_eq!(policy.updated_by, None);
    })
    .await;
}

#[tokio::test]
async fn provider_round_trips_with_its_kv_events_and_lmcache_sources() {
    bounded(async {
        let db = TestDb::create().await;
        let store = db.store().await;
        let full = ProviderTable {
            name: Some("GPU A".to_owned()),
            slug: None,
            base_url: Some("https://gpu-a.internal:8443/prefix".to_owned()),
            api_key_env: Some("GPU_A_KEY".to_owned()),
            health_path: Some("/health".to_owned()),
            max_loras: Some(16),
            ca_file: Some("/etc/ssl/ca.pem".to_owned()),
            tls_verify: Some(false),
            kv_events: Some(KvEventsTable {
                endpoint: Some("tcp://10.0.0.11:5557".to_owned()),
                replay_endpoint: Some("tcp://10.0.0.11:5558".to_owned()),
                topic: Some(String::new()),
                block_size: Some(16),
                data_parallel_size: Some(2),
            }),
            lmcache: Some(LmcacheTable {
                endpoint: Some("http://10.0.0.11:9000/occupancy".to_owned()),
                format: Some("prometheus".to_owned()),
                metric: Some("lmcache_occupancy".to_owned()),
                poll_interval_secs: Some(3),
                stale_after_secs: Some(30),
            }),
            max_concurrency: Some(8),
            bootstrap_port: Some(8998),
            engine_metrics: Some(EngineMetricsTable {
                enabled: Some(true),
                endpoint: Some("http://10.0.0.11:8000/metrics".to_owned()),
                poll_interval_ms: Some(250),
                stale_after_ms: Some(2_000),
            }),
        };
        let (version, stored) = store.create::<Providers>("ops", &full).await.unwrap();
        assert_eq!(version, 2);
        // The slug is derived from the name, as validation derives it, and
        // stored.
        let expected = ProviderTable {
            slug: Some("gpu-a".to_owned()),
            ..full.clone()
        };
        assert_eq!(stored, expected);
        assert_eq!(store.get::<Providers>("gpu-a").await.unwrap(), expected);
        assert_eq!(
            store.list::<Providers>().await.unwrap(),
            vec![expected.clone()]
        );

        // Replace: unset fields go back to unset (defaults).
        let replacement = ProviderTable {
            name: Some("GPU A (east)".to_owned()),
            base_url: Some("http://10.0.0.12:8000".to_owned()),
            ..ProviderTable::default()
        };
        let (version, updated) = store
            .update::<Providers>("ops", "gpu-a", &replacement)
            .await
            .unwrap();
        assert_eq!(version, 3);
        assert_eq!(
            updated,
            ProviderTable {
                slug: Some("gpu-a".to_owned()),
                ..replacement
            }
        );

        let (version, deleted) = store.delete::<Providers>("ops", "gpu-a").await.unwrap();
        assert_eq!((version, deleted), (4, updated));
        assert!(matches!(
            store.get::<Providers>("gpu-a").await,
            Err(StoreError::NotFound {
                kind: ResourceKind::Provider,
                ..
            })
        ));
        assert!(store.list::<Providers>().await.unwrap().is_empty());
    })
    .await;
}

#[tokio::test]
async fn route_targets_and_group_members_keep_their_order_and_are_replaced_on_update() {
    bounded(async {
        let db = TestDb::create().await;
        let store = db.store().await;
        let route = RouteTable {
            model: Some("org/chat".to_owned()),
            strategy: Some("weighted".to_owned()),
            tokenizer: Some("/models/Qwen3-8B".to_owned()),
            tokenizer_budget_kib: Some(32),
            cache_guard: Some(CacheGuardTable {
                min_load: Some(4),
                load_ratio: Some(2.5),
            }),
            endpoints: Some(vec!["chat/completions".to_owned(), "rerank".to_owned()]),
            targets: Some(vec![
                target("gpu-b", Some("Qwen/Qwen3-8B"), Some(2)),
                target("gpu-a", None, None),
                target("gpu-c", Some("m"), Some(1)),
            ]),
            disaggregation: None,
        };
        let (_, stored) = store.create::<Routes>("ops", &route).await.unwrap();
        assert_eq!(stored, route);

        // A disaggregated route keeps its pools in `disaggregation` and
        // reads back without targets.
        let split = RouteTable {
            model: Some("org/split".to_owned()),
            disaggregation: Some(DisaggregationTable {
                protocol: Some("sglang".to_owned()),
                prefill: Some(vec![target("gpu-a", None, None)]),
                decode: Some(vec![target("gpu-b", Some("m"), Some(3))]),
                prefill_strategy: None,
                decode_strategy: Some("least_load".to_owned()),
                min_prefill_tokens: Some(256),
            }),
            ..RouteTable::default()
        };
        let (_, stored) = store.create::<Routes>("ops", &split).await.unwrap();
        assert_eq!(stored, split);

        let shorter = RouteTable {
            model: None,
            strategy: None,
            tokenizer: None,
            tokenizer_budget_kib: None,
            cache_guard: None,
            endpoints: None,
            targets: Some(vec![target("gpu-c", None, Some(7))]),
            disaggregation: None,
        };
        let (_, stored) = store
            .update::<Routes>("ops", "org/chat", &shorter)
            .await
            .unwrap();
        assert_eq!(
            stored,
            RouteTable {
                model: Some("org/chat".to_owned()),
                ..shorter
            }
        );

        let group = ProviderGroupTable {
            name: Some("Edge fleet".to_owned()),
            slug: None,
            strategy: Some("round_robin".to_owned()),
            tokenizer: Some("models/edge".to_owned()),
            tokenizer_budget_kib: None,
            cache_guard: None,
            endpoints: Some(vec!["audio/transcriptions".to_owned()]),
            members: Some(vec![
                GroupMemberEntry {
                    provider: Some("gpu-a".to_owned()),
                    model: None,
                    weight: Some(2),
                },
                GroupMemberEntry {
                    provider: Some("gpu-b".to_owned()),
                    model: Some("Qwen/Qwen3-8B".to_owned()),
                    weight: None,
                },
            ]),
        };
        let (_, stored) = store.create::<ProviderGroups>("ops", &group).await.unwrap();
        assert_eq!(
            stored,
            ProviderGroupTable {
                slug: Some("edge-fleet".to_owned()),
                ..group.clone()
            }
        );

        let (_, document) = store.document().await.unwrap();
        assert_eq!(
            document.routes,
            vec![
                stored_route(&store, "org/chat").await,
                stored_route(&store, "org/split").await
            ]
        );
        assert_eq!(document.provider_groups, vec![stored]);

        // Deleting the parent takes the children with it.
        store.delete::<Routes>("ops", "org/chat").await.unwrap();
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM route_targets")
            .fetch_one(store.pool())
            .await
            .unwrap();
        assert_eq!(left, 0);
    })
    .await;
}

async fn stored_route(store: &Store, model: &str) -> RouteTable {
    store.get::<Routes>(model).await.unwrap()
}

#[tokio::test]
async fn catalog_prices_round_trip() {
    bounded(async {
        let db = TestDb::create().await;
        let store = db.store().await;
        let entry = CatalogTable {
            model: Some("Qwen/Qwen3-8B".to_owned()),
            input_per_mtok: Some(0.1),
            output_per_mtok: Some(0.4),
        };
        store.create::<Catalog>("ops", &entry).await.unwrap();
        assert_eq!(store.get::<Catalog>("Qwen/Qwen3-8B").await.unwrap(), entry);
        let dearer = CatalogTable {
            output_per_mtok: Some(1.25),
            ..entry.clone()
        };
        store
            .update::<Catalog>("ops", "Qwen/Qwen3-8B", &dearer)
            .await
            .unwrap();
        assert_eq!(store.list::<Catalog>().await.unwrap(), vec![dearer]);
        // A required price missing is refused by the store itself.
        let unpriced = CatalogTable {
            model: Some("other".to_owned()),
            ..CatalogTable::default()
        };
        assert!(matches!(
            store.create::<Catalog>("ops", &unpriced).await,
            Err(StoreError::Invalid {
                field: "input_per_mtok",
                ..
            })
        ));
    })
    .await;
}

#[tokio::test]
async fn keys_and_tokens_are_stored_as_salted_digests_only() {
    bounded(async {
        let db = TestDb::create().await;
        let store = db.store().await;
        let key = ApiKeyTable {
            name: Some("team-alpha".to_owned()),
            key_salted: Some(salted("0123456789abcdef")),
            models: vec!["chat".to_owned()],
            providers: vec!["gpu-a".to_owned(), "gpu-b".to_owned()],
            rpm: Some(60),
            tpm: Some(90_000),
            max_concurrent: Some(4),
            priority: Some(-2),
            ..ApiKeyTable::default()
        };
        let (_, stored) = store.create::<ApiKeys>("ops", &key).await.unwrap();
        assert_eq!(stored, key);
        let public = ApiKeys::public(&stored);
        assert_eq!(public["key_id"], "0123456789abcdef");
        assert_eq!(public["priority"], -2);
        assert_eq!(public["tpm"], 90_000);
        assert!(public.get("key_salted").is_none(), "{public}");

        // A key from the environment belongs in rolter.toml.
        let from_env = ApiKeyTable {
            name: Some("env".to_owned()),
            key_env: Some("KEY".to_owned()),
            ..ApiKeyTable::default()
        };
        assert!(matches!(
            store.create::<ApiKeys>("ops", &from_env).await,
            Err(StoreError::Invalid {
                field: "key_salted",
                ..
            })
        ));
        // Two keys cannot share an id.
        let same_id = ApiKeyTable {
            name: Some("team-beta".to_owned()),
            ..key.clone()
        };
        assert!(matches!(
            store.create::<ApiKeys>("ops", &same_id).await,
            Err(StoreError::Conflict {
                field: "key_id",
                ..
            })
        ));

        let token = AdminTokenTable {
            name: Some("ops".to_owned()),
            token_salted: Some(salted("fedcba9876543210")),
            role: None,
            ..AdminTokenTable::default()
        };
        let (_, stored) = store.create::<AdminTokens>("root", &token).await.unwrap();
        assert_eq!(stored.role.as_deref(), Some("viewer"));
        let bad_role = AdminTokenTable {
            name: Some("x".to_owned()),
            token_salted: Some(salted("1111111111111111")),
            role: Some("root".to_owned()),
            ..AdminTokenTable::default()
        };
        assert!(matches!(
            store.create::<AdminTokens>("root", &bad_role).await,
            Err(StoreError::Invalid { .. })
        ));

        let (_, document) = store.document().await.unwrap();
        assert_eq!(document.api_keys, vec![key]);
        assert_eq!(document.admin_tokens.len(), 1);
    })
    .await;
}

#[tokio::test]
async fn unique_violations_name_the_field_and_missing_rows_are_not_found() {
    bounded(async {
        let db = TestDb::create().await;
        let store = db.store().await;
        store
            .create::<Providers>("ops", &provider("gpu-a"))
            .await
            .unwrap();
        let same_slug = ProviderTable {
            slug: Some("gpu-a".to_owned()),
            ..provider("another name")
        };
        assert!(matches!(
            store.create::<Providers>("ops", &same_slug).await,
            Err(StoreError::Conflict { field: "slug", .. })
        ));
        let same_name = ProviderTable {
            slug: Some("other".to_owned()),
            ..provider("gpu-a")
        };
        let error = store
            .create::<Providers>("ops", &same_name)
            .await
            .unwrap_err();
        assert!(
            matches!(error, StoreError::Conflict { field: "name", .. }),
            "{error:?}"
        );
        assert!(matches!(
            store
                .update::<Routes>("ops", "nope", &RouteTable::default())
                .await,
            Err(StoreError::NotFound {
                kind: ResourceKind::Route,
                ..
            })
        ));
        assert!(matches!(
            store.delete::<Catalog>("ops", "nope").await,
            Err(StoreError::NotFound { .. })
        ));
        // The key cannot change through an update.
        let renamed = ProviderTable {
            slug: Some("gpu-z".to_owned()),
            ..provider("gpu-a")
        };
        assert!(matches!(
            store.update::<Providers>("ops", "gpu-a", &renamed).await,
            Err(StoreError::Invalid { field: "slug", .. })
        ));
        // None of the refused writes moved the version.
        assert_eq!(store.version().await.unwrap(), 2);
        assert_eq!(audit_actions(&store).await.len(), 1);
    })
    .await;
}

#[tokio::test]
async fn a_write_bumps_the_version_once_and_audits_each_change() {
    bounded(async {
        let db = TestDb::create().await;
        let store = db.store().await;

        // Two changes in one write: one version, two audit rows.
        let mut write = store.begin_write("ops").await.unwrap();
        assert_eq!(write.version(), 1);
        write.create::<Providers>(&provider("gpu-a")).await.unwrap();
        write
            .create::<Catalog>(&CatalogTable {
                model: Some("m".to_owned()),
                input_per_mtok: Some(1.0),
                output_per_mtok: Some(2.0),
            })
            .await
            .unwrap();
        // The write sees its own rows.
        assert_eq!(write.document().await.unwrap().providers.len(), 1);
        assert_eq!(write.commit().await.unwrap(), 2);

        // A dropped write rolls back: no row, no version, no audit.
        let mut write = store.begin_write("ops").await.unwrap();
        write.create::<Providers>(&provider("gpu-b")).await.unwrap();
        drop(write);
        // An empty write commits nothing.
        let write = store.begin_write("ops").await.unwrap();
        assert_eq!(write.commit().await.unwrap(), 2);

        store
            .update::<Providers>("admin-2", "gpu-a", &provider("gpu-a"))
            .await
            .unwrap();
        store.delete::<Catalog>("admin-2", "m").await.unwrap();
        assert_eq!(store.version().await.unwrap(), 4);
        assert_eq!(store.list::<Providers>().await.unwrap().len(), 1);
        assert_eq!(
            audit_actions(&store).await,
            vec![
                (
                    "ops".into(),
                    "provider.create".into(),
                    "gpu-a".into(),
                    Some(2)
                ),
                ("ops".into(), "catalog.create".into(), "m".into(), Some(2)),
                (
                    "admin-2".into(),
                    "provider.update".into(),
                    "gpu-a".into(),
                    Some(3)
                ),
                (
                    "admin-2".into(),
                    "catalog.delete".into(),
                    "m".into(),
                    Some(4)
                ),
            ]
        );
        let newest = store.audit_log(1).await.unwrap();
        assert_eq!(newest.len(), 1);
        assert_eq!(newest[0].details["before"]["model"], "m");
        assert!(newest[0].details.get("after").is_none());
    })
    .await;
}

#[tokio::test]
async fn audit_details_never_hold_a_digest() {
    bounded(async {
        let db = TestDb::create().await;
        let store = db.store().await;
        let key = ApiKeyTable {
            name: Some("k".to_owned()),
            key_salted: Some(salted("0123456789abcdef")),
            ..ApiKeyTable::default()
        };
        store.create::<ApiKeys>("ops", &key).await.unwrap();
        let record = &store.audit_log(1).await.unwrap()[0];
        let details = record.details.to_string();
        assert!(!details.contains(&"ab".repeat(32)), "{details}");
        assert!(!details.contains("salt"), "{details}");
        assert_eq!(record.details["after"]["key_id"], "0123456789abcdef");
    })
    .await;
}

#[tokio::test]
async fn the_policy_is_stored_sanitized_and_its_change_audited() {
    bounded(async {
        let db = TestDb::create().await;
        let store = db.store().await;
        let (version, stored) = store
            .put_policy(
                "root",
                &AdaptiveRoutingTable {
                    enabled: Some(true),
                    latency_weight: Some(-1.0),
                    cost_weight: Some(2.0),
                    exploration_ratio: Some(0.9),
                    ..AdaptiveRoutingTable::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(version, 2);
        assert_eq!(
            stored.policy,
            AdaptiveRoutingTable {
                enabled: Some(true),
                latency_weight: Some(0.0),
                cost_weight: Some(2.0),
                load_weight: Some(0.25),
                exploration_ratio: Some(0.5),
                min_samples: Some(50),
            }
        );
        assert_eq!(stored.updated_by.as_deref(), Some("root"));
        assert_eq!(store.get_policy().await.unwrap(), stored);
        assert_eq!(
            store.document().await.unwrap().1.adaptive_routing,
            stored.policy
        );
        assert_eq!(
            audit_actions(&store).await,
            vec![(
                "root".into(),
                "adaptive_routing_policy.update".into(),
                "adaptive_routing".into(),
                Some(2)
            )]
        );
    })
    .await;
}

#[tokio::test]
async fn telemetry_keeps_the_newest_sample_per_node_and_model_and_prunes_old_ones() {
    bounded(async {
        let db = TestDb::create().await;
        let store = db.store().await;
        let before = Utc::now() - chrono::Duration::seconds(5);
        store
            .upsert_telemetry("gw-1", "chat", &serde_json::json!({ "n": 1 }))
            .await
            .unwrap();
        store
            .upsert_telemetry("gw-1", "chat", &serde_json::json!({ "n": 2 }))
            .await
            .unwrap();
        store
            .upsert_telemetry("gw-2", "chat", &serde_json::json!({ "n": 3 }))
            .await
            .unwrap();
        let samples = store.telemetry_since(before).await.unwrap();
        assert_eq!(
            samples
                .iter()
                .map(|s| (s.node_id.as_str(), s.sample["n"].as_i64()))
                .collect::<Vec<_>>(),
            vec![("gw-1", Some(2)), ("gw-2", Some(3))]
        );
        let future = Utc::now() + chrono::Duration::seconds(60);
        assert!(store.telemetry_since(future).await.unwrap().is_empty());
        assert_eq!(store.prune_telemetry(before).await.unwrap(), 0);
        assert_eq!(store.prune_telemetry(future).await.unwrap(), 2);
        assert!(store.telemetry_since(before).await.unwrap().is_empty());
        // Telemetry is not configuration.
        assert_eq!(store.version().await.unwrap(), 1);
    })
    .await;
}

#[tokio::test]
async fn a_node_keeps_its_first_seen_and_updates_the_rest() {
    bounded(async {
        let db = TestDb::create().await;
        let store = db.store().await;
        let mut report = NodeReport {
            node_id: "gw-1".to_owned(),
            role: "gateway".to_owned(),
            config_version: Some(3),
            address: Some("10.0.0.5:41000".to_owned()),
            software_version: Some("0.1.0".to_owned()),
        };
        store.upsert_node(&report).await.unwrap();
        let first = store.list_nodes().await.unwrap();
        report.config_version = Some(4);
        report.address = None;
        store.upsert_node(&report).await.unwrap();
        let second = store.list_nodes().await.unwrap();
        assert_eq!(second.len(), 1);
        assert_eq!(second[0].report, report);
        assert_eq!(second[0].first_seen, first[0].first_seen);
        assert!(second[0].last_seen >= first[0].last_seen);
    })
    .await;
}
