//! `GET /api/v1/providers|routes|provider-groups|catalog` on standalone and
//! gateway nodes: the running configuration in the control API's shape, so
//! the dashboard and scripts read one API on every node.
//!
//! Every row is file-managed there (`rolter.toml`, or the control node's
//! fleet document on a gateway), so a list names every key in
//! `file_managed` and every write is refused with 409 `file_managed`. The
//! rows are the validated configuration turned back into the file tables
//! and shown through the same [`Resource::public`] as the control API's, so
//! no secret leaves: the validated configuration holds the upstream key
//! itself, never the name of its variable, and neither appears here.
//! Defaults are written out (a route without `strategy` reads
//! `"round_robin"`): this is what the node runs, not what a file says.

use http::{Method, StatusCode};

use super::path;
use super::resources::{list_body, Endpoint};
use super::response::{method_not_allowed, not_found, ApiResponse};
use super::{require, Caller};
use crate::config::file::{
    CatalogTable, ConfigFile, DisaggregationTable, EngineMetricsTable, GroupMemberEntry,
    KvEventsTable, LmcacheTable, ProviderGroupTable, ProviderTable, RouteTable, TargetEntry,
};
use crate::config::{Config, LmcacheFormat};
use crate::control::store::{Catalog, ProviderGroups, Providers, Routes};

/// Answers `path` when it is one of the four collections; `None` for any
/// other path (the caller answers those). `managed_by` names where the
/// configuration is changed: "rolter.toml" or "the control node".
pub fn answer(
    config: &Config,
    managed_by: &str,
    method: &Method,
    path: &str,
    caller: Option<&Caller>,
) -> Option<ApiResponse> {
    let rest = path.strip_prefix(super::API_PREFIX)?;
    let (collection, key) = match path::split(rest) {
        Ok(split) => split,
        Err(_) => return None,
    };
    let key = key.as_deref();
    let document = || document(config);
    let respond = |kind| -> ApiResponse {
        let Some(caller) = caller else {
            return ApiResponse::unauthorized(
                "an admin token is required: send `Authorization: Bearer <token>`",
            );
        };
        if let Err(refusal) = require(caller, kind) {
            return refusal;
        }
        if *method != Method::GET {
            return match *method {
                Method::POST | Method::PUT | Method::DELETE => read_only(managed_by),
                _ => method_not_allowed(method, path),
            };
        }
        let document = document();
        match collection {
            "providers" => rows::<Providers>(&document, key),
            "routes" => rows::<Routes>(&document, key),
            "provider-groups" => rows::<ProviderGroups>(&document, key),
            _ => rows::<Catalog>(&document, key),
        }
    };
    match collection {
        "providers" => Some(respond(Providers::READ)),
        "routes" => Some(respond(Routes::READ)),
        "provider-groups" => Some(respond(ProviderGroups::READ)),
        "catalog" => Some(respond(Catalog::READ)),
        _ => None,
    }
}

/// A list (every row file-managed) or one row.
fn rows<R: Endpoint>(document: &ConfigFile, key: Option<&str>) -> ApiResponse {
    let rows = R::rows(document);
    match key {
        None => {
            let keys: Vec<String> = rows.iter().filter_map(R::key).collect();
            ApiResponse::json(StatusCode::OK, list_body(rows.iter().map(R::public), &keys))
        }
        Some(key) => match rows.iter().find(|row| R::key(row).as_deref() == Some(key)) {
            Some(row) => ApiResponse::json(
                StatusCode::OK,
                super::to_json(&super::RowAnswer {
                    data: R::public(row),
                }),
            ),
            None => not_found(&format!("the {} `{key}` does not exist", R::KIND.noun())),
        },
    }
}

/// 409 for any write: nothing on this node is changed through the API.
fn read_only(managed_by: &str) -> ApiResponse {
    ApiResponse::error(
        StatusCode::CONFLICT,
        "conflict_error",
        "file_managed",
        &format!(
            "this node's configuration is managed by {managed_by} and is read-only here; change it there"
        ),
    )
}

