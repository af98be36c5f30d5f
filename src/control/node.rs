//! A control node: the fleet's configuration in PostgreSQL plus the rows of
//! its own rolter.toml, published to gateways as one fleet document.
//!
//! The fleet document is the file types (`config::file::ConfigFile`) as JSON:
//! providers, routes, groups, catalog and API keys from rolter.toml (read-only
//! in the API) followed by the database's; the adaptive-routing policy and
//! admin tokens from the database; retry, timeouts, health, breaker,
//! parking, saturation and flow control from rolter.toml. API keys travel as digests, never as the names of
//! environment variables only the control node has. The control node installs
//! the same document as its own snapshot, so its admin API sees what the
//! gateways see.
//!
//! Its version is the database's configuration version plus the number of
//! reloads of rolter.toml: it grows with every change of either.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::StatusCode;
use tokio::sync::OnceCell;

use super::store::{ClusterAnswer, ClusterNode, NodeReport, Store};
use crate::config::file::{AdaptiveRoutingTable, ConfigFile};
use crate::config::{self, Config, ConfigErrors};
use crate::control::store::StoredGatewayState;
use crate::fleet::poller::FleetSnapshot;
use crate::fleet::state::{
    is_stale, FleetHistoryAnswer, GatewayHistories, GatewayView, GatewaysAnswer,
};
use crate::fleet::telemetry::{
    NodeRanking, RouteSample, RouteTelemetry, TelemetryAnswer, TelemetryPush,
};
use crate::state::{GatewayState, LoadError, Reloaded};

/// Telemetry older than this is not current and is left out of answers.
pub const TELEMETRY_CURRENT_SECS: i64 = 60;
/// Telemetry rows older than this are deleted (a scaled-down node leaves).
pub const TELEMETRY_PRUNE_SECS: i64 = 3600;
/// How often pushes prune old telemetry and gateway states.
const PRUNE_EVERY_MS: u64 = 60_000;
/// A gateway silent this long leaves the fleet view (it stays in the
/// cluster inventory).
pub const GATEWAY_STATE_SHOWN_SECS: i64 = 600;
/// The push interval assumed of a gateway that did not say (the default
/// `telemetry_interval`).
const DEFAULT_PUSH_INTERVAL_MS: u64 = config::file::DEFAULT_TELEMETRY_INTERVAL_SECS * 1000;
/// Actor of policy writes seeded from rolter.toml.
const FILE_ACTOR: &str = "rolter.toml";

/// The published fleet document.
struct Published {
    version: u64,
    /// `{"version": N, "document": {...}}`, what gateways receive.
    body: Bytes,
}

pub struct ControlNode {
    state: Arc<GatewayState>,
    config_path: PathBuf,
    database_url: String,
    // Connected on first use, in the runtime of whoever uses it first.
    store: OnceCell<Store>,
    published: ArcSwap<Published>,
    /// Reloads of rolter.toml since start.
    file_generation: AtomicU64,
    /// The gateways' recent traffic, from their pushes.
    histories: GatewayHistories,
    /// When pushes last pruned old rows (`clock::now_ms`; 0: never).
    last_prune_ms: AtomicU64,
    // One refresh at a time (API writes, reloads, the periodic check).
    refresh_lock: tokio::sync::Mutex<()>,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// A stored state as the fleet view answers it.
fn gateway_view(stored: StoredGatewayState) -> GatewayView {
    GatewayView {
        stale: is_stale(stored.age_ms, stored.interval_ms),
        node_id: stored.node_id,
        reported_at: stored.reported_at,
        age_ms: stored.age_ms,
        interval_ms: stored.interval_ms,
        state: stored.state,
    }
}

/// Reads rolter.toml as file types (it validated when it was loaded).
fn read_file(path: &Path) -> Result<ConfigFile, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors::from(config::ConfigError {
            file: path.display().to_string(),
            line: None,
            field: None,
            message: format!("cannot read the configuration file: {e}"),
        })
    })?;
    toml::from_str(&text).map_err(|e| {
        LoadError::from(ConfigErrors::from(config::ConfigError {
            file: path.display().to_string(),
            line: None,
            field: None,
            message: e.message().to_string(),
        }))
    })
}

