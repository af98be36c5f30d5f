//! The OpenAI-aware reverse proxy: Pingora's `ProxyHttp` for rolter.
//!
//! Phases, in Pingora's order:
//! - `request_filter`: answer what the gateway owns (`/v1/models`, errors),
//!   authenticate, read and parse the body, resolve the route.
//! - `upstream_peer` (once per attempt): pick an eligible target with the
//!   route's balancer, take its in-flight slot.
//! - `upstream_request_filter` / `request_body_filter`: address the provider,
//!   rewrite `model`, hand over the body.
//! - `upstream_response_filter`: a 5xx or 429 before anything reached the
//!   client becomes a retry on another target while one is left.
//! - `fail_to_connect` / `error_while_proxy`: decide retries (never after the
//!   first byte reached the client).
//! - `logging`: metrics and the access log; dropping the context releases
//!   the in-flight slot.
//!
//! Every request gets an `x-request-id` (`request_id.rs`) and the engine is
//! told who the client is (`forwarding.rs`).

mod access;
mod body;
mod ctx;
mod forwarding;
mod outcome;
mod request_id;
mod respond;
mod select;
mod target_set;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use http::header;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::prelude::*;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::upstreams::peer::HttpPeer;
use smallvec::SmallVec;

pub use ctx::RequestCtx;
pub use forwarding::ClientOrigin;
pub use request_id::REQUEST_ID_HEADER;

use outcome::{attempt_failed, attempt_succeeded, BreakerTicket, Failure};

use crate::auth::{bearer_token, Caller};
use crate::error::GatewayError;
use crate::openai::{parse_request, parse_token_ids, Endpoint, TOKEN_IDS_HEADER};
use crate::snapshot::{Refusal, Snapshot};
use crate::state::GatewayState;
use crate::tracker::{parse_retry_after, FailureReason};

/// Request header carrying the caller's session identity (consistent hashing, affinity).
pub const SESSION_HEADER: &str = "x-session-id";
/// Response header naming the provider that served the request.
pub const TARGET_HEADER: &str = "x-rolter-target";
/// Response header naming the model the provider was asked for.
pub const UPSTREAM_MODEL_HEADER: &str = "x-rolter-upstream-model";

pub struct Gateway {
    state: Arc<GatewayState>,
}

impl Gateway {
    pub fn new(state: Arc<GatewayState>) -> Self {
        Self { state }
    }

    /// Everything before routing; `Err` is answered to the client as is.
    async fn admit(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
        snapshot: &Arc<Snapshot>,
    ) -> Result<Option<Endpoint>, GatewayError> {
        // The header is in: its read deadline (`server.header_read_timeout_secs`) stops.
        crate::downstream::request_header_complete();
        let server = &snapshot.config.server;
        // nginx's `send_timeout`: a client that accepts no byte for this
        // long is disconnected, and with it the engine's generation.
        session.set_write_timeout(Some(server.send_timeout));
        let request = session.req_header();
        let header_bytes = request_header_bytes(request);
        if header_bytes > server.max_request_header_bytes {
            return Err(GatewayError::HeaderTooLarge {
                size: header_bytes,
                limit: server.max_request_header_bytes,
            });
        }
        let path = request.uri.path();
        let Some(endpoint) = Endpoint::from_path(path) else {
            return Err(GatewayError::UnknownEndpoint {
                method: request.method.to_string(),
                path: path.to_string(),
            });
        };
        if request.method != endpoint.method() {
            return Err(GatewayError::MethodNotAllowed {
                method: request.method.to_string(),
                path: path.to_string(),
                allowed: endpoint.method_name(),
            });
        }
        let caller = authenticate(session, snapshot)?;
        // Known from here on, also to the access log of a refused request.
        ctx.caller = Some(Arc::clone(&caller));
        if endpoint == Endpoint::Models {
            respond::models(session, snapshot, &caller, !self.state.is_draining()).await;
            return Ok(None);
        }
        // Before the body is read: a limited caller costs no body read.
        if let Some(limits) = caller.limits() {
            match limits.admit(crate::clock::now_ms()) {
                Ok(slot) => ctx.key_slot = Some(slot),
                Err(limited) => {
                    self.state
                        .metrics
                        .record_rate_limited(&caller.name, limited.label());
                    return Err(GatewayError::limited(&caller.name, limited));
                }
            }
        }

        let token_ids = match session.req_header().headers.get(TOKEN_IDS_HEADER) {
            Some(value) => Some(parse_token_ids(value.as_bytes())?),
            None => None,
        };
        body::check_content_type(session)?;
        let body = body::read_body(session, snapshot.limits.max_body_bytes).await?;
        let parsed = parse_request(endpoint, &body)?;
        ctx.model = parsed.model.clone();
        // The key is checked on what the name addresses before anything is
        // built for it: an address the caller may not use creates no state.
        let Some(address) = snapshot.address(&parsed.model) else {
            return Err(GatewayError::UnknownModel {
                model: parsed.model,
            });
        };
        match address.admits(&caller) {
            Ok(()) => {}
            Err(Refusal::Model) => {
                return Err(GatewayError::ModelNotAllowed {
                    key: caller.name.clone(),
                    model: parsed.model,
                })
            }
            Err(Refusal::Provider) => {
                return Err(GatewayError::NoAllowedProvider {
                    key: caller.name.clone(),
                    model: parsed.model,
                })
            }
        }
        let route = snapshot.route(&address, crate::clock::now_ms());

        ctx.session_key = session
            .req_header()
            .headers
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .map(str::to_string);
        ctx.token_ids = token_ids.or(parsed.token_ids);
        ctx.adapter = route.adapter.clone();
        ctx.route = Some(route);
        ctx.body = body;
        ctx.model_span = parsed.model_span;
        ctx.prompt = parsed.prompt;
        ctx.prompt_len = parsed.prompt_len;
        ctx.prompt_digest = parsed.prompt_digest;
        Ok(Some(endpoint))
    }

