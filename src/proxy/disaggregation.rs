//! The prefill leg of a disaggregated route (docs/design/disaggregation.md).
//!
//! The decode leg is the request's ordinary attempt: `upstream_peer` picks
//! and claims a decode target from the route's own targets, Pingora proxies
//! and streams it, retries it and logs it. What this module adds, once that
//! target is claimed, is the other engine and the handshake between them:
//!
//! - vLLM: a prefill engine picked from the prefill pool gets the request
//!   with `max_tokens = 1`, `stream = false` and `kv_transfer_params =
//!   {do_remote_decode: true, ...}`; the `kv_transfer_params` of its answer
//!   go into the decode attempt's body. A failed prefill leg is retried on
//!   another prefill engine. A decode attempt that never reached its engine
//!   (a failed connect) leaves the handle unused and the next decode attempt
//!   reuses it; any other decode failure may have consumed it, so the next
//!   attempt prefills again.
//! - SGLang: the prefill engine's bootstrap address and a fresh room go into
//!   both bodies; once the prefill request is written to its engine the
//!   decode attempt follows, and the prefill answer is read in the
//!   background (it comes after the decode engine fetched the KV cache). A
//!   prefill engine that cannot be reached is retried around. Every decode
//!   attempt gets a new room and a new prefill.
//!
//! A vLLM prefill leg reuses a kept connection to its engine (one TCP and
//! TLS handshake per engine, not per request).
//!
//! Each leg is counted on its own pool's target metrics (the prefill pool's
//! route label is `<model>:prefill`), the prefill engine is named in the
//! access log (`prefill_target`) and its leg is a span of the trace.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Method};
use pingora::prelude::*;
use pingora::proxy::Session;
use serde_json::{Map, Value};
use smallvec::SmallVec;

use super::body::AttemptBody;
use super::ctx::RequestCtx;
use super::eligibility::Eligibility;
use super::outcome::{target_failed, target_succeeded, Failure};
use super::{body, error_with, select};
use crate::config::PdProtocol;
use crate::error::GatewayError;
use crate::snapshot::{PrefillPool, Route, Target};
use crate::state::GatewayState;
use crate::tracker::BreakerTicket;

/// The largest prefill answer read: a one-token completion, or SGLang's
/// prefill answer, which is drained.
const MAX_PREFILL_ANSWER: usize = 8 << 20;
/// How long a vLLM prefill leg's connection is kept for the next leg to
/// the same engine: under the 5 s keep-alive of the engines' HTTP server
/// (uvicorn's default), so the engine does not close it first. SGLang legs
/// are not kept: their answer comes after the decode attempt started, too
/// late to find out a kept connection had gone stale.
const PREFILL_KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(4);

/// Adds the prefill leg to the attempt `upstream_peer` just set up, when
/// the request is disaggregated. An error (with `ctx.error` set) fails the
/// request: no prefill engine could take it.
pub async fn prepare(
    state: &GatewayState,
    session: &Session,
    ctx: &mut RequestCtx,
) -> Result<(), Box<Error>> {
    let Some(admitted) = ctx.admitted.as_ref().filter(|a| a.disaggregated) else {
        return Ok(());
    };
    let route = Arc::clone(&admitted.route);
    let Some(pool) = route.prefill.as_ref() else {
        return Ok(());
    };
    let pd = ctx.pd.get_or_insert_with(Default::default);
    pd.prefill_target = None;
    match pool.protocol {
        PdProtocol::Vllm => vllm(state, session, ctx, &route, pool).await,
        PdProtocol::Sglang => sglang(state, session, ctx, &route, pool).await,
    }
}

async fn vllm(
    state: &GatewayState,
    session: &Session,
    ctx: &mut RequestCtx,
    route: &Route,
    pool: &PrefillPool,
) -> Result<(), Box<Error>> {
    let reusable = ctx
        .pd
        .as_mut()
        .filter(|pd| pd.handle_unused)
        .and_then(|pd| pd.handle.take());
    let params = match reusable {
        Some(params) => params,
        None => prefill_for_handle(state, session, ctx, route, pool).await?,
    };
    let Some(attempt) = ctx.attempt.as_mut() else {
        return Ok(());
    };
    attempt.body = AttemptBody::Whole(with_fields(
        &attempt.body.whole(),
        [("kv_transfer_params", params.clone())],
    ));
    // The decode attempt starts now: its engine's time to first byte and
    // its span leave the prefill leg out.
    attempt.started = Instant::now();
    if let Some(pd) = ctx.pd.as_mut() {
        pd.handle = Some(params).filter(|p| !p.is_null());
        pd.handle_unused = false;
    }
    Ok(())
}

