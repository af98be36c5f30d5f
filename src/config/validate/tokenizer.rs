//! `tokenizer` and `tokenizer_budget_kib` on routes and provider groups.
//!
//! The directory is loaded here, through the process's tokenizer registry
//! (`crate::tokenization`), so a missing file, a tokenizer that does not
//! parse or a template that does not compile is refused at `rolter check`
//! and at reload, naming the file (and the template line), never at the
//! first request. The snapshot built from this configuration gets the same
//! loaded directory from the registry without reading it again.

use std::path::PathBuf;

use super::super::RouteTokenizer;
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
