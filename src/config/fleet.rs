//! The fleet document: what a control node serves its gateways.
//!
//! It is a [`ConfigFile`] as JSON, the same serde types as `rolter.toml`,
//! so a fleet's configuration goes through the same validation as a file.
//! The control node builds it from its own file and the database (keys as
//! digests, never as `key_env`: a gateway does not have the control node's
//! variables); a gateway reads it with [`parse_json`] or, merged into its
//! own file with [`merge_fleet_document`], validates it with
//! [`super::parse_document`].

use super::file::ConfigFile;
use super::{Config, ConfigError, ConfigErrors};

/// A gateway's configuration: its own file (`local`) for what is the
/// node's (`[server]`, `[control_plane]`, and the infrastructure it
/// reaches: `[rate_limits]`' Redis, with its password in the node's
/// environment, and `[tracing]`'s collector), the fleet document for
/// everything else, and the admin tokens of both, the fleet's first (so the
/// fleet's tokens keep their indices in error messages).
pub fn merge_fleet_document(local: &ConfigFile, fleet: &ConfigFile) -> ConfigFile {
    // Destructured without `..`, so that a new section cannot be added to
    // the file without deciding where a gateway takes it from: `_` is the
    // fleet document's (taken below by `..fleet`), the rest is merged.
    let ConfigFile {
        server: _,
        control_plane: _,
        admin_tokens,
        providers: _,
        routes: _,
        api_keys: _,
        retry: _,
        timeouts: _,
        provider_groups: _,
        catalog: _,
        adaptive_routing: _,
        health: _,
        breaker: _,
        parking: _,
        saturation: _,
        flow_control: _,
        rate_limits: _,
        tracing: _,
    } = fleet;
    ConfigFile {
        server: local.server.clone(),
        control_plane: local.control_plane.clone(),
        rate_limits: local.rate_limits.clone(),
        tracing: local.tracing.clone(),
        admin_tokens: admin_tokens
            .iter()
            .chain(&local.admin_tokens)
            .cloned()
            .collect(),
        ..fleet.clone()
    }
}

/// Validate a JSON document (a fleet document); `source` names it in
/// messages. A JSON error (syntax, unknown field, wrong type) is one error
/// naming the JSON path where serde stopped; validation errors name their
/// field path. Neither has a line.
pub fn parse_json(
    source: &str,
    json: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    let json_error = |field: Option<String>, error: serde_json::Error| ConfigError {
        file: source.to_owned(),
        line: None,
        field,
        message: error.to_string(),
    };
    let mut deserializer = serde_json::Deserializer::from_str(json);
    let document: ConfigFile =
        serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
            let path = error.path().to_string();
            // "." is the document itself, "?" a value serde never reached
            // (a document that is not an object).
            let field = (path != "." && path != "?").then_some(path);
            json_error(field, error.into_inner())
        })?;
    // Nothing but whitespace after the document.
    deserializer
        .end()
        .map_err(|error| json_error(None, error))?;
    super::parse_document(source, &document, env)
}
