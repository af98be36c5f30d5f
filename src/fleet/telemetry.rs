//! Adaptive-routing telemetry: what each node's adaptive balancers rank on.
//!
//! The scores live in the balancers, in the gateway process; a background
//! task on each gateway samples them every `telemetry_interval` and pushes
//! the sample to the control node (`POST /internal/adaptive-telemetry`),
//! which keeps the newest per (node, model). The same push carries the
//! gateway's live state (its `/admin/routes` answer, `state.rs`). Nothing is
//! written on the request path: a pick only bumps the balancer's own
//! relaxed counters.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method};
use pingora::connectors::http::Connector;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use rolter_balancer::{AdaptivePolicy, StrategyKind};
use serde::{Deserialize, Serialize};

use crate::clock;
use crate::config::ControlPlane;
use crate::http_client::Endpoint;
use crate::snapshot::Snapshot;
use crate::state::GatewayState;

/// Header naming the node in every internal call.
pub const NODE_ID_HEADER: &str = "x-rolter-node-id";
/// Header with the node's `admin_listen`, which the control node lists as
/// its address (the peer address of a call is an ephemeral outgoing port).
pub const ADMIN_ADDRESS_HEADER: &str = "x-rolter-admin-address";

/// The address to list for a node that called from `peer` and says it
/// listens on `admin_listen`: that address, with the peer's IP when it
/// listens on every interface; the peer address when it did not say.
pub fn advertised_address(
    peer: Option<std::net::SocketAddr>,
    admin_listen: Option<&str>,
) -> Option<String> {
    let said = admin_listen.and_then(|a| a.parse::<std::net::SocketAddr>().ok());
    match (said, peer) {
        (Some(said), Some(peer)) if said.ip().is_unspecified() => {
            Some(std::net::SocketAddr::new(peer.ip(), said.port()).to_string())
        }
        (Some(said), _) => Some(said.to_string()),
        (None, peer) => peer.map(|p| p.to_string()),
    }
}

/// The policy a node runs (already sanitized).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct PolicyView {
    pub enabled: bool,
    pub latency_weight: f64,
    pub cost_weight: f64,
    pub load_weight: f64,
    pub exploration_ratio: f64,
    pub min_samples: u64,
}

impl From<AdaptivePolicy> for PolicyView {
    fn from(p: AdaptivePolicy) -> Self {
        Self {
            enabled: p.enabled,
            latency_weight: p.latency_weight,
            cost_weight: p.cost_weight,
            load_weight: p.load_weight,
            exploration_ratio: p.exploration_ratio,
            min_samples: p.min_samples,
        }
    }
}

/// How an adaptive route's picks were made.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct DecisionsView {
    pub engaged: bool,
    pub blend: u64,
    pub fallback: u64,
    pub exploration: u64,
}

/// One target of an adaptive route, as ranked.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct TargetSample {
    pub target: String,
    pub provider: String,
    pub upstream_model: String,
    pub score: Option<f64>,
    pub latency: Option<f64>,
    pub cost: Option<f64>,
    pub load: Option<f64>,
    pub latency_ms: Option<f64>,
    pub price: Option<f64>,
    pub in_flight: Option<f64>,
    pub picks: u64,
    /// Milliseconds since this target was last picked.
    pub last_pick_age_ms: Option<u64>,
}

/// One adaptive route of one node.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct RouteSample {
    pub model: String,
    #[serde(flatten)]
    pub ranking: Ranking,
}

/// How one node's adaptive balancer of a route ranks its targets.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Ranking {
    pub decisions: DecisionsView,
    /// The policy the node runs (it may lag the stored one).
    pub policy: PolicyView,
    pub targets: Vec<TargetSample>,
}

