//! A gateway node's view of the fleet: it polls a control node for the fleet
//! document every `poll_interval` and installs it as its snapshot, built
//! exactly as from a file (one code path, see `GatewayState::install_fleet`).
//!
//! The poll carries the version this node runs (`?version=N`); the control
//! node answers 304 when nothing changed, and records the node in the
//! cluster inventory either way. If the control node is unreachable, the
//! gateway keeps serving its last snapshot and retries.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use http::Method;
use pingora::connectors::http::Connector;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use serde::{Deserialize, Serialize};

use super::telemetry::InternalCall;
use crate::config::file::ConfigFile;
use crate::config::ControlPlane;
use crate::state::GatewayState;

/// The largest fleet document accepted (a large fleet's JSON is far smaller).
const MAX_DOCUMENT_BYTES: usize = 32 * 1024 * 1024;

/// What `GET /internal/snapshot` answers when the version changed; the
/// control node writes it, gateways read it.
#[derive(Serialize, Deserialize, utoipa::ToSchema)]
pub struct FleetSnapshot {
    pub version: u64,
    pub document: ConfigFile,
}

pub struct SnapshotPoller {
    state: Arc<GatewayState>,
}

impl SnapshotPoller {
    pub fn new(state: Arc<GatewayState>) -> Self {
        Self { state }
    }

    async fn poll(&self, connector: &Connector) -> Result<(), String> {
        let have = self.state.fleet_version().unwrap_or(0);
        let call = InternalCall::to(
            &self.state.snapshot(),
            &format!("internal/snapshot?version={have}"),
        )?;
        let (status, body) = call
            .send(connector, Method::GET, None, MAX_DOCUMENT_BYTES)
            .await?;
        match status {
            304 => Ok(()),
            200 => {
                let fleet: FleetSnapshot = serde_json::from_slice(&body)
                    .map_err(|e| format!("unreadable fleet document: {e}"))?;
                let version = fleet.version;
                let state = Arc::clone(&self.state);
                tokio::task::spawn_blocking(move || {
                    state.install_fleet(fleet.version, fleet.document)
                })
                .await
                .map_err(|e| e.to_string())?
                .map(|_| log::info!("installed fleet configuration version {version}"))
                .map_err(|e| {
                    format!(
                        "fleet configuration version {version} rejected: {}",
                        e.lines().join("; ")
                    )
                })
            }
            other => Err(format!(
                "answered {other}: {}",
                String::from_utf8_lossy(&body[..body.len().min(512)])
            )),
        }
    }
}

#[async_trait]
impl BackgroundService for SnapshotPoller {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let connector = Connector::new(None);
        let mut failing = false;
        loop {
            match self.poll(&connector).await {
                Ok(()) if failing => {
                    log::info!("control plane reachable again");
                    failing = false;
                }
                Ok(()) => {}
                Err(e) => {
                    // Log a failure once per outage, then quietly retry.
                    if !failing {
                        log::warn!("fleet snapshot poll failed (serving the last snapshot): {e}");
                    }
                    failing = true;
                }
            }
            let every = |c: &ControlPlane| c.poll_interval;
            if !super::pause(&self.state, &mut shutdown, every, Duration::from_secs(5)).await {
                return;
            }
        }
    }
}
