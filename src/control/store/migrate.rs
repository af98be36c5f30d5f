//! Applying `migrations/`: [`Store::migrate`](super::Store::migrate) and
//! the `rolter migrate` command.
//!
//! sqlx records what it applied in `_sqlx_migrations` (with checksums, so
//! an edited migration is refused rather than silently skipped) and holds an
//! advisory lock while it runs, so control nodes starting together do not
//! race.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::Serialize;
use sqlx::migrate::Migrator;
use sqlx::PgPool;

use super::{Store, StoreError};
use crate::config::file::ConfigFile;

/// The variable `rolter migrate` reads the URL from when given neither
/// `--database-url-env` nor `--config` (the example of docs/design/configuration.md).
pub const DEFAULT_DATABASE_URL_ENV: &str = "DATABASE_URL";

/// A migration a run applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppliedMigration {
    /// The number in its file name (`0001_...` is 1).
    pub version: i64,
    pub description: String,
}

pub(super) async fn apply(
    pool: &PgPool,
    migrator: &Migrator,
) -> Result<Vec<AppliedMigration>, StoreError> {
    let before = applied_versions(pool).await?;
    migrator.run(pool).await?;
    Ok(migrator
        .iter()
        .filter(|m| !m.migration_type.is_down_migration() && !before.contains(&m.version))
        .map(|m| AppliedMigration {
            version: m.version,
            description: m.description.to_string(),
        })
        .collect())
}

/// Versions recorded as applied; none before the first run.
async fn applied_versions(pool: &PgPool) -> Result<HashSet<i64>, StoreError> {
    let exists: Option<String> = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations')::text")
        .fetch_one(pool)
        .await
        .map_err(StoreError::database("looking for the migrations table"))?;
    if exists.is_none() {
        return Ok(HashSet::new());
    }
    let versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
            .fetch_all(pool)
            .await
            .map_err(StoreError::database("reading the applied migrations"))?;
    Ok(versions.into_iter().collect())
}

/// `rolter migrate`: where the database URL comes from. Without either
/// option, from `DATABASE_URL`.
#[derive(Debug, Clone, clap::Args)]
pub struct MigrateArgs {
    /// Environment variable holding the PostgreSQL URL.
    #[arg(long, value_name = "VAR", conflicts_with = "config")]
    pub database_url_env: Option<String>,
    /// rolter.toml whose `[control_plane] database_url_env` names the
    /// variable holding the PostgreSQL URL.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Runs `rolter migrate`; the process exit code.
pub fn run_migrate(args: MigrateArgs) -> i32 {
    let url = match database_url(&args) {
        Ok(url) => url,
        Err(message) => {
            eprintln!("rolter migrate: {message}");
            return 2;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("rolter migrate: cannot start the async runtime: {e}");
            return 1;
        }
    };
    let result = runtime.block_on(async {
        let store = Store::connect(&url).await?;
        let applied = store.migrate().await;
        store.pool().close().await;
        applied
    });
    match result {
        Ok(applied) if applied.is_empty() => {
            println!("rolter migrate: the database is up to date");
            0
        }
        Ok(applied) => {
            for migration in &applied {
                println!(
                    "rolter migrate: applied {} ({})",
                    migration.version, migration.description
                );
            }
            0
        }
        Err(e) => {
            eprintln!("rolter migrate: {e}");
            1
        }
    }
}

/// The URL, from the variable the options name. Never printed: it may hold
/// a password.
fn database_url(args: &MigrateArgs) -> Result<String, String> {
    let variable = match (&args.database_url_env, &args.config) {
        (Some(variable), _) => variable.clone(),
        (None, Some(path)) => variable_from_config(path)?,
        (None, None) => DEFAULT_DATABASE_URL_ENV.to_owned(),
    };
    match std::env::var(&variable) {
        Ok(url) if !url.trim().is_empty() => Ok(url),
        Ok(_) => Err(format!("the environment variable {variable} is empty")),
        Err(_) => Err(format!(
            "the environment variable {variable} is not set (it should hold the PostgreSQL URL)"
        )),
    }
}

fn variable_from_config(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let file: ConfigFile =
        toml::from_str(&text).map_err(|e| format!("{}: {}", path.display(), e.message()))?;
    file.control_plane
        .and_then(|control_plane| control_plane.database_url_env)
        .filter(|variable| !variable.is_empty())
        .ok_or_else(|| {
            format!(
                "{}: control_plane.database_url_env is not set",
                path.display()
            )
        })
}
