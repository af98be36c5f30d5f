//! A throwaway PostgreSQL database per test: created empty on the local
//! server, dropped by the guard when the test ends, passed or failed.
//!
//! The server is `ROLTER_TEST_POSTGRES` (default
//! `postgres://postgres@127.0.0.1:5432`, trust authentication, as CI runs
//! it); a test fails with a message naming it when it is not there.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::{Connection, PgConnection};

use super::Store;

/// The server tests use, without a database name.
const DEFAULT_SERVER: &str = "postgres://postgres@127.0.0.1:5432";

/// Bound on each administrative step (connect, create, drop).
const STEP_TIMEOUT: Duration = Duration::from_secs(20);

fn server() -> String {
    std::env::var("ROLTER_TEST_POSTGRES").unwrap_or_else(|_| DEFAULT_SERVER.to_owned())
}

/// An empty database that lives as long as the guard.
pub(crate) struct TestDb {
    /// `<server>/<name>`.
    pub url: String,
    name: String,
}

impl TestDb {
    pub async fn create() -> TestDb {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        let name = format!(
            "rolter_test_{}_{}_{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let server = server();
        let mut admin = tokio::time::timeout(
            STEP_TIMEOUT,
            PgConnection::connect(&format!("{server}/postgres")),
        )
        .await
        .unwrap_or_else(|_| panic!("connecting to the test PostgreSQL at {server} timed out"))
        .unwrap_or_else(|e| panic!("cannot connect to the test PostgreSQL at {server}: {e}"));
        tokio::time::timeout(
            STEP_TIMEOUT,
            sqlx::query(&format!("CREATE DATABASE \"{name}\"")).execute(&mut admin),
        )
        .await
        .expect("CREATE DATABASE timed out")
        .unwrap_or_else(|e| panic!("cannot create the test database {name}: {e}"));
        let _ = admin.close().await;
        TestDb {
            url: format!("{server}/{name}"),
            name,
        }
    }

    /// A store on this database, migrated.
    pub async fn store(&self) -> Store {
        let store = Store::connect(&self.url).await.expect("connect");
        store.migrate().await.expect("migrate");
        store
    }
}

impl Drop for TestDb {
    /// Drops the database, closing whatever connections a failed test left
    /// open (`WITH (FORCE)`). On its own thread: `Drop` cannot await, and it
    /// may run inside the test's runtime.
    fn drop(&mut self) {
        let name = self.name.clone();
        let server = server();
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let step = async {
                    let mut admin = PgConnection::connect(&format!("{server}/postgres")).await?;
                    sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                        .execute(&mut admin)
                        .await?;
                    admin.close().await
                };
                match tokio::time::timeout(STEP_TIMEOUT, step).await {
                    Ok(result) => result.map_err(|e| e.to_string()),
                    Err(_) => Err("timed out".to_owned()),
                }
            })
        })
        .join();
        match dropped {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("could not drop the test database {}: {e}", self.name),
            Err(_) => eprintln!("could not drop the test database {}", self.name),
        }
    }
}
