//! Client connections of the proxy listeners: how many may be open at once,
//! how long a client may take to send a request header, how long an idle
//! connection is kept and how many requests it may carry (`[server]`
//! `max_connections`, `header_read_timeout_secs`, `keepalive_timeout_secs`,
//! `keepalive_requests`; nginx's `worker_connections`,
//! `client_header_timeout`, `keepalive_timeout`, `keepalive_requests`).
//!
//! [`EdgeApp`] wraps Pingora's HTTP proxy application and is what the proxy
//! service runs. It has to: Pingora 0.9.1 opens every HTTP/1 connection in
//! `apps/mod.rs` (the `ServerApp` impl of every `HttpServerApp`) with a fixed
//! 60 s keep-alive wait for the first request, times reads one at a time (a
//! client sending a byte a minute is never cut), has no cap on open
//! connections (its `connection_filter` feature sees one address at accept
//! and is never told when a connection ends), and `HttpServerOptions` offers
//! only the request count. So `EdgeApp` does what `apps/mod.rs` does for
//! HTTP/1 (one `ServerSession` per request, Pingora's own
//! `HttpPersistentSettings` carried between them) with rolter's limits, and
//! hands every other connection (HTTP/2 by ALPN or h2c preface, custom
//! protocols) to Pingora unchanged. Neither Pingora crate is patched for it.
//!
//! - **max_connections**: a connection takes a slot when its processing
//!   starts (after the TLS handshake on TLS listeners) and gives it back when
//!   it closes, HTTP/2 included, over every proxy listener. Beyond the limit
//!   a new connection is closed at once, before anything is read; the client
//!   sees the connection close (or a reset) and may retry.
//! - **header_read_timeout**: one deadline for the whole header, like nginx's
//!   `client_header_timeout`, not per read. It runs from the start of a new
//!   connection (the wait for the first byte included; with h2c on, the
//!   24-byte peek for the HTTP/2 preface too), and on a kept-alive connection
//!   from the first byte of the next request, until the proxy's
//!   `request_filter` starts (it calls [`request_header_complete`]). A
//!   client that misses it is disconnected without a response, as nginx does.
//! - **keepalive_timeout**: how long a kept-alive HTTP/1 connection may sit
//!   idle before the next request's first byte; the connection is then
//!   closed. Zero: every response carries `Connection: close`. For HTTP/2 it
//!   is Pingora's `h2_idle_timeout` (set where the service is built; zero
//!   leaves HTTP/2 connections open while idle).
//! - **keepalive_requests**: the `N`th response on a connection carries
//!   `Connection: close` and the connection ends there (Pingora's reuse
//!   count, which counts reuses: `N - 1`).
//!
//! The limits are read from the snapshot when a connection opens: a reload
//! applies them to the connections opened after it (HTTP/2's idle timeout,
//! a server option, only at restart).
//!
//! Where a stream cannot be peeked at (TLS: the wait for the next request's
//! first byte happens inside Pingora's read), the idle wait is Pingora's
//! per-read keep-alive timeout and the header deadline starts with the
//! idle wait: `keepalive_timeout + header_read_timeout` from the previous
//! response.
//!
//! HTTP/1.1 pipelining (RFC 9112 §9.3.2) is on, as in nginx: a client may
//! send its next requests before the answer to the first, and they are
//! answered in order. Bytes of the next request read with the previous one
//! (in the same read as its body, or while its answer was being proxied)
//! travel to the next session in Pingora's persistent settings; the wait
//! for the next request's first byte is then skipped, since the client may
//! have sent all of it already and be waiting for answers.

use std::cell::Cell;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;

use async_trait::async_trait;
use pingora::apps::{HttpPersistentSettings, HttpServerApp, ReusedHttpStream, ServerApp};
use pingora::protocols::http::ServerSession;
use pingora::protocols::{Stream, ALPN};
use pingora::server::ShutdownWatch;
use tokio::time::Instant;

use crate::config;
use crate::state::GatewayState;

/// The most of a kept-alive connection's next request read while waiting for
/// it: a chat request's header and body, typically.
const PEEK_BYTES: usize = 16 * 1024;

/// The HTTP/2 connection preface (RFC 9113 §3.4), as Pingora looks for it.
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

tokio::task_local! {
    /// Set when the current request's header was read; scoped to one
    /// HTTP/1 request by [`EdgeApp`].
    static HEADER_READ: Cell<bool>;
}

/// Tells the connection that the current request's header has been read,
/// so its header deadline stops. Called first thing in the proxy's
/// `request_filter`; a no-op outside an HTTP/1 request served by
/// [`EdgeApp`] (HTTP/2 streams run in tasks of their own).
pub fn request_header_complete() {
    let _ = HEADER_READ.try_with(|read| read.set(true));
}

