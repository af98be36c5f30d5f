//! The replay client: asks a publisher's ROUTER socket for the batches it
//! still buffers from a given seq on.
//!
//! A DEALER (REQ would take only one reply) sends `["", start_seq]` and
//! reads replies until the end marker (seq -1); `decode.rs` reads both the
//! older `["", seq, payload]` and the current `["", topic, seq, payload]`
//! forms. Bounded in time ([`REPLAY_TIMEOUT`], connection included) and in
//! size ([`MAX_REPLAY_BATCHES`]); a fresh socket per replay, since gaps are
//! rare and a dropped socket leaves no half-read answer behind.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use zeromq::{DealerSocket, Socket, SocketOptions, SocketRecv, SocketSend, ZmqMessage};

use super::decode::{parse_replay_reply, replay_request, DecodeError, ReplayReply};

/// How long one replay may take, from connecting to the end marker.
pub const REPLAY_TIMEOUT: Duration = Duration::from_secs(5);

/// Batches one replay may return: vLLM buffers 10,000 by default.
pub const MAX_REPLAY_BATCHES: usize = 20_000;

/// Why a replay brought nothing usable back.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("no end marker within {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Socket(#[from] zeromq::ZmqError),
    #[error("unreadable reply: {0}")]
    Reply(#[from] DecodeError),
    #[error("more than {0} batches")]
    TooMany(usize),
}

/// Where replayed batches come from (a trait so the subscriber's logic is
/// testable without sockets).
pub(crate) trait ReplaySource: Send + Sync {
    /// The batches buffered from `from` on, in the order the publisher
    /// sent them: `(seq, payload)`.
    fn fetch(
        &self,
        from: u64,
    ) -> impl Future<Output = Result<Vec<(u64, Bytes)>, ReplayError>> + Send;
}

/// A publisher's replay endpoint (`tcp://host:port`).
#[derive(Debug, Clone)]
pub(crate) struct ReplayClient {
    endpoint: String,
    timeout: Duration,
}

impl ReplayClient {
    pub(crate) fn new(endpoint: String) -> Self {
        ReplayClient {
            endpoint,
            timeout: REPLAY_TIMEOUT,
        }
    }

    async fn exchange(&self, from: u64) -> Result<Vec<(u64, Bytes)>, ReplayError> {
        let mut options = SocketOptions::default();
        options.connect_timeout(self.timeout);
        let mut socket = DealerSocket::with_options(options);
        socket.connect(&self.endpoint).await?;
        let request = ZmqMessage::try_from(replay_request(from))
            .map_err(|_| zeromq::ZmqError::Other("an empty replay request"))?;
        socket.send(request).await?;
        let mut batches = Vec::new();
        loop {
            let reply = socket.recv().await?.into_vec();
            match parse_replay_reply(&reply)? {
                ReplayReply::End => return Ok(batches),
                ReplayReply::Batch { seq, payload } => {
                    if batches.len() == MAX_REPLAY_BATCHES {
                        return Err(ReplayError::TooMany(MAX_REPLAY_BATCHES));
                    }
                    batches.push((seq, payload));
                }
            }
        }
    }
}

impl ReplaySource for ReplayClient {
    async fn fetch(&self, from: u64) -> Result<Vec<(u64, Bytes)>, ReplayError> {
        tokio::time::timeout(self.timeout, self.exchange(from))
            .await
            .map_err(|_| ReplayError::Timeout(self.timeout))?
    }
}
