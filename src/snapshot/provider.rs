//! Providers as the request path needs them: address resolved, headers built.

use std::net::{SocketAddr, ToSocketAddrs};

use http::HeaderValue;

use std::sync::Arc;

use super::BuildError;
use crate::config;
use crate::health::{ProbeTarget, ProviderHealth};

/// Where and how to reach one provider.
#[derive(Debug)]
pub struct Provider {
    pub name: String,
    pub slug: String,
    pub addr: SocketAddr,
    pub tls: bool,
    pub host: String,
    /// `Host` header value: the host, with the port when it is not the default.
    pub host_header: HeaderValue,
    /// Path prefix of the base URL ("" or "/x/y"), prepended to the request path.
    pub path_prefix: String,
    /// `Bearer <key>` sent upstream, from `api_key_env`.
    pub authorization: Option<HeaderValue>,
    pub base_url: String,
    /// LoRA adapters the engine holds at once.
    pub max_loras: usize,
    /// Attempts this node sends the engine at once before it is saturated.
    pub max_concurrency: Option<u64>,
    /// Its SGLang bootstrap server's port (`bootstrap_port`).
    pub bootstrap_port: Option<u16>,
    /// Probe path of the active health check.
    pub health_path: String,
    /// Shared with every snapshot (see `health.rs`).
    pub health: Arc<ProviderHealth>,
    /// Verify the engine's certificate (https:// only).
    pub tls_verify: bool,
    /// Trust anchors for the engine's certificate instead of the system's.
    pub ca: Option<Arc<pingora::protocols::tls::CaType>>,
}

impl Provider {
    /// This provider as the health checker probes it.
    pub fn probe_target(&self) -> ProbeTarget {
        ProbeTarget {
            slug: self.slug.clone(),
            addr: self.addr,
            tls: self.tls,
            host: self.host_header.to_str().unwrap_or(&self.host).to_string(),
            path: format!("{}{}", self.path_prefix, self.health_path),
            authorization: self.authorization.clone(),
            health: Arc::clone(&self.health),
        }
    }
}

/// Resolves the provider's address (blocking DNS: snapshots are built off
/// the request path) and prepares its headers.
pub fn resolve(
    source: &str,
    provider: &config::Provider,
    health: Arc<ProviderHealth>,
) -> Result<Provider, BuildError> {
    let base = &provider.base_url;
    let resolve_error = |reason: String| BuildError::Resolve {
        source_file: source.to_string(),
        provider: provider.slug.clone(),
        host: base.host.clone(),
        port: base.port,
        reason,
    };
    let addr = base
        .authority()
        .to_socket_addrs()
        .map_err(|e| resolve_error(e.to_string()))?
        .next()
        .ok_or_else(|| resolve_error("no address".to_string()))?;
    // The port is named only when it is not the scheme's default (RFC 9110 §7.2).
    let host_header = if base.port == config::BaseUrl::default_port(base.tls) {
        base.host.clone()
    } else {
        base.authority()
    };
    let ca = match (&provider.tls.ca_file, base.tls) {
        (Some(path), true) => {
            Some(crate::tls::load_ca_file(path).map_err(|e| BuildError::Tls {
                source_file: source.to_string(),
                provider: provider.slug.clone(),
                error: e,
            })?)
        }
        _ => None,
    };
    if base.tls && !provider.tls.verify {
        log::warn!(
            "provider {}: certificate verification is disabled (tls_verify = false)",
            provider.slug
        );
    }
    Ok(Provider {
        tls_verify: provider.tls.verify,
        ca,
        name: provider.name.clone(),
        slug: provider.slug.clone(),
        addr,
        tls: base.tls,
        host: base.host.clone(),
        host_header: HeaderValue::from_str(&host_header)
            .map_err(|_| resolve_error("host is not a valid header value".to_string()))?,
        path_prefix: base.path_prefix.clone(),
        authorization: provider.api_key.as_ref().and_then(|key| {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}")).ok()?;
            value.set_sensitive(true);
            Some(value)
        }),
        base_url: base.to_string(),
        max_loras: provider.max_loras,
        max_concurrency: provider.max_concurrency,
        bootstrap_port: provider.bootstrap_port,
        health_path: provider.health_path.clone(),
        health,
    })
}
