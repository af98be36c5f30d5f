//! `[[catalog]]`: upstream model prices, per million tokens.

use std::collections::HashMap;

use super::super::file;
use super::super::CatalogEntry;
use super::Validator;

impl Validator<'_> {
    pub(super) fn catalog(&mut self, tables: Vec<file::CatalogTable>) -> Vec<CatalogEntry> {
        let mut entries = Vec::with_capacity(tables.len());
        let mut models: HashMap<String, usize> = HashMap::new();
        for (i, table) in tables.into_iter().enumerate() {
            let at = |field: &str| format!("catalog[{i}].{field}");
            let errors_before = self.errors.len();

            let model = self.required(&at("model"), table.model);
            if let Some(model) = &model {
                self.claim(
                    &mut models,
                    (at("model"), "model", "priced by catalog"),
                    model,
                    i,
                );
            }
            let input = self.price(&at("input_per_mtok"), table.input_per_mtok);
            let output = self.price(&at("output_per_mtok"), table.output_per_mtok);

            if let (Some(model), Some(input_per_mtok), Some(output_per_mtok)) =
                (model, input, output)
            {
                if self.errors.len() == errors_before {
                    entries.push(CatalogEntry {
                        model,
                        input_per_mtok,
                        output_per_mtok,
                    });
                }
            }
        }
        entries
    }

    /// A required price: finite and >= 0 (free is a price; a negative one
    /// would make the costliest model look cheapest).
    fn price(&mut self, field: &str, value: Option<f64>) -> Option<f64> {
        match value {
            None => self.error(field, "is required"),
            Some(value) if !value.is_finite() => {
                self.error(field, format!("must be a finite number (got {value})"))
            }
            Some(value) if value < 0.0 => self.error(field, format!("must be >= 0 (got {value})")),
            Some(value) => return Some(value),
        }
        None
    }
}
