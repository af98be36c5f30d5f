//! The configuration resources the store keeps, one [`Resource`] per
//! rolter.toml list, so that list/get/create/update/delete, the version
//! bump and the audit row are written once for all of them.

use async_trait::async_trait;
use serde::Serialize;
use sqlx::PgConnection;

use super::StoreError;
use crate::config::file::ConfigFile;

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
/// sits in a [`ConfigFile`], and its SQL. Implemented by the marker types
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

    /// The row's key as validation derives it (a provider's or group's
    /// slug falls back to the slug of its name); `None` when the row has
    /// none.
    fn key(row: &Self::Row) -> Option<String>;

    /// Sets the key field, so a row read back always names its key.
    fn set_key(row: &mut Self::Row, key: &str);

    /// The key field as the row writes it; `None` when it is left to be
    /// derived (or missing).
    fn key_written(row: &Self::Row) -> Option<&str>;

    /// The rows of this kind in a document.
    fn rows(document: &ConfigFile) -> &Vec<Self::Row>;

    fn rows_mut(document: &mut ConfigFile) -> &mut Vec<Self::Row>;

    /// The row as the control API shows it and the audit log records it:
    /// without any secret or digest of one.
    fn public(row: &Self::Row) -> serde_json::Value {
        serde_json::to_value(row).unwrap_or(serde_json::Value::Null)
    }

    /// Every row, in creation order.
    async fn select_all(conn: &mut PgConnection) -> Result<Vec<Self::Row>, StoreError>;

    /// The row with this key.
    async fn select_one(
        conn: &mut PgConnection,
        key: &str,
    ) -> Result<Option<Self::Row>, StoreError>;

    /// Inserts `row` under `key` (its child rows too).
    async fn insert(conn: &mut PgConnection, key: &str, row: &Self::Row) -> Result<(), StoreError>;

    /// Replaces the row `key` (its child rows too); `false` when there is
    /// none.
    async fn update(
        conn: &mut PgConnection,
        key: &str,
        row: &Self::Row,
    ) -> Result<bool, StoreError>;

    /// Deletes the row `key` (children cascade); `false` when there is none.
    async fn delete(conn: &mut PgConnection, key: &str) -> Result<bool, StoreError>;
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
