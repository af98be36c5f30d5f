//! `[[providers]]`: names, slugs, base URLs and upstream keys.

use super::super::file;
use super::super::{derive_slug, is_valid_slug, BaseUrl, Provider};
use super::Validator;

/// A provider as routes and keys see it: its slug resolves even when the
/// rest of its table failed (`valid` is `None` then).
pub(super) struct ProviderEntry {
    pub(super) name: Option<String>,
    pub(super) slug: String,
    pub(super) valid: Option<Provider>,
}

/// Finds a provider by slug, else by name; returns its slug.
pub(super) fn resolve_provider<'p>(
    providers: &'p [ProviderEntry],
    wanted: &str,
) -> Option<&'p str> {
    providers
        .iter()
        .find(|p| p.slug == wanted)
        .or_else(|| providers.iter().find(|p| p.name.as_deref() == Some(wanted)))
        .map(|p| p.slug.as_str())
}

/// "known: a, b" for messages about an unknown provider.
pub(super) fn known_providers(providers: &[ProviderEntry]) -> String {
    if providers.is_empty() {
        "no providers are configured".to_owned()
    } else {
        let slugs: Vec<&str> = providers
            .iter()
            .map(|p| p.slug.as_str())
            .filter(|slug| !slug.is_empty())
            .collect();
        format!("known: {}", slugs.join(", "))
    }
}

impl Validator<'_> {
    pub(super) fn providers(&mut self, tables: Vec<file::ProviderTable>) -> Vec<ProviderEntry> {
        let mut entries: Vec<ProviderEntry> = Vec::with_capacity(tables.len());
        for (i, table) in tables.into_iter().enumerate() {
            let at = |field: &str| format!("providers[{i}].{field}");
            let errors_before = self.errors.len();

            let name = self.required(&at("name"), table.name);
            if let Some(name) = &name {
                if let Some(j) = entries
                    .iter()
                    .position(|p| p.name.as_deref() == Some(name.as_str()))
                {
                    self.error(
                        at("name"),
                        format!("name {name:?} is already used by providers[{j}]"),
                    );
                }
            }

            let explicit_slug = table.slug.is_some();
            let slug = match (table.slug, &name) {
                (Some(slug), _) => {
                    if !is_valid_slug(&slug) {
                        self.error(
                            at("slug"),
                            format!("{slug:?} is not a valid slug: 1 to 63 lowercase letters, digits and '-', starting with a letter or digit"),
                        );
                    }
                    slug
                }
                (None, Some(name)) => {
                    let slug = derive_slug(name);
                    if slug.is_empty() {
                        self.error(
                            at("name"),
                            format!("cannot derive a slug from {name:?}: it has no ASCII letter or digit; set `slug`"),
                        );
                    }
                    slug
                }
                (None, None) => String::new(),
            };
            if !slug.is_empty() {
                if let Some(j) = entries.iter().position(|p| p.slug == slug) {
                    let field = if explicit_slug {
                        at("slug")
                    } else {
                        at("name")
                    };
                    let how = if explicit_slug {
                        ""
                    } else {
                        " (derived from the name; set `slug` to choose another)"
                    };
                    self.error(
                        field,
                        format!("slug {slug:?} is already used by providers[{j}]{how}"),
                    );
                }
            }

            let base_url = self
                .required(&at("base_url"), table.base_url)
                .and_then(|url| match url.trim().parse::<BaseUrl>() {
                    Ok(url) => Some(url),
                    Err(error) => {
                        self.error(at("base_url"), error.to_string());
                        None
                    }
                });

            let api_key = table
                .api_key_env
                .and_then(|var| self.secret(&at("api_key_env"), &var));

            let health_path = table
                .health_path
                .unwrap_or_else(|| file::DEFAULT_HEALTH_PATH.to_owned());
            if !health_path.starts_with('/') {
                self.error(
                    at("health_path"),
                    format!("{health_path:?} must start with '/'"),
                );
            } else if health_path
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
            {
                self.error(
                    at("health_path"),
                    format!("{health_path:?} contains whitespace or control characters"),
                );
            }

            for (field, value) in [
                ("ca_file", &table.ca_file),
                ("tls_verify", &table.tls_verify),
                ("kv_events", &table.kv_events),
                ("lmcache", &table.lmcache),
            ] {
                self.not_implemented(&at(field), &format!("providers.{field}"), value);
            }

            let valid = match (&name, base_url) {
                (Some(name), Some(base_url)) if self.errors.len() == errors_before => {
                    Some(Provider {
                        name: name.clone(),
                        slug: slug.clone(),
                        base_url,
                        api_key,
                        health_path,
                    })
                }
                _ => None,
            };
            entries.push(ProviderEntry { name, slug, valid });
        }
        entries
    }
}
