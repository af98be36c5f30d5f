//! Tests of how rolter's patched Pingora ends an HTTP/1 request: the
//! client's side (`ServerSession::finish_now` in `patches/pingora-core`,
//! used by `finish_downstream` in `patches/pingora-proxy`), in place when
//! nothing is left to write, flush, drain or close, else by the awaited
//! `finish`, which must then find nothing done twice; and the engine's side
//! (`v1::client::kept_stream`, used by `release_boxed_http_session`), the
//! kept connection's stream taken out of the boxed session. Real sockets,
//! as a client and an engine see them; here because the vendored crates
//! keep no dev-dependencies.

use std::time::Duration;

use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::protocols::http::v1::client::{kept_stream, HttpSession as EngineSession};
use pingora::protocols::http::{client::HttpSession as ClientSession, ServerSession};
use pingora::protocols::l4::stream::Stream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A session that read `request` from a real client, and the client.
async fn session_after(request: &[u8]) -> (ServerSession, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut client = TcpStream::connect(listener.local_addr().unwrap())
        .await
        .unwrap();
    client.write_all(request).await.unwrap();
    let (socket, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
        .await
        .expect("the client connects")
        .unwrap();
    let mut session = ServerSession::new_http1(Box::new(Stream::from(socket)));
    assert!(session.read_request().await.unwrap());
    session.set_keepalive(Some(60));
    (session, client)
}

/// Answers `hello` framed by `framing` (a header name and value).
async fn answer(session: &mut ServerSession, framing: (&'static str, &'static str)) {
    let mut response = ResponseHeader::build(200, None).unwrap();
    response.insert_header(framing.0, framing.1).unwrap();
    session
        .write_response_header(Box::new(response))
        .await
        .unwrap();
    session
        .write_response_body(Bytes::from_static(b"hello"), false)
        .await
        .unwrap();
}

/// What the client has received once `ends_with` has arrived.
async fn received(client: &mut TcpStream, ends_with: &[u8]) -> Vec<u8> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while !seen.ends_with(ends_with) {
        let n = tokio::time::timeout(Duration::from_secs(10), client.read(&mut buf))
            .await
            .expect("the answer arrives")
            .unwrap();
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    seen
}

#[tokio::test]
async fn a_whole_answer_on_a_kept_alive_connection_ends_in_place_and_the_connection_serves_on() {
    let (mut session, mut client) = session_after(b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n").await;
    answer(&mut session, ("Content-Length", "5")).await;
    let reusable = match Box::new(session).finish_now() {
        Ok(finished) => finished.unwrap().expect("the connection is kept"),
        Err(_) => panic!("a request with nothing left to do was handed back"),
    };
    assert!(received(&mut client, b"hello")
        .await
        .ends_with(b"\r\n\r\nhello"));

    // The stream it gave back serves the connection's next request.
    client
        .write_all(b"GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let (stream, _) = reusable.into_parts();
    let mut next = ServerSession::new_http1(stream);
    assert!(next.read_request().await.unwrap());
    assert_eq!(next.req_header().uri.path(), "/b");
}

#[tokio::test]
async fn a_last_chunk_to_write_is_left_to_finish_which_writes_it_once() {
    let (mut session, mut client) = session_after(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    answer(&mut session, ("Transfer-Encoding", "chunked")).await;
    let Err(session) = Box::new(session).finish_now() else {
        panic!("handed back");
    };
    assert!(session.finish().await.unwrap().is_some());
    let seen = received(&mut client, b"0\r\n\r\n").await;
    assert!(seen.ends_with(b"5\r\nhello\r\n0\r\n\r\n"));
}

#[tokio::test]
async fn a_connection_to_close_or_a_body_to_drain_is_left_to_finish() {
    // The client asked to close: `finish` shuts the connection down.
    let request = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let (mut session, mut client) = session_after(request).await;
    answer(&mut session, ("Content-Length", "5")).await;
    let Err(session) = Box::new(session).finish_now() else {
        panic!("handed back");
    };
    assert!(session.finish().await.unwrap().is_none());
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut rest))
        .await
        .expect("the connection closes")
        .unwrap();
    assert!(rest.ends_with(b"hello"));

    // A request body nobody read: `finish` drains it, then keeps the
    // connection (kept alive again here: answering before the body was
    // read turned that off).
    let request = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc";
    let (mut session, _client) = session_after(request).await;
    answer(&mut session, ("Content-Length", "5")).await;
    session.set_keepalive(Some(60));
    let Err(mut session) = Box::new(session).finish_now() else {
        panic!("handed back");
    };
    assert!(!session.is_body_done());
    assert!(session.finish().await.unwrap().is_some());
}

/// A client session that sent a request to a real engine and read its
/// whole answer, `head` (its status line and headers) with `hello`.
async fn engine_answered(head: &'static str) -> Box<ClientSession> {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let engine = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 1024];
        while !seen.ends_with(b"\r\n\r\n") {
            let n = socket.read(&mut buf).await.unwrap();
            assert!(n > 0, "the request never ended");
            seen.extend_from_slice(&buf[..n]);
        }
        socket
            .write_all(format!("{head}\r\n\r\nhello").as_bytes())
            .await
            .unwrap();
        socket
    });
    let stream = TcpStream::connect(address).await.unwrap();
    let mut session = EngineSession::new(Box::new(Stream::from(stream)));
    let mut request = RequestHeader::build("GET", b"/", None).unwrap();
    request.insert_header("Host", "engine").unwrap();
    session
        .write_request_header(Box::new(request))
        .await
        .unwrap();
    session.read_response().await.unwrap();
    let mut body = Vec::new();
    while let Some(piece) = session.read_body_bytes().await.unwrap() {
        body.extend_from_slice(&piece);
    }
    assert_eq!(body, b"hello");
    drop(tokio::time::timeout(Duration::from_secs(10), engine).await);
    Box::new(ClientSession::H1(session))
}

#[tokio::test]
async fn a_kept_engine_connection_gives_its_stream_back_and_one_to_close_does_not() {
    let kept = engine_answered("HTTP/1.1 200 OK\r\nContent-Length: 5").await;
    assert!(kept_stream(kept).is_ok());

    let closing =
        engine_answered("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close").await;
    let Err(closing) = kept_stream(closing) else {
        panic!("a connection the engine closes was kept");
    };
    // The awaited release shuts it down: `reuse` keeps nothing either.
    let ClientSession::H1(closing) = *closing else {
        panic!("not HTTP/1");
    };
    assert!(closing.reuse().await.is_none());
}
