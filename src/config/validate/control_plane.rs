//! `[control_plane]` and what each role asks of the file.
//!
//! A gateway polls a control node (`url`) and presents the internal token;
//! a control node owns the database (`database_url_env`) and checks that
//! token. A standalone node has no control plane, so a `[control_plane]`
//! table there would be ignored: it is refused instead. A field that only
//! the other role reads is warned about and not resolved (a gateway does not
//! need the database URL in its environment).
//!
//! A gateway's own file holds only what is the node's: `[server]`,
//! `[control_plane]` and `[[admin_tokens]]` (the local admin API). The rest
//! is the fleet's, set on the control node and served as the fleet
//! document; written in a gateway's file, it would be replaced at the
//! first poll, so it is refused, section by section.

use std::time::Duration;

use super::super::file::{self, ConfigFile};
use super::super::{endpoint, ControlPlane, Role};
use super::eligibility::Unit;
use super::{Env, Validator};

/// The top-level sections a gateway's own file may hold.
const GATEWAY_FILE_SECTIONS: &[&str] = &["server", "control_plane", "admin_tokens"];

/// How the contract's example writes a top-level section.
fn header(section: &str) -> String {
    match section {
        "providers" | "routes" | "provider_groups" | "catalog" | "api_keys" | "admin_tokens" => {
            format!("[[{section}]]")
        }
        _ => format!("[{section}]"),
    }
}

