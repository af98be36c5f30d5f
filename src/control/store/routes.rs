//! `routes` + `route_targets` and `provider_groups` +
//! `provider_group_members`: a parent row and its ordered children, written
//! together (an update replaces the children) and read back in position
//! order.

use std::collections::HashMap;

use async_trait::async_trait;
use sqlx::postgres::PgRow;
use sqlx::PgConnection;

use super::resource::{from_bigint, required, PgQuery, Resource, ResourceKind};
use super::{column, StoreError};
use crate::config::derive_slug;
use crate::config::file::{
    CacheGuardTable, ConfigFile, ProviderGroupTable, RouteTable, TargetEntry,
};

/// `[[routes]]`, keyed by public model name.
pub struct Routes;

/// `[[provider_groups]]`, keyed by slug.
pub struct ProviderGroups;

/// One child row: a route's target or a group's member, which have the same
/// shape.
struct Child {
    provider: String,
    model: Option<String>,
    weight: Option<u32>,
}

/// How the two parent/child pairs differ.
struct Tables {
    kind: ResourceKind,
    children: &'static str,
    child_parent: &'static str,
    /// The list field of the file type, for messages.
    child_field: &'static str,
}

const ROUTES: Tables = Tables {
    kind: ResourceKind::Route,
    children: "route_targets",
    child_parent: "route",
    child_field: "targets",
};

const GROUPS: Tables = Tables {
    kind: ResourceKind::ProviderGroup,
    children: "provider_group_members",
    child_parent: "group_slug",
    child_field: "members",
};

impl Tables {
    /// Every child row, grouped by parent key, in position order.
    async fn children_of_all(
        &self,
        conn: &mut PgConnection,
    ) -> Result<HashMap<String, Vec<Child>>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT {parent} AS parent, provider, model, weight FROM {children} \
             ORDER BY {parent}, position",
            parent = self.child_parent,
            children = self.children,
        ))
        .fetch_all(&mut *conn)
        .await
        .map_err(StoreError::database(format!("listing {}", self.children)))?;
        let mut by_parent: HashMap<String, Vec<Child>> = HashMap::new();
        for row in &rows {
            let parent: String = column(row, "parent", self.children)?;
            let child = self.child(row, &parent)?;
            by_parent.entry(parent).or_default().push(child);
        }
        Ok(by_parent)
    }

    async fn children_of(
        &self,
        conn: &mut PgConnection,
        key: &str,
    ) -> Result<Vec<Child>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT provider, model, weight FROM {children} WHERE {parent} = $1 ORDER BY position",
            parent = self.child_parent,
            children = self.children,
        ))
        .bind(key)
        .fetch_all(&mut *conn)
        .await
        .map_err(StoreError::database(format!(
            "reading the {} of {} `{key}`",
            self.child_field,
            self.kind.noun()
        )))?;
        rows.iter().map(|row| self.child(row, key)).collect()
    }

    fn child(&self, row: &PgRow, parent: &str) -> Result<Child, StoreError> {
        Ok(Child {
            provider: column(row, "provider", self.children)?,
            model: column(row, "model", self.children)?,
            weight: from_bigint(
                self.kind,
                parent,
                "weight",
                column(row, "weight", self.children)?,
            )?,
        })
    }

    async fn replace_children(
        &self,
        conn: &mut PgConnection,
        key: &str,
        children: &[(Option<String>, Option<String>, Option<u32>)],
    ) -> Result<(), StoreError> {
        sqlx::query(&format!(
            "DELETE FROM {children} WHERE {parent} = $1",
            parent = self.child_parent,
            children = self.children,
        ))
        .bind(key)
        .execute(&mut *conn)
        .await
        .map_err(StoreError::database(format!(
            "replacing the {} of {} `{key}`",
            self.child_field,
            self.kind.noun()
        )))?;
        for (position, (provider, model, weight)) in children.iter().enumerate() {
            let provider = required(self.kind, key, "provider", provider)?;
            let position = i32::try_from(position).map_err(|_| StoreError::Invalid {
                kind: self.kind,
                key: key.to_owned(),
                field: self.child_field,
                message: "too many entries".to_owned(),
            })?;
            sqlx::query(&format!(
                "INSERT INTO {children} ({parent}, position, provider, model, weight) \
                 VALUES ($1, $2, $3, $4, $5)",
                parent = self.child_parent,
                children = self.children,
            ))
            .bind(key)
            .bind(position)
            .bind(provider)
            .bind(model)
            .bind(weight.map(i64::from))
            .execute(&mut *conn)
            .await
            .map_err(super::error::write_error(
                self.kind,
                key,
                &format!(
                    "writing the {} of {} `{key}`",
                    self.child_field,
                    self.kind.noun()
                ),
            ))?;
        }
        Ok(())
    }

    /// The children of the parents `keys`, by parent key: one query for
    /// one parent, one for the whole table otherwise.
    async fn children_by_parent(
        &self,
        conn: &mut PgConnection,
        keys: &[Option<&str>],
    ) -> Result<HashMap<String, Vec<Child>>, StoreError> {
        match keys {
            [Some(key)] => {
                let children = self.children_of(conn, key).await?;
                Ok(HashMap::from([((*key).to_owned(), children)]))
            }
            _ => self.children_of_all(conn).await,
        }
    }
}

