//! The control plane's PostgreSQL store.
//!
//! A control node keeps the fleet's configuration as rows that mirror the
//! rolter.toml tables field for field ([`crate::config::file`]): a provider
//! row reads back as the [`ProviderTable`](crate::config::file::ProviderTable)
//! it was written from, so [`Store::document`] is a [`ConfigFile`] that
//! validation turns into a [`Config`](crate::config::Config) exactly as it
//! would a file. The schema lives in `migrations/`, embedded in the binary
//! and applied by `rolter migrate` and at control-node start.
//!
//! Every configuration write goes through a [`ConfigWrite`]: one
//! transaction that first locks the `config_version` row, so writes are
//! serialized and each sees the document the previous one left; then reads
//! and changes rows; and on [`ConfigWrite::commit`] bumps the version once
//! and writes one audit row per change, all or nothing. A write that is
//! dropped, or commits nothing, rolls back and leaves the version alone. The
//! control API validates the whole candidate document inside that same
//! transaction, so two concurrent writes cannot each pass validation and
//! together produce a document that does not.
//!
//! Queries are checked at run time (`sqlx::query`), so building needs no
//! database.
//!
//! What nodes report (telemetry samples, the cluster inventory) is not
//! configuration: `fleet.rs` writes it without version or audit.

mod audit;
mod catalog;
mod error;
mod fleet;
mod keys;
mod migrate;
mod policy;
mod providers;
mod resource;
mod routes;

#[cfg(test)]
pub(crate) mod test_db;
#[cfg(test)]
mod tests;

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::{Connection as _, PgConnection, Postgres, Row as _, Transaction};

use crate::config::file::{AdaptiveRoutingTable, ConfigFile};

pub use audit::{AuditRecord, MAX_AUDIT_PAGE};
pub use catalog::Catalog;
pub use error::StoreError;
pub use fleet::{ClusterAnswer, ClusterNode, NodeReport, StoredGatewayState, TelemetrySample};
pub use keys::{AdminTokenView, AdminTokens, ApiKeyView, ApiKeys};
pub use migrate::{run_migrate, AppliedMigration, MigrateArgs};
pub use policy::{sanitize as sanitize_policy, StoredPolicy};
pub use providers::Providers;
pub use resource::{Resource, ResourceKind};
pub use routes::{ProviderGroups, Routes};

use audit::Change;

/// Connections a control node keeps open to PostgreSQL: the control API,
/// the snapshot endpoint and the telemetry endpoint share them; writes are
/// serialized by the version lock anyway.
pub const MAX_CONNECTIONS: u32 = 8;

/// How long an operation waits for a free connection (or a new one) before
/// it fails, so an unreachable database answers an error, not a hang.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// The embedded `migrations/`.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// The control plane's database. Cheap to clone (a pool handle).
#[derive(Debug, Clone)]
pub struct Store {
    pool: PgPool,
}

