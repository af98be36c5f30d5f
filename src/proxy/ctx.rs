//! Per-request state shared by the proxy's phases.
//!
//! What a request carries is set in three steps, each one value: the
//! context itself (the snapshot it is served with, from the first phase
//! on), its [`Admitted`] request once `request_filter` let it through (the
//! parsed body and the route), and one [`Attempt`] per dispatch to a
//! target, replaced by `upstream_peer` on every retry.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::HeaderValue;
use pingora::proxy::Session;
use rolter_balancer::RouteContext;

use super::eligibility::{Eligibility, Remaining};
use super::forwarding::ClientOrigin;
use super::target_set::TargetSet;
use crate::auth::Caller;
use crate::error::GatewayError;
use crate::openai::usage::{UsageChunkFilter, UsageReader};
use crate::openai::ParsedRequest;
use crate::rate_limit::ConcurrencySlot;
use crate::snapshot::{Route, Snapshot, Target};
use crate::state::ActiveRequest;
use crate::tracker::{BreakerTicket, InFlightGuard};

/// What one request carries from `request_filter` to `logging`.
pub struct RequestCtx {
    /// Holds the process open while this request is served (see `signals.rs`).
    _active: ActiveRequest,
    /// The snapshot the request is served with, for its whole life.
    pub snapshot: Arc<Snapshot>,
    pub received: Instant,
    /// `x-request-id`: the client's when sane, else generated (`request_id.rs`).
    pub request_id: Option<HeaderValue>,
    /// Who the client is (`forwarding.rs`), worked out in `request_filter`.
    pub origin: Option<ClientOrigin>,
    /// The caller, once its key was checked (also for a refused request's
    /// access-log line).
    pub caller: Option<Arc<Caller>>,
    /// The caller's in-flight slot under its key's `max_concurrent`
    /// (`rate_limit.rs`), held until the context drops: the response ended,
    /// streamed body included, or the client went away.
    pub key_slot: Option<ConcurrencySlot>,
    /// Set when `request_filter` let the request through to a route.
    pub admitted: Option<Admitted>,
    /// The current attempt, from `upstream_peer` on.
    pub attempt: Option<Attempt>,
    /// Targets already dispatched to, never picked again for this request.
    pub tried: TargetSet,
    pub attempts: u32,
    /// When the response header went to the client (time to first byte).
    pub responded: Option<Instant>,
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
    /// The request's trace while `[tracing]` is on. Boxed: inline, its
    /// 288 bytes sat in every request's context with tracing off, the
    /// whole of an open stream's life.
    pub trace: Option<Box<crate::traces::RequestTrace>>,
    /// A disaggregated request's prefill legs (`disaggregation.rs`); boxed,
    /// as `trace` is, for the requests that have none.
    pub pd: Option<Box<PdState>>,
}

/// A request `request_filter` let through: what it asked for and where it
/// goes.
pub struct Admitted {
    pub route: Arc<Route>,
    /// The parsed body; its token ids are the caller's (header or integer
    /// prompt).
    pub request: ParsedRequest,
    /// The body as the client sent it.
    pub body: Bytes,
    /// `x-session-id`.
    pub session_key: Option<String>,
    /// Flow control's priority band: the key's, or lower by `x-rolter-priority`.
    pub priority: i32,
    /// The target to take when it is eligible: the one holding the
    /// response a Responses request continues (`previous_response_id`).
    pub preferred: Option<usize>,
    /// `/v1/responses/{id}`: the id, forgotten once its engine deleted it.
    pub response_id: Option<String>,
    /// A Responses request: its answer's id is learned (`response_homes.rs`).
    pub learns_response: bool,
    /// A generation request: its answer's `usage` is read (`openai/usage.rs`).
    pub reads_usage: bool,
    /// Prefilled on the route's prefill pool before each decode attempt
    /// (`disaggregation.rs`).
    pub disaggregated: bool,
}

impl Admitted {
    /// What the balancer knows of the request, at clock reading `now_ms`.
    pub fn route_context(&self, now_ms: u64) -> RouteContext<'_> {
        RouteContext {
            session_key: self.session_key.as_deref(),
            prompt: &self.request.prompt,
            prompt_len: self.request.prompt_len,
            prompt_digest: self.request.prompt_digest,
            token_ids: self.request.token_ids.as_deref(),
            adapter: self.route.adapter.as_deref(),
            now_ms,
        }
    }
}

