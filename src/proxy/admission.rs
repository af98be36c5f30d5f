//! Admission: everything `request_filter` decides before a request may be
//! routed, in the order that makes a refusal cheapest.
//!
//! 1. The header: its size (`server.max_request_header_bytes`, 431), the
//!    endpoint and method (404, 405).
//! 2. The caller: its key (401), then its rate limits (429), before any
//!    body byte is read: in Redis when the fleet shares them
//!    (`rate_limit/shared.rs`, one round trip), else on this node.
//! 3. The body: media type (415), size and pace (413, 408), JSON (400).
//! 4. The address: what `model` names, checked against the key before any
//!    state is built for it (404, 403); then its route and whether the route
//!    serves the endpoint (404). Only then is the conversation read: its
//!    digest, which needs all of it decoded, only for a route whose
//!    strategy reads it. Last, the request's routing token ids from the
//!    route's tokenizer (`tokenization.rs`).

use std::sync::Arc;

use bytes::Bytes;

use http::header;
use pingora::http::RequestHeader;
use pingora::proxy::Session;

use super::body::{self, ReadBody};
use super::ctx::{Admitted, RequestCtx};
use super::SESSION_HEADER;
use crate::auth::{bearer_token, Caller};
use crate::error::{GatewayError, LimitScope};
use crate::learned::Learned;
use crate::metrics::Metrics;
use crate::openai::{
    parse_form_request, parse_token_ids, read_prescanned, read_request, response_id, Digest,
    Endpoint, ParsedRequest, RequestEnvelope, RequestError, TOKEN_IDS_HEADER,
};
use crate::rate_limit::{ConcurrencySlot, KeyLimits, Limited, SharedAdmission, SharedStore};
use crate::response_homes::ResponseHomes;
use crate::snapshot::{Refusal, Snapshot};
use crate::tokenization::fill_token_ids;

/// What follows admission.
pub enum Next {
    /// Routed: `ctx.admitted` is set.
    Route,
    /// `GET /v1/models`, which the gateway answers itself, for this caller.
    ListModels(Arc<Caller>),
}

/// Runs the steps of the module docs; `Err` is answered to the client as
/// is. Sets `ctx.caller` as soon as it is known and `ctx.key_slot` when the
/// key's concurrency limit applies.
pub async fn admit(
    session: &mut Session,
    ctx: &mut RequestCtx,
    metrics: &Metrics,
    learned: &Learned,
) -> Result<Next, GatewayError> {
    let homes = &*learned.response_homes;
    let snapshot = Arc::clone(&ctx.snapshot);
    let endpoint = check_header(session.req_header(), &snapshot)?;
    let caller = authenticate(session.req_header(), &snapshot)?;
    // Known from here on, also to the access log of a refused request.
    ctx.caller = Some(Arc::clone(&caller));
    if endpoint == Endpoint::Models {
        return Ok(Next::ListModels(caller));
    }
    // Before the body is read: a limited caller costs no body read.
    if let Some(limits) = caller.limits() {
        match key_limits(limits, &caller.name, &learned.rate_limits.shared, metrics).await {
            Ok(slot) => ctx.key_slot = Some(slot),
            Err((limited, scope)) => {
                metrics.record_rate_limited(&caller.name, limited.label());
                return Err(GatewayError::limited(&caller.name, limited, scope));
            }
        }
    }
    if endpoint == Endpoint::ResponseById {
        return stored_response(session.req_header(), ctx, homes, &caller);
    }

    let header_token_ids = match session.req_header().headers.get(&TOKEN_IDS_HEADER) {
        Some(value) => Some(parse_token_ids(value.as_bytes())?),
        None => None,
    };
    let boundary = body::check_content_type(session, endpoint)?;
    let body = body::read_body(session, snapshot.limits.max_body_bytes, boundary.is_none()).await?;
    let read = match (boundary, &body) {
        (Some(boundary), _) => Read::Parsed(parse_form_request(body.bytes(), &boundary)?),
        (None, ReadBody::Prescanned(prescanned)) => {
            Read::Envelope(read_prescanned(endpoint, prescanned)?)
        }
        (None, ReadBody::Bytes(bytes)) => Read::Envelope(read_request(endpoint, bytes)?),
    };

    let model = read.model();
    let Some(address) = snapshot.address(model) else {
        return Err(GatewayError::UnknownModel {
            model: model.to_owned(),
        });
    };
    if let Err(refusal) = address.admits(&caller) {
        let key = caller.name.clone();
        let model = model.to_owned();
        return Err(match refusal {
            Refusal::Model => GatewayError::ModelNotAllowed { key, model },
            Refusal::Provider => GatewayError::NoAllowedProvider { key, model },
        });
    }
    let route = snapshot.route(&address, crate::clock::now_ms());
    if !route.endpoints.allows(endpoint) {
        return Err(GatewayError::EndpointClosed {
            model: model.to_owned(),
            endpoint: endpoint.as_str(),
        });
    }
    let session_key = session
        .req_header()
        .headers
        .get(&SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_string);
    // The digest costs the whole conversation decoded; only a hash ring
    // keyed by the conversation reads it.
    let digest = if session_key.is_none() && route.reads_prompt_digest() {
        Digest::Kept
    } else {
        Digest::Skipped
    };
    let mut request = read.parse(digest);
    let body = body.into_bytes();
    // Caller-supplied token ids: the header wins over an integer prompt.
    if header_token_ids.is_some() {
        request.token_ids = header_token_ids.map(Arc::from);
    }
    // A continuation goes where the response it continues is stored.
    let preferred = request
        .previous_response_id
        .as_deref()
        .and_then(|id| homes.get(id))
        .and_then(|home| {
            route.targets.iter().position(|t| {
                *t.id.provider == *home.provider && *t.id.model == *home.upstream_model
            })
        });
    let source = fill_token_ids(route.tokenizer.as_ref(), endpoint, &body, &mut request).await;
    Metrics::record_token_source(&route.metrics, source);
    let priority = priority(session.req_header(), &caller)?;
    // Last, once nothing can refuse the request: it is counted here.
    let disaggregated = route
        .prefill
        .as_ref()
        .is_some_and(|pool| splits(pool, endpoint, &request));
    ctx.admitted = Some(Admitted {
        route,
        request,
        body,
        session_key,
        priority,
        preferred,
        response_id: None,
        learns_response: endpoint == Endpoint::Responses,
        reads_usage: endpoint.reports_usage(),
        disaggregated,
    });
    Ok(Next::Route)
}

