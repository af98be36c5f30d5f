//! rolter: an LLM inference gateway on Pingora.
//!
//! The pure balancer lives in the `rolter-balancer` crate; everything that
//! touches the network lives here.

pub mod access_log;
pub mod admin;
pub mod allocator;
pub mod auth;
pub mod clock;
pub mod config;
pub mod control;
pub mod demo;
pub mod downstream;
pub mod engine_metrics;
pub mod error;
pub mod fleet;
pub mod flow_control;
pub mod health;
pub mod history;
pub mod http_client;
pub mod kv_events;
pub mod learned;
pub mod listening;
pub mod live;
pub mod lmcache;
pub mod metrics;
pub mod openai;
pub mod proxy;
pub mod rate_limit;
pub mod reload;
pub mod response_homes;
pub mod serve;
pub mod signals;
pub mod snapshot;
pub mod state;
pub mod tls;
pub mod tokenization;
pub mod traces;
pub mod tracker;
pub mod wake;

/// What a node says it runs: in the cluster inventory, and as the
/// User-Agent of a gateway's calls to its control node.
pub const SOFTWARE_VERSION: &str = concat!("rolter/", env!("CARGO_PKG_VERSION"));
