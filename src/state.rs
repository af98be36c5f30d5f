//! The gateway's shared state: the current snapshot, the tracker, the metrics.
//!
//! The snapshot sits behind an `ArcSwap`: a request loads it once and keeps
//! that `Arc` for its whole life, so a reload never changes the routes under a
//! request in flight, and the request path takes no lock a reload can hold.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;

use crate::access_log::AccessLogQueue;
use crate::config::file::ConfigFile;
use crate::config::{self, Config, ConfigErrors, Role};
use crate::learned::Learned;
use crate::metrics::Metrics;
use crate::snapshot::{BuildError, Snapshot};
use crate::tls::TlsListeners;

/// Why a configuration could not become the running snapshot.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{0}")]
    Config(#[from] ConfigErrors),
    #[error("{0}")]
    Build(#[from] BuildError),
    #[error("{0}")]
    Tls(#[from] crate::tls::TlsFileError),
}

impl LoadError {
    /// One line per problem, for logs and the reload response.
    pub fn lines(&self) -> Vec<String> {
        match self {
            LoadError::Config(errors) => errors.0.iter().map(|e| e.to_string()).collect(),
            LoadError::Build(e) => vec![e.to_string()],
            LoadError::Tls(e) => vec![e.to_string()],
        }
    }
}

/// What the node's last configuration change did: installed, or refused
/// with its reasons (the running configuration stayed). Shown on the
/// dashboard's Fleet and Cluster screens, and pushed to the control node
/// with the gateway's state.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct LastReload {
    /// When it happened, milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    /// What was loaded: the file's path or the fleet version.
    pub source: String,
    pub applied: bool,
    /// The version served after it (the old one when refused).
    pub version: u64,
    /// Of an applied configuration.
    pub warnings: Vec<String>,
    /// Why it was refused, one line per problem.
    pub errors: Vec<String>,
}

/// A successful reload.
#[derive(Debug, serde::Serialize)]
pub struct Reloaded {
    pub version: u64,
    /// Warnings of the new configuration (it was applied regardless).
    pub warnings: Vec<String>,
    /// Settings that changed but only take effect on restart or upgrade.
    pub needs_restart: Vec<String>,
}

pub struct GatewayState {
    snapshot: ArcSwap<Snapshot>,
    /// Counts the snapshots installed since the start, for the background
    /// pollers that sleep until a reload (`wake.rs`).
    installs: tokio::sync::watch::Sender<u64>,
    pub learned: Learned,
    /// Certificates of the TLS listeners bound at start.
    pub tls: TlsListeners,
    pub metrics: Arc<Metrics>,
    /// The dashboard's charts: each route target's recent rates.
    pub history: crate::history::History,
    /// Access-log records on their way to the writer service.
    pub access_log: Arc<AccessLogQueue>,
    /// Where requests' spans go while `[tracing]` is on.
    pub traces: Arc<crate::traces::Traces>,
    /// Connects the prefill legs of disaggregated routes (the decode leg
    /// is Pingora's own upstream connection).
    pub prefill_connector: Arc<pingora::connectors::http::Connector>,
    config_path: PathBuf,
    next_version: AtomicU64,
    // Serializes reloads (SIGHUP and the admin API may race); held only by
    // the reload itself, never by the request path.
    reload_lock: Mutex<()>,
    /// Responses close their connection (see `signals.rs`).
    draining: AtomicBool,
    /// `/readyz` answers 503.
    shutting_down: AtomicBool,
    /// Proxy requests between `request_filter` and the end of their response.
    active_requests: Arc<AtomicU64>,
    /// A gateway node's last installed fleet document and its version.
    fleet: Mutex<Option<(u64, ConfigFile)>>,
    /// `None` until the first reload after start.
    last_reload: Mutex<Option<LastReload>>,
}

/// Counts one proxy request as active until dropped (with its context).
#[derive(Debug)]
pub struct ActiveRequest(Arc<AtomicU64>);

impl Drop for ActiveRequest {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl GatewayState {
    /// Loads `config_path` and builds the first snapshot.
    pub fn load(config_path: &Path) -> Result<Arc<GatewayState>, LoadError> {
        let config = config::load(config_path)?;
        Self::from_config(config, config_path)
    }

    /// Builds the first snapshot from an already validated configuration;
    /// reloads read `config_path`.
    pub fn from_config(config: Config, config_path: &Path) -> Result<Arc<GatewayState>, LoadError> {
        log_warnings(&config);
        let learned = Learned::default();
        let metrics = Arc::new(Metrics::new());
        let tls = TlsListeners::load(&config.server.tls)?;
        // A fleet node serves nothing until its first fleet document: version 0.
        let version = u64::from(config.server.role == Role::Standalone);
        let snapshot = Snapshot::build(config, version, &learned, &metrics)?;
        metrics.set_config_version(version);
        let traces = Arc::new(crate::traces::Traces::default());
        traces.configure(snapshot.config.tracing.as_ref(), &metrics);
        Ok(Arc::new(GatewayState {
            snapshot: ArcSwap::from_pointee(snapshot),
            installs: tokio::sync::watch::Sender::new(0),
            learned,
            tls,
            access_log: Arc::new(AccessLogQueue::new(Arc::clone(&metrics))),
            traces,
            prefill_connector: Arc::new(pingora::connectors::http::Connector::new(None)),
            metrics,
            history: Default::default(),
            config_path: config_path.to_path_buf(),
            next_version: AtomicU64::new(2),
            reload_lock: Mutex::new(()),
            draining: AtomicBool::new(false),
            shutting_down: AtomicBool::new(false),
            active_requests: Arc::new(AtomicU64::new(0)),
            fleet: Mutex::new(None),
            last_reload: Mutex::new(None),
        }))
    }

    /// The snapshot to serve a request with.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot.load_full()
    }

    /// Wakes its holder at every snapshot installed from now on.
    pub fn changes(&self) -> crate::wake::Changes {
        self.installs.subscribe()
    }

    /// Re-reads the configuration file and swaps in a new snapshot. On any
    /// error the running snapshot stays. Blocking (file, DNS): call it off
    /// the async workers. A gateway node merges its file with the last fleet
    /// document it installed (see `install_fleet`).
    pub fn reload(&self) -> Result<Reloaded, LoadError> {
        let _serialized = self.reload_lock.lock().unwrap_or_else(|e| e.into_inner());
        let source = self.config_path.display().to_string();
        let result = config::load(&self.config_path)
            .map_err(LoadError::from)
            .and_then(|local| {
                if local.server.role != Role::Gateway {
                    let version = self.next_version.fetch_add(1, Ordering::Relaxed);
                    return Ok((local, version));
                }
                let fleet = self.fleet.lock().unwrap_or_else(|e| e.into_inner()).clone();
                match fleet {
                    Some((version, document)) => {
                        Ok((self.merge_fleet(version, &document)?, version))
                    }
                    None => Ok((local, 0)),
                }
            });
        self.install(result, &source)
    }

    /// Installs version `version` of the fleet document from the control
    /// node, merged with this gateway's own file: the same validation and
    /// snapshot build as a file reload.
    pub fn install_fleet(&self, version: u64, document: ConfigFile) -> Result<Reloaded, LoadError> {
        let _serialized = self.reload_lock.lock().unwrap_or_else(|e| e.into_inner());
        let source = format!("fleet configuration version {version}");
        let result = self
            .merge_fleet(version, &document)
            .map(|config| (config, version));
        let installed = self.install(result, &source);
        if installed.is_ok() {
            *self.fleet.lock().unwrap_or_else(|e| e.into_inner()) = Some((version, document));
        }
        installed
    }

    /// The fleet version this gateway runs; `None` before the first.
    pub fn fleet_version(&self) -> Option<u64> {
        self.fleet
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|(version, _)| *version)
    }

    /// Whether the node serves a configuration: a gateway once its first
    /// fleet document arrived, a control node once it published one.
    pub fn is_ready(&self) -> bool {
        !self.is_shutting_down()
            && (self.snapshot.load().config.server.role == Role::Standalone
                || self.fleet_version().is_some())
    }

    fn merge_fleet(&self, version: u64, document: &ConfigFile) -> Result<Config, LoadError> {
        let text = std::fs::read_to_string(&self.config_path).map_err(|e| {
            ConfigErrors::from(config::ConfigError {
                file: self.config_path.display().to_string(),
                line: None,
                field: None,
                message: format!("cannot read the configuration file: {e}"),
            })
        })?;
        // The file validated when it was loaded; a parse error here means
        // it changed since, and the file reload reports that.
        let local: ConfigFile = toml::from_str(&text).map_err(|e| {
            ConfigErrors::from(config::ConfigError {
                file: self.config_path.display().to_string(),
                line: None,
                field: None,
                message: e.message().to_string(),
            })
        })?;
        let merged = config::merge_fleet_document(&local, document);
        Ok(config::parse_document(
            &format!("fleet configuration version {version}"),
            &merged,
            &|name| std::env::var(name).ok(),
        )?)
    }

    /// Builds and swaps in a snapshot of `result`'s configuration; the one
    /// path of file reloads and fleet installs.
    fn install(
        &self,
        result: Result<(Config, u64), LoadError>,
        source: &str,
    ) -> Result<Reloaded, LoadError> {
        let result = result.and_then(|(config, version)| {
            // Certificates first: a file that does not load rejects the
            // whole reload, before anything is swapped.
            let certificates = self.tls.prepare_reload(&config.server.tls)?;
            let snapshot = Snapshot::build(config, version, &self.learned, &self.metrics)?;
            Ok((snapshot, certificates))
        });
        match result {
            Ok((snapshot, certificates)) => {
                certificates.apply();
                let previous = self.snapshot.load();
                let needs_restart = restart_only_changes(&previous.config, &snapshot.config);
                let warnings = log_warnings(&snapshot.config);
                let version = snapshot.version;
                self.traces
                    .configure(snapshot.config.tracing.as_ref(), &self.metrics);
                self.snapshot.store(Arc::new(snapshot));
                self.installs.send_modify(|count| *count += 1);
                self.record_reload(source, Ok((version, &warnings)));
                self.metrics.record_reload(true);
                self.metrics.set_config_version(version);
                log::info!("loaded {source}: serving configuration version {version}");
                for setting in &needs_restart {
                    log::warn!("{setting} changed; it takes effect on restart or upgrade");
                }
                Ok(Reloaded {
                    version,
                    warnings,
                    needs_restart,
                })
            }
            Err(error) => {
                self.record_reload(source, Err(error.lines()));
                self.metrics.record_reload(false);
                for line in error.lines() {
                    log::error!("{source} rejected, keeping the running configuration: {line}");
                }
                Err(error)
            }
        }
    }

    /// Keeps what the last configuration change did: applied with its
    /// version and warnings, or refused with its reasons.
    pub fn record_reload(&self, source: &str, outcome: Result<(u64, &[String]), Vec<String>>) {
        let (applied, version, warnings, errors) = match outcome {
            Ok((version, warnings)) => (true, version, warnings.to_vec(), Vec::new()),
            Err(errors) => (false, self.snapshot().version, Vec::new(), errors),
        };
        let record = LastReload {
            at_unix_ms: crate::clock::unix_ms(),
            source: source.to_owned(),
            applied,
            version,
            warnings,
            errors,
        };
        *self.last_reload.lock().unwrap_or_else(|e| e.into_inner()) = Some(record);
    }

    pub fn last_reload(&self) -> Option<LastReload> {
        self.last_reload
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Marks a proxy request active for the guard's life.
    pub fn begin_request(&self) -> ActiveRequest {
        self.active_requests.fetch_add(1, Ordering::AcqRel);
        ActiveRequest(Arc::clone(&self.active_requests))
    }

    pub fn active_requests(&self) -> u64 {
        self.active_requests.load(Ordering::Acquire)
    }

    pub fn begin_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Relaxed)
    }
}

/// Logs the configuration's warnings and returns them as text.
fn log_warnings(config: &Config) -> Vec<String> {
    config
        .warnings
        .iter()
        .map(|w| {
            log::warn!("{w}");
            w.to_string()
        })
        .collect()
}

/// Settings a running process cannot change (its listening sockets).
fn restart_only_changes(old: &Config, new: &Config) -> Vec<String> {
    let mut changed = Vec::new();
    if old.server.listen != new.server.listen {
        changed.push("server.listen".to_string());
    }
    if old.server.admin_listen != new.server.admin_listen {
        changed.push("server.admin_listen".to_string());
    }
    if old.server.keepalive_timeout != new.server.keepalive_timeout {
        // HTTP/2's idle timeout is a Pingora server option (`serve.rs`).
        changed.push(
            "server.keepalive_timeout_secs for HTTP/2 connections (HTTP/1 connections opened from now on use the new value)"
                .to_string(),
        );
    }
    let tls_addresses = |config: &Config| -> Vec<String> {
        config.server.tls.iter().map(|l| l.listen.clone()).collect()
    };
    if tls_addresses(old) != tls_addresses(new) {
        changed
            .push("server.tls listeners (certificates of existing ones were reloaded)".to_string());
    }
    changed
}
