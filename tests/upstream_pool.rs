//! The keep-alive pool of engine connections (the patched `pingora-core`'s
//! `connectors/idle_pool.rs`, patches/README.md): which idle connection a
//! request gets, and that a connection the engine closed, one past its idle
//! timeout and one the full pool pushes out are all closed on the gateway's
//! side too, with nothing watching each connection.
//!
//! The engine is a TCP listener whose accepted sockets the test holds, so it
//! can close them and see the gateway close its end.

mod support;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pingora::connectors::{ConnectorOptions, TransportConnector};
use pingora::protocols::Stream;
use pingora::upstreams::peer::{HttpPeer, Peer};
use support::closed_by_peer;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// Longer than the pool's sweep interval (one second) with room for a busy
/// machine: a connection left open this long was not going to be closed.
const SWEEP_BOUND: Duration = Duration::from_secs(5);

struct Engine {
    listener: TcpListener,
    peer: HttpPeer,
}

impl Engine {
    async fn start() -> Engine {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = HttpPeer::new(listener.local_addr().unwrap(), false, String::new());
        Engine { listener, peer }
    }

    /// A new connection from `connector`, and the engine's end of it.
    async fn connect(&self, connector: &TransportConnector) -> (Stream, TcpStream) {
        let stream = connector.new_stream(&self.peer).await.unwrap();
        let (accepted, from) = tokio::time::timeout(Duration::from_secs(5), self.listener.accept())
            .await
            .expect("the engine accepts the connection")
            .unwrap();
        assert_eq!(
            from,
            local_addr(&stream),
            "the engine's end of this connection"
        );
        (stream, accepted)
    }

    fn release(&self, connector: &TransportConnector, stream: Stream, idle: Option<Duration>) {
        connector.release_stream(stream, self.peer.reuse_hash(), idle);
    }

    async fn take(&self, connector: &TransportConnector) -> Option<SocketAddr> {
        let stream = connector.reused_stream(&self.peer).await?;
        Some(local_addr(&stream))
    }
}

fn local_addr(stream: &Stream) -> SocketAddr {
    let digest = stream
        .get_socket_digest()
        .expect("a TCP stream has a digest");
    *digest
        .local_addr()
        .and_then(|addr| addr.as_inet())
        .expect("a TCP stream has a local address")
}

/// Long enough for the gateway's runtime to see what the engine did to a
/// socket (the readiness event of a close or of data).
async fn let_events_arrive() {
    tokio::time::sleep(Duration::from_millis(100)).await;
}

#[tokio::test]
async fn the_most_recently_released_connection_is_reused_first() {
    let engine = Engine::start().await;
    let connector = TransportConnector::new(None);
    let (first, _first_end) = engine.connect(&connector).await;
    let (second, _second_end) = engine.connect(&connector).await;
    let (first_addr, second_addr) = (local_addr(&first), local_addr(&second));
    engine.release(&connector, first, None);
    engine.release(&connector, second, None);

    assert_eq!(engine.take(&connector).await, Some(second_addr));
    assert_eq!(engine.take(&connector).await, Some(first_addr));
    assert_eq!(engine.take(&connector).await, None, "the pool is empty");
}

#[tokio::test]
async fn an_idle_connection_its_engine_closed_or_wrote_on_is_passed_over_for_the_next() {
    let engine = Engine::start().await;
    let connector = TransportConnector::new(None);
    let (healthy, _healthy_end) = engine.connect(&connector).await;
    let (closed, closed_end) = engine.connect(&connector).await;
    let (written, mut written_end) = engine.connect(&connector).await;
    let healthy_addr = local_addr(&healthy);
    engine.release(&connector, healthy, None);
    engine.release(&connector, closed, None);
    engine.release(&connector, written, None);
    drop(closed_end);
    written_end.write_all(b"HTTP/1.1 200 OK\r\n").await.unwrap();
    let_events_arrive().await;

    assert_eq!(
        engine.take(&connector).await,
        Some(healthy_addr),
        "the two newer connections are closed and the healthy one handed out"
    );
    assert_eq!(connector.unexpected_data_connection_count(), 1);
    assert!(
        closed_by_peer(&mut written_end, Duration::from_secs(1)).await,
        "the connection with unread data was closed when it was passed over"
    );
}

#[tokio::test]
async fn the_sweep_closes_idle_connections_their_engine_closed_again_after_the_pool_empties() {
    let engine = Engine::start().await;
    let connector = TransportConnector::new(None);
    // Twice: the sweep stops when the pool is empty, and the next release
    // must start it again.
    for round in 1..=2 {
        let (stream, mut engine_end) = engine.connect(&connector).await;
        engine.release(&connector, stream, None);
        engine_end.shutdown().await.unwrap();
        assert!(
            closed_by_peer(&mut engine_end, SWEEP_BOUND).await,
            "round {round}: the gateway closed its end of the connection the engine closed"
        );
        assert_eq!(
            engine.take(&connector).await,
            None,
            "round {round}: nothing pooled"
        );
    }
}

#[tokio::test]
async fn a_connection_past_its_idle_timeout_is_neither_handed_out_nor_kept_open() {
    let engine = Engine::start().await;
    let connector = TransportConnector::new(None);
    let (lasting, _lasting_end) = engine.connect(&connector).await;
    let (brief, mut brief_end) = engine.connect(&connector).await;
    let lasting_addr = local_addr(&lasting);
    engine.release(&connector, lasting, None);
    engine.release(&connector, brief, Some(Duration::from_millis(200)));
    tokio::time::sleep(Duration::from_millis(300)).await;

    assert_eq!(
        engine.take(&connector).await,
        Some(lasting_addr),
        "the newer connection had expired"
    );
    assert!(
        closed_by_peer(&mut brief_end, Duration::from_secs(1)).await,
        "the expired connection was closed when a request met it"
    );

    // One nobody asks for is closed by the sweep.
    let (unasked, mut unasked_end) = engine.connect(&connector).await;
    engine.release(&connector, unasked, Some(Duration::from_millis(200)));
    assert!(
        closed_by_peer(&mut unasked_end, SWEEP_BOUND).await,
        "the sweep closed the expired connection"
    );
    assert_eq!(engine.take(&connector).await, None);
}

#[tokio::test]
async fn a_full_pool_closes_its_longest_idle_connection_and_reports_it() {
    let engine = Engine::start().await;
    let evictions = Arc::new(AtomicUsize::new(0));
    let mut options = ConnectorOptions::new(2);
    let counter = evictions.clone();
    options.keepalive_pool_callback = Some(Arc::new(move |idle: Duration| {
        assert!(idle < SWEEP_BOUND, "idle for {idle:?}");
        counter.fetch_add(1, Ordering::Relaxed);
    }));
    let connector = TransportConnector::new(Some(options));
    let mut ends = Vec::new();
    let mut addrs = Vec::new();
    for _ in 0..3 {
        let (stream, end) = engine.connect(&connector).await;
        addrs.push(local_addr(&stream));
        ends.push(end);
        engine.release(&connector, stream, None);
    }

    assert!(
        closed_by_peer(&mut ends[0], Duration::from_secs(1)).await,
        "the first released connection was closed when the third came in"
    );
    assert_eq!(evictions.load(Ordering::Relaxed), 1);
    assert_eq!(engine.take(&connector).await, Some(addrs[2]));
    assert_eq!(engine.take(&connector).await, Some(addrs[1]));
    assert_eq!(engine.take(&connector).await, None);
}