/// Sends prefill legs until one engine answers with `kv_transfer_params`
/// or the prefill pool has nothing left to try.
async fn prefill_for_handle(
    state: &GatewayState,
    session: &Session,
    ctx: &mut RequestCtx,
    route: &Route,
    pool: &PrefillPool,
) -> Result<Value, Box<Error>> {
    let max_legs = ctx.snapshot.limits.max_retries + 1;
    let mut last_failure: Option<String> = None;
    for _ in 0..max_legs {
        let Some(leg) = claim(ctx, pool) else {
            break;
        };
        let target = &pool.route.targets[leg.index];
        let Some(admitted) = ctx.admitted.as_ref() else {
            break;
        };
        let body = remote_decode_body(
            &body::body_for(&admitted.body, &admitted.request, target, false).whole(),
        );
        let started = Instant::now();
        let headers = leg_headers(ctx, target, started);
        let path = leg_path(session, target);
        let mut leg = leg;
        let answer = crate::http_client::call_pooled(
            &state.prefill_connector,
            &leg_peer(target),
            Method::POST,
            &path,
            &headers,
            Some(body),
            MAX_PREFILL_ANSWER,
            PREFILL_KEEPALIVE,
        )
        .await;
        let elapsed = started.elapsed();
        if let Some(failure) = failure_of(&answer) {
            last_failure = Some(leg_failed(state, ctx, pool, &mut leg, &failure));
            continue;
        }
        let Ok((status, answer)) = answer else {
            continue;
        };
        target_succeeded(target, &mut leg.ticket, &state.metrics);
        end_leg(ctx, Some(status), None);
        if !(200..300).contains(&status) {
            // The engine refused the request itself (a 4xx): the decode
            // engine answers it whole, so the client gets the engine's own
            // error.
            return Ok(Value::Null);
        }
        target
            .metrics
            .upstream_latency
            .observe(elapsed.as_secs_f64());
        let params = serde_json::from_slice::<Value>(&answer)
            .ok()
            .map(|mut v| v["kv_transfer_params"].take())
            .filter(Value::is_object);
        if let Some(params) = params {
            learn(ctx, pool, leg.index);
            return Ok(params);
        }
        // An engine without a KV connector answers the prefill as a whole
        // request: a configuration fault, not a sick engine.
        let why = format!(
            "{}: answered the prefill without kv_transfer_params (is its KV connector configured?)",
            target.label
        );
        log::warn!("{why}");
        exclude(ctx, leg.index);
        last_failure = Some(why);
    }
    pool.counts.prefill_failed.inc();
    Err(refuse(ctx, route, pool, last_failure))
}

