//! The ZeroMQ side of the KV-event stream, as vLLM's `ZmqEventPublisher`
//! runs it: a PUB socket that sends each batch as `[topic, seq, payload]`,
//! and an optional ROUTER socket that replays buffered batches.
//!
//! Request handlers never touch a socket. [`Publisher::publish`] is called
//! (under the engine's cache lock, so batches keep their seq order) to
//! buffer a batch for replay and hand it to the live publisher task through a
//! bounded channel; when the channel is full the batch is dropped from the
//! live stream and counted — its seq is still spent and it can still be
//! replayed, exactly the gap a subscriber must detect and repair. While
//! `kv_pause` is on the task stops draining the channel, so batches queue
//! (and past the channel's capacity are dropped) until it is turned off.
//!
//! Replay: a DEALER sends `["", start_seq as 8 bytes big-endian]`; the ROUTER
//! answers one message per buffered batch with seq >= start,
//! `["", topic, seq, payload]` (or `["", seq, payload]` with
//! `--kv-replay-legacy`, as older vLLMs do), then the end marker whose seq is
//! -1 (eight 0xFF bytes) and whose payload is empty.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

/// Batches waiting for the live publisher task.
const LIVE_QUEUE_BATCHES: usize = 1024;

/// The longest one live send may take before it is abandoned (a subscriber
/// that stopped reading must not stall the stream for the others forever).
const SEND_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest answering one replay request may take.
const REPLAY_TIMEOUT: Duration = Duration::from_secs(10);

/// The seq frame of the replay end marker: -1 as a signed big-endian i64.
pub(crate) const END_SEQ: [u8; 8] = [0xFF; 8];

/// One encoded batch and its seq.
#[derive(Clone, Debug)]
struct Batch {
    seq: u64,
    payload: Bytes,
}

/// The last batches published, for replay.
#[derive(Debug)]
struct ReplayBuffer {
    capacity: usize,
    // Held only to push, clear or clone out a range of cheap `Bytes`; never
    // across an await.
    batches: Mutex<VecDeque<Batch>>,
}

impl ReplayBuffer {
    fn push(&self, batch: Batch) {
        let mut batches = self.batches.lock().unwrap_or_else(|e| e.into_inner());
        if batches.len() == self.capacity {
            batches.pop_front();
        }
        batches.push_back(batch);
    }

    fn since(&self, start: u64) -> Vec<Batch> {
        let batches = self.batches.lock().unwrap_or_else(|e| e.into_inner());
        batches
            .iter()
            .filter(|batch| batch.seq >= start)
            .cloned()
            .collect()
    }

    fn clear(&self) {
        self.batches
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

/// Counters of the KV-event stream, for `/fake/stats`.
#[derive(Debug, Default)]
struct Counters {
    /// Batches handed to the PUB socket.
    sent: AtomicU64,
    /// Batches dropped because the live queue was full.
    dropped_queue_full: AtomicU64,
    /// Batches dropped on request (`kv_drop_next`).
    dropped_on_request: AtomicU64,
    /// Live sends that failed or timed out.
    send_failures: AtomicU64,
    replay_requests: AtomicU64,
    /// Replay requests that were malformed or could not be answered in full.
    replay_failures: AtomicU64,
}

/// The PUB (and ROUTER) sockets, bound but not yet serving.
pub(crate) struct BoundSockets {
    live: PubSocket,
    live_endpoint: String,
    replay: Option<(RouterSocket, String)>,
}

impl BoundSockets {
    /// Binds the PUB socket at `events` and, if given, the ROUTER socket at
    /// `replay`. `tcp://*:PORT` means every interface, as in vLLM.
    pub(crate) async fn bind(events: &str, replay: Option<&str>) -> io::Result<Self> {
        let mut live = PubSocket::new();
        let live_endpoint = bind(&mut live, events).await?;
        let replay = match replay {
            Some(endpoint) => {
                let mut socket = RouterSocket::new();
                let bound = bind(&mut socket, endpoint).await?;
                Some((socket, bound))
            }
            None => None,
        };
        Ok(BoundSockets {
            live,
            live_endpoint,
            replay,
        })
    }

    /// The bound PUB endpoint, with the real port.
    pub(crate) fn live_endpoint(&self) -> &str {
        &self.live_endpoint
    }

    /// The bound ROUTER endpoint, with the real port.
    pub(crate) fn replay_endpoint(&self) -> Option<&str> {
        self.replay.as_ref().map(|(_, endpoint)| endpoint.as_str())
    }
}

async fn bind(socket: &mut impl Socket, endpoint: &str) -> io::Result<String> {
    let resolved = match endpoint.strip_prefix("tcp://*:") {
        Some(port) => format!("tcp://0.0.0.0:{port}"),
        None => endpoint.to_owned(),
    };
    socket
        .bind(&resolved)
        .await
        .map(|bound| bound.to_string())
        .map_err(|err| io::Error::other(format!("cannot bind {endpoint}: {err}")))
}

/// How the replay answer is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReplayFraming {
    /// `["", topic, seq, payload]` (current vLLM).
    WithTopic,
    /// `["", seq, payload]` (older vLLM).
    Legacy,
}

/// The request path's handle on the KV-event stream.
#[derive(Debug)]
pub(crate) struct Publisher {
    live: mpsc::Sender<Batch>,
    paused: watch::Sender<bool>,
    replay: Option<Arc<ReplayBuffer>>,
    counters: Arc<Counters>,
}

/// The background tasks behind a [`Publisher`]; aborted when dropped.
pub(crate) struct PublisherTasks(Vec<JoinHandle<()>>);

impl Drop for PublisherTasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

impl Publisher {
    /// Starts the live (and replay) tasks on `sockets`. They run until the
    /// returned [`PublisherTasks`] is dropped.
    pub(crate) fn start(
        sockets: BoundSockets,
        topic: &str,
        replay_capacity: usize,
        framing: ReplayFraming,
    ) -> (Publisher, PublisherTasks) {
        let topic = Bytes::copy_from_slice(topic.as_bytes());
        let (live, queue) = mpsc::channel(LIVE_QUEUE_BATCHES);
        let (paused, pause) = watch::channel(false);
        let counters = Arc::new(Counters::default());
        let mut tasks = vec![tokio::spawn(run_live(
            sockets.live,
            topic.clone(),
            queue,
            pause,
            Arc::clone(&counters),
        ))];
        let replay = sockets.replay.map(|(socket, _)| {
            let buffer = Arc::new(ReplayBuffer {
                capacity: replay_capacity.max(1),
                batches: Mutex::new(VecDeque::new()),
            });
            tasks.push(tokio::spawn(run_replay(
                socket,
                Arc::clone(&buffer),
                topic,
                framing,
                Arc::clone(&counters),
            )));
            buffer
        });
        let publisher = Publisher {
            live,
            paused,
            replay,
            counters,
        };
        (publisher, PublisherTasks(tasks))
    }

