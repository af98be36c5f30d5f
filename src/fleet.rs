//! A gateway's side of fleet mode, and the protocol both sides speak: the
//! gateway polls its control node for the fleet document (`poller`) and
//! pushes what its adaptive balancers rank on (`telemetry`), both with the
//! internal token and the node's identity (`telemetry::InternalCall`). The
//! control node's side is `control`.

pub mod poller;
pub mod telemetry;