/// The running configuration's providers, routes, provider groups and
/// catalog as file tables, keys and defaults written out.
pub fn document(config: &Config) -> ConfigFile {
    ConfigFile {
        providers: config
            .providers
            .iter()
            .map(|p| ProviderTable {
                name: Some(p.name.clone()),
                slug: Some(p.slug.clone()),
                base_url: Some(p.base_url.to_string()),
                api_key_env: None,
                health_path: Some(p.health_path.clone()),
                max_loras: Some(p.max_loras as u64),
                ca_file: p.tls.ca_file.as_ref().map(|f| f.display().to_string()),
                tls_verify: Some(p.tls.verify),
                kv_events: p.kv_events.as_ref().map(|k| KvEventsTable {
                    endpoint: Some(k.endpoint.clone()),
                    replay_endpoint: k.replay_endpoint.clone(),
                    topic: Some(k.topic.clone()),
                    block_size: Some(k.block_size as u64),
                    data_parallel_size: Some(u64::from(k.data_parallel_size)),
                }),
                lmcache: p.lmcache.as_ref().map(|l| {
                    let (format, metric) = match &l.format {
                        LmcacheFormat::Json => ("json", None),
                        LmcacheFormat::Prometheus { metric } => {
                            ("prometheus", Some(metric.clone()))
                        }
                    };
                    LmcacheTable {
                        endpoint: Some(l.endpoint.clone()),
                        format: Some(format.to_owned()),
                        metric,
                        poll_interval_secs: Some(l.poll_interval.as_secs()),
                        stale_after_secs: Some(l.stale_after.as_secs()),
                    }
                }),
                max_concurrency: p.max_concurrency,
                bootstrap_port: p.bootstrap_port,
                engine_metrics: p.engine_metrics.as_ref().map(|m| EngineMetricsTable {
                    enabled: Some(true),
                    endpoint: Some(m.endpoint.clone()),
                    poll_interval_ms: Some(m.poll_interval.as_millis() as u64),
                    stale_after_ms: Some(m.stale_after.as_millis() as u64),
                }),
            })
            .collect(),
        routes: config
            .routes
            .iter()
            .map(|r| RouteTable {
                model: Some(r.model.clone()),
                strategy: r
                    .disaggregation
                    .is_none()
                    .then(|| r.strategy.as_str().to_owned()),
                tokenizer: r.tokenizer.as_ref().map(|t| t.dir.display().to_string()),
                tokenizer_budget_kib: r.tokenizer.as_ref().map(|t| (t.budget_bytes / 1024) as u32),
                cache_guard: guard_table(r.cache_guard),
                endpoints: endpoint_names(r.endpoints),
                targets: r
                    .disaggregation
                    .is_none()
                    .then(|| target_entries(&r.targets)),
                disaggregation: r.disaggregation.as_ref().map(|d| DisaggregationTable {
                    protocol: Some(d.protocol.as_str().to_owned()),
                    prefill: Some(target_entries(&d.prefill)),
                    decode: Some(target_entries(&r.targets)),
                    prefill_strategy: Some(d.prefill_strategy.as_str().to_owned()),
                    decode_strategy: Some(r.strategy.as_str().to_owned()),
                    min_prefill_tokens: Some(d.min_prefill_tokens),
                }),
            })
            .collect(),
        provider_groups: config
            .provider_groups
            .iter()
            .map(|g| ProviderGroupTable {
                name: Some(g.name.clone()),
                slug: Some(g.slug.clone()),
                strategy: Some(g.strategy.as_str().to_owned()),
                tokenizer: g.tokenizer.as_ref().map(|t| t.dir.display().to_string()),
                tokenizer_budget_kib: g.tokenizer.as_ref().map(|t| (t.budget_bytes / 1024) as u32),
                cache_guard: guard_table(g.cache_guard),
                endpoints: endpoint_names(g.endpoints),
                members: Some(
                    g.members
                        .iter()
                        .map(|m| GroupMemberEntry {
                            provider: Some(m.provider.clone()),
                            model: m.model.clone(),
                            weight: Some(m.weight),
                        })
                        .collect(),
                ),
            })
            .collect(),
        catalog: config
            .catalog
            .iter()
            .map(|c| CatalogTable {
                model: Some(c.model.clone()),
                input_per_mtok: Some(c.input_per_mtok),
                output_per_mtok: Some(c.output_per_mtok),
            })
            .collect(),
        ..ConfigFile::default()
    }
}

/// A validated guard as the file would write it; `None` for the default.
fn target_entries(targets: &[crate::config::RouteTarget]) -> Vec<TargetEntry> {
    targets
        .iter()
        .map(|t| TargetEntry {
            provider: Some(t.provider.clone()),
            model: Some(t.model.clone()),
            weight: Some(t.weight),
        })
        .collect()
}