impl Store {
    /// Connects to `url` (`postgres://user@host:port/db`), with
    /// [`MAX_CONNECTIONS`] and [`ACQUIRE_TIMEOUT`]. Does not migrate.
    ///
    /// One connection is made first, so that an unreachable or refusing
    /// server fails here with its own reason (a pool would only say it
    /// timed out). Sessions run with `client_min_messages = warning`: the
    /// NOTICEs of idempotent DDL (`IF NOT EXISTS ... skipping`) are not
    /// worth a log line each.
    pub async fn connect(url: &str) -> Result<Store, StoreError> {
        let context = "connecting to PostgreSQL";
        let options = PgConnectOptions::from_str(url)
            .map_err(StoreError::database(context))?
            .options([("client_min_messages", "warning")]);
        match tokio::time::timeout(ACQUIRE_TIMEOUT, PgConnection::connect_with(&options)).await {
            Ok(Ok(probe)) => {
                // Only the probe's goodbye can fail here; the pool connects anew.
                if let Err(e) = probe.close().await {
                    log::debug!("closing the first database connection: {e}");
                }
            }
            Ok(Err(e)) => return Err(StoreError::database(context)(e)),
            Err(_) => {
                return Err(StoreError::database(context)(sqlx::Error::Io(
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no answer within {ACQUIRE_TIMEOUT:?}"),
                    ),
                )))
            }
        }
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .connect_lazy_with(options);
        Ok(Store { pool })
    }

    /// A store over an existing pool.
    pub fn from_pool(pool: PgPool) -> Store {
        Store { pool }
    }

    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Applies the migrations the database has not seen yet and returns
    /// them (none on a second run). Safe with several control nodes
    /// starting at once: sqlx holds an advisory lock while it migrates.
    pub async fn migrate(&self) -> Result<Vec<AppliedMigration>, StoreError> {
        migrate::apply(&self.pool, &MIGRATOR).await
    }

    /// The configuration version: bumped by every configuration write.
    pub async fn version(&self) -> Result<u64, StoreError> {
        let mut conn = self.connection().await?;
        read_version(&mut conn, false).await
    }

    /// The whole stored configuration and its version, read in one
    /// snapshot: providers, routes, provider groups, catalog, API keys and
    /// admin tokens (salted form), and the adaptive-routing policy (every
    /// field set). Every other table of the document is left at its
    /// default.
    pub async fn document(&self) -> Result<(u64, ConfigFile), StoreError> {
        let mut tx = self.read_snapshot().await?;
        let version = read_version(&mut tx, false).await?;
        let document = read_document(&mut tx).await?;
        finish_read(tx).await?;
        Ok((version, document))
    }

    /// Every row of `R`, in creation order.
    pub async fn list<R: Resource>(&self) -> Result<Vec<R::Row>, StoreError> {
        let mut conn = self.connection().await?;
        R::select_all(&mut conn).await
    }

    /// The row of `R` with this key.
    pub async fn get<R: Resource>(&self, key: &str) -> Result<R::Row, StoreError> {
        let mut conn = self.connection().await?;
        R::select_one(&mut conn, key)
            .await?
            .ok_or_else(|| not_found(R::KIND, key))
    }

    /// Creates a row of `R` as `actor`: one write (see [`ConfigWrite`]).
    pub async fn create<R: Resource>(
        &self,
        actor: &str,
        row: &R::Row,
    ) -> Result<(u64, R::Row), StoreError> {
        let mut write = self.begin_write(actor).await?;
        let stored = write.create::<R>(row).await?;
        Ok((write.commit().await?, stored))
    }

    /// Replaces the row `key` of `R` as `actor`.
    pub async fn update<R: Resource>(
        &self,
        actor: &str,
        key: &str,
        row: &R::Row,
    ) -> Result<(u64, R::Row), StoreError> {
        let mut write = self.begin_write(actor).await?;
        let stored = write.update::<R>(key, row).await?;
        Ok((write.commit().await?, stored))
    }

    /// Deletes the row `key` of `R` as `actor`; returns what it held.
    pub async fn delete<R: Resource>(
        &self,
        actor: &str,
        key: &str,
    ) -> Result<(u64, R::Row), StoreError> {
        let mut write = self.begin_write(actor).await?;
        let deleted = write.delete::<R>(key).await?;
        Ok((write.commit().await?, deleted))
    }

    /// The adaptive-routing policy.
    pub async fn get_policy(&self) -> Result<StoredPolicy, StoreError> {
        let mut conn = self.connection().await?;
        policy::select(&mut conn).await
    }

    /// Stores `table` (sanitized, see [`sanitize_policy`]) as `actor`.
    pub async fn put_policy(
        &self,
        actor: &str,
        table: &AdaptiveRoutingTable,
    ) -> Result<(u64, StoredPolicy), StoreError> {
        let mut write = self.begin_write(actor).await?;
        let stored = write.put_policy(table).await?;
        Ok((write.commit().await?, stored))
    }

    /// Starts a configuration write as `actor` (an admin token's name):
    /// takes the version lock, which the write holds until it commits or is
    /// dropped.
    pub async fn begin_write(&self, actor: &str) -> Result<ConfigWrite, StoreError> {
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(StoreError::database("starting a configuration write"))?;
        let version = read_version(&mut tx, true).await?;
        Ok(ConfigWrite {
            tx,
            actor: actor.to_owned(),
            version,
            changes: Vec::new(),
        })
    }

    async fn connection(&self) -> Result<sqlx::pool::PoolConnection<Postgres>, StoreError> {
        self.pool
            .acquire()
            .await
            .map_err(StoreError::database("acquiring a database connection"))
    }

    /// A read-only transaction that sees one snapshot of every table.
    async fn read_snapshot(&self) -> Result<Transaction<'static, Postgres>, StoreError> {
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(StoreError::database("starting a read"))?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await
            .map_err(StoreError::database("starting a read"))?;
        Ok(tx)
    }
}

