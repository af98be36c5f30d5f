//! `tokenizer` and `tokenizer_budget_kib` on routes and provider groups,
//! and `cache_guard`, the setting of the strategy that routes by prefix
//! text.
//!
//! The directory is loaded here, through the process's tokenizer registry
//! (`crate::tokenization`), so a missing file, a tokenizer that does not
//! parse or a template that does not compile is refused at `rolter check`
//! and at reload, naming the file (and the template line), never at the
//! first request. The snapshot built from this configuration gets the same
//! loaded directory from the registry without reading it again. A control
//! node routes nothing and need not hold the directories: it checks the
//! setting's shape only, and each gateway loads and checks the directory
//! when it validates the fleet document.

use std::path::PathBuf;

use rolter_balancer::StrategyKind;

use super::super::file::CacheGuardTable;
use super::super::{CacheGuard, RouteTokenizer};
use super::Validator;
use crate::tokenization::{registry, DEFAULT_BUDGET_KIB, MAX_BUDGET_KIB};

impl Validator<'_> {
    /// The tokenizer of the route or group at `here` (`routes[2]`).
    pub(super) fn tokenizer(
        &mut self,
        here: &str,
        dir: Option<String>,
        budget_kib: Option<u32>,
    ) -> Option<RouteTokenizer> {
        let budget = budget_kib.unwrap_or(DEFAULT_BUDGET_KIB);
        if !(1..=MAX_BUDGET_KIB).contains(&budget) {
            self.error(
                format!("{here}.tokenizer_budget_kib"),
                format!("must be 1 to {MAX_BUDGET_KIB} (KiB), got {budget}"),
            );
        }
        let Some(dir) = dir else {
            if budget_kib.is_some() {
                self.warn(
                    format!("{here}.tokenizer_budget_kib"),
                    "has no effect without `tokenizer`",
                );
            }
            return None;
        };
        if dir.trim().is_empty() {
            self.error(
                format!("{here}.tokenizer"),
                "must not be empty (leave it out for no tokenizer)",
            );
            return None;
        }
        let dir = PathBuf::from(dir);
        if !self.loads_model_dirs {
            return Some(RouteTokenizer {
                dir,
                budget_bytes: budget as usize * 1024,
            });
        }
        if let Err(error) = registry().load(&dir) {
            self.error(format!("{here}.tokenizer"), error.to_string());
            return None;
        }
        Some(RouteTokenizer {
            dir,
            budget_bytes: budget as usize * 1024,
        })
    }
}

impl Validator<'_> {
    /// The `cache_guard` of the route or group at `here`.
    pub(super) fn cache_guard(
        &mut self,
        here: &str,
        table: Option<CacheGuardTable>,
        strategy: Option<StrategyKind>,
    ) -> CacheGuard {
        let mut guard = CacheGuard::default();
        let Some(table) = table else {
            return guard;
        };
        if strategy.is_some_and(|s| {
            !matches!(
                s,
                StrategyKind::CacheAware | StrategyKind::PreciseCacheAware
            )
        }) {
            self.warn(
                format!("{here}.cache_guard"),
                "only `cache_aware` and `precise_cache_aware` read it; it has no effect under this strategy",
            );
        }
        if let Some(min_load) = table.min_load {
            if min_load > 10_000 {
                self.error(
                    format!("{here}.cache_guard.min_load"),
                    format!("must be 0 to 10000, got {min_load}"),
                );
            } else {
                guard.min_load = Some(min_load);
            }
        }
        if let Some(ratio) = table.load_ratio {
            if ratio.is_finite() && (1.0..=100.0).contains(&ratio) {
                guard.load_ratio_milli = Some((ratio * 1000.0).round() as u32);
            } else {
                self.error(
                    format!("{here}.cache_guard.load_ratio"),
                    format!("must be 1 to 100, got {ratio}"),
                );
            }
        }
        guard
    }
}
