//! A PostgreSQL database of a test's own on 127.0.0.1:5432 (`.ci/run`
//! starts the server), dropped when the test ends, and the control node
//! that runs on it.

use sqlx::Connection;

use super::Gateway;

/// The internal token of a test fleet (`ROLTER_INTERNAL_TOKEN`).
pub const INTERNAL_TOKEN: &str = "test-internal-token";

/// A database of its own, dropped when the test ends.
pub struct TestDatabase {
    name: String,
    pub url: String,
}

const ADMIN_URL: &str = "postgres://postgres@127.0.0.1:5432/postgres";

impl TestDatabase {
    pub async fn create() -> TestDatabase {
        let name = format!(
            "rolter_test_{}_{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        );
        let mut admin = sqlx::PgConnection::connect(ADMIN_URL)
            .await
            .expect("PostgreSQL on 127.0.0.1:5432 (see .ci/run)");
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .unwrap();
        TestDatabase {
            url: format!("postgres://postgres@127.0.0.1:5432/{name}"),
            name,
        }
    }
}

impl TestDatabase {
    /// The environment every node of a fleet on this database runs with.
    pub fn env(&self) -> [(&str, &str); 2] {
        [
            ("DATABASE_URL", self.url.as_str()),
            ("ROLTER_INTERNAL_TOKEN", INTERNAL_TOKEN),
        ]
    }

    /// A control node (`node_id` control-1) on this database, `extra`
    /// appended to its rolter.toml.
    pub async fn start_control(&self, extra: &str) -> Gateway {
        let config = format!(
            "[server]\nrole = \"control\"\n\n[control_plane]\ndatabase_url_env = \"DATABASE_URL\"\ninternal_token_env = \"ROLTER_INTERNAL_TOKEN\"\nnode_id = \"control-1\"\n\n{extra}"
        );
        Gateway::start_with_env(&config, &self.env()).await
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let name = self.name.clone();
        // Dropped outside any runtime the test may be tearing down.
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                if let Ok(mut admin) = sqlx::PgConnection::connect(ADMIN_URL).await {
                    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&mut admin)
                        .await;
                }
            });
        })
        .join();
    }
}
