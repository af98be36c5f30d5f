//! `routes` + `route_targets` and `provider_groups` +
//! `provider_group_members`: a parent row and its ordered children, written
//! together (an update replaces the children) and read back in position
//! order.

use std::collections::HashMap;

use async_trait::async_trait;
use sqlx::postgres::PgRow;
use sqlx::PgConnection;

use super::resource::{from_bigint, required, Resource, ResourceKind};
use super::{column, StoreError};
use crate::config::derive_slug;
use crate::config::file::{
    ConfigFile, GroupMemberEntry, ProviderGroupTable, RouteTable, TargetEntry,
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
    parent: &'static str,
    parent_key: &'static str,
    children: &'static str,
    child_parent: &'static str,
    /// The list field of the file type, for messages.
    child_field: &'static str,
}

const ROUTES: Tables = Tables {
    kind: ResourceKind::Route,
    parent: "routes",
    parent_key: "model",
    children: "route_targets",
    child_parent: "route",
    child_field: "targets",
};

const GROUPS: Tables = Tables {
    kind: ResourceKind::ProviderGroup,
    parent: "provider_groups",
    parent_key: "slug",
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

    async fn delete(&self, conn: &mut PgConnection, key: &str) -> Result<bool, StoreError> {
        let done = sqlx::query(&format!(
            "DELETE FROM {parent} WHERE {parent_key} = $1",
            parent = self.parent,
            parent_key = self.parent_key,
        ))
        .bind(key)
        .execute(&mut *conn)
        .await
        .map_err(StoreError::database(format!(
            "deleting {} `{key}`",
            self.kind.noun()
        )))?;
        Ok(done.rows_affected() == 1)
    }
}

fn target_children(row: &RouteTable) -> Vec<(Option<String>, Option<String>, Option<u32>)> {
    row.targets
        .iter()
        .flatten()
        .map(|t| (t.provider.clone(), t.model.clone(), t.weight))
        .collect()
}

fn member_children(row: &ProviderGroupTable) -> Vec<(Option<String>, Option<String>, Option<u32>)> {
    row.members
        .iter()
        .flatten()
        .map(|m| (m.provider.clone(), m.model.clone(), m.weight))
        .collect()
}

fn targets(children: Vec<Child>) -> Vec<TargetEntry> {
    children
        .into_iter()
        .map(|c| TargetEntry {
            provider: Some(c.provider),
            model: c.model,
            weight: c.weight,
        })
        .collect()
}