/// Why the gateway closed a client connection, as a fixed label value of
/// `rolter_client_connections_closed_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClosedBy {
    /// `max_connections` were open already.
    MaxConnections,
    /// The request header did not arrive within `header_read_timeout`.
    HeaderTimeout,
    /// The client accepted no response byte for `send_timeout` (it stopped
    /// reading); the engine's request was cancelled with it.
    SendTimeout,
}

impl ClosedBy {
    pub fn label(self) -> &'static str {
        match self {
            ClosedBy::MaxConnections => "max_connections",
            ClosedBy::HeaderTimeout => "header_timeout",
            ClosedBy::SendTimeout => "send_timeout",
        }
    }
}

/// The `[server]` limits one connection is served with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionPolicy {
    pub header_read_timeout: Duration,
    /// Zero: no keep-alive.
    pub keepalive_timeout: Duration,
    /// 0 = unlimited.
    pub keepalive_requests: u32,
    /// 0 = unlimited.
    pub max_connections: u32,
}

impl ConnectionPolicy {
    pub fn from_config(server: &config::Server) -> Self {
        Self {
            header_read_timeout: server.header_read_timeout,
            keepalive_timeout: server.keepalive_timeout,
            keepalive_requests: server.keepalive_requests,
            max_connections: server.max_connections,
        }
    }

    /// Pingora's reuse count for the first request of a connection: how
    /// many more requests may follow it (`None` = no limit).
    fn reuses(&self) -> Option<u32> {
        if self.keepalive_timeout.is_zero() {
            Some(0)
        } else if self.keepalive_requests == 0 {
            None
        } else {
            Some(self.keepalive_requests - 1)
        }
    }
}

/// Pingora's keep-alive argument: whole seconds, where 0 would mean
/// "forever", so at least 1.
fn pingora_secs(duration: Duration) -> u64 {
    duration.as_secs().max(1)
}

/// The proxy's Pingora application under the `[server]` connection limits.
pub struct EdgeApp<A> {
    inner: Arc<A>,
    state: Arc<GatewayState>,
    /// Connections being processed now, over every listener of the service.
    open: AtomicU32,
}

/// One open connection's slot; given back when dropped.
struct OpenConnection<'a, A>(&'a EdgeApp<A>);

impl<A> Drop for OpenConnection<'_, A> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
        self.0.state.metrics.client_connections().dec();
    }
}

/// What a connection speaks, as far as `EdgeApp` needs to know.
enum Protocol {
    Http1,
    /// HTTP/2 or a custom protocol: Pingora serves it.
    Pingora,
    /// The h2c preface peek did not complete in time.
    TimedOut,
    /// The client closed the connection first.
    Gone,
}

/// How one HTTP/1 request ended.
enum Served {
    /// The connection may carry the next request.
    Reusable(ReusedHttpStream),
    /// The connection is done (a header timeout was counted already).
    Closed,
}

/// How the wait for the next request on a kept-alive connection ended.
enum Idle {
    /// Its first byte arrived.
    Request,
    /// The stream cannot be peeked at: Pingora's read waits instead.
    NoPeek,
    /// Timed out, closed by the client, or the server is shutting down.
    Closed,
}