/// `cache_guard` from its two columns; `None` when both are null.
fn guard_of(
    row: &PgRow,
    kind: ResourceKind,
    key: &str,
    table: &str,
) -> Result<Option<CacheGuardTable>, StoreError> {
    let min_load: Option<u64> = from_bigint(
        kind,
        key,
        "cache_guard_min_load",
        column(row, "cache_guard_min_load", table)?,
    )?;
    let load_ratio: Option<f64> = column(row, "cache_guard_load_ratio", table)?;
    Ok(
        (min_load.is_some() || load_ratio.is_some()).then_some(CacheGuardTable {
            min_load,
            load_ratio,
        }),
    )
}

fn guard_min_load(guard: &Option<CacheGuardTable>) -> Option<i64> {
    guard
        .as_ref()
        .and_then(|g| g.min_load)
        .map(|v| i64::try_from(v).unwrap_or(i64::MAX))
}

/// A parent's entries as child rows: `(provider, model, weight)`.
fn child_rows(
    entries: &Option<Vec<TargetEntry>>,
) -> Vec<(Option<String>, Option<String>, Option<u32>)> {
    entries
        .iter()
        .flatten()
        .map(|t| (t.provider.clone(), t.model.clone(), t.weight))
        .collect()
}

/// Child rows back as entries (a route's targets, a group's members).
fn entries(children: Vec<Child>) -> Vec<TargetEntry> {
    children
        .into_iter()
        .map(|c| TargetEntry {
            provider: Some(c.provider),
            model: c.model,
            weight: c.weight,
        })
        .collect()
}

#[async_trait]
impl Resource for Routes {
    type Row = RouteTable;
    const KIND: ResourceKind = ResourceKind::Route;
    const TABLE: &'static str = "routes";
    const COLUMNS: &'static [&'static str] = &[
        "strategy",
        "tokenizer",
        "tokenizer_budget_kib",
        "cache_guard_min_load",
        "cache_guard_load_ratio",
        "endpoints",
        "disaggregation",
    ];

    fn key_field(row: &RouteTable) -> &Option<String> {
        &row.model
    }

    fn key_field_mut(row: &mut RouteTable) -> &mut Option<String> {
        &mut row.model
    }

    fn rows(document: &ConfigFile) -> &Vec<RouteTable> {
        &document.routes
    }

    fn rows_mut(document: &mut ConfigFile) -> &mut Vec<RouteTable> {
        &mut document.routes
    }

    fn from_row(row: &PgRow) -> Result<RouteTable, StoreError> {
        let model: String = column(row, "model", "routes")?;
        Ok(RouteTable {
            strategy: column(row, "strategy", "routes")?,
            tokenizer: column(row, "tokenizer", "routes")?,
            tokenizer_budget_kib: from_bigint(
                ResourceKind::Route,
                &model,
                "tokenizer_budget_kib",
                column(row, "tokenizer_budget_kib", "routes")?,
            )?,
            cache_guard: guard_of(row, ResourceKind::Route, &model, "routes")?,
            endpoints: column(row, "endpoints", "routes")?,
            disaggregation: column::<Option<serde_json::Value>>(row, "disaggregation", "routes")?
                .map(|value| {
                    serde_json::from_value(value).map_err(|e| StoreError::Corrupt {
                        context: format!("route `{model}`"),
                        message: format!("disaggregation: {e}"),
                    })
                })
                .transpose()?,
            model: Some(model),
            targets: None,
        })
    }

    fn bind_columns<'q>(
        query: PgQuery<'q>,
        key: &str,
        row: &'q RouteTable,
    ) -> Result<PgQuery<'q>, StoreError> {
        let disaggregation = row
            .disaggregation
            .as_ref()
            .map(serde_json::to_value)
            .transpose()
            .map_err(|e| StoreError::Invalid {
                kind: ResourceKind::Route,
                key: key.to_owned(),
                field: "disaggregation",
                message: e.to_string(),
            })?;
        Ok(query
            .bind(&row.strategy)
            .bind(&row.tokenizer)
            .bind(row.tokenizer_budget_kib.map(i64::from))
            .bind(guard_min_load(&row.cache_guard))
            .bind(row.cache_guard.as_ref().and_then(|g| g.load_ratio))
            .bind(&row.endpoints)
            .bind(disaggregation))
    }

    async fn read_children(
        conn: &mut PgConnection,
        rows: &mut [RouteTable],
    ) -> Result<(), StoreError> {
        let keys: Vec<Option<&str>> = rows.iter().map(|r| r.model.as_deref()).collect();
        let mut children = ROUTES.children_by_parent(conn, &keys).await?;
        for row in rows {
            let mine = row.model.as_ref().and_then(|key| children.remove(key));
            let targets = entries(mine.unwrap_or_default());
            // A disaggregated route keeps its engines in `disaggregation`.
            row.targets = (!targets.is_empty() || row.disaggregation.is_none()).then_some(targets);
        }
        Ok(())
    }

    async fn write_children(
        conn: &mut PgConnection,
        key: &str,
        row: &RouteTable,
    ) -> Result<(), StoreError> {
        ROUTES
            .replace_children(conn, key, &child_rows(&row.targets))
            .await
    }
}