    /// Buffers `payload` as batch `seq` for replay and queues it for the live
    /// stream unless `skip_live`. Never waits.
    pub(crate) fn publish(&self, seq: u64, payload: Vec<u8>, skip_live: bool) {
        let batch = Batch {
            seq,
            payload: Bytes::from(payload),
        };
        if let Some(replay) = &self.replay {
            replay.push(batch.clone());
        }
        if skip_live {
            self.counters.dropped_on_request.fetch_add(1, Relaxed);
        } else if self.live.try_send(batch).is_err() {
            self.counters.dropped_queue_full.fetch_add(1, Relaxed);
            log::warn!("fake-llm: KV-event queue full, batch {seq} dropped from the live stream");
        }
    }

    /// Forgets the replay buffer (an engine restart).
    pub(crate) fn forget(&self) {
        if let Some(replay) = &self.replay {
            replay.clear();
        }
    }

    /// Stops or resumes the live stream.
    pub(crate) fn set_paused(&self, paused: bool) {
        self.paused.send_replace(paused);
    }

    pub(crate) fn paused(&self) -> bool {
        *self.paused.borrow()
    }

    /// The counters for `/fake/stats`.
    pub(crate) fn to_json(&self) -> Value {
        let c = &self.counters;
        json!({
            "sent": c.sent.load(Relaxed),
            "dropped_queue_full": c.dropped_queue_full.load(Relaxed),
            "dropped_on_request": c.dropped_on_request.load(Relaxed),
            "send_failures": c.send_failures.load(Relaxed),
            "replay_requests": c.replay_requests.load(Relaxed),
            "replay_failures": c.replay_failures.load(Relaxed),
            "paused": self.paused(),
        })
    }
}

fn message(frames: Vec<Bytes>) -> Option<ZmqMessage> {
    ZmqMessage::try_from(frames).ok()
}

/// The live publisher: sends queued batches in order, while not paused.
async fn run_live(
    mut socket: PubSocket,
    topic: Bytes,
    mut queue: mpsc::Receiver<Batch>,
    mut pause: watch::Receiver<bool>,
    counters: Arc<Counters>,
) {
    loop {
        if *pause.borrow_and_update() {
            if pause.changed().await.is_err() {
                return;
            }
            continue;
        }
        let batch = tokio::select! {
            // A pause that arrives with a batch wins.
            biased;
            changed = pause.changed() => {
                if changed.is_err() {
                    return;
                }
                continue;
            }
            batch = queue.recv() => match batch {
                Some(batch) => batch,
                None => return,
            },
        };
        let frames = vec![
            topic.clone(),
            Bytes::copy_from_slice(&batch.seq.to_be_bytes()),
            batch.payload,
        ];
        let Some(message) = message(frames) else {
            continue;
        };
        match tokio::time::timeout(SEND_TIMEOUT, socket.send(message)).await {
            Ok(Ok(())) => {
                counters.sent.fetch_add(1, Relaxed);
            }
            Ok(Err(err)) => {
                counters.send_failures.fetch_add(1, Relaxed);
                log::warn!(
                    "fake-llm: cannot publish KV-event batch {}: {err}",
                    batch.seq
                );
            }
            Err(_) => {
                counters.send_failures.fetch_add(1, Relaxed);
                log::warn!(
                    "fake-llm: publishing KV-event batch {} took over {SEND_TIMEOUT:?}",
                    batch.seq
                );
            }
        }
    }
}

/// The replay service: answers each request in turn.
async fn run_replay(
    mut socket: RouterSocket,
    buffer: Arc<ReplayBuffer>,
    topic: Bytes,
    framing: ReplayFraming,
    counters: Arc<Counters>,
) {
    loop {
        let request = match socket.recv().await {
            Ok(request) => request.into_vec(),
            Err(err) => {
                log::warn!("fake-llm: KV replay socket failed: {err}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        counters.replay_requests.fetch_add(1, Relaxed);
        // [peer identity, "", start seq]
        let start = match request.as_slice() {
            [_, delimiter, start] if delimiter.is_empty() => {
                <[u8; 8]>::try_from(start.as_ref()).map(u64::from_be_bytes)
            }
            _ => {
                counters.replay_failures.fetch_add(1, Relaxed);
                log::warn!(
                    "fake-llm: ignoring a KV replay request of {} frames",
                    request.len()
                );
                continue;
            }
        };
        let Ok(start) = start else {
            counters.replay_failures.fetch_add(1, Relaxed);
            log::warn!("fake-llm: ignoring a KV replay request whose start seq is not 8 bytes");
            continue;
        };
        let peer = request[0].clone();
        let answer = answer_replay(&mut socket, peer, buffer.since(start), &topic, framing);
        match tokio::time::timeout(REPLAY_TIMEOUT, answer).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                counters.replay_failures.fetch_add(1, Relaxed);
                log::warn!("fake-llm: KV replay from seq {start} failed: {err}");
            }
            Err(_) => {
                counters.replay_failures.fetch_add(1, Relaxed);
                log::warn!("fake-llm: KV replay from seq {start} took over {REPLAY_TIMEOUT:?}");
            }
        }
    }
}

async fn answer_replay(
    socket: &mut RouterSocket,
    peer: Bytes,
    batches: Vec<Batch>,
    topic: &Bytes,
    framing: ReplayFraming,
) -> zeromq::ZmqResult<()> {
    let frames = |seq: Bytes, payload: Bytes, topic: &Bytes| match framing {
        ReplayFraming::WithTopic => vec![peer.clone(), Bytes::new(), topic.clone(), seq, payload],
        ReplayFraming::Legacy => vec![peer.clone(), Bytes::new(), seq, payload],
    };
    for batch in batches {
        let seq = Bytes::copy_from_slice(&batch.seq.to_be_bytes());
        if let Some(message) = message(frames(seq, batch.payload, topic)) {
            socket.send(message).await?;
        }
    }
    let end = frames(Bytes::from_static(&END_SEQ), Bytes::new(), &Bytes::new());
    if let Some(message) = message(end) {
        socket.send(message).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[tokio::test]
    async fn a_full_live_queue_drops_and_counts_without_waiting() {
        let sockets = BoundSockets::bind("tcp://127.0.0.1:0", Some("tcp://127.0.0.1:0"))
            .await
            .expect("bind loopback");
        assert!(sockets.live_endpoint().starts_with("tcp://127.0.0.1:"));
        assert!(sockets
            .replay_endpoint()
            .is_some_and(|e| e.starts_with("tcp://127.0.0.1:") && !e.ends_with(":0")));
        let (publisher, _tasks) = Publisher::start(sockets, "t", 5, ReplayFraming::WithTopic);
        // The live task has not run yet (this runtime has one thread and
        // nothing below awaits), so it never takes a batch.
        publisher.set_paused(true);
        let started = Instant::now();
        for seq in 0..1100 {
            publisher.publish(seq, vec![0x90], seq == 3);
        }
        assert!(started.elapsed() < Duration::from_secs(1));
        let counters = publisher.to_json();
        assert_eq!(counters["dropped_on_request"], 1);
        assert_eq!(
            counters["dropped_queue_full"],
            1099 - LIVE_QUEUE_BATCHES as u64
        );
        let kept = publisher
            .replay
            .as_ref()
            .map(|replay| replay.since(1097).iter().map(|b| b.seq).collect::<Vec<_>>());
        assert_eq!(kept, Some(vec![1097, 1098, 1099]));
        publisher.forget();
        assert_eq!(publisher.replay.as_ref().map(|r| r.since(0).len()), Some(0));
    }

    #[tokio::test]
    async fn a_bad_endpoint_is_an_error_naming_it() {
        let err = BoundSockets::bind("udp://nowhere", None).await.err();
        assert!(err.is_some_and(|e| e.to_string().contains("udp://nowhere")));
    }
}