/// The fleet document: `file`'s rows, then `database`'s.
fn fleet_document(file: &ConfigFile, validated_file: &Config, database: &ConfigFile) -> ConfigFile {
    let mut api_keys = file.api_keys.clone();
    // Gateways cannot read the control node's environment: send digests.
    for (table, key) in api_keys.iter_mut().zip(&validated_file.api_keys) {
        table.set_digest(&key.digest);
    }
    api_keys.extend(database.api_keys.iter().cloned());
    fn chain<T: Clone>(file: &[T], database: &[T]) -> Vec<T> {
        file.iter().chain(database).cloned().collect()
    }
    ConfigFile {
        server: Default::default(),
        control_plane: None,
        // Each gateway names its Redis in its own file.
        rate_limits: Default::default(),
        tracing: None,
        providers: chain(&file.providers, &database.providers),
        routes: chain(&file.routes, &database.routes),
        provider_groups: chain(&file.provider_groups, &database.provider_groups),
        catalog: chain(&file.catalog, &database.catalog),
        api_keys,
        // The control node's own file tokens stay on the control node.
        admin_tokens: database.admin_tokens.clone(),
        adaptive_routing: database.adaptive_routing.clone(),
        retry: file.retry.clone(),
        timeouts: file.timeouts.clone(),
        health: file.health.clone(),
        breaker: file.breaker.clone(),
        parking: file.parking.clone(),
        saturation: file.saturation.clone(),
        flow_control: file.flow_control.clone(),
    }
}

impl ControlNode {
    pub fn new(state: Arc<GatewayState>, config_path: &Path, database_url: String) -> Arc<Self> {
        Arc::new(ControlNode {
            state,
            config_path: config_path.to_path_buf(),
            database_url,
            store: OnceCell::new(),
            published: ArcSwap::from_pointee(Published {
                version: 0,
                body: Bytes::new(),
            }),
            file_generation: AtomicU64::new(0),
            histories: GatewayHistories::default(),
            last_prune_ms: AtomicU64::new(0),
            refresh_lock: tokio::sync::Mutex::new(()),
        })
    }

    /// The node's own state (its snapshot, metrics, last reload).
    pub fn state(&self) -> &GatewayState {
        &self.state
    }

    pub async fn store(&self) -> Result<&Store, String> {
        self.store
            .get_or_try_init(|| Store::connect(&self.database_url))
            .await
            .map_err(|e| format!("database: {e}"))
    }

    /// Migrates the database and seeds the policy from rolter.toml when the
    /// database has never had one set; then publishes the first document.
    pub async fn start(&self) -> Result<(), String> {
        let store = self.store().await?;
        store.migrate().await.map_err(|e| e.to_string())?;
        let file = read_file(&self.config_path).map_err(|e| e.lines().join("; "))?;
        let stored = store.get_policy().await.map_err(|e| e.to_string())?;
        if stored.updated_by.is_none() && file.adaptive_routing != AdaptiveRoutingTable::default() {
            store
                .put_policy(FILE_ACTOR, &file.adaptive_routing)
                .await
                .map_err(|e| e.to_string())?;
            log::info!("adaptive-routing policy seeded from rolter.toml");
        }
        self.refresh(false).await.map(|_| ())
    }