fn members(children: Vec<Child>) -> Vec<GroupMemberEntry> {
    children
        .into_iter()
        .map(|c| GroupMemberEntry {
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

    fn key(row: &RouteTable) -> Option<String> {
        row.model.clone()
    }

    fn set_key(row: &mut RouteTable, key: &str) {
        row.model = Some(key.to_owned());
    }

    fn key_written(row: &RouteTable) -> Option<&str> {
        row.model.as_deref()
    }

    fn rows(document: &ConfigFile) -> &Vec<RouteTable> {
        &document.routes
    }

    fn rows_mut(document: &mut ConfigFile) -> &mut Vec<RouteTable> {
        &mut document.routes
    }

    async fn select_all(conn: &mut PgConnection) -> Result<Vec<RouteTable>, StoreError> {
        let rows = sqlx::query("SELECT model, strategy FROM routes ORDER BY created_at, model")
            .fetch_all(&mut *conn)
            .await
            .map_err(StoreError::database("listing routes"))?;
        let mut children = ROUTES.children_of_all(conn).await?;
        rows.iter()
            .map(|row| {
                let model: String = column(row, "model", "routes")?;
                Ok(RouteTable {
                    strategy: column(row, "strategy", "routes")?,
                    targets: Some(targets(children.remove(&model).unwrap_or_default())),
                    model: Some(model),
                })
            })
            .collect()
    }

    async fn select_one(
        conn: &mut PgConnection,
        key: &str,
    ) -> Result<Option<RouteTable>, StoreError> {
        let row = sqlx::query("SELECT strategy FROM routes WHERE model = $1")
            .bind(key)
            .fetch_optional(&mut *conn)
            .await
            .map_err(StoreError::database(format!("reading route `{key}`")))?;
        let Some(row) = row else {
            return Ok(None);
        };
        Ok(Some(RouteTable {
            model: Some(key.to_owned()),
            strategy: column(&row, "strategy", "routes")?,
            targets: Some(targets(ROUTES.children_of(conn, key).await?)),
        }))
    }

    async fn insert(
        conn: &mut PgConnection,
        key: &str,
        row: &RouteTable,
    ) -> Result<(), StoreError> {
        sqlx::query("INSERT INTO routes (model, strategy) VALUES ($1, $2)")
            .bind(key)
            .bind(&row.strategy)
            .execute(&mut *conn)
            .await
            .map_err(super::error::write_error(
                ResourceKind::Route,
                key,
                &format!("inserting route `{key}`"),
            ))?;
        ROUTES
            .replace_children(conn, key, &target_children(row))
            .await
    }

    async fn update(
        conn: &mut PgConnection,
        key: &str,
        row: &RouteTable,
    ) -> Result<bool, StoreError> {
        let done =
            sqlx::query("UPDATE routes SET strategy = $2, updated_at = now() WHERE model = $1")
                .bind(key)
                .bind(&row.strategy)
                .execute(&mut *conn)
                .await
                .map_err(super::error::write_error(
                    ResourceKind::Route,
                    key,
                    &format!("updating route `{key}`"),
                ))?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        ROUTES
            .replace_children(conn, key, &target_children(row))
            .await?;
        Ok(true)
    }

    async fn delete(conn: &mut PgConnection, key: &str) -> Result<bool, StoreError> {
        ROUTES.delete(conn, key).await
    }
}

#[async_trait]
impl Resource for ProviderGroups {
    type Row = ProviderGroupTable;
    const KIND: ResourceKind = ResourceKind::ProviderGroup;

    fn key(row: &ProviderGroupTable) -> Option<String> {
        row.slug
            .clone()
            .or_else(|| row.name.as_deref().map(derive_slug))
    }

    fn set_key(row: &mut ProviderGroupTable, key: &str) {
        row.slug = Some(key.to_owned());
    }

    fn key_written(row: &ProviderGroupTable) -> Option<&str> {
        row.slug.as_deref()
    }

    fn rows(document: &ConfigFile) -> &Vec<ProviderGroupTable> {
        &document.provider_groups
    }

    fn rows_mut(document: &mut ConfigFile) -> &mut Vec<ProviderGroupTable> {
        &mut document.provider_groups
    }

    async fn select_all(conn: &mut PgConnection) -> Result<Vec<ProviderGroupTable>, StoreError> {
        let rows = sqlx::query(
            "SELECT slug, name, strategy FROM provider_groups ORDER BY created_at, slug",
        )
        .fetch_all(&mut *conn)
        .await
        .map_err(StoreError::database("listing provider groups"))?;
        let mut children = GROUPS.children_of_all(conn).await?;
        rows.iter()
            .map(|row| {
                let slug: String = column(row, "slug", "provider_groups")?;
                Ok(ProviderGroupTable {
                    name: Some(column(row, "name", "provider_groups")?),
                    strategy: column(row, "strategy", "provider_groups")?,
                    members: Some(members(children.remove(&slug).unwrap_or_default())),
                    slug: Some(slug),
                })
            })
            .collect()
    }

    async fn select_one(
        conn: &mut PgConnection,
        key: &str,
    ) -> Result<Option<ProviderGroupTable>, StoreError> {
        let row = sqlx::query("SELECT name, strategy FROM provider_groups WHERE slug = $1")
            .bind(key)
            .fetch_optional(&mut *conn)
            .await
            .map_err(StoreError::database(format!(
                "reading provider group `{key}`"
            )))?;
        let Some(row) = row else {
            return Ok(None);
        };
        Ok(Some(ProviderGroupTable {
            name: Some(column(&row, "name", "provider_groups")?),
            slug: Some(key.to_owned()),
            strategy: column(&row, "strategy", "provider_groups")?,
            members: Some(members(GROUPS.children_of(conn, key).await?)),
        }))
    }

    async fn insert(
        conn: &mut PgConnection,
        key: &str,
        row: &ProviderGroupTable,
    ) -> Result<(), StoreError> {
        let name = required(ResourceKind::ProviderGroup, key, "name", &row.name)?;
        sqlx::query("INSERT INTO provider_groups (slug, name, strategy) VALUES ($1, $2, $3)")
            .bind(key)
            .bind(name)
            .bind(&row.strategy)
            .execute(&mut *conn)
            .await
            .map_err(super::error::write_error(
                ResourceKind::ProviderGroup,
                key,
                &format!("inserting provider group `{key}`"),
            ))?;
        GROUPS
            .replace_children(conn, key, &member_children(row))
            .await
    }

    async fn update(
        conn: &mut PgConnection,
        key: &str,
        row: &ProviderGroupTable,
    ) -> Result<bool, StoreError> {
        let name = required(ResourceKind::ProviderGroup, key, "name", &row.name)?;
        let done = sqlx::query(
            "UPDATE provider_groups SET name = $2, strategy = $3, updated_at = now() \
             WHERE slug = $1",
        )
        .bind(key)
        .bind(name)
        .bind(&row.strategy)
        .execute(&mut *conn)
        .await
        .map_err(super::error::write_error(
            ResourceKind::ProviderGroup,
            key,
            &format!("updating provider group `{key}`"),
        ))?;
        if done.rows_affected() == 0 {
            return Ok(false);
        }
        GROUPS
            .replace_children(conn, key, &member_children(row))
            .await?;
        Ok(true)
    }

    async fn delete(conn: &mut PgConnection, key: &str) -> Result<bool, StoreError> {
        GROUPS.delete(conn, key).await
    }
}
