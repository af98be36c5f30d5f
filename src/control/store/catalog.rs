//! `catalog`: one row per `[[catalog]]` price.

use async_trait::async_trait;
use sqlx::postgres::PgRow;

use super::resource::{required, PgQuery, Resource, ResourceKind};
use super::{column, StoreError};
use crate::config::file::{CatalogTable, ConfigFile};

/// `[[catalog]]`, keyed by upstream model name.
pub struct Catalog;

const KIND: ResourceKind = ResourceKind::Catalog;

#[async_trait]
impl Resource for Catalog {
    type Row = CatalogTable;
    const KIND: ResourceKind = KIND;
    const TABLE: &'static str = "catalog";
    const COLUMNS: &'static [&'static str] = &["input_per_mtok", "output_per_mtok"];

    fn key_field(row: &CatalogTable) -> &Option<String> {
        &row.model
    }

    fn key_field_mut(row: &mut CatalogTable) -> &mut Option<String> {
        &mut row.model
    }

    fn rows(document: &ConfigFile) -> &Vec<CatalogTable> {
        &document.catalog
    }

    fn rows_mut(document: &mut ConfigFile) -> &mut Vec<CatalogTable> {
        &mut document.catalog
    }

    fn from_row(row: &PgRow) -> Result<CatalogTable, StoreError> {
        entry(row)
    }

    fn bind_columns<'q>(
        query: PgQuery<'q>,
        key: &str,
        row: &'q CatalogTable,
    ) -> Result<PgQuery<'q>, StoreError> {
        let input = required(KIND, key, "input_per_mtok", &row.input_per_mtok)?;
        let output = required(KIND, key, "output_per_mtok", &row.output_per_mtok)?;
        Ok(query.bind(input).bind(output))
    }
}

fn entry(row: &PgRow) -> Result<CatalogTable, StoreError> {
    Ok(CatalogTable {
        model: Some(column(row, "model", "catalog")?),
        input_per_mtok: Some(column(row, "input_per_mtok", "catalog")?),
        output_per_mtok: Some(column(row, "output_per_mtok", "catalog")?),
    })
}
