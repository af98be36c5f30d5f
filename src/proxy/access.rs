//! The access-log record of a finished request, gathered from the session
//! and the request context in `logging`.

use std::time::{Instant, SystemTime};

use http::header;
use pingora::proxy::Session;
use pingora::Error;

use super::ctx::RequestCtx;
use crate::access_log::AccessRecord;
use crate::config::AccessLog;
use crate::error::GatewayError;
use crate::state::GatewayState;

/// Logs the request, unless the access log is off. `status` is what went to
/// the client (499: nothing, the client left first; 0: nothing at all);
/// `cancelled`: the client went away.
pub fn log_request(
    state: &GatewayState,
    session: &Session,
    e: Option<&Error>,
    ctx: &RequestCtx,
    status: u16,
    cancelled: bool,
) {
    if ctx.snapshot.config.server.access_log != AccessLog::Off {
        state
            .access_log
            .push(record(session, e, ctx, status, cancelled));
    }
}

fn record(
    session: &Session,
    e: Option<&Error>,
    ctx: &RequestCtx,
    status: u16,
    cancelled: bool,
) -> AccessRecord {
    let now = Instant::now();
    let received = ctx.received;
    let total = now.saturating_duration_since(received);
    let request = session.req_header();
    let text = |name: header::HeaderName| {
        request
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let request_id = ctx
        .request_id
        .as_ref()
        .or_else(|| request.headers.get(&super::request_id::REQUEST_ID_HEADER))
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_string();
    let route = ctx.route();
    let target = ctx.current_target().map(|t| t.label.clone());
    let usage = ctx.attempt.as_ref().and_then(|a| a.usage.usage());
    let peer = ctx.origin.as_ref().and_then(|o| o.peer).or_else(|| {
        session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip().to_canonical())
    });
    AccessRecord {
        time: SystemTime::now()
            .checked_sub(total)
            .unwrap_or_else(SystemTime::now),
        request_id,
        client: ctx.origin.as_ref().and_then(|o| o.client).or(peer),
        peer,
        method: request.method.as_str().to_string(),
        path: request.uri.path_and_query().map_or_else(
            || request.uri.path().to_string(),
            |p| p.as_str().to_string(),
        ),
        protocol: protocol(request.version),
        status,
        key: ctx
            .caller
            .as_ref()
            .map(|c| c.name.clone())
            .or_else(|| named_key(ctx)),
        model: requested_model(ctx),
        route: route.map(|r| r.model.clone()),
        strategy: route.map(|r| r.strategy.as_str()),
        target,
        prefill_target: ctx.pd.as_ref().and_then(|pd| pd.prefill_target.clone()),
        attempts: ctx.attempts,
        upstream_status: ctx.attempt.as_ref().and_then(|a| a.status),
        bytes_sent: session.body_bytes_sent() as u64,
        request_bytes: session
            .body_bytes_read()
            .max(ctx.admitted.as_ref().map_or(0, |a| a.body.len())) as u64,
        ttfb: ctx
            .responded
            .map(|at| at.saturating_duration_since(received)),
        total,
        client_cancel: cancelled,
        prompt_tokens: usage.map(|u| u.prompt),
        cached_tokens: usage.map(|u| u.cached),
        completion_tokens: usage.map(|u| u.completion),
        error: error_code(e, ctx, cancelled),
        referer: text(header::REFERER),
        user_agent: text(header::USER_AGENT),
    }
}

/// The model the client asked for. A request refused before routing has no
/// model in the context yet, but its error may name it.
fn requested_model(ctx: &RequestCtx) -> Option<String> {
    if let Some(admitted) = &ctx.admitted {
        return Some(admitted.request.model.clone());
    }
    match ctx.error.as_ref()? {
        GatewayError::UnknownModel { model }
        | GatewayError::ModelNotAllowed { model, .. }
        | GatewayError::NoAllowedProvider { model, .. } => Some(model.clone()),
        _ => None,
    }
}

/// The key of a request refused for what its key may not do (or not now).
fn named_key(ctx: &RequestCtx) -> Option<String> {
    match ctx.error.as_ref()? {
        GatewayError::ModelNotAllowed { key, .. }
        | GatewayError::NoAllowedProvider { key, .. }
        | GatewayError::RateLimited { key, .. }
        | GatewayError::TokenRateLimited { key, .. }
        | GatewayError::ConcurrencyLimited { key, .. } => Some(key.clone()),
        _ => None,
    }
}

/// The error's fixed code: the gateway's own error, else Pingora's error
/// type. A client that left is `client_cancel`, not an error.
fn error_code(e: Option<&Error>, ctx: &RequestCtx, cancelled: bool) -> Option<&'static str> {
    if cancelled {
        return None;
    }
    if ctx.send_timed_out {
        return Some(crate::downstream::ClosedBy::SendTimeout.label());
    }
    match (&ctx.error, e) {
        (Some(error), _) => Some(error.code()),
        (None, Some(e)) => Some(e.etype().as_str()),
        (None, None) => None,
    }
}

fn protocol(version: http::Version) -> &'static str {
    match version {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_2 => "HTTP/2.0",
        http::Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}