/// A body as far as admission reads it before the route is known.
enum Read<'a> {
    /// A form (an audio upload): read whole, it has no conversation.
    Parsed(ParsedRequest),
    /// JSON: the envelope, its conversation read once the route says
    /// whether its digest is needed.
    Envelope(RequestEnvelope<'a>),
}

impl Read<'_> {
    fn model(&self) -> &str {
        match self {
            Read::Parsed(request) => &request.model,
            Read::Envelope(envelope) => envelope.model(),
        }
    }

    fn parse(self, digest: Digest) -> ParsedRequest {
        match self {
            Read::Parsed(request) => request,
            Read::Envelope(envelope) => envelope.parse(digest),
        }
    }
}

/// Whether a request on a disaggregated route is prefilled on its prefill
/// pool: a chat or completions request (what vLLM and SGLang split) whose
/// prompt reaches `min_prefill_tokens`. Its tokens are the routing token
/// ids where it has them (the caller's, or the route tokenizer's, bounded
/// by its budget), else its text at 4 bytes a token. Counted either way.
fn splits(
    pool: &crate::snapshot::PrefillPool,
    endpoint: Endpoint,
    request: &ParsedRequest,
) -> bool {
    let generation = matches!(endpoint, Endpoint::ChatCompletions | Endpoint::Completions);
    let tokens = request
        .token_ids
        .as_ref()
        .map_or(request.prompt_len / 4, |ids| ids.len()) as u64;
    let split = generation && tokens >= pool.min_prefill_tokens;
    if split {
        pool.counts.split.inc();
    } else {
        pool.counts.decode_only.inc();
    }
    split
}

/// Step 2's limits: in Redis while the fleet shares them there (one round
/// trip), else, or when Redis does not answer, on this node's counters.
async fn key_limits(
    limits: &KeyLimits,
    key: &str,
    shared: &Arc<SharedStore>,
    metrics: &Metrics,
) -> Result<ConcurrencySlot, (Limited, LimitScope)> {
    if shared.in_use() {
        match shared.admit(key, limits.quota(), metrics).await {
            SharedAdmission::Admitted(remote) => {
                return Ok(limits.count_admitted(crate::clock::now_ms(), remote))
            }
            SharedAdmission::Refused(limited) => return Err((limited, LimitScope::Fleet)),
            SharedAdmission::Local => {}
        }
    }
    limits
        .admit(crate::clock::now_ms())
        .map_err(|limited| (limited, LimitScope::Node))
}

/// `/v1/responses/{id}` and its sub-resources: to the engine that answered
/// `id` (learned from the answer, `response_homes.rs`), through its pinned
/// provider address. The caller's key must allow the model the response
/// was asked for and the provider holding it. Nothing to read or rewrite.
fn stored_response(
    request: &RequestHeader,
    ctx: &mut RequestCtx,
    homes: &ResponseHomes,
    caller: &Caller,
) -> Result<Next, GatewayError> {
    let id = response_id(request.uri.path()).unwrap_or_default();
    let unknown = || GatewayError::UnknownResponse { id: id.to_string() };
    let home = homes.get(id).ok_or_else(unknown)?;
    if !caller.may_use_model(&home.model) || !caller.may_use_provider(&home.provider) {
        return Err(GatewayError::ModelNotAllowed {
            key: caller.name.clone(),
            model: home.model.to_string(),
        });
    }
    let name = format!("{}/{}", home.provider, home.upstream_model);
    let snapshot = Arc::clone(&ctx.snapshot);
    // The provider left the configuration: nothing holds the response here.
    let address = snapshot.address(&name).ok_or_else(unknown)?;
    let route = snapshot.route(&address, crate::clock::now_ms());
    ctx.admitted = Some(Admitted {
        route,
        request: ParsedRequest::bodiless(&home.upstream_model),
        body: Bytes::new(),
        session_key: None,
        priority: caller.priority,
        preferred: None,
        response_id: Some(id.to_string()),
        learns_response: false,
        reads_usage: false,
        disaggregated: false,
    });
    Ok(Next::Route)
}

