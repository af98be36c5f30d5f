//! The "kv events" background service: one subscriber per data-parallel
//! rank of every provider that has `kv_events`, following the snapshot.
//!
//! At every snapshot installed, and every [`RECONCILE_EVERY`] while any
//! subscriber runs, it reads the configured sources; when the snapshot
//! changed it starts subscribers for new providers, restarts those
//! whose source changed (reconfiguring their index: a new endpoint may be
//! another engine, a new block size another chain) and stops those that
//! lost it (unconfiguring their index, which then answers `None`), leaving
//! the others alone. A subscriber task that ended (it only ends by
//! panicking) is restarted the same way. On the server's shutdown watch it
//! stops every subscriber and returns.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use tokio::task::JoinHandle;

use super::index::{KvIndex, KvIndexSettings};
use super::replay::ReplayClient;
use super::subscriber::{RankDriver, RankSubscriber};
use super::KvIndexRegistry;
use crate::clock;
use crate::config::{self, Config};
use crate::wake::{self, Changes, Wake};

/// The name the server lists the service under.
pub const SERVICE_NAME: &str = "kv events";

/// How often the service looks at its subscribers while any runs.
pub const RECONCILE_EVERY: Duration = Duration::from_secs(1);

/// One rank's endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankEndpoints {
    /// The live PUB endpoint (`tcp://host:port`).
    pub live: String,
    /// The replay ROUTER endpoint, when the engine has one.
    pub replay: Option<String>,
}

/// One provider's KV-event stream, as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvSource {
    /// The provider's slug.
    pub provider: String,
    /// Subscription prefix; "" = every topic.
    pub topic: String,
    /// Tokens per block, the engine's `--block-size`.
    pub block_size: usize,
    /// One entry per data-parallel rank, rank 0 first.
    pub ranks: Vec<RankEndpoints>,
}

impl KvSource {
    pub fn from_config(provider: &str, events: &config::KvEvents) -> Self {
        KvSource {
            provider: provider.to_string(),
            topic: events.topic.clone(),
            block_size: events.block_size,
            ranks: (0..events.data_parallel_size.max(1))
                .map(|rank| RankEndpoints {
                    live: events.endpoint_of_rank(rank),
                    replay: events.replay_endpoint_of_rank(rank),
                })
                .collect(),
        }
    }

    fn settings(&self) -> KvIndexSettings {
        KvIndexSettings {
            block_size: self.block_size,
            data_parallel_size: u16::try_from(self.ranks.len()).unwrap_or(u16::MAX),
        }
    }
}

/// The sources of every provider of `config` that has `kv_events`.
pub fn sources_of(config: &Config) -> Vec<KvSource> {
    config
        .providers
        .iter()
        .filter_map(|p| Some(KvSource::from_config(&p.slug, p.kv_events.as_ref()?)))
        .collect()
}

/// Reads the current sources: a version that changes whenever they may
/// have, and the sources.
pub type SourceReader = Box<dyn Fn() -> (u64, Vec<KvSource>) + Send + Sync>;

/// The "kv events" service; see the module documentation.
pub struct KvEventService {
    registry: Arc<KvIndexRegistry>,
    sources: SourceReader,
    changes: Changes,
    reconcile_every: Duration,
}

impl KvEventService {
    /// Follows whatever `sources` reads (the server wires it to the
    /// running snapshot, with [`sources_of`]), rereading it whenever
    /// `changes` moves; indexes live in `registry`.
    pub fn with_sources(
        registry: Arc<KvIndexRegistry>,
        sources: SourceReader,
        changes: Changes,
    ) -> Self {
        KvEventService {
            registry,
            sources,
            changes,
            reconcile_every: RECONCILE_EVERY,
        }
    }

    /// Looks at the sources this often instead of [`RECONCILE_EVERY`].
    pub fn reconcile_every(mut self, every: Duration) -> Self {
        self.reconcile_every = every;
        self
    }

    /// Runs until `shutdown` fires (or its sender goes away).
    pub async fn run(&self, mut shutdown: ShutdownWatch) {
        let mut running: HashMap<String, Running> = HashMap::new();
        let mut seen_version = None;
        let mut changes = self.changes.clone();
        loop {
            if *shutdown.borrow() {
                break;
            }
            let (version, sources) = (self.sources)();
            let crashed = running.values().any(Running::crashed);
            if seen_version != Some(version) || crashed {
                self.reconcile(&mut running, sources);
                seen_version = Some(version);
            }
            // Subscribers are looked at every `reconcile_every` (one may
            // have crashed); without any, nothing is due until a reload.
            let next = (!running.is_empty())
                .then(|| clock::now_ms() + self.reconcile_every.as_millis() as u64);
            if wake::until(next, &mut changes, &mut shutdown).await == Wake::Shutdown {
                break;
            }
        }
        let stopped = running.len();
        running.clear(); // dropping a Running aborts its tasks
        log::info!("kv events: stopped the subscribers of {stopped} providers");
    }

    fn reconcile(&self, running: &mut HashMap<String, Running>, sources: Vec<KvSource>) {
        let wanted: HashMap<String, KvSource> = sources
            .into_iter()
            .map(|source| (source.provider.clone(), source))
            .collect();
        running.retain(|provider, current| {
            let same_index = self
                .registry
                .get(provider)
                .is_some_and(|index| Arc::ptr_eq(&index, &current.index));
            if current.crashed() {
                log::error!("kv events {provider}: a subscriber task ended; restarting");
            } else if wanted.get(provider) == Some(&current.source) && same_index {
                return true;
            }
            if !wanted.contains_key(provider) {
                current.index.unconfigure();
                log::info!("kv events {provider}: no longer configured; stopped");
            }
            false // dropped: its tasks are aborted
        });
        for (provider, source) in wanted {
            running
                .entry(provider)
                .or_insert_with(|| self.start(source));
        }
    }

    fn start(&self, source: KvSource) -> Running {
        let index = self.registry.index(&source.provider);
        let writers = index.configure(source.settings());
        let tasks = writers
            .into_iter()
            .zip(&source.ranks)
            .map(|(writer, endpoints)| {
                let replay = endpoints.replay.clone().map(ReplayClient::new);
                let driver = RankDriver::new(writer, replay);
                let subscriber =
                    RankSubscriber::new(endpoints.live.clone(), source.topic.clone(), driver);
                tokio::spawn(subscriber.run())
            })
            .collect();
        log::info!(
            "kv events {}: following {} rank(s) from {} (block size {}, replay {})",
            source.provider,
            source.ranks.len(),
            source.ranks.first().map_or("nowhere", |r| r.live.as_str()),
            source.block_size,
            if source.ranks.iter().all(|r| r.replay.is_some()) {
                "on"
            } else {
                "off"
            },
        );
        Running {
            source,
            index,
            tasks,
        }
    }
}

#[async_trait]
impl BackgroundService for KvEventService {
    async fn start(&self, shutdown: ShutdownWatch) {
        self.run(shutdown).await;
    }
}

/// One provider's running subscribers.
struct Running {
    source: KvSource,
    index: Arc<KvIndex>,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    fn crashed(&self) -> bool {
        self.tasks.iter().any(JoinHandle::is_finished)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
