//! The request body: read whole before routing, and rewritten per attempt.
//!
//! The body is read in `request_filter` because the route, the target and the
//! upstream model all depend on it. Pingora forwards such a pre-read body
//! through `request_body_filter(None, end_of_stream)` (see
//! `patches/README.md`), where the gateway hands over [`attempt_body`]; a
//! large body goes to an HTTP/1.x engine in parts instead, its splices
//! between slices of the client's buffer (`ProxyHttp::request_body_parts`).

use std::ops::Range;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pingora::proxy::Session;

use crate::error::GatewayError;
use crate::openai::{form_boundary, Endpoint, ModelLiteral, ParsedRequest, Splice};
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
    // buffer copied a large body about twice (the patched Pingora hands
    // large pieces over uncopied). Nothing is reserved on the
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
            Ok(None) => return Ok(joined(&pieces, received)),
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
fn joined(pieces: &[Bytes], len: usize) -> Bytes {
    match pieces {
        [] => Bytes::new(),
        [one] => one.clone(),
        _ => {
            let mut body = BytesMut::with_capacity(len);
            for piece in pieces {
                body.extend_from_slice(piece);
            }
            body.freeze()
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

/// A body past this is spliced as slices of the client's buffer rather
/// than copied: below it the copy costs less than handing Pingora several
/// pieces (a chat request is a few KiB; a 4 MiB one was copied whole).
pub const SPLICE_IN_PLACE_BYTES: usize = 64 * 1024;

/// What an attempt sends upstream: the client's body with its splices made.
#[derive(Debug, Clone)]
pub enum AttemptBody {
    /// One buffer: the client's own when nothing changes, else a copy.
    Whole(Bytes),
    /// Slices of the client's buffer with the splices between them, in
    /// order (a large body, see [`SPLICE_IN_PLACE_BYTES`]).
    Parts(Vec<Bytes>),
}

impl AttemptBody {
    pub fn len(&self) -> usize {
        match self {
            AttemptBody::Whole(body) => body.len(),
            AttemptBody::Parts(parts) => parts.iter().map(Bytes::len).sum(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The body in one buffer: for an upstream Pingora cannot hand parts
    /// to (HTTP/2), and for the rewrites that re-encode it (a prefill leg's
    /// fields). Parts are joined, a copy.
    pub fn whole(&self) -> Bytes {
        match self {
            AttemptBody::Whole(body) => body.clone(),
            AttemptBody::Parts(parts) => joined(parts, self.len()),
        }
    }

    /// The parts to hand Pingora (`ProxyHttp::request_body_parts`), when
    /// the body is in parts; clones of the slices, not of the bytes.
    pub fn parts(&self) -> Option<Vec<Bytes>> {
        match self {
            AttemptBody::Whole(_) => None,
            AttemptBody::Parts(parts) => Some(parts.clone()),
        }
    }
}

/// The client's `body` for `target`: its upstream model written over `model`
/// when it differs, and with `ask_usage` the gateway's usage request
/// spliced in (the decode or whole attempt; a prefill leg's answer is not
/// the client's, so it goes without).
pub fn body_for(
    body: &Bytes,
    request: &ParsedRequest,
    target: &Target,
    ask_usage: bool,
) -> AttemptBody {
    let rewrite = (target.id.model != request.model).then(|| match request.model_literal {
        ModelLiteral::Json => &target.model_json[..],
        ModelLiteral::FormValue => target.id.model.as_bytes(),
    });
    let usage = request.usage_splice.as_ref().filter(|_| ask_usage);
    attempt_body(body, &request.model_span, rewrite, usage)
}

/// `body` with the `model` literal at `model_span` replaced by `model_json`
/// (a JSON string literal) and `extra` applied (a splice that does not
/// overlap it). Unchanged, or changed in ways that overlap or leave the
/// body (never produced by the parser), it is the client's buffer itself.
pub fn attempt_body(
    body: &Bytes,
    model_span: &Range<usize>,
    model_json: Option<&[u8]>,
    extra: Option<&Splice>,
) -> AttemptBody {
    let model = model_json.map(|json| (model_span.clone(), json));
    let extra = extra.map(|s| (s.range.clone(), &s.bytes[..]));
    let mut splices: [Option<(Range<usize>, &[u8])>; 2] = [model, extra];
    splices.sort_by_key(|s| s.as_ref().map_or(usize::MAX, |(range, _)| range.start));
    let mut at = 0;
    for (range, _) in splices.iter().flatten() {
        if range.start < at || range.end > body.len() {
            return AttemptBody::Whole(body.clone());
        }
        at = range.end;
    }
    if splices.iter().all(Option::is_none) {
        return AttemptBody::Whole(body.clone());
    }
    if body.len() > SPLICE_IN_PLACE_BYTES {
        let mut parts = Vec::with_capacity(5);
        let mut at = 0;
        for (range, bytes) in splices.into_iter().flatten() {
            parts.push(body.slice(at..range.start));
            parts.push(Bytes::copy_from_slice(bytes));
            at = range.end;
        }
        parts.push(body.slice(at..));
        parts.retain(|part| !part.is_empty());
        return AttemptBody::Parts(parts);
    }
    let added: usize = splices
        .iter()
        .flatten()
        .map(|(r, b)| b.len().saturating_sub(r.len()))
        .sum();
    let mut out = BytesMut::with_capacity(body.len() + added);
    let mut at = 0;
    for (range, bytes) in splices.into_iter().flatten() {
        out.extend_from_slice(&body[at..range.start]);
        out.extend_from_slice(bytes);
        at = range.end;
    }
    out.extend_from_slice(&body[at..]);
    AttemptBody::Whole(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_join_in_order_and_one_piece_is_not_copied() {
        let one = Bytes::from_static(b"{\"model\":\"m\"}");
        let whole = joined(std::slice::from_ref(&one), one.len());
        assert_eq!(
            whole.as_ptr(),
            one.as_ptr(),
            "a body in one piece is copied"
        );
        assert_eq!(joined(&[], 0), Bytes::new());
        let pieces: Vec<Bytes> = ["{\"mo", "del\":", "\"m\"}"]
            .into_iter()
            .map(|s| Bytes::from_static(s.as_bytes()))
            .collect();
        let body = joined(&pieces, 13);
        assert_eq!(&body[..], b"{\"model\":\"m\"}");
        assert_eq!(body.len(), 13);
    }

    #[test]
    fn splices_the_model_literal_and_nothing_else() {
        let body = Bytes::from_static(br#"{"model":"chat","messages":[]}"#);
        let span = 9..15;
        assert_eq!(&body[span.clone()], br#""chat""#);
        let out = attempt_body(&body, &span, Some(br#""Qwen/Qwen3-8B""#), None).whole();
        assert_eq!(&out[..], br#"{"model":"Qwen/Qwen3-8B","messages":[]}"#);
        let same = attempt_body(&body, &span, None, None).whole();
        assert_eq!(same.as_ptr(), body.as_ptr(), "an unchanged body is copied");
        let ask = Splice {
            range: 1..1,
            bytes: br#""stream_options":{"include_usage":true},"#.to_vec(),
        };
        let both = attempt_body(&body, &span, Some(br#""q""#), Some(&ask)).whole();
        assert_eq!(
            &both[..],
            br#"{"stream_options":{"include_usage":true},"model":"q","messages":[]}"#
        );
        assert_eq!(
            &attempt_body(&body, &span, None, Some(&ask)).whole()[..40],
            &both[..40]
        );
    }

    #[test]
    fn a_large_body_is_spliced_between_slices_of_the_clients_buffer() {
        let text = "x".repeat(SPLICE_IN_PLACE_BYTES);
        let body = Bytes::from(format!(
            r#"{{"model":"chat","messages":[{{"content":"{text}"}}]}}"#
        ));
        let span = 9..15;
        let ask = Splice {
            range: 1..1,
            bytes: br#""stream_options":{"include_usage":true},"#.to_vec(),
        };
        let spliced = attempt_body(&body, &span, Some(br#""Qwen/Qwen3-8B""#), Some(&ask));
        let AttemptBody::Parts(parts) = &spliced else {
            panic!("a large body was copied to splice it");
        };
        let whole = spliced.whole();
        let expected = format!(
            r#"{{"stream_options":{{"include_usage":true}},"model":"Qwen/Qwen3-8B","messages":[{{"content":"{text}"}}]}}"#
        );
        assert_eq!(whole, expected.as_bytes());
        assert_eq!(spliced.len(), expected.len());
        // The conversation is the client's buffer, not a copy of it.
        let tail = parts.last().unwrap();
        assert_eq!(tail.as_ptr(), body[15..].as_ptr());
        assert_eq!(
            spliced.parts().unwrap().concat(),
            expected.as_bytes(),
            "the parts are not the body in order"
        );
        // Nothing to change: the client's buffer, whole.
        let same = attempt_body(&body, &span, None, None);
        assert!(matches!(&same, AttemptBody::Whole(b) if b.as_ptr() == body.as_ptr()));
        assert_eq!(same.parts(), None);
    }
}
