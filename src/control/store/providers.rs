//! `providers`: one row per `[[providers]]` table, its `kv_events`,
//! `lmcache` and `engine_metrics` tables as JSON objects.

use async_trait::async_trait;
use sqlx::postgres::PgRow;

use super::resource::{from_bigint, required, to_bigint, PgQuery, Resource, ResourceKind};
use super::{column, StoreError};
use crate::config::derive_slug;
use crate::config::file::{
    ConfigFile, EngineMetricsTable, KvEventsTable, LmcacheTable, ProviderTable,
};

/// `[[providers]]`, keyed by slug.
pub struct Providers;

const KIND: ResourceKind = ResourceKind::Provider;

#[async_trait]
impl Resource for Providers {
    type Row = ProviderTable;
    const KIND: ResourceKind = KIND;
    const TABLE: &'static str = "providers";
    const COLUMNS: &'static [&'static str] = &[
        "name",
        "base_url",
        "api_key_env",
        "health_path",
        "ca_file",
        "tls_verify",
        "max_loras",
        "kv_events",
        "lmcache",
        "max_concurrency",
        "engine_metrics",
        "bootstrap_port",
    ];

    fn key_field(row: &ProviderTable) -> &Option<String> {
        &row.slug
    }

    fn key_field_mut(row: &mut ProviderTable) -> &mut Option<String> {
        &mut row.slug
    }

    fn key(row: &ProviderTable) -> Option<String> {
        row.slug
            .clone()
            .or_else(|| row.name.as_deref().map(derive_slug))
    }

    fn rows(document: &ConfigFile) -> &Vec<ProviderTable> {
        &document.providers
    }

    fn rows_mut(document: &mut ConfigFile) -> &mut Vec<ProviderTable> {
        &mut document.providers
    }

    fn from_row(row: &PgRow) -> Result<ProviderTable, StoreError> {
        provider(row)
    }

    fn bind_columns<'q>(
        query: PgQuery<'q>,
        key: &str,
        row: &'q ProviderTable,
    ) -> Result<PgQuery<'q>, StoreError> {
        let values = Values::of(key, row)?;
        Ok(query
            .bind(values.name)
            .bind(values.base_url)
            .bind(&row.api_key_env)
            .bind(&row.health_path)
            .bind(&row.ca_file)
            .bind(row.tls_verify)
            .bind(values.max_loras)
            .bind(values.kv_events)
            .bind(values.lmcache)
            .bind(values.max_concurrency)
            .bind(values.engine_metrics)
            .bind(row.bootstrap_port.map(i32::from)))
    }
}

/// The columns of a row that need a conversion on the way in.
struct Values<'a> {
    name: &'a str,
    base_url: &'a str,
    max_loras: Option<i64>,
    kv_events: Option<serde_json::Value>,
    lmcache: Option<serde_json::Value>,
    max_concurrency: Option<i64>,
    engine_metrics: Option<serde_json::Value>,
}

impl<'a> Values<'a> {
    fn of(key: &str, row: &'a ProviderTable) -> Result<Self, StoreError> {
        Ok(Values {
            name: required(KIND, key, "name", &row.name)?,
            base_url: required(KIND, key, "base_url", &row.base_url)?,
            max_loras: to_bigint(KIND, key, "max_loras", row.max_loras)?,
            kv_events: json_of(key, "kv_events", &row.kv_events)?,
            lmcache: json_of(key, "lmcache", &row.lmcache)?,
            max_concurrency: to_bigint(KIND, key, "max_concurrency", row.max_concurrency)?,
            engine_metrics: json_of(key, "engine_metrics", &row.engine_metrics)?,
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
        max_concurrency: from_bigint(
            KIND,
            &slug,
            "max_concurrency",
            column(row, "max_concurrency", context)?,
        )?,
        engine_metrics: table_of::<EngineMetricsTable>(
            &slug,
            "engine_metrics",
            column(row, "engine_metrics", context)?,
        )?,
        bootstrap_port: column::<Option<i32>>(row, "bootstrap_port", context)?
            .map(|port| {
                u16::try_from(port).map_err(|_| StoreError::Corrupt {
                    context: format!("provider `{slug}`"),
                    message: format!("bootstrap_port {port} is out of range"),
                })
            })
            .transpose()?,
        slug: Some(slug),
    })
}