impl<A> EdgeApp<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    pub fn new(inner: A, state: Arc<GatewayState>) -> Self {
        Self {
            inner: Arc::new(inner),
            state,
            open: AtomicU32::new(0),
        }
    }

    fn open_connection(&self, max: u32) -> Option<OpenConnection<'_, A>> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (max == 0 || n < max).then(|| n + 1)
            })
            .ok()?;
        self.state.metrics.client_connections().inc();
        Some(OpenConnection(self))
    }

    fn closed(&self, by: ClosedBy) {
        log::debug!("closed a client connection: {}", by.label());
        self.state
            .metrics
            .record_client_connection_closed(by.label());
    }

    /// Tells HTTP/1 from what Pingora serves itself, as `apps/mod.rs` does:
    /// ALPN first, then (plaintext with h2c on) the connection preface.
    async fn protocol(&self, stream: &mut Stream, deadline: Instant) -> Protocol {
        let options = self.inner.server_options();
        if matches!(
            stream.selected_alpn_proto(),
            Some(ALPN::H2) | Some(ALPN::Custom(_))
        ) || options.is_some_and(|o| o.force_custom)
        {
            return Protocol::Pingora;
        }
        if !options.is_some_and(|o| o.h2c) || stream.get_ssl_digest().is_some() {
            return Protocol::Http1;
        }
        let mut preface = [0u8; H2_PREFACE.len()];
        match tokio::time::timeout_at(deadline, stream.try_peek(&mut preface)).await {
            Err(_) => Protocol::TimedOut,
            Ok(Err(_)) => Protocol::Gone,
            Ok(Ok(true)) if &preface != H2_PREFACE => Protocol::Http1,
            // Pingora treats a stream it cannot peek at as HTTP/2 under h2c.
            Ok(Ok(_)) => Protocol::Pingora,
        }
    }

    /// Pingora's HTTP/1 keep-alive loop (`apps/mod.rs`) with rolter's limits.
    ///
    /// Between requests the loop holds the stream, never a `ServerSession`:
    /// the connection's future lives as long as the stream, and a session
    /// (about a kilobyte) kept in it, beside the one the request's own
    /// future holds, cost every open stream that much.
    async fn serve_http1(
        &self,
        mut stream: Stream,
        policy: ConnectionPolicy,
        mut deadline: Instant,
        shutdown: &ShutdownWatch,
    ) {
        let mut next = NextRequest::First;
        loop {
            let reused = match self
                .serve_request(stream, next, &policy, deadline, shutdown)
                .await
            {
                Served::Reusable(reused) => reused,
                Served::Closed => return,
            };
            let settings;
            (stream, settings) = reused.consume();
            let begun = settings
                .as_ref()
                .is_some_and(HttpPersistentSettings::has_pipelined_prefix);
            next = NextRequest::After(settings);
            if begun {
                deadline = Instant::now() + policy.header_read_timeout;
                continue;
            }
            deadline = match next_request(&mut stream, policy.keepalive_timeout, shutdown).await {
                Idle::Request => Instant::now() + policy.header_read_timeout,
                Idle::NoPeek => {
                    Instant::now() + policy.keepalive_timeout + policy.header_read_timeout
                }
                Idle::Closed => return,
            };
        }
    }

    /// Serves one request, cut off if its header is not read by `deadline`.
    /// Not an `async fn`: the session is built and handed to Pingora before
    /// the future is made, so the future holds Pingora's (boxed) one and
    /// the deadline, not the arguments the session was built from.
    fn serve_request<'a>(
        &'a self,
        stream: Stream,
        next: NextRequest,
        policy: &ConnectionPolicy,
        deadline: Instant,
        shutdown: &'a ShutdownWatch,
    ) -> impl Future<Output = Served> + Send + 'a {
        let serving = self
            .inner
            .process_new_http(session(stream, next, policy, shutdown), shutdown);
        HEADER_READ.scope(Cell::new(false), async move {
            let mut serving = serving;
            tokio::select! {
                biased;
                reused = &mut serving => match reused {
                    Some(reused) => Served::Reusable(reused),
                    None => Served::Closed,
                },
                () = header_deadline(deadline) => {
                    // Counted before the connection closes (with `serving`).
                    self.closed(ClosedBy::HeaderTimeout);
                    Served::Closed
                }
            }
        })
    }
}

/// Which request of its connection the next one is.
enum NextRequest {
    First,
    /// After a response, with what Pingora carries from one request to the
    /// next (the reuse count, the pipelining choice, the proxy's
    /// per-connection context).
    After(Option<HttpPersistentSettings>),
}

/// The session for one request on `stream`, under the connection's limits.
fn session(
    stream: Stream,
    next: NextRequest,
    policy: &ConnectionPolicy,
    shutdown: &ShutdownWatch,
) -> ServerSession {
    let mut session = ServerSession::new_http1(stream);
    match next {
        NextRequest::First => {
            // Pingora's wait per read, a second past the deadline: the
            // deadline bounds the header as a whole and is what closes it
            // (counted as `header_timeout`). A wait of the same length
            // raced it whenever the first read waited from the start, and
            // won when both timers fired on the same tick.
            session.set_keepalive(Some(pingora_secs(policy.header_read_timeout) + 1));
            // Carried to the connection's later sessions by their settings.
            session.set_pipelining_enabled(true);
            session.set_keepalive_reuses_remaining(if *shutdown.borrow() {
                Some(0)
            } else {
                policy.reuses()
            });
        }
        NextRequest::After(settings) => {
            if let Some(settings) = settings {
                settings.apply_to_session(&mut session);
            }
            session.set_keepalive(Some(pingora_secs(policy.keepalive_timeout)));
        }
    }
    session
}

/// Resolves at `deadline` unless the header was read by then; never after.
async fn header_deadline(deadline: Instant) {
    let header_read = || HEADER_READ.try_with(Cell::get).unwrap_or(true);
    // The request's first poll usually reads its header (it was waiting in
    // the socket): then no timer is armed, and none is taken down after.
    if !header_read() {
        tokio::time::sleep_until(deadline).await;
    }
    if header_read() {
        std::future::pending::<()>().await;
    }
}

