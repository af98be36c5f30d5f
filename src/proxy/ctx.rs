//! Per-request state shared by the proxy's phases.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::HeaderValue;
use rolter_balancer::RouteContext;

use super::forwarding::ClientOrigin;
use super::outcome::BreakerTicket;
use super::target_set::TargetSet;
use crate::auth::Caller;
use crate::error::GatewayError;
use crate::rate_limit::ConcurrencySlot;
use crate::snapshot::{Route, Snapshot, Target};
use crate::state::ActiveRequest;
use crate::tracker::InFlightGuard;

/// What one request carries from `request_filter` to `logging`.
#[derive(Default)]
pub struct RequestCtx {
    /// Holds the process open while this request is served (see `signals.rs`).
    pub active: Option<ActiveRequest>,
    pub received: Option<Instant>,
    /// `x-request-id`: the client's when sane, else generated (`request_id.rs`).
    pub request_id: Option<HeaderValue>,
    /// Who the client is (`forwarding.rs`), worked out in `request_filter`.
    pub origin: Option<ClientOrigin>,
    /// When the response header went to the client (time to first byte).
    pub responded: Option<Instant>,
    /// The snapshot the request was routed with, kept for its whole life.
    pub snapshot: Option<Arc<Snapshot>>,
    pub route: Option<Arc<Route>>,
    pub caller: Option<Arc<Caller>>,
    /// The caller's in-flight slot under its key's `max_concurrent`
    /// (`rate_limit.rs`), held until the context drops: the response ended,
    /// streamed body included, or the client went away.
    pub key_slot: Option<ConcurrencySlot>,
    /// The body as the client sent it.
    pub body: Bytes,
    pub model: String,
    pub model_span: Range<usize>,
    pub session_key: Option<String>,
    pub prompt: String,
    pub prompt_len: usize,
    pub prompt_digest: u64,
    /// Token ids the caller supplied (header or integer prompt).
    pub token_ids: Option<Vec<u32>>,
    /// The LoRA adapter the request addresses (passthrough group routes).
    pub adapter: Option<String>,
    /// The clock reading the current attempt was routed at.
    pub now_ms: u64,
    pub attempt: Attempt,
    /// Targets already dispatched to, never picked again for this request.
    pub tried: TargetSet,
    pub attempts: u32,
    /// Set once the response header went to the client: no retry after that.
    pub response_started: bool,
    /// The client went away before the response ended.
    pub client_cancelled: bool,
    /// The client stopped reading and `server.send_timeout_secs` passed.
    pub send_timed_out: bool,
    /// An error the gateway answers itself, rendered by `fail_to_proxy`.
    pub error: Option<GatewayError>,
    /// The last failed attempt, for the final error message.
    pub last_failure: Option<String>,
}

/// State of the current attempt; reset by `upstream_peer` on every retry.
#[derive(Default)]
pub struct Attempt {
    pub target: Option<usize>,
    pub started: Option<Instant>,
    /// In-flight requests at the target when this attempt joined its queue.
    pub queue_depth: u64,
    pub in_flight: Option<InFlightGuard>,
    /// The breaker's admission (a half-open probe is released if unsettled).
    pub breaker: Option<BreakerTicket>,
    /// Targets whose breaker refused this pick after the balancer chose
    /// them (a half-open probe slot went to another request): left out of
    /// this pick only, never marked tried.
    pub refused: TargetSet,
    /// Every target the caller may use is down by active health checks
    /// alone: health is ignored for this pick (`select.rs`).
    pub ignore_health: bool,
    /// The body for this attempt's target (model rewritten).
    pub body: Bytes,
    pub status: Option<u16>,
    /// The attempt failed on a 5xx/429 that the gateway turned into a retry.
    pub failed_over_status: bool,
    /// The response may teach the target's latency (status below 400);
    /// cleared once it did.
    pub teaches: bool,
    /// The response is a stream (`text/event-stream`): its sample is the
    /// time to its first body byte, not to its end.
    pub streaming: bool,
    /// When the first body byte arrived, after `started`.
    pub first_byte: Option<std::time::Duration>,
}

impl RequestCtx {
    pub fn route_context(&self) -> RouteContext<'_> {
        RouteContext {
            session_key: self.session_key.as_deref(),
            prompt: &self.prompt,
            prompt_len: self.prompt_len,
            prompt_digest: self.prompt_digest,
            token_ids: self.token_ids.as_deref(),
            adapter: self.adapter.as_deref(),
            now_ms: self.now_ms,
        }
    }

    /// The route and the current attempt's target.
    pub fn current_target(&self) -> Option<(&Route, &Target)> {
        let route = self.route.as_deref()?;
        let target = route.targets.get(self.attempt.target?)?;
        Some((route, target))
    }

    /// Whether target `index` of the route may take the next attempt: not
    /// tried yet, allowed to the caller's key, its provider healthy (unless
    /// health is ignored for this pick), not parked, its breaker not open
    /// (load-balancing.md's eligibility rule). Reads only; `now_ms` is the
    /// clock of the current pick.
    pub fn is_eligible(&self, route: &Route, index: usize) -> bool {
        let target = &route.targets[index];
        let Some(snapshot) = self.snapshot.as_deref() else {
            return false;
        };
        !self.tried.contains(index)
            && !self.attempt.refused.contains(index)
            && self.may_use(target)
            && (self.attempt.ignore_health || target.provider.health.is_healthy())
            && !target.stats.parking.is_parked(self.now_ms)
            && target
                .stats
                .breaker
                .admits(self.now_ms, &snapshot.limits.breaker)
    }

    /// Notes what a failure on the client's side means: it stopped reading
    /// past `send_timeout` (a write timed out), or it went away.
    pub fn downstream_failed(&mut self, e: &pingora::Error) {
        if e.esource() != &pingora::ErrorSource::Downstream {
            return;
        }
        if e.etype() == &pingora::ErrorType::WriteTimedout {
            self.send_timed_out = true;
        } else if !self.send_timed_out {
            self.client_cancelled = true;
        }
    }

    /// Whether the caller's key allows `target`'s provider.
    pub fn may_use(&self, target: &Target) -> bool {
        self.caller
            .as_ref()
            .is_none_or(|c| c.may_use_provider(&target.id.provider))
    }

    /// Whether a failed attempt may be retried on another target.
    pub fn can_fail_over(&self) -> bool {
        let (Some(route), Some(snapshot)) = (self.route.as_deref(), self.snapshot.as_deref())
        else {
            return false;
        };
        !self.response_started
            && self.attempts <= snapshot.limits.max_retries
            && (0..route.targets.len()).any(|i| self.is_eligible(route, i))
    }
}
