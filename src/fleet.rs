//! A gateway's side of fleet mode, and the protocol both sides speak: the
//! gateway polls its control node for the fleet document (`poller`) and
//! pushes what its adaptive balancers rank on and its live state
//! (`telemetry`, `state`), both with the
//! internal token and the node's identity (`telemetry::InternalCall`). The
//! control node's side is `control`.

pub mod poller;
pub mod state;
pub mod telemetry;

use std::time::Duration;

use pingora::server::ShutdownWatch;

use crate::config::ControlPlane;
use crate::state::GatewayState;

/// Waits the interval the running `[control_plane]` sets (`default`
/// without one); `false` when the server is shutting down instead.
pub(crate) async fn pause(
    state: &GatewayState,
    shutdown: &mut ShutdownWatch,
    interval: fn(&ControlPlane) -> Duration,
    default: Duration,
) -> bool {
    let interval = state
        .snapshot()
        .config
        .control_plane
        .as_ref()
        .map_or(default, interval);
    tokio::select! {
        _ = tokio::time::sleep(interval) => true,
        _ = shutdown.changed() => false,
    }
}