/// `GET /api/v1/adaptive-routing-telemetry`: every adaptive route with
/// the current ranking of each node that serves it.
#[derive(Clone, Debug, Default, Serialize, utoipa::ToSchema)]
pub struct TelemetryAnswer {
    pub routes: Vec<RouteTelemetry>,
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct RouteTelemetry {
    /// The route's public model.
    pub model: String,
    pub nodes: Vec<NodeRanking>,
}

/// One node's ranking of a route.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct NodeRanking {
    pub node_id: String,
    /// When the node pushed it (absent: read from this node itself).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reported_at: Option<chrono::DateTime<chrono::Utc>>,
    #[serde(flatten)]
    pub ranking: Ranking,
}

/// What a gateway pushes.
#[derive(Clone, Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TelemetryPush {
    pub routes: Vec<RouteSample>,
    /// Its live state (`/admin/routes`); absent from older gateways, and
    /// when it would not fit [`MAX_PUSH_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub state: Option<serde_json::Value>,
    /// Its `telemetry_interval`, to tell a late report from a fresh one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<u64>,
}

/// The most a push may carry: the control node reads at most 4 MiB of a
/// body; a state too large for this goes without (and is logged).
pub const MAX_PUSH_BYTES: usize = 3 * 1024 * 1024;