/// Sends the prefill request, with a fresh bootstrap room, to a prefill
/// engine; once it is written there, the decode attempt follows with the
/// same room. A prefill engine that cannot be reached is retried around
/// like a vLLM prefill leg. Its answer comes only after the decode engine
/// has fetched the KV cache, so it is read and recorded in the background.
async fn sglang(
    state: &GatewayState,
    session: &Session,
    ctx: &mut RequestCtx,
    route: &Route,
    pool: &PrefillPool,
) -> Result<(), Box<Error>> {
    let max_legs = ctx.snapshot.limits.max_retries + 1;
    let mut last_failure: Option<String> = None;
    for _ in 0..max_legs {
        let Some(mut leg) = claim(ctx, pool) else {
            break;
        };
        let target = &pool.route.targets[leg.index];
        let provider = &target.provider;
        let bootstrap = [
            (
                "bootstrap_host",
                Value::from(provider.host.trim_matches(['[', ']'])),
            ),
            (
                "bootstrap_port",
                Value::from(provider.bootstrap_port.unwrap_or_default()),
            ),
            ("bootstrap_room", Value::from(fresh_room())),
        ];
        let Some(admitted) = ctx.admitted.as_ref() else {
            break;
        };
        let body = with_fields(
            &body::body_for(&admitted.body, &admitted.request, target, false).whole(),
            bootstrap.clone(),
        );
        let started = Instant::now();
        let headers = leg_headers(ctx, target, started);
        let path = leg_path(session, target);
        let sent = crate::http_client::send(
            &state.prefill_connector,
            &leg_peer(target),
            Method::POST,
            &path,
            &headers,
            Some(body),
        )
        .await;
        let failure = match sent {
            Ok(mut prefill) => {
                // Its span covers the sending; the answer is read unwatched.
                end_leg(ctx, None, None);
                // The prefill engine will hold the prompt's KV blocks.
                learn(ctx, pool, leg.index);
                if let Some(attempt) = ctx.attempt.as_mut() {
                    attempt.body =
                        AttemptBody::Whole(with_fields(&attempt.body.whole(), bootstrap));
                }
                let metrics = Arc::clone(&state.metrics);
                let snapshot = Arc::clone(&ctx.snapshot);
                let prefill_route = Arc::clone(&pool.route);
                tokio::spawn(async move {
                    let answer =
                        crate::http_client::receive(&mut prefill, MAX_PREFILL_ANSWER).await;
                    let target = &prefill_route.targets[leg.index];
                    match failure_of(&answer) {
                        Some(failure) => {
                            target_failed(
                                target,
                                &mut leg.ticket,
                                &snapshot.limits,
                                &metrics,
                                &failure,
                            );
                        }
                        None => {
                            target_succeeded(target, &mut leg.ticket, &metrics);
                            target
                                .metrics
                                .upstream_latency
                                .observe(started.elapsed().as_secs_f64());
                        }
                    }
                    // The leg's in-flight slot goes with it.
                    drop(leg);
                });
                return Ok(());
            }
            Err(e) if e.connect => Failure::Connect(e.message),
            Err(e) => Failure::Stream(e.message),
        };
        last_failure = Some(leg_failed(state, ctx, pool, &mut leg, &failure));
    }
    pool.counts.prefill_failed.inc();
    Err(refuse(ctx, route, pool, last_failure))
}

/// What an answered leg teaches its engine: a failure for what the breaker
/// and parking count (5xx, 429, 408, no answer), nothing for the rest.
fn failure_of(answer: &Result<(u16, Bytes), crate::http_client::CallError>) -> Option<Failure> {
    match answer {
        Ok((status, _)) if *status >= 500 || *status == 429 || *status == 408 => {
            Some(Failure::Status {
                status: *status,
                retry_after: None,
            })
        }
        Ok(_) => None,
        Err(e) if e.connect => Some(Failure::Connect(e.message.clone())),
        Err(e) => Some(Failure::Stream(e.message.clone())),
    }
}

/// A prefill leg failed: its span ends, its engine learns it (counters,
/// parking, breaker) and is kept from this request's later legs, and the
/// retry is counted. Returns the failure as the final error names it.
fn leg_failed(
    state: &GatewayState,
    ctx: &mut RequestCtx,
    pool: &PrefillPool,
    leg: &mut Leg,
    failure: &Failure,
) -> String {
    end_leg(ctx, None, Some(failure.reason().label()));
    exclude(ctx, leg.index);
    let described = target_failed(
        &pool.route.targets[leg.index],
        &mut leg.ticket,
        &ctx.snapshot.limits,
        &state.metrics,
        failure,
    );
    state
        .metrics
        .record_retry(&pool.route.metrics.label, failure.reason());
    described
}

/// Keeps a prefill target whose leg failed from this request's later legs.
fn exclude(ctx: &mut RequestCtx, index: usize) {
    if let Some(pd) = ctx.pd.as_mut() {
        pd.tried.insert(index);
    }
}

/// Teaches the prefill pool's balancer where the request's prompt is now
/// cached (`cache_aware`'s tree, a session's home), as a served decode
/// attempt teaches the route's.
fn learn(ctx: &RequestCtx, pool: &PrefillPool, index: usize) {
    if let Some(admitted) = &ctx.admitted {
        pool.route
            .balancer
            .observe(index, &admitted.route_context(crate::clock::now_ms()));
    }
}

/// A prefill target claimed for one leg: its breaker admission and its
/// in-flight slot, released when the leg ends.
struct Leg {
    index: usize,
    ticket: BreakerTicket,
    _in_flight: crate::tracker::InFlightGuard,
}

