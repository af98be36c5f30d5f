//! The configuration resources the store keeps, one [`Resource`] per
//! rolter.toml list, so that list/get/create/update/delete, the version
//! bump and the audit row are written once for all of them.
//!
//! A resource is a table whose rows are keyed by the field of
//! [`ResourceKind::key_field`] (a column of that name) and carry
//! [`Resource::COLUMNS`]; the SQL to read, insert, update and delete them
//! is written here once. A resource declares how a row maps to its columns
//! ([`Resource::from_row`], [`Resource::bind_columns`]) and, when it has
//! child rows (a route's targets, a group's members), how to read and
//! replace those.

use async_trait::async_trait;
use serde::Serialize;
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::{PgConnection, Postgres};

use super::StoreError;
use crate::config::file::ConfigFile;

/// A query with its arguments still being bound.
pub type PgQuery<'q> = sqlx::query::Query<'q, Postgres, PgArguments>;

/// Which configuration list a row belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceKind {
    Provider,
    Route,
    ProviderGroup,
    Catalog,
    ApiKey,
    AdminToken,
}

impl ResourceKind {
    pub const ALL: [ResourceKind; 6] = [
        ResourceKind::Provider,
        ResourceKind::Route,
        ResourceKind::ProviderGroup,
        ResourceKind::Catalog,
        ResourceKind::ApiKey,
        ResourceKind::AdminToken,
    ];

    /// The audit-log name: actions are `<name>.create`, `<name>.update`,
    /// `<name>.delete`.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceKind::Provider => "provider",
            ResourceKind::Route => "route",
            ResourceKind::ProviderGroup => "provider_group",
            ResourceKind::Catalog => "catalog",
            ResourceKind::ApiKey => "api_key",
            ResourceKind::AdminToken => "admin_token",
        }
    }

    /// In messages, several of them: "providers", "catalog entries", ...
    pub fn plural(self) -> &'static str {
        match self {
            ResourceKind::Provider => "providers",
            ResourceKind::Route => "routes",
            ResourceKind::ProviderGroup => "provider groups",
            ResourceKind::Catalog => "catalog entries",
            ResourceKind::ApiKey => "API keys",
            ResourceKind::AdminToken => "admin tokens",
        }
    }

    /// In messages: "provider", "catalog entry", "API key", ...
    pub fn noun(self) -> &'static str {
        match self {
            ResourceKind::Provider => "provider",
            ResourceKind::Route => "route",
            ResourceKind::ProviderGroup => "provider group",
            ResourceKind::Catalog => "catalog entry",
            ResourceKind::ApiKey => "API key",
            ResourceKind::AdminToken => "admin token",
        }
    }

    /// The field that identifies a row (the primary key).
    pub fn key_field(self) -> &'static str {
        match self {
            ResourceKind::Provider | ResourceKind::ProviderGroup => "slug",
            ResourceKind::Route | ResourceKind::Catalog => "model",
            ResourceKind::ApiKey | ResourceKind::AdminToken => "name",
        }
    }

    /// The rolter.toml list the rows of this kind sit in.
    pub fn file_list(self) -> &'static str {
        match self {
            ResourceKind::Provider => "providers",
            ResourceKind::Route => "routes",
            ResourceKind::ProviderGroup => "provider_groups",
            ResourceKind::Catalog => "catalog",
            ResourceKind::ApiKey => "api_keys",
            ResourceKind::AdminToken => "admin_tokens",
        }
    }
}