    fn record_retry(&self, ctx: &RequestCtx, reason: FailureReason) {
        if let Some(route) = ctx.route.as_deref() {
            self.state
                .metrics
                .record_retry(&route.metrics.label, reason);
        }
    }
}

fn authenticate(session: &Session, snapshot: &Snapshot) -> Result<Arc<Caller>, GatewayError> {
    let token = session
        .req_header()
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| bearer_token(v.as_bytes()));
    let caller = token.and_then(|t| snapshot.api_keys.authenticate(t));
    match (caller, snapshot.limits.require_api_key) {
        (Some(caller), _) => Ok(caller),
        (None, false) => Ok(Caller::anonymous()),
        (None, true) if token.is_none() => Err(GatewayError::MissingApiKey),
        (None, true) => Err(GatewayError::InvalidApiKey),
    }
}

/// nginx's status for a request whose client closed the connection before
/// any response.
const CLIENT_CLOSED_REQUEST: u16 = 499;

/// The size of a request header as it came on the wire (HTTP/1): request
/// line and every field line, CRLFs included. For HTTP/2 the same sum over
/// the decoded fields, so one limit means the same on both.
fn request_header_bytes(request: &RequestHeader) -> usize {
    // "METHOD SP path SP HTTP/1.1 CRLF", then "name: value CRLF" per field.
    let line = request.method.as_str().len() + request.raw_path().len() + 11;
    request.headers.iter().fold(line, |sum, (name, value)| {
        sum + name.as_str().len() + value.len() + 4
    })
}

/// Whether a `Content-Type` is `text/event-stream` (parameters ignored).
fn is_event_stream(value: &[u8]) -> bool {
    let media = value.split(|&b| b == b';').next().unwrap_or_default();
    media
        .trim_ascii()
        .eq_ignore_ascii_case(b"text/event-stream")
}