/// One configuration write: a transaction holding the version lock. Read
/// the current document, change rows, then [`commit`](Self::commit), which
/// bumps the version once and audits every change; dropping it instead rolls
/// everything back.
pub struct ConfigWrite {
    tx: Transaction<'static, Postgres>,
    actor: String,
    version: u64,
    changes: Vec<Change>,
}

impl ConfigWrite {
    /// The version this write started from.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// The stored document as this write sees it (its own changes included).
    pub async fn document(&mut self) -> Result<ConfigFile, StoreError> {
        read_document(&mut self.tx).await
    }

    /// The row `key` of `R`, as this write sees it.
    pub async fn get<R: Resource>(&mut self, key: &str) -> Result<Option<R::Row>, StoreError> {
        R::select_one(&mut self.tx, key).await
    }

    /// Inserts `row` under its key ([`Resource::key`]) and returns it as
    /// stored (key field set).
    pub async fn create<R: Resource>(&mut self, row: &R::Row) -> Result<R::Row, StoreError> {
        let key = R::key(row).ok_or_else(|| StoreError::Invalid {
            kind: R::KIND,
            key: String::new(),
            field: R::KIND.key_field(),
            message: "required".to_owned(),
        })?;
        let mut row = row.clone();
        R::set_key(&mut row, &key);
        R::insert(&mut self.tx, &key, &row).await?;
        let stored = self.stored::<R>(&key).await?;
        self.record::<R>("create", &key, None, Some(&stored));
        Ok(stored)
    }

    /// Replaces the row `key` with `row` and returns it as stored. The key
    /// cannot change: a `row` that writes a different one is refused.
    pub async fn update<R: Resource>(
        &mut self,
        key: &str,
        row: &R::Row,
    ) -> Result<R::Row, StoreError> {
        if let Some(written) = R::key_written(row).filter(|written| *written != key) {
            return Err(StoreError::Invalid {
                kind: R::KIND,
                key: key.to_owned(),
                field: R::KIND.key_field(),
                message: format!(
                    "cannot change to `{written}`: create the new {} and delete this one",
                    R::KIND.noun()
                ),
            });
        }
        let before = R::select_one(&mut self.tx, key)
            .await?
            .ok_or_else(|| not_found(R::KIND, key))?;
        let mut row = row.clone();
        R::set_key(&mut row, key);
        if !R::update(&mut self.tx, key, &row).await? {
            return Err(not_found(R::KIND, key));
        }
        let stored = self.stored::<R>(key).await?;
        self.record::<R>("update", key, Some(&before), Some(&stored));
        Ok(stored)
    }

    /// Deletes the row `key` and returns what it held.
    pub async fn delete<R: Resource>(&mut self, key: &str) -> Result<R::Row, StoreError> {
        let before = R::select_one(&mut self.tx, key)
            .await?
            .ok_or_else(|| not_found(R::KIND, key))?;
        if !R::delete(&mut self.tx, key).await? {
            return Err(not_found(R::KIND, key));
        }
        self.record::<R>("delete", key, Some(&before), None);
        Ok(before)
    }

    /// Stores the adaptive-routing policy, sanitized, and returns it.
    pub async fn put_policy(
        &mut self,
        table: &AdaptiveRoutingTable,
    ) -> Result<StoredPolicy, StoreError> {
        let before = policy::select(&mut self.tx).await?;
        let sanitized = policy::sanitize(table);
        policy::update(&mut self.tx, &sanitized, &self.actor).await?;
        let stored = policy::select(&mut self.tx).await?;
        self.changes.push(Change {
            action: "adaptive_routing_policy.update".to_owned(),
            subject: "adaptive_routing".to_owned(),
            details: serde_json::json!({
                "before": before.policy,
                "after": stored.policy,
            }),
        });
        Ok(stored)
    }

