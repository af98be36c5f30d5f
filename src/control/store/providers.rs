//! `providers`: one row per `[[providers]]` table, its `kv_events` and
//! `lmcache` tables as JSON objects.

use async_trait::async_trait;
use sqlx::postgres::PgRow;
use sqlx::PgConnection;

use super::resource::{from_bigint, required, to_bigint, Resource, ResourceKind};
use super::{column, StoreError};
use crate::config::derive_slug;
use crate::config::file::{ConfigFile, KvEventsTable, LmcacheTable, ProviderTable};

/// `[[providers]]`, keyed by slug.
pub struct Providers;

const KIND: ResourceKind = ResourceKind::Provider;

const COLUMNS: &str =
    "slug, name, base_url, api_key_env, health_path, ca_file, tls_verify, max_loras, kv_events, lmcache";

#[async_trait]
impl Resource for Providers {
    type Row = ProviderTable;
    const KIND: ResourceKind = KIND;

    fn key(row: &ProviderTable) -> Option<String> {
        row.slug
            .clone()
            .or_else(|| row.name.as_deref().map(derive_slug))
    }

    fn set_key(row: &mut ProviderTable, key: &str) {
        row.slug = Some(key.to_owned());
    }

    fn key_written(row: &ProviderTable) -> Option<&str> {
        row.slug.as_deref()
    }

    fn rows(document: &ConfigFile) -> &Vec<ProviderTable> {
        &document.providers
    }

    fn rows_mut(document: &mut ConfigFile) -> &mut Vec<ProviderTable> {
        &mut document.providers
    }

    async fn select_all(conn: &mut PgConnection) -> Result<Vec<ProviderTable>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM providers ORDER BY created_at, slug"
        ))
        .fetch_all(&mut *conn)
        .await
        .map_err(StoreError::database("listing providers"))?;
        rows.iter().map(provider).collect()
    }

    async fn select_one(
        conn: &mut PgConnection,
        key: &str,
    ) -> Result<Option<ProviderTable>, StoreError> {
        let row = sqlx::query(&format!("SELECT {COLUMNS} FROM providers WHERE slug = $1"))
            .bind(key)
            .fetch_optional(&mut *conn)
            .await
            .map_err(StoreError::database(format!("reading provider `{key}`")))?;
        row.as_ref().map(provider).transpose()
    }

    async fn insert(
        conn: &mut PgConnection,
        key: &str,
        row: &ProviderTable,
    ) -> Result<(), StoreError> {
        let values = Values::of(key, row)?;
        sqlx::query(
            "INSERT INTO providers (slug, name, base_url, api_key_env, health_path, ca_file, \
             tls_verify, max_loras, kv_events, lmcache) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(key)
        .bind(values.name)
        .bind(values.base_url)
        .bind(&row.api_key_env)
        .bind(&row.health_path)
        .bind(&row.ca_file)
        .bind(row.tls_verify)
        .bind(values.max_loras)
        .bind(values.kv_events)
        .bind(values.lmcache)
        .execute(&mut *conn)
        .await
        .map_err(super::error::write_error(
            KIND,
            key,
            &format!("inserting provider `{key}`"),
        ))?;
        Ok(())
    }

    async fn update(
        conn: &mut PgConnection,
        key: &str,
        row: &ProviderTable,
    ) -> Result<bool, StoreError> {
        let values = Values::of(key, row)?;
        let done = sqlx::query(
            "UPDATE providers SET name = $2, base_url = $3, api_key_env = $4, health_path = $5, \
             ca_file = $6, tls_verify = $7, max_loras = $8, kv_events = $9, lmcache = $10, \
             updated_at = now() WHERE slug = $1",
        )
        .bind(key)
        .bind(values.name)
        .bind(values.base_url)
        .bind(&row.api_key_env)
        .bind(&row.health_path)
        .bind(&row.ca_file)
        .bind(row.tls_verify)
        .bind(values.max_loras)
        .bind(values.kv_events)
        .bind(values.lmcache)
        .execute(&mut *conn)
        .await
        .map_err(super::error::write_error(
            KIND,
            key,
            &format!("updating provider `{key}`"),
        ))?;
        Ok(done.rows_affected() == 1)
    }

    async fn delete(conn: &mut PgConnection, key: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM providers WHERE slug = $1")
            .bind(key)
            .execute(&mut *conn)
            .await
            .map_err(StoreError::database(format!("deleting provider `{key}`")))?;
        Ok(done.rows_affected() == 1)
    }
}

/// The columns of a row that need a conversion on the way in.
struct Values<'a> {
    name: &'a str,
    base_url: &'a str,
    max_loras: Option<i64>,
    kv_events: Option<serde_json::Value>,
    lmcache: Option<serde_json::Value>,
}

impl<'a> Values<'a> {
    fn of(key: &str, row: &'a ProviderTable) -> Result<Self, StoreError> {
        Ok(Values {
            name: required(KIND, key, "name", &row.name)?,
            base_url: required(KIND, key, "base_url", &row.base_url)?,
            max_loras: to_bigint(KIND, key, "max_loras", row.max_loras)?,
            kv_events: json_of(key, "kv_events", &row.kv_events)?,
            lmcache: json_of(key, "lmcache", &row.lmcache)?,
        })
    }
}

fn json_of<T: serde::Serialize>(
    key: &str,
    field: &'static str,
    table: &Option<T>,
) -> Result<Option<serde_json::Value>, StoreError> {
    table
        .as_ref()
        .map(|table| {
            serde_json::to_value(table).map_err(|e| StoreError::Invalid {
                kind: KIND,
                key: key.to_owned(),
                field,
                message: e.to_string(),
            })
        })
        .transpose()
}

fn table_of<T: serde::de::DeserializeOwned>(
    key: &str,
    field: &str,
    value: Option<serde_json::Value>,
) -> Result<Option<T>, StoreError> {
    value
        .map(|value| {
            serde_json::from_value(value).map_err(|e| StoreError::Corrupt {
                context: format!("provider `{key}`"),
                message: format!("{field}: {e}"),
            })
        })
        .transpose()
}

fn provider(row: &PgRow) -> Result<ProviderTable, StoreError> {
    let context = "provider row";
    let slug: String = column(row, "slug", context)?;
    Ok(ProviderTable {
        name: Some(column(row, "name", context)?),
        base_url: Some(column(row, "base_url", context)?),
        api_key_env: column(row, "api_key_env", context)?,
        health_path: column(row, "health_path", context)?,
        max_loras: from_bigint(KIND, &slug, "max_loras", column(row, "max_loras", context)?)?,
        ca_file: column(row, "ca_file", context)?,
        tls_verify: column(row, "tls_verify", context)?,
        kv_events: table_of::<KvEventsTable>(
            &slug,
            "kv_events",
            column(row, "kv_events", context)?,
        )?,
        lmcache: table_of::<LmcacheTable>(&slug, "lmcache", column(row, "lmcache", context)?)?,
        slug: Some(slug),
    })
}