fn error_with(etype: ErrorType, context: String, retry: bool) -> Box<Error> {
    let mut e = Error::explain(etype, context);
    e.set_retry(retry);
    e
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx {
            active: Some(self.state.begin_request()),
            ..RequestCtx::default()
        }
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        ctx.received = Some(Instant::now());
        let snapshot = self.state.snapshot();
        ctx.request_id = Some(request_id::ensure(session));
        ctx.origin = Some(ClientOrigin::of(session, &snapshot.config.server));
        let admitted = self.admit(session, ctx, &snapshot).await;
        ctx.snapshot = Some(snapshot);
        match admitted {
            Ok(Some(_)) => Ok(false),
            Ok(None) => Ok(true),
            Err(error) => {
                respond::error(session, &error).await;
                ctx.error = Some(error);
                Ok(true)
            }
        }
    }

    async fn upstream_peer(
        &self,
        _session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<Box<HttpPeer>> {
        // A retry starts here: the previous attempt's slot and state go.
        ctx.attempt = Default::default();
        let route = ctx
            .route
            .clone()
            .ok_or_else(|| Error::explain(ErrorType::InternalError, "no route in context"))?;

        ctx.now_ms = crate::clock::now_ms();
        ctx.attempt.ignore_health = select::health_panic(&route, ctx);
        let loads: SmallVec<[u64; 16]> =
            route.targets.iter().map(|t| t.stats.in_flight()).collect();
        let breaker_policy = ctx
            .snapshot
            .as_ref()
            .map(|s| s.limits.breaker)
            .ok_or_else(|| Error::explain(ErrorType::InternalError, "no snapshot in context"))?;
        // A pick is confirmed by the target's breaker; when a half-open probe
        // slot went to another request in the meantime, pick again without it
        // (at most once per target). A refused target was not tried: the
        // final error names its breaker, and it stays eligible for retries.
        let mut admitted = None;
        for _ in 0..route.targets.len() {
            let Some(index) = select::pick(&route, ctx, &loads) else {
                break;
            };
            match route.targets[index]
                .stats
                .breaker
                .try_admit(ctx.now_ms, &breaker_policy)
            {
                Some(admission) => {
                    admitted = Some((index, admission));
                    break;
                }
                None => ctx.attempt.refused.insert(index),
            }
        }

        let Some((index, admission)) = admitted else {
            let error = match ctx.last_failure.take() {
                Some(last) => GatewayError::UpstreamFailed {
                    model: route.model.clone(),
                    last,
                },
                None => GatewayError::NoEligibleTarget {
                    model: route.model.clone(),
                    reason: select::why_none(&route, ctx),
                },
            };
            let e = error_with(
                ErrorType::HTTPStatus(error.status()),
                error.to_string(),
                false,
            );
            ctx.error = Some(error);
            return Err(e);
        };

        let target = &route.targets[index];
        target.stats.record_pick();
        route.metrics.picks.inc();
        if ctx.attempt.ignore_health {
            self.state.metrics.record_health_panic(&route.metrics.label);
        }
        ctx.tried.insert(index);
        ctx.attempts += 1;
        let rewrite = (target.id.model != ctx.model).then_some(&target.model_json[..]);
        ctx.attempt = ctx::Attempt {
            target: Some(index),
            started: Some(Instant::now()),
            queue_depth: loads[index],
            in_flight: Some(target.stats.begin()),
            breaker: Some(BreakerTicket::new(Arc::clone(&target.stats), admission)),
            body: body::attempt_body(&ctx.body, &ctx.model_span, rewrite),
            ignore_health: ctx.attempt.ignore_health,
            ..Default::default()
        };
        Ok(target.peer())
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        let Some((_, target)) = ctx.current_target() else {
            return Err(Error::explain(
                ErrorType::InternalError,
                "no target in context",
            ));
        };
        let provider = &target.provider;
        // First, so that a `Connection` naming a header the gateway sets
        // below cannot remove it.
        forwarding::strip_hop_by_hop(upstream);
        if let Some(origin) = &ctx.origin {
            origin.apply(upstream)?;
        }
        if let Some(id) = &ctx.request_id {
            upstream.insert_header(REQUEST_ID_HEADER, id.clone())?;
        }
        if !provider.path_prefix.is_empty() {
            let original = &session.req_header().uri;
            let path_and_query = original.path_and_query().map(|p| p.as_str()).unwrap_or("/");
            let uri = format!("{}{}", provider.path_prefix, path_and_query)
                .parse::<http::Uri>()
                .or_err(ErrorType::InternalError, "building the upstream path")?;
            upstream.set_uri(uri);
        }
        upstream.insert_header(header::HOST, provider.host_header.clone())?;
        match &provider.authorization {
            Some(value) => upstream.insert_header(header::AUTHORIZATION, value.clone())?,
            None => {
                upstream.remove_header(&header::AUTHORIZATION);
            }
        }
        upstream.insert_header(header::CONTENT_LENGTH, ctx.attempt.body.len())?;
        Ok(())
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        // The client's body was read whole in `request_filter`; every attempt
        // gets its own (rewritten) copy at the end of the (empty) stream.
        if end_of_stream {
            *body = Some(ctx.attempt.body.clone());
        } else {
            *body = Some(Bytes::new());
        }
        Ok(())
    }

    async fn upstream_response_filter(
        &self,
        _session: &mut Session,
        upstream: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        let status = upstream.status.as_u16();
        if upstream.status.is_informational() {
            return Ok(());
        }
        ctx.attempt.status = Some(status);
        let Some((route, target)) = ctx.current_target() else {
            return Ok(());
        };
        let elapsed = ctx.attempt.started.map(|s| s.elapsed()).unwrap_or_default();
        target
            .metrics
            .time_to_first_byte
            .observe(elapsed.as_secs_f64());
        if status >= 500 || status == 429 || status == 408 {
            let retry_after = upstream
                .headers
                .get(header::RETRY_AFTER)
                .and_then(|v| parse_retry_after(v.as_bytes()));
            attempt_failed(
                ctx,
                &self.state.metrics,
                Failure::Status {
                    status,
                    retry_after,
                },
            );
            // 408 is the engine timing out the request itself: not retried
            // (decisions.md), the client gets the engine's answer.
            if status != 408 && ctx.can_fail_over() {
                ctx.attempt.failed_over_status = true;
                return Err(error_with(
                    ErrorType::HTTPStatus(status),
                    format!("upstream answered {status}"),
                    true,
                ));
            }
            return Ok(());
        }
        if status < 400 {
            route
                .balancer
                .observe(ctx.attempt.target.unwrap_or(0), &ctx.route_context());
            // Served: an addressed route is worth keeping from here on.
            if let Some(snapshot) = &ctx.snapshot {
                snapshot.keep(route, ctx.now_ms);
            }
            // What it teaches is known when the body has come (below).
            ctx.attempt.teaches = true;
            ctx.attempt.streaming = upstream
                .headers
                .get(header::CONTENT_TYPE)
                .is_some_and(|v| is_event_stream(v.as_bytes()));
        }
        attempt_succeeded(ctx, &self.state.metrics);
        Ok(())
    }

    /// Learns a successful attempt's latency from its body: a stream's time
    /// to first byte (its first token; vLLM and SGLang answer a stream's
    /// headers before queueing and prefill), a whole response otherwise,
    /// recorded when the body ended, so a stream cut short teaches nothing.
    fn upstream_response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<Option<Duration>> {
        if !ctx.attempt.teaches {
            return Ok(None);
        }
        let Some(started) = ctx.attempt.started else {
            return Ok(None);
        };
        if ctx.attempt.first_byte.is_none() && body.as_ref().is_some_and(|b| !b.is_empty()) {
            ctx.attempt.first_byte = Some(started.elapsed());
        }
        if end_of_stream {
            ctx.attempt.teaches = false;
            let sample = match ctx.attempt.first_byte {
                Some(first) if ctx.attempt.streaming => first,
                _ => started.elapsed(),
            };
            let routing = ctx.route_context();
            if let Some((_, target)) = ctx.current_target() {
                target.stats.record_success(
                    sample,
                    ctx.attempt.queue_depth,
                    routing.prompt_ktokens(),
                );
            }
        }
        Ok(None)
    }

    fn upstream_body_read_timeout(&self, ctx: &RequestCtx) -> Option<Duration> {
        ctx.snapshot.as_ref().map(|s| s.config.timeouts.idle)
    }

    async fn response_filter(
        &self,
        session: &mut Session,
        response: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        ctx.response_started = true;
        ctx.responded = Some(Instant::now());
        if self.state.is_draining() {
            session.set_keepalive(None);
        }
        if let Some(id) = &ctx.request_id {
            response.insert_header(REQUEST_ID_HEADER, id.clone())?;
        }
        if let Some((_, target)) = ctx.current_target() {
            response.insert_header(TARGET_HEADER, target.provider_header.clone())?;
            response.insert_header(UPSTREAM_MODEL_HEADER, target.model_header.clone())?;
        }
        Ok(())
    }

    fn fail_to_connect(
        &self,
        _session: &mut Session,
        _peer: &HttpPeer,
        ctx: &mut RequestCtx,
        mut e: Box<Error>,
    ) -> Box<Error> {
        attempt_failed(ctx, &self.state.metrics, Failure::Connect(e.to_string()));
        let retry = ctx.can_fail_over();
        if retry {
            self.record_retry(ctx, FailureReason::Connect);
        }
        e.set_retry(retry);
        e
    }

    fn error_while_proxy(
        &self,
        peer: &HttpPeer,
        _session: &mut Session,
        e: Box<Error>,
        ctx: &mut RequestCtx,
        client_reused: bool,
    ) -> Box<Error> {
        let mut e = e.more_context(format!("Peer: {peer}"));
        if ctx.attempt.failed_over_status {
            // Already counted and decided in `upstream_response_filter`.
            self.record_retry(ctx, FailureReason::Status);
            e.set_retry(true);
            return e;
        }
        if e.esource() == &pingora::ErrorSource::Downstream {
            // The client went away, or stopped reading past `send_timeout`:
            // nothing to learn about the target (a half-open probe is
            // released when the attempt is dropped).
            ctx.downstream_failed(&e);
            e.set_retry(false);
            return e;
        }
        // A pooled connection the engine had closed: not the target's fault,
        // and nothing reached it, so the same target may take the retry.
        e.retry.decide_reuse(client_reused);
        if client_reused && ctx.attempt.status.is_none() && e.retry() && !ctx.response_started {
            if let Some(index) = ctx.attempt.target {
                ctx.tried.remove(index);
            }
            let within_budget = ctx
                .snapshot
                .as_ref()
                .is_some_and(|s| ctx.attempts <= s.limits.max_retries);
            e.set_retry(within_budget);
            return e;
        }
        let failure = match (e.etype(), ctx.attempt.status) {
            (ErrorType::ReadTimedout, None) => Failure::FirstByteTimeout,
            (ErrorType::ReadTimedout, Some(_)) => Failure::IdleTimeout,
            _ => Failure::Stream(e.to_string()),
        };
        let reason = failure.reason();
        attempt_failed(ctx, &self.state.metrics, failure);
        let retry = ctx.can_fail_over();
        if retry {
            self.record_retry(ctx, reason);
        }
        e.set_retry(retry);
        e
    }

    async fn fail_to_proxy(
        &self,
        session: &mut Session,
        e: &Error,
        ctx: &mut RequestCtx,
    ) -> FailToProxy {
        ctx.downstream_failed(e);
        if ctx.client_cancelled && !ctx.response_started {
            // Nobody to answer: logged and counted as 499, nginx's "client
            // closed request", not as the 502 nobody received.
            return FailToProxy {
                error_code: CLIENT_CLOSED_REQUEST,
                can_reuse_downstream: false,
            };
        }
        let error = ctx
            .error
            .take()
            .unwrap_or_else(|| GatewayError::UpstreamFailed {
                model: ctx.model.clone(),
                last: ctx.last_failure.clone().unwrap_or_else(|| e.to_string()),
            });
        let code = if ctx.response_started {
            // The client already has a status line; the stream is cut short.
            0
        } else {
            respond::error(session, &error).await;
            error.status()
        };
        ctx.error = Some(error);
        FailToProxy {
            error_code: code,
            can_reuse_downstream: false,
        }
    }

    /// Pingora's own "Fail to proxy" line per failed request: the failure is
    /// logged per target (rate-limited, `tracker/failure_log.rs`) and every
    /// request has its access-log line.
    fn suppress_error_log(&self, _session: &Session, _ctx: &Self::CTX, _error: &Error) -> bool {
        true
    }

    async fn logging(&self, session: &mut Session, e: Option<&Error>, ctx: &mut RequestCtx) {
        let written = session
            .response_written()
            .map(|r| r.status.as_u16())
            .unwrap_or(0);
        if let Some(e) = e {
            ctx.downstream_failed(e);
        }
        let cancelled = ctx.client_cancelled;
        // Nothing reached the client because it left first: nginx's 499.
        let status = if written == 0 && cancelled {
            CLIENT_CLOSED_REQUEST
        } else {
            written
        };
        let route = ctx
            .route
            .as_deref()
            .map_or("-", |r| r.metrics.label.as_str());
        let target = ctx.current_target().map_or("-", |(_, t)| &*t.metrics.label);
        self.state.metrics.record_request(route, target, status);
        if let (Some((_, t)), Some(started)) = (ctx.current_target(), ctx.attempt.started) {
            t.metrics
                .upstream_latency
                .observe(started.elapsed().as_secs_f64());
        }
        if cancelled {
            self.state.metrics.record_client_cancel(route);
        }
        if ctx.send_timed_out {
            self.state
                .metrics
                .record_client_connection_closed(crate::downstream::ClosedBy::SendTimeout.label());
        }
        access::log_request(&self.state, session, e, ctx, status, cancelled);
        if let Some(e) = e {
            // Per request, so not above debug: the access log has the
            // request, the target's failure log its cause.
            log::debug!(
                "request failed: {} {} route={route} target={target} attempts={} status={status}: {e}",
                session.req_header().method,
                session.req_header().uri.path(),
                ctx.attempts,
            );
        }
        // The stream is over: free the target's slot now rather than when
        // Pingora gets round to dropping the context.
        ctx.attempt.in_flight = None;
    }
}
