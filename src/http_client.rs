//! A small HTTP/1.1 client over Pingora's connector, for the background
//! services that call other HTTP endpoints (LMCache signals, the control
//! plane). Bounded: a timeout on every step and a cap on the body read.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::{HeaderName, HeaderValue, Method};
use pingora::connectors::http::Connector;
use pingora::http::RequestHeader;
pub use pingora::protocols::http::client::HttpSession;
use pingora::upstreams::peer::HttpPeer;

/// Why a call failed, as a message for logs.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CallError {
    pub message: String,
    /// No connection was made: the peer never saw the request.
    pub connect: bool,
}

impl CallError {
    fn new(message: impl Into<String>) -> Self {
        CallError {
            message: message.into(),
            connect: false,
        }
    }
}

fn fail(context: &str, e: impl std::fmt::Display) -> CallError {
    CallError::new(format!("{context}: {e}"))
}

/// Where requests go: an `http(s)://host[:port]` endpoint, resolved once.
pub struct Endpoint {
    peer: HttpPeer,
    authority: String,
    /// The URL's path and query ("/" when it has none).
    pub path: String,
}

impl Endpoint {
    /// Resolves `url` (blocking DNS: call it off the request path).
    pub fn new(url: &str, timeout: Duration) -> Result<Endpoint, CallError> {
        let uri: http::Uri = url.parse().map_err(|e| fail("bad URL", e))?;
        let tls = uri.scheme_str() == Some("https");
        let host = uri
            .host()
            .ok_or_else(|| CallError::new("URL without a host"))?;
        let bare_host = host.trim_matches(['[', ']']);
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let addr = std::net::ToSocketAddrs::to_socket_addrs(&(bare_host, port))
            .map_err(|e| fail("cannot resolve", e))?
            .next()
            .ok_or_else(|| CallError::new("no address"))?;
        let mut peer = HttpPeer::new(addr, tls, bare_host.to_string());
        peer.options.connection_timeout = Some(timeout);
        peer.options.read_timeout = Some(timeout);
        peer.options.write_timeout = Some(timeout);
        Ok(Endpoint {
            peer,
            authority: uri
                .authority()
                .map_or_else(|| host.to_string(), |a| a.to_string()),
            path: uri
                .path_and_query()
                .map_or("/".to_string(), |p| p.as_str().to_string()),
        })
    }

    /// One request; the status and at most `max_body` bytes of the body.
    pub async fn call(
        &self,
        connector: &Connector,
        method: Method,
        path: &str,
        headers: &[(HeaderName, HeaderValue)],
        body: Option<Bytes>,
        max_body: usize,
    ) -> Result<(u16, Bytes), CallError> {
        let mut all = Vec::with_capacity(headers.len() + 1);
        all.push((
            http::header::HOST,
            HeaderValue::from_str(&self.authority).map_err(|e| fail("request", e))?,
        ));
        all.extend_from_slice(headers);
        call(connector, &self.peer, method, path, &all, body, max_body).await
    }
}

/// One request to `peer` with exactly `headers` (`Host` included) and a
/// `Content-Length` for `body`: the status and at most `max_body` bytes of
/// the answer. Each step is bounded by the peer's timeouts.
pub async fn call(
    connector: &Connector,
    peer: &HttpPeer,
    method: Method,
    path: &str,
    headers: &[(HeaderName, HeaderValue)],
    body: Option<Bytes>,
    max_body: usize,
) -> Result<(u16, Bytes), CallError> {
    let mut sent = send(connector, peer, method, path, headers, body).await?;
    receive(&mut sent, max_body).await
}

/// The first half of [`call`]: connects and writes the whole request. The
/// answer is read with [`receive`].
pub async fn send(
    connector: &Connector,
    peer: &HttpPeer,
    method: Method,
    path: &str,
    headers: &[(HeaderName, HeaderValue)],
    body: Option<Bytes>,
) -> Result<HttpSession, CallError> {
    let request = request_header(method, path, headers, body.as_ref())?;
    let (mut session, _) = connect(connector, peer).await?;
    write(&mut session, request, body).await?;
    Ok(session)
}

