//! The control plane's server side: a control node keeps the fleet's
//! configuration in PostgreSQL (`store`, the only user of sqlx, with
//! `migrations/`) and publishes it as the fleet document (`node`); `service`
//! is its background work. What gateways do against it (poll the document,
//! push telemetry) is in `fleet`; its HTTP surface on the admin listener
//! (the control API, `/internal/*`) is in `admin`.

pub mod node;
pub mod service;
pub mod store;
