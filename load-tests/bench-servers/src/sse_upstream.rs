//! An upstream that costs next to nothing: every request (any method, any
//! path, keep-alive HTTP/1.1) is answered with the same Server-Sent Events
//! stream of `--chunks` events, `data: [DONE]` last, each event written on
//! its own as an engine writes its tokens. The side-by-side benchmark's
//! stream upstream, so that the proxy in front of it is what saturates.
//!
//! `sse-upstream --listen 127.0.0.1:0 --chunks 20`; prints
//! `sse-upstream listening on http://ADDR` first.

use std::io;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A chat-completion chunk the size of an engine's.
const EVENT: &str = r#"data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench-upstream","choices":[{"index":0,"delta":{"content":" tok"},"finish_reason":null}]}"#;

const HEADER: &[u8] = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
cache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n";

/// Longest request header read; anything longer is answered by closing.
const MAX_HEADER: usize = 64 * 1024;

fn chunked(data: &str) -> Vec<u8> {
    let event = format!("{data}\n\n");
    format!("{:x}\r\n{event}\r\n", event.len()).into_bytes()
}

/// The response's writes: the header with the first event, then one write
/// per event, the last one carrying the terminating chunk.
fn writes(chunks: usize) -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = (1..chunks.max(1)).map(|_| chunked(EVENT)).collect();
    out.push(chunked("data: [DONE]"));
    out[0].splice(0..0, HEADER.iter().copied());
    out.last_mut()
        .expect("one write at least")
        .extend_from_slice(b"0\r\n\r\n");
    out
}

/// The request body's length from its header (`Content-Length`, any case);
/// requests without one have none.
fn content_length(header: &[u8]) -> Option<usize> {
    let text = std::str::from_utf8(header).ok()?;
    text.split("\r\n").find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| value.trim().parse().ok())?
    })
}

async fn serve(mut stream: TcpStream, writes: &[Vec<u8>]) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let mut buf: Vec<u8> = Vec::with_capacity(8192);
    let mut scratch = [0u8; 16384];
    loop {
        // The request header, then its body (read and dropped).
        let end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            if buf.len() > MAX_HEADER {
                return Ok(());
            }
            let n = stream.read(&mut scratch).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&scratch[..n]);
        };
        let body = content_length(&buf[..end]).unwrap_or(0);
        while buf.len() < end + body {
            let n = stream.read(&mut scratch).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&scratch[..n]);
        }
        buf.drain(..end + body);
        for write in writes {
            stream.write_all(write).await?;
        }
    }
}

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let listen = arg(&args, "--listen", "127.0.0.1:0");
    let chunks: usize = arg(&args, "--chunks", "20").parse().unwrap_or_else(|_| {
        eprintln!("sse-upstream: --chunks takes a number");
        std::process::exit(2)
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    runtime.block_on(async move {
        let listener = TcpListener::bind(&listen).await?;
        println!(
            "sse-upstream listening on http://{}",
            listener.local_addr()?
        );
        let writes: &'static [Vec<u8>] = Vec::leak(writes(chunks));
        loop {
            let (stream, _) = listener.accept().await?;
            tokio::spawn(async move {
                // A client that breaks off is not this server's problem.
                let _ = serve(stream, writes).await;
            });
        }
    })
}
