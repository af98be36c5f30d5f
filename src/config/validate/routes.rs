//! `[[routes]]`: public models, strategies and targets; also the strategy
//! and weight checks that provider groups share.

use std::collections::HashMap;

use rolter_balancer::StrategyKind;

use super::super::file;
use super::super::{Route, RouteTarget};
use super::providers::ProviderEntry;
use super::Validator;

/// A route target or group member, as far as it validated.
pub(super) struct EntryParts {
    pub(super) provider: Option<String>,
    /// As written; `None` when absent or refused.
    pub(super) model: Option<String>,
    pub(super) weight: u32,
}

impl Validator<'_> {
    pub(super) fn routes(
        &mut self,
        tables: Vec<file::RouteTable>,
        providers: &[ProviderEntry],
        group_slugs: &[String],
    ) -> Vec<Route> {
        let mut routes = Vec::with_capacity(tables.len());
        let mut models: HashMap<String, usize> = HashMap::new();
        for (i, table) in tables.into_iter().enumerate() {
            let at = |field: &str| format!("routes[{i}].{field}");
            let errors_before = self.errors.len();

            let model = self.required(&at("model"), table.model);
            if let Some(model) = &model {
                self.claim(
                    &mut models,
                    (at("model"), "model", "routed by routes"),
                    model,
                    i,
                );
                // `<slug>/<model>` addresses a provider directly, or a
                // provider group; a route there would make that address
                // ambiguous.
                for provider in providers.iter().filter(|p| !p.slug.is_empty()) {
                    let slug = provider.slug.as_str();
                    if in_address_space(model, slug) {
                        self.error(
                            at("model"),
                            format!("route {model:?} collides with provider {slug:?}: \"{slug}/<model>\" addresses that provider directly; rename the route"),
                        );
                    }
                }
                for slug in group_slugs {
                    if in_address_space(model, slug) {
                        self.error(
                            at("model"),
                            format!("route {model:?} collides with provider group {slug:?}: \"{slug}/<model>\" addresses that group; rename the route"),
                        );
                    }
                }
            }

            let (strategy, written_targets, disaggregation) = match table.disaggregation {
                None => (
                    self.strategy(&at("strategy"), table.strategy.as_deref()),
                    (at("targets"), table.targets),
                    None,
                ),
                Some(written) => {
                    for (field, set) in [
                        ("targets", table.targets.is_some()),
                        ("strategy", table.strategy.is_some()),
                    ] {
                        if set {
                            self.error(
                                at(field),
                                "a route with disaggregation names its engines and strategies in disaggregation.prefill/decode and prefill_strategy/decode_strategy",
                            );
                        }
                    }
                    let pools = self.disaggregation(i, written, model.as_deref(), providers);
                    (pools.decode_strategy, pools.decode, pools.disaggregation)
                }
            };
            let tokenizer = self.tokenizer(
                &format!("routes[{i}]"),
                table.tokenizer,
                table.tokenizer_budget_kib,
            );
            // A split route's guard serves whichever pool runs a cache
            // strategy: the prefill pool by default.
            let guarded = disaggregation
                .as_ref()
                .map(|d: &super::super::Disaggregation| d.prefill_strategy)
                .filter(|s| {
                    matches!(
                        s,
                        StrategyKind::CacheAware | StrategyKind::PreciseCacheAware
                    )
                })
                .or(strategy);
            let cache_guard = self.cache_guard(&format!("routes[{i}]"), table.cache_guard, guarded);
            let endpoints = self.endpoints(&format!("routes[{i}]"), table.endpoints);
            let targets = self.target_list(
                &written_targets.0,
                written_targets.1,
                model.as_deref(),
                strategy,
                providers,
            );

            if let (Some(model), Some(strategy)) = (model, strategy) {
                if self.errors.len() == errors_before {
                    routes.push(Route {
                        model,
                        strategy,
                        targets,
                        tokenizer,
                        cache_guard,
                        endpoints,
                        disaggregation,
                    });
                }
            }
        }
        routes
    }

    /// The strategy named at `field` (default "round_robin"), for routes and
    /// provider groups alike.
    pub(super) fn strategy(&mut self, field: &str, name: Option<&str>) -> Option<StrategyKind> {
        let name = name.unwrap_or(file::DEFAULT_STRATEGY);
        if let Some(kind) = StrategyKind::from_name(name) {
            return Some(kind);
        }
        let known: Vec<&str> = StrategyKind::ALL.iter().map(|kind| kind.as_str()).collect();
        self.error(
            field,
            format!("unknown strategy {name:?} (known: {})", known.join(", ")),
        );
        None
    }

    /// The targets written at `field` (`routes[0].targets`): at least one,
    /// each valid, no two alike.
    pub(super) fn target_list(
        &mut self,
        field: &str,
        written: Option<Vec<file::TargetEntry>>,
        route_model: Option<&str>,
        strategy: Option<StrategyKind>,
        providers: &[ProviderEntry],
    ) -> Vec<RouteTarget> {
        let mut targets: Vec<RouteTarget> = Vec::new();
        let list = field.rsplit('.').next().unwrap_or(field);
        let written = self.non_empty(field, written, "target");
        for (j, entry) in written.into_iter().enumerate() {
            let here = format!("{field}[{j}]");
            let Some(target) = self.target(&here, entry, route_model, strategy, providers) else {
                continue;
            };
            if let Some(k) = targets
                .iter()
                .position(|t| t.provider == target.provider && t.model == target.model)
            {
                self.error(
                    here,
                    format!(
                        "duplicate target: provider {:?} with model {:?} is already {list}[{k}]",
                        target.provider, target.model
                    ),
                );
            } else {
                targets.push(target);
            }
        }
        targets
    }

    fn target(
        &mut self,
        field: &str,
        entry: file::TargetEntry,
        route_model: Option<&str>,
        strategy: Option<StrategyKind>,
        providers: &[ProviderEntry],
    ) -> Option<RouteTarget> {
        let errors_before = self.errors.len();
        let parts = self.entry(field, entry, strategy, providers, "must not be empty");
        let model = parts.model.or_else(|| route_model.map(str::to_owned));
        match (parts.provider, model) {
            (Some(provider), Some(model)) if self.errors.len() == errors_before => {
                Some(RouteTarget {
                    provider,
                    model,
                    weight: parts.weight,
                })
            }
            _ => None,
        }
    }

    /// What a route target and a group member both are: a provider
    /// reference, an upstream model (absent: the caller's default; empty:
    /// an error, `empty_model` its message) and a weight.
    pub(super) fn entry(
        &mut self,
        field: &str,
        entry: file::TargetEntry,
        strategy: Option<StrategyKind>,
        providers: &[ProviderEntry],
        empty_model: &str,
    ) -> EntryParts {
        let provider = self
            .required(&format!("{field}.provider"), entry.provider)
            .and_then(|wanted| {
                self.provider_reference(format!("{field}.provider"), &wanted, providers)
            });
        let model = match entry.model {
            Some(model) if model.trim().is_empty() => {
                self.error(format!("{field}.model"), empty_model);
                None
            }
            model => model,
        };
        EntryParts {
            provider,
            model,
            weight: self.weight(field, entry.weight, strategy),
        }
    }

    /// The weight of the target or group member at `field`: at least 1,
    /// default 1. A weight written under a strategy that never reads weights
    /// is stored and never consulted (docs/design/balancer.md), so it draws a
    /// warning instead of silently suggesting a traffic share.
    pub(super) fn weight(
        &mut self,
        field: &str,
        written: Option<u32>,
        strategy: Option<StrategyKind>,
    ) -> u32 {
        let weight = written.unwrap_or(file::DEFAULT_WEIGHT);
        if weight == 0 {
            self.error(format!("{field}.weight"), "must be >= 1");
        } else if let (Some(_), Some(strategy)) = (written, strategy) {
            if !strategy.reads_weights() {
                self.warn(
                    format!("{field}.weight"),
                    format!(
                        "strategy {:?} ignores weights; this weight has no effect (strategies that read weights: {})",
                        strategy.as_str(),
                        weight_reading_strategies()
                    ),
                );
            }
        }
        weight
    }
}

/// Whether `model` lies in `slug`'s address space: `slug` itself or
/// `slug/...`. A longer slug sharing a prefix (`slug-b/...`) does not.
fn in_address_space(model: &str, slug: &str) -> bool {
    model
        .strip_prefix(slug)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// "weighted, pipeline, adaptive": the strategies that read weights, from
/// the balancer itself so that the list follows it.
fn weight_reading_strategies() -> String {
    let names: Vec<&str> = StrategyKind::ALL
        .iter()
        .filter(|kind| kind.reads_weights())
        .map(|kind| kind.as_str())
        .collect();
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}
