//! `[[provider_groups]]`: fleets addressed as `<group-slug>/<model>`.
//!
//! A group slug lives in the provider slugs' namespace: `x/<model>` must
//! name one provider or one group, never both, so a group may not take a
//! provider's slug (and routes may not take either's address, `routes.rs`).
//! Members are providers, each at most once; a member's `model` is the
//! upstream model it always serves, or absent for passthrough (it forwards
//! the model the caller addressed).

use std::collections::HashMap;

use super::super::file;
use super::super::{GroupMember, ProviderGroup};
use super::providers::ProviderEntry;
use super::Validator;

/// A group as routes and keys see it: its slug is known even when the rest
/// of its table failed (`valid` is `None` then; empty slug when it has none).
pub(super) struct GroupEntry {
    pub(super) slug: String,
    pub(super) valid: Option<ProviderGroup>,
}

impl Validator<'_> {
    pub(super) fn provider_groups(
        &mut self,
        tables: Vec<file::ProviderGroupTable>,
        providers: &[ProviderEntry],
    ) -> Vec<GroupEntry> {
        let mut entries: Vec<GroupEntry> = Vec::with_capacity(tables.len());
        let mut names: HashMap<String, usize> = HashMap::new();
        for (i, table) in tables.into_iter().enumerate() {
            let here = format!("provider_groups[{i}]");
            let at = |field: &str| format!("{here}.{field}");
            let errors_before = self.errors.len();

            let name = self.required(&at("name"), table.name);
            if let Some(name) = &name {
                let claim = (at("name"), "name", "used by provider_groups");
                self.claim(&mut names, claim, name, i);
            }

            let explicit_slug = table.slug.is_some();
            let slug = self.slug(&here, table.slug, name.as_deref());
            if !slug.is_empty() {
                if let Some((j, provider)) =
                    providers.iter().enumerate().find(|(_, p)| p.slug == slug)
                {
                    let provider_name = provider.name.as_deref().unwrap_or(&provider.slug);
                    self.slug_taken(
                        &here,
                        explicit_slug,
                        format!(
                            "group slug {slug:?} is already the slug of provider {provider_name:?} (providers[{j}]): providers and provider groups share one namespace, \"{slug}/<model>\" would address both"
                        ),
                    );
                } else if let Some(j) = entries.iter().position(|g| g.slug == slug) {
                    self.slug_taken(
                        &here,
                        explicit_slug,
                        format!("slug {slug:?} is already used by provider_groups[{j}]"),
                    );
                }
            }

            let strategy = self.strategy(&at("strategy"), table.strategy.as_deref());
            let tokenizer = self.tokenizer(&here, table.tokenizer, table.tokenizer_budget_kib);
            let cache_guard = self.cache_guard(&here, table.cache_guard, strategy);
            let endpoints = self.endpoints(&here, table.endpoints);

            let mut members: Vec<GroupMember> = Vec::new();
            // Indices into the written list, for the duplicate message.
            let mut seen: HashMap<String, usize> = HashMap::new();
            let written = self.non_empty(&at("members"), table.members, "member");
            for (j, entry) in written.into_iter().enumerate() {
                let field = format!("{here}.members[{j}]");
                let Some(member) = self.member(&field, entry, strategy, providers) else {
                    continue;
                };
                if let Some(k) = seen.get(&member.provider) {
                    self.error(
                        field,
                        format!(
                            "duplicate member: provider {:?} is already members[{k}]; a group lists each provider once",
                            member.provider
                        ),
                    );
                } else {
                    seen.insert(member.provider.clone(), j);
                    members.push(member);
                }
            }

            let valid = match (name, strategy) {
                (Some(name), Some(strategy)) if self.errors.len() == errors_before => {
                    Some(ProviderGroup {
                        name,
                        slug: slug.clone(),
                        strategy,
                        members,
                        tokenizer,
                        cache_guard,
                        endpoints,
                    })
                }
                _ => None,
            };
            entries.push(GroupEntry { slug, valid });
        }
        entries
    }

    fn member(
        &mut self,
        field: &str,
        entry: file::GroupMemberEntry,
        strategy: Option<rolter_balancer::StrategyKind>,
        providers: &[ProviderEntry],
    ) -> Option<GroupMember> {
        let errors_before = self.errors.len();
        let empty_model = "must not be empty (leave it out for passthrough)";
        let parts = self.entry(field, entry, strategy, providers, empty_model);
        match parts.provider {
            Some(provider) if self.errors.len() == errors_before => Some(GroupMember {
                provider,
                model: parts.model,
                weight: parts.weight,
            }),
            _ => None,
        }
    }
}
