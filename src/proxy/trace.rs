//! The request's trace at each step of the proxy (`traces.rs` has the
//! model): nothing at all while `[tracing]` is off (`ctx.trace` is `None`).

use std::sync::Arc;

use pingora::http::RequestHeader;
use pingora::proxy::Session;

use super::ctx::RequestCtx;
use crate::state::GatewayState;
use crate::traces::{Ending, TRACEPARENT, TRACESTATE};

/// The request's header is in.
pub fn begin(state: &GatewayState, session: &Session, ctx: &mut RequestCtx) {
    ctx.trace = state.traces.begin(session.req_header()).map(Box::new);
}

/// Admission decided who the caller is: a key holder or a trusted proxy
/// continues its own trace.
pub fn settle(ctx: &mut RequestCtx) {
    let trusted = ctx.origin.as_ref().is_some_and(|o| o.peer_trusted)
        || ctx.caller.as_ref().is_some_and(|c| c.limits().is_some());
    if let Some(trace) = ctx.trace.as_mut() {
        trace.settle(trusted);
    }
}

/// An attempt's request to the engine: its span is the engine's parent.
pub fn attempt(ctx: &mut RequestCtx, upstream: &mut RequestHeader) -> pingora::Result<()> {
    if ctx.trace.is_none() {
        return Ok(());
    }
    let Some((_, target, attempt)) = ctx.current() else {
        return Ok(());
    };
    let started = attempt.started;
    let label = Arc::clone(&target.metrics.label);
    let provider = target.provider.slug.clone();
    let decision = if ctx.attempts > 1 {
        "retry"
    } else if ctx
        .admitted
        .as_ref()
        .is_some_and(|a| a.preferred == Some(attempt.target))
    {
        "response_home"
    } else {
        "strategy"
    };
    let Some(trace) = ctx.trace.as_mut() else {
        return Ok(());
    };
    let (traceparent, tracestate) = trace.begin_attempt(started, &label, &provider, decision);
    upstream.insert_header_static(&TRACEPARENT, traceparent);
    match tracestate {
        Some(state) => upstream.insert_header_static(&TRACESTATE, state),
        // Another trace's state is not ours to pass on.
        None => {
            upstream.remove_header(&TRACESTATE);
        }
    }
    Ok(())
}

/// The current attempt is over and another may follow (`upstream_peer`).
pub fn end_attempt(ctx: &mut RequestCtx) {
    let Some(trace) = ctx.trace.as_mut() else {
        return;
    };
    if let Some(attempt) = &ctx.attempt {
        trace.end_attempt(
            attempt.status,
            attempt.first_byte,
            ctx.last_failure.as_deref(),
        );
    }
}

/// The request ended with `status` (0: nothing was sent).
pub fn finish(
    session: &Session,
    ctx: &mut RequestCtx,
    status: u16,
    error: Option<&pingora::Error>,
) {
    let Some(mut trace) = ctx.trace.take() else {
        return;
    };
    if let Some(attempt) = &ctx.attempt {
        trace.end_attempt(attempt.status, attempt.first_byte, None);
    }
    let header = session.req_header();
    let route = ctx.route();
    trace.finish(Ending {
        method: header.method.as_str(),
        path: header.uri.path(),
        status,
        route: route.map(|r| r.metrics.label.as_str()),
        model: ctx.admitted.as_ref().map(|a| a.request.model.as_str()),
        strategy: route.map(|r| r.strategy.as_str()),
        key: ctx.caller.as_ref().map(|c| c.name.as_str()),
        request_id: ctx.request_id.as_ref().and_then(|v| v.to_str().ok()),
        usage: ctx.attempt.as_ref().and_then(|a| a.usage.usage()),
        error: ctx
            .error
            .as_ref()
            .map(|e| e.to_string())
            .or_else(|| error.map(|e| e.to_string())),
    });
}
