//! `[[routes]]`: public models, strategies and targets; also the strategy
//! and weight checks that provider groups share.

use std::collections::HashMap;

use rolter_balancer::StrategyKind;

use super::super::file;
use super::super::{Route, RouteTarget};
use super::providers::{known_providers, resolve_provider, ProviderEntry};
use super::Validator;

/// Strategies of docs/design/balancer.md that `StrategyKind` does not have yet.
/// Checked after `StrategyKind::from_name`, so one that lands there stops
/// being refused here without an edit.
const NOT_YET_STRATEGIES: &[&str] = &[
    "cache_aware",
    "pipeline",
    "precise_cache_aware",
    "lmcache_aware",
    "adaptive",
    "predicted_latency",
    "lora_aware",
];

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
                if let Some(j) = models.get(model) {
                    self.error(
                        at("model"),
                        format!("model {model:?} is already routed by routes[{j}]"),
                    );
                } else {
                    models.insert(model.clone(), i);
                }
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

            let strategy = self.strategy(&at("strategy"), table.strategy.as_deref());

            let mut targets: Vec<RouteTarget> = Vec::new();
            match table.targets {
                None => self.error(at("targets"), "is required"),
                Some(entries) if entries.is_empty() => {
                    self.error(at("targets"), "must list at least one target")
                }
                Some(entries) => {
                    for (j, entry) in entries.into_iter().enumerate() {
                        let field = format!("routes[{i}].targets[{j}]");
                        if let Some(target) =
                            self.target(&field, entry, model.as_deref(), strategy, providers)
                        {
                            if let Some(k) = targets.iter().position(|t| {
                                t.provider == target.provider && t.model == target.model
                            }) {
                                self.error(
                                    field,
                                    format!(
                                        "duplicate target: provider {:?} with model {:?} is already targets[{k}]",
                                        target.provider, target.model
                                    ),
                                );
                            } else {
                                targets.push(target);
                            }
                        }
                    }
                }
            }

            if let (Some(model), Some(strategy)) = (model, strategy) {
                if self.errors.len() == errors_before {
                    routes.push(Route {
                        model,
                        strategy,
                        targets,
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
        if NOT_YET_STRATEGIES.contains(&name) {
            self.error(
                field,
                format!("strategy `{name}` is not available in this version yet"),
            );
        } else {
            let known: Vec<&str> = StrategyKind::ALL.iter().map(|kind| kind.as_str()).collect();
            self.error(
                field,
                format!("unknown strategy {name:?} (known: {})", known.join(", ")),
            );
        }
        None
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
        let provider = self
            .required(&format!("{field}.provider"), entry.provider)
            .and_then(|wanted| match resolve_provider(providers, &wanted) {
                Some(slug) => Some(slug.to_owned()),
                None => {
                    self.error(
                        format!("{field}.provider"),
                        format!(
                            "unknown provider {wanted:?} ({})",
                            known_providers(providers)
                        ),
                    );
                    None
                }
            });
        let model = match entry.model {
            Some(model) if model.trim().is_empty() => {
                self.error(format!("{field}.model"), "must not be empty");
                None
            }
            Some(model) => Some(model),
            None => route_model.map(str::to_owned),
        };
        let weight = self.weight(field, entry.weight, strategy);
        match (provider, model) {
            (Some(provider), Some(model)) if self.errors.len() == errors_before => {
                Some(RouteTarget {
                    provider,
                    model,
                    weight,
                })
            }
            _ => None,
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
