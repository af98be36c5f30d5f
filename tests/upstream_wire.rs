//! What an engine receives and sends on the wire, through the gateway's
//! patched Pingora (patches/README.md): the request header and body in one
//! segment, a chunked stream read in small pieces arriving whole, a burst
//! of events forwarded together, and a large request body read in uneven
//! pieces arriving whole; what the patches keep as Pingora had it: the good
//! events before a broken chunk, and the first-byte timeout after a `100`.
//!
//! The engine here is a raw TCP server in a thread, so the test sees the
//! bytes and the segments themselves (`TCP_INFO`), not what an HTTP library
//! makes of them.

mod support;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use support::{chunked, client, provider, Gateway};

/// One request as the raw engine read it, and the data segments its
/// connection had received once the request was whole.
struct Received {
    head: String,
    body: Vec<u8>,
    /// This request's place on its connection: 1 for the first.
    on_connection: u32,
    data_segments_in: u32,
}

/// Data segments received on `stream` so far (Linux `tcpi_data_segs_in`).
fn data_segments_in(stream: &TcpStream) -> u32 {
    // SAFETY: `tcp_info` is plain old data, zeroed, and getsockopt writes at
    // most `len` bytes into it.
    unsafe {
        let mut info: libc::tcp_info = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let rc = libc::getsockopt(
            stream.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        );
        assert_eq!(rc, 0, "getsockopt(TCP_INFO)");
        info.tcpi_data_segs_in
    }
}

/// Reads one HTTP/1.1 request (header, then a `Content-Length` body) from
/// `stream`, `buffered` holding what was read past the previous one.
/// `None` when the peer closed.
fn read_request(stream: &mut TcpStream, buffered: &mut Vec<u8>) -> Option<(String, Vec<u8>)> {
    let mut chunk = [0u8; 65536];
    let end = loop {
        if let Some(at) = buffered.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut chunk).ok().filter(|&n| n > 0)?;
        buffered.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffered[..end]).into_owned();
    let length = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    while buffered.len() < end + length {
        let n = stream.read(&mut chunk).ok().filter(|&n| n > 0)?;
        buffered.extend_from_slice(&chunk[..n]);
    }
    let body = buffered[end..end + length].to_vec();
    buffered.drain(..end + length);
    Some((head, body))
}