    /// Makes the write's changes visible: bumps the version once, audits
    /// each change, commits. Returns the new version, or the unchanged one
    /// when the write changed nothing (then nothing is committed).
    pub async fn commit(mut self) -> Result<u64, StoreError> {
        if self.changes.is_empty() {
            self.tx
                .rollback()
                .await
                .map_err(StoreError::database("ending an empty configuration write"))?;
            return Ok(self.version);
        }
        let row = sqlx::query(
            "UPDATE config_version SET version = version + 1, updated_at = now() RETURNING version",
        )
        .fetch_one(&mut *self.tx)
        .await
        .map_err(StoreError::database("bumping the configuration version"))?;
        let version: i64 = column(&row, "version", "config_version")?;
        for change in &self.changes {
            audit::insert(&mut self.tx, &self.actor, version, change).await?;
        }
        self.tx
            .commit()
            .await
            .map_err(StoreError::database("committing a configuration write"))?;
        u64::try_from(version).map_err(|_| corrupt_version(version))
    }

    async fn stored<R: Resource>(&mut self, key: &str) -> Result<R::Row, StoreError> {
        R::select_one(&mut self.tx, key)
            .await?
            .ok_or_else(|| not_found(R::KIND, key))
    }

    fn record<R: Resource>(
        &mut self,
        verb: &str,
        key: &str,
        before: Option<&R::Row>,
        after: Option<&R::Row>,
    ) {
        let mut details = serde_json::Map::new();
        if let Some(before) = before {
            details.insert("before".to_owned(), R::public(before));
        }
        if let Some(after) = after {
            details.insert("after".to_owned(), R::public(after));
        }
        self.changes.push(Change {
            action: format!("{}.{verb}", R::KIND.as_str()),
            subject: key.to_owned(),
            details: serde_json::Value::Object(details),
        });
    }
}

fn not_found(kind: ResourceKind, key: &str) -> StoreError {
    StoreError::NotFound {
        kind,
        key: key.to_owned(),
    }
}

fn corrupt_version(version: i64) -> StoreError {
    StoreError::Corrupt {
        context: "config_version".to_owned(),
        message: format!("version = {version}"),
    }
}

/// The configuration version; `lock`: and hold its row until the
/// transaction ends (the write lock).
async fn read_version(conn: &mut PgConnection, lock: bool) -> Result<u64, StoreError> {
    let sql = if lock {
        "SELECT version FROM config_version FOR UPDATE"
    } else {
        "SELECT version FROM config_version"
    };
    let row = sqlx::query(sql)
        .fetch_one(&mut *conn)
        .await
        .map_err(StoreError::database("reading the configuration version"))?;
    let version: i64 = column(&row, "version", "config_version")?;
    u64::try_from(version).map_err(|_| corrupt_version(version))
}

async fn read_document(conn: &mut PgConnection) -> Result<ConfigFile, StoreError> {
    Ok(ConfigFile {
        providers: Providers::select_all(conn).await?,
        routes: Routes::select_all(conn).await?,
        provider_groups: ProviderGroups::select_all(conn).await?,
        catalog: Catalog::select_all(conn).await?,
        api_keys: ApiKeys::select_all(conn).await?,
        admin_tokens: AdminTokens::select_all(conn).await?,
        adaptive_routing: policy::select(conn).await?.policy,
        ..ConfigFile::default()
    })
}

async fn finish_read(tx: Transaction<'static, Postgres>) -> Result<(), StoreError> {
    tx.commit()
        .await
        .map_err(StoreError::database("ending a read"))
}

/// A column of `row`, its decoding error naming `context.name`.
pub(crate) fn column<'r, T>(row: &'r PgRow, name: &str, context: &str) -> Result<T, StoreError>
where
    T: sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>,
{
    row.try_get(name).map_err(|source| StoreError::Database {
        context: format!("reading {context}.{name}"),
        source,
    })
}
