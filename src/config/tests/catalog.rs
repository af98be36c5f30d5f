//! `[[catalog]]`: upstream model prices.

use super::*;

#[test]
fn catalog_prices_are_looked_up_by_upstream_model() {
    let config = ok("[[catalog]]\nmodel = \"Qwen/Qwen3-8B\"\ninput_per_mtok = 0.10\noutput_per_mtok = 0.40\n\n[[catalog]]\nmodel = \"free\"\ninput_per_mtok = 0\noutput_per_mtok = 2\n");
    assert_eq!(
        config.price_of("Qwen/Qwen3-8B"),
        Some(&CatalogEntry {
            model: "Qwen/Qwen3-8B".into(),
            input_per_mtok: 0.10,
            output_per_mtok: 0.40,
        })
    );
    // Integers are prices too, and free is a price.
    let free = config.price_of("free").unwrap();
    assert_eq!((free.input_per_mtok, free.output_per_mtok), (0.0, 2.0));
    assert_eq!(
        free.price(),
        rolter_balancer::Price {
            input_per_mtok: 0.0,
            output_per_mtok: 2.0
        }
    );
    assert_eq!(config.price_of("qwen/qwen3-8b"), None);
}

#[test]
fn catalog_model_is_required_and_unique() {
    let text = "[[catalog]]\ninput_per_mtok = 1\noutput_per_mtok = 1\n\n[[catalog]]\nmodel = \"m\"\ninput_per_mtok = 1\noutput_per_mtok = 1\n\n[[catalog]]\nmodel = \"m\"\ninput_per_mtok = 2\noutput_per_mtok = 2\n";
    assert_eq!(
        located(&errors(text)),
        [
            ("catalog[0].model", Some(1), "is required"),
            (
                "catalog[2].model",
                Some(11),
                "model \"m\" is already priced by catalog[1]"
            ),
        ]
    );
}

#[test]
fn catalog_prices_are_required_finite_and_not_negative() {
    let text = "[[catalog]]\nmodel = \"a\"\ninput_per_mtok = -0.5\n\n[[catalog]]\nmodel = \"b\"\ninput_per_mtok = nan\noutput_per_mtok = inf\n";
    assert_eq!(
        located(&errors(text)),
        [
            ("catalog[0].output_per_mtok", Some(1), "is required"),
            (
                "catalog[0].input_per_mtok",
                Some(3),
                "must be >= 0 (got -0.5)"
            ),
            (
                "catalog[1].input_per_mtok",
                Some(7),
                "must be a finite number (got NaN)"
            ),
            (
                "catalog[1].output_per_mtok",
                Some(8),
                "must be a finite number (got inf)"
            ),
        ]
    );
}
