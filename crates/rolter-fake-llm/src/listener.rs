//! The listener behind `serve`: TCP_NODELAY on every connection (SSE chunks
//! are small and must not wait for Nagle), and every connection closed when
//! the `serve` future is dropped, so a test that "stops the engine" sees its
//! keep-alive connections die too, as with a killed process.
//!
//! Closing works through a watch channel: `serve` holds the sender; each
//! connection's I/O polls a future that completes when the sender is gone,
//! and from then on fails every read and write, which makes hyper drop the
//! connection and its in-flight handler.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Accepts connections that close when `serve` goes away.
pub(crate) struct ClosingListener {
    inner: TcpListener,
    closed: watch::Receiver<()>,
    stats: std::sync::Arc<crate::stats::Stats>,
}

impl ClosingListener {
    /// Wraps `inner`; connections close once every clone of the sender of
    /// `closed` is dropped. Each accepted connection is counted in `stats`.
    pub(crate) fn new(
        inner: TcpListener,
        closed: watch::Receiver<()>,
        stats: std::sync::Arc<crate::stats::Stats>,
    ) -> Self {
        ClosingListener {
            inner,
            closed,
            stats,
        }
    }
}

impl axum::serve::Listener for ClosingListener {
    type Io = ClosingStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    self.stats.connection_accepted();
                    if let Err(err) = stream.set_nodelay(true) {
                        log::debug!("fake-llm: cannot set TCP_NODELAY for {addr}: {err}");
                    }
                    let mut closed = self.closed.clone();
                    let signal = Box::pin(async move { while closed.changed().await.is_ok() {} });
                    return (
                        ClosingStream {
                            stream,
                            signal,
                            shut: false,
                        },
                        addr,
                    );
                }
                // The peer gave up before we accepted: nothing to do.
                Err(err)
                    if matches!(
                        err.kind(),
                        io::ErrorKind::ConnectionAborted
                            | io::ErrorKind::ConnectionReset
                            | io::ErrorKind::ConnectionRefused
                    ) => {}
                // Out of file descriptors or similar: back off instead of spinning.
                Err(err) => {
                    log::warn!("fake-llm: accept failed: {err}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// A connection that fails all I/O once the server is gone.
pub(crate) struct ClosingStream {
    stream: TcpStream,
    /// Completes when `serve` has been dropped.
    signal: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// `signal` has completed (it must not be polled again).
    shut: bool,
}

impl ClosingStream {
    /// Whether the server is gone; registers the task for the signal if not.
    fn is_shut(&mut self, cx: &mut Context<'_>) -> bool {
        if !self.shut && self.signal.as_mut().poll(cx).is_ready() {
            self.shut = true;
        }
        self.shut
    }
}

fn server_gone() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, "fake-llm server stopped")
}

impl AsyncRead for ClosingStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.is_shut(cx) {
            return Poll::Ready(Err(server_gone()));
        }
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for ClosingStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.is_shut(cx) {
            return Poll::Ready(Err(server_gone()));
        }
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        if self.is_shut(cx) {
            return Poll::Ready(Err(server_gone()));
        }
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}
