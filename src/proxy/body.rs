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
use crate::openai::{form_boundary, Endpoint, ModelLiteral, Splice};
use crate::snapshot::Target;

/// Longest wait for the next piece of a request body.
pub const CLIENT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest time to receive a whole request body (32 MiB at ~300 KB/s): a
/// client that trickles its body (slowloris) is cut off here.
pub const CLIENT_BODY_DEADLINE: Duration = Duration::from_secs(120);

/// Checks the request's `Content-Type` against what `endpoint` reads: JSON
/// (or no type at all), or `multipart/form-data` with a boundary, which is
/// returned.
pub fn check_content_type(
    session: &Session,
    endpoint: Endpoint,
) -> Result<Option<Box<[u8]>>, GatewayError> {
    let value = session.req_header().headers.get(http::header::CONTENT_TYPE);
    if endpoint.takes_form() {
        return match value.and_then(|v| form_boundary(v.as_bytes())) {
            Some(boundary) => Ok(Some(boundary.into())),
            None => Err(GatewayError::UnsupportedMediaType {
                content_type: value.map_or_else(String::new, |v| {
                    String::from_utf8_lossy(v.as_bytes()).into_owned()
                }),
                expected: "multipart/form-data with a boundary",
            }),
        };
    }
    let Some(value) = value else {
        return Ok(None);
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
        Ok(None)
    } else {
        Err(GatewayError::UnsupportedMediaType {
            content_type: String::from_utf8_lossy(value.as_bytes()).into_owned(),
            expected: "application/json",
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
    // The pieces are kept as they arrive and joined once at the end: one
    // copy of the body (none when it came in one piece), where growing one
    // buffer copied a large body about twice. Nothing is reserved on the
    // client's word: a declared 32 MiB that never arrives holds nothing.
    let mut pieces = Vec::new();
    let mut received = 0;
    loop {
        match session.read_request_body().await {
            Ok(Some(piece)) => {
                received += piece.len();
                if received > limit {
                    return Err(GatewayError::BodyTooLarge { limit });
                }
                pieces.push(piece);
            }
            Ok(None) => return Ok(joined(pieces, received)),
            Err(e) if e.etype() == &pingora::ErrorType::ReadTimedout => {
                return Err(GatewayError::BodyTimeout {
                    after: CLIENT_BODY_READ_TIMEOUT,
                })
            }
            Err(e) => return Err(GatewayError::BodyRead(e.to_string())),
        }
    }
}

/// The body from its pieces (`len` bytes in all).
fn joined(mut pieces: Vec<Bytes>, len: usize) -> Bytes {
    if pieces.len() <= 1 {
        return pieces.pop().unwrap_or_default();
    }
    let mut body = BytesMut::with_capacity(len);
    for piece in &pieces {
        body.extend_from_slice(piece);
    }
    body.freeze()
}

fn is_expect_continue(session: &Session) -> bool {
    session
        .req_header()
        .headers
        .get(http::header::EXPECT)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"))
}

/// The body to send to one target: the original when the target serves the
/// model under the same name and nothing else changes, else the original
/// with the `model` literal at `model_span` replaced by `model_json` (a JSON
/// string literal) and `extra` applied (a splice that does not overlap it).
/// The client's body for `target`: its upstream model written over `model`
/// when it differs, and with `ask_usage` the gateway's usage request
/// spliced in (the decode or whole attempt; a prefill leg's answer is not
/// the client's, so it goes without).
pub fn body_for(admitted: &super::ctx::Admitted, target: &Target, ask_usage: bool) -> Bytes {
    let request = &admitted.request;
    let rewrite = (target.id.model != request.model).then(|| match request.model_literal {
        ModelLiteral::Json => &target.model_json[..],
        ModelLiteral::FormValue => target.id.model.as_bytes(),
    });
    let usage = request.usage_splice.as_ref().filter(|_| ask_usage);
    attempt_body(&admitted.body, &request.model_span, rewrite, usage)
}

pub fn attempt_body(
    body: &Bytes,
    model_span: &Range<usize>,
    model_json: Option<&[u8]>,
    extra: Option<&Splice>,
) -> Bytes {
    let model = model_json.map(|json| (model_span.clone(), json));
    let extra = extra.map(|s| (s.range.clone(), &s.bytes[..]));
    let mut splices: [Option<(Range<usize>, &[u8])>; 2] = [model, extra];
    if splices.iter().all(Option::is_none) {
        return body.clone();
    }
    splices.sort_by_key(|s| s.as_ref().map_or(usize::MAX, |(range, _)| range.start));
    let added: usize = splices
        .iter()
        .flatten()
        .map(|(r, b)| b.len().saturating_sub(r.len()))
        .sum();
    let mut out = BytesMut::with_capacity(body.len() + added);
    let mut at = 0;
    for (range, bytes) in splices.into_iter().flatten() {
        if range.start < at || range.end > body.len() {
            // Overlapping or out of the body: not produced by the parser.
            return body.clone();
        }
        out.extend_from_slice(&body[at..range.start]);
        out.extend_from_slice(bytes);
        at = range.end;
    }
    out.extend_from_slice(&body[at..]);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_join_in_order_and_one_piece_is_not_copied() {
        let one = Bytes::from_static(b"{\"model\":\"m\"}");
        let whole = joined(vec![one.clone()], one.len());
        assert_eq!(
            whole.as_ptr(),
            one.as_ptr(),
            "a body in one piece is copied"
        );
        assert_eq!(joined(Vec::new(), 0), Bytes::new());
        let pieces: Vec<Bytes> = ["{\"mo", "del\":", "\"m\"}"]
            .into_iter()
            .map(|s| Bytes::from_static(s.as_bytes()))
            .collect();
        let body = joined(pieces, 13);
        assert_eq!(&body[..], b"{\"model\":\"m\"}");
        assert_eq!(body.len(), 13);
    }

    #[test]
    fn splices_the_model_literal_and_nothing_else() {
        let body = Bytes::from_static(br#"{"model":"chat","messages":[]}"#);
        let span = 9..15;
        assert_eq!(&body[span.clone()], br#""chat""#);
        let out = attempt_body(&body, &span, Some(br#""Qwen/Qwen3-8B""#), None);
        assert_eq!(&out[..], br#"{"model":"Qwen/Qwen3-8B","messages":[]}"#);
        assert_eq!(attempt_body(&body, &span, None, None), body);
        let ask = Splice {
            range: 1..1,
            bytes: br#""stream_options":{"include_usage":true},"#.to_vec(),
        };
        let both = attempt_body(&body, &span, Some(br#""q""#), Some(&ask));
        assert_eq!(
            &both[..],
            br#"{"stream_options":{"include_usage":true},"model":"q","messages":[]}"#
        );
        assert_eq!(
            &attempt_body(&body, &span, None, Some(&ask))[..40],
            &both[..40]
        );
    }
}