/// One dispatch of the request to a target.
pub struct Attempt {
    /// Index of the target in the route.
    pub target: usize,
    pub started: Instant,
    /// The clock reading the attempt was routed at.
    pub now_ms: u64,
    /// In-flight requests at the target when this attempt joined its queue.
    pub queue_depth: u64,
    /// The target's in-flight slot; released in `logging`, or on drop.
    pub in_flight: Option<InFlightGuard>,
    /// The breaker's admission (a half-open probe is released if unsettled).
    pub breaker: BreakerTicket,
    /// The body for this attempt's target (model rewritten).
    pub body: super::body::AttemptBody,
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
    pub first_byte: Option<Duration>,
    /// The tokens the engine reports in its answer.
    pub usage: UsageReader,
    /// The caller's token limits were charged the usage (once, when the
    /// engine's answer ended).
    pub usage_charged: bool,
    /// Set on a stream whose usage chunk the gateway asked for and the
    /// client did not: it is kept from the client.
    pub usage_filter: Option<UsageChunkFilter>,
}

/// A disaggregated request's state across its decode attempts.
#[derive(Default)]
pub struct PdState {
    /// Prefill targets whose leg failed for this request: not picked
    /// again. One that prefilled may prefill again for a later attempt.
    pub tried: TargetSet,
    /// vLLM: the last prefill's `kv_transfer_params`.
    pub handle: Option<serde_json::Value>,
    /// The decode attempt given `handle` never reached its engine: the
    /// handle may be used again.
    pub handle_unused: bool,
    /// The prefill target of the current attempt (`provider/model`).
    pub prefill_target: Option<String>,
}

impl RequestCtx {
    /// The request's id, worked out now if `request_filter` did not get to
    /// it (an error before it).
    pub fn ensure_request_id(&mut self, session: &Session) -> HeaderValue {
        self.request_id
            .get_or_insert_with(|| super::request_id::of(session))
            .clone()
    }

    pub fn new(active: ActiveRequest, snapshot: Arc<Snapshot>) -> Self {
        RequestCtx {
            _active: active,
            snapshot,
            received: Instant::now(),
            request_id: None,
            origin: None,
            caller: None,
            key_slot: None,
            admitted: None,
            attempt: None,
            tried: TargetSet::default(),
            attempts: 0,
            responded: None,
            response_started: false,
            client_cancelled: false,
            send_timed_out: false,
            error: None,
            last_failure: None,
            trace: None,
            pd: None,
        }
    }

    pub fn route(&self) -> Option<&Route> {
        self.admitted.as_ref().map(|a| &*a.route)
    }

    /// The route, the current attempt's target and the attempt.
    pub fn current(&self) -> Option<(&Route, &Target, &Attempt)> {
        let route = self.route()?;
        let attempt = self.attempt.as_ref()?;
        Some((route, route.targets.get(attempt.target)?, attempt))
    }

    /// The current attempt's target.
    pub fn current_target(&self) -> Option<&Target> {
        self.current().map(|(_, target, _)| target)
    }

    /// The eligibility rule for a pick on `route` at `now_ms`.
    pub fn eligibility<'a>(&'a self, route: &'a Route, now_ms: u64) -> Eligibility<'a> {
        Eligibility::new(
            route,
            self.caller.as_deref(),
            &self.tried,
            &self.snapshot.limits,
            now_ms,
        )
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

    /// Whether a failed attempt may be retried on another target.
    pub fn can_fail_over(&self) -> bool {
        let Some(route) = self.route() else {
            return false;
        };
        if self.response_started || self.attempts > self.snapshot.limits.max_retries {
            return false;
        }
        // Under flow control a retry may wait for a saturated target.
        match self.eligibility(route, crate::clock::now_ms()).remaining() {
            Remaining::Eligible => true,
            Remaining::OnlySaturated => self.snapshot.limits.flow_control.enabled,
            Remaining::Nothing => false,
        }
    }
}