fn named(pairs: &[(&'static str, f64)], name: &str) -> Option<f64> {
    pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| *v)
}

/// Samples every adaptive route of `snapshot`.
pub fn sample(snapshot: &Snapshot) -> Vec<RouteSample> {
    let now = clock::now_ms();
    let policy = PolicyView::from(snapshot.config.adaptive_routing);
    snapshot
        .routes()
        .iter()
        .filter(|r| r.strategy == StrategyKind::Adaptive)
        .map(|route| {
            let report = route.balancer.report();
            let decisions =
                report
                    .decisions
                    .map_or_else(DecisionsView::default, |d| DecisionsView {
                        engaged: d.engaged,
                        blend: d.blend,
                        fallback: d.fallback,
                        exploration: d.exploration,
                    });
            let targets = route
                .targets
                .iter()
                .enumerate()
                .map(|(i, target)| {
                    let entry = report.targets.get(i);
                    let component = |name| entry.and_then(|e| named(&e.components, name));
                    let signal = |name| entry.and_then(|e| named(&e.signals, name));
                    TargetSample {
                        target: target.label.clone(),
                        provider: target.id.provider.clone(),
                        upstream_model: target.id.model.clone(),
                        score: entry.and_then(|e| e.score),
                        latency: component("latency"),
                        cost: component("cost"),
                        load: component("load"),
                        latency_ms: signal("latency_ms"),
                        price: signal("price"),
                        in_flight: signal("in_flight"),
                        picks: entry.map_or(0, |e| e.picks),
                        last_pick_age_ms: entry
                            .and_then(|e| e.last_pick_ms)
                            .map(|at| now.saturating_sub(at)),
                    }
                })
                .collect();
            RouteSample {
                model: route.model.clone(),
                ranking: Ranking {
                    decisions,
                    policy,
                    targets,
                },
            }
        })
        .collect()
}

/// Pushes this gateway's samples to the control node.
pub struct TelemetryPusher {
    state: Arc<GatewayState>,
}

impl TelemetryPusher {
    pub fn new(state: Arc<GatewayState>) -> Self {
        Self { state }
    }

    async fn push(&self, connector: &Connector) -> Result<(), String> {
        let snapshot = self.state.snapshot();
        let interval = snapshot
            .config
            .control_plane
            .as_ref()
            .map(|c| c.telemetry_interval.as_millis() as u64);
        let live = serde_json::to_value(crate::live::answer(&self.state, &snapshot))
            .map_err(|e| e.to_string())?;
        let mut push = TelemetryPush {
            routes: sample(&snapshot),
            state: Some(live),
            interval_ms: interval,
        };
        let mut body = serde_json::to_vec(&push).map_err(|e| e.to_string())?;
        if body.len() > MAX_PUSH_BYTES {
            log::warn!(
                "live state of {} bytes is over {MAX_PUSH_BYTES}: pushed without it",
                body.len()
            );
            push.state = None;
            body = serde_json::to_vec(&push).map_err(|e| e.to_string())?;
        }
        let (status, answer) = InternalCall::to(&snapshot, "internal/adaptive-telemetry")?
            .send(connector, Method::POST, Some(Bytes::from(body)), 64 * 1024)
            .await?;
        if status == 204 || status == 200 {
            Ok(())
        } else {
            Err(format!(
                "answered {status}: {}",
                String::from_utf8_lossy(&answer)
            ))
        }
    }
}

/// One call of a gateway to its control node (`[control_plane] url`): the
/// endpoint, the path under the URL's, and the headers of every internal
/// call (the internal token and the node id).
pub struct InternalCall {
    endpoint: Endpoint,
    path: String,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl InternalCall {
    /// The call to `path` (no leading slash) under the control node's URL.
    pub fn to(snapshot: &Snapshot, path: &str) -> Result<Self, String> {
        let control = snapshot
            .config
            .control_plane
            .as_ref()
            .ok_or("no [control_plane]")?;
        let url = control.url.as_deref().ok_or("no control_plane.url")?;
        let endpoint = Endpoint::new(url, Duration::from_secs(5)).map_err(|e| e.to_string())?;
        let path = format!("{}/{path}", endpoint.path.trim_end_matches('/'));
        let token = control
            .internal_token
            .as_deref()
            .ok_or("no internal token")?;
        let mut authorization =
            HeaderValue::from_str(&format!("Bearer {token}")).map_err(|e| e.to_string())?;
        authorization.set_sensitive(true);
        let mut headers = vec![
            (http::header::AUTHORIZATION, authorization),
            (
                HeaderName::from_static(NODE_ID_HEADER),
                HeaderValue::from_str(&control.node_id).map_err(|e| e.to_string())?,
            ),
            (
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ),
            (
                http::header::USER_AGENT,
                HeaderValue::from_static(crate::SOFTWARE_VERSION),
            ),
        ];
        if let Ok(admin) = HeaderValue::from_str(&snapshot.config.server.admin_listen) {
            headers.push((HeaderName::from_static(ADMIN_ADDRESS_HEADER), admin));
        }
        Ok(Self {
            endpoint,
            path,
            headers,
        })
    }

    /// Sends it; the status and at most `max_body` bytes of the answer.
    pub async fn send(
        &self,
        connector: &Connector,
        method: Method,
        body: Option<Bytes>,
        max_body: usize,
    ) -> Result<(u16, Bytes), String> {
        self.endpoint
            .call(connector, method, &self.path, &self.headers, body, max_body)
            .await
            .map_err(|e| e.to_string())
    }
}

#[async_trait]
impl BackgroundService for TelemetryPusher {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let connector = Connector::new(None);
        loop {
            let every = |c: &ControlPlane| c.telemetry_interval;
            if !super::pause(&self.state, &mut shutdown, every, Duration::from_secs(15)).await {
                return;
            }
            if let Err(e) = self.push(&connector).await {
                log::warn!("adaptive telemetry push failed: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::advertised_address;

    #[test]
    fn a_node_is_listed_at_its_admin_listener_not_its_outgoing_port() {
        let peer = Some("10.0.0.7:53122".parse().unwrap());
        assert_eq!(
            advertised_address(peer, Some("0.0.0.0:9090")).as_deref(),
            Some("10.0.0.7:9090")
        );
        assert_eq!(
            advertised_address(peer, Some("[::]:9090")).as_deref(),
            Some("10.0.0.7:9090")
        );
        assert_eq!(
            advertised_address(peer, Some("10.0.0.8:9090")).as_deref(),
            Some("10.0.0.8:9090")
        );
        assert_eq!(
            advertised_address(peer, None).as_deref(),
            Some("10.0.0.7:53122"),
            "an older gateway says nothing: its peer address"
        );
        assert_eq!(
            advertised_address(peer, Some("not an address")).as_deref(),
            Some("10.0.0.7:53122")
        );
        assert_eq!(advertised_address(None, None), None);
    }
}