/// Step 1: the header's size, then what it asks for.
fn check_header(request: &RequestHeader, snapshot: &Snapshot) -> Result<Endpoint, GatewayError> {
    let limit = snapshot.config.server.max_request_header_bytes;
    let size = request_header_bytes(request);
    if size > limit {
        return Err(GatewayError::HeaderTooLarge { size, limit });
    }
    let path = request.uri.path();
    let Some(endpoint) = Endpoint::from_path(path) else {
        return Err(GatewayError::UnknownEndpoint {
            method: request.method.to_string(),
            path: path.to_string(),
        });
    };
    if !endpoint.allows(&request.method, path) {
        return Err(GatewayError::MethodNotAllowed {
            method: request.method.to_string(),
            path: path.to_string(),
            allowed: endpoint.method_name(path),
        });
    }
    Ok(endpoint)
}

/// The size of a request header as it came on the wire (HTTP/1): request
/// line and every field line, CRLFs included. For HTTP/2 the same sum over
/// the decoded fields, so one limit means the same on both.
fn request_header_bytes(request: &RequestHeader) -> usize {
    // "METHOD SP path SP HTTP/1.1 CRLF", then "name: value CRLF" per field.
    let line = request.method.as_str().len() + 1 + request.raw_path().len() + " HTTP/1.1\r\n".len();
    request.headers.iter().fold(line, |sum, (name, value)| {
        sum + name.as_str().len() + value.len() + 4
    })
}

/// Request header with which a request lowers its own flow-control
/// priority below its key's.
pub static PRIORITY_HEADER: header::HeaderName =
    header::HeaderName::from_static("x-rolter-priority");

/// The request's priority band: its key's, or lower where `x-rolter-priority`
/// asks (a request cannot raise itself above its key).
fn priority(request: &RequestHeader, caller: &Caller) -> Result<i32, GatewayError> {
    let Some(value) = request.headers.get(&PRIORITY_HEADER) else {
        return Ok(caller.priority);
    };
    let text = String::from_utf8_lossy(value.as_bytes());
    let asked: i32 = text
        .trim()
        .parse()
        .map_err(|_| RequestError::InvalidPriority(text.to_string()))?;
    Ok(asked.min(caller.priority))
}

/// Anthropic's clients send their key here rather than as a bearer token.
/// Parsed once: a name given as `&str` is parsed on every lookup.
pub static X_API_KEY: header::HeaderName = header::HeaderName::from_static("x-api-key");

/// Step 2: who is calling: `Authorization: Bearer`, else `x-api-key`.
fn authenticate(request: &RequestHeader, snapshot: &Snapshot) -> Result<Arc<Caller>, GatewayError> {
    let token = request
        .headers
        .get(header::AUTHORIZATION)
        .and_then(|v| bearer_token(v.as_bytes()))
        .or_else(|| {
            let key = request.headers.get(&X_API_KEY)?.as_bytes().trim_ascii();
            (!key.is_empty()).then_some(key)
        });
    let caller = token.and_then(|t| snapshot.api_keys.authenticate(t));
    match (caller, snapshot.limits.require_api_key) {
        (Some(caller), _) => Ok(caller),
        (None, false) => Ok(Caller::anonymous()),
        (None, true) if token.is_none() => Err(GatewayError::MissingApiKey),
        (None, true) => Err(GatewayError::InvalidApiKey),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_priority_header_lowers_the_keys_priority_never_raises_it() {
        let caller = Caller::anonymous();
        let mut request = RequestHeader::build("POST", b"/v1/chat/completions", None).unwrap();
        assert_eq!(priority(&request, &caller).unwrap(), 0);
        request.insert_header(&PRIORITY_HEADER, "-2").unwrap();
        assert_eq!(priority(&request, &caller).unwrap(), -2);
        request.insert_header(&PRIORITY_HEADER, " 5 ").unwrap();
        assert_eq!(priority(&request, &caller).unwrap(), 0, "not above the key");
        request.insert_header(&PRIORITY_HEADER, "high").unwrap();
        let error = priority(&request, &caller).unwrap_err();
        assert_eq!(error.status(), 400);
        assert!(error.to_string().contains("x-rolter-priority"), "{error}");
    }

    #[test]
    fn header_size_counts_the_request_line_and_every_field_line() {
        let mut request = RequestHeader::build("POST", b"/v1/chat/completions", None).unwrap();
        let bare = request_header_bytes(&request);
        // "POST /v1/chat/completions HTTP/1.1\r\n"
        assert_eq!(bare, 36);
        request.insert_header("x-padding", "a".repeat(100)).unwrap();
        assert_eq!(request_header_bytes(&request), bare + 9 + 2 + 100 + 2);
    }
}