/// Whether `id` is a node id, `^[A-Za-z0-9._-]{1,128}$`.
fn is_node_id(id: &str) -> bool {
    (1..=file::MAX_NODE_ID_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The node id when none is written: the kernel's host name, else
/// `HOSTNAME`, else [`file::FALLBACK_NODE_ID`]; a name that is not a valid
/// node id is skipped.
fn host_name(env: Env<'_>) -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").ok();
    [kernel, env("HOSTNAME")]
        .into_iter()
        .flatten()
        .map(|name| name.trim().to_owned())
        .find(|name| is_node_id(name))
        .unwrap_or_else(|| file::FALLBACK_NODE_ID.to_owned())
}

impl Validator<'_> {
    /// Reports every section of a gateway's file that belongs to the
    /// fleet, and drops them, so that they add no errors of their own.
    pub(super) fn gateway_file(&mut self, file: ConfigFile) -> ConfigFile {
        let locator = self.locator;
        for section in locator.top_level_keys() {
            if !GATEWAY_FILE_SECTIONS.contains(&section) {
                self.error(
                    section,
                    format!(
                        "{} is set on the control node: a gateway takes it from the fleet document, and its own file holds only [server], [control_plane] and [[admin_tokens]]",
                        header(section)
                    ),
                );
            }
        }
        ConfigFile {
            server: file.server,
            control_plane: file.control_plane,
            admin_tokens: file.admin_tokens,
            ..ConfigFile::default()
        }
    }

    /// `[control_plane]` for `role`; `Some` exactly when the role has a
    /// control plane and the table is valid.
    pub(super) fn control_plane(
        &mut self,
        role: Role,
        table: Option<file::ControlPlaneTable>,
    ) -> Option<ControlPlane> {
        let table = match (role, table) {
            (Role::Standalone, None) => return None,
            (Role::Standalone, Some(_)) => {
                self.error(
                    "control_plane",
                    "a standalone node has no control plane, so this table would be ignored: set server.role = \"gateway\" or \"control\", or remove it",
                );
                return None;
            }
            (Role::Gateway, None) => {
                self.error(
                    "server.role",
                    "role \"gateway\" needs a [control_plane] table with url (the control node to poll) and internal_token_env",
                );
                return None;
            }
            (Role::Control, None) => {
                self.error(
                    "server.role",
                    "role \"control\" needs a [control_plane] table with database_url_env and internal_token_env",
                );
                return None;
            }
            (_, Some(table)) => table,
        };
        let errors_before = self.errors.len();
        let role_name = role.as_str();

        let url = match (role, table.url) {
            (Role::Gateway, None) => {
                self.error(
                    "control_plane.url",
                    "is required with role = \"gateway\": the admin listener of the control node to poll (e.g. \"http://control:9090\")",
                );
                None
            }
            (Role::Gateway, Some(url)) => self.control_url(&url),
            (_, Some(_)) => {
                self.warn(
                    "control_plane.url",
                    format!("has no effect with role = \"{role_name}\": only gateways poll a control node"),
                );
                None
            }
            (_, None) => None,
        };

        let (database_url_env, database_url) = match (role, table.database_url_env) {
            (Role::Control, None) => {
                self.error(
                    "control_plane.database_url_env",
                    "is required with role = \"control\": the environment variable holding the PostgreSQL URL",
                );
                (None, None)
            }
            (Role::Control, Some(var)) => {
                let url = self.secret("control_plane.database_url_env", &var);
                (Some(var), url)
            }
            (_, Some(_)) => {
                self.warn(
                    "control_plane.database_url_env",
                    format!("has no effect with role = \"{role_name}\": a gateway reaches the database through its control node"),
                );
                (None, None)
            }
            (_, None) => (None, None),
        };

        let (internal_token_env, internal_token) = match table.internal_token_env {
            None => {
                self.error(
                    "control_plane.internal_token_env",
                    format!("is required with role = \"{role_name}\": the environment variable holding the token gateways present to control nodes (the same on every node)"),
                );
                (None, None)
            }
            Some(var) => {
                let token = self.secret("control_plane.internal_token_env", &var);
                (Some(var), token)
            }
        };

        // the contract's example writes `node_id = ""` for "the default".
        let node_id = match table.node_id.filter(|id| !id.is_empty()) {
            None => Some(host_name(self.env)),
            Some(id) if is_node_id(&id) => Some(id),
            Some(id) => {
                self.error(
                    "control_plane.node_id",
                    format!(
                        "{id:?} is not a node id: 1 to {} characters of A-Z, a-z, 0-9, '.', '_' and '-'",
                        file::MAX_NODE_ID_LEN
                    ),
                );
                None
            }
        };

        let poll_interval = self.bounded(
            "control_plane.poll_interval_secs",
            table.poll_interval_secs,
            file::DEFAULT_POLL_INTERVAL_SECS,
            file::MAX_POLL_INTERVAL_SECS,
            Unit::Seconds,
        );
        let telemetry_interval = self.bounded(
            "control_plane.telemetry_interval_secs",
            table.telemetry_interval_secs,
            file::DEFAULT_TELEMETRY_INTERVAL_SECS,
            file::MAX_TELEMETRY_INTERVAL_SECS,
            Unit::Seconds,
        );

        if self.errors.len() != errors_before {
            return None;
        }
        debug_assert!(internal_token.is_some());
        debug_assert_eq!(role == Role::Gateway, url.is_some());
        debug_assert_eq!(role == Role::Control, database_url.is_some());
        Some(ControlPlane {
            url,
            database_url_env,
            database_url,
            internal_token_env,
            internal_token,
            node_id: node_id?,
            poll_interval: Duration::from_secs(poll_interval?),
            telemetry_interval: Duration::from_secs(telemetry_interval?),
        })
    }

    /// A control node's URL: `http(s)://host[:port][/path]`, no query;
    /// trimmed, without a trailing slash (rolter appends its paths).
    fn control_url(&mut self, written: &str) -> Option<String> {
        const FIELD: &str = "control_plane.url";
        if let Err(error) = endpoint::check_http(written) {
            self.error(FIELD, error.to_string());
            return None;
        }
        let url = written.trim();
        if url.contains('?') {
            self.error(
                FIELD,
                format!("{url:?} must not have a query: rolter appends its own paths to it"),
            );
            return None;
        }
        Some(url.trim_end_matches('/').to_owned())
    }
}