fn guard_table(guard: crate::config::CacheGuard) -> Option<crate::config::file::CacheGuardTable> {
    (guard != crate::config::CacheGuard::default()).then(|| crate::config::file::CacheGuardTable {
        min_load: guard.min_load,
        load_ratio: guard
            .load_ratio_milli
            .map(|milli| f64::from(milli) / 1000.0),
    })
}

/// An allow list as written, or nothing for every endpoint.
fn endpoint_names(set: crate::openai::EndpointSet) -> Option<Vec<String>> {
    (set != crate::openai::EndpointSet::ALL).then(|| set.names())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::AdminRole;
    use serde_json::json;

    const FILE: &str = r#"
[[providers]]
name = "GPU A"
base_url = "http://127.0.0.1:8001"
api_key_env = "GPU_KEY"
kv_events = { endpoint = "tcp://127.0.0.1:5557" }

[[routes]]
model = "org/chat"
targets = [{ provider = "gpu-a", model = "m", weight = 3 }]

[[provider_groups]]
name = "Edge"
strategy = "adaptive"
members = [{ provider = "gpu-a" }]

[[catalog]]
model = "m"
input_per_mtok = 0.1
output_per_mtok = 0.4
"#;

    fn config() -> Config {
        crate::config::parse("rolter.toml", FILE, &|name| {
            (name == "GPU_KEY").then(|| "upstream-secret".to_owned())
        })
        .expect("valid")
    }

    fn viewer() -> Caller {
        Caller {
            name: "v".to_owned(),
            role: AdminRole::Viewer,
        }
    }

    fn get(path: &str) -> ApiResponse {
        answer(
            &config(),
            "rolter.toml",
            &Method::GET,
            path,
            Some(&viewer()),
        )
        .expect("a collection")
    }

    #[test]
    fn lists_are_the_running_rows_all_file_managed_without_secrets() {
        let providers = get("/api/v1/providers");
        assert_eq!(providers.status, StatusCode::OK);
        assert_eq!(providers.body["file_managed"], json!(["gpu-a"]));
        let row = &providers.body["data"][0];
        assert_eq!(row["slug"], "gpu-a");
        assert_eq!(row["kv_events"]["endpoint"], "tcp://127.0.0.1:5557");
        assert_eq!(row["kv_events"]["block_size"], 16);
        let text = providers.body.to_string();
        assert!(
            !text.contains("upstream-secret") && !text.contains("GPU_KEY"),
            "{text}"
        );

        let routes = get("/api/v1/routes");
        assert_eq!(routes.body["file_managed"], json!(["org/chat"]));
        assert_eq!(routes.body["data"][0]["strategy"], "round_robin");
        assert_eq!(routes.body["data"][0]["targets"][0]["weight"], 3);
        let one = get("/api/v1/routes/org/chat");
        assert_eq!(one.body["data"]["model"], "org/chat");
        assert_eq!(get("/api/v1/routes/nope").status, StatusCode::NOT_FOUND);

        let groups = get("/api/v1/provider-groups");
        assert_eq!(groups.body["data"][0]["strategy"], "adaptive");
        assert_eq!(groups.body["data"][0]["members"][0].get("model"), None);
        let catalog = get("/api/v1/catalog");
        assert_eq!(catalog.body["data"][0]["output_per_mtok"], 0.4);
    }

    #[test]
    fn writes_are_refused_as_file_managed_and_reads_need_a_token() {
        let admin = Caller {
            name: "a".to_owned(),
            role: AdminRole::Superadmin,
        };
        for method in [Method::POST, Method::PUT, Method::DELETE] {
            let answer = answer(
                &config(),
                "rolter.toml",
                &method,
                "/api/v1/routes/org/chat",
                Some(&admin),
            )
            .expect("a collection");
            assert_eq!(answer.status, StatusCode::CONFLICT);
            assert_eq!(answer.body["error"]["code"], "file_managed");
            assert!(answer.body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("rolter.toml"));
        }
        let anonymous = answer(
            &config(),
            "rolter.toml",
            &Method::GET,
            "/api/v1/catalog",
            None,
        )
        .expect("a collection");
        assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
        assert!(answer(
            &config(),
            "rolter.toml",
            &Method::GET,
            "/api/v1/api-keys",
            None
        )
        .is_none());
    }
}
