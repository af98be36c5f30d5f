//! `[[providers]]`: names, slugs, base URLs, upstream keys and upstream
//! TLS; the engine telemetry tables are in `telemetry.rs`.
//!
//! Upstream TLS settings that cannot matter (a CA file or `tls_verify =
//! false` on an `http://` provider, a CA file while verification is off)
//! are warnings, and so is verification turned off on purpose, so that it
//! shows at every start.

use super::super::file;
use super::super::{derive_slug, is_valid_slug, BaseUrl, Provider, UpstreamTls};
use super::eligibility::Unit;
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
    /// The slug of the table at `here` (`providers[0]`, `provider_groups[1]`):
    /// its `slug` checked against the pattern, else derived from its name.
    /// Empty when neither gives one; that is reported, except for a missing
    /// name, which has its own error.
    pub(super) fn slug(&mut self, here: &str, slug: Option<String>, name: Option<&str>) -> String {
        match (slug, name) {
            (Some(slug), _) => {
                if !is_valid_slug(&slug) {
                    self.error(
                        format!("{here}.slug"),
                        format!("{slug:?} is not a valid slug: 1 to 63 lowercase letters, digits and '-', starting with a letter or digit"),
                    );
                }
                slug
            }
            (None, Some(name)) => {
                let slug = derive_slug(name);
                if slug.is_empty() {
                    self.error(
                        format!("{here}.name"),
                        format!("cannot derive a slug from {name:?}: it has no ASCII letter or digit; set `slug`"),
                    );
                }
                slug
            }
            (None, None) => String::new(),
        }
    }

    /// Reports that the slug of the table at `here` is taken: at `slug` when
    /// it was written, else at the `name` it was derived from, with a hint.
    pub(super) fn slug_taken(&mut self, here: &str, explicit_slug: bool, message: String) {
        if explicit_slug {
            self.error(format!("{here}.slug"), message);
        } else {
            self.error(
                format!("{here}.name"),
                format!("{message} (derived from the name; set `slug` to choose another)"),
            );
        }
    }

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

            let here = format!("providers[{i}]");
            let explicit_slug = table.slug.is_some();
            let slug = self.slug(&here, table.slug, name.as_deref());
            if !slug.is_empty() {
                if let Some(j) = entries.iter().position(|p| p.slug == slug) {
                    self.slug_taken(
                        &here,
                        explicit_slug,
                        format!("slug {slug:?} is already used by providers[{j}]"),
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

            let max_loras = table.max_loras.unwrap_or(file::DEFAULT_MAX_LORAS);
            if !(1..=file::MAX_LORAS_LIMIT).contains(&max_loras) {
                self.error(
                    at("max_loras"),
                    format!(
                        "must be between 1 and {} (got {max_loras}); set it to the engine's --max-loras",
                        file::MAX_LORAS_LIMIT
                    ),
                );
            }
            // Within 1..=1024 when it is used (no error), so it fits.
            let max_loras = usize::try_from(max_loras).unwrap_or(usize::MAX);

            let tls = self.upstream_tls(
                &here,
                &slug,
                base_url.as_ref(),
                table.ca_file,
                table.tls_verify,
            );
            let kv_events = self.kv_events(&here, table.kv_events);
            let lmcache = self.lmcache(&here, table.lmcache);
            let engine_metrics =
                self.engine_metrics(&here, table.engine_metrics, base_url.as_ref());
            let max_concurrency = table.max_concurrency.and_then(|written| {
                self.bounded(
                    &at("max_concurrency"),
                    Some(written),
                    1,
                    file::MAX_PROVIDER_CONCURRENCY,
                    Unit::Count,
                )
            });

            if table.bootstrap_port == Some(0) {
                self.error(at("bootstrap_port"), "must be between 1 and 65535");
            }
            let valid = match (&name, base_url) {
                (Some(name), Some(base_url)) if self.errors.len() == errors_before => {
                    Some(Provider {
                        name: name.clone(),
                        slug: slug.clone(),
                        base_url,
                        api_key,
                        health_path,
                        max_loras,
                        kv_events,
                        lmcache,
                        max_concurrency,
                        bootstrap_port: table.bootstrap_port,
                        engine_metrics,
                        tls,
                    })
                }
                _ => None,
            };
            entries.push(ProviderEntry { name, slug, valid });
        }
        entries
    }

    /// `ca_file` and `tls_verify` of the provider at `here`; the warnings
    /// need its `base_url`, and are skipped when that failed.
    fn upstream_tls(
        &mut self,
        here: &str,
        slug: &str,
        base_url: Option<&BaseUrl>,
        ca_file: Option<String>,
        tls_verify: Option<bool>,
    ) -> UpstreamTls {
        let ca_written = ca_file.is_some();
        let ca_file = ca_file.and_then(|path| self.readable_file(&format!("{here}.ca_file"), path));
        let verify = tls_verify.unwrap_or(file::DEFAULT_TLS_VERIFY);
        match base_url {
            Some(url) if !url.tls => {
                if tls_verify == Some(false) {
                    self.warn(
                        format!("{here}.tls_verify"),
                        "has no effect: base_url is http://, there is no certificate to verify",
                    );
                }
                if ca_written {
                    self.warn(
                        format!("{here}.ca_file"),
                        "has no effect: base_url is http://; a CA file is read only for https://",
                    );
                }
            }
            Some(url) if !verify => {
                self.warn(
                    format!("{here}.tls_verify"),
                    format!(
                        "certificate verification disabled for provider {slug:?}: rolter accepts any certificate from {}",
                        url.authority()
                    ),
                );
                if ca_written {
                    self.warn(
                        format!("{here}.ca_file"),
                        "has no effect while tls_verify = false",
                    );
                }
            }
            _ => {}
        }
        UpstreamTls { ca_file, verify }
    }
}
