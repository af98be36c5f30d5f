//! `catalog`: one row per `[[catalog]]` price.

use async_trait::async_trait;
use sqlx::postgres::PgRow;
use sqlx::PgConnection;

use super::resource::{required, Resource, ResourceKind};
use super::{column, StoreError};
use crate::config::file::{CatalogTable, ConfigFile};

/// `[[catalog]]`, keyed by upstream model name.
pub struct Catalog;

const KIND: ResourceKind = ResourceKind::Catalog;

#[async_trait]
impl Resource for Catalog {
    type Row = CatalogTable;
    const KIND: ResourceKind = KIND;

    fn key(row: &CatalogTable) -> Option<String> {
        row.model.clone()
    }

    fn set_key(row: &mut CatalogTable, key: &str) {
        row.model = Some(key.to_owned());
    }

    fn key_written(row: &CatalogTable) -> Option<&str> {
        row.model.as_deref()
    }

    fn rows(document: &ConfigFile) -> &Vec<CatalogTable> {
        &document.catalog
    }

    fn rows_mut(document: &mut ConfigFile) -> &mut Vec<CatalogTable> {
        &mut document.catalog
    }

    async fn select_all(conn: &mut PgConnection) -> Result<Vec<CatalogTable>, StoreError> {
        let rows = sqlx::query(
            "SELECT model, input_per_mtok, output_per_mtok FROM catalog ORDER BY created_at, model",
        )
        .fetch_all(&mut *conn)
        .await
        .map_err(StoreError::database("listing the catalog"))?;
        rows.iter().map(entry).collect()
    }

    async fn select_one(
        conn: &mut PgConnection,
        key: &str,
    ) -> Result<Option<CatalogTable>, StoreError> {
        let row = sqlx::query(
            "SELECT model, input_per_mtok, output_per_mtok FROM catalog WHERE model = $1",
        )
        .bind(key)
        .fetch_optional(&mut *conn)
        .await
        .map_err(StoreError::database(format!(
            "reading catalog entry `{key}`"
        )))?;
        row.as_ref().map(entry).transpose()
    }

    async fn insert(
        conn: &mut PgConnection,
        key: &str,
        row: &CatalogTable,
    ) -> Result<(), StoreError> {
        let input = required(KIND, key, "input_per_mtok", &row.input_per_mtok)?;
        let output = required(KIND, key, "output_per_mtok", &row.output_per_mtok)?;
        sqlx::query(
            "INSERT INTO catalog (model, input_per_mtok, output_per_mtok) VALUES ($1, $2, $3)",
        )
        .bind(key)
        .bind(input)
        .bind(output)
        .execute(&mut *conn)
        .await
        .map_err(super::error::write_error(
            KIND,
            key,
            &format!("inserting catalog entry `{key}`"),
        ))?;
        Ok(())
    }

    async fn update(
        conn: &mut PgConnection,
        key: &str,
        row: &CatalogTable,
    ) -> Result<bool, StoreError> {
        let input = required(KIND, key, "input_per_mtok", &row.input_per_mtok)?;
        let output = required(KIND, key, "output_per_mtok", &row.output_per_mtok)?;
        let done = sqlx::query(
            "UPDATE catalog SET input_per_mtok = $2, output_per_mtok = $3, updated_at = now() \
             WHERE model = $1",
        )
        .bind(key)
        .bind(input)
        .bind(output)
        .execute(&mut *conn)
        .await
        .map_err(super::error::write_error(
            KIND,
            key,
            &format!("updating catalog entry `{key}`"),
        ))?;
        Ok(done.rows_affected() == 1)
    }

    async fn delete(conn: &mut PgConnection, key: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("DELETE FROM catalog WHERE model = $1")
            .bind(key)
            .execute(&mut *conn)
            .await
            .map_err(StoreError::database(format!(
                "deleting catalog entry `{key}`"
            )))?;
        Ok(done.rows_affected() == 1)
    }
}

fn entry(row: &PgRow) -> Result<CatalogTable, StoreError> {
    Ok(CatalogTable {
        model: Some(column(row, "model", "catalog")?),
        input_per_mtok: Some(column(row, "input_per_mtok", "catalog")?),
        output_per_mtok: Some(column(row, "output_per_mtok", "catalog")?),
    })
}