/// [`call`] over a connection `connector` kept from an earlier call to the
/// same peer when it has one, given back to it for `idle` once the whole
/// answer is read. A kept connection the peer closed in the meantime fails
/// before any answer; the call is then made once more on a new one.
#[allow(clippy::too_many_arguments)]
pub async fn call_pooled(
    connector: &Connector,
    peer: &HttpPeer,
    method: Method,
    path: &str,
    headers: &[(HeaderName, HeaderValue)],
    body: Option<Bytes>,
    max_body: usize,
    idle: Duration,
) -> Result<(u16, Bytes), CallError> {
    let request = request_header(method, path, headers, body.as_ref())?;
    let mut fresh_tried = false;
    loop {
        let (mut session, reused) = connect(connector, peer).await?;
        let sent = match write(&mut session, request.clone(), body.clone()).await {
            Ok(()) => session
                .read_response_header()
                .await
                .map_err(|e| fail("receive", e)),
            Err(e) => Err(e),
        };
        if let Err(e) = sent {
            if reused && !fresh_tried {
                fresh_tried = true;
                continue;
            }
            return Err(e);
        }
        let answer = receive(&mut session, max_body).await?;
        // The answer is read whole: the connection is kept unless the peer
        // asked to close it (`respect_keepalive` reads that from the answer).
        if let HttpSession::H1(h1) = &mut session {
            h1.respect_keepalive();
        }
        connector
            .release_http_session(session, peer, Some(idle))
            .await;
        return Ok(answer);
    }
}

fn request_header(
    method: Method,
    path: &str,
    headers: &[(HeaderName, HeaderValue)],
    body: Option<&Bytes>,
) -> Result<RequestHeader, CallError> {
    let mut request =
        RequestHeader::build(method, path.as_bytes(), None).map_err(|e| fail("request", e))?;
    for (name, value) in headers {
        request
            .insert_header(name.clone(), value.clone())
            .map_err(|e| fail("request", e))?;
    }
    if let Some(body) = body {
        request
            .insert_header(http::header::CONTENT_LENGTH, body.len())
            .map_err(|e| fail("request", e))?;
    }
    Ok(request)
}

/// A connection to `peer` (kept or new, and which) with the peer's
/// timeouts on its reads and writes.
async fn connect(connector: &Connector, peer: &HttpPeer) -> Result<(HttpSession, bool), CallError> {
    let (mut session, reused) = connector
        .get_http_session(peer)
        .await
        .map_err(|e| CallError {
            connect: true,
            ..fail("connect", e)
        })?;
    session.set_read_timeout(peer.options.read_timeout);
    session.set_write_timeout(peer.options.write_timeout);
    Ok((session, reused))
}

async fn write(
    session: &mut HttpSession,
    request: RequestHeader,
    body: Option<Bytes>,
) -> Result<(), CallError> {
    session
        .write_request_header(Box::new(request))
        .await
        .map_err(|e| fail("send", e))?;
    if let Some(body) = body {
        session
            .write_request_body(body, true)
            .await
            .map_err(|e| fail("send", e))?;
    }
    session
        .finish_request_body()
        .await
        .map_err(|e| fail("send", e))
}

/// The second half of [`call`]: the status and at most `max_body` bytes of
/// the answer to the request `session` sent.
pub async fn receive(
    session: &mut HttpSession,
    max_body: usize,
) -> Result<(u16, Bytes), CallError> {
    if session.response_header().is_none() {
        session
            .read_response_header()
            .await
            .map_err(|e| fail("receive", e))?;
    }
    let status = session.response_header().map_or(0, |h| h.status.as_u16());
    let mut received = BytesMut::new();
    while let Some(chunk) = session
        .read_response_body()
        .await
        .map_err(|e| fail("receive", e))?
    {
        if received.len() + chunk.len() > max_body {
            return Err(CallError::new(format!(
                "response larger than {max_body} bytes"
            )));
        }
        received.extend_from_slice(&chunk);
    }
    Ok((status, received.freeze()))
}
