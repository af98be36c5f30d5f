//! Problems named by the row they are about. A control node validates the
//! document rolter.toml's rows and the database's make together, so the
//! index of a row in it means nothing to whoever wrote the row through the
//! control API: its errors name the row by its key instead.

use super::error::ConfigErrors;
use super::file::ConfigFile;

/// `errors` with each field's leading `table[index]` replaced by the key of
/// that row of `document`, the document that was validated.
pub fn name_rows(mut errors: ConfigErrors, document: &ConfigFile) -> ConfigErrors {
    for error in &mut errors.0 {
        if let Some(field) = &error.field {
            error.field = Some(name_row(field, document));
        }
    }
    errors
}

/// `field` with its leading row named by its key instead of its place in
/// `document` (`providers["gpu-a"].base_url`, not `providers[1]...`).
fn name_row(field: &str, document: &ConfigFile) -> String {
    let Some((table, rest)) = field.split_once('[') else {
        return field.to_owned();
    };
    let Some((index, tail)) = rest.split_once(']') else {
        return field.to_owned();
    };
    let Ok(i) = index.parse::<usize>() else {
        return field.to_owned();
    };
    let key = match table {
        "providers" => document
            .providers
            .get(i)
            .and_then(|p| p.slug.clone().or_else(|| p.name.clone())),
        "routes" => document.routes.get(i).and_then(|r| r.model.clone()),
        "provider_groups" => document.provider_groups.get(i).and_then(|g| g.slug.clone()),
        "catalog" => document.catalog.get(i).and_then(|c| c.model.clone()),
        _ => None,
    };
    match key {
        Some(key) => format!("{table}[{}]{tail}", serde_json::Value::String(key)),
        None => field.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_name_rows_by_their_key_not_their_place() {
        let document: ConfigFile = toml::from_str(
            "[[providers]]\nname = \"A\"\nslug = \"gpu-a\"\nbase_url = \"http://a\"\n\n[[providers]]\nname = \"B only\"\nbase_url = \"x\"\n\n[[routes]]\nmodel = \"org/chat\"\ntargets = []\n",
        )
        .unwrap();
        assert_eq!(
            name_row("providers[0].base_url", &document),
            r#"providers["gpu-a"].base_url"#
        );
        assert_eq!(
            name_row("providers[1].base_url", &document),
            r#"providers["B only"].base_url"#
        );
        assert_eq!(
            name_row("routes[0].targets[2].provider", &document),
            r#"routes["org/chat"].targets[2].provider"#
        );
        assert_eq!(name_row("routes[7]", &document), "routes[7]");
        assert_eq!(name_row("server.listen", &document), "server.listen");
        assert_eq!(name_row("routes[x]", &document), "routes[x]");
    }
}
