//! Routes and targets: what a request is balanced over.

use std::sync::Arc;

use bytes::Bytes;
use http::HeaderValue;
use pingora::upstreams::peer::HttpPeer;
use rolter_balancer::{LoadBalancer, StrategyKind, TargetSpec};

use super::{Provider, UPSTREAM_IDLE_TIMEOUT};
use crate::config;
use crate::metrics::{RouteMetrics, TargetMetrics};
use crate::tracker::{TargetId, TargetStats};

/// One target of one route.
pub struct Target {
    pub id: TargetId,
    /// `id` as text (`provider/model`), the stable identity strategies, logs
    /// and the access log see (metrics use `metrics.label`, which may fold
    /// an addressed target's model).
    pub label: String,
    pub provider: Arc<Provider>,
    pub weight: u32,
    /// The upstream model as a JSON string literal, spliced into request bodies.
    pub model_json: Bytes,
    pub model_header: HeaderValue,
    pub provider_header: HeaderValue,
    /// The counters this target is balanced and learned on: its own
    /// identity's, or for a passthrough member or a pinned address its
    /// provider's engine (`tracker.rs`).
    pub stats: Arc<TargetStats>,
    pub metrics: TargetMetrics,
    peer: HttpPeer,
}

impl Target {
    /// Builds the target `provider` serving `model`, balanced on `stats`,
    /// measured through `metrics`.
    pub fn new(
        provider: Arc<Provider>,
        model: &str,
        weight: u32,
        timeouts: &config::Timeouts,
        stats: Arc<TargetStats>,
        metrics: TargetMetrics,
    ) -> Target {
        let id = TargetId::new(provider.slug.clone(), model);
        let label = id.to_string();
        // SNI is the bare host name (brackets of an IPv6 literal removed).
        let sni = provider
            .host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let mut peer = HttpPeer::new(provider.addr, provider.tls, sni);
        peer.options.connection_timeout = Some(timeouts.connect);
        // Bounds each read until the response header arrives; the proxy
        // switches to `idle` for the body (`upstream_body_read_timeout`).
        peer.options.read_timeout = Some(timeouts.first_byte);
        peer.options.idle_timeout = Some(UPSTREAM_IDLE_TIMEOUT);
        // Pooled connections are shared by peers with the same reuse hash,
        // which leaves out the CA: without a per-provider group, a
        // connection verified for one provider could serve another that
        // trusts a different CA (or none).
        peer.group_key = xxhash_rust::xxh3::xxh3_64(provider.slug.as_bytes());
        if provider.tls {
            peer.options.verify_cert = provider.tls_verify;
            peer.options.verify_hostname = provider.tls_verify;
            peer.options.ca = provider.ca.clone();
        }
        let model_json = serde_json::to_vec(model).unwrap_or_default();
        Target {
            stats,
            metrics,
            model_header: HeaderValue::from_str(model)
                .unwrap_or_else(|_| HeaderValue::from_static("-")),
            provider_header: HeaderValue::from_str(&provider.slug)
                .unwrap_or_else(|_| HeaderValue::from_static("-")),
            model_json: Bytes::from(model_json),
            weight,
            provider,
            label,
            id,
            peer,
        }
    }

    /// A fresh peer for one attempt (Pingora takes it boxed).
    pub fn peer(&self) -> Box<HttpPeer> {
        Box::new(self.peer.clone())
    }

    /// How a strategy sees this target at build time.
    pub fn spec<'a>(&'a self, config: &config::Config) -> TargetSpec<'a> {
        TargetSpec {
            id: &self.label,
            weight: self.weight,
            price: config
                .price_of(&self.id.model)
                .map(|p| rolter_balancer::Price {
                    input_per_mtok: p.input_per_mtok,
                    output_per_mtok: p.output_per_mtok,
                }),
            max_adapters: self.provider.max_loras,
        }
    }
}

/// How a request addressed its route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RouteKind {
    /// A `[[routes]]` entry.
    Configured,
    /// `<group-slug>/<model>`: a provider group's members.
    Group { slug: String },
    /// `<provider-slug>/<model>`: one provider, pinned.
    Pinned { slug: String },
}

pub struct Route {
    /// The address clients use: the public model, or `<slug>/<model>`.
    pub model: String,
    pub kind: RouteKind,
    pub strategy: StrategyKind,
    /// Shared by every route built for one group in one snapshot.
    pub balancer: Arc<dyn LoadBalancer>,
    pub targets: Vec<Target>,
    pub metrics: RouteMetrics,
    /// The LoRA adapter requests on this route address: set only for a
    /// group route whose passthrough members forward the requested model.
    pub adapter: Option<String>,
    /// An addressed route the snapshot keeps (`addressed.rs`); configured
    /// routes and routes built for one request are not.
    pub kept: bool,
    /// The model directory its requests are tokenized with for routing.
    pub tokenizer: Option<crate::tokenization::RouteTokens>,
    /// The endpoints its requests may use (every one for a pinned provider).
    pub endpoints: crate::openai::EndpointSet,
    /// Where its requests wait under flow control; shared by the routes
    /// of one group or pinned provider, and across reloads.
    pub queue: Arc<crate::flow_control::RouteQueue>,
    /// With `disaggregation`: the prefill pool in front of `targets`, which
    /// are the decode pool.
    pub prefill: Option<PrefillPool>,
}

impl Route {
    /// Whether a balancer of this route reads the conversation's digest
    /// (its own, or its prefill pool's): the gateway works it out only then.
    pub fn reads_prompt_digest(&self) -> bool {
        self.strategy.reads_prompt_digest()
            || self
                .prefill
                .as_ref()
                .is_some_and(|pool| pool.route.reads_prompt_digest())
    }
}

/// The route label of a disaggregated route's prefill pool in metrics:
/// `<model>:prefill`.
pub const PREFILL_LABEL_SUFFIX: &str = ":prefill";

/// A disaggregated route's prefill engines and how a request reaches them.
pub struct PrefillPool {
    pub protocol: crate::config::PdProtocol,
    /// Shorter prompts skip the prefill pool.
    pub min_prefill_tokens: u64,
    /// The prefill engines with their own balancer, built once per
    /// snapshot: a route of their own, so eligibility, the breaker and
    /// parking apply to them as to any target.
    pub route: Arc<Route>,
    /// `rolter_disaggregation_requests_total` of the route, by path.
    pub counts: crate::metrics::DisaggregationCounts,
}