/// Waits up to `keepalive` for the first byte of the next request.
async fn next_request(stream: &mut Stream, keepalive: Duration, shutdown: &ShutdownWatch) -> Idle {
    let idle = |peeked: std::io::Result<Option<usize>>| match peeked {
        Ok(Some(n)) if n > 0 => Idle::Request,
        Ok(None) => Idle::NoPeek,
        Ok(Some(_)) | Err(_) => Idle::Closed,
    };
    // What has arrived is read and put back for Pingora's header read, so
    // the wait costs no system call of its own (a one-byte peek did, on
    // every request); the read either completes within one poll or reads
    // nothing, so dropping it at the timeout loses no data.
    let mut peek = stream.try_peek_available(PEEK_BYTES);
    // A busy client's next request is usually here already: no timer and
    // no shutdown watch for it. The readiness a pending poll registers is
    // kept by the runtime, so the wait below misses no event.
    if let Some(peeked) = (&mut peek).now_or_never() {
        return idle(peeked);
    }
    let mut shutdown = shutdown.clone();
    tokio::select! {
        peeked = tokio::time::timeout(keepalive, peek) => match peeked {
            Ok(peeked) => idle(peeked),
            Err(_) => Idle::Closed,
        },
        // Idle connections close when the server stops, as in Pingora.
        _ = shutdown.wait_for(|stopping| *stopping) => Idle::Closed,
    }
}

#[async_trait]
impl<A> ServerApp for EdgeApp<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    async fn process_new(
        self: &Arc<Self>,
        mut stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let policy = ConnectionPolicy::from_config(&self.state.snapshot().config.server);
        let Some(_open) = self.open_connection(policy.max_connections) else {
            // Dropping the stream closes it before anything was read.
            self.closed(ClosedBy::MaxConnections);
            return None;
        };
        let deadline = Instant::now() + policy.header_read_timeout;
        match self.protocol(&mut stream, deadline).await {
            Protocol::Http1 => self.serve_http1(stream, policy, deadline, shutdown).await,
            Protocol::Pingora => {
                return ServerApp::process_new(&self.inner, stream, shutdown).await
            }
            Protocol::TimedOut => self.closed(ClosedBy::HeaderTimeout),
            Protocol::Gone => {}
        }
        None
    }

    async fn cleanup(&self) {
        // Wakes the keep-alive reads parked in the proxy (shutdown).
        ServerApp::cleanup(&*self.inner).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(keepalive_secs: u64, keepalive_requests: u32) -> ConnectionPolicy {
        ConnectionPolicy {
            header_read_timeout: Duration::from_secs(60),
            keepalive_timeout: Duration::from_secs(keepalive_secs),
            keepalive_requests,
            max_connections: 0,
        }
    }

    #[test]
    fn keepalive_requests_counts_requests_and_pingora_counts_reuses() {
        // nginx's keepalive_requests = 3: the third response closes.
        assert_eq!(policy(60, 3).reuses(), Some(2));
        assert_eq!(policy(60, 1).reuses(), Some(0));
        assert_eq!(policy(60, 0).reuses(), None);
        // No keep-alive at all: one request per connection, whatever the count.
        assert_eq!(policy(0, 1000).reuses(), Some(0));
        assert_eq!(policy(0, 0).reuses(), Some(0));
    }

    #[test]
    fn pingora_keepalive_is_whole_seconds_never_zero() {
        // Pingora reads 0 as "keep forever".
        assert_eq!(pingora_secs(Duration::ZERO), 1);
        assert_eq!(pingora_secs(Duration::from_millis(1500)), 1);
        assert_eq!(pingora_secs(Duration::from_secs(75)), 75);
    }

    #[tokio::test]
    async fn the_header_deadline_fires_unless_the_header_was_read() {
        // Outcomes do not depend on timing: the flag is set (or not) before
        // the deadline is even polled.
        let soon = || Instant::now() + Duration::from_millis(20);
        let unread = HEADER_READ.scope(Cell::new(false), async {
            tokio::time::timeout(Duration::from_secs(10), header_deadline(soon())).await
        });
        assert!(
            unread.await.is_ok(),
            "an unread header's deadline never fired"
        );

        let read = HEADER_READ.scope(Cell::new(false), async {
            request_header_complete();
            tokio::time::timeout(Duration::from_millis(300), header_deadline(soon())).await
        });
        assert!(
            read.await.is_err(),
            "the deadline fired after the header was read"
        );
    }

    #[test]
    fn request_header_complete_outside_a_connection_is_a_no_op() {
        request_header_complete();
    }
}