    /// Rebuilds the fleet document from rolter.toml and the database, and
    /// installs it on this node. `reload_file`: rolter.toml may have changed.
    pub async fn refresh(&self, reload_file: bool) -> Result<Reloaded, String> {
        let _serialized = self.refresh_lock.lock().await;
        let store = self.store().await?;
        let (database_version, database) = store.document().await.map_err(|e| e.to_string())?;
        let path = self.config_path.clone();
        let (file, validated) = tokio::task::spawn_blocking(move || {
            let validated = config::load(&path).map_err(LoadError::from)?;
            Ok::<_, LoadError>((read_file(&path)?, validated))
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.lines().join("; "))?;
        let generation = if reload_file {
            self.file_generation.fetch_add(1, Ordering::AcqRel) + 1
        } else {
            self.file_generation.load(Ordering::Acquire)
        };
        let version = database_version + generation;
        if !reload_file && version == self.published.load().version {
            return Ok(Reloaded {
                version,
                warnings: Vec::new(),
                needs_restart: Vec::new(),
            });
        }
        let document = fleet_document(&file, &validated, &database);
        let snapshot = FleetSnapshot { version, document };
        let body = serde_json::to_vec(&snapshot).map_err(|e| e.to_string())?;
        let FleetSnapshot { document, .. } = snapshot;
        let state = Arc::clone(&self.state);
        let installed = tokio::task::spawn_blocking(move || state.install_fleet(version, document))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| e.lines().join("; "))?;
        self.published.store(Arc::new(Published {
            version,
            body: Bytes::from(body),
        }));
        Ok(installed)
    }

    /// Judges a candidate database document with this node's file rows
    /// merged in, exactly as a reload would.
    pub fn validator(&self) -> impl Fn(&ConfigFile) -> Result<Config, ConfigErrors> + Send + Sync {
        let path = self.config_path.clone();
        move |candidate: &ConfigFile| {
            let file = read_file(&path).map_err(|e| match e {
                LoadError::Config(errors) => errors,
                other => ConfigErrors::from(config::ConfigError {
                    file: path.display().to_string(),
                    line: None,
                    field: None,
                    message: other.to_string(),
                }),
            })?;
            let validated_file = config::load(&path)?;
            let document = fleet_document(&file, &validated_file, candidate);
            let merged = config::merge_fleet_document(&file, &document);
            config::parse_document("the configuration with this change", &merged, &env)
                .map_err(|errors| config::row_names::name_rows(errors, &merged))
        }
    }

    /// The rows this node's own file manages (the control API refuses to
    /// change them); none when the file cannot be read.
    pub fn file_managed_rows(&self) -> Option<ConfigFile> {
        read_file(&self.config_path).ok()
    }