/// Picks and claims a prefill target the request has not tried, as
/// `dispatch.rs` does for the decode pool; notes it on the request.
fn claim(ctx: &mut RequestCtx, pool: &PrefillPool) -> Option<Leg> {
    let admitted = ctx.admitted.as_ref()?;
    let prefill = &pool.route;
    let now_ms = crate::clock::now_ms();
    let loads: SmallVec<[u64; 16]> = prefill
        .targets
        .iter()
        .map(|t| t.stats.combined_load(now_ms))
        .collect();
    let limits = &ctx.snapshot.limits;
    let tried = ctx
        .pd
        .as_ref()
        .map(|pd| pd.tried.clone())
        .unwrap_or_default();
    let mut claimed = None;
    for _ in 0..=prefill.targets.len() {
        let mut rule = Eligibility::new(prefill, ctx.caller.as_deref(), &tried, limits, now_ms);
        let Some((index, admission)) = select::admitted_pick(
            prefill,
            &mut rule,
            &admitted.route_context(now_ms),
            &loads,
            &limits.breaker,
        ) else {
            break;
        };
        let Some((ticket, in_flight)) = select::claim(prefill, index, admission, &rule) else {
            continue;
        };
        claimed = Some(Leg {
            index,
            ticket,
            _in_flight: in_flight,
        });
        break;
    }
    let pd = ctx.pd.get_or_insert_with(Default::default);
    if let Some(leg) = &claimed {
        pd.prefill_target = Some(prefill.targets[leg.index].label.clone());
    }
    claimed
}

/// The prefill leg's headers: what the decode attempt's carry that the
/// engine reads (its address, credentials, the request id both legs share)
/// and, when the request is traced, the leg's span (started at `started`)
/// as the engine's parent.
fn leg_headers(
    ctx: &mut RequestCtx,
    target: &Target,
    started: Instant,
) -> Vec<(HeaderName, HeaderValue)> {
    let provider = &target.provider;
    let mut headers = vec![
        (header::HOST, provider.host_header.clone()),
        (
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        ),
    ];
    if let Some(value) = &provider.authorization {
        headers.push((header::AUTHORIZATION, value.clone()));
    }
    if let Some(id) = &ctx.request_id {
        headers.push((super::REQUEST_ID_HEADER.clone(), id.clone()));
    }
    if let Some(trace) = ctx.trace.as_mut() {
        let (traceparent, tracestate) =
            trace.begin_attempt(started, &target.metrics.label, &provider.slug, "prefill");
        headers.push((HeaderName::from_static("traceparent"), traceparent));
        if let Some(tracestate) = tracestate {
            headers.push((HeaderName::from_static("tracestate"), tracestate));
        }
    }
    headers
}

/// Ends the prefill leg's span.
fn end_leg(ctx: &mut RequestCtx, status: Option<u16>, failure: Option<&str>) {
    if let Some(trace) = ctx.trace.as_mut() {
        trace.end_attempt(status, None, failure);
    }
}

/// The prefill engine's peer: its connect timeout, and the first-byte
/// timeout on every read and write (the whole answer is one token).
fn leg_peer(target: &Target) -> pingora::upstreams::peer::HttpPeer {
    let mut peer = *target.peer();
    peer.options.write_timeout = peer.options.read_timeout;
    peer
}

/// The client's path on the prefill engine (under its base URL's prefix).
fn leg_path(session: &Session, target: &Target) -> String {
    let original = &session.req_header().uri;
    let path = original.path_and_query().map_or("/", |p| p.as_str());
    format!("{}{path}", target.provider.path_prefix)
}

/// The `kv_transfer_params` that ask a vLLM engine to prefill for a remote
/// decode (vLLM's own proxy sends exactly these).
fn remote_decode() -> Value {
    serde_json::json!({
        "do_remote_decode": true,
        "do_remote_prefill": false,
        "remote_engine_id": null,
        "remote_block_ids": null,
        "remote_host": null,
        "remote_port": null,
    })
}

/// The prefill request vLLM's own proxy sends: one token, not streamed,
/// asking for a remote decode (`min_tokens` and the stream options go:
/// they contradict that).
fn remote_decode_body(body: &Bytes) -> Bytes {
    edit(body, |object| {
        for name in ["stream_options", "min_tokens", "min_completion_tokens"] {
            object.remove(name);
        }
        object.insert("stream".into(), Value::Bool(false));
        object.insert("max_tokens".into(), Value::from(1));
        if object.contains_key("max_completion_tokens") {
            object.insert("max_completion_tokens".into(), Value::from(1));
        }
        object.insert("kv_transfer_params".into(), remote_decode());
    })
}

