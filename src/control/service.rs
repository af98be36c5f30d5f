//! The control node's background work: at start, migrate the database and
//! publish the first fleet document (retrying until the database answers);
//! then pick up changes made through other control nodes sharing it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;

use super::node::ControlNode;

/// How often a control node checks the database for others' writes.
const REFRESH_EVERY: Duration = Duration::from_secs(2);
/// Backoff while the database is unreachable at start.
const START_RETRY: Duration = Duration::from_secs(2);

pub struct ControlPlaneService {
    control: Arc<ControlNode>,
}

impl ControlPlaneService {
    pub fn new(control: Arc<ControlNode>) -> Self {
        Self { control }
    }
}

#[async_trait]
impl BackgroundService for ControlPlaneService {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        loop {
            match self.control.start().await {
                Ok(()) => {
                    log::info!(
                        "control plane ready: database migrated, fleet configuration published"
                    );
                    break;
                }
                Err(e) => log::error!("control plane start failed, retrying: {e}"),
            }
            tokio::select! {
                _ = tokio::time::sleep(START_RETRY) => {}
                _ = shutdown.changed() => return,
            }
        }
        let mut failing = false;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(REFRESH_EVERY) => {}
                _ = shutdown.changed() => return,
            }
            match self.control.refresh_if_changed().await {
                Ok(()) => failing = false,
                Err(e) if !failing => {
                    log::warn!("control plane refresh failed: {e}");
                    failing = true;
                }
                Err(_) => {}
            }
        }
    }
}