    /// `GET /internal/snapshot?version=N` for `node`: 304 when it runs the
    /// current version, else the document. Records the node either way.
    pub async fn snapshot_for(&self, node: NodeReport) -> (StatusCode, Bytes) {
        let have = node.config_version;
        if let Ok(store) = self.store().await {
            if let Err(e) = store.upsert_node(&node).await {
                log::warn!("recording node {} failed: {e}", node.node_id);
            }
        }
        let published = self.published.load();
        if published.version == 0 {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                Bytes::from_static(b"{\"error\":{\"message\":\"no configuration published yet\"}}"),
            );
        }
        if have == Some(published.version) {
            return (StatusCode::NOT_MODIFIED, Bytes::new());
        }
        (StatusCode::OK, published.body.clone())
    }

    /// Stores a gateway's adaptive-routing telemetry (newest per node and
    /// model) and live state, and at most once a minute prunes rows of
    /// nodes that stopped reporting.
    pub async fn record_telemetry(&self, node_id: &str, push: TelemetryPush) -> Result<(), String> {
        let store = self.store().await?;
        if let Some(state) = push.state.as_ref().filter(|s| s.is_object()) {
            let interval_ms = push.interval_ms.unwrap_or(DEFAULT_PUSH_INTERVAL_MS);
            self.histories
                .record(node_id, state, interval_ms, crate::clock::unix_ms());
            store
                .upsert_gateway_state(node_id, state, interval_ms)
                .await
                .map_err(|e| e.to_string())?;
        }
        for route in push.routes {
            let sample = serde_json::to_value(&route).map_err(|e| e.to_string())?;
            store
                .upsert_telemetry(node_id, &route.model, &sample)
                .await
                .map_err(|e| e.to_string())?;
        }
        // Rows an hour old go at most once a minute, not on every push.
        let now = crate::clock::now_ms();
        let last = self.last_prune_ms.load(Ordering::Acquire);
        if last != 0 && now.saturating_sub(last) < PRUNE_EVERY_MS {
            return Ok(());
        }
        // Two pushes at once may both prune: harmless.
        self.last_prune_ms.store(now.max(1), Ordering::Release);
        let cutoff = chrono::Utc::now() - chrono::Duration::seconds(TELEMETRY_PRUNE_SECS);
        store
            .prune_gateway_states(cutoff)
            .await
            .map_err(|e| e.to_string())?;
        store
            .prune_telemetry(cutoff)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Every gateway's newest live state of the last
    /// [`GATEWAY_STATE_SHOWN_SECS`], with its age.
    pub async fn gateways(&self) -> Result<GatewaysAnswer, String> {
        let store = self.store().await?;
        let cutoff = chrono::Utc::now() - chrono::Duration::seconds(GATEWAY_STATE_SHOWN_SECS);
        let states = store
            .gateway_states_since(cutoff)
            .await
            .map_err(|e| e.to_string())?;
        Ok(GatewaysAnswer {
            gateways: states.into_iter().map(gateway_view).collect(),
        })
    }

    /// Current telemetry, grouped by route with one entry per node. A
    /// stored sample that no longer reads as one (written by another
    /// version) is left out and logged.
    pub async fn telemetry(&self) -> Result<TelemetryAnswer, String> {
        let store = self.store().await?;
        let cutoff = chrono::Utc::now() - chrono::Duration::seconds(TELEMETRY_CURRENT_SECS);
        let samples = store
            .telemetry_since(cutoff)
            .await
            .map_err(|e| e.to_string())?;
        let mut routes: std::collections::BTreeMap<String, Vec<NodeRanking>> = Default::default();
        for sample in samples {
            let ranking = match serde_json::from_value::<RouteSample>(sample.sample) {
                Ok(route) => route.ranking,
                Err(e) => {
                    log::warn!(
                        "telemetry of node {} for {}: unreadable sample: {e}",
                        sample.node_id,
                        sample.model
                    );
                    continue;
                }
            };
            routes.entry(sample.model).or_default().push(NodeRanking {
                node_id: sample.node_id,
                reported_at: Some(sample.reported_at),
                ranking,
            });
        }
        Ok(TelemetryAnswer {
            routes: routes
                .into_iter()
                .map(|(model, nodes)| RouteTelemetry { model, nodes })
                .collect(),
        })
    }

    /// Each gateway's recent traffic, as pushed to this control node.
    pub fn gateway_histories(&self) -> FleetHistoryAnswer {
        self.histories.answer()
    }

    /// The cluster inventory: this control node first (as it is now), then
    /// every node that polled, as last seen.
    pub async fn nodes(&self) -> Result<ClusterAnswer, String> {
        let store = self.store().await?;
        let polled = store.list_nodes().await.map_err(|e| e.to_string())?;
        let version = self.published.load().version;
        let mut nodes = vec![ClusterNode::answering(&self.state.snapshot(), version)];
        let own_id = nodes[0].report.node_id.clone();
        nodes.extend(polled.into_iter().filter(|n| n.report.node_id != own_id));
        Ok(ClusterAnswer {
            nodes,
            config_version: version,
        })
    }

    /// Picks up writes made through other control nodes sharing the database.
    pub async fn refresh_if_changed(&self) -> Result<(), String> {
        let store = self.store().await?;
        let version = store.version().await.map_err(|e| e.to_string())?
            + self.file_generation.load(Ordering::Acquire);
        if version != self.published.load().version {
            self.refresh(false).await?;
        }
        Ok(())
    }
}
