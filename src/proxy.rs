//! The OpenAI-aware reverse proxy: Pingora's `ProxyHttp` for rolter.
//!
//! Phases, in Pingora's order:
//! - `request_filter`: answer what the gateway owns (`/v1/models`, errors);
//!   admit the request (`admission.rs`): its header, key, body, address.
//! - `upstream_peer` (once per attempt): pick an eligible target
//!   (`eligibility.rs`) with the route's balancer over the combined loads
//!   (`select.rs`, `dispatch.rs`), claim its in-flight slot within the
//!   provider's `max_concurrency`; under flow control, wait in the route's
//!   queue while every target is saturated (`waiting.rs`).
//! - `upstream_request_filter` / `request_body_filter`: address the provider,
//!   rewrite `model`, hand over the body.
//! - `upstream_response_filter`: a 5xx or 429 before anything reached the
//!   client becomes a retry on another target while one is left.
//! - `upstream_response_body_filter`: a successful attempt's latency sample,
//!   the engine's `usage` (`openai/usage.rs`) and a Responses answer's id
//!   (`response_homes.rs`).
//! - `response_body_filter`: keeps the usage chunk the gateway asked for
//!   from a client that did not.
//! - `fail_to_connect` / `error_while_proxy`: decide retries (never after the
//!   first byte reached the client).
//! - `logging`: metrics and the access log; dropping the context releases
//!   the in-flight slot.
//!
//! Every request gets an `x-request-id` (`request_id.rs`) and the engine is
//! told who the client is (`forwarding.rs`).

mod access;
mod admission;
mod body;
mod ctx;
mod disaggregation;
mod dispatch;
mod eligibility;
#[cfg(test)]
mod finish_tests;
mod forwarding;
#[cfg(test)]
mod header_tests;
mod outcome;
mod request_id;
mod respond;
mod select;
mod target_set;
#[cfg(test)]
mod task_pipe_tests;
mod trace;
mod waiting;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use http::header::{self, HeaderName};
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::modules::http::HttpModules;
use pingora::prelude::*;
use pingora::proxy::{FailToProxy, ProxyHttp, Session};
use pingora::upstreams::peer::HttpPeer;

use ctx::Attempt;
pub use ctx::RequestCtx;
pub use forwarding::ClientOrigin;
pub use request_id::REQUEST_ID_HEADER;

use admission::Next;
use dispatch::Dispatch;
use outcome::{attempt_failed, attempt_succeeded, Failure};

use crate::auth::Caller;
use crate::error::GatewayError;
use crate::response_homes::{self, Home};
use crate::state::GatewayState;
use crate::tracker::{parse_retry_after, FailureReason};

/// Request header carrying the caller's session identity (consistent hashing, affinity).
/// Names read on every request are `HeaderName`s: a lookup by `&str` parses
/// and lower-cases the name first.
pub static SESSION_HEADER: HeaderName = HeaderName::from_static("x-session-id");
/// Response header naming the provider that served the request.
pub static TARGET_HEADER: HeaderName = HeaderName::from_static("x-rolter-target");
/// Response header naming the model the provider was asked for.
pub static UPSTREAM_MODEL_HEADER: HeaderName = HeaderName::from_static("x-rolter-upstream-model");
/// How many headers `response_filter` adds.
const RESPONSE_HEADERS: usize = 3;
/// How many headers `upstream_request_filter` adds: the forwarding headers, the request id,
/// `Host`, `Authorization` and `Content-Length`.
const UPSTREAM_REQUEST_HEADERS: usize = forwarding::FORWARDING_HEADERS + 4;
// The patched Pingora reads an engine's response header and copies the client's request with
// room for these (and, in a response, the `Connection` its HTTP/1 session sets), so the
// `reserve` calls below are checks that cost nothing; a header added without raising the room
// would grow both maps of every request again.
const _: () =
    assert!(RESPONSE_HEADERS < pingora::protocols::http::v1::client::RESPONSE_HEADER_ROOM);
const _: () = assert!(UPSTREAM_REQUEST_HEADERS <= pingora::proxy::UPSTREAM_REQUEST_HEADER_ROOM);

pub struct Gateway {
    state: Arc<GatewayState>,
}

impl Gateway {
    pub fn new(state: Arc<GatewayState>) -> Self {
        Self { state }
    }

    fn record_retry(&self, ctx: &RequestCtx, reason: FailureReason) {
        if let Some(route) = ctx.route() {
            self.state
                .metrics
                .record_retry(&route.metrics.label, reason);
        }
    }
}

/// nginx's status for a request whose client closed the connection before
/// any response.
const CLIENT_CLOSED_REQUEST: u16 = 499;

