//! Responses the gateway writes itself.

use bytes::Bytes;
use http::HeaderValue;
use pingora::http::ResponseHeader;
use pingora::proxy::Session;
use serde::Serialize;

use super::request_id::REQUEST_ID_HEADER;
use crate::auth::Caller;
use crate::error::GatewayError;
use crate::openai::Api;
use crate::snapshot::Snapshot;

/// Writes a complete JSON response, with the request's `x-request-id`
/// (`request_id`) and `Retry-After: retry_after_secs` when given. Write
/// errors mean the client is gone; they are logged at debug level because
/// nothing else can be done.
async fn write_json(
    session: &mut Session,
    request_id: HeaderValue,
    status: u16,
    body: Bytes,
    keepalive: bool,
    retry_after_secs: Option<u64>,
) {
    let header = ResponseHeader::build(status, Some(4)).and_then(|mut h| {
        h.insert_header(http::header::CONTENT_TYPE, "application/json")?;
        h.insert_header(http::header::CONTENT_LENGTH, body.len())?;
        h.insert_header_static(&REQUEST_ID_HEADER, request_id);
        if let Some(secs) = retry_after_secs {
            h.insert_header(http::header::RETRY_AFTER, secs)?;
        }
        Ok(h)
    });
    let header = match header {
        Ok(h) => h,
        Err(e) => {
            log::error!("building a {status} response failed: {e}");
            return;
        }
    };
    if !keepalive {
        session.set_keepalive(None);
    }
    let written = async {
        session
            .write_response_header(Box::new(header), false)
            .await?;
        session.write_response_body(Some(body), true).await
    };
    if let Err(e) = written.await {
        log::debug!("writing a {status} response failed: {e}");
    }
}

/// Answers an error in the shape of the API the request speaks (OpenAI's,
/// or Anthropic's on `/v1/messages`), with `Retry-After` when the error has
/// one (429). The connection is closed afterwards: part of the request body
/// may still be unread.
pub async fn error(session: &mut Session, request_id: HeaderValue, error: &GatewayError) {
    let retry_after = error.retry_after_secs();
    let api = Api::of_path(session.req_header().uri.path());
    write_json(
        session,
        request_id,
        error.status(),
        error.body_for(api),
        false,
        retry_after,
    )
    .await;
}

#[derive(Serialize)]
struct ModelList<'a> {
    object: &'static str,
    data: Vec<ModelCard<'a>>,
}

#[derive(Serialize)]
struct ModelCard<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    owned_by: &'static str,
}

/// `GET /v1/models`: the routes the caller may use, then the group
/// addresses of members that declare their model (a passthrough member
/// serves whatever the engine has, which rolter cannot list).
pub async fn models(
    session: &mut Session,
    request_id: HeaderValue,
    snapshot: &Snapshot,
    caller: &Caller,
    keepalive: bool,
) {
    let mut ids: Vec<String> = snapshot
        .routes()
        .iter()
        .filter(|r| caller.may_use_model(&r.model))
        .map(|r| r.model.clone())
        .collect();
    let mut groups: Vec<_> = snapshot
        .groups()
        .filter(|g| caller.may_use_model(&g.slug))
        .collect();
    groups.sort_by(|a, b| a.slug.cmp(&b.slug));
    for group in groups {
        for model in group.members.iter().filter_map(|m| m.model.as_deref()) {
            let address = format!("{}/{model}", group.slug);
            if !ids.contains(&address) {
                ids.push(address);
            }
        }
    }
    let list = ModelList {
        object: "list",
        data: ids
            .iter()
            .map(|id| ModelCard {
                id,
                object: "model",
                created: 0,
                owned_by: "rolter",
            })
            .collect(),
    };
    let body = Bytes::from(serde_json::to_vec(&list).unwrap_or_default());
    write_json(session, request_id, 200, body, keepalive, None).await;
}
