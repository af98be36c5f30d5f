//! The request body: read whole before routing, and rewritten per attempt.
//!
//! The body is read in `request_filter` because the route, the target and the
//! upstream model all depend on it. Pingora forwards such a pre-read body
//! through `request_body_filter(None, end_of_stream)` (see
//! `patches/README.md`), where the gateway hands over [`attempt_body`].

use std::ops::Range;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pingora::proxy::Session;

use crate::error::GatewayError;

/// Longest wait for the next piece of a request body.
pub const CLIENT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest time to receive a whole request body (32 MiB at ~300 KB/s): a
/// client that trickles its body (slowloris) is cut off here.
pub const CLIENT_BODY_DEADLINE: Duration = Duration::from_secs(120);

/// Checks the request's `Content-Type`: JSON, or none at all.
pub fn check_content_type(session: &Session) -> Result<(), GatewayError> {
    let Some(value) = session.req_header().headers.get(http::header::CONTENT_TYPE) else {
        return Ok(());
    };
    let media_type = value
        .to_str()
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if media_type == "application/json" || media_type.ends_with("+json") {
        Ok(())
    } else {
        Err(GatewayError::UnsupportedMediaType {
            content_type: String::from_utf8_lossy(value.as_bytes()).into_owned(),
        })
    }
}

/// Reads the whole request body, refusing more than `limit` bytes and
/// clients slower than [`CLIENT_BODY_READ_TIMEOUT`] / [`CLIENT_BODY_DEADLINE`].
pub async fn read_body(session: &mut Session, limit: usize) -> Result<Bytes, GatewayError> {
    session.set_read_timeout(Some(CLIENT_BODY_READ_TIMEOUT));
    match tokio::time::timeout(CLIENT_BODY_DEADLINE, read_whole_body(session, limit)).await {
        Ok(result) => result,
        Err(_) => Err(GatewayError::BodyTimeout {
            after: CLIENT_BODY_DEADLINE,
        }),
    }
}

async fn read_whole_body(session: &mut Session, limit: usize) -> Result<Bytes, GatewayError> {
    let declared = session
        .req_header()
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    if declared.is_some_and(|len| len > limit) {
        return Err(GatewayError::BodyTooLarge { limit });
    }
    if is_expect_continue(session) {
        session
            .as_downstream_mut()
            .write_continue_response()
            .await
            .map_err(|e| GatewayError::BodyRead(e.to_string()))?;
    }
    let mut body = BytesMut::with_capacity(declared.unwrap_or(0));
    loop {
        match session.read_request_body().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > limit {
                    return Err(GatewayError::BodyTooLarge { limit });
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body.freeze()),
            Err(e) if e.etype() == &pingora::ErrorType::ReadTimedout => {
                return Err(GatewayError::BodyTimeout {
                    after: CLIENT_BODY_READ_TIMEOUT,
                })
            }
            Err(e) => return Err(GatewayError::BodyRead(e.to_string())),
        }
    }
}

fn is_expect_continue(session: &Session) -> bool {
    session
        .req_header()
        .headers
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// The body to send to one target: the original when the target serves the
/// model under the same name, else the original with the `model` literal at
/// `model_span` replaced by `model_json` (a JSON string literal).
pub fn attempt_body(body: &Bytes, model_span: &Range<usize>, model_json: Option<&[u8]>) -> Bytes {
    let Some(model_json) = model_json else {
        return body.clone();
    };
    let mut out = BytesMut::with_capacity(body.len() - model_span.len() + model_json.len());
    out.extend_from_slice(&body[..model_span.start]);
    out.extend_from_slice(model_json);
    out.extend_from_slice(&body[model_span.end..]);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splices_the_model_literal_and_nothing_else() {
        let body = Bytes::from_static(br#"{"model":"chat","messages":[]}"#);
        let span = 9..15;
        assert_eq!(&body[span.clone()], br#""chat""#);
        let out = attempt_body(&body, &span, Some(br#""Qwen/Qwen3-8B""#));
        assert_eq!(&out[..], br#"{"model":"Qwen/Qwen3-8B","messages":[]}"#);
        assert_eq!(attempt_body(&body, &span, None), body);
    }
}