/// Whether a `Content-Type` is `text/event-stream` (parameters ignored).
fn is_event_stream(value: &[u8]) -> bool {
    let media = value.split(|&b| b == b';').next().unwrap_or_default();
    media
        .trim_ascii()
        .eq_ignore_ascii_case(b"text/event-stream")
}

/// Charges the caller's `tpm` window what the engine reported for the
/// current attempt, here and, through the next flush, in Redis; once per
/// attempt.
fn charge_usage(state: &GatewayState, caller: Option<&Caller>, attempt: &mut Attempt) {
    let Some(usage) = attempt.usage.usage().filter(|_| !attempt.usage_charged) else {
        return;
    };
    attempt.usage_charged = true;
    let Some(caller) = caller else {
        return;
    };
    if let Some(limits) = caller.limits() {
        let tokens = usage.prompt + usage.completion;
        limits.charge_tokens(crate::clock::now_ms(), tokens);
        state
            .learned
            .rate_limits
            .shared
            .charge_tokens(&caller.name, tokens);
    }
}

fn error_with(etype: ErrorType, context: String, retry: bool) -> Box<Error> {
    let mut e = Error::explain(etype, context);
    e.set_retry(retry);
    e
}

/// The one error the types cannot rule out: Pingora calls the upstream
/// phases only after `request_filter` let the request through, so a
/// request without a route or attempt there is a bug, answered with 500.
fn not_admitted(phase: &str) -> Box<Error> {
    Error::explain(
        ErrorType::InternalError,
        format!("{phase} without an admitted request"),
    )
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = RequestCtx;

    fn new_ctx(&self) -> RequestCtx {
        RequestCtx::new(self.state.begin_request(), self.state.snapshot())
    }

    /// None. Pingora's default is response compression at level 0, which
    /// compresses nothing and cost every request a module context (two
    /// allocations) and three boxed calls of filters that do nothing.
    fn init_downstream_modules(&self, _modules: &mut HttpModules) {}

    async fn request_filter(&self, session: &mut Session, ctx: &mut RequestCtx) -> Result<bool> {
        // The header is in: its read deadline (`server.header_read_timeout_secs`) stops.
        crate::downstream::request_header_complete();
        let server = &ctx.snapshot.config.server;
        // nginx's `send_timeout`: a client that accepts no byte for this
        // long is disconnected, and with it the engine's generation.
        session.set_write_timeout(Some(server.send_timeout));
        ctx.request_id = Some(request_id::of(session));
        ctx.origin = Some(ClientOrigin::of(session, server));
        trace::begin(&self.state, session, ctx);
        let admitted =
            admission::admit(session, ctx, &self.state.metrics, &self.state.learned).await;
        trace::settle(ctx);
        match admitted {
            Ok(Next::Route) => Ok(false),
            Ok(Next::ListModels(caller)) => {
                let keepalive = !self.state.is_draining();
                let id = ctx.ensure_request_id(session);
                respond::models(session, id, &ctx.snapshot, &caller, keepalive).await;
                Ok(true)
            }
            Err(error) => {
                let id = ctx.ensure_request_id(session);
                respond::error(session, id, &error).await;
                ctx.error = Some(error);
                Ok(true)
            }
        }
    }

    async fn upstream_peer(
        &self,
        session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Result<Box<HttpPeer>> {
        // A retry starts here: the previous attempt's slot and state go.
        trace::end_attempt(ctx);
        ctx.attempt = None;
        let Some(admitted) = &ctx.admitted else {
            return Err(not_admitted("upstream_peer"));
        };
        let peer = if !ctx.snapshot.limits.flow_control.enabled {
            match dispatch::dispatch(&self.state, ctx, false) {
                Dispatch::Peer(peer) => peer,
                Dispatch::Refused(e) => return Err(e),
                // Without flow control saturation is judged to never empty a route.
                Dispatch::Saturated => return Err(not_admitted("a pick without flow control")),
            }
        } else {
            let queue = Arc::clone(&admitted.route.queue);
            waiting::dispatch_in_turn(&self.state, session, ctx, &queue).await?
        };
        // A disaggregated request's prefill leg, for this decode attempt.
        // Boxed: its future (an HTTP call) is most of this phase's size, and
        // Pingora moves the whole phase future into a box on every request.
        if ctx.admitted.as_ref().is_some_and(|a| a.disaggregated) {
            Box::pin(disaggregation::prepare(&self.state, session, ctx)).await?;
        }
        Ok(peer)
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream: &mut RequestHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        let Some((_, target, attempt)) = ctx.current() else {
            return Err(not_admitted("upstream_request_filter"));
        };
        let provider = &target.provider;
        // Pingora made the copy with room for these (checked above).
        upstream.reserve(UPSTREAM_REQUEST_HEADERS);
        // First, so that a `Connection` naming a header the gateway sets
        // below cannot remove it.
        forwarding::strip_hop_by_hop(upstream);
        if let Some(origin) = &ctx.origin {
            origin.apply(upstream);
        }
        if let Some(id) = &ctx.request_id {
            upstream.insert_header_static(&REQUEST_ID_HEADER, id.clone());
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
        // The gateway's key, as Anthropic's clients send it: never the engine's.
        upstream.remove_header(&admission::X_API_KEY);
        upstream.insert_header(header::CONTENT_LENGTH, attempt.body.len())?;
        trace::attempt(ctx, upstream)
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
        *body = Some(match (&ctx.attempt, end_of_stream) {
            (Some(attempt), true) => attempt.body.whole(),
            _ => Bytes::new(),
        });
        Ok(())
    }

    fn request_body_parts(
        &self,
        _session: &mut Session,
        ctx: &mut RequestCtx,
    ) -> Option<Vec<Bytes>> {
        ctx.attempt.as_ref()?.body.parts()
    }

    async fn upstream_response_filter(
        &self,
        session: &mut Session,
        upstream: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        let status = upstream.status.as_u16();
        if upstream.status.is_informational() {
            return Ok(());
        }
        let (Some(admitted), Some(attempt)) = (&ctx.admitted, ctx.attempt.as_mut()) else {
            return Ok(());
        };
        attempt.status = Some(status);
        let route = &admitted.route;
        let target = &route.targets[attempt.target];
        target
            .metrics
            .time_to_first_byte
            .observe(attempt.started.elapsed().as_secs_f64());
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
            // (docs/design/defaults.md, "Gateway"), the client gets the engine's answer.
            if status != 408 && ctx.can_fail_over() {
                if let Some(attempt) = ctx.attempt.as_mut() {
                    attempt.failed_over_status = true;
                }
                return Err(error_with(
                    ErrorType::HTTPStatus(status),
                    format!("upstream answered {status}"),
                    true,
                ));
            }
            return Ok(());
        }
        if status < 400 {
            if let Some(id) = &admitted.response_id {
                if session.req_header().method == http::Method::DELETE {
                    // The engine deleted it: nothing holds it any more.
                    self.state.learned.response_homes.forget(id);
                }
            }
            route
                .balancer
                .observe(attempt.target, &admitted.route_context(attempt.now_ms));
            // Served: an addressed route is worth keeping from here on.
            ctx.snapshot.keep(route, attempt.now_ms);
            // What it teaches is known when the body has come (below).
            attempt.teaches = true;
            attempt.streaming = upstream
                .headers
                .get(header::CONTENT_TYPE)
                .is_some_and(|v| is_event_stream(v.as_bytes()));
            if attempt.streaming && admitted.request.usage_splice.is_some() {
                attempt.usage_filter = Some(Default::default());
            }
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
        let (Some(admitted), Some(attempt)) = (&ctx.admitted, ctx.attempt.as_mut()) else {
            return Ok(None);
        };
        let first_in_this_piece =
            attempt.first_byte.is_none() && body.as_ref().is_some_and(|b| !b.is_empty());
        if first_in_this_piece {
            attempt.first_byte = Some(attempt.started.elapsed());
            if let Some(guard) = attempt.in_flight.as_mut() {
                guard.first_byte();
            }
            if admitted.learns_response && attempt.status.is_some_and(|s| s < 400) {
                let id = body.as_deref().and_then(response_homes::id_in);
                if let Some(id) = id {
                    let target = &admitted.route.targets[attempt.target];
                    self.state.learned.response_homes.learn(
                        id,
                        Home {
                            provider: target.id.provider.as_str().into(),
                            upstream_model: target.id.model.as_str().into(),
                            model: admitted.request.model.as_str().into(),
                        },
                    );
                }
            }
        }
        if admitted.reads_usage && attempt.status.is_some_and(|s| s < 400) {
            if let Some(chunk) = body.as_deref().filter(|b| !b.is_empty()) {
                attempt.usage.feed(chunk);
            }
            if end_of_stream {
                // Before the answer's last bytes go to the client: a client
                // that sends its next request once this one ends finds its
                // tokens counted.
                charge_usage(&self.state, ctx.caller.as_deref(), attempt);
            }
        }
        if !attempt.teaches {
            return Ok(None);
        }
        if end_of_stream {
            attempt.teaches = false;
            let sample = match attempt.first_byte {
                Some(first) if attempt.streaming => first,
                // A whole answer in one piece: its first byte was its last.
                Some(first) if first_in_this_piece => first,
                _ => attempt.started.elapsed(),
            };
            let ktokens = admitted.route_context(attempt.now_ms).prompt_ktokens();
            admitted.route.targets[attempt.target].stats.record_success(
                sample,
                attempt.queue_depth,
                ktokens,
            );
        }
        Ok(None)
    }

    /// Keeps the usage chunk the gateway asked for out of a stream whose
    /// client did not ask for it (`openai/usage.rs`).
    fn response_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        end_of_stream: bool,
        ctx: &mut RequestCtx,
    ) -> Result<Option<Duration>> {
        let Some(filter) = ctx.attempt.as_mut().and_then(|a| a.usage_filter.as_mut()) else {
            return Ok(None);
        };
        let chunk = body.take().unwrap_or_default();
        if chunk.is_empty() && !end_of_stream {
            return Ok(None);
        }
        let kept = filter.filter(chunk, end_of_stream);
        // An empty chunk would end a chunked body early.
        *body = (!kept.is_empty()).then_some(kept);
        Ok(None)
    }

    fn upstream_body_read_timeout(&self, ctx: &RequestCtx) -> Option<Duration> {
        Some(ctx.snapshot.config.timeouts.idle)
    }

    async fn response_filter(
        &self,
        session: &mut Session,
        response: &mut ResponseHeader,
        ctx: &mut RequestCtx,
    ) -> Result<()> {
        ctx.response_started = true;
        ctx.responded = Some(Instant::now());
        // No attempt follows once the response is on its way, and the body
        // the engine was sent (a copy, when spliced) would otherwise be held
        // for the whole stream.
        if let Some(attempt) = ctx.attempt.as_mut() {
            attempt.body = body::AttemptBody::Whole(Bytes::new());
        }
        if self.state.is_draining() {
            session.set_keepalive(None);
        }
        // Read with room for these (checked above).
        response.reserve(RESPONSE_HEADERS);
        if let Some(id) = &ctx.request_id {
            response.insert_header_static(&REQUEST_ID_HEADER, id.clone());
        }
        if let Some(target) = ctx.current_target() {
            response.insert_header_static(&TARGET_HEADER, target.provider_header.clone());
            response.insert_header_static(&UPSTREAM_MODEL_HEADER, target.model_header.clone());
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
        if let Some(pd) = ctx.pd.as_mut() {
            // The decode engine never saw the KV handle: the next attempt may use it.
            pd.handle_unused = true;
        }
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
        let (failed_over, status, target) = match &ctx.attempt {
            Some(a) => (a.failed_over_status, a.status, Some(a.target)),
            None => (false, None, None),
        };
        if failed_over {
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
        if client_reused && status.is_none() && e.retry() && !ctx.response_started {
            if let Some(index) = target {
                ctx.tried.remove(index);
            }
            e.set_retry(ctx.attempts <= ctx.snapshot.limits.max_retries);
            return e;
        }
        let failure = match (e.etype(), status) {
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
                model: ctx.route().map_or_else(String::new, |r| r.model.clone()),
                last: ctx.last_failure.clone().unwrap_or_else(|| e.to_string()),
            });
        let code = if ctx.response_started {
            // The client already has a status line; the stream is cut short.
            0
        } else {
            let id = ctx.ensure_request_id(session);
            respond::error(session, id, &error).await;
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
        // An answer cut short is charged what it reported before it broke.
        if let Some(attempt) = ctx.attempt.as_mut() {
            charge_usage(&self.state, ctx.caller.as_deref(), attempt);
        }
        let cancelled = ctx.client_cancelled;
        // Nothing reached the client because it left first: nginx's 499.
        let status = if written == 0 && cancelled {
            CLIENT_CLOSED_REQUEST
        } else {
            written
        };
        let route = ctx.route().map_or("-", |r| r.metrics.label.as_str());
        let target = ctx.current_target().map_or("-", |t| &*t.metrics.label);
        match ctx.current_target() {
            Some(t) if status == 200 => t.metrics.served_ok.inc(),
            _ => self.state.metrics.record_request(route, target, status),
        }
        if let Some((_, t, attempt)) = ctx.current() {
            t.metrics
                .upstream_latency
                .observe(attempt.started.elapsed().as_secs_f64());
            if let Some(usage) = attempt.usage.usage() {
                let key = ctx.caller.as_ref().map_or("-", |c| c.name.as_str());
                t.metrics.tokens.record(key, usage);
            }
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
        trace::finish(session, ctx, status, e);
        // The stream is over: free the target's slot now rather than when
        // Pingora gets round to dropping the context.
        if let Some(attempt) = ctx.attempt.as_mut() {
            attempt.in_flight = None;
        }
    }
}