impl std::fmt::Display for ResourceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A configuration list stored as rows: its file type, its key, where it
/// sits in a [`ConfigFile`], and its table. Implemented by the marker types
/// [`Providers`](super::Providers), [`Routes`](super::Routes),
/// [`ProviderGroups`](super::ProviderGroups), [`Catalog`](super::Catalog),
/// [`ApiKeys`](super::ApiKeys) and [`AdminTokens`](super::AdminTokens).
///
/// The SQL functions are the store's building blocks; callers go through
/// [`Store`](super::Store) and [`ConfigWrite`](super::ConfigWrite), which
/// add the transaction, the version bump and the audit row.
#[async_trait]
pub trait Resource: Send + Sync + 'static {
    /// The rolter.toml table type of one row.
    type Row: Clone + std::fmt::Debug + PartialEq + Serialize + Send + Sync;

    const KIND: ResourceKind;

    /// The table the rows live in.
    const TABLE: &'static str;

    /// Its columns besides the key, in the order [`Resource::bind_columns`]
    /// binds them.
    const COLUMNS: &'static [&'static str];

    /// The key field of a row, as written.
    fn key_field(row: &Self::Row) -> &Option<String>;

    fn key_field_mut(row: &mut Self::Row) -> &mut Option<String>;

    /// The rows of this kind in a document.
    fn rows(document: &ConfigFile) -> &Vec<Self::Row>;

    fn rows_mut(document: &mut ConfigFile) -> &mut Vec<Self::Row>;

    /// A row from its table's key and [`Resource::COLUMNS`] (child rows are
    /// read by [`Resource::read_children`]).
    fn from_row(row: &PgRow) -> Result<Self::Row, StoreError>;

    /// Binds the values of [`Resource::COLUMNS`] for `row`, in order, to a
    /// query whose first argument is the key.
    fn bind_columns<'q>(
        query: PgQuery<'q>,
        key: &str,
        row: &'q Self::Row,
    ) -> Result<PgQuery<'q>, StoreError>;

    /// The row's key as validation derives it; `None` when it has none.
    /// By default the key field as written (providers and groups derive a
    /// slug from the name).
    fn key(row: &Self::Row) -> Option<String> {
        Self::key_field(row).clone()
    }

    /// Sets the key field, so a row read back always names its key.
    fn set_key(row: &mut Self::Row, key: &str) {
        *Self::key_field_mut(row) = Some(key.to_owned());
    }

    /// The key field as the row writes it; `None` when it is left to be
    /// derived (or missing).
    fn key_written(row: &Self::Row) -> Option<&str> {
        Self::key_field(row).as_deref()
    }

    /// The row as the control API shows it and the audit log records it:
    /// without any secret or digest of one.
    fn public(row: &Self::Row) -> serde_json::Value {
        serde_json::to_value(row).unwrap_or(serde_json::Value::Null)
    }

    /// Fills in the child rows of `rows` (none by default).
    async fn read_children(
        _conn: &mut PgConnection,
        _rows: &mut [Self::Row],
    ) -> Result<(), StoreError> {
        Ok(())
    }

    /// Replaces the child rows of row `key` with `row`'s (none by default).
    async fn write_children(
        _conn: &mut PgConnection,
        _key: &str,
        _row: &Self::Row,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    /// Every row, in creation order.
    async fn select_all(conn: &mut PgConnection) -> Result<Vec<Self::Row>, StoreError> {
        let sql = format!(
            "SELECT {} FROM {} ORDER BY created_at, {}",
            select_list::<Self>(),
            Self::TABLE,
            Self::KIND.key_field()
        );
        let found = sqlx::query(&sql)
            .fetch_all(&mut *conn)
            .await
            .map_err(StoreError::database(format!(
                "listing {}",
                Self::KIND.plural()
            )))?;
        let mut rows = found
            .iter()
            .map(Self::from_row)
            .collect::<Result<Vec<_>, _>>()?;
        Self::read_children(conn, &mut rows).await?;
        Ok(rows)
    }

    /// The row with this key.
    async fn select_one(
        conn: &mut PgConnection,
        key: &str,
    ) -> Result<Option<Self::Row>, StoreError> {
        let sql = format!(
            "SELECT {} FROM {} WHERE {} = $1",
            select_list::<Self>(),
            Self::TABLE,
            Self::KIND.key_field()
        );
        let found = sqlx::query(&sql)
            .bind(key)
            .fetch_optional(&mut *conn)
            .await
            .map_err(StoreError::database(format!(
                "reading {} `{key}`",
                Self::KIND.noun()
            )))?;
        let Some(found) = found else {
            return Ok(None);
        };
        let mut row = [Self::from_row(&found)?];
        Self::read_children(conn, &mut row).await?;
        let [row] = row;
        Ok(Some(row))
    }

    /// Inserts `row` under `key` (its child rows too).
    async fn insert(conn: &mut PgConnection, key: &str, row: &Self::Row) -> Result<(), StoreError> {
        let placeholders: Vec<String> = (1..=Self::COLUMNS.len() + 1)
            .map(|n| format!("${n}"))
            .collect();
        let sql = format!(
            "INSERT INTO {} ({}) VALUES ({})",
            Self::TABLE,
            select_list::<Self>(),
            placeholders.join(", ")
        );
        Self::bind_columns(sqlx::query(&sql).bind(key), key, row)?
            .execute(&mut *conn)
            .await
            .map_err(super::error::write_error(
                Self::KIND,
                key,
                &format!("inserting {} `{key}`", Self::KIND.noun()),
            ))?;
        Self::write_children(conn, key, row).await
    }

    /// Replaces the row `key` (its child rows too); `false` when there is
    /// none.
    async fn update(
        conn: &mut PgConnection,
        key: &str,
        row: &Self::Row,
    ) -> Result<bool, StoreError> {
        let assignments: Vec<String> = Self::COLUMNS
            .iter()
            .enumerate()
            .map(|(i, column)| format!("{column} = ${}", i + 2))
            .collect();
        let sql = format!(
            "UPDATE {} SET {}, updated_at = now() WHERE {} = $1",
            Self::TABLE,
            assignments.join(", "),
            Self::KIND.key_field()
        );
        let done = Self::bind_columns(sqlx::query(&sql).bind(key), key, row)?
            .execute(&mut *conn)
            .await
            .map_err(super::error::write_error(
                Self::KIND,
                key,
                &format!("updating {} `{key}`", Self::KIND.noun()),
            ))?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        Self::write_children(conn, key, row).await?;
        Ok(true)
    }

    /// Deletes the row `key` (children cascade); `false` when there is none.
    async fn delete(conn: &mut PgConnection, key: &str) -> Result<bool, StoreError> {
        let sql = format!(
            "DELETE FROM {} WHERE {} = $1",
            Self::TABLE,
            Self::KIND.key_field()
        );
        let done = sqlx::query(&sql)
            .bind(key)
            .execute(&mut *conn)
            .await
            .map_err(StoreError::database(format!(
                "deleting {} `{key}`",
                Self::KIND.noun()
            )))?;
        Ok(done.rows_affected() == 1)
    }
}

