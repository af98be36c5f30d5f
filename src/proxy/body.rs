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
use crate::openai::{
    form_boundary, Endpoint, ModelLiteral, ParsedRequest, Prescan, Prescanned, Splice,
};
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

/// A whole request body, as [`read_body`] hands it over.
pub enum ReadBody {
    /// As it stands: it came in one piece, or is not JSON, or had no
    /// declared length, or is not valid UTF-8.
    Bytes(Bytes),
    /// Prescanned for the JSON parser as it arrived (see [`Arrival`]).
    Prescanned(Prescanned),
}

impl ReadBody {
    pub fn bytes(&self) -> &Bytes {
        match self {
            ReadBody::Bytes(body) => body,
            ReadBody::Prescanned(prescanned) => prescanned.body(),
        }
    }

    pub fn into_bytes(self) -> Bytes {
        match self {
            ReadBody::Bytes(body) => body,
            ReadBody::Prescanned(prescanned) => prescanned.into_body(),
        }
    }
}

/// Reads the whole request body, refusing more than `limit` bytes and
/// clients slower than [`CLIENT_BODY_READ_TIMEOUT`] / [`CLIENT_BODY_DEADLINE`].
/// A JSON body (`json`) of several pieces is prescanned as it arrives.
pub async fn read_body(
    session: &mut Session,
    limit: usize,
    json: bool,
) -> Result<ReadBody, GatewayError> {
    session.set_read_timeout(Some(CLIENT_BODY_READ_TIMEOUT));
    match tokio::time::timeout(CLIENT_BODY_DEADLINE, read_whole_body(session, limit, json)).await {
        Ok(result) => result,
        Err(_) => Err(GatewayError::BodyTimeout {
            after: CLIENT_BODY_DEADLINE,
        }),
    }
}

async fn read_whole_body(
    session: &mut Session,
    limit: usize,
    json: bool,
) -> Result<ReadBody, GatewayError> {
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
    let mut arrival = Arrival::new(declared.filter(|_| json));
    loop {
        match arrival.read_from(session).await {
            Ok(true) => {
                if arrival.received() > limit {
                    return Err(GatewayError::BodyTooLarge { limit });
                }
            }
            Ok(false) => return Ok(arrival.finish()),
            Err(e) if e.etype() == &pingora::ErrorType::ReadTimedout => {
                return Err(GatewayError::BodyTimeout {
                    after: CLIENT_BODY_READ_TIMEOUT,
                })
            }
            Err(e) => return Err(GatewayError::BodyRead(e.to_string())),
        }
    }
}

/// A body as its pieces arrive.
///
/// What needs the whole body (the join, the UTF-8 check, the scan for the
/// parser) would otherwise run after its last byte, adding to the
/// request's time what the gateway could have done while the client was
/// still sending. So the pieces are kept as Pingora hands them over (the
/// first alone is the whole of most bodies, and is never copied) until
/// half of the declared length is in; from there the body is one buffer of
/// the declared length, each piece read from the socket into it and
/// prescanned as it comes (`openai::Prescan`). Nothing is reserved on the
/// client's word alone: the buffer is at most twice what the client has
/// sent. A body with no declared length (chunked), or one that is not
/// JSON, is joined once, whole: one copy of the body, as before.
struct Arrival {
    /// The length to prescan toward; `None` never prescans.
    declared: Option<usize>,
    pieces: Vec<Bytes>,
    received: usize,
    prescan: Option<Prescan>,
}

impl Arrival {
    fn new(declared: Option<usize>) -> Self {
        Self {
            declared,
            pieces: Vec::new(),
            received: 0,
            prescan: None,
        }
    }

    fn received(&self) -> usize {
        self.received
    }