#[async_trait]
impl Resource for ProviderGroups {
    type Row = ProviderGroupTable;
    const KIND: ResourceKind = ResourceKind::ProviderGroup;
    const TABLE: &'static str = "provider_groups";
    const COLUMNS: &'static [&'static str] = &[
        "name",
        "strategy",
        "tokenizer",
        "tokenizer_budget_kib",
        "cache_guard_min_load",
        "cache_guard_load_ratio",
        "endpoints",
    ];

    fn key_field(row: &ProviderGroupTable) -> &Option<String> {
        &row.slug
    }

    fn key_field_mut(row: &mut ProviderGroupTable) -> &mut Option<String> {
        &mut row.slug
    }

    fn key(row: &ProviderGroupTable) -> Option<String> {
        row.slug
            .clone()
            .or_else(|| row.name.as_deref().map(derive_slug))
    }

    fn rows(document: &ConfigFile) -> &Vec<ProviderGroupTable> {
        &document.provider_groups
    }

    fn rows_mut(document: &mut ConfigFile) -> &mut Vec<ProviderGroupTable> {
        &mut document.provider_groups
    }

    fn from_row(row: &PgRow) -> Result<ProviderGroupTable, StoreError> {
        let slug: String = column(row, "slug", "provider_groups")?;
        Ok(ProviderGroupTable {
            name: Some(column(row, "name", "provider_groups")?),
            strategy: column(row, "strategy", "provider_groups")?,
            tokenizer: column(row, "tokenizer", "provider_groups")?,
            tokenizer_budget_kib: from_bigint(
                ResourceKind::ProviderGroup,
                &slug,
                "tokenizer_budget_kib",
                column(row, "tokenizer_budget_kib", "provider_groups")?,
            )?,
            cache_guard: guard_of(row, ResourceKind::ProviderGroup, &slug, "provider_groups")?,
            endpoints: column(row, "endpoints", "provider_groups")?,
            slug: Some(slug),
            members: None,
        })
    }

    fn bind_columns<'q>(
        query: PgQuery<'q>,
        key: &str,
        row: &'q ProviderGroupTable,
    ) -> Result<PgQuery<'q>, StoreError> {
        let name = required(ResourceKind::ProviderGroup, key, "name", &row.name)?;
        Ok(query
            .bind(name)
            .bind(&row.strategy)
            .bind(&row.tokenizer)
            .bind(row.tokenizer_budget_kib.map(i64::from))
            .bind(guard_min_load(&row.cache_guard))
            .bind(row.cache_guard.as_ref().and_then(|g| g.load_ratio))
            .bind(&row.endpoints))
    }

    async fn read_children(
        conn: &mut PgConnection,
        rows: &mut [ProviderGroupTable],
    ) -> Result<(), StoreError> {
        let keys: Vec<Option<&str>> = rows.iter().map(|r| r.slug.as_deref()).collect();
        let mut children = GROUPS.children_by_parent(conn, &keys).await?;
        for row in rows {
            let mine = row.slug.as_ref().and_then(|key| children.remove(key));
            row.members = Some(entries(mine.unwrap_or_default()));
        }
        Ok(())
    }

    async fn write_children(
        conn: &mut PgConnection,
        key: &str,
        row: &ProviderGroupTable,
    ) -> Result<(), StoreError> {
        GROUPS
            .replace_children(conn, key, &child_rows(&row.members))
            .await
    }
}