/// A raw engine: every connection in its own thread; each request is
/// reported on the channel and answered by `respond`.
fn raw_engine(respond: fn(&mut TcpStream)) -> (String, mpsc::Receiver<Received>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let tx = tx.clone();
            thread::spawn(move || {
                stream
                    .set_read_timeout(Some(Duration::from_secs(30)))
                    .unwrap();
                let mut buffered = Vec::new();
                let mut on_connection = 0;
                while let Some((head, body)) = read_request(&mut stream, &mut buffered) {
                    on_connection += 1;
                    let data_segments_in = data_segments_in(&stream);
                    respond(&mut stream);
                    if tx
                        .send(Received {
                            head,
                            body,
                            on_connection,
                            data_segments_in,
                        })
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
    });
    (url, rx)
}

/// The body of every JSON answer here.
const JSON_BODY: &str = r#"{"id":"x","object":"chat.completion","choices":[]}"#;

/// Answers [`JSON_BODY`] with `status_line` and `headers` (each line ending
/// in CRLF) before the body's own.
fn answer_json(stream: &mut TcpStream, status_line: &str, headers: &str) {
    let head = format!(
        "{status_line}\r\n{headers}content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        JSON_BODY.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(JSON_BODY.as_bytes()).unwrap();
}

fn json_answer(stream: &mut TcpStream) {
    answer_json(stream, "HTTP/1.1 200 OK", "");
}

fn config(url: &str) -> String {
    format!(
        "{}[[routes]]\nmodel = \"chat\"\ntargets = [{{ provider = \"raw\", model = \"upstream-model\" }}]\n\n[health]\nenabled = false\n",
        provider("raw", url)
    )
}

#[tokio::test]
async fn a_request_header_and_its_body_reach_the_engine_in_one_segment() {
    let (url, received) = raw_engine(json_answer);
    let gateway = Gateway::start(&config(&url)).await;
    let http = client();
    // A body past a TCP segment's worth of a small write buffer, so that
    // only one vectored write of header and body makes it one segment.
    let content = "word ".repeat(600);
    for n in 1..=3 {
        let response = http
            .post(gateway.url("/v1/chat/completions"))
            .json(&serde_json::json!({
                "model": "chat",
                "messages": [{"role": "user", "content": content}],
            }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let request = received
            .recv_timeout(Duration::from_secs(10))
            .expect("the engine got the request");
        assert!(request
            .head
            .starts_with("POST /v1/chat/completions HTTP/1.1\r\n"));
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(body["model"], "upstream-model");
        assert_eq!(body["messages"][0]["content"], content.as_str());
        // Segments add up over a kept-alive connection: one per request.
        assert_eq!(
            request.data_segments_in, request.on_connection,
            "request {n}: {} data segments for the {} requests of its connection",
            request.data_segments_in, request.on_connection
        );
    }
}

/// An SSE answer in chunked encoding whose chunk sizes vary and whose writes
/// cut through chunk heads, a little apart, so the gateway reads it in many
/// pieces, some ending inside a chunk head.
fn stream_answer(stream: &mut TcpStream) {
    stream
        .write_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n",
        )
        .unwrap();
    let wire = chunked_events();
    for piece in wire.chunks(4093) {
        // Cut each piece once more inside, near its end: a chunk head split
        // between two reads is what the body reader must carry over.
        let (a, b) = piece.split_at(piece.len().saturating_sub(3));
        stream.write_all(a).unwrap();
        stream.flush().unwrap();
        thread::sleep(Duration::from_millis(2));
        stream.write_all(b).unwrap();
        stream.flush().unwrap();
        thread::sleep(Duration::from_millis(2));
    }
}

/// The events of [`stream_answer`], decoded.
fn events() -> Vec<u8> {
    let mut out = Vec::new();
    for i in 0..120usize {
        // Sizes from a few bytes to past 8 KiB.
        let text = "t".repeat((i * 977) % 9000 + 1);
        out.extend_from_slice(format!("data: {{\"n\":{i},\"text\":\"{text}\"}}\n\n").as_bytes());
    }
    out.extend_from_slice(b"data: [DONE]\n\n");
    out
}

fn chunked_events() -> Vec<u8> {
    let events = events();
    let lines: Vec<&[u8]> = events.split_inclusive(|&b| b == b'\n').collect();
    chunked::encode(lines.chunks(2).map(|pair| pair.concat()))
}

/// Posts a streamed chat request and checks that the client receives
/// [`events`], byte for byte.
async fn assert_streams_the_events(gateway: &Gateway) {
    let response = client()
        .post(gateway.url("/v1/chat/completions"))
        .json(&serde_json::json!({
            "model": "chat",
            "stream": true,
            "messages": [{"role": "user", "content": "hi"}],
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = response.bytes().await.expect("the whole stream");
    let expected = events();
    assert_eq!(body.len(), expected.len(), "decoded length");
    assert!(
        body[..] == expected[..],
        "the stream differs from what the engine sent"
    );
}

#[tokio::test]
async fn a_chunked_stream_read_in_pieces_that_split_chunk_heads_arrives_byte_exact() {
    let (url, received) = raw_engine(stream_answer);
    let gateway = Gateway::start(&config(&url)).await;
    for _ in 0..2 {
        assert_streams_the_events(&gateway).await;
        received
            .recv_timeout(Duration::from_secs(10))
            .expect("the engine got the request");
    }
}

/// Events an engine sends in one burst (one write, one chunk each, the
/// terminating chunk with them), as a busy engine's socket delivers them.
const BURST_EVENTS: usize = 20;

fn burst_event(i: usize) -> String {
    format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\" tok{i}\"}}}}]}}\n\n")
}

fn burst_answer(stream: &mut TcpStream) {
    let mut wire =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec();
    wire.extend(chunked::encode((0..BURST_EVENTS).map(burst_event)));
    stream.write_all(&wire).unwrap();
}

/// Reads a chunked response off `stream` to its end; its header, and the
/// payload of each chunk as the gateway framed it.
fn read_chunked_response(stream: &mut TcpStream) -> (String, Vec<Vec<u8>>) {
    let mut wire = Vec::new();
    let mut piece = [0u8; 65536];
    while !wire.ends_with(b"\r\n0\r\n\r\n") {
        let n = stream.read(&mut piece).expect("the gateway's response");
        assert!(
            n > 0,
            "the gateway closed mid-response: {:?}",
            String::from_utf8_lossy(&wire)
        );
        wire.extend_from_slice(&piece[..n]);
    }
    let at = wire.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&wire[..at]).into_owned();
    let chunks = chunked::split(&wire[at..])
        .into_iter()
        .map(<[u8]>::to_vec)
        .collect();
    (head, chunks)
}

/// A request as a client writes it.
fn chat_request(body: &str) -> String {
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// The gateway forwards the events an engine's one write brought together
/// (`pingora-core`'s `read_body_bytes`, patches/README.md), not as one
/// downstream chunk and one write per event; the client's bytes are the
/// engine's events, in order, whole.
#[tokio::test]
async fn a_burst_of_events_is_forwarded_together_byte_exact() {
    let (url, received) = raw_engine(burst_answer);
    let gateway = Gateway::start(&config(&url)).await;
    let body = r#"{"model":"chat","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let request = chat_request(body);
    let mut stream = TcpStream::connect(gateway.listen).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let expected: String = (0..BURST_EVENTS).map(burst_event).collect();
    // Twice on one client connection: the second on a reused engine
    // connection, whose first read starts at the body.
    for round in 0..2 {
        stream.write_all(request.as_bytes()).unwrap();
        let (head, chunks) = read_chunked_response(&mut stream);
        assert!(head.starts_with("HTTP/1.1 200"), "round {round}: {head}");
        let joined: Vec<u8> = chunks.concat();
        assert_eq!(String::from_utf8_lossy(&joined), expected, "round {round}");
        // One write from the engine: the gateway's header read and its
        // first body read take all of it (a read may end early, hence 3).
        assert!(
            chunks.len() <= 3,
            "round {round}: {BURST_EVENTS} events forwarded in {} chunks",
            chunks.len()
        );
        received
            .recv_timeout(Duration::from_secs(10))
            .expect("the engine got the request");
    }
}

/// A JSON answer that says `Connection: close` and leaves the connection
/// open: reusing it is the gateway's mistake, not the engine's doing.
fn closing_answer(stream: &mut TcpStream) {
    answer_json(stream, "HTTP/1.1 200 OK", "Connection: close\r\n");
}

/// An HTTP/1.0 answer with `Connection: keep-alive`: the connection may be
/// reused.
fn http10_keepalive_answer(stream: &mut TcpStream) {
    answer_json(
        stream,
        "HTTP/1.0 200 OK",
        "Connection: keep-alive\r\nKeep-Alive: timeout=30\r\n",
    );
}

/// An HTTP/1.0 answer without keep-alive, its connection left open.
fn http10_answer(stream: &mut TcpStream) {
    answer_json(stream, "HTTP/1.0 200 OK", "");
}

/// A `100 Continue` ahead of the final answer, an SSE stream.
fn continue_then_stream_answer(stream: &mut TcpStream) {
    stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").unwrap();
    stream.flush().unwrap();
    thread::sleep(Duration::from_millis(5));
    stream_answer(stream);
}

/// Posts `n` chat requests one after another; returns each one's place on
/// the engine connection it arrived on.
async fn places_on_connection(
    gateway: &Gateway,
    received: &mpsc::Receiver<Received>,
    n: usize,
) -> Vec<u32> {
    let http = client();
    let mut places = Vec::new();
    for _ in 0..n {
        let response = http
            .post(gateway.url("/v1/chat/completions"))
            .json(&serde_json::json!({
                "model": "chat",
                "messages": [{"role": "user", "content": "hi"}],
            }))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.text().await.unwrap(), JSON_BODY);
        let request = received
            .recv_timeout(Duration::from_secs(10))
            .expect("the engine got the request");
        places.push(request.on_connection);
        // The gateway pools the engine connection after the response's last
        // byte has gone out: give it that moment before the next request.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    places
}

/// The gateway hands the engine's response header on and keeps only what
/// decides the connection's reuse (patches/README.md): that must still say
/// which connections may carry the next request.
#[tokio::test]
async fn an_engine_connection_is_reused_as_its_response_header_allows() {
    for (answer, reused, what) in [
        (json_answer as fn(&mut TcpStream), true, "HTTP/1.1"),
        (closing_answer, false, "Connection: close"),
        (http10_keepalive_answer, true, "HTTP/1.0 with keep-alive"),
        (http10_answer, false, "HTTP/1.0 without keep-alive"),
    ] {
        let (url, received) = raw_engine(answer);
        let gateway = Gateway::start(&config(&url)).await;
        let places = places_on_connection(&gateway, &received, 3).await;
        let expected = if reused { vec![1, 2, 3] } else { vec![1, 1, 1] };
        assert_eq!(
            places, expected,
            "{what}: each request's place on its engine connection"
        );
    }
}

#[tokio::test]
async fn a_stream_after_an_informational_response_arrives_whole_and_its_connection_is_reused() {
    let (url, received) = raw_engine(continue_then_stream_answer);
    let gateway = Gateway::start(&config(&url)).await;
    for n in 1..=2 {
        assert_streams_the_events(&gateway).await;
        let request = received
            .recv_timeout(Duration::from_secs(10))
            .expect("the engine got the request");
        assert_eq!(
            request.on_connection, n,
            "request {n}'s place on its engine connection"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Engine headers past the room the gateway reads a response with, one name
/// twice and apart, each in its own case.
fn cased_answer(stream: &mut TcpStream) {
    let extra: String = (0..10).map(|i| format!("X-Engine-{i}: e{i}\r\n")).collect();
    let headers = format!("X-Engine-Twice: 1\r\nx-engine-b: 2\r\n{extra}X-ENGINE-TWICE: 3\r\n");
    answer_json(stream, "HTTP/1.1 200 OK", &headers);
}

/// The header lines of `head` (past its first line) named `name`, in order,
/// as they were spelled.
fn lines_named<'a>(head: &'a str, name: &str) -> Vec<&'a str> {
    head.split("\r\n")
        .skip(1)
        .filter(|line| {
            line.split_once(':')
                .is_some_and(|(n, _)| n.eq_ignore_ascii_case(name))
        })
        .collect()
}

/// The patched Pingora copies the client's header into the engine's request,
/// and reads the engine's response header, with room for what the gateway
/// adds (patches/README.md). Past that room, with a name repeated apart and
/// spelled differently each time, every header still crosses once, in its
/// case, a repeated name's values in their order, both ways.
#[tokio::test]
async fn headers_past_the_room_made_for_the_gateways_cross_whole_in_their_case_both_ways() {
    let (url, received) = raw_engine(cased_answer);
    let gateway = Gateway::start(&config(&url)).await;
    let body = r#"{"model":"chat","messages":[{"role":"user","content":"hi"}]}"#;
    let extra: String = (0..12).map(|i| format!("X-Client-{i}: c{i}\r\n")).collect();
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: gateway\r\nX-Twice: a\r\n\
         Content-Type: application/json\r\n{extra}x-TWICE: b\r\nConnection: close\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut client = TcpStream::connect(gateway.listen).unwrap();
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    client.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).unwrap();
    let answer = String::from_utf8(answer).unwrap();
    let (response_head, response_body) = answer.split_once("\r\n\r\n").unwrap();

    let engine_head = received
        .recv_timeout(Duration::from_secs(10))
        .expect("the engine got the request")
        .head;
    assert_eq!(
        lines_named(&engine_head, "x-twice"),
        ["X-Twice: a", "x-TWICE: b"]
    );
    for i in 0..12 {
        let line = format!("X-Client-{i}: c{i}");
        assert_eq!(
            lines_named(&engine_head, &format!("x-client-{i}")),
            [line.as_str()]
        );
    }
    for added in ["x-forwarded-for", "x-request-id", "host", "content-length"] {
        assert_eq!(
            lines_named(&engine_head, added).len(),
            1,
            "{added} in {engine_head}"
        );
    }
    assert!(lines_named(&engine_head, "connection")
        .iter()
        .all(|l| !l.contains("close")));

    assert!(response_head.starts_with("HTTP/1.1 200"), "{response_head}");
    assert_eq!(response_body, JSON_BODY);
    assert_eq!(
        lines_named(response_head, "x-engine-twice"),
        ["X-Engine-Twice: 1", "X-ENGINE-TWICE: 3"]
    );
    assert_eq!(lines_named(response_head, "x-engine-b"), ["x-engine-b: 2"]);
    for i in 0..10 {
        let line = format!("X-Engine-{i}: e{i}");
        assert_eq!(
            lines_named(response_head, &format!("x-engine-{i}")),
            [line.as_str()]
        );
    }
    for added in ["x-request-id", "x-rolter-target", "x-rolter-upstream-model"] {
        assert_eq!(
            lines_named(response_head, added).len(),
            1,
            "{added} in {response_head}"
        );
    }
}

/// A large body arrives in pieces of every size, from 1 KB to past the
/// body reader's 64 KiB, the last ending mid-read; then a second request
/// on the same connection. The engine gets both bodies byte-exact. Large
/// reads of a sized body are handed over as the buffer they were read
/// into, small ones copied (patches/README.md, `take_body`).
#[tokio::test]
async fn a_large_body_read_in_uneven_pieces_arrives_byte_exact_and_the_connection_serves_on() {
    let (url, received) = raw_engine(json_answer);
    let gateway = Gateway::start(&config(&url)).await;
    let address = gateway.listen;
    // Every word differs: a piece lost, repeated or overwritten shows.
    let content: String = (0..120_000).map(|i| format!("w{i} ")).collect();
    let large =
        serde_json::json!({"model": "chat", "messages": [{"role": "user", "content": content}]})
            .to_string();
    let small =
        serde_json::json!({"model": "chat", "messages": [{"role": "user", "content": "after"}]})
            .to_string();
    let first = chat_request(&large).into_bytes();
    let second = chat_request(&small).into_bytes();
    let client = thread::spawn(move || {
        let mut stream = TcpStream::connect(address).unwrap();
        stream.set_nodelay(true).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let (mut at, mut size) = (0, 1000);
        while at < first.len() {
            let end = (at + size).min(first.len());
            stream.write_all(&first[at..end]).unwrap();
            at = end;
            size = size * 3 / 2 + 7;
            thread::sleep(Duration::from_millis(3));
        }
        let mut buffered = Vec::new();
        let mut heads = vec![
            read_request(&mut stream, &mut buffered)
                .expect("a response")
                .0,
        ];
        stream.write_all(&second).unwrap();
        heads.push(
            read_request(&mut stream, &mut buffered)
                .expect("a second response")
                .0,
        );
        heads
    });
    let heads = tokio::task::spawn_blocking(move || client.join().unwrap())
        .await
        .unwrap();
    for head in &heads {
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    }
    let bodies: Vec<serde_json::Value> = (0..2)
        .map(|_| {
            let request = received
                .recv_timeout(Duration::from_secs(10))
                .expect("the engine got it");
            serde_json::from_slice(&request.body).expect("a whole JSON body")
        })
        .collect();
    assert_eq!(bodies[0]["model"], "upstream-model");
    assert!(
        bodies[0]["messages"][0]["content"] == content.as_str(),
        "the large body's content arrived changed"
    );
    assert_eq!(bodies[1]["messages"][0]["content"], "after");
}

/// Events in one write, each its own chunk, then a chunk head that does
/// not parse: the engine broke its framing mid-stream.
const GOOD_EVENTS: usize = 3;

fn broken_framing_answer(stream: &mut TcpStream) {
    let mut wire =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec();
    for i in 0..GOOD_EVENTS {
        let event = burst_event(i);
        wire.extend(format!("{:x}\r\n{event}\r\n", event.len()).bytes());
    }
    wire.extend_from_slice(b"ZZ\r\nnot a chunk\r\n");
    stream.write_all(&wire).unwrap();
}

/// The events before a framing error reach the client before its stream is
/// cut, as they did when Pingora returned one chunk per read: joining the
/// chunks a read brought (`read_body_bytes`) must not drop the good ones
/// with the bad.
#[tokio::test]
async fn events_before_a_framing_error_reach_the_client() {
    let (url, _received) = raw_engine(broken_framing_answer);
    let gateway = Gateway::start(&config(&url)).await;
    let body = r#"{"model":"chat","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
    let mut stream = TcpStream::connect(gateway.listen).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(chat_request(body).as_bytes()).unwrap();
    let mut wire = Vec::new();
    let mut piece = [0u8; 65536];
    // To the end of the cut stream (or the read timeout).
    while let Ok(n @ 1..) = stream.read(&mut piece) {
        wire.extend_from_slice(&piece[..n]);
    }
    let text = String::from_utf8_lossy(&wire);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    for i in 0..GOOD_EVENTS {
        assert!(
            text.contains(&burst_event(i)),
            "event {i} missing: {text:?}"
        );
    }
    assert!(
        !text.ends_with("\r\n0\r\n\r\n"),
        "a cut stream ended as if whole: {text:?}"
    );
}

/// `100 Continue` at once, then the answer after a prefill longer than
/// the idle limit below and shorter than the first-byte one.
fn continue_then_slow_answer(stream: &mut TcpStream) {
    stream.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").unwrap();
    stream.flush().unwrap();
    thread::sleep(Duration::from_millis(2_500));
    json_answer(stream);
}

/// An informational response is not the engine's answer: until the final
/// header, the wait is bounded by `first_byte_secs`, not by the idle limit
/// between two reads of a body.
#[tokio::test]
async fn an_informational_response_leaves_the_first_byte_timeout_in_force() {
    let (url, _received) = raw_engine(continue_then_slow_answer);
    let gateway = Gateway::start(&format!(
        "{}[timeouts]\nfirst_byte_secs = 30\nidle_secs = 1\n",
        config(&url)
    ))
    .await;
    let response = client()
        .post(gateway.url("/v1/chat/completions"))
        .json(
            &serde_json::json!({"model": "chat", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body = response.text().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, JSON_BODY);
}
