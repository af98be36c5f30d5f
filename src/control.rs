//! The control plane: fleet mode.
//!
//! A control node keeps the fleet's configuration in PostgreSQL (`store`),
//! serves the control API (`api`) and publishes the fleet document
//! (`node`); gateway nodes poll it (`poller`) and push adaptive-routing
//! telemetry (`telemetry`). `http` is the HTTP surface on the admin listener.

pub mod api;
pub mod http;
pub mod node;
pub mod poller;
pub mod service;
pub mod store;
pub mod telemetry;
