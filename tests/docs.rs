//! The operations material checked against the code, so it cannot drift:
//!
//! - `docs/configuration.md` against the serde types of `rolter.toml`: the
//!   fields and their TOML types are derived from `ConfigFile` itself (every
//!   table denies unknown keys, so an unknown probe key makes serde list the
//!   fields it accepts; a value of each TOML type tells which one it takes),
//!   and the documented defaults against the code's `DEFAULT_*` constants.
//! - `docs/metrics.md` against the metric names the code registers and the
//!   types and labels a running gateway exposes.
//! - `docker/` with the validators that run without a container engine:
//!   `docker compose config` (or docker-compose), kubernetes-validate's JSON
//!   schemas (strict), `kubectl kustomize`, promtool, and `systemd-analyze
//!   verify` for the unit in `docs/operations.md`; and cross-checks no
//!   schema knows (probes on the admin port, secrets for every `*_env`,
//!   grace periods longer than Pingora's drain, scrape targets).
//!
//! `docker/install-check-tools` installs the validators (`make test` runs
//! it). Without them these tests fail and say so; they never skip.

mod support;

#[path = "docs/configuration.rs"]
mod configuration;
#[path = "docs/docker.rs"]
mod docker;
#[path = "docs/kubernetes.rs"]
mod kubernetes;
#[path = "docs/markdown.rs"]
mod markdown;
#[path = "docs/metrics.rs"]
mod metrics;
#[path = "docs/tools.rs"]
mod tools;

use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}