/// `body` with `set` written over; a `Null` value is left out.
fn with_fields<const N: usize>(body: &Bytes, set: [(&str, Value); N]) -> Bytes {
    if set.iter().all(|(_, v)| v.is_null()) {
        return body.clone();
    }
    edit(body, |object| {
        for (name, value) in set {
            if !value.is_null() {
                object.insert(name.to_owned(), value);
            }
        }
    })
}

/// `body` (a JSON object) changed by `change`. The body was parsed at
/// admission, so it is an object; should it not be, it goes as it was.
fn edit(body: &Bytes, change: impl FnOnce(&mut Map<String, Value>)) -> Bytes {
    let Ok(mut object) = serde_json::from_slice::<Map<String, Value>>(body) else {
        return body.clone();
    };
    change(&mut object);
    serde_json::to_vec(&object).map_or_else(|_| body.clone(), Bytes::from)
}

/// A fresh SGLang bootstrap room: unique in this process (a counter),
/// unlikely to meet another node's (a per-process random key), below 2^63
/// as SGLang's rooms are.
fn fresh_room() -> u64 {
    static KEY: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let key = *KEY.get_or_init(|| RandomState::new().build_hasher().finish());
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    xxhash_rust::xxh3::xxh3_64_with_seed(&count.to_le_bytes(), key) >> 1
}

/// The error of a request whose prefill leg found no engine: the last
/// failure when a leg was sent, else why none was eligible.
fn refuse(
    ctx: &mut RequestCtx,
    route: &Route,
    pool: &PrefillPool,
    last_failure: Option<String>,
) -> Box<Error> {
    let error = match last_failure {
        Some(last) => GatewayError::UpstreamFailed {
            model: route.model.clone(),
            last: format!("prefill: {last}"),
        },
        None => {
            let now_ms = crate::clock::now_ms();
            let tried = ctx
                .pd
                .as_ref()
                .map(|pd| pd.tried.clone())
                .unwrap_or_default();
            let why = Eligibility::new(
                &pool.route,
                ctx.caller.as_deref(),
                &tried,
                &ctx.snapshot.limits,
                now_ms,
            )
            .why_none();
            GatewayError::NoEligibleTarget {
                model: route.model.clone(),
                reason: format!("prefill pool: {why}"),
            }
        }
    };
    let e = error_with(
        ErrorType::HTTPStatus(error.status()),
        error.to_string(),
        false,
    );
    ctx.error = Some(error);
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefill_request_is_one_token_unstreamed_for_a_remote_decode() {
        let body = Bytes::from_static(
            br#"{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":50,"max_completion_tokens":50,"min_tokens":5}"#,
        );
        let out: Value = serde_json::from_slice(&remote_decode_body(&body)).unwrap();
        assert_eq!(
            out,
            serde_json::json!({
                "model": "m", "stream": false, "max_tokens": 1, "max_completion_tokens": 1,
                "kv_transfer_params": remote_decode(),
            })
        );
        // No max_completion_tokens is added where there was none.
        let plain = Bytes::from_static(br#"{"model":"m"}"#);
        let out: Value = serde_json::from_slice(&remote_decode_body(&plain)).unwrap();
        assert!(out.get("max_completion_tokens").is_none(), "{out}");
    }

    #[test]
    fn a_null_field_leaves_the_body_as_it_was() {
        let body = Bytes::from_static(br#"{"model":"m"}"#);
        let out = with_fields(&body, [("kv_transfer_params", Value::Null)]);
        assert_eq!(out, body);
        let out = with_fields(&body, [("bootstrap_room", Value::from(7))]);
        assert_eq!(
            serde_json::from_slice::<Value>(&out).unwrap(),
            serde_json::json!({"model": "m", "bootstrap_room": 7})
        );
    }

    #[test]
    fn rooms_are_distinct_and_below_two_to_the_63() {
        let rooms: std::collections::HashSet<u64> = (0..1000).map(|_| fresh_room()).collect();
        assert_eq!(rooms.len(), 1000);
        assert!(rooms.iter().all(|&r| r < 1 << 63));
    }
}