    /// Reads the next piece of the body from `session`; `false` once the
    /// body is whole. Once prescanning, the piece is read into the
    /// prescan's buffer in place (`read_request_body_into`, a
    /// `pingora-core` patch), not into a buffer of its own and copied.
    async fn read_from(&mut self, session: &mut Session) -> pingora::Result<bool> {
        if let Some(prescan) = &mut self.prescan {
            let Some(read) = session.read_request_body_into(prescan.room()).await? else {
                return Ok(false);
            };
            self.received += read;
            prescan.appended();
            return Ok(true);
        }
        match session.read_request_body().await? {
            Some(piece) => {
                self.push(piece);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn push(&mut self, piece: Bytes) {
        self.received += piece.len();
        if let Some(prescan) = &mut self.prescan {
            prescan.push(&piece);
            return;
        }
        self.pieces.push(piece);
        if let Some(declared) = self.declared {
            if self.pieces.len() > 1 && self.received.saturating_mul(2) >= declared {
                self.prescan = Some(Prescan::with_pieces(declared, &self.pieces));
                self.pieces = Vec::new();
            }
        }
    }

    fn finish(self) -> ReadBody {
        match self.prescan {
            Some(prescan) => match prescan.finish() {
                Ok(prescanned) => ReadBody::Prescanned(prescanned),
                Err(body) => ReadBody::Bytes(body),
            },
            None => ReadBody::Bytes(joined(&self.pieces, self.received)),
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

    /// `body` handed to an [`Arrival`] in pieces of `cut` bytes; whether
    /// it was prescanning after each piece.
    fn arrive(declared: Option<usize>, body: &[u8], cut: usize) -> (ReadBody, Vec<bool>) {
        let mut arrival = Arrival::new(declared);
        let mut prescanning = Vec::new();
        for piece in body.chunks(cut) {
            arrival.push(Bytes::copy_from_slice(piece));
            assert_eq!(arrival.received(), prescanning.len() * cut + piece.len());
            prescanning.push(arrival.prescan.is_some());
        }
        (arrival.finish(), prescanning)
    }

    #[test]
    fn a_body_is_prescanned_from_half_its_declared_length_and_only_when_declared() {
        let text = "\\u00e9 caf\u{e9} \\n ".repeat(50);
        let body = format!(r#"{{"model":"m","messages":[{{"content":"{text}"}}]}}"#);
        let len = body.len();
        let (read, prescanning) = arrive(Some(len), body.as_bytes(), 100);
        // Kept as pieces below half of the declared length, so a client
        // that declares much and sends little is held to what it sent.
        for (i, &on) in prescanning.iter().enumerate() {
            assert_eq!(
                on,
                (i + 1) * 100 * 2 >= len,
                "after piece {i} of {len} bytes"
            );
        }
        let ReadBody::Prescanned(prescanned) = &read else {
            panic!("a JSON body of declared length was not prescanned");
        };
        assert_eq!(prescanned.body(), body.as_bytes());
        assert_eq!(read.into_bytes(), body.as_bytes());

        // No declared length (chunked), or not JSON: joined whole.
        let (read, prescanning) = arrive(None, body.as_bytes(), 100);
        assert!(prescanning.iter().all(|on| !on));
        assert!(matches!(&read, ReadBody::Bytes(b) if b == body.as_bytes()));

        // Not UTF-8: handed over as it came, for the parser to refuse.
        let mut broken = body.clone().into_bytes();
        broken[len - 10] = 0xff;
        let (read, _) = arrive(Some(len), &broken, 64);
        assert!(matches!(&read, ReadBody::Bytes(b) if b[..] == broken[..]));
    }

    /// The next request on a connection, pipelined behind a body.
    const NEXT: &[u8] = b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n";

    /// A Pingora HTTP/1 session on a real socket whose client sends a
    /// request with `body` in writes growing from 3,000 bytes, 2 ms apart,
    /// the last of them with [`NEXT`] in it; its header read. The client's
    /// task hands back its end of the connection.
    async fn session_receiving(
        body: &[u8],
    ) -> (Session, tokio::task::JoinHandle<tokio::net::TcpStream>) {
        use tokio::io::AsyncWriteExt;

        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let sent = body.to_vec();
        let client = tokio::spawn(async move {
            let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
            stream.write_all(head.as_bytes()).await.unwrap();
            let (mut at, mut size) = (0, 3_000);
            while sent.len() - at > size {
                stream.write_all(&sent[at..at + size]).await.unwrap();
                at += size;
                size = size * 3 / 2;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            stream
                .write_all(&[&sent[at..], NEXT].concat())
                .await
                .unwrap();
            stream
        });
        let (socket, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
            .await
            .expect("the client connects")
            .unwrap();
        let stream = pingora::protocols::l4::stream::Stream::from(socket);
        let mut session = Session::new_h1(Box::new(stream));
        assert!(session.read_request().await.unwrap());
        (session, client)
    }

    /// Once prescanning, every piece lands in the prescan's one buffer in
    /// place (it is never reallocated, so nothing was copied into a new
    /// one), and the body reads whole.
    #[tokio::test]
    async fn pieces_past_half_are_read_into_the_prescans_buffer_in_place() {
        let text = "a line of a \"document\"\\n ".repeat(24_000);
        let body = format!(r#"{{"model":"m","messages":[{{"role":"user","content":"{text}"}}]}}"#);
        let len = body.len();
        let (mut session, client) = session_receiving(body.as_bytes()).await;
        let mut arrival = Arrival::new(Some(len));
        let (mut prescanning, mut buffer) = (0, None);
        let reading = async {
            while arrival.read_from(&mut session).await.unwrap() {
                if let Some(prescan) = &mut arrival.prescan {
                    let room = prescan.room();
                    let at = (room.as_ptr(), room.capacity());
                    assert_eq!(*buffer.get_or_insert(at), at, "the buffer was reallocated");
                    prescanning += 1;
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(10), reading)
            .await
            .expect("the body arrives");
        // The piece that started the prescan, and reads into it after.
        assert!(prescanning >= 3, "{prescanning} pieces while prescanning");
        assert_eq!(arrival.received(), len);
        let ReadBody::Prescanned(read) = arrival.finish() else {
            panic!("a JSON body of declared length was not prescanned");
        };
        assert!(read.body() == body.as_bytes(), "the body read changed");
        drop(client.await.unwrap());
    }

    /// Read into a buffer with room to spare, no read takes a byte past
    /// the body's end, though the next request follows it in the same
    /// write: those bytes are the next request's.
    #[tokio::test]
    async fn a_read_into_a_roomy_buffer_stops_at_the_bodys_end() {
        let body: Vec<u8> = (0..200_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let (mut session, client) = session_receiving(&body).await;
        let mut read = BytesMut::with_capacity(1 << 20);
        let reading = async {
            while let Some(n) = session.read_request_body_into(&mut read).await.unwrap() {
                assert!(n > 0 && read.len() <= body.len(), "read past the body");
            }
        };
        tokio::time::timeout(Duration::from_secs(10), reading)
            .await
            .expect("the body arrives");
        assert!(read[..] == body[..], "the body read changed");
        drop(client.await.unwrap());
    }

    #[test]
    fn a_body_in_one_piece_is_neither_copied_nor_prescanned() {
        let one = Bytes::from_static(br#"{"model":"m","messages":[]}"#);
        let mut arrival = Arrival::new(Some(one.len()));
        arrival.push(one.clone());
        let ReadBody::Bytes(read) = arrival.finish() else {
            panic!("a body in one piece was prescanned");
        };
        assert_eq!(
            read.as_ptr(),
            one.as_ptr(),
            "a body in one piece was copied"
        );
        assert!(matches!(Arrival::new(Some(0)).finish(), ReadBody::Bytes(b) if b.is_empty()));
    }

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