/// The key column and [`Resource::COLUMNS`], comma-separated.
fn select_list<R: Resource + ?Sized>() -> String {
    std::iter::once(R::KIND.key_field())
        .chain(R::COLUMNS.iter().copied())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A required field of a row the store is about to write.
pub(crate) fn required<'a, T>(
    kind: ResourceKind,
    key: &str,
    field: &'static str,
    value: &'a Option<T>,
) -> Result<&'a T, StoreError> {
    value.as_ref().ok_or_else(|| StoreError::Invalid {
        kind,
        key: key.to_owned(),
        field,
        message: "required".to_owned(),
    })
}

/// An unsigned file value into a BIGINT column.
pub(crate) fn to_bigint(
    kind: ResourceKind,
    key: &str,
    field: &'static str,
    value: Option<u64>,
) -> Result<Option<i64>, StoreError> {
    value
        .map(|v| {
            i64::try_from(v).map_err(|_| StoreError::Invalid {
                kind,
                key: key.to_owned(),
                field,
                message: format!("{v} is too large"),
            })
        })
        .transpose()
}

/// A BIGINT column back into the file's unsigned type.
pub(crate) fn from_bigint<T: TryFrom<i64>>(
    kind: ResourceKind,
    key: &str,
    field: &str,
    value: Option<i64>,
) -> Result<Option<T>, StoreError> {
    value
        .map(|v| {
            T::try_from(v).map_err(|_| StoreError::Corrupt {
                context: format!("{} `{key}`", kind.noun()),
                message: format!("{field} = {v} is out of range"),
            })
        })
        .transpose()
}
